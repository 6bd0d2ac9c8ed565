"""The st-peer daemon on its own: startup line, signals, announces, restart."""

import os
import signal
import time

import pytest
from conftest import poll_for
from helpers import start_peer

from st_py.wire import protocol as P


def request(addr, frame_bytes):
    import socket

    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(frame_bytes)
        dec = P.FrameDecoder()
        while True:
            chunk = s.recv(65536)
            assert chunk, "peer closed the connection"
            frames = dec.feed(chunk)
            if frames:
                return frames[0]


def test_peer_prints_address_answers_ping_and_stops_at_once(peer_bin, tmp_path):
    for sig in (signal.SIGTERM, signal.SIGINT):
        d = start_peer(peer_bin, tmp_path)
        fr = request(d.addr, P.encode_ping(3))
        assert fr.type == P.MsgType.OK and fr.seq == 3
        payload = fr.fields["payload"]
        n = int.from_bytes(payload[:2], "little")
        peer_id = payload[2 : 2 + n].decode()
        assert len(peer_id) == 36  # a UUID, kept in <data>/PEER_ID
        assert (tmp_path / "peer" / "PEER_ID").read_text().strip() == peer_id
        t0 = time.monotonic()
        d.proc.send_signal(sig)
        assert d.proc.wait(5) == 0
        assert time.monotonic() - t0 < 2.0
        d.stop()


def test_peer_refuses_unknown_type_but_keeps_the_connection(peer_bin, tmp_path):
    d = start_peer(peer_bin, tmp_path)
    try:
        import socket

        host, port = d.addr.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.sendall(P.frame(0x33, 9, b"junk") + P.encode_ping(10))
            dec, frames = P.FrameDecoder(), []
            while len(frames) < 2:
                frames += dec.feed(s.recv(65536))
        by_seq = {f.seq: f for f in frames}
        assert by_seq[9].fields["code"] == P.ErrorCode.UNKNOWN_TYPE
        assert by_seq[10].type == P.MsgType.OK
    finally:
        d.stop()


def test_peer_keeps_records_across_restart(cluster):
    c = cluster.client()
    with c.create("/p/restart", replication="x1", blocksize=1) as f:
        for i in range(20):
            f.put(f"r{i}", bytes([i]) * 10)
    for i in range(4):
        d = cluster.peers[i]
        port = int(d.addr.rsplit(":", 1)[1])
        d.stop()
        cluster.start_peer(i, port=port)
    poll_for(lambda: c.status().alive_peers == 4, what="restarted peers to announce")
    with c.open("/p/restart") as f:
        for i in range(20):
            assert f.get(f"r{i}") == bytes([i]) * 10


def test_announce_reports_space_and_records(cluster):
    c = cluster.client()
    with c.create("/p/space", replication="x2") as f:
        for i in range(10):
            f.put(f"r{i}", b"x" * 1000)

    def reported():
        st = c.status()
        return sum(p.records for p in st.peers) == 20 and st

    st = poll_for(reported, what="announces to count 20 records")
    for p in st.peers:
        assert p.capacity_bytes > 0 and p.free_bytes > 0 and p.free_bytes <= p.capacity_bytes
    assert sum(p.used_bytes for p in st.peers) >= 20_000


def test_the_peer_spreads_new_file_directories_where_the_filesystem_can(cluster):
    """At start the peer sets the TOPDIR flag (chattr +T) of its ``files/``
    directory where the filesystem has inode flags (ext4 here), so each new
    file's directory is placed as a top-level one (docs/peer.md, "Where
    records' inodes go"); the flag is not inherited: a file's directory
    under it has none. Skipped on a filesystem without inode flags."""
    import fcntl
    import struct

    get_flags, topdir = 0x80086601, 0x00020000  # FS_IOC_GETFLAGS, FS_TOPDIR_FL (linux/fs.h)

    def flags(path) -> int:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            return struct.unpack("i", fcntl.ioctl(fd, get_flags, struct.pack("i", 0)))[0]
        except OSError:
            pytest.skip(f"no inode flags on the filesystem of {path}")
        finally:
            os.close(fd)

    with cluster.client().create("/spread/f", "x1") as f:
        f.put("r", b"x")
        file_id = f.file_id
    files = cluster.data_dir / "peers" / "peer-0" / "files"
    assert flags(files) & topdir
    mine = files / f"{file_id:016x}"
    if mine.is_dir():  # the peer holding the record
        assert not flags(mine) & topdir
    assert (
        "spread over the filesystem's block groups (TOPDIR)" in (cluster.data_dir / "logs" / "peer-0.log").read_text()
    )

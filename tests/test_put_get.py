"""PUT/GET/DELETE against a real tracker and real peers (paper 3.1, 3.6, 4.3)."""

import os
import socket
import struct
from contextlib import closing
from pathlib import Path

import pytest
from checks import authenticate

from st_py.core.infofile import InfofileReader
from st_py.errors import BadNameError, RecordExistsError, RecordNotFoundError, StFileExistsError, StFileNotFoundError
from st_py.wire import protocol as P


def record_files(cluster, peer: int) -> list[Path]:
    root = cluster.data_dir / "peers" / f"peer-{peer}" / "files"
    return [p for p in root.rglob("*") if p.is_file() and not p.name.endswith(".name")] if root.exists() else []


def test_put_get_roundtrip_with_crc(cluster):
    c = cluster.client()
    blobs = {f"rec-{i:03d}": os.urandom(i * 37 + 1) for i in range(50)}
    with c.create("/t/roundtrip", replication="x2") as f:
        for name, data in blobs.items():
            f.queue_put(name, data)
    with c.open("/t/roundtrip") as f:
        assert len(f) == 50
        for name, data in blobs.items():
            assert f.get(name) == data
        got = {}
        for name in blobs:
            f.queue_get(name, lambda n, d, e: got.__setitem__(n, (d, e)))
        f.flush()
        assert {n: d for n, (d, e) in got.items()} == blobs


def test_corrupted_copy_is_detected_and_next_copy_read(cluster):
    c = cluster.client()
    with c.create("/t/corrupt", replication="x2") as f:
        f.put("victim", b"A" * 4096)
    with closing(InfofileReader(cluster.namespace / "t" / "corrupt")) as reader:
        rank0_peer = reader.lookup("victim").peers[0]
    addr = {p.peer_idx: p.addr for p in c.tracker.open("/t/corrupt").peers}[rank0_peer]
    i = cluster.peer_addrs.index(addr)
    [path] = [p for p in record_files(cluster, i) if p.name.startswith("victim@")]
    raw = bytearray(path.read_bytes())
    raw[1234] ^= 0x01  # one flipped bit on the rank-0 holder's disk, same size
    path.write_bytes(bytes(raw))
    with c.open("/t/corrupt") as f:
        assert f.get("victim") == b"A" * 4096  # from the rank-1 copy
        fid, token = f.file_id, f.info.capability
    # The holder of the bad copy checked it and said so (docs/peer.md, "Hostile input").
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        authenticate(s, token)
        s.sendall(P.encode_get(1, fid, "victim"))
        dec, frames = P.FrameDecoder(), []
        while not frames:
            frames = dec.feed(s.recv(65536))
    assert frames[0].type == P.MsgType.ERROR and frames[0].fields["code"] == P.ErrorCode.CRC_MISMATCH
    assert str(path) in frames[0].fields["message"]
    log = (cluster.data_dir / "logs" / f"peer-{i}.log").read_text()
    assert "is corrupt" in log and str(path) in log


def test_x2_copies_on_distinct_peers(cluster):
    c = cluster.client()
    with c.create("/t/x2", replication="x2", blocksize=4) as f:
        for i in range(64):
            f.queue_put(f"r{i}", b"x" * 100)
    peers_used = set()
    with closing(InfofileReader(cluster.namespace / "t" / "x2")) as reader:
        for name in reader.names():
            m = reader.lookup(name)
            assert len(m.peers) == 2 and m.peers[0] != m.peers[1], m
            peers_used.update(m.peers)
    assert len(peers_used) > 2  # random placement spreads blocks over the peerlist
    # and the copies really are on those peers' disks, once per peer
    on_disk = sum(len(record_files(cluster, i)) for i in range(4))
    assert on_disk == 128


def test_x3_and_x1(cluster):
    c = cluster.client()
    for cls, n in (("x1", 1), ("x3", 3)):
        with c.create(f"/t/{cls}", replication=cls) as f:
            f.put("a", b"payload")
        with closing(InfofileReader(cluster.namespace / "t" / cls)) as r:
            assert len(set(r.lookup("a").peers)) == n
        with c.open(f"/t/{cls}") as f:
            assert f.get("a") == b"payload"


def test_records_are_write_once(cluster):
    c = cluster.client()
    with c.create("/t/once", replication="x1") as f:
        f.put("a", b"first")
    with c.open("/t/once") as f:
        with pytest.raises(RecordExistsError):
            f.put("a", b"second")
            f.flush()
        assert f.get("a") == b"first"


def test_delete_record_and_file(cluster):
    c = cluster.client()
    with c.create("/t/del", replication="x2") as f:
        f.put("a", b"1")
        f.put("b", b"2")
    with c.open("/t/del") as f:
        f.delete("a")
        with pytest.raises(RecordNotFoundError):
            f.get("a")
        assert f.get("b") == b"2"
        with pytest.raises(RecordNotFoundError):
            f.delete("never-there")
    # a's two copies stay for readers of older generations until the
    # tracker drops its history and the peers scrub (docs/snapshots.md);
    # deleting the whole file removes every copy at once
    assert sum(len(record_files(cluster, i)) for i in range(4)) == 4
    assert c.delete("/t/del") == 1
    assert sum(len(record_files(cluster, i)) for i in range(4)) == 0
    with pytest.raises(StFileNotFoundError):
        c.open("/t/del")


def test_file_errors(cluster):
    c = cluster.client()
    c.create("/t/exists").close()
    with pytest.raises(StFileExistsError):
        c.create("/t/exists")
    for bad in ("/a/../b", "", "/x//y", "/.st-x"):
        with pytest.raises(BadNameError):
            c.create(bad)
    with pytest.raises(BadNameError):
        c.create("/t/cls", replication="x0")
    with c.open("/t/exists") as f:
        with pytest.raises(BadNameError):
            f.put("nul\x00name", b"")
        with pytest.raises(BadNameError):
            f.put("", b"")


def test_namespace_is_plain_directories(cluster):
    c = cluster.client()
    c.create("/exp/2013/run1").close()
    assert (cluster.namespace / "exp" / "2013" / "run1").is_file()
    assert [e.name for e in c.ls("/exp/2013")] == ["/exp/2013/run1"]


def test_truncated_put_frame_leaves_no_record(cluster):
    c = cluster.client()
    f = c.create("/t/trunc", replication="x1")
    addr = cluster.peer_addrs[0]
    host, port = addr.rsplit(":", 1)
    data = os.urandom(100_000)
    full = P.encode_put(1, f.file_id, 0, "partial", data)
    s = socket.create_connection((host, int(port)))
    authenticate(s, f.info.capability)
    s.sendall(full[: len(full) // 2])  # the writer dies mid-record
    s.close()
    # the peer is still healthy and holds no trace of the record
    s = socket.create_connection((host, int(port)))
    authenticate(s, f.info.capability)
    s.sendall(P.encode_get(2, f.file_id, "partial"))
    frames = []
    dec = P.FrameDecoder()
    while not frames:
        frames = dec.feed(s.recv(65536))
    s.close()
    assert frames[0].type == P.MsgType.ERROR and frames[0].fields["code"] == P.ErrorCode.NOT_FOUND
    assert record_files(cluster, 0) == []
    tmp = cluster.data_dir / "peers" / "peer-0" / "tmp"
    assert not tmp.exists() or list(tmp.iterdir()) == []
    f.close()


def test_pipelined_requests_matched_out_of_order(cluster):
    """Many PUTs and GETs in one write, answered by sequence number."""
    c = cluster.client()
    f = c.create("/t/pipe", replication="x1")
    host, port = cluster.peer_addrs[0].rsplit(":", 1)
    s = socket.create_connection((host, int(port)))
    authenticate(s, f.info.capability)
    frames = [P.encode_put(i, f.file_id, 0, f"r{i}", bytes([i]) * i) for i in range(1, 101)]
    frames += [P.encode_get(1000 + i, f.file_id, f"r{i}") for i in range(1, 101)]
    s.sendall(b"".join(frames))
    dec, got = P.FrameDecoder(), {}
    while len(got) < 200:
        for fr in dec.feed(s.recv(1 << 20)):
            got[fr.seq] = fr
    s.close()
    assert all(got[i].type == P.MsgType.OK for i in range(1, 101))
    for i in range(1, 101):
        fr = got[1000 + i]
        assert fr.type == P.MsgType.DATA and fr.fields["data"] == bytes([i]) * i
        assert fr.fields["crc32c"] == P.crc32c(bytes([i]) * i)
    f.close()


def test_peer_refuses_bad_crc_and_oversized_frames(cluster):
    c = cluster.client()
    f = c.create("/t/bad", replication="x1")
    host, port = cluster.peer_addrs[0].rsplit(":", 1)
    s = socket.create_connection((host, int(port)))
    authenticate(s, f.info.capability)
    s.sendall(P.encode_put(5, f.file_id, 0, "r", b"data", crc=1234))
    dec, frames = P.FrameDecoder(), []
    while not frames:
        frames = dec.feed(s.recv(65536))
    assert frames[0].seq == 5 and frames[0].fields["code"] == P.ErrorCode.CRC_MISMATCH
    s.sendall(struct.pack("<IBBHQ", 0x7FFFFFFF, P.MsgType.PUT, 1, 0, 6))
    frames = []
    while not frames:
        chunk = s.recv(65536)
        assert chunk, "peer closed without an error frame"
        frames = dec.feed(chunk)
    assert frames[0].fields["code"] == P.ErrorCode.FRAME_TOO_LARGE
    assert s.recv(65536) == b""  # then it closes the untrusted stream
    s.close()
    # and keeps serving others
    with c.open("/t/bad") as f2:
        f2.put("ok", b"fine")
        assert f2.get("ok") == b"fine"
    f.close()


def test_empty_records(cluster):
    c = cluster.client()
    with c.create("/t/empty", replication="x2") as f:
        f.put("nothing", b"")
        f.queue_put("also-nothing", b"")
        f.queue_put("something", b"s")
    with c.open("/t/empty") as f:
        assert f.get("nothing") == b"" and f.get("also-nothing") == b"" and f.get("something") == b"s"

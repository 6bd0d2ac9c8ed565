"""Checks shared by the tests that run real processes: what a user would
look at after a fault (every record readable, GET_LOCAL exactly once, what a
scrub removed, what is left on the peers' disks)."""

import json
import socket
import struct
from collections import Counter

from helpers import run_cli

from st_py.client.getlocal import reveal
from st_py.core.infofile import InfofileReader
from st_py.wire import protocol as P


def authenticate(sock, token: bytes) -> None:
    """Send AUTH with ``token`` on a raw socket and wait for its OK
    (docs/capabilities.md); nothing to do for an empty token."""
    if not token:
        return
    seq = 1 << 62
    sock.sendall(P.encode_auth(seq, token))
    dec, frames = P.FrameDecoder(), []
    while not frames:
        frames = dec.feed(sock.recv(65536))
    assert frames[0].seq == seq and frames[0].type == P.MsgType.OK, frames[0].fields


def scrub_frame(addr: str, token: bytes = b"") -> P.Frame:
    """SCRUB's reply frame from the peer at ``addr``, whatever it is (with an
    ADMIN capability ``token`` when the peer checks them)."""
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=60) as s:
        authenticate(s, token)
        s.sendall(P.encode_scrub(1))
        dec, frames = P.FrameDecoder(), []
        while not frames:
            frames = dec.feed(s.recv(65536))
    return frames[0]


def scrub(addr: str, token: bytes = b"") -> dict:
    """Run the peer's scrubber now (SCRUB, with an ADMIN capability ``token``
    when the peer checks them) and return what it did."""
    fr = scrub_frame(addr, token)
    assert fr.type == P.MsgType.OK, fr.fields
    keys = ("files", "removed_uncommitted", "removed_deleted_files", "removed_tmp", "kept")
    return dict(zip(keys, struct.unpack("<5Q", fr.fields["payload"])))


def admin_scrub(cluster, addr: str) -> dict:
    """:func:`scrub` with an ADMIN capability minted with the cluster's key."""
    from st_py.core.capability import ADMIN

    return scrub(addr, cluster.mint(ADMIN) if cluster.auth else b"")


def scrub_everywhere(cluster) -> dict:
    """:func:`admin_scrub` on every peer of ``cluster``, the counts added up."""
    totals: dict[str, int] = {}
    for addr in cluster.peer_addrs:
        for k, v in admin_scrub(cluster, addr).items():
            totals[k] = totals.get(k, 0) + v
    return totals


def leave_scrub_work(c, prefix: str) -> None:
    """What a scrubber is for, below ``prefix``: ``keep`` (30 committed x2
    records ``ok/<i>``), ``crashed`` (20 x2 records acknowledged and never
    committed: its writer died) and ``gone`` (10 x1 records of a file deleted
    in the tracker only, its copies left behind): 110 stored copies."""
    keep = c.create(f"{prefix}/keep", replication="x2")
    for i in range(30):
        keep.queue_put(f"ok/{i}", b"committed" * 10)
    keep.close()
    crashed = c.create(f"{prefix}/crashed", replication="x2")
    for i in range(20):
        crashed.queue_put(f"lost/{i}", b"never committed").result()
    crashed._transport.close()  # no flush: the commit never happens
    gone = c.create(f"{prefix}/gone", replication="x1", blocksize=1)
    for i in range(10):
        gone.queue_put(f"g/{i}", b"orphan")
    gone.close()
    c.tracker.delete(f"{prefix}/gone", gone.file_id, whole_file=True)  # infofile only, copies left


def stored(cluster) -> int:
    n = 0
    for i in range(len(cluster.peers)):
        root = cluster.data_dir / "peers" / f"peer-{i}" / "files"
        if root.exists():
            n += sum(1 for p in root.rglob("*") if p.is_file() and not p.name.endswith(".name"))
    return n


def reveal_all(f):
    plan = f.get_local_plan()
    out = []
    for addr in plan.ring:
        out += reveal(addr, plan)
    return plan, out


def fill(cluster, name, n, replication="x2", blocksize=3):
    c = cluster.client()
    blobs = {f"rec/{i:04d}": f"payload {i}".encode() * (i % 7 + 1) for i in range(n)}
    with c.create(name, replication=replication, blocksize=blocksize) as f:
        for k, v in blobs.items():
            f.queue_put(k, v)
    return c, blobs


def check_exactly_once(records, blobs):
    counts = Counter(r.name for r in records)
    assert set(counts) == set(blobs), set(counts) ^ set(blobs)
    assert max(counts.values()) == 1, [n for n, k in counts.items() if k > 1][:5]
    for r in records:
        with open(r.path, "rb") as fh:
            assert fh.read() == blobs[r.name]
        assert r.size == len(blobs[r.name])


def check_file(cluster, name, blobs, copies=2):
    reader = InfofileReader(cluster.namespace / name.lstrip("/"))
    try:
        assert reader.count() == len(blobs)
        for n in blobs:
            m = reader.lookup(n)
            assert len(set(m.peers)) == copies, m  # invariant 3: one copy per peer
    finally:
        reader.close()
    with cluster.client().open(name) as f:
        for n, v in blobs.items():
            assert f.get(n) == v


def cli_json(cluster, *args: str, ok: tuple[int, ...] = (0,)):
    """``storetorrent ARGS --tracker ... --format json`` in a subprocess, as
    a user runs it: its parsed output; its exit status must be in ``ok``."""
    r = run_cli(cluster, *args, "--format", "json")
    assert r.returncode in ok, (r.returncode, r.stderr)
    return json.loads(r.stdout)

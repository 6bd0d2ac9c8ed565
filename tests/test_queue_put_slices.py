"""Consecutive ``queue_put`` calls ride the write batch path (issue 41;
st_py/client/put_slices.py, docs/client.md "queue_put slices"): they are
sent in slices, with ``queue_put``'s semantics kept: its errors at the call,
each record's outcome on its Pending, threads sharing a handle, and a peer
killed mid-stream (the last test: it leaves the module's cluster with two
peers dead).
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from contextlib import closing

import pytest

from st_py.core.history import RetainedProbe
from st_py.core.infofile import InfofileReader
from st_py.errors import (
    BadMetadataError,
    BadNameError,
    NotEnoughPeersError,
    QueuedOperationsError,
    RecordIsADirectoryError,
    StoreTorrentError,
)

KEY = bytes(range(32))


def test_consecutive_queue_puts_are_sent_in_slices(module_cluster):
    c = module_cluster.client(depth=64)
    blobs = {f"s{i:05d}": random.Random(i).randbytes(1024) for i in range(1000)}
    with c.create("/slices/count", replication="x2") as f:
        pendings = [f.queue_put(n, v) for n, v in blobs.items()]
        f.flush()
        slices, records = f.put_slices
        assert records == 1000
        # half the depth a slice: 32 records; a slice is also sent when the caller waits
        assert 1000 // 32 <= slices <= 1000 // 8, slices
        assert all(p.done() and p.result() is True for p in pendings)
    with c.open("/slices/count") as f:
        assert sorted(f.names()) == sorted(blobs)
        assert {n: f.get(n) for n in list(blobs)[::97]} == {n: blobs[n] for n in list(blobs)[::97]}


def test_a_pending_waited_on_sends_its_slice(module_cluster):
    c = module_cluster.client(depth=64)
    with c.create("/slices/wait", replication="x1") as f:
        p = f.queue_put("one", b"1")
        assert f.inflight == 1  # in the slice: counted in flight, not sent yet
        assert p.result() is True  # the wait sent it
        assert f.put_slices == (1, 1)


def test_errors_come_at_the_call_and_other_kinds_go_one_by_one(module_cluster, monkeypatch):
    monkeypatch.setenv("STORETORRENT_ENCRYPTION_KEY", KEY.hex())
    c = module_cluster.client(depth=16)
    blobs = {f"d/r{i:03d}": random.Random(i).randbytes(500 + i) for i in range(300)}
    with c.create("/slices/kinds", replication="x2", filters=["zstd", "aes-256-gcm"]) as f:
        f.queue_put("d/r000", blobs["d/r000"])  # in the slice, not sent
        with pytest.raises(RecordIsADirectoryError):
            f.queue_put("d", b"x")  # a folder of a record in the slice: refused at the call
        with pytest.raises(BadNameError):
            f.queue_put("", b"x")
        with pytest.raises(BadMetadataError):
            f.queue_put("m", b"x", meta={"bad\nkey": "v"})
        done: list = []
        for i, (n, v) in enumerate(list(blobs.items())[1:], 1):
            f.queue_put(n, v, meta={"i": str(i)} if i % 7 == 0 else None, callback=lambda n, e: done.append((n, e)))
        f.put("v", b"first")
        f.flush()
        f.put("v", b"second", replace=True)  # a version: one by one, under the lease
        assert f.put_slices[1] == 300 + 1  # "v"'s first version rode a slice; the replacement did not
    with pytest.raises(StoreTorrentError, match="closed"):
        f.queue_put("late", b"x")
    assert sorted(done) == sorted((n, None) for n in list(blobs)[1:])
    with c.open("/slices/kinds") as f:
        assert {n: f.get(n) for n in blobs} == blobs
        assert f.get("v") == b"second"
        assert f.infofile().user_meta_of("d/r007") == {"i": "7"}
        assert f.infofile().user_meta_of("d/r008") == {}


def test_chain_protocol_puts_go_one_by_one(module_cluster):
    c = module_cluster.client(depth=64)
    blobs = {f"c{i}": bytes([i]) * 100 for i in range(200)}
    with c.create("/slices/chain", replication="x2", protocol="chain") as f:
        for n, v in blobs.items():
            f.queue_put(n, v)
        f.flush()
        assert f.put_slices == (0, 0)
    with c.open("/slices/chain") as f:
        assert {n: f.get(n) for n in blobs} == blobs


def test_threads_sharing_a_handle_queue_put_every_record(module_cluster):
    c = module_cluster.client(depth=64)
    threads, per = 4, 600
    want: dict[str, bytes] = {}
    for t in range(threads):
        rnd = random.Random(t)
        for i in range(per):
            want[f"t{t}/r{i:04d}"] = rnd.randbytes(rnd.randint(1, 6000))
    results: dict[int, list] = {}
    errors: list = []
    f = c.create("/slices/threads", replication="x2")

    def writer(t: int) -> None:
        try:
            ps = [f.queue_put(n, v) for n, v in want.items() if n.startswith(f"t{t}/")]
            results[t] = [(p.name, p.exception()) for p in ps]  # waited on from this thread
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=writer, args=(t,)) for t in range(threads)]
    for th in ts:
        th.start()
    for th in ts:
        th.join()
    f.close()
    assert errors == []
    assert sum(len(r) for r in results.values()) == threads * per
    assert all(e is None for r in results.values() for _, e in r)
    slices, records = f.put_slices
    assert records == threads * per and slices < records // 4
    with c.open("/slices/threads") as g:
        assert len(g) == threads * per
        assert sorted(g.names()) == sorted(want)
        assert {n: g.get(n) for n in want} == want


def test_a_kept_versions_look_does_not_wait_for_the_tracker_writing(module_cluster):
    """The once-per-change look (RetainedProbe) finds the infofile locked by
    a writer: it answers at once with its last answer instead of waiting
    (it waited up to SQLite's 10 s busy timeout, then answered "nothing
    kept" as for a file made before versions)."""
    c = module_cluster.client()
    with c.create("/slices/probe", replication="x1") as f:
        f.put("a", b"1")
        path = f.infofile_path
    probe = RetainedProbe()
    with closing(InfofileReader(path)) as reader:
        assert probe.any_kept(reader) is False  # nothing kept: the first look waits as before
        with c.open("/slices/probe") as f:
            f.put("b", b"2")  # the infofile changes: the next call looks again
            f.flush()
        with closing(sqlite3.connect(path, timeout=10)) as lock:
            lock.execute("BEGIN EXCLUSIVE")  # as the tracker holds it while it commits
            t = time.monotonic()
            assert probe.any_kept(reader) is False  # the last answer
            assert time.monotonic() - t < 1.0
            lock.rollback()
        assert probe.any_kept(reader) is False  # looked again once the lock is gone


def test_peers_killed_mid_stream_report_failures_and_show_only_acknowledged(module_cluster):
    """x3 on 4 peers, 2 killed with SIGKILL mid-stream: records whose copies
    cannot all be stored fail on their Pendings (and at flush), later ones
    at the call; exactly the acknowledged records are committed."""
    c = module_cluster.client(depth=64)
    blobs = {f"k{i:05d}": random.Random(i).randbytes(2048) for i in range(4000)}
    f = c.create("/slices/kill", replication="x3")
    pendings = []
    refused_at_call = None
    for i, (n, v) in enumerate(blobs.items()):
        if i == 1500:
            module_cluster.kill_peer(2)
            module_cluster.kill_peer(3)
        try:
            pendings.append(f.queue_put(n, v))
        except NotEnoughPeersError:
            refused_at_call = n  # the writer knows the peers are gone: nothing queued
            break
    acked = {p.name for p in pendings if p.exception() is None}
    failed = {p.name for p in pendings if p.exception() is not None}
    assert failed, "records in flight on the killed peers must fail (x3 with 2 live peers)"
    assert refused_at_call is not None
    with pytest.raises(StoreTorrentError) as e:
        f.close()  # flush reports every failed record once
    if isinstance(e.value, QueuedOperationsError):
        assert {n for n, _ in e.value.failures} == failed
    else:  # one failure, or one error shared by every failed record
        assert all(p.exception() is e.value for p in pendings if p.name in failed)
    with c.open("/slices/kill") as g:
        committed = set(g.names())
        assert committed == acked  # never an acknowledged record lost, never an unacknowledged one visible
        assert {n: g.get(n) for n in sorted(acked)[::50]} == {n: blobs[n] for n in sorted(acked)[::50]}

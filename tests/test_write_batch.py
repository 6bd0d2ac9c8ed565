"""Write batches (``StFile.write(WriteBatch)``, ``StFile.write_table``;
docs/client.md, "Write batches") over real trackers and peers: every record
read back byte for byte by GET and GET_LOCAL, the classes x1/x2/x3, the
protocols, the zstd and aes filters, names that break the rules reported
per record (and never visible), a peer SIGKILLed in the middle of a batch,
threads writing batches to one handle, and the fsspec ``pipe`` of many
paths that rides on it."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
from helpers import assert_same_records, infofile_copies, revealed_once

from st_py import WriteBatch
from st_py.errors import (
    BadNameError,
    BatchWriteError,
    InvalidOptionError,
    RecordExistsError,
    RecordIsADirectoryError,
    RecordNameRuleError,
    RecordNotADirectoryError,
    RecordTooLargeError,
)

KEY = bytes(range(32))


def records(n: int, tag: str = "") -> dict[str, bytes]:
    """``n`` records of varied sizes: empty, small, and over the native
    sender's 16 KiB copy limit (sent from their own memory)."""
    sizes = [0, 1, 4096, 17_000, 300]
    return {f"{tag}d{i % 7}/r{i:05d}": os.urandom(sizes[i % len(sizes)]) for i in range(n)}


def batch_of(data: dict[str, bytes]) -> WriteBatch:
    b = WriteBatch()
    for n, v in data.items():
        b.put(n, v)
    return b


def check_file(c, name: str, want: dict[str, bytes], copies: int) -> None:
    """The committed records are exactly ``want``, each read back by GET and
    revealed once by GET_LOCAL, with ``copies`` stored copies on distinct peers."""
    with c.open(name) as f:
        assert sorted(f.names()) == sorted(want)
        assert_same_records({n: f.get(n) for n in want}, want, "GET")
        assert_same_records(revealed_once(f), want, "GET_LOCAL")
        stored, pending = infofile_copies(f.infofile_path)
        assert pending == {}
        for n in want:
            assert sorted(stored[n]) == list(range(copies)), (n, stored[n])
            assert len(set(stored[n].values())) == copies, (n, stored[n])


@pytest.mark.parametrize(
    "replication,protocol",
    [("x1", "client-sync"), ("x2", "client-sync"), ("x3", "client-sync"), ("x2", "chain"), ("x2", "client-async")],
)
def test_batch_round_trip(module_cluster, replication, protocol):
    c = module_cluster.client()
    name = f"/wb/{replication}-{protocol}"
    first, second = records(300), records(200, tag="b")
    with c.create(name, replication, protocol=protocol) as f:
        assert f.write(batch_of(first)) == len(first)
        assert f.write(batch_of(second)) == len(second)
    if protocol == "client-async":  # committed with copies pending until they are stored
        with c.open(name) as f:
            f.flush()
        deadline = time.monotonic() + 30
        while infofile_copies(c.open(name).infofile_path)[1] and time.monotonic() < deadline:
            time.sleep(0.2)
    check_file(c, name, first | second, int(replication[1]))


def test_filters_zstd_and_aes(module_cluster, monkeypatch):
    monkeypatch.setenv("STORETORRENT_ENCRYPTION_KEY", KEY.hex())
    c = module_cluster.client()
    want = {f"t{i:04d}": (b"the same text, compressible %d " % i) * 200 for i in range(200)}
    with c.create("/wb/filters", "x2", filters=["zstd", "aes-256-gcm"]) as f:
        assert f.write(batch_of(want)) == len(want)
    check_file(c, "/wb/filters", want, 2)
    with c.open("/wb/filters") as f:
        for r in f.get_local()[:20]:  # what the peers hold: ciphertext, smaller
            on_disk = Path(r.path).read_bytes()
            assert b"the same text" not in on_disk and len(on_disk) < len(want[r.name]) // 2


def test_write_table(module_cluster):
    c = module_cluster.client()
    want = records(120, tag="t")
    table = pa.table({"key": list(want), "payload": pa.array(list(want.values()), pa.large_binary())})
    with c.create("/wb/table", "x2") as f:
        assert f.write_table(table, name_column="key", data_column="payload") == len(want)
        more = {f"rb{i}": b"x" * i for i in range(50)}
        rbs = pa.table({"name": list(more), "data": list(more.values())}).to_batches(max_chunksize=16)
        assert len(rbs) > 1
        assert f.write_table(iter(rbs)) == len(more)  # an iterable of record batches
        with pytest.raises(InvalidOptionError, match="no column 'data'"):
            f.write_table(pa.table({"name": ["a"], "other": [b"x"]}))
        with pytest.raises(InvalidOptionError, match="string or large_string"):
            f.write_table(pa.table({"name": [1], "data": [b"x"]}))
        with pytest.raises(InvalidOptionError, match="null"):
            f.write_table(pa.table({"name": ["n1", None], "data": [b"x", b"y"]}))
    check_file(c, "/wb/table", want | more, 2)


def test_names_that_break_the_rules_are_reported_per_record(module_cluster):
    """Per-record reporting (the issue's choice, docs/decisions.md): the
    good records are written, every bad one is named in BatchWriteError
    with its own error and never visible."""
    c = module_cluster.client()
    good = records(40)
    with c.create("/wb/names", "x2") as f:
        f.put("taken", b"first")
        f.flush()
        b = WriteBatch()
        bad = ["", "a/../b", ".st-version/x", "taken", "twice"]
        for i, (n, v) in enumerate(good.items()):
            b.put(n, v)
            if i < len(bad):
                b.put(bad[i], b"bad")
        b.put("twice", b"second")  # given twice in one batch: the first is written
        with pytest.raises(BatchWriteError) as ei:
            f.write(b)
        e = ei.value
        assert e.file == "/wb/names"
        assert sorted(e.names) == sorted(["", "a/../b", ".st-version/x", "taken", "twice"])
        assert e.written == len(good) + 1
        errs = dict(e.failures)
        assert isinstance(errs[""], BadNameError) and isinstance(errs["a/../b"], BadNameError)
        assert isinstance(errs[".st-version/x"], BadNameError)
        assert isinstance(errs["taken"], RecordExistsError) and isinstance(errs["twice"], RecordExistsError)
        assert "put the failed ones again" in str(e)
    # flush and close raised nothing more: told once, by the batch
    check_file(c, "/wb/names", good | {"taken": b"first", "twice": b"bad"}, 2)


def test_names_taken_in_the_file_are_reported_per_record(module_cluster):
    """Issue 41: a file with records checks a batch's names against its
    infofile once a slice (``RecordWriter.check_names_many``), not once a
    record. A name committed, a folder of a committed record, a name below
    a committed record (or below one of this handle's puts in flight), and
    reserved or broken names are each reported with the error a put of
    that name alone raises (type and message); the others are committed
    and read back."""
    c = module_cluster.client()
    with c.create("/wb/taken", "x2") as f:
        f.write(batch_of({"taken": b"t", "dir/rec": b"r", "deep/a/b": b"d", "leaf": b"l"}))
    good = records(60, tag="g")
    bad = {
        "taken": RecordExistsError,
        "dir": RecordIsADirectoryError,
        "deep": RecordIsADirectoryError,
        "deep/a": RecordIsADirectoryError,
        "leaf/below": RecordNotADirectoryError,
        "leaf/x/y": RecordNotADirectoryError,
        "queued": RecordIsADirectoryError,  # a folder of queued/r, put by this handle just before
        ".st-stripe/x": BadNameError,
        ".st-version/y": BadNameError,
        "a//b": RecordNameRuleError,
    }
    with c.open("/wb/taken") as f:
        f.queue_put("queued/r", b"q")
        b = WriteBatch()
        for i, (n, v) in enumerate(good.items()):
            b.put(n, v)
            if i < len(bad):
                b.put(list(bad)[i], b"bad")
        with pytest.raises(BatchWriteError) as ei:
            f.write(b)
        e = ei.value
        assert sorted(e.names) == sorted(bad)
        assert e.written == len(good)
        for n, exc in e.failures:
            assert type(exc) is bad[n], (n, exc)
            with pytest.raises(bad[n]) as one:  # the same error as a put of that name alone
                f.put(n, b"again")
            assert str(one.value) == str(exc)
        # a record over STRIPE_THRESHOLD goes to put_object in a batch (a striped object,
        # written): only the check of a slice itself can meet one (sizes, no bytes)
        from st_py.client.record_writer import STRIPE_THRESHOLD

        writer = f._writer
        ok, failed = writer.check_names_many(["huge", "fine", "taken"], [STRIPE_THRESHOLD + 1, 1, 1])
        assert [n for n, _ in ok] == ["fine"] and [n for n, _ in failed] == ["huge", "taken"]
        assert isinstance(failed[0][1], RecordTooLargeError) and isinstance(failed[1][1], RecordExistsError)
        with pytest.raises(RecordTooLargeError) as one:
            writer.check_name("huge", STRIPE_THRESHOLD + 1, False)
        assert str(one.value) == str(failed[0][1])
    want = {"taken": b"t", "dir/rec": b"r", "deep/a/b": b"d", "leaf": b"l", "queued/r": b"q"}
    check_file(c, "/wb/taken", good | want, 2)


def test_threads_write_batches_to_one_file(module_cluster):
    c = module_cluster.client()
    want: dict[str, bytes] = {}
    errors: list[BaseException] = []
    with c.create("/wb/threads", "x2") as f:

        def writer(t: int) -> None:
            try:
                for k in range(5):
                    data = records(60, tag=f"th{t}-{k}-")
                    assert f.write(batch_of(data)) == len(data)
                    want.update(data)
            except BaseException as e:  # noqa: BLE001  (reported by the test thread)
                errors.append(e)

        threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors
    check_file(c, "/wb/threads", want, 2)


def test_fsspec_pipe_of_many_paths(module_cluster):
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("storetorrent", tracker=module_cluster.tracker_addr, skip_instance_cache=True)
    first = {f"/wb/pipe/p{i:03d}": os.urandom(i * 10) for i in range(100)}
    fs.pipe(first)
    again = {"/wb/pipe/p000": b"new version", "/wb/pipe/q001": b"new record"}
    fs.pipe(again)
    want = {p.rsplit("/", 1)[1]: v for p, v in (first | again).items()}
    with module_cluster.client().open("/wb/pipe") as f:
        assert_same_records({n: f.get(n) for n in f.names()}, want, "GET after pipe")
    with pytest.raises(FileExistsError):
        fs.pipe({"/wb/pipe/p001": b"x", "/wb/pipe/new": b"y"}, mode="create")
    assert not fs.exists("/wb/pipe/new")  # every path checked before anything is written


def test_peer_killed_mid_batch(make_cluster):
    """x2: a peer is SIGKILLed while a batch is in flight. The batch
    completes on the other peers (copies fail over to spares) or names the
    records that failed; every record committed reads back byte for byte
    with 2 copies on live peers, and none that failed is visible."""
    cluster = make_cluster(4)
    c = cluster.client(timeout=10.0)
    data = {f"k{i:05d}": os.urandom(4096) for i in range(12_000)}
    killed: list[str] = []
    with c.create("/wb/kill", "x2") as f:
        before = f.write(batch_of(dict(list(data.items())[:200])))  # connections up, infofile there
        assert before == 200
        rest = dict(list(data.items())[200:])
        peer = cluster.peers[1]
        timer = threading.Timer(0.3, lambda: killed.append(cluster.kill_peer(1)))
        timer.start()
        t0 = time.monotonic()
        try:
            f.write(batch_of(rest))
            failed: set[str] = set()
        except BatchWriteError as e:
            failed = set(e.names)
            assert failed <= set(rest)
        took = time.monotonic() - t0
        timer.join()
    assert killed, "the peer was not killed"
    assert took > 0.3, f"the batch ended ({took:.2f} s) before the kill: not mid-batch"
    assert not peer.alive()
    want = {n: v for n, v in data.items() if n not in failed}
    with c.open("/wb/kill") as f:
        assert set(f.names()) == set(want)  # nothing unacknowledged visible
        assert_same_records({n: f.get(n) for n in want}, want, "GET after the kill")
        stored, _ = infofile_copies(f.infofile_path)
        for n in want:  # two copies on distinct peers, as acknowledged
            assert sorted(stored[n]) == [0, 1] and len(set(stored[n].values())) == 2, (n, stored[n])


def test_native_batch_frames_are_single_puts_back_to_back():
    """``Sender.put_batch`` lays out each frame exactly as ``put_prefix``
    plus the data (bodies copied up to 16 KiB, referenced above), with
    consecutive sequence numbers; ``crc32c_many`` agrees with ``crc32c``."""
    import socket

    from st_py.wire.protocol import crc32c, put_prefix
    from st_py.wire.transport import _native, crc32c_many

    datas = [b"", b"a", os.urandom(4096), os.urandom(40_000), bytearray(os.urandom(300))]
    names = [f"n{i}".encode() for i in range(len(datas))]
    crcs = crc32c_many(datas)
    assert crcs == [crc32c(bytes(d)) for d in datas]
    ranks = [0, 1, 2, 0, 1]
    want = b"".join(
        put_prefix(100 + i, 7, ranks[i], crcs[i], names[i], len(d), 0x2) + bytes(d) for i, d in enumerate(datas)
    )
    if _native is None or not hasattr(_native.Sender, "put_batch"):
        pytest.skip("the native extension is not built with put_batch")
    a, b = socket.socketpair()
    try:
        a.setblocking(False)
        s = _native.Sender(a.fileno())
        s.put_batch(100, 7, 0x2, ranks, crcs, names, datas)
        assert s.out_bytes == len(want)
        got = b""
        while len(got) < len(want):
            s.flush()
            got += b.recv(1 << 20)
        assert got == want and s.empty
        with pytest.raises(ValueError):
            s.put_batch(1, 7, 0, [0], [0, 1], [b"x"], [b"y"])
        with pytest.raises(TypeError):
            s.put_batch(1, 7, 0, [0], [0], ["not bytes"], [b"y"])
        assert s.empty  # a refused batch queues nothing
    finally:
        a.close()
        b.close()


def test_a_name_a_snapshot_keeps_is_written_under_a_name_of_its_own(module_cluster):
    """A record deleted while a snapshot holds it, written again by a
    batch: the new bytes are current, the snapshot still reads the old."""
    c = module_cluster.client()
    with c.create("/wb/history", "x2") as f:
        f.write(batch_of({"keep": b"old bytes", "other": b"o"}))
    c.snapshot("/wb/history", "v1")
    with c.open("/wb/history") as f:
        f.delete("keep")
        assert f.write(batch_of({"keep": b"new bytes", "more": b"m"})) == 2
    with c.open("/wb/history") as f:
        assert f.get("keep") == b"new bytes" and sorted(f.names()) == ["keep", "more", "other"]
    with c.open("/wb/history", as_of="v1") as old:
        assert old.get("keep") == b"old bytes"


def test_all_or_nothing_through_a_staged_handle(module_cluster):
    """What docs/client.md offers for an atomic batch: written through a
    staged handle, nothing is visible until ``commit_staged``, then all."""
    c = module_cluster.client()
    c.create("/wb/staged", "x2").close()
    want = records(80, tag="s")
    f = c.open_staged("/wb/staged")
    try:
        assert f.write(batch_of(want)) == len(want)
        staged = f.staged_commits()
    finally:
        f.close()
    with c.open("/wb/staged") as g:
        assert len(g) == 0  # acknowledged, staged: not visible
    assert c.commit_staged("/wb/staged", staged) == len(want)
    check_file(c, "/wb/staged", want, 2)


def test_staged_records_as_columns_from_several_writers_commit_as_dicts_do(module_cluster):
    """A write job's tasks hand their staged records as columns
    (``StFile.staged_records``, issue 41: a list a field, not a dict a
    record); pickled as a task's result is, the columns of several writers
    commit in one transaction exactly as the same records' dicts do, and
    the dicts are a view of the columns."""
    import pickle

    from st_py.client.staged import StagedRecords

    c = module_cluster.client()
    data = [records(40, tag=f"t{t}") for t in range(3)]  # each task's records, written into both files
    parts = {}
    for name in ("/wb/cols-tasks", "/wb/dicts-tasks"):
        c.create(name, "x2").close()
        parts[name] = []
        for t in range(3):
            with c.open_staged(name) as f:
                assert f.write(batch_of(data[t])) == 40
                f.put(f"meta-{t}", b"with metadata", meta={"task": str(t)})
                parts[name].append(f.staged_records() if name == "/wb/cols-tasks" else f.staged_commits())
    cols = [pickle.loads(pickle.dumps(p)) for p in parts["/wb/cols-tasks"]]
    assert all(isinstance(p, StagedRecords) and len(p) == 41 for p in cols)
    assert StagedRecords.of_dicts(cols[0].as_dicts()) == cols[0]
    with c.open("/wb/cols-tasks") as g:
        assert len(g) == 0  # staged: nothing visible before the commit
    assert c.commit_staged("/wb/cols-tasks", cols) == 123
    assert c.commit_staged("/wb/dicts-tasks", [r for p in parts["/wb/dicts-tasks"] for r in p]) == 123
    want = {n: v for t in range(3) for n, v in data[t].items()} | {f"meta-{t}": b"with metadata" for t in range(3)}
    for name in parts:
        check_file(c, name, want, 2)
        with c.open(name) as g:
            assert [g.infofile().user_meta_of(f"meta-{t}") for t in range(3)] == [{"task": str(t)} for t in range(3)]
    with pytest.raises(RecordExistsError):  # committed: the same columns again are refused, nothing changes
        c.commit_staged("/wb/cols-tasks", cols)


def test_a_staged_commit_of_plain_records_travels_as_columns(module_cluster, monkeypatch):
    """A job's commit (``commit_staged``) of plain records goes to the
    tracker as one ``RecordColumns`` (issue 41: no message a record), and
    commits exactly them; to a tracker that does not read columns (one of
    an older release after a failover: it commits none of them), the same
    records go again one message each and are committed once. Records with
    user metadata go as messages."""
    from st_py.wire.tracker_client import TrackerClient

    c = module_cluster.client()
    sent: list[tuple[int, int]] = []  # (messages, columns' names) of each Commit
    commit = TrackerClient.commit
    ignore_columns = [False]

    def spy(self, *args, columns=None, **kw):
        sent.append((len(args[2]), len(columns.names) if columns is not None else 0))
        return commit(self, *args, columns=None if ignore_columns[0] else columns, **kw)

    monkeypatch.setattr(TrackerClient, "commit", spy)
    for name, older in (("/wb/cols", False), ("/wb/cols-old", True)):
        c.create(name, "x2").close()
        want = records(50, tag=name[-3:])
        f = c.open_staged(name)
        try:
            assert f.write(batch_of(want)) == len(want)
            staged = f.staged_commits()
        finally:
            f.close()
        sent.clear()
        ignore_columns[0] = older
        assert c.commit_staged(name, staged) == len(want)
        ignore_columns[0] = False
        assert sent == ([(0, 50), (50, 0)] if older else [(0, 50)]), sent
        check_file(c, name, want, 2)
    c.create("/wb/cols-meta", "x1").close()
    f = c.open_staged("/wb/cols-meta")
    try:
        f.put("m", b"with metadata", meta={"k": "v"})
        f.put("p", b"plain")
        f.flush()
        staged = f.staged_commits()
    finally:
        f.close()
    sent.clear()
    assert c.commit_staged("/wb/cols-meta", staged) == 2 and sent == [(2, 0)]
    with c.open("/wb/cols-meta") as g:
        assert g.get("m") == b"with metadata" and g.infofile().user_meta_of("m") == {"k": "v"}

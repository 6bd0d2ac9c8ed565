"""The metadata log in the tracker (docs/metadata-log.md, "The apply loop"):
every change of an infofile is appended to the log, then applied from its
encoded form with the log index recorded in the same transaction, so a
replay brings an older copy of the infofile to exactly the state the log
made, and a tracker restarted over an infofile put back from an older copy
serves every record acknowledged since."""

from __future__ import annotations

import asyncio
import random
import shutil
import sqlite3

import pytest
from infofile_history import copy, dump, new_file, random_history

from st_py.tracker.apply.applier import LogGapError, apply_infofile_op
from st_py.tracker.apply.backends import LocalBackend
from st_py.tracker.apply.oplog import OpLog
from st_py.tracker.apply.ops import InfofileOp, decode
from st_py.tracker.committer import Committer
from st_py.tracker.infofile_writer import InfofileWriter
from st_py.tracker.log.local import LocalLog


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_replay_brings_an_older_copy_to_the_state_the_log_made(tmp_path, seed):
    """A random history through the log; copies of the infofile taken before
    it, in its middle and at its end are each put back and replayed from the
    log: each is then the same, table for table, as the infofile the history
    made (times come from the operations, not the clock). An entry applied
    before is skipped; a copy older than the log holds is left as it was
    (a gap), never patched over."""
    path = new_file(tmp_path)
    rng = random.Random(seed)
    steps = 60
    olds = {0: tmp_path / "at0", steps // 2: tmp_path / "mid"}

    logdb = tmp_path / "state" / "log.db"

    async def run() -> None:
        oplog = OpLog(LocalBackend(logdb))
        await oplog.start()
        c = Committer(InfofileWriter(path), log=oplog, name="/f")
        await random_history(c, rng, steps, olds)
        c.close()
        await oplog.aclose()

    async def replay(writer_for):
        oplog = OpLog(LocalBackend(logdb))
        await oplog.start()
        try:
            return await oplog.replay(writer_for)
        finally:
            await oplog.aclose()

    asyncio.run(run())
    final = dump(path)
    assert final["user_meta"], "the history committed user metadata"
    assert int(dict(sqlite3.connect(str(path)).execute("SELECT key, value FROM meta"))["log_index"]) > 0
    shutil.copy(path, tmp_path / "final")
    for label, old in [*((str(k), v) for k, v in olds.items()), ("final", tmp_path / "final")]:
        shutil.copy(old, path)
        assert label == "final" or dump(path) != final
        w = InfofileWriter(path)
        rep = asyncio.run(replay(lambda op, w=w: w if op.file_id == 7 else None))
        w.close()
        assert dump(path) == final, label
        assert rep.gaps == 0 and (rep.applied > 0) == (label != "final"), (label, rep)

    # The log compacted past the middle copy: that copy is left as it is, with a gap reported.
    log = LocalLog(logdb)
    log.compact_now(log.last_index() - 3)
    log.close()
    shutil.copy(olds[steps // 2], path)
    before = dump(path)
    w = InfofileWriter(path)
    rep = asyncio.run(replay(lambda op: w))
    w.close()
    assert rep.gaps > 0 and rep.applied == 0 and dump(path) == before


def test_an_entry_applies_once_and_only_after_the_one_it_follows(tmp_path):
    """apply_infofile_op is idempotent by log position and refuses an entry
    whose predecessor the infofile has not applied; an entry never applied
    is left out by a replay; an op encodes to the same bytes again."""
    path = new_file(tmp_path)
    w = InfofileWriter(path)
    ident = LocalLog(tmp_path / "log.db")
    lid = ident.log_id()  # the log the entries below are of
    ident.close()
    op = InfofileOp("/f", 7, "commit", ((("a", 3, 99, (0, 1), {1}),),), 1_000.0, 0)
    payload = op.encode()
    assert payload == op.encode()
    dec = decode(payload, 5)
    assert isinstance(dec, InfofileOp) and dec.args[0][0][0] == "a"
    gen, new, _ = apply_infofile_op(w, dec, 5, lid)
    assert new == {"a"} and (w.log_index, w.log_id) == (5, lid)
    assert apply_infofile_op(w, dec, 5, lid) is not None and w.log_index == 5  # SKIPPED: applied before
    # an index of another log (a state folder made again, --etcd after the local log) counts as 0
    assert w.position("local:other") == 0
    with pytest.raises(LogGapError):  # an entry of that log following its entry 5: not this infofile's 5
        apply_infofile_op(w, InfofileOp("/f", 7, "commit", ((("z", 1, 1, (0,)),),), 1_000.5, 5), 6, "local:other")
    later = InfofileOp("/f", 7, "commit", ((("b", 3, 98, (0, 1)),),), 1_001.0, 6)  # follows entry 6, never applied
    with pytest.raises(LogGapError) as e:
        apply_infofile_op(w, later, 9, lid)
    assert (e.value.index, e.value.prev, e.value.have) == (9, 6, 5)
    assert w.conn.execute("SELECT count(*) FROM records WHERE name = 'b'").fetchone()[0] == 0
    assert w.conn.execute("SELECT at FROM generations WHERE generation = ?", (gen,)).fetchone()[0] == 1_000.0

    # An entry whose apply failed and said so: marked failed, left out.
    async def unanswered() -> None:
        oplog = OpLog(LocalBackend(tmp_path / "log.db"))
        await oplog.start()
        idx = await oplog.append(InfofileOp("/f", 7, "commit", ((("c", 1, 1, (0,)),),), 1_002.0, 5).encode())
        await oplog.failed(idx)
        await oplog.aclose()

    # One appended, then the tracker "died" before its apply: no mark, the
    # infofile exactly at the entry before it: in flight, never answered, left out.
    async def in_flight() -> None:
        oplog = OpLog(LocalBackend(tmp_path / "log.db"))
        await oplog.start()
        await oplog.append(InfofileOp("/f", 7, "commit", ((("d", 1, 1, (0,)),),), 1_003.0, 5).encode())
        assert oplog.backend.log is not None
        oplog.backend.log.close()  # as a SIGKILL leaves it: no apply, no mark

    asyncio.run(unanswered())
    asyncio.run(in_flight())

    async def replay_all():
        oplog = OpLog(LocalBackend(tmp_path / "log.db"))
        await oplog.start()
        try:
            return await oplog.replay(lambda op: w)
        finally:
            await oplog.aclose()

    rep = asyncio.run(replay_all())
    assert rep.unanswered == 2 and rep.applied == 0
    assert w.conn.execute("SELECT count(*) FROM records WHERE name = 'd'").fetchone()[0] == 0
    assert w.conn.execute("SELECT count(*) FROM records WHERE name = 'c'").fetchone()[0] == 0
    w.close()


def test_a_tracker_restarted_over_an_older_infofile_serves_every_acknowledged_record(cluster, tmp_path):
    """Real tracker and peers: the infofile is copied, then records are
    committed, deleted and snapshotted (each acknowledged); the tracker is
    SIGKILLed and the older copy put back in its place (an infofile restored
    from a mirror or a backup, or a disk that lost its last writes). At its
    start the tracker applies what the log holds beyond the copy: every
    acknowledged change reads back, through get and get_local."""
    from st_py.core.namespace import infofile_path

    c = cluster.client()
    first = {f"a{i}": bytes([i]) * (100 + i) for i in range(40)}
    with c.create("/ol/f", replication="x2") as f:
        for k, v in first.items():
            f.queue_put(k, v)
    path = infofile_path(cluster.namespace, "/ol/f")
    copy(path, tmp_path / "older")
    later = {f"b{i}": bytes([i + 1]) * (200 + i) for i in range(60)}
    with c.open("/ol/f") as f:
        for k, v in later.items():
            f.queue_put(k, v)
        f.flush()
        f.delete("a0")
        f.delete("a1")
    c.snapshot("/ol/f", "after")
    expect = {**{k: v for k, v in first.items() if k not in ("a0", "a1")}, **later}

    cluster.tracker.kill()
    shutil.copy(tmp_path / "older", path)
    cluster.start_tracker()
    c2 = cluster.client()
    with c2.open("/ol/f") as f:
        assert sorted(f.names()) == sorted(expect)
        for k, v in expect.items():
            assert f.get(k) == v
        local = f.get_local()
        assert sorted(r.name for r in local) == sorted(expect)
        assert all(f.read_local(r) == expect[r.name] for r in local)
    assert [s.name for s in c2.snapshots("/ol/f")] == ["after"]
    # The operator's view of the log: the same numbers on the status page and in the metrics.
    from helpers import metric_value, scrape_metrics, status_json

    c2.snapshot("/ol/f", "after-restart")  # an entry of this run (term 2)
    view = status_json(cluster.tracker.metrics_addr)["metadata_log"]
    assert view["backend"] == "local" and view["log_id"].startswith("local:") and view["term"] == 2
    assert view["applied_index"] == view["last_index"] > 0 and view["entries"] >= 1
    m = scrape_metrics(cluster.tracker.metrics_addr)
    assert metric_value(m, "st_tracker_log_term") == 2
    assert metric_value(m, "st_tracker_log_info", backend="local", log_id=view["log_id"]) == 1
    assert metric_value(m, "st_tracker_log_last_index") >= view["last_index"]


def test_a_new_state_folder_starts_a_new_log_the_infofiles_follow(cluster):
    """The tracker's state folder (and its log.db) made again while the
    namespace stays: the new log's indexes start at 1 again, below the
    infofiles' meta.log_index of the old log; they are told apart by the
    log's identity (meta.log_id), so commits go on and a restart keeps them."""
    c = cluster.client()
    with c.create("/ol/again", replication="x2") as f:
        for i in range(30):
            f.queue_put(f"a{i}", b"A" * i)
    cluster.tracker.kill()
    shutil.rmtree(cluster.data_dir / "tracker")
    cluster.start_tracker()
    cluster.wait_for_peers(4)
    c2 = cluster.client()
    with c2.open("/ol/again") as f:
        f.put("b0", b"after the new state folder")
        f.delete("a0")
    cluster.restart_tracker()
    c3 = cluster.client()
    with c3.open("/ol/again") as f:
        assert sorted(f.names()) == sorted([f"a{i}" for i in range(1, 30)] + ["b0"])
        assert f.get("b0") == b"after the new state folder"


def test_a_lost_namespace_comes_back_from_the_log_at_the_tracker_start(cluster):
    """The namespace's disk lost, the tracker's state folder (its log) kept:
    the files made within the log's window come back, whole, when the
    tracker starts, before any recover; `recover --from-peers` then finds
    them present and overwrites nothing."""
    from test_recover import _recover

    c = cluster.client()
    want = {}
    for name in ("/lost/a", "/lost/deep/b"):
        want[name] = {f"r{i}": f"{name} {i}".encode() for i in range(25)}
        with c.create(name, replication="x2") as f:
            for k, v in want[name].items():
                f.queue_put(k, v)
    with c.open("/lost/a") as f:
        f.delete("r0")
    del want["/lost/a"]["r0"]
    c.snapshot("/lost/a", "kept")
    cluster.tracker.kill()
    shutil.rmtree(cluster.namespace)
    cluster.start_tracker()
    c2 = cluster.client()
    for name, records in want.items():
        with c2.open(name) as f:
            assert sorted(f.names()) == sorted(records)
            assert all(f.get(k) == v for k, v in records.items())
    assert [s.name for s in c2.snapshots("/lost/a")] == ["kept"]
    rc, report = _recover(cluster)
    assert rc == 0 and {f["outcome"] for f in report["files"]} <= {"present"}, report


def test_a_delete_if_empty_replayed_at_a_restart_keeps_a_file_that_holds_a_record(make_cluster):
    """A whole-file delete ``if_empty`` (S3 DeleteBucket) in the metadata
    log, marked applied, that the namespace does not show (the tracker
    killed after the mark, before the unlink; an etcd log applies its
    unmarked entries the same way) is replayed at the restart only while
    the file holds no record, as the live tracker decides it: the file
    with a record stays, the empty one goes; the same entry without
    ``if_empty`` deletes a file with a record (what the check is for)."""
    import time

    from st_py.tracker.apply.backends import APPLIED
    from st_py.tracker.apply.ops import IF_EMPTY

    cluster = make_cluster(2)
    c = cluster.client()
    for name, recs in (("/rp/full", 1), ("/rp/empty", 0), ("/rp/plain", 1)):
        with c.create(name, "x1") as f:
            for i in range(recs):
                f.put(f"r{i}", b"kept")
    ids = {n: c.open(n).info.file_id for n in ("/rp/full", "/rp/empty", "/rp/plain")}
    cluster.tracker.kill()  # SIGKILL

    async def append() -> None:
        oplog = OpLog(LocalBackend(cluster.data_dir / "tracker" / "log.db"))
        await oplog.start()
        for name, args in (("/rp/full", (IF_EMPTY,)), ("/rp/empty", (IF_EMPTY,)), ("/rp/plain", ())):
            index = await oplog.append(InfofileOp(name, ids[name], "delete_file", args, time.time()).encode())
            await oplog.backend.mark([index], APPLIED)
        await oplog.aclose()

    asyncio.run(append())
    cluster.start_tracker()
    c = cluster.client()
    assert c.files("/rp") == ["/rp/full"]
    with c.open("/rp/full") as f:
        assert f.get("r0") == b"kept"

"""Copies of an infofile brought forward by the tracker's changesets (issue
40; docs/metadata-log.md, "Metadata on every node"): the writer keeps each
transaction's changeset, and a copy taken at any point of a random history
and brought forward by the changesets since is the same, table for table, as
the infofile the history made."""

from __future__ import annotations

import asyncio
import random
import sqlite3

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from infofile_history import copy, dump, new_file, random_history

from st_py.client.changeset_apply import ChangesetApplyError, apply_changesets, copy_state
from st_py.tracker.apply.backends import LocalBackend
from st_py.tracker.apply.oplog import OpLog
from st_py.tracker.changeset_window import CopyDemand
from st_py.tracker.committer import Committer
from st_py.tracker.infofile_writer import InfofileWriter


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), points=st.sets(st.integers(0, 39), min_size=1, max_size=4))
def test_a_copy_brought_forward_by_changesets_equals_the_infofile(tmp_path_factory, seed, points):
    """A random history (commits, new versions, prunes, deletes, snapshots,
    moves, peerlist growth, meta changes) through the real apply path; copies
    taken before some of its steps are brought forward by the writer's
    changesets since their log position: each then equals the infofile."""
    tmp = tmp_path_factory.mktemp("copies")
    path = new_file(tmp)
    copies = {k: tmp / f"copy-{k}" for k in points}
    state: dict = {}

    async def run() -> None:
        oplog = OpLog(LocalBackend(tmp / "state" / "log.db"))
        await oplog.start()
        c = Committer(InfofileWriter(path), log=oplog, name="/f")
        await random_history(c, random.Random(seed), 40, copies)
        state["window"] = c.writer.window
        c.close()
        await oplog.aclose()

    asyncio.run(run())
    final = dump(path)
    window = state["window"]
    assert window.stats()[0] > 0, "the writer kept changesets"
    gen_final, pos_final, log_id, schema = copy_state(path)
    assert schema == window.schema
    for k, cp in copies.items():
        gen, pos, cp_log, cp_schema = copy_state(cp)
        assert cp_schema == schema
        changes = window.since(pos, log_id)
        assert changes is not None, f"the window reaches back to step {k}"
        apply_changesets(cp, [ch.data for ch in changes])
        assert dump(cp) == final, k
        assert copy_state(cp)[:2] == (gen_final, pos_final)
    # a fresh copy (the snapshot FetchInfofile sends) is the same state too
    copy(path, tmp / "fresh")
    assert dump(tmp / "fresh") == final


def test_changesets_are_kept_only_once_somebody_copies_the_file(tmp_path):
    """A file nobody fetched keeps no changesets (its writer runs no SQLite
    session: about 4 us a record, docs/benchmarks.md); from the first fetch
    (CopyDemand.note, then the snapshot, as FetchInfofile does) every
    transaction is kept, and the copy made at that moment catches up by
    them to the infofile's state."""
    path = new_file(tmp_path)
    cp = tmp_path / "copy"
    demand = CopyDemand()
    seen: dict = {}

    async def run():
        oplog = OpLog(LocalBackend(tmp_path / "state" / "log.db"))
        await oplog.start()
        w = InfofileWriter(path)
        w.copies_wanted = lambda: demand.wanted("/f")
        c = Committer(w, log=oplog, name="/f")

        def fetch_at(step: int) -> None:
            if step == 20:
                seen["before"] = w.window.stats()[0]
                demand.note("/f")
                copy(path, cp)

        await random_history(c, random.Random(11), 40, {}, fetch_at)
        c.close()
        await oplog.aclose()
        return w.window

    window = asyncio.run(run())
    assert seen["before"] == 0, "no changesets kept before any copy was fetched"
    assert window.stats()[0] > 0
    _, pos, log_id, _ = copy_state(cp)
    changes = window.since(pos, log_id)
    assert changes is not None, "the window reaches back to the copy made at the first fetch"
    apply_changesets(cp, [ch.data for ch in changes])
    assert dump(cp) == dump(path)


def test_a_window_that_does_not_reach_back_says_so(tmp_path):
    """A bound of a few bytes keeps only the last changeset: a copy further
    behind is told None (a snapshot), never given a partial list."""
    path = new_file(tmp_path)
    old = tmp_path / "old"

    async def run():
        oplog = OpLog(LocalBackend(tmp_path / "state" / "log.db"))
        await oplog.start()
        w = InfofileWriter(path)
        w.window.max_bytes = 1
        c = Committer(w, log=oplog, name="/f")
        await random_history(c, random.Random(5), 10, {3: old})
        c.close()
        await oplog.aclose()
        return w.window

    window = asyncio.run(run())
    log_id = window.log_id
    _, pos, _, _ = copy_state(old)
    assert window.stats()[0] == 1
    assert window.since(pos, log_id) is None
    last = int(dict(sqlite3.connect(str(path)).execute("SELECT key, value FROM meta"))["log_index"])
    assert window.since(last, log_id) == []


def test_an_older_files_copy_history_gets_its_key_and_keeps_its_rows(tmp_path):
    """A file made when ``copy_history`` was a rowid table without a key:
    the writer gives it ``hist_id`` (the rowid) in one transaction, every
    row kept, and its changes are then kept in changesets like the others'."""
    path = new_file(tmp_path)
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.executescript(
        "DROP TABLE copy_history; CREATE TABLE copy_history(name TEXT NOT NULL, copy_rank INTEGER NOT NULL, "
        "peer_idx INTEGER NOT NULL, since INTEGER NOT NULL, until INTEGER NOT NULL); "
        "INSERT INTO copy_history VALUES ('a', 0, 1, 1, 2), ('b', 1, 2, 1, 3); "
        "DELETE FROM copy_history WHERE name = 'a'; INSERT INTO copy_history VALUES ('c', 0, 0, 2, 4);"
    )
    before = conn.execute("SELECT rowid, name, copy_rank, peer_idx, since, until FROM copy_history").fetchall()
    conn.close()
    w = InfofileWriter(path)
    cols = [r[1] for r in w.conn.execute("PRAGMA table_info(copy_history)")]
    after = w.conn.execute("SELECT hist_id, name, copy_rank, peer_idx, since, until FROM copy_history").fetchall()
    pk = [r[1] for r in w.conn.execute("PRAGMA table_info(copy_history)") if r[5]]
    w.close()
    assert "hist_id" in cols and pk == ["hist_id"]
    assert sorted(after) == sorted(before) and {r[0] for r in after} == {2, 3}


def test_changes_that_do_not_follow_the_copy_are_refused_whole(tmp_path):
    """Changesets applied to a copy that is not the state they follow (here:
    applied a second time) conflict: ChangesetApplyError, and the copy is
    left exactly as it was (all or none)."""
    path = new_file(tmp_path)
    old = tmp_path / "old"

    async def run():
        oplog = OpLog(LocalBackend(tmp_path / "state" / "log.db"))
        await oplog.start()
        c = Committer(InfofileWriter(path), log=oplog, name="/f")
        await random_history(c, random.Random(11), 15, {2: old})
        c.close()
        await oplog.aclose()
        return c.writer.window

    window = asyncio.run(run())
    _, pos, log_id, _ = copy_state(old)
    changes = [ch.data for ch in window.since(pos, log_id)]
    apply_changesets(old, changes)
    assert dump(old) == dump(path)
    before = old.read_bytes()
    with pytest.raises(ChangesetApplyError) as e:
        apply_changesets(old, changes)
    assert e.value.path == str(old) and e.value.table
    assert old.read_bytes() == before


def test_a_bulk_commit_refused_by_a_committed_name_keeps_only_what_the_record_path_did(tmp_path):
    """The writer inserts a batch of new names without looking each up
    (issue 41): a committed name among them is refused by the primary key,
    the batch's rows are rolled back to a savepoint and the record-by-record
    path commits what it would. The transaction's changeset brings a copy
    to exactly that state (no row of the rolled-back inserts in it)."""
    path = new_file(tmp_path)
    cp = tmp_path / "copy"

    def rec(name: str, size: int) -> tuple:  # the Commit handler's rows, which take the bulk path
        return (name, size, 7, [0, 1], (), "", None, None, False, None)

    async def run():
        oplog = OpLog(LocalBackend(tmp_path / "state" / "log.db"))
        await oplog.start()
        w = InfofileWriter(path)
        c = Committer(w, log=oplog, name="/f")
        first = await c.commit([rec("a", 10)], request_id="r1")
        copy(path, cp)
        many = [rec(f"n{i:03d}", i) for i in range(300)]  # more than one INSERT statement's rows
        retry = await c.commit([rec("b", 1), rec("c", 2), *many, rec("a", 10)], request_id="r2")
        conflict = await c.commit([rec("d", 1), rec("a", 99)], request_id="r3")
        c.close()
        await oplog.aclose()
        return w.window, first, retry, conflict

    window, first, retry, conflict = asyncio.run(run())
    assert retry[:2] == (first[0] + 1, 302) and retry[2] == []
    assert conflict[:2] == (first[0] + 2, 1) and [x.name for x in conflict[2]] == ["a"]
    with sqlite3.connect(path) as conn:
        got = conn.execute("SELECT name, size FROM records ORDER BY name").fetchall()
        assert got == [("a", 10), ("b", 1), ("c", 2), ("d", 1), *((f"n{i:03d}", i) for i in range(300))]
    _, pos, log_id, _ = copy_state(cp)
    changes = window.since(pos, log_id)
    assert changes is not None and len(changes) == 2
    apply_changesets(cp, [ch.data for ch in changes])
    assert dump(cp) == dump(path)

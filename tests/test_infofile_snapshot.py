"""Snapshots of an infofile for FetchInfofile (st_py/tracker/infofile_fetch.py
``take_snapshot``): the file's bytes copied under a read transaction's
SHARED lock are one committed state even while the infofile writer commits
in another thread: every snapshot, held in memory or in a temporary file,
arrives with its size and CRC-32C, passes SQLite's integrity check and its
records are exactly those of the generation its meta names."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading

import pytest

from st_py.tracker.infofile_fetch import take_snapshot
from st_py.tracker.infofile_writer import InfofileWriter, create_infofile
from st_py.wire.protocol import crc32c

GROUP = 500


@pytest.mark.parametrize("in_memory_max", [1 << 30, 0], ids=["in-memory", "temporary-file"])
def test_snapshots_taken_during_commits_are_each_one_committed_state(tmp_path, in_memory_max):
    path = tmp_path / "inf"
    meta = {"file_id": 7, "name": "/s", "replication": "x1", "copies": 1, "blocksize": 16, "est_size": 0}
    create_infofile(path, {**meta, "created_at": 0, "owner": ""}, [(0, "peer-0", "h:0"), (1, "peer-1", "h:1")])
    stop, started = threading.Event(), threading.Event()
    committed: list[int] = []

    def writer() -> None:
        w = InfofileWriter(path)
        try:
            i = 0
            while not stop.is_set() and i < 400:
                w.commit([(f"g{i:04d}/r{j:04d}", 100, j, [j % 2]) for j in range(GROUP)])
                committed.append(i)
                i += 1
                if i == 40:  # a file of some MB: a copy takes as long as a commit
                    started.set()
        finally:
            w.close()

    t = threading.Thread(target=writer)
    t.start()
    started.wait(60)
    seen = set()
    try:
        while t.is_alive() and len(seen) < 40:
            snap = take_snapshot(path, str(tmp_path), in_memory_max=in_memory_max)
            try:
                assert (snap.data is None) == (in_memory_max == 0)
                head, *body = list(snap.chunks())
                data = b"".join(m.data for m in body)
                assert (len(data), crc32c(data)) == (head.total_size, head.crc32c) == (snap.size, snap.crc32c)
                assert head.generation == snap.generation
                got = tmp_path / f"got-{snap.generation}"
                got.write_bytes(data)
                c = sqlite3.connect(got)
                try:
                    assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
                    n = c.execute("SELECT count(*) FROM records").fetchone()[0]
                    gens = c.execute("SELECT count(DISTINCT commit_seq) FROM records").fetchone()[0]
                finally:
                    c.close()
                # generation g: g commits of GROUP records each
                assert n == GROUP * snap.generation == GROUP * gens, (n, snap.generation, gens)
                seen.add(snap.generation)
            finally:
                snap.discard()
    finally:
        stop.set()
        t.join()
    assert len(seen) >= 3, seen  # taken at several states while commits went on
    assert committed


@pytest.mark.parametrize("in_memory_max", [1 << 30, 0], ids=["in-memory", "temporary-file"])
def test_a_snapshot_leaves_the_writers_lock_in_place(tmp_path, in_memory_max):
    """The tracker writes infofiles in the process that takes snapshots: a
    snapshot that read the file with ``open()`` and closed it dropped every
    POSIX lock the process held on it, the writer's RESERVED lock included,
    so another process could begin a write (or take the writer's journal for
    a hot one and roll it back: sqlite.org/howtocorrupt.html, 2.2.1)."""
    path = tmp_path / "inf"
    meta = {"file_id": 7, "name": "/s", "replication": "x1", "copies": 1, "blocksize": 16, "est_size": 0}
    create_infofile(path, {**meta, "created_at": 0, "owner": ""}, [(0, "peer-0", "h:0")])
    w = sqlite3.connect(path, isolation_level=None)
    w.execute("BEGIN IMMEDIATE")  # the writer's RESERVED lock, as in a group commit under way
    w.execute("UPDATE meta SET value = value WHERE key = 'generation'")
    try:
        take_snapshot(path, str(tmp_path), in_memory_max=in_memory_max).discard()
        other = "import sqlite3, sys; sqlite3.connect(sys.argv[1], timeout=0).execute('BEGIN IMMEDIATE')"
        r = subprocess.run([sys.executable, "-c", other, str(path)], capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and "database is locked" in r.stderr, "the writer's lock was dropped"
    finally:
        w.execute("ROLLBACK")
        w.close()

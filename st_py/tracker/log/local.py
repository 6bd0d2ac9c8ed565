"""The embedded default's metadata log: one tracker, a SQLite table on its
own disk (docs/metadata-log.md, "Backends").

Every append is durable before it returns (WAL, ``synchronous=FULL``), so
an entry acknowledged before a SIGKILL is there after the restart. The term
is bumped by each :meth:`LocalLog.open_term` (one per tracker start), so an
entry tells which run of the tracker appended it, as the replicated log's
term tells which leader did.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import uuid
from pathlib import Path

from st_py.tracker.log.entry import Entry
from st_py.tracker.log.errors import FencedError

SCHEMA = """
CREATE TABLE IF NOT EXISTS log(idx INTEGER PRIMARY KEY, term INTEGER NOT NULL, payload BLOB NOT NULL,
  applied INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS terms(term INTEGER PRIMARY KEY, started_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS compacted(id INTEGER PRIMARY KEY CHECK (id = 1), upto INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS ident(id INTEGER PRIMARY KEY CHECK (id = 1), log_id TEXT NOT NULL);
"""


class LocalLog:
    """The log in ``<state-dir>/log.db``.

    Thread-safe (one lock around the connection); the async methods run the
    SQLite work on the calling loop's default executor.

    Parameters
    ----------
    path : Path
        The database file (created with its folder).
    """

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.executescript(SCHEMA)
        self._term = 0

    def log_id(self) -> str:
        """This log's identity (``local:<uuid>``, made with the log): an index
        means something only together with it."""
        with self._lock:
            self._conn.execute("INSERT OR IGNORE INTO ident(id, log_id) VALUES (1, ?)", (f"local:{uuid.uuid4().hex}",))
            return str(self._conn.execute("SELECT log_id FROM ident").fetchone()[0])

    # -- terms ----------------------------------------------------------------------
    def open_term(self, now: float) -> int:
        """Start this tracker run's term (the last one + 1) and return it."""
        with self._lock:
            (last,) = self._conn.execute("SELECT coalesce(max(term), 0) FROM terms").fetchone()
            self._term = last + 1
            self._conn.execute("INSERT INTO terms(term, started_at) VALUES (?, ?)", (self._term, now))
            return self._term

    @property
    def term(self) -> int:
        """The term :meth:`open_term` started (0 before)."""
        return self._term

    # -- entries --------------------------------------------------------------------
    def last_index(self) -> int:
        """The index of the last entry (0 when empty)."""
        with self._lock:
            (last,) = self._conn.execute("SELECT coalesce(max(idx), 0) FROM log").fetchone()
            if last == 0:
                row = self._conn.execute("SELECT upto FROM compacted").fetchone()
                last = row[0] if row else 0
            return int(last)

    def append_now(self, payloads: list[bytes], term: int, applied: list[int] | None = None) -> int:
        """Append ``payloads`` as the next entries, durably, in one
        transaction; return the last entry's index. ``applied``: indexes of
        earlier entries to mark applied in the same transaction
        (:meth:`mark_applied`).

        Raises
        ------
        FencedError
            ``term`` is not this log's current term (a stale tracker run).
        """
        with self._lock:
            if term != self._term or term == 0:
                raise FencedError(term, self._term, "")
            (last,) = self._conn.execute("SELECT coalesce(max(idx), 0) FROM log").fetchone()
            if last == 0:
                row = self._conn.execute("SELECT upto FROM compacted").fetchone()
                last = row[0] if row else 0
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.executemany(
                    "INSERT INTO log(idx, term, payload) VALUES (?, ?, ?)",
                    [(last + 1 + i, term, p) for i, p in enumerate(payloads)],
                )
                if applied:
                    self._conn.executemany("UPDATE log SET applied = 1 WHERE idx = ?", [(i,) for i in applied])
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            return int(last + len(payloads))

    async def append(self, payloads: list[bytes], term: int) -> int:
        """:meth:`append_now` off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(None, self.append_now, payloads, term)

    def read_now(self, start: int, limit: int = 256) -> list[Entry]:
        """Up to ``limit`` entries from index ``start`` on, in order."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT idx, term, payload FROM log WHERE idx >= ? ORDER BY idx LIMIT ?", (start, limit)
            ).fetchall()
        return [Entry(i, t, bytes(p)) for i, t, p in rows]

    async def read(self, start: int, limit: int = 256) -> list[Entry]:
        """:meth:`read_now` off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(None, self.read_now, start, limit)

    def mark_applied(self, indexes: list[int], mark: int = 1) -> None:
        """Mark entries applied by their store and answered (``mark`` 1), or
        failed and answered so (-1, :meth:`mark_failed`)."""
        with self._lock:
            self._conn.executemany("UPDATE log SET applied = ? WHERE idx = ?", [(mark, i) for i in indexes])

    def mark_failed(self, index: int) -> None:
        """Mark entry ``index`` failed: its apply raised and its proposer was told."""
        self.mark_applied([index], -1)

    def marks(self, start: int) -> dict[int, int]:
        """The marks (1 applied, -1 failed) of the entries from ``start`` on that have one."""
        with self._lock:
            return dict(self._conn.execute("SELECT idx, applied FROM log WHERE idx >= ? AND applied != 0", (start,)))

    def compact_now(self, upto: int) -> None:
        """Drop the entries below ``upto`` (every store applied them)."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            self._conn.execute("DELETE FROM log WHERE idx < ?", (upto,))
            self._conn.execute(
                "INSERT INTO compacted(id, upto) VALUES (1, ?) ON CONFLICT(id) DO UPDATE SET upto = "
                "max(upto, excluded.upto)",
                (upto - 1,),
            )
            self._conn.execute("COMMIT")

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._conn.close()

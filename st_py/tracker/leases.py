"""Writer leases: one writer at a time may replace a file's records
(MORRIS, seed 003 section 3.2: multiple readers, a single writer;
docs/replication.md, "Versioned records").

A lease is granted for ``ttl`` seconds and renewed by its holder; a writer
that dies stops renewing and its lease runs out, so the next writer waits at
most one TTL.

Leases are kept on the tracker's disk (``<state-dir>/leases.db``, a
per-file tracker's ``leases-<shard>.db``) as they are granted, renewed and
released, so a tracker restart keeps them (issue 39: a restart used to end
every lease, and a writer's acknowledged records of that group were lost
with a ``lease-lost`` at its next commit). A restarted tracker gives each
kept lease at least one TTL from its start (HDFS's soft limit after a
NameNode restart): a writer that keeps renewing never notices, and a dead
writer's lease still runs out within one TTL more. The replicated tracker
will keep them in its log instead (docs/metadata-log.md).
"""

from __future__ import annotations

import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

DEFAULT_TTL_S = 10.0
MAX_TTL_S = 300.0
MIN_TTL_S = 0.5


@dataclass
class Lease:
    """One file's writer lease: its id, the user and holder (``host:pid``) that
    hold it, its TTL in seconds and when it expires (``time.monotonic()``)."""

    lease_id: str
    file_id: int
    user: str
    holder: str  # who holds it, as the writer described itself (host:pid)
    ttl_s: float
    expires: float  # time.monotonic()

    def expires_in(self) -> float:
        """Seconds until the lease expires (0 if it has)."""
        return max(0.0, self.expires - time.monotonic())


class LeaseHeld(Exception):
    """Another writer holds the lease (``lease``)."""

    def __init__(self, lease: Lease):
        super().__init__(lease.holder)
        self.lease = lease


class LeaseLost(Exception):
    """The lease is not (or no longer) held by the caller."""


class LeaseStore:
    """The leases on disk (one SQLite file, WAL): written on every grant,
    renewal and release, read once at start. Expiry is kept as a wall-clock
    time (``time.time()``), the only clock that survives a restart.
    Thread-safe."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS leases(file_id INTEGER PRIMARY KEY, lease_id TEXT NOT NULL, "
            "user TEXT NOT NULL, holder TEXT NOT NULL, ttl_s REAL NOT NULL, expires_at REAL NOT NULL)"
        )

    def save(self, lease: Lease) -> None:
        """Keep ``lease`` (replacing the file's row)."""
        expires_at = time.time() + lease.expires_in()
        with self._lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO leases VALUES (?, ?, ?, ?, ?, ?)",
                (lease.file_id, lease.lease_id, lease.user, lease.holder, lease.ttl_s, expires_at),
            )

    def forget(self, file_id: int) -> None:
        """The file's lease ended."""
        with self._lock:
            self._conn.execute("DELETE FROM leases WHERE file_id = ?", (file_id,))

    def load(self) -> list[tuple[int, str, str, str, float, float]]:
        """Every kept lease: ``(file_id, lease_id, user, holder, ttl_s, seconds left)``."""
        now = time.time()
        with self._lock:
            rows = self._conn.execute(
                "SELECT file_id, lease_id, user, holder, ttl_s, expires_at FROM leases"
            ).fetchall()
        return [(f, i, u, h, t, e - now) for f, i, u, h, t, e in rows]

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._conn.close()


class Leases:
    """The writer leases of every file, by file id; kept in ``store`` (a
    :class:`LeaseStore`) when given, and loaded from it."""

    def __init__(
        self, default_ttl_s: float = DEFAULT_TTL_S, max_ttl_s: float = MAX_TTL_S, store: LeaseStore | None = None
    ):
        self.default_ttl_s, self.max_ttl_s = default_ttl_s, max_ttl_s
        self._by_file: dict[int, Lease] = {}
        self._store = store
        if store is not None:
            for file_id, lease_id, user, holder, ttl_s, left in store.load():
                # at least one TTL from this start: the holder renews within it
                self._by_file[file_id] = Lease(
                    lease_id, file_id, user, holder, ttl_s, time.monotonic() + max(left, ttl_s)
                )

    def _save(self, lease: Lease) -> None:
        if self._store is not None:
            self._store.save(lease)

    def _forget(self, file_id: int) -> None:
        if self._store is not None:
            self._store.forget(file_id)

    def _ttl(self, ttl_s: float) -> float:
        return min(max(ttl_s or self.default_ttl_s, MIN_TTL_S), self.max_ttl_s)

    def _live(self, file_id: int) -> Lease | None:
        lease = self._by_file.get(file_id)
        if lease is not None and lease.expires <= time.monotonic():
            del self._by_file[file_id]
            self._forget(file_id)
            return None
        return lease

    def acquire(self, file_id: int, user: str, holder: str, ttl_s: float = 0.0) -> Lease:
        """A new lease on ``file_id``. Raises LeaseHeld if a live one exists."""
        held = self._live(file_id)
        if held is not None:
            raise LeaseHeld(held)
        ttl = self._ttl(ttl_s)
        lease = Lease(secrets.token_hex(8), file_id, user, holder or user, ttl, time.monotonic() + ttl)
        self._by_file[file_id] = lease
        self._save(lease)
        return lease

    def renew(self, file_id: int, lease_id: str, ttl_s: float = 0.0) -> Lease:
        """Extend a live lease. Raises LeaseLost if it has run out or was never granted."""
        lease = self.check(file_id, lease_id)
        lease.ttl_s = self._ttl(ttl_s or lease.ttl_s)
        lease.expires = time.monotonic() + lease.ttl_s
        self._save(lease)
        return lease

    def release(self, file_id: int, lease_id: str) -> None:
        """End the lease now (no error if it already ran out)."""
        lease = self._by_file.get(file_id)
        if lease is not None and lease.lease_id == lease_id:
            del self._by_file[file_id]
            self._forget(file_id)

    def check(self, file_id: int, lease_id: str) -> Lease:
        """The live lease ``lease_id`` on ``file_id``; raises LeaseLost."""
        lease = self._live(file_id)
        if lease is None or not lease_id or lease.lease_id != lease_id:
            raise LeaseLost(lease_id)
        return lease

    def drop(self, file_id: int) -> None:
        """The file is gone: its lease with it."""
        if self._by_file.pop(file_id, None) is not None:
            self._forget(file_id)

    def held(self) -> int:
        """Live leases (a metric)."""
        return sum(1 for f in list(self._by_file) if self._live(f) is not None)

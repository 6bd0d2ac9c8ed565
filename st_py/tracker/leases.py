"""Writer leases: one writer at a time may replace a file's records
(MORRIS, seed 003 section 3.2: multiple readers, a single writer;
docs/replication.md, "Versioned records").

A lease is granted for ``ttl`` seconds and renewed by its holder; a writer
that dies stops renewing and its lease runs out, so the next writer waits at
most one TTL. Leases live in the tracker's memory: a tracker restart ends
them all, and a writer's next commit of a new version fails with
``lease-lost`` (it acquires the lease again and retries).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

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


class Leases:
    """The writer leases of every file, by file id."""

    def __init__(self, default_ttl_s: float = DEFAULT_TTL_S, max_ttl_s: float = MAX_TTL_S):
        self.default_ttl_s, self.max_ttl_s = default_ttl_s, max_ttl_s
        self._by_file: dict[int, Lease] = {}

    def _ttl(self, ttl_s: float) -> float:
        return min(max(ttl_s or self.default_ttl_s, MIN_TTL_S), self.max_ttl_s)

    def _live(self, file_id: int) -> Lease | None:
        lease = self._by_file.get(file_id)
        if lease is not None and lease.expires <= time.monotonic():
            del self._by_file[file_id]
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
        return lease

    def renew(self, file_id: int, lease_id: str, ttl_s: float = 0.0) -> Lease:
        """Extend a live lease. Raises LeaseLost if it has run out or was never granted."""
        lease = self.check(file_id, lease_id)
        lease.ttl_s = self._ttl(ttl_s or lease.ttl_s)
        lease.expires = time.monotonic() + lease.ttl_s
        return lease

    def release(self, file_id: int, lease_id: str) -> None:
        """End the lease now (no error if it already ran out)."""
        lease = self._by_file.get(file_id)
        if lease is not None and lease.lease_id == lease_id:
            del self._by_file[file_id]

    def check(self, file_id: int, lease_id: str) -> Lease:
        """The live lease ``lease_id`` on ``file_id``; raises LeaseLost."""
        lease = self._live(file_id)
        if lease is None or not lease_id or lease.lease_id != lease_id:
            raise LeaseLost(lease_id)
        return lease

    def drop(self, file_id: int) -> None:
        """The file is gone: its lease with it."""
        self._by_file.pop(file_id, None)

    def held(self) -> int:
        """Live leases (a metric)."""
        return sum(1 for f in list(self._by_file) if self._live(f) is not None)

"""Writer leases: one writer at a time may replace a file's records
(MORRIS, seed 003 section 3.2: multiple readers, a single writer;
docs/replication.md, "Versioned records").

A lease is granted for ``ttl`` seconds and renewed by its holder; a writer
that dies stops renewing and its lease runs out, so the next writer waits at
most one TTL.

Leases are replicated state (issue 39): every grant, renewal and release is
an operation of the tracker's metadata log (``grant_lease``,
``renew_lease``, ``release_lease``: st_py/tracker/apply/ops.py), appended
before the writer hears of it and applied here (:meth:`Leases.apply`). A
restarted tracker, and a standby elected after a leader's failover, replay
the log's window (10 minutes, longer than the longest TTL, and each renewal
carries the whole lease) and so know every lease the last leader granted;
each gets at least one TTL from that start (HDFS's soft limit after a
NameNode restart): a writer that keeps renewing never notices, and a dead
writer's lease still runs out within one TTL more. An acquire carries a
request id, so a retry across a failover gets the lease its first try was
granted instead of finding it held by itself.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

DEFAULT_TTL_S = 10.0
MAX_TTL_S = 300.0
MIN_TTL_S = 0.5

# The metadata log's operations on leases (args: see Leases.op_args).
LEASE_OPS = frozenset({"grant_lease", "renew_lease", "release_lease"})


@dataclass
class Lease:
    """One file's writer lease: its id, the user and holder (``host:pid``) that
    hold it, its TTL in seconds, when it expires (``time.monotonic()``) and
    the request id of the acquire that was granted it."""

    lease_id: str
    file_id: int
    user: str
    holder: str  # who holds it, as the writer described itself (host:pid)
    ttl_s: float
    expires: float  # time.monotonic()
    request_id: str = ""

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
    """The writer leases of every file, by file id. A handler decides a
    change here (:meth:`acquire`, :meth:`renew`, :meth:`release`: at once,
    so a second acquire on the event loop sees the first), then appends its
    operation (:meth:`op_args`) to the metadata log and applies it
    (:meth:`apply`, which a replay repeats). Not thread-safe: used on the
    tracker's event loop."""

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

    def granted_to(self, file_id: int, request_id: str) -> Lease | None:
        """The live lease of ``file_id`` if the acquire ``request_id`` was
        granted it (a retry of that acquire), else None."""
        lease = self._live(file_id)
        if lease is not None and request_id and lease.request_id == request_id:
            return lease
        return None

    def acquire(self, file_id: int, user: str, holder: str, ttl_s: float = 0.0, request_id: str = "") -> Lease:
        """A new lease on ``file_id``. Raises LeaseHeld if a live one exists."""
        held = self._live(file_id)
        if held is not None:
            raise LeaseHeld(held)
        ttl = self._ttl(ttl_s)
        lease = Lease(secrets.token_hex(8), file_id, user, holder or user, ttl, time.monotonic() + ttl, request_id)
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

    @staticmethod
    def op_args(lease: Lease) -> tuple:
        """The log operation's arguments for ``lease`` (every kind carries the
        whole lease, so a replay that sees only its last renewal knows it):
        ``(lease_id, user, holder, ttl_s, request_id)``."""
        return (lease.lease_id, lease.user, lease.holder, lease.ttl_s, lease.request_id)

    def apply(self, kind: str, file_id: int, args: tuple, at: float) -> None:
        """Apply the log operation ``kind`` (one of :data:`LEASE_OPS`) made at
        ``at`` (unix s): a grant or renewal keeps the lease until ``at`` plus
        its TTL, a release ends it if it is still that lease. Idempotent: the
        leader applies what it decided, a replay the same again."""
        lease_id, user, holder, ttl_s, request_id = args
        if kind == "release_lease":
            self.release(file_id, str(lease_id))
            return
        expires = time.monotonic() + (float(at) + float(ttl_s) - time.time())
        lease = self._by_file.get(file_id)
        if lease is not None and lease.lease_id == lease_id:
            lease.ttl_s, lease.expires = float(ttl_s), max(lease.expires, expires)
        else:
            self._by_file[file_id] = Lease(
                str(lease_id), file_id, str(user), str(holder), float(ttl_s), expires, str(request_id)
            )

    def live(self) -> list[tuple[int, tuple, float]]:
        """Every live lease as ``(file_id, op args, at)``: what a grant
        logged at ``at`` (unix s) would make (a checkpoint keeps them)."""
        now, wall = time.monotonic(), time.time()
        return [
            (f, self.op_args(lease), wall + (lease.expires - now) - lease.ttl_s)
            for f, lease in list(self._by_file.items())
            if self._live(f) is not None
        ]

    def restarted(self, last_at: float = 0.0) -> int:
        """After a replay at start (a restart, a standby elected): every lease
        the log kept gets at least one TTL from now, the time its holder needs
        to renew it here, except one that ran out before ``last_at`` (unix s,
        the time of the log's last entry: the last leader was alive then and
        would have refused it). Returns how many are kept."""
        now, wall = time.monotonic(), time.time()
        for file_id, lease in list(self._by_file.items()):
            if wall + (lease.expires - now) < last_at:
                del self._by_file[file_id]
            else:
                lease.expires = max(lease.expires, now + lease.ttl_s)
        return len(self._by_file)

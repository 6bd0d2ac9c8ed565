"""Versioned records under a writer lease (MORRIS, seed 003 section 3.2:
multiple readers, a single writer; docs/replication.md, "Versioned records").

Records are write-once by default (paper 2.1). ``put(name, data,
replace=True)`` stores a new version instead: its copies go to the peers
under a name of their own (``.st-version/<lease>-<n>/<name>``), so the copies
of the old and the new version never mix, and the commit that makes it
current moves the old version's copies to ``copy_history`` in the same
transaction. A reader therefore sees the old version or the new one, whole,
and a GET_LOCAL reveals the version current at its plan's generation.

Only the holder of the file's writer lease may commit new versions: the
tracker grants one lease per file, for a TTL the holder renews; a writer that
dies stops renewing, and the next writer gets the lease within one TTL.
:class:`Versions` holds this writer's lease for one open file
(:class:`st_py.client.file.StFile` delegates its lease methods to it).
"""

from __future__ import annotations

import os
import socket
import time

from st_py.client.file_context import FileContext
from st_py.core.infofile import VERSION_PREFIX
from st_py.errors import LeaseHeldError, LeaseLostError

RENEW_AFTER = 1 / 3  # renew once this fraction of the TTL has passed


class Versions:
    """The writer lease of one open file and the names of the new versions
    written under it: owns the lease's id, TTL, renewal time and the
    versions' sequence number.

    Thread safety: not safe to share between threads by itself; it runs
    inside its file's public methods, one at a time under the file's lock.
    """

    def __init__(self, ctx: FileContext):
        self.ctx = ctx
        self.lease_id = ""
        self.lease_ttl = 0.0  # seconds, as granted
        self._renew_at = 0.0  # time.monotonic()
        self._seq = 0

    @property
    def lease(self) -> dict | None:
        """This writer's lease as ``{"lease_id", "ttl_s"}``, or None."""
        return {"lease_id": self.lease_id, "ttl_s": self.lease_ttl} if self.lease_id else None

    def acquire_lease(self, ttl: float | None = None, wait: float = 0.0) -> dict:
        """Take the writer lease: :meth:`st_py.client.file.StFile.acquire_lease` (the public docstring)."""
        self.ctx.check_open()
        if self.lease_id:
            self.renew_lease(force=True)
            return self.lease  # type: ignore[return-value]
        deadline = time.monotonic() + wait
        while True:
            try:
                reply = self.ctx.file_tracker_call(
                    "lease",
                    self.ctx.name,
                    self.ctx.file_id,
                    ttl_s=ttl or 0.0,
                    holder=f"{socket.gethostname()}:{os.getpid()}",
                )
                break
            except LeaseHeldError as e:
                e.file = self.ctx.name
                left = deadline - time.monotonic()
                if left <= 0:
                    raise
                time.sleep(min(max(e.expires_in, 0.05), left, 0.5))
        self.lease_id, self.lease_ttl = reply.lease_id, reply.expires_in_s
        self._renew_at = time.monotonic() + reply.expires_in_s * RENEW_AFTER
        return self.lease  # type: ignore[return-value]

    def release_lease(self) -> None:
        """Give the writer lease back: :meth:`st_py.client.file.StFile.release_lease` (the public docstring)."""
        lease_id, self.lease_id = self.lease_id, ""
        if lease_id:
            self.ctx.file_tracker_call("lease", self.ctx.name, self.ctx.file_id, lease_id=lease_id, release=True)

    def renew_lease(self, force: bool = False) -> None:
        """Renew the lease held when a third of its TTL has passed (at once
        when ``force``).

        Raises
        ------
        LeaseLostError
            It ran out and another writer may have it (no lease is held now).
        """
        if not self.lease_id or (not force and time.monotonic() < self._renew_at):
            return
        try:
            reply = self.ctx.file_tracker_call(
                "lease", self.ctx.name, self.ctx.file_id, lease_id=self.lease_id, ttl_s=self.lease_ttl
            )
        except LeaseLostError as e:
            self.lease_id = ""
            e.file = self.ctx.name
            raise
        self._renew_at = time.monotonic() + reply.expires_in_s * RENEW_AFTER

    def lease_lost(self) -> None:
        """The tracker refused a commit for a lost lease: the next new
        version takes it again."""
        self.lease_id = ""

    def lease_for_put(self) -> str:
        """The lease a new version is written under: held (renewed when due)
        or taken now. A lease that ran out is taken again if it is free."""
        if self.lease_id:
            try:
                self.renew_lease()
            except LeaseLostError:
                pass
        if not self.lease_id:
            self.acquire_lease(self.lease_ttl or None)
        return self.lease_id

    def lease_for_commit(self) -> str:
        """The lease id to commit new versions with (renewed when due); ""
        if none is held, which the tracker refuses."""
        try:
            self.renew_lease()
        except LeaseLostError:
            return ""
        return self.lease_id

    def version_key(self, name: str) -> str:
        """A name of its own for a new version of ``name`` on the peers."""
        self._seq += 1
        return f"{VERSION_PREFIX}{self.lease_for_put()}-{self._seq}/{name}"


__all__ = ["Versions", "RENEW_AFTER"]

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
dies stops renewing, and the next writer gets the lease within one TTL. A
mixin of :class:`st_py.file.StFile`.
"""

from __future__ import annotations

import os
import socket
import time
from typing import TYPE_CHECKING

from .errors import LeaseHeldError, LeaseLostError
from .infofile import VERSION_PREFIX

RENEW_AFTER = 1 / 3  # renew once this fraction of the TTL has passed


class VersionsMixin:
    if TYPE_CHECKING:  # provided by StFile
        from .tracker_client import TrackerClient

        name: str
        file_id: int
        _tracker: TrackerClient

        def check_open(self) -> None: ...

        def _file_tracker_call(self, method: str, *args, **kwargs): ...

    _lease_id: str = ""
    _lease_ttl: float = 0.0  # seconds, as granted
    _lease_renew_at: float = 0.0  # time.monotonic()
    _lease_seq: int = 0

    @property
    def lease(self) -> dict | None:
        """This writer's lease as ``{"lease_id", "ttl_s"}``, or None."""
        return {"lease_id": self._lease_id, "ttl_s": self._lease_ttl} if self._lease_id else None

    def acquire_lease(self, ttl: float | None = None, wait: float = 0.0) -> dict:
        """Take the file's writer lease, which ``put(..., replace=True)``
        needs (it takes it by itself otherwise). Renewed as this file is
        used; released by :meth:`release_lease` or :meth:`close`.

        Parameters
        ----------
        ttl : float, optional
            Seconds the lease lasts unless renewed (tracker default 10 s,
            at most 300 s): how long other writers wait if this one dies.
        wait : float
            Seconds to keep trying while another writer holds it.

        Returns
        -------
        dict
            ``{"lease_id", "ttl_s"}``.

        Raises
        ------
        LeaseHeldError
            Another writer holds it (``holder``, ``expires_in``) past ``wait``.
        """
        self.check_open()
        if self._lease_id:
            self._renew_lease(force=True)
            return self.lease  # type: ignore[return-value]
        deadline = time.monotonic() + wait
        while True:
            try:
                reply = self._file_tracker_call(
                    "lease", self.name, self.file_id, ttl_s=ttl or 0.0, holder=f"{socket.gethostname()}:{os.getpid()}"
                )
                break
            except LeaseHeldError as e:
                e.file = self.name
                left = deadline - time.monotonic()
                if left <= 0:
                    raise
                time.sleep(min(max(e.expires_in, 0.05), left, 0.5))
        self._lease_id, self._lease_ttl = reply.lease_id, reply.expires_in_s
        self._lease_renew_at = time.monotonic() + reply.expires_in_s * RENEW_AFTER
        return self.lease  # type: ignore[return-value]

    def release_lease(self) -> None:
        """Give the writer lease back, so another writer may replace records
        at once. Commit first (:meth:`flush`): new versions not committed
        by now are not committed."""
        lease_id, self._lease_id = self._lease_id, ""
        if lease_id:
            self._file_tracker_call("lease", self.name, self.file_id, lease_id=lease_id, release=True)

    def _renew_lease(self, force: bool = False) -> None:
        if not self._lease_id or (not force and time.monotonic() < self._lease_renew_at):
            return
        try:
            reply = self._file_tracker_call(
                "lease", self.name, self.file_id, lease_id=self._lease_id, ttl_s=self._lease_ttl
            )
        except LeaseLostError as e:
            self._lease_id = ""
            e.file = self.name
            raise
        self._lease_renew_at = time.monotonic() + reply.expires_in_s * RENEW_AFTER

    def _lease_for_put(self) -> str:
        """The lease a new version is written under: held (renewed when due)
        or taken now. A lease that ran out is taken again if it is free."""
        if self._lease_id:
            try:
                self._renew_lease()
            except LeaseLostError:
                pass
        if not self._lease_id:
            self.acquire_lease(self._lease_ttl or None)
        return self._lease_id

    def _lease_for_commit(self) -> str:
        """The lease id to commit new versions with (renewed when due); ""
        if none is held, which the tracker refuses."""
        try:
            self._renew_lease()
        except LeaseLostError:
            return ""
        return self._lease_id

    def _version_key(self, name: str) -> str:
        """A name of its own for a new version of ``name`` on the peers."""
        self._lease_seq += 1
        return f"{VERSION_PREFIX}{self._lease_for_put()}-{self._lease_seq}/{name}"

"""The writer lease's RPC and checks.

A part of the tracker's gRPC servicer (proto/storetorrent/v1/tracker.proto),
composed in st_py/tracker/service.py (the master) and
st_py/tracker/file_tracker.py (a per-file tracker).
"""

from __future__ import annotations

import logging

import grpc

from st_py._proto import tracker_pb2 as pb
from st_py.core import capability
from st_py.errors import ERROR_KIND_KEY

from ..leases import LeaseHeld, LeaseLost, Leases
from .parts import TrackerParts

log = logging.getLogger("st.tracker")

FILE_OPS = capability.READ | capability.WRITE | capability.DELETE
MAX_SCHEMA_BYTES = 1 << 20  # one record schema kept in an infofile (Arrow IPC)


class LeaseRpc(TrackerParts):
    """The servicer's part for the writer lease (st_py/tracker/leases.py):
    Lease, and the check a replacing commit makes.

    Not thread-safe: runs on the tracker's event loop (see
    :class:`~st_py.tracker.service.TrackerService`)."""

    async def _check_lease(self, context, name: str, file_id: int, lease_id: str) -> None:
        """New versions commit only under the file's live writer lease."""
        try:
            self.leases.check(file_id, lease_id)
        except LeaseLost:
            await self._lease_lost(context, name, lease_id)

    async def _lease_lost(self, context, name: str, lease_id: str) -> None:
        await context.abort(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"replacing records of {name} needs its writer lease, and lease "
            f"{lease_id or '(none)'} is not held (expired, released, or the tracker "
            "restarted); acquire it again",
            trailing_metadata=((ERROR_KIND_KEY, "lease-lost"),),
        )

    async def Lease(self, request, context):
        """Acquire, renew or release a file's writer lease (MORRIS 3.2): kept
        by the tracker that writes the file, which checks it at commit."""
        user = await self.authenticate(context, request.user)
        name = await self._name(context, request.name)
        if not await self._here(context, name):
            return await self._forward(context, "Lease", request, user, name)
        c = await self._open_committer(context, name, request.file_id)
        await self._admit(context, user, name, c, "write")
        file_id = c.meta.file_id
        if request.release:
            self.leases.release(file_id, request.lease_id)
            await self._log_lease(name, file_id, "release_lease", (request.lease_id, "", "", 0.0, ""))
            log.info("%s: writer lease released by %s", name, user.name)
            return pb.LeaseReply(lease_id=request.lease_id, expires_in_s=0.0)
        if request.lease_id:
            try:
                lease = self.leases.renew(file_id, request.lease_id, request.ttl_s)
            except LeaseLost:
                await self._lease_lost(context, name, request.lease_id)
            await self._log_lease(name, file_id, "renew_lease", Leases.op_args(lease))
            return pb.LeaseReply(lease_id=lease.lease_id, expires_in_s=lease.expires_in())
        granted = self.leases.granted_to(file_id, request.request_id)
        if granted is not None:  # a retry of an acquire granted before (a lost reply, a failover)
            log.info("%s: writer lease acquire %s retried: already granted", name, request.request_id)
            return pb.LeaseReply(lease_id=granted.lease_id, expires_in_s=granted.expires_in())
        try:
            lease = self.leases.acquire(file_id, user.name, request.holder, request.ttl_s, request.request_id)
        except LeaseHeld as e:
            held = e.lease
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"the writer lease of {name} is held by {held.holder} (user {held.user}) for "
                f"{held.expires_in():.1f} s more; only one writer may replace records at a time",
                trailing_metadata=(
                    (ERROR_KIND_KEY, "lease-held"),
                    ("st-lease-holder", held.holder),
                    ("st-lease-expires-in", f"{held.expires_in():.3f}"),
                ),
            )
        try:
            await self._log_lease(name, file_id, "grant_lease", Leases.op_args(lease))
        except BaseException:
            self.leases.release(file_id, lease.lease_id)  # never granted: nobody heard of it
            raise
        log.info("%s: writer lease granted to %s (%s) for %.1f s", name, lease.holder, user.name, lease.ttl_s)
        return pb.LeaseReply(lease_id=lease.lease_id, expires_in_s=lease.expires_in())

    async def _log_lease(self, name: str, file_id: int, kind: str, args: tuple) -> None:
        """Append the lease operation ``kind`` and apply it (the lease was
        decided in :attr:`leases` already; applying it again is what a replay
        does), before the writer hears. Raises what the log's append raises."""
        await self._log_state(kind, name, args, file_id)

"""The tracker's gRPC servicer (proto/storetorrent/v1/tracker.proto): the
master's, composed of the parts in st_py/tracker/rpc/ (one role each) and
the master's routing of per-file trackers' writes (routing.py).

Mutating operations (create, commit, delete) are serialised by the tracker,
one SQLite transaction each (paper 3: "Trackers ... serialize create, write,
and delete operations"). Reads of record metadata never come here: clients
open the infofiles read-only (or a copy of them, docs/metadata-fetch.md).
"""

from __future__ import annotations

import time
from pathlib import Path

from st_py._proto import tracker_pb2_grpc as pb_grpc
from st_py.core.copy_health import DEFAULT_FAILED_AFTER_S

from .access import Users
from .admission import Admissions
from .apply.backends import LocalBackend
from .apply.oplog import OpLog
from .guard import Guard
from .health import CopyHealth
from .leases import Leases
from .peers import PeerRegistry
from .reservations import Reservations
from .routing import Routing
from .rpc.fetch_rpc import FetchRpc
from .rpc.identity import Identity
from .rpc.infofiles import Infofiles
from .rpc.leases_rpc import LeaseRpc
from .rpc.log_apply import LogApply
from .rpc.namespace_rpc import NamespaceRpc
from .rpc.peers_rpc import PeerRpc
from .rpc.records_rpc import RecordRpc, refuse_if_snapshots
from .rpc.status_rpc import StatusRpc
from .state import TrackerState
from .tracker_ops import TrackerStateOps

__all__ = ["TrackerService", "refuse_if_snapshots"]


class TrackerService(
    Identity,
    Infofiles,
    NamespaceRpc,
    RecordRpc,
    LeaseRpc,
    PeerRpc,
    StatusRpc,
    FetchRpc,
    LogApply,
    Routing,
    pb_grpc.TrackerServicer,
):
    """The tracker's gRPC servicer: one method per rpc of ``service Tracker``
    (proto/storetorrent/v1/tracker.proto), over the tracker's state, peer
    registry, permission guard, reservations, leases and one
    :class:`~.committer.Committer` per open infofile; with per-file trackers
    (paper 3.5) it forwards or admits what another tracker writes (``Routing``).

    Handlers abort the RPC (``context.abort``) with a gRPC status code on a
    refusal: UNAUTHENTICATED, PERMISSION_DENIED, RESOURCE_EXHAUSTED (quota),
    NOT_FOUND, INVALID_ARGUMENT...

    Not thread-safe: every handler runs on the server's one asyncio event loop,
    where this state changes; blocking work goes to worker threads
    (``asyncio.to_thread``) that only read it."""

    def __init__(
        self,
        root: Path,
        state: TrackerState,
        registry: PeerRegistry,
        quota_bytes: int | None = None,
        key: bytes | None = None,
        capability_ttl_s: float = 3600.0,
        users: Users | None = None,
        reservation_lease_s: float = 900.0,
    ):
        self._init_identity(key, users, capability_ttl_s)
        # every change of an infofile is appended to the log before it is applied (docs/metadata-log.md;
        # serve() may put the replicated log in its place before it starts it); writer leases for
        # replacing records are replicated state through it (leases.py), so a failover keeps them
        self._init_infofiles(root, OpLog(LocalBackend(state.dir / "log.db")), Leases())
        self.state = state
        self.registry = registry
        self.quota_bytes = quota_bytes
        self.guard = Guard(root, state, self.users)
        # Space reservations of files being written (docs/replication.md)
        self.reservations = Reservations(state, reservation_lease_s)
        self.reservations.load(self._committed_bytes)
        self.guard.reserved_of = self.reservations.of_owner
        # the one place the log's operations on the tracker's own state are applied
        self.tracker_ops = TrackerStateOps(state, registry, self.leases, self.reservations)
        # Per-file trackers (paper 3.5): who writes which infofile; commits admitted for them (routing.py)
        self._init_routing(key)
        self.admissions = Admissions(self.guard, self.reservations, registry)
        # Records short of copies, counted every few seconds (health.keep_counting, started by serve())
        self.copy_health = CopyHealth()
        # --failed-after: a peer failed this long is lost (st_py/core/copy_health.py); the Status reply carries it
        self.failed_after_s = DEFAULT_FAILED_AFTER_S
        self.repair_progress = None  # the repair service's last report
        self.serving_since = time.monotonic()  # serve() sets it when the server starts

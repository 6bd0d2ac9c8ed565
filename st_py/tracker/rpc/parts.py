"""What every part of the tracker's servicer may read: the state the
composed servicer's ``__init__`` sets up, declared once (for readers and for
the type checker), and the two setups the master and the per-file trackers
share."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from st_py._proto import tracker_pb2 as pb

from ..access import Users
from ..admission import Admissions
from ..apply.oplog import OpLog
from ..changeset_window import CopyDemand
from ..committer import CommitStats, Committer
from ..file_quota import QuotaTurns
from ..guard import Guard
from ..health import CopyHealth, RepairProgress
from ..infofile_writer import DEFAULT_HISTORY_AGE_S
from ..leases import Leases
from ..log.errors import StandbyBehindError
from ..peer_files import PeerFiles
from ..peers import PeerRegistry
from ..reservations import Reservations
from ..shards import InternalTokens
from ..state import TrackerState
from ..tracker_ops import TrackerStateOps


class TrackerParts:
    """The state a tracker servicer's parts share (st_py/tracker/rpc/).

    A master has all of it; a per-file tracker (paper 3.5) has no
    ``state``, ``registry``, ``guard``, ``reservations`` or ``admissions``
    (they are the master's) and never runs the parts that read them."""

    history_age_s = DEFAULT_HISTORY_AGE_S  # --history-age (docs/snapshots.md, "Retention")

    # who is asking (identity.py)
    key: bytes | None
    capability_ttl_s: float
    users: Users
    mutual_tls: bool
    internal_key: bytes
    internal: InternalTokens
    # the infofiles this tracker writes (infofiles.py)
    root: os.PathLike
    _schemas_seen: set[tuple[str, bytes]]
    _committers: dict[str, Committer]
    copy_demand: CopyDemand
    commit_stats: CommitStats
    _peer_ids: dict[int, dict[int, str]]
    _quota_turns: QuotaTurns
    _creating: dict[str, int]
    peer_files: PeerFiles
    oplog: OpLog
    leases: Leases
    tracker_ops: TrackerStateOps
    _recount_usage: bool
    # the master's
    quota_bytes: int | None
    state: TrackerState
    registry: PeerRegistry
    guard: Guard
    reservations: Reservations
    admissions: Admissions
    copy_health: CopyHealth
    failed_after_s: float
    repair_progress: RepairProgress | None
    serving_since: float
    # per-file trackers (routing.py, file_tracker.py)
    shard: int
    shards: int
    file_trackers: Any
    # a standby with a namespace of its own, behind the log's first entry: makes its namespace a
    # live replica's and returns the index to follow from (st_py/tracker/bootstrap.py; set by serve())
    copy_namespace: Callable[[StandbyBehindError], Awaitable[int]] | None = None

    if TYPE_CHECKING:  # what one part calls of another (defined by the part named)

        def _committer(self, name: str) -> Committer | None: ...  # infofiles.py
        def _drop_committer(self, name: str) -> None: ...  # infofiles.py
        def _committed_bytes(self, name: str, file_id: int) -> int | None: ...  # infofiles.py
        def _peer_msg(self, idx: int, peer_id: str, fallback_addr: str) -> pb.Peer: ...  # peers_rpc.py
        async def _log_state(self, kind: str, name: str, args: tuple, file_id: int = 0) -> None: ...  # log_apply.py
        def file_tracker_of(self, name: str) -> str: ...  # routing.py (master)
        async def _here(self, context, name: str) -> bool: ...  # routing.py, file_tracker.py
        async def _control(  # routing.py (master)
            self, context, name: str, op: str, file_id: int = 0, **fields
        ) -> pb.FileControlReply: ...

    def _init_identity(self, key: bytes | None, users: Users | None, capability_ttl_s: float) -> None:
        self.key = key
        self.capability_ttl_s = capability_ttl_s
        self.users = users or Users()
        self.mutual_tls = False  # set by serve(): client certificates name the user

    def _init_infofiles(self, root: Path, oplog: OpLog, leases: Leases) -> None:
        self.root = root
        self._schemas_seen = set()  # record schemas already checked
        self._committers = {}  # name -> the committer of its open infofile
        self.copy_demand = CopyDemand()  # files somebody keeps a copy of: their writers keep changesets
        self.commit_stats = CommitStats()  # of every committer (metrics)
        self._peer_ids = {}  # file id -> {peer_idx: peer_id}, for commits
        self._quota_turns = QuotaTurns()  # a file's commits one at a time under a per-file quota
        self._creating = {}  # names being created: RemoveDir keeps their directories
        self.peer_files = PeerFiles()  # which files name which peer: announce replies (peer_files.py)
        self.oplog = oplog  # every change of an infofile is appended here before it is applied
        self.leases = leases  # writer leases: replicated state, through the metadata log
        self._recount_usage = False  # load_checkpoint learned the files: count usage after the replay

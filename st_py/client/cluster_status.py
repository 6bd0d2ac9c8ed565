"""The cluster's status as plain data (:meth:`st_py.client.client.Client.status`;
docs/operations.md, "Status page").

The tracker answers ``Status`` with a protobuf ``StatusReply``; clients get
:class:`ClusterStatus`, frozen dataclasses whose fields are the reply's,
by the same names (so ``st.peers[0].alive`` reads as before), nested
messages as their own dataclasses and repeated fields as tuples, made by
the one conversion of :mod:`st_py.client.plain_reply`.

Thread safety: immutable values; share them freely.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from st_py.client.plain_reply import plain


@dataclass(frozen=True, slots=True)
class PeerStatus:
    """One peer as the tracker sees it.

    Attributes
    ----------
    peer_idx : int
        Index in a file's peerlist (0 in the cluster's status).
    peer_id : str
        Stable identity, kept in the peer's data directory.
    addr : str
        ``host:port`` of its data protocol.
    alive : bool
        Announced within the liveness window.
    capacity_bytes, used_bytes, free_bytes, reserved_bytes : int
        Bytes; reserved: held for files being written (docs/replication.md).
    records : int
        Copies held, all files.
    last_announce_age_s : float
        Seconds since its last announce.
    load : float
        Its event loop's busy fraction (0..1) over its last announce interval.
    drain_state : str
        ``""`` in service, ``"draining"`` or ``"retired"`` (``storetorrent drain``).
    name : str
        The last component of its data directory (``peer-1``).
    uptime_s : float
        Seconds since its process started (0: unknown).
    restarts : int
        Process restarts the tracker has seen.
    fs_id : str
        The filesystem of its data directory (``host:st_dev``).
    domain : str
        Its failure domain (``site/rack/host``; docs/replication.md).
    returns : int
        Times it announced again after the tracker had failed it.
    copies, copies_behind, copies_max_lag : int
        Its infofile copies (``--metadata fetch``): held, behind, the largest lag.
    copies_caught_up_at : float
        Unix time its copies were last all caught up (0: never).
    """

    peer_idx: int
    peer_id: str
    addr: str
    alive: bool
    capacity_bytes: int
    used_bytes: int
    free_bytes: int
    records: int
    last_announce_age_s: float
    reserved_bytes: int
    load: float
    drain_state: str
    name: str
    uptime_s: float
    restarts: int
    fs_id: str
    domain: str
    returns: int
    copies: int
    copies_behind: int
    copies_max_lag: int
    copies_caught_up_at: float


@dataclass(frozen=True, slots=True)
class RepairServiceStatus:
    """The repair service's last report (docs/operations.md, "Repair").

    Attributes
    ----------
    repairer : str
        ``host:pid`` of the reporter; ``""``: no repair service has reported.
    age_s : float
        Seconds since that report.
    running : bool
        A pass is in progress.
    reason : str
        Why the pass ran (``start``, ``interval``, ``peer returned ...``).
    files_done, files_total : int
        Of the pass in progress, or of the last one.
    copies_stored : int
        Pending copies stored by that pass.
    copies_restored : int
        Copies of lost peers restored elsewhere by that pass.
    records_left : int
        Records that pass could not bring back to F copies.
    pass_seconds : float
        How long that pass has run (or ran).
    passes : int
        Passes finished since the service started.
    """

    repairer: str
    age_s: float
    running: bool
    reason: str
    files_done: int
    files_total: int
    copies_stored: int
    copies_restored: int
    records_left: int
    pass_seconds: float
    passes: int


@dataclass(frozen=True, slots=True)
class FileTrackerStatus:
    """One per-file tracker the master runs (docs/metadata-log.md).

    Attributes
    ----------
    shard, shards : int
        Its shard and the count (N + 1).
    addr : str
        ``host:port`` clients are redirected to (``""``: not running).
    alive : bool
    pid : int
    restarts : int
        Times the master started it again after it died.
    uptime_s : float
        Since its last start (0: not running).
    commits, records : int
        Commit requests the master admitted for its files, and their records.
    """

    shard: int
    shards: int
    addr: str
    alive: bool
    pid: int
    restarts: int
    uptime_s: float
    commits: int
    records: int


@dataclass(frozen=True, slots=True)
class TrackerReplicaStatus:
    """One tracker of a replicated tracker (docs/metadata-log.md).

    Attributes
    ----------
    addr, role : str
        Its address; ``leader`` or ``standby``.
    term : int
        The term it leads (a leader).
    host : str
    pid : int
    applied_index : int
        The log entries applied (a leader's; a standby applies at its election).
    up_s : float
    fetch_addr : str
        Where a standby that follows the log serves FetchInfofile (``""``: none).
    """

    addr: str
    role: str
    term: int
    host: str
    pid: int
    applied_index: int
    up_s: float
    fetch_addr: str


@dataclass(frozen=True, slots=True)
class ConsensusMemberStatus:
    """One member of the consensus service (etcd).

    Attributes
    ----------
    endpoint : str
    healthy : bool
        It answered a status request within 1 s.
    detail : str
        What failed, if not.
    raft_leader : bool
    raft_index, raft_term : int
    version : str
    """

    endpoint: str
    healthy: bool
    detail: str
    raft_leader: bool
    raft_index: int
    raft_term: int
    version: str


@dataclass(frozen=True, slots=True)
class FailoverEvent:
    """One change of the leading tracker.

    Attributes
    ----------
    term : int
    leader : str
        The tracker elected.
    at : float
        Unix seconds.
    previous : str
        The leader before it (``""``: none).
    reason : str
        Why the lead changed.
    """

    term: int
    leader: str
    at: float
    previous: str
    reason: str


@dataclass(frozen=True, slots=True)
class MetadataLogState:
    """The metadata log and, with etcd, the replicated trackers
    (docs/metadata-log.md).

    Attributes
    ----------
    backend : str
        ``local`` or ``etcd <endpoints> cluster <id>``.
    term : int
        This tracker's term.
    last_index, applied_index : int
        The last entry appended; every entry up to it applied here.
    trackers : tuple[TrackerReplicaStatus, ...]
    members : tuple[ConsensusMemberStatus, ...]
    failovers : tuple[FailoverEvent, ...]
        Newest first.
    """

    backend: str
    term: int
    last_index: int
    applied_index: int
    trackers: tuple[TrackerReplicaStatus, ...]
    members: tuple[ConsensusMemberStatus, ...]
    failovers: tuple[FailoverEvent, ...]

    NESTED: ClassVar[dict[str, type]] = {
        "trackers": TrackerReplicaStatus,
        "members": ConsensusMemberStatus,
        "failovers": FailoverEvent,
    }


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    """The cluster as the tracker sees it (``storetorrent status``).

    Attributes
    ----------
    peers : tuple[PeerStatus, ...]
    files : int
    alive_peers, failed_peers : int
    capacity_bytes, free_bytes : int
        Each filesystem counted once, however many live peers store on it.
    used_bytes : int
        Bytes the live peers hold.
    filesystems : int
        Distinct filesystems of the live peers.
    liveness_window_s : float
    records_short : int
        Committed records with fewer than F copies on live peers (counted
        by the tracker every few seconds, not per request).
    files_short : int
        Files with such records.
    records_pending : int
        Of those, records with a copy pending.
    short_age_s : float
        How old these counts are, seconds (< 0: not counted yet).
    repair : RepairServiceStatus
    file_trackers : tuple[FileTrackerStatus, ...]
        None: the master takes every file.
    failed_after_s : float
        A peer failed this long is lost (the tracker's ``--failed-after``).
    records_lost, records_waiting, records_quarantined : int
        Of ``records_short``: no good copy left; short only of copies on
        peers failed under ``failed_after_s``; a copy quarantined
        (docs/reliability.md, "Copy states").
    retained_bytes : int
        Bytes (all copies) of past versions snapshots hold (part of ``used_bytes``).
    snapshots : int
    versions_short, versions_lost : int
        Kept past versions short of copies, and of those with no good copy.
    metadata_log : MetadataLogState
    """

    peers: tuple[PeerStatus, ...]
    files: int
    alive_peers: int
    failed_peers: int
    capacity_bytes: int
    free_bytes: int
    liveness_window_s: float
    used_bytes: int
    filesystems: int
    records_short: int
    files_short: int
    records_pending: int
    short_age_s: float
    repair: RepairServiceStatus
    file_trackers: tuple[FileTrackerStatus, ...]
    failed_after_s: float
    records_lost: int
    records_waiting: int
    records_quarantined: int
    retained_bytes: int
    snapshots: int
    versions_short: int
    versions_lost: int
    metadata_log: MetadataLogState

    NESTED: ClassVar[dict[str, type]] = {
        "peers": PeerStatus,
        "repair": RepairServiceStatus,
        "file_trackers": FileTrackerStatus,
        "metadata_log": MetadataLogState,
    }

    @classmethod
    def of(cls, reply: Any) -> "ClusterStatus":
        """From the tracker's ``StatusReply``."""
        return plain(cls, reply)


# the protobuf message of each dataclass (checked field by field in the tests)
MESSAGES = {
    ClusterStatus: "StatusReply",
    PeerStatus: "Peer",
    RepairServiceStatus: "RepairStatus",
    FileTrackerStatus: "FileTracker",
    TrackerReplicaStatus: "TrackerReplica",
    ConsensusMemberStatus: "ConsensusMember",
    FailoverEvent: "Failover",
    MetadataLogState: "MetadataLogStatus",
}

__all__ = [
    "ClusterStatus",
    "PeerStatus",
    "RepairServiceStatus",
    "FileTrackerStatus",
    "TrackerReplicaStatus",
    "ConsensusMemberStatus",
    "FailoverEvent",
    "MetadataLogState",
    "MESSAGES",
]

"""The errors of the tracker's metadata log (docs/metadata-log.md)."""

from __future__ import annotations

from st_py.errors import TrackerError, TrackerUnavailableError


class LogError(TrackerError):
    """The metadata log refused or failed an operation."""


class FencedError(LogError):
    """An append was refused because this tracker no longer leads: another
    tracker was elected (a newer term) or this one's election lease ran out
    while it was paused or cut off. Nothing of the refused append was written.

    Attributes
    ----------
    term : int
        The term the append was made under.
    leader_term : int
        The term of the leader now (0: none elected yet).
    leader : str
        The leader's address now ("" if none).
    """

    def __init__(self, term: int, leader_term: int, leader: str):
        who = f"tracker {leader} leads in term {leader_term}" if leader else "no tracker leads now"
        super().__init__(
            f"append refused: this tracker's term {term} has ended ({who}); it must not answer "
            "writes: step down and follow the leader"
        )
        self.term, self.leader_term, self.leader = term, leader_term, leader


class StandbyBehindError(LogError):
    """A standby that follows the log with a namespace of its own applied
    entries only through ``followed``, and the log now starts at ``first``
    (the entries between were compacted: it was down longer than the leader
    keeps them, or it is new on an older cluster).

    Attributes
    ----------
    followed, first : int
    """

    def __init__(self, followed: int, first: int):
        super().__init__(
            f"this standby applied the metadata log through entry {followed}, and the log starts at "
            f"entry {first} now: its namespace cannot be brought forward from the log. Start the "
            "trackers with the cluster's --key-file, so a standby copies a live replica's namespace "
            "itself; or give it a copy (stop it, copy the leader's namespace root and state folder, "
            "start it again), or run it on the leader's namespace (without --own-namespace)"
        )
        self.followed, self.first = followed, first


class ConsensusUnavailableError(LogError, TrackerUnavailableError):
    """No majority of the consensus members answered in time: nothing was
    acknowledged, and an append in flight has an unknown outcome (a member
    that holds its proposal may commit it once a majority is back: the
    caller reads the log before it retries, EtcdLog.append).

    Attributes
    ----------
    endpoints : list[str]
        The members tried.
    detail : str
        The last error seen.
    """

    def __init__(self, endpoints: list[str], detail: str):
        super().__init__(
            f"the consensus service (etcd at {', '.join(endpoints)}) did not answer: {detail}; "
            "check that a majority of its members run and are reachable (etcdctl endpoint health)"
        )
        self.endpoints, self.detail = list(endpoints), detail


class WrongClusterError(LogError):
    """The consensus service holds no StoreTorrent cluster of this id, or the
    tracker's state folder belongs to another cluster.

    Attributes
    ----------
    cluster_id : str
        The id this tracker was started with.
    found : list[str]
        The cluster ids the consensus service holds.
    """

    def __init__(self, cluster_id: str, found: list[str], detail: str = ""):
        have = ", ".join(found) if found else "none"
        super().__init__(
            detail
            or f"no StoreTorrent cluster {cluster_id!r} in this consensus service (it holds: {have}); "
            "check --cluster-id and --etcd, or create the cluster with `storetorrent init`"
        )
        self.cluster_id, self.found = cluster_id, list(found)

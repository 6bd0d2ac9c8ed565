"""The tracker's metadata log (docs/metadata-log.md): entries, the embedded
default's local log, the replicated log in etcd and the leader election
that fences it. Tracker-side only."""

from st_py.tracker.log.entry import Entry
from st_py.tracker.log.errors import ConsensusUnavailableError, FencedError, LogError, WrongClusterError
from st_py.tracker.log.local import LocalLog

__all__ = ["ConsensusUnavailableError", "Entry", "FencedError", "LocalLog", "LogError", "WrongClusterError"]

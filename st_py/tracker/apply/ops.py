"""The operations of the metadata log that change one infofile
(docs/metadata-log.md, "The log").

An operation names the infofile writer's method that applies it
(:data:`INFOFILE_WRITES`), its arguments as decided when it was proposed, and
the time it was proposed at, which the writer uses as its clock while
applying it: applying the same operation to the same state writes the same
rows, on a replay after a crash, on a copy brought forward, on a replica.
Encoded with MessagePack (bytes stay bytes; sequences decode as tuples, as
the writer's records are).
"""

from __future__ import annotations

from dataclasses import dataclass

import msgpack

from st_py.tracker.leases import LEASE_OPS
from st_py.tracker.log.errors import LogError

# The InfofileWriter methods that change an infofile: every call of them goes
# through the log (Committer.write); the writer's other methods only read.
INFOFILE_WRITES = frozenset(
    {
        "set_meta",
        "commit_requests",
        "commit",
        "commit_replacing",
        "store_copies",
        "commit_objects",
        "delete_records",
        "prune",
        "create_snapshot",
        "delete_snapshot",
        "move_copies",
        "unstore_copies",
        "add_peers",
    }
)

# Operations on a whole file, applied by the tracker (st_py/tracker/service.py,
# "file operations"): its infofile made (args: meta, peers, disk mode) or removed.
FILE_OPS = frozenset({"create_file", "delete_file"})
# delete_file's one argument, if any: the file goes only while it holds no record (a
# Delete with if_empty: S3 DeleteBucket); a replay checks it again.
IF_EMPTY = "if_empty"
# Operations on a file's writer lease, applied by st_py/tracker/leases.py
# (replicated state: a restart or a failover keeps the lease).
# Operations on the tracker's own state (tracker.db: a directory's owner, group
# and mode; a directory removed; a peer's drain state; a file's space
# reservation ended by its creator's close), applied by
# st_py/tracker/tracker_ops.py: a restart or a standby's election keeps them.
TRACKER_OPS = frozenset({"set_dir", "remove_dir", "set_drain", "end_reservation", "request_done"})
STATE_OPS = FILE_OPS | LEASE_OPS | TRACKER_OPS

_VERSION = 1  # of the encoding below
_INFOFILE = "infofile"


class BadOperationError(LogError):
    """A log entry that is not an operation this tracker knows (written by a
    newer tracker, or damaged). Attributes: ``index`` (0: not known), ``detail``."""

    def __init__(self, detail: str, index: int = 0):
        super().__init__(
            f"metadata log entry {index or '?'} is not an operation this tracker can apply ({detail}); "
            "run a tracker of the version that wrote it"
        )
        self.index, self.detail = index, detail


def _encode_other(o):
    """Sets (a record's pending copy ranks) as sorted sequences: the same op encodes the same bytes."""
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    raise TypeError(f"an infofile operation's argument of type {type(o).__name__} has no log encoding")


@dataclass(frozen=True)
class InfofileOp:
    """One change of one infofile: the file (namespace ``name`` and
    ``file_id``: a file deleted and created again under the name is another),
    the writer method ``kind`` (one of :data:`INFOFILE_WRITES`; or a whole-file
    or lease operation, :data:`STATE_OPS`), its ``args``,
    the time ``at`` (unix s) it was proposed at, and ``prev``: the log index
    the infofile had applied before it (its ``meta.log_index``; 0: none), so
    the entries of one file form a chain a replay follows without a gap."""

    name: str
    file_id: int
    kind: str
    args: tuple
    at: float
    prev: int = 0

    def encode(self) -> bytes:
        """The entry's payload."""
        if self.kind not in INFOFILE_WRITES and self.kind not in STATE_OPS:
            raise BadOperationError(f"unknown infofile write {self.kind!r}")
        return msgpack.packb(
            [_VERSION, _INFOFILE, self.name, self.file_id, self.kind, list(self.args), self.at, self.prev],
            use_bin_type=True,
            default=_encode_other,
        )


def decode(payload: bytes, index: int = 0) -> InfofileOp:
    """The operation in an entry's ``payload``.

    Raises
    ------
    BadOperationError
        Not an encoding this module writes.
    """
    try:
        v = msgpack.unpackb(payload, raw=False, use_list=False, strict_map_key=False)
        if v[0] != _VERSION:
            raise BadOperationError(f"encoding version {v[0]}, this tracker reads {_VERSION}", index)
        if v[1] == _INFOFILE:
            _, _, name, file_id, kind, args, at, prev = v
            if kind not in INFOFILE_WRITES and kind not in STATE_OPS:
                raise BadOperationError(f"unknown infofile write {kind!r}", index)
            return InfofileOp(str(name), int(file_id), kind, tuple(args), float(at), int(prev))
        raise BadOperationError(f"unknown operation {v[1]!r}", index)
    except BadOperationError:
        raise
    except Exception as e:  # msgpack's errors, a short list
        raise BadOperationError(f"{type(e).__name__}: {e}", index) from e

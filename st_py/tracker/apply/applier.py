"""The one place an operation of the metadata log changes an infofile
(docs/metadata-log.md, "The apply loop"): etcd's apply loop, for one store.

An operation is applied inside :meth:`InfofileWriter.applying`, so the
writer's transaction records the entry's index as ``meta.log_index`` with the
change and reads the operation's time as its clock. An entry at or below the
infofile's ``log_index`` was applied before and is left out: a replay after a
crash, or onto an infofile restored from an older copy, applies exactly what
the infofile misses.
"""

from __future__ import annotations

from typing import Any

from st_py.tracker.apply.ops import InfofileOp
from st_py.tracker.infofile_writer import InfofileWriter


class _Skipped:
    """The result of an entry applied before (:data:`SKIPPED`)."""

    def __repr__(self) -> str:
        return "SKIPPED"


SKIPPED: Any = _Skipped()


class LogGapError(Exception):
    """The infofile is not at the log position an entry follows (it was
    restored from a copy older than what the log still holds, or changed
    outside the log): applying the entry would skip the changes between.
    Attributes: ``name``, ``index``, ``prev`` (the position the entry
    follows), ``have`` (the infofile's ``meta.log_index``)."""

    def __init__(self, name: str, index: int, prev: int, have: int):
        super().__init__(
            f"infofile of {name} is at log index {have}, but log entry {index} follows {prev}: "
            "the entries between are gone from the log; it is left as it is"
        )
        self.name, self.index, self.prev, self.have = name, index, prev, have


def apply_infofile_op(writer: InfofileWriter, op: InfofileOp, index: int, log_id: str) -> Any:
    """Apply ``op``, entry ``index`` of log ``log_id``, to ``writer``'s
    infofile and return the writer method's result, or :data:`SKIPPED` if the
    infofile applied that entry before (``index <= meta.log_index`` of that
    log; an index of another log counts as 0).

    Raises :class:`LogGapError` if the infofile is not at ``op.prev`` (nothing
    applied), else whatever the writer method raises (its transaction is rolled
    back, ``log_index`` unchanged). Not thread-safe for one writer: the caller
    applies one operation at a time per infofile (the Committer's lock)."""
    have = writer.position(log_id)
    if index <= have:
        return SKIPPED
    if have != op.prev:
        raise LogGapError(op.name, index, op.prev, have)
    with writer.applying(index, op.at, log_id):
        return getattr(writer, op.kind)(*op.args)

"""One entry of the metadata log (docs/metadata-log.md): its index (dense,
from 1), the term of the leader that appended it, and its payload (an
encoded operation; opaque at this layer)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

_HEADER = struct.Struct(">Q")  # the term, before the payload in the stored value


@dataclass(frozen=True)
class Entry:
    """A log entry: ``index`` (1, 2, ...), ``term`` and ``payload`` bytes."""

    index: int
    term: int
    payload: bytes

    def encode(self) -> bytes:
        """The stored value: the term (8 bytes, big-endian), then the payload."""
        return _HEADER.pack(self.term) + self.payload

    @classmethod
    def decode(cls, index: int, value: bytes) -> Entry:
        """The entry at ``index`` from its stored ``value`` (:meth:`encode`)."""
        (term,) = _HEADER.unpack_from(value)
        return cls(index, term, bytes(value[_HEADER.size :]))

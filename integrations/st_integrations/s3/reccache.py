"""The records that ranged GETs read, kept for the next range of the same
version (docs/s3.md, "DuckDB"): the peers serve a record whole, so without
it a reader that asks for many ranges of one record (DuckDB and pyarrow
read a Parquet file's footer, then each column chunk it needs) moves the
whole record once per range.

An entry is named by the record's file id, name, version (the generation
that committed it), CRC-32C, size and commit time, so a new version is a new entry and
an entry is served only to a request that has just opened the file and
read that version's stat with its own rights. Least recently used entries
go first when the bytes held pass the bound.

Thread safety: every method takes the cache's lock.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

RANGE_CACHE_BYTES = 256 << 20  # per access key: four records of the largest size (64 MiB)

Key = tuple[int, str, int | None, int, int, float]  # (file id, record, version id, crc32c, size, commit time)


class RecordCache:
    """At most ``max_bytes`` of whole records, least recently used out first."""

    def __init__(self, max_bytes: int = RANGE_CACHE_BYTES):
        self.max_bytes = max_bytes
        self._items: OrderedDict[Key, bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Key) -> bytes | None:
        """The record's bytes, or None."""
        with self._lock:
            data = self._items.get(key)
            if data is not None:
                self._items.move_to_end(key)
            return data

    def put(self, key: Key, data: bytes) -> None:
        """Keep ``data`` (not if it alone is over the bound)."""
        if len(data) > self.max_bytes:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= len(old)
            self._items[key] = data
            self._bytes += len(data)
            while self._bytes > self.max_bytes:
                _, gone = self._items.popitem(last=False)
                self._bytes -= len(gone)

    @property
    def nbytes(self) -> int:
        """Bytes held."""
        with self._lock:
            return self._bytes

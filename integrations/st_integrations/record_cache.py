"""The fsspec filesystem's cache of whole records (docs/fsspec.md): records
are write-once, so a record's bytes can be kept under its identity (file id,
name, size, CRC-32C) and never go stale; a replaced record is a new key.

A bounded LRU of bytes, thread-safe. fsspec's own ``fsspec.caching`` caches
byte ranges of one open file; this cache is shared by every open of every
record of a filesystem instance (pandas and pyarrow open the same small
record several times: footer, then columns).
"""

from __future__ import annotations

import threading
from collections import OrderedDict


class RecordCache:
    """An LRU of record bytes, at most ``max_bytes`` in all; a record over a
    quarter of it is not kept (it would push out everything else).

    Keys are any hashable identity of a record's content, e.g.
    ``(file_id, name, size, crc32c)``.
    """

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._data: OrderedDict = OrderedDict()
        self._used = 0
        self._lock = threading.Lock()

    def get(self, key) -> bytes | None:
        """The bytes under ``key`` (now the most recently used), or None."""
        with self._lock:
            data = self._data.get(key)
            if data is not None:
                self._data.move_to_end(key)
            return data

    def put(self, key, data: bytes) -> None:
        """Keep ``data`` under ``key`` unless it is over a quarter of the
        cache; the least recently used records go to make room."""
        if len(data) > self.max_bytes // 4:
            return
        with self._lock:
            if key in self._data:
                return
            self._data[key] = data
            self._used += len(data)
            while self._used > self.max_bytes:
                self._used -= len(self._data.popitem(last=False)[1])

    def clear(self) -> None:
        """Drop every record kept."""
        with self._lock:
            self._data.clear()
            self._used = 0

    @property
    def used(self) -> int:
        """Bytes held."""
        return self._used

"""The changesets an infofile's writer kept, for copies to catch up by
(issue 40; docs/metadata-log.md, "Metadata on every node").

One :class:`Window` per open infofile writer, in the tracker's memory: the
changeset of each transaction applied from the metadata log, with the log
position before (``prev``) and after (``index``) it and the file's
generation after it. A copy at position ``p`` of log ``log_id`` catches up
by the entries after ``p`` in order, if the window still holds the one that
follows ``p``; otherwise it needs a snapshot.

Bound (per file): at most :data:`MAX_BYTES` of changesets (16 MiB; the
environment variable ``STORETORRENT_CHANGESET_WINDOW_BYTES`` sets it, 0 keeps
none) and none older than :data:`MAX_AGE_S` (1 hour), the oldest going first, except
the newest change, always kept (so a copy at the last position is known to
be current).
The tracker keeps a writer per file it wrote since it started, so the
memory is at most that many windows; a window starts empty when the writer
is opened (a tracker restart: copies behind it fetch a snapshot once).

Changesets are captured only for files somebody keeps a copy of
(:class:`CopyDemand`): a file FetchInfofile was asked for within
:data:`MAX_AGE_S`. Capturing costs the writer about 4 us a record (the
SQLite session; docs/benchmarks.md, "The tracker's cost per committed
record"), which a file only written, or read on the shared mount, has no use
for. A copy made while nothing was captured is a snapshot at the file's log
position, and the first transaction captured after it follows that position
(its ``prev``), so the window reaches back to the copy; a transaction in
flight when the demand began breaks the chain, and :meth:`Window.since` then
answers None (one snapshot more), never a wrong catch-up.

Thread-safety: :meth:`Window.add` and :meth:`Window.since` may be called from
different threads (the writer's and a FetchInfofile handler's); a lock
guards the entries. :class:`CopyDemand` is read and written on the
tracker's event loop and read by writers' threads (a dict read and a
float compare: atomic under the GIL).
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from dataclasses import dataclass

MAX_BYTES = int(os.environ.get("STORETORRENT_CHANGESET_WINDOW_BYTES", 16 << 20))
MAX_AGE_S = 3600.0
DEMAND_KEPT = 4096  # names remembered before the ones asked for longest ago are dropped


class CopyDemand:
    """Which infofiles somebody keeps a copy of: the monotonic time of the
    last FetchInfofile per file name (normalized), for the writers to
    capture changesets only where they are asked for (module docstring)."""

    def __init__(self, max_age_s: float = MAX_AGE_S):
        self.max_age_s = max_age_s
        self._last: dict[str, float] = {}

    def note(self, name: str) -> None:
        """A copy of file ``name`` was fetched now."""
        now = time.monotonic()
        if name not in self._last and len(self._last) >= DEMAND_KEPT:
            self._last = {n: t for n, t in self._last.items() if now - t < self.max_age_s}
            if len(self._last) >= DEMAND_KEPT:  # all recent: drop the oldest half
                keep = sorted(self._last.items(), key=lambda kv: kv[1])[DEMAND_KEPT // 2 :]
                self._last = dict(keep)
        self._last[name] = now

    def wanted(self, name: str) -> bool:
        """True if a copy of ``name`` was fetched within ``max_age_s``."""
        t = self._last.get(name)
        return t is not None and time.monotonic() - t < self.max_age_s

    def __len__(self) -> int:
        return len(self._last)


@dataclass(frozen=True)
class Change:
    """One transaction's changeset: ``prev`` and ``index`` are log positions
    (``meta.log_index`` before and after), ``generation`` the file's after it,
    ``data`` the SQLite changeset (bytes), ``at`` ``time.monotonic()`` when kept."""

    prev: int
    index: int
    generation: int
    data: bytes
    at: float


class Window:
    """The recent changesets of one infofile (see the module docstring)."""

    def __init__(self, schema: str, max_bytes: int = MAX_BYTES, max_age_s: float = MAX_AGE_S):
        self.schema = schema  # the fingerprint (st_py/core/infofile_copy.py) the changesets apply to
        self.max_bytes, self.max_age_s = max_bytes, max_age_s
        self.log_id = ""
        self._changes: deque[Change] = deque()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        """False if no changesets are kept (``max_bytes`` 0)."""
        return self.max_bytes > 0

    def add(self, prev: int, index: int, generation: int, data: bytes, log_id: str) -> None:
        """Keep the changeset of the transaction that moved the infofile from
        log position ``prev`` to ``index`` (of log ``log_id``); drops what no
        longer fits the bound. A change that does not follow the last one
        kept (another log, a position skipped) empties the window first."""
        now = time.monotonic()
        with self._lock:
            if log_id != self.log_id or (self._changes and self._changes[-1].index != prev):
                self._changes.clear()
                self._bytes = 0
                self.log_id = log_id
            self._changes.append(Change(prev, index, generation, data, now))
            self._bytes += len(data)
            self._trim(now)

    def reset(self) -> None:
        """Forget every change (the infofile changed outside the log)."""
        with self._lock:
            self._changes.clear()
            self._bytes = 0

    def _trim(self, now: float) -> None:
        while len(self._changes) > 1 and (self._bytes > self.max_bytes or now - self._changes[0].at > self.max_age_s):
            self._bytes -= len(self._changes.popleft().data)

    def since(self, position: int, log_id: str) -> list[Change] | None:
        """The changes after log position ``position`` of ``log_id``, in
        order ([]: the copy is at the last one), or None if the window does
        not reach back to it (a snapshot is needed)."""
        with self._lock:
            self._trim(time.monotonic())
            if log_id != self.log_id or not self._changes:
                return None
            if position == self._changes[-1].index:
                return []
            out = [c for c in self._changes if c.index > position]
            if not out or out[0].prev != position:
                return None
            return out

    def stats(self) -> tuple[int, int]:
        """(changes kept, bytes)."""
        with self._lock:
            return len(self._changes), self._bytes

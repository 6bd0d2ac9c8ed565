"""The per-file quota (the tracker's ``--quota-bytes``): the most bytes one
file may hold, all copies counted, including what its snapshots keep
(docs/security.md, "Quotas"). The one place that counts a file's bytes
against it: Create's estimate, a whole commit and a partial commit
(``partial_ok``) all read it here. A user's quota is the guard's
(st_py/tracker/guard.py), checked by admission (admission.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from .committer import Committer


class QuotaTurns:
    """One commit at a time per file while a per-file quota is checked and
    the commit applied: a commit's room is the infofile's bytes when it
    looks, so two group commits of one file in flight at once (a writer
    keeps two) would each see the other's bytes as free and together pass
    the quota (seen: 12 MB kept by a snapshot, 8 MB committed by one group
    and 3 MB by the other under a 20 MB quota). Without a per-file quota
    nothing waits. Not thread-safe: the tracker's event loop."""

    def __init__(self) -> None:
        self._turns: dict[int, tuple[asyncio.Lock, int]] = {}  # file id -> (lock, commits holding or waiting)

    @contextlib.asynccontextmanager
    async def turn(self, file_id: int, limit: int | None) -> AsyncIterator[None]:
        """Hold file ``file_id``'s turn for the block when ``limit`` (the
        per-file quota) is set; the entry goes when nobody holds or waits."""
        if limit is None:
            yield
            return
        lock, n = self._turns.get(file_id) or (asyncio.Lock(), 0)
        self._turns[file_id] = (lock, n + 1)
        try:
            async with lock:
                yield
        finally:
            lock, n = self._turns[file_id]
            if n == 1:
                del self._turns[file_id]
            else:
                self._turns[file_id] = (lock, n - 1)

    def __len__(self) -> int:
        return len(self._turns)


def create_refusal(limit: int | None, est_size: int, copies: int) -> str | None:
    """Why a file estimated at ``est_size`` bytes (one copy) with ``copies``
    copies cannot be created under ``limit`` (None: no per-file quota), or
    None if it can."""
    if limit is None or est_size * copies <= limit:
        return None
    return (
        f"estimated size {est_size} x{copies} exceeds the quota of {limit} bytes; "
        "ask for a larger quota or split the data"
    )


async def file_room(c: Committer, limit: int | None) -> tuple[str, int, int, int] | None:
    """The file's room as ``(scope, quota, used, reserved part)`` (bytes, all
    copies; ``scope`` "file") for the quota checks of a commit, or None
    without a per-file quota. Reads the infofile in ``c``'s thread."""
    if limit is None:
        return None
    _, used = await c.run(c.writer.stats)
    used += await c.run(c.writer.retained_bytes)  # what snapshots keep occupies disks too
    return ("file", limit, used * c.meta.copies, 0)


def commit_refusal(scope: str, quota: int, used: int, add: int) -> str:
    """The message of a whole commit of ``add`` bytes (all copies) refused by
    the ``scope`` quota of ``quota`` bytes with ``used`` already used."""
    return (
        f"commit of {add} bytes would exceed the {scope} quota of {quota} bytes ({used} used); "
        "delete records or snapshots, ask for a larger quota, or commit with partial_ok"
    )

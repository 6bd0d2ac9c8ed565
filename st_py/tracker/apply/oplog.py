"""The metadata log a tracker proposes its operations to, and its replay at
start (docs/metadata-log.md, "The apply loop").

A proposer appends its operation (appends that arrive together share one
durable transaction: a group append), applies it, and only then replies.
Entries applied are marked so in the log (with the next append, or within
:data:`MARK_WITHIN_S`), an apply that failed at once (durably, before its
proposer hears), and entries are kept for ``keep_s``: an infofile put back
from a copy at most that old (a peer's mirror, `storetorrent recover`, a
backup, a disk that lost its last writes) is brought forward by them at the
tracker's next start (:meth:`OpLog.replay`). A failed entry is never
applied again; an entry with no mark whose infofile is exactly at the entry
before it was in flight when the tracker died (never answered) and is left
out, so nothing a client was not told succeeded appears later.

The log is the embedded local one beside ``tracker.db`` or the replicated
one in etcd (:mod:`.backends`); with etcd, every committed entry is applied
by a replay (marks are not needed: only failed entries are marked).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from st_py.tracker.apply.applier import SKIPPED, LogGapError, apply_infofile_op
from st_py.tracker.apply.backends import APPLIED, FAILED, EtcdBackend, LocalBackend
from st_py.tracker.apply.ops import FILE_OPS, TRACKER_OPS, InfofileOp, decode
from st_py.tracker.infofile_writer import InfofileWriter
from st_py.tracker.leases import LEASE_OPS
from st_py.tracker.log.entry import Entry
from st_py.tracker.log.errors import FencedError, StandbyBehindError

log = logging.getLogger("st.tracker.oplog")

COMPACT_EVERY_S = 5.0  # how often entries older than keep_s are dropped from the log
# How long applied entries stay in the log: an infofile put back from an older
# copy is brought forward by them at the tracker's next start if its copy is
# at most this old.
KEEP_S = 600.0
MARK_WITHIN_S = 0.5  # an applied entry is marked so in the log at most this late
FOLLOW_EVERY_S = 0.25  # a standby that follows the log looks for new entries this often
FOLLOW_BATCH = 2048  # ... and applies at most this many between turns of its event loop


@dataclass
class ReplayReport:
    """What :meth:`OpLog.replay` did: entries read, applied, found applied
    before, never answered (left out), of files gone (deleted since, or
    another file now has the name), and left out after a gap (LogGapError:
    an infofile older than the log holds), operations on the tracker's own
    state applied (leases, directories, drain states); the
    time of the last entry read (unix s); the files it brought forward."""

    read: int = 0
    applied: int = 0
    skipped: int = 0
    unanswered: int = 0
    gone: int = 0
    gaps: int = 0
    state_ops: int = 0
    last_at: float = 0.0
    last_index: int = 0  # the last entry read (0: none)
    files: set[str] = field(default_factory=set)


class OpLog:
    """The tracker's metadata log: group appends, the entries in flight,
    marks of applied entries and the compaction of old ones.

    Not thread-safe: used on the tracker's event loop; :meth:`start`, then
    :meth:`replay`, before serving.

    Parameters
    ----------
    backend : LocalBackend or EtcdBackend
        Where entries are kept.
    keep_s : float
        Seconds an applied entry stays in the log.
    """

    def __init__(self, backend: LocalBackend | EtcdBackend, keep_s: float = KEEP_S):
        self.backend = backend
        self.keep_s = keep_s
        self.term = 0
        self.log_id = ""  # this log's identity, in each infofile's meta.log_id (start)
        self.fenced = asyncio.Event()  # an append was refused: this tracker's term ended
        self._queue: list[tuple[bytes, asyncio.Future]] = []
        self._flushing = False
        self._in_flight: set[int] = set()  # appended, their apply not ended
        self._unmarked: list[int] = []  # applied, not yet marked so in the log
        self._mark_task: asyncio.Future | None = None
        self._last = 0
        self._compacted_at = time.monotonic()
        self._marks: deque[tuple[float, int]] = deque()  # (when, last index then)
        # The tracker's own state as a blob (st_py/tracker/tracker_ops.py), kept by a
        # replicated backend before it compacts (None: nothing to keep)
        self.checkpoint: Callable[[], bytes] | None = None
        self.appends = 0  # durable append transactions (metrics)
        self.entries = 0  # entries appended
        self.followed = 0  # a standby following the log: the last entry it applied (follow)

    async def connect(self) -> None:
        """Open a replicated log without campaigning, as a standby that
        follows it (:meth:`follow`); :meth:`start` campaigns after. Raises
        what the backend's connect raises; ValueError for a local log (no
        standby follows one)."""
        if not isinstance(self.backend, EtcdBackend):
            raise ValueError("only a replicated log (etcd) is followed by standbys")
        self.backend.applied_through = self.applied_through
        await self.backend.connect(follows=True)
        self.log_id = await self.backend.log_id()

    async def follow(
        self,
        writer_for: Callable[[InfofileOp], InfofileWriter | None],
        file_op: Callable[[InfofileOp, int], bool],
        state_op: Callable[[InfofileOp], None],
        on_followed: Callable[[int], None],
    ) -> None:
        """As a standby with a namespace of its own (docs/metadata-log.md,
        "Standbys that follow the log"): apply, in log order, the entries the
        leader has applied (the index it publishes), from :attr:`followed`
        on, as the log grows, ``FOLLOW_BATCH`` at a time; ``on_followed(i)``
        after each batch (the tracker keeps ``i`` in its state). Runs until
        cancelled (this tracker was elected: it then replays the rest).

        Raises
        ------
        StandbyBehindError
            The log was compacted past what this standby applied (it was
            down longer than the leader keeps entries, or it is new on an
            older cluster): its namespace cannot be brought forward from the
            log.
        """
        assert isinstance(self.backend, EtcdBackend)
        while True:
            first = await self.backend.first_index()
            if self.followed + 1 < first:
                raise StandbyBehindError(self.followed, first)
            upto = min(await self.backend.leader_applied(), self.followed + FOLLOW_BATCH)
            if upto <= self.followed:
                await asyncio.sleep(FOLLOW_EVERY_S)
                continue
            rep = await self.replay(writer_for, None, file_op, state_op, start=self.followed + 1, upto=upto)
            if rep.last_index <= self.followed:  # nothing read yet (entries are dense): ask again
                await asyncio.sleep(FOLLOW_EVERY_S)
                continue
            self.followed = rep.last_index  # what was read and applied, never past it
            on_followed(self.followed)
            await asyncio.sleep(0)  # the election's keepalive and the presence entry get their turn

    async def start(self) -> int:
        """Open the log (with etcd: win the election); return the term.
        Raises what the backend's start raises."""
        if isinstance(self.backend, EtcdBackend):
            self.backend.applied_through = self.applied_through  # shown to operators (replicas.py)
        self.term = await self.backend.start()
        self.log_id = await self.backend.log_id()
        self._last = await self.backend.last_index()
        self._compacted_at = time.monotonic()
        self._marks.append((self._compacted_at, self._last))
        return self.term

    async def append(self, payload: bytes) -> int:
        """Append one entry durably; return its index. The entry is in
        flight until :meth:`done` or :meth:`failed` says how its apply ended.

        Raises whatever the log's append raises (nothing was appended)."""
        fut = asyncio.get_running_loop().create_future()
        self._queue.append((payload, fut))
        if not self._flushing:
            self._flushing = True
            asyncio.get_running_loop().create_task(self._flush())
        return await fut

    async def _flush(self) -> None:
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                marks, self._unmarked = self._unmarked, []
                try:
                    last = await self.backend.append([p for p, _ in batch], self.term, marks)
                except Exception as e:  # every waiting proposer hears of it
                    if isinstance(e, FencedError):
                        self.fenced.set()
                    self._unmarked[:0] = marks
                    for _, f in batch:
                        if not f.done():
                            f.set_exception(e)
                    continue
                self.appends += 1
                self.entries += len(batch)
                first = last - len(batch) + 1
                self._last = last
                for i, (_, f) in enumerate(batch):
                    self._in_flight.add(first + i)
                    if not f.done():
                        f.set_result(first + i)
                await self._maybe_compact()
        finally:
            self._flushing = False

    async def run(self, payload: bytes, apply: Callable[[InfofileOp, int], Awaitable[Any]]) -> Any:
        """Propose the encoded operation ``payload``: append it, then
        ``await apply(op, index)`` with the operation decoded from the entry
        (as a replay would apply it), and return its result once the entry
        is marked done (or failed, if ``apply`` raised: re-raised)."""
        index = await self.append(payload)
        op = decode(payload, index)
        try:
            res = await apply(op, index)
        except BaseException:
            await self.failed(index)
            raise
        self.done(index)
        return res

    def done(self, index: int) -> None:
        """Entry ``index`` was applied (durably, in its store) and will be
        answered: it is marked applied with the next append, or within
        :data:`MARK_WITHIN_S`."""
        self._in_flight.discard(index)
        self._unmarked.append(index)
        if self._mark_task is None or self._mark_task.done():
            self._mark_task = asyncio.ensure_future(self._mark_soon())

    async def failed(self, index: int) -> None:
        """Entry ``index``'s apply failed and its proposer is about to be told
        so: marked failed, durably, so no replay applies it. If even that
        cannot be written, a log line says so."""
        try:
            await self.backend.mark([index], FAILED)
        except Exception:
            log.exception("could not mark log entry %d failed: a replay onto an older infofile may apply it", index)
        # only now past applied_through: a standby following the log applies up to it, and
        # must find the mark (follow)
        self._in_flight.discard(index)

    async def _mark_soon(self) -> None:
        await asyncio.sleep(MARK_WITHIN_S)
        if self._unmarked:
            marks, self._unmarked = self._unmarked, []
            try:
                await self.backend.mark(marks, APPLIED)
            except Exception:
                self._unmarked[:0] = marks
                log.exception("could not mark %d log entries applied; trying again", len(marks))
        if self._unmarked:
            self._mark_task = asyncio.ensure_future(self._mark_soon())

    def view(self) -> dict:
        """The operator's view (status page, /status.json, metrics): where
        the log is (``backend``: "local" or "etcd ..."), its identity, this
        tracker's term, the last index appended, the index through which
        every entry's apply ended, and the append transactions and entries
        since the start; with etcd, ``replicas``: the trackers (leader and
        standbys, with the index each applied), the failovers with their
        reason, newest first, and the etcd members' health (None until the
        first read, a few seconds after the election)."""
        out = {
            "backend": self.backend.describe,
            "log_id": self.log_id,
            "term": self.term,
            "last_index": self._last,
            "applied_index": self.applied_through(),
            "appends": self.appends,
            "entries": self.entries,
        }
        if isinstance(self.backend, EtcdBackend):
            out["replicas"] = self.backend.view()
        return out

    def applied_through(self) -> int:
        """Every entry at or below this index has ended its apply (a
        standby that follows the log: the last entry it applied)."""
        if self.term == 0:
            return self.followed
        return min(self._in_flight) - 1 if self._in_flight else self._last

    async def _maybe_compact(self) -> None:
        """Drop the entries appended more than ``keep_s`` ago whose apply ended."""
        now = time.monotonic()
        if now - self._compacted_at < COMPACT_EVERY_S:
            return
        self._compacted_at = now
        self._marks.append((now, self._last))
        upto = 0
        while self._marks and self._marks[0][0] < now - self.keep_s:
            upto = self._marks.popleft()[1]
        applied = self.applied_through()
        upto = min(upto, applied)
        floor = self.backend.followers_floor()
        if floor is not None:  # a standby that follows the log still needs the entries after it
            upto = min(upto, floor)
        if upto > 0:
            if self.checkpoint is not None:  # what the dropped entries made, for a standby elected later
                await self.backend.save_checkpoint(self.term, applied, self.checkpoint())
            await self.backend.compact(upto + 1)

    async def replay(
        self,
        writer_for: Callable[[InfofileOp], InfofileWriter | None],
        file_id: int | None = None,
        file_op: Callable[[InfofileOp, int], bool] | None = None,
        state_op: Callable[[InfofileOp], None] | None = None,
        start: int = 1,
        upto: int | None = None,
    ) -> ReplayReport:
        """Apply every entry the log holds that was applied once (answered)
        and that its infofile no longer has, in log order, before the
        tracker serves (or, with ``file_id``, for that file alone: one put back
        by RestoreInfofile). ``writer_for(op)`` gives the writer of the op's
        infofile, or None if that file is gone; ``file_op(op, index)`` applies
        a whole-file operation (create, delete) and says whether it changed
        anything; ``state_op(op)`` applies an operation on the tracker's own
        state (a lease, a directory's owner, a peer's drain state: every one
        not marked failed, in order; overwrites, so applying one again on a
        checkpoint that has it changes nothing; not with ``file_id``). The applies block the loop (a start,
        a restore: rare). ``start`` and ``upto`` bound the entries read (a
        standby following the log: :meth:`follow`).

        Raises
        ------
        BadOperationError
            An entry this tracker cannot decode (nothing after it is applied).
        Exception
            An entry applied once fails now (the log or the infofile is damaged).
        """
        rep = ReplayReport()
        entries: list[Entry] = []
        first = start
        while upto is None or start <= upto:
            got = await self.backend.read(start, 1024 if upto is None else min(1024, upto - start + 1))
            if not got:
                break
            entries.extend(e for e in got if upto is None or e.index <= upto)
            start = got[-1].index + 1
        marks = await self.backend.marks(first)
        for e in entries:
            rep.last_index = e.index
            op = decode(e.payload, e.index)
            if file_id is not None and (op.file_id != file_id or op.kind in LEASE_OPS or op.kind in TRACKER_OPS):
                continue
            rep.read += 1
            rep.last_at = max(rep.last_at, op.at)
            mark = marks.get(e.index, 0)
            if mark < 0:  # failed, and its proposer was told
                rep.unanswered += 1
                continue
            if op.kind in LEASE_OPS or op.kind in TRACKER_OPS:
                # Applied whether marked or not: one in flight at a crash was never answered
                # (a lease it granted runs out within one TTL unused; a chmod or a drain its
                # caller did not hear of is one it retries or sees in `status`).
                if state_op is not None:
                    state_op(op)
                    rep.state_ops += 1
                continue
            if op.kind in FILE_OPS:
                if mark == 0 and not self.backend.applies_unmarked:  # may have been in flight, never answered
                    rep.unanswered += 1
                elif file_op is not None and file_op(op, e.index):
                    rep.applied += 1
                    rep.files.add(op.name)
                else:
                    rep.skipped += 1
                continue
            w = writer_for(op)
            if w is None:
                rep.gone += 1
                continue
            current = w.position(self.log_id) == op.prev and op.name not in rep.files
            if mark == 0 and not self.backend.applies_unmarked and current:
                # in flight when the tracker died, its infofile current: never answered
                rep.unanswered += 1
                continue
            try:
                res = apply_infofile_op(w, op, e.index, self.log_id)
            except LogGapError as gap:
                log.warning("%s", gap)
                rep.gaps += 1
                continue
            except Exception:
                log.exception("log entry %d (%s of %s) was applied once but fails on replay", e.index, op.kind, op.name)
                raise
            if res is SKIPPED:
                rep.skipped += 1
            else:
                rep.applied += 1
                rep.files.add(op.name)
        return rep

    async def aclose(self) -> None:
        """Mark what was applied and close the log (tracker shutdown; with
        etcd: resign, so a standby need not wait for the lease)."""
        if self._unmarked:
            marks, self._unmarked = self._unmarked, []
            try:
                await self.backend.mark(marks, APPLIED)
            except Exception:
                log.exception("could not mark %d log entries applied at shutdown", len(marks))
        await self.backend.aclose()

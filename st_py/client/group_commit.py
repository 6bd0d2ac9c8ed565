"""The client's side of group commit (paper 3.5): acknowledged records wait
in a group, and groups go to the tracker asynchronously while the PUT
pipeline keeps flowing.

A commit starts once ``group_size`` acknowledged records wait. While
``MAX_COMMITS_IN_FLIGHT`` commits are still in flight, acknowledged records
keep waiting and the next commit takes all of them, up to ``MAX_GROUP``
(adaptive group commit, as databases do with their logs): when records arrive
faster than the tracker commits groups of ``group_size``, the groups grow
instead of the commits queueing up, so the tracker's cost per record falls as
the load rises. A record waits at most one commit's round trip longer for
this. A commit that meets an unreachable tracker is retried (it is
idempotent) for up to ``COMMIT_RETRY_S`` seconds per outage (paper 5).
Commits go to the tracker that takes the file's writes, a per-file tracker
when the master redirected the file to one (paper 3.5); if that tracker
stays unreachable for ``RELOCATE_AFTER_S`` or says it no longer has the
file, the master is asked again where the file's writes go.

With ``stage=True`` nothing is committed: the records are handed out by
:meth:`GroupCommitter.take_staged` for one atomic commit of a whole job.

Async protocols (docs/replication.md) commit a record once copy rank 0 is
stored; the ranks not stored when its commit is sent are committed as
pending, and each one stored later is reported with ``StoreCopies`` once the
commit is through (never before, so the tracker always knows the record).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

import grpc

from st_py._proto import tracker_pb2 as pb
from st_py.client.staged import StagedRecords
from st_py.core.record_names import commit_conflict
from st_py.errors import (
    LeaseLostError,
    QuotaExceededError,
    StoreTorrentError,
    TrackerMovedError,
    TrackerUnavailableError,
)

log = logging.getLogger("storetorrent.client")

MAX_COMMITS_IN_FLIGHT = 2  # one being written while the next one fills
MAX_GROUP = 4096  # records in one commit when commits back up (adaptive group commit)
MAX_GROUP_BYTES = 1 << 20  # and names in it, well inside gRPC's 4 MiB message limit
# A group is committed once its records hold this many bytes, however few they are: the
# tracker admits bytes against the quota as the writes go, not all at close (issue "One truth").
COMMIT_BYTES = 8 << 20
# A writer streaming records starts a commit at most every LINGER_S seconds
# unless LINGER_GROUP records wait (issue 41: a commit costs the tracker about
# 2.5 ms of CPU and the client a gRPC call whatever its size, so groups of
# 40-60 made the tracker's per-commit work the largest cost of a queue_put
# stream). A writer whose last commit started longer ago commits at
# ``group_size`` records as before (a trickle is not delayed).
LINGER_S = 0.05
LINGER_GROUP = 1024
COMMIT_RETRY_S = 30.0
RELOCATE_AFTER_S = 1.0  # a per-file tracker down this long may have come back elsewhere: ask the master


# A PutOp's rank or peer set while nothing is in it (st_py/client/record_writer.py):
# shared, so a record that meets no failure allocates no set.
NO_RANKS: frozenset[int] = frozenset()
_WITH: dict[tuple[frozenset[int], int], frozenset[int]] = {}


def with_rank(ranks: frozenset[int], rank: int) -> frozenset[int]:
    """``ranks | {rank}``, one shared object for each set of copy ranks
    (a PutOp's ``acked``): every record's acknowledgement would otherwise
    allocate a set that lives until its commit, and the garbage collector's
    full passes grow with those (docs/benchmarks.md, "Where the client's
    time goes"). At most 2^copies sets are ever made."""
    key = (ranks, rank)
    out = _WITH.get(key)
    if out is None:
        out = _WITH[key] = ranks | {rank}
    return out


def conflicts_of(reply) -> dict[str, tuple[str, str, str]]:
    """A CommitReply's conflicts as ``{name: (reason, kind, record)}``
    (the arguments of :func:`st_py.core.record_names.commit_conflict`
    after the file and name)."""
    n = len(reply.conflict_names)
    kinds = list(reply.conflict_kinds) + [""] * (n - len(reply.conflict_kinds))
    records = list(reply.conflict_records) + [""] * (n - len(reply.conflict_records))
    return {
        name: (reason, kinds[i], records[i])
        for i, (name, reason) in enumerate(zip(reply.conflict_names, reply.conflicts))
    }


class GroupCommitter:
    """Commits the acknowledged records of one open file.

    Parameters
    ----------
    tracker : TrackerClient
    name, file_id : the file
    group_size : int
        Records per group commit when the tracker keeps up.
    failed : callable(op, exception)
        Told of a record the tracker refused (a conflict) or could not commit.
    stage : bool
        Keep records for :meth:`take_staged` instead of committing them.
    lease : callable() -> str, optional
        The writer lease id to commit new versions (ops with ``stored_as``) under.
    relocate : callable() -> TrackerClient, optional
        Asks the master again where the file's writes go (it re-opens the
        file) and returns that tracker's client: called when the tracker
        commits go to stays unreachable or no longer has the file.
    committed : callable(list of op), optional
        Told of the records of each commit once it is through.

    An ``op`` is any object with ``name``, ``name_b``, ``size``, ``crc``,
    ``peers`` (peer index per copy rank) and ``acked`` (copy ranks stored)
    attributes, and ``commit_state``, ``sent_pending``, ``late`` for this
    class to keep (see ``st_py.client.record_writer.PutOp``).

    Thread safety: not safe to share between threads by itself; its file
    calls it from its public methods, one at a time under the file's lock.
    The commits run on their tracker client's call pool (:mod:`st_py.wire.call_pool`);
    their outcomes are reaped only by these calls.
    """

    def __init__(
        self,
        tracker,
        name: str,
        file_id: int,
        group_size: int,
        failed: Callable[[Any, Exception], None],
        stage: bool = False,
        lease: Callable[[], str] | None = None,
        relocate: Callable[[], Any] | None = None,
        committed: Callable[[Any], None] | None = None,
        columns: bool = False,
    ):
        self._tracker, self.name, self.file_id = tracker, name, file_id
        self.columns = columns  # the tracker reads CommitRequest.columns (FileInfo.commit_columns)
        self._committed = committed
        self._lease, self._relocate = lease, relocate
        self.group_size, self._failed, self.stage = group_size, failed, stage
        self.waiting: list = []  # acknowledged, not yet sent
        self._waiting_bytes = 0  # their stored bytes (COMMIT_BYTES)
        self._in_flight: deque = deque()  # (the commit's future, group, request id, sent as columns)
        self._last_start = -LINGER_S  # monotonic time the last commit was started (LINGER_S)
        self._down_since: float | None = None
        self._stored: list = []  # pb.CopyStored of pending copies stored since, to report
        self._stores_in_flight: deque = deque()  # futures of StoreCopies

    def use(self, tracker) -> None:
        """Send the next commits to ``tracker`` (the file was redirected
        anew); those in flight finish where they are."""
        self._tracker = tracker

    def copy_stored(self, op, rank: int) -> None:
        """A pending copy of an acknowledged record is now stored."""
        if op.commit_state == 0 or rank not in op.sent_pending:
            return  # its commit (not sent yet) will say it is stored
        if op.commit_state == 1:
            op.late = (*op.late, rank)  # reported once the commit is through
        else:
            self._stored.append(pb.CopyStored(name=op.name, copy_rank=rank, peer_idx=op.peers[rank]))

    @property
    def busy(self) -> bool:
        """Records wait or commits are in flight."""
        return bool(self.waiting or self._in_flight or self._stored or self._stores_in_flight)

    def add(self, op) -> None:
        """A record every holder acknowledged."""
        self.waiting.append(op)
        self._waiting_bytes += op.size

    def pump(self, force: bool = False) -> None:
        """Collect finished commits and start new ones (all waiting records
        when ``force``); never blocks unless ``force`` needs a free slot."""
        self.reap()
        if self.stage:
            return
        while self.waiting and (force or self._group_due()):
            if len(self._in_flight) >= MAX_COMMITS_IN_FLIGHT:
                if not force and len(self.waiting) < MAX_GROUP and self._waiting_bytes < COMMIT_BYTES:
                    return  # wait for a slot; the next group will be larger
                # A group's worth waits behind two commits: the writer waits for the
                # oldest. Bounds what a writer stores past a quota refusal (it is told
                # at most three groups after the group that crossed it) and the bytes
                # acknowledged but not committed (docs/security.md, "Quotas").
                while len(self._in_flight) >= MAX_COMMITS_IN_FLIGHT:
                    self.reap(block=True)
            size, nbytes = 0, 0
            seen: set = set()
            for op in self.waiting[: max(self.group_size, MAX_GROUP)]:
                nbytes += len(op.name_b) + 32
                schema = getattr(op, "schema", None)
                if schema is not None and schema not in seen:
                    seen.add(schema)
                    nbytes += len(schema[1]) + 16
                if size and nbytes > MAX_GROUP_BYTES:
                    break
                size += 1
            group = self.waiting[:size]
            del self.waiting[:size]
            self._waiting_bytes -= sum(op.size for op in group)
            rid = uuid.uuid4().hex  # the same on every retry: the tracker applies it once
            records, schemas, cols = _records(group, self.columns)
            fut = self._tracker.commit_async(
                self.name,
                self.file_id,
                records,
                self._lease_id(group),
                rid,
                schemas=schemas,
                partial_ok=True,
                columns=cols,
            )
            self._in_flight.append((fut, group, rid, cols is not None))
            self._last_start = time.monotonic()
        if self._stored and (force or len(self._stored) >= self.group_size or not self._stores_in_flight):
            stored, self._stored = self._stored, []
            self._stores_in_flight.append(self._tracker.store_copies_async(self.name, self.file_id, stored))

    def _group_due(self) -> bool:
        """Whether the records waiting make a group to commit now:
        ``COMMIT_BYTES`` of them, ``LINGER_GROUP`` records, or
        ``group_size`` records once ``LINGER_S`` has passed since the last
        commit started."""
        n = len(self.waiting)
        if n >= LINGER_GROUP or self._waiting_bytes >= COMMIT_BYTES:
            return True
        return n >= self.group_size and time.monotonic() - self._last_start >= LINGER_S

    def drain(self) -> None:
        """Commit every waiting record and wait for every commit."""
        self.pump(force=True)
        self.reap(all_=True)
        if self._stored:  # pending copies whose records the commits just made known
            self.pump(force=True)
        while self._stores_in_flight:
            self._reap_stores(block=True)

    def _reap_stores(self, block: bool = False) -> None:
        while self._stores_in_flight and (block or self._stores_in_flight[0].done()):
            fut = self._stores_in_flight.popleft()
            block = False
            try:
                reply = fut.result()
            except grpc.RpcError as e:
                # The copies are on their peers; the infofile still says
                # pending, and repair will find them stored (a PUT is idempotent).
                log.warning(
                    "%s: could not report stored copies (%s); storetorrent repair will",
                    self.name,
                    self._tracker.map_error(e, "StoreCopies"),
                )
                continue
            if self._tracker.locator is not None:  # a local infofile copy must reach it
                self._tracker.locator.saw(self.file_id, reply.generation)
            if reply.conflicts:
                log.warning(
                    "%s: %d stored copies refused by the tracker: %s",
                    self.name,
                    len(reply.conflicts),
                    "; ".join(reply.conflicts[:3]),
                )

    def reap(self, block: bool = False, all_: bool = False) -> None:
        """Collect finished commits (the oldest one waited for when
        ``block``, every one when ``all_``)."""
        self._reap_stores()
        while self._in_flight and (all_ or block or self._in_flight[0][0].done()):
            fut, group, rid, as_columns = self._in_flight.popleft()
            block = False
            try:
                reply = fut.result()
            except grpc.RpcError as e:
                exc = self._tracker.map_error(e, "Commit")
                reply = (
                    self._retry(group, rid, moved=isinstance(exc, TrackerMovedError))
                    if isinstance(exc, (TrackerUnavailableError, TrackerMovedError))
                    else None
                )
                if reply is None:
                    if isinstance(exc, LeaseLostError):  # say which records it cost
                        exc.naming(op.name for op in group)
                    for op in group:
                        self._failed(op, exc)
                    continue
            if as_columns and reply.columns_read != len(group):
                try:
                    reply = self._without_columns(group)
                except StoreTorrentError as exc:
                    for op in group:
                        self._failed(op, exc)
                    continue
            if self._tracker.locator is not None:  # read your writes from a local infofile copy
                self._tracker.locator.saw(self.file_id, reply.generation)
            reasons = conflicts_of(reply)
            refused = set(reply.quota_refused)
            quota = _quota_error(self.name, reply) if refused else None
            done = group
            if reasons or quota is not None:
                done = []
                for op in group:
                    if op.name in reasons:
                        self._failed(op, commit_conflict(self.name, op.name, *reasons[op.name]))
                    elif quota is not None and op.name in refused:
                        self._failed(op, quota)
                    else:
                        done.append(op)
            for op in done:
                op.commit_state = 2
                if op.late:
                    for rank in op.late:
                        self._stored.append(pb.CopyStored(name=op.name, copy_rank=rank, peer_idx=op.peers[rank]))
                    op.late = ()
            if self._committed is not None and done:
                self._committed(done)

    def _without_columns(self, group: list):
        """The tracker did not read the columns ``group`` was sent as (one
        that predates them: an older tracker after a failover), so it
        committed none of it: send it again as a message a record, under a
        new request id (the old one is applied, with nothing), and never
        columns again. Returns the reply; raises grpc.RpcError as a commit."""
        log.warning("%s: the tracker does not read commit columns; sending one message a record", self.name)
        self.columns = False
        records, schemas, _ = _records(group, False)
        rid = uuid.uuid4().hex
        return self._tracker.commit(
            self.name, self.file_id, records, self._lease_id(group), rid, schemas=schemas, partial_ok=True
        )

    def _retry(self, group: list, rid: str, moved: bool = False):
        """The tracker is down or restarting (paper 5): the copies are safe
        on the peers, so retry the commit (request ``rid`` again: if the
        tracker applied it before its reply was lost, it is not applied
        twice, so a record deleted meanwhile stays deleted) for up to
        ``COMMIT_RETRY_S`` seconds. A per-file tracker down for
        ``RELOCATE_AFTER_S``, or one that no longer has the file
        (``moved``), sends the retries through the master's redirect
        anew. Returns the reply, or None if it stays down."""
        records, schemas, cols = _records(group, self.columns)
        if self._down_since is None:
            self._down_since = time.monotonic()
        deadline = self._down_since + COMMIT_RETRY_S  # one budget per outage, not per group
        delay = 0.1
        asked = time.monotonic()  # when the master was last asked where the file's writes go
        while time.monotonic() < deadline:
            time.sleep(delay)
            delay = min(delay * 2, 1.0)
            if self._relocate is not None and (moved or time.monotonic() - asked >= RELOCATE_AFTER_S):
                asked = time.monotonic()
                try:
                    self._tracker = self._relocate()
                    moved = False
                except TrackerUnavailableError:  # the master is down too: keep trying
                    continue
            try:
                reply = self._tracker.commit(
                    self.name,
                    self.file_id,
                    records,
                    self._lease_id(group),
                    rid,
                    schemas=schemas,
                    partial_ok=True,
                    columns=cols,
                )
                if cols is not None and reply.columns_read != len(group):
                    reply = self._without_columns(group)
            except TrackerUnavailableError:
                continue
            except TrackerMovedError:
                moved = True
                continue
            self._down_since = None
            return reply
        return None

    def _lease_id(self, group: list) -> str:
        """The lease for a group with new versions ("" without)."""
        if self._lease is None or not any(getattr(op, "stored_as", "") for op in group):
            return ""
        return self._lease()

    def take_staged(self) -> StagedRecords:
        """The waiting records as columns (:class:`~st_py.client.staged.StagedRecords`:
        sizes as stored, the encoded user metadata, the user's bytes, the
        ``(format, Arrow IPC schema)`` or None, and the name of its own a
        record put again under a name a kept version holds is stored under
        on the peers, committed ``new_only``, else ""), taken out
        (``stage=True``)."""
        ops = self.waiting
        out = StagedRecords(
            [op.name for op in ops],
            [op.size for op in ops],
            [op.crc for op in ops],
            [list(op.peers) for op in ops],
            [getattr(op, "schema", None) for op in ops],
            [getattr(op, "logical_size", None) for op in ops],
            [getattr(op, "meta", b"") for op in ops],
            [getattr(op, "stored_as", "") if getattr(op, "new_only", False) else "" for op in ops],
        )
        self.waiting.clear()
        self._waiting_bytes = 0
        return out


def _quota_error(file: str, reply) -> QuotaExceededError:
    """The error of the records a commit left out for the quota."""
    refused = list(reply.quota_refused)
    whose = "the file's" if reply.quota_scope == "file" else "its owner's"
    return QuotaExceededError(
        f"{file} is over {whose} quota ({reply.quota_used_bytes:,} of {reply.quota_bytes:,} bytes used, all "
        f"copies): record {refused[0]!r} and the records put after it until now are not committed; the "
        "records before it are. Delete records or ask for a larger quota",
        reply.quota_scope,
        reply.quota_bytes,
        reply.quota_used_bytes,
        refused,
    )


def schema_table(schemas) -> tuple[list, list[int]]:
    """The distinct ``(format, schema)`` of ``schemas`` (None: not known) as
    ``pb.RecordSchema`` messages, and each one's 1-based index (0: None)."""
    index: dict = {}
    table: list = []
    refs: list[int] = []
    for s in schemas:
        if s is None:
            refs.append(0)
            continue
        i = index.get(s)
        if i is None:
            table.append(pb.RecordSchema(format=s[0], schema=s[1]))
            i = index[s] = len(table)
        refs.append(i)
    return table, refs


def as_columns(
    names: list[str], sizes: list[int], crcs: list[int], peers: list, refs: list[int], logical: list[int | None]
) -> pb.RecordColumns | None:
    """Plain records (every copy stored, no version, no user metadata,
    no name of their own: the caller's to check) as one
    ``pb.RecordColumns`` (issue 41): ``names``, stored ``sizes`` (bytes),
    ``crcs`` (CRC-32C), ``peers`` (each record's peer indexes by copy
    rank), ``refs`` (indexes into the request's schemas, 0: none) and
    ``logical`` sizes (the user's bytes, or None), in order. None when
    they cannot travel so: copies of unequal counts, or logical sizes
    known for some and not others (the columns hold all or none)."""
    known = [x is not None for x in logical]
    if not (all(known) or not any(known)) or len({len(p) for p in peers}) > 1:
        return None
    return pb.RecordColumns(
        names=names,
        sizes=sizes,
        crc32c=crcs,
        peer_idx=[i for p in peers for i in p],
        schema=refs if any(refs) else [],
        logical_sizes=[int(x) for x in logical if x is not None],  # all or none
    )


def _records(group: list, columns: bool = False) -> tuple[list, list, pb.RecordColumns | None]:
    """The commit of ``group`` (records, the schemas they point into, and
    the same records as columns or None); copies not stored yet go as
    pending. With ``columns`` (the tracker reads them) a group of plain
    records (every copy stored, as many copies each, no version, no user
    metadata, logical sizes all known or all not) travels as one
    ``pb.RecordColumns`` (issue 41), in the group's order; any other group
    as a ``pb.RecordCommit`` per record."""
    out = []
    schemas, refs = schema_table([getattr(op, "schema", None) for op in group])
    for op in group:
        op.commit_state = 1
        # acked holds copy ranks only: as many as peers means every copy is stored
        acked = op.acked
        op.sent_pending = (
            NO_RANKS if len(acked) == len(op.peers) else frozenset(r for r in range(len(op.peers)) if r not in acked)
        )
    if columns and group:
        if not any(
            op.sent_pending
            or getattr(op, "stored_as", "")
            or getattr(op, "new_only", False)
            or getattr(op, "meta", b"")
            for op in group
        ):
            cols = as_columns(
                [op.name for op in group],
                [op.size for op in group],
                [op.crc for op in group],
                [op.peers for op in group],
                refs,
                [getattr(op, "logical_size", None) for op in group],
            )
            if cols is not None:
                return [], schemas, cols
    for op, ref in zip(group, refs):
        out.append(
            pb.RecordCommit(
                name=op.name,
                size=op.size,
                crc32c=op.crc,
                peer_idx=op.peers,
                pending_ranks=sorted(op.sent_pending),
                stored_as=getattr(op, "stored_as", ""),
                new_only=getattr(op, "new_only", False),
                schema=ref,
                logical_size=getattr(op, "logical_size", None),
                meta=getattr(op, "meta", b""),
            )
        )
    return out, schemas, None

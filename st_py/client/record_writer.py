"""The PUT pipeline of an open file (paper 3.2-3.5, 4.3; docs/replication.md).

:class:`RecordWriter` queues a record in three steps: the name check
(write-once names, reserved prefixes, a new version's own name), the
placement (:class:`st_py.client.placer.Placer`) and the send, one PUT per copy
(``client-sync`` and its async form) or one PUT_CHAIN to copy rank 0
(``chain``). Plain new records of the ``client-sync`` protocols, once
checked and placed, are sent in slices with the write batch's calls
(:mod:`st_py.client.put_slices`). Acknowledgements come back through the
transport's callbacks: a copy that fails at its peer fails over to a spare
(paper 4.3); a peer that
holds an uncommitted copy with other content (EXISTS) is asked to replace it
only if the writer that stored it is gone (LEFTOVER, paper 4.4); a record all
of whose copies are stored (copy rank 0 for the async protocols) goes to the
group committer (:mod:`st_py.client.group_commit`). A quota refusal of a group
commit is raised once, at the next put. DELETE of records is here too.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from st_py.client.file_context import FileContext
from st_py.client.group_commit import NO_RANKS, with_rank
from st_py.client.pending import Pending
from st_py.client.placer import Placer
from st_py.client.put_slices import PutSlices
from st_py.client.staged import StagedRecords
from st_py.client.versions import Versions
from st_py.core import user_meta
from st_py.core.history import RetainedProbe, has_history, may_store_under_name, retained_on
from st_py.core.infofile import STRIPE_PREFIX, VERSION_PREFIX, RecordMeta, stripe_name
from st_py.core.record_names import NameTree, check_new_name, check_new_names, conflict_error, name_bytes
from st_py.errors import (
    BadNameError,
    LeaseLostError,
    NameRetainedError,
    NotEnoughPeersError,
    PeerError,
    PeerUnavailableError,
    QueuedOperationsError,
    QuotaExceededError,
    RecordBeingWrittenError,
    RecordExistsError,
    RecordNotFoundError,
    RecordTooLargeError,
    StoreTorrentError,
)
from st_py.wire.protocol import (
    FLAG_ASYNC,
    FLAG_LEFTOVER,
    FLAG_MORE,
    MAX_NAME,
    ErrorCode,
    crc32c,
    encode_delete,
    put_chain_prefix,
)

COALESCE_BYTES = 1 << 20
STRIPE_THRESHOLD = 64 << 20  # bytes: larger data is a striped object (put() stripes it; st_py.client.striping)

SchemaOf = Callable[[str, bytes], "tuple[str, bytes] | None"]
SchemasOf = Callable[[list[str], list[bytes]], "list[tuple[str, bytes] | None]"]


@dataclass(slots=True)
class PutOp:
    """One queued PUT, from :meth:`RecordWriter.queue_put` until every
    copy is stored or given up (and its commit, for the group committer).
    Mutable state of its :class:`RecordWriter`, changed only under the
    file's lock (not to be shared between threads otherwise)."""

    name: str
    name_b: bytes
    data: bytes
    size: int
    crc: int
    peers: list[int]  # peer_idx per copy rank
    acked: frozenset[int] = NO_RANKS  # copy ranks stored (a shared set: with_rank)
    future: Pending = None  # type: ignore[assignment]  # set right after construction
    callback: Callable | None = None
    failed: bool = False
    # The sets below are NO_RANKS (shared, empty) until a failure path puts
    # a rank or peer in one (a new frozenset then): a record that meets no failure allocates
    # none of them, which keeps the garbage collector's full passes rare
    # (docs/benchmarks.md, "Where the client's time goes").
    refused: frozenset[int] = NO_RANKS  # peers holding another live writer's copy (EXISTS)
    leftover_tried: frozenset[int] = NO_RANKS  # peers sent a LEFTOVER PUT after EXISTS
    retained: frozenset[int] = NO_RANKS  # peers keeping an older version under this name
    acknowledged: bool = False  # future set, handed to the group committer
    finished: bool = False  # every copy stored or given up: out of the pipeline
    abandoned: frozenset[int] = NO_RANKS  # async copies left pending for repair
    # group commit state: 0 waiting, 1 commit in flight, 2 committed
    commit_state: int = 0
    sent_pending: frozenset[int] = NO_RANKS  # ranks committed as pending
    late: tuple[int, ...] = ()  # pending ranks stored while the commit was in flight
    stored_as: str = ""  # a new version (replace=True): the name its copies are stored under
    key_b: bytes = b""  # the name the peers store it under (name_b, or stored_as's bytes)
    schema: tuple[str, bytes] | None = None  # (format, Arrow IPC schema) kept in the infofile
    logical_size: int | None = None  # the user's bytes, before the file's filters (size: as stored)
    seq: int = 0  # this handle's put number (which puts a quota refusal already told of)
    new_only: bool = False  # stored_as is a name of its own for a new record, not a replacement
    meta: bytes = b""  # the version's user metadata, encoded (st_py/core/user_meta.py); b"": none
    attempt: int = 0  # bumped when the op is sent again under another name: older replies are ignored


def new_put(
    name: str,
    name_b: bytes,
    data: bytes,
    crc: int,
    holders: list[int],
    future: Pending,
    schema,
    logical_size: int,
    seq: int,
    callback: Callable | None = None,
    meta: bytes = b"",
) -> PutOp:
    """The :class:`PutOp` of a new record stored under its plain name
    (a write batch's or a ``queue_put`` slice's: checked, filtered and
    placed on ``holders`` by copy rank)."""
    return PutOp(
        name,
        name_b,
        data,
        len(data),
        crc,
        holders,
        future=future,
        callback=callback,
        key_b=name_b,
        schema=schema,
        logical_size=logical_size,
        seq=seq,
        meta=meta,
    )


class RecordWriter:
    """The PUT pipeline and record DELETEs of one open file: owns the puts
    in flight (:class:`PutOp`), whether names are checked against the
    infofile up front, whether schemas are kept (:attr:`keep_schemas`), and
    the quota refusal a group commit met, to raise at the next put.

    Parameters
    ----------
    ctx : FileContext
    placer : Placer
        Chooses each record's holders and the spares of failed copies.
    versions : Versions
        The writer lease that new versions (``replace=True``) are written under.
    schema_of : callable(name, data) -> (format, schema) or None
        A record's format and Arrow schema, for the infofile
        (:func:`st_py.core.record_format.written_schema`).
    schemas_of : callable(names, datas) -> list of (format, schema) or None, optional
        The same for a write batch's slice in one call
        (:func:`st_py.core.record_format.written_schemas`); default: ``schema_of`` per record.

    Thread safety: not safe to share between threads by itself; it runs
    inside its file's public methods, one at a time under the file's lock
    (the transport runs the acknowledgement callbacks under it too).
    """

    def __init__(
        self,
        ctx: FileContext,
        placer: Placer,
        versions: Versions,
        schema_of: SchemaOf,
        schemas_of: SchemasOf | None = None,
    ):
        self.ctx = ctx
        self.placer = placer
        self.versions = versions
        self.schema_of = schema_of
        self.schemas_of: SchemasOf = schemas_of or (lambda names, datas: list(map(schema_of, names, datas)))
        # appending to a file that has records: check names up front (write-once)
        self.check_names = ctx.info.records > 0
        # Keep each record's format and schema in the infofile at commit
        # (st_py.core.record_format.written_schema: a footer parse for Parquet,
        # the first block for CSV/JSON, a magic-byte check for others).
        self.keep_schemas = True
        self._quota_exc: QuotaExceededError | None = None  # a group commit's quota refusal, raised at the next put
        self._put_seq = 0  # puts queued so far (PutOp.seq)
        self._quota_told = 0  # puts up to this one are covered by a quota refusal raised already
        # This handle's puts in flight (queued, not yet committed or refused; a
        # staged job's until it ends): a name is a record or a folder, never
        # both (st_py.core.record_names). Committed ones are in the infofile.
        self._names = NameTree()
        # whether the infofile keeps any version's copy under its plain name, looked at once per commit
        self.retained = RetainedProbe()
        # consecutive queue_puts of plain new records, sent together (st_py/client/put_slices.py)
        self.slices = PutSlices(ctx, self)
        ctx.flush_puts = self.slices.flush

    # -- queueing: name check, placement, send ---------------------------------------
    def queue_put(
        self,
        name: str,
        data: bytes,
        callback: Callable[[str, Exception | None], None] | None = None,
        *,
        replace: bool = False,
        holders: list[int] | None = None,
        meta: Mapping[str, str] | None = None,
        own_name: bool = False,
    ) -> Pending:
        """Queue a PUT of record ``name`` (see :meth:`st_py.client.file.StFile.queue_put`);
        ``holders``: a stripe of an object, placed by ``put_object``.
        ``own_name``: a staged record of a replacement (:mod:`st_py.client.replacing`):
        stored under a name of its own on the peers and committed
        ``new_only`` by the commit that removes the name's current version,
        so the name may be committed now (only its rule is checked)."""
        ctx = self.ctx
        ctx.check_open()
        ctx.renew_capability()
        ctx.check_may_write()
        self.raise_quota()
        meta_b = user_meta.encode(name, meta)  # refused before anything is sent
        if own_name:
            name_b, stored_as = self._check_put_name(name, len(data), holders is not None), ""
            if len(name_b) > MAX_NAME - 64:
                raise BadNameError(
                    f"record name {name[:80]!r} is too long to be replaced: at most "
                    f"{MAX_NAME - 64} bytes (a version's name adds up to 64)"
                )
        else:
            name_b, stored_as = self.check_name(name, len(data), replace, stripe=holders is not None)
        data = bytes(data) if not isinstance(data, bytes) else data
        if holders is None and not stored_as and not ctx.chain and not own_name:
            ctx.filters  # noqa: B018  # an encrypted file without its key: refused here, as before
            return self.slices.add(name, name_b, data, callback, meta_b)  # the batch path
        self.slices.flush()  # the records queued before this one go first
        # the record's format and schema, of its plaintext, for the infofile:
        # scans then read no record to learn them (docs/infofile.md)
        schema = self.schema_of(name, data) if self.keep_schemas and holders is None else None
        logical_size = len(data)
        if ctx.filters:  # the peers store (and CRC) the filtered bytes
            data = ctx.filters.encode(ctx.file_id, name, data)
        ctx.wait_for_slot()
        op = PutOp(
            name,
            name_b,
            data,
            len(data),
            crc32c(data),
            self.placer.place(name, holders),
            future=Pending(ctx.transport.wait, name),
            callback=callback,
            stored_as=stored_as,
            key_b=stored_as.encode("utf-8") if stored_as else name_b,
            schema=schema,
            logical_size=logical_size,
            seq=self._put_seq + 1,
            meta=meta_b,
        )
        self._put_seq += 1
        if holders is None:
            self._names.add(name)
        if own_name or (not stored_as and not self.plain_name_free(op)):
            self.take_own_name(op)  # a kept version's copies under its name, not all met
        self.send(op)
        return op.future

    def check_name(self, name: str, size: int, replace: bool, stripe: bool = False) -> tuple[bytes, str]:
        """Check record ``name`` for a PUT of ``size`` bytes: returns its
        bytes and, for a new version (``replace``), the name its copies are
        stored under (taking the writer lease if needed), else "".

        Raises
        ------
        BadNameError, RecordExistsError, RecordTooLargeError, LeaseHeldError
        RecordNameRuleError
            (a BadNameError) no relative path (st_py.core.record_names).
        RecordIsADirectoryError, RecordNotADirectoryError
            A folder of, or below, a name committed (when :attr:`check_names`)
            or in flight on this handle.
        """
        ctx = self.ctx
        name_b = self._check_put_name(name, size, stripe)
        exists, hit = False, None
        if not stripe:  # one statement for both: write-once, and a name is a record or a folder
            hit = self._names.conflict(name)
            if hit is None and self.check_names:
                exists, hit = ctx.infofile().name_state(name)
            if hit is not None:
                raise conflict_error(hit[0], ctx.name, name, hit[1])
        elif self.check_names and not replace:
            exists = ctx.infofile().exists(name)
        stored_as = ""
        if replace:
            if len(name_b) > MAX_NAME - 64:
                raise BadNameError(
                    f"record name {name[:80]!r} is too long to be replaced: at most "
                    f"{MAX_NAME - 64} bytes (a version's name adds up to 64)"
                )
            if ctx.infofile().object(name) is not None:
                raise BadNameError(
                    f"{name!r} is a striped object: queue_put does not replace objects; use "
                    "put(name, data, replace=True), which replaces it at once (docs/striping.md)"
                )
            stored_as = self.versions.version_key(name)
        elif exists:
            raise self._exists_error(name)
        return name_b, stored_as

    def check_names_many(
        self, names: list[str], sizes: list[int]
    ) -> tuple[list[tuple[str, bytes]], list[tuple[str, StoreTorrentError]]]:
        """:meth:`check_name` of many new records at once (``replace=False``,
        not stripes: a write batch's slice), ``sizes[i]`` the bytes of
        ``names[i]``: the same checks, the same error (type and message)
        for each name, but **one** look at the infofile for them all
        (:meth:`st_py.core.infofile.InfofileReader.name_states`, when
        :attr:`check_names`) instead of one statement a name. Names are
        checked against this handle's puts in flight, not against each
        other (the caller's: a name given twice, a batch's own tree).

        Returns ``(ok, failed)``, both in the order of ``names``: ``ok`` the
        ``(name, its UTF-8 bytes)`` that may be put, ``failed`` the
        ``(name, error)`` of the others; a name given twice is in either
        list twice.

        The errors of :meth:`check_name` are returned, not raised:
        BadNameError (RecordNameRuleError), RecordTooLargeError,
        RecordExistsError, RecordIsADirectoryError, RecordNotADirectoryError.

        Raises
        ------
        FileNotFoundError
            :attr:`check_names` and the infofile is not there (as :meth:`check_name`).
        """
        ctx, conflict = self.ctx, self._names.conflict
        checked: list[tuple[str, bytes, StoreTorrentError | None, tuple[str, str] | None]] = []
        ask: list[str] = []  # the names the infofile decides
        # every name at once when each passes (the common slice); else one by one, saying why
        all_b = (
            check_new_names(names, (STRIPE_PREFIX, VERSION_PREFIX))
            if not sizes or max(sizes) <= STRIPE_THRESHOLD
            else None
        )
        if all_b is not None:
            hits = self._names.conflicts_many(names)  # this handle's puts in flight
            if not hits and not self.check_names:  # nothing more to look at: all of them may go
                return list(zip(names, all_b)), []
            checked = [(name, name_b, None, hits.get(name)) for name, name_b in zip(names, all_b)]
            if self.check_names:
                ask = [name for name in names if name not in hits]
        else:
            for name, size in zip(names, sizes):
                try:
                    name_b = self._check_put_name(name, size, False)
                except StoreTorrentError as e:
                    checked.append((name, b"", e, None))
                    continue
                hit = conflict(name)  # this handle's puts in flight
                checked.append((name, name_b, None, hit))
                if hit is None and self.check_names:
                    ask.append(name)
        states = ctx.infofile().name_states(ask) if ask else {}
        ok: list[tuple[str, bytes]] = []
        failed: list[tuple[str, StoreTorrentError]] = []
        for name, name_b, exc, hit in checked:
            if exc is None:
                exists = False
                if hit is None and name in states:
                    exists, hit = states[name]
                if hit is not None:
                    exc = conflict_error(hit[0], ctx.name, name, hit[1])
                elif exists:
                    exc = self._exists_error(name)
            if exc is None:
                ok.append((name, name_b))
            else:
                failed.append((name, exc))
        return ok, failed

    @staticmethod
    def _check_put_name(name: str, size: int, stripe: bool) -> bytes:
        """The checks of a put's name that need nothing but the name and
        its size (:meth:`check_name`, :meth:`check_names_many`): returns its
        UTF-8 bytes. Pure."""
        name_b = check_new_name(name)
        if size > STRIPE_THRESHOLD and not stripe:
            raise RecordTooLargeError(name, size, STRIPE_THRESHOLD)
        if name.startswith(STRIPE_PREFIX) and not stripe:
            raise BadNameError(
                f"record names starting with {STRIPE_PREFIX!r} hold the stripes of objects: "
                f"use another name for {name[:80]!r} (docs/striping.md)"
            )
        if name.startswith(VERSION_PREFIX):
            raise BadNameError(
                f"record names starting with {VERSION_PREFIX!r} hold the versions of replaced "
                f"records: use another name for {name[:80]!r} (docs/infofile.md)"
            )
        return name_b

    def _exists_error(self, name: str) -> RecordExistsError:
        """The error of new record ``name`` already committed (write-once)."""
        return RecordExistsError(
            f"record {name!r} is already committed in {self.ctx.name}: records are "
            "write-once; delete it first or use another name",
            names=(name,),
        )

    def check_tree(self, name: str) -> None:
        """Refuse a new ``name`` that is a folder or below a record: of
        this handle's puts, or of the committed names when
        :attr:`check_names` (index lookups; the tracker's commit decides
        for concurrent writers, docs/decisions.md).

        Raises
        ------
        RecordIsADirectoryError, RecordNotADirectoryError
        """
        hit = self._names.conflict(name)
        if hit is None and self.check_names:
            hit = self.ctx.infofile().tree_conflict(name)
        if hit is not None:
            raise conflict_error(hit[0], self.ctx.name, name, hit[1])

    def send(self, op: PutOp) -> None:
        """Put ``op`` in the pipeline: its copies to their holders (one
        PUT_CHAIN under ``chain``), coalesced with the frames waiting."""
        ctx = self.ctx
        ctx.puts_inflight += 1
        if ctx.chain:
            self._send_chain(op)
        else:
            for rank, idx in enumerate(op.peers):
                self._send_copy(op, rank, idx)
        # Coalesce (paper 3.2): frames pile up and go out in one sendmsg per
        # peer when the pipeline is full, when enough bytes wait, or at poll().
        if ctx.transport.out_bytes >= COALESCE_BYTES:
            ctx.transport.poll(0)
        ctx.committer.pump()

    # -- a write batch's records (st_py/client/batch_writer.py) -----------------------
    def batch_ops(
        self,
        names: list[str],
        names_b: list[bytes],
        datas: list[bytes],
        crcs: list[int],
        schemas: list,
        logical_sizes: list[int],
        kept: set[str],
        placed: list[list[int]],
    ) -> list[PutOp]:
        """The :class:`PutOp` of each record of a write batch's slice,
        already checked (:meth:`check_names_many`), filtered and placed
        (``placed[i]``: holders by copy rank;
        :meth:`st_py.client.placer.Placer.place_many`); a name in ``kept``
        may hold a kept version's copies (the slice's one query,
        :func:`st_py.core.history.names_with_copies`), so it is checked as
        :meth:`queue_put` checks each record. Counted as in flight on this
        handle's names, all at once; send them with :meth:`send_batch`."""
        wait = self.ctx.transport.wait
        seq = self._put_seq
        ops = []
        for name, name_b, data, crc, schema, logical, holders in zip(
            names, names_b, datas, crcs, schemas, logical_sizes, placed
        ):
            seq += 1
            ops.append(new_put(name, name_b, data, crc, holders, Pending(wait, name), schema, logical, seq))
        self._put_seq = seq
        self._names.add_many(names)
        if kept:
            for op in ops:
                if op.name in kept and not self.plain_name_free(op):
                    self.take_own_name(op)
        return ops

    def send_batch(self, ops: list[PutOp], counted: bool = False) -> None:
        """Put the records of a write batch in the pipeline (``client-sync``
        and its async form; ``chain`` goes record by record through
        :meth:`send`): the copies for each peer framed in one call
        (:meth:`Transport.send_put_batch`), then sent together, in as few
        ``sendmsg`` calls as the sockets take. Acknowledgements take the
        path of :meth:`queue_put`'s (fail-over to spares, EXISTS, LEFTOVER).
        ``counted``: the records are counted in flight already (a
        ``queue_put`` slice, :mod:`st_py.client.put_slices`)."""
        ctx = self.ctx
        if ctx.chain:
            for op in ops:
                if counted:
                    ctx.puts_inflight -= 1  # send() counts it
                self.send(op)
            return
        per_peer: dict[int, tuple[list, list, list, list, list]] = {}
        for op in ops:
            for rank, idx in enumerate(op.peers):
                b = per_peer.get(idx)
                if b is None:
                    b = per_peer[idx] = ([], [], [], [], [])
                b[0].append(rank)
                b[1].append(op.crc)
                b[2].append(op.key_b)
                b[3].append(op.data)
                b[4].append(_CopyDone(self, op, rank, idx))
        if not counted:
            ctx.puts_inflight += len(ops)
        for idx, (ranks, crcs, keys, datas, callbacks) in per_peer.items():
            ctx.transport.send_put_batch(ctx.addr(idx), ctx.file_id, 0, ranks, crcs, keys, datas, callbacks)
        ctx.transport.poll(0)
        ctx.committer.pump()

    def put(self, name: str, data: bytes, replace: bool = False, meta: Mapping[str, str] | None = None) -> None:
        """Queue a PUT of record ``name`` and wait until every copy is
        acknowledged (see :meth:`st_py.client.file.StFile.put`)."""
        pending = self.queue_put(name, data, replace=replace, meta=meta)
        try:
            pending.result()
        except StoreTorrentError as e:  # told here: flush and close do not report it again
            self.ctx.forget_error(e)
            raise
        self.ctx.committer.pump()  # its group's commit, if the put filled one (quota: raised below)
        self.raise_quota()

    def _send_copy(self, op: PutOp, rank: int, idx: int, flags: int = 0) -> None:
        ctx = self.ctx
        attempt = op.attempt
        ctx.transport.send_put(
            ctx.addr(idx),
            ctx.file_id,
            rank,
            op.crc,
            op.key_b,
            op.data,
            flags,
            lambda fr, exc: self._copy_done(op, rank, idx, exc) if attempt == op.attempt else None,
        )

    def _send_chain(self, op: PutOp) -> None:
        """One PUT_CHAIN to the rank-0 holder, which forwards the record
        down the others (docs/replication.md, "chain")."""
        ctx = self.ctx
        hops = [ctx.addr(i) for i in op.peers[1:]]
        flags = FLAG_ASYNC if ctx.is_async else 0
        attempt = op.attempt
        ctx.transport.send(
            ctx.addr(op.peers[0]),
            lambda seq: [put_chain_prefix(seq, ctx.file_id, 0, op.crc, op.key_b, hops, len(op.data), flags), op.data],
            lambda fr, exc: self._chain_done(op, fr, exc) if attempt == op.attempt else None,
        )

    # -- acknowledgements ------------------------------------------------------------
    def _chain_done(self, op: PutOp, fr, exc: Exception | None) -> None:
        ctx = self.ctx
        if op.failed or op.finished:
            return
        if exc is None:
            if fr is not None and fr.flags & FLAG_MORE:  # async: copy rank 0 is stored
                self._copy_stored(op, 0)
                return
            for rank in range(ctx.copies):
                if rank not in op.acked:
                    self._copy_stored(op, rank)
            return
        # The chain broke. A downstream failure names the peer where it did:
        # the copies before it are stored; that copy fails over like a
        # client-sync one, and the copies after it are written directly.
        broken = None
        attempt = op.attempt
        if isinstance(exc, PeerError) and exc.peers:
            ranks = [r for r, i in enumerate(op.peers) if ctx.addr(i) == exc.peers[0]]
            broken = ranks[0] if ranks and ranks[0] > 0 else None
        if broken is not None:
            for rank in range(broken):
                if rank not in op.acked:
                    self._copy_stored(op, rank)
            addr = ctx.addr(op.peers[broken])
            assert isinstance(exc, PeerError)
            err: Exception = (
                PeerUnavailableError(addr, f"copy {broken} of {op.name!r} forwarded by {exc.peer}: {exc.message}")
                if exc.code in (ErrorCode.PEER_UNREACHABLE, ErrorCode.TIMEOUT)
                else PeerError(exc.code, exc.message, addr, exc.seq)
            )
            self._copy_done(op, broken, op.peers[broken], err)
            start = broken + 1
        elif 0 not in op.acked:  # copy rank 0 itself failed, or its connection did
            self._copy_done(op, 0, op.peers[0], exc)
            start = 1
        else:  # async, rank 0 stored, then its connection failed: the rest is unknown
            start = 1
        if op.failed or op.attempt != attempt:  # failed, or sent again whole under a name of its own
            return
        for rank in range(start, ctx.copies):
            if rank not in op.acked:
                self._send_copy(op, rank, op.peers[rank])

    def _copy_stored(self, op: PutOp, rank: int) -> None:
        op.acked = with_rank(op.acked, rank)
        if op.acknowledged:
            self.ctx.committer.copy_stored(op, rank)  # a pending copy of a committed record
        elif len(op.acked) == self.ctx.copies or (self.ctx.is_async and rank == 0):
            self._acknowledge(op)
        self._maybe_finish(op)

    def _acknowledge(self, op: PutOp) -> None:
        op.acknowledged = True
        self.ctx.committer.add(op)
        op.future.set_result(True)
        if op.callback:
            self.ctx.notify(op.name, op.callback, op.name, None)

    def _maybe_finish(self, op: PutOp) -> None:
        if not op.finished and len(op.acked) + len(op.abandoned) >= self.ctx.copies:
            op.finished = True
            op.data = b""  # every copy is stored: memory stays bounded by depth x size
            self.ctx.puts_inflight -= 1

    def _fail_over(self, op: PutOp, rank: int, usable: list[int]) -> bool:
        """Send copy ``rank`` of ``op`` to a spare among ``usable`` (paper
        4.3), apart by failure domain from the copies that stay; False if
        there is none. A spare that must share a domain is counted. A new
        record whose spare leaves a kept version's copies under its plain
        name met only in part is sent again, every copy, under a name of its
        own (:meth:`plain_name_free`)."""
        new = self.placer.move_copy(op.name, op.peers, rank, usable)
        if new is None:
            return False
        if not op.stored_as and not op.acknowledged and not self.plain_name_free(op):
            # the spare leaves a kept version's copies met in part under the plain name
            self._store_under_own_name(op)
            return True
        self._send_copy(op, rank, new)
        return True

    def _copy_done(self, op: PutOp, rank: int, idx: int, exc: Exception | None) -> None:
        ctx = self.ctx
        if op.failed or op.finished:
            return
        if exc is None:
            self._copy_stored(op, rank)
            return
        retry = isinstance(exc, PeerUnavailableError) or (
            isinstance(exc, PeerError)
            and exc.code in (ErrorCode.NO_SPACE, ErrorCode.IO_ERROR, ErrorCode.BUSY, ErrorCode.TIMEOUT)
        )
        if retry:
            # Dynamic failure (paper 4.3): put this copy on a peer that holds no copy.
            # A full or failing disk takes the peer out of this file's writes; a
            # peer at its connection limit (BUSY) or that timed out a stalled
            # frame is fine and stays usable.
            if isinstance(exc, PeerError) and exc.code in (ErrorCode.NO_SPACE, ErrorCode.IO_ERROR):
                ctx.transport.failed.setdefault(ctx.addr(idx), str(exc))
            if self._fail_over(op, rank, ctx.write_targets()):
                return
            exc = NotEnoughPeersError(
                f"record {op.name!r}: copy {rank} failed ({exc}) and no other live peer can take it; "
                f"class {ctx.replication} needs {ctx.copies} live peers"
            )
        elif isinstance(exc, PeerError) and exc.code == ErrorCode.EXISTS:
            committed = ctx.infofile().exists(op.name) and not op.stored_as
            if not committed and retained_on(ctx.current_infofile(), op.stored_as or op.name, idx):
                # a deleted or replaced version kept there for older readers
                # and snapshots (docs/snapshots.md): never replace it
                op.refused = op.refused | {idx}
                op.retained = op.retained | {idx}
                if not op.stored_as and not op.acknowledged:
                    self._store_under_own_name(op)  # every copy again, under a name no version has
                    return
                if self._fail_over(op, rank, [i for i in ctx.write_targets() if i not in op.refused]):
                    return
            elif not committed and not op.acknowledged and idx not in op.leftover_tried:
                # An uncommitted copy with other content. Left by a crashed
                # writer (paper 4.4), it is replaced: the peer does so only
                # if the connection that stored it has closed (LEFTOVER), so
                # a live writer's copy is never overwritten.
                op.leftover_tried = op.leftover_tried | {idx}
                self._send_copy(op, rank, idx, FLAG_LEFTOVER)
                return
            if not committed or op.acknowledged:
                # A live writer's uncommitted copy: put this copy on another peer.
                op.refused = op.refused | {idx}
                if self._fail_over(op, rank, [i for i in ctx.write_targets() if i not in op.refused]):
                    return
            if op.retained and not committed:
                exc = NameRetainedError(op.name, ctx.name, sorted(ctx.addr(i) for i in op.retained))
            elif committed:
                exc = RecordExistsError(
                    f"record {op.name!r} is already committed in {ctx.name}: records are "
                    "write-once; delete it first (f.delete(name)) or use another name",
                    names=(op.name,),
                )
            else:
                exc = RecordBeingWrittenError(op.name, ctx.name, sorted({ctx.addr(i) for i in op.refused} | {exc.peer}))
        if op.acknowledged:
            # An async record is committed with this copy pending: repair
            # stores it (storetorrent repair, docs/replication.md).
            op.abandoned = op.abandoned | {rank}
            self._maybe_finish(op)
            return
        self.fail_put(op, exc)

    def reserve(self, name: str) -> int:
        """Count a new put of ``name`` (checked by :meth:`check_name`) and
        hold its name against this handle's other puts; returns its
        sequence number (``PutOp.seq``). For a put that joins a slice
        (:mod:`st_py.client.put_slices`)."""
        self._put_seq += 1
        self._names.add(name)
        return self._put_seq

    def plain_name_free(self, op: PutOp) -> bool:
        """Whether new record ``op``, as placed, may be stored under its
        plain name: :func:`st_py.core.history.may_store_under_name` (no
        kept version's live copy under it, or every rank adopts one with
        the same bytes). A file whose infofile is not there yet keeps
        nothing."""
        try:
            reader = self.ctx.current_infofile()
        except FileNotFoundError:
            return True
        if not self.retained.any_kept(reader):  # nothing kept: no query per record
            return True
        return may_store_under_name(reader, op.name, op.peers, op.crc, op.size)

    @staticmethod
    def take_own_name(op: PutOp) -> None:
        """Give new record ``op`` a name of its own on the peers
        (``.st-version/new-.../NAME``), committed ``new_only``: write-once,
        like any new record (docs/snapshots.md, "Putting a name again")."""
        op.stored_as = f"{VERSION_PREFIX}new-{uuid.uuid4().hex[:16]}/{op.name}"
        op.key_b = op.stored_as.encode("utf-8")
        op.new_only = True

    def _store_under_own_name(self, op: PutOp) -> None:
        """Send every copy of new record ``op`` again, to the same holders,
        under a name of its own on the peers (``.st-version/new-.../NAME``):
        its plain name is kept on a peer by an older version that snapshots
        or older readers still use (docs/snapshots.md, "Putting a name
        again"), which must never be overwritten. The commit says
        ``new_only``: write-once, like any new record. Copies already stored
        under the plain name are left uncommitted, for the scrubber."""
        op.attempt += 1  # the replies still to come for the plain name are ignored
        self.take_own_name(op)
        op.acked = NO_RANKS
        op.refused = op.leftover_tried = NO_RANKS
        if self.ctx.chain:
            self._send_chain(op)
        else:
            for rank, idx in enumerate(op.peers):
                self._send_copy(op, rank, idx)

    def fail_put(self, op: PutOp, exc: Exception) -> None:
        """Fail put ``op`` with ``exc``: its name is free again, its Pending
        raises ``exc``, its callback is told (or ``flush`` reports it)."""
        self._names.discard(op.name)
        op.failed = True
        op.finished = True
        self.ctx.puts_inflight -= 1
        op.future.set_exception(exc)
        if op.callback:
            self.ctx.notify(op.name, op.callback, op.name, exc)
        else:
            self.ctx.errors.append((op.name, exc))

    # -- commits ---------------------------------------------------------------------
    def commit_done(self, ops: list[PutOp]) -> None:
        """The commit of ``ops`` is through (the group committer's ``committed``)."""
        self._names.discard_many([op.name for op in ops])

    def commit_failed(self, op: PutOp, exc: Exception) -> None:
        """The tracker refused (conflict, quota) or could not commit ``op``
        (the group committer's ``failed``)."""
        self._names.discard(op.name)
        if isinstance(exc, LeaseLostError):
            self.versions.lease_lost()  # the next new version takes the lease again
            exc.file = self.ctx.name
        if isinstance(exc, QuotaExceededError) and not op.callback:
            if op.seq <= self._quota_told:  # put before a refusal raised already, which covers it
                op.future.set_exception(exc)
                return
            if self._quota_exc is None:
                self._quota_exc = exc  # raised at the next put (raise_quota)
        op.future.set_exception(exc)
        if op.callback:
            self.ctx.notify(op.name, op.callback, op.name, exc)
        else:
            self.ctx.errors.append((op.name, exc))

    def raise_quota(self) -> None:
        """Raise the quota refusal the group commit met, once: at the put
        after it (the records before it are committed; so are none after
        it, so a writer that goes on learns of it at every group). The
        refused records' errors are reported by it, not again by close."""
        exc = self._quota_exc
        if exc is None:
            return
        self._quota_exc = None
        self._quota_told = self._put_seq  # the puts so far: refused ones among them are told of by this
        errors = self.ctx.errors
        kept = [(n, e) for n, e in errors if not isinstance(e, QuotaExceededError)]
        errors.clear()
        errors.extend(kept)
        raise exc

    def commit_all(self) -> None:
        """Wait for every queued PUT and commit, raising nothing: the
        failures stay for :meth:`flush` (and so ``close()``) to raise. For
        calls that must see every earlier put committed but are not the ones
        that report them (a record delete, a GET_LOCAL plan): a put's failure
        is never raised by such an unrelated call and then missing from
        ``close()`` (issue 39)."""
        ctx = self.ctx
        self.slices.flush()
        ctx.transport.wait(lambda: ctx.inflight == 0)
        ctx.committer.drain()

    def flush(self) -> None:
        """Wait for every queued PUT and commit: :meth:`st_py.client.file.StFile.flush` (the public docstring)."""
        ctx = self.ctx
        self.commit_all()
        if ctx.errors:
            errs = list(ctx.errors)
            ctx.errors.clear()
            if self._quota_exc is not None:  # reported here: not again at the next put
                self._quota_exc, self._quota_told = None, self._put_seq
            if len({id(e) for _, e in errs}) == 1:  # one failure, or one commit that failed a group
                raise errs[0][1]
            more = f" (and {len(errs) - 5} more)" if len(errs) > 5 else ""
            raise QueuedOperationsError(
                f"{len(errs)} queued operations failed: " + "; ".join(f"{n!r}: {e}" for n, e in errs[:5]) + more, errs
            )

    def staged_records(self) -> StagedRecords:
        """The staged records, taken out (see :meth:`st_py.client.file.StFile.staged_records`)."""
        self.flush()
        return self.ctx.committer.take_staged()

    # -- DELETE ----------------------------------------------------------------------
    def delete(self, name: str) -> None:
        """Delete record or object ``name``: :meth:`st_py.client.file.StFile.delete` (the public docstring)."""
        ctx = self.ctx
        ctx.check_open()
        ctx.renew_capability()
        ctx.check_may_write()
        self.commit_all()  # earlier puts first; their failures are flush's and close's to raise
        obj = ctx.infofile().object(name)
        if obj is not None:  # a striped object: the object first (invisible), then its stripes
            ctx.file_tracker_call("delete", ctx.name, ctx.file_id, records=[name])
            self.delete_stripes([stripe_name(name, i) for i in range(obj.stripes)])
            return
        if self.delete_copies(name) is None:
            raise RecordNotFoundError(f"no record {name!r} in {ctx.name}")

    def delete_stripes(self, names: list[str]) -> list[str]:
        """Delete the committed stripe records ``names``
        (:func:`st_py.core.infofile.stripe_name`): their commits first, in
        one call, then their copies, all at once (on the holders read
        before; in a file that keeps history they stay for older readers,
        as :meth:`delete_copies` leaves them). For :meth:`delete` of an object, after its row, and for
        a ``put_object`` clearing stripes that did not become an object
        (``st_py.client.striping``).

        The tracker keeps the stripes of an object that is committed
        (``DeleteReply.kept``): those are returned, and their copies left.
        Commits go first so that a copy is never deleted under an object a
        writer commits meanwhile (docs/striping.md, "Stripes a writer left").

        Returns
        -------
        list of str
            The names the tracker kept (their object is committed).

        Raises
        ------
        PeerError, TrackerError
            As :meth:`delete_copies`.
        """
        if not names:
            return []
        ctx = self.ctx
        info = ctx.infofile()
        if has_history(info):  # the copies stay for older readers; the scrubber removes them
            held: dict[str, RecordMeta] = {}
        else:
            held = info.lookup_many(list(names))
        reply = ctx.file_tracker_call("delete", ctx.name, ctx.file_id, records=list(names))
        kept = list(reply.kept)
        gone = set(kept)  # every copy of the others at once: one round trip, not one a stripe
        self._delete_on([(m.key, i) for n, m in held.items() if n not in gone for i in m.peers if ctx.peer_usable(i)])
        return kept

    def delete_copies(self, name: str) -> bool | None:
        """Delete record ``name``: DELETE on every holder of its copies (every
        live peer if it is not committed), then its commit at the tracker.
        Returns None if nobody knew it. In a file that keeps history
        (docs/snapshots.md) a committed record's copies stay on their peers
        and only its commit goes: scans planned before the delete and reads
        as of an older generation still read them, and the peers' scrubbers
        remove them once no snapshot holds them and ``--history-age`` has
        passed. Otherwise a replaced record's older versions and moved
        copies are deleted with it.

        Raises
        ------
        PeerError
            A holder refused the DELETE with an error other than NOT_FOUND.
        TrackerError
            The commit of the delete failed.
        """
        ctx = self.ctx
        info = ctx.infofile()
        meta = info.lookup(name)
        if meta is not None and has_history(info):
            if not name.startswith(STRIPE_PREFIX):  # stripes go with their object, in one call
                ctx.file_tracker_call("delete", ctx.name, ctx.file_id, records=[name])
            return True
        key = meta.key if meta is not None else name
        targets = [(key, i) for i in (meta.peers if meta else ctx.peers) if ctx.peer_usable(i)]
        if meta is None:  # an uncommitted name: never an older version kept for older readers
            targets = [(k, i) for k, i in targets if not retained_on(info, k, i)]
        if meta is not None:  # its older versions and moved copies go with it
            targets += [(k, i) for k, i in info.superseded_copies(name) if ctx.peer_usable(i) and (k, i) not in targets]
        found = self._delete_on(targets)
        if meta is not None:
            if not name.startswith(STRIPE_PREFIX):  # stripes go with their object, in one call
                ctx.file_tracker_call("delete", ctx.name, ctx.file_id, records=[name])
            return True
        return True if found else None

    def _delete_on(self, targets: list[tuple[str, int]]) -> bool:
        """DELETE the copies ``(stored name, peer_idx)`` (of one record, or
        of many) at once and wait for every reply; whether any peer had one.

        Raises
        ------
        PeerError
            A holder refused the DELETE with an error other than NOT_FOUND.
        """
        ctx = self.ctx
        results: dict[int, Exception | None] = {}
        for n, (k, idx) in enumerate(targets):
            ctx.transport.send(
                ctx.addr(idx),
                functools.partial(_encode_delete, file_id=ctx.file_id, name=name_bytes(k)),
                functools.partial(store_result, results, n),
            )
        ctx.transport.wait(lambda: len(results) == len(targets))
        for e in results.values():
            if isinstance(e, PeerError) and e.code != ErrorCode.NOT_FOUND:
                raise e
        return any(e is None for e in results.values())


class _CopyDone:
    """The callback of one copy sent by :meth:`RecordWriter.send_batch`:
    one object a copy (a ``functools.partial`` is three: itself, its
    arguments and its keywords), since each lives until the copy is
    acknowledged and the garbage collector's full passes grow with such
    objects (docs/benchmarks.md, "Where the client's time goes")."""

    __slots__ = ("writer", "op", "rank", "idx", "attempt")

    def __init__(self, writer: RecordWriter, op: PutOp, rank: int, idx: int) -> None:
        self.writer, self.op, self.rank, self.idx, self.attempt = writer, op, rank, idx, op.attempt

    def __call__(self, fr, exc: Exception | None) -> None:
        op = self.op
        if self.attempt != op.attempt:  # a reply for the name it was sent under before
            return
        if exc is None and not op.failed and not op.finished:  # the common case, as _copy_done takes it
            self.writer._copy_stored(op, self.rank)
        else:
            self.writer._copy_done(op, self.rank, self.idx, exc)


def store_result(results: dict, key, fr, exc) -> None:
    """A transport callback keeping each request's error (None: done) under ``key``."""
    results[key] = exc


def _encode_delete(seq: int, file_id: int, name: bytes) -> list:
    return [encode_delete(seq, file_id, name)]


__all__ = ["RecordWriter", "PutOp", "new_put", "name_bytes", "STRIPE_THRESHOLD", "COALESCE_BYTES"]

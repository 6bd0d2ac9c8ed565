"""Striped objects (MORRIS / NFSStripe, seed 003 sections 3-4; FreeLoader's
stripe width and size, seed 004 section 3.2; docs/striping.md): objects far
larger than a record are stored as stripes, round-robin across
``stripe_width`` peers, each stripe a record of its own (its own CRC-32C and
F copies), named ``.st-stripe/<object>/<index>``. In a ``local-first`` file
(or from a handle with ``prefer_peer``) striping is asymmetric (FreeLoader,
seed 004 section 4.1): copy rank 0 of the stripes on the writer's own peer,
the other copies round-robin over the others. The object becomes visible
only when every stripe is committed and then its row in the infofile's
``objects`` table is (``CommitObjects``), in one tracker transaction.

Reading: ``StFile.get`` of an object fetches its stripes in parallel from
their holders and reassembles them (:meth:`st_py.client.reader.RecordReader.get_object`);
:meth:`Objects.open` returns a seekable read-only file (:class:`ObjectReader`)
whose range reads fetch only the stripes they touch, so pyarrow reads a
Parquet object's footer and one column without the rest;
:meth:`Objects.local_stripes` gives the stripes GET_LOCAL reveals to this
node, with their offsets.

:class:`Objects` does this for one open file (:class:`st_py.client.file.StFile`
delegates to it), on the file's record writer, reader and GET_LOCAL.
"""

from __future__ import annotations

import io
import logging
import sqlite3
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import BinaryIO, Protocol

import google_crc32c

from st_py.client.file_context import FileContext
from st_py.client.local_reads import LocalReads
from st_py.client.pending import Pending
from st_py.client.placer import Placer
from st_py.client.reader import RecordReader
from st_py.client.record_writer import STRIPE_THRESHOLD, RecordWriter
from st_py.core import user_meta
from st_py.core.history import AsOf
from st_py.core.infofile import (
    STRIPE_PREFIX,
    ObjectMeta,
    ObjectVersion,
    RecordMeta,
    object_version,
    stripe_name,
    stripe_range,
)
from st_py.core.placement import choose_holders, fit_local_share, stripe_holders
from st_py.core.record_names import check_new_name
from st_py.errors import (
    BadNameError,
    ChecksumError,
    InvalidOptionError,
    ObjectBeingWrittenError,
    RecordExistsError,
    RecordNotFoundError,
)

log = logging.getLogger("st.client")

DEFAULT_STRIPE_SIZE = 32 << 20  # bytes: well inside a peer's 64 MiB frame
STRIPES_IN_FLIGHT = 8  # memory bound of put_object: this many stripes held at once
# Seconds since the newest stripe committed under an object's name without
# its object after which a put_object of the name takes that writer for dead
# and clears its stripes (Objects._clear_left; HDFS's lease soft limit is 60 s).
WRITER_SILENT_S = 60.0


def object_commit(obj: ObjectMeta, schema_ref: int, meta: bytes):
    """The tracker's ``ObjectCommit`` of ``obj`` (its row in the infofile's
    ``objects`` table): ``schema_ref`` indexes the commit's schema table
    (:func:`st_py.client.group_commit.schema_table`), ``meta`` is the
    encoded user metadata (:func:`st_py.core.user_meta.encode`)."""
    from st_py._proto import tracker_pb2 as pb

    return pb.ObjectCommit(
        name=obj.name,
        size=obj.size,
        stripe_size=obj.stripe_size,
        stripes=obj.stripes,
        crc32c=obj.crc32c,
        schema=schema_ref,
        meta=meta,
    )


@dataclass(frozen=True)
class LocalStripe:
    """A stripe of an object revealed to this node by GET_LOCAL: bytes
    ``[offset, offset + size)`` of ``object``.

    In a file without client-side filters the file at ``path`` holds those
    bytes as they are (``stored_size == size``). In a file with filters
    (docs/filters.md) it holds them compressed and/or encrypted
    (``stored_size`` bytes): read a stripe with
    :meth:`Objects.read_local_stripe`, which checks and decodes it.
    Immutable plain data (picklable): may be shared between threads and
    handed to analysis tasks."""

    object: str
    index: int
    offset: int
    size: int  # bytes of the object (plaintext)
    path: str
    peer: str
    stored_size: int = -1  # bytes of the file at path
    filtered: bool = False  # path holds filtered bytes (docs/filters.md)
    generation: int = 0  # the GET_LOCAL plan's: the object's version it is a stripe of (0: not known)


class RecordSource(Protocol):
    """What an :class:`ObjectReader` reads stripes through: an open file's
    public ``queue_get`` and ``queue_get_version`` (``StFile``'s, which run
    under the file's lock)."""

    def queue_get(self, name: str) -> Pending:
        """Queue a GET of record ``name`` (a stripe): its ``result()`` is the
        stripe's bytes (:meth:`st_py.client.file.StFile.queue_get`)."""
        ...

    def queue_get_version(self, meta: RecordMeta, stored: bool = True) -> Pending:
        """Queue a GET of the version ``meta`` names (a pinned stripe):
        :meth:`st_py.client.file.StFile.queue_get_version`."""
        ...


class Objects:
    """Striped objects of one open file: stores them (stripes through the
    file's :class:`~st_py.client.record_writer.RecordWriter`, then the object's
    commit), opens them for range reads, and reads their stripes revealed
    to this node. Owns no state of its own.

    Thread safety: not safe to share between threads by itself; it runs
    inside its file's public methods, one at a time under the file's lock.
    An :class:`ObjectReader` it opens reads through the file's public
    methods, so it may be used from another thread than the file's.
    """

    def __init__(
        self, ctx: FileContext, writer: RecordWriter, reader: RecordReader, placer: Placer, local_reads: LocalReads
    ):
        self.ctx = ctx
        self.writer = writer
        self.reader = reader
        self.placer = placer
        self.local_reads = local_reads

    def put_object(
        self,
        name: str,
        data: bytes | BinaryIO,
        stripe_size: int = DEFAULT_STRIPE_SIZE,
        stripe_width: int | None = None,
        local_share: float = 1.0,
        meta: Mapping[str, str] | None = None,
        in_flight: int = STRIPES_IN_FLIGHT,
        *,
        writer_silent_s: float | None = None,
    ) -> ObjectMeta:
        """Store striped object ``name``: :meth:`st_py.client.file.StFile.put_object` (the public docstring)."""
        ctx = self.ctx
        ctx.check_open()
        meta_b = user_meta.encode(name, meta)  # refused before any stripe is stored
        if stripe_size <= 0 or stripe_size > 64 << 20:
            raise BadNameError(f"stripe_size {stripe_size} must be 1 byte to 64 MiB")
        if in_flight < 1:
            raise BadNameError(f"in_flight {in_flight} must be at least 1 stripe")
        if not 0 <= local_share <= 1:
            raise BadNameError(f"local_share {local_share} must be 0 to 1")
        check_new_name(name)  # the rule for record names (st_py.core.record_names)
        if ctx.infofile().exists(name):
            raise RecordExistsError(f"{name!r} is already committed in {ctx.name}: names are write-once", names=[name])
        self.writer.check_tree(name)
        self._clear_left(name, WRITER_SILENT_S if writer_silent_s is None else writer_silent_s)
        queued: list[Pending] = []  # every stripe of this attempt
        try:
            size, index, crc, head, tail = self.store_stripes(
                name, data, stripe_size, stripe_width, local_share, in_flight, queued, claim=True
            )
            self.writer.flush()  # every stripe committed ...
        except BaseException:  # the source, a stripe, its commit or the caller failed: this attempt leaves no stripe
            self._abandon(name, queued)
            raise
        from st_py.client.group_commit import conflicts_of, schema_table
        from st_py.core.record_format import written_object_schema
        from st_py.core.record_names import commit_conflict

        schema = written_object_schema(name, head, tail) if self.writer.keep_schemas else None
        schemas, refs = schema_table([schema])
        reply = ctx.file_tracker_call(
            "commit_objects",
            ctx.name,
            ctx.file_id,
            [object_commit(ObjectMeta(name, size, stripe_size, index, crc), refs[0], meta_b)],
            schemas=schemas,
        )
        if reply.conflicts:  # ... then the object, in one transaction
            self._abandon(name, queued)  # the tracker keeps any stripe of an object committed meanwhile
            reason, kind, record = conflicts_of(reply).get(name, (reply.conflicts[0], "", ""))
            if kind:
                raise commit_conflict(ctx.name, name, reason, kind, record)
            raise RecordExistsError(f"object {reply.conflicts[0]}", names=[name])
        return ObjectMeta(name, size, stripe_size, index, crc)

    def store_stripes(
        self,
        name: str,
        data: bytes | BinaryIO,
        stripe_size: int,
        stripe_width: int | None,
        local_share: float,
        in_flight: int,
        queued: list[Pending],
        claim: bool = False,
        own_name: bool = False,
        skip: frozenset[int] = frozenset(),
    ) -> tuple[int, int, int, bytes, bytes]:
        """Store the stripes of object ``name`` read from ``data``, at most
        ``in_flight`` held at once, each put appended to ``queued``, and
        wait until every one is acknowledged. ``claim``: stripe 0 committed
        before the next is read (:meth:`_claim`); ``own_name``: the stripes
        of a replacement, stored under names of their own and left to the
        caller's commit (:mod:`st_py.client.replacing`); ``skip``: the
        indexes of stripes already stored and committed (a retry of
        :meth:`StFile.put_parts`), read and counted but not put. Returns (size,
        stripes, CRC-32C of the whole, the first stripe, the last two
        stripes' bytes: what the object's schema is read from).

        Raises
        ------
        NotEnoughPeersError, StoreTorrentError
            Too few usable peers; a stripe's put (or, with ``claim``, its commit) failed.
        """
        ctx = self.ctx
        usable = sorted(ctx.write_targets())
        if not usable or len(usable) < ctx.copies:
            from st_py.errors import NotEnoughPeersError

            raise NotEnoughPeersError(f"{ctx.name}: {len(usable)} usable peers, class needs {ctx.copies}")
        src = io.BytesIO(data) if isinstance(data, (bytes, bytearray, memoryview)) else data
        # Asymmetric striping (docs/striping.md): copy rank 0 of local_share
        # of the stripes on the writer's peer, the rest over the others; each
        # stripe's copies apart by failure domain (docs/replication.md).
        local = self.placer.writer_peer(usable)
        if local is not None:
            p = ctx.peers[local]
            local_share = fit_local_share(local_share, _remaining(src), p.free_bytes if p.capacity_bytes else None)
            if local_share <= 0:
                local = None
        others = [i for i in usable if i != local]
        ring = choose_holders(others, len(others))  # a random order: stripe i's rank 0 on ring[i % width]
        width = min(stripe_width or len(ring), len(ring))
        crc, size, index = 0, 0, 0
        pending: list[Pending] = []
        head, prev, last = b"", b"", b""  # first stripe, and the last two: the object's schema
        while True:
            chunk = read_full(src, stripe_size)
            if not chunk and index > 0:
                break
            if index == 0:
                head = chunk
            prev, last = last, chunk
            crc = google_crc32c.extend(crc, chunk)
            size += len(chunk)
            if index in skip:
                index += 1
                if len(chunk) < stripe_size:
                    break
                continue
            holders = stripe_holders(index, ctx.copies, ring, width, local, local_share, ctx.spread)
            pending.append(self.writer.queue_put(stripe_name(name, index), chunk, holders=holders, own_name=own_name))
            queued.append(pending[-1])
            if index == 0 and claim:
                self._claim(pending[0])
            index += 1
            while len(pending) >= in_flight:
                pending.pop(0).result()
            if len(chunk) < stripe_size:
                break
        for p in pending:
            p.result()
        return size, index, crc, head, prev + last

    def _claim(self, first: Pending) -> None:
        """Wait until stripe 0 of this attempt (``first``) is stored and
        committed, before the next stripe is read: the writer that commits
        an object's stripe 0 first is the one that may store its other
        stripes, so of writers racing for one new name the others are
        refused here (``RecordExistsError``) having committed nothing, and
        one goes on. Before, each could win some of the stripes and every
        one of them fail. Costs a stripe's round trip and a commit once
        an object.

        Raises
        ------
        StoreTorrentError
            Stripe 0's put or commit failed (``RecordExistsError``: another
            writer's stripe 0 is committed under the name).
        """
        first.result()
        self.writer.commit_all()
        exc = first.exception()  # its commit refused: the Pending's error now
        if exc is not None:
            raise exc

    def _abandon(self, name: str, queued: list[Pending]) -> None:
        """A ``put_object`` of ``name`` failed after queuing the stripes
        ``queued``: wait for those in flight, commit what was stored, then
        delete the stripes this attempt committed (their copies on their
        holders, then their commits), so a later ``put_object`` of ``name``
        (a retry with other bytes: stripe names are write-once) is not
        refused. Only this attempt's own commits are deleted (a stripe
        another writer committed under the name first is its, and left);
        copies of stripes that failed are left, as any failed put's, to
        the scrubber. Their failures are the put's own, not ``flush``'s.
        Best effort: a failure here is logged, the put raises its own error."""
        prefix = stripe_range(name)[0]
        ctx = self.ctx
        try:
            stored = [p.name for p in queued if p.exception() is None]  # waits for each
            try:
                self.writer.commit_all()
            finally:  # the stripes' failures are this put's error, not the handle's
                refused = {n for n, _ in ctx.errors if n.startswith(prefix)}
                kept = [(n, e) for n, e in ctx.errors if not n.startswith(prefix)]
                ctx.errors.clear()
                ctx.errors.extend(kept)
            info = ctx.infofile()
            ours = [n for n in stored if n not in refused and info.exists(n)]
            if ours and info.object(name) is None:
                self.writer.delete_stripes(ours)
        except Exception:  # noqa: BLE001 - cleanup of a put that failed: its own error is the news
            log.warning(
                "%s: could not remove the stripes of the failed put_object of %r", ctx.name, name, exc_info=True
            )

    def _clear_left(self, name: str, silent_s: float) -> None:
        """Delete the stripe records committed under object ``name``
        without its object, if the newest of them was committed at least
        ``silent_s`` seconds ago: a ``put_object`` that died midway left
        them (its writer killed: no ``_abandon`` ran). Stripe names are
        write-once, so a new ``put_object`` of ``name`` with other bytes
        would be refused on each of them. Younger ones may be another
        writer's at work: ``ObjectBeingWrittenError``, nothing done.

        Their commits go first and the tracker keeps the stripes of an
        object that is committed by then, so an object another writer
        committed meanwhile is never robbed. The age is judged on the
        tracker's clock (``committed_at``) against this host's: a clock
        behind the tracker's by more than ``silent_s`` only delays the
        clearing; one ahead could clear a writer silent for less, which
        then fails cleanly (its object's commit is refused) and loses
        nothing acknowledged. docs/striping.md, "Stripes a writer left".

        Raises
        ------
        ObjectBeingWrittenError
            The newest stripe is younger than ``silent_s``.
        RecordExistsError
            The object ``name`` was committed meanwhile.
        """
        lo, hi = stripe_range(name)
        rows = self.ctx.infofile().records_between(lo, hi).fetchall()
        if not rows:
            return
        left = [r[0] for r in rows]
        age = time.time() - max(r[3] for r in rows)
        if age < silent_s:
            raise ObjectBeingWrittenError(name, self.ctx.name, len(left), age, silent_s - age)
        kept = self.writer.delete_stripes(left)
        if kept:
            raise RecordExistsError(
                f"{name!r} was committed in {self.ctx.name} meanwhile: names are write-once", names=[name]
            )
        log.info("%s: removed %d stripes of %r that no object was committed for", self.ctx.name, len(left), name)

    def object(self, name: str) -> ObjectMeta | None:
        """The committed object ``name``, or None."""
        return self.ctx.infofile().object(name)

    def open(self, name: str, handle: RecordSource) -> io.RawIOBase:
        """A file object read through ``handle``: :meth:`st_py.client.file.StFile.open` (the public docstring)."""
        ver = object_version(self.ctx.infofile(), name)
        if ver is not None:  # its stripes pinned: a replacement meanwhile is not read into it
            return ObjectReader(handle, ver.obj, ver)
        return io.BytesIO(self.reader.queue_get(name).result())  # type: ignore[return-value]

    def local_stripes(self, allow_unavailable: bool = False) -> list[LocalStripe]:
        """The stripes revealed to this node: :meth:`st_py.client.file.StFile.local_stripes` (the public docstring)."""
        plan = self.local_reads.get_local_plan(allow_unavailable)
        # the objects as of the plan's generation: the stripes the peers reveal are of those
        # versions, even if a replacement committed since (docs/striping.md, "Replacing an object")
        objs = {o.name: o for o in self.ctx.infofile().objects(plan.generation)}
        out = []
        for r in self.local_reads.reveal_plan(plan, allow_unavailable=allow_unavailable, stripes=True):
            if not r.name.startswith(STRIPE_PREFIX):
                continue
            obj, _, idx = r.name[len(STRIPE_PREFIX) :].rpartition("/")
            meta = objs.get(obj)
            if meta is None:  # stripes of an object not (yet) committed
                continue
            offset = int(idx) * meta.stripe_size
            size = min(meta.stripe_size, meta.size - offset)
            out.append(
                LocalStripe(
                    obj, int(idx), offset, size, r.path, r.peer, r.size, bool(self.ctx.filter_names), plan.generation
                )
            )
        return sorted(out, key=lambda s: (s.object, s.index))

    def _stripe_at(self, name: str, generation: int) -> RecordMeta | None:
        """Stripe record ``name`` as of ``generation`` (0: now), or None when
        the file keeps no history to say."""
        ctx = self.ctx
        try:
            if not generation or ctx.as_of is not None:  # a handle of a past state reads that state
                return ctx.infofile().lookup(name)
            return AsOf(ctx.live_infofile(), generation, ctx.name).lookup(name)
        except sqlite3.OperationalError:  # a file made before history
            return None

    def read_local_stripe(self, stripe: LocalStripe) -> bytes:
        """A revealed stripe's bytes: :meth:`st_py.client.file.StFile.read_local_stripe` (the public docstring)."""
        from st_py.client.getlocal import read_verified

        ctx = self.ctx
        name = stripe_name(stripe.object, stripe.index)
        try:
            stored = read_verified(stripe.path, stripe.stored_size, name, ctx.name)
        except ChecksumError:  # another copy, of the version the stripe was revealed as
            meta = self._stripe_at(name, stripe.generation)
            if meta is not None:
                return self.reader.queue_get_version(meta, stored=False).result()
            return self.reader.queue_get(name).result()
        data = ctx.filters.decode(ctx.file_id, name, stored) if stripe.filtered else stored
        if len(data) != stripe.size:
            raise ChecksumError(
                f"stripe {stripe.index} of object {stripe.object!r} in {ctx.name} decodes to "
                f"{len(data)} bytes, not {stripe.size}",
                record=name,
                file=ctx.name,
                path=stripe.path,
            )
        return data


def read_full(src, n: int) -> bytes:
    """Up to ``n`` bytes of ``src``, fewer only at its end: a raw file, a
    pipe or a socket may return fewer from one ``read`` before the end,
    which must not end a stripe (and the object) early.

    Raises
    ------
    InvalidOptionError
        ``src`` is a non-blocking file with no bytes ready (``read`` gave
        None): the object's end cannot be told; pass a blocking file.
    """
    parts: list[bytes] = []
    got = 0
    while got < n:
        more = src.read(n - got)
        if more is None:
            raise InvalidOptionError(
                "put_object: data is a non-blocking file with no bytes ready; pass a blocking file"
            )
        if not more:  # its end
            break
        parts.append(bytes(more))
        got += len(more)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _remaining(src) -> int | None:
    """Bytes left in a seekable source (its position kept), else None."""
    try:
        if not src.seekable():
            return None
        pos = src.tell()
        end = src.seek(0, io.SEEK_END)
        src.seek(pos)
        return max(0, end - pos)
    except (AttributeError, OSError, ValueError):
        return None


class ObjectReader(io.RawIOBase):
    """A read-only, seekable view of a striped object (``StFile.open``;
    MORRIS / NFSStripe, seed 003 section 4: range reads of striped files).
    A read fetches only the stripes it touches, each by GET from its least
    loaded holder (failing over to the next copy, CRC-32C checked), and
    keeps the last ``CACHED`` stripes; ``stripes_fetched`` counts the GETs.

    Parameters
    ----------
    f : RecordSource
        The open file the stripes are read through (its public ``queue_get``).
    obj : ObjectMeta
        The committed object.
    version : ObjectVersion, optional
        Its stripes' records as one read found them with ``obj``
        (:func:`st_py.core.infofile.object_version`): each stripe is read
        by its stored name, so a replacement committed while the reader is
        open is never mixed in. Without it, stripes are read by name.

    Raises
    ------
    RecordNotFoundError
        From a read: a stripe is gone (the object was deleted meanwhile).
    RecordUnavailableError
        From a read: every copy of a stripe failed.

    Thread safety: its position and stripe cache are its own and unlocked,
    so one thread per reader; the GETs go through the file's public
    methods (under the file's lock), so readers of one file may run in
    several threads, each with its own reader.
    """

    CACHED = 4  # stripes kept

    def __init__(self, f: RecordSource, obj: ObjectMeta, version: ObjectVersion | None = None):
        super().__init__()
        self._f, self.obj, self._version = f, obj, version
        self._pos = 0
        self._cache: OrderedDict[int, bytes] = OrderedDict()
        self.stripes_fetched = 0  # how many stripe GETs this reader made

    def readable(self) -> bool:
        """``io.RawIOBase``: always True."""
        return True

    def seekable(self) -> bool:
        """``io.RawIOBase``: always True (a seek costs no I/O)."""
        return True

    def tell(self) -> int:
        """``io.RawIOBase``: the position, in bytes from the object's start."""
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """``io.RawIOBase``: move to ``offset`` bytes from the start
        (``SEEK_SET``), the position (``SEEK_CUR``) or the end
        (``SEEK_END``); past the end is allowed (reads give nothing).
        Returns the new position; ``ValueError`` for a negative one."""
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.obj.size}[whence]
        if base + offset < 0:
            raise ValueError("negative seek position")
        self._pos = base + offset
        return self._pos

    @property
    def size(self) -> int:
        """The object's size in bytes."""
        return self.obj.size

    def _stripe(self, i: int) -> bytes:
        data = self._cache.get(i)
        if data is None:
            meta = self._version.stripes[i] if self._version is not None else None
            try:
                if meta is not None:  # the version pinned at open (docs/striping.md, "Replacing an object")
                    data = self._f.queue_get_version(meta, False).result()
                else:
                    data = self._f.queue_get(stripe_name(self.obj.name, i)).result()
            except RecordNotFoundError:
                raise RecordNotFoundError(f"object {self.obj.name!r}: stripe {i} is gone") from None
            self.stripes_fetched += 1
            self._cache[i] = data
            while len(self._cache) > self.CACHED:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(i)
        return data

    def readinto(self, b) -> int:
        """``io.RawIOBase``: read up to ``len(b)`` bytes at the position into
        the writable buffer ``b``, fetching the stripes they fall in; returns
        how many (0 at the end). Raises as the class docstring says."""
        view = memoryview(b).cast("B")
        n = min(len(view), max(0, self.obj.size - self._pos))
        done = 0
        ss = self.obj.stripe_size
        while done < n:
            i, off = divmod(self._pos + done, ss)
            stripe = self._stripe(i)
            take = min(n - done, len(stripe) - off)
            view[done : done + take] = stripe[off : off + take]
            done += take
        self._pos += n
        return n


__all__ = [
    "DEFAULT_STRIPE_SIZE",
    "STRIPE_THRESHOLD",
    "STRIPES_IN_FLIGHT",
    "LocalStripe",
    "ObjectReader",
    "Objects",
    "RecordSource",
]

"""An open StoreTorrent file: PUT, GET, GET_LOCAL and DELETE of records.

The API follows the paper's figure 4. Class xF writes F copies on F distinct
peers with copy ranks 0..F-1 (paper 3.1, 4.1), by the file's duplication
protocol (docs/replication.md): ``client-sync`` (the client writes every copy
and a record is committed once all are acknowledged, paper 3.5), ``chain``
(one PUT_CHAIN to rank 0, which forwards down the holders), and their async
forms, where a record is acknowledged and committed once copy rank 0 is
stored and the other copies are recorded as pending until they are. Records
are committed in groups (paper 3.5); readers see a record only once it is
committed (paper 2.1).

:class:`StFile` is composed of parts it owns and hands its context to
(:class:`st_py.client.file_context.FileContext`: the file's identity, peers,
transport, committer, capability and infofile): the writer
(:class:`st_py.client.record_writer.RecordWriter`, placing with
:class:`st_py.client.placer.Placer`), the reader
(:class:`st_py.client.reader.RecordReader`), GET_LOCAL
(:class:`st_py.client.local_reads.LocalReads`), versions
(:class:`st_py.client.versions.Versions`), striped objects
(:class:`st_py.client.striping.Objects`) and copies onto chosen peers
(:class:`st_py.client.copies.Copies`). Its public methods delegate to them, one at
a time under the file's lock.
"""

from __future__ import annotations

import functools
import inspect
import io
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import BinaryIO

from st_py._proto import tracker_pb2 as pb
from st_py.client.batch_writer import BatchWriter
from st_py.client.copies import Copies, CopyOutcome, CopyToStore
from st_py.client.file_context import DEFAULT_DEPTH, DEFAULT_GROUP, FileContext
from st_py.client.file_info import FileInfo
from st_py.client.getlocal import GetLocalPlan, LocalRecord, local_addresses
from st_py.client.group_commit import GroupCommitter
from st_py.client.local_reads import LocalReads
from st_py.client.pending import Pending
from st_py.client.placer import Placer
from st_py.client.reader import RecordReader
from st_py.client.record_writer import STRIPE_THRESHOLD, RecordWriter, store_result
from st_py.client.replacing import Replacing, StagedTwin
from st_py.client.staged import StagedRecords
from st_py.client.striping import DEFAULT_STRIPE_SIZE, STRIPES_IN_FLIGHT, LocalStripe, Objects
from st_py.client.versions import Versions
from st_py.client.write_batch import WriteBatch, table_columns
from st_py.core.infofile import InfofileReader, ObjectMeta, ObjectVersion, RecordMeta, object_version, stripe_name
from st_py.core.placement import Domain, DomainShortfall
from st_py.core.record_format import written_schema, written_schemas
from st_py.errors import BadNameError, StoreTorrentError
from st_py.wire.protocol import encode_delete_file
from st_py.wire.tracker_client import TrackerClient
from st_py.wire.transport import Transport


# The writer's two lookups of its environment, named here so a test can
# patch them on this module (st_py.client.file.local_addresses, .written_schema).
def _local_addresses() -> set[str]:
    return local_addresses()


def _written_schema(name: str, data: bytes) -> tuple[str, bytes] | None:
    return written_schema(name, data)


def _written_schemas(names: list[str], datas: list[bytes]) -> list[tuple[str, bytes] | None]:
    return written_schemas(names, datas)


class StFile:
    """An open StoreTorrent file. Use :meth:`Client.create` or
    :meth:`Client.open` to get one; close it (or use ``with``) to commit the
    last group of records.

    Thread safety: one handle may be shared between threads. Its public
    methods run one at a time (a re-entrant lock per handle, the one its
    transport turns under), so threads sharing a handle are correct but not
    parallel; a thread pool that wants parallel reads opens a handle per
    thread (as the Ray and Dask scans do). A :class:`Pending` may be waited
    on from any thread. ``tests/test_threads.py`` checks both.

    It owns its parts (see the module docstring) and holds no state of its
    own: each public method delegates to the part that owns what it does.
    """

    def __init__(
        self,
        tracker: TrackerClient,
        info: pb.FileInfo,
        depth: int = DEFAULT_DEPTH,
        group_size: int = DEFAULT_GROUP,
        blocksize: int | None = None,
        timeout: float = 30.0,
        infofile_path: str | None = None,
        stage: bool = False,
        prefer_peer: str | None = None,
        holds_reservation: bool = False,
        as_of=None,
    ):
        # stage: acknowledged records are kept for one atomic commit by the
        # caller (staged_commits / Client.commit_staged) instead of being
        # group-committed as they come: how a job's writers make the whole
        # job visible at once (docs/analysis.md).
        # prefer_peer: rank 0 on this peer when it is usable (local-first
        # placement, FreeLoader seed 004 section 4.1), whatever the file's
        # policy unless it is hash.
        # holds_reservation: created with an est_size: close() ends the reservation.
        ctx = self._ctx = FileContext(tracker, info, depth, group_size, timeout, infofile_path, holds_reservation)
        if as_of is not None:  # read-only, as of a past state (docs/snapshots.md)
            try:
                ctx.read_as_of(as_of)
            except BaseException:
                ctx.release()
                raise
        self._versions = Versions(ctx)
        self._placer = Placer(ctx, blocksize or info.blocksize or 16, prefer_peer, _local_addresses)
        self._writer = RecordWriter(ctx, self._placer, self._versions, _written_schema, _written_schemas)
        ctx.use_committer(
            GroupCommitter(
                ctx.file_tracker,
                ctx.name,
                ctx.file_id,
                group_size,
                self._writer.commit_failed,
                stage=stage,
                lease=self._versions.lease_for_commit,
                relocate=ctx.relocate,
                committed=self._writer.commit_done,
                columns=info.commit_columns,
            )
        )
        self._record_reader = RecordReader(ctx)
        self._local = LocalReads(ctx, self._writer.commit_all)  # a read: put failures stay for flush and close
        self._objects = Objects(ctx, self._writer, self._record_reader, self._placer, self._local)
        self._copies = Copies(ctx)
        self._batches = BatchWriter(ctx, self._writer, self._objects)
        self._replacing = Replacing(ctx, self._writer, self._versions, self._staged_twin)

    # -- metadata (the FileContext's, as of the last refresh) -----------------------
    @property
    def info(self) -> FileInfo:
        """The tracker's answer about the file, as of the last :meth:`refresh`
        (:class:`~st_py.client.file_info.FileInfo`, plain data)."""
        return FileInfo.of(self._ctx.info)

    @property
    def name(self) -> str:
        """The file's path in the namespace (``/exp/run1``)."""
        return self._ctx.name

    @property
    def file_id(self) -> int:
        """The file's id, given by the tracker at creation: the peers keep its
        records under it (paper 3.4)."""
        return self._ctx.file_id

    @property
    def replication(self) -> str:
        """The file's class (``"x2"``, ...)."""
        return self._ctx.replication

    @property
    def copies(self) -> int:
        """F: copies per record."""
        return self._ctx.copies

    @property
    def protocol(self) -> str:
        """The duplication protocol (docs/replication.md)."""
        return self._ctx.protocol

    @property
    def peers(self) -> dict:
        """The peerlist: ``{peer_idx: PeerInfo}``."""
        return self._ctx.peers

    @property
    def placement(self) -> str:
        """The placement policy (``random``, ``hash``, ``local-first``)."""
        return self._ctx.placement

    @property
    def domains(self) -> dict[int, Domain]:
        """Every peer index's failure domain (see :attr:`placement_domains`)."""
        return self._ctx.domains

    # -- options ------------------------------------------------------------------
    @property
    def depth(self) -> int:
        """Operations (PUTs and GETs) in flight at most (paper 3.2)."""
        return self._ctx.depth

    @depth.setter
    def depth(self, value: int) -> None:
        self._ctx.depth = value

    @property
    def group_size(self) -> int:
        """Records per group commit."""
        return self._ctx.group_size

    @group_size.setter
    def group_size(self, value: int) -> None:
        self._ctx.group_size = value

    @property
    def blocksize(self) -> int:
        """Records placed on one set of holders before the next is chosen."""
        return self._placer.blocksize

    @blocksize.setter
    def blocksize(self, value: int) -> None:
        self._placer.blocksize = value

    @property
    def keep_schemas(self) -> bool:
        """Keep each record's format and schema in the infofile at commit
        (:func:`st_py.core.record_format.written_schema`; default True)."""
        return self._writer.keep_schemas

    @keep_schemas.setter
    def keep_schemas(self, value: bool) -> None:
        self._writer.keep_schemas = value

    @property
    def balance_reads(self) -> bool:
        """Load-aware GETs (default True); False: copy-rank order (the paper's)."""
        return self._record_reader.balance_reads

    @balance_reads.setter
    def balance_reads(self, value: bool) -> None:
        self._record_reader.balance_reads = value

    @property
    def local_copies(self):
        """The peers of this host whose copies GETs read from disk
        (:class:`st_py.client.local_copies.LocalCopies`, shared with the
        client that opened the file; None: every GET goes to the network)."""
        return self._ctx.local_copies

    @local_copies.setter
    def local_copies(self, value) -> None:
        self._ctx.local_copies = value

    def reads_locally(self, meta: RecordMeta | None = None) -> bool:
        """Whether reading record ``meta`` now asks neither the tracker nor
        a peer over the network: the infofile is read where the tracker
        keeps it (the shared namespace; not a local copy whose freshness is
        asked), no write of this handle awaits its commit, and a peer of
        this host holds a copy (:attr:`local_copies`: read from its disk;
        were that copy missing or bad, :meth:`get` would still fall back to
        a GET). ``meta`` None: the infofile part alone (whether
        :attr:`generation`, :meth:`record_meta` and the like ask nothing of
        the tracker). The S3 endpoint serves such small reads on its event
        loop (docs/s3.md, "The request path"). Thread safety: as the handle."""
        ctx = self._ctx
        lc = ctx.local_copies
        if lc is None or ctx.copy_locator() is not None or ctx.infofile_override or ctx.committer.busy:
            return False
        if meta is None:
            return True
        return bool(lc.paths(ctx.file_id, ctx.peer_ids, meta))

    @property
    def encryption_key(self) -> bytes | None:
        """The file's key (docs/filters.md), set by :class:`Client`."""
        return self._ctx.encryption_key

    @encryption_key.setter
    def encryption_key(self, value: bytes | None) -> None:
        self._ctx.encryption_key = value

    @property
    def domain_shortfall(self) -> DomainShortfall:
        """Records (and stripes) this handle placed with two copies in one
        failure domain because the usable peers allowed no better
        (docs/replication.md, "Failure domains"): never a silent downgrade."""
        return self._placer.domain_shortfall

    @property
    def filter_names(self) -> tuple[str, ...]:
        """The file's client-side filters in order (``("zstd", "aes-256-gcm")``;
        empty: none), fixed at creation (docs/filters.md)."""
        return self._ctx.filter_names

    @property
    def filters(self):
        """The file's :class:`~st_py.core.filters.FilterChain` (empty: no filter).

        Raises
        ------
        MissingKeyError, WrongKeyError
            An encrypted file without its key, or with another one.
        """
        return self._ctx.filters

    @property
    def placement_domains(self) -> dict[int, Domain] | None:
        """The failure domain of each peer index of the peerlist when it
        spans more than one domain, else None (one domain, e.g. a single
        machine: nothing to take copies apart by). What placement keeps a
        record's copies apart by (docs/replication.md, "Failure domains");
        pass it as ``domains`` to :mod:`st_py.core.placement`'s functions.
        :attr:`domains` has every peer's domain in either case."""
        return self._ctx.spread

    @property
    def as_of(self) -> int | None:
        """The past generation this handle reads (``Client.open(...,
        as_of=...)``; docs/snapshots.md), or None for the current state."""
        return self._ctx.as_of

    @property
    def generation(self) -> int:
        """The generation this handle reads: its ``as_of`` generation, else
        the file's committed generation now. Cite it with a result, and read
        the same state again with ``as_of=`` it (docs/snapshots.md,
        "Provenance")."""
        return self._ctx.generation()

    def snapshots(self) -> list:
        """The file's snapshots, oldest first: a list of
        :class:`~st_py.core.history.Snapshot` (name, generation, created_at,
        owner), read from the infofile (docs/snapshots.md)."""
        from st_py.core.history import snapshots

        return snapshots(self._ctx.current_infofile(), self._ctx.name)

    def report_bad_copy(self, name: str, peer: str, detail: str) -> None:
        """Tell the tracker that the copy of record ``name`` on ``peer``
        (``host:port``) failed a checked read: its CRC-32C did not match
        (docs/reliability.md, bit rot). Best effort, never raises; the
        peer's verifier quarantines the copy and ``repair`` restores it."""
        self._ctx.tracker.report_bad_copy(self.name, name, peer, detail)

    def refresh(self) -> None:
        """Re-read the peerlist and liveness from the tracker (and get a
        fresh capability)."""
        self._ctx.refresh()

    def extend_peerlist(self) -> list[int]:
        """Have the tracker add its live peers in service that are not in
        this file's peerlist yet (``ExtendPeerlist``; new peers take new
        copies: rebalance, paper 4.4, and spread, paper 5), and use the new
        peerlist from now on. Peer indexes already in :attr:`peers` keep
        their meaning (the peerlist only grows).

        Returns
        -------
        list of int
            The indexes of the peers added, in order (empty: none).

        Raises
        ------
        PermissionDeniedError
            No write permission on the file.
        TrackerError
            The tracker cannot be reached, or the file is gone.
        """
        ctx = self._ctx
        before = set(ctx.peers)
        ctx.set_info(ctx.tracker.extend_peerlist(ctx.name, ctx.file_id))
        return sorted(set(ctx.peers) - before)

    def commit_moved_copies(self, moves: list[pb.CopyMove]) -> pb.MoveCopiesReply:
        """Commit copies moved to new holders (``MoveCopies``; paper 4.4
        rebalance, and spread and drain, paper 5): each ``CopyMove`` names a
        record, its copy rank, the old and the new holder's peer index and
        the name its copies are stored under (``RecordMeta.stored_as``).
        The new holders must have the copies already (:meth:`store_copies`).
        From the reply's ``generation`` on, readers use the new holders; the
        old ones go to the infofile's ``copy_history``.

        Returns
        -------
        MoveCopiesReply
            ``moved`` (copies committed), ``conflicts`` (``"name: reason"``
            of moves refused: the record was deleted, replaced or moved
            meanwhile) and ``generation``.

        Raises
        ------
        TrackerError
        """
        return self._ctx.tracker.move_copies(self.name, self.file_id, moves)

    def commit_stored_copies(self, stored: list[pb.CopyStored]) -> pb.MoveCopiesReply:
        """Commit pending copies as stored (``StoreCopies``; async protocols,
        docs/replication.md; repair's catch-up, paper 4.5): each
        ``CopyStored`` names a record, its copy rank, the peer index now
        holding it and the name its copies are stored under
        (``RecordMeta.stored_as``). The holders must have the copies already
        (:meth:`store_copies`). From the reply's ``generation`` on, GET and
        GET_LOCAL use them.

        Returns
        -------
        MoveCopiesReply
            ``moved`` (copies committed as stored), ``conflicts``
            (``"name: reason"``) and ``generation``.

        Raises
        ------
        TrackerError
        """
        return self._ctx.tracker.store_copies(self.name, self.file_id, stored)

    # -- the infofile ---------------------------------------------------------------
    @property
    def infofile_path(self) -> str:
        """Where this handle reads the file's infofile (SQLite, on the
        shared namespace; paper 3.5, docs/infofile.md)."""
        return self._ctx.infofile_path

    def infofile(self) -> InfofileReader:
        """This handle's read-only reader of the file's infofile (SQLite,
        docs/infofile.md; paper 3.5: clients read infofiles directly), opened
        on first use and closed with the handle. Its point and range queries
        are the one place that knows the infofile's tables on the client.

        Raises
        ------
        FileNotFoundError
            The infofile is not there (the file was deleted, or the namespace
            is not visible from this host).
        """
        return self._ctx.infofile()

    def record_meta(self, name: str) -> RecordMeta | None:
        """The committed metadata of record ``name`` (its current version:
        stored size and CRC-32C, holders by copy rank), or None if no record
        of that name is committed (a striped object is not a record: see
        :meth:`object_meta`)."""
        return self._ctx.live_or_newer(lambda r: r.lookup(name))  # unknown: asked once for newer changes

    def records_meta(self, names: list[str]) -> dict[str, RecordMeta]:
        """:meth:`record_meta` of many names at once: ``{name: RecordMeta}``
        of those committed as records."""
        return self._ctx.live_infofile().lookup_many(names)

    def object_meta(self, name: str) -> ObjectMeta | None:
        """The committed striped object ``name`` (its original size and
        CRC-32C, stripe size and count; docs/striping.md), or None."""
        return self._ctx.live_or_newer(lambda r: r.object(name))

    # -- peers (paper 4.3 failover, 4.4 rebalance) --------------------------------
    def peer_usable(self, idx: int) -> bool:
        """Whether peer ``idx`` (an index of :attr:`peers`, the file's
        peerlist) may be sent requests: the tracker reported it alive at the
        last :meth:`refresh`, and this handle has not seen it fail since
        (a broken connection, a full or failing disk, :meth:`mark_peer_failed`).

        Raises
        ------
        KeyError
            ``idx`` is not in the peerlist.
        """
        return self._ctx.peer_usable(idx)

    def mark_peer_failed(self, idx: int, reason: str) -> None:
        """Count peer ``idx`` as failed for this handle, as a broken
        connection to it would, without telling the tracker (rebalance
        declares lost peers so, paper 4.4): :meth:`peer_usable` is False, so
        no copy is placed on it and reads ask it last. A peer already failed
        keeps its first ``reason``; a new connection to it (a read that
        asks it after all) clears the mark.

        Raises
        ------
        KeyError
            ``idx`` is not in the peerlist.
        """
        self._ctx.mark_peer_failed(idx, reason)

    def write_targets(self) -> list[int]:
        """Indexes of the usable peers that take new copies: those in
        service. Peers being drained or retired (``storetorrent drain``)
        only when too few others are usable for the class: a drain never
        fails a write, and its next pass moves such copies off."""
        return self._ctx.write_targets()

    def spare_peer(
        self, name: str, usable: list[int], holders: list[int], apart_from: list[int] | None = None
    ) -> int | None:
        """A peer index to take over a failed or lost copy of record
        ``name`` (paper 4.3, 4.4): one of ``usable`` holding none of
        ``holders`` and, among those, apart by failure domain from
        ``apart_from`` (the holders that keep their copies; default
        ``holders``): under hash placement the first such one of the
        record's ranking, where readers without the infofile look; else a
        random one. None if no peer of ``usable`` qualifies. Peer indexes
        are those of :attr:`peers`; the caller picks ``usable`` (e.g.
        :meth:`write_targets`)."""
        return self._placer.spare_peer(name, usable, holders, apart_from)

    # -- PUT (st_py/client/record_writer.py) -------------------------------------------------
    def queue_put(
        self,
        name: str,
        data: bytes,
        callback: Callable[[str, Exception | None], None] | None = None,
        *,
        replace: bool = False,
        meta: Mapping[str, str] | None = None,
        _holders: list[int] | None = None,
    ) -> Pending:
        """Queue a PUT of record ``name`` and return at once (paper 3.2).

        Blocks only while ``depth`` records are in flight. The record is
        acknowledged when all F copies are stored; it is committed (visible)
        with its group, or at :meth:`flush` / :meth:`close`.

        Consecutive calls ride the write batch path (docs/client.md,
        "queue_put slices"): a record joins a slice that is sent when it
        holds ``depth // 2`` records or 1 MiB, at the next call 2 ms after
        its first record, or as soon as the caller waits (:meth:`poll`,
        :meth:`flush`, :meth:`close`, :meth:`put`, the Pending's
        ``result``/``exception``, any other write). When ``depth`` records
        are in flight, the call sends the slice and waits until ``depth //
        2`` are. Every error below is still raised by this call, before the
        record is queued. ``replace=True``, the stripes of objects and the
        ``chain`` protocols go one record at a time, as before.

        Parameters
        ----------
        name : str
            Record name, 1 to 4096 UTF-8 bytes, no NUL. Names are write-once.
        data : bytes-like
            The record, held in memory until acknowledged.
        callback : callable(name, exception or None), optional
            Called when the record is acknowledged or has failed.
        replace : bool
            Store a new version of ``name`` (or its first one), which its
            commit makes current in place of the committed one: readers see
            the old or the new version whole, never a mix (MORRIS 3.2;
            docs/replication.md, "Versioned records"). Takes the file's
            writer lease if this writer does not hold it.
        meta : mapping of str to str, optional
            The version's user metadata (``content-type`` and the other
            standard content headers, and user pairs; rules and limits in
            :mod:`st_py.core.user_meta`), committed with it and kept with
            this version in the infofile (:meth:`InfofileReader.user_meta_of
            <st_py.core.infofile.InfofileReader.user_meta_of>`).

        Returns
        -------
        Pending
            ``result()`` returns once every copy is acknowledged.

        Raises
        ------
        BadNameError, NotEnoughPeersError, RecordExistsError
        MetadataTooLargeError, BadMetadataError
            ``meta`` breaks :mod:`st_py.core.user_meta`'s rules (nothing is sent).
        RecordTooLargeError
            ``data`` is over ``STRIPE_THRESHOLD`` (64 MiB), more than a
            peer takes as one record: use :meth:`put` or :meth:`put_object`,
            which store it as a striped object.
        LeaseHeldError
            ``replace=True`` while another writer holds the lease.
        QuotaExceededError
            A record put before was refused because the quota is full (the
            tracker admits bytes as the group commits go, and commits the
            records before it): raised once, at the next put.
        """
        return self._writer.queue_put(name, data, callback, replace=replace, holders=_holders, meta=meta)

    def put(self, name: str, data: bytes, replace: bool = False, meta: Mapping[str, str] | None = None) -> None:
        """Store record ``name`` and wait until every copy is acknowledged.

        The record becomes visible to readers when its group is committed
        (every ``group_size`` records) or at :meth:`flush`/:meth:`close`.
        Data over ``STRIPE_THRESHOLD`` (64 MiB) is stored as a striped
        object instead (:meth:`put_object`, docs/striping.md), visible at
        once when this returns. ``replace=True`` stores a new version of
        the record under the file's writer lease (:meth:`queue_put`).
        ``meta``: the version's user metadata (:meth:`queue_put`). When the
        name holds a striped object, or ``data`` is one, ``replace=True``
        replaces it at once too (docs/striping.md, "Replacing an object"):
        readers see the old version or the new one, never a mix.

        Raises
        ------
        BadNameError, RecordExistsError, NotEnoughPeersError, PeerError
        MetadataTooLargeError, BadMetadataError
        LeaseHeldError, LeaseLostError
            ``replace=True``: another writer holds the lease; this one's ran out.
        """
        if replace and self._replacing.needed(name, data):
            self._replacing.replace(name, data, meta=meta)
            return
        if len(data) > STRIPE_THRESHOLD:
            self._objects.put_object(name, data, meta=meta)
            return
        self._writer.put(name, data, replace, meta)

    def write(self, batch: WriteBatch) -> int:
        """Store every record of ``batch`` (a :class:`WriteBatch`) in one
        call, and wait until each one is acknowledged or has failed
        (docs/client.md, "Write batches").

        The same rules and outcome as :meth:`put` of each record, in order
        (names, replication class, protocol, filters; data over
        ``STRIPE_THRESHOLD`` is a striped object), at a fraction of the
        cost per record: the names are checked and the records placed for
        the whole batch, the CRC-32Cs computed and each peer's frames
        encoded in one native call without the GIL, and sent together.
        Records are committed (visible) with their group, or at
        :meth:`flush` / :meth:`close`, as put ones are. A batch is not
        atomic: the records that fail are reported together and never
        visible; the others are written (for all-or-nothing, write through
        :meth:`Client.open_staged` and commit ``staged_commits()`` with
        :meth:`Client.commit_staged`).

        Returns
        -------
        int
            Records written (acknowledged): ``len(batch)`` when nothing failed.

        Raises
        ------
        BatchWriteError
            Some records failed: ``failures`` gives each one's name and
            error (BadNameError, RecordExistsError, NotEnoughPeersError,
            PeerError, ...), ``names`` their names, ``written`` how many
            others were acknowledged.
        QuotaExceededError
            As :meth:`queue_put`: a refusal met by an earlier group commit.
        """
        return self._batches.write(batch.names, batch.datas)

    def write_table(self, table, name_column: str = "name", data_column: str = "data") -> int:
        """Store the records of an Arrow table, one a row: the name from
        ``name_column`` (string), the bytes from ``data_column`` (binary,
        large_binary or fixed_size_binary); as :meth:`write` of a batch of
        them.

        Parameters
        ----------
        table : pyarrow.Table, pyarrow.RecordBatch or iterable of RecordBatch
        name_column, data_column : str

        Returns
        -------
        int
            Records written.

        Raises
        ------
        InvalidOptionError
            A column is missing, of another type, or has nulls (nothing is written).
        BatchWriteError
            As :meth:`write`.
        """
        names, datas = table_columns(table, name_column, data_column)
        return self._batches.write(names, datas)

    def staged_commits(self) -> list[dict]:
        """The records acknowledged by every holder but not committed, of a
        file opened with ``stage=True``, as plain dicts ``{"name", "size",
        "crc32c", "peer_idx", "schema", "logical_size", "meta", "stored_as"}``
        (``size`` as stored, ``logical_size`` the user's bytes; peer indexes
        by copy rank; ``schema`` the record's ``(format, Arrow IPC schema)``
        or None; ``meta`` its encoded user metadata, ``b""``: none;
        ``stored_as`` the name of its own its copies are stored under when
        a kept version holds its name, docs/snapshots.md, else "");
        they are taken out of the file. Commit them with :meth:`Client.commit_staged`.

        Raises
        ------
        StoreTorrentError
            If queued records failed (as :meth:`flush`).
        """
        return self._writer.staged_records().as_dicts()

    def staged_records(self) -> StagedRecords:
        """The same records as :meth:`staged_commits`, as columns
        (:class:`~st_py.client.staged.StagedRecords`: a list a field, plain
        data): what a write job's task hands to the driver, cheaper to
        build, pickle and commit than a dict a record (issue 41). Commit
        them with :meth:`Client.commit_staged`.

        Raises
        ------
        StoreTorrentError
            If queued records failed (as :meth:`flush`).
        """
        return self._writer.staged_records()

    def poll(self, timeout: float = 0.0) -> int:
        """Make progress on queued operations (paper 3.2: frames are sent and
        replies received only while the caller polls or waits): send what
        is queued, take the replies that arrived, run their callbacks and
        start the group commits that are due.

        Parameters
        ----------
        timeout : float
            Seconds to wait for a reply when none is there (0: do not wait).

        Returns
        -------
        int
            Operations still in flight (:attr:`inflight`).
        """
        return self._ctx.poll(timeout)

    @property
    def inflight(self) -> int:
        """Operations (PUTs and GETs) queued and not yet answered, the
        :meth:`queue_put` records waiting in a slice included (docs/client.md,
        "queue_put slices"); at most :attr:`depth` (paper 3.2)."""
        return self._ctx.inflight

    @property
    def put_slices(self) -> tuple[int, int]:
        """``(slices, records)``: how many slices of consecutive
        :meth:`queue_put` records this handle sent together on the write
        batch path, and the records in them (docs/client.md, "queue_put
        slices"; :mod:`st_py.client.put_slices`). Records that went one by
        one (``replace=True``, the ``chain`` protocols) are not counted."""
        s = self._writer.slices
        return s.sent, s.records

    def flush(self) -> None:
        """Wait for every queued operation and commit every acknowledged record.

        Raises
        ------
        StoreTorrentError
            If queued records failed and had no callback to hear of it: the
            failure itself when there is one (or one commit failed them all),
            else :class:`QueuedOperationsError` with every ``(name, error)``
            in ``failures``.
        """
        self._writer.flush()

    # -- DELETE ---------------------------------------------------------------
    def delete(self, name: str) -> None:
        """Delete record ``name``: every copy holder first, then the tracker
        (paper 4.3). A name that was put but never committed is removed from
        every live peer, which resets it for a retried PUT (paper 4.4).
        Earlier puts are committed first; their failures are not raised
        here but by :meth:`flush` and :meth:`close`.

        Raises
        ------
        RecordNotFoundError
            If no peer and no commit knows the name.
        """
        self._writer.delete(name)

    # -- GET (st_py/client/reader.py) ------------------------------------------------------
    def queue_get(
        self,
        name: str,
        callback: Callable[[str, bytes | None, Exception | None], None] | None = None,
        *,
        stored: bool = False,
    ) -> Pending:
        """Queue a GET of committed record ``name`` (paper 3.6).

        Reads the infofile for the copies, asks one holder at a time (never
        all at once, to avoid incast), verifies the CRC-32C and falls back
        to the next copy on any error. The least loaded holder is asked
        first and hot spots last (CEFT, seed 001 section 5;
        docs/replication.md, "Load-aware reads"); copy-rank order, the
        paper's, with ``balance_reads=False``. Records this handle put are
        committed first (read your own writes).

        Under hash placement, when the infofile cannot be read (missing,
        unreadable, locked past SQLite's busy timeout), the peers are asked
        in the record's rendezvous order instead, and a copy is checked
        against the CRC-32C its holder stored with it. Such a read cannot
        know whether the record is committed: it returns any stored copy
        (docs/replication.md, "Placement policies").

        Parameters
        ----------
        name : str
            The record (a striped object's name reads the whole object).
        callback : callable(name, data or None, exception or None), optional
            Called when the read is done or has failed.
        stored : bool
            Return the bytes as the peers store them, before the file's
            filters (docs/filters.md) are undone: for copying records
            between peers (rebalance, repair).

        Returns
        -------
        Pending
            ``result()`` is the record's bytes, or raises
            RecordNotFoundError / RecordUnavailableError (and, with filters,
            WrongKeyError / FilterError).

        Raises
        ------
        StoreTorrentError, TrackerUnavailableError
            As :meth:`store_copies`: the handle is closed; its capability
            cannot be renewed in time.
        """
        return self._record_reader.queue_get(name, callback, stored=stored)

    def queue_get_version(self, meta: RecordMeta, stored: bool = True) -> Pending:
        """Queue a read of the stored bytes (before the file's filters are
        undone; with ``stored`` False, undone: the user's bytes, and a copy
        on this host's disk read first, as :meth:`queue_get` does) of the
        version of a record that ``meta`` describes: its
        stored name (``meta.key``), size, CRC-32C and holders, as
        :meth:`st_py.core.infofile.InfofileReader.retained_held_by` returns
        past versions kept for snapshots, or :meth:`object_version` a
        version's stripes. For copying those versions between
        peers (st_py.maintenance: drain, rebalance; docs/snapshots.md) and
        reading one version of an object whatever replaces it meanwhile. Each
        holder is asked in turn and the CRC-32C checked, as :meth:`queue_get`
        does.

        Returns
        -------
        Pending
            ``result()`` is the bytes, or raises RecordUnavailableError.
        """
        return self._record_reader.queue_get_version(meta, stored)

    def object_version(self, name: str) -> ObjectVersion | None:
        """Striped object ``name`` and its stripes' records as one read of
        the infofile finds them (:class:`~st_py.core.infofile.ObjectVersion`),
        or None if no object of that name is committed: read its stripes
        with :meth:`queue_get_version` (``stored=False``) and a replacement
        committed meanwhile (docs/striping.md, "Replacing an object") is
        not mixed into them; the old version's copies stay readable for
        the peers' ``--scrub-age`` (an hour) after a replacement, and while
        a snapshot holds them."""
        return object_version(self._ctx.infofile(), name)

    def get(self, name: str) -> bytes:
        """The bytes of committed record ``name``.

        Raises
        ------
        RecordNotFoundError
            No committed record of that name.
        RecordUnavailableError
            Every copy failed (dead peers, CRC mismatch).
        """
        return self._record_reader.get(name)

    def names(self, prefix: str | None = None) -> list[str]:
        """Names of the committed records and striped objects (not the
        stripe records), sorted by code point, those starting with
        ``prefix`` if given; read from the infofile (paper 3.5)."""
        return self._record_reader.names(prefix)

    def __len__(self) -> int:
        return self._record_reader.count()

    # -- GET_LOCAL (st_py/client/local_reads.py) ------------------------------------------
    def get_local_plan(self, allow_unavailable: bool = False) -> GetLocalPlan:
        """The live peerlist and commit generation for a GET_LOCAL, as plain
        data to hand to analysis tasks. Peers that do not answer a PING are
        left out (paper 4.3: initial failures); the PING, not the tracker's
        announce-based view, decides, since it is current.

        Raises
        ------
        RecordsUnavailableError
            If F or more peers are dead and records have no live copy (paper
            4.2), saying how many; unless ``allow_unavailable``.
        """
        return self._local.get_local_plan(allow_unavailable)

    def get_local(
        self, peer: str | None = None, allow_unavailable: bool = False, stripes: bool = False
    ) -> list[LocalRecord]:
        """Records revealed to this node, as local paths (paper 3.7). The
        stripes of striped objects are left out unless ``stripes`` (see
        ``local_stripes()``).

        Parameters
        ----------
        peer : str, optional
            ``host:port`` of the peer to ask. By default every live peer on
            this host is asked (one on a real cluster node; all of them on a
            local cluster) and the lists are joined.
        allow_unavailable : bool
            Reveal what is available when records have no live copy, instead
            of raising.

        Returns
        -------
        list of LocalRecord(name, path, size, copy_rank, peer)
            Across all peers of the file every record committed at the plan's
            generation is revealed exactly once, lower copy ranks first;
            uncommitted records never.

        Raises
        ------
        RecordsUnavailableError
            More peers dead than the class tolerates; says how many records.
        GetLocalError
            A broken invariant (naming the peers), or a ring that keeps failing.
        """
        return self._local.get_local(peer, allow_unavailable, stripes)

    def read_local(self, record: LocalRecord) -> bytes:
        """The record's bytes from its revealed local copy, checked against
        the size and CRC-32C it was stored with (paper 3.6's end-to-end
        check, on the local path of 3.7) and decoded with the file's
        client-side filters (docs/filters.md): what :meth:`get` returns,
        without the network. Used by the fsspec filesystem's local reads.

        Raises
        ------
        ChecksumError
            The copy on disk is not the record's (bit rot, a truncated or
            overwritten file): read it with :meth:`get` (another copy) and
            report it (:meth:`report_bad_copy`).
        GetLocalError
            The copy is gone (deleted meanwhile, or lost by the disk).
        WrongKeyError, FilterError
            The file's filters cannot decode it (a wrong key).
        """
        return self._local.read_local(record)

    # -- striped objects (st_py/client/striping.py) ----------------------------------------
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
        replace: bool = False,
    ) -> ObjectMeta:
        """Store ``data`` as striped object ``name`` and make it visible.

        Parameters
        ----------
        data : bytes-like or binary file
            The object; a file is read ``stripe_size`` bytes at a time, so at
            most ``in_flight`` stripes are in memory.
        stripe_size : int
            Bytes per stripe (the last may be shorter); at most the peers'
            frame size (64 MiB by default).
        stripe_width : int, optional
            Peers the stripes go round-robin over (copy rank 0 of stripe i on
            the i-th of them); default: every usable peer. Under asymmetric
            striping, the peers besides the writer's that the other copies
            go round-robin over (FreeLoader's remote width).
        local_share : float
            Asymmetric striping (FreeLoader, seed 004 section 4.1), for a
            file with ``local-first`` placement or a handle opened with
            ``prefer_peer``: the fraction (0..1) of the stripes whose copy
            rank 0 is on the writer's peer, spread evenly among the others
            (default 1: all of them; 3/11 is the paper's 3:8). Lowered to
            what the peer's announced free space holds when the object's
            size is known up front. Ignored for other files, and when this
            node has no usable peer.
        meta : mapping of str to str, optional
            The object's user metadata (as :meth:`queue_put`'s), committed
            with the object.
        in_flight : int
            Stripes stored at once (sent and not yet acknowledged), at
            least 1; with a file as ``data``, the memory bound:
            ``in_flight * stripe_size`` bytes. Default ``STRIPES_IN_FLIGHT``
            (8).
        writer_silent_s : float, optional
            Stripes committed under ``name`` without an object (a writer
            killed midway left them) are cleared first if the newest is
            at least this many seconds old (default: the module's
            ``WRITER_SILENT_S`` at the call, 60: a writer silent that long
            is taken for dead, as HDFS's lease soft limit; the other ways
            in, ``put`` of a large record, fsspec and the S3 endpoint,
            take the default); younger ones raise
            ``ObjectBeingWrittenError`` (docs/striping.md, "Stripes a
            writer left").
        replace : bool
            The name may hold a record or an object now: the object
            replaces it at once, under the file's writer lease
            (docs/striping.md, "Replacing an object"); readers see the old
            version or the new one, never a mix, and the old one stays
            readable as of earlier generations and snapshots.

        Returns
        -------
        ObjectMeta

        Raises
        ------
        RecordExistsError
            A record or object of that name is committed (write-once;
            without ``replace``).
        LeaseHeldError, LeaseLostError
            ``replace=True``: another writer holds the lease; this one's ran out.
        ObjectBeingWrittenError
            Another writer's stripes of ``name``, younger than
            ``writer_silent_s``, are committed without their object (nothing stored).
        NotEnoughPeersError, PeerError, BadNameError
        MetadataTooLargeError, BadMetadataError
            ``meta`` breaks the rules of :mod:`st_py.core.user_meta` (nothing is stored).
        """
        if replace:
            meta_obj = self._replacing.replace(
                name, data, meta, stripe_size, stripe_width, local_share, in_flight, as_object=True
            )
            assert meta_obj is not None  # as_object: always an object
            return meta_obj
        return self._objects.put_object(
            name, data, stripe_size, stripe_width, local_share, meta, in_flight, writer_silent_s=writer_silent_s
        )

    def put_parts(self, name: str, data: bytes, part_size: int = DEFAULT_STRIPE_SIZE) -> list[str]:
        """Store ``data`` as hidden records, committed, that a later
        :meth:`compose` makes part of an object with no byte copied: the
        records ``.st-stripe/<name>/<i>`` of ``part_size`` bytes each (the
        last may be shorter; ``data`` of up to 64 MiB: one record), placed
        as an object's stripes are (round-robin from a random peer). They
        are in no listing, read or GET_LOCAL of the file, as stripes
        without their object; :meth:`compose` takes them, or
        ``commit_staged(delete=...)`` removes them. The same ``name`` and
        bytes again is a retry (each record already committed counts as
        stored). Returns the records' names, in order (docs/s3.md,
        "Multipart uploads").

        Raises
        ------
        BadNameError
            ``name`` breaks the rule for names, or ``part_size`` is not 1
            byte to 64 MiB.
        NotEnoughPeersError, PeerError, StoreTorrentError
            A record could not be stored or committed (some may be: the
            caller removes or retries them).

        Thread safety: as every method of the handle (its lock).
        """
        from st_py.core.record_names import check_new_name

        check_new_name(name)
        if not 0 < part_size <= STRIPE_THRESHOLD:
            raise BadNameError(f"part_size {part_size} must be 1 byte to 64 MiB")
        if len(data) <= STRIPE_THRESHOLD:
            part_size = max(1, len(data))
        queued: list[Pending] = []
        _size, n, _crc, _head, _tail = self._objects.store_stripes(
            name, data, part_size, None, 1.0, STRIPES_IN_FLIGHT, queued, skip=self._parts_stored(name, data, part_size)
        )
        self._writer.flush()
        for p in queued:
            exc = p.exception()  # its commit refused
            if exc is not None:
                raise exc
        return [stripe_name(name, i) for i in range(n)]

    def _parts_stored(self, name: str, data: bytes, part_size: int) -> frozenset[int]:
        """The indexes of the records of :meth:`put_parts` (``name``,
        ``data``, ``part_size``) already committed with these bytes: a retry
        stores only the others. Their copies may be placed otherwise than a
        new attempt would place them, so a put again would be refused by the
        peers that hold one at another copy rank.

        Raises
        ------
        RecordExistsError
            One is committed with other bytes.
        """
        import google_crc32c

        from st_py.errors import RecordExistsError

        view = memoryview(data)
        n = max(1, -(-len(data) // part_size))
        names = [stripe_name(name, i) for i in range(n)]
        try:  # a local copy of the infofile (no shared mount) brought forward when it lacks one
            have = self._ctx.live_infofile().lookup_many(names)
            if len(have) < n and self._ctx.refresh_infofile():
                have = self._ctx.current_infofile().lookup_many(names)
        except FileNotFoundError:  # no commit yet
            return frozenset()
        same: set[int] = set()
        for i, stripe in enumerate(names):
            meta = have.get(stripe)
            if meta is None:
                continue
            chunk = view[i * part_size : (i + 1) * part_size]
            if self._ctx.filters:  # its CRC-32C is of the filtered bytes
                equal = self.queue_get_version(meta, stored=False).result() == chunk
            else:
                equal = meta.size == len(chunk) and meta.crc32c == google_crc32c.value(bytes(chunk))
            if not equal:
                raise RecordExistsError(
                    f"record {stripe!r} is already committed in {self._ctx.name} with other bytes: "
                    "records are write-once; delete it first or use another name",
                    names=(stripe,),
                )
            same.add(i)
        return frozenset(same)

    def compose(
        self,
        name: str,
        parts: Sequence[str],
        *,
        replace: bool = False,
        meta: Mapping[str, str] | None = None,
        delete: Sequence[str] = (),
    ) -> ObjectMeta | RecordMeta:
        """Make committed records ``parts`` of this file, in order, the
        striped object ``name`` (one part: record ``name``), with no byte
        read or written: the parts' copies become the object's stripes where
        they are, and the parts' names leave the file, in one tracker
        transaction (docs/striping.md, "Composing an object"; what S3's
        CompleteMultipartUpload does with an upload's parts).

        Parameters
        ----------
        parts : sequence of str
            Committed records, every one but the last of one size (1 byte
            to 64 MiB: the stripe size), the last no larger, each with every
            copy stored. Names under ``.st-stripe/`` (hidden) are taken too.
        replace : bool
            ``name`` may hold a record or an object now: replaced at once,
            under the file's writer lease (as ``put_object(replace=True)``).
        meta : mapping of str to str, optional
            User metadata of the new object or record.
        delete : sequence of str
            Other records removed in the same transaction (an upload's
            parts left out of the object).

        Returns
        -------
        ObjectMeta or RecordMeta
            The object (its CRC-32C combined from the parts'), or for one
            part the record (stored as the part was).

        Raises
        ------
        RecordNotFoundError
            A part is not committed.
        InvalidOptionError
            The parts cannot be stripes (sizes, a copy pending) or the file
            has filters (a filtered record's CRC-32C is of its stored
            bytes): ``option`` is ``"parts"``; nothing changed, copy instead.
        RecordExistsError
            ``name`` is committed (without ``replace``); the tracker refused
            the commit (nothing of it was committed).
        LeaseHeldError, LeaseLostError
            ``replace=True``: another writer holds the file's writer lease.
        BadNameError, BadMetadataError, MetadataTooLargeError

        Thread safety: as every method of the handle (its lock).
        """
        from st_py.client.compose import compose

        return compose(self._ctx, self._writer, self._versions, name, parts, replace=replace, meta=meta, delete=delete)

    def _staged_twin(self) -> StagedTwin:
        """A handle of this file in staged mode, on the same tracker, with
        this one's options: what a replacement stores its records through
        (:mod:`st_py.client.replacing`)."""
        ctx = self._ctx
        twin = StFile(
            ctx.tracker,
            ctx.info,
            ctx.depth,
            ctx.group_size,
            timeout=ctx.transport.timeout,
            infofile_path=ctx.infofile_override,
            stage=True,
        )
        twin.encryption_key = ctx.encryption_key
        twin.local_copies = ctx.local_copies
        return StagedTwin(twin, twin._writer, twin._objects)

    def get_object(self, obj: ObjectMeta) -> bytes:
        """The whole object, its stripes fetched in parallel (each from its
        least loaded holder, failing over to the next copy), each checked
        against its own CRC-32C, and the whole against the object's size.

        Raises
        ------
        RecordUnavailableError, ChecksumError
        """
        return self._record_reader.get_object(obj)

    def open(self, name: str) -> io.RawIOBase:
        """A seekable, read-only file object over record or object ``name``.
        For an object, reads fetch only the stripes they touch (at most
        ``ObjectReader.CACHED`` kept); for a record, the record is read once.

        Raises
        ------
        RecordNotFoundError
        """
        return self._objects.open(name, self)

    def local_stripes(self, allow_unavailable: bool = False) -> list[LocalStripe]:
        """The stripes GET_LOCAL reveals to this node (paper 3.7: across all
        peers, each stripe exactly once), with their place in their object
        (plaintext offsets and sizes; in a file with filters the paths hold
        filtered bytes: read them with :meth:`read_local_stripe`)."""
        return self._objects.local_stripes(allow_unavailable)

    def read_local_stripe(self, stripe: LocalStripe) -> bytes:
        """The ``stripe.size`` bytes of the object that ``stripe`` holds:
        its local copy read, checked against its size and CRC-32C, and
        decoded with the file's filters; a copy that fails the check is read
        by GET from another copy instead.

        Raises
        ------
        GetLocalError
            The copy is gone (deleted meanwhile).
        RecordUnavailableError
            No copy passes the check.
        """
        return self._objects.read_local_stripe(stripe)

    # -- versions (st_py/client/versions.py) -----------------------------------------------
    @property
    def lease(self) -> dict | None:
        """This writer's lease as ``{"lease_id", "ttl_s"}``, or None."""
        return self._versions.lease

    def acquire_lease(self, ttl: float | None = None, wait: float = 0.0) -> dict:
        """Take the file's writer lease, which ``put(..., replace=True)``
        needs (it takes it by itself otherwise). Renewed as this file is
        used; released by :meth:`release_lease` or :meth:`close`.

        Parameters
        ----------
        ttl : float, optional
            Seconds the lease lasts unless renewed (tracker default 10 s,
            at most 300 s): how long other writers wait if this one dies.
        wait : float
            Seconds to keep trying while another writer holds it.

        Returns
        -------
        dict
            ``{"lease_id", "ttl_s"}``.

        Raises
        ------
        LeaseHeldError
            Another writer holds it (``holder``, ``expires_in``) past ``wait``.
        """
        return self._versions.acquire_lease(ttl, wait)

    def release_lease(self) -> None:
        """Give the writer lease back, so another writer may replace records
        at once. Commit first (:meth:`flush`): new versions not committed
        by now are not committed."""
        self._versions.release_lease()

    # -- copies onto chosen peers (st_py/client/copies.py) ---------------------------------
    def store_copies(
        self,
        copies: Iterable[CopyToStore],
        fail_over: Callable[[CopyOutcome], int | None] | None = None,
        keep_existing: Callable[[CopyToStore, int], bool] | None = None,
    ) -> list[CopyOutcome]:
        """Store each of ``copies`` on its peer, all pipelined, and wait for
        every one (see the module docstring: ``PUT`` with ``REPLACE``, the
        record's stored key and CRC-32C). Used by rebalance (paper 4.4),
        repair (paper 4.5) and spread and drain (paper 5).

        ``copies`` is consumed one copy at a time, each sent before the next
        is taken, so a generator can choose each copy's peer knowing what
        the sends before it found (a peer that refused the connection is no
        longer :meth:`StFile.peer_usable`) and can pace the writes (polling
        with :meth:`StFile.poll` while it waits). Every copy taken is sent
        at once: the caller bounds how many (and how many bytes) one call
        holds. Each (record, rank) at most once per call.

        Parameters
        ----------
        copies : iterable of CopyToStore
        fail_over : callable(CopyOutcome) -> int or None, optional
            Called at once when a copy fails at its peer
            (``outcome.peer_failed``; paper 4.3) with that attempt's
            outcome: returns another peer index to send the copy to, or
            None to give it up. Not called for other errors. Without it,
            such a copy is given up.
        keep_existing : callable(CopyToStore, peer index) -> bool, optional
            True: send the copy to that peer without ``REPLACE``, because the
            peer may still hold a copy of that stored name that older
            readers use (a copy moved away from it): one of the same rank
            and CRC-32C is answered ``OK`` without writing (the peer takes
            it back), another is refused with ``EXISTS`` (a
            :class:`PeerError`: ``fail_over`` may pick another peer).

        Returns
        -------
        list of CopyOutcome
            One per copy, in the order they finished: stored (``error``
            None, ``peer`` its holder) or given up (``error`` the last
            attempt's).

        Raises
        ------
        StoreTorrentError
            The handle is closed.
        TrackerUnavailableError
            The file's capability is about to expire and the tracker cannot
            renew it (docs/capabilities.md).
        """
        return self._copies.store_copies(copies, fail_over, keep_existing)

    # -- lifecycle ------------------------------------------------------------
    def check_open(self) -> None:
        """Raise :class:`StoreTorrentError` if this handle is closed."""
        self._ctx.check_open()

    def close(self) -> None:
        """Flush (commit every acknowledged record) and release connections."""
        ctx = self._ctx
        if ctx.closed:
            return
        try:
            self.flush()
        finally:
            ctx.closed = True
            if self._versions.lease_id:
                try:
                    self.release_lease()
                except StoreTorrentError:
                    pass  # it runs out by itself
            ctx.release()

    def __enter__(self) -> "StFile":
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            self.close()
        else:  # do not hide the original error behind a flush error
            try:
                self.close()
            except Exception:
                pass

    def __repr__(self) -> str:
        at = f" as_of={self._ctx.as_of}" if self._ctx.as_of is not None else ""
        return f"<StFile {self.name} {self.replication} peers={len(self.peers)}{at}>"

    # -- what tests reach (kept for tests that read a handle's internals) -----------
    @property
    def _transport(self) -> Transport:
        return self._ctx.transport

    @property
    def _tracker(self) -> TrackerClient:
        return self._ctx.tracker

    @property
    def _closed(self) -> bool:
        return self._ctx.closed

    @property
    def _reader(self) -> InfofileReader | None:
        return self._ctx.infofile_reader

    _infofile = infofile


def delete_file_on_peers(transport: Transport, file_id: int, addrs: list[str], timeout: float = 30.0) -> dict:
    """Send DELETE_FILE to every peer in ``addrs``; returns {addr: error or None}."""
    results: dict[str, Exception | None] = {}
    for a in addrs:
        transport.send(a, lambda seq: [encode_delete_file(seq, file_id)], functools.partial(store_result, results, a))
    transport.wait(lambda: len(results) == len(addrs), timeout=timeout)
    return results


def _serialize_public_methods(cls: type) -> type:
    """Wrap every public method of ``cls`` so it runs under the handle's
    lock (the transport's; see :class:`StFile`)."""

    def make(fn):
        @functools.wraps(fn)
        def locked(self, *args, **kwargs):
            with self._ctx.lock:
                return fn(self, *args, **kwargs)

        return locked

    def make_write(fn):
        @functools.wraps(fn)
        def locked(self, *args, **kwargs):
            with self._ctx.lock:
                self._ctx.check_writable(fn.__name__)
                return fn(self, *args, **kwargs)

        return locked

    names = {n for klass in cls.__mro__[:-1] for n, a in vars(klass).items() if inspect.isfunction(a)}
    for name in sorted(n for n in names if not n.startswith("_")):
        setattr(cls, name, (make_write if name in WRITES else make)(getattr(cls, name)))
    return cls


# What a handle opened as of a past state refuses (ReadOnlyError; docs/snapshots.md).
WRITES = frozenset(
    {
        "queue_put",
        "put",
        "write",
        "write_table",
        "put_object",
        "delete",
        "acquire_lease",
        "extend_peerlist",
        "commit_moved_copies",
        "commit_stored_copies",
        "store_copies",
        "staged_commits",
        "staged_records",
    }
)


_serialize_public_methods(StFile)


__all__ = ["StFile", "Pending", "LocalRecord", "CopyToStore", "CopyOutcome", "delete_file_on_peers"]

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
"""

from __future__ import annotations

import functools
import inspect
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from . import capability
from ._proto import tracker_pb2 as pb
from .copies import CopiesMixin, CopyOutcome, CopyToStore
from .errors import (
    BadNameError,
    LeaseLostError,
    NotEnoughPeersError,
    PeerError,
    PeerUnavailableError,
    PermissionDeniedError,
    QueuedOperationsError,
    QuotaExceededError,
    RecordBeingWrittenError,
    RecordExistsError,
    RecordNotFoundError,
    RecordTooLargeError,
    StoreTorrentError,
    TrackerMovedError,
    TrackerUnavailableError,
)
from .getlocal import LocalRecord, local_addresses
from .group_commit import GroupCommitter
from .infofile import STRIPE_PREFIX, VERSION_PREFIX, InfofileReader, ObjectMeta, RecordMeta, stripe_name
from .local_reads import LocalReadsMixin
from .pending import Pending
from .placement import (
    Domain,
    DomainShortfall,
    choose_holders,
    choose_spare,
    domain_count,
    hash_holders,
    hash_spare,
    local_first_holders,
    peer_domain,
    pick_local_peer,
    shares_domain,
)
from .protocol import (
    FLAG_ASYNC,
    FLAG_LEFTOVER,
    FLAG_MORE,
    MAX_NAME,
    ErrorCode,
    crc32c,
    encode_delete,
    encode_delete_file,
    put_chain_prefix,
)
from .reader import ReaderMixin
from .record_format import written_schema
from .replication import is_async, is_chain
from .striping import STRIPE_THRESHOLD, ObjectsMixin
from .tracker_client import TrackerClient
from .transport import Transport
from .versions import VersionsMixin

log = logging.getLogger("storetorrent.client")

DEFAULT_DEPTH = 64
DEFAULT_GROUP = 40
COALESCE_BYTES = 1 << 20


def _name_bytes(name: str) -> bytes:
    if not isinstance(name, str):
        raise BadNameError(f"record name must be a str, not {type(name).__name__}")
    try:
        b = name.encode("utf-8")
    except UnicodeEncodeError:
        raise BadNameError(
            f"record name {name[:80]!r} is not valid UTF-8 (the infofile keeps names as "
            "UTF-8 text); decode it first, e.g. bytes.hex() or base64"
        ) from None
    if not b or len(b) > MAX_NAME or b"\x00" in b:
        raise BadNameError(f"record name must be 1 to {MAX_NAME} bytes without NUL: {name[:80]!r}")
    return b


@dataclass
class _PutOp:
    name: str
    name_b: bytes
    data: bytes
    size: int
    crc: int
    peers: list[int]  # peer_idx per copy rank
    acked: set[int] = field(default_factory=set)
    future: Pending = None  # type: ignore[assignment]  # set right after construction
    callback: Callable | None = None
    failed: bool = False
    refused: set[int] = field(default_factory=set)  # peers holding another live writer's copy (EXISTS)
    leftover_tried: set[int] = field(default_factory=set)  # peers sent a LEFTOVER PUT after EXISTS
    acknowledged: bool = False  # future set, handed to the group committer
    finished: bool = False  # every copy stored or given up: out of the pipeline
    abandoned: set[int] = field(default_factory=set)  # async copies left pending for repair
    # group commit state: 0 waiting, 1 commit in flight, 2 committed
    commit_state: int = 0
    sent_pending: set[int] = field(default_factory=set)  # ranks committed as pending
    late: list[int] = field(default_factory=list)  # pending ranks stored while the commit was in flight
    stored_as: str = ""  # a new version (replace=True): the name its copies are stored under
    key_b: bytes = b""  # the name the peers store it under (name_b, or stored_as's bytes)
    schema: tuple[str, bytes] | None = None  # (format, Arrow IPC schema) kept in the infofile
    logical_size: int | None = None  # the user's bytes, before the file's filters (size: as stored)
    seq: int = 0  # this handle's put number (which puts a quota refusal already told of)


class StFile(ObjectsMixin, ReaderMixin, LocalReadsMixin, VersionsMixin, CopiesMixin):
    """An open StoreTorrent file. Use :meth:`Client.create` or
    :meth:`Client.open` to get one; close it (or use ``with``) to commit the
    last group of records.

    Thread safety: one handle may be shared between threads. Its public
    methods run one at a time (a re-entrant lock per handle, the one its
    transport turns under), so threads sharing a handle are correct but not
    parallel; a thread pool that wants parallel reads opens a handle per
    thread (as the Ray and Dask scans do). A :class:`Pending` may be waited
    on from any thread. ``tests/test_threads.py`` checks both.
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
    ):
        self._tracker = tracker
        # stage: acknowledged records are kept for one atomic commit by the
        # caller (staged_commits / Client.commit_staged) instead of being
        # group-committed as they come: how a job's writers make the whole
        # job visible at once (docs/analysis.md).
        # prefer_peer: rank 0 on this peer when it is usable (local-first
        # placement, FreeLoader seed 004 section 4.1), whatever the file's
        # policy unless it is hash; _local_peer: the one this writer uses
        self._prefer_peer = prefer_peer
        self._local_peer: int | None = None
        self._local_hosts: set[str] | None = None  # this machine's addresses, looked up once
        self._holds_reservation = holds_reservation  # created with an est_size: close() ends the reservation
        self.depth = depth
        self.group_size = group_size
        self._transport = Transport(timeout=timeout, on_peer_failure=self._peer_failed)
        self._cap_renew_at = float("inf")
        self._reader: InfofileReader | None = None
        self._infofile_override = infofile_path
        self._set_info(info)
        self.blocksize = blocksize or info.blocksize or 16
        self._block: list[int] = []
        self._block_left = 0
        self._block_shared = False  # two holders of the block share a failure domain
        # Records (and stripes) this handle placed with two copies in one
        # failure domain because the usable peers allowed no better
        # (docs/replication.md, "Failure domains"): never a silent downgrade.
        self.domain_shortfall = DomainShortfall()
        self._puts_inflight = 0
        self._gets_inflight = 0
        self._committer = GroupCommitter(
            self._ftracker,
            self.name,
            self.file_id,
            group_size,
            self._commit_failed,
            stage=stage,
            lease=self._lease_for_commit,
            relocate=self._relocate,
        )
        # appending to a file that has records: check names up front (write-once)
        self._check_names = info.records > 0
        self._errors: deque[tuple[str, Exception]] = deque()
        self._quota_exc: QuotaExceededError | None = None  # a group commit's quota refusal, raised at the next put
        self._put_seq = 0  # puts queued so far (_PutOp.seq)
        self._quota_told = 0  # puts up to this one are covered by a quota refusal raised already
        self._closed = False
        # Keep each record's format and schema in the infofile at commit
        # (st_py.record_format.written_schema: a footer parse for Parquet,
        # the first block for CSV/JSON, a magic-byte check for others).
        self.keep_schemas = True

    # -- metadata -------------------------------------------------------------
    def _set_info(self, info: pb.FileInfo) -> None:
        self.info = info
        self.name = info.name
        self.file_id = info.file_id
        self.replication = info.replication
        self.copies = info.copies
        self.protocol = info.protocol or "client-sync"
        self._filter_names = [n for n in info.filters.split(",") if n]
        self._filters = None  # made on first use (an encrypted file needs the key only to read or write)
        self._chain = is_chain(self.protocol) and info.copies > 1
        self._async = is_async(self.protocol) and info.copies > 1
        self.peers = {p.peer_idx: p for p in info.peers}
        self.placement = info.placement or "random"
        self._hash_placement = self.placement == "hash"  # holders per record, from its name
        self._peer_ids = {p.peer_idx: p.peer_id for p in info.peers}
        # failure domains (docs/replication.md, "Failure domains"): placement
        # takes copies apart by them when the peerlist spans more than one
        self.domains = {p.peer_idx: peer_domain(p.domain, p.addr) for p in info.peers}
        self._spread = self.domains if domain_count(self.domains, self.domains) > 1 else None
        if info.capability:
            self._cap_renew_at = time.time() + (info.capability_expires - time.time()) * 2 / 3
            self._transport.set_capability(self.file_id, info.capability)
        # Where this file's metadata writes go (commits, leases, record deletes): a per-file
        # tracker when the master redirected the file to one (paper 3.5), else the master.
        self._ftracker = self._tracker.at(info.file_tracker) if info.file_tracker else self._tracker
        if getattr(self, "_committer", None) is not None:
            self._committer.use(self._ftracker)

    def _relocate(self) -> TrackerClient:
        """Ask the master again where this file's writes go (its per-file
        tracker restarted at another address, or no longer has the file)
        and send them there; returns that tracker's client.

        Raises
        ------
        TrackerUnavailableError, StFileNotFoundError
        """
        self.refresh()
        return self._ftracker

    def _file_tracker_call(self, method: str, *args, **kwargs):
        """``TrackerClient.<method>(*args, **kwargs)`` on the tracker that
        takes this file's writes; if it says it no longer does
        (TrackerMovedError), once more after :meth:`_relocate`."""
        try:
            return getattr(self._ftracker, method)(*args, **kwargs)
        except TrackerMovedError:
            self._relocate()
            return getattr(self._ftracker, method)(*args, **kwargs)

    encryption_key: bytes | None = None  # set by Client (docs/filters.md)

    @property
    def filter_names(self) -> tuple[str, ...]:
        """The file's client-side filters in order (``("zstd", "aes-256-gcm")``;
        empty: none), fixed at creation (docs/filters.md)."""
        return tuple(self._filter_names)

    @property
    def filters(self):
        """The file's :class:`~st_py.filters.FilterChain` (empty: no filter).

        Raises
        ------
        MissingKeyError, WrongKeyError
            An encrypted file without its key, or with another one.
        """
        if self._filters is None:
            from .filters import FilterChain

            self._filters = FilterChain(self._filter_names, self.encryption_key, self.name, self.info.key_check)
        return self._filters

    @property
    def placement_domains(self) -> dict[int, Domain] | None:
        """The failure domain of each peer index of the peerlist when it
        spans more than one domain, else None (one domain, e.g. a single
        machine: nothing to take copies apart by). What placement keeps a
        record's copies apart by (docs/replication.md, "Failure domains");
        pass it as ``domains`` to :mod:`st_py.placement`'s functions.
        :attr:`domains` has every peer's domain in either case."""
        return self._spread

    def report_bad_copy(self, name: str, peer: str, detail: str) -> None:
        """Tell the tracker that the copy of record ``name`` on ``peer``
        (``host:port``) failed a checked read: its CRC-32C did not match
        (docs/reliability.md, bit rot). Best effort, never raises; the
        peer's verifier quarantines the copy and ``repair`` restores it."""
        self._tracker.report_bad_copy(self.name, name, peer, detail)

    def refresh(self) -> None:
        """Re-read the peerlist and liveness from the tracker (and get a
        fresh capability)."""
        self._set_info(self._tracker.open(self.name))

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
        before = set(self.peers)
        self._set_info(self._tracker.extend_peerlist(self.name, self.file_id))
        return sorted(set(self.peers) - before)

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
        return self._tracker.move_copies(self.name, self.file_id, moves)

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
        return self._tracker.store_copies(self.name, self.file_id, stored)

    def _check_may_write(self) -> None:
        """Refuse a write the tracker did not allow, before any data moves."""
        if self.info.capability_ops and not self.info.capability_ops & capability.WRITE:
            raise (QuotaExceededError if "quota" in self.info.write_denied else PermissionDeniedError)(
                self.info.write_denied or f"no write permission on {self.name}"
            )

    def _renew_capability(self) -> None:
        """Renew the capability when a third of its lifetime is left
        (docs/capabilities.md), so peers never see it expire. A tracker
        outage is ridden out while the old one is still valid."""
        if self.info.capability and time.time() >= self._cap_renew_at:
            try:
                self.refresh()
            except TrackerUnavailableError:
                if time.time() >= self.info.capability_expires:
                    raise
                self._cap_renew_at = time.time() + 1.0

    @property
    def infofile_path(self) -> str:
        return self._infofile_override or self.info.infofile_path

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
        if self._reader is None:
            self._reader = InfofileReader(self.infofile_path)
        return self._reader

    _infofile = infofile  # the name the mixins use

    def record_meta(self, name: str) -> RecordMeta | None:
        """The committed metadata of record ``name`` (its current version:
        stored size and CRC-32C, holders by copy rank), or None if no record
        of that name is committed (a striped object is not a record: see
        :meth:`object_meta`)."""
        return self._infofile().lookup(name)

    def records_meta(self, names: list[str]) -> dict[str, RecordMeta]:
        """:meth:`record_meta` of many names at once: ``{name: RecordMeta}``
        of those committed as records."""
        return self._infofile().lookup_many(names)

    def object_meta(self, name: str) -> ObjectMeta | None:
        """The committed striped object ``name`` (its original size and
        CRC-32C, stripe size and count; docs/striping.md), or None."""
        return self._infofile().object(name)

    def _addr(self, idx: int) -> str:
        return self.peers[idx].addr

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
        p = self.peers[idx]
        return p.alive and p.addr not in self._transport.failed

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
        self._transport.failed.setdefault(self.peers[idx].addr, reason)

    def write_targets(self) -> list[int]:
        """Indexes of the usable peers that take new copies: those in
        service. Peers being drained or retired (``storetorrent drain``)
        only when too few others are usable for the class: a drain never
        fails a write, and its next pass moves such copies off."""
        usable = [i for i in self.peers if self.peer_usable(i)]
        in_service = [i for i in usable if not self.peers[i].drain_state]
        return in_service if len(in_service) >= self.copies else usable

    def _peer_failed(self, addr: str, reason: str) -> None:
        self._tracker.report_failure(addr, reason)

    def _notify(self, name: str, callback, *args) -> None:
        """Run a user's callback; an exception it raises is kept for
        :meth:`flush` (it is the caller's error, not the transport's)."""
        try:
            callback(*args)
        except Exception as e:
            self._errors.append((name, e))

    # -- PUT ------------------------------------------------------------------
    def _choose_block(self, name: str) -> list[int]:
        """The holders of the next block of records by the file's placement
        policy (st_py.placement), in copy-rank order, apart by failure domain
        as far as the usable peers allow; under hash placement, of record
        ``name`` alone."""
        live = self.write_targets()
        if len(live) < self.copies:
            raise NotEnoughPeersError(
                f"file {self.name} (class {self.replication}) needs {self.copies} live peers, "
                f"{len(live)} of {len(self.peers)} are usable; start peers or wait for them to announce"
            )
        if self._hash_placement:
            return hash_holders(self.file_id, name, self._peer_ids, self.copies, set(live), self._spread)
        local = self._writer_peer(live)
        if local is not None:
            return local_first_holders(live, self.copies, local, domains=self._spread)
        return choose_holders(live, self.copies, domains=self._spread)

    def _note_domains(self, name: str, holders: list[int]) -> None:
        """Count record ``name``, two of whose ``holders`` share a failure
        domain (callers check), in :attr:`domain_shortfall`, and log the
        first once per handle: a WARNING when the peerlist spans several
        domains, INFO in a one-domain cluster (a single machine), which has
        none to take copies apart by."""
        s = self.domain_shortfall
        if s.records:  # logged already: only counted (cheap, per record)
            s.records += 1
            return
        live = self.write_targets()
        if s.note(name, holders, self.domains, live):
            log.log(
                logging.WARNING if self._spread is not None else logging.INFO,
                "file %s: copies of record %r share failure domain %s: its %d usable peers span %d failure "
                "domain(s) and class %s needs %d, so copies are on distinct peers only (the count: "
                'StFile.domain_shortfall; docs/replication.md, "Failure domains")',
                self.name,
                name,
                s.domain,
                len(live),
                s.domains,
                self.replication,
                self.copies,
            )

    def _writer_peer(self, live: list[int]) -> int | None:
        """The peer on this writer's node that takes copy rank 0 of records
        and stripes under local-first placement or with ``prefer_peer``
        (FreeLoader seed 004 section 4.1), kept while it is in ``live``;
        None under other policies (and always under hash), or when this node
        has no usable peer."""
        if self._hash_placement or (self._prefer_peer is None and self.placement != "local-first"):
            return None
        if self._local_peer not in live:  # first use, or this writer's node went away
            if self._local_hosts is None:
                self._local_hosts = local_addresses() if self.placement == "local-first" else set()
            self._local_peer = pick_local_peer(
                {i: self._addr(i) for i in self.peers}, live, self._local_hosts, self._prefer_peer
            )
        return self._local_peer

    def queue_put(
        self,
        name: str,
        data: bytes,
        callback: Callable[[str, Exception | None], None] | None = None,
        *,
        replace: bool = False,
        _holders: list[int] | None = None,
    ) -> Pending:
        """Queue a PUT of record ``name`` and return at once (paper 3.2).

        Blocks only while ``depth`` records are in flight. The record is
        acknowledged when all F copies are stored; it is committed (visible)
        with its group, or at :meth:`flush` / :meth:`close`.

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

        Returns
        -------
        Pending
            ``result()`` returns once every copy is acknowledged.

        Raises
        ------
        BadNameError, NotEnoughPeersError, RecordExistsError
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
        self.check_open()
        self._renew_capability()
        self._check_may_write()
        self._raise_quota()
        name_b = _name_bytes(name)
        if len(data) > STRIPE_THRESHOLD and _holders is None:
            raise RecordTooLargeError(name, len(data), STRIPE_THRESHOLD)
        if name.startswith(STRIPE_PREFIX) and _holders is None:
            raise BadNameError(
                f"record names starting with {STRIPE_PREFIX!r} hold the stripes of objects: "
                f"use another name for {name[:80]!r} (docs/striping.md)"
            )
        if name.startswith(VERSION_PREFIX):
            raise BadNameError(
                f"record names starting with {VERSION_PREFIX!r} hold the versions of replaced "
                f"records: use another name for {name[:80]!r} (docs/infofile.md)"
            )
        stored_as = ""
        if replace:
            if len(name_b) > MAX_NAME - 64:
                raise BadNameError(
                    f"record name {name[:80]!r} is too long to be replaced: at most "
                    f"{MAX_NAME - 64} bytes (a version's name adds up to 64)"
                )
            if self._infofile().object(name) is not None:
                raise BadNameError(
                    f"{name!r} is a striped object: objects cannot be replaced; delete it and "
                    "put it again (docs/striping.md)"
                )
            stored_as = self._version_key(name)
        elif self._check_names and self._infofile().exists(name):
            raise RecordExistsError(
                f"record {name!r} is already committed in {self.name}: records are "
                "write-once; delete it first or use another name",
                names=(name,),
            )
        data = bytes(data) if not isinstance(data, bytes) else data
        # the record's format and schema, of its plaintext, for the infofile:
        # scans then read no record to learn them (docs/infofile.md)
        schema = written_schema(name, data) if self.keep_schemas and _holders is None else None
        logical_size = len(data)
        if self.filters:  # the peers store (and CRC) the filtered bytes
            data = self.filters.encode(self.file_id, name, data)
        while self._puts_inflight + self._gets_inflight >= self.depth:
            self._transport.poll(0.05)
            self._committer.pump()
        if _holders is not None:  # a stripe of an object: placed by put_object
            holders = list(_holders)
            shared = shares_domain(holders, self.domains)
        else:
            if self._block_left <= 0 or self._hash_placement or not all(self.peer_usable(i) for i in self._block):
                self._block = self._choose_block(name)
                self._block_shared = shares_domain(self._block, self.domains)
                self._block_left = self.blocksize
            self._block_left -= 1
            holders = list(self._block)
            shared = self._block_shared
        if shared:
            self._note_domains(name, holders)
        op = _PutOp(
            name,
            name_b,
            data,
            len(data),
            crc32c(data),
            holders,
            future=Pending(self._transport.wait, name),
            callback=callback,
            stored_as=stored_as,
            key_b=stored_as.encode("utf-8") if stored_as else name_b,
            schema=schema,
            logical_size=logical_size,
            seq=self._put_seq + 1,
        )
        self._put_seq += 1
        self._puts_inflight += 1
        if self._chain:
            self._send_chain(op)
        else:
            for rank, idx in enumerate(op.peers):
                self._send_copy(op, rank, idx)
        # Coalesce (paper 3.2): frames pile up and go out in one sendmsg per
        # peer when the pipeline is full, when enough bytes wait, or at poll().
        if self._transport.out_bytes >= COALESCE_BYTES:
            self._transport.poll(0)
        self._committer.pump()
        return op.future

    def _send_copy(self, op: _PutOp, rank: int, idx: int, flags: int = 0) -> None:
        self._transport.send_put(
            self._addr(idx),
            self.file_id,
            rank,
            op.crc,
            op.key_b,
            op.data,
            flags,
            lambda fr, exc: self._copy_done(op, rank, idx, exc),
        )

    def _send_chain(self, op: _PutOp) -> None:
        """One PUT_CHAIN to the rank-0 holder, which forwards the record
        down the others (docs/replication.md, "chain")."""
        hops = [self._addr(i) for i in op.peers[1:]]
        flags = FLAG_ASYNC if self._async else 0
        self._transport.send(
            self._addr(op.peers[0]),
            lambda seq: [put_chain_prefix(seq, self.file_id, 0, op.crc, op.key_b, hops, len(op.data), flags), op.data],
            lambda fr, exc: self._chain_done(op, fr, exc),
        )

    def _chain_done(self, op: _PutOp, fr, exc: Exception | None) -> None:
        if op.failed or op.finished:
            return
        if exc is None:
            if fr is not None and fr.flags & FLAG_MORE:  # async: copy rank 0 is stored
                self._copy_stored(op, 0)
                return
            for rank in range(self.copies):
                if rank not in op.acked:
                    self._copy_stored(op, rank)
            return
        # The chain broke. A downstream failure names the peer where it did:
        # the copies before it are stored; that copy fails over like a
        # client-sync one, and the copies after it are written directly.
        broken = None
        if isinstance(exc, PeerError) and exc.peers:
            ranks = [r for r, i in enumerate(op.peers) if self._addr(i) == exc.peers[0]]
            broken = ranks[0] if ranks and ranks[0] > 0 else None
        if broken is not None:
            for rank in range(broken):
                if rank not in op.acked:
                    self._copy_stored(op, rank)
            addr = self._addr(op.peers[broken])
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
        if op.failed:
            return
        for rank in range(start, self.copies):
            if rank not in op.acked:
                self._send_copy(op, rank, op.peers[rank])

    def _copy_stored(self, op: _PutOp, rank: int) -> None:
        op.acked.add(rank)
        if op.acknowledged:
            self._committer.copy_stored(op, rank)  # a pending copy of a committed record
        elif len(op.acked) == self.copies or (self._async and rank == 0):
            self._acknowledge(op)
        self._maybe_finish(op)

    def _acknowledge(self, op: _PutOp) -> None:
        op.acknowledged = True
        self._committer.add(op)
        op.future.set_result(True)
        if op.callback:
            self._notify(op.name, op.callback, op.name, None)

    def _maybe_finish(self, op: _PutOp) -> None:
        if not op.finished and len(op.acked) + len(op.abandoned) >= self.copies:
            op.finished = True
            op.data = b""  # every copy is stored: memory stays bounded by depth x size
            self._puts_inflight -= 1

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
        if self._hash_placement:
            return hash_spare(self.file_id, name, self._peer_ids, usable, holders, self._spread, apart_from)
        return choose_spare(usable, holders, domains=self._spread, apart_from=apart_from)

    def _fail_over(self, op: _PutOp, rank: int, usable: list[int]) -> bool:
        """Send copy ``rank`` of ``op`` to a spare among ``usable`` (paper
        4.3), apart by failure domain from the copies that stay; False if
        there is none. A spare that must share a domain is counted."""
        others = [p for r, p in enumerate(op.peers) if r != rank]
        new = self.spare_peer(op.name, usable, op.peers, others)
        if new is None:
            return False
        before = shares_domain(op.peers, self.domains)
        op.peers[rank] = new
        if not before and shares_domain(op.peers, self.domains):
            self._note_domains(op.name, op.peers)
        self._send_copy(op, rank, new)
        return True

    def _copy_done(self, op: _PutOp, rank: int, idx: int, exc: Exception | None) -> None:
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
                self._transport.failed.setdefault(self._addr(idx), str(exc))
            if self._fail_over(op, rank, self.write_targets()):
                return
            exc = NotEnoughPeersError(
                f"record {op.name!r}: copy {rank} failed ({exc}) and no other live peer can take it; "
                f"class {self.replication} needs {self.copies} live peers"
            )
        elif isinstance(exc, PeerError) and exc.code == ErrorCode.EXISTS:
            committed = self._infofile().exists(op.name) and not op.stored_as
            if not committed and not op.acknowledged and idx not in op.leftover_tried:
                # An uncommitted copy with other content. Left by a crashed
                # writer (paper 4.4), it is replaced: the peer does so only
                # if the connection that stored it has closed (LEFTOVER), so
                # a live writer's copy is never overwritten.
                op.leftover_tried.add(idx)
                self._send_copy(op, rank, idx, FLAG_LEFTOVER)
                return
            if not committed or op.acknowledged:
                # A live writer's uncommitted copy: put this copy on another peer.
                op.refused.add(idx)
                if self._fail_over(op, rank, [i for i in self.write_targets() if i not in op.refused]):
                    return
            if committed:
                exc = RecordExistsError(
                    f"record {op.name!r} is already committed in {self.name}: records are "
                    "write-once; delete it first (f.delete(name)) or use another name",
                    names=(op.name,),
                )
            else:
                exc = RecordBeingWrittenError(
                    op.name, self.name, sorted({self._addr(i) for i in op.refused} | {exc.peer})
                )
        if op.acknowledged:
            # An async record is committed with this copy pending: repair
            # stores it (storetorrent repair, docs/replication.md).
            op.abandoned.add(rank)
            self._maybe_finish(op)
            return
        self._fail_put(op, exc)

    def _fail_put(self, op: _PutOp, exc: Exception) -> None:
        op.failed = True
        op.finished = True
        self._puts_inflight -= 1
        op.future.set_exception(exc)
        if op.callback:
            self._notify(op.name, op.callback, op.name, exc)
        else:
            self._errors.append((op.name, exc))

    def _commit_failed(self, op: _PutOp, exc: Exception) -> None:
        """The tracker refused (conflict, quota) or could not commit ``op``."""
        if isinstance(exc, LeaseLostError):
            self._lease_id = ""  # the next new version takes the lease again
            exc.file = self.name
        if isinstance(exc, QuotaExceededError) and not op.callback:
            if op.seq <= self._quota_told:  # put before a refusal raised already, which covers it
                op.future.set_exception(exc)
                return
            if self._quota_exc is None:
                self._quota_exc = exc  # raised at the next put (_raise_quota)
        op.future.set_exception(exc)
        if op.callback:
            self._notify(op.name, op.callback, op.name, exc)
        else:
            self._errors.append((op.name, exc))

    def _raise_quota(self) -> None:
        """Raise the quota refusal the group commit met, once: at the put
        after it (the records before it are committed; so are none after
        it, so a writer that goes on learns of it at every group). The
        refused records' errors are reported by it, not again by close."""
        exc = self._quota_exc
        if exc is None:
            return
        self._quota_exc = None
        self._quota_told = self._put_seq  # the puts so far: refused ones among them are told of by this
        kept = [(n, e) for n, e in self._errors if not isinstance(e, QuotaExceededError)]
        self._errors.clear()
        self._errors.extend(kept)
        raise exc

    def staged_commits(self) -> list[dict]:
        """The records acknowledged by every holder but not committed, of a
        file opened with ``stage=True``, as plain dicts ``{"name", "size",
        "crc32c", "peer_idx", "schema", "logical_size"}`` (``size`` as
        stored, ``logical_size`` the user's bytes; peer indexes by copy rank;
        ``schema`` the record's ``(format, Arrow IPC schema)`` or None);
        they are taken out of the file. Commit them with :meth:`Client.commit_staged`.

        Raises
        ------
        StoreTorrentError
            If queued records failed (as :meth:`flush`).
        """
        self.flush()
        return self._committer.take_staged()

    def put(self, name: str, data: bytes, replace: bool = False) -> None:
        """Store record ``name`` and wait until every copy is acknowledged.

        The record becomes visible to readers when its group is committed
        (every ``group_size`` records) or at :meth:`flush`/:meth:`close`.
        Data over ``STRIPE_THRESHOLD`` (64 MiB) is stored as a striped
        object instead (:meth:`put_object`, docs/striping.md), visible at
        once when this returns. ``replace=True`` stores a new version of
        the record under the file's writer lease (:meth:`queue_put`).

        Raises
        ------
        BadNameError, RecordExistsError, NotEnoughPeersError, PeerError
        LeaseHeldError, LeaseLostError
            ``replace=True``: another writer holds the lease; this one's ran out.
        """
        if len(data) > STRIPE_THRESHOLD:
            if replace:
                raise BadNameError(
                    f"{name!r}: data over {STRIPE_THRESHOLD} bytes is a striped object, and "
                    "objects cannot be replaced; delete it and put it again"
                )
            self.put_object(name, data)
            return
        pending = self.queue_put(name, data, replace=replace)
        try:
            pending.result()
        except StoreTorrentError as e:  # told here: flush and close do not report it again
            kept = [(n, x) for n, x in self._errors if x is not e]
            self._errors.clear()
            self._errors.extend(kept)
            raise
        self._committer.pump()  # its group's commit, if the put filled one (quota: raised below)
        self._raise_quota()

    def poll(self, timeout: float = 0.0) -> int:
        """Make progress on queued operations; returns operations in flight."""
        self._transport.poll(timeout)
        self._committer.pump()
        return self.inflight

    @property
    def inflight(self) -> int:
        return self._puts_inflight + self._gets_inflight

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
        self._transport.wait(lambda: self.inflight == 0)
        self._committer.drain()
        if self._errors:
            errs = list(self._errors)
            self._errors.clear()
            if self._quota_exc is not None:  # reported here: not again at the next put
                self._quota_exc, self._quota_told = None, self._put_seq
            if len({id(e) for _, e in errs}) == 1:  # one failure, or one commit that failed a group
                raise errs[0][1]
            more = f" (and {len(errs) - 5} more)" if len(errs) > 5 else ""
            raise QueuedOperationsError(
                f"{len(errs)} queued operations failed: " + "; ".join(f"{n!r}: {e}" for n, e in errs[:5]) + more, errs
            )

    # -- DELETE ---------------------------------------------------------------
    def delete(self, name: str) -> None:
        """Delete record ``name``: every copy holder first, then the tracker
        (paper 4.3). A name that was put but never committed is removed from
        every live peer, which resets it for a retried PUT (paper 4.4).

        Raises
        ------
        RecordNotFoundError
            If no peer and no commit knows the name.
        """
        self.check_open()
        self._renew_capability()
        self._check_may_write()
        self.flush()
        obj = self._infofile().object(name)
        if obj is not None:  # a striped object: the object first (invisible), then its stripes
            self._file_tracker_call("delete", self.name, self.file_id, records=[name])
            for i in range(obj.stripes):
                self._delete_copies(stripe_name(name, i))
            self._file_tracker_call(
                "delete", self.name, self.file_id, records=[stripe_name(name, i) for i in range(obj.stripes)]
            )
            return
        if self._delete_copies(name) is None:
            raise RecordNotFoundError(f"no record {name!r} in {self.name}")

    def _delete_copies(self, name: str) -> bool | None:
        """DELETE on every holder of ``name`` (every live peer if it is not
        committed), then its commit. Returns None if nobody knew it. A
        replaced record's older versions are left to the scrubber."""
        info = self._infofile()
        meta = info.lookup(name)
        key = meta.key if meta is not None else name
        targets = [(key, i) for i in (meta.peers if meta else self.peers) if self.peer_usable(i)]
        if meta is not None:  # its older versions and moved copies go with it
            targets += [
                (k, i) for k, i in info.superseded_copies(name) if self.peer_usable(i) and (k, i) not in targets
            ]
        results: dict[int, Exception | None] = {}
        for n, (k, idx) in enumerate(targets):
            self._transport.send(
                self._addr(idx),
                functools.partial(_encode_delete, file_id=self.file_id, name=_name_bytes(k)),
                functools.partial(_store_result, results, n),
            )
        self._transport.wait(lambda: len(results) == len(targets))
        found = any(e is None for e in results.values())
        for e in results.values():
            if isinstance(e, PeerError) and e.code != ErrorCode.NOT_FOUND:
                raise e
        if meta is not None:
            if not name.startswith(STRIPE_PREFIX):  # stripes go with their object, in one call
                self._file_tracker_call("delete", self.name, self.file_id, records=[name])
            return True
        return True if found else None

    # -- lifecycle ------------------------------------------------------------
    def check_open(self) -> None:
        """Raise :class:`StoreTorrentError` if this handle is closed."""
        if self._closed:
            raise StoreTorrentError(f"file {self.name} is closed")

    def close(self) -> None:
        """Flush (commit every acknowledged record) and release connections."""
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            if self._lease_id:
                try:
                    self.release_lease()
                except StoreTorrentError:
                    pass  # it runs out by itself
            if self._holds_reservation:
                self._end_reservation()
            self._transport.close()
            if self._reader is not None:
                self._reader.close()

    def _end_reservation(self) -> None:
        """Tell the tracker this file's space reservation is no longer needed
        (docs/replication.md, "Space reservation"); if it cannot be told,
        the reservation's lease runs out instead."""
        self._holds_reservation = False
        try:
            self._tracker.close_file(self.name, self.file_id, timeout=5.0)
        except StoreTorrentError:
            pass

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
        return f"<StFile {self.name} {self.replication} peers={len(self.peers)}>"


def _store_result(results: dict, key, fr, exc) -> None:
    results[key] = exc


def _encode_delete(seq: int, file_id: int, name: bytes) -> list:
    return [encode_delete(seq, file_id, name)]


def delete_file_on_peers(transport: Transport, file_id: int, addrs: list[str], timeout: float = 30.0) -> dict:
    """Send DELETE_FILE to every peer in ``addrs``; returns {addr: error or None}."""
    results: dict[str, Exception | None] = {}
    for a in addrs:
        transport.send(a, lambda seq: [encode_delete_file(seq, file_id)], functools.partial(_store_result, results, a))
    transport.wait(lambda: len(results) == len(addrs), timeout=timeout)
    return results


def _serialize_public_methods(cls: type) -> type:
    """Wrap every public method of ``cls`` (and of its mixins) so it runs
    under the handle's transport lock (see :class:`StFile`)."""

    def make(fn):
        @functools.wraps(fn)
        def locked(self, *args, **kwargs):
            with self._transport.lock:
                return fn(self, *args, **kwargs)

        return locked

    names = {n for klass in cls.__mro__[:-1] for n, a in vars(klass).items() if inspect.isfunction(a)}
    for name in sorted(n for n in names if not n.startswith("_")):
        setattr(cls, name, make(getattr(cls, name)))
    return cls


_serialize_public_methods(StFile)


__all__ = ["StFile", "Pending", "LocalRecord", "CopyToStore", "CopyOutcome", "delete_file_on_peers"]

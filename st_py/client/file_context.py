"""The state every part of an open file works on (:class:`FileContext`).

An open file (:class:`st_py.client.file.StFile`) is composed of parts, each a class
of its own that is handed this context (as leveldb's ``DBImpl`` hands its
``VersionSet``, ``TableCache`` and log writer theirs): the writer
(:mod:`st_py.client.record_writer`, with :mod:`st_py.client.placer`), the reader
(:mod:`st_py.client.reader`), GET_LOCAL planning (:mod:`st_py.client.local_reads`),
versions (:mod:`st_py.client.versions`), striped objects (:mod:`st_py.client.striping`)
and copies onto chosen peers (:mod:`st_py.client.copies`). The parts use each
other and this context only through public names: none reaches into
another's underscore state.
"""

from __future__ import annotations

import time
import uuid
from collections import deque
from collections.abc import Callable

from st_py._proto import tracker_pb2 as pb
from st_py.client.group_commit import GroupCommitter
from st_py.core import capability
from st_py.core.history import AsOf
from st_py.core.infofile import InfofileReader
from st_py.core.placement import Domain, domain_count, peer_domain
from st_py.core.replication import is_async, is_chain
from st_py.errors import (
    PermissionDeniedError,
    QuotaExceededError,
    ReadOnlyError,
    StoreTorrentError,
    TrackerMovedError,
    TrackerUnavailableError,
)
from st_py.wire.tracker_client import RESTART_GRACE, TrackerClient
from st_py.wire.transport import Transport

DEFAULT_DEPTH = 64
DEFAULT_GROUP = 40


class FileContext:
    """What the parts of one open file share: the file's identity and
    options (from the tracker's ``FileInfo``, replaced whole by
    :meth:`refresh`), its peers and their liveness, the transport, the
    group committer, the infofile reader, the capability and its renewal,
    the operations in flight, and the errors kept for ``flush``.

    Parameters
    ----------
    tracker : TrackerClient
        The master tracker (the file's per-file tracker, if any, is
        :attr:`file_tracker`).
    info : FileInfo
        As ``Open`` or ``Create`` returned it.
    depth : int
        Operations (PUTs and GETs) in flight at most (paper 3.2).
    group_size : int
        Records per group commit.
    timeout : float
        Seconds a peer has to answer a request.
    infofile_path : str, optional
        Read the infofile there instead of at ``info.infofile_path``.
    holds_reservation : bool
        The file was created with an estimated size: closing it ends the
        space reservation.

    Thread safety: not safe to share between threads by itself. It belongs
    to one :class:`~st_py.client.file.StFile`, whose public methods run one at a
    time under :attr:`lock` (the transport's lock), and every part runs
    inside them.
    """

    encryption_key: bytes | None = None  # the file's key (docs/filters.md), set by Client

    def __init__(
        self,
        tracker: TrackerClient,
        info: pb.FileInfo,
        depth: int = DEFAULT_DEPTH,
        group_size: int = DEFAULT_GROUP,
        timeout: float = 30.0,
        infofile_path: str | None = None,
        holds_reservation: bool = False,
    ):
        self.tracker = tracker
        self.depth = depth
        self.group_size = group_size
        self.holds_reservation = holds_reservation
        self.transport = Transport(timeout=timeout, on_peer_failure=self.report_failure)
        self.infofile_override = infofile_path
        self._reader: InfofileReader | None = None
        self._reader_state: tuple[int, int, str] | None = None  # the copy _reader reads (metadata="fetch")
        self._retired: list[InfofileReader] = []  # readers of copies since brought forward
        self._reader_ino: int | None = None  # the inode _reader opened (shared mount)
        self._direct_seen = -1  # metadata="auto", read directly: the generation last seen in the infofile
        self._as_of_view: AsOf | None = None  # a view when the handle reads a past generation (read_as_of)
        self._cap_renew_at = float("inf")
        self._filters = None
        self._committer: GroupCommitter | None = None
        self.errors: deque[tuple[str, Exception]] = deque()  # (record name, error) for flush
        self.puts_inflight = 0  # the RecordWriter's count
        self.gets_inflight = 0  # the RecordReader's count
        # sends the queue_put records waiting in a slice (the RecordWriter's; st_py/client/put_slices.py)
        self.flush_puts: Callable[[], None] = lambda: None
        self.closed = False
        self.local_copies = None  # st_py.client.local_copies.LocalCopies: GETs read copies on this host's disk
        self.set_info(info)

    # -- the file's metadata ------------------------------------------------------
    def set_info(self, info: pb.FileInfo) -> None:
        """Use ``info`` (a fresh ``Open`` reply: peerlist, liveness,
        capability, where writes go) from now on."""
        self.info = info
        self.name = info.name
        self.file_id = info.file_id
        self.replication = info.replication
        self.copies = info.copies
        self.protocol = info.protocol or "client-sync"
        self.filter_names = tuple(n for n in info.filters.split(",") if n)
        self._filters = None  # made on first use (an encrypted file needs the key only to read or write)
        self.chain = is_chain(self.protocol) and info.copies > 1
        self.is_async = is_async(self.protocol) and info.copies > 1
        self.peers = {p.peer_idx: p for p in info.peers}
        self.placement = info.placement or "random"
        self.hash_placement = self.placement == "hash"  # holders per record, from its name
        self.peer_ids = {p.peer_idx: p.peer_id for p in info.peers}
        # failure domains (docs/replication.md, "Failure domains"): placement
        # takes copies apart by them when the peerlist spans more than one
        self.domains: dict[int, Domain] = {p.peer_idx: peer_domain(p.domain, p.addr) for p in info.peers}
        self.spread = self.domains if domain_count(self.domains, self.domains) > 1 else None
        if info.capability:
            self._cap_renew_at = time.time() + (info.capability_expires - time.time()) * 2 / 3
            self.transport.set_capability(self.file_id, info.capability)
        # Where this file's metadata writes go (commits, leases, record deletes): a per-file
        # tracker when the master redirected the file to one (paper 3.5), else the master.
        self.file_tracker = self.tracker.at(info.file_tracker) if info.file_tracker else self.tracker
        if self._committer is not None:
            self._committer.use(self.file_tracker)

    def refresh(self) -> None:
        """Re-read the peerlist and liveness: :meth:`st_py.client.file.StFile.refresh` (the public docstring)."""
        self.set_info(self.tracker.open(self.name))

    def relocate(self) -> TrackerClient:
        """Ask the master again where this file's writes go (its per-file
        tracker restarted at another address, or no longer has the file)
        and send them there; returns that tracker's client.

        Raises
        ------
        TrackerUnavailableError, StFileNotFoundError
        """
        self.refresh()
        return self.file_tracker

    def file_tracker_call(self, method: str, *args, **kwargs):
        """``TrackerClient.<method>(*args, **kwargs)`` on the tracker that
        takes this file's writes; while it says it no longer does, or no
        longer answers at its address (TrackerMovedError: its master
        restarted it, or another tracker was elected and started its own),
        again after :meth:`relocate`, for up to ``RESTART_GRACE`` seconds.
        A ``delete`` or a lease's acquire carries one request id over every
        try, so a try whose reply was lost is applied once."""
        if method in ("delete", "lease"):
            kwargs.setdefault("request_id", uuid.uuid4().hex)
        deadline = time.monotonic() + RESTART_GRACE
        while True:
            try:
                return getattr(self.file_tracker, method)(*args, **kwargs)
            except TrackerMovedError:
                if time.monotonic() >= deadline:
                    raise
                self.relocate()

    @property
    def filters(self):
        """The file's filter chain: :attr:`st_py.client.file.StFile.filters` (the public docstring)."""
        if self._filters is None:
            from st_py.core.filters import FilterChain

            self._filters = FilterChain(list(self.filter_names), self.encryption_key, self.name, self.info.key_check)
        return self._filters

    # -- the committer ------------------------------------------------------------
    @property
    def committer(self) -> GroupCommitter:
        """The file's group committer (set once by :meth:`use_committer`)."""
        assert self._committer is not None, "use_committer() first"
        return self._committer

    def use_committer(self, committer: GroupCommitter) -> None:
        """Commit this file's records with ``committer`` (made by the file,
        whose parts give it its callbacks)."""
        self._committer = committer

    # -- the infofile -------------------------------------------------------------
    @property
    def infofile_path(self) -> str:
        """Where the file's infofile is read: the ``infofile_path`` given, or
        the tracker's (``FileInfo.infofile_path``, on the shared namespace)."""
        return self.infofile_override or self.info.infofile_path

    def copy_locator(self):
        """The locator of this file's local infofile copy (``metadata="fetch"``,
        or ``"auto"`` for a file this node does not see at the tracker's
        path), or None when the infofile is read at the tracker's path."""
        loc = self.tracker.locator
        return None if loc is None or loc.reads_directly(self.file_id) else loc

    def infofile(self):
        """What reads ask about the file's records: the read-only reader of
        its infofile (opened on first use, closed with :meth:`close`), or,
        for a handle opened as of a past generation, an
        :class:`~st_py.core.history.AsOf` view of it at that generation.

        Raises
        ------
        FileNotFoundError
            The infofile is not there.
        """
        if self._as_of_view is not None:
            return self._as_of_view
        return self.current_infofile()

    def current_infofile(self) -> InfofileReader:
        """The read-only reader of the file's infofile, at its current state.

        Raises
        ------
        FileNotFoundError
            The infofile is not there.
        """
        loc = self.copy_locator()
        if loc is None or self.infofile_override or self._as_of_view is not None:
            if self._reader is None:
                self._reader = InfofileReader(self.infofile_path)
                if loc is None and not self.infofile_override:
                    self._reader_ino = _inode(self.infofile_path)
            return self._reader
        # a local copy (st_py/client/infofile_copies.py): at least the generation this client knows of
        if self._reader is not None and (self._reader_state is None or loc.behind(self.file_id, self._reader_state)):
            self._retire_reader()
        if self._reader is None:
            path = self._ensure_copy(loc)
            self._reader = InfofileReader(path)
            m = self._reader.meta()
            self._reader_state = (int(m["generation"]), int(m.get("log_index") or 0), m.get("log_id") or "")
        return self._reader

    def live_infofile(self):
        """What a read beginning now asks about the file's records: as
        :meth:`infofile`, and, with a local copy of the current state, that
        copy holding every change acknowledged before the read began less
        the locator's ``max_age_s`` (a copy last checked longer ago asks the
        tracker once, a question shared by the reads of this client waiting
        on the same file; 0: every read asks, as the shared mount's live
        infofile; docs/decisions.md, "Freshness of a local copy").

        Raises StaleInfofileError, TrackerUnavailableError, FileNotFoundError."""
        loc = self.copy_locator()
        if self.infofile_override or self._as_of_view is not None:
            return self.infofile()
        if loc is None:
            self._check_mount_file()
            reader = self.current_infofile()
            if self.tracker.locator is not None and not self._direct_current(reader):
                return self.live_infofile()  # demoted: read from a copy from now on
            return reader
        # bounded age (docs/decisions.md, "Freshness of a local copy"): the copy holds every change
        # acknowledged before the read began, less max_age_s (0: live, one question per read)
        since = time.monotonic() - loc.max_age_s
        self._ensure_copy(loc, since=since)
        if self._reader is not None and loc.state(self.file_id) != self._reader_state:
            self._retire_reader()
        return self.current_infofile()

    def _direct_current(self, reader: InfofileReader) -> bool:
        """Under ``auto``, a file read at the tracker's path: True if its
        infofile has the generation this client was told of (its commits, an
        Open), else it is not the tracker's live file on this node (a
        follower's at the leader's path): the locator reads a copy from now
        on and this returns False."""
        loc = self.tracker.locator
        want = loc.wanted(self.file_id).generation
        if want <= self._direct_seen:
            return True
        have = reader.generation()
        if have >= want:
            self._direct_seen = have
            return True
        loc.demote(self.file_id)
        self._retire_reader()
        self.info.infofile_path = str(loc.path(self.file_id))  # where it is read from now on
        return False

    def _check_mount_file(self) -> None:
        """On the shared mount: the infofile path still holds this handle's
        file, as the copy's FetchInfofile says under ``fetch`` (one stat;
        the meta's file id read only when the inode changed, e.g. a
        restored infofile, then read anew). Raises StFileNotFoundError when
        the file was deleted (or its name given to another file) since."""
        import os

        from st_py.errors import StFileNotFoundError

        if self._reader is None:
            return
        try:
            ino = os.stat(self.infofile_path).st_ino
        except FileNotFoundError:
            ino = None
        if ino is not None and ino == self._reader_ino:
            return
        if ino is not None:
            r = InfofileReader(self.infofile_path)
            try:
                same = int(r.meta().get("file_id") or 0) == self.file_id
            finally:
                r.close()
            if same:  # the same file in a new infofile (restored): read it from now on
                self._retire_reader()
                return
        raise StFileNotFoundError(f"no StoreTorrent file {self.name}; was it deleted?")

    def _retire_reader(self) -> None:
        # kept open until release(): a caller may still hold it (the old copy's file stays readable)
        if self._reader is not None:
            self._retired.append(self._reader)
            self._reader = None

    def live_or_newer(self, read: Callable):
        """``read(reader)`` on :meth:`live_infofile`; if that finds nothing
        (None, or empty) in a local copy of the current state, once more
        after bringing the copy forward (a name committed elsewhere since
        the copy was checked: read at once). Raises as :meth:`live_infofile`."""
        got = read(self.live_infofile())
        if not got and self.refresh_infofile():
            got = read(self.current_infofile())
        return got

    def _ensure_copy(self, loc, **kwargs):
        """``loc.ensure(...)`` (st_py/client/infofile_copies.py) of this file's
        copy from the tracker that serves its changes; when that is a
        per-file tracker that no longer answers (its master restarts it, or
        another tracker was elected and runs its own elsewhere), again after
        :meth:`relocate`, for up to ``RESTART_GRACE`` seconds."""
        deadline = time.monotonic() + RESTART_GRACE
        while True:
            try:
                return loc.ensure(loc.source(self.tracker, self.info), self.name, self.file_id, **kwargs)
            except (TrackerUnavailableError, TrackerMovedError):
                if not self.info.file_tracker or time.monotonic() >= deadline:
                    raise
                time.sleep(0.1)
                self.relocate()

    def refresh_infofile(self) -> bool:
        """With a local copy of the infofile (``metadata="fetch"``), ask the
        tracker once for changes newer than it (a GET of a name the copy does
        not hold, before saying NOT_FOUND). True if the copy moved forward.
        False on the shared mount or for a handle reading a past state.

        Raises StaleInfofileError, TrackerUnavailableError."""
        loc = self.copy_locator()
        if loc is None or self.infofile_override or self._as_of_view is not None:
            return False
        self._ensure_copy(loc, newer=True)
        if self._reader is not None and loc.state(self.file_id) == self._reader_state:
            return False
        self._retire_reader()
        return True

    # -- reading a past state (docs/snapshots.md) ------------------------------------
    @property
    def as_of(self) -> int | None:
        """The past generation this handle reads, or None (the current state)."""
        return self._as_of_view.as_of if self._as_of_view is not None else None

    def read_as_of(self, as_of) -> int:
        """Make this handle read-only, reading the generation ``as_of`` names
        (:func:`~st_py.core.history.resolve_as_of`). Returns it.

        Raises
        ------
        SnapshotNotFoundError, SnapshotExpiredError, InvalidOptionError
        """
        from st_py.core.history import resolve_as_of
        from st_py.errors import SnapshotNotFoundError

        reader = self.current_infofile()
        try:
            at = resolve_as_of(reader, as_of, self.name)
        except SnapshotNotFoundError:
            if not self.refresh_infofile():  # a local copy behind: asked once for newer changes
                raise
            reader = self.current_infofile()
            at = resolve_as_of(reader, as_of, self.name)
        self._as_of_view = AsOf(reader, at, self.name)
        return self._as_of_view.as_of

    def generation(self) -> int:
        """The generation reads see: the ``as_of`` one, else the current
        one, with this handle's acknowledged writes committed first (read
        your own writes, as GET does)."""
        if self.as_of is not None:
            return self.as_of
        if self.committer.busy:
            self.committer.drain()
        return self.live_infofile().generation()

    def check_writable(self, what: str) -> None:
        """Refuse a write on a handle that reads a past state."""
        if self._as_of_view is not None:
            raise ReadOnlyError(
                f"{what}: {self.name} is open as of generation {self._as_of_view.as_of}, which is read-only; "
                "open it without as_of to write",
                self.name,
                self._as_of_view.as_of,
            )

    @property
    def infofile_reader(self) -> InfofileReader | None:
        """The infofile reader if it was opened, else None."""
        return self._reader

    # -- access -------------------------------------------------------------------
    def check_open(self) -> None:
        """Raise :class:`StoreTorrentError` if the file is closed."""
        if self.closed:
            raise StoreTorrentError(f"file {self.name} is closed")

    def check_may_write(self) -> None:
        """Refuse a write the tracker did not allow, before any data moves.

        Raises
        ------
        QuotaExceededError
            The owner's or the file's quota is full (``FileInfo.write_denied``).
        PermissionDeniedError
            The capability the tracker gave does not allow writes.
        """
        if self.info.capability_ops and not self.info.capability_ops & capability.WRITE:
            raise (QuotaExceededError if "quota" in self.info.write_denied else PermissionDeniedError)(
                self.info.write_denied or f"no write permission on {self.name}"
            )

    def renew_capability(self) -> None:
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

    # -- peers (paper 4.3 failover, 4.4 rebalance) --------------------------------
    def addr(self, idx: int) -> str:
        """``host:port`` of peer index ``idx``."""
        return self.peers[idx].addr

    def peer_usable(self, idx: int) -> bool:
        """Reported alive at the last refresh and not seen failing since
        (see :meth:`st_py.client.file.StFile.peer_usable`)."""
        p = self.peers[idx]
        return p.alive and p.addr not in self.transport.failed

    def mark_peer_failed(self, idx: int, reason: str) -> None:
        """Count peer ``idx`` as failed for this file (its first reason kept)."""
        self.transport.failed.setdefault(self.peers[idx].addr, reason)

    def write_targets(self) -> list[int]:
        """The usable peers that take new copies: those in service, or every
        usable one when too few are (see :meth:`st_py.client.file.StFile.write_targets`)."""
        usable = [i for i in self.peers if self.peer_usable(i)]
        in_service = [i for i in usable if not self.peers[i].drain_state]
        return in_service if len(in_service) >= self.copies else usable

    def report_failure(self, addr: str, reason: str) -> None:
        """Tell the tracker peer ``addr`` failed (the transport calls it)."""
        self.tracker.report_failure(addr, reason)

    # -- the pipeline -------------------------------------------------------------
    @property
    def lock(self):
        """The re-entrant lock the file's public methods run under (the transport's)."""
        return self.transport.lock

    @property
    def inflight(self) -> int:
        """PUTs and GETs in flight."""
        return self.puts_inflight + self.gets_inflight

    def poll(self, timeout: float = 0.0) -> int:
        """Make progress on queued operations: :meth:`st_py.client.file.StFile.poll` (the public docstring)."""
        self.flush_puts()
        self.transport.poll(timeout)
        self.committer.pump()
        return self.inflight

    def wait_for_slot(self) -> None:
        """Turn the pipeline until fewer than ``depth`` operations are in flight."""
        while self.inflight >= self.depth:
            self.poll(0.05)

    def notify(self, name: str, callback: Callable, *args) -> None:
        """Run a user's callback; an exception it raises is kept for
        ``flush`` (it is the caller's error, not the transport's)."""
        try:
            callback(*args)
        except Exception as e:
            self.errors.append((name, e))

    def forget_error(self, exc: Exception) -> None:
        """Drop ``exc`` from the errors kept for ``flush`` (told already)."""
        kept = [(n, x) for n, x in self.errors if x is not exc]
        self.errors.clear()
        self.errors.extend(kept)

    # -- lifecycle ----------------------------------------------------------------
    def end_reservation(self) -> None:
        """Tell the tracker this file's space reservation is no longer needed
        (docs/replication.md, "Space reservation"); if it cannot be told,
        the reservation's lease runs out instead."""
        self.holds_reservation = False
        try:
            self.tracker.close_file(self.name, self.file_id, timeout=5.0)
        except StoreTorrentError:
            pass

    def release(self) -> None:
        """Close the connections and the infofile reader (the file is closed)."""
        if self.holds_reservation:
            self.end_reservation()
        self.transport.close()
        if self._reader is not None:
            self._reader.close()
        for r in self._retired:
            r.close()
        self._retired.clear()


def _inode(path: str) -> int | None:
    import os

    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None


__all__ = ["FileContext", "DEFAULT_DEPTH", "DEFAULT_GROUP"]

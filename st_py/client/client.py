"""The StoreTorrent client: create, open, delete and list files.

>>> import st_py
>>> c = st_py.Client("127.0.0.1:7000")
>>> with c.create("/exp/run1", replication="x2", est_size=10 << 20) as f:
...     f.put("rec-0001", b"...")
>>> st_py.open("/exp/run1", tracker="127.0.0.1:7000").get("rec-0001")
"""

from __future__ import annotations

import collections
import os
import time
import uuid
from collections.abc import Sequence
from typing import Any

from st_py.client.cluster_status import ClusterStatus
from st_py.client.file import DEFAULT_DEPTH, DEFAULT_GROUP, StFile, delete_file_on_peers
from st_py.client.file_info import FileMode
from st_py.client.infofile_copies import make_locator
from st_py.client.namespace_paths import NamespaceEntry
from st_py.client.staged import StagedRecords
from st_py.core.filters import MissingKeyError, check_filters, key_check, load_key
from st_py.core.history import Snapshot
from st_py.errors import FileNotEmptyError, SnapshotError, SnapshotHeldError, SnapshotNotFoundError, TrackerMovedError
from st_py.wire.locate import TRACKER_ENV, default_tracker  # noqa: F401 (public here too)
from st_py.wire.tracker_client import RESTART_GRACE, TrackerClient
from st_py.wire.transport import Transport


class Client:
    """A client of one StoreTorrent tracker.

    Parameters
    ----------
    tracker : str, optional
        ``host:port`` of the tracker; see :func:`default_tracker`.
    depth : int
        Pipeline depth: records in flight per open file (paper 3.2).
    group_size : int
        Records per group commit (paper 3.5; the paper used 40).
    timeout : float
        Seconds without progress before a peer is declared unavailable.
    api_key : str, optional
        The user's API key for a tracker with a users file (default:
        ``$STORETORRENT_API_KEY``; docs/security.md).
    tls : (CA, client certificate, client key), optional
        Paths for a tracker served over TLS (default: ``$STORETORRENT_TLS_CA``,
        ``$STORETORRENT_TLS_CERT``, ``$STORETORRENT_TLS_KEY``).
    balance_reads : bool
        GET asks the least loaded copy holder first and skips hot spots
        (default); False: copy-rank order, as in the paper
        (docs/replication.md, "Load-aware reads").
    encryption_key : bytes or path, optional
        The 32-byte key of files with the ``aes-256-gcm`` filter, or a file
        holding it (default: ``$STORETORRENT_KEY_FILE``,
        ``$STORETORRENT_ENCRYPTION_KEY``; docs/filters.md). It stays on
        this machine: the tracker gets only a check value.
    metadata : str, optional
        Where infofiles are read (st_py/client/infofile_copies.py):
        ``"auto"`` (default: per file, the tracker's infofile when this
        node sees that very file at the path the tracker returns, else a
        local copy), ``"shared-mount"`` (the tracker's, on the namespace
        mount) or ``"fetch"`` (local copies kept current from the tracker,
        no mount needed); default ``$STORETORRENT_METADATA``.
    metadata_cache : path, optional
        The folder of the local copies (default:
        ``$STORETORRENT_METADATA_CACHE``, else
        ``~/.cache/storetorrent/<cluster>``).
    metadata_max_age_s : float, optional
        With local copies: a read checks its copy with the tracker first
        once the copy was last checked this many seconds ago (default:
        ``$STORETORRENT_METADATA_MAX_AGE``, else 1.0; 0: every read asks,
        as the shared mount's live infofile). ``open`` always brings the
        copy current, a GET of a name the copy lacks asks first, and a
        writer reads its own commits at once; within the age a replaced
        record reads as its previous committed version
        (docs/decisions.md, "Freshness of a local copy").
    local_data_dirs : list of path, optional
        Data directories of peers running on this node: a GET of a copy
        one of them holds reads it from disk, its size and CRC-32C checked,
        instead of asking the peer (st_py/client/local_copies.py; a missing
        or bad copy is read by GET). Raises ``InvalidOptionError`` for a
        directory without a ``PEER_ID``. :attr:`local_copies` counts them.

    Thread safety: a Client may be shared between threads (its gRPC
    channel is; each :meth:`open` returns a new :class:`StFile`, which may
    be shared too, one call at a time). ``tests/test_threads.py``.
    """

    def __init__(
        self,
        tracker: str | None = None,
        depth: int = DEFAULT_DEPTH,
        group_size: int = DEFAULT_GROUP,
        timeout: float = 30.0,
        api_key: str | None = None,
        tls: tuple[str | None, str | None, str | None] = (None, None, None),
        balance_reads: bool = True,
        encryption_key: bytes | str | None = None,
        metadata: str | None = None,
        metadata_cache: str | os.PathLike | None = None,
        metadata_max_age_s: float | None = None,
        local_data_dirs: Sequence[str | os.PathLike] | None = None,
    ):
        self.tracker = TrackerClient(tracker or default_tracker(), api_key=api_key, tls=tls)
        # where infofiles are read: the shared mount, or local copies (st_py/client/infofile_copies.py)
        self.tracker.locator = make_locator(metadata, self.tracker.address, metadata_cache, metadata_max_age_s)
        self.depth, self.group_size, self.timeout = depth, group_size, timeout
        self.balance_reads = balance_reads
        self.encryption_key = load_key(encryption_key)  # never sent to the tracker
        self.local_copies = None  # LocalCopies: the peers of this node whose copies GETs read from disk
        if local_data_dirs:
            from st_py.client.local_copies import LocalCopies

            self.local_copies = LocalCopies(str(d) for d in local_data_dirs)

    def create(
        self,
        name: str,
        replication: str = "x2",
        est_size: int = 0,
        blocksize: int = 0,
        mode: int = 0,
        protocol: str = "client-sync",
        placement: str = "random",
        filters: list[str] | tuple[str, ...] = (),
        in_directory: str = "",
    ) -> StFile:
        """Create file ``name`` and open it for writing (paper 3.1, 3.3).

        Parameters
        ----------
        name : str
            The file's path in the namespace (``/exp/run1``).
        replication : str
            The class xF: ``"x1"``, ``"x2"``, ``"x3"`` ... (F copies of
            every record on F distinct peers; paper 4.1).
        est_size : int
            Expected user bytes (one copy). The tracker schedules peers with
            room for it and reserves that much (times F) on them until this
            handle is closed (docs/replication.md, "Space reservation");
            commits beyond it may not take space other files have reserved.
            0: no reservation.
        blocksize : int
            Consecutive records placed on the same peers before the client
            picks others (0: the tracker's default).
        mode : int
            The file's permission bits (0: 0o644; docs/security.md).
        protocol : str
            How copies are written: ``client-sync``, ``chain``,
            ``client-async`` or ``chain-async`` (CEFT, seed 001 section 4;
            docs/replication.md).
        placement : str
            Where copies go: ``random``, ``hash`` (BLAST, seed 002 section V) or
            ``local-first`` (FreeLoader, seed 004 section 4.1).
            ``protocol`` and ``placement`` are kept in the infofile and
            apply to every writer of the file.
        filters : sequence of str
            The client-side filter chain applied to every record, in order
            (``["zstd"]``, ``["aes-256-gcm"]``, ``["zstd", "aes-256-gcm"]``;
            FreeLoader's filters, docs/filters.md); encryption uses this
            client's ``encryption_key``. Fixed at creation.
        in_directory : str
            Non-empty: one of ``name``'s directories (``/bucket``) that
            must exist when the tracker makes the file; the missing
            directories below it are made as usual. Empty: every missing
            directory is made (``mkdir -p``). The S3 endpoint's PUTs, so
            one racing DeleteBucket never makes the bucket again.

        Returns
        -------
        StFile
            Open for writing; close it (or use ``with``) to commit the last
            group of records and end the reservation.

        Raises
        ------
        MissingKeyError
            ``aes-256-gcm`` without a key.
        StFileExistsError, BadNameError, QuotaExceededError
        DirectoryNotFoundError
            ``in_directory`` does not exist (nothing was made).
        NotEnoughPeersError
            Fewer live peers than F (:class:`NoSpaceError`, a kind of it,
            when no peers have room for ``est_size``).
        PermissionDeniedError, NotAuthenticatedError, TrackerUnavailableError
        """
        chain = check_filters(filters)
        check = ""
        if "aes-256-gcm" in chain:
            if self.encryption_key is None:
                raise MissingKeyError(
                    f"creating {name} with aes-256-gcm needs a key: Client(encryption_key=...), "
                    "$STORETORRENT_KEY_FILE or $STORETORRENT_ENCRYPTION_KEY (docs/filters.md)",
                    file=name,
                    filter="aes-256-gcm",
                )
            check = key_check(self.encryption_key)
        info = self.tracker.create(
            name, replication, est_size, blocksize, mode, protocol, placement, ",".join(chain), check, in_directory
        )
        return self._file(info, holds_reservation=est_size > 0)

    def _file(self, info, **kw) -> StFile:
        f = StFile(self.tracker, info, self.depth, self.group_size, timeout=self.timeout, **kw)
        f.balance_reads = self.balance_reads
        f.encryption_key = self.encryption_key
        f.local_copies = self.local_copies
        return f

    def open_staged(self, name: str, prefer_peer: str | None = None) -> StFile:
        """Open existing file ``name`` for a staged write: records are stored
        on their holders but not committed when acknowledged; the writer
        hands :meth:`StFile.staged_commits` to whoever commits the whole job
        with :meth:`commit_staged`. ``prefer_peer`` (``host:port``) takes
        copy rank 0 of every record when it is live (local-first placement).

        A restart or failover of the tracker while it opens is latency
        (:data:`~st_py.wire.tracker_client.RESTART_GRACE`), as for a commit:
        a write job's tasks open their file while the job runs.

        Raises
        ------
        StFileNotFoundError, TrackerUnavailableError
        """
        info = self.tracker.open(name, grace=RESTART_GRACE)
        return self._file(info, stage=True, prefer_peer=prefer_peer)

    def commit_staged(
        self,
        name: str,
        records: list[dict] | StagedRecords | list[StagedRecords],
        delete: list[str] | None = None,
        replace_all: bool = False,
    ) -> int:
        """Commit staged records of file ``name`` in one transaction of the
        tracker (paper 3.5): all of them become visible at once, or none.

        Parameters
        ----------
        records : list of dict, StagedRecords or list of StagedRecords
            As returned by :meth:`StFile.staged_commits` (dicts) or
            :meth:`StFile.staged_records` (columns), from any number of
            writers: their dicts joined in one list, or their columns
            (a list of them, committed in order).
        delete : list of str, optional
            Committed records and objects removed in the same transaction
            (a write job's ``mode="overwrite"``): readers see the file before
            or after, never between. Their copies are left to the peers'
            scrubber.
        replace_all : bool
            Remove every record and object the file holds at the commit in
            the same transaction (a write job's ``mode="overwrite"``): the
            file then holds exactly ``records``; of two such commits at once,
            the later one is what it holds, never both.

        Returns
        -------
        int
            Records newly committed (an identical record committed before
            counts as already there).

        Raises
        ------
        RecordExistsError
            A name already committed with other content; ``names`` lists them.
            Nothing of the batch is committed then.
        RecordIsADirectoryError, RecordNotADirectoryError
            A staged name is a folder of, or below, another staged or committed
            name (a name is a record or a folder, never both): checked before
            the commit (nothing committed), and by the tracker's commit for a
            writer that committed meanwhile (then the others may be
            committed: the error's note says how many).
        StFileNotFoundError, TrackerUnavailableError, QuotaExceededError
            TrackerUnavailableError only when the tracker stays down
            longer than :data:`~st_py.wire.tracker_client.RESTART_GRACE`:
            a restart or failover meanwhile is latency (the commit carries
            a request id, the same on every try).
        """

        from st_py._proto import tracker_pb2 as pb
        from st_py.client.group_commit import as_columns, schema_table
        from st_py.errors import RecordExistsError

        info = self.tracker.open(name, grace=RESTART_GRACE)
        if isinstance(records, StagedRecords):
            staged = records
        elif records and isinstance(records[0], StagedRecords):
            staged = StagedRecords.join(records)
        else:
            staged = StagedRecords.of_dicts(records)  # type: ignore[arg-type]
        names = staged.names
        if len(set(names)) != len(names):
            dup = sorted(n for n, k in collections.Counter(names).items() if k > 1)[:5]
            raise RecordExistsError(
                f"staged records of {name} name {dup} more than once: a writer ran twice; nothing was committed",
                names=dup,
            )
        existing = [] if replace_all else sorted(set(self._committed(info, names)) - set(delete or ()))
        if existing:
            raise RecordExistsError(
                f"{len(existing)} staged records of {name} are already committed "
                f"(e.g. {existing[:3]}); nothing was committed",
                names=existing,
            )
        self._check_tree(info, name, names, set(delete or ()), replace_all)
        schemas, refs = schema_table(staged.schemas)
        cols = None
        if info.commit_columns and not delete and not replace_all and staged.plain():  # columns (issue 41)
            cols = as_columns(names, staged.sizes, staged.crc32c, staged.peer_idx, refs, staged.logical_sizes)

        def commit(cols: pb.RecordColumns | None) -> pb.CommitReply:
            commits = [] if cols is not None else staged.record_commits(refs)  # to its per-file tracker (paper 3.5)
            rid = uuid.uuid4().hex  # one id for every try: a retry across a restart or failover applies once
            return self._at_file_tracker(
                name,
                info,
                lambda t, i: t.commit(
                    name,
                    i.file_id,
                    commits,
                    delete=delete or (),
                    replace_all=replace_all,
                    schemas=schemas,
                    request_id=rid,
                    grace=RESTART_GRACE,
                    columns=cols,
                ),
            )

        reply = commit(cols)
        if cols is not None and reply.columns_read != len(staged):
            # a tracker that does not read columns (a failover to an older one) committed none of
            # them, and the request held nothing else: the records again, one message each
            reply = commit(None)
        if reply.conflicts:  # another writer committed meanwhile: never reported as success
            from st_py.client.group_commit import conflicts_of
            from st_py.core.record_names import commit_conflict

            first, (reason, kind, record) = next(iter(conflicts_of(reply).items()))
            exc = commit_conflict(name, first, reason, kind, record)
            exc.add_note(
                f"{len(reply.conflicts)} staged records of {name} were refused by the tracker and "
                f"{reply.committed} committed: " + "; ".join(reply.conflicts[:3])
            )
            raise exc
        return reply.committed

    @staticmethod
    def _check_tree(info, file: str, names: list[str], deleted: set[str], replace_all: bool = False) -> None:
        """Refuse staged ``names`` that are folders or below records, of
        each other or of the committed names not ``deleted`` in the same
        commit (all of them with ``replace_all``; st_py.core.record_names),
        before anything is committed."""
        from st_py.core.infofile import InfofileReader
        from st_py.core.record_names import NameTree, conflict_error

        whole = NameTree()
        whole.add_many(names)  # the staged names at once (a job's millions: no Python loop per check)
        if whole.conflicts_many(names):  # one is in the way: find and name it in order, as ever
            batch = NameTree()
            for n in names:
                hit = batch.conflict(n)
                if hit is not None:
                    raise conflict_error(hit[0], file, n, hit[1])
                batch.add(n)
        if replace_all:
            return
        r = InfofileReader(info.infofile_path)
        try:
            if r.is_empty():  # a job's new file: nothing committed to meet
                return
            for i in range(0, len(names), 10_000):  # a job's millions of names: bounded statements
                for n, hit in r.tree_conflicts(names[i : i + 10_000]).items():
                    if hit[1] not in deleted:  # one the same commit deletes: the tracker decides
                        raise conflict_error(hit[0], file, n, hit[1])
        finally:
            r.close()

    @staticmethod
    def _committed(info, names: list[str]) -> list[str]:
        from st_py.core.infofile import InfofileReader

        r = InfofileReader(info.infofile_path)
        try:
            return [] if r.is_empty() else sorted(r.lookup_many(names))
        finally:
            r.close()

    def open(self, name: str, as_of=None) -> StFile:
        """Open existing file ``name``. Peers the tracker reports failed are
        avoided (paper 4.3, initial failures).

        Parameters
        ----------
        name : str
        as_of : str, int or datetime, optional
            Read the file as it was (docs/snapshots.md): a snapshot's name,
            a generation, or a time (the latest generation committed at or
            before it). The handle is read-only (``get``, ``names``, ``len``,
            ``get_local``, ``local_stripes``; writes raise
            :class:`~st_py.errors.ReadOnlyError`); ``f.generation`` is the
            generation read.

        Raises
        ------
        StFileNotFoundError, TrackerUnavailableError
        SnapshotNotFoundError, SnapshotExpiredError, InvalidOptionError
            ``as_of`` names no snapshot or time of the file, a state no
            longer kept, or a generation it never had.
        """
        info = self.tracker.open(name)
        return self._file(info, as_of=as_of)

    # -- snapshots (docs/snapshots.md) ------------------------------------------------
    def files(self, path: str = "/") -> list[str]:
        """Every StoreTorrent file at or below ``path`` (a file, or a folder
        walked recursively), sorted.

        Raises
        ------
        StFileNotFoundError, PermissionDeniedError, TrackerUnavailableError
        """
        out: list[str] = []
        entries = self.ls(path)
        if len(entries) == 1 and not entries[0].is_dir and entries[0].name == path.rstrip("/"):
            return [entries[0].name]
        for e in entries:
            if e.is_dir:
                out += self.files(e.name)
            else:
                out.append(e.name)
        return sorted(out)

    def _at_file_tracker(self, name: str, info, call):
        """``call(tracker, info)`` on the tracker that takes file ``name``'s
        writes (``info``: its FileInfo); while that one no longer does or no
        longer answers (TrackerMovedError: restarted, or another tracker was
        elected), again after opening the file anew through the tracker, for
        up to ``RESTART_GRACE`` seconds (``call`` carries its request id)."""
        deadline = time.monotonic() + RESTART_GRACE
        while True:
            try:
                return call(self.tracker.at(info.file_tracker), info)
            except TrackerMovedError:
                if time.monotonic() >= deadline:
                    raise
                info = self.tracker.open(name)

    def _snapshot_op(self, name: str, op: str, snapshot: str = ""):
        info = self.tracker.open(name)
        rid, tries = uuid.uuid4().hex, []

        def call(t: TrackerClient, i) -> Any:
            tries.append(t.address)
            return t.snapshot(name, op, snapshot, i.file_id, request_id=rid, retried=len(tries) > 1)

        try:
            return self._at_file_tracker(name, info, call)
        except SnapshotError as e:
            e.file, e.snapshot = name, snapshot
            raise

    def snapshot(self, path: str, name: str) -> list[Snapshot]:
        """Create snapshot ``name`` of file ``path``, or of every file below
        folder ``path``: each pins its file's committed generation, O(1) in
        its records (docs/snapshots.md). A folder's snapshot is consistent
        per file, each taken in turn (files written meanwhile may be
        caught before or after those writes).

        Returns
        -------
        list of Snapshot
            One per file, with the generation pinned.

        Raises
        ------
        SnapshotExistsError
            A file has a snapshot of that name already (the files before it
            in name order have theirs).
        BadNameError
            The snapshot name is empty, has a ``/`` or a control character,
            or is over 255 bytes.
        StFileNotFoundError, PermissionDeniedError (write permission
        needed), TrackerUnavailableError
        """
        out = []
        for f in self.files(path):
            reply = self._snapshot_op(f, "create", name)
            out += [Snapshot(f, s.name, s.generation, s.created_at, s.owner) for s in reply.snapshots]
        return out

    def snapshots(self, path: str = "/") -> list[Snapshot]:
        """The snapshots of file ``path`` or of every file below folder
        ``path``, by file then oldest first.

        Raises
        ------
        StFileNotFoundError, PermissionDeniedError, TrackerUnavailableError
        """
        out = []
        for f in self.files(path):
            reply = self._snapshot_op(f, "list")
            out += [Snapshot(f, s.name, s.generation, s.created_at, s.owner) for s in reply.snapshots]
        return out

    def delete_snapshot(self, path: str, name: str) -> list[Snapshot]:
        """Delete snapshot ``name`` of file ``path`` (or of every file below
        folder ``path`` that has one). What only it held is released: the
        tracker drops its history once older than ``--history-age``, and the
        peers' scrubbers reclaim the space after ``--scrub-age``.

        Returns
        -------
        list of Snapshot
            The snapshots deleted.

        Raises
        ------
        SnapshotNotFoundError
            ``path`` is a file without that snapshot, or no file below the
            folder has it.
        StFileNotFoundError, PermissionDeniedError, TrackerUnavailableError
        """
        files = self.files(path)
        single = len(files) == 1 and files[0] == path.rstrip("/")
        out = []
        for f in files:
            try:
                reply = self._snapshot_op(f, "delete", name)
            except SnapshotNotFoundError:
                if single:
                    raise
                continue
            out += [Snapshot(f, s.name, s.generation, s.created_at, s.owner) for s in reply.snapshots]
        if not out:
            raise SnapshotNotFoundError(f"no file below {path} has a snapshot named {name!r}", path, name)
        return out

    def delete(self, name: str, if_empty: bool = False) -> int:
        """Delete file ``name``: its infofile, then its records on every live
        peer. Returns the number of records it had. Copies on dead peers
        are left for their scrubber. ``if_empty``: only while the file holds
        no record, not even a hidden one (stripes, an upload's parts),
        decided by the tracker after the commits before it, so a record
        committed meanwhile is never deleted with it (S3 DeleteBucket;
        docs/s3.md).

        Raises
        ------
        StFileNotFoundError
        SnapshotHeldError
            Snapshots hold the file (``snapshots`` names them): delete them first.
        FileNotEmptyError
            ``if_empty`` and the file holds a record: nothing was deleted.
        """
        info = self.tracker.open(name)
        # the tracker first: it refuses a file that snapshots hold, and
        # nothing must be removed from the peers then (docs/snapshots.md)
        try:
            deleted = self.tracker.delete(name, info.file_id, whole_file=True, if_empty=if_empty).deleted
        except (SnapshotHeldError, FileNotEmptyError) as e:
            e.file = name
            raise
        t = Transport(timeout=self.timeout)
        t.set_capability(info.file_id, info.capability)
        try:
            delete_file_on_peers(t, info.file_id, [p.addr for p in info.peers if p.alive])
        finally:
            t.close()
        return deleted

    def chmod(self, name: str, mode: int = 0, group: str = "", owner: str = "") -> FileMode:
        """Change the mode bits, group or (admins) owner of a file or
        directory, as UNIX chmod/chgrp/chown (docs/security.md); 0 and ""
        leave one as it is. Returns the owner, group and mode after.

        Raises
        ------
        PermissionDeniedError
            Not the owner (or not an admin for a new owner).
        """
        return FileMode.of(self.tracker.set_mode(name, mode, group, owner))

    def rmdir(self, path: str) -> None:
        """Remove the empty namespace directory ``path``, as UNIX rmdir (write
        permission on its parent).

        Raises
        ------
        DirectoryNotEmptyError, StFileNotFoundError, PermissionDeniedError
        """
        self.tracker.remove_dir(path)

    def ls(self, path: str = "/", sizes: bool = True):
        """Entries of namespace directory ``path``, in name order
        (:class:`~st_py.client.namespace_paths.NamespaceEntry`, plain data);
        a StoreTorrent file's path gives that file alone. ``sizes`` False
        leaves their ``bytes`` and ``user_bytes`` 0 (the tracker counts a
        file's records from an index instead of summing every row: an S3
        listing's List a page, issue 42).

        Raises
        ------
        StFileNotFoundError
            Neither a directory nor a file (a path inside a file included:
            :func:`~st_py.client.namespace_paths.lookup` resolves those).
        PermissionDeniedError, TrackerUnavailableError
        """
        return [NamespaceEntry.of(e) for e in self.tracker.list(path, counts_only=not sizes).entries]

    def status(self) -> ClusterStatus:
        """The cluster as the tracker sees it: peers, liveness, space,
        files, copies short, repair and the metadata log
        (:class:`~st_py.client.cluster_status.ClusterStatus`, plain data;
        docs/operations.md, "Status page"). The copy counts are the
        tracker's, taken every few seconds (``short_age_s`` says how old).

        Raises
        ------
        TrackerUnavailableError
        """
        return ClusterStatus.of(self.tracker.status())

    def close(self) -> None:
        """Close the gRPC channel to the tracker. Files opened through this
        client must be closed first (their commits go through it)."""
        self.tracker.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def create(name: str, replication: str = "x2", est_size: int = 0, tracker: str | None = None, **kwargs) -> StFile:
    """Module-level shortcut for ``Client(tracker, **kwargs).create(name,
    replication, est_size)`` (paper figure 4): see :class:`Client` for
    ``kwargs`` and :meth:`Client.create` for the rest and what it raises."""
    return Client(tracker, **kwargs).create(name, replication, est_size)


def open(name: str, tracker: str | None = None, as_of=None, **kwargs) -> StFile:  # noqa: A001 (paper's API name)
    """Module-level shortcut for ``Client(tracker, **kwargs).open(name,
    as_of=as_of)`` (paper figure 4): see :class:`Client` for ``kwargs`` and
    :meth:`Client.open` for ``as_of`` and what it raises."""
    return Client(tracker, **kwargs).open(name, as_of=as_of)

"""StoreTorrent as an fsspec filesystem: ``storetorrent://`` URLs for pandas,
pyarrow, Dask, DuckDB and anything else that speaks fsspec.

>>> import fsspec, pandas as pd
>>> fs = fsspec.filesystem("storetorrent", tracker="127.0.0.1:7000")
>>> fs.ls("/exp/run1", detail=False)
['/exp/run1/part-0.parquet', '/exp/run1/part-1.parquet']
>>> pd.read_parquet("storetorrent://127.0.0.1:7000/exp/run1/part-0.parquet")

Path model (docs/fsspec.md):

- a directory of the namespace (``/exp``) is a ``directory``;
- a StoreTorrent file (``/exp/run1``, one infofile) is *also* a
  ``directory``: its entries are its committed records;
- a record ``part-0.parquet`` of that file is the ``file``
  ``/exp/run1/part-0.parquet``; a record name holding ``/`` (``2024/01/a``)
  makes pseudo-directories inside the file (``/exp/run1/2024/01``), as S3
  prefixes do.

Metadata comes from the tracker (List, Open) for the namespace and from the
file's infofile (indexed SQLite queries, paper 3.5) for records, so listings
are never stale. Reads are whole-record GETs (paper 3.6: CRC-checked,
failing over to the next copy), or plain reads of the local path when a peer
on this host holds a copy revealed to it by GET_LOCAL (paper 3.7). Writes PUT
one record when the file object is closed and commit it at once; records are
write-once.

The filesystem is registered for the ``storetorrent`` protocol through the
``fsspec.specs`` entry point (pyproject.toml), so ``fsspec.filesystem`` and
URLs work without importing this module first.

This module holds the filesystem's read side (URLs, resolving paths,
listings, reads). The rest is split by responsibility:
:mod:`~st_integrations.fsspec_paths` (the path model: URL parsing, record-name
ranges, info dicts), :mod:`~st_integrations.fsspec_resources` (handles and
the tracker client, per thread and process),
:mod:`~st_integrations.fsspec_write` (writes and deletes: the
:class:`~st_integrations.fsspec_write.RecordWriter` each
:class:`StoreTorrentFileSystem` holds) and :mod:`~st_integrations.fsspec_file` (the
file object). :class:`StoreTorrentFileSystem` stays here: the entry point and
pickles name it by this module.
"""

from __future__ import annotations

import errno
import io
import os
import threading
import weakref
from datetime import datetime, timezone
from operator import itemgetter

from fsspec.spec import AbstractFileSystem

from st_py.client.namespace_paths import lookup
from st_py.core.infofile import one_state, prefix_upper, user_size
from st_py.errors import (
    ChecksumError,
    GetLocalError,
    RecordNotFoundError,
    StFileNotFoundError,
)

from .fsspec_file import StoreTorrentRecordFile
from .fsspec_paths import (
    PROTOCOL,
    Found,
    ObjectStub,
    addressable,
    all_addressable,
    dirs_of,
    hidden,
    norm,
    not_found,
    object_info,
    prefix_info,
    record_info,
    row_infos,
    split_as_of,
    split_url,
    split_version,
)
from .fsspec_resources import Resources, ThreadState, close_quietly, inode
from .fsspec_write import ReadOnlyFSError, RecordExistsFSError, RecordWriter
from .keymap import is_upload_file
from .record_cache import RecordCache


class StoreTorrentFileSystem(AbstractFileSystem):
    """StoreTorrent files and records as an fsspec filesystem.

    Thread safety: one instance may be shared between threads (fsspec
    does not cache instances of it: every call makes one); the tracker client and
    the open StoreTorrent files it reads through are kept per thread
    (``fsspec_resources``), so threads read in parallel.
    ``tests/test_threads.py``.

    Parameters
    ----------
    tracker : str, optional
        ``host:port`` of the tracker. Default: ``$STORETORRENT_TRACKER``, or
        the local cluster of ``storetorrent up`` in ``./st-data``
        (:func:`st_py.wire.locate.default_tracker`), looked up when the client is
        first needed, in the process that needs it. A URL
        ``storetorrent://host:port/path`` gives it too.
    api_key : str, optional
        API key for a tracker with a users file (default
        ``$STORETORRENT_API_KEY``). It is a storage option, so it travels
        with the pickled filesystem (Dask graphs).
    replication : str
        Replication class (``x1``, ``x2``, ...) of the StoreTorrent files a
        write creates. Existing files keep theirs.
    local_reads : bool
        Read records whose copy GET_LOCAL reveals to this host (paper 3.7)
        from their local path instead of over the network.
    tls : (CA, client certificate, client key), optional
        Paths for a tracker served over TLS (default: ``$STORETORRENT_TLS_*``).
    record_cache_bytes : int
        Bytes of recently read records kept in memory (LRU; records larger
        than a quarter of it are not kept; 0 disables). Readers such as
        pyarrow open a Parquet record twice (schema, then data); a committed
        record never changes, so the second open costs no GET. Entries are
        keyed by file id, name, size and CRC-32C, and a read first looks the
        record up in the infofile, so a deleted record is never served and a
        record put again with other bytes never served stale.
    as_of : str, int or datetime, optional
        Read every StoreTorrent file as of a past state (docs/snapshots.md):
        a snapshot name, a generation or a time, resolved per file (a
        snapshot name or a time names each file's own generation). The
        records, their bytes and their info are those of that state; the
        namespace's directories and files are listed as they are now. The
        filesystem is read-only (writes raise :class:`ReadOnlyFSError`, a
        ``PermissionError``). A URL ``storetorrent://host:port/a/b?as_of=v1``
        gives it too.
    version_aware : bool
        fsspec's convention for versioned stores (as s3fs and gcsfs): reads
        (``open``, ``cat_file``, ``info``, ``ls``, ``find``) take
        ``version_id=``, and paths may end in ``?versionId=GENERATION``.
        Here a version id is a *generation of the StoreTorrent file* the
        path is in (a record's state in it), not a record's version number;
        info dicts then have ``version_id`` (the generation as a string).

    Attributes
    ----------
    stats : dict of str to int
        Counters of this instance: ``local_reads`` (records read from a
        local path), ``get_reads`` (records fetched by GET),
        ``local_fallbacks`` (local copies that could not be read or failed
        their size/CRC-32C check, then fetched by GET), ``get_local_calls``
        (GET_LOCAL maps computed: at most one per StoreTorrent file until
        :meth:`invalidate_cache`), ``cache_hits`` (reads served by the record
        cache).

    Provenance: the info of a StoreTorrent file has ``generation``, the
    generation of the file it was read at; with ``as_of`` or ``version_id``
    so has every record and object entry of ``info``, ``ls`` and ``find``
    (``info`` of a record on a ``version_aware`` filesystem too): read the
    same state again with ``as_of=`` or ``version_id=`` it.

    Notes
    -----
    Only plain arguments are kept: the tracker connection and open files are
    made lazily, per process, so instances pickle (fsspec's ``__reduce__``
    recreates them from their arguments) and survive a fork. Record metadata
    is read from the infofile at every call (indexed queries), so it is never
    stale; what is cached is which paths are StoreTorrent files, one open
    StFile per file and thread, the GET_LOCAL maps and recently read records.
    """

    protocol = (PROTOCOL,)
    root_marker = "/"
    # Not fsspec's instance cache: it keys instances by their arguments, and
    # a tracker address does not name a cluster. A later cluster on the same
    # address (a new namespace) got an earlier one's instance, whose open
    # StFile handles (their infofiles still on disk), file classification,
    # GET_LOCAL maps and record cache served the earlier cluster's bytes.
    # Each call makes an instance; pass one instance along to share its
    # connections and caches (docs/fsspec.md, "Instances"; docs/decisions.md).
    cachable = False

    def __init__(
        self,
        tracker: str | None = None,
        api_key: str | None = None,
        replication: str = "x2",
        local_reads: bool = True,
        tls: tuple | None = None,
        record_cache_bytes: int = 64 << 20,
        as_of=None,
        version_aware: bool = False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.as_of = as_of
        self.version_aware = version_aware
        self.tracker = tracker
        self.api_key = api_key
        self.replication = replication
        self.local_reads = local_reads
        self.tls = tuple(tls) if tls else (None, None, None)
        self.record_cache_bytes = record_cache_bytes
        self.stats = {"local_reads": 0, "get_reads": 0, "local_fallbacks": 0, "get_local_calls": 0, "cache_hits": 0}
        self._lock = threading.RLock()
        self._tls = threading.local()
        self._epoch = 0
        self._res = Resources()
        # closed with the instance; not at exit, where a flush could wait on peers for nothing
        weakref.finalize(self, self._res.close).atexit = False
        self._known: dict[str, dict] = {}  # StoreTorrent file name -> what List said of it
        self._local: dict[str, dict] = {}  # file name -> {record name: LocalRecord}
        self._local_locks: dict[str, threading.Lock] = {}
        self._cache = RecordCache(record_cache_bytes)  # (file_id, record, size, crc32c) -> bytes
        self._writer = RecordWriter(self)  # writes and deletes (fsspec_write)

    # -- writes and deletes (fsspec_write.RecordWriter) -----------------------
    def write_record(self, path: str, data, replication: str | None = None, replace: bool = False) -> None:
        """PUT ``data`` as the record at ``path`` (normalized) and commit it
        (paper 3.1, 3.5); with ``replace``, as a new version of a committed
        record (docs/replication.md, "Versioned records"); the file objects'
        writes come here. Raises as :meth:`pipe_file`."""
        self._check_writable(path)
        self._writer.write_record(path, data, replication, replace)

    def pipe_file(self, path, value, mode="overwrite", **kwargs):
        """Store ``value`` (bytes-like) as the record at ``path``, committed
        on return. ``mode="overwrite"`` (fsspec's default) of a committed
        record stores a new version of it (readers see the old bytes or the
        new, whole; docs/replication.md, "Versioned records");
        ``mode="create"`` refuses an existing record.

        Raises
        ------
        FileExistsError
            (:class:`RecordExistsFSError`) ``mode="create"`` and the record
            is committed, or the path is a striped object.
        IsADirectoryError
            The path is a directory or StoreTorrent file, or no StoreTorrent
            file can hold it (it lies directly in a namespace directory).
        ReadOnlyFSError
            (a ``PermissionError``) A filesystem made ``as_of`` a past state.
        """
        self._check_writable(path)
        self._writer.pipe_file(path, value, mode, **kwargs)

    def pipe(self, path, value=None, **kwargs):
        """Store bytes at one path (``pipe(path, value)``, as
        :meth:`pipe_file`) or at many (``pipe({path: value, ...})``): the
        new records of each StoreTorrent file go as one write batch
        (``StFile.write``, docs/client.md "Write batches"), committed on
        return; records that exist get a new version each, as
        :meth:`pipe_file` (``mode="overwrite"``). Every path is checked
        before anything is written, so a path refused as :meth:`pipe_file`
        refuses it writes none of them.

        Raises
        ------
        BatchWriteError
            Records of a batch failed at the peers (their names in
            ``names``; the others are written).
        FileExistsError, IsADirectoryError, NotADirectoryError, ValueError, ReadOnlyFSError
            As :meth:`pipe_file`, for the first path refused.
        """
        if isinstance(path, str):
            self.pipe_file(self._strip_protocol(path), value, **kwargs)
            return
        if not isinstance(path, dict):
            raise ValueError("path must be str or dict")
        values = {self._strip_protocol(k): v for k, v in path.items()}
        for p in values:
            self._check_writable(p)
        self._writer.pipe_many(values, **kwargs)

    def cp_file(self, path1, path2, **kwargs):
        """Copy one record (read, then a PUT; a committed target gets a new
        version, as ``pipe_file``). A directory (namespace directory,
        StoreTorrent file or prefix) is skipped: directories exist through
        the records below them (no empty directories, as S3), so a recursive
        ``copy`` copies its records one by one.

        Raises
        ------
        FileNotFoundError
            ``path1`` does not exist.
        ReadOnlyFSError
            A filesystem made ``as_of`` a past state.
        """
        self._check_writable(path2)
        self._writer.cp_file(path1, path2, **kwargs)

    def mkdir(self, path, create_parents=True, **kwargs):
        """No-op: the tracker has no directory call. Namespace directories
        are made with the StoreTorrent files below them, and a StoreTorrent
        file by its first record (docs/fsspec.md)."""

    def makedirs(self, path, exist_ok=False):
        """No-op, as :meth:`mkdir`."""

    def rm_file(self, path):
        """Delete one record: its copies on every holder, then its commit
        (paper 4.3).

        Raises
        ------
        FileNotFoundError
            No committed record at ``path``.
        IsADirectoryError
            ``path`` is a directory or StoreTorrent file (use ``rm(path, recursive=True)``).
        ReadOnlyFSError
            A filesystem made ``as_of`` a past state.
        """
        self._check_writable(path)
        self._writer.rm_file(path)

    def rm(self, path, recursive=False, maxdepth=None):
        """Delete records, StoreTorrent files or directories.

        Parameters
        ----------
        path : str or list of str
            Paths or glob patterns.
        recursive : bool
            Needed for anything but a record: a StoreTorrent file is deleted
            whole (``Client.delete``: its records on every live peer, then
            its infofile); a record prefix deletes its records one by one; a
            namespace directory deletes every StoreTorrent file below it
            (the directories stay: the tracker has no call to remove one).
        maxdepth : None
            Not supported (deletes follow StoreTorrent file boundaries).

        Raises
        ------
        FileNotFoundError, IsADirectoryError (not recursive), ValueError (maxdepth)
        ReadOnlyFSError
            A filesystem made ``as_of`` a past state.
        """
        self._check_writable(path)
        self._writer.rm(path, recursive, maxdepth)

    def rmdir(self, path):
        """Delete an empty StoreTorrent file, or remove an empty namespace
        directory (as UNIX rmdir: write permission on its parent).

        Raises
        ------
        OSError
            ``ENOTEMPTY``: the StoreTorrent file, record prefix or directory
            is not empty.
        FileNotFoundError
        ReadOnlyFSError
            A filesystem made ``as_of`` a past state.
        """
        self._check_writable(path)
        self._writer.rmdir(path)

    def _check_writable(self, path) -> None:
        """Refuse a write on a filesystem that reads a past state."""
        if self.as_of is not None:
            raise ReadOnlyFSError(
                f"{path}: this storetorrent filesystem reads as of {self.as_of!r}, which is read-only; "
                "write through one made without as_of",
                str(path),
            )

    # -- past states (docs/snapshots.md) --------------------------------------
    def at(self, version_id) -> "StoreTorrentFileSystem":
        """This filesystem reading as of generation ``version_id`` (an int,
        or its digits): a filesystem of the same arguments with
        ``as_of=version_id`` (fsspec caches it like any instance).

        Raises
        ------
        ValueError
            ``version_id`` is not a generation.
        """
        if isinstance(version_id, str) and version_id.isdigit():
            version_id = int(version_id)
        if not isinstance(version_id, int) or isinstance(version_id, bool):
            raise ValueError(
                f"version_id {version_id!r}: a storetorrent version id is a generation of the file (an int); "
                "for a snapshot name or a time use as_of="
            )
        return type(self)(
            tracker=self.tracker,
            api_key=self.api_key,
            replication=self.replication,
            local_reads=self.local_reads,
            tls=self.tls if any(self.tls) else None,
            record_cache_bytes=self.record_cache_bytes,
            as_of=version_id,
            version_aware=self.version_aware,
        )

    def _versioned(self, path, version_id=None) -> tuple["StoreTorrentFileSystem", str]:
        """``(filesystem, path)`` to read ``path`` with: this one, or
        :meth:`at` the generation given by ``version_id`` or by the path's
        ``?versionId=`` (s3fs's convention; a ``version_aware`` filesystem
        only).

        Raises
        ------
        ValueError
            ``version_id`` on a filesystem that is not version aware.
        """
        if self.version_aware:
            path, in_path = split_version(path)
            version_id = in_path if version_id is None else version_id
        if version_id is None:
            return self, path
        if not self.version_aware:
            raise ValueError(
                "version_id cannot be specified if the filesystem is not version aware "
                "(StoreTorrentFileSystem(version_aware=True))"
            )
        return self.at(version_id), path

    def _stamp(self, fname: str, infos: list[dict]) -> list[dict]:
        """``infos`` (of records and objects of ``fname``) with the
        generation they were read at, on a filesystem that reads a past
        state (current listings leave it out: :meth:`info` has it)."""
        if self.as_of is not None and infos:
            g = self.st_handle(fname).generation
            for d in infos:
                d["generation"] = g
                if self.version_aware:
                    d["version_id"] = str(g)
        return infos

    # -- URLs -----------------------------------------------------------------
    @classmethod
    def _strip_protocol(cls, path):
        """``storetorrent://host:port/a/b``, ``storetorrent:///a/b`` and
        ``a/b/`` all become ``/a/b``."""
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        return norm(split_url(split_as_of(path)[0])[1])

    def st_path(self, path) -> str:
        """``path`` (a URL, or a path with or without its leading ``/``)
        as this filesystem's normalized path (``/a/b``)."""
        return self._strip_protocol(path)

    @staticmethod
    def _get_kwargs_from_urls(path):
        """``{"tracker": "host:port"}`` for ``storetorrent://host:port/...``
        (nothing for an empty host: the default tracker), and ``as_of`` for
        a URL ending in ``?as_of=VALUE`` (digits: a generation; else a
        snapshot name or an ISO 8601 time)."""
        from .fsspec_paths import as_of_text

        url, as_of = split_as_of(path)
        host = split_url(url)[0]
        out: dict = {"tracker": host} if host else {}
        if as_of is not None:
            out["as_of"] = as_of_text(as_of)
        return out

    def unstrip_protocol(self, name: str) -> str:
        """``storetorrent://<tracker>/a/b`` (with the tracker if one was given)."""
        if name.startswith(PROTOCOL + "://"):
            return name
        at = f"?as_of={self.as_of}" if isinstance(self.as_of, (str, int)) else ""
        return f"{PROTOCOL}://{self.tracker or ''}{norm(name)}{at}"

    @property
    def fsid(self) -> str:
        """fsspec: this filesystem's id, ``storetorrent_<tracker>`` (one per
        tracker: its namespace), with ``@<as_of>`` for one reading a past state."""
        at = "" if self.as_of is None else f"@{self.as_of}"
        return f"{PROTOCOL}_{self.tracker or 'default'}{at}"

    # -- connections and caches -----------------------------------------------
    @property
    def client(self):
        """The :class:`st_py.Client` of this process (made on first use)."""
        res, pid = self._res, os.getpid()
        client = res.client
        if client is None or res.client_pid != pid:
            with self._lock:
                if res.client is None or res.client_pid != pid:
                    from st_py.client.client import Client

                    # after a fork the parent's channel is left alone
                    res.client, res.client_pid = Client(self.tracker, api_key=self.api_key, tls=self.tls), pid
                    self._known.clear()
                    self._local.clear()
                client = res.client
        return client

    def close(self) -> None:
        """Close every thread's open StoreTorrent files and the tracker
        connection of this process. The filesystem stays usable: they are
        opened again on next use. Also done when the instance is garbage
        collected (fsspec does not cache instances of this class)."""
        with self._lock:
            self._epoch += 1  # threads open new handles; this thread's old state is closed below
        self._res.close()

    def _state(self) -> ThreadState:
        st = getattr(self._tls, "state", None)
        pid = os.getpid()
        if st is None or st.epoch != self._epoch or st.pid != pid:
            if st is not None and st.pid == pid:  # after a fork the parent's sockets are left alone
                self._res.drop(st)
            st = self._tls.state = ThreadState(self._epoch, pid, threading.current_thread())
            self._res.add(st)
        return st

    def st_handle(self, fname: str, created=None):
        """This thread's open StFile of ``fname``, reopened when its infofile
        was replaced (the file deleted, or deleted and created again).

        Raises
        ------
        StFileNotFoundError
        """
        st = self._state()
        if created is not None:
            old = st.pop(fname)
            if old is not None:
                close_quietly(old[0])
            st.keep(fname, created, inode(created.infofile_path))
            return created
        cur = st.get(fname)
        if cur is not None:
            h, ino = cur
            if ino is not None and inode(h.infofile_path) == ino:
                return h
            st.pop(fname)
            close_quietly(h)
        try:
            h = self.client.open(fname, as_of=self.as_of)
        except StFileNotFoundError:
            self.st_forget(fname)
            raise
        st.keep(fname, h, inode(h.infofile_path))
        return h

    def st_forget(self, fname: str) -> None:
        """Forget StoreTorrent file ``fname``: what is known of it, its local
        copies' places, and this thread's open handle on it (closed); the
        next use opens it again (after it was deleted or replaced)."""
        with self._lock:
            self._known.pop(fname, None)
            self._local.pop(fname, None)
        cur = self._state().pop(fname)
        if cur is not None:
            close_quietly(cur[0])

    def invalidate_cache(self, path=None):
        """Forget what is cached about ``path`` and below (everything if None).

        Record metadata is always read from the infofile and needs no
        invalidation. This drops which paths are StoreTorrent files and their
        GET_LOCAL maps (so records committed since are read locally again);
        with ``path=None`` also the record cache and every thread's open
        files.
        """
        with self._lock:
            if path is None:
                self._known.clear()
                self._local.clear()
                self._cache.clear()
                self._epoch += 1
            else:
                p = self._strip_protocol(path)
                for d in (self._known, self._local):
                    for name in [n for n in d if p == "/" or n == p or n.startswith(p + "/")]:
                        del d[name]
        super().invalidate_cache(path)

    # -- resolving paths ------------------------------------------------------
    def _remember(self, e) -> dict:
        d = {
            "name": e.name,
            "size": 0,
            "type": "directory",
            "st_type": "file",
            "records": int(e.records),
            "bytes": int(e.user_bytes),  # the user's bytes of its names (st_py.core.infofile.user_bytes)
            "stored_bytes": int(e.bytes),  # one copy of each, stripes included, as stored
            "replication": e.replication,
            "file_id": int(e.file_id),
            "owner": e.owner,
            "group": e.group,
            "mode": int(e.mode),
        }
        with self._lock:
            self._known[e.name] = d
        return d

    def st_lookup(self, path: str):
        """What ``path`` (normalized) is: the StoreTorrent file it is or lies
        in (the longest prefix that is one), else a namespace directory
        (:func:`st_py.client.namespace_paths.lookup`, the one resolution of paths;
        files found are remembered, and known files answered without a List).

        Returns
        -------
        ("dir", path, NamespaceEntry list or None) | ("file", file name, "") |
        ("inside", file name, rest of the path) | ("missing", deepest existing directory, rest)
        """
        loc = lookup(path, self._list_remembering, self._known)  # one `in` a prefix: atomic, no lock
        return loc.kind, loc.name, loc.entries if loc.kind == "dir" else loc.rest

    def _list_remembering(self, pre: str) -> list:
        entries = self.client.ls(pre)
        if len(entries) == 1 and entries[0].name == pre and not entries[0].is_dir and entries[0].file_id:
            self._remember(entries[0])
        return entries

    # -- records (the infofile, through st_py.core.infofile.InfofileReader) --------
    def st_infofile(self, fname: str):
        """This thread's read-only reader of the infofile of ``fname``."""
        return self.st_handle(fname).infofile()

    def st_record_meta(self, fname: str, rname: str):
        """``(size, crc32c, committed_at)`` of committed record ``rname``, or
        None (also for the reserved names of stripes and versions)."""
        if hidden(rname):
            return None
        return self.st_infofile(fname).record_stat(rname)

    def st_has_under(self, fname: str, prefix: str) -> bool:
        """Whether a committed record or object name starts with ``prefix``
        (ending in ``/``)."""
        if hidden(prefix):
            return False
        if self.st_infofile(fname).any_between(prefix, prefix_upper(prefix)):
            return True
        return bool(self._objects_under(fname, prefix))

    def st_object_meta(self, fname: str, rname: str):
        """``(size, crc32c, committed_at, stripes, stripe_size)`` of striped
        object ``rname``, or None."""
        return self.st_infofile(fname).object_stat(rname)

    def _objects_under(self, fname: str, prefix: str) -> list:
        """``(name, size, crc32c, committed_at, stripes, stripe_size)`` of
        the objects whose names start with ``prefix`` ("" for all)."""
        return self.st_infofile(fname).objects_between(prefix, prefix_upper(prefix) if prefix else None)

    def st_rows_under(self, fname: str, prefix: str):
        """``(name, size, crc32c, committed_at)`` of every record whose name
        starts with ``prefix`` (all if empty), sorted by name."""
        rows = self.st_infofile(fname).records_between(prefix, prefix_upper(prefix) if prefix else None)
        return [r for r in rows if not hidden(r[0])]

    def _children(self, fname: str, prefix: str, detail: bool = True) -> tuple[list, list[str]]:
        """Records and objects (rows of ``entries_between``, or names if not
        ``detail``) and pseudo-directories directly below ``prefix`` (``""``
        or ending in ``/``): :meth:`st_py.core.infofile.InfofileReader.level`, one
        read transaction that reads the entries and jumps past each
        pseudo-directory's records with one index search, so a listing costs
        the entries it returns, not the records below them. A name equal to
        the prefix (``a/``) and a directory with an empty name (``a//b``) are
        not listed (docs/fsspec.md)."""
        entries, heads = self.st_infofile(fname).level(prefix, detail)
        plen = len(prefix)
        while entries and len(entries[0][0] if detail else entries[0]) == plen:
            entries.pop(0)  # the prefix itself sorts first
        return entries, [prefix + h for h in heads if h and not hidden(prefix + h + "/")]

    def _infos(self, fname: str, pre: str, rows: list) -> list[dict]:
        """The info dicts of ``entries_between`` rows, named ``pre + name``
        (:func:`row_infos`); a record of a filtered file committed before
        user sizes were kept goes through :meth:`record_details`."""
        infos = row_infos(pre, rows)
        if self.st_handle(fname).filter_names:
            for i, r in enumerate(rows):
                if r[2] is None and r[5] is None:
                    infos[i] = self.record_details(fname, r[0], pre + r[0], (r[1], r[3], r[4], None))
        return self._stamp(fname, infos)

    def st_file_info(self, fname: str) -> dict:
        """The info dict of StoreTorrent file ``fname`` (a directory to
        fsspec): ``records`` (names), ``bytes`` (the user's bytes of its
        names), ``stored_bytes`` (one copy of each, as stored),
        ``replication``, ``file_id``, ``owner``, ``group``, ``mode``; kept as
        known until :meth:`st_forget`.

        With ``generation``: the generation these were read at (of the
        ``as_of`` state on a filesystem that reads one).

        Raises
        ------
        FileNotFoundError
            No StoreTorrent file ``fname``.
        """
        h = self.st_handle(fname)
        with one_state(h.infofile()):
            n, nbytes = h.infofile().stats()
            user = h.infofile().user_bytes()
            generation = h.generation
        i = h.info
        d = {
            "name": fname,
            "size": 0,
            "type": "directory",
            "st_type": "file",
            "records": n,
            "bytes": user,  # the user's bytes of its names (st_py.core.infofile.user_bytes)
            "stored_bytes": nbytes,  # one copy of each, stripes included, as stored
            "replication": h.replication,
            "file_id": int(h.file_id),
            "owner": i.owner,
            "group": i.group,
            "mode": int(i.mode),
            "generation": generation,
        }
        if self.version_aware:
            d["version_id"] = str(generation)
        with self._lock:
            self._known[fname] = d
        return d

    def _entry_info(self, e) -> dict | None:
        if e.is_dir:
            return {
                "name": e.name,
                "size": 0,
                "type": "directory",
                "st_type": "dir",
                "owner": e.owner,
                "group": e.group,
                "mode": int(e.mode),
            }
        if not e.file_id:
            return None  # not an infofile: nothing StoreTorrent can read
        if is_upload_file(e.name):
            return None  # an S3 upload's state while it runs, not data (keymap)
        if self.as_of is not None:  # its names and bytes as of the state read, not the tracker's now
            return dict(self.st_file_info(e.name))
        return dict(self._remember(e))

    # -- listing --------------------------------------------------------------
    def ls(self, path, detail=True, **kwargs):
        """Entries of a namespace directory, StoreTorrent file or pseudo-directory.

        Parameters
        ----------
        path : str
            ``/a/b`` or a ``storetorrent://`` URL.
        detail : bool
            Dicts (True) or full paths (False).

        Returns
        -------
        list of dict or list of str
            Sorted by name. Every dict has ``name`` (full path, no protocol),
            ``size`` (bytes, int), ``type`` (``"file"`` or ``"directory"``)
            and ``st_type``: ``"dir"`` (namespace directory, size 0),
            ``"file"`` (StoreTorrent file: a directory of records, size 0,
            with ``records``, ``bytes`` (committed, one copy),
            ``replication``, ``file_id``, ``owner``, ``group``, ``mode``),
            ``"prefix"`` (pseudo-directory of record names holding ``/``,
            size 0) or ``"record"`` (a committed record: ``size``,
            ``crc32c``, and ``created`` = ``mtime`` = commit time, unix s).
            Listing a record gives that record alone. Plain Python values.

        With ``version_id=`` (a ``version_aware`` filesystem), the records
        of a StoreTorrent file as of that generation of it.

        Raises
        ------
        FileNotFoundError
            No such directory, StoreTorrent file, record or record prefix.
        """
        fs, path = self._versioned(self._strip_protocol(path), kwargs.pop("version_id", None))
        if fs is not self:
            return fs.ls(path, detail=detail, **kwargs)
        kind, a, b = self.st_lookup(path)
        if kind == "dir":
            entries = b if b is not None else self.client.ls(path)
            out = [i for i in map(self._entry_info, entries) if i is not None]
        elif kind == "file" or (kind == "inside" and self.st_has_under(a, b + "/")):
            entries, dirs = self._children(a, b + "/" if b else "", detail)
            pre = f"{a}/"
            if not detail:  # names only: no dict per entry; a name both record and folder once
                return sorted({pre + n for n in entries} | {pre + d for d in dirs})
            # A record whose name is also a folder (written before that was refused):
            # listed once, as the folder, which says it (docs/fsspec.md, "Corner cases").
            both = set(dirs).intersection(e[0] for e in entries) if dirs and entries else set()
            if both:
                entries = [e for e in entries if e[0] not in both]
            out = self._infos(a, pre, entries) + [prefix_info(pre + d, d in both) for d in dirs]
        elif kind == "inside" and (m := self.st_record_meta(a, b)) is not None:
            out = self._stamp(a, [self.record_details(a, b, path, m)])
        elif kind == "inside" and (om := self.st_object_meta(a, b)) is not None:
            out = self._stamp(a, [object_info(path, *om)])
        elif kind == "inside":
            raise not_found(path, f"no committed record {b!r} (nor records below it) in StoreTorrent file {a}")
        else:
            raise not_found(path, "no StoreTorrent directory, file or record")
        out.sort(key=itemgetter("name"))  # stable: a record before a directory of its name
        return out if detail else [d["name"] for d in out]

    def info(self, path, **kwargs):
        """Details of one path, as its entry of :meth:`ls`.

        A name that is both a record and a prefix of longer record names
        (records ``a`` and ``a/b``, written before that was refused) is
        reported as the directory, as :meth:`ls` lists it, with
        ``also_record`` True (reads of the path still read the record). The info of
        a StoreTorrent file has ``generation``: the generation of the file
        it was read at (provenance, docs/snapshots.md); so has that of a
        record or object read as of a past state (``as_of``,
        ``version_id``) or on a ``version_aware`` filesystem (with
        ``version_id``, its string). With ``version_id=`` (a
        ``version_aware`` filesystem) the path is read as of that generation.

        Raises
        ------
        FileNotFoundError
        """
        fs, path = self._versioned(self._strip_protocol(path), kwargs.pop("version_id", None))
        if fs is not self:
            return fs.info(path, **kwargs)
        kind, a, b = self.st_lookup(path)
        if kind == "dir":
            return {"name": path, "size": 0, "type": "directory", "st_type": "dir"}
        if kind == "file":
            return self.st_file_info(a)
        if kind == "inside":
            infofile = self.st_infofile(a)
            with one_state(infofile):  # the details and the generation of one state
                m = self.st_record_meta(a, b)
                om = self.st_object_meta(a, b) if m is None else None
                d = (
                    self.record_details(a, b, path, m)
                    if m is not None
                    else object_info(path, *om)
                    if om is not None
                    else None
                )
                generation = self.st_handle(a).generation
                folder = self.st_has_under(a, b + "/")
            if folder:
                return prefix_info(path, d is not None)
            if d is not None:
                if self.as_of is not None or self.version_aware:
                    d["generation"] = generation
                if self.version_aware:
                    d["version_id"] = str(generation)
                return d
            raise not_found(path, f"no committed record {b!r} in StoreTorrent file {a}")
        raise not_found(path, "no StoreTorrent directory, file or record")

    def find(self, path, maxdepth=None, withdirs=False, detail=False, **kwargs):
        """Every record below ``path`` (and directories, if ``withdirs``),
        as fsspec's ``find``; ``glob``, ``du`` and pyarrow's selectors use it.

        Inside a StoreTorrent file this is one range query of its
        infofile's name index (:meth:`~st_py.core.infofile.InfofileReader.names_between`),
        not a listing per pseudo-directory; without ``detail`` it makes no
        dict per record, only the paths (docs/fsspec.md, "Listing").

        With ``version_id=`` (a ``version_aware`` filesystem), the records
        of a StoreTorrent file as of that generation of it.

        Returns
        -------
        list of str, or dict of path to info (``detail=True``), sorted by path.
        """
        if maxdepth is not None and maxdepth < 1:
            raise ValueError("maxdepth must be at least 1")
        fs, path = self._versioned(self._strip_protocol(path), kwargs.pop("version_id", None))
        if fs is not self:
            return fs.find(path, maxdepth=maxdepth, withdirs=withdirs, detail=detail, **kwargs)
        kind, a, b = self.st_lookup(path)
        found = Found(detail)
        if kind == "inside" and not self.st_has_under(a, b + "/"):
            m = self.st_record_meta(a, b)
            om = self.st_object_meta(a, b) if m is None else None
            if m is not None:  # a record: find gives the record itself
                found.add_files([path], self._stamp(a, [self.record_details(a, b, path, m)]) if detail else None)
            elif om is not None:
                found.add_files([path], self._stamp(a, [object_info(path, *om)]) if detail else None)
        elif kind != "missing":
            if withdirs:
                found.add_dir(path, self.info(path) if detail else None)
            self._find_into(found, kind, a, b, 0, maxdepth, withdirs)
        return found.result()

    def _find_into(self, found: Found, kind: str, a: str, b, depth: int, maxdepth, withdirs: bool) -> None:
        """Add what lies below ``a`` (a namespace directory, ``b`` its
        entries or None) or below prefix ``b`` of StoreTorrent file ``a``
        (``""``: the whole file) to ``found``; ``depth`` is its depth
        below the path ``find`` was given."""
        if kind == "dir":
            for e in b if b is not None else self.client.ls(a):
                info = self._entry_info(e)
                if info is None:
                    continue
                if withdirs:
                    found.add_dir(e.name, info)
                if maxdepth is None or depth + 1 < maxdepth:
                    self._find_into(
                        found,
                        "dir" if e.is_dir else "file",
                        e.name,
                        None if e.is_dir else "",
                        depth + 1,
                        maxdepth,
                        withdirs,
                    )
            return
        prefix = b + "/" if b else ""
        plen = len(prefix)
        room = None if maxdepth is None else maxdepth - depth  # components a name may have below prefix
        infofile = self.st_infofile(a)
        hi = prefix_upper(prefix) if prefix else None
        rows: list | None = None
        if found.detail:
            rows = infofile.entries_between(prefix, hi)
            names = [r[0] for r in rows]
        else:
            names = infofile.names_between(prefix, hi)  # plain strings: the one query of a find
        if not all_addressable(names, plen):  # rare: names with an empty component are left out
            keep = [i for i, n in enumerate(names) if addressable(n[plen:])]
            names = [names[i] for i in keep]
            rows = None if rows is None else [rows[i] for i in keep]
        base = f"{a}/{prefix}"
        if withdirs:
            for d in dirs_of(names, plen, room):
                found.add_dir(base + d, prefix_info(base + d) if found.detail else None)
        if room is not None:  # names at most room components deep
            keep = [i for i, n in enumerate(names) if n.count("/", plen) < room]
            if len(keep) < len(names):
                names = [names[i] for i in keep]
                rows = None if rows is None else [rows[i] for i in keep]
        pre = f"{a}/"
        paths = [pre + n for n in names]  # a name holds its prefix: the path is the file's plus the name
        found.add_files(paths, None if rows is None else self._infos(a, pre, rows))

    def du(self, path, total=True, maxdepth=None, withdirs=False, **kwargs):
        """Bytes of the records below ``path`` (one copy; directories count
        0): an int, or ``{path: size}`` if not ``total``. From one
        :meth:`find`, not one ``info`` per record."""
        sizes = {n: i["size"] for n, i in self.find(path, maxdepth=maxdepth, withdirs=withdirs, detail=True).items()}
        return sum(sizes.values()) if total else sizes

    def created(self, path):
        """Commit time of a record, creation time of a StoreTorrent file
        (UTC datetime).

        Raises
        ------
        FileNotFoundError
        NotImplementedError
            For namespace directories and record prefixes (no timestamp).
        """
        info = self.info(path)
        if info["st_type"] == "record":
            return datetime.fromtimestamp(info["created"], tz=timezone.utc)
        if info["st_type"] == "file":
            meta = self.st_infofile(info["name"]).meta()
            return datetime.fromtimestamp(float(meta.get("created_at", 0)), tz=timezone.utc)
        raise NotImplementedError(f"{info['name']} is a directory without a timestamp")

    def modified(self, path):
        """Commit time of a record (records never change); for a StoreTorrent
        file, its last commit (or its creation). UTC datetime.

        Raises
        ------
        FileNotFoundError
        NotImplementedError
            For namespace directories and record prefixes.
        """
        info = self.info(path)
        if info["st_type"] == "file":
            t = self.st_infofile(info["name"]).last_commit_at()
            if t is not None:
                return datetime.fromtimestamp(float(t), tz=timezone.utc)
        return self.created(path)

    # -- reading --------------------------------------------------------------
    def _local_map(self, fname: str) -> dict:
        """Records of ``fname`` revealed to this host by GET_LOCAL (paper
        3.7), computed once per file (until :meth:`invalidate_cache`), and
        only when one of the file's live peers runs on this host. Any failure
        gives an empty map: reads then use GET."""
        with self._lock:
            m = self._local.get(fname)
            if m is not None:
                return m
            lock = self._local_locks.setdefault(fname, threading.Lock())
        with lock:  # one GET_LOCAL per file, without holding up other files
            with self._lock:
                m = self._local.get(fname)
            if m is not None:
                return m
            from st_py.client.getlocal import is_local

            m = {}
            try:
                h = self.st_handle(fname)
                if any(p.alive and is_local(p.addr) for p in h.peers.values()):
                    with self._lock:
                        self.stats["get_local_calls"] += 1
                    m = {r.name: r for r in h.get_local(allow_unavailable=True)}
            except Exception:
                m = {}
            with self._lock:
                self._local[fname] = m
            return m

    def read_record(self, fname: str, rname: str, meta=None) -> bytes:
        """The bytes of record ``rname`` of ``fname``: from the record cache;
        else from its local path if GET_LOCAL revealed a copy to this host
        and it matches the committed size and CRC-32C (paper 3.7); else by
        GET (CRC-checked, next copy on failure, paper 3.6).

        Raises
        ------
        FileNotFoundError
            No committed record of that name.
        RecordUnavailableError
            Every copy failed.
        """
        if meta is None:
            meta = self.st_record_meta(fname, rname)
            if meta is None:
                raise not_found(f"{fname}/{rname}", f"no committed record {rname!r} in StoreTorrent file {fname}")
        h = self.st_handle(fname)
        key = (h.file_id, rname, meta[0], meta[1])
        data = self._cache.get(key)
        if data is not None:
            with self._lock:
                self.stats["cache_hits"] += 1
            return data
        data = self._read_local(fname, rname, meta) if self.local_reads else None
        if data is None:
            try:
                data = h.get(rname)
            except RecordNotFoundError:
                raise not_found(
                    f"{fname}/{rname}", f"no committed record {rname!r} in StoreTorrent file {fname}"
                ) from None
            with self._lock:
                self.stats["get_reads"] += 1
        self._cache.put(key, data)
        return data

    def record_details(self, fname: str, rname: str, path: str, meta) -> dict:
        """The fsspec info of a record (``meta``: ``(stored size, crc32c,
        committed_at, logical_size)``): ``size`` is the user's bytes, as the
        infofile keeps them (st_py.core.infofile.user_size). A record of a
        filtered file committed before they were kept is read (and cached)
        to give the size a reader will see (docs/filters.md)."""
        stored, crc, t = meta[0], meta[1], meta[2]
        logical = meta[3] if len(meta) > 3 else None
        if logical is None and self.st_handle(fname).filter_names:
            logical = len(self.read_record(fname, rname, tuple(meta)))
        return record_info(path, user_size(stored, logical), crc, t, stored)

    def _read_local(self, fname: str, rname: str, meta) -> bytes | None:
        """The record from its revealed local path, or None (no local copy,
        unreadable, or not matching the committed size and CRC-32C)."""
        lr = self._local_map(fname).get(rname)
        if lr is None or lr.size != meta[0] or lr.crc32c not in (None, meta[1]):
            return None  # not revealed here, or a copy of a version replaced since
        h = self.st_handle(fname)
        try:
            data = h.read_local(lr)  # checked against its size and CRC-32C, decoded
        except (ChecksumError, GetLocalError) as e:
            with self._lock:
                self.stats["local_fallbacks"] += 1
            if isinstance(e, ChecksumError):
                h.report_bad_copy(rname, lr.peer, str(e))  # best effort
            return None
        with self._lock:
            self.stats["local_reads"] += 1
        return data

    def st_record_of(self, path: str):
        """``(file name, record name, (size, crc32c, committed_at))`` of the
        record at ``path``.

        Raises
        ------
        FileNotFoundError, IsADirectoryError
        """
        kind, fname, rel = self.st_lookup(path)
        if kind == "inside":
            meta = self.st_record_meta(fname, rel)
            if meta is not None:
                return fname, rel, meta
            om = self.st_object_meta(fname, rel)
            if om is not None:
                return fname, rel, ObjectStub(*om)
            if self.st_has_under(fname, rel + "/"):
                raise IsADirectoryError(errno.EISDIR, "a prefix of record names, not a record", path)
            raise not_found(path, f"no committed record {rel!r} in StoreTorrent file {fname}")
        if kind in ("dir", "file"):
            raise IsADirectoryError(
                errno.EISDIR,
                "a directory" if kind == "dir" else "a StoreTorrent file (a directory of records), not a record",
                path,
            )
        raise not_found(path, "no StoreTorrent directory, file or record")

    def cat_file(self, path, start=None, end=None, **kwargs):
        """The bytes of a record, or of ``[start, end)`` of it (negative:
        from the end, as Python slices).

        Source: one whole-record GET (paper 3.6) or local read (3.7); see
        :meth:`_open`. With ``version_id=`` (a ``version_aware``
        filesystem), the record as of that generation of its file.

        Raises
        ------
        FileNotFoundError, IsADirectoryError, RecordUnavailableError
        """
        fs, path = self._versioned(self._strip_protocol(path), kwargs.pop("version_id", None))
        if fs is not self:
            return fs.cat_file(path, start, end, **kwargs)
        fname, rname, meta = self.st_record_of(path)
        if isinstance(meta, ObjectStub):  # ranged reads of the stripes it touches
            lo, hi, _ = slice(start, end).indices(meta.size)
            with self.st_handle(fname).open(rname) as r:
                r.seek(lo)
                return r.read(max(0, hi - lo))
        data = self.read_record(fname, rname, meta)
        if start is None and end is None:
            return data
        return data[slice(start, end)]

    def _open(self, path, mode="rb", block_size=None, autocommit=True, cache_options=None, **kwargs):
        """A file object on one record.

        Parameters
        ----------
        path : str
        mode : {"rb", "wb", "xb"}
            ``rb``: seekable reads of a committed record. The first read
            fetches the whole record once (records are KB to a few MB): from
            its local path when GET_LOCAL revealed a copy to this host and it
            matches the committed size and CRC-32C (paper 3.7), else by GET,
            CRC-checked, trying the next copy on any failure (paper 3.6).
            ``wb``/``xb``: the bytes are buffered and PUT as one record on
            ``close()`` (every copy acknowledged, paper 3.1), then committed,
            so the record is visible when ``close()`` returns. ``wb`` of a
            committed record stores a new version of it (fsspec's overwrite;
            readers see the old bytes or the new, whole); ``xb`` refuses it.
            If no StoreTorrent file holds the path, a new one is made one
            component below the deepest namespace directory on it
            (:func:`st_py.client.namespace_paths.new_file`; class ``replication``,
            a keyword here or of the filesystem). Leaving a ``with`` block by an exception stores
            nothing.
        kwargs
            ``replication`` (writes), ``cache_type`` (reads; default
            ``"none"``: the file object already holds the record),
            ``version_id`` (reads, a ``version_aware`` filesystem: the
            record as of that generation of its file; s3fs's convention).

        Raises
        ------
        FileNotFoundError
            Reading a path that is no committed record.
        IsADirectoryError
            A directory, StoreTorrent file or record prefix; or, writing, no
            StoreTorrent file can hold the path (it lies directly in a
            namespace directory).
        FileExistsError
            ``xb`` of a record that is already committed, or a write to a
            striped object (:class:`RecordExistsFSError`).
        NotImplementedError
            Append (``ab``): records are write-once.
        ReadOnlyFSError
            (a ``PermissionError``) A write on a filesystem made ``as_of`` a past state.
        ValueError
            ``version_id`` with a write mode, or on a filesystem that is not
            version aware.
        """
        if mode not in ("rb", "wb", "xb"):
            raise NotImplementedError(f"mode {mode!r}: StoreTorrent records are write-once; use 'rb' or 'wb'")
        version_id = kwargs.pop("version_id", None)
        if mode != "rb" and version_id is not None:
            raise ValueError("version_id reads a past state: open it with mode 'rb'")
        fs, path = self._versioned(self._strip_protocol(path), version_id)
        if fs is not self:
            return fs._open(path, mode, block_size, autocommit, cache_options, **kwargs)
        if mode == "rb":
            fname, rname, meta = self.st_record_of(path)
            if isinstance(meta, ObjectStub):  # seekable; reads fetch only the stripes they touch
                reader = self.st_handle(fname).open(rname)
                self._state().readers.add(reader)  # its handle stays open while it is used
                return io.BufferedReader(reader, buffer_size=1 << 20)
            kwargs.setdefault("cache_type", "none")
            return StoreTorrentRecordFile(
                self,
                path,
                mode,
                block_size,
                autocommit,
                cache_options=cache_options,
                size=self.record_details(fname, rname, path, meta)["size"],
                record=(fname, rname, meta),
                **kwargs,
            )
        self._check_writable(path)
        replication = kwargs.pop("replication", None)
        # fail early: a directory, no file can hold it, exists (xb)
        self._writer.write_target(path, replace=mode == "wb")
        return StoreTorrentRecordFile(
            self, path, mode, block_size, autocommit, cache_options=cache_options, replication=replication, **kwargs
        )


__all__ = ["StoreTorrentFileSystem", "StoreTorrentRecordFile", "RecordExistsFSError", "ReadOnlyFSError"]

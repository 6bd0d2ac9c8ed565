"""The write side of the fsspec filesystem: storing records (``pipe_file``,
``cp_file``, the ``wb``/``xb`` file objects through ``write_record``),
deleting them (``rm_file``, ``rm``, ``rmdir``) and the no-op directory calls.
:class:`RecordWriter` is held by each
:class:`st_integrations.fsspec_fs.StoreTorrentFileSystem`, whose fsspec
methods (``pipe_file``, ``cp_file``, ``rm_file``, ``rm``, ``rmdir``) and
``write_record`` delegate to it; it resolves paths with the filesystem's
public ``st_*`` methods.
"""

from __future__ import annotations

import errno

from fsspec.utils import stringify_path

from st_py.client.namespace_paths import new_file
from st_py.client.write_batch import WriteBatch
from st_py.core.record_names import check_new_name, conflict_error
from st_py.errors import BatchWriteError, ReadOnlyError, RecordExistsError, RecordNotFoundError, StFileExistsError

from .fsspec_paths import not_found

# Seconds a replacement waits for the file's writer lease while another
# writer (another thread's handle, another process) replaces a record.
LEASE_WAIT_S = 30.0


class RecordExistsFSError(RecordExistsError, FileExistsError):
    """A record of that name is already committed (records are write-once).

    Both a :class:`st_py.errors.RecordExistsError` and a
    :class:`FileExistsError`, so ``except FileExistsError`` works as with
    any fsspec filesystem.
    """


class ReadOnlyFSError(ReadOnlyError, PermissionError):
    """A write on a filesystem that reads a past state (``as_of``,
    docs/snapshots.md): the past is read-only.

    Both a :class:`st_py.errors.ReadOnlyError` and a
    :class:`PermissionError`, so ``except PermissionError`` works as with
    any fsspec filesystem.
    """


class RecordWriter:
    """The writes and deletes of one
    :class:`~st_integrations.fsspec_fs.StoreTorrentFileSystem` (``fs``),
    whose public methods of the same names delegate here. It resolves paths
    and handles with the filesystem's ``st_*`` methods (``st_lookup``,
    ``st_handle``, ``st_record_meta`` ...).

    Thread safety: as its filesystem (shared between threads; each thread
    writes through its own StFile handles).
    """

    def __init__(self, fs):
        self.fs = fs

    # -- writing --------------------------------------------------------------
    def write_target(self, path: str, replace: bool = False):
        """``(file name, record name, True if the file exists)`` for a write to ``path``.

        Raises
        ------
        RecordExistsFSError
        IsADirectoryError
            A namespace directory or StoreTorrent file, or records are below
            the name (:class:`~st_py.errors.RecordIsADirectoryError`).
        NotADirectoryError
            A prefix of the name is a record (:class:`~st_py.errors.RecordNotADirectoryError`).
        ValueError
            A record name the rule refuses (:class:`~st_py.errors.RecordNameRuleError`:
            an empty, ``.`` or ``..`` component), never normalised into another name.
        """
        kind, a, b = self.fs.st_lookup(path)
        if kind == "inside":
            check_new_name(b)  # the rule for record names (st_py.core.record_names)
            hit = self.fs.st_infofile(a).tree_conflict(b)  # a name is a record or a folder, not both
            if hit is not None:
                raise conflict_error(hit[0], a, b, hit[1])
            if not replace and self.fs.st_object_meta(a, b) is not None:
                raise RecordExistsFSError(
                    f"{b!r} is a striped object in {a}: objects are write-once; delete "
                    "it first (fs.rm) or use another name"
                )
            if self.fs.st_record_meta(a, b) is not None and not replace:
                raise RecordExistsFSError(
                    f"record {b!r} is already committed in {a}: records are write-once; "
                    "delete it first (fs.rm) or use another name"
                )
            return a, b, True
        if kind in ("dir", "file"):
            raise IsADirectoryError(
                errno.EISDIR,
                "cannot write a record here: it is a namespace directory"
                if kind == "dir"
                else "cannot write a record here: it is a StoreTorrent file",
                path,
            )
        placed = new_file(a, b)  # where a new path goes: the one rule (st_integrations.keymap)
        if placed is None:
            where = "the root" if a == "/" else f"{a}, a namespace directory"
            stem = a.rstrip("/")
            raise IsADirectoryError(
                errno.EISDIR,
                f"records live inside StoreTorrent files and the parent is {where}; write to "
                f"{stem}/<file>/{b} to create StoreTorrent file {stem}/<file>",
                path,
            )
        check_new_name(placed[1])
        return placed[0], placed[1], False

    def write_record(self, path: str, data, replication: str | None = None, replace: bool = False) -> None:
        """PUT ``data`` as the record at ``path`` and commit it (paper 3.1,
        3.5); with ``replace``, as a new version of a committed record
        (docs/replication.md, "Versioned records")."""
        fname, rname, exists = self.write_target(path, replace)
        if exists:
            h = self.fs.st_handle(fname)
        else:
            try:
                h = self.fs.st_handle(
                    fname, created=self.fs.client.create(fname, replication or self.fs.replication, est_size=len(data))
                )
            except StFileExistsError:  # created meanwhile by another writer
                h = self.fs.st_handle(fname)
        try:
            if h.infofile().exists(rname) and not replace:
                raise RecordExistsFSError(
                    f"record {rname!r} is already committed in {fname}: records are "
                    "write-once; delete it first (fs.rm) or use another name"
                )
            replacing = replace and h.infofile().exists(rname)
            if replacing:
                # The file's writer lease, which a new version needs, is held
                # only for this replacement: each thread writes through its
                # own handle (zarr's and Dask's thread pools), so a lease kept
                # by one handle refused every other thread's replacement.
                h.acquire_lease(wait=LEASE_WAIT_S)
            try:
                h.put(rname, data, replace=replacing)
                h.flush()  # commit now: visible when close() returns
            finally:
                if replacing:
                    h.release_lease()
        except RecordExistsFSError:
            raise
        except RecordExistsError as e:
            raise RecordExistsFSError(str(e)) from e
        if not exists:
            self.fs.st_file_info(fname)  # remember it as a StoreTorrent file

    def pipe_file(self, path, value, mode="overwrite", **kwargs):
        """:meth:`StoreTorrentFileSystem.pipe_file` (its docstring says what and what it raises)."""
        if mode not in ("overwrite", "create"):
            raise ValueError(f"mode must be 'overwrite' or 'create', not {mode!r}")
        self.write_record(self.fs.st_path(path), bytes(value), kwargs.get("replication"), replace=mode == "overwrite")

    def pipe_many(self, values: dict, mode: str = "overwrite", **kwargs) -> None:
        """:meth:`StoreTorrentFileSystem.pipe` of a dict (its docstring says
        what and what it raises): every path checked first, then each
        StoreTorrent file's new records as one write batch, then the
        replacements one by one."""
        if mode not in ("overwrite", "create"):
            raise ValueError(f"mode must be 'overwrite' or 'create', not {mode!r}")
        replace = mode == "overwrite"
        batches: dict[tuple[str, bool], WriteBatch] = {}
        again: list[tuple[str, bytes]] = []  # committed records: a new version each
        for path, value in values.items():
            path = self.fs.st_path(path)
            fname, rname, exists = self.write_target(path, replace)
            if (
                exists
                and replace
                and (
                    self.fs.st_record_meta(fname, rname) is not None or self.fs.st_object_meta(fname, rname) is not None
                )
            ):
                again.append((path, bytes(value)))
                continue
            batches.setdefault((fname, exists), WriteBatch()).put(rname, bytes(value))
        for (fname, exists), batch in batches.items():
            h = self._handle(fname, exists, kwargs.get("replication"), batch.nbytes)
            err = None
            try:
                h.write(batch)
            except BatchWriteError as e:  # raised once the others are committed
                err = e
            h.flush()  # commit now: visible on return (what was acknowledged)
            if err is not None:
                raise err
            if not exists:
                self.fs.st_file_info(fname)  # remember it as a StoreTorrent file
        for path, data in again:
            self.write_record(path, data, kwargs.get("replication"), replace=True)

    def _handle(self, fname: str, exists: bool, replication: str | None, size: int):
        """This thread's handle of ``fname``, creating the file if it does not exist."""
        if exists:
            return self.fs.st_handle(fname)
        try:
            return self.fs.st_handle(
                fname, created=self.fs.client.create(fname, replication or self.fs.replication, est_size=size)
            )
        except StFileExistsError:  # created meanwhile by another writer
            return self.fs.st_handle(fname)

    def cp_file(self, path1, path2, **kwargs):
        """:meth:`StoreTorrentFileSystem.cp_file` (its docstring says what and what it raises)."""
        if self.fs.isdir(path1):
            return
        self.pipe_file(path2, self.fs.cat_file(path1))

    # -- deleting -------------------------------------------------------------
    def rm_file(self, path):
        """:meth:`StoreTorrentFileSystem.rm_file` (its docstring says what and what it raises)."""
        path = self.fs.st_path(path)
        fname, rname, _ = self.fs.st_record_of(path)
        try:
            self.fs.st_handle(fname).delete(rname)
        except RecordNotFoundError:
            raise not_found(path, f"no record {rname!r} in StoreTorrent file {fname}") from None

    def rm(self, path, recursive=False, maxdepth=None):
        """:meth:`StoreTorrentFileSystem.rm` (its docstring says what and what it raises)."""
        if maxdepth is not None:
            raise ValueError("maxdepth is not supported by StoreTorrentFileSystem.rm")
        paths = path if isinstance(path, (list, tuple)) else [path]
        todo = []
        for p in paths:
            p = stringify_path(p)
            if any(c in p for c in "*?["):
                todo += self.fs.glob(p)
            else:
                todo.append(self.fs.st_path(p))
        for p in todo:
            self._rm_one(p, recursive)

    def _rm_one(self, path: str, recursive: bool) -> None:
        kind, a, b = self.fs.st_lookup(path)
        if kind == "missing":
            raise not_found(path, "no StoreTorrent directory, file or record")
        if kind == "inside" and (not recursive or self.fs.st_record_meta(a, b) is not None):
            self.rm_file(path)
            return
        if not recursive:
            raise IsADirectoryError(errno.EISDIR, "a directory: pass recursive=True", path)
        if kind == "file":
            self.fs.client.delete(a)
            self.fs.st_forget(a)
        elif kind == "inside":  # a record prefix
            names = [r[0] for r in self.fs.st_rows_under(a, b + "/")]
            if not names:
                raise not_found(path, f"no committed record {b!r} (nor records below it) in {a}")
            h = self.fs.st_handle(a)
            for name in names:
                try:
                    h.delete(name)
                except RecordNotFoundError:
                    pass  # deleted meanwhile
        else:
            for e in b if b is not None else self.fs.client.ls(path):
                if e.is_dir:
                    self._rm_one(e.name, True)
                elif e.file_id:
                    self.fs.client.delete(e.name)
                    self.fs.st_forget(e.name)

    def rmdir(self, path):
        """:meth:`StoreTorrentFileSystem.rmdir` (its docstring says what and what it raises)."""
        path = self.fs.st_path(path)
        kind, a, b = self.fs.st_lookup(path)
        if kind == "file":
            if not self.fs.st_infofile(a).is_empty():
                raise OSError(errno.ENOTEMPTY, "the StoreTorrent file has records", path)
            self.fs.client.delete(a)
            self.fs.st_forget(a)
        elif kind == "inside":
            if self.fs.st_has_under(a, b + "/"):
                raise OSError(errno.ENOTEMPTY, "a record prefix exists while records are below it", path)
            raise OSError(errno.ENOTDIR, "not a directory", path)
        elif kind == "dir" and path not in ("", "/"):
            from st_py.errors import DirectoryNotEmptyError

            try:
                self.fs.client.rmdir(path)
            except DirectoryNotEmptyError as e:
                raise OSError(errno.ENOTEMPTY, str(e), path) from None
            self.fs.invalidate_cache(path)
        elif kind == "missing":
            raise not_found(path, "no StoreTorrent directory or file")

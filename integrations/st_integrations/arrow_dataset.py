"""StoreTorrent files as one ``pyarrow.dataset.Dataset`` of their records'
contents, for pyarrow and for DuckDB (which scans a pyarrow dataset with
projection and filter pushdown).

Every record is read through the ``storetorrent://`` filesystem: the copies
GET_LOCAL reveals to this host (paper 3.7) from their local paths, checked
against their size and CRC-32C, the others (and a local copy that fails the
check) with GET (paper 3.6); striped objects by ranged reads of their
stripes. Records named ``_*`` or ``.*`` are skipped. Parquet, Arrow IPC
files and CSV records are scanned lazily by pyarrow; Arrow IPC streams, JSON
lines and raw records are decoded into memory when the dataset is made.

At interpreter exit (an ``atexit`` hook), what a scan of such a dataset may
still hold is released before Python finalizes: the DuckDB connections
that registered one (:func:`close_at_exit`) are closed, then the hook waits
(a few seconds at most) until Arrow's threads have let go of every record
file they opened through the Python filesystem. An Arrow thread that must
take the GIL to close one while the interpreter finalizes is ended by
CPython with ``pthread_exit``, which a C++ destructor cannot survive
(``terminate called without an active exception``, exit status 134).
"""

from __future__ import annotations

import atexit
import threading
import time
import weakref

import pyarrow as pa
import pyarrow.fs as pafs

from st_py.core.record_format import dataset_format

from .formats import RAW_SCHEMA, detect
from .partitioning import HIVE, with_values
from .readplan import RecordRef, plan_scan, with_partitions
from .schemas import SchemaSource, conform, unify

# Formats scanned lazily through the storetorrent:// filesystem. JSON lines
# records are decoded when the dataset is made, like IPC streams and raw
# records: pyarrow's JSON scan reads its first block on an Arrow thread
# while DuckDB holds the GIL, and a Python filesystem there deadlocks.
_DS_FORMATS = {"parquet": "parquet", "arrow": "ipc", "csv": "csv"}


# Record files opened by Arrow through the Python filesystem and not yet
# released by it: the tokens of live _ArrowFile wrappers.
_LIVE_FILES: set[int] = set()
_EXIT_OWNERS: weakref.WeakSet = weakref.WeakSet()  # DuckDB connections closed at exit
_EXIT_HOOK = threading.Lock()
_exit_hook_registered = False
EXIT_WAIT_S = 5.0  # at most this long at exit for Arrow's threads to release record files
EXIT_STALL_S = 0.5  # ... and no longer once none has been released for this long


class _ArrowFile:
    """The Python file object Arrow holds while it reads one record: a thin
    wrapper without reference cycles, so it is freed exactly when Arrow's
    C++ file releases it (on whichever thread), which the exit hook waits for."""

    def __init__(self, raw):
        self._raw = raw
        self._live = _LIVE_FILES  # still reachable in __del__ while modules are torn down
        self._token = id(self)
        self._live.add(self._token)

    def __getattr__(self, name):
        return getattr(self._raw, name)

    def __del__(self):
        self._live.discard(self._token)  # one C call under the GIL: atomic


class _TrackedHandler(pafs.FSSpecHandler):
    """pyarrow's handler of an fsspec filesystem, its opened files tracked
    (:class:`_ArrowFile`)."""

    def open_input_stream(self, path):
        return self._open_tracked(path)

    def open_input_file(self, path):
        return self._open_tracked(path)

    def _open_tracked(self, path):
        if not self.fs.isfile(path):
            raise FileNotFoundError(path)
        return pa.PythonFile(_ArrowFile(self.fs.open(path, mode="rb")), mode="r")


def close_at_exit(owner) -> None:
    """Close ``owner`` (a DuckDB connection that registered a dataset of
    this module) at interpreter exit, before Arrow's threads are waited for;
    it is not kept alive for that."""
    _EXIT_OWNERS.add(owner)
    _register_exit_hook()


def _register_exit_hook() -> None:
    """Register :func:`_release_at_exit` once. Called after the fsspec
    filesystem is imported, so that it runs before that module's own exit
    hook (``atexit`` runs the last registered first) closes the handles."""
    global _exit_hook_registered
    with _EXIT_HOOK:
        if not _exit_hook_registered:
            atexit.register(_release_at_exit)
            _exit_hook_registered = True


def _release_at_exit() -> None:
    """At exit: close the DuckDB connections that scan datasets of this
    module, then wait until Arrow's threads have released the record files
    they opened (each release takes the GIL, which a finalizing interpreter
    refuses with ``pthread_exit``). A file still held by a live object (a
    reader the program kept) is released by the main thread at
    finalization: the wait ends when none has been released for
    :data:`EXIT_STALL_S` seconds, or after :data:`EXIT_WAIT_S`."""
    for owner in list(_EXIT_OWNERS):
        try:
            owner.close()
        except Exception:  # already closed, or closing failed: nothing more to do at exit
            pass
    if not _LIVE_FILES:
        return
    import gc

    gc.collect()  # readers in reference cycles
    deadline = time.monotonic() + EXIT_WAIT_S
    last, last_change = len(_LIVE_FILES), time.monotonic()
    while _LIVE_FILES and time.monotonic() < deadline and time.monotonic() - last_change < EXIT_STALL_S:
        time.sleep(0.01)  # the GIL is free for the Arrow threads that close files
        if len(_LIVE_FILES) != last:
            last, last_change = len(_LIVE_FILES), time.monotonic()
    # A thread that has just released its last file may still be returning
    # from the wrapper's __del__: let it drop the GIL before finalization.
    time.sleep(0.02)


def _head(fs, path: str) -> bytes:
    with fs.open(path, "rb") as fh:
        return fh.read(8)


def dataset(
    paths: str | list[str],
    *,
    tracker: str | None = None,
    schema: pa.Schema | None = None,
    local: bool | None = None,
    as_of=None,
    partitioning: str | None = HIVE,
):
    """A pyarrow Dataset over the records of StoreTorrent files ``paths``.

    Parameters
    ----------
    paths : str or list of str
        Files, directories or namespace globs.
    tracker : str, optional
        Tracker ``host:port`` (default ``$STORETORRENT_TRACKER`` / the local cluster).
    schema : pyarrow.Schema, optional
        Default: unified from every record's header (errors name two records).
    local : bool, optional
        Read revealed records from local paths (default: for the peers on
        this host). ``False`` fetches every record with GET.
    as_of : str, int or datetime, optional
        The files as of a past state (docs/snapshots.md; a snapshot name or
        a time resolves per file), read through a ``storetorrent://``
        filesystem made with that ``as_of``.
    partitioning : {"hive", None}
        ``"hive"`` (default, as ``pyarrow.dataset.dataset(...,
        partitioning="hive")``): the ``key=value`` components of the
        records' paths below ``paths`` are columns after the records' own,
        int32 or string as pyarrow types them (``__HIVE_DEFAULT_PARTITION__``
        is null); each record is a fragment with its partition expression,
        so a filter on them skips the other partitions' records unopened.
        None: no partition columns.

    Returns
    -------
    pyarrow.dataset.Dataset
        Of the schema of :func:`st_integrations.schemas.unify` over the
        records (each fragment's batches cast to it by pyarrow's scanner),
        with the partition columns.

    Raises
    ------
    StFileNotFoundError, RecordsUnavailableError, GetLocalError, SchemaConflictError
    InvalidOptionError
        ``partitioning`` is none of its values.
    """
    import pyarrow.dataset as ds

    from st_py.client.client import Client
    from st_py.wire.locate import default_tracker

    from .fsspec_fs import StoreTorrentFileSystem

    tracker = tracker or default_tracker()
    with Client(tracker) as c:
        plan = plan_scan(c, paths, skip_ignored=True, as_of=as_of, partitioning=partitioning)
    # Every record through the storetorrent:// filesystem: it reads the
    # copies GET_LOCAL reveals to this host from their local paths, checked
    # against their size and CRC-32C (a bad copy is read by GET from another
    # one), the others by GET; it undoes client-side filters and reads
    # striped objects by ranges (docs/fsspec.md).
    stfs = StoreTorrentFileSystem(tracker=tracker, local_reads=local is not False, as_of=as_of)
    remote_fs = pafs.PyFileSystem(_TrackedHandler(stfs))
    _register_exit_hook()
    # One group of records per file format (a .tsv record's format differs
    # from a .csv one's), each record read lazily as a fragment.
    groups: dict[str, tuple[ds.FileFormat, list]] = {}
    in_memory: list[tuple[str, str, RecordRef]] = []  # (format, path, ref) decoded now
    sources: list[SchemaSource] = []
    for unit in plan.units:
        for ref in unit.records:
            path = f"{ref.file}/{ref.name}"
            fmt = detect(ref.name, _head(stfs, path))
            if fmt in _DS_FORMATS:
                dfmt = dataset_format(ref.name, fmt)
                frag = dfmt.make_fragment(path, filesystem=remote_fs)
                sources.append(SchemaSource(frag.physical_schema, path))
                groups.setdefault(repr(dfmt), (dfmt, []))[1].append(ref)
            else:
                in_memory.append((fmt, path, ref))
    tables = []
    for fmt, path, ref in in_memory:
        record = ref.name
        data = stfs.cat_file(path)
        if fmt == "arrows":
            t = pa.ipc.open_stream(pa.py_buffer(data)).read_all()
        elif fmt == "json":
            import pyarrow.json as pajson

            t = pajson.read_json(pa.BufferReader(data))
        else:
            t = pa.table({"record": [record], "data": [data]}, schema=RAW_SCHEMA)
        sources.append(SchemaSource(t.schema, path))
        tables.append((t, path, ref))
    if schema is None:
        schema = unify(sources) if sources else RAW_SCHEMA
    plan, schema = with_partitions(plan, schema)
    parts = plan.partitions

    def fragment(dfmt, ref):
        # with its partition values, which the fragment's scans materialise
        kw = {"partition_expression": parts.expression(ref.file, ref.name)} if parts is not None else {}
        return dfmt.make_fragment(f"{ref.file}/{ref.name}", filesystem=remote_fs, **kw)

    # The scanner casts each fragment's batches to the unified schema (a
    # CSV record's string column to a Parquet record's large_string, int32
    # to int64), as conform does for the other readers.
    out = [
        ds.FileSystemDataset([fragment(dfmt, r) for r in refs], schema, dfmt, remote_fs)
        for dfmt, refs in groups.values()
    ]
    if tables:
        batches = []
        for t, path, ref in tables:
            if parts is not None:
                t = with_values(t, parts.values(ref.file, ref.name))
            batches += [conform(b, schema, path) for b in t.to_batches()]
        out.append(ds.dataset(pa.Table.from_batches(batches, schema=schema)))
    if not out:
        return ds.dataset(schema.empty_table())
    return out[0] if len(out) == 1 else ds.dataset(out)

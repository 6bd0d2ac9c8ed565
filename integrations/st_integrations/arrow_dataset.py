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
"""

from __future__ import annotations

import pyarrow as pa

from .formats import RAW_SCHEMA, SchemaSource, detect, unify
from .readplan import plan_scan

# Formats scanned lazily through the storetorrent:// filesystem. JSON lines
# records are decoded when the dataset is made, like IPC streams and raw
# records: pyarrow's JSON scan reads its first block on an Arrow thread
# while DuckDB holds the GIL, and a Python filesystem there deadlocks.
_DS_FORMATS = {"parquet": "parquet", "arrow": "ipc", "csv": "csv"}


def _head(fs, path: str) -> bytes:
    with fs.open(path, "rb") as fh:
        return fh.read(8)


def dataset(
    paths: str | list[str], *, tracker: str | None = None, schema: pa.Schema | None = None, local: bool | None = None
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

    Returns
    -------
    pyarrow.dataset.Dataset

    Raises
    ------
    StFileNotFoundError, RecordsUnavailableError, GetLocalError, SchemaConflictError
    """
    import pyarrow.dataset as ds
    import pyarrow.fs as pafs

    from st_py.client import Client
    from st_py.locate import default_tracker

    from .fsspec_fs import StoreTorrentFileSystem

    tracker = tracker or default_tracker()
    with Client(tracker) as c:
        plan = plan_scan(c, paths, skip_ignored=True)
    # Every record through the storetorrent:// filesystem: it reads the
    # copies GET_LOCAL reveals to this host from their local paths, checked
    # against their size and CRC-32C (a bad copy is read by GET from another
    # one), the others by GET; it undoes client-side filters and reads
    # striped objects by ranges (docs/fsspec.md).
    stfs = StoreTorrentFileSystem(tracker=tracker, local_reads=local is not False)
    remote_fs = pafs.PyFileSystem(pafs.FSSpecHandler(stfs))
    groups: dict[str, list[str]] = {}
    in_memory: list[tuple[str, str, str]] = []  # (format, path, record) decoded now
    sources: list[SchemaSource] = []
    for unit in plan.units:
        for ref in unit.records:
            path = f"{ref.file}/{ref.name}"
            fmt = detect(ref.name, _head(stfs, path))
            if fmt in _DS_FORMATS:
                groups.setdefault(fmt, []).append(path)
            else:
                in_memory.append((fmt, path, ref.name))
    parts = []
    for fmt, files in sorted(groups.items()):
        part = ds.dataset(files, format=_DS_FORMATS[fmt], filesystem=remote_fs)
        sources.extend(SchemaSource(f.physical_schema, f.path) for f in part.get_fragments())
        parts.append(part)
    tables = []
    for fmt, path, record in in_memory:
        data = stfs.cat_file(path)
        if fmt == "arrows":
            t = pa.ipc.open_stream(pa.py_buffer(data)).read_all()
        elif fmt == "json":
            import pyarrow.json as pajson

            t = pajson.read_json(pa.BufferReader(data))
        else:
            t = pa.table({"record": [record], "data": [data]}, schema=RAW_SCHEMA)
        sources.append(SchemaSource(t.schema, path))
        tables.append(t)
    if schema is None:
        schema = unify(sources) if sources else RAW_SCHEMA
    out = [p.replace_schema(schema) if not p.schema.equals(schema) else p for p in parts]
    if tables:
        from .formats import conform

        batches = [conform(b, schema, "") for t in tables for b in t.to_batches()]
        out.append(ds.dataset(pa.Table.from_batches(batches, schema=schema)))
    if not out:
        return ds.dataset(schema.empty_table())
    return out[0] if len(out) == 1 else ds.dataset(out)

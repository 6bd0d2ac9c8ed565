"""StoreTorrent files as one ``pyarrow.dataset.Dataset`` of their records'
contents, for pyarrow and for DuckDB (which scans a pyarrow dataset with
projection and filter pushdown).

Records revealed to this host by GET_LOCAL (paper 3.7) are read from their
local paths; the others through the ``storetorrent://`` filesystem, which
fetches them with GET (paper 3.6). Parquet, Arrow IPC files, CSV and JSON
lines records are scanned lazily by pyarrow; Arrow IPC streams and raw
records have no dataset format, so they are decoded into memory when the
dataset is made.
"""

from __future__ import annotations

import pyarrow as pa

from st_py.getlocal import is_local

from .formats import RAW_SCHEMA, SchemaSource, detect, unify
from .readplan import plan_scan
from .scan import ScanOptions, read_unit, unit_schemas

_DS_FORMATS = {"parquet": "parquet", "arrow": "ipc", "csv": "csv", "json": "json"}


def _head(fs, path: str) -> bytes:
    with fs.open(path, "rb") as fh:
        return fh.read(8)


def dataset(paths: str | list[str], *, tracker: str | None = None, schema: pa.Schema | None = None,
            local: bool | None = None):
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
    stfs = StoreTorrentFileSystem(tracker=tracker)
    remote_fs = pafs.PyFileSystem(pafs.FSSpecHandler(stfs))
    local_fs = pafs.LocalFileSystem()
    groups: dict[tuple[str, str], list[str]] = {}
    in_memory: list[tuple] = []  # (unit, records) decoded now
    sources: list[SchemaSource] = []
    opts = ScanOptions()
    for unit in plan.units:
        here = is_local(unit.peer) if local is None else (local and is_local(unit.peer))
        # Records of files with client-side filters (docs/filters.md) go
        # through the fsspec layer, which undoes the filters.
        here = here and not any(ref.filters for ref in unit.records)
        for ref in unit.records:
            if here:
                with open(ref.path, "rb") as fh:
                    fmt = detect(ref.name, fh.read(8))
                where, path = "local", ref.path
            else:
                path = f"{ref.file}/{ref.name}"
                fmt = detect(ref.name, _head(stfs, path))
                where = "remote"
            if fmt in _DS_FORMATS:
                groups.setdefault((fmt, where), []).append(path)
            else:
                in_memory.append((fmt, where, ref))
        if here:
            sources.extend(unit_schemas(unit, opts))
    parts = []
    for (fmt, where), files in sorted(groups.items()):
        part = ds.dataset(files, format=_DS_FORMATS[fmt], filesystem=local_fs if where == "local" else remote_fs)
        if where == "remote":
            sources.extend(SchemaSource(f.physical_schema, f.path) for f in part.get_fragments())
        parts.append(part)
    tables = []
    for fmt, where, ref in in_memory:
        if where == "local":
            from .readplan import ReadUnit

            unit_tables = list(read_unit(ReadUnit("", (ref,)), _record_schema(ref, fmt), None, None, opts))
            t = pa.Table.from_batches(unit_tables)
        else:
            from .formats import RAW_SCHEMA as raw

            data = stfs.cat_file(f"{ref.file}/{ref.name}")
            if fmt == "arrows":
                t = pa.ipc.open_stream(pa.py_buffer(data)).read_all()
            else:
                t = pa.table({"record": [ref.name], "data": [data]}, schema=raw)
        sources.append(SchemaSource(t.schema, ref.name))
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


def _record_schema(ref, fmt: str) -> pa.Schema:
    from .formats import record_schema

    return record_schema(ref.name, ref.path, fmt)

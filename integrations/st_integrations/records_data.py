"""DuckDB's ``records_data`` view: the contents of a connection's records,
read through the readers' own scan path and kept for the next query
(issue 38, item 5; docs/analysis.md, "pyarrow datasets and SQL over
contents").

:class:`RecordsData` is what :func:`st_integrations.duckdb_sql.connect_files`
registers as ``records_data``. DuckDB asks for its ``schema`` when it is
registered and when a query is bound, and for a ``scanner(columns=...,
filter=...)`` when the query runs (the projection and the filter of the
query pushed down); both first check each file's commit generation in its
infofile (a local SQLite read, no record read):

* the generations seen last: the records already read are used again
  (nothing is read);
* otherwise the scan is planned again (:func:`readplan.plan_scan`, GET_LOCAL)
  and only the records not read before are read: the copies GET_LOCAL
  reveals to this host many at a time by one native call, checked against
  their size and CRC-32C (:func:`scan.record_buffers`, the Dask and Ray
  read tasks' path), those of peers on other hosts by pipelined GETs;
  records no longer in the plan are dropped.

The records are kept as their bytes. A query's columns that no earlier
query decoded are decoded then, from every record (a Parquet record
through its ``ParquetFile``, only those columns' chunks; the others by
:func:`formats.scan_record`), and appended to one table per connection,
which DuckDB scans with the query's projection and filter. The schema is
unified as the readers unify it (the schemas kept in the infofiles, then
the headers of the other records; the one call to :func:`formats.unify`
is in :func:`_unify`).

When a plan's records hold more than ``cache_bytes`` bytes, nothing is kept
in memory: each query scans them through the ``storetorrent://``
filesystem (:func:`st_integrations.arrow_dataset.dataset`, record by record,
streaming), planned again when a generation changes; when the bytes kept
and the decoded columns would pass it, the columns are not kept and each
query scans the records' fragments (``pyarrow.dataset``, with the filter
pushed into Parquet's row-group statistics).

Thread safety: a lock serialises the planning, reading and decoding of one
object (DuckDB asks for the scanner under the GIL).
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.dataset as ds

from .formats import RAW_SCHEMA, SchemaSource, conform, detect_source, project, scan_record, unify
from .partitioning import HIVE, Partitions, with_values
from .readplan import ScanPlan, plan_scan, with_partitions
from .scan import ScanOptions, kept_schema_sources, record_buffers

CACHE_BYTES = 2 << 30
"""Records of a connection's files up to this many bytes are kept in memory
between queries (default of :class:`RecordsData`)."""

_TABLE_FORMATS = ("raw", "arrows")  # decoded to tables when read; the others stay fragments over their bytes


@dataclass
class _Kept:
    """One record as read: its bytes, and a fragment over them or its table."""

    record: str
    fmt: str
    data: pa.Buffer
    fragment: ds.Fragment | None = None
    table: pa.Table | None = None
    parquet: object = None  # a pyarrow.parquet.ParquetFile over data (its footer parsed once), made on first decode

    @property
    def size(self) -> int:
        return self.data.size

    @property
    def schema(self) -> pa.Schema:
        return self.table.schema if self.table is not None else self.fragment.physical_schema  # type: ignore[union-attr]

    def columns(self, schema: pa.Schema, columns: list[str], part: dict[str, pa.Scalar] | None = None) -> pa.Table:
        """The record's ``columns`` in the unified ``schema`` (missing
        ones null, types cast: :func:`formats.conform`), the hive partition
        columns among them from ``part`` (the record's values, constant
        columns); a Parquet record decodes only its own columns' chunks.
        Runs in a decoding thread."""
        if not part:
            return self._own(schema, columns)
        own = [c for c in columns if c not in part]
        values = {c: part[c] for c in columns if c in part}
        if own:
            return with_values(self._own(schema, own), values).select(columns)
        # partition columns only: a table of no column keeps no row count, so count the rows
        n = self._own(schema, schema.names[:1]).num_rows if schema.names else 0
        return with_values(pa.table({"_": pa.nulls(n)}), values).select(columns)

    def _own(self, schema: pa.Schema, columns: list[str]) -> pa.Table:
        out = project(schema, columns)
        if self.fmt != "parquet":
            src = self.data if self.table is None else None
            if src is None:  # IPC streams and raw records: their table, conformed
                batches = [conform(b, schema, self.record).select(columns) for b in self.table.to_batches()]  # type: ignore[union-attr]
            else:
                batches = list(scan_record(self.record, src, self.fmt, schema, columns))
            return pa.Table.from_batches(batches, schema=out)
        if self.parquet is None:
            import pyarrow.parquet as pq

            self.parquet = pq.ParquetFile(pa.BufferReader(self.data))
        pf = self.parquet
        names = set(pf.schema_arrow.names)  # type: ignore[attr-defined]
        have = [c for c in columns if c in names]
        if not have:
            n = pf.metadata.num_rows  # type: ignore[attr-defined]
            return pa.table([pa.nulls(n, f.type) for f in out], schema=out)
        t = pf.read(columns=have, use_threads=False)  # type: ignore[attr-defined]
        if t.schema.equals(out):
            return t
        return pa.Table.from_batches([conform(b, out, self.record) for b in t.to_batches()], schema=out)


def _key(ref) -> tuple:
    """What identifies a record's bytes: the copy's path holds its stored
    name and CRC-32C (docs/record-store.md); a striped object has no path,
    its bytes are those of the generation read."""
    return (ref.file, ref.name, ref.path or f"object@{ref.as_of}")


class RecordsData(ds.Dataset):
    """The records of ``paths`` as a dataset DuckDB scans (see the module
    docstring). Only :attr:`schema` and :meth:`scanner` are meant to be
    called (by DuckDB); the other Dataset methods act on the dataset of the
    current generation.

    Parameters
    ----------
    paths : list of str
        Files, directories, namespace globs or paths inside a file.
    tracker : str
        The tracker's ``host:port``.
    as_of : str, int or datetime, optional
        The files as of a past state (docs/snapshots.md).
    local : bool, optional
        ``False``: every record by GET (default: the copies revealed to
        this host's peers from their local paths).
    cache_bytes : int
        Keep the records in memory between queries up to this many bytes.
    partitioning : {"hive", None}
        ``"hive"`` (default, as DuckDB's own ``read_parquet`` and pyarrow
        detect it): the ``key=value`` folders of record names are columns,
        typed as pyarrow types them (docs/analysis.md, "Hive partitioning");
        None: no partition columns.

    Attributes
    ----------
    stats : dict
        ``plans`` (scans planned), ``records_read`` and ``bytes_read``
        (records read from the peers' copies or by GET), ``queries``
        (scanners made).

    Raises
    ------
    (when a query runs) StFileNotFoundError, RecordsUnavailableError,
    GetLocalError, SchemaConflictError, RecordFormatError
    """

    def __init__(
        self,
        paths: list[str],
        tracker: str,
        as_of=None,
        local: bool | None = None,
        cache_bytes=CACHE_BYTES,
        partitioning: str | None = HIVE,
    ):
        from st_py.client.client import Client

        self._paths, self._tracker, self._as_of = list(paths), tracker, as_of
        self._partitioning = partitioning
        self._parts: Partitions | None = None  # the hive partition columns of the current dataset
        self._record_schema: pa.Schema | None = None  # its records' own columns (without the partition ones)
        self._local, self._cache_bytes = local is not False, cache_bytes
        self._client = Client(tracker)
        self._handles: dict[str, object] = {}  # open handles for GETs, closed after each read
        self._infofiles: dict[str, str] = {}  # {file: its infofile's path}, of the last plan
        self._kept: dict[tuple, _Kept] = {}
        self._generations: dict[str, int] | None = None
        self._dataset: ds.Dataset | None = None
        self._decoded: pa.Table | None = None  # the columns of _dataset decoded so far, one chunk each
        self._order: list[tuple] = []  # the keys of _dataset's records, in the plan's order
        self._lock = threading.RLock()
        self.stats = {"plans": 0, "records_read": 0, "bytes_read": 0, "queries": 0, "columns_decoded": 0}
        self._finalizer = weakref.finalize(self, _close, self._client, self._handles)

    # -- what DuckDB calls -------------------------------------------------------------
    @property
    def schema(self) -> pa.Schema:  # type: ignore[override]
        """The unified schema of the records at the files' current generations."""
        return self.current().schema

    def scanner(self, columns=None, filter=None, **kwargs) -> ds.Scanner:  # type: ignore[override]
        """A scanner of the current records with ``columns`` and ``filter``
        pushed down: over the columns decoded so far, the ones this query
        names and no earlier one did decoded first (only those columns'
        chunks of each Parquet record), or, above the memory budget, over
        the records' fragments."""
        d = self.current()
        with self._lock:
            self.stats["queries"] += 1
            t = self._decode(d, columns)
        if t is None:
            return d.scanner(columns=columns, filter=filter, **kwargs)
        try:
            return ds.dataset(t).scanner(columns=columns, filter=filter, **kwargs)
        except pa.ArrowInvalid:  # the filter names a column not decoded yet (DuckDB names them in columns)
            with self._lock:
                t = self._decode(d, None)
            if t is None:
                return d.scanner(columns=columns, filter=filter, **kwargs)
            return ds.dataset(t).scanner(columns=columns, filter=filter, **kwargs)

    def _decode(self, d: ds.Dataset, columns) -> pa.Table | None:
        """The decoded columns of ``d`` (the current dataset) as one table
        holding at least ``columns`` (None: all), the missing ones decoded
        now and kept; None when the records' bytes and their decoded columns
        would pass ``cache_bytes`` (each query then decodes what it needs
        from the fragments). Columns decoded by separate calls line up row
        by row: every call decodes the records in the plan's order."""
        schema = d.schema
        if d is not self._dataset or not self._kept:  # planned again meanwhile, or streamed (above the budget)
            return None
        want = schema.names if columns is None else list(columns)
        have = self._decoded
        missing = [c for c in want if have is None or c not in have.column_names]
        if missing:
            own = self._record_schema if self._record_schema is not None else schema
            pv = self._parts
            values = [pv.values(k[0], k[1]) if pv is not None else None for k in self._order]
            new = _decode_columns([self._kept[k] for k in self._order], own, missing, values, schema)
            self.stats["columns_decoded"] += len(missing)
            if have is None:
                have = new
            else:
                for c in missing:
                    have = have.append_column(new.schema.field(c), new.column(c))
            if sum(e.size for e in self._kept.values()) + have.nbytes > self._cache_bytes:
                self._decoded = None
                return None
            self._decoded = have
        return have

    # the other Dataset methods, on the current dataset (the base class's need a C++ dataset this object lacks)
    def to_table(self, *a, **k):  # type: ignore[override]
        """``pyarrow.dataset.Dataset.to_table`` on the records as of the last freshness check (a pyarrow Table)."""
        return self.current().to_table(*a, **k)

    def to_batches(self, *a, **k):  # type: ignore[override]
        """``pyarrow.dataset.Dataset.to_batches`` on the current records (an iterator of RecordBatches)."""
        return self.current().to_batches(*a, **k)

    def count_rows(self, *a, **k):  # type: ignore[override]
        """``pyarrow.dataset.Dataset.count_rows`` on the current records (an int)."""
        return self.current().count_rows(*a, **k)

    def head(self, *a, **k):  # type: ignore[override]
        """``pyarrow.dataset.Dataset.head`` on the current records (a pyarrow Table of the first rows)."""
        return self.current().head(*a, **k)

    def take(self, *a, **k):  # type: ignore[override]
        """``pyarrow.dataset.Dataset.take`` on the current records (a pyarrow Table of those rows)."""
        return self.current().take(*a, **k)

    def get_fragments(self, *a, **k):  # type: ignore[override]
        """``pyarrow.dataset.Dataset.get_fragments`` of the current records' dataset."""
        return self.current().get_fragments(*a, **k)

    def close(self) -> None:
        """Drop the records kept and close the connections to the tracker and peers."""
        with self._lock:
            self._kept.clear()
            self._dataset = self._decoded = None
            self._generations = None
        self._finalizer()

    # -- planning and reading ----------------------------------------------------------
    def current(self) -> ds.Dataset:
        """The dataset of the records at the files' generations now:
        the one of the last query while no generation changed, else
        planned and read again (only records not read before are read)."""
        with self._lock:
            if self._dataset is not None and self._generations == self._now():
                return self._dataset
            plan = plan_scan(
                self._client, self._paths, skip_ignored=True, as_of=self._as_of, partitioning=self._partitioning
            )
            self.stats["plans"] += 1
            if plan.size > self._cache_bytes:
                from .arrow_dataset import dataset

                self._kept.clear()
                self._parts = None
                d = dataset(
                    self._paths,
                    tracker=self._tracker,
                    local=self._local,
                    as_of=self._as_of,
                    partitioning=self._partitioning,
                )
            else:
                d = self._build(plan)
            self._dataset, self._decoded, self._generations = d, None, dict(plan.generations)
            self._infofiles = {name: p.infofile_path for name, p in plan.plans.items()}
            return d

    def _now(self) -> dict[str, int] | None:
        """Each file's generation now, read from its infofile (opened and
        closed: thousands of files hold no descriptors between queries);
        with ``as_of``, the generations planned (a past state does not
        change)."""
        from st_py.core.infofile import InfofileReader

        if self._as_of is not None:
            return self._generations
        out = {}
        for name, path in self._infofiles.items():
            r = InfofileReader(path)
            try:
                out[name] = r.generation()
            finally:
                r.close()
        return out

    def _build(self, plan: ScanPlan) -> ds.Dataset:
        refs = [r for u in plan.units for r in u.records]
        keys = self._order = [_key(r) for r in refs]
        self._kept = {k: self._kept[k] for k in keys if k in self._kept}  # records gone from the plan dropped
        self._read([u for u in plan.units], keys)
        own = self._record_schema = _unify(plan, [self._kept[k] for k in keys], keys)
        # raw records' rows are fixed (record, data): no partition columns, as in a raw scan
        plan, schema = with_partitions(plan, own, enabled=not own.equals(RAW_SCHEMA))
        pv = self._parts = plan.partitions
        groups: dict[tuple[str, bool], list] = {}
        tables: list[pa.RecordBatch] = []
        for k in keys:
            e = self._kept[k]
            values = pv.values(k[0], k[1]) if pv is not None else None
            if e.table is not None:
                t = with_values(e.table, values) if values else e.table
                tables.extend(conform(b, schema, e.record) for b in t.to_batches())
            elif values:  # a fragment over the same bytes that materialises the record's partition values
                from st_py.core.record_format import dataset_format

                frag = dataset_format(e.record, e.fmt).make_fragment(
                    e.data,
                    partition_expression=pv.expression(k[0], k[1]),  # type: ignore[union-attr]
                )
                groups.setdefault((e.fmt, ".tsv" in e.record.lower()), []).append(frag)
            else:
                groups.setdefault((e.fmt, ".tsv" in e.record.lower()), []).append(e.fragment)
        parts: list[ds.Dataset] = []
        for (fmt, tsv), frags in sorted(groups.items()):
            from st_py.core.record_format import dataset_format

            parts.append(ds.FileSystemDataset(frags, schema, dataset_format("x.tsv" if tsv else "x", fmt)))
        if tables:
            parts.append(ds.dataset(pa.Table.from_batches(tables, schema=schema)))
        if not parts:
            return ds.dataset(schema.empty_table())
        return parts[0] if len(parts) == 1 else ds.dataset(parts)

    def _read(self, units, keys) -> None:
        """Read the records of ``units`` not kept yet into ``self._kept``:
        a local unit's copies by :func:`scan.record_buffers` (native batch
        reads, checked), the others by pipelined GETs."""
        from st_py.client.getlocal import is_local

        opts = ScanOptions(tracker=self._tracker)
        for unit in units:
            refs = [r for r in unit.records if _key(r) not in self._kept]
            if not refs:
                continue
            if self._local and is_local(unit.peer):
                got = record_buffers(refs, opts)
            else:
                got = self._get(refs)
            for ref, buf in got:
                self._keep(ref, buf)

    def _get(self, refs):
        """``(ref, bytes)`` of ``refs`` by GET, queued on each file's handle
        and read back in order (checked by GET; objects read whole)."""
        pending = []
        try:
            for r in refs:
                f = self._handles.get(r.file)
                if f is None:
                    f = self._handles[r.file] = self._client.open(r.file, as_of=self._as_of)
                pending.append((r, f.queue_get(r.name)))  # type: ignore[attr-defined]
            for r, p in pending:
                yield r, pa.py_buffer(p.result())
        finally:
            for f in self._handles.values():
                f.close()  # type: ignore[attr-defined]
            self._handles.clear()

    def _keep(self, ref, buf: pa.Buffer) -> None:
        from st_py.core.record_format import dataset_format

        self.stats["records_read"] += 1
        self.stats["bytes_read"] += buf.size
        fmt = detect_source(ref.name, buf)
        if fmt == "raw":
            data = pa.Array.from_buffers(  # the record's bytes as one binary value, not copied
                RAW_SCHEMA.field("data").type, 1, [None, pa.array([0, buf.size], pa.int32()).buffers()[1], buf]
            )
            e = _Kept(ref.name, fmt, buf, table=pa.table([pa.array([ref.name]), data], schema=RAW_SCHEMA))
        elif fmt == "arrows":
            e = _Kept(ref.name, fmt, buf, table=pa.ipc.open_stream(pa.BufferReader(buf)).read_all())
        else:
            e = _Kept(ref.name, fmt, buf, fragment=dataset_format(ref.name, fmt).make_fragment(buf))
        self._kept[_key(ref)] = e


DECODE_CHUNK = 256  # records a decoding task decodes


def _decode_columns(
    kept: list[_Kept],
    schema: pa.Schema,
    columns: list[str],
    values: list[dict[str, pa.Scalar] | None] | None = None,
    full: pa.Schema | None = None,
) -> pa.Table:
    """``columns`` of every record of ``kept``, in this order, as one table
    of one chunk a column: a Parquet record through its ``ParquetFile``
    (its footer parsed once per connection; pyarrow's dataset scanner costs
    more per small record), the others by :func:`formats.scan_record`; in
    this process's read-ahead threads (the decoding releases the GIL).
    ``schema``: the records' own columns; ``values``: each record's hive
    partition values (None: none); ``full``: ``schema`` with the partition
    columns."""
    from .batch_read import executor

    pairs = list(zip(kept, values if values is not None else [None] * len(kept)))
    chunks = [pairs[i : i + DECODE_CHUNK] for i in range(0, len(pairs), DECODE_CHUNK)]
    parts = list(executor().map(lambda chunk: [e.columns(schema, columns, v) for e, v in chunk], chunks))
    tables = [t for part in parts for t in part]
    if not tables:
        return project(full if full is not None else schema, columns).empty_table()
    return pa.concat_tables(tables).combine_chunks()


def _unify(plan: ScanPlan, kept: list[_Kept], keys: list[tuple]) -> pa.Schema:
    """The records' schema as the readers unify it: the schemas kept in the
    infofiles at write time, then the headers of the records written
    without one (the one call to :func:`formats.unify`)."""
    got = kept_schema_sources(plan, ScanOptions())
    if got is None:
        sources = [SchemaSource(e.schema, e.record) for e in kept]
    else:
        sources, todo = got
        want = {(u.files[u.file_of[i]].file, u.names[i]) for u in todo for i in range(len(u))}
        seen: set[pa.Schema] = set()
        for k, e in zip(keys, kept):
            if (k[0], k[1]) in want:
                s = e.schema
                if s not in seen:
                    seen.add(s)
                    sources.append(SchemaSource(s, e.record))
    return unify(sources) if sources else RAW_SCHEMA


def _close(client, handles: dict) -> None:
    for f in list(handles.values()):
        try:
            f.close()  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 (closing: nothing left to tell)
            pass
    handles.clear()
    try:
        client.close()
    except Exception:  # noqa: BLE001
        pass

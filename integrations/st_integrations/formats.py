"""Record formats: recognising a record's format, reading its schema, and
reading it as Arrow record batches with column projection and filter pushdown.

Formats are recognised in one place, :mod:`st_py.core.record_format` (magic bytes
first, then the record name's extension; its docstring has the table).

A ``raw`` record becomes one row ``(record: string, data: binary)``; pass
``format="raw"`` to the readers to get every record that way.

Pushdown (docs/analysis.md):

* Parquet: the projection reads only the selected column chunks, and the
  filter skips row groups whose statistics cannot match (pyarrow.dataset's
  Parquet fragment), then filters rows.
* Arrow IPC: the projection decodes only the selected columns of a
  memory-mapped file; the filter is applied per batch.
* CSV and JSON: read whole (they have no index), then projected and filtered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeAlias

import pyarrow as pa

from st_py.core.record_format import (
    FORMATS,
    HEAD_BYTES,
    IGNORE_PREFIXES,
    RAW_SCHEMA,
    dataset_format,
    detect,
    detect_source,
    ignored,
    schema_of,
)
from st_py.errors import RecordFormatError, StoreTorrentError

from .partitioning import expression_of, with_values
from .schemas import SchemaConflictError, SchemaSource, StrayRecordError, conform, unify

__all__ = [  # the schema rules are schemas.py's, imported here for older callers
    "SchemaConflictError",
    "SchemaSource",
    "StrayRecordError",
    "conform",
    "unify",
    "FORMATS",
    "HEAD_BYTES",
    "IGNORE_PREFIXES",
    "RAW_SCHEMA",
    "RecordFormatError",
    "detect",
    "detect_source",
    "ignored",
]

Decoder = Callable[[str, str], pa.Table]
"""A user decoder: ``decoder(record name, local path) -> pyarrow.Table``."""


# A record's bytes: its local path, or (a record of a file with client-side
# filters, docs/filters.md) the decoded bytes in memory.
# A seekable file: a striped object read by ranges (docs/striping.md).
Source: TypeAlias = "str | pa.Buffer | pa.NativeFile"


def _open(source: Source):
    """A readable Arrow file on the source (memory-mapped when a path)."""
    if isinstance(source, pa.NativeFile):
        source.seek(0)
        return pa.BufferReader(source.read_buffer())
    return pa.memory_map(source) if isinstance(source, str) else pa.BufferReader(source)


def _whole(source: Source) -> bytes:
    if isinstance(source, str):
        with open(source, "rb") as fh:
            return fh.read()
    if isinstance(source, pa.NativeFile):
        source.seek(0)
        return source.read()
    return source.to_pybytes()


def _fragment(name: str, source: Source, fmt: str, partition: dict | None = None):
    """A ``pyarrow.dataset`` fragment of the record; with ``partition``
    (``{column: scalar}``, its hive partition values) those columns are
    materialised by the fragment's scans."""
    import pyarrow.fs as pafs

    if isinstance(source, pa.NativeFile) and fmt != "parquet":
        source.seek(0)  # only Parquet fragments read a Python file by ranges
        source = source.read_buffer()
    kw = {"partition_expression": expression_of(partition)} if partition else {}
    if not isinstance(source, str):
        return dataset_format(name, fmt).make_fragment(source, **kw)
    return dataset_format(name, fmt).make_fragment(source, filesystem=pafs.LocalFileSystem(), **kw)


def record_schema(name: str, path: Source, fmt: str | None = None) -> pa.Schema:
    """The schema of one record on local disk, from its header only where
    the format has one (Parquet footer, Arrow IPC schema message); CSV and
    JSON are inferred from their first block (:func:`st_py.core.record_format.schema_of`).

    Raises
    ------
    RecordFormatError
        If the record does not decode as its format.
    """
    fmt = fmt or detect_source(name, path)
    if isinstance(path, pa.NativeFile) and fmt == "parquet":  # a striped object: its footer by ranged reads
        try:
            return _fragment(name, path, fmt).physical_schema
        except (pa.ArrowException, OSError) as e:
            raise RecordFormatError(f"record {name!r} does not decode as {fmt}: {e}", name, fmt) from e
    if isinstance(path, pa.NativeFile):
        path.seek(0)
        path = path.read_buffer()
    return schema_of(name, path, fmt)


def scan_record(
    name: str,
    path: Source,
    fmt: str | None,
    schema: pa.Schema,
    columns: list[str] | None = None,
    filter=None,
    batch_size: int = 131_072,
    partition: dict[str, pa.Scalar] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Read one record from local disk as Arrow record batches in the
    dataset's schema.

    Parameters
    ----------
    name : str
        The record's name (for raw rows and messages).
    path : str, pyarrow.Buffer or pyarrow.NativeFile
        Its local path, its bytes (checked, decoded), or a seekable file
        (a striped Parquet object, read by ranges).
    fmt : str or None
        One of :data:`FORMATS`; detected when None.
    schema : pyarrow.Schema
        The dataset's (unified) schema: columns the record lacks are null,
        types are cast safely to it (:func:`conform`).
    columns : list of str, optional
        Projection; the batches hold these columns, in this order.
    filter : pyarrow.dataset.Expression, optional
        Rows to keep; it may name columns outside ``columns``. Row groups of
        Parquet records are skipped by their statistics.
    partition : dict of str to pyarrow.Scalar, optional
        The record's hive partition values
        (:meth:`st_integrations.partitioning.Partitions.values`): columns of
        ``schema`` that every row has, whatever the record holds.

    Yields
    ------
    pyarrow.RecordBatch
        With schema ``project(schema, columns)``.

    Raises
    ------
    RecordFormatError
        If the record does not decode as its format.
    SchemaConflictError
        If a value cannot be cast to ``schema``.
    """

    fmt = fmt or detect_source(name, path)
    out_schema = project(schema, columns)
    try:
        if fmt in ("raw", "arrows"):
            # No statistics to use: decode (zero-copy for IPC), conform, filter.
            if fmt == "raw":
                raw = _whole(path)
                batches = pa.table({"record": [name], "data": [raw]}, schema=RAW_SCHEMA).to_batches()
                src = None
            else:
                src = _open(path)
                batches = pa.ipc.open_stream(src)
            try:
                for b in batches:
                    b = conform(b, schema, name)
                    if partition:
                        b = with_values(b, partition)
                    if filter is not None:
                        b = pa.Table.from_batches([b]).filter(filter).combine_chunks()
                        b = b.to_batches()[0] if b.num_rows else None
                    if b is not None and b.num_rows:
                        yield b.select(out_schema.names) if columns is not None else b
            finally:
                if src is not None:
                    src.close()
            return
        frag = _fragment(name, path, fmt, partition)
        phys = frag.physical_schema
        # Scan in the record's own types, with the dataset's other columns as
        # nulls, so that a filter on a column the record lacks sees nulls.
        scan_schema = pa.schema([phys.field(f.name) if phys.get_field_index(f.name) >= 0 else f for f in schema])
        extra = [n for n in phys.names if scan_schema.get_field_index(n) < 0]
        if extra:
            raise SchemaConflictError(
                f"record {name!r} has columns {extra} that the dataset's schema lacks; pass a schema= that "
                "includes them, or read the records separately",
                name,
                "",
                extra[0],
            )
        for b in frag.to_batches(
            schema=scan_schema, columns=out_schema.names, filter=filter, batch_size=batch_size, use_threads=False
        ):
            if b.num_rows:
                yield conform(b, out_schema, name)
    except (pa.ArrowException, OSError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise RecordFormatError(f"record {name!r} does not decode as {fmt}: {e}", name, fmt) from e


class ColumnNotFoundError(StoreTorrentError, KeyError):
    """``columns`` or a filter name a column the records lack. ``column`` is
    the first such name ("" when a filter expression names it), ``columns``
    the records' columns."""

    def __init__(self, message: str, column: str = "", columns=()):
        super().__init__(message)
        self.column, self.columns = column, tuple(columns)

    def __str__(self) -> str:  # KeyError quotes its argument; keep the sentence
        return str(self.args[0])


def project(schema: pa.Schema, columns: list[str] | None) -> pa.Schema:
    """``schema`` restricted to ``columns``, in that order.

    Raises
    ------
    ColumnNotFoundError
        For a column the schema lacks, naming the columns it has.
    """
    if columns is None:
        return schema
    missing = [c for c in columns if schema.get_field_index(c) < 0]
    if missing:
        raise ColumnNotFoundError(
            f"columns {missing} are not in the records; their columns: {schema.names}", missing[0], schema.names
        )
    return pa.schema([schema.field(c) for c in columns])


def check_columns(schema: pa.Schema, columns: list[str] | None, filter=None) -> None:
    """Check, when a Dataset or DataFrame is built (not in its read tasks),
    that ``columns`` and the columns ``filter`` names are in ``schema``.

    Parameters
    ----------
    filter : pyarrow.dataset.Expression or DNF tuples, optional

    Raises
    ------
    ColumnNotFoundError
        Naming the column (or the filter) and the records' columns.
    """
    project(schema, columns)
    if filter is None:
        return
    if isinstance(filter, list):  # DNF tuples: [("a", ">", 1)] or [[("a", ">", 1)], ...]
        terms = [t for part in filter for t in (part if isinstance(part, list) else [part])]
        missing = [t[0] for t in terms if schema.get_field_index(t[0]) < 0]
        if missing:
            raise ColumnNotFoundError(
                f"filters name {missing[0]!r}, which is not in the records; their columns: {schema.names}",
                missing[0],
                schema.names,
            )
        return
    try:
        schema.empty_table().filter(filter)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, KeyError) as e:
        raise ColumnNotFoundError(
            f"filter {filter} cannot apply to the records (a column it names is not "
            f"there, or has another type); their columns: {schema.names}",
            "",
            schema.names,
        ) from e

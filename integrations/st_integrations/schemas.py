"""One schema unification for every reader (issue 38, item 3).

Records of one scan may be written by different tools: pandas 3 writes
strings as ``large_string``, a CSV reads back as ``string``; one writer
writes ``int32``, another ``int64``. Every reader (Ray, Dask, the pyarrow
dataset, DuckDB's ``records_data``) reads them as one table the same way:

* :func:`unify` makes the scan's schema from the records' schemas, as
  Arrow's ``pa.unify_schemas(..., promote_options="permissive")`` does: the
  union of the columns in order of first appearance, a column missing from
  a record null there, numeric types widened (int32 + int64 -> int64,
  int64 + double -> double), string + large_string -> large_string,
  null + T -> T;
* :func:`conform` casts each batch of a record to it (safe casts only).
  The pyarrow dataset (:mod:`st_integrations.arrow_dataset`) is built of
  fragments under the schema of :func:`unify`, and pyarrow's scanner casts
  each fragment's batches to it the same way.

Nothing else in the integrations unifies or casts record schemas.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from st_py.core.record_format import RAW_SCHEMA, extension_format
from st_py.errors import RecordFormatError, StoreTorrentError


class SchemaConflictError(StoreTorrentError):
    """Two records whose schemas cannot be unified (e.g. a column that is an
    integer in one and a string in the other). ``first`` and ``second`` name
    the records, ``column`` the column when one is to blame."""

    def __init__(self, message: str, first: str = "", second: str = "", column: str = ""):
        super().__init__(message)
        self.first, self.second, self.column = first, second, column


class StrayRecordError(RecordFormatError):
    """A record of no known format (``raw``) in a scan of records of a
    known one, which would become rows of nulls plus ``record``/``data``
    columns. ``record`` names it, ``format`` is ``"raw"``, ``other`` names a
    record of the known format and ``other_format`` its format."""

    def __init__(self, record: str, other: str, other_format: str):
        super().__init__(
            f"record {record!r} is of no known format (by its bytes and name), while {other!r} and "
            f"others are {other_format}: it would become rows of nulls. Delete or rename it (names "
            'starting with _ or . are skipped), read the files with format="raw" or a decoder=, '
            "or name the records to read",
            record,
            "raw",
        )
        self.other, self.other_format = other, other_format


def _check_no_stray(sources: list[SchemaSource]) -> None:
    raw = [s for s in sources if s.schema.equals(RAW_SCHEMA)]
    known = [s for s in sources if not s.schema.equals(RAW_SCHEMA)]
    if raw and known:
        raise StrayRecordError(raw[0].record, known[0].record, extension_format(known[0].record) or "parquet or arrow")


@dataclass(frozen=True)
class SchemaSource:
    """A schema and the record it was read from."""

    schema: pa.Schema
    record: str


def unify(sources: list[SchemaSource]) -> pa.Schema:
    """The permissive unification of the records' schemas: the union of
    their columns in order of first appearance; a column missing from a
    record is null there; numeric types widen (int32 + int64 -> int64,
    int64 + double -> double), string + large_string -> large_string, null +
    T -> T.

    Raises
    ------
    SchemaConflictError
        Naming two records whose types for one column cannot be unified.
    StrayRecordError
        A record of no known format among records of a known one.
    """
    if not sources:
        return RAW_SCHEMA
    _check_no_stray(sources)
    out = sources[0].schema
    origin = {f.name: sources[0].record for f in out}
    for src in sources[1:]:
        if src.schema.equals(out):
            continue
        try:
            out = pa.unify_schemas([out, src.schema], promote_options="permissive")
        except (pa.ArrowTypeError, pa.ArrowInvalid) as e:
            for f in src.schema:
                i = out.get_field_index(f.name)
                if i < 0:
                    continue
                try:
                    pa.unify_schemas([pa.schema([out.field(i)]), pa.schema([f])], promote_options="permissive")
                except (pa.ArrowTypeError, pa.ArrowInvalid):
                    raise SchemaConflictError(
                        f"records {origin[f.name]!r} and {src.record!r} cannot be read as one table: column "
                        f"{f.name!r} is {out.field(i).type} in the first and {f.type} in the second; pass "
                        "schema= to read both as one type, or read them separately",
                        origin[f.name],
                        src.record,
                        f.name,
                    ) from e
            raise SchemaConflictError(
                f"records {sources[0].record!r} and {src.record!r} cannot be unified: {e}",
                sources[0].record,
                src.record,
            ) from e
        for f in src.schema:
            origin.setdefault(f.name, src.record)
    return out


def conform(batch: pa.RecordBatch, schema: pa.Schema, record: str) -> pa.RecordBatch:
    """``batch`` in ``schema``: columns reordered, missing ones null, types
    cast safely.

    Raises
    ------
    SchemaConflictError
        If a value cannot be cast (e.g. a string that is not a number), or
        the record has a column ``schema`` lacks (it would be lost silently).
    """
    if batch.schema.equals(schema):
        return batch
    extra = [n for n in batch.schema.names if schema.get_field_index(n) < 0]
    if extra:
        raise SchemaConflictError(
            f"record {record!r} has columns {extra} that the dataset's schema lacks; pass a schema= that "
            "includes them, or columns= to select the ones you want",
            record,
            "",
            extra[0],
        )
    arrays = []
    for f in schema:
        i = batch.schema.get_field_index(f.name)
        if i < 0:
            arrays.append(pa.nulls(batch.num_rows, f.type))
            continue
        col = batch.column(i)
        if not col.type.equals(f.type):
            try:
                col = col.cast(f.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                raise SchemaConflictError(
                    f"record {record!r}: column {f.name!r} of type {col.type} cannot be read as {f.type}: {e}",
                    record,
                    "",
                    f.name,
                ) from e
        arrays.append(col)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)

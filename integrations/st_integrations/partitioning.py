"""Hive partitioning: columns from the ``key=value`` components of record
paths (issue 38, item 1; docs/analysis.md, "Hive partitioning").

``df.to_parquet("storetorrent://.../exp/part", partition_cols=["carrier"])``
writes records under ``/exp/part/carrier=DL/...``; pyarrow, pandas, Dask's
``read_parquet`` and Ray's ``read_parquet`` read ``carrier`` back from those
paths. This module is the one place the StoreTorrent readers do the same:

* :func:`relative` is a record's path relative to the path the scan was
  given (``/exp/part`` above; the file ``/exp/part/carrier=DL`` and its
  record ``x.parquet`` give ``carrier=DL/x.parquet``);
* :func:`parse` takes the ``key=value`` directory components of it, as
  pyarrow's ``HivePartitioning`` does: a component without ``=`` is not a
  partition, keys and values are URI-decoded, the value
  ``__HIVE_DEFAULT_PARTITION__`` is null, the last component (the record's
  own name) never counts;
* :func:`discover` types the columns over every record of the scan, as
  ``pyarrow.dataset.HivePartitioning.discover(infer_dictionary=False)``
  does (flavor ``"arrow"``): int32 when every non-null value casts to
  int32 by Arrow's own cast, else string; flavor ``"string"`` makes every
  column a string, as ``ray.data.read_parquet`` does;
* :class:`Partitions` gives each record its values (as Arrow scalars, as a
  ``pyarrow.dataset`` partition expression that fragments materialise as
  columns, or as constant arrays) and which records a filter can keep,
  decided on their names alone, before any record is opened.

Everything here is plain picklable data; read tasks get a
:class:`Partitions` in their :class:`~st_integrations.scan.ScanOptions`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import unquote

import pyarrow as pa

from st_py.errors import InvalidOptionError

HIVE = "hive"
NULL_VALUE = "__HIVE_DEFAULT_PARTITION__"  # Hive's (and pyarrow's) name for a null partition value
FLAVORS = ("arrow", "string")


def check_partitioning(value) -> str | None:
    """``value`` if it is a partitioning the readers know (``"hive"`` or
    None: no partition columns).

    Raises
    ------
    InvalidOptionError
        (a ``ValueError``) for any other value, naming the ones there are.
    """
    if value is None or value == HIVE:
        return value
    raise InvalidOptionError(
        f"partitioning={value!r} is not known: pass 'hive' (the default: key=value path components "
        "become columns) or None (no partition columns)",
        "partitioning",
        value,
    )


def relative(file: str, name: str, base: str) -> str:
    """Record ``name`` of ``file`` as a path relative to ``base``, the
    path the scan was given (``/exp`` for the file ``/exp/part`` and the
    record ``a=1/x.parquet`` gives ``part/a=1/x.parquet``). A record named
    by ``base`` itself is its last name component."""
    full = f"{file}/{name}"
    b = base.rstrip("/")
    if full.startswith(b + "/"):
        return full[len(b) + 1 :]
    return name.rsplit("/", 1)[-1]


def parse(rel: str) -> list[tuple[str, str | None]]:
    """The ``(key, value)`` pairs of the directory components of ``rel``
    (see the module docstring); value None for a null."""
    out: list[tuple[str, str | None]] = []
    for seg in rel.split("/")[:-1]:
        key, eq, value = seg.partition("=")
        if not eq or not key:
            continue
        v = unquote(value)
        out.append((unquote(key), None if v == NULL_VALUE else v))
    return out


def _type_of(values: list[str], flavor: str) -> pa.DataType:
    """pyarrow's inference: int32 if every value casts to it, else string."""
    if flavor == "string" or not values:
        return pa.string()
    try:
        pa.array(values, pa.string()).cast(pa.int32())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return pa.string()
    return pa.int32()


@dataclass(frozen=True)
class Partitions:
    """The partition columns of a scan: ``schema`` (in order of first
    appearance) and ``bases``, ``(file, base path)`` of every file scanned
    (see :func:`relative`). Immutable; safe to share between threads (the
    per-directory cache is filled under the GIL with values that are always
    the same)."""

    schema: pa.Schema
    bases: tuple[tuple[str, str], ...]

    def __reduce__(self):
        return (Partitions, (self.schema, self.bases))  # without the cache

    @property
    def names(self) -> list[str]:
        """The partition columns' names."""
        return self.schema.names

    def _base(self, file: str) -> str:
        bases = self.__dict__.get("_bases")
        if bases is None:
            bases = self.__dict__["_bases"] = dict(self.bases)
        return bases.get(file, file)

    def scalars(self, file: str, name: str) -> tuple[pa.Scalar, ...]:
        """The record's value of each partition column, typed (a null
        scalar where its path has no such key or the null value)."""
        cache = self.__dict__.setdefault("_cache", {})
        d = name.rpartition("/")[0]
        key = (file, d)
        got = cache.get(key)
        if got is None:
            found = dict(parse(relative(file, d + "/_" if d else "_", self._base(file))))
            got = cache[key] = tuple(_scalar(found.get(f.name), f.type) for f in self.schema)
        return got

    def values(self, file: str, name: str) -> dict[str, pa.Scalar]:
        """``{column: the record's value}`` (see :meth:`scalars`)."""
        return dict(zip(self.schema.names, self.scalars(file, name)))

    def expression(self, file: str, name: str):
        """The record's values as a ``pyarrow.dataset`` partition
        expression (:func:`expression_of`)."""
        return expression_of(self.values(file, name))

    def without(self, names: Iterable[str]) -> Partitions | None:
        """These partitions without the columns ``names`` (the records'
        own columns: a record's column wins over a key of its path), or
        None if none is left."""
        drop = set(names)
        keep = [f for f in self.schema if f.name not in drop]
        if not keep:
            return None
        return self if len(keep) == len(self.schema) else Partitions(pa.schema(keep), self.bases)

    def extend(self, schema: pa.Schema) -> pa.Schema:
        """``schema`` (the records' columns) with the partition columns
        after them, as pyarrow's datasets order them."""
        for f in self.schema:
            schema = schema.append(f)
        return schema

    def keep(self, records: Iterable[tuple[str, str]], filter, schema: pa.Schema) -> set[tuple[str, str]]:
        """The ``(file, directory)`` of ``records`` (``(file, name)``
        pairs) whose partition values may satisfy ``filter`` (a
        ``pyarrow.dataset`` expression over ``schema``, the scan's columns),
        decided by pyarrow's simplification of the filter with each
        directory's values, from the names alone: a term on a record column
        is unknown, so only directories the filter contradicts are left out.
        """
        import pyarrow.dataset as ds
        import pyarrow.fs as pafs

        dirs = list(dict.fromkeys((f, n.rpartition("/")[0]) for f, n in records))
        if filter is None or not dirs:
            return set(dirs)
        fmt, fs = ds.ParquetFileFormat(), pafs.LocalFileSystem()
        # Fragments that are never opened: only their partition expressions
        # are read by get_fragments(filter=...).
        frags = [
            fmt.make_fragment(f"/{i}", filesystem=fs, partition_expression=self.expression(f, d + "/_"))
            for i, (f, d) in enumerate(dirs)
        ]
        kept = ds.FileSystemDataset(frags, schema, fmt, fs).get_fragments(filter=filter)
        return {dirs[int(fr.path[1:])] for fr in kept}


def expression_of(values: dict[str, pa.Scalar]):
    """``values`` as a ``pyarrow.dataset`` partition expression
    (``field == value`` or ``field.is_null()`` of each column, and-ed): a
    fragment made with it materialises the columns and is skipped by a
    filter it contradicts. None for no values."""
    import pyarrow.compute as pc

    expr = None
    for k, s in values.items():
        term = pc.field(k) == s if s.is_valid else pc.field(k).is_null()
        expr = term if expr is None else expr & term
    return expr


def with_values(data, values: dict[str, pa.Scalar]):
    """``data`` (a RecordBatch or Table) with the columns of ``values``
    set to them, each a constant column (replacing a column of that name,
    else appended)."""
    n = data.num_rows
    for k, s in values.items():
        col = pa.repeat(s, n) if s.is_valid else pa.nulls(n, s.type)
        i = data.schema.get_field_index(k)
        field = pa.field(k, s.type)
        data = data.set_column(i, field, col) if i >= 0 else data.append_column(field, col)
    return data


def _scalar(value: str | None, type_: pa.DataType) -> pa.Scalar:
    if value is None:
        return pa.scalar(None, type_)
    return pa.scalar(int(value) if pa.types.is_integer(type_) else value, type_)


def discover(records: Iterable[tuple[str, str]], bases: dict[str, str], flavor: str = "arrow") -> Partitions | None:
    """The partition columns of the ``(file, name)`` records of a scan
    whose files were reached from ``bases`` (``{file: path given}``), or
    None when no record path has a ``key=value`` component.

    Parameters
    ----------
    flavor : {"arrow", "string"}
        ``"arrow"``: typed as pyarrow's ``HivePartitioning.discover`` does
        (int32 or string); ``"string"``: every column a string (Ray's
        ``read_parquet``).
    """
    if flavor not in FLAVORS:
        raise InvalidOptionError(f"partition flavor {flavor!r} is none of {FLAVORS}", "flavor", flavor)
    values: dict[str, dict[str, None]] = {}
    seen: set[tuple[str, str]] = set()
    for file, name in records:
        d = name.rpartition("/")[0]
        if (file, d) in seen:
            continue
        seen.add((file, d))
        for k, v in parse(relative(file, d + "/_" if d else "_", bases.get(file, file))):
            vals = values.setdefault(k, {})
            if v is not None:
                vals.setdefault(v)
    if not values:
        return None
    schema = pa.schema([pa.field(k, _type_of(list(v), flavor)) for k, v in values.items()])
    files = dict.fromkeys(f for f, _ in seen)
    return Partitions(schema, tuple((f, bases.get(f, f)) for f in files))


def categories(parts: Partitions, records: Iterable[tuple[str, str]]) -> dict[str, list]:
    """``{column: its sorted non-null values}`` over ``records``: the
    known categories of the partition columns in a Dask DataFrame, as
    ``dd.read_parquet`` makes them."""
    out: dict[str, set] = {f.name: set() for f in parts.schema}
    for file, name in dict.fromkeys((f, n.rpartition("/")[0] + "/_") for f, n in records):
        for f, s in zip(parts.schema, parts.scalars(file, name)):
            if s.is_valid:
                out[f.name].add(s.as_py())
    return {k: sorted(v) for k, v in out.items()}

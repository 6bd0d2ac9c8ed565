"""What a read task does on a peer's node: learn its records' schemas, and
stream its records as Arrow batches (paper 3.7: "receives a list of local
UNIX file pathnames. It then processes each in turn").

Both functions take only plain picklable arguments (a :class:`ReadUnit`, a
schema, column names, a filter expression), so they run unchanged in a Ray
read task and a Dask task.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from collections.abc import Iterator

import pyarrow as pa

from st_py.errors import ChecksumError, GetLocalError

from .formats import (RAW_SCHEMA, Decoder, SchemaSource, conform, detect_file, project, record_schema,
                      scan_record)
from .readplan import ReadUnit

PATH_COLUMN = "path"


@dataclass(frozen=True)
class ScanOptions:
    """How to read records: ``format`` forces one (``"raw"``: every record as
    ``(record, data)``), ``decoder`` is a user's ``fn(name, path) -> Table``."""

    format: str | None = None
    decoder: Decoder | None = None
    include_paths: bool = False
    batch_size: int = 131_072
    # For records of encrypted files: the key, when the driver was given one
    # (it then travels with the tasks); None: each task loads it from its
    # own environment ($STORETORRENT_KEY_FILE, ...; docs/filters.md).
    encryption_key: bytes | None = None


_chains: dict = {}  # (filters, key check) -> FilterChain, per process


def _source(ref, opts: ScanOptions):
    """What to parse for ``ref``: its local path, or for a file with
    client-side filters its decoded bytes."""
    if not ref.filters:
        return ref.path
    from st_py.filters import FilterChain, load_key

    k = (ref.filters, ref.key_check, ref.file)
    chain = _chains.get(k)
    if chain is None:
        key = opts.encryption_key if opts.encryption_key is not None else load_key()
        chain = _chains[k] = FilterChain(ref.filters, key, ref.file, ref.key_check)
    with open(ref.path, "rb") as fh:
        stored = fh.read()
    return pa.py_buffer(chain.decode(ref.file_id, ref.name, stored))


def _decoder_path(ref, source, stack) -> str:
    """A path for a user's decoder: the record's own, or a temporary file of
    its decoded bytes."""
    if isinstance(source, str):
        return source
    import tempfile

    tmp = stack.enter_context(tempfile.NamedTemporaryFile(prefix="st-record-"))
    tmp.write(source.to_pybytes())
    tmp.flush()
    return tmp.name


def _stat(ref) -> None:
    """The revealed file must still be there, whole."""
    try:
        st = os.stat(ref.path)
    except FileNotFoundError:
        raise GetLocalError(f"record {ref.name!r} of {ref.file}, revealed at {ref.path}, is gone: the peer's "
                            "node lost it or the file was deleted during the scan; run the scan again") from None
    if st.st_size != ref.size:
        raise ChecksumError(f"record {ref.name!r} of {ref.file} at {ref.path} has {st.st_size} bytes, its "
                            f"peer revealed {ref.size}")


def unit_schemas(unit: ReadUnit, opts: ScanOptions) -> list[SchemaSource]:
    """The distinct schemas of a unit's records, each with the first record
    that has it (read from headers: Parquet footers, IPC schema messages, the
    first block of CSV/JSON). With a ``decoder`` only the unit's first
    record is decoded; the others are checked against the result as they
    are read."""
    out: dict[pa.Schema, str] = {}
    for ref in unit.records:
        _stat(ref)
        src = _source(ref, opts)
        if opts.decoder is not None:
            with contextlib.ExitStack() as stack:
                return [SchemaSource(opts.decoder(ref.name, _decoder_path(ref, src, stack)).schema, ref.name)]
        s = RAW_SCHEMA if opts.format == "raw" else record_schema(ref.name, src, opts.format)
        if s not in out:
            out[s] = ref.name
    return [SchemaSource(s, n) for s, n in out.items()]


def read_unit(unit: ReadUnit, schema: pa.Schema, columns: list[str] | None, filter, opts: ScanOptions,
              counts: dict | None = None) -> Iterator[pa.RecordBatch]:
    """Stream a unit's records as batches of ``project(schema, columns)``
    (plus a ``path`` column, ``/file/record``, with ``include_paths``).

    ``counts``, if given, is filled with ``{file: records read}`` for the
    exactly-once check.

    Raises
    ------
    GetLocalError
        A revealed record file is gone.
    ChecksumError
        A record file's size is not what its peer revealed.
    RecordFormatError, SchemaConflictError
        A record does not decode, or does not fit ``schema``.
    """
    out_schema = project(schema, columns)
    if opts.include_paths:
        out_schema = out_schema.append(pa.field(PATH_COLUMN, pa.string()))
    for ref in unit.records:
        _stat(ref)
        src = _source(ref, opts)
        if opts.decoder is not None:
            with contextlib.ExitStack() as stack:
                t = opts.decoder(ref.name, _decoder_path(ref, src, stack))
            if filter is not None:
                t = t.filter(filter)
            batches = (conform(b, schema, ref.name) for b in t.to_batches())
            if columns is not None:
                batches = (b.select(columns) for b in batches)
        else:
            fmt = "raw" if opts.format == "raw" else (opts.format or detect_file(ref.name, src))
            batches = scan_record(ref.name, src, fmt, schema, columns, filter, opts.batch_size)
        for b in batches:
            if opts.include_paths:
                b = b.append_column(PATH_COLUMN, pa.array([f"{ref.file}/{ref.name}"] * b.num_rows, pa.string()))
            yield b
        if counts is not None:
            counts[ref.file] = counts.get(ref.file, 0) + 1


def read_unit_table(unit: ReadUnit, schema: pa.Schema, columns, filter, opts: ScanOptions) -> pa.Table:
    """:func:`read_unit` gathered into one table (a Dask partition)."""
    out_schema = project(schema, columns)
    if opts.include_paths:
        out_schema = out_schema.append(pa.field(PATH_COLUMN, pa.string()))
    return pa.Table.from_batches(list(read_unit(unit, schema, columns, filter, opts)), schema=out_schema)

"""Record formats and record schemas, shared by the writers and the readers.

A record's format is recognised by its magic bytes first, then by its
name's extension:

============  ==========================  ===============================
format        magic bytes                 extensions
============  ==========================  ===============================
``parquet``   ``PAR1``                    ``.parquet .pq .parq``
``arrow``     ``ARROW1`` (IPC file)       ``.arrow .feather .ipc``
``arrows``    ``ff ff ff ff`` (IPC        ``.arrows``
              stream)
``csv``       -                           ``.csv .tsv`` (also gzip'd)
``json``      -                           ``.json .jsonl .ndjson`` (JSON lines)
``raw``       anything else               -
============  ==========================  ===============================

The writer keeps each record's schema in the infofile at commit time
(:func:`written_schema`; docs/infofile.md, "Record schemas"), so that a scan
learns the schema of a million records from one SQL query instead of reading
every record's header (issue "Many small records at full speed"). The
schema written is the one a scan would read from the record's header
(:func:`schema_of`, the same code), so the two never disagree.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

from st_py.errors import RecordFormatError

if TYPE_CHECKING:
    import pyarrow as pa

FORMATS = ("parquet", "arrow", "arrows", "csv", "json", "raw")


@functools.cache
def _raw_schema():
    import pyarrow as pa

    return pa.schema([("record", pa.string()), ("data", pa.binary())])


@functools.cache
def _raw_schema_blob() -> bytes:
    return _raw_schema().serialize().to_pybytes()


def __getattr__(name: str):
    # pyarrow is imported when a schema is first needed, not with the client
    if name == "RAW_SCHEMA":  # a record of no known format, as a scan with format="raw" reads it
        return _raw_schema()
    if name == "RAW_SCHEMA_BLOB":
        return _raw_schema_blob()
    raise AttributeError(name)


HEAD_BYTES = 8

_EXTENSIONS = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".parq": "parquet",
    ".arrow": "arrow",
    ".feather": "arrow",
    ".ipc": "arrow",
    ".arrows": "arrows",
    ".csv": "csv",
    ".tsv": "csv",
    ".json": "json",
    ".jsonl": "json",
    ".ndjson": "json",
}

# Record names readers skip unless asked for every record (format="raw" or a
# decoder), as pyarrow.dataset's ignore_prefixes: "_SUCCESS", ".crc", ...
IGNORE_PREFIXES = ("_", ".")


def ignored(name: str) -> bool:
    """Is record ``name`` one that format-detecting scans skip (its last
    path component starts with ``_`` or ``.``)?"""
    return name.rsplit("/", 1)[-1].startswith(IGNORE_PREFIXES)


def extension_format(name: str) -> str | None:
    """The format a record name's extension names (``.gz``, ``.bz2`` and
    ``.zst`` looked through), or None."""
    base = name.lower()
    for comp in (".gz", ".bz2", ".zst"):
        if base.endswith(comp):
            base = base[: -len(comp)]
            break
    return _EXTENSIONS.get(os.path.splitext(base)[1])


def detect(name: str, head: bytes) -> str:
    """The format of a record from its first bytes (at least 8), then its
    name's extension; ``"raw"`` when neither tells."""
    if head.startswith(b"PAR1"):
        return "parquet"
    if head.startswith(b"ARROW1"):
        return "arrow"
    if head.startswith(b"\xff\xff\xff\xff") or (len(head) >= 8 and head[4:8] == b"\xff\xff\xff\xff"):
        return "arrows"
    ext = extension_format(name)
    if ext in ("csv", "json"):
        return ext
    return "raw"


def detect_source(name: str, source) -> str:
    """The format of record ``name`` (:func:`detect`) from the first bytes
    of ``source``: a local path (str), a bytes-like object (bytes, a
    ``pyarrow.Buffer``) or a seekable file (read/seek/tell, e.g. a
    ``pyarrow.NativeFile`` over a striped object), whose position is kept.
    The one place a record's format is told from its bytes; every reader
    and writer asks here."""
    if isinstance(source, str):
        with open(source, "rb") as fh:
            return detect(name, fh.read(HEAD_BYTES))
    if hasattr(source, "seek"):
        pos = source.tell()
        head = source.read(HEAD_BYTES)
        source.seek(pos)
        return detect(name, bytes(head))
    return detect(name, bytes(memoryview(source)[:HEAD_BYTES]))


def dataset_format(name: str, fmt: str):
    """The ``pyarrow.dataset`` file format that reads a record of ``fmt``
    (a ``.tsv`` record with tab delimiters)."""
    import pyarrow.dataset as ds

    if fmt == "parquet":
        return ds.ParquetFileFormat()
    if fmt == "arrow":
        return ds.IpcFileFormat()
    if fmt == "csv":
        import pyarrow.csv as pacsv

        delim = "\t" if ".tsv" in name.lower() else ","
        return ds.CsvFileFormat(parse_options=pacsv.ParseOptions(delimiter=delim))
    if fmt == "json":
        return ds.JsonFileFormat()
    raise ValueError(f"no dataset format for {fmt!r}")


def schema_of(name: str, source, fmt: str) -> "pa.Schema":
    """The schema of one record from its header where the format has one
    (Parquet footer, Arrow IPC schema message); CSV and JSON are inferred
    from their first block, as ``pyarrow.dataset`` does.

    Parameters
    ----------
    source : str or pyarrow.Buffer
        A local path or the record's (decoded) bytes.

    Raises
    ------
    RecordFormatError
        If the record does not decode as ``fmt``.
    FileNotFoundError
        ``source`` is a path that is gone.
    """
    import pyarrow as pa

    try:
        if fmt == "raw":
            return _raw_schema()
        if fmt == "arrows":
            src = pa.memory_map(source) if isinstance(source, str) else pa.BufferReader(source)
            with src:
                return pa.ipc.open_stream(src).schema
        if isinstance(source, str):
            import pyarrow.fs as pafs

            return dataset_format(name, fmt).make_fragment(source, filesystem=pafs.LocalFileSystem()).physical_schema
        return dataset_format(name, fmt).make_fragment(source).physical_schema
    except (pa.ArrowException, OSError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise RecordFormatError(f"record {name!r} does not decode as {fmt}: {e}", name, fmt) from e


def written_schema(name: str, data: bytes) -> tuple[str, bytes] | None:
    """What the writer keeps in the infofile about record ``name`` with
    (plaintext) bytes ``data``: ``(format, Arrow IPC-serialized schema)``,
    ``("raw", RAW_SCHEMA)`` for a record of no known format, or None (a
    name readers skip, or bytes that do not decode as their format: the scan
    then reads its header and reports the error, as before)."""
    if ignored(name):
        return None
    fmt = detect(name, bytes(data[:HEAD_BYTES]))
    if fmt == "raw":
        return "raw", _raw_schema_blob()
    import pyarrow as pa

    try:
        schema = schema_of(name, pa.py_buffer(data), fmt)
    except RecordFormatError:
        return None
    return fmt, schema.serialize().to_pybytes()


def written_schemas(names: list[str], datas: list[bytes]) -> list[tuple[str, bytes] | None]:
    """:func:`written_schema` of each record ``names[i]`` with bytes
    ``datas[i]`` (a write batch's slice), the same answers in one call: a
    record of no known format (no magic bytes, no ``.csv``/``.json``-like
    extension, a name readers do not skip) is told raw by a few inline
    tests instead of the calls of :func:`detect`; every other record goes
    through :func:`written_schema`. Pure; thread-safe."""
    out: list[tuple[str, bytes] | None] = []
    raw = None
    ff = b"\xff\xff\xff\xff"
    for name, data in zip(names, datas):
        base = name[name.rfind("/") + 1 :]
        if base[:1] in IGNORE_PREFIXES:
            out.append(None)
            continue
        head = bytes(data[:HEAD_BYTES])
        if (
            head[:4] == b"PAR1"
            or head[:6] == b"ARROW1"
            or head[:4] == ff
            or head[4:8] == ff
            or ("." in base and extension_format(name) is not None)
        ):
            out.append(written_schema(name, data))
            continue
        if raw is None:
            raw = ("raw", _raw_schema_blob())
        out.append(raw)
    return out


def written_object_schema(name: str, head: bytes, tail: bytes) -> tuple[str, bytes] | None:
    """:func:`written_schema` of a striped object from its first stripe
    (``head``) and its last bytes (``tail``, at least the last stripe): a
    Parquet object's schema from its footer in ``tail``, an Arrow IPC
    file's from its schema message after the magic, CSV, JSON and IPC
    streams from their first block; None when these bytes do not tell."""
    import struct

    if ignored(name):
        return None
    fmt = detect(name, bytes(head[:HEAD_BYTES]))
    if fmt == "raw":
        return "raw", _raw_schema_blob()
    import pyarrow as pa

    try:
        if fmt == "parquet":
            if len(tail) < 12 or tail[-4:] != b"PAR1":
                return None
            footer = struct.unpack("<I", tail[-8:-4])[0]
            if footer + 8 > len(tail):
                return None
            schema = schema_of(name, pa.py_buffer(b"PAR1" + bytes(tail[-(footer + 8) :])), fmt)
        elif fmt == "arrow":  # "ARROW1" and 2 bytes of padding, then the stream's schema message
            schema = pa.ipc.open_stream(pa.BufferReader(pa.py_buffer(head)[8:])).schema
        else:
            schema = schema_of(name, pa.py_buffer(head), fmt)
    except (RecordFormatError, pa.ArrowException, OSError):
        return None
    return fmt, schema.serialize().to_pybytes()


def load_schema(blob: bytes) -> "pa.Schema":
    """An Arrow schema from its IPC serialization (:func:`written_schema`).

    Raises
    ------
    pyarrow.ArrowInvalid
        ``blob`` is not a serialized schema.
    """
    import pyarrow as pa

    return pa.ipc.read_schema(pa.py_buffer(blob))

"""What a read task does on a peer's node: learn its records' schemas, and
stream its records as Arrow batches (paper 3.7: "receives a list of local
UNIX file pathnames. It then processes each in turn").

Both functions take only plain picklable arguments (a :class:`ReadUnit`, a
schema, column names, a filter expression), so they run unchanged in a Ray
read task and a Dask task.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa

from st_py.client.getlocal import read_verified
from st_py.errors import ChecksumError, CopyGoneError

from .formats import (
    RAW_SCHEMA,
    Decoder,
    RecordFormatError,
    Source,
    detect,
    detect_source,
    project,
    record_schema,
    scan_record,
)
from .partitioning import Partitions, with_values
from .readplan import ReadUnit
from .schemas import SchemaConflictError, SchemaSource, conform

PATH_COLUMN = "path"
GENERATION_COLUMN = "generation"
log = logging.getLogger("st.scan")


@dataclass(frozen=True)
class ScanOptions:
    """How to read records: ``format`` forces one (``"raw"``: every record as
    ``(record, data)``), ``decoder`` is a user's ``fn(name, path) -> Table``.

    ``tracker`` is the tracker's ``host:port``: read tasks use it to read
    striped objects (ranged GETs of their stripes) and to fetch, by GET, a
    record whose local copy fails its CRC-32C check."""

    format: str | None = None
    decoder: Decoder | None = None
    include_paths: bool = False
    # A ``generation`` column (int64): the generation each row's file was
    # read at (docs/snapshots.md, "Provenance"), from ``generations``
    # (``ScanPlan.generations`` as pairs), set once the scan is planned.
    include_generation: bool = False
    generations: tuple[tuple[str, int], ...] = ()
    batch_size: int = 131_072
    # For records of encrypted files: the key, when the driver was given one
    # (it then travels with the tasks); None: each task loads it from its
    # own environment ($STORETORRENT_KEY_FILE, ...; docs/filters.md).
    encryption_key: bytes | None = None
    tracker: str | None = None
    api_key: str | None = None
    # Check each local copy's CRC-32C before parsing it (reads it whole).
    # False: parse the local path directly (Parquet then reads only the
    # column chunks it needs); only for disks that check their own data
    # (ZFS, ...) or to measure the check's cost (bench/analysis.py).
    verify: bool = True
    # The scan's hive partition columns (``ScanPlan.partitions``, set by the
    # reader once it has the records' schema): each record's rows get its
    # values, columns of the schema the read tasks are given. None: none.
    partitions: Partitions | None = None


def out_fields(opts: ScanOptions) -> list[pa.Field]:
    """The columns a scan adds after the records' own: ``path`` with
    ``include_paths``, then ``generation`` with ``include_generation``."""
    out = []
    if opts.include_paths:
        out.append(pa.field(PATH_COLUMN, pa.string()))
    if opts.include_generation:
        out.append(pa.field(GENERATION_COLUMN, pa.int64()))
    return out


def with_out_fields(schema: pa.Schema, opts: ScanOptions) -> pa.Schema:
    """``schema`` with :func:`out_fields` appended."""
    for f in out_fields(opts):
        schema = schema.append(f)
    return schema


def _tagged(b: pa.RecordBatch, ref, opts: ScanOptions) -> pa.RecordBatch:
    """Batch ``b`` of record ``ref``'s rows with the columns of :func:`out_fields`."""
    if opts.include_paths:
        b = b.append_column(PATH_COLUMN, pa.array([f"{ref.file}/{ref.name}"] * b.num_rows, pa.string()))
    if opts.include_generation:
        g = dict(opts.generations)[ref.file]
        b = b.append_column(GENERATION_COLUMN, pa.array([g] * b.num_rows, pa.int64()))
    return b


SCAN_STATS = {"records_verified": 0, "checksum_fallbacks": 0, "gone_fallbacks": 0, "objects_read": 0}
"""Counters of this process's read tasks: local copies read and checked
against their CRC-32C, copies that failed it and were read by GET from
another copy instead, striped objects read."""

_chains: dict = {}  # (filters, key check) -> FilterChain, per process (a chain may be shared by threads)
_open_files = threading.local()  # per thread: _ThreadFiles {(tracker, file): StFile}


class _ThreadFiles(dict):
    """One thread's open handles; closed when the thread ends (its
    ``threading.local`` storage is released), so a pool's threads that
    come and go (Dask's, a user's) leave no sockets behind, and at the
    interpreter's exit (:func:`_close_all_at_exit`) those of threads that
    live to the end: the main thread's (Dask's ``scheduler="sync"``), whose
    storage Python releases only after extension modules may be gone
    (``nanobind: leaked instance`` of the connections' native parts)."""

    def __del__(self):
        self.close_all()

    def close_all(self) -> None:
        """Close and forget every handle (a handle that fails to close is dropped)."""
        while self:
            _, f = self.popitem()
            try:
                f.close()
            except Exception:  # noqa: BLE001 (a thread's end: nothing left to tell)
                pass


# every thread's, for the exit (by id: a dict is not hashable)
_every_files: weakref.WeakValueDictionary[int, _ThreadFiles] = weakref.WeakValueDictionary()


def _close_all_at_exit() -> None:
    """At the interpreter's exit, after non-daemon threads were joined:
    close every thread's read-task handles while the native extension is
    still there."""
    for files in list(_every_files.values()):
        files.close_all()


atexit.register(_close_all_at_exit)


def _stfile(opts: ScanOptions, file: str, as_of: int | None = None):
    """An open handle on ``file`` (as of generation ``as_of``, if given:
    the state the scan reads) for this thread, kept while the thread lives,
    as a read task's connections to the peers are."""
    files = getattr(_open_files, "files", None)
    if files is None:
        files = _open_files.files = _ThreadFiles()
        _every_files[id(files)] = files
    key = (opts.tracker, file, as_of)
    f = files.get(key)
    if f is None:
        from st_py.client.client import Client

        c = Client(opts.tracker, api_key=opts.api_key, encryption_key=opts.encryption_key)
        f = files[key] = c.open(file, as_of=as_of)
    return f


def _decode(ref, opts: ScanOptions, stored: bytes) -> bytes:
    from st_py.core.filters import FilterChain, load_key

    k = (ref.filters, ref.key_check, ref.file)
    chain = _chains.get(k)
    if chain is None:
        key = opts.encryption_key if opts.encryption_key is not None else load_key()
        chain = _chains[k] = FilterChain(ref.filters, key, ref.file, ref.key_check)
    return chain.decode(ref.file_id, ref.name, stored)


def _object_source(ref, opts: ScanOptions) -> Source:
    """A striped object (docs/striping.md): a Parquet object as a seekable
    file whose reads fetch only the stripes they touch (footer, then the
    column chunks of the row groups kept), anything else whole."""
    f = _stfile(opts, ref.file, ref.as_of)
    reader = f.open(ref.name)
    head = reader.read(8)
    fmt = opts.format or (None if opts.decoder is not None else detect(ref.name, head))
    SCAN_STATS["objects_read"] += 1
    if fmt == "parquet":
        reader.seek(0)
        return pa.PythonFile(reader, mode="r")
    reader.close()
    return pa.py_buffer(f.get(ref.name))


def _source(ref, opts: ScanOptions, verify: bool = True) -> Source:
    """What to parse for ``ref``: the bytes of its local copy, checked
    against the copy's size and CRC-32C (paper 3.6's end-to-end check,
    docs/reliability.md) and decoded with the file's filters; a copy that
    fails the check is reported in the log and ``SCAN_STATS``, and the
    record is read by GET from another copy (GET checks it too), so a scan
    never turns bad bytes into rows. With ``verify`` False (schema
    inference: headers only), the local path of an unfiltered record.

    A copy gone since its peer revealed it (moved to quarantine by the
    peer's verifier, moved by a drain, deleted: :class:`CopyGoneError`) is
    read by GET the same way, as of the plan's generation, and counted in
    ``SCAN_STATS["gone_fallbacks"]``.

    Raises
    ------
    RecordUnavailableError
        No copy passes the check.
    RecordNotFoundError
        A gone copy's record is not readable by GET as of the plan's
        generation either (deleted and not kept for it).
    """
    if ref.kind == "object":
        return _object_source(ref, opts)
    if not (verify and opts.verify) and not ref.filters:
        try:
            _stat(ref)
        except CopyGoneError as e:
            return pa.py_buffer(_gone_bytes(ref, opts, e))
        return ref.path
    return pa.py_buffer(_checked_bytes(ref, opts))


def _checked_bytes(ref, opts: ScanOptions) -> bytes:
    """A record's bytes (decoded with the file's filters) from its local
    copy checked against its size and CRC-32C, or by GET from another copy
    when the check fails (reported to the tracker) or the copy is gone; see
    :func:`_source`."""
    try:
        stored = read_verified(ref.path, ref.size, ref.name, ref.file)
    except ChecksumError as e:
        SCAN_STATS["checksum_fallbacks"] += 1
        log.warning("%s; reading it by GET from another copy", e)
        f = _stfile(opts, ref.file, ref.as_of)
        f.report_bad_copy(ref.name, ref.peer, str(e))  # best effort
        return f.get(ref.name)  # decoded, CRC-checked
    except CopyGoneError as e:
        return _gone_bytes(ref, opts, e)
    SCAN_STATS["records_verified"] += 1
    return _decode(ref, opts, stored) if ref.filters else stored


def _gone_bytes(ref, opts: ScanOptions, gone: CopyGoneError) -> bytes:
    """A record whose revealed copy is gone, by GET as of the plan's
    generation (decoded, CRC-checked); the GET's error, if any, names the
    gone copy as its cause."""
    SCAN_STATS["gone_fallbacks"] += 1
    log.warning("%s; reading it by GET", gone)
    try:
        return _stfile(opts, ref.file, ref.as_of).get(ref.name)
    except Exception as e:
        raise e from gone


def _decoder_path(ref, source, stack) -> str:
    """A path for a user's decoder: the record's own (its bytes checked),
    or a temporary file of its decoded bytes."""
    if isinstance(source, str):
        return source
    if ref.kind == "record" and not ref.filters:
        return ref.path  # just read and checked
    import tempfile

    if isinstance(source, pa.NativeFile):
        source.seek(0)
        source = source.read_buffer()
    tmp = stack.enter_context(tempfile.NamedTemporaryFile(prefix="st-record-"))
    tmp.write(source.to_pybytes())
    tmp.flush()
    return tmp.name


def _stat(ref) -> None:
    """The revealed file must still be there, whole."""
    try:
        st = os.stat(ref.path)
    except FileNotFoundError:
        raise CopyGoneError(
            f"record {ref.name!r} of {ref.file}, revealed at {ref.path}, is gone since its peer revealed it",
            record=ref.name,
            file=ref.file,
            path=ref.path,
        ) from None
    if st.st_size != ref.size:
        raise ChecksumError(
            f"record {ref.name!r} of {ref.file} at {ref.path} has {st.st_size} bytes, its peer revealed {ref.size}",
            record=ref.name,
            file=ref.file,
            path=ref.path,
        )


def unit_schemas(unit: ReadUnit, opts: ScanOptions) -> list[SchemaSource]:
    """The distinct schemas of a unit's records, each with the first record
    that has it (read from headers: Parquet footers, IPC schema messages, the
    first block of CSV/JSON). With a ``decoder`` only the unit's first
    record is decoded; the others are checked against the result as they
    are read."""
    out: dict[pa.Schema, str] = {}
    for ref in unit.records:
        if opts.format == "raw":
            s = RAW_SCHEMA
        elif opts.decoder is not None:
            src = _source(ref, opts)
            with contextlib.ExitStack() as stack:
                return [SchemaSource(opts.decoder(ref.name, _decoder_path(ref, src, stack)).schema, ref.name)]
        else:
            try:  # the header only, from the local path ...
                s = record_schema(ref.name, _source(ref, opts, verify=False), opts.format)
            except RecordFormatError:  # ... unless it does not decode: is the copy bad?
                s = record_schema(ref.name, _source(ref, opts), opts.format)
        if s not in out:
            out[s] = ref.name
    return [SchemaSource(s, n) for s, n in out.items()]


def options_for(plan, opts: ScanOptions) -> ScanOptions:
    """``opts`` for reading ``plan``: a format-detecting scan of records that
    were all written as records of no known format (their kept schemas say
    so) reads them as ``format="raw"`` does, many records per batch, instead
    of a one-row batch each."""
    import dataclasses

    if (
        opts.format is None
        and opts.decoder is None
        and plan.kept_schemas
        and not plan.unknown_schemas
        and all(fmt == "raw" for fmt, _, _ in plan.kept_schemas)
    ):
        return dataclasses.replace(opts, format="raw")
    return opts


def kept_schema_sources(plan, opts: ScanOptions) -> tuple[list[SchemaSource], list[ReadUnit]] | None:
    """The schemas kept in the infofiles at write time for a planned scan
    (no record read), and the read units cut down to the records whose
    schema was not kept (their headers still have to be read); None when
    the kept schemas do not apply (a ``decoder``, or ``format`` forcing
    another format than the records were written as)."""
    from st_py.core.record_format import load_schema

    if opts.decoder is not None:
        return None
    if opts.format is not None and any(fmt != opts.format for fmt, _, _ in plan.kept_schemas):
        return None
    sources = [SchemaSource(load_schema(blob), first) for _, blob, first in plan.kept_schemas]
    units = []
    if plan.unknown_schemas:
        for u in plan.units:
            files = [f.file for f in u.files]
            keep = [k for k, (i, n) in enumerate(zip(u.file_of, u.names)) if (files[i], n) in plan.unknown_schemas]
            if keep:
                units.append(u.select(keep))
    return sources, units


def read_unit(
    unit: ReadUnit, schema: pa.Schema, columns: list[str] | None, filter, opts: ScanOptions, counts: dict | None = None
) -> Iterator[pa.RecordBatch]:
    """Stream a unit's records as batches of ``project(schema, columns)``
    (plus a ``path`` column, ``/file/record``, with ``include_paths``, and
    a ``generation`` column with ``include_generation``).

    ``counts``, if given, is filled with ``{file: records read}`` for the
    exactly-once check.

    Raises
    ------
    RecordUnavailableError
        A record whose local copy fails its CRC-32C check, or is gone since
        it was revealed, has no good copy elsewhere either (never a row from
        bad bytes, never a row left out).
    RecordNotFoundError
        A gone copy's record is not readable as of the plan's generation.
    RecordFormatError, SchemaConflictError
        A record does not decode, or does not fit ``schema``.
    """
    if opts.format == "raw" and opts.decoder is None:
        yield from _raw_batches(unit, columns, filter, opts, counts)
        return
    out = _Coalescer(opts.batch_size)
    run: list = []  # small Parquet records in memory, scanned together
    for ref, src in _sources(unit.records, opts):
        if (
            opts.decoder is None
            and isinstance(src, pa.Buffer)
            and src.size <= SMALL_RECORD_BYTES
            and (opts.format or detect_source(ref.name, src)) == "parquet"
        ):
            run.append((ref, src))
            if len(run) >= PARQUET_RUN:
                yield from _parquet_run(run, schema, columns, filter, opts, out, counts)
                run = []
            continue
        if run:
            yield from _parquet_run(run, schema, columns, filter, opts, out, counts)
            run = []
        part = opts.partitions.values(ref.file, ref.name) if opts.partitions is not None else None
        if opts.decoder is not None:
            with contextlib.ExitStack() as stack:
                t = opts.decoder(ref.name, _decoder_path(ref, src, stack))
            if part:
                t = with_values(t, part)
            if filter is not None:
                t = t.filter(filter)
            batches: Iterator[pa.RecordBatch] = (conform(b, schema, ref.name) for b in t.to_batches())
            if columns is not None:
                batches = (b.select(columns) for b in batches)
        else:
            fmt = "raw" if opts.format == "raw" else (opts.format or detect_source(ref.name, src))
            batches = scan_record(ref.name, src, fmt, schema, columns, filter, opts.batch_size, part)
        for b in batches:
            yield from out.add(_tagged(b, ref, opts))
        if counts is not None:
            counts[ref.file] = counts.get(ref.file, 0) + 1
    if run:
        yield from _parquet_run(run, schema, columns, filter, opts, out, counts)
    yield from out.flush()


PARQUET_RUN = 256  # small Parquet records scanned as one in-memory dataset


def _parquet_run(
    run: list, schema: pa.Schema, columns, filter, opts: ScanOptions, out: "_Coalescer", counts: dict | None
) -> Iterator[pa.RecordBatch]:
    """Small Parquet records, already read and checked into memory, scanned
    as one dataset of in-memory fragments (pyarrow's scanner over many
    fragments, threaded, instead of a scanner per record: issue "Many small
    records"). A record with a column the scan's schema lacks, or any
    decoding error, sends the whole run through the per-record path
    (:func:`scan_record`), which names the record; the run's batches are
    held until it is through, so nothing is yielded twice."""
    import pyarrow.dataset as ds

    fmt = ds.ParquetFileFormat()
    held: list[pa.RecordBatch] = []
    parts = opts.partitions
    try:
        if parts is None:
            frags = [fmt.make_fragment(src) for _, src in run]
        else:  # the partition columns materialised from each record's values
            frags = [fmt.make_fragment(src, partition_expression=parts.expression(r.file, r.name)) for r, src in run]
        names = set(schema.names)
        if all(set(f.physical_schema.names) <= names for f in frags):
            dset = ds.FileSystemDataset(frags, schema, fmt)
            tag = opts.include_paths or opts.include_generation
            by_buffer = {src.address: ref for ref, src in run} if tag else {}
            cols = project(schema, columns).names
            scanner = dset.scanner(columns=cols, filter=filter, batch_size=opts.batch_size, use_threads=True)
            for tagged in scanner.scan_batches():
                b = tagged.record_batch
                if not b.num_rows:
                    continue
                b = conform(b, project(schema, columns), run[0][0].name)
                if tag:
                    buf = getattr(tagged.fragment, "buffer", None)
                    ref = by_buffer.get(buf.address) if buf is not None else None
                    if ref is None:
                        raise LookupError("a batch of an unknown fragment")
                    b = _tagged(b, ref, opts)
                held.append(b)
        else:
            held = None  # type: ignore[assignment]
    except (pa.ArrowException, LookupError, SchemaConflictError):
        held = None  # type: ignore[assignment]
    if held is None:  # the per-record path: the same rows, or the error naming the record
        held = [b for ref, src in run for b in _record_batches(ref, src, schema, columns, filter, opts)]
    for b in held:
        yield from out.add(b)
    if counts is not None:
        for ref, _ in run:
            counts[ref.file] = counts.get(ref.file, 0) + 1


def _record_batches(ref, src, schema, columns, filter, opts: ScanOptions):
    part = opts.partitions.values(ref.file, ref.name) if opts.partitions is not None else None
    for b in scan_record(ref.name, src, "parquet", schema, columns, filter, opts.batch_size, part):
        yield _tagged(b, ref, opts)


SMALL_RECORD_BYTES = 1 << 20  # Parquet records up to this size are scanned many at a time (_parquet_run)
RUN_BYTES = 32 << 20  # checked records are read many at a time (one native call), up to this many bytes
RUN_ALIGN = 64  # each record of a run starts here: Arrow's readers use its buffers without a copy


def _runs(refs, opts: ScanOptions) -> list[tuple[int, int, bool]]:
    """Cut ``refs`` into ``(i, j, batched)``: runs of local records read
    and checked by one native call (``batched``), up to :data:`RUN_BYTES`
    (or one larger record), and the records read one by one (striped
    objects, unchecked scans)."""
    out: list[tuple[int, int, bool]] = []
    i = 0
    while i < len(refs):
        if not (opts.verify and refs[i].kind == "record"):
            out.append((i, i + 1, False))
            i += 1
            continue
        j, held = i, 0
        while j < len(refs) and refs[j].kind == "record" and (j == i or held + refs[j].size <= RUN_BYTES):
            held += refs[j].size
            j += 1
        out.append((i, j, True))
        i = j
    return out


def _sources(refs, opts: ScanOptions):
    """``(ref, source)`` of each record, in order: local copies are read and
    checked many at a time (one native call for a run of them, into one
    Arrow buffer, each record 64-byte aligned; issue "Many small records"),
    the next run read ahead in a background thread while this one is
    parsed; striped objects and unchecked records one by one
    (:func:`_source`)."""
    from .batch_read import read_ahead, read_batch

    runs = _runs(refs, opts)

    def read(run: tuple[int, int, bool]):
        i, j, batched = run
        if not batched:
            return None
        return read_batch([r.path for r in refs[i:j]], [r.size for r in refs[i:j]], align=RUN_ALIGN)

    ahead = read_ahead(read, runs)
    try:
        for (i, j, _), got in zip(runs, ahead):
            if got is None:
                for r in refs[i:j]:
                    yield r, _source(r, opts)
                continue
            bad_at = {b[0] for b in got.bad}
            for k, r in enumerate(refs[i:j]):
                if k in bad_at:
                    yield r, pa.py_buffer(_checked_bytes(r, opts))  # raises, or reads a good copy by GET
                    continue
                SCAN_STATS["records_verified"] += 1
                stored = got.slice(k, r.size)
                yield r, (pa.py_buffer(_decode(r, opts, stored.to_pybytes())) if r.filters else stored)
    finally:
        ahead.close()


PASS_BYTES = 1 << 20  # a batch this large is passed on as it is, not copied into a larger one


class _Coalescer:
    """Gathers the small batches of many small records into batches of
    about ``rows`` rows (columns built across records, issue "Many small
    records"), so that an engine gets a few large blocks, not one per
    record. A batch of ``rows`` rows or :data:`PASS_BYTES` bytes is passed
    on as it is (after the ones held, in order): concatenating it would copy
    every byte for no fewer blocks worth having."""

    def __init__(self, rows: int):
        self.rows = max(1, rows)
        self.held: list[pa.RecordBatch] = []
        self.count = 0

    def add(self, b: pa.RecordBatch):
        if b.num_rows >= self.rows or b.nbytes >= PASS_BYTES:  # large enough as it is: no copy
            yield from self.flush()
            yield b
            return
        self.held.append(b)
        self.count += b.num_rows
        if self.count >= self.rows:
            yield from self.flush()

    def flush(self):
        if not self.held:
            return
        held, self.held, self.count = self.held, [], 0
        if len(held) == 1:
            yield held[0]
            return
        t = pa.Table.from_batches(held).combine_chunks()
        yield from t.to_batches()


def _binary_array(datas: list[bytes]) -> pa.Array:
    """A binary array of ``datas`` from one concatenated buffer and its
    offsets (one copy, no per-item conversion). Raw batches stay far below
    2 GiB (``RAW_BATCH_BYTES`` plus one record)."""
    return _binary_array_from(b"".join(datas), [len(d) for d in datas])


RAW_BATCH_BYTES = 16 << 20  # a raw batch holds records up to this many bytes ...
RAW_BATCH_RECORDS = 65_536  # ... and at most this many


def _raw_cuts(sizes: Sequence[int], limit: int) -> list[tuple[int, int]]:
    """The batches ``(i, j)`` of a unit's records: at most ``limit`` records
    and about :data:`RAW_BATCH_BYTES` each."""
    cuts = []
    i = 0
    while i < len(sizes):
        j, held = i, 0
        while j < len(sizes) and j - i < limit and held < RAW_BATCH_BYTES:
            held += sizes[j]
            j += 1
        cuts.append((i, j))
        i = j
    return cuts


def _raw_batches(unit: ReadUnit, columns, filter, opts: ScanOptions, counts: dict | None) -> Iterator[pa.RecordBatch]:
    """``format="raw"``: many records per batch (issue "Many small
    records"): each batch's copies are read and checked (size and CRC-32C,
    as the bytes pass) by one native call into one Arrow buffer that becomes
    the batch's binary column, and its other columns are built across
    records, not as a one-row batch each; the next batch is read ahead in a
    background thread while the engine consumes this one
    (:mod:`st_integrations.batch_read`). A copy that fails the check is read
    by GET from another copy (:func:`_checked_bytes`); a striped object's
    bytes come by ranged GETs."""
    from .batch_read import read_ahead

    cuts = _raw_cuts(unit.sizes, max(1, min(RAW_BATCH_RECORDS, opts.batch_size)))
    ahead = read_ahead(lambda cut: _read_raw_copies(unit, cut[0], cut[1], opts), cuts)
    try:
        for (i, j), got in zip(cuts, ahead):
            b = _raw_batch(unit, i, j, opts, got)
            if counts is not None:
                for k in range(i, j):
                    f = unit.files[unit.file_of[k]].file
                    counts[f] = counts.get(f, 0) + 1
            if filter is not None:
                t = pa.Table.from_batches([b]).filter(filter).combine_chunks()
                if not t.num_rows:
                    continue
                b = t.to_batches()[0]
            if columns is not None:
                b = b.select(list(columns) + [f.name for f in out_fields(opts)])
            yield b
    finally:
        ahead.close()


def _read_raw_copies(unit: ReadUnit, i: int, j: int, opts: ScanOptions):
    """The local copies of the unit's records ``i`` to ``j``, read and
    checked into one buffer (:func:`batch_read.read_batch`); striped objects
    (no path) are left out. Runs in a read-ahead thread."""
    from .batch_read import read_batch

    paths, sizes = unit.paths[i:j], unit.sizes[i:j]
    if all(paths):
        return read_batch(paths, sizes, check=opts.verify)
    local = [k for k, p in enumerate(paths) if p]
    return read_batch([paths[k] for k in local], [sizes[k] for k in local], check=opts.verify)


def _raw_batch(unit: ReadUnit, i: int, j: int, opts: ScanOptions, got) -> pa.RecordBatch:
    """One raw batch (``record``, ``data``[, ``path``]) of the unit's
    records ``i`` to ``j`` from their copies read into ``got`` (a
    :class:`batch_read.Batch` of the local ones), by column: no object per
    record in the common case."""
    paths = unit.paths[i:j]
    files = unit.files
    filtered = any(files[k].filters for k in set(unit.file_of[i:j]))
    local = [k for k, p in enumerate(paths) if p]
    if len(local) == len(paths) and not filtered and not got.bad:  # the common case: the buffer is the column
        SCAN_STATS["records_verified"] += len(paths) if opts.verify else 0
        column = pa.Array.from_buffers(pa.binary(), len(paths), [None, got.binary_offsets(), got.data])
    else:
        bad_at = {local[b[0]] for b in got.bad}
        slot = {k: n for n, k in enumerate(local)}
        datas: list[bytes] = []
        for k in range(len(paths)):
            ref = unit.ref(i + k)
            if ref.kind == "object":
                datas.append(_stfile(opts, ref.file, ref.as_of).get(ref.name))
                SCAN_STATS["objects_read"] += 1
            elif k in bad_at:
                datas.append(_checked_bytes(ref, opts))  # raises, or reads a good copy by GET
            else:
                stored = got.slice(slot[k], ref.size).to_pybytes()
                SCAN_STATS["records_verified"] += 1 if opts.verify else 0
                datas.append(_decode(ref, opts, stored) if ref.filters else stored)
        column = _binary_array(datas)
    arrays = [pa.array(unit.names[i:j], pa.string()), column]
    fields = ["record", "data"]
    if opts.include_paths:
        arrays.append(pa.array(unit.input_files[i:j] if i or j < len(unit) else unit.input_files, pa.string()))
        fields.append(PATH_COLUMN)
    if opts.include_generation:
        gens = dict(opts.generations)
        of_file = [gens[f.file] for f in unit.files]
        arrays.append(pa.array([of_file[k] for k in unit.file_of[i:j]], pa.int64()))
        fields.append(GENERATION_COLUMN)
    return pa.RecordBatch.from_arrays(arrays, names=fields)


def _binary_array_from(data: bytes, sizes: Sequence[int]) -> pa.Array:
    """A binary array over ``data`` cut at ``sizes`` (no copy)."""
    import numpy as np

    offsets = np.zeros(len(sizes) + 1, dtype=np.int32)
    np.cumsum(np.asarray(sizes, dtype=np.int64), out=offsets[1:], dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), len(sizes), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def read_unit_table(unit: ReadUnit, schema: pa.Schema, columns, filter, opts: ScanOptions) -> pa.Table:
    """:func:`read_unit` gathered into one table (a Dask partition)."""
    out_schema = with_out_fields(project(schema, columns), opts)
    return pa.Table.from_batches(list(read_unit(unit, schema, columns, filter, opts)), schema=out_schema)


def record_buffers(refs, opts: ScanOptions) -> Iterator[tuple]:
    """``(ref, pyarrow.Buffer)`` of each of ``refs`` (records revealed to
    this host), in order, as a read task gets them (:func:`_sources`):
    local copies read many at a time by one native call and checked against
    their size and CRC-32C (a bad copy read by GET from another one), the
    file's filters undone; a striped object read whole by ranged GETs of
    its stripes. For a client that keeps the bytes (DuckDB's
    ``records_data``, :mod:`st_integrations.records_data`).

    Raises
    ------
    RecordUnavailableError, RecordNotFoundError
        As :func:`read_unit`.
    """
    for ref, src in _sources(refs, opts):
        if isinstance(src, pa.NativeFile):  # a striped Parquet object, readable by ranges: read it whole
            src.seek(0)
            buf = src.read_buffer()
            src.close()
            yield ref, buf
        elif isinstance(src, str):  # an unchecked local path (not with verify): its bytes
            with open(src, "rb") as fh:
                yield ref, pa.py_buffer(fh.read())
        else:
            yield ref, src

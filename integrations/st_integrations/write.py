"""Writing an engine's output into StoreTorrent as one atomic job.

The protocol, shared by the Ray datasink and Dask's ``to_storetorrent``
(docs/analysis.md):

1. **start** (driver): create the file, or open it (``mode``: ``"error"``,
   the default, refuses a file that holds names; ``"append"`` adds to it;
   ``"overwrite"`` notes the names it holds, to be replaced);
2. **write** (each task, on any node): encode each block as one record named
   ``<prefix>-<task>-<block>.<ext>`` (``format="records"``: each row one
   record, named by its name column, its bytes the data column), stored with rank 0 on the peer of the
   task's own node when it is one of the file's peers (local-first, FreeLoader
   seed 004 section 4.1), and *staged*: stored on every holder, not committed.
   The task returns its records' metadata as plain dicts;
3. **commit** (driver): every task's records in one tracker transaction
   (paper 3.5), so the job's records become visible together or not at all;
   with ``mode="overwrite"`` the same transaction removes the names the file
   held when the job started, so readers see the old result or the new one,
   whole (the old copies are then removed by the peers' scrubber).

A task that fails and is retried writes the same names again (an identical
copy is an idempotent PUT on the peer); only the attempt that returned is
committed, so no record is committed twice. A job that fails commits nothing;
its stored copies are uncommitted and the peers' scrubber removes them, and a
file the job created is deleted.
"""

from __future__ import annotations

import io
import uuid
from dataclasses import dataclass

import pyarrow as pa

from st_py.client.getlocal import local_addresses
from st_py.client.staged import StagedRecords
from st_py.client.write_batch import WriteBatch
from st_py.core.record_names import check_new_name, conflict_error
from st_py.wire.tracker_client import RESTART_GRACE
from st_py.wire.transport import split_addr

EXTENSIONS = {"parquet": "parquet", "arrow": "arrow", "csv": "csv", "json": "jsonl"}
# format="records": each row one record, named by its name column, its bytes the data column
# (issue 41: many small records from an engine, through the write batch path); options
# name_column and data_column (default "name", "data"); a prefix, if given, is a folder of them
RECORDS = "records"
# write_blocks: encoded blocks under SMALL_BLOCK bytes are written as write batches of up to
# BATCH_RECORDS records or BATCH_BYTES bytes; larger ones are queued one by one (pipelined)
SMALL_BLOCK = 256 << 10
BATCH_RECORDS = 1024
BATCH_BYTES = 16 << 20


def encode(table: pa.Table, format: str, **options) -> bytes:
    """One record's bytes: ``table`` in ``format`` (parquet, arrow (IPC
    file), csv, json (JSON lines)); ``options`` go to the format's writer
    (e.g. ``compression="zstd"``, ``row_group_size=`` for Parquet)."""
    if format == "parquet":
        import pyarrow.parquet as pq

        buf = pa.BufferOutputStream()
        pq.write_table(table, buf, **options)
        return buf.getvalue().to_pybytes()
    if format == "arrow":
        buf = pa.BufferOutputStream()
        with pa.ipc.new_file(buf, table.schema, **options) as w:
            w.write_table(table)
        return buf.getvalue().to_pybytes()
    if format == "csv":
        import pyarrow.csv as pacsv

        buf = pa.BufferOutputStream()
        pacsv.write_csv(table, buf, **options)
        return buf.getvalue().to_pybytes()
    if format == "json":
        out = io.StringIO()
        table.to_pandas().to_json(out, orient="records", lines=True, **options)
        return out.getvalue().encode()
    raise ValueError(f"format must be one of {sorted(EXTENSIONS)}, not {format!r}")


@dataclass(frozen=True)
class WriteJob:
    """What a write task needs, as plain picklable data."""

    file: str
    tracker: str
    format: str
    prefix: str
    created: bool
    options: tuple = ()
    mode: str = "error"  # "overwrite": the commit removes every name the file holds then (replace_all)

    def record_name(self, task: int, block: int) -> str:
        """The name of block ``block`` of write task ``task``: ``<prefix>-TTTTT-BBBB.<ext>``."""
        return f"{self.prefix}-{task:05d}-{block:04d}.{EXTENSIONS[self.format]}"


MODES = ("error", "append", "overwrite")


def check_job(
    client, name: str, replication: str = "x2", format: str = "parquet", mode: str = "error"
) -> list[str] | None:
    """The checks :func:`start_job` makes, without creating or changing
    anything: what ``write_storetorrent`` / ``to_storetorrent`` run on the
    driver when they are called, so a user error is raised there, before
    the engine runs a task (Ray would report it as its own internal error).

    Returns
    -------
    list of str or None
        The names the file holds (None: it does not exist yet).

    Raises
    ------
    ValueError
        Unknown format or mode.
    StFileExistsError
        ``mode="error"`` and the file holds names (says how many).
    BadNameError
        The file exists with another replication class, or ``name`` is not a
        valid file name.
    """
    from st_py.core.namespace import normalize
    from st_py.errors import BadNameError, StFileExistsError, StFileNotFoundError

    if format not in EXTENSIONS and format != RECORDS:
        raise ValueError(f"format must be one of {sorted([*EXTENSIONS, RECORDS])}, not {format!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {list(MODES)}, not {mode!r}")
    normalize(name)  # BadNameError for a name no file can have
    try:
        info = client.tracker.open(name)
    except StFileNotFoundError:
        return None
    if info.replication != replication:
        raise BadNameError(
            f"{name} exists with class {info.replication}; a job writing class "
            f"{replication} into it would be {info.replication}: pass replication="
            f"{info.replication!r} or write a new file"
        )
    with client.open(name) as f:
        names = f.names()
    if names and mode == "error":
        raise StFileExistsError(
            f"{name} exists and holds {len(names)} records: pass mode='overwrite' to "
            "replace them with this job's output (atomically), or mode='append' to "
            "add to them"
        )
    return names


def job_prefix(format: str, prefix: str | None) -> str:
    """The record name prefix of a write job: for ``format="records"`` the
    caller's folder (``""``: none; the rows name the records), else the
    caller's or ``part-<8 hex digits>``, new per call. The one rule of the
    Ray and Dask writers (a Ray sink makes it once, on the driver, since its
    write tasks may rebuild the job before :func:`start_job` ran)."""
    if format == RECORDS:
        return prefix.rstrip("/") if prefix else ""
    return prefix or f"part-{uuid.uuid4().hex[:8]}"


def start_job(
    client,
    name: str,
    replication: str = "x2",
    format: str = "parquet",
    prefix: str | None = None,
    est_size: int = 0,
    options: dict | None = None,
    mode: str = "error",
) -> WriteJob:
    """Create file ``name`` (or open it, by ``mode``) for a write job.

    Parameters
    ----------
    mode : {"error", "append", "overwrite"}
        For a file that exists and holds records or objects: ``"error"``
        raises, ``"append"`` adds the job's records to them,
        ``"overwrite"`` replaces them with the job's records in the commit's
        transaction. An existing file without names (left by a job that was
        killed) is written into in every mode.

    Raises
    ------
    ValueError, StFileExistsError, BadNameError
        As :func:`check_job`, which it runs first; ``prefix`` making record
        names the rule refuses (:class:`~st_py.errors.RecordNameRuleError`).
    RecordNotADirectoryError
        ``prefix`` lies below a record of the file (``mode`` append or
        error; a name is a record or a folder, never both).
    NotEnoughPeersError ...
        From the tracker.
    """
    created = False
    prefix = job_prefix(format, prefix)
    if format == RECORDS:
        first = f"{prefix}/x" if prefix else ""
    else:
        first = f"{prefix}-00000-0000.{EXTENSIONS.get(format, format)}"
    if first:
        check_new_name(first)  # the rule for record names, before anything is made (st_py.core.record_names)
    names = check_job(client, name, replication, format, mode)
    if names is None:
        client.create(name, replication=replication, est_size=est_size).close()
        created = True
    elif mode != "overwrite" and first:  # an overwrite removes every name the file holds at its commit
        with client.open(name) as f:  # a prefix below a record: refused here, before any task runs
            hit = f.infofile().tree_conflict(first)
        if hit is not None:
            raise conflict_error(hit[0], name, first, hit[1])
    return WriteJob(
        name,
        client.tracker.address,
        format,
        prefix,
        created,
        tuple(sorted((options or {}).items())),
        mode,
    )


def write_blocks(job: WriteJob, task: int, tables, local_peer: str | None = None) -> StagedRecords:
    """Write each table of ``tables`` as one staged record; returns the
    staged records' metadata (:class:`~st_py.client.staged.StagedRecords`,
    columns of plain data) for :func:`commit_job`."""
    from st_py.client.client import Client

    client = Client(job.tracker)
    try:
        f = client.open_staged(job.file, prefer_peer=local_peer or local_peer_of(client, job.file))
        try:
            # Small blocks go as write batches (StFile.write, docs/client.md; a record that fails
            # raises BatchWriteError and fails the task), large ones pipelined one by one, so the
            # encoding of the next overlaps the sending of this one as before.
            if job.format == RECORDS:
                _write_rows(f, job, tables)
                return f.staged_records()
            batch = WriteBatch()
            for i, t in enumerate(tables):
                if t.num_rows == 0:
                    continue
                data = encode(t, job.format, **dict(job.options))
                if len(data) >= SMALL_BLOCK:
                    f.queue_put(job.record_name(task, i), data)
                    continue
                batch.put(job.record_name(task, i), data)
                if len(batch) >= BATCH_RECORDS or batch.nbytes >= BATCH_BYTES:
                    f.write(batch)
                    batch = WriteBatch()
            f.write(batch)
            return f.staged_records()
        finally:
            f.close()
    finally:
        client.close()


def _write_rows(f, job: WriteJob, tables) -> None:
    """``format="records"``: each row of ``tables`` one staged record, named
    by its name column (under ``job.prefix`` as a folder, if one), its bytes
    the data column, through the write batch path
    (:meth:`StFile.write_table`, BATCH_RECORDS rows a call). Raises
    InvalidOptionError for a missing or mistyped column, BatchWriteError
    for records that failed (the task fails, nothing of the job is committed)."""
    import pyarrow.compute as pc

    opts = dict(job.options)
    name_col, data_col = opts.get("name_column", "name"), opts.get("data_column", "data")
    for t in tables:
        if t.num_rows == 0:
            continue
        if job.prefix and name_col in t.column_names:
            named = pc.binary_join_element_wise(job.prefix + "/", t[name_col].cast(pa.string()), "")
            t = t.set_column(t.column_names.index(name_col), name_col, named)
        for start in range(0, t.num_rows, BATCH_RECORDS):
            f.write_table(t.slice(start, BATCH_RECORDS), name_column=name_col, data_column=data_col)


def local_peer_of(client, file: str) -> str | None:
    """The peer of ``file`` on this host, if exactly one (on a local cluster
    every peer is on this host, so none is preferred)."""
    info = client.tracker.open(file, grace=RESTART_GRACE)  # in a task: a tracker restart is latency
    here = local_addresses()
    mine = [p.addr for p in info.peers if split_addr(p.addr)[0] in here]
    return mine[0] if len(mine) == 1 else None


def commit_job(client, job: WriteJob, staged: list[StagedRecords]) -> int:
    """Commit every task's staged records (what :func:`write_blocks`
    returned) in one transaction. Returns the number of records committed."""
    records = StagedRecords.join(staged)
    if job.mode == "overwrite":  # every name the file holds goes in the same transaction: the last job wins
        return client.commit_staged(job.file, records, replace_all=True)
    if not records:
        return 0
    return client.commit_staged(job.file, records)


def abort_job(client, job: WriteJob) -> None:
    """After a failed job: delete the file if the job created it (its
    records were never committed); staged copies are left to the scrubber."""
    if job.created:
        try:
            client.delete(job.file)
        except Exception:  # best effort: the job's own error is the one to report
            pass

"""Dask DataFrames over StoreTorrent files, lazy and streaming, with
projection and filter pushdown, each partition computed on the Dask worker
of its peer's host (paper 2, 3.7; docs/analysis.md).

    ddf = read_storetorrent("/exp/run1", columns=["a", "b"], filters=[("a", ">", 3)])
    to_storetorrent(ddf, "/exp/out", replication="x2")

Mapping peers to workers, first match wins:

1. a worker whose ``name`` is the peer's address (``dask worker --name
   10.0.0.5:7100``); several named workers on one machine stand for several
   hosts this way;
2. a worker on the peer's host;
3. for a peer on loopback, a worker on this machine.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa

from st_py.client.getlocal import local_addresses
from st_py.wire.transport import split_addr

from .formats import RAW_SCHEMA, check_columns, project
from .partitioning import HIVE, categories
from .readplan import ReadUnit, ScanPlan, plan_scan, prune, with_partitions
from .scan import (
    ScanOptions,
    kept_schema_sources,
    options_for,
    out_fields,
    read_unit_table,
    unit_schemas,
    with_out_fields,
)
from .schemas import SchemaSource, unify

GENERATION_ATTR = "storetorrent_generation"
"""The key of the DataFrame's ``attrs`` (and of its partitions') that holds
the generation read (docs/snapshots.md, "Provenance")."""

DTYPE_BACKENDS = (None, "numpy_nullable", "pyarrow")


def check_dtype_backend(value) -> str | None:
    """``value`` if it is one of :data:`DTYPE_BACKENDS`.

    Raises
    ------
    InvalidOptionError
        (a ``ValueError``) naming the values there are.
    """
    if value in DTYPE_BACKENDS:
        return value
    from st_py.errors import InvalidOptionError

    raise InvalidOptionError(
        f"dtype_backend={value!r} is not known: pass None (NumPy dtypes, as dd.read_parquet), "
        "'numpy_nullable' or 'pyarrow'",
        "dtype_backend",
        value,
    )


def convert_string() -> bool:
    """Dask's ``dataframe.convert-string`` setting (None means on)."""
    import dask

    convert = dask.config.get("dataframe.convert-string")
    return True if convert is None else bool(convert)


def types_mapper(dtype_backend: str | None, convert: bool = True):
    """The ``types_mapper`` of ``pyarrow.Table.to_pandas`` that gives the
    dtypes ``dd.read_parquet`` gives for ``dtype_backend`` (dask
    2026.8: ``dask/dataframe/dask_expr/io/parquet.py``,
    ``_determine_type_mapper``): with ``convert`` (Dask's
    ``dataframe.convert-string``, :func:`convert_string`) strings as
    ``string[pyarrow]`` and dates and decimals as Arrow dtypes; then, for
    ``"numpy_nullable"``, pandas' nullable dtypes (``Int64``, ``Float64``,
    ``boolean``, ...); for ``"pyarrow"``, Arrow dtypes (``int64[pyarrow]``);
    for None, NumPy's (``int64``, ``float64``; an integer column with nulls
    becomes ``float64``, as in pandas; binary columns hold ``bytes``)."""
    import pandas as pd

    nullable = {
        pa.int8(): pd.Int8Dtype(),
        pa.int16(): pd.Int16Dtype(),
        pa.int32(): pd.Int32Dtype(),
        pa.int64(): pd.Int64Dtype(),
        pa.uint8(): pd.UInt8Dtype(),
        pa.uint16(): pd.UInt16Dtype(),
        pa.uint32(): pd.UInt32Dtype(),
        pa.uint64(): pd.UInt64Dtype(),
        pa.bool_(): pd.BooleanDtype(),
        pa.string(): pd.StringDtype(),
        pa.float32(): pd.Float32Dtype(),
        pa.float64(): pd.Float64Dtype(),
    }

    def mapper(t: pa.DataType):
        if convert:
            if t == pa.string() or t == pa.large_string():  # Dask converts both (to_pyarrow_string)
                return pd.StringDtype("pyarrow")
            if t in (pa.date32(), pa.date64()) or pa.types.is_decimal(t):
                return pd.ArrowDtype(t)
            if pa.types.is_binary(t) or pa.types.is_large_binary(t):
                # bytes stay bytes: Dask's convert-string would decode an object column of
                # bytes as UTF-8 strings (cells are still ``bytes`` objects)
                return pd.ArrowDtype(t)
        if dtype_backend == "numpy_nullable":
            return nullable.get(t)
        if dtype_backend == "pyarrow":
            return pd.StringDtype("pyarrow") if t == pa.string() else pd.ArrowDtype(t)
        return None

    return mapper


def _to_pandas(t: pa.Table, dtype_backend: str | None, convert: bool, cats: dict[str, list]):
    """``t`` as pandas, with :func:`types_mapper`'s dtypes and the hive
    partition columns ``cats`` (``{column: known categories}``) as
    categoricals, as ``dd.read_parquet`` gives them."""
    import pandas as pd

    df = t.to_pandas(types_mapper=types_mapper(dtype_backend, convert))
    for name, values in cats.items():
        if name in df.columns:
            index = pd.Index(pa.array(values, t.schema.field(name).type).to_pandas())
            df[name] = df[name].astype(pd.CategoricalDtype(index))
    return df


def _worker_host(addr: str) -> str:
    if addr.startswith("inproc://"):  # a worker thread in this very process
        return "127.0.0.1"
    return addr.split("://", 1)[-1].rsplit(":", 1)[0]


def worker_of_peers(peers: list[str], dclient) -> dict[str, str]:
    """``{peer: worker address}`` by the rules of the module docstring (the
    pinning plugin is given the workers' names, which survive a restart).

    Raises
    ------
    PlacementError
        If a peer's host runs no Dask worker, saying how to start one.
    """
    from .placement import PlacementError

    workers = dclient.scheduler_info(n_workers=-1)["workers"]
    by_name = {str(w.get("name")): a for a, w in workers.items()}
    local = local_addresses()
    out, rr = {}, 0
    for addr in peers:
        if addr in by_name:
            out[addr] = by_name[addr]
            continue
        host, _ = split_addr(addr)
        match = sorted(a for a in workers if _worker_host(a) == host)
        if not match and (host.startswith("127.") or host in local):
            match = sorted(a for a in workers if _worker_host(a) in local or _worker_host(a).startswith("127."))
        if not match:
            raise PlacementError(
                f"no Dask worker runs on the host of peer {addr}: start one there "
                f"(e.g. `dask worker SCHEDULER --name {addr}`)",
                peer=addr,
            )
        out[addr] = match[rr % len(match)]
        rr += 1
    return out


class _ReadPartition:
    """The partition function: one read unit -> a pandas DataFrame with
    the dtypes of ``dtype_backend`` (:func:`types_mapper`) and the hive
    partition columns as categoricals of ``cats``. ``columns`` is pushed
    down by dask's optimizer."""

    def __init__(
        self,
        schema: pa.Schema,
        filter,
        opts: ScanOptions,
        columns: list[str] | None,
        generation=None,
        dtype_backend: str | None = None,
        cats: dict[str, list] | None = None,
        convert: bool = True,
    ):
        self.schema, self.filter, self.opts, self.columns = schema, filter, opts, columns
        self.generation = generation
        self.dtype_backend, self.cats, self.convert = dtype_backend, cats or {}, convert

    def __call__(self, unit: ReadUnit, columns=None):
        if columns is None:  # no projection from dask's optimizer: the reader's own
            columns = self.columns
        added = {f.name for f in out_fields(self.opts)}
        cols = (
            None
            if columns is None
            else [c for c in ([columns] if isinstance(columns, str) else list(columns)) if c not in added]
        )
        t = read_unit_table(unit, self.schema, cols, self.filter, self.opts)
        df = _to_pandas(t, self.dtype_backend, self.convert, self.cats)
        if self.generation is not None:
            df.attrs[GENERATION_ATTR] = self.generation
        return df


def _schemas(unit: ReadUnit, opts: ScanOptions) -> list[SchemaSource]:
    return unit_schemas(unit, opts)


def infer_schema(plan: ScanPlan, opts: ScanOptions, dclient, placement: dict[str, str]) -> pa.Schema:
    """The unified schema of every planned record: the schemas kept in the
    infofiles at write time, and for records written without one, their
    headers, read by one task per peer on its worker (no task when every
    schema was kept).

    Raises
    ------
    SchemaConflictError
        Naming two records that cannot be unified.
    """
    kept = kept_schema_sources(plan, opts)
    sources, todo = kept if kept is not None else ([], plan.units)
    futs = []
    for peer in dict.fromkeys(u.peer for u in todo):
        merged = ReadUnit.of(peer, (r for u in todo if u.peer == peer for r in u.records))
        futs.append(
            dclient.submit(_schemas, merged, opts, workers=[placement[peer]], allow_other_workers=False, pure=False)
        )
    return unify(sources + [s for part in dclient.gather(futs) for s in part] if futs else sources)


def read_storetorrent(
    paths: str | list[str],
    *,
    columns: list[str] | str | None = None,
    filters=None,
    blocksize: int | str | None = "128MiB",
    schema: pa.Schema | None = None,
    include_paths: bool = False,
    format: str | None = None,
    decoder=None,
    tracker: str | None = None,
    client=None,
    as_of=None,
    include_generation: bool = False,
    partitioning: str | None = HIVE,
    dtype_backend: str | None = None,
):
    """Read StoreTorrent files as a lazy ``dask.dataframe.DataFrame``.

    Parameters
    ----------
    paths : str or list of str
        A file (``"/exp/run1"``), a list of files, a directory or a namespace
        glob (``"/exp/*"``).
    columns : list of str, or str, optional
        Columns to read (projection pushdown; later column selections on the
        DataFrame are pushed down too). One column name as a string gives a
        Series of it, as ``dd.read_parquet`` does.
    filters : pyarrow.dataset.Expression or list of tuples, optional
        Rows to keep, as in ``dd.read_parquet`` (DNF tuples such as
        ``[("dep_delay", ">", 60)]``). Parquet records skip row groups by
        their statistics.
    blocksize : int or str, optional
        Target bytes of records per partition (default ``"128MiB"``); each
        partition holds records of one peer.
    schema : pyarrow.Schema, optional
        The records' schema. Without it the schema is inferred from every
        record's header (Parquet footer, IPC schema message, first block of
        CSV/JSON), read on the peers' workers when the DataFrame is built.
    include_paths : bool
        Add a ``path`` column: ``/file/record`` of each row.
    format : str, optional
        Force a format (``"raw"``: every record as ``(record, data)`` rows).
    decoder : callable(name, path) -> pyarrow.Table, optional
        For records in other formats.
    tracker : str, optional
        Tracker ``host:port`` (default ``$STORETORRENT_TRACKER`` / the local cluster).
    client : distributed.Client, optional
        Default: the current Dask client. With none, and every peer of the
        scan on this host, the DataFrame runs on Dask's default (threaded)
        scheduler here; peers on other hosts need a distributed Client.
    as_of : str, int or datetime, optional
        Read the files as of a past state (docs/snapshots.md): a snapshot
        name, a generation or a time (the latest generation committed at or
        before it). The same ``as_of`` for every file of ``paths``: a
        snapshot name and a time resolve per file, each to its own
        generation (a folder snapshot names one per file); a generation
        means that generation of each file. None: the current state.
    include_generation : bool
        Add a ``generation`` column (int64): the generation each row's file
        was read at.
    partitioning : {"hive", None}
        ``"hive"`` (default, as ``dd.read_parquet``): the ``key=value``
        components of the records' paths below ``paths``
        (``carrier=DL/part-0.parquet``) are columns, after the records'
        own, categoricals of their values typed as pyarrow types them
        (int32 or string; ``__HIVE_DEFAULT_PARTITION__`` is null);
        ``filters`` on them leave out the records of other partitions
        before any is opened. None: no partition columns.
    dtype_backend : {None, "numpy_nullable", "pyarrow"}
        The pandas dtypes of the partitions, as ``dd.read_parquet``'s
        argument: None (default) NumPy dtypes (``int64``, ``float64``,
        ``bool``; an integer column with nulls is ``float64``) with strings
        as ``string[pyarrow]``; ``"numpy_nullable"`` pandas' nullable
        dtypes (``Int64``, ...); ``"pyarrow"`` Arrow dtypes
        (``int64[pyarrow]``).

    Returns
    -------
    dask.dataframe.DataFrame or dask.dataframe.Series
        Partitions of at most about ``blocksize`` bytes of records, each
        computed on the worker of its peer's host, with the dtypes of
        ``dtype_backend`` (a Series for ``columns`` given as one name). The
        partitions are pinned by a scheduler plugin (:mod:`st_integrations.engine_compat`);
        on a dask or distributed version it was not tested with, Dask
        places them itself and one WARNING on the ``st.engine_compat``
        logger says so (on several hosts a partition may then fail with
        ``GetLocalError``). ``attrs["storetorrent_generation"]`` (of the
        DataFrame, its meta and each computed partition) is the generation
        read: an int for one file, ``{file: generation}`` for several
        (provenance: cite it, read it again with ``as_of=`` it).

    Raises
    ------
    StFileNotFoundError, RecordsUnavailableError, GetLocalError, SchemaConflictError
    PlacementError
        No Dask worker on a peer's host, or no distributed Client while
        peers are on other hosts (saying how to start one).
    ColumnNotFoundError
        ``columns`` or ``filters`` name a column the records lack (when the
        DataFrame is built), naming it and the columns there are.
    SnapshotNotFoundError, SnapshotExpiredError, InvalidOptionError
        ``as_of`` names no snapshot or time of a file, a state whose history
        is no longer kept, or a generation newer than a file's;
        ``partitioning`` or ``dtype_backend`` is none of its values.

    Notes
    -----
    Safe to call from several threads with one Client: registering the
    plugin runs on the scheduler's event loop.
    """
    import dask.dataframe as dd
    from dask.utils import parse_bytes

    from st_py.client.client import Client
    from st_py.wire.locate import default_tracker

    from .engine_compat import pin_dask_partitions

    dtype_backend = check_dtype_backend(dtype_backend)
    series = columns if isinstance(columns, str) else None
    cols: list[str] | None = [columns] if isinstance(columns, str) else columns
    dclient = client or _current_client()
    tracker = tracker or default_tracker()
    filt = _to_expression(filters)
    dnf = filters if isinstance(filters, list) else None
    opts = ScanOptions(
        format=format,
        decoder=decoder,
        include_paths=include_paths,
        include_generation=include_generation,
        tracker=tracker,
    )
    block = parse_bytes(blocksize) if isinstance(blocksize, str) else blocksize
    with Client(tracker) as c:
        plan = plan_scan(
            c,
            paths,
            block_size=block,
            skip_ignored=format is None and decoder is None,
            as_of=as_of,
            partitioning=partitioning,
        )
    opts = dataclasses.replace(opts, generations=tuple(plan.generations.items()))
    gens = plan.generations
    generation = next(iter(gens.values())) if len(gens) == 1 else gens
    if schema is None:
        opts = options_for(plan, opts)  # records all of no known format: read as raw, many per batch
    if schema is None and opts.format == "raw" and decoder is None:
        schema = RAW_SCHEMA  # fixed: no schema pass, no record opened before the scan
    if dclient is None:
        _check_all_local(plan)
        if schema is None:
            kept = kept_schema_sources(plan, opts)
            sources, todo = kept if kept is not None else ([], plan.units)
            schema = unify(sources + [s for u in todo for s in unit_schemas(u, opts)])
    else:
        placement = worker_of_peers(plan.peers, dclient)
        pin_dask_partitions(dclient, placement)
        if schema is None:
            schema = infer_schema(plan, opts, dclient, placement) if plan.units else project(unify([]), None)
    plan, schema = with_partitions(plan, schema, enabled=opts.format != "raw" or decoder is not None)
    check_columns(schema, cols, dnf if dnf is not None else filt)
    cats = {}
    if plan.partitions is not None:  # known categories: every partition's value, as dd.read_parquet
        cats = categories(plan.partitions, plan.records())
        plan = prune(plan, filt, schema)  # records of partitions the filters rule out: not read
        opts = dataclasses.replace(opts, partitions=plan.partitions)
    out_schema = with_out_fields(project(schema, cols), opts)
    convert = convert_string()  # the driver's setting, for every partition (as dd.read_parquet)
    meta = _to_pandas(out_schema.empty_table(), dtype_backend, convert, cats)
    meta.attrs[GENERATION_ATTR] = generation
    units = plan.units or [ReadUnit("")]
    # The partitions have Dask's string dtypes already (types_mapper), as
    # dd.read_parquet's do, and binary columns Arrow's (so from_map's own
    # conversion of object columns to strings never decodes bytes). No
    # dask.config.set around from_map: an expression built under another
    # convert-string setting than the one it is computed under reaches the
    # scheduler without its ReadUnit in the read task, and the pinning
    # plugin then pins nothing (seen with persist()).
    ddf = dd.from_map(
        _ReadPartition(schema, filt, opts, cols, generation, dtype_backend, cats, convert),
        units,
        meta=meta,
        label="read-storetorrent",
        enforce_metadata=False,
    )
    out = ddf[series] if series is not None else ddf
    out.attrs = {GENERATION_ATTR: generation}
    return out


def _current_client():
    """The current distributed Client, or None (Dask's default scheduler)."""
    try:
        from distributed import get_client

        return get_client()
    except (ImportError, ValueError):
        return None


def _check_all_local(plan: ScanPlan) -> None:
    """Without a distributed Client the partitions run here: every peer of
    the scan must be on this host, or its records' paths are elsewhere."""
    from st_py.client.getlocal import is_local

    from .placement import PlacementError

    remote = [p for p in plan.peers if not is_local(p)]
    if remote:
        raise PlacementError(
            f"peers {', '.join(remote[:3])} are on other hosts and no Dask client is running: "
            "start one first, e.g. `from distributed import Client; client = "
            'Client("SCHEDULER:8786")` with a worker on each storage node',
            peer=remote[0],
        )


def _to_expression(filters):
    """A pyarrow.dataset Expression from an Expression or DNF tuples."""
    if filters is None:
        return None
    import pyarrow.dataset as ds

    if isinstance(filters, ds.Expression):
        return filters
    import pyarrow.parquet as pq

    return pq.filters_to_expression(filters)

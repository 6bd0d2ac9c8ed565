"""Ray Datasets over StoreTorrent files, in the shape of
``ray.data.read_parquet``: planned on the driver, read lazily and streamed by
read tasks pinned to the nodes of the peers that reveal the records (paper 2,
3.7; docs/analysis.md).

    ds = read_storetorrent("/exp/*", columns=["a", "b"], filter=pc.field("a") > 3)
    ds.map_batches(fn).groupby("b").sum("a")

Building the Dataset plans the scan (GET_LOCAL plan, the records each task
reads, the schema) and reads no record data; the schema comes from the
records' headers (Parquet footers, IPC schema messages, the first block of
CSV/JSON) unless ``schema=`` is given, in which case no record is opened.

Mapping peers to Ray nodes (:func:`st_integrations.placement.ray_node_of_peers`):
a node with the custom resource ``st-peer-HOST-PORT``, else the node on the
peer's IP, else (loopback) a node of this machine.
"""

from __future__ import annotations

import dataclasses
import functools

import pyarrow as pa

from .engine_compat import install_ray_task_pinning, ray_task_pinning_fallback
from .formats import RAW_SCHEMA, check_columns, project
from .partitioning import HIVE
from .placement import Placement, PlacementError, check_placement, ray_node_of_peers, ray_pin_args
from .ray_start import start_ray
from .readplan import ReadUnit, ScanPlan, plan_scan, prune, with_partitions
from .scan import ScanOptions, kept_schema_sources, options_for, read_unit, unit_schemas, with_out_fields
from .schemas import SchemaSource, unify

try:
    from ray.data import Datasource as _Datasource
except ImportError:  # Ray is optional
    _Datasource = object  # type: ignore[misc,assignment]


BLOCK_BYTES = 32 << 20  # batches are gathered into blocks of about this size


def _read_fn(unit: ReadUnit, schema: pa.Schema, columns, filter, opts: ScanOptions):
    def read():
        # Many small records make many small batches: gather them into
        # blocks, so that per-block costs (object store, scheduling) stay low.
        buf, size = [], 0
        for b in read_unit(unit, schema, columns, filter, opts):
            buf.append(b)
            size += b.nbytes
            if size >= BLOCK_BYTES:
                yield pa.Table.from_batches(buf)
                buf, size = [], 0
        if buf:
            yield pa.Table.from_batches(buf)

    return read


class StoreTorrentDatasource(_Datasource):
    """A ``ray.data.Datasource`` of planned read units (one ReadTask each).

    ``node_of`` maps each peer to its Ray node id; with ``only_node`` the
    source yields the units of that node only (the ``"node"`` placement).

    Provenance (docs/snapshots.md): :attr:`generation` is the generation
    the scan read (an int for a scan of one file, else ``{file:
    generation}``), :attr:`generations` always the mapping."""

    def __init__(
        self,
        plan: ScanPlan,
        schema: pa.Schema,
        columns,
        filter,
        opts: ScanOptions,
        node_of: dict[str, str],
        only_node: str | None = None,
    ):
        self.plan, self.schema, self.columns, self.filter, self.opts = plan, schema, columns, filter, opts
        self.node_of, self.only_node = node_of, only_node

    @property
    def generations(self) -> dict[str, int]:
        """``{file: generation read}`` (:attr:`ScanPlan.generations`)."""
        return self.plan.generations

    @property
    def generation(self) -> int | dict[str, int]:
        """The generation read: an int when the scan read one file, else
        ``{file: generation}``; read the same state again with ``as_of=``
        it."""
        return generation_of(self.plan)

    def units(self) -> list[ReadUnit]:
        """The read units this datasource reads: all of the plan's, or those
        of the peers on its node (``only_node``)."""
        return [u for u in self.plan.units if self.only_node is None or self.node_of[u.peer] == self.only_node]

    def out_schema(self) -> pa.Schema:
        """The Arrow schema of the blocks read: projected on ``columns``, plus the path column if asked."""
        return with_out_fields(project(self.schema, self.columns), self.opts)

    def estimate_inmemory_data_size(self) -> int:
        """Ray Datasource hook: bytes of the records read (their stored size)."""
        return sum(u.size for u in self.units())

    def get_name(self) -> str:
        """Ray Datasource hook: the source's name in Ray's progress and stats."""
        return "StoreTorrent"

    def get_read_tasks(self, parallelism: int, per_task_row_limit=None, data_context=None):
        """Ray Datasource hook: one ``ReadTask`` per read unit (``parallelism`` is
        not used: the plan decides), each tagged with its peer's Ray node id
        for the pinning hook (engine_compat.py)."""
        from ray.data import ReadTask
        from ray.data.block import BlockMetadata

        tasks = []
        for u in self.units():
            meta = BlockMetadata(num_rows=None, size_bytes=u.size, input_files=tuple(u.input_files), exec_stats=None)
            t = ReadTask(
                _read_fn(u, self.schema, self.columns, self.filter, self.opts),
                meta,
                schema=self.out_schema(),
                per_task_row_limit=per_task_row_limit,
            )
            t.st_node_id = self.node_of[u.peer]  # read by the per-task pinning hook (engine_compat.py)
            tasks.append(t)
        return tasks


def generation_of(plan: ScanPlan) -> int | dict[str, int]:
    """The generation a planned scan reads: an int for one file, else
    ``{file: generation}`` (the shape of ``storetorrent_generation``)."""
    gens = plan.generations
    return next(iter(gens.values())) if len(gens) == 1 else gens


def _schema_task(units: list[ReadUnit], opts: ScanOptions) -> list[SchemaSource]:
    merged = ReadUnit.of(units[0].peer, (r for u in units for r in u.records))
    return unit_schemas(merged, opts)


def infer_schema(plan: ScanPlan, opts: ScanOptions, node_of: dict[str, str]) -> pa.Schema:
    """The unified schema of the planned records: the schemas kept in the
    infofiles at write time, and for records written without one, their
    headers, read by one small task per peer on its node (no task when
    every schema was kept).

    Raises
    ------
    SchemaConflictError
        Naming two records that cannot be unified.
    """
    kept = kept_schema_sources(plan, opts)
    sources, todo = kept if kept is not None else ([], plan.units)
    if todo:
        import ray

        task = ray.remote(_schema_task)
        refs = []
        for peer in dict.fromkeys(u.peer for u in todo):
            units = [u for u in todo if u.peer == peer]
            refs.append(task.options(num_cpus=0, **ray_pin_args(node_of[peer])).remote(units, opts))
        sources += [s for part in ray.get(refs) for s in part]
    return unify(sources)


def read_storetorrent(
    paths: str | list[str],
    *,
    columns: list[str] | None = None,
    filter=None,
    override_num_blocks: int | None = None,
    block_size: int | None = None,
    include_paths: bool = False,
    schema: pa.Schema | None = None,
    format: str | None = None,
    decoder=None,
    tracker: str | None = None,
    ray_remote_args: dict | None = None,
    concurrency: int | None = None,
    placement: Placement = "auto",
    as_of=None,
    include_generation: bool = False,
    partitioning: str | None = HIVE,
):
    """Read StoreTorrent files as a lazy, streaming ``ray.data.Dataset``.

    Parameters
    ----------
    paths : str or list of str
        A file (``"/exp/run1"``), a list of files, a directory or a namespace
        glob (``"/exp/*"``).
    columns : list of str, optional
        Columns to read. Parquet and Arrow IPC records decode only these.
    filter : pyarrow.dataset.Expression, optional
        Rows to keep (``pyarrow.compute.field("x") > 3``). Parquet records
        skip row groups whose statistics cannot match.
    override_num_blocks : int, optional
        Number of read tasks over the whole scan (each peer with records
        gets at least one).
    block_size : int, optional
        Target bytes of records per read task (default 128 MiB): memory is
        bounded by the tasks in flight, not by the file.
    include_paths : bool
        Add a ``path`` column: ``/file/record`` of each row.
    schema : pyarrow.Schema, optional
        The records' schema; without it the schema is unified from every
        record's header when the Dataset is built.
    format : str, optional
        Force a format (``"raw"``: every record as ``(record, data)`` rows).
    decoder : callable(name, path) -> pyarrow.Table, optional
        For records in other formats; must be picklable.
    tracker : str, optional
        Tracker ``host:port`` (default ``$STORETORRENT_TRACKER`` / the local cluster).
    ray_remote_args : dict, optional
        For the read tasks (e.g. ``num_cpus``); placement is StoreTorrent's.
    concurrency : int, optional
        Maximum read tasks running at once.
    placement : {"auto", "task", "node"}
        How read tasks are pinned to their peers' nodes
        (:mod:`st_integrations.placement`). ``"task"``: one read operator,
        each task pinned by a hook into Ray's internals, so maps after the
        read run inside the read task; only on a Ray version in
        ``engine_compat.TESTED``. ``"node"``: one read per node, then
        ``union`` (public API; maps run in separate tasks). ``"auto"``
        (default): ``"task"`` where it is tested, else ``"node"`` with one
        WARNING on the ``st.engine_compat`` logger.
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
        ``"hive"`` (default, as ``ray.data.read_parquet``): the
        ``key=value`` components of the records' paths below ``paths``
        (``carrier=DL/part-0.parquet``) are columns, after the records'
        own, strings as Ray's Parquet reader types them
        (``__HIVE_DEFAULT_PARTITION__`` is null); a ``filter`` on them
        leaves out the records of other partitions before any is opened.
        None: no partition columns.

    Returns
    -------
    ray.data.Dataset
        Blocks of at most about ``block_size`` bytes of records, each read
        on the node of its peer. Its ``storetorrent_generation`` attribute
        (and its datasources' ``generation``) is the generation read: an
        int for one file, ``{file: generation}`` for several (provenance:
        cite it, read it again with ``as_of=`` it).

    Raises
    ------
    StFileNotFoundError, RecordsUnavailableError, GetLocalError, SchemaConflictError
    InvalidOptionError
        (a ``ValueError``) ``placement`` or ``partitioning`` is none of its
        values, raised before anything is planned; or ``as_of`` a
        generation newer than a file's.
    SnapshotNotFoundError, SnapshotExpiredError
        ``as_of`` names no snapshot or time of a file, or a state whose
        history is no longer kept.
    PlacementError
        No Ray node on a peer's host, or ``placement="task"`` on a Ray
        version it was not tested with.
    ColumnNotFoundError
        ``columns`` or ``filter`` name a column the records lack (when the
        Dataset is built), naming the records' columns.
    StrayRecordError
        A record of no known format among records of a known one (names
        starting with ``_`` or ``.`` are skipped; ``format="raw"`` or a
        ``decoder`` read every record).

    Notes
    -----
    Safe to call from several threads once Ray is started: the placement
    hook is installed once, under a lock.
    """
    import ray

    from st_py.client.client import Client
    from st_py.wire.locate import default_tracker

    placement = check_placement(placement)
    tracker = tracker or default_tracker()
    opts = ScanOptions(
        format=format,
        decoder=decoder,
        include_paths=include_paths,
        include_generation=include_generation,
        tracker=tracker,
    )
    with Client(tracker) as c:
        plan = plan_scan(
            c,
            paths,
            block_size=block_size,
            num_blocks=override_num_blocks,
            skip_ignored=format is None and decoder is None,
            as_of=as_of,
            partitioning=partitioning,
            partition_flavor="string",  # Ray's read_parquet: every partition column a string
        )
    opts = dataclasses.replace(opts, generations=tuple(plan.generations.items()))
    if schema is None:
        opts = options_for(plan, opts)  # records all of no known format: read as raw, many per batch
    # Ray is started only for a scan that can run: a plan that fails (dead
    # peers, unknown file) raises without the cost of starting a cluster.
    start_ray()  # unless running; a failed start leaves no process behind
    node_of = ray_node_of_peers(plan.peers)
    if schema is None and opts.format == "raw" and decoder is None:
        schema = RAW_SCHEMA  # fixed: no schema pass, no record opened before the scan
    if schema is None:
        schema = infer_schema(plan, opts, node_of) if plan.units else unify([])
    plan, schema = with_partitions(plan, schema, enabled=opts.format != "raw" or decoder is not None)
    check_columns(schema, columns, filter)  # an unknown column is an error now, not in a read task
    if plan.partitions is not None:
        plan = prune(plan, filter, schema)  # records of partitions the filter rules out: not read
        opts = dataclasses.replace(opts, partitions=plan.partitions)
    args = dict(ray_remote_args or {})
    if placement != "node":
        problem = install_ray_task_pinning()
        if problem is not None and placement == "task":
            raise PlacementError(f"placement='task' is not available: {problem}; use placement='node' or 'auto'")
        if problem is not None:
            ray_task_pinning_fallback(problem)
        placement = "task" if problem is None else "node"
    if placement == "task" or not plan.units:
        src = StoreTorrentDatasource(plan, schema, columns, filter, opts, node_of)
        ds = ray.data.read_datasource(
            src, override_num_blocks=max(1, len(plan.units)), ray_remote_args=args or None, concurrency=concurrency
        )
        ds.storetorrent_generation = generation_of(plan)
        return ds
    branches = []
    for node in sorted(set(node_of[u.peer] for u in plan.units)):
        src = StoreTorrentDatasource(plan, schema, columns, filter, opts, node_of, only_node=node)
        n = len(src.units())
        branches.append(
            ray.data.read_datasource(
                src, override_num_blocks=n, concurrency=concurrency, ray_remote_args=args or None, **ray_pin_args(node)
            )
        )
    ds = functools.reduce(lambda a, b: a.union(b), branches)
    ds.storetorrent_generation = generation_of(plan)
    return ds

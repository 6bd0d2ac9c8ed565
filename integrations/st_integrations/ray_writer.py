"""Writing a Ray Dataset into StoreTorrent: a ``ray.data.Datasink`` whose
job is atomic as a whole (the protocol is in :mod:`st_integrations.write`).

    ds.write_datasink(StoreTorrentDatasink("/exp/out", replication="x2", format="parquet"))
    write_storetorrent(ds, "/exp/out")                       # the same

Each write task stores its blocks as records, rank 0 on the peer of its own
Ray node (a node carrying a ``st-peer-HOST-PORT`` resource, or the peer on
the node's IP); ``on_write_complete`` commits every task's records in one
tracker transaction; ``on_write_failed`` deletes the file if the job created
it. Nothing is visible before the final commit.
"""

from __future__ import annotations

from collections.abc import Iterable

from st_py.client.staged import StagedRecords

from .write import WriteJob, abort_job, check_job, commit_job, job_prefix, start_job, write_blocks

try:
    from ray.data import Datasink as _Datasink
except ImportError:  # Ray is optional; the class is usable only with it
    _Datasink = object  # type: ignore[misc,assignment]


def _node_peer(task_idx: int) -> str | None:
    """The StoreTorrent peer of the Ray node this task runs on, from the
    node's ``st-peer-*`` resources (several peers on one node: by task)."""
    import ray

    from .placement import resource_peer

    node_id = ray.get_runtime_context().get_node_id()
    for n in ray.nodes():
        if n.get("NodeID") == node_id:
            peers = sorted(p for p in (resource_peer(r) for r in n.get("Resources", {})) if p)
            return peers[task_idx % len(peers)] if peers else None
    return None


class StoreTorrentDatasink(_Datasink):
    """A Ray Datasink that writes a Dataset into StoreTorrent file ``name``.

    Parameters
    ----------
    name : str
        The StoreTorrent file; created if missing.
    replication : str
        Replication class of a created file (``"x1"``, ``"x2"``, ``"x3"``).
    format : str
        ``"parquet"`` (default), ``"arrow"``, ``"csv"`` or ``"json"``: one
        record per block, named ``<prefix>-<task>-<block>.<ext>``;
        ``"records"``: each row one record, named by its name column, its
        bytes the data column (``format_options`` ``name_column``,
        ``data_column``; default ``"name"``, ``"data"``), through the write
        batch path (issue 41).
    tracker : str, optional
        Tracker ``host:port`` (default ``$STORETORRENT_TRACKER`` / the local cluster).
    prefix : str, optional
        Record name prefix (default ``part-<8 hex digits>``, new per job);
        with ``"records"`` a folder of the rows' records (default none:
        :func:`~st_integrations.write.job_prefix`).
    min_rows_per_write : int, optional
        Rows per write call, as in Ray's file datasinks.
    format_options : dict, optional
        For the format's writer (e.g. ``{"compression": "zstd"}``).
    mode : {"error", "append", "overwrite"}
        If ``name`` exists and holds records: raise ``StFileExistsError``
        (default), add to them, or replace them atomically (readers see the
        old records or the new ones, whole), as Ray's and Spark's save modes.

    Raises (from ``write_datasink``)
    --------------------------------
    StFileExistsError, BadNameError, NotEnoughPeersError, QuotaExceededError,
    RecordExistsError, PeerError
    """

    def __init__(
        self,
        name: str,
        replication: str = "x2",
        format: str = "parquet",
        *,
        tracker: str | None = None,
        prefix: str | None = None,
        min_rows_per_write: int | None = None,
        format_options: dict | None = None,
        mode: str = "error",
    ):
        from st_py.wire.locate import default_tracker

        self.name, self.replication, self.format = name, replication, format
        # Resolved here, on the driver: write tasks run where neither
        # $STORETORRENT_TRACKER nor ./st-data may be.
        self.tracker = tracker or default_tracker()
        self.prefix = job_prefix(format, prefix)
        self._min_rows = min_rows_per_write
        self.format_options = format_options or {}
        self.mode = mode
        self.job: WriteJob | None = None
        self.committed = 0

    def _client(self):
        from st_py.client.client import Client

        return Client(self.tracker)

    def on_write_start(self, schema=None) -> None:
        """Ray Datasink hook, on the driver: create (or open, by ``mode``) the
        file and start the write job (:func:`~st_integrations.write.start_job`)."""
        with self._client() as c:
            self.job = start_job(
                c, self.name, self.replication, self.format, self.prefix, options=self.format_options, mode=self.mode
            )

    def write(self, blocks: Iterable, ctx) -> StagedRecords:
        """Ray Datasink hook, in a write task: store each block as one staged
        record, rank 0 on this node's peer; returns the staged records'
        metadata (columns, :class:`~st_py.client.staged.StagedRecords`) for
        :meth:`on_write_complete`."""
        from ray.data.block import BlockAccessor

        tables = (BlockAccessor.for_block(b).to_arrow() for b in blocks)
        # The job as the driver started it; Ray may have pickled this sink
        # before on_write_start ran, so rebuild it from the same fields then.
        job = self.job or WriteJob(
            self.name, self.tracker, self.format, self.prefix, False, tuple(sorted(self.format_options.items()))
        )
        return write_blocks(job, ctx.task_idx, tables, local_peer=_node_peer(ctx.task_idx))

    def on_write_complete(self, write_result) -> None:
        """Ray Datasink hook, on the driver: commit every task's records in one
        tracker transaction; :attr:`committed` is then their number."""
        assert self.job is not None  # made by on_write_start
        with self._client() as c:
            self.committed = commit_job(c, self.job, list(write_result.write_returns))

    def on_write_failed(self, error: Exception) -> None:
        """Ray Datasink hook, on the driver: delete the file if this job created it."""
        if self.job is not None:
            with self._client() as c:
                abort_job(c, self.job)

    def get_name(self) -> str:
        """Ray Datasink hook: the sink's name in Ray's progress and stats."""
        return "StoreTorrent"

    @property
    def min_rows_per_write(self) -> int | None:
        """Ray Datasink hook: rows Ray gathers per write task (None: Ray's choice)."""
        return self._min_rows


def write_storetorrent(
    ds,
    name: str,
    replication: str = "x2",
    format: str = "parquet",
    *,
    tracker: str | None = None,
    ray_remote_args: dict | None = None,
    **kwargs,
) -> int:
    """Write Dataset ``ds`` into StoreTorrent file ``name`` atomically (see
    :class:`StoreTorrentDatasink` for the arguments). Returns the number of
    records committed."""
    sink = StoreTorrentDatasink(name, replication, format, tracker=tracker, **kwargs)
    with sink._client() as c:  # user errors here, on the driver, before Ray runs anything
        check_job(c, name, replication, format, sink.mode)
    ds.write_datasink(sink, ray_remote_args=ray_remote_args)
    return sink.committed

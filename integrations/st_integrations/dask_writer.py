"""Writing a Dask DataFrame into StoreTorrent as one atomic job (the protocol
is in :mod:`st_integrations.write`)::

    to_storetorrent(ddf, "/exp/out", replication="x2", format="parquet")
"""

from __future__ import annotations

from .write import abort_job, commit_job, start_job, write_blocks


def _write_partition(df, job, partition_info=None):
    import pandas as pd
    import pyarrow as pa

    i = partition_info["number"] if partition_info else 0
    peer = None
    try:
        from distributed import get_worker

        name = str(get_worker().name)  # a worker named host:port stands for that peer's host
        peer = name if ":" in name and name.rsplit(":", 1)[1].isdigit() else None
    except (ImportError, ValueError):
        pass
    table = pa.Table.from_pandas(df, preserve_index=False)
    staged = write_blocks(job, i, [table], local_peer=peer)
    return pd.DataFrame({"staged": [staged]})


def to_storetorrent(
    ddf,
    name: str,
    replication: str = "x2",
    format: str = "parquet",
    *,
    tracker: str | None = None,
    prefix: str | None = None,
    format_options: dict | None = None,
    client=None,
    mode: str = "error",
) -> int:
    """Write ``ddf`` into StoreTorrent file ``name``, one record per
    partition, atomically: every record becomes visible in one commit at the
    end, or (the job failed) none.

    Parameters
    ----------
    ddf : dask.dataframe.DataFrame
    name : str
        The StoreTorrent file; created if missing.
    replication : str
        ``"x1"``, ``"x2"``, ``"x3"``.
    format : str
        ``"parquet"`` (default), ``"arrow"``, ``"csv"`` or ``"json"``.
    tracker : str, optional
        Tracker ``host:port`` (default ``$STORETORRENT_TRACKER`` / the local cluster).
    prefix : str, optional
        Record name prefix (default ``part-<8 hex digits>``, new per job);
        with ``format="records"`` a folder of the rows' records (default
        none: :func:`~st_integrations.write.job_prefix`).
    format_options : dict, optional
        For the format's writer; ``format="records"`` takes ``name_column``
        and ``data_column`` (default ``"name"``, ``"data"``).
    client : distributed.Client, optional
        Default: the current Dask client, or Dask's default scheduler.
    mode : {"error", "append", "overwrite"}
        If ``name`` exists and holds records: raise ``StFileExistsError``
        (default), add to them, or replace them atomically (readers see the
        old records or the new ones, whole), as ``DataFrame.to_parquet``'s
        ``append``/``overwrite`` and Spark's save modes.

    Returns
    -------
    int
        Records committed.

    Raises
    ------
    StFileExistsError, BadNameError, NotEnoughPeersError, QuotaExceededError, RecordExistsError, PeerError
        And whatever a partition raised; nothing is committed then.
    """
    import pandas as pd

    from st_py.client.client import Client
    from st_py.wire.locate import default_tracker

    tracker = tracker or default_tracker()
    with Client(tracker) as c:
        job = start_job(c, name, replication, format, prefix, options=format_options, mode=mode)
        try:
            meta = pd.DataFrame({"staged": pd.Series([], dtype=object)})
            parts = ddf.map_partitions(_write_partition, job, meta=meta, enforce_metadata=False)
            result = client.compute(parts).result() if client is not None else parts.compute()
            return commit_job(c, job, list(result["staged"]))
        except BaseException:
            abort_job(c, job)
            raise

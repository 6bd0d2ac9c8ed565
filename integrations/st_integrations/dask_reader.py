"""Dask DataFrames over StoreTorrent files: one partition per storage peer,
computed on the Dask worker on that peer's host (paper 2, 3.7).

Mapping peers to workers, first match wins:

1. a worker whose ``name`` is the peer's address (``dask worker --name
   10.0.0.5:7100``); several named workers on one machine stand for several
   hosts this way;
2. a worker on the peer's host;
3. for a peer on loopback, a worker on this machine.

Partitions are pinned with ``client.submit(..., workers=[w],
allow_other_workers=False)`` (``dask.annotate`` is ignored by the query
planner).
"""

from __future__ import annotations

import pyarrow as pa

from st_py.getlocal import GetLocalPlan, local_addresses
from st_py.transport import split_addr

from .decoders import Decoder
from .tasks import check_complete, plan_read, read_peer


def _worker_host(addr: str) -> str:
    if addr.startswith("inproc://"):  # a worker thread in this very process
        return "127.0.0.1"
    return addr.split("://", 1)[-1].rsplit(":", 1)[0]


def _placements(ring: tuple[str, ...], dclient) -> dict[str, str]:
    workers = dclient.scheduler_info(n_workers=-1)["workers"]
    by_name = {str(w.get("name")): a for a, w in workers.items()}
    local = local_addresses()
    out, rr = {}, 0
    for addr in ring:
        if addr in by_name:
            out[addr] = by_name[addr]
            continue
        host, _ = split_addr(addr)
        match = sorted(a for a in workers if _worker_host(a) == host)
        if not match and (host.startswith("127.") or host in local):
            match = sorted(a for a in workers if _worker_host(a) in local or _worker_host(a).startswith("127."))
        if not match:
            raise RuntimeError(f"no Dask worker runs on the host of peer {addr}: start one there "
                               f"(e.g. `dask worker SCHEDULER --name {addr}`)")
        out[addr] = match[rr % len(match)]
        rr += 1
    return out


def _read_partition(peer: str, plan: GetLocalPlan, schema: pa.Schema, decoder, record_column):
    table, n = read_peer(peer, plan, schema, decoder, record_column)
    return table, n


def _to_pandas(result):
    import pandas as pd

    return result[0].to_pandas(types_mapper=pd.ArrowDtype)


def _part(result):
    """(records revealed, ring) of a partition, for check_complete."""
    return result[1]


def read_storetorrent(name: str, *, tracker: str | None = None, client=None,
                      decoder: Decoder | None = None, record_column: str | None = None):
    """Read StoreTorrent file ``name`` as a ``dask.dataframe.DataFrame``.

    Parameters
    ----------
    name : str
    tracker : str, optional
        Tracker ``host:port``.
    client : distributed.Client, optional
        Default: the current Dask client.
    decoder, record_column
        As in :func:`st_integrations.ray_reader.read_storetorrent`.

    Returns
    -------
    dask.dataframe.DataFrame
        One partition per storage peer, with Arrow-backed columns.

    Raises
    ------
    st_py.GetLocalError
        If records are unavailable.
    """
    import dask.dataframe as dd
    import pandas as pd
    from distributed import get_client

    dclient = client or get_client()
    plan, schema = plan_read(name, tracker, decoder, record_column)
    placements = _placements(plan.ring, dclient)
    parts, counts = [], []
    for addr in plan.ring:
        w = [placements[addr]]
        res = dclient.submit(_read_partition, addr, plan, schema, decoder, record_column,
                             workers=w, allow_other_workers=False, pure=False)
        parts.append(dclient.submit(_to_pandas, res, workers=w, allow_other_workers=False))
        counts.append(dclient.submit(_part, res, workers=w, allow_other_workers=False))
    check_complete(plan, dclient.gather(counts))
    meta = schema.empty_table().to_pandas(types_mapper=pd.ArrowDtype)
    return dd.from_delayed(parts, meta=meta, verify_meta=False)

"""Ray Datasets over StoreTorrent files: one read task per storage peer,
pinned to the Ray node on that peer's host (paper 2, 3.7).

Ray Data has no per-read-task locality, so the tasks are plain Ray tasks with
a hard placement, and their Arrow tables become a Dataset with
``ray.data.from_arrow_refs``.

Mapping peers to Ray nodes, first match wins:

1. a Ray node with the custom resource ``peer_resource(addr)`` (start each
   node with ``--resources '{"st-peer-10.0.0.5-7100": 1}'``, or let
   ``storetorrent`` tests do it); this is how several Ray nodes on one machine
   stand for several hosts;
2. the Ray node whose IP is the peer's host (a real cluster: one Ray node and
   one peer per storage node);
3. for a peer on loopback, a Ray node on this machine.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from st_py.getlocal import GetLocalPlan, local_addresses
from st_py.transport import split_addr

from .decoders import Decoder
from .tasks import check_complete, plan_read, read_peer

RESOURCE_AMOUNT = 0.001


def peer_resource(addr: str) -> str:
    """The Ray custom resource that marks the node of the peer at ``addr``."""
    return "st-peer-" + addr.replace(":", "-")


def _placements(ring: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    local = local_addresses()
    out: dict[str, dict[str, Any]] = {}
    for addr in ring:
        res = peer_resource(addr)
        if any(res in n.get("Resources", {}) for n in nodes):
            out[addr] = {"resources": {res: RESOURCE_AMOUNT}}
            continue
        host, _ = split_addr(addr)
        match = [n for n in nodes if n["NodeManagerAddress"] == host]
        if not match and (host.startswith("127.") or host in local):
            match = [n for n in nodes if n["NodeManagerAddress"] in local or
                     n["NodeManagerAddress"].startswith("127.")] or nodes[:1]
        if not match:
            raise RuntimeError(f"no Ray node runs on the host of peer {addr}: start a Ray node there, "
                               f"or give it the resource {res!r}")
        out[addr] = {"scheduling_strategy": NodeAffinitySchedulingStrategy(match[0]["NodeID"], soft=False)}
    return out


def _read_task(peer: str, plan: GetLocalPlan, schema: pa.Schema, decoder, record_column):
    table, n = read_peer(peer, plan, schema, decoder, record_column)
    return table, n


def read_storetorrent(name: str, *, tracker: str | None = None, decoder: Decoder | None = None,
                     record_column: str | None = None, ray_remote_args: dict | None = None):
    """Read StoreTorrent file ``name`` as a ``ray.data.Dataset``.

    Parameters
    ----------
    name : str
        The file, e.g. ``"/flights/2013"``.
    tracker : str, optional
        Tracker ``host:port`` (default: ``$STORETORRENT_TRACKER`` or the local cluster).
    decoder : callable(name, path) -> pyarrow.Table, optional
        Default: Arrow IPC / Parquet by magic bytes, raw records as
        ``(record, data)`` rows. It must be picklable; it also runs once on
        the driver, on one record fetched with GET, to learn the schema.
    record_column : str, optional
        Add a column of that name holding each row's record name.

    Returns
    -------
    ray.data.Dataset
        One block per storage peer, read on that peer's node.

    Raises
    ------
    st_py.GetLocalError
        If records are unavailable (more peers down than the class tolerates).
    """
    import ray

    if not ray.is_initialized():
        ray.init(include_dashboard=False, log_to_driver=False)
    plan, schema = plan_read(name, tracker, decoder, record_column)
    task = ray.remote(_read_task)
    placements = _placements(plan.ring)
    tables, counts = [], []
    for addr in plan.ring:
        opts = {"num_returns": 2, "num_cpus": 1, "max_retries": 0, **placements[addr], **(ray_remote_args or {})}
        t_ref, n_ref = task.options(**opts).remote(addr, plan, schema, decoder, record_column)
        tables.append(t_ref)
        counts.append(n_ref)
    check_complete(plan, ray.get(counts))
    return ray.data.from_arrow_refs(tables)

"""Running each read task on the node of its peer, in Ray and in Dask
(paper 2: "moving the computation to the data"; docs/decisions.md, "Task
placement in the engines").

Ray Data 2.60 has no per-read-task placement: one read operator gives all
its tasks the same remote arguments. Two ways were measured:

* ``"task"`` (default on the Ray version it was tested with): one read
  operator; the driver-side hook that computes each task's remote arguments
  (``TaskPoolMapOperator._get_dynamic_ray_remote_args``, private) is wrapped
  so that a StoreTorrent read task gets ``label_selector={"ray.io/node-id":
  <its peer's node>}``. Maps after the read fuse into the read task.
* ``"node"`` (public API only; the fallback on other Ray versions): one read
  operator per node, pinned with ``label_selector``, then ``union``. Maps
  after the union run in separate tasks.

Dask's query planner ignores ``dask.annotate``; a scheduler plugin pins the
tasks instead: its ``update_graph`` hook finds the read units in each new
task's ``run_spec`` (they survive blockwise fusion) and restricts the task to
the unit's worker.
"""

from __future__ import annotations

from typing import Any

from st_py.errors import StoreTorrentError
from st_py.getlocal import local_addresses
from st_py.transport import split_addr

RAY_TESTED = ("2.60.0",)
READ_OP_PREFIX = "ReadStoreTorrent"


class PlacementError(StoreTorrentError):
    """No engine node or worker runs on the host of ``peer``."""

    def __init__(self, message: str, peer: str = ""):
        super().__init__(message)
        self.peer = peer


# -- Ray ----------------------------------------------------------------------
def peer_resource(addr: str) -> str:
    """The Ray custom resource that marks the node of the peer at ``addr``
    (``st-peer-HOST-PORT``): how several Ray nodes on one machine stand for
    several hosts."""
    return "st-peer-" + addr.replace(":", "-")


def resource_peer(resource: str) -> str | None:
    """The peer address of a :func:`peer_resource` name, else None."""
    if not resource.startswith("st-peer-"):
        return None
    host, _, port = resource[len("st-peer-") :].rpartition("-")
    return f"{host}:{port}" if host and port.isdigit() else None


def ray_node_of_peers(peers: list[str]) -> dict[str, str]:
    """``{peer: Ray node id}``: the node with the peer's resource, else the
    node whose IP is the peer's host, else (a peer on loopback) a node of
    this machine.

    Raises
    ------
    PlacementError
        If no Ray node runs on a peer's host.
    """
    import ray

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    local = local_addresses()
    out: dict[str, str] = {}
    for addr in peers:
        res = peer_resource(addr)
        match = [n for n in nodes if res in n.get("Resources", {})]
        if not match:
            host, _ = split_addr(addr)
            match = [n for n in nodes if n["NodeManagerAddress"] == host]
            if not match and (host.startswith("127.") or host in local):
                match = [
                    n for n in nodes if n["NodeManagerAddress"] in local or n["NodeManagerAddress"].startswith("127.")
                ] or nodes[:1]
        if not match:
            raise PlacementError(
                f"no Ray node runs on the host of peer {addr}: start a Ray node there, or "
                f"give one the resource {res!r}",
                peer=addr,
            )
        out[addr] = match[0]["NodeID"]
    return out


def ray_pin_args(node_id: str) -> dict[str, Any]:
    return {"label_selector": {"ray.io/node-id": node_id}}


def ray_per_task_pinning() -> bool:
    """Install (once) the hook that pins each StoreTorrent read task to its
    node; False if this Ray version lacks the hook point (use ``"node"``)."""
    import ray

    try:
        from ray.data._internal.execution.operators.task_pool_map_operator import TaskPoolMapOperator
    except ImportError:
        return False
    if ray.__version__ not in RAY_TESTED or not hasattr(TaskPoolMapOperator, "_get_dynamic_ray_remote_args"):
        return False
    orig = TaskPoolMapOperator._get_dynamic_ray_remote_args
    if getattr(orig, "_storetorrent", False):
        return True

    def pinned(self, input_bundle=None):
        args = orig(self, input_bundle)
        if input_bundle is not None and self.name.startswith(READ_OP_PREFIX):
            task = ray.get(input_bundle.block_refs[0])  # the ReadTask itself: small, on the driver
            node = getattr(task, "st_node_id", None)
            if node:
                args.pop("scheduling_strategy", None)
                args["label_selector"] = {**(args.get("label_selector") or {}), "ray.io/node-id": node}
        return args

    pinned._storetorrent = True  # type: ignore[attr-defined]
    TaskPoolMapOperator._get_dynamic_ray_remote_args = pinned  # type: ignore[method-assign]
    return True


# -- Dask ---------------------------------------------------------------------
def _find_unit(node, depth: int = 0):
    from .readplan import ReadUnit

    if depth > 40:
        return None
    if isinstance(node, ReadUnit):
        return node
    if isinstance(node, (list, tuple, set, frozenset)):
        for x in node:
            r = _find_unit(x, depth + 1)
            if r is not None:
                return r
        return None
    if isinstance(node, dict):
        return _find_unit(list(node.values()), depth + 1)
    for a in ("args", "kwargs", "value"):
        sub = getattr(node, a, None)
        if sub is not None and sub is not node:
            r = _find_unit(sub, depth + 1)
            if r is not None:
                return r
    return None


try:
    from distributed.diagnostics.plugin import SchedulerPlugin as _SchedulerPlugin
except ImportError:  # Dask is optional
    _SchedulerPlugin = object  # type: ignore[misc,assignment]


class DaskPinning(_SchedulerPlugin):
    """Scheduler plugin: a task that reads a :class:`ReadUnit` runs on the
    worker named in ``workers[unit.peer]`` (a worker name, resolved to its
    current address, or an address).

    The restriction is loose: if that worker is gone (a nanny restarting it
    after a crash or over its memory limit gives it a new address), the task
    may run elsewhere rather than wait forever; there, on another host, a
    record it cannot find raises ``GetLocalError`` instead of a hang."""

    name = "storetorrent-pinning"

    def __init__(self, workers: dict[str, str] | None = None):
        self.workers = dict(workers or {})

    def update_graph(self, scheduler, *, tasks=None, **kwargs):
        for key in tasks or ():
            ts = scheduler.tasks.get(key)
            if ts is None or ts.run_spec is None:
                continue
            unit = _find_unit(ts.run_spec)
            if unit is None or unit.peer not in self.workers:
                continue
            w = self.workers[unit.peer]
            ts.worker_restrictions = {scheduler.aliases.get(w, w)}
            ts.loose_restrictions = True


def pin_dask_partitions(dclient, placement: dict[str, str]) -> None:
    """Register (or extend) the pinning plugin on ``dclient``'s scheduler
    with ``{peer: worker address}``, given to it as the workers' names."""
    workers = dclient.scheduler_info(n_workers=-1)["workers"]
    placement = {peer: workers[a].get("name", a) if a in workers else a for peer, a in placement.items()}

    def add(dask_scheduler=None, placement=placement):
        plugin = dask_scheduler.plugins.get(DaskPinning.name)
        if plugin is None:
            dask_scheduler.add_plugin(DaskPinning(placement))
        else:
            plugin.workers.update(placement)

    dclient.run_on_scheduler(add)

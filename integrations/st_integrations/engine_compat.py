"""The engines' private internals that StoreTorrent's task placement uses,
in this one module, behind one table of the versions they were tested with
(docs/analysis.md, "Placement"; docs/decisions.md, "Task placement in the
engines").

Two hooks reach into an engine's internals:

* **Ray**: Ray Data 2.60 gives every task of one read operator the same
  remote arguments. :func:`install_ray_task_pinning` wraps the driver-side
  ``TaskPoolMapOperator._get_dynamic_ray_remote_args`` (private) so that a
  StoreTorrent read task gets ``label_selector={"ray.io/node-id": <its
  peer's node>}``; maps after the read fuse into the pinned read task
  (``placement="task"``).
* **Dask**: the query planner ignores ``dask.annotate``. :class:`DaskPinning`,
  a scheduler plugin, finds the :class:`~st_integrations.readplan.ReadUnit`
  in each new task's ``run_spec`` (dask's private task spec, which keeps
  the unit through blockwise fusion) and restricts the task to the unit's
  worker.

Both are used only on the versions in :data:`TESTED` (compared with
``packaging.version``) and only while the structure they rely on is there.
Otherwise each falls back and logs one WARNING on the ``st.engine_compat``
logger (once per process and reason) naming the engine, its version, the
tested versions and what is lost:

* Ray reads with ``placement="node"`` (public API only: one read per node,
  pinned by ``label_selector``, then ``union``): the answer and the nodes
  are the same, but maps after the read run in separate tasks, so every
  read block goes through the object store.
* Dask places the read tasks itself: the answer is the same on one host
  (every copy is on its disk), but on several hosts a partition may run on
  a worker of another host than its peer's and fail with ``GetLocalError``.

To support a new engine version: run ``tests/test_engine_compat.py`` and the
engine's analysis tests on it, then add it to :data:`TESTED`.
"""

from __future__ import annotations

import importlib
import logging
import threading
from typing import Any

log = logging.getLogger("st.engine_compat")

TESTED: dict[str, tuple[str, ...]] = {
    "ray": ("2.60.0",),  # TaskPoolMapOperator._get_dynamic_ray_remote_args, ReadTask on the driver
    "dask": ("2026.8.0",),  # dask._task_spec: Task.args/kwargs, DataNode.value
    "distributed": ("2026.8.0",),  # SchedulerPlugin.update_graph, TaskState.run_spec/worker_restrictions
}
"""The one table: the engine packages whose internals this module uses, and
the versions each was tested with."""

READ_OP_PREFIX = "ReadStoreTorrent"  # Ray's name of the read operator of StoreTorrentDatasource
DASK_READ_LABEL = "read-storetorrent"  # the dask_reader's from_map label: the read layer's key names

_lock = threading.Lock()
_warned: set[str] = set()


def warn_once(key: str, message: str) -> None:
    """Log ``message`` as a WARNING on ``st.engine_compat``, once per process
    for each ``key``. Thread-safe."""
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    log.warning(message)


def installed_version(package: str) -> str:
    """``package.__version__`` of the imported engine package ("" if it has none)."""
    return str(getattr(importlib.import_module(package), "__version__", ""))


def untested(package: str) -> str | None:
    """None if the installed ``package`` is one of ``TESTED[package]``, else
    a phrase naming the version that runs."""
    from packaging.version import InvalidVersion, Version

    version = installed_version(package)
    tested = TESTED.get(package, ())
    try:
        ok = Version(version) in {Version(t) for t in tested}
    except InvalidVersion:
        ok = False
    if ok:
        return None
    return f"{package} {version or '(unknown)'} is not a tested version"


# -- Ray ----------------------------------------------------------------------
RAY_LOST = (
    "reading with placement='node' (one read per node, then union): the same rows on the same nodes, but maps "
    "after the read run in separate tasks, not fused into the read tasks"
)


def _ray_operator():
    """The class whose method the Ray hook wraps, or a phrase why there is none."""
    try:
        from ray.data._internal.execution.operators.task_pool_map_operator import TaskPoolMapOperator
    except ImportError as e:
        return f"ray.data has no TaskPoolMapOperator ({e})"
    if not callable(getattr(TaskPoolMapOperator, "_get_dynamic_ray_remote_args", None)):
        return "TaskPoolMapOperator has no _get_dynamic_ray_remote_args"
    return TaskPoolMapOperator


def install_ray_task_pinning() -> str | None:
    """Install (once per process) the hook that pins each StoreTorrent read
    task to the node of its peer.

    Returns
    -------
    str or None
        None when the hook is installed (``placement="task"`` can be used);
        else why not, one phrase (Ray is not a version of :data:`TESTED`, or
        lacks the private method): use ``placement="node"``.

    Thread-safe: installing is done under a lock. The installed hook runs on
    the driver's executor thread; if what it reads of a task is not as
    expected it leaves that task's arguments as Ray made them and warns
    once (the task then runs where Ray places it).
    """
    import ray

    problem = untested("ray")
    if problem is not None:
        return problem
    op = _ray_operator()
    if isinstance(op, str):
        return f"ray {ray.__version__}: {op}"
    with _lock:
        orig = op._get_dynamic_ray_remote_args
        if getattr(orig, "_storetorrent", False):
            return None

        def pinned(self, input_bundle=None):
            args = orig(self, input_bundle)
            try:
                if input_bundle is None or not str(self.name).startswith(READ_OP_PREFIX):
                    return args
                task = ray.get(input_bundle.block_refs[0])  # the ReadTask itself: small, on the driver
                node = getattr(task, "st_node_id", None)
                if not node:
                    return args
                out = dict(args)
                out.pop("scheduling_strategy", None)
                out["label_selector"] = {**(out.get("label_selector") or {}), "ray.io/node-id": node}
                return out
            except Exception as e:  # never fail Ray's executor on our account
                warn_once(
                    "ray-hook",
                    f"StoreTorrent's Ray read-task hook failed on ray {ray.__version__} ({type(e).__name__}: {e}): "
                    "the read tasks run where Ray places them, not on their peers' nodes",
                )
                return args

        pinned._storetorrent = True  # type: ignore[attr-defined]
        op._get_dynamic_ray_remote_args = pinned
    return None


def ray_task_pinning_fallback(problem: str) -> None:
    """Log (once) that Ray reads fall back to ``placement="node"`` because
    of ``problem`` (from :func:`install_ray_task_pinning`)."""
    warn_once(
        "ray-untested",
        f"StoreTorrent's per-task placement is off: {problem} (tested: ray {', '.join(TESTED['ray'])}); {RAY_LOST}",
    )


# -- Dask ---------------------------------------------------------------------
DASK_LOST = (
    "Dask places the read tasks itself: on one host the answer is the same, on several a partition may run on "
    "a worker of another host than its peer's and fail there with GetLocalError"
)


class UnexpectedRunSpecError(Exception):
    """A task's ``run_spec`` is not the structure :class:`DaskPinning` was
    tested with (internal: the plugin then falls back)."""


def dask_pinning_problem() -> str | None:
    """None if this process's dask and distributed are versions of
    :data:`TESTED` (the plugin walks their private task spec), else why not."""
    for package in ("distributed", "dask"):
        problem = untested(package)
        if problem is not None:
            return problem
    return None


def find_read_unit(run_spec, depth: int = 0):
    """The :class:`ReadUnit` a task reads, found in its ``run_spec`` (also
    after blockwise fusion, where it is an argument of an inner task), or
    None for a task that reads none.

    Raises
    ------
    UnexpectedRunSpecError
        ``run_spec`` is not a ``dask._task_spec.GraphNode``.
    """
    from dask._task_spec import GraphNode

    if depth == 0 and not isinstance(run_spec, GraphNode):
        raise UnexpectedRunSpecError(f"run_spec is a {type(run_spec).__name__}, not a dask._task_spec.GraphNode")
    return _walk(run_spec, depth)


def _walk(node, depth: int):
    from .readplan import ReadUnit

    if depth > 40:
        return None
    if isinstance(node, ReadUnit):
        return node
    if isinstance(node, (list, tuple, set, frozenset)):
        for x in node:
            r = _walk(x, depth + 1)
            if r is not None:
                return r
        return None
    if isinstance(node, dict):
        return _walk(list(node.values()), depth + 1)
    for a in ("args", "kwargs", "value"):
        sub = getattr(node, a, None)
        if sub is not None and sub is not node:
            r = _walk(sub, depth + 1)
            if r is not None:
                return r
    return None


def _key_name(key) -> str:
    return str(key[0] if isinstance(key, tuple) and key else key)


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
    record it cannot find raises ``GetLocalError`` instead of a hang.

    On a dask or distributed version not in :data:`TESTED`, or when a
    task's ``run_spec`` is not as tested (not a task-spec node, a read-layer
    task without a unit, or the walk raising), the plugin restricts no task
    of that graph and logs one WARNING (once per scheduler process); it
    never raises into the scheduler.

    Not thread-safe, and needs not be: the scheduler calls it, and
    :func:`pin_dask_partitions` updates ``workers``, on the scheduler's
    event loop.
    """

    name = "storetorrent-pinning"

    def __init__(self, workers: dict[str, str] | None = None):
        self.workers = dict(workers or {})

    def update_graph(self, scheduler, *, tasks=None, **kwargs):
        """distributed SchedulerPlugin hook: restrict each new read task to the
        worker of its unit's peer (loosely); on an untested version or run_spec,
        restrict none and log the fallback. Never raises."""
        problem = dask_pinning_problem()
        if problem is not None:
            dask_pinning_fallback(problem)
            return
        try:
            pins = self._pins(scheduler, tasks or ())
        except Exception as e:  # an unexpected run_spec, or the walk failed: pin nothing of this graph
            dask_pinning_fallback(f"a task's run_spec is not as tested ({type(e).__name__}: {e})")
            return
        for ts, w in pins:
            ts.worker_restrictions = {scheduler.aliases.get(w, w)}
            ts.loose_restrictions = True

    def _pins(self, scheduler, keys) -> list[tuple[Any, str]]:
        """(task state, worker) of every new read task, or raise: all or nothing."""
        out = []
        for key in keys:
            ts = scheduler.tasks.get(key)
            if ts is None or ts.run_spec is None:
                continue
            unit = find_read_unit(ts.run_spec)
            if unit is None:
                if _key_name(key).startswith(DASK_READ_LABEL + "-"):
                    raise UnexpectedRunSpecError(f"the read task {key!r} holds no ReadUnit")
                continue
            if unit.peer in self.workers:
                out.append((ts, self.workers[unit.peer]))
        return out


def dask_pinning_fallback(problem: str) -> None:
    """Log (once per process) that the Dask read tasks are not pinned, and why."""
    warn_once(
        "dask-unpinned",
        f"StoreTorrent's Dask scheduler plugin pins no read task: {problem} "
        f"(tested: dask {', '.join(TESTED['dask'])}, distributed {', '.join(TESTED['distributed'])}); {DASK_LOST}",
    )


def pin_dask_partitions(dclient, placement: dict[str, str]) -> str | None:
    """Register (or extend) the pinning plugin on ``dclient``'s scheduler
    with ``{peer: worker address}``, given to it as the workers' names.

    Returns
    -------
    str or None
        None if the scheduler's dask and distributed are tested versions,
        else why not (then logged here, once per process: the scheduler's
        own log line goes to the scheduler's log).
    """
    workers = dclient.scheduler_info(n_workers=-1)["workers"]
    placement = {peer: workers[a].get("name", a) if a in workers else a for peer, a in placement.items()}

    def add(dask_scheduler=None, placement=placement):
        plugin = dask_scheduler.plugins.get(DaskPinning.name)
        if plugin is None:
            dask_scheduler.add_plugin(DaskPinning(placement))
        else:
            plugin.workers.update(placement)
        return dask_pinning_problem()

    problem = dclient.run_on_scheduler(add)
    if problem is not None:
        dask_pinning_fallback(f"on the scheduler, {problem}")
    return problem

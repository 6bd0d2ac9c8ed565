"""Starting a local Ray for a reader when none runs, and leaving nothing
behind when that start fails.

``read_storetorrent`` starts Ray as a bare Ray Data call would
(``ray.init()``, docs/analysis.md, "Ray"). Ray 2.60's head start waits a
fixed 30 s for its raylet to register with the GCS (``ray/_private/node.py``,
ray-project/ray#62883); on a loaded machine the start raises "The current
node timed out during startup" and leaves the GCS, the raylet and the other
processes it had started running for as long as the driver lives, with no
handle left to stop them. :func:`start_ray` stops them (the half-built
``ray._private.node.Node`` is found in the exception's traceback: Ray's
private internals, in this one function) and raises
:class:`~st_py.errors.DaemonStartError`.
"""

from __future__ import annotations

import logging
import traceback
from typing import Any

from st_py.errors import DaemonStartError

log = logging.getLogger("st.ray_start")

RAY_LOGS = "/tmp/ray/session_latest/logs"  # Ray's default session directory


def start_ray() -> None:
    """Start a local Ray (``ray.init(include_dashboard=False,
    log_to_driver=False)``) unless Ray is running in this process.

    Raises
    ------
    DaemonStartError
        ``daemon="ray"``: Ray did not start; the processes the failed start
        had launched are stopped (SIGKILL, waited for) first. Start Ray
        yourself (``ray.init()``) before the read, or try again when the
        machine is less loaded.

    Not thread-safe: call it from the driver's thread, like ``ray.init``.
    """
    import ray

    if ray.is_initialized():
        return
    try:
        ray.init(include_dashboard=False, log_to_driver=False)
    except Exception as e:
        stopped = stop_half_started_node(e.__traceback__)
        raise DaemonStartError(
            "ray",
            RAY_LOGS,
            message=(
                f"Ray did not start ({type(e).__name__}: {e}); {stopped} of its processes stopped; "
                "start Ray yourself (ray.init()) before the read, or try again when the machine is less loaded"
            ),
        ) from e


def stop_half_started_node(tb) -> int:
    """Kill and wait for the processes of the Ray node whose ``__init__``
    raised in traceback ``tb``; returns how many were running (0 if no
    node was being built)."""
    for frame, _ in traceback.walk_tb(tb):
        node: Any = frame.f_locals.get("self")
        if type(node).__module__ == "ray._private.node" and type(node).__name__ == "Node":
            running = sum(1 for infos in node.all_processes.values() for info in infos if info.process.poll() is None)
            try:
                node.kill_all_processes(check_alive=False, allow_graceful=False, wait=True)
            except Exception:  # a failed start stopped as well as it can be: the start's error is the news
                log.warning("stopping the processes of a failed Ray start", exc_info=True)
            return running
    return 0

"""A reader that starts Ray and whose start fails leaves no Ray process
running (st_integrations.ray_start): Ray 2.60 raises "The current node timed
out during startup" on a loaded machine and keeps the GCS, the raylet and
their helpers running for as long as the driver lives.

The failure is injected after Ray has started its real processes (the point
where its 30 s wait gives up); the script runs in a fresh interpreter so the
injection and Ray's state end with it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("ray")

SCRIPT = textwrap.dedent(
    """
    import gc, sys, warnings
    import psutil
    import ray, ray._private.node as node_mod
    from st_integrations.ray_start import start_ray
    from st_py.errors import DaemonStartError

    warnings.simplefilter("error", ResourceWarning)
    started = node_mod.Node.start_ray_processes

    def start_then_time_out(self):
        started(self)  # the real GCS, raylet, ... are running now
        raise Exception("The current node timed out during startup. (injected)")

    node_mod.Node.start_ray_processes = start_then_time_out
    me = psutil.Process()
    try:
        start_ray()
    except DaemonStartError as e:
        print("error", e.daemon, e)
    else:
        sys.exit("start_ray did not raise")
    gc.collect()  # a Popen of a process still running warns here (an error)
    alive = [p for p in me.children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]
    print("left", len(alive), [" ".join(p.cmdline())[:80] for p in alive])
    print("initialized", ray.is_initialized())
    node_mod.Node.start_ray_processes = started
    start_ray()  # a second try in the same process starts Ray
    print("retry", ray.is_initialized(), ray.get(ray.put(7)))
    ray.shutdown()
    """
)


def test_a_failed_start_stops_what_it_started_and_a_retry_starts_ray(tmp_path):
    path = tmp_path / "start.py"
    path.write_text(SCRIPT)
    r = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = dict(line.split(" ", 1) for line in r.stdout.splitlines() if " " in line)
    assert lines["error"].startswith("ray Ray did not start (Exception: The current node timed out"), lines
    assert "start Ray yourself (ray.init())" in lines["error"]
    stopped = int(lines["error"].split("); ", 1)[1].split(" of its processes")[0])
    assert stopped >= 2, lines["error"]  # at least the GCS and the raylet were running
    assert lines["left"].startswith("0 "), lines["left"]
    assert lines["initialized"] == "False"
    assert lines["retry"] == "True 7"
    assert "still running" not in r.stderr, r.stderr

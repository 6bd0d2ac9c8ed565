"""``python -m loadtest [--time 30s] [--users 4]``: start a local cluster,
run the locust load test headless against it for a bounded time, stop the
cluster. Exits non-zero if any request failed."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from st_py.cluster import LocalCluster


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m loadtest")
    ap.add_argument("--time", default="30s", help="locust run time, e.g. 20s, 2m")
    ap.add_argument("--users", type=int, default=4)
    ap.add_argument("--peers", type=int, default=4)
    ap.add_argument("--csv", default=None, help="write locust CSV stats with this prefix")
    a = ap.parse_args()
    here = Path(__file__).resolve().parent
    with tempfile.TemporaryDirectory(prefix="st-load-") as tmp:
        cluster = LocalCluster(Path(tmp), n_peers=a.peers, announce_interval=0.5).start()
        try:
            argv = [
                sys.executable,
                "-m",
                "locust",
                "-f",
                str(here / "locustfile.py"),
                "--headless",
                "-u",
                str(a.users),
                "-r",
                str(a.users),
                "-t",
                a.time,
                "--host",
                cluster.tracker_addr,
                "--only-summary",
                "--stop-timeout",
                "10",
                "--exit-code-on-error",
                "1",
            ]
            if a.csv:
                argv += ["--csv", a.csv]
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(here.parent), os.environ.get("PYTHONPATH", "")]))
            return subprocess.call(argv, env=env)
        finally:
            cluster.stop()


if __name__ == "__main__":
    sys.exit(main())

"""``queue_put`` one record a call (issue 41: consecutive puts ride the
batch path): one run, in a process of its own, on a fresh cluster, of
``--records`` 4 KiB records x1 then x2, depth 64, with the CPU seconds of
each role (bench/procstat.py). Prints one JSON line per class. Run it with
either tree's python to compare two trees in one alternated series
(docs/benchmarks.md, "queue_put one record at a time")::

    python bench/queue_put_rate.py --records 20000 [--profile out.prof]

Every answer is checked: the committed count equals the records written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # procstat, whichever tree's python runs this

from procstat import Sampler  # noqa: E402

from st_py.deploy.cluster import LocalCluster  # noqa: E402

RECORD = 4096


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--classes", default="x1,x2")
    ap.add_argument("--tmp", default=tempfile.gettempdir())
    ap.add_argument("--profile", default=None, help="cProfile the x1 run into this file")
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="qput-", dir=a.tmp))
    cluster = LocalCluster(root, n_peers=4, announce_interval=1.0).start()
    try:
        client = cluster.client(depth=64)
        bodies = [os.urandom(RECORD) for _ in range(1024)]
        names = [f"r{i:08d}" for i in range(a.records)]
        for rep in a.classes.split(","):
            prof = None
            if a.profile and rep == "x1":
                import cProfile

                prof = cProfile.Profile()
            s = Sampler(cluster, root)
            t = time.perf_counter()
            if prof:
                prof.enable()
            with client.create(f"/bench/q-{rep}", replication=rep) as f:
                for i, n in enumerate(names):
                    f.queue_put(n, bodies[i % 1024])
            if prof:
                prof.disable()
                prof.dump_stats(a.profile)
            dt = time.perf_counter() - t
            cost = s.stop()
            with client.open(f"/bench/q-{rep}") as f:
                assert len(f) == a.records, (rep, len(f))
            us = {k: v * 1e6 / a.records for k, v in cost.cpu.items()}
            print(json.dumps({"class": rep, "rate": a.records / dt, "us": us, "load": os.getloadavg()[0]}), flush=True)
    finally:
        cluster.stop()
        import shutil

        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

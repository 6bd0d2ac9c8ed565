"""Threads sharing one client, each with a handle of one file, each putting
a record and flushing it (committed before the next, as an S3 PUT is
answered): the client baseline of ``bench/s3.py``'s ``s3_put_*`` rows, alone
in a process of its own on a fresh 4-peer cluster (docs/benchmarks.md,
"Acknowledgements by seq and commits on a pool"). Prints one JSON line a
round; every record written is counted back::

    python bench/shared_client.py --records 3000 --rounds 2 [--calls future]

``--calls future`` starts commits with gRPC's ``future()`` instead of the
tracker client's call pool (``st_py/wire/call_pool.py``), to compare the two
in one tree; run another tree's python on this file to compare trees (a
tree without the pool takes ``--calls tree``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from st_py.deploy.cluster import LocalCluster


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=3000)
    ap.add_argument("--size", type=int, default=4096, help="bytes a record")
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--calls", choices=("pool", "future", "tree"), default="pool")
    ap.add_argument("--tmp", default=tempfile.gettempdir())
    a = ap.parse_args()
    if a.calls == "future":
        from st_py.wire import call_pool

        call_pool.CallPool.submit = lambda self, call, *args, **kw: call.future(*args, **kw)  # type: ignore[method-assign]
    root = Path(tempfile.mkdtemp(prefix="shared-", dir=a.tmp))
    cluster = LocalCluster(root, n_peers=4, announce_interval=1.0)
    cluster.start()
    try:
        client = cluster.client(depth=a.threads)
        body = os.urandom(a.size)
        for r in range(a.rounds):
            name = f"/shared-{r}"
            client.create(name, replication="x2").close()
            handles = [client.open(name) for _ in range(a.threads)]

            def work(k: int, handles=handles) -> None:
                for i in range(k, a.records, a.threads):
                    handles[k].put(f"obj-{i:06d}", body)
                    handles[k].flush()

            t = time.perf_counter()
            with ThreadPoolExecutor(a.threads) as pool:
                list(pool.map(work, range(a.threads)))
            dt = time.perf_counter() - t
            for h in handles:
                h.close()
            with client.open(name) as f:
                assert len(f.names()) == a.records, (len(f.names()), a.records)
            print(json.dumps({"calls": a.calls, "size": a.size, "threads": a.threads, "rate": round(a.records / dt)}))
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

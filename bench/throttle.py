"""Impact control (issue 12; FreeLoader seed 004, 3.2.2 and 5.4): does each
limit of a peer hold?

One peer started with ``--max-write-mbps``, ``--max-read-mbps`` and
``--max-request-rate``; a client PUTs, GETs and asks for missing records as
fast as it can for a few seconds each. The ratio is the measured rate over
the limit (target: within 10%, i.e. 0.9 to 1.1); every request must succeed
(clients wait, they do not fail).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from st_py.deploy.cluster import LocalCluster

from .cases import MiB, row

GROUP = "throttle"
WRITE_MBPS, READ_MBPS, REQUEST_RATE = 40.0, 80.0, 400.0


def case_throttle(tmp: Path, seconds: float = 4.0) -> list[dict]:
    args = [
        "--max-write-mbps",
        str(WRITE_MBPS),
        "--max-read-mbps",
        str(READ_MBPS),
        "--max-request-rate",
        str(REQUEST_RATE),
    ]
    cluster = LocalCluster(
        Path(tempfile.mkdtemp(prefix="throttle-", dir=tmp)), n_peers=1, announce_interval=1.0, peer_args=args
    ).start()
    out = []
    try:
        c = cluster.client(depth=16)
        data = os.urandom(MiB)
        n_put = int(WRITE_MBPS * 1e6 * seconds / MiB)
        f = c.create("/bench/throttle", "x1")
        t0 = time.perf_counter()
        for i in range(n_put):
            f.queue_put(f"r{i:05d}", data)
        f.close()  # raises if any PUT failed
        dt = time.perf_counter() - t0
        out.append(
            row(
                "throttle_write",
                n_put * MiB / dt,
                "B/s",
                f"--max-write-mbps {WRITE_MBPS:g}",
                WRITE_MBPS * 1e6,
                note=f"{n_put} PUTs of 1 MiB, none failed",
            )
        )

        f = c.open("/bench/throttle")
        n_get = int(READ_MBPS * 1e6 * seconds / MiB)
        t0 = time.perf_counter()
        futs = [f.queue_get(f"r{i % n_put:05d}") for i in range(n_get)]
        got = sum(len(p.result()) for p in futs)
        dt = time.perf_counter() - t0
        out.append(
            row(
                "throttle_read",
                got / dt,
                "B/s",
                f"--max-read-mbps {READ_MBPS:g}",
                READ_MBPS * 1e6,
                note=f"{n_get} GETs of 1 MiB, none failed",
            )
        )

        f.close()
        small = os.urandom(4096)
        with c.create("/bench/throttle_small", "x1") as g:
            g.put("small", small)
        f = c.open("/bench/throttle_small")
        n_req = int(REQUEST_RATE * seconds)
        t0 = time.perf_counter()
        futs = [f.queue_get("small") for _ in range(n_req)]
        assert all(p.result() == small for p in futs)
        dt = time.perf_counter() - t0
        out.append(
            row(
                "throttle_requests",
                n_req / dt,
                "requests/s",
                f"--max-request-rate {REQUEST_RATE:g}",
                REQUEST_RATE,
                note=f"{n_req} GETs of a 4 KiB record, none failed",
            )
        )
        f.close()
        c.close()
    finally:
        cluster.stop()
    return out

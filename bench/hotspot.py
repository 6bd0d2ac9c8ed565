"""Load-aware reads against a hot spot (issue 12; CEFT seed 001, section 5:
hot-spot skipping). Four peers, class x2; one holder is slowed down (it
serves reads at ``SLOW_MBPS`` with impact control), the others are not. A
client GETs every record (1 MiB each, 16 in flight) with load-aware reads
and with the paper's copy-rank order; the ratio is load-aware over
rank-order throughput, alternated over ``rounds``.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from st_py.deploy.cluster import LocalCluster

from .cases import MiB, row

GROUP = "hotspot"
SLOW_MBPS = 20.0


def case_hotspot(tmp: Path, n: int, rounds: int = 3) -> list[dict]:
    cluster = LocalCluster(Path(tempfile.mkdtemp(prefix="hotspot-", dir=tmp)), n_peers=4, announce_interval=1.0).start()
    try:
        c = cluster.client(depth=16)
        data = os.urandom(MiB)
        names = [f"r{i:05d}" for i in range(n)]
        with c.create("/bench/hotspot", "x2", blocksize=1) as f:
            for name in names:
                f.queue_put(name, data)
        port = int(cluster.peers[0].addr.rsplit(":", 1)[1])
        cluster.peers[0].stop()
        cluster.start_peer(0, port, ["--max-read-mbps", str(SLOW_MBPS)])
        cluster.wait_for_peers(4)
        rates: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(rounds):
            for balance in (False, True):
                with cluster.client(depth=16, balance_reads=balance) as cb, cb.open("/bench/hotspot") as f:
                    t0 = time.perf_counter()
                    futs = [f.queue_get(name) for name in names]
                    got = sum(len(p.result()) for p in futs)
                    rates[balance].append(got / (time.perf_counter() - t0))
        med = statistics.median
        return [
            row(
                "get_hotspot_skipping",
                med(rates[True]),
                "B/s",
                f"copy-rank order, one of 4 holders at {SLOW_MBPS:g} MB/s",
                med(rates[False]),
                note=f"{n} GETs of 1 MiB, x2, median of {rounds} alternated rounds",
            )
        ]
    finally:
        cluster.stop()

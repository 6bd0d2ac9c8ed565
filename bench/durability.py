"""What durable replies cost (issue 13, item 5; docs/decisions.md,
"Durability on the peer").

PUT of 4 KiB and 1 MiB records, class x1, on a one-peer cluster started
three ways: no ``--sync`` (the reply once the record has its name: page
cache), ``--sync`` (group fsync: the PUTs of a batch, then one syncfs before
their replies) and ``--sync-each`` (an fdatasync and a directory fsync per
record). Ratios are against no ``--sync``, in the same run.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from st_py.deploy.cluster import LocalCluster

from .cases import MiB, row

GROUP = "durability"
MODES = (("none", []), ("group", ["--sync"]), ("each", ["--sync-each"]))


def _put_rate(cluster, name: str, data: bytes, n: int, depth: int) -> float:
    # A reply to a --sync-each PUT waits for its fsync, behind up to `depth`
    # others: after the full bench's tens of GB of writes the disk's
    # writeback queue makes that seconds, past the client's default timeout
    # (a full run once failed here with the peer marked unusable).
    with cluster.client(depth=depth, timeout=120.0) as c, c.create(name, "x1") as f:
        t0 = time.perf_counter()
        for i in range(n):
            f.queue_put(f"r{i:07d}", data)
        f.flush()
        return n / (time.perf_counter() - t0)


def case_durability(tmp: Path, n_4kib: int, n_1mib: int) -> list[dict]:
    rates: dict[tuple[str, str], float] = {}
    for mode, args in MODES:
        cluster = LocalCluster(
            Path(tempfile.mkdtemp(prefix=f"sync-{mode}-", dir=tmp)), n_peers=1, announce_interval=1.0, peer_args=args
        ).start()
        try:
            os.sync()
            rates[(mode, "4kib")] = _put_rate(cluster, "/bench/sync4k", os.urandom(4096), n_4kib, 64)
            rates[(mode, "1mib")] = _put_rate(cluster, "/bench/sync1m", os.urandom(MiB), n_1mib, 16)
        finally:
            cluster.stop()
    out = []
    for size, unit, per in (("4kib", "records/s", 1), ("1mib", "B/s", MiB)):
        base = rates[("none", size)] * per
        for mode in ("group", "each"):
            out.append(
                row(
                    f"put_{size}_sync_{mode}",
                    rates[(mode, size)] * per,
                    unit,
                    "no --sync, same run",
                    base,
                    note=f"x1, one peer; --sync{'-each' if mode == 'each' else ''}",
                )
            )
    return out

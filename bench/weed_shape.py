"""The shape of ``weed benchmark -n N -size S -c 16`` on StoreTorrent (issue
31, item 5; docs/benchmarks.md, "Side by side with weed benchmark").

SeaweedFS's benchmark writes N files of S bytes plus 0-63 bytes of padding
with 16 concurrent writers, then reads them all back in random order with
16 concurrent readers, and prints requests per second and the transfer
rate. Here one StoreTorrent client does the same with 16 requests in
flight (pipeline depth 16): N records of S + (0-63) bytes into one file
(x1 or x2), committed, then every record read back in a shuffled order. Its
answers are checked: every reply's bytes equal what was written (so the
count and the byte total too). Latencies are from a request's queueing to
its acknowledgement.

With a ``weed`` binary (:mod:`bench.seaweedfs`), ``weed benchmark`` itself
runs right after on a SeaweedFS started here, and the ``*_vs_seaweedfs``
rows give the ratios of one run.
"""

from __future__ import annotations

import os
import random
import statistics
import time
from pathlib import Path

from .cases import fresh_cluster, row

GROUP = "weed"
CONCURRENCY = 16


def _body(base: bytes, i: int, size: int) -> bytes:
    """Record ``i``: its number, then ``base`` up to ``size`` plus weed's 0-63 padding bytes."""
    n = size + (i * 2654435761 >> 7) % 64
    head = i.to_bytes(8, "little")
    return head + base[: n - 8]


def _percentiles(lat: list[float]) -> str:
    q = statistics.quantiles(lat, n=100)
    return f"latency ms p50 {q[49] * 1e3:.2f}, p99 {q[98] * 1e3:.2f}, max {max(lat) * 1e3:.2f}"


def _write(cluster, name: str, n: int, size: int, rep: str, base: bytes) -> tuple[float, int, list[float]]:
    c = cluster.client(depth=CONCURRENCY)
    lat: list[float] = []
    started: dict[str, float] = {}
    errors: list[tuple[str, Exception]] = []

    def done(rec: str, exc: Exception | None) -> None:
        lat.append(time.perf_counter() - started[rec])
        if exc is not None:
            errors.append((rec, exc))

    total = 0
    t = time.perf_counter()
    with c.create(name, replication=rep) as f:
        for i in range(n):
            data = _body(base, i, size)
            total += len(data)
            rec = f"w{i:08d}"
            started[rec] = time.perf_counter()
            f.queue_put(rec, data, callback=done)
    dt = time.perf_counter() - t  # the close committed every record
    c.close()
    if errors or len(lat) != n:
        raise AssertionError(f"{name}: {len(lat)} of {n} puts acknowledged, errors {errors[:3]}")
    return dt, total, lat


def _read(cluster, name: str, n: int, size: int, base: bytes) -> tuple[float, int, list[float]]:
    order = list(range(n))
    random.Random(n).shuffle(order)
    c = cluster.client(depth=CONCURRENCY)
    lat: list[float] = []
    started: dict[str, float] = {}
    got = {"n": 0, "bytes": 0, "wrong": []}

    def done(rec: str, data: bytes | None, exc: Exception | None) -> None:
        lat.append(time.perf_counter() - started[rec])
        i = int(rec[1:])
        if exc is not None or data != _body(base, i, size):
            got["wrong"].append((rec, exc))
            return
        got["n"] += 1
        got["bytes"] += len(data)

    with c.open(name) as f:
        t = time.perf_counter()
        for i in order:
            rec = f"w{i:08d}"
            started[rec] = time.perf_counter()
            f.queue_get(rec, done)
        f.flush()
        dt = time.perf_counter() - t
    c.close()
    if got["wrong"] or got["n"] != n:
        raise AssertionError(f"{name}: {got['n']} of {n} records read back right; wrong: {got['wrong'][:3]}")
    return dt, int(got["bytes"]), lat


def case_weed_shape(tmp: Path, shapes: list[tuple[int, int]]) -> list[dict]:
    """``shapes``: (N, S) pairs; each runs x1 (on 1 peer, as weed on 1
    volume server) and x2 (on 2 peers, as weed on 2 with ``-replication 001``)."""
    rows = []
    for peers, rep in ((1, "x1"), (2, "x2")):
        cluster = fresh_cluster(tmp, f"weed-{rep}-", n_peers=peers).start()
        try:
            for n, size in shapes:
                base = os.urandom(size + 64)
                name = f"/bench/weed/{size}"
                wdt, wbytes, wlat = _write(cluster, name, n, size, rep, base)
                rdt, rbytes, rlat = _read(cluster, name, n, size, base)
                if rbytes != wbytes:
                    raise AssertionError(f"{name}: read {rbytes} bytes, wrote {wbytes}")
                label = f"{size // 1024}kib" if size < 1 << 20 else f"{size >> 20}mib"
                how = f"-n {n} -size {size} -c {CONCURRENCY}, {rep} on {peers} peer(s)"
                rows += [
                    row(
                        f"weed_write_{label}_{rep}",
                        n / wdt,
                        "ops/s",
                        note=f"as weed benchmark {how}: {wbytes / wdt / 1e6:,.1f} MB/s, {_percentiles(wlat)}; "
                        "one client, 16 PUTs in flight, committed at close",
                    ),
                    row(
                        f"weed_read_{label}_{rep}",
                        n / rdt,
                        "ops/s",
                        note=f"as weed benchmark {how}, random order: {rbytes / rdt / 1e6:,.1f} MB/s, "
                        f"{_percentiles(rlat)}; every reply checked against what was written",
                    ),
                ]
        finally:
            cluster.stop()
        rows += _seaweedfs(tmp, shapes, peers, rep, {r["name"]: r["value"] for r in rows})
    return rows


def _seaweedfs(tmp: Path, shapes: list[tuple[int, int]], volumes: int, rep: str, ours: dict[str, float]) -> list[dict]:
    """``weed benchmark`` itself on a SeaweedFS of ``volumes`` volume
    servers (x2: replication ``001``), started here right after
    StoreTorrent's run of the same shapes (:mod:`bench.seaweedfs`): rows
    ``weed_{write,read}_{label}_{rep}_vs_seaweedfs``, StoreTorrent's ops/s
    against SeaweedFS's. None without a ``weed`` binary."""
    from .seaweedfs import Seaweed, weed_bin

    if weed_bin() is None:
        return []
    rows = []
    with Seaweed(tmp, volumes=volumes) as sw:
        for n, size in shapes:
            got = sw.benchmark(n, size, CONCURRENCY, "000" if rep == "x1" else "001")
            label = f"{size // 1024}kib" if size < 1 << 20 else f"{size >> 20}mib"
            for op in ("write", "read"):
                rows.append(
                    row(
                        f"weed_{op}_{label}_{rep}_vs_seaweedfs",
                        ours[f"weed_{op}_{label}_{rep}"],
                        "ops/s",
                        f"weed benchmark -n {n} -size {size} -c {CONCURRENCY} on {volumes} volume server(s)",
                        got[f"{op}_ops"],
                        f"SeaweedFS {got[f'{op}_mbs']:,.1f} MB/s, measured right after",
                    )
                )
    return rows

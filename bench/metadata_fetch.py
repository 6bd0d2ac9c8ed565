"""Reads on a node without the namespace mount against the same reads over
it (issue 40's targets; docs/metadata-fetch.md)::

    .venv/bin/python -m bench.metadata_fetch [--records 100000] [--rounds 3]

Over one file of ``--records`` small raw records (x1, one local cluster of
2 peers), in one run, each side alternated round by round:

- **first read** (``metadata_first_read``): a new client opens the file,
  lists its names and GETs one record. ``shared``: the infofile read on
  the namespace the tracker writes (the NFS case; here the same disk, so
  the mount is at its fastest); ``fetch``: a client with an empty copy
  folder, so the whole infofile comes from the tracker first. Target:
  within 2x.
- **scans** (``metadata_scan_loop``, ``metadata_scan_read_unit``,
  ``metadata_scan_dask``): the one-process GET_LOCAL loop,
  ``scan.read_unit`` and the Dask reader (Dask's threaded scheduler here:
  every peer is on this host) over every record, with the copy made (a
  node that has read the file before). Target: >= 0.95 of the shared
  mount's rate.

- **GET cost** (``metadata_get_age0``, ``metadata_get_age1``): ms per GET,
  ``GETS`` GETs one after another through one handle, from a copy checked
  with the tracker at every read (``metadata_max_age_s=0``: one
  FetchInfofile per GET, the rule before close-to-open) and with the
  default age (1 s), against the shared mount's (docs/decisions.md,
  "Freshness of a local copy"). No target: the age's cost is the figure.

Every answer is checked (names, rows and byte sum equal what was written).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from st_py.client.client import Client

from .cases import fresh_cluster, row
from .smallrecords import _dask, _loop, _read_unit

GROUP = "metadata_fetch"
RECORD = 512  # bytes: the infofile, not the records, is what is measured
ENV = "STORETORRENT_METADATA"
GETS = 500  # GETs a round of the GET cost rows
SCANS = ("loop", "read_unit", "dask")  # the metadata_scan_* rows


def _client(cluster, mode: str, cache: Path) -> Client:
    return Client(cluster.tracker_addr, metadata=mode, metadata_cache=cache)


def _first_read(cluster, mode: str, tmp: Path, name: str, n: int) -> float:
    cache = Path(tempfile.mkdtemp(prefix=f"copies-{mode}-", dir=tmp))  # empty: nothing read here before
    t0 = time.perf_counter()
    c = _client(cluster, mode, cache)
    with c.open(name) as f:
        names = f.names()
        one = f.get(names[len(names) // 2])
    dt = time.perf_counter() - t0
    assert len(names) == n and len(one) == RECORD, (len(names), len(one))
    return dt


def _get_ms(cl: Client, name: str, keys: list[str]) -> float:
    """Milliseconds per GET: :data:`GETS` GETs one after another of ``keys``
    in turn, through one handle (opened, and one GET made, first)."""
    with cl.open(name) as f:
        f.get(keys[0])
        t0 = time.perf_counter()
        for i in range(GETS):
            assert len(f.get(keys[i % len(keys)])) == RECORD
        return (time.perf_counter() - t0) * 1000 / GETS


def _scan(fn, mode: str):
    old = os.environ.get(ENV)
    os.environ[ENV] = mode  # read_unit's own client (and any engine worker) reads it
    try:
        t0 = time.perf_counter()
        got = fn()
        return time.perf_counter() - t0, got
    finally:
        if old is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = old


def case_metadata_fetch(tmp: Path, records: int, rounds: int = 3) -> list[dict]:
    """The rows of the module docstring."""
    cluster = fresh_cluster(tmp, "fetch-", n_peers=2).start()
    try:
        name = "/bench/fetch"
        c = cluster.client()
        body = os.urandom(RECORD)
        with c.create(name, replication="x1") as f:
            for i in range(records):
                f.queue_put(f"r{i:08d}", body)
        want = (records, records * RECORD)
        first: dict[str, list[float]] = {"shared-mount": [], "fetch": []}
        for _ in range(rounds):
            for mode in first:
                first[mode].append(_first_read(cluster, mode, tmp, name, records))
        warm = Path(tempfile.mkdtemp(prefix="copies-warm-", dir=tmp))
        clients = {"shared-mount": _client(cluster, "shared-mount", warm), "fetch": _client(cluster, "fetch", warm)}
        scans: dict[str, list[float]] = {f"{k}_{m}": [] for k in SCANS for m in clients}
        for _ in range(rounds + 1):  # the first round warms the copy and the page cache
            for m, cl in clients.items():
                sides = (
                    ("loop", lambda cl=cl: _loop(cl, name)),
                    ("read_unit", lambda cl=cl: _read_unit(cl, cluster.tracker_addr, name)),
                    ("dask", lambda: _dask(cluster.tracker_addr, name, None)),
                )
                for k, fn in sides:
                    dt, got = _scan(fn, m)
                    assert got == want, (k, m, got, want)
                    scans[f"{k}_{m}"].append(dt)
        med = {k: statistics.median(v[1:]) for k, v in scans.items()}
        f_sh, f_fe = statistics.median(first["shared-mount"]), statistics.median(first["fetch"])
        spread = "; ".join(f"{k} " + "/".join(f"{x:.3f}" for x in v) for k, v in first.items())
        rows = [
            row(
                "metadata_first_read",
                f_fe,
                "s",
                "over the shared mount",
                f_sh,
                note=f"open + names() + one GET of a {records:,}-record file on a node with no copy "
                f"(fetch) against the namespace's infofile; target ratio <= 2; median of {rounds} (s: {spread})",
            )
        ]
        for k in SCANS:
            rate_f, rate_s = records / med[f"{k}_fetch"], records / med[f"{k}_shared-mount"]
            rows.append(
                row(
                    f"metadata_scan_{k}",
                    rate_f,
                    "records/s",
                    "over the shared mount",
                    rate_s,
                    note=f"{k} over {records:,} records from a local copy against the namespace's infofile; "
                    f"target ratio >= 0.95; median of {rounds} after a warm round",
                )
            )
        keys = [f"r{i:08d}" for i in range(0, records, max(records // 200, 1))]
        ways = {"shared": ("shared-mount", None), "age0": ("fetch", 0.0), "age1": ("fetch", 1.0)}
        gets: dict[str, list[float]] = {w: [] for w in ways}
        for _ in range(rounds):
            for w, (mode, age) in ways.items():
                cl = Client(cluster.tracker_addr, metadata=mode, metadata_cache=warm, metadata_max_age_s=age)
                try:
                    gets[w].append(_get_ms(cl, name, keys))
                finally:
                    cl.close()
        g = {w: statistics.median(v) for w, v in gets.items()}
        for w in ("age0", "age1"):
            rows.append(
                row(
                    f"metadata_get_{w}",
                    g[w],
                    "ms/GET",
                    "over the shared mount",
                    g["shared"],
                    note=f"{GETS} GETs of {RECORD}-byte records one after another from a copy checked "
                    + ("at every read" if w == "age0" else "once a second (the default age)")
                    + f"; shared mount {g['shared']:.3f} ms; median of {rounds}",
                )
            )
        return rows
    finally:
        cluster.stop()


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.metadata_fetch")
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="st-bench-fetch-") as d:
        for r in case_metadata_fetch(Path(d), a.records, a.rounds):
            ratio = f"  ({r['ratio']:.2f} of {r['baseline']})" if r["ratio"] else ""
            print(f"{r['name']:<26} {r['value']:>12.3f} {r['unit']}{ratio}\n    {r['note']}")


if __name__ == "__main__":
    main()

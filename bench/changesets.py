"""What keeping changesets costs the tracker's commits (issue 40;
docs/metadata-log.md, "Metadata on every node"): ``tracker_commit`` (groups
of 1000 records) and its group-40 row with the infofile writer keeping each
transaction's SQLite changeset, against the same with none kept
(``STORETORRENT_CHANGESET_WINDOW_BYTES=0``), in one run. And what a GET
costs a client reading a local copy (``--gets``): the shared mount against
``fetch`` checking every read (``metadata_max_age_s=0``) and with the
default age (docs/decisions.md, "Freshness of a local copy").

    .venv/bin/python -m bench.changesets [--records 20000] [--rounds 2] [--gets 500]

Each configuration is a fresh local cluster of one peer; the rounds
alternate the two and the best round of each is kept (the machine is shared).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from st_py.deploy.cluster import LocalCluster

from .cases import _commit_rate, row

GROUP = "changesets"
VAR = "STORETORRENT_CHANGESET_WINDOW_BYTES"


def _rate(tmp: Path, n: int, group: int, keep: bool, tag: str) -> float:
    old = os.environ.get(VAR)
    if not keep:
        os.environ[VAR] = "0"
    else:
        os.environ.pop(VAR, None)
    try:
        c = LocalCluster(Path(tempfile.mkdtemp(prefix=tag, dir=tmp)), n_peers=1)
        c.start()
    finally:
        if old is None:
            os.environ.pop(VAR, None)
        else:
            os.environ[VAR] = old
    try:
        return _commit_rate(c, f"/bench/cs-{tag}", n, group)
    finally:
        c.stop()


def case_changesets(tmp: Path, n: int, rounds: int = 2) -> list[dict]:
    """Rows ``changesets_commit`` (group 1000) and ``changesets_commit_group40``
    (records/s with changesets kept, against none kept)."""
    out = []
    for group, name in ((1000, "changesets_commit"), (40, "changesets_commit_group40")):
        off = on = 0.0
        m = n if group == 1000 else n // 5
        for i in range(rounds):
            off = max(off, _rate(tmp, m, group, False, f"off{group}-{i}-"))
            on = max(on, _rate(tmp, m, group, True, f"on{group}-{i}-"))
        out.append(row(name, on, "records/s", "no changesets", off, note=f"group {group}, {m} records"))
    return out


def _get_ms(c, name: str, keys: list[str], n: int) -> float:
    """Milliseconds per GET, ``n`` GETs one after another of ``keys`` in turn."""
    f = c.open(name)
    try:
        f.get(keys[0])  # the copy made, the connections open
        t0 = time.perf_counter()
        for i in range(n):
            f.get(keys[i % len(keys)])
        return (time.perf_counter() - t0) * 1000 / n
    finally:
        f.close()


def case_get_cost(tmp: Path, n: int, rounds: int = 3) -> list[dict]:
    """Rows ``fetch_get_age0`` and ``fetch_get_age1`` (ms per 1 KB GET from a
    local copy checked at every read, and checked once a second) against
    the shared mount's, one cluster of 3 peers, ``rounds`` alternated rounds,
    the median of each kept (the machine is shared)."""
    c = LocalCluster(Path(tempfile.mkdtemp(prefix="gets-", dir=tmp)), n_peers=3)
    c.start()
    try:
        keys = [f"k{i:04d}" for i in range(200)]
        with c.client().create("/bench/gets", replication="x2") as f:
            for k in keys:
                f.queue_put(k, os.urandom(1024))
        ways = {
            "shared": {"metadata": "shared-mount"},
            "age0": {"metadata": "fetch", "metadata_max_age_s": 0},
            "age1": {"metadata": "fetch", "metadata_max_age_s": 1.0},
        }
        got: dict[str, list[float]] = {w: [] for w in ways}
        for r in range(rounds):
            for w, kw in ways.items():
                cl = c.client(metadata_cache=str(tmp / f"cache-{w}-{r}"), **kw)
                got[w].append(_get_ms(cl, "/bench/gets", keys, n))
                cl.close()
    finally:
        c.stop()
    med = {w: statistics.median(v) for w, v in got.items()}
    note = f"{n} GETs of 1 KB one after another, 3 peers, median of {rounds} rounds"
    return [
        row("fetch_get_age0", med["age0"], "ms/GET", "shared mount", med["shared"], note=note),
        row("fetch_get_age1", med["age1"], "ms/GET", "shared mount", med["shared"], note=note),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.changesets")
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--gets", type=int, default=0, help="GETs per round of the GET-cost rows only (0: commits)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="st-bench-cs-") as d:
        if a.gets:
            rows = case_get_cost(Path(d), a.gets, a.rounds)
        else:
            rows = case_changesets(Path(d), a.records, a.rounds)
        for r in rows:
            ratio = f"  ({r['ratio']:.2f} of {r['baseline']})" if r["ratio"] else ""
            print(f"{r['name']:<28} {r['value']:>10.1f} {r['unit']}{ratio}  {r['note']}")


if __name__ == "__main__":
    main()

"""What keeping changesets costs the tracker's commits (issue 40;
docs/metadata-log.md, "Metadata on every node"): ``tracker_commit`` (groups
of 1000 records) and its group-40 row with the infofile writer keeping each
transaction's SQLite changeset, against the same with none kept
(``STORETORRENT_CHANGESET_WINDOW_BYTES=0``), in one run.

    .venv/bin/python -m bench.changesets [--records 20000] [--rounds 2]

Each configuration is a fresh local cluster of one peer; the rounds
alternate the two and the best round of each is kept (the machine is shared).
"""

from __future__ import annotations

import argparse
import os
import tempfile
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


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.changesets")
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="st-bench-cs-") as d:
        for r in case_changesets(Path(d), a.records, a.rounds):
            ratio = f"  ({r['ratio']:.2f} of {r['baseline']})" if r["ratio"] else ""
            print(f"{r['name']:<28} {r['value']:>10.1f} {r['unit']}{ratio}  {r['note']}")


if __name__ == "__main__":
    main()

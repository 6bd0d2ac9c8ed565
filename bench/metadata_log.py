"""The metadata log's cost: group commits through the log in etcd (3 real
members on this machine) against the local log, same group size, same run
(docs/metadata-log.md; issue 39's target: >= 0.8 of the local log).

    .venv/bin/python -m bench.metadata_log [--records 4000] [--group 40]

Each configuration is a fresh local cluster of one peer whose tracker keeps
its log locally (``<state-dir>/log.db``) or in etcd (``--etcd``); one client
commits ``records`` records of 4 KiB metadata in groups of ``group`` through
the tracker client (bench/cases.py ``_commit_rate``, as ``tracker_commit``
does), one commit at a time, so the figure is the latency of one group
commit. The rounds alternate the two, and the best round of each is kept
(the machine is shared). The log's cost per commit is the difference of the
two latencies.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from st_py.deploy.cluster import LocalCluster
from st_py.deploy.etcd import EtcdCluster

from .cases import _commit_rate, row

GROUP = "metadata_log"


def _rate(tmp: Path, n: int, group: int, tracker_args: list[str], tag: str) -> float:
    c = LocalCluster(Path(tempfile.mkdtemp(prefix=tag, dir=tmp)), n_peers=1, tracker_args=tracker_args)
    c.start()
    try:
        return _commit_rate(c, f"/bench/log-{tag}", n, group)
    finally:
        c.stop()


def case_metadata_log(tmp: Path, n: int, group: int = 40, rounds: int = 2) -> list[dict]:
    """Rows ``log_commit_etcd`` (records/s, against the local log's) and
    ``log_commit_cost`` (ms per group commit the replicated log adds)."""
    with EtcdCluster(Path(tempfile.mkdtemp(prefix="etcd-", dir=tmp)), 3) as etcd:
        local, remote = 0.0, 0.0
        for i in range(rounds):
            local = max(local, _rate(tmp, n, group, [], f"local{i}-"))
            args = ["--etcd", ",".join(etcd.endpoints), "--cluster-id", f"bench{i}", "--init-cluster"]
            remote = max(remote, _rate(tmp, n, group, args, f"etcd{i}-"))
    per_local, per_remote = group / local, group / remote  # seconds per group commit
    return [
        row(
            "log_commit_etcd",
            remote,
            "records/s",
            "local log",
            local,
            note=f"group {group}; 3 etcd members on this machine; target >= 0.8",
        ),
        row("log_commit_cost", (per_remote - per_local) * 1000, "ms/commit", note="what the etcd log adds per group"),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.metadata_log")
    ap.add_argument("--records", type=int, default=4000)
    ap.add_argument("--group", type=int, default=40)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="st-bench-log-") as d:
        for r in case_metadata_log(Path(d), a.records, a.group):
            ratio = f"  ({r['ratio']:.2f} of {r['baseline']})" if r["ratio"] else ""
            print(f"{r['name']:<20} {r['value']:>10.1f} {r['unit']}{ratio}  {r['note']}")


if __name__ == "__main__":
    main()

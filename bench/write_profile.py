"""Where a write's time goes, end to end (issue 31, item 1; docs/benchmarks.md,
"Where a write's time goes")::

    python -m bench.write_profile --size 4096 --replication x2 --records 20000
    python -m bench.write_profile --size 1048576 --replication x1 --records 512 --perf peers
    python -m bench.write_profile --size 4096 --replication x1 --records 20000 --trace peers

Starts a local cluster (1 tracker, 4 peers), puts ``--records`` records of
``--size`` bytes with one pipelined client, checks the committed count and
bytes, and prints the CPU microseconds per record of the client, the tracker
and the peers (``/proc/<pid>/stat``), the peers' read/write system calls
and the disk's requests (bench/procstat.py). ``--perf ROLE`` records the
role's processes with ``perf record -e cpu-clock -g`` (a software clock: it
works in VMs without hardware counters) and prints the top of ``perf
report``; ``--trace ROLE`` counts and times their system calls with ``perf
trace -s``; ``--pyspy ROLE`` samples the client's or the tracker's Python
stacks with py-spy (``pip install py-spy``) and prints the functions that
hold the most samples, by themselves and with what they call. ``--churn N``
creates and deletes N small files in the peers' ``files/`` first
(bench/churn.py's state).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from st_py.deploy.cluster import LocalCluster

from . import physical
from .cases import put_records
from .churn import CHURN_ID
from .procstat import Sampler


def _attach(tool: list[str], pids: list[int], out: Path) -> subprocess.Popen:
    p = subprocess.Popen(
        [*tool, "-p", ",".join(map(str, pids))],
        stdout=subprocess.DEVNULL,
        stderr=open(out, "w"),  # noqa: SIM115 (closed with the process)
    )
    time.sleep(1.0)  # attached before the work starts
    return p


def _folded_summary(path: Path, top: int = 25) -> str:
    """The functions of py-spy's folded stacks with the most samples: by
    themselves (leaf) and with their callees (inclusive), in percent."""
    leaf: dict[str, int] = {}
    incl: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack:
            continue
        k = int(n)
        total += k
        frames = [
            f.split(" (")[0] + " (" + f.split(" (")[1].split(":")[0] + ")" if " (" in f else f for f in stack.split(";")
        ]
        leaf[frames[-1]] = leaf.get(frames[-1], 0) + k
        for f in set(frames):
            incl[f] = incl.get(f, 0) + k
    out = [f"py-spy: {total} samples; self (leaf) time:"]
    out += [f"  {100 * v / total:5.1f}%  {f}" for f, v in sorted(leaf.items(), key=lambda x: -x[1])[:top]]
    out.append("with callees (inclusive):")
    out += [f"  {100 * v / total:5.1f}%  {f}" for f, v in sorted(incl.items(), key=lambda x: -x[1])[:top]]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.write_profile", description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=4096, help="bytes per record")
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--replication", default="x1", help="x1, x2, ...")
    ap.add_argument("--depth", type=int, default=0, help="pipeline depth (0: 64 below 64 KiB, else 16)")
    ap.add_argument("--peers", type=int, default=4)
    ap.add_argument("--peer-args", default="", help="extra st-peer arguments, space-separated")
    ap.add_argument("--perf", choices=("peers", "tracker", "client"), help="perf record -e cpu-clock -g of a role")
    ap.add_argument("--trace", choices=("peers", "tracker", "client"), help="perf trace -s of a role's syscalls")
    ap.add_argument(
        "--pyspy", choices=("tracker", "client"), help="py-spy record of a Python role (pip install py-spy)"
    )
    ap.add_argument("--churn", type=int, default=0, help="create and delete this many files next to the peers first")
    ap.add_argument("--dir", default=None, help="where the cluster lives (default: a temporary folder)")
    a = ap.parse_args(argv)
    top = Path(a.dir or tempfile.mkdtemp(prefix="st-wprof-"))
    data = os.urandom(a.size)
    records = [(f"r{i:07d}", data) for i in range(a.records)]
    depth = a.depth or (64 if a.size < 65536 else 16)
    with LocalCluster(top / "cluster", n_peers=a.peers, announce_interval=1.0, peer_args=a.peer_args.split()) as cl:
        put_records(cl, "/profile/warm", records[: min(200, len(records))], a.replication, depth)  # connections up
        if a.churn:  # in files/ of each peer, where a cluster's deleted records were (bench/churn.py)
            made = gone = 0.0
            for i in range(a.peers):
                m, g = physical.churn(
                    Path(cl.data_dir) / "peers" / f"peer-{i}" / "files" / CHURN_ID, a.churn // a.peers
                )
                made, gone = made + m, gone + g
            print(f"churn: {a.churn:,} files created in {made:.1f} s, deleted in {gone:.1f} s")
        pids = {
            "client": [os.getpid()],
            "tracker": [cl.tracker.pid] if cl.tracker else [],
            "peers": [p.pid for p in cl.peers if p],
        }
        tools = []
        if a.perf:
            perf_data = top / "perf.data"
            tools.append(
                (
                    "perf",
                    _attach(
                        ["perf", "record", "-e", "cpu-clock", "-g", "-o", str(perf_data)],
                        pids[a.perf],
                        top / "perf.log",
                    ),
                )
            )
        if a.trace:
            tools.append(("trace", _attach(["perf", "trace", "-s"], pids[a.trace], top / "trace.txt")))
        if a.pyspy:
            spy = ["py-spy", "record", "-r", "200", "-f", "raw", "-o", str(top / "pyspy.txt"), "--nonblocking"]
            tools.append(("pyspy", _attach(spy, pids[a.pyspy], top / "pyspy.log")))
        sampler = Sampler(cl, Path(cl.data_dir))
        dt = put_records(cl, "/profile/run", records, a.replication, depth)
        cost = sampler.stop()
        for _, p in tools:
            p.send_signal(signal.SIGINT)
            p.wait(timeout=120)
        c = cl.client()
        with c.open("/profile/run") as f:
            names = f.names()
            got = sum(m.size for m in f.records_meta(names).values())
        c.close()
        if (len(names), got) != (a.records, a.records * a.size):
            print(f"WRONG: {len(names)} records, {got} bytes committed", file=sys.stderr)
            return 1
    unit = f"{a.records * a.size / dt / 1e6:,.0f} MB/s" if a.size >= 65536 else f"{a.records / dt:,.0f} records/s"
    print(f"{a.records:,} x {a.size:,} B, {a.replication}, depth {depth}: {unit} (checked: count and bytes)")
    print(cost.text(a.records))
    if a.trace:
        print((top / "trace.txt").read_text())
    if a.pyspy:
        print(_folded_summary(top / "pyspy.txt"))
    if a.perf:
        rep = subprocess.run(
            [
                "perf",
                "report",
                "-i",
                str(top / "perf.data"),
                "--no-children",
                "--sort",
                "dso,sym",
                "--stdio",
                "-g",
                "none",
            ],
            capture_output=True,
            text=True,
        ).stdout
        lines = [ln for ln in rep.splitlines() if ln.strip() and not ln.startswith("#")]
        dso = subprocess.run(
            ["perf", "report", "-i", str(top / "perf.data"), "--no-children", "--sort", "dso", "--stdio", "-g", "none"],
            capture_output=True,
            text=True,
        ).stdout
        print("by binary: " + "; ".join(" ".join(ln.split()) for ln in dso.splitlines() if ln.strip() and ln[0] != "#"))
        print("\n".join(lines[:40]))
        print(f"(full profile: perf report -i {top / 'perf.data'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

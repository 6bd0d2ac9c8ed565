"""The peer's system calls per small PUT, by thread (issue 41, item 3).

    python -m bench.peer_syscalls [--records 2000] [--size 4096] [--peer-args "--sync"]
    python -m bench.peer_syscalls --ab OLD_ST_PEER NEW_ST_PEER --rounds 6 --records 20000 --dir /dev/shm

Without ``--ab``: one peer (every record lands on it), a warm-up file, then
``--records`` records of a new file put with ``queue_put`` (depth 64) while
``strace -f`` records every system call of the peer; prints the calls per
record of each thread (failed calls apart, ``openat(O_TMPFILE)`` named). The
peer binary is ``$ST_PEER_BIN`` as everywhere. strace slows the peer, so the
batches it reads are larger than without it: socket calls per record are a
lower bound, file calls exact.

With ``--ab``: the two binaries alternated ``--rounds`` times in one run
(the order swapped every round), one peer each, no strace; prints records/s
and the CPU microseconds per record of peer, client and tracker
(/proc/<pid>/stat) per round and the ratios. ``--dir /dev/shm`` keeps the
filesystem's state (ext4's scan of recently deleted inodes, docs/benchmarks.md
"Churn") out of the peer's CPU. Every run is checked (count and bytes).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from st_py.deploy.cluster import LocalCluster

from .cases import put_records
from .procstat import Sampler

_CALL = re.compile(r"^(\d+)\s+(\w+)\(")
_FAILED = re.compile(r"= -1 (E\w+)")


def _check(cl: LocalCluster, name: str, records: int, size: int) -> None:
    c = cl.client()
    with c.open(name) as f:
        names = f.names()
        got = sum(m.size for m in f.records_meta(names).values())
    c.close()
    if (len(names), got) != (records, records * size):
        raise SystemExit(f"WRONG: {len(names)} records, {got} bytes committed")


def count(trace: Path) -> dict[str, collections.Counter]:
    """Calls by thread id in an ``strace -f`` output: name -> count; a failed
    call as ``name (ERRNO)``; calls interrupted and resumed once."""
    per: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for line in trace.read_text().splitlines():
        m = _CALL.match(line)
        if m is None:
            continue  # "<... x resumed>" halves: counted at their start
        tid, call = m.groups()
        if call == "openat" and "O_TMPFILE" in line:
            call = "openat(O_TMPFILE)"
        failed = _FAILED.search(line)
        per[tid][call + (f" ({failed.group(1)})" if failed else "")] += 1
    return per


def trace(records: int, size: int, peer_args: list[str], top: Path) -> None:
    data = os.urandom(size)
    out = top / "strace.txt"
    with LocalCluster(top / "cluster", n_peers=1, announce_interval=1.0, peer_args=peer_args) as cl:
        put_records(cl, "/w/warm", [(f"w{i:05d}", data) for i in range(200)], "x1", 64)
        peer = cl.peers[0]
        assert peer is not None
        tracer = subprocess.Popen(
            ["strace", "-f", "-qq", "-o", str(out), "-p", str(peer.pid)], stderr=subprocess.DEVNULL
        )
        time.sleep(1.5)  # attached to every thread before the work starts
        dt = put_records(cl, "/w/run", [(f"r{i:07d}", data) for i in range(records)], "x1", 64)
        time.sleep(0.5)
        tracer.send_signal(signal.SIGINT)
        tracer.wait(timeout=60)
        _check(cl, "/w/run", records, size)
    print(f"{records:,} x {size:,} B x1 in {dt:.2f} s under strace (checked); {out}")
    for tid, calls in sorted(count(out).items(), key=lambda kv: -sum(kv[1].values())):
        total = sum(calls.values())
        print(f"thread {tid}: {total} calls, {total / records:.3f} per record")
        for k, v in calls.most_common():
            print(f"   {k:32s} {v:7d}  {v / records:.3f}/record")


def ab(old: str, new: str, rounds: int, records: int, size: int, peer_args: list[str], top: Path) -> None:
    bins = [("old", old), ("new", new)]
    data = os.urandom(size)
    recs = [(f"r{i:07d}", data) for i in range(records)]
    res: dict[str, list[tuple[float, dict[str, float]]]] = {"old": [], "new": []}
    for r in range(rounds):
        for label, binary in bins if r % 2 == 0 else bins[::-1]:
            os.environ["ST_PEER_BIN"] = binary
            with LocalCluster(top / f"{label}-{r}", n_peers=1, announce_interval=1.0, peer_args=peer_args) as cl:
                put_records(cl, "/w/warm", recs[:200], "x1", 64)
                s = Sampler(cl, top)
                dt = put_records(cl, "/w/run", recs, "x1", 64)
                us = s.stop().per_record_us(records)
                _check(cl, "/w/run", records, size)
            res[label].append((records / dt, us))
            print(
                f"round {r} {label}: {records / dt:8,.0f} records/s; CPU us/record: peer {us['peers']:.1f}, "
                f"client {us['client']:.1f}, tracker {us['tracker']:.1f}; load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    med = statistics.median
    for label in ("old", "new"):
        xs = res[label]
        rate, peer = med(x[0] for x in xs), med(x[1]["peers"] for x in xs)
        print(f"{label} median: {rate:,.0f} records/s, peer {peer:.1f} us/record")
    o, n = res["old"], res["new"]
    print("new/old records/s by round:", [round(n[i][0] / o[i][0], 2) for i in range(rounds)])
    cpu = [round(n[i][1]["peers"] / o[i][1]["peers"], 2) for i in range(rounds)]
    print("new/old peer CPU per record by round:", cpu)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.peer_syscalls", description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--size", type=int, default=4096, help="bytes per record")
    ap.add_argument("--peer-args", default="", help="extra st-peer arguments, space-separated")
    ap.add_argument("--ab", nargs=2, metavar=("OLD", "NEW"), help="two st-peer binaries to compare (no strace)")
    ap.add_argument("--rounds", type=int, default=6, help="--ab: alternated rounds")
    ap.add_argument("--dir", default=None, help="where the clusters live (default: a temporary folder)")
    a = ap.parse_args(argv)
    top = Path(tempfile.mkdtemp(prefix="st-peer-sys-", dir=a.dir))
    if a.ab:
        ab(a.ab[0], a.ab[1], a.rounds, a.records, a.size, a.peer_args.split(), top)
    else:
        trace(a.records, a.size, a.peer_args.split(), top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

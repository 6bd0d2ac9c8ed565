"""Per-file trackers (paper 3.5): the aggregate commit rate of concurrent
writers of different files with 1, 2 and 4 tracker processes.

    .venv/bin/python -m bench.file_trackers [--writers 4] [--records 20000] [--group 40] [--trackers 1,2,4]

For each count T of tracker processes a local cluster runs with
``--file-trackers T-1`` (the master and T-1 per-file trackers; files hash
over the T by name). W writer processes each create a file of their own
(names chosen so each tracker takes the same number of files: a hash
spreads a handful of names unevenly) and, all starting together, commit
``records`` records of 4 KiB metadata each in groups of ``group`` through
the tracker client, two commits in flight per writer (as the client's
group committer keeps them), on the tracker the master redirected the file
to (as bench/cases.py case_tracker_commit does against one tracker). The
figure is all the writers' records over the time from the first writer's
start to the last one's end. Beside it: the CPU seconds each tracker
process and the writers used, and the share of the machine left idle
(/proc, Linux), which say what bounds the rate; and the rate the busiest
tracker process allows when each has a core of its own (records over its
CPU seconds: per-file trackers on other cores or machines, writers
elsewhere), the figure that says how the design scales beyond this machine.

Every commit of a per-file tracker is admitted by the master (one small
Admit RPC per group of concurrent commits, st_py/tracker/admission.py), so
the master's share of the work does not go away. One tracker process is
bound by its interpreter lock at about one core; T processes can use T
cores, less what the writers and the admissions take.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from st_py.deploy.cluster import LocalCluster  # noqa: E402
from st_py.tracker.shards import shard_of  # noqa: E402

IN_FLIGHT = 2  # commits each writer keeps in flight (st_py.client.group_commit.MAX_COMMITS_IN_FLIGHT)


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _idle() -> tuple[int, int]:
    """(idle + iowait, total) jiffies of the whole machine (/proc/stat)."""
    v = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return v[3] + v[4], sum(v)


def _writer(addr: str, name: str, records: int, group: int, start_at: float, out) -> None:
    """One writer process: commit ``records`` records to file ``name`` in
    groups of ``group`` on the file's tracker, ``IN_FLIGHT`` at a time, from
    ``start_at`` (unix s); puts ``(start, end, records, cpu_s)`` on ``out``
    (unix s; its own CPU seconds while committing)."""
    from st_py._proto import tracker_pb2 as pb
    from st_py.wire.tracker_client import TrackerClient

    master = TrackerClient(addr)
    info = master.open(name)
    t = master.at(info.file_tracker)
    batches = [
        [
            pb.RecordCommit(name=f"r{i:08d}", size=4096, crc32c=i, peer_idx=[0])
            for i in range(s, min(records, s + group))
        ]
        for s in range(0, records, group)
    ]
    time.sleep(max(0.0, start_at - time.time()))
    c0, t0 = os.times(), time.time()
    flying: deque = deque()
    for b in batches:
        if len(flying) >= IN_FLIGHT:
            flying.popleft().result()
        flying.append(t.commit_async(name, info.file_id, b))
    for f in flying:
        f.result()
    c1 = os.times()
    out.put((t0, time.time(), records, c1.user + c1.system - c0.user - c0.system))
    master.close()


def balanced_names(prefix: str, writers: int, shards: int) -> list[str]:
    """``writers`` file names under ``prefix`` spread evenly over ``shards``
    (round-robin by shard)."""
    out: list[str] = []
    i = 0
    while len(out) < writers:
        want = len(out) % shards
        name = f"{prefix}/w{i}"
        if shard_of(name, shards) == want:
            out.append(name)
        i += 1
    return out


def run(trackers: int, writers: int, records: int, group: int, tmp: Path) -> dict:
    """The aggregate commit rate with ``trackers`` tracker processes: a
    dict of plain numbers (records/s, seconds, processes)."""
    with LocalCluster(tmp / f"trackers-{trackers}", n_peers=1, announce_interval=1.0, file_trackers=trackers - 1) as cl:
        c = cl.client()
        names = balanced_names("/bench/ft", writers, trackers)
        for n in names:
            c.create(n, replication="x1").close()
        ctx = mp.get_context("spawn")  # gRPC and fork do not mix
        out = ctx.Queue()
        pids = [cl.tracker.pid] + [t.pid for t in c.status().file_trackers]
        start_at = time.time() + 3.0  # every writer has started and opened its file by then
        procs = [ctx.Process(target=_writer, args=(cl.tracker_addr, n, records, group, start_at, out)) for n in names]
        for p in procs:
            p.start()
        time.sleep(max(0.0, start_at - time.time()))
        cpu0, idle0 = [_cpu_s(p) for p in pids], _idle()
        results = [out.get(timeout=600) for _ in procs]
        cpu1, idle1 = [_cpu_s(p) for p in pids], _idle()
        for p in procs:
            p.join(60)
        begin, end = min(r[0] for r in results), max(r[1] for r in results)
        total = sum(r[2] for r in results)
        admitted = sum(t.commits for t in c.status().file_trackers)
    return {
        "trackers": trackers,
        "writers": writers,
        "group": group,
        "records": total,
        "seconds": round(end - begin, 3),
        "records_per_s": round(total / (end - begin)),
        "commits_per_s": round(total / group / (end - begin)),
        "commits_on_file_trackers": admitted,
        "tracker_cpu_s": [round(b - a, 2) for a, b in zip(cpu0, cpu1)],
        "writers_cpu_s": round(sum(r[3] for r in results), 2),
        "machine_idle": round((idle1[0] - idle0[0]) / max(1, idle1[1] - idle0[1]), 2),
        "records_per_busiest_cpu_s": round(total / max(b - a for a, b in zip(cpu0, cpu1))),
    }


def main(argv: list[str] | None = None) -> list[dict]:
    """Run the benchmark and print one line per tracker count (and JSON
    with ``--json``); returns the rows."""
    ap = argparse.ArgumentParser(
        prog="python -m bench.file_trackers", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--writers", type=int, default=4, help="writer processes, one file each")
    ap.add_argument("--records", type=int, default=20_000, help="records each writer commits")
    ap.add_argument("--group", type=int, default=40, help="records per commit (the paper's group commit: 40)")
    ap.add_argument("--trackers", default="1,2,4", help="tracker process counts to run (1: the master alone)")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON too")
    a = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="st-bench-ft-") as tmp:
        for t in (int(x) for x in a.trackers.split(",")):
            rows.append(run(t, a.writers, a.records, a.group, Path(tmp)))
            base = rows[0]["records_per_s"]
            r = rows[-1]
            print(
                f"{r['trackers']} tracker process{'es' if r['trackers'] > 1 else ''}: {r['records_per_s']:>9,} "
                f"records/s ({r['commits_per_s']:,} commits/s of {a.group}), {a.writers} writers, "
                f"x{r['records_per_s'] / base:.2f}; CPU s in {r['seconds']:.2f} s: trackers "
                f"{'+'.join(map(str, r['tracker_cpu_s']))}, writers {r['writers_cpu_s']}; machine idle "
                f"{r['machine_idle']:.0%} of {os.cpu_count()} cores; a core each: "
                f"{r['records_per_busiest_cpu_s']:,} records/s "
                f"(x{r['records_per_busiest_cpu_s'] / rows[0]['records_per_busiest_cpu_s']:.2f})",
                flush=True,
            )
    if a.json:
        print(json.dumps(rows, indent=1))
    return rows


if __name__ == "__main__":
    main()


GROUP = "file_trackers"


def case_file_trackers(tmp: Path, records: int, writers: int = 4, counts=(1, 2, 4)) -> list[dict]:
    """``./dev bench`` rows: the aggregate commit rate of ``writers``
    writers of different files with 1, 2 and 4 tracker processes, each
    against one (the master alone) in the same run, and what each would
    reach with a core of its own (records per CPU second of the busiest
    tracker process)."""
    from .cases import row

    rows = [run(t, writers, records, 40, tmp) for t in counts]
    base, base_cpu = rows[0]["records_per_s"], rows[0]["records_per_busiest_cpu_s"]
    out = []
    for r in rows:
        note = (
            f"{writers} writer processes, {records:,} records each in commits of 40, to files spread over the "
            f"trackers; tracker CPU s {'+'.join(map(str, r['tracker_cpu_s']))}, machine idle "
            f"{r['machine_idle']:.0%}"
        )
        out.append(
            row(
                f"file_trackers_{r['trackers']}",
                r["records_per_s"],
                "records/s",
                "the master alone (1 tracker process)",
                base,
                note=note,
            )
        )
        out.append(
            row(
                f"file_trackers_{r['trackers']}_core_each",
                r["records_per_busiest_cpu_s"],
                "records/s",
                "the master alone",
                base_cpu,
                note="records per CPU second of the busiest tracker process: the rate with a core each",
            )
        )
    return out

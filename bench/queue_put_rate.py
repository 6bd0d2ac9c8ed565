"""``queue_put`` one record a call (issue 41: consecutive puts ride the
batch path): one run, in a process of its own, on a fresh cluster, of
``--records`` 4 KiB records x1 then x2, depth 64, with the CPU seconds of
each role (bench/procstat.py). Prints one JSON line per class. Run it with
either tree's python to compare two trees in one alternated series
(docs/benchmarks.md, "queue_put one record at a time")::

    python bench/queue_put_rate.py --records 20000 [--profile out.prof]
    python bench/queue_put_rate.py --compare PY_A,PY_B --rounds 6

``--compare`` runs one such process per tree and round, alternating the
trees (their order swapped every round; ``PY:batch`` runs ``StFile.write``
of batches of 1,000 with that python, as a reference), and prints each run's line and
the medians and ranges of the rates and of the CPU per record by role.
Every answer is checked: the committed count equals the records written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # procstat, whichever tree's python runs this

from procstat import Sampler  # noqa: E402

from st_py.deploy.cluster import LocalCluster  # noqa: E402

RECORD = 4096


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--classes", default="x1,x2")
    ap.add_argument("--tmp", default=tempfile.gettempdir())
    ap.add_argument("--profile", default=None, help="cProfile the x1 run into this file")
    ap.add_argument("--compare", default=None, help="PY_A,PY_B: alternate runs of these pythons")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--linger", type=float, default=None, help="put_slices.LINGER, seconds (this tree)")
    ap.add_argument("--work-us", type=float, default=0.0, help="CPU work between two calls (a producer)")
    ap.add_argument("--batch", action="store_true", help="StFile.write of batches of 1,000 instead (a reference)")
    ap.add_argument("--slice", type=int, default=None, help="batch_writer.SLICE, records (this tree)")
    a = ap.parse_args()
    if a.compare:
        compare(a.compare.split(","), a.rounds, a.records, a.classes, a.tmp)
        return
    if a.linger is not None:
        import st_py.client.put_slices as ps

        ps.LINGER = a.linger
    if a.slice is not None:
        import st_py.client.batch_writer as bw

        bw.SLICE = a.slice
    root = Path(tempfile.mkdtemp(prefix="qput-", dir=a.tmp))
    cluster = LocalCluster(root, n_peers=4, announce_interval=1.0).start()
    try:
        client = cluster.client(depth=64)
        bodies = [os.urandom(RECORD) for _ in range(1024)]
        names = [f"r{i:08d}" for i in range(a.records)]
        for rep in a.classes.split(","):
            prof = None
            if a.profile and rep == "x1":
                import cProfile

                prof = cProfile.Profile()
            s = Sampler(cluster, root)
            t = time.perf_counter()
            if prof:
                prof.enable()
            with client.create(f"/bench/q-{rep}", replication=rep) as f:
                for s0 in range(0, len(names) if a.batch else 0, 1000):
                    f.write(_batch_of(names[s0 : s0 + 1000], bodies, s0))
                for i, n in enumerate([] if a.batch else names):
                    if a.work_us:
                        end = time.perf_counter() + a.work_us / 1e6
                        while time.perf_counter() < end:
                            pass
                    f.queue_put(n, bodies[i % 1024])
                f.flush()
                slices = getattr(f, "put_slices", (0, 0))[0]
            if prof:
                prof.disable()
                prof.dump_stats(a.profile)
            dt = time.perf_counter() - t
            cost = s.stop()
            with client.open(f"/bench/q-{rep}") as f:
                assert len(f) == a.records, (rep, len(f))
            us = {k: v * 1e6 / a.records for k, v in cost.cpu.items()}
            import st_py

            out = {"class": rep, "rate": a.records / dt, "us": us, "load": os.getloadavg()[0]}
            out |= {"st_py": st_py.__file__, "slices": slices}
            print(json.dumps(out), flush=True)
    finally:
        cluster.stop()
        import shutil

        shutil.rmtree(root, ignore_errors=True)


def _batch_of(names: list[str], bodies: list[bytes], start: int):
    """A WriteBatch of ``names`` with the bodies the queue_put loop gives them."""
    from st_py import WriteBatch

    b = WriteBatch()
    for i, n in enumerate(names, start):
        b.put(n, bodies[i % 1024])
    return b


def compare(pythons: list[str], rounds: int, records: int, classes: str, tmp: str) -> None:
    """Alternate runs of ``pythons`` (one process, one fresh cluster a run) and print the medians."""
    import statistics
    import subprocess

    runs: dict[tuple[str, str], list[dict]] = {}
    for k in range(rounds):
        order = pythons if k % 2 == 0 else pythons[::-1]
        for entry in order:
            py, _, mode = entry.partition(":")  # "PY" or "PY:batch"
            cmd = [py, __file__, "--records", str(records), "--classes", classes, "--tmp", tmp]
            cmd += ["--batch"] if mode == "batch" else []
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd="/")
            if p.returncode != 0:
                print(f"round {k} {py}: failed: {p.stderr[-2000:]}", flush=True)
                continue
            for line in p.stdout.splitlines():
                r = json.loads(line)
                runs.setdefault((entry, r["class"]), []).append(r)
                print(f"round {k} {entry} {line}", flush=True)
    med = statistics.median
    for (py, rep), rs in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        rates = [r["rate"] for r in rs]
        line = f"{rep} {py}: {med(rates):,.0f} records/s ({min(rates):,.0f}-{max(rates):,.0f}, {len(rs)} runs)"
        for role in rs[0]["us"]:
            v = [r["us"][role] for r in rs]
            line += f"; {role} {med(v):.1f} ({min(v):.1f}-{max(v):.1f}) us"
        loads = [r["load"] for r in rs]
        print(line + f"; load {min(loads):.1f}-{max(loads):.1f}", flush=True)


if __name__ == "__main__":
    main()

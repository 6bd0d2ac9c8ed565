"""Impact control that follows the host's load (``st-peer
--yield-to-host-load``; FreeLoader seed 004, 4.2 and 5.4): does a peer give
way while other work takes the host's CPU, and take its limits back after?

``python -m bench.host_load [--phase 12] [--read-mb-per-s 100] [--floor 0.1]
[--burners N] [--rounds 1] [--json PATH]``

One peer with ``--max-read-mb-per-s`` (and, in the second run, without
``--yield-to-host-load``, the control); a client GETs 1 MiB records from it
as fast as the limit lets it, 16 in flight, for three phases of ``--phase``
seconds: nothing else, then ``--burners`` CPU-burning processes (default:
one per CPU; the host's "native workload"), then nothing again. Per phase it
reports the peer's read rate, the factor on its limits and the share of the
host's CPU other processes used (both from its /metrics, sampled twice a
second; that share includes this client and whatever else runs on the
machine), and the burners' progress (loops per second, the native
workload's throughput with the peer yielding and not). The first 2 s of a
phase, and 5 s after the burners stop (the limits come back by 0.25 a
second), are left out of its means. ``--rounds N`` alternates the two runs
N times (the machine's other load moves the figures: compare rounds).

Not a case of ``python -m bench``: each pair of runs takes over a minute,
and the figures want a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from st_py.deploy.cluster import LocalCluster

MiB = 1 << 20
# A native workload: spins, counting, and prints the count on SIGTERM.
BURN = (
    "import signal, sys\nn = 0\n"
    "def stop(*_):\n    print(n, flush=True)\n    sys.exit(0)\n"
    "signal.signal(signal.SIGTERM, stop)\nwhile True:\n    n += 1\n"
)


def scrape(addr: str) -> dict[str, float]:
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith(("st_peer_impact_scale ", "st_peer_host_other_cpu_ratio ")):
            name, value = line.split()
            out[name] = float(value)
    return out


def run(tmp: Path, yield_to_host: bool, phase: float, read_mb_per_s: float, floor: float, burners: int) -> dict:
    args = ["--max-read-mb-per-s", str(read_mb_per_s)]
    if yield_to_host:
        args += ["--yield-to-host-load", "--yield-floor", str(floor)]
    cluster = LocalCluster(
        Path(tempfile.mkdtemp(prefix="hostload-", dir=tmp)), n_peers=1, announce_interval=1.0, peer_args=args
    ).start()
    try:
        c = cluster.client(depth=16)
        data = os.urandom(MiB)
        with c.create("/bench/hostload", "x1") as f:
            for i in range(64):
                f.queue_put(f"r{i:02d}", data)
        metrics_addr = cluster.peers[0].metrics_addr
        assert metrics_addr
        samples: list[tuple[float, dict[str, float]]] = []
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                try:
                    samples.append((time.perf_counter(), scrape(metrics_addr)))
                except OSError:
                    pass
                done.wait(0.5)

        f = c.open("/bench/hostload")
        got: list[float] = []  # completion time of each GET
        procs: list[subprocess.Popen] = []
        burn_t: list[float] = []
        sampler = threading.Thread(target=sample, daemon=True)
        t0 = time.perf_counter()
        sampler.start()
        pending = []
        i = 0
        try:
            while True:
                now = time.perf_counter() - t0
                if not procs and not burn_t and now >= phase:
                    procs = [
                        subprocess.Popen([sys.executable, "-c", BURN], stdout=subprocess.PIPE, text=True)
                        for _ in range(burners)
                    ]
                    burn_t.append(time.perf_counter())
                if procs and len(burn_t) == 1 and now >= 2 * phase:
                    for p in procs:
                        p.send_signal(signal.SIGTERM)
                    burn_t.append(time.perf_counter())
                if now >= 3 * phase:
                    break
                while len(pending) < 16:
                    pending.append(f.queue_get(f"r{i % 64:02d}"))
                    i += 1
                assert len(pending.pop(0).result()) == MiB
                got.append(time.perf_counter() - t0)
            for p in pending:
                p.result()
        finally:
            loops = []
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
                out, _ = p.communicate(timeout=10)
                loops.append(int(out.strip() or 0))
            done.set()
            sampler.join()
        f.close()
        c.close()
    finally:
        cluster.stop()

    def mean_rate(a: float, b: float) -> float:
        return sum(1 for t in got if a <= t < b) * MiB / (b - a) / 1e6

    def mean_metric(name: str, a: float, b: float) -> float | None:
        vals = [m[name] for t, m in samples if a <= t - t0 < b and name in m]
        return sum(vals) / len(vals) if vals else None

    windows = {"before": (2, phase), "during": (phase + 2, 2 * phase), "after": (2 * phase + 5, 3 * phase)}
    out: dict = {
        "yield_to_host_load": yield_to_host,
        "read_mb_per_s": read_mb_per_s,
        "floor": floor,
        "burners": burners,
        "phase_s": phase,
    }
    for key, (a, b) in windows.items():
        out[key] = {
            "mb_per_s": mean_rate(a, b),
            "scale": mean_metric("st_peer_impact_scale", a, b),
            "other_cpu": mean_metric("st_peer_host_other_cpu_ratio", a, b),
        }
    out["burner_loops_per_s"] = sum(loops) / (burn_t[1] - burn_t[0]) if len(burn_t) == 2 else None
    # the recovery: the first second after the burners stop at 90% of the rate before
    before = out["before"]["mb_per_s"]
    out["back_after_s"] = next(
        (s for s in range(int(phase)) if mean_rate(2 * phase + s, 2 * phase + s + 1) >= 0.9 * before), None
    )
    out["per_second_mb"] = [round(mean_rate(s, s + 1), 1) for s in range(int(3 * phase))]
    out["per_second_scale"] = [
        round(v, 2) if (v := mean_metric("st_peer_impact_scale", s, s + 1)) is not None else None
        for s in range(int(3 * phase))
    ]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.host_load", description=__doc__.split("\n\n")[0])
    ap.add_argument("--phase", type=float, default=12.0, help="seconds of each phase (default 12)")
    ap.add_argument("--read-mb-per-s", type=float, default=100.0, help="the peer's read limit (default 100)")
    ap.add_argument("--floor", type=float, default=0.1, help="--yield-floor (default 0.1)")
    ap.add_argument(
        "--burners", type=int, default=os.cpu_count() or 1, help="CPU-burning processes (default: one per CPU)"
    )
    ap.add_argument("--rounds", type=int, default=1, help="pairs of runs, alternated (default 1)")
    ap.add_argument("--json", type=Path, help="write the results here")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-hostload-") as tmp:
        runs = [
            run(Path(tmp), y, a.phase, a.read_mb_per_s, a.floor, a.burners)
            for _ in range(a.rounds)
            for y in (True, False)
        ]
    print(
        f"1 MiB GETs from one peer with --max-read-mb-per-s {a.read_mb_per_s:g}, 16 in flight; "
        f"{a.burners} CPU burners in the middle {a.phase:g} s of {3 * a.phase:g} s\n"
    )
    print(
        "| peer | before: MB/s (factor, other CPU) | burners running | after | burners' loops/s | back to 90% after |"
    )
    print("|---|---|---|---|---|---|")

    def cell(p: dict) -> str:
        extra = []
        if p["scale"] is not None:
            extra.append(f"{p['scale']:.2f}")
        if p["other_cpu"] is not None:
            extra.append(f"{100 * p['other_cpu']:.0f}%")
        return f"{p['mb_per_s']:.1f}" + (f" ({', '.join(extra)})" if extra else "")

    for r in runs:
        name = f"`--yield-to-host-load --yield-floor {r['floor']:g}`" if r["yield_to_host_load"] else "without it"
        back = f"{r['back_after_s']} s" if r["back_after_s"] is not None else "-"
        print(
            f"| {name} | {cell(r['before'])} | {cell(r['during'])} | {cell(r['after'])} | "
            f"{r['burner_loops_per_s'] / 1e6:.1f} M | {back} |"
        )
    print()
    for r in runs:
        print(("yield" if r["yield_to_host_load"] else "plain") + " MB/s per second:", r["per_second_mb"])
        if r["yield_to_host_load"]:
            print("yield factor per second:", r["per_second_scale"])
    if a.json:
        a.json.write_text(json.dumps(runs, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

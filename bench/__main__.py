"""``python -m bench [--quick]``: StoreTorrent against the physical limit.

Every case measures StoreTorrent and its baseline in the same run on the same
records, and reports the ratio (StoreTorrent / baseline). Prints a table,
writes ``bench/results/latest.json`` and plots under ``docs/``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

from rich.console import Console
from rich.table import Table

from . import (
    analysis,
    batch_write,
    cases,
    churn,
    duckdb_data,
    durability,
    engine_records,
    file_trackers,
    filters,
    history,
    hotspot,
    listing,
    metadata_fetch,
    metadata_log,
    protocols,
    report,
    s3,
    scale,
    smallrecords,
    smallscan,
    striping,
    throttle,
    weed_shape,
)
from .targets import AT_MOST, TARGETS, fmt, meets, target_text

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "bench" / "results" / "latest.json"
SIZES = {
    "quick": dict(
        put1m=128,
        put4k=10_000,
        depth1=4_000,
        get1m=128,
        arrow=96,
        commit_big=20_000,
        commit_one=200,
        duckdb=1_000_000,
        mem=96,
        scale_records=[1_000, 10_000],
        scale_peers=[1, 2, 4, 8],
        # bench/analysis.py: MiB of Parquet records (and per record), Ray write, bounded-memory file
        analysis=96,
        analysis_record=8,
        raywrite=64,
        raywrite_block=16,
        bounded=2048,
        ray_store=80,
        dask_limit=512,
        rounds=3,
        ray_rounds=3,
        warm=True,
        proto1m=24,
        proto4k=2_000,
        small=10_000,
        small_parquet=1_000,
        duckdb_records=2_000,
        ft_records=4_000,
        log_records=2_000,
        curve_records=[10_000, 30_000],
        curve_meta=[100_000, 300_000],
        curve_files=[100, 500],
        listing=20_000,
        churn=(5_000, 64, 25_000),  # bench/churn.py: 4 KiB records, 1 MiB records, files of a churn
        history=[100_000],  # bench/history.py: records of the infofile read as of a snapshot
        weed=[(5_000, 4096), (128, 1 << 20)],  # bench/weed_shape.py: (N, S) of weed benchmark -n N -size S
        batch=10_000,  # bench/batch_write.py: 4 KiB records a side and round
        engine_records=20_000,  # bench/engine_records.py: small records a Dask job writes
        s3=(200, 32, 96 << 20),  # bench/s3.py: objects of 4 KiB and of 1 MiB, PUT then GET, 16 clients; a striped GET
        fetch_records=10_000,  # bench/metadata_fetch.py: records of the file read without the mount
    ),
    "full": dict(
        put1m=512,
        put4k=50_000,
        depth1=20_000,
        get1m=512,
        arrow=384,
        commit_big=100_000,
        commit_one=500,
        duckdb=1_000_000,
        mem=256,
        scale_records=[1_000, 10_000, 100_000],
        scale_peers=[1, 2, 4, 8],
        analysis=1024,
        analysis_record=16,
        raywrite=512,
        raywrite_block=16,
        bounded=4096,
        ray_store=80,
        dask_limit=512,
        rounds=3,
        ray_rounds=3,
        warm=True,
        proto1m=128,
        proto4k=10_000,
        small=100_000,
        small_parquet=5_000,
        duckdb_records=10_000,
        ft_records=20_000,
        log_records=8_000,
        curve_records=[10_000, 100_000],
        curve_meta=[100_000, 1_000_000],
        curve_files=[100, 1_000],
        listing=100_000,
        churn=(50_000, 512, 300_000),
        history=[1_000_000],
        weed=[(20_000, 4096), (512, 1 << 20)],
        batch=50_000,
        engine_records=1_000_000,
        s3=(2_000, 256, 256 << 20),
        fetch_records=100_000,
    ),
}
# ./dev bench --scale: the scale curves alone, to 10^6 records on the peers, 10^7 in one infofile, 10^4 files
SCALE = dict(
    curve_records=[10_000, 100_000, 1_000_000],
    curve_meta=[100_000, 1_000_000, 10_000_000],
    curve_files=[100, 1_000, 10_000],
)


_ROLE_COLOR = {"client": "tab:blue", "tracker": "tab:orange", "peer": "tab:green"}


def plots(results: list[dict], folder: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    ratios = [r for r in results if r["name"] in TARGETS and r["ratio"] is not None]
    if ratios:
        fig, ax = plt.subplots(figsize=(7, 0.8 + 0.3 * len(ratios)))
        names = [r["name"] for r in ratios]
        vals = [
            TARGETS[r["name"]] / max(r["ratio"], 1e-9) if r["name"] in AT_MOST else r["ratio"] / TARGETS[r["name"]]
            for r in ratios
        ]
        ax.barh(names, vals, color=["tab:green" if v >= 1 else "tab:red" for v in vals])
        ax.axvline(1.0, color="k", lw=1)
        ax.set_xlabel("measured ratio / target ratio (>= 1 meets the target)")
        ax.set_title("StoreTorrent vs. physical baselines, same run")
        fig.tight_layout()
        p = folder / "bench_ratios.png"
        fig.savefig(p, dpi=110)
        out.append(str(p))
    physical = [r for r in results if r["name"].endswith("_vs_physical") and r["ratio"] is not None]
    if physical:  # issue 31: each StoreTorrent path as a fraction of the machine's limit for it
        fig, ax = plt.subplots(figsize=(7, 0.8 + 0.3 * len(physical)))
        names = [r["name"].removesuffix("_vs_physical") for r in physical]
        vals = [r["ratio"] for r in physical]
        ax.barh(names, vals, color="tab:blue")
        for i, r in enumerate(physical):
            if r["name"] in TARGETS:
                ax.plot([TARGETS[r["name"]]], [i], "k|", markersize=14)
        ax.axvline(1.0, color="k", lw=1)
        ax.set_xlabel("StoreTorrent / a C program on the same files\n(1: the machine's limit; |: the target)")
        ax.set_title("Each path as a fraction of its physical limit, same run")
        fig.tight_layout()
        p = folder / "bench_physical.png"
        fig.savefig(p, dpi=110)
        out.append(str(p))
    cpu = [r for r in results if r["name"].startswith("cpu_4kib_") and r.get("parts")]
    if cpu:  # issue 41, item 4: where a 4 KiB record's CPU goes, by role, beside the C program's
        fig, ax = plt.subplots(figsize=(7, 1.2 + 0.45 * len(cpu)))
        labels = []
        for i, r in enumerate(cpu):
            left = 0.0
            for role, v in r["parts"].items():
                if role == "C program":
                    continue
                ax.barh(i, v, left=left, color=_ROLE_COLOR.get(role.rstrip("0123456789"), "tab:gray"), edgecolor="w")
                left += v
            if "C program" in r["parts"]:
                ax.plot([r["parts"]["C program"]], [i], "kd", markersize=8)
            labels.append(r["name"].removeprefix("cpu_4kib_").replace("_", " "))
        ax.set_yticks(range(len(cpu)), labels)
        ax.set_xlabel("CPU us per 4 KiB record (client, tracker, each peer a segment; diamond: the C program)")
        ax.legend(
            handles=[plt.Rectangle((0, 0), 1, 1, color=c) for c in _ROLE_COLOR.values()],
            labels=list(_ROLE_COLOR),
            loc="lower right",
        )
        ax.set_title("Where a record's CPU goes, same run")
        fig.tight_layout()
        p = folder / "bench_cpu_per_record.png"
        fig.savefig(p, dpi=110)
        out.append(str(p))
    for prefix, xlabel, fname in (
        ("scaling_put_x2_records_", "records", "bench_scaling_records.png"),
        ("scaling_put_peers_", "peers", "bench_scaling_peers.png"),
    ):
        put = [(int(r["name"].rsplit("_", 1)[1]), r["value"]) for r in results if r["name"].startswith(prefix)]
        glp = prefix.replace("put_x2_", "get_local_").replace("put_", "get_local_")
        gl = [(int(r["name"].rsplit("_", 1)[1]), r["value"]) for r in results if r["name"].startswith(glp)]
        if not put:
            continue
        fig, ax = plt.subplots(figsize=(6, 3.2))
        ax.plot(*zip(*put), "o-", label="PUT 4 KiB (records/s)")
        if gl:
            ax.plot(*zip(*gl), "s-", label="GET_LOCAL (records/s)")
        if xlabel == "records":
            ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("records/s")
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        p = folder / fname
        fig.savefig(p, dpi=110)
        out.append(str(p))
    return out


def main() -> int:
    # Every ray.init of the benchmark (ours, and the readers' when Ray is not running) starts a
    # Ray of its own: a bare one joins any Ray another program on the machine runs (a test run's),
    # and both then share CPUs and lose objects when the other's driver ends.
    os.environ.setdefault("RAY_ADDRESS", "local")
    ap = argparse.ArgumentParser(prog="python -m bench")
    ap.add_argument("--quick", action="store_true", help="smaller sizes (a few minutes)")
    ap.add_argument(
        "--only",
        nargs="*",
        help="case groups: put1m put4k get1m ray dask commit duckdb memory scaling "
        "analysis pushdown raywrite bounded protocols throttle hotspot "
        "durability filters striping small smallscan duckdb_records_data scale file_trackers metadata_log "
        "listing churn weed batch engine_records history metadata_fetch s3",
    )
    ap.add_argument(
        "--scale",
        action="store_true",
        help="only the scale curves, to 10^6 records on the peers, 10^7 in an infofile, 10^4 files",
    )
    ap.add_argument("--out", default=str(DEFAULT_OUT), help="results JSON (plots go to docs/ only for the default)")
    a = ap.parse_args()
    size = dict(SIZES["quick" if a.quick else "full"])
    if a.scale:
        size.update(SCALE)
        a.only = [scale.GROUP]
    con = Console(width=150)
    want = set(
        a.only
        or [
            "put1m",
            "put4k",
            "get1m",
            "ray",
            "dask",
            "commit",
            "duckdb",
            "memory",
            "scaling",
            protocols.GROUP,
            throttle.GROUP,
            hotspot.GROUP,
            durability.GROUP,
            filters.GROUP,
            striping.GROUP,
            smallrecords.GROUP,
            duckdb_data.GROUP,
            scale.GROUP,
            file_trackers.GROUP,
            metadata_log.GROUP,
            metadata_fetch.GROUP,
            listing.GROUP,
            churn.GROUP,
            weed_shape.GROUP,
            batch_write.GROUP,
            engine_records.GROUP,
            s3.GROUP,
            history.GROUP,
            *analysis.GROUPS_OF_CASES,
        ]
    )
    results: list[dict] = []
    failed: list[str] = []  # cases that raised: the others still run and are written (exit 1)

    idle_cpu: dict[str, float] = {}  # case -> share of a core this process burns idle after it

    seconds: dict[str, float] = {}  # case -> wall seconds it took (printed at the end: where a run's time goes)

    def case(fn, key: str) -> list[dict]:
        started_case = time.monotonic()
        try:
            return fn()
        except Exception:  # one broken case must not lose the figures of the others
            traceback.print_exc()
            failed.append(key)
            return []
        finally:
            seconds[key] = time.monotonic() - started_case
            # A case that leaves threads busy in this process (an engine's client, a poller) inflates
            # the client's CPU of every later case (cpu_4kib_*) and takes CPU from their clusters.
            idle_cpu[key] = report.idle_cpu_share()
            if idle_cpu[key] > 0.02:
                con.print(f"[yellow]after {key}, this process burns {idle_cpu[key]:.0%} of a core idle[/yellow]")

    tmp = Path(tempfile.mkdtemp(prefix="st-bench-"))
    t0 = time.monotonic()
    started, before = time.time(), report.machine_now(tmp)
    timing: dict[str, float] = {}
    try:
        cluster = cases.fresh_cluster(tmp, "main-").start() if want - set(analysis.GROUPS_OF_CASES) else None
        try:
            steps = [
                ("put1m", lambda: cases.case_put_1mib_x2(cluster, tmp, size["put1m"])),
                ("put4k", lambda: cases.case_put_4kib(cluster, tmp, size["put4k"], size["depth1"])),
                ("get1m", lambda: cases.case_get_1mib(cluster, size["get1m"]) if "put1m" in want else []),
                ("commit", lambda: cases.case_tracker_commit(cluster, size["commit_big"], size["commit_one"])),
                ("memory", lambda: cases.case_memory(cluster, size["mem"])),
                (
                    protocols.GROUP,
                    lambda: protocols.case_protocols(cluster, size["proto1m"], size["proto4k"], size["rounds"]),
                ),
                (filters.GROUP, lambda: filters.case_filters(cluster)),
                (striping.GROUP, lambda: striping.case_striping(cluster, 256 if a.quick else 1024)),
            ]
            for key, fn in steps:
                if key in want:
                    with con.status(f"bench: {key}"):
                        results += case(fn, key)
            arrow = None
            if want & {"ray", "dask"}:
                with con.status("bench: writing Arrow records"):
                    arrow = case(
                        lambda: [
                            cases.make_arrow_file(cluster, size["arrow"] // 4, "/bench/arrow_small"),
                            cases.make_arrow_file(cluster, size["arrow"], "/bench/arrow"),
                        ],
                        "Arrow records for ray and dask",
                    )
            if arrow:
                small, big = arrow
                if "ray" in want:
                    with con.status("bench: Ray reader"):
                        results += case(lambda: cases.case_get_local_ray(cluster, small, big), "ray")
                if "dask" in want:
                    with con.status("bench: Dask reader"):
                        results += case(lambda: cases.case_get_local_dask(cluster, small, big), "dask")
        finally:
            if cluster is not None:
                cluster.stop()
        if want & set(analysis.GROUPS_OF_CASES):
            t1 = time.monotonic()
            results += case(
                lambda: analysis.run_cases(tmp, size, want, lambda text: con.status(f"bench: {text}")), "analysis"
            )
            timing["analysis"] = time.monotonic() - t1

        # The rates set beside another system's (the C loop, a Dask job writing files, weed s3, weed
        # benchmark) run before the cases that delete 10^5-10^6 record files (small, scale, listing,
        # churn): on ext4 without a journal, file creation runs slower for minutes after such deletions
        # (docs/benchmarks.md, "Churn"), which SeaweedFS's appends to its volume files do not feel.
        # Each of them first waits until file creation is quiet again after the deletions before it
        # (the analysis cases', the previous comparison case's): cases.settle_disk.
        def settle(group: str) -> None:
            with con.status(f"bench: waiting for file creation to be quiet before {group}"):
                waited = cases.settle_disk(tmp, 45.0 if a.quick else cases.SETTLE_MAX_S)
                timing[f"quiet-disk wait before {group}"] = waited

        if batch_write.GROUP in want:
            settle(batch_write.GROUP)
            with con.status("bench: 4 KiB write batches against queue_put and the C loop, x1 and x2"):
                results += case(lambda: batch_write.case_batch_write(tmp, size["batch"], size["rounds"]), "batch")
        if engine_records.GROUP in want:
            settle(engine_records.GROUP)
            with con.status("bench: many small records from a Dask job against the same job writing local files"):
                results += case(
                    lambda: engine_records.case_engine_records(tmp, size["engine_records"], size["rounds"]),
                    "engine_records",
                )
        if s3.GROUP in want:
            settle(s3.GROUP)
            with con.status("bench: S3 endpoint, 4 KiB and 1 MiB PUT and GET, 16 clients, against the client"):
                results += case(lambda: s3.case_s3(tmp, size["s3"]), "s3")
        if weed_shape.GROUP in want:
            settle(weed_shape.GROUP)
            with con.status("bench: the shape of weed benchmark -c 16 (write N, read back in random order)"):
                results += case(lambda: weed_shape.case_weed_shape(tmp, size["weed"]), "weed")
        if smallrecords.GROUP in want:
            with con.status("bench: many small records (4 KiB raw) through every analysis path"):
                results += case(lambda: smallrecords.case_small_raw(tmp, size["small"], size["rounds"]), "small (raw)")
            with con.status("bench: many small Parquet records through every analysis path"):
                results += case(
                    lambda: smallrecords.case_small_parquet(tmp, size["small_parquet"], size["rounds"]),
                    "small (parquet)",
                )
        elif smallscan.GROUP in want:  # the scans of "small" alone
            with con.status("bench: scans of many small raw records against the C loop and the engines"):
                results += case(lambda: smallscan.case_small_scan(tmp, size["small"], size["rounds"]), "smallscan")
        if scale.GROUP in want:
            with con.status("bench: scale curves (records in a file, an infofile, files in a namespace)"):
                results += case(
                    lambda: scale.case_scale(tmp, size["curve_records"], size["curve_meta"], size["curve_files"]),
                    "scale",
                )
        if file_trackers.GROUP in want:
            with con.status("bench: per-file trackers, 4 writers of different files"):
                results += case(lambda: file_trackers.case_file_trackers(tmp, size["ft_records"]), "file_trackers")
        if metadata_log.GROUP in want:
            with con.status("bench: group commits through the metadata log in etcd against the local log"):
                results += case(lambda: metadata_log.case_metadata_log(tmp, size["log_records"]), "metadata_log")
        if metadata_fetch.GROUP in want:
            with con.status("bench: reads on a node without the namespace mount against the mount"):
                results += case(
                    lambda: metadata_fetch.case_metadata_fetch(tmp, size["fetch_records"], size["rounds"]),
                    "metadata_fetch",
                )
        if listing.GROUP in want:
            with con.status("bench: fsspec find of a large file against os.walk of the same files"):
                got = case(lambda: listing.case_listing(tmp, size["listing"]), "listing")
                results += got
            ours = [r["value"] for r in got if r["name"] == "listing_s3_delimiter"]
            if ours:
                with con.status("bench: the same S3 listing against SeaweedFS's weed s3"):
                    results += case(
                        lambda: listing.case_listing_seaweedfs(tmp, size["listing"], listing.BODY, ours[0]),
                        "listing_seaweedfs",
                    )
        if churn.GROUP in want:
            with con.status("bench: writes on a fresh directory and after a cluster's churn"):
                results += case(lambda: churn.case_churn(tmp, *size["churn"], journaled=not a.quick), "churn")
        if history.GROUP in want:
            with con.status("bench: planning a read as of a snapshot against the current generation"):
                results += case(lambda: history.case_history(tmp, size["history"]), "history")
        if durability.GROUP in want:
            with con.status("bench: what durable replies cost (--sync, --sync-each)"):
                results += case(
                    lambda: durability.case_durability(tmp, 3_000 if a.quick else 20_000, 64 if a.quick else 256),
                    "durability",
                )
        if hotspot.GROUP in want:
            with con.status("bench: load-aware reads against a hot spot"):
                results += case(lambda: hotspot.case_hotspot(tmp, 64 if a.quick else 256, size["rounds"]), "hotspot")
        if throttle.GROUP in want:
            with con.status("bench: impact control (one throttled peer)"):
                results += case(lambda: throttle.case_throttle(tmp, 2.0 if a.quick else 4.0), "throttle")
        if duckdb_data.GROUP in want:
            with con.status("bench: DuckDB's records_data over many small Parquet records against Dask"):
                results += case(
                    lambda: duckdb_data.case_duckdb_records_data(tmp, size["duckdb_records"], size["rounds"]),
                    duckdb_data.GROUP,
                )
        if "duckdb" in want:
            with con.status("bench: DuckDB over a 1M-record infofile"):
                results += case(lambda: cases.case_duckdb(tmp, size["duckdb"]), "duckdb")
        if "scaling" in want:
            with con.status("bench: scaling with records and peers"):
                results += case(lambda: cases.case_scaling(tmp, size["scale_records"], size["scale_peers"]), "scaling")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    tab = Table(title=f"StoreTorrent benchmark ({'quick' if a.quick else 'full'}), {platform.node()}")
    for c in ("name", "StoreTorrent", "baseline", "baseline value", "ratio", "target"):
        tab.add_column(c, justify="left" if c in ("name", "baseline") else "right")
    for r in results:
        tgt = TARGETS.get(r["name"])
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}"
        mark = "" if tgt is None or r["ratio"] is None else (" ok" if meets(r["name"], r["ratio"]) else " MISSED")
        tab.add_row(
            r["name"],
            fmt(r["value"], r["unit"]),
            r["baseline"] or r.get("note", ""),
            "" if r["baseline_value"] is None else fmt(r["baseline_value"], r["unit"]),
            ratio + mark,
            target_text(r["name"]),
        )
    con.print(tab)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = [
        {k: r[k] for k in ("name", "value", "unit", "baseline", "baseline_value", "ratio")}
        | {"note": r["note"]}
        | ({"parts": r["parts"]} if "parts" in r else {})
        for r in results
    ]
    out.write_text(json.dumps(doc, indent=1))
    run = report.run_record(
        "quick" if a.quick else "full", want, started, before, report.machine_now(out.parent), timing, idle_cpu
    )
    report.run_path(out).write_text(json.dumps(run, indent=1))
    # docs/ gets the plots of a run that writes bench/results/latest.json;
    # a run with another --out keeps them next to its results
    folder = ROOT / "docs" if out.resolve() == DEFAULT_OUT.resolve() else out.parent
    for p in plots(results, folder) + scale.plot(results, folder):
        con.print(f"plot: {p}")
    spent = "".join(f", {k}{'' if k.startswith('quiet') else ' cases'} {v:.0f} s" for k, v in timing.items())
    con.print(f"wrote {out} in {time.monotonic() - t0:.0f} s{spent}")
    slowest = sorted(seconds.items(), key=lambda kv: -kv[1])
    con.print("seconds a case: " + ", ".join(f"{k} {v:.0f}" for k, v in slowest))
    if failed:
        con.print(f"[red]cases that failed (tracebacks above; their rows are missing): {', '.join(failed)}[/red]")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

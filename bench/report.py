"""``python -m bench.report [RESULTS]``: the Markdown tables of a run for
docs/benchmarks.md, written from its results file, never by hand.

``python -m bench`` writes ``bench/results/latest.json`` (the rows) and,
beside it, ``latest.run.json`` (:func:`run_record`: the commit, the date,
the minutes, the machine's load before and after, each case group's
seconds). This prints:

- the run line (from the run record, when there is one);
- every row that has a target (bench/targets.py), with its figure, its
  baseline's, the ratio and met or missed;
- with ``--rows PREFIX ...``, the other rows whose names start so (the
  issue sections: ``--rows cpu_4kib_ s3_ weed_``).

Usage::

    python -m bench.report                       # bench/results/latest.json
    python -m bench.report other.json --rows s3_ listing_
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .targets import TARGETS, fmt, meets, target_text

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "bench" / "results" / "latest.json"


def run_path(results: Path) -> Path:
    """Where the run record of ``results`` (``x.json``) is: ``x.run.json``."""
    return results.with_name(results.stem + ".run.json")


def machine_now(folder: Path) -> dict:
    """The machine's state worth a run's record: the 1-minute load average
    and the bytes free on ``folder``'s disk."""
    return {"load_1min": round(os.getloadavg()[0], 2), "free_bytes": shutil.disk_usage(folder).free}


def idle_cpu_share(seconds: float = 0.5) -> float:
    """The share of one core this process burns over ``seconds`` of
    sleep (every thread of it: what a case left running)."""
    c0 = time.process_time()
    time.sleep(seconds)
    return (time.process_time() - c0) / seconds


def run_record(
    mode: str, groups: set[str], started: float, before: dict, after: dict, timing: dict, idle_cpu: dict
) -> dict:
    """The facts of one ``python -m bench`` run beside its rows: the commit
    (with ``+dirty`` if the tree had changes), the start (UTC, ISO 8601),
    ``seconds`` of the whole run, ``mode`` (quick or full), the case
    ``groups`` asked for, the machine before and after (:func:`machine_now`)
    and ``timing``: seconds a case group took (a ``quiet-disk wait before X``
    is the wait for a quiet disk, bench/cases.py ``settle_disk``) and
    ``idle_cpu``: the share of a core the bench process burned idle after
    each case (:func:`idle_cpu_share`; above 0.02, a case left threads busy
    and the client's CPU of the cases after it is inflated)."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        commit += "+dirty" if dirty else ""
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return {
        "commit": commit,
        "started": datetime.datetime.fromtimestamp(started, datetime.timezone.utc).isoformat(timespec="seconds"),
        "seconds": round(time.time() - started),
        "mode": mode,
        "groups": sorted(groups),
        "before": before,
        "after": after,
        "timing": {k: round(v) for k, v in timing.items()},
        "idle_cpu": {k: round(v, 3) for k, v in idle_cpu.items()},
    }


def _ratio(r: dict) -> str:
    if r["ratio"] is None:
        return "-"
    verdict = ""
    if r["name"] in TARGETS:
        verdict = " met" if meets(r["name"], r["ratio"]) else " missed"
    return f"**{r['ratio']:.2f}**{verdict}"


def _row(r: dict) -> str:
    base = "-" if r["baseline_value"] is None else fmt(r["baseline_value"], r["unit"])
    what = r["baseline"] or r.get("note") or "-"
    tgt = target_text(r["name"]) or "-"
    return f"| `{r['name']}` | {fmt(r['value'], r['unit'])} | {what} | {base} | {_ratio(r)} | {tgt} |"


HEAD = "| name | StoreTorrent | baseline (same run) | baseline figure | ratio | target |\n|---|---|---|---|---|---|"


def run_line(run: dict) -> str:
    """The docs' "Run:" line of a run record."""
    t = run["timing"]
    waits = sum(v for k, v in t.items() if k.startswith("quiet"))
    when = run["started"][:16].replace("T", " ")
    return (
        f"**Run:** `./dev bench{' --quick' if run['mode'] == 'quick' else ''}`, {when} UTC, "
        f"commit `{run['commit']}`, {run['seconds']:,} s ({run['seconds'] / 60:.0f} minutes, of which {waits:,} s "
        f"waiting for a quiet disk), load average {run['before']['load_1min']} before and "
        f"{run['after']['load_1min']} after, {run['before']['free_bytes'] / 1e9:.0f} GB free on the disk."
    )


def report(rows: list[dict], run: dict | None, prefixes: list[str]) -> str:
    """The Markdown of a run: its run line, the targets' table and a table
    of the untargeted rows whose names start with ``prefixes``."""
    out = []
    if run is not None:
        out += [run_line(run), ""]
    targeted = [r for r in rows if r["name"] in TARGETS]
    met = sum(1 for r in targeted if r["ratio"] is not None and meets(r["name"], r["ratio"]))
    out += [f"{met} of {len(targeted)} targets met.", "", HEAD, *(_row(r) for r in targeted)]
    if prefixes:
        other = [r for r in rows if r["name"] not in TARGETS and r["name"].startswith(tuple(prefixes))]
        out += ["", HEAD, *(_row(r) for r in other)]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="?", default=str(DEFAULT), help="a results file of python -m bench")
    ap.add_argument("--rows", nargs="*", default=[], help="also the untargeted rows whose names start so")
    a = ap.parse_args(argv)
    path = Path(a.results)
    try:
        rows = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        print(f"cannot read the results {path}: {e}; run python -m bench first", file=sys.stderr)
        return 2
    rp = run_path(path)
    run = json.loads(rp.read_text()) if rp.exists() else None
    print(report(rows, run, a.rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""bench/report.py: the docs' tables are written from a run's results and
its run record, with each target's verdict as bench/targets.py decides it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench import report

ROOT = Path(__file__).resolve().parent.parent


def _row(name, value, base, ratio, unit="records/s", baseline="the C loop"):
    return {
        "name": name,
        "value": value,
        "unit": unit,
        "baseline": baseline,
        "baseline_value": base,
        "ratio": ratio,
        "note": "",
    }


def test_a_run_s_tables_give_each_target_its_verdict_and_the_run_line_its_facts(tmp_path):
    rows = [
        _row("put_4kib_pipelining", 5000, 1000, 5.0),  # >= 5: met at the line
        _row("put_4kib_x1_batch_vs_physical", 6000, 10000, 0.6),  # >= 0.8: missed
        _row("listing_find", 0.1, 0.05, 2.0, unit="s"),  # <= 3: met
        _row("listing_s3_delimiter", 1.6, 0.05, 32.0, unit="s"),  # <= 3: missed
        _row("throttle_write", 1.0, 1.0, 1.2, unit="B/s"),  # 0.9..1.1: above the window
        _row("cpu_4kib_x1_batch", 80, None, None, unit="us/record", baseline=None),  # untargeted
    ]
    results = tmp_path / "r.json"
    results.write_text(json.dumps(rows))
    run = report.run_record(
        "full",
        {"put4k", "listing"},
        1_700_000_000.0,
        {"load_1min": 0.1, "free_bytes": 6e10},
        {"load_1min": 1.5, "free_bytes": 5e10},
        {"put4k": 12.0, "quiet-disk wait before s3": 40},
        {"put4k": 0.01},
    )
    assert run["commit"] and run["commit"] != "unknown" and run["started"].startswith("2023-11-14T22:13")
    report.run_path(results).write_text(json.dumps(run))
    out = subprocess.run(
        [sys.executable, "-m", "bench.report", str(results), "--rows", "cpu_"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    lines = {ln.split("|")[1].strip(" `"): ln for ln in out.splitlines() if ln.startswith("| `")}
    assert "**5.00** met" in lines["put_4kib_pipelining"]
    assert "**0.60** missed" in lines["put_4kib_x1_batch_vs_physical"]
    assert "**2.00** met" in lines["listing_find"] and "<= 3" in lines["listing_find"]
    assert "**32.00** missed" in lines["listing_s3_delimiter"]
    assert "**1.20** missed" in lines["throttle_write"] and "0.9..1.1" in lines["throttle_write"]
    assert "cpu_4kib_x1_batch" in lines and "80 us/record" in lines["cpu_4kib_x1_batch"]
    assert "2 of 5 targets met." in out
    assert f"commit `{run['commit']}`" in out and "of which 40 s waiting for a quiet disk" in out
    assert "load average 0.1 before and 1.5 after, 60 GB free" in out


def test_a_missing_results_file_is_a_clear_error(tmp_path):
    got = subprocess.run(
        [sys.executable, "-m", "bench.report", str(tmp_path / "none.json")], cwd=ROOT, capture_output=True, text=True
    )
    assert got.returncode == 2 and "run python -m bench first" in got.stderr


def test_the_commit_profile_drives_the_tracker_s_commit_path_as_it_is(tmp_path):
    """bench/commit_profile.py (docs/benchmarks.md, "The tracker's cost per
    committed record") calls the tracker's own stages in process; when
    their shapes change it must change with them, not stop running: a
    round of columns and one of a message a record commit every record."""
    from bench.commit_profile import STAGES, one_round

    for columns in (True, False):
        spent = one_round(tmp_path / f"c{columns}", 2000, 500, columns=columns)
        assert set(STAGES) <= set(spent) and spent["apply_sqlite"] > 0

"""A short headless locust run against a local cluster: no request may fail."""

import subprocess
import sys
from pathlib import Path


def test_locust_short_run_has_no_failures(tmp_path, peer_bin):
    root = Path(__file__).parent.parent
    r = subprocess.run(
        [sys.executable, "-m", "loadtest", "--time", "8s", "--users", "3", "--csv", str(tmp_path / "load")],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=180,
    )
    print(r.stdout[-3000:], r.stderr[-3000:])
    assert r.returncode == 0
    stats = (tmp_path / "load_stats.csv").read_text().splitlines()
    header = stats[0].split(",")
    rows = [dict(zip(header, line.split(","))) for line in stats[1:]]
    by_type = {row["Type"]: row for row in rows if row["Type"]}
    for kind in ("PUT", "GET", "GET_LOCAL"):
        assert int(by_type[kind]["Request Count"]) > 0, kind
        assert int(by_type[kind]["Failure Count"]) == 0, kind

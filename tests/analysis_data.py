"""Data and helpers shared by the analysis tests (Ray, Dask, formats)."""

from __future__ import annotations

import os

import pandas as pd
import pyarrow as pa
from helpers import to_parquet

N_PARTS = 24
ROWS = 1000
ROW_GROUP = 100
PARQUET_FILE = "/analysis/pq"  # what conftest's parquet_cluster holds


def parquet_part(i: int) -> pa.Table:
    """Part ``i``: rows ``(part, row, x, k)``; ``x`` rises with ``row`` so that
    row-group statistics can skip groups."""
    return pa.table(
        {
            "part": pa.array([i] * ROWS, pa.int64()),
            "row": pa.array(range(ROWS), pa.int64()),
            "x": pa.array([i + r / ROWS for r in range(ROWS)], pa.float64()),
            "k": pa.array([f"k{(i + r) % 5}" for r in range(ROWS)], pa.string()),
        }
    )


def parquet_bytes(t: pa.Table) -> bytes:
    return to_parquet(t, row_group_size=ROW_GROUP)


def source_frame() -> pd.DataFrame:
    return pd.concat([parquet_part(i).to_pandas() for i in range(N_PARTS)], ignore_index=True)


def put_parquet_file(client, name: str, replication: str = "x2") -> None:
    with client.create(name, replication=replication, blocksize=2) as f:
        for i in range(N_PARTS):
            f.queue_put(f"part-{i:03d}.parquet", parquet_bytes(parquet_part(i)))


def record_files(cluster) -> list[str]:
    """Every record copy on the cluster's peers (``<data>/files/...``)."""
    out = []
    for i in range(len(cluster.peers)):
        for root, _, files in os.walk(cluster.data_dir / "peers" / f"peer-{i}" / "files"):
            out.extend(os.path.join(root, f) for f in files)
    return sorted(out)


def atimes(cluster) -> dict[str, int]:
    """Access times of every record file of the cluster's peers (relatime:
    the first read after a write moves them)."""
    return {p: os.stat(p).st_atime_ns for p in record_files(cluster)}


def record_peers(plan) -> dict[str, str]:
    """``{"/file/record": peer}`` of a scan plan: the peer that reveals
    each record, by which its read task is pinned."""
    return {f"{r.file}/{r.name}": u.peer for u in plan.units for r in u.records}


def plans_made(monkeypatch, reader) -> list:
    """The scan plans the reader module ``reader`` (``dask_reader``,
    ``ray_reader``) makes from now on, kept as it makes them: a read's
    tasks are checked against the plan it used. A second plan may differ:
    a peer whose PING is late (2 s, a loaded machine) is left out of that
    plan's ring, and its records are revealed by their next copy's peer."""
    made: list = []
    real = reader.plan_scan

    def recording(*args, **kwargs):
        plan = real(*args, **kwargs)
        made.append(plan)
        return plan

    monkeypatch.setattr(reader, "plan_scan", recording)
    return made

"""4 KiB records through the write batch path (``StFile.write``, issue 41
item 1) against the ``queue_put`` path and the C program creating the same
files (bench/physical.c), x1 and x2, in one run (docs/benchmarks.md, "Write
batches").

Each of ``rounds`` rounds writes ``records`` records of 4 KiB with
``queue_put`` (one client, depth 64), then with ``write`` of batches of
``BATCH`` records, then has the C program create the same number of files
(x2: both copies) in the peers' layout, one process per core; x1 and x2 in
turn; x1 also appends: half the records in batches into a file holding
the other half (row ``put_4kib_x1_batch_append``, against the batch into a
new file: each name is checked against the committed ones). Nothing is
deleted until the end, so every side writes in the same
state of the filesystem (a deletion just before a side would slow its inode
allocation, docs/benchmarks.md "Churn"). The medians are compared as
ratios, and the CPU seconds of each role (this client, the tracker, the 4
peers; bench/procstat.py) are divided by the records: what a record costs
each process. Every answer is checked: the committed count equals the
records written.
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import time
from pathlib import Path

from st_py import WriteBatch

from . import physical
from .cases import fresh_cluster, row
from .procstat import Sampler

GROUP = "batch"
RECORD = 4096
BATCH = 1000


def _queue_put(client, name: str, replication: str, names: list[str], bodies: list[bytes]) -> None:
    with client.create(name, replication=replication) as f:
        for i, n in enumerate(names):
            f.queue_put(n, bodies[i % len(bodies)])


def _write_batches(f, names: list[str], bodies: list[bytes]) -> None:
    for s in range(0, len(names), BATCH):
        b = WriteBatch()
        for i in range(s, min(len(names), s + BATCH)):
            b.put(names[i], bodies[i % len(bodies)])
        f.write(b)


def _batches(client, name: str, replication: str, names: list[str], bodies: list[bytes]) -> None:
    with client.create(name, replication=replication) as f:
        _write_batches(f, names, bodies)


def _append(client, name: str, replication: str, names: list[str], bodies: list[bytes]) -> None:
    """Batches of ``names`` into file ``name``, which holds records already
    (its first half, written before the clock starts): every name is
    checked against the committed ones (``RecordWriter.check_names_many``)."""
    with client.open(name) as f:
        _write_batches(f, names, bodies)


def _timed(cluster, folder: Path, fn, *args) -> tuple[float, dict[str, float]]:
    """Seconds of ``fn(*args)`` and the CPU seconds it cost by role:
    ``client``, ``tracker``, ``peers`` and each peer (``peer1`` ...)."""
    s = Sampler(cluster, folder)
    t = time.perf_counter()
    fn(*args)
    dt = time.perf_counter() - t
    cost = s.stop()
    return dt, {**cost.cpu, **{f"peer{i + 1}": v for i, v in enumerate(cost.each_peer)}}


def _children_cpu() -> float:
    """CPU seconds of this process's waited-for children and theirs (the C program's processes)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def case_batch_write(tmp: Path, records: int, rounds: int = 3) -> list[dict]:
    """The rows described in the module docstring: for x1 and x2, batch
    against queue_put and against the C program, rates as medians of
    ``rounds``, with the CPU microseconds per record of each role."""
    cluster = fresh_cluster(tmp, "batch-").start()
    rows: list[dict] = []
    try:
        client = cluster.client(depth=64)
        bodies = [os.urandom(RECORD) for _ in range(1024)]
        names = [f"r{i:08d}" for i in range(records)]
        scratch = Path(cluster.data_dir) / "baseline-batch"
        os.sync()
        times: dict[str, list[float]] = {}
        cpu: dict[str, list[dict[str, float]]] = {}
        for k in range(rounds):
            for rep in ("x1", "x2"):
                for path, fn in (("queue_put", _queue_put), ("batch", _batches)):
                    key = f"{path}_{rep}"
                    dt, c = _timed(cluster, scratch.parent, fn, client, f"/bench/{key}-{k}", rep, names, bodies)
                    times.setdefault(key, []).append(dt)
                    cpu.setdefault(key, []).append(c)
                if rep == "x1":  # appends: half the records into a file holding the other half
                    half = len(names) // 2
                    _batches(client, f"/bench/append_x1-{k}", rep, names[:half], bodies)
                    dt, c = _timed(
                        cluster, scratch.parent, _append, client, f"/bench/append_x1-{k}", rep, names[half:], bodies
                    )
                    scale = len(names) / (len(names) - half)  # as if all the records: rate() and us() divide by them
                    times.setdefault("append_x1", []).append(dt * scale)
                    cpu.setdefault("append_x1", []).append({role: v * scale for role, v in c.items()})
                if physical.tool() is not None:
                    copies = int(rep[1])
                    c0 = _children_cpu()
                    dt = physical.write_files(scratch / f"c-{rep}-{k}", records, RECORD, copies=copies, keep=True)
                    times.setdefault(f"c_{rep}", []).append(dt)
                    cpu.setdefault(f"c_{rep}", []).append({"C program": _children_cpu() - c0})
        for key in times:
            if key.startswith("c_"):
                continue
            with client.open(f"/bench/{key}-0") as f:
                assert len(f) == records, (key, len(f), records)
                if key.startswith("append"):  # the first half's last record, the second half's (indexed from its start)
                    half = len(names) // 2
                    assert f.get(names[half - 1]) == bodies[(half - 1) % len(bodies)]
                    assert f.get(names[-1]) == bodies[(len(names) - half - 1) % len(bodies)]
        shutil.rmtree(scratch, ignore_errors=True)
    finally:
        cluster.stop()
    med = statistics.median

    def rate(key: str) -> float:
        return records / med(times[key])

    def spread(key: str) -> str:
        return "/".join(f"{records / t:,.0f}" for t in times[key])

    def us(key: str) -> dict[str, float]:
        return {role: med(c[role] for c in cpu[key]) * 1e6 / records for role in cpu[key][0]}

    def per_record(key: str) -> str:
        return ", ".join(f"{role} {v:.0f}" for role, v in us(key).items() if role in ("client", "tracker", "peers"))

    for rep in ("x1", "x2"):
        b, q = f"batch_{rep}", f"queue_put_{rep}"
        note = (
            f"{records:,} records of 4 KiB, batches of {BATCH}, one client, 4 peers; medians of {rounds} "
            f"interleaved rounds (records/s: batch {spread(b)}, queue_put {spread(q)}); CPU us/record, "
            f"batch: {per_record(b)}; queue_put: {per_record(q)}"
        )
        rows.append(row(f"put_4kib_{rep}_batch", rate(b), "records/s", "queue_put, depth 64, same run", rate(q), note))
        if f"c_{rep}" in times:
            rows.append(
                row(
                    f"put_4kib_{rep}_batch_vs_physical",
                    rate(b),
                    "records/s",
                    "C loop: the same files"
                    + (" x2 (both copies)" if rep == "x2" else "")
                    + ", one process per core (bench/physical.c)",
                    rate(f"c_{rep}"),
                    note=f"C loop records/s: {spread(f'c_{rep}')}",
                )
            )
        if rep == "x1" and "append_x1" in times:
            rows.append(
                row(
                    "put_4kib_x1_batch_append",
                    rate("append_x1"),
                    "records/s",
                    "batch into a new file, same run",
                    rate(b),
                    f"{records - records // 2:,} records of 4 KiB in batches of {BATCH} into a file holding "
                    f"{records // 2:,} (each name checked against them); records/s: {spread('append_x1')}; CPU "
                    f"us/record: {per_record('append_x1')}",
                )
            )
        by_path = {path: us(f"{path}_{rep}") for path in ("batch", "queue_put")}
        rows += _cpu_rows(rep, by_path, cpu.get(f"c_{rep}"), records)
    return rows


def _cpu_rows(rep: str, by_path: dict[str, dict[str, float]], c_runs: list[dict] | None, records: int) -> list[dict]:
    """Rows ``cpu_4kib_{rep}_{path}``: CPU microseconds per record of the
    whole write (client + tracker + peers; medians of the rounds), with the
    C program's CPU per record of the same files (x2: both copies) as the
    baseline when it ran, and the part of each role (each peer apart) in
    ``parts`` for the plot (issue 41, item 4)."""
    c_us = statistics.median(r["C program"] for r in c_runs) * 1e6 / records if c_runs else None
    rows = []
    for path, us in by_path.items():
        parts = {k: v for k, v in us.items() if k in ("client", "tracker") or k.startswith("peer") and k != "peers"}
        total = us["client"] + us["tracker"] + us["peers"]
        r = row(
            f"cpu_4kib_{rep}_{path}",
            total,
            "us/record",
            "the C program creating the same files" + (" (both copies)" if rep == "x2" else "") if c_us else None,
            c_us,
            "CPU us per record by role: " + ", ".join(f"{k} {v:.1f}" for k, v in parts.items()),
        )
        r["parts"] = {**parts, **({"C program": c_us} if c_us else {})}
        rows.append(r)
    return rows

"""What time travel costs (issue 32, item 6; docs/snapshots.md): planning a
read of an old generation of a file of many records, against planning a
read of its current generation, on the same infofile.

An infofile of ``n`` records is committed in groups; a snapshot is taken;
then a tenth of the records is replaced and another tenth deleted, so the
old generation's records come from ``records`` and ``record_history``
alike. Rows (medians of 3, the two sides alternated):

- ``history_plan_current_<n>``: ``InfofileReader.counted()`` and ``names()``
  at the current generation (what a GET_LOCAL plan and a listing read);
- ``history_plan_as_of_<n>``: the same through ``AsOf`` at the snapshot's
  generation, with ``resolve_as_of`` (target: under 1 s at 10^6 records);
- ``history_count_current_<n>`` / ``_as_of_``: the count alone.

The answers are checked: the old generation has exactly ``n`` records, the
current one ``n - n/10``.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from .cases import row

GROUP = "history"
RECORD = 4096


def _infofile(tmp: Path, n: int) -> tuple[Path, int]:
    from st_py.tracker.infofile_writer import InfofileWriter, create_infofile

    path = tmp / f"history-{n}"
    create_infofile(
        path,
        {
            "file_id": 1,
            "name": "/bench/history",
            "replication": "x2",
            "copies": 2,
            "blocksize": 16,
            "est_size": 0,
            "created_at": 0,
            "owner": "",
        },
        [(i, f"peer-{i}", f"h:{i}") for i in range(8)],
    )
    w = InfofileWriter(path)
    try:
        group = 8192
        for start in range(0, n, group):
            w.commit([(f"r{i:09d}", RECORD, i, [i % 8, (i + 1) % 8]) for i in range(start, min(n, start + group))])
        _, gen, _ = w.create_snapshot("bench")
        tenth = max(1, n // 10)
        for start in range(0, tenth, group):  # a tenth replaced: new versions under their own names
            w.commit(
                [
                    (f"r{i:09d}", RECORD, i + 1, [(i + 2) % 8, (i + 3) % 8], (), f".st-version/bench-{i}/r{i:09d}")
                    for i in range(start, min(tenth, start + group))
                ]
            )
        names = [f"r{i:09d}" for i in range(tenth, 2 * tenth)]
        for start in range(0, len(names), group):  # another tenth deleted
            w.delete_records(names[start : start + group])
    finally:
        w.close()
    return path, gen


def _median(fn, rounds: int = 3) -> tuple[float, object]:
    times, out = [], None
    for _ in range(rounds):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def _measure(path: Path, gen: int) -> tuple[float, float, float, float, tuple, tuple]:
    """(plan s current, plan s as of, count s current, count s as of, answers)."""
    from st_py.core.history import AsOf, resolve_as_of
    from st_py.core.infofile import InfofileReader

    r = InfofileReader(path)
    try:

        def current():
            g, k = r.counted()
            return g, k, len(r.names())

        def as_of():
            view = AsOf(r, resolve_as_of(r, "bench"), "/bench/history")
            g, k = view.counted()
            return g, k, len(view.names())

        cur_times, as_times = [], []
        cur = old = ()
        for _ in range(3):  # the two sides alternated
            t, cur = _median(current, 1)
            cur_times.append(t)
            t, old = _median(as_of, 1)
            as_times.append(t)
        count_cur, _ = _median(lambda: r.counted()[1])
        count_old, _ = _median(lambda: AsOf(r, gen).counted()[1])
    finally:
        r.close()
    return statistics.median(cur_times), statistics.median(as_times), count_cur, count_old, cur, old


def case_history(tmp: Path, counts: list[int]) -> list[dict]:
    """The rows of the module docstring, for each size in ``counts``."""
    out: list[dict] = []
    for n in counts:
        path, gen = _infofile(tmp, n)
        cur_s, as_s, count_cur, count_old, cur, old = _measure(path, gen)
        tenth = max(1, n // 10)
        assert cur[1] == cur[2] == n - tenth, cur
        assert old[1] == old[2] == n, old
        note = (
            f"an infofile of {n:,} records; a snapshot, then a tenth replaced and a tenth deleted: "
            "counted() and names(), medians of 3 alternated"
        )
        out += [
            row(f"history_plan_current_{n}", cur_s, "s", note=note + ": the current generation"),
            row(
                f"history_plan_as_of_{n}",
                as_s,
                "s",
                baseline=f"history_plan_current_{n}",
                baseline_value=cur_s,
                note=note + ": as of the snapshot (target: under 1 s at 10^6 records)",
            ),
            row(f"history_count_current_{n}", count_cur, "s", note=note + ": the count alone, current"),
            row(f"history_count_as_of_{n}", count_old, "s", note=note + ": the count alone, as of the snapshot"),
        ]
        path.unlink()
    return out

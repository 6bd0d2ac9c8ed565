"""The garbage collector settings of StoreTorrent's own processes that
build many rows at once: the tracker, and ``storetorrent put`` (issue 41,
item 2: commits at a few microseconds a record; docs/benchmarks.md, "The
collector's share of a commit"). The library never changes them in a
user's process (docs/client.md, "The collector", says how a process
putting many records may). The S3 endpoint keeps CPython's: its requests
keep few objects, and 4 KiB PUTs and GETs through it were no faster
tuned (3,000 of each, 16 boto3 clients, two runs each way: 309-471
against 385-408 PUTs/s).

A commit of N records builds O(N) tuples and lists at once: the rows of
the request (st_py/tracker/rpc/commit_rows.py), the log entry decoded
again (apply/ops.py), the SQLite parameters (infofile_writer.py). With
CPython's default thresholds (700, 10, 10) such a burst sets off a
collection of the young generation every 700 of them and of the older
ones every 7,000 and 70,000, each walking the objects that survived
before, all of which do here: building the rows of a job's commit of
2x10^5 records took 3.5-5.4 us a record with the collector on against
0.8-1.0 us with it off (the tracker's modules imported, one process).

So these processes collect their young generation every :data:`GEN0`
allocations, and what they hold at start (modules, gRPC, protobuf
descriptors) is frozen out of every collection (``gc.freeze``, as
Instagram's servers do). Cycles are still collected, later; few are made
(the state is dicts and tuples of plain values). A client putting
records in batches spends less too: 29.5 against 25.0 us of its CPU a
4 KiB record (``bench/queue_put_rate.py``, 3 rounds each).
"""

from __future__ import annotations

import gc

GEN0 = 50_000  # allocations between collections of the young generation (CPython: 700)
GEN1 = 20  # young collections between collections of the middle one (CPython: 10)
GEN2 = 10  # middle collections between full ones (CPython: 10; full ones also wait for 25% new objects)


def tune() -> None:
    """Set this process's collector for bursts of rows:
    what is alive now frozen, the thresholds :data:`GEN0`, :data:`GEN1`,
    :data:`GEN2`. Call once, at start, from the main thread."""
    gc.freeze()
    gc.set_threshold(GEN0, GEN1, GEN2)

"""Where the tracker's time goes per committed record (issue 41, item 2;
docs/benchmarks.md, "The tracker's cost per committed record")::

    python -m bench.commit_profile [--records 20000] [--group 1000] [--rounds 3] [--cprofile] [--records-form]
                                   [--uncopied] [--default-gc]

Drives the tracker's group commit path in this process, stage by stage,
with the tracker's own code on a real infofile and a real local metadata log
(no gRPC, no event loop): the ``CommitRequest`` protobuf parsed from its
bytes, the Commit handler's rows (:func:`st_py.tracker.rpc.commit_rows.commit_rows`),
the log entry encoded with MessagePack and appended to ``log.db``
(WAL, ``synchronous=FULL``), decoded again, and applied by
:func:`~st_py.tracker.apply.applier.apply_infofile_op`
(``InfofileWriter.commit_requests`` in one SQLite transaction). Prints the
microseconds per record of each stage (the median of ``--rounds`` rounds,
each a fresh infofile of ``--records`` records committed in groups of
``--group``), and with ``--cprofile`` the top functions of the apply.
What this leaves out is the tracker's gRPC and asyncio work per request
(the difference to ``tracker_commit``'s end-to-end rate).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import tempfile
import time
from pathlib import Path

from st_py._proto import tracker_pb2 as pb
from st_py.core import gc_tuning
from st_py.tracker.apply.applier import apply_infofile_op
from st_py.tracker.apply.ops import InfofileOp, decode
from st_py.tracker.bulk_insert import insert_rows
from st_py.tracker.infofile_writer import INSERT_COPIES, INSERT_RECORDS, InfofileWriter, create_infofile
from st_py.tracker.log.local import LocalLog
from st_py.tracker.rpc.commit_rows import commit_rows

STAGES = ("protobuf_decode", "handler_rows", "msgpack_encode", "log_append", "msgpack_decode", "apply_sqlite")


def _requests(n: int, group: int, columns: bool) -> list[bytes]:
    """The serialized CommitRequests of bench/cases.py ``_commit_rate``: the
    records as columns (``columns``, what clients send now) or as a
    ``RecordCommit`` message each (older clients)."""
    out = []
    for start in range(0, n, group):
        req = pb.CommitRequest(name="/bench/p", file_id=1, request_id=f"r-{start}")
        ids = range(start, min(n, start + group))
        if columns:
            req.columns.names.extend(f"r{i:08d}" for i in ids)
            req.columns.sizes.extend([4096] * len(ids))
            req.columns.crc32c.extend(ids)
            req.columns.peer_idx.extend([0] * len(ids))
        else:
            req.records.extend(pb.RecordCommit(name=f"r{i:08d}", size=4096, crc32c=i, peer_idx=[0]) for i in ids)
        out.append(req.SerializeToString())
    return out


def one_round(
    tmp: Path, n: int, group: int, prof: cProfile.Profile | None = None, columns: bool = True, copied: bool = True
) -> dict[str, float]:
    """Seconds spent per stage committing ``n`` records in groups of
    ``group``; ``copied``: somebody keeps a copy of the file, so the writer
    keeps each transaction's changeset (st_py/tracker/changeset_window.py,
    CopyDemand), else it runs no SQLite session."""
    path = tmp / "infofile"
    meta = dict(file_id=1, name="/bench/p", replication="x1", copies=1, blocksize=16, est_size=0, created_at=0)
    create_infofile(path, {**meta, "owner": ""}, [(0, "peer-0", "h:0")])
    w = InfofileWriter(path)
    w.copies_wanted = lambda: copied
    log = LocalLog(tmp / "log.db")
    term = log.open_term(time.time())
    log_id = log.log_id()
    spent = dict.fromkeys(STAGES, 0.0)
    clock = time.process_time  # CPU: a machine shared with other work swings the wall clock
    w0 = time.perf_counter()
    for raw in _requests(n, group, columns):
        t0 = clock()
        req = pb.CommitRequest.FromString(raw)
        t1 = clock()
        batch, why = commit_rows(req, 1, 1, [])
        assert not why, why
        t2 = clock()
        payload = InfofileOp(
            "/bench/p", 1, "commit_requests", ([(req.request_id, batch)],), time.time(), w.position(log_id)
        ).encode()
        t3 = clock()
        index = log.append_now([payload], term)
        t4 = clock()
        op = decode(payload, index)
        t5 = clock()
        if prof is not None:
            prof.enable()
        gen, new, per_request, _ = apply_infofile_op(w, op, index, log_id)
        if prof is not None:
            prof.disable()
        t6 = clock()
        assert len(new) == len(batch) and not any(conflicts for _, conflicts in per_request)
        for k, (a, b) in zip(STAGES, ((t0, t1), (t1, t2), (t2, t3), (t3, t4), (t4, t5), (t5, t6))):
            spent[k] += b - a
    spent["wall"] = time.perf_counter() - w0  # with the fsyncs of the log and the infofile
    assert w.stats()[0] == n
    w.close()
    return spent


def sqlite_costs(tmp: Path, n: int, group: int) -> dict[str, float]:
    """Microseconds per record of the group commit's SQLite statements
    alone, on fresh infofiles, ``n`` rows in transactions of ``group``: the
    ``records`` and ``copies`` inserts (one copy a record, no schema) with
    the full schema and the writer's multi-row statements, without each
    secondary index they carry, with the changeset session the tracker
    attaches (st_py/tracker/changesets.py), as ``executemany`` (the
    statements before), and with ``records_by_schema`` partial (``WHERE
    schema_id IS NOT NULL``, docs/infofile.md "Indexes")."""
    from st_py.tracker.changesets import Session, _handle

    parts: dict[str, float] = {}

    def run(tag: str, drop: str = "", session: bool = False, many: bool = False, sql: str = "") -> float:
        path = tmp / f"sq-{tag}"
        meta = dict(file_id=1, name="/b", replication="x1", copies=1, blocksize=16, est_size=0, created_at=0)
        create_infofile(path, {**meta, "owner": ""}, [(0, "peer-0", "h:0")])
        w = InfofileWriter(path)
        c = w.conn
        if drop:
            c.execute(f"DROP INDEX {drop}")
        if sql:
            c.execute(sql)
        h = _handle(c, str(path)) if session else None
        spent = dict.fromkeys(("records", "copies", "commit"), 0.0)
        clock = time.process_time
        for start in range(0, n, group):
            ids = range(start, min(n, start + group))
            rec = [(f"r{i:08d}", 4096, i, 1, 0.0, None, None, None) for i in ids]
            cop = [(r[0], 0, 0, 1) for r in rec]
            t0 = clock()
            c.execute("BEGIN IMMEDIATE")
            s = Session(h) if h else None
            if many:  # the statements before multi-row INSERTs
                c.executemany(f"{INSERT_RECORDS} VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rec)
                t1 = clock()
                c.executemany(f"{INSERT_COPIES} VALUES (?, ?, ?, ?)", cop)
            else:
                insert_rows(c, INSERT_RECORDS, rec)
                t1 = clock()
                insert_rows(c, INSERT_COPIES, cop)
            t2 = clock()
            if s is not None:
                s.changeset()
                s.close()
            c.execute("COMMIT")
            t3 = clock()
            for k, (a, b) in zip(spent, ((t0, t1), (t1, t2), (t2, t3))):
                spent[k] += b - a
        w.close()
        if tag == "full":
            parts.update({f"    {k}": v / n * 1e6 for k, v in spent.items()})
        return sum(spent.values()) / n * 1e6

    out = {"records+copies, full schema": run("full")}
    out.update(parts)
    out.update(
        {
            "  without records_by_schema": run("noschema", "records_by_schema"),
            "  without copies_by_peer": run("nopeer", "copies_by_peer"),
            "  with the changeset session": run("session", session=True),
            "  as executemany (before)": run("many", many=True),
            "  records_by_schema partial": run(
                "partial",
                "records_by_schema",
                sql="CREATE INDEX records_by_schema ON records(schema_id) WHERE schema_id IS NOT NULL",
            ),
        }
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.commit_profile")
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--group", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cprofile", action="store_true", help="profile the apply (cProfile) and print its top")
    ap.add_argument("--records-form", action="store_true", help="send a RecordCommit per record, not columns")
    ap.add_argument(
        "--uncopied", action="store_true", help="a file nobody fetched a copy of: no changesets kept (CopyDemand)"
    )
    ap.add_argument(
        "--default-gc",
        action="store_true",
        help="keep CPython's collector thresholds (the tracker sets its own: st_py/core/gc_tuning.py)",
    )
    ap.add_argument(
        "--sqlite", type=int, default=0, metavar="N", help="also time N rows of the SQLite inserts alone, per index"
    )
    a = ap.parse_args()
    if not a.default_gc:  # as the tracker process runs
        gc_tuning.tune()
    if a.sqlite:
        got: dict[str, list[float]] = {}
        for _ in range(a.rounds):
            with tempfile.TemporaryDirectory(prefix="st-commit-sq-") as d:
                for k, v in sqlite_costs(Path(d), a.sqlite, a.group).items():
                    got.setdefault(k, []).append(v)
        print(f"SQLite alone, {a.sqlite} rows in transactions of {a.group}, median of {a.rounds} (CPU us per record)")
        for k, vs in got.items():
            print(f"  {k:<30} {statistics.median(vs):7.2f}   (rounds: {', '.join(f'{x:.2f}' for x in vs)})")
    prof = cProfile.Profile() if a.cprofile else None
    per: dict[str, list[float]] = {k: [] for k in (*STAGES, "wall")}
    for _ in range(a.rounds):
        with tempfile.TemporaryDirectory(prefix="st-commit-prof-") as d:
            for k, v in one_round(Path(d), a.records, a.group, prof, not a.records_form, not a.uncopied).items():
                per[k].append(v / a.records * 1e6)
    total = 0.0
    form = "a message each" if a.records_form else "columns"
    kept = "no copy fetched (no changesets)" if a.uncopied else "copies fetched (changesets kept)"
    print(
        f"{a.records} records in groups of {a.group} as {form}, {kept}, median of {a.rounds} rounds (CPU us per record)"
    )
    for k in STAGES:
        m = statistics.median(per[k])
        total += m
        print(f"  {k:<16} {m:7.2f}   (rounds: {', '.join(f'{x:.2f}' for x in per[k])})")
    print(f"  {'total':<16} {total:7.2f}   -> {1e6 / total:,.0f} records/s of CPU without gRPC and asyncio")
    wall = statistics.median(per["wall"])
    print(f"  {'wall clock':<16} {wall:7.2f}   (with the fsyncs; rounds: {', '.join(f'{x:.2f}' for x in per['wall'])})")
    if prof is not None:
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
        print(s.getvalue())


if __name__ == "__main__":
    main()

"""Scale curves (issue "Many small records at full speed", item 5): what each
operation costs as a file grows to millions of records and a namespace to
thousands of files. Every figure is a time or a rate at one size; the curve
over sizes shows whether the cost grows linearly (constant per record) or
worse. Every answer is checked (counts equal what was written).

Three families:

* ``scale_records_*``: one file of N records of 1 KiB, class x2 on 4 real
  peers: put rate, infofile bytes per record, the GET_LOCAL plan (ring
  exchange and every peer's list), the bytes the peers sent for it, building
  a Dask DataFrame (no record opened: the schemas are kept in the infofile),
  the Dask scan, fsspec ``find``, DuckDB ``count(*)`` over ``records`` and the
  namespace listing (``ls``, which counts the file's records).
* ``scale_meta_*``: the infofile alone, to 10^7 records (this machine's
  16 M inodes and disk cannot hold 2 x 10^7 record files): the tracker's
  commit path (``InfofileWriter.commit`` in groups of 4,096), infofile size,
  ``count()`` (what ``ls`` runs), the kept-schema query of a scan's plan and
  DuckDB ``count(*)``.
* ``scale_files_*``: a namespace of F files of one record each: create rate,
  listing, fsspec ``find``, DuckDB ``files`` and planning a scan of all of
  them (one GET_LOCAL ring exchange per file).
"""

from __future__ import annotations

import os
import re
import time
import urllib.request
from pathlib import Path

from .cases import fresh_cluster, row

GROUP = "scale"
RECORD = 1024


def _sent_bytes(cluster) -> int:
    """Bytes the peers have written to sockets (st_peer_sent_bytes_total)."""
    total = 0
    for p in cluster.peers:
        if p is None or not p.metrics_addr:
            continue
        text = urllib.request.urlopen(f"http://{p.metrics_addr}/metrics", timeout=5).read().decode()
        m = re.search(r"^st_peer_sent_bytes_total (\d+)", text, re.M)
        total += int(m.group(1)) if m else 0
    return total


def _timed(fn, *args, **kw):
    t = time.perf_counter()
    out = fn(*args, **kw)
    return time.perf_counter() - t, out


def _records_curve(tmp: Path, counts: list[int]) -> list[dict]:
    import dask.dataframe  # noqa: F401  (imported here, not inside the first size's build time)

    from st_integrations.dask_reader import read_storetorrent
    from st_integrations.duckdb_sql import sql
    from st_integrations.fsspec_fs import StoreTorrentFileSystem
    from st_integrations.readplan import plan_scan

    out: list[dict] = []
    cluster = fresh_cluster(tmp, "scale-records-").start()
    try:
        client = cluster.client()
        tracker = cluster.tracker_addr
        body = os.urandom(RECORD)
        for n in counts:
            name = f"/scale/r{n}"
            t = time.perf_counter()
            with client.create(name, replication="x2") as f:
                for i in range(n):
                    f.queue_put(f"r{i:09d}", body)
            put_s = time.perf_counter() - t
            infofile = Path(cluster.namespace) / name.lstrip("/")
            size = infofile.stat().st_size
            plan_scan(client, name)  # warm: the peers' infofile pages
            before = _sent_bytes(cluster)
            plan_s, plan = _timed(plan_scan, client, name)
            sent = _sent_bytes(cluster) - before
            assert plan.num_records == n, (plan.num_records, n)
            build_s, ddf = _timed(read_storetorrent, name, tracker=tracker, client=None)
            scan_s, rows = _timed(len, ddf)
            assert rows == n, (rows, n)
            fs = StoreTorrentFileSystem(tracker=tracker)
            find_s, found = _timed(fs.find, name)
            assert len(found) == n, len(found)
            duck_s, t_ = _timed(sql, client, [name], "SELECT count(*) AS n FROM records")
            assert t_["n"][0].as_py() == n
            ls_s, entries = _timed(client.ls, "/scale")
            assert any(e.name == name and e.records == n for e in entries)
            note = f"one file of {n:,} records of 1 KiB, x2 on 4 peers"
            out += [
                row(f"scale_records_put_{n}", n / put_s, "records/s", note=note),
                row(f"scale_records_infofile_bytes_per_record_{n}", size / n, "B/record", note=note),
                row(f"scale_records_plan_{n}", plan_s, "s", note=note + ": GET_LOCAL plan (plan_scan)"),
                row(
                    f"scale_records_ring_bytes_per_record_{n}",
                    sent / n,
                    "B/record",
                    note=note + ": bytes the peers sent for one plan (ring segments and lists)",
                ),
                row(
                    f"scale_records_dask_build_{n}",
                    build_s,
                    "s",
                    note=note + ": Dask DataFrame built (plan, kept schemas; no record opened)",
                ),
                row(f"scale_records_dask_scan_{n}", n / scan_s, "records/s", note=note + ": len(ddf)"),
                row(f"scale_records_fsspec_find_{n}", find_s, "s", note=note),
                row(f"scale_records_duckdb_count_{n}", duck_s, "s", note=note + ": count(*) FROM records"),
                row(f"scale_records_ls_{n}", ls_s, "s", note=note + ": client.ls of its directory"),
            ]
            client.delete(name)
        client.close()
    finally:
        cluster.stop()
    return out


def _meta_curve(tmp: Path, counts: list[int]) -> list[dict]:
    from st_integrations.duckdb_sql import connect
    from st_py.core.infofile import InfofileReader
    from st_py.core.record_format import written_schema
    from st_py.tracker.infofile_writer import InfofileWriter, create_infofile

    out: list[dict] = []
    schema = written_schema("x.bin", b"x")
    for n in counts:
        path = tmp / f"meta-{n}"
        create_infofile(
            path,
            {
                "file_id": 1,
                "name": "/bench/meta",
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
        t = time.perf_counter()
        group = 4096
        for start in range(0, n, group):
            w.commit(
                [
                    (f"r{i:09d}", RECORD, i, [i % 8, (i + 1) % 8], (), "", schema)
                    for i in range(start, min(n, start + group))
                ]
            )
        commit_s = time.perf_counter() - t
        w.close()
        r = InfofileReader(path)
        count_s, cnt = _timed(r.count)
        groups_s, groups = _timed(r.schema_groups)
        r.close()
        assert cnt == n and groups is not None and groups[0].records == n
        con = connect({"/bench/meta": str(path)})
        duck_s, got = _timed(lambda c: c.execute("SELECT count(*) FROM records").fetchone()[0], con)
        con.close()
        assert got == n
        note = f"an infofile of {n:,} records (no peers): commits of 4,096 records, synchronous=FULL"
        out += [
            row(f"scale_meta_commit_{n}", n / commit_s, "records/s", note=note),
            row(f"scale_meta_infofile_bytes_per_record_{n}", path.stat().st_size / n, "B/record", note=note),
            row(f"scale_meta_count_{n}", count_s, "s", note=note + ": InfofileReader.count (ls)"),
            row(f"scale_meta_schema_groups_{n}", groups_s, "s", note=note + ": a scan's kept-schema query"),
            row(f"scale_meta_duckdb_count_{n}", duck_s, "s", note=note + ": DuckDB count(*) FROM records"),
        ]
        path.unlink()
    return out


def _files_curve(tmp: Path, counts: list[int]) -> list[dict]:
    from st_integrations.duckdb_sql import sql
    from st_integrations.fsspec_fs import StoreTorrentFileSystem
    from st_integrations.readplan import plan_scan

    out: list[dict] = []
    cluster = fresh_cluster(tmp, "scale-files-").start()
    try:
        client = cluster.client()
        tracker = cluster.tracker_addr
        made = 0
        for n in counts:
            t = time.perf_counter()
            for i in range(made, n):
                with client.create(f"/files/d{i // 1000:03d}/f{i:06d}", replication="x1") as f:
                    f.queue_put("r", b"x")
            create_s = time.perf_counter() - t
            rate = (n - made) / create_s
            made = n
            fs = StoreTorrentFileSystem(tracker=tracker)
            find_s, found = _timed(fs.find, "/files")
            assert len(found) == n, (len(found), n)
            note = f"a namespace of {n:,} files of one record, 4 peers"
            out += [
                row(f"scale_files_create_{n}", rate, "files/s", note=note + " (create, put, close)"),
                row(f"scale_files_fsspec_find_{n}", find_s, "s", note=note + ": the files, by their directories"),
            ]
            if n <= 1000:  # DuckDB's planning of one sqlite scan per infofile grows faster than linearly
                duck_s, t_ = _timed(sql, client, ["/files/**"], "SELECT count(*) AS n FROM files")
                assert t_["n"][0].as_py() == n
                out.append(row(f"scale_files_duckdb_files_{n}", duck_s, "s", note=note + ": count(*) FROM files"))
            if n <= 1000:  # one ring exchange per file: the bound on scans of many tiny files
                plan_s, plan = _timed(plan_scan, client, "/files/**")
                assert plan.num_records == n
                out.append(row(f"scale_files_plan_{n}", plan_s, "s", note=note + ": plan_scan of all of them"))
        client.close()
    finally:
        cluster.stop()
    return out


def case_scale(tmp: Path, records: list[int], meta: list[int], files: list[int]) -> list[dict]:
    """The three curves (see the module docstring)."""
    return _records_curve(tmp, records) + _meta_curve(tmp, meta) + _files_curve(tmp, files)


def plot(results: list[dict], folder: Path) -> list[str]:
    """docs/bench_scale.png: each scale cost per record (or per file)
    against the size, log-log; a flat line is linear growth."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[str, list[tuple[int, float]]] = {}
    for r in results:
        m = re.match(r"(scale_(records|meta|files)_.+)_(\d+)$", r["name"])
        if m:
            series.setdefault(m.group(1), []).append((int(m.group(3)), r))
    if not series:
        return []
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for ax, fam, xl in zip(
        axes, ("records", "meta", "files"), ("records in one file", "records in one infofile", "files in the namespace")
    ):
        for key, pts in sorted(series.items()):
            if not key.startswith(f"scale_{fam}_"):
                continue
            pts.sort()
            xs = [x for x, _ in pts]
            unit = pts[0][1]["unit"]
            if unit == "s":  # time per record (per file), microseconds
                ys = [r["value"] / x * 1e6 for x, r in pts]
            elif unit.endswith("/s"):
                ys = [1e6 / r["value"] for _, r in pts]
            else:
                continue  # bytes per record are in the table
            ax.plot(xs, ys, "o-", label=key.replace(f"scale_{fam}_", ""))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(xl)
        ax.set_ylabel("us per record" if fam != "files" else "us per file")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Cost per record (per file) against size: flat = linear growth")
    fig.tight_layout()
    p = folder / "bench_scale.png"
    fig.savefig(p, dpi=110)
    return [str(p)]

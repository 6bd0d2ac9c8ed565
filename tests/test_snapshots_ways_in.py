"""A snapshot read through every way in (docs/snapshots.md, "``as_of``: one
argument, one meaning, every way in") against real trackers, peers, a Ray of
two nodes and a Dask cluster of one worker per peer: after a folder snapshot,
records are appended, replaced and deleted in a plain x1 file, a zstd x2 file
with striped objects and an aes-256-gcm x3 file; the Client, Ray, Dask,
fsspec, DuckDB and the CLI read the snapshot byte-identical (row-identical)
to what was read before the changes, the current generation as it is now,
and each reports the generation it read (provenance).

The clusters are the module's (``parquet_cluster``, ``ray_nodes``,
``dclient``); the last test kills a peer, so it stays last."""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import assert_same_records, revealed_once, run_cli, sorted_rows, to_parquet

KEY = bytes(range(32, 64))
FILES = {"/asof/plain": ("x1", []), "/asof/zstd": ("x2", ["zstd"]), "/asof/aes": ("x3", ["aes-256-gcm"])}
SNAP = "paper-v1"
OBJECT, NEW_OBJECT = "obj.parquet", "obj2.parquet"  # striped objects of /asof/zstd, before and after
COLS = ["file", "rec", "tag", "x"]


def _table(file: str, rec: str, tag: str, rows: int = 50) -> pa.Table:
    return pa.table(
        {
            "file": [file] * rows,
            "rec": [rec] * rows,
            "tag": [tag] * rows,
            "x": pa.array([float(i) for i in range(rows)], pa.float64()),
        }
    )


def _parquet(file: str, rec: str, tag: str, rows: int = 50) -> bytes:
    return to_parquet(_table(file, rec, tag, rows))


def _rows(blobs: dict[str, dict[str, bytes]]) -> pd.DataFrame:
    """The rows of the Parquet records ``{file: {name: bytes}}``, in order."""
    frames = [pq.read_table(io.BytesIO(b)).to_pandas() for recs in blobs.values() for b in recs.values()]
    return sorted_rows(pd.concat(frames, ignore_index=True)[COLS], "file", "rec", "tag", "x")


def _frame(df) -> pd.DataFrame:
    """A scan's rows as plain pandas, in :func:`_rows`'s order."""
    out = pd.DataFrame({c: df[c].astype(object if c != "x" else float).tolist() for c in COLS})
    return sorted_rows(out, "file", "rec", "tag", "x")


@dataclass
class Changed:
    """The files after the changes: ``snap`` the snapshot's generation of
    each, ``now`` the current one; ``before`` and ``after`` what the Client
    read of every name before and after the changes."""

    snap: dict[str, int]
    now: dict[str, int]
    before: dict[str, dict[str, bytes]]
    after: dict[str, dict[str, bytes]]


@pytest.fixture(scope="module", autouse=True)
def _key():
    """The encryption key in this process's environment before the module's
    Ray starts (its workers inherit it) and for the Dask workers (threads
    here): read tasks load it from there (docs/filters.md)."""
    old = os.environ.get("STORETORRENT_ENCRYPTION_KEY")
    os.environ["STORETORRENT_ENCRYPTION_KEY"] = KEY.hex()
    yield
    if old is None:
        del os.environ["STORETORRENT_ENCRYPTION_KEY"]
    else:
        os.environ["STORETORRENT_ENCRYPTION_KEY"] = old


@pytest.fixture(scope="module")
def changed(parquet_cluster) -> Changed:
    c = parquet_cluster.client()
    before: dict[str, dict[str, bytes]] = {}
    for f, (rep, filters) in FILES.items():
        with c.create(f, rep, filters=filters, blocksize=1) as h:
            for i in range(8):
                h.queue_put(f"r{i}.parquet", _parquet(f, f"r{i}", "before"))
            if f == "/asof/zstd":
                h.put_object(OBJECT, _parquet(f, OBJECT, "before", rows=3000), stripe_size=4096)
        with c.open(f) as h:
            before[f] = {n: h.get(n) for n in h.names()}
    made = c.snapshot("/asof", SNAP)
    snap = {s.file: s.generation for s in made}
    assert sorted(snap) == sorted(FILES)
    for f in FILES:
        with c.open(f) as h:
            h.put("new.parquet", _parquet(f, "new.parquet", "appended"))
            h.put("r1.parquet", _parquet(f, "r1.parquet", "replaced"), replace=True)
            h.delete("r2.parquet")
            if f == "/asof/zstd":
                h.put_object(NEW_OBJECT, _parquet(f, NEW_OBJECT, "appended", rows=2000), stripe_size=4096)
    after, now = {}, {}
    for f in FILES:
        with c.open(f) as h:
            after[f] = {n: h.get(n) for n in h.names()}
            now[f] = h.generation
        assert now[f] > snap[f]
        assert "r2.parquet" in before[f] and "r2.parquet" not in after[f]
        assert before[f]["r1.parquet"] != after[f]["r1.parquet"] and "new.parquet" not in before[f]
    return Changed(snap, now, before, after)


def test_the_client_reads_the_snapshot_and_the_current_state(parquet_cluster, changed):
    c = parquet_cluster.client()
    for f in FILES:
        with c.open(f, as_of=SNAP) as h:
            assert h.generation == changed.snap[f] == h.as_of
            assert h.names() == sorted(changed.before[f]) and len(h) == len(changed.before[f])
            assert_same_records({n: h.get(n) for n in h.names()}, changed.before[f])
            records = {n: b for n, b in changed.before[f].items() if n != OBJECT}  # get_local leaves objects out
            assert_same_records(revealed_once(h), records)
        with c.open(f) as h:
            assert_same_records({n: h.get(n) for n in h.names()}, changed.after[f])
            assert h.generation == changed.now[f]


def test_ray_reads_the_snapshot_and_reports_its_generations(parquet_cluster, ray_nodes, changed):
    from st_integrations.ray_reader import read_storetorrent

    ds = read_storetorrent(
        "/asof", tracker=parquet_cluster.tracker_addr, as_of=SNAP, include_generation=True, include_paths=True
    )
    assert ds.storetorrent_generation == changed.snap
    df = ds.to_pandas()
    pd.testing.assert_frame_equal(_frame(df), _rows(changed.before))
    assert {p.rsplit("/", 1)[0]: g for p, g in zip(df.path, df.generation)} == changed.snap
    cur = read_storetorrent("/asof", tracker=parquet_cluster.tracker_addr)
    assert cur.storetorrent_generation == changed.now
    pd.testing.assert_frame_equal(_frame(cur.to_pandas()), _rows(changed.after))
    one = read_storetorrent("/asof/aes", tracker=parquet_cluster.tracker_addr, as_of=changed.snap["/asof/aes"])
    assert one.storetorrent_generation == changed.snap["/asof/aes"]  # one file: an int
    pd.testing.assert_frame_equal(_frame(one.to_pandas()), _rows({"/asof/aes": changed.before["/asof/aes"]}))


def test_dask_reads_the_snapshot_and_reports_its_generations(parquet_cluster, dclient, changed):
    from st_integrations.dask_reader import read_storetorrent

    ddf = read_storetorrent(
        "/asof", tracker=parquet_cluster.tracker_addr, client=dclient, as_of=SNAP, include_generation=True
    )
    assert ddf.attrs["storetorrent_generation"] == changed.snap
    df = ddf.compute()
    assert df.attrs["storetorrent_generation"] == changed.snap
    pd.testing.assert_frame_equal(_frame(df), _rows(changed.before))
    assert dict(zip(df.file.astype(object), df.generation.astype(int))) == changed.snap
    cur = read_storetorrent("/asof", tracker=parquet_cluster.tracker_addr, client=dclient)
    assert cur.attrs["storetorrent_generation"] == changed.now
    pd.testing.assert_frame_equal(_frame(cur.compute()), _rows(changed.after))
    f = "/asof/zstd"
    one = read_storetorrent(f, tracker=parquet_cluster.tracker_addr, client=dclient, as_of=changed.snap[f])
    assert one.attrs["storetorrent_generation"] == changed.snap[f]
    pd.testing.assert_frame_equal(_frame(one.compute()), _rows({f: changed.before[f]}))
    # a path pattern inside a file selects among the names it had then: r2 was deleted since
    picked = read_storetorrent(f"{f}/r[12].parquet", tracker=parquet_cluster.tracker_addr, client=dclient, as_of=SNAP)
    want = {f: {n: changed.before[f][n] for n in ("r1.parquet", "r2.parquet")}}
    pd.testing.assert_frame_equal(_frame(picked.compute()), _rows(want))
    picked = read_storetorrent(f"{f}/r[12].parquet", tracker=parquet_cluster.tracker_addr, client=dclient)
    pd.testing.assert_frame_equal(_frame(picked.compute()), _rows({f: {"r1.parquet": changed.after[f]["r1.parquet"]}}))


def test_fsspec_reads_the_snapshot_by_as_of_version_id_and_url(parquet_cluster, changed):
    import fsspec

    from st_integrations.fsspec_fs import StoreTorrentFileSystem

    tracker = parquet_cluster.tracker_addr
    fs = StoreTorrentFileSystem(tracker=tracker, as_of=SNAP)
    vfs = StoreTorrentFileSystem(tracker=tracker, version_aware=True)
    cur = StoreTorrentFileSystem(tracker=tracker)
    for f in FILES:
        g, before = changed.snap[f], changed.before[f]
        assert fs.find(f) == sorted(f"{f}/{n}" for n in before)
        assert fs.ls(f, detail=False) == sorted(f"{f}/{n}" for n in before)
        assert_same_records({n: fs.cat(f"{f}/{n}") for n in before}, before)
        assert fs.info(f)["generation"] == g and fs.info(f)["records"] == len(before)
        assert {d["generation"] for d in fs.ls(f)} == {g}
        info = fs.info(f"{f}/r1.parquet")
        assert info["generation"] == g and info["size"] == len(before["r1.parquet"])
        with vfs.open(f"{f}/r1.parquet", version_id=g) as fh:
            assert fh.read() == before["r1.parquet"]
        assert vfs.cat_file(f"{f}/r2.parquet?versionId={g}") == before["r2.parquet"]  # deleted since
        assert vfs.info(f"{f}/r1.parquet", version_id=g)["version_id"] == str(g)
        assert vfs.ls(f, version_id=g, detail=False) == sorted(f"{f}/{n}" for n in before)
        assert cur.cat(f"{f}/r1.parquet") == changed.after[f]["r1.parquet"]
        assert cur.info(f)["generation"] == changed.now[f] == vfs.info(f"{f}/r1.parquet")["generation"]
        assert "generation" not in cur.info(f"{f}/r1.parquet")  # a listing's entry at the current state
        with fsspec.open(f"storetorrent://{tracker}{f}/r2.parquet?as_of={SNAP}") as fh:
            assert fh.read() == before["r2.parquet"]
    with pytest.raises(PermissionError):
        fs.pipe("/asof/zstd/x", b"the past is read-only")
    with pytest.raises(ValueError, match="version aware"):
        cur.cat_file("/asof/zstd/r1.parquet", version_id=changed.snap["/asof/zstd"])


def test_duckdb_reads_the_snapshot(parquet_cluster, changed):
    from st_integrations.duckdb_sql import connect_files

    c = parquet_cluster.client()
    con = connect_files(c, ["/asof"], data=True, as_of=SNAP)
    try:
        assert dict(con.execute("SELECT file, generation FROM files").fetchall()) == changed.snap
        sizes = {(f, n): s for f, n, s in con.execute("SELECT file, name, size FROM records").fetchall()}
        assert sizes == {(f, n): len(b) for f, recs in changed.before.items() for n, b in recs.items()}
        assert con.execute("SELECT count(*) FROM records WHERE state <> 'available'").fetchone() == (0,)
        (stripes,) = con.execute("SELECT count(*) FROM stripes WHERE object = ?", [OBJECT]).fetchone()
        assert stripes > 1
        df = con.execute("SELECT * FROM records_data").fetch_df()
        pd.testing.assert_frame_equal(_frame(df), _rows(changed.before))
    finally:
        con.close()
    con = connect_files(c, ["/asof"])
    try:
        assert dict(con.execute("SELECT file, generation FROM files").fetchall()) == changed.now
        names = con.execute("SELECT file, name FROM records").fetchall()
        assert sorted(names) == sorted((f, n) for f, recs in changed.after.items() for n in recs)
    finally:
        con.close()


def test_the_cli_lists_gets_and_queries_the_snapshot(parquet_cluster, changed, tmp_path):
    for f in FILES:
        r = run_cli(parquet_cluster, "ls", "-r", f, "--as-of", SNAP, "--format", "json")
        assert r.returncode == 0, r.stderr
        rows = json.loads(r.stdout)
        assert [x["name"] for x in rows] == sorted(changed.before[f])
        assert {x["generation"] for x in rows} == {changed.snap[f]}
        out = tmp_path / f.replace("/", "_")
        r = run_cli(parquet_cluster, "get", f, "r2.parquet", "--as-of", SNAP, "-o", str(out))
        assert r.returncode == 0, r.stderr
        assert out.read_bytes() == changed.before[f]["r2.parquet"]
    q = "SELECT tag, count(*) AS n FROM records_data GROUP BY tag ORDER BY tag"
    r = run_cli(parquet_cluster, "sql", q, "--file", "/asof", "--as-of", SNAP, "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [{"tag": "before", "n": len(_rows(changed.before))}]
    for f, g in changed.snap.items():
        assert f"{f} as of generation {g}" in r.stderr
    r = run_cli(parquet_cluster, "sql", q, "--file", "/asof", "--format", "json")
    assert r.returncode == 0, r.stderr
    now = _rows(changed.after).tag.value_counts()
    assert json.loads(r.stdout) == [{"tag": t, "n": int(now[t])} for t in sorted(now.index)]


def test_zz_a_peer_killed_around_a_snapshot_scan_gives_the_same_rows(parquet_cluster, ray_nodes, dclient, changed):
    """Last in the module: it kills a peer of the module's cluster. A Dask
    scan planned before the kill and computed after it, and a Ray scan
    planned after it (the dead peer's records revealed by their other
    copies, as of the snapshot), give the snapshot's rows (the x2 and x3
    files: x1 tolerates no dead peer)."""
    from st_integrations.dask_reader import read_storetorrent as dask_read
    from st_integrations.ray_reader import read_storetorrent as ray_read

    paths = ["/asof/zstd", "/asof/aes"]
    want = _rows({f: changed.before[f] for f in paths})
    tracker = parquet_cluster.tracker_addr
    ddf = dask_read(paths, tracker=tracker, client=dclient, as_of=SNAP)
    dead = parquet_cluster.kill_peer(1)
    pd.testing.assert_frame_equal(_frame(ddf.compute()), want)
    ds = ray_read(paths, tracker=tracker, as_of=SNAP)
    assert ds.storetorrent_generation == {f: changed.snap[f] for f in paths}
    pd.testing.assert_frame_equal(_frame(ds.to_pandas()), want)
    from st_integrations.readplan import plan_scan

    with parquet_cluster.client() as c:
        plan = plan_scan(c, paths, as_of=SNAP)
    assert dead not in plan.peers and all(p.dead == (dead,) for p in plan.plans.values())

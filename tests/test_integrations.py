"""Raw records, unavailable records and DuckDB SQL over infofiles, against a
real cluster (the Ray and Dask readers have test_analysis_ray.py and
test_analysis_dask.py)."""

import io

import pandas as pd
import pyarrow as pa
import pytest

from st_py.errors import GetLocalError

N_RECORDS = 40


def arrow_record(i: int) -> bytes:
    t = pa.table(
        {
            "rec": pa.array([i] * 25, pa.int64()),
            "row": pa.array(range(25), pa.int64()),
            "value": pa.array([float(i * 100 + r) for r in range(25)]),
        }
    )
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    return sink.getvalue()


def source_frame() -> pd.DataFrame:
    return pd.DataFrame(
        [(i, r, float(i * 100 + r)) for i in range(N_RECORDS) for r in range(25)], columns=["rec", "row", "value"]
    )


@pytest.fixture
def arrow_file(cluster):
    c = cluster.client()
    with c.create("/int/arrow", replication="x2", blocksize=2) as f:
        for i in range(N_RECORDS):
            f.queue_put(f"r{i:03d}", arrow_record(i))
    return cluster


def peer_of_path(cluster, path: str) -> str:
    for i, addr in enumerate(cluster.peer_addrs):
        if f"/peers/peer-{i}/" in path:
            return addr
    raise AssertionError(path)


def test_raw_records_become_name_and_bytes_rows(cluster, local_dask):
    from st_integrations.dask_reader import read_storetorrent

    c = cluster.client()
    blobs = {f"raw/{i}": f"bytes of {i}".encode() for i in range(30)}
    with c.create("/int/raw", replication="x2") as f:
        for k, v in blobs.items():
            f.put(k, v)
    df = read_storetorrent("/int/raw", tracker=cluster.tracker_addr, client=local_dask).compute()
    assert dict(zip(df.record, df.data)) == blobs


def test_too_many_dead_peers_says_how_many_records_are_unavailable(cluster):
    from st_integrations.ray_reader import read_storetorrent
    from st_py.client.getlocal import check_complete, reveal_ring
    from st_py.errors import RecordsUnavailableError

    c = cluster.client()
    with c.create("/int/x1", replication="x1", blocksize=1) as f:
        for i in range(40):
            f.put(f"r{i}", b"x")
    cluster.kill_peer(0)
    with c.open("/int/x1") as f, pytest.raises(RecordsUnavailableError) as e:
        f.get_local_plan()
    missing = e.value.unavailable
    assert missing > 0 and f"{missing} of 40 records" in str(e.value)
    # The readers fail the same way, before any task runs.
    with pytest.raises(RecordsUnavailableError, match=f"{missing} of 40 records"):
        read_storetorrent("/int/x1", tracker=cluster.tracker_addr)
    # Reading the rest on purpose: the count adds up to what is available.
    with c.open("/int/x1") as f:
        plan = f.get_local_plan(allow_unavailable=True)
    parts = [(len(recs), ring) for recs, ring in (reveal_ring(a, plan, allow_unavailable=True) for a in plan.ring)]
    assert sum(n for n, _ in parts) == 40 - missing == plan.expected
    check_complete(plan, parts)
    # Tasks answered by different rings (a peer died mid-scan) are refused.
    with pytest.raises(GetLocalError, match="different rings"):
        check_complete(plan, [parts[0], (parts[1][0], parts[1][1][:1])])


def test_duckdb_sql_over_infofiles(cluster):
    from st_integrations.duckdb_sql import connect_files, sql

    c = cluster.client()
    for name, n in (("/sql/a", 30), ("/sql/b", 12)):
        with c.create(name, replication="x2") as f:
            for i in range(n):
                f.queue_put(f"{'even' if i % 2 == 0 else 'odd'}/{i}", b"z" * i)
    t = sql(
        c,
        ["/sql/a", "/sql/b"],
        "SELECT file, split_part(name, '/', 1) AS kind, count(*) AS n, sum(size) AS bytes "
        "FROM records GROUP BY ALL ORDER BY ALL",
    ).to_pylist()
    assert t == [
        {"file": "/sql/a", "kind": "even", "n": 15, "bytes": sum(range(0, 30, 2))},
        {"file": "/sql/a", "kind": "odd", "n": 15, "bytes": sum(range(1, 30, 2))},
        {"file": "/sql/b", "kind": "even", "n": 6, "bytes": sum(range(0, 12, 2))},
        {"file": "/sql/b", "kind": "odd", "n": 6, "bytes": sum(range(1, 12, 2))},
    ]
    con = connect_files(c, ["/sql/a"])
    assert con.execute("SELECT count(DISTINCT peer_idx) >= 2, count(*) FROM copies").fetchone() == (True, 60)
    assert con.execute("SELECT replication, copies, records FROM files").fetchone() == ("x2", 2, 30)


def test_duckdb_sql_over_record_contents_next_to_metadata(cluster):
    from analysis_data import parquet_bytes, parquet_part

    from st_integrations.arrow_dataset import dataset
    from st_integrations.duckdb_sql import connect_files, sql

    c = cluster.client()
    with c.create("/sql/data", replication="x2") as f:
        for i in range(6):
            f.put(f"p{i}.parquet", parquet_bytes(parquet_part(i)))
        f.put("extra.csv", b"part,row,x,k\n99,0,0.5,kz\n")
        f.put("notes.jsonl", b'{"part": 100, "row": 1, "x": 1.5, "k": "kj"}\n')
    got = sql(
        c, ["/sql/data"], "SELECT count(*) AS n, sum(part) AS s, max(x) AS mx FROM records_data WHERE k <> 'k0'"
    ).to_pylist()[0]
    src = pd.concat([parquet_part(i).to_pandas() for i in range(6)])
    src = pd.concat([src, pd.DataFrame({"part": [99, 100], "row": [0, 1], "x": [0.5, 1.5], "k": ["kz", "kj"]})])
    sel = src[src.k != "k0"]
    assert got == {"n": len(sel), "s": int(sel.part.sum()), "mx": float(sel.x.max())}
    # contents next to metadata: rows per record joined with the records view
    con = connect_files(c, ["/sql/data"], data=True)
    n_records = con.execute("SELECT count(*) FROM records").fetchone()[0]
    assert n_records == 8
    # GET for every record (as on a client that is not a storage node): same rows
    t = dataset("/sql/data", tracker=cluster.tracker_addr, local=False).to_table()
    assert t.num_rows == len(src) and sorted(t.column("part").to_pylist()) == sorted(src.part.tolist())


def test_scan_planning_refuses_answers_from_different_rings(cluster, monkeypatch):
    """A peer dying between the peers' answers makes them answer from
    different rings: planning tries again, and if the answers never agree it
    raises instead of planning a scan that could read records twice or not
    at all."""
    from st_integrations import readplan

    c = cluster.client()
    with c.create("/int/rings", replication="x2") as f:
        for i in range(20):
            f.queue_put(f"r{i}", b"x")
    real = readplan.reveal_entries
    calls = []

    def flaky(peer, plan, *a, **kw):  # the last peer answers from a shorter ring
        records, ring = real(peer, plan, *a, **kw)
        calls.append(peer)
        return (records, ring[:-1]) if peer == plan.ring[-1] else (records, ring)

    monkeypatch.setattr(readplan, "reveal_entries", flaky)
    with pytest.raises(GetLocalError, match="different rings"):
        readplan.plan_scan(c, "/int/rings")
    assert len(calls) == readplan.PLAN_ATTEMPTS * 4  # planned again each time
    monkeypatch.setattr(readplan, "reveal_entries", real)
    plan = readplan.plan_scan(c, "/int/rings")
    assert plan.revealed == {"/int/rings": 20} and plan.num_records == 20


def test_duckdb_views_over_hundreds_of_infofiles(tmp_path):
    """The views are trees of UNION ALLs: one flat union of 150 files went
    past DuckDB's expression depth limit (found by ./dev bench --scale)."""
    from st_integrations.duckdb_sql import connect
    from st_py.tracker.infofile_writer import InfofileWriter, create_infofile

    paths = {}
    for k in range(150):
        p = tmp_path / f"f{k}"
        create_infofile(
            p,
            {
                "file_id": k,
                "name": f"/f{k}",
                "replication": "x1",
                "copies": 1,
                "blocksize": 16,
                "est_size": 0,
                "created_at": 0,
                "owner": "",
            },
            [(0, "p", "h:1")],
        )
        w = InfofileWriter(p)
        w.commit([("a", 1, 0, [0]), ("b", 2, 0, [0])])
        w.close()
        paths[f"/f{k}"] = str(p)
    con = connect(paths)
    assert con.execute("SELECT count(*), sum(records), sum(bytes) FROM files").fetchone() == (150, 300, 450)
    assert con.execute("SELECT count(*), count(DISTINCT file) FROM records").fetchone() == (300, 150)
    assert con.execute("SELECT count(*) FROM copies").fetchone() == (300,)
    con.close()

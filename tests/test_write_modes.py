"""Writers take ``mode`` (docs/analysis.md, "Writing"): ``"error"`` (the
default) refuses a file that holds records instead of silently doubling
them, ``"append"`` adds, ``"overwrite"`` replaces atomically: a reader sees
the old output or the new one, whole, never both. Dask on its default
scheduler and Ray, against a real tracker and peers."""

from __future__ import annotations

import threading

import pandas as pd
import pytest

from st_py.errors import StFileExistsError, StoreTorrentError

dd = pytest.importorskip("dask.dataframe")


def _frame(start: int, n: int) -> pd.DataFrame:
    return pd.DataFrame({"i": range(start, start + n), "k": [f"k{j % 3}" for j in range(start, start + n)]})


def _read(name: str) -> pd.DataFrame:
    from st_integrations.dask_reader import read_storetorrent

    return read_storetorrent(name).compute().sort_values("i").reset_index(drop=True)


def test_dask_modes(cluster, monkeypatch):
    from st_integrations.dask_writer import to_storetorrent

    monkeypatch.setenv("STORETORRENT_TRACKER", cluster.tracker_addr)
    first, second = _frame(0, 1_000), _frame(1_000, 600)
    assert to_storetorrent(dd.from_pandas(first, npartitions=4), "/wm/out") == 4
    with pytest.raises(StFileExistsError, match="mode='overwrite'"):  # the default: never silently doubled
        to_storetorrent(dd.from_pandas(first, npartitions=4), "/wm/out")
    assert len(_read("/wm/out")) == 1_000
    to_storetorrent(dd.from_pandas(second, npartitions=2), "/wm/out", mode="append")
    assert _read("/wm/out")["i"].tolist() == list(range(1_600))
    to_storetorrent(dd.from_pandas(second, npartitions=3), "/wm/out", mode="overwrite")
    back = _read("/wm/out")
    assert back["i"].tolist() == list(range(1_000, 1_600))
    with cluster.client().open("/wm/out") as f:
        assert len(f) == 3  # the old records are gone from the infofile
    with pytest.raises(ValueError, match="mode must be one of"):
        to_storetorrent(dd.from_pandas(second, npartitions=1), "/wm/out", mode="replace")


def test_overwrite_is_atomic_for_readers(cluster, monkeypatch):
    """A reader polling the file while it is overwritten again and again
    only ever sees one whole output: 1,000 rows of one generation."""
    from st_integrations.dask_writer import to_storetorrent

    monkeypatch.setenv("STORETORRENT_TRACKER", cluster.tracker_addr)
    to_storetorrent(dd.from_pandas(_frame(0, 1_000).assign(gen=0), npartitions=5), "/wm/atomic")
    seen, stop = [], threading.Event()
    path = cluster.client().tracker.open("/wm/atomic").infofile_path

    def poll():  # as readers see the infofile (read-only SQLite, as GET_LOCAL and DuckDB read it)
        import sqlite3

        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        while not stop.is_set():
            seen.append({"n": conn.execute("SELECT count(*) FROM records").fetchone()[0]})
        conn.close()

    t = threading.Thread(target=poll)
    t.start()
    try:
        for gen in range(1, 6):
            to_storetorrent(
                dd.from_pandas(_frame(0, 1_000).assign(gen=gen), npartitions=5), "/wm/atomic", mode="overwrite"
            )
    finally:
        stop.set()
        t.join()
    assert seen and {s["n"] for s in seen} == {5}, seen  # never 10 (old + new) nor 0
    back = _read("/wm/atomic")
    assert len(back) == 1_000 and set(back["gen"]) == {5}


def test_overwrite_of_a_file_with_an_object(cluster, monkeypatch):
    """Names are records or objects: overwrite replaces both kinds."""
    from st_integrations.dask_writer import to_storetorrent

    monkeypatch.setenv("STORETORRENT_TRACKER", cluster.tracker_addr)
    to_storetorrent(dd.from_pandas(_frame(0, 100), npartitions=1), "/wm/obj")
    with cluster.client().open("/wm/obj") as f:
        f.put_object("extra.csv", _frame(100, 5_000).to_csv(index=False).encode(), stripe_size=16 << 10)
    assert len(_read("/wm/obj")) == 5_100
    to_storetorrent(dd.from_pandas(_frame(0, 10), npartitions=1), "/wm/obj", mode="overwrite")
    assert len(_read("/wm/obj")) == 10
    with cluster.client().open("/wm/obj") as f:
        assert f.object_meta("extra.csv") is None and len(f) == 1
        stripes = f._infofile().conn.execute("SELECT count(*) FROM records WHERE name LIKE '.st-stripe/%'")
        assert stripes.fetchone()[0] == 0  # its stripes went with it


@pytest.mark.slow
def test_ray_modes(cluster, monkeypatch, capfd):
    ray = pytest.importorskip("ray")
    from st_integrations.ray_writer import write_storetorrent

    monkeypatch.setenv("STORETORRENT_TRACKER", cluster.tracker_addr)
    try:
        ds = ray.data.from_pandas(_frame(0, 500))
        write_storetorrent(ds, "/wm/ray")
        capfd.readouterr()
        # user errors are raised on the driver when called, before Ray runs a task: Ray
        # never logs them as "Exception occurred in Ray Data or Ray Core internal code"
        with pytest.raises(StFileExistsError):
            write_storetorrent(ds, "/wm/ray")
        with pytest.raises(ValueError, match="mode must be one of"):
            write_storetorrent(ds, "/wm/ray", mode="replace")
        out = capfd.readouterr()
        assert "internal code" not in out.out + out.err and "Traceback" not in out.err, out.err[-2000:]
        write_storetorrent(ray.data.from_pandas(_frame(500, 20)), "/wm/ray", mode="overwrite")
        assert _read("/wm/ray")["i"].tolist() == list(range(500, 520))
        # format="records" (issue 41): each row one record, through the write batch path, one atomic job
        want = {f"r{i:05d}": bytes([i % 251]) * (i % 300 + 1) for i in range(2_000)}
        rows = ray.data.from_items([{"name": k, "data": v} for k, v in want.items()]).repartition(3)
        assert write_storetorrent(rows, "/wm/rayrows", "x2", format="records") == 2_000
        with cluster.client().open("/wm/rayrows") as f:
            assert sorted(f.names()) == sorted(want)
            assert all(f.get(n) == d for n, d in want.items())
        twice = ray.data.from_items([{"name": "x", "data": b"1"}, {"name": "x", "data": b"2"}]).repartition(2)
        with pytest.raises(StoreTorrentError):  # one name twice in a job: the commit refuses it, nothing lands
            write_storetorrent(twice, "/wm/rayrows", "x2", format="records", mode="append")
        with cluster.client().open("/wm/rayrows") as f:
            assert len(f) == 2_000 and "x" not in f.names()
    finally:
        ray.shutdown()


def test_two_overwrite_jobs_at_once_leave_one_output_never_both(cluster):
    """Two overwrite jobs planned before either commits (two Dask or Ray
    jobs writing the same file at once): the file holds the output of the
    one committed last, whole, never the union of both. Before, an
    overwrite removed the names the file held when the job started, so the
    later commit kept the earlier job's records beside its own. And an
    overwrite commit retried after a lost reply (its request id) is applied
    once and answers with the records it committed."""
    import pyarrow as pa

    from st_integrations.write import commit_job, start_job, write_blocks

    c = cluster.client()
    name = "/wm/race"
    job0 = start_job(c, name, format="arrow")
    commit_job(c, job0, [write_blocks(job0, 0, [pa.table({"i": [0]})])])
    a = start_job(c, name, format="arrow", mode="overwrite")
    b = start_job(c, name, format="arrow", mode="overwrite")  # planned before a commits
    staged_a = [write_blocks(a, t, [pa.table({"i": [10 + t]})]) for t in range(2)]
    staged_b = [write_blocks(b, t, [pa.table({"i": [20 + t]})]) for t in range(3)]
    assert commit_job(c, a, staged_a) == 2
    assert commit_job(c, b, staged_b) == 3
    with c.open(name) as f:
        names = sorted(f.names())
    assert names == sorted(n for part in staged_b for n in part.names), names  # b's output alone
    # the same overwrite request again (a retry after a lost reply): applied once, same answer
    records = [r for part in staged_b for r in part.as_dicts()]
    info = c.tracker.open(name)
    from st_py._proto import tracker_pb2 as pb

    commits = [
        pb.RecordCommit(name=r["name"], size=r["size"], crc32c=r["crc32c"], peer_idx=r["peer_idx"]) for r in records
    ]
    first = c.tracker.commit(name, info.file_id, commits, request_id="rid-overwrite-1", replace_all=True)
    again = c.tracker.commit(name, info.file_id, commits, request_id="rid-overwrite-1", replace_all=True)
    assert first.committed == 3 and again.committed == 3 and again.generation == first.generation, (first, again)
    with c.open(name) as f:
        assert sorted(f.names()) == names


def test_a_retried_staged_commit_answers_with_what_it_committed(cluster):
    """A job's commit retried with its request id after a lost reply (a
    tracker restart, a failover) is applied once and reports the records it
    committed, not 0: a Ray or Dask job reports as many records as it wrote."""
    from st_py._proto import tracker_pb2 as pb

    c = cluster.client()
    name = "/wm/retried"
    c.create(name, replication="x2").close()
    with c.open_staged(name) as w:
        for i in range(4):
            w.put(f"r{i}", b"x" * (i + 1))
        staged = w.staged_commits()
    info = c.tracker.open(name)
    commits = [
        pb.RecordCommit(name=r["name"], size=r["size"], crc32c=r["crc32c"], peer_idx=r["peer_idx"]) for r in staged
    ]
    first = c.tracker.commit(name, info.file_id, commits, request_id="rid-plain-1")
    again = c.tracker.commit(name, info.file_id, commits, request_id="rid-plain-1")
    assert (first.committed, again.committed) == (4, 4), (first, again)
    assert again.generation == first.generation


def test_dask_writes_rows_as_records(cluster, monkeypatch):
    """``format="records"``: each row one record, named by its name column,
    its bytes the data column (issue 41: many small records from an engine
    through the write batch path), in one atomic job: every record read back
    equal; a prefix is a folder of them; a name written twice by the job, or
    a missing column, fails the job and commits nothing."""
    import os

    import pyarrow as pa

    from st_integrations.dask_writer import to_storetorrent
    from st_py.errors import InvalidOptionError, StoreTorrentError

    def blobs(values):  # bytes as Arrow binary: Dask turns an object column of bytes into strings
        return pd.Series(values, dtype=pd.ArrowDtype(pa.binary()))

    monkeypatch.setenv("STORETORRENT_TRACKER", cluster.tracker_addr)
    want = {f"r{i:05d}": os.urandom(i % 700 + 1) for i in range(3_000)}
    frame = pd.DataFrame({"name": list(want), "data": blobs(list(want.values()))})
    assert to_storetorrent(dd.from_pandas(frame, npartitions=3), "/wm/rows", "x2", format="records") == 3_000
    client = cluster.client()
    with client.open("/wm/rows") as f:
        assert sorted(f.names()) == sorted(want)
        assert all(f.get(n) == d for n, d in want.items())
    more = pd.DataFrame({"key": ["a", "b"], "blob": blobs([b"1", b"22"])})
    opts = {"name_column": "key", "data_column": "blob"}
    n = to_storetorrent(
        dd.from_pandas(more, npartitions=1), "/wm/rows", "x2", format="records", prefix="day2", format_options=opts,
        mode="append",
    )  # fmt: skip
    assert n == 2
    with client.open("/wm/rows") as f:
        assert f.get("day2/a") == b"1" and f.get("day2/b") == b"22" and len(f) == 3_002
    twice = pd.DataFrame({"name": ["x", "y", "x"], "data": blobs([b"1", b"2", b"3"])})
    with pytest.raises(StoreTorrentError):  # the same name from two partitions: the commit refuses it
        to_storetorrent(dd.from_pandas(twice, npartitions=3), "/wm/rows", "x2", format="records", mode="append")
    with pytest.raises(InvalidOptionError):
        to_storetorrent(dd.from_pandas(more, npartitions=1), "/wm/rows", "x2", format="records", mode="append")
    with client.open("/wm/rows") as f:
        assert len(f) == 3_002 and "x" not in f.names()
    client.close()

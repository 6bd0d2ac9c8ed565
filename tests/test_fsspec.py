"""The fsspec filesystem (``storetorrent://``) over a real cluster, used the
way pandas, pyarrow, Dask and DuckDB users use it."""

import errno
import gc
import io
import json
import pickle
import subprocess
import sys
import threading

import fsspec
import pandas as pd
import pytest
from fsspec.spec import AbstractFileSystem
from helpers import sorted_rows

from st_integrations.fsspec_fs import StoreTorrentFileSystem
from st_py.errors import RecordExistsError, StFileNotFoundError
from st_py.wire.protocol import crc32c


@pytest.fixture(autouse=True)
def fresh_instances():
    """fsspec caches filesystems by their arguments; every test gets new
    ones (an ephemeral tracker port could be reused by a later cluster)."""
    StoreTorrentFileSystem.clear_instance_cache()
    yield
    StoreTorrentFileSystem.clear_instance_cache()


def frame(i: int, n: int = 50) -> pd.DataFrame:
    return pd.DataFrame({"x": range(i * n, (i + 1) * n), "part": [i] * n, "s": [f"r{j}" for j in range(n)]})


def parquet(df: pd.DataFrame) -> bytes:
    b = io.BytesIO()
    df.to_parquet(b, index=False)
    return b.getvalue()


@pytest.fixture
def run1(cluster):
    """/exp/run1 holding four parquet records (x2); returns (cluster, fs, frames)."""
    frames = [frame(i) for i in range(4)]
    with cluster.client().create("/exp/run1", replication="x2", blocksize=1) as f:
        for i, df in enumerate(frames):
            f.put(f"part-{i}.parquet", parquet(df))
    return cluster, fsspec.filesystem("storetorrent", tracker=cluster.tracker_addr), frames


def test_urls_entry_point_and_pickling(run1, monkeypatch):
    cluster, fs, frames = run1
    T = cluster.tracker_addr
    cls = StoreTorrentFileSystem
    assert cls._strip_protocol(f"storetorrent://{T}/exp/run1/") == "/exp/run1"
    assert cls._strip_protocol("storetorrent:///exp/run1") == "/exp/run1"
    assert cls._strip_protocol("exp/run1") == "/exp/run1"
    assert cls._get_kwargs_from_urls(f"storetorrent://{T}/exp") == {"tracker": T}
    assert cls._get_kwargs_from_urls("storetorrent:///exp") == {}
    fs2, path = fsspec.core.url_to_fs(f"storetorrent://{T}/exp/run1/part-0.parquet")
    assert path == "/exp/run1/part-0.parquet" and fs2.tracker == T
    # same arguments, a new instance: fsspec caches none of this class (a tracker address does not name a cluster)
    assert fs2 is not fs and fs2.storage_options == fs.storage_options
    assert fs.unstrip_protocol(path) == f"storetorrent://{T}{path}"

    # A fresh interpreter finds the class through the entry point (no import
    # of st_integrations first) and an unpickled filesystem reconnects by itself.
    code = (
        "import pickle, sys, fsspec\n"
        "assert 'st_integrations' not in sys.modules\n"
        "cls = fsspec.get_filesystem_class('storetorrent')\n"
        "fs = pickle.loads(sys.stdin.buffer.read())\n"
        "assert type(fs) is cls\n"
        "sys.stdout.buffer.write(fs.cat_file('/exp/run1/part-1.parquet'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(fs), capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr.decode()
    assert pd.read_parquet(io.BytesIO(out.stdout)).equals(frames[1])

    # default tracker ($STORETORRENT_TRACKER) with an empty URL host
    monkeypatch.setenv("STORETORRENT_TRACKER", T)
    assert pd.read_parquet("storetorrent:///exp/run1/part-2.parquet").equals(frames[2])
    assert fsspec.filesystem("storetorrent").ls("/exp", detail=False) == ["/exp/run1"]


def test_ls_info_glob_find(run1):
    cluster, fs, _ = run1
    c = cluster.client()
    with c.create("/exp/run2", replication="x1") as f:
        f.put("2024/01/a.csv", b"a,b\n1,2\n")
        f.put("2024/01/b.csv", b"a,b\n3,4\n")
        f.put("2024/02/c.csv", b"a,b\n5,6\n")
        f.put("top.txt", b"hello")
    with c.create("/exp/deep/nested/run3") as f:
        f.put("r", b"z" * 10)

    assert fs.ls("/", detail=False) == ["/exp"]
    top = {e["name"]: e for e in fs.ls("storetorrent:///exp")}
    assert set(top) == {"/exp/deep", "/exp/run1", "/exp/run2"}
    assert top["/exp/deep"]["type"] == "directory" and top["/exp/deep"]["st_type"] == "dir"
    run2 = top["/exp/run2"]
    assert (run2["type"], run2["st_type"], run2["replication"], run2["records"], run2["bytes"]) == (
        "directory",
        "file",
        "x1",
        4,
        8 * 3 + 5,
    )
    assert top["/exp/run1"]["replication"] == "x2"
    json.dumps(fs.ls("/exp"))  # plain Python data, no protobuf messages

    inside = {e["name"]: e for e in fs.ls("/exp/run2")}
    assert inside["/exp/run2/2024"]["type"] == "directory"
    top_txt = inside["/exp/run2/top.txt"]
    assert (top_txt["type"], top_txt["size"], top_txt["crc32c"]) == ("file", 5, crc32c(b"hello"))
    assert fs.ls("/exp/run2/2024", detail=False) == ["/exp/run2/2024/01", "/exp/run2/2024/02"]
    assert fs.ls("/exp/run2/2024/01/", detail=False) == ["/exp/run2/2024/01/a.csv", "/exp/run2/2024/01/b.csv"]
    info = fs.info("/exp/run2/2024/02/c.csv")
    assert (info["type"], info["size"], info["crc32c"]) == ("file", 8, crc32c(b"a,b\n5,6\n"))
    json.dumps(info)
    assert fs.info("/exp/run2")["records"] == 4
    assert fs.isdir("/exp") and fs.isdir("/exp/run2") and fs.isdir("/exp/run2/2024/01")
    assert fs.isfile("/exp/run2/top.txt") and not fs.isfile("/exp/run2")
    assert fs.exists("/exp/deep/nested/run3/r") and not fs.exists("/exp/run2/2024/03")
    assert fs.size("/exp/deep/nested/run3/r") == 10

    assert fs.glob("/exp/run1/*.parquet") == [f"/exp/run1/part-{i}.parquet" for i in range(4)]
    assert fs.glob("/exp/run2/2024/*/*.csv") == [
        "/exp/run2/2024/01/a.csv",
        "/exp/run2/2024/01/b.csv",
        "/exp/run2/2024/02/c.csv",
    ]
    assert fs.glob("/exp/*/part-3.parquet") == ["/exp/run1/part-3.parquet"]
    assert fs.find("/exp/run2") == [
        "/exp/run2/2024/01/a.csv",
        "/exp/run2/2024/01/b.csv",
        "/exp/run2/2024/02/c.csv",
        "/exp/run2/top.txt",
    ]
    assert len(fs.find("/exp")) == 4 + 4 + 1
    assert fs.find("/exp", maxdepth=2, withdirs=True) == [
        "/exp",
        "/exp/deep",
        "/exp/deep/nested",
        "/exp/run1",
        *(f"/exp/run1/part-{i}.parquet" for i in range(4)),
        "/exp/run2",
        "/exp/run2/2024",
        "/exp/run2/top.txt",
    ]
    # find (one range scan per StoreTorrent file) agrees with fsspec's own, built on walk and ls
    for path, kw in [
        ("/exp", {}),
        ("/exp", {"withdirs": True}),
        ("/exp", {"maxdepth": 3, "withdirs": True}),
        ("/exp/run2/2024", {"maxdepth": 1, "withdirs": True}),
        ("/", {"maxdepth": 4}),
        ("/exp/run2/top.txt", {}),
        ("/exp/nope", {}),
    ]:
        assert fs.find(path, detail=True, **kw) == AbstractFileSystem.find(fs, path, detail=True, **kw), (path, kw)
    assert fs.du("/exp/run2") == 29
    walked = {root: (sorted(dirs), sorted(files)) for root, dirs, files in fs.walk("/exp/run2")}
    assert walked["/exp/run2"] == (["2024"], ["top.txt"])
    assert fs.modified("/exp/run2/top.txt") >= fs.created("/exp/run2")

    for missing in ("/nope", "/exp/run9", "/exp/run2/2024/03", "/exp/run2/top.txt/x", "/exp/deep/nested/x/y"):
        with pytest.raises(FileNotFoundError):
            fs.info(missing)
        with pytest.raises(FileNotFoundError):
            fs.ls(missing)
        with pytest.raises(FileNotFoundError):
            fs.cat_file(missing)
    with pytest.raises(FileNotFoundError, match="no committed record"):
        fs.open("/exp/run2/2024/01/zzz.csv", "rb")
    with pytest.raises(IsADirectoryError):
        fs.cat_file("/exp/run2")


def test_pandas_reads_parquet_and_csv(run1):
    cluster, fs, frames = run1
    T = cluster.tracker_addr
    df = pd.read_parquet(f"storetorrent://{T}/exp/run1/part-0.parquet")
    pd.testing.assert_frame_equal(df, frames[0])
    csv = frames[3].to_csv(index=False).encode()
    fs.pipe(f"storetorrent://{T}/exp/tables/t.csv", csv)
    pd.testing.assert_frame_equal(pd.read_csv(f"storetorrent://{T}/exp/tables/t.csv"), frames[3])
    # seekable ranged reads of one record
    data = parquet(frames[2])
    with fs.open("/exp/run1/part-2.parquet", "rb") as f:
        assert f.size == len(data)
        f.seek(-8, 2)
        assert f.read() == data[-8:]
        f.seek(4)
        assert f.read(100) == data[4:104]
    assert fs.cat_file("/exp/run1/part-2.parquet", start=10, end=20) == data[10:20]
    assert fs.cat_file("/exp/run1/part-2.parquet", start=-4) == data[-4:] == b"PAR1"
    assert fs.read_text("/exp/tables/t.csv").startswith("x,part,s\n")


def test_pyarrow_dataset(run1):
    import pyarrow.dataset as ds
    from pyarrow.fs import FSSpecHandler, PyFileSystem

    cluster, fs, frames = run1
    expected = sorted_rows(pd.concat(frames), "x")
    # this pyarrow wraps an fsspec filesystem itself (PyFileSystem(FSSpecHandler(fs)))
    t = ds.dataset("/exp/run1", filesystem=fs, format="parquet").to_table()
    pd.testing.assert_frame_equal(sorted_rows(t.to_pandas(), "x"), expected)
    d = ds.dataset("/exp/run1", filesystem=PyFileSystem(FSSpecHandler(fs)), format="parquet")
    assert sorted(d.files) == [f"/exp/run1/part-{i}.parquet" for i in range(4)]
    assert d.to_table(filter=ds.field("part") == 2).num_rows == 50


def test_dask_read_parquet(run1):
    dask = pytest.importorskip("dask")
    dd = pytest.importorskip("dask.dataframe")

    cluster, fs, frames = run1
    with dask.config.set(scheduler="sync"):
        ddf = dd.read_parquet(f"storetorrent://{cluster.tracker_addr}/exp/run1/*.parquet")
        assert ddf.npartitions == 4
        df = ddf.compute()
        total = ddf.x.sum().compute()
    pd.testing.assert_frame_equal(sorted_rows(df, "x"), sorted_rows(pd.concat(frames), "x"), check_dtype=False)
    assert total == sum(range(200))


def test_duckdb_over_registered_filesystem(run1):
    duckdb = pytest.importorskip("duckdb")

    cluster, fs, frames = run1
    con = duckdb.connect()
    con.register_filesystem(fs)
    row = con.sql(
        f"SELECT count(*), sum(x) FROM read_parquet('storetorrent://{cluster.tracker_addr}/exp/run1/*.parquet')"
    ).fetchone()
    assert row == (200, sum(range(200)))
    row = con.sql(
        "SELECT part, count(*) FROM read_parquet('storetorrent:///exp/run1/part-[12].parquet') "
        "GROUP BY ALL ORDER BY ALL"
    ).fetchall()
    assert row == [(1, 50), (2, 50)]
    con.close()


def test_write_read_back_and_write_once(cluster, tmp_path):
    fs = fsspec.filesystem("storetorrent", tracker=cluster.tracker_addr)
    # a new path goes into a new file one component below the deepest namespace
    # directory on it (st_py.client.namespace_paths.new_file): below the root, the first
    # component of a deeper path stays a directory
    fs.pipe_file("/exp/new/first/0000.bin", b"0")  # creates file /exp/new, record first/0000.bin
    assert fs.info("/exp/new")["st_type"] == "file" and fs.cat_file("/exp/new/first/0000.bin") == b"0"
    fs.rm("/exp/new", recursive=True)
    cluster.client().create("/exp/new/first", replication="x2").close()  # /exp/new: a directory
    with fs.open("/exp/new/shots/0001.bin", "wb") as f:  # creates StoreTorrent file /exp/new/shots
        f.write(b"a" * 1000)
        f.write(b"b" * 24)
    # committed on close: another client sees it at once
    with cluster.client().open("/exp/new/shots") as h:
        assert h.get("0001.bin") == b"a" * 1000 + b"b" * 24
    info = fs.info("/exp/new/shots")
    assert (info["st_type"], info["replication"], info["records"]) == ("file", "x2", 1)
    assert fs.cat_file("/exp/new/shots/0001.bin") == b"a" * 1000 + b"b" * 24

    # an existing file: names with '/' become records of it
    fs.pipe("/exp/new/shots/sub/0002.bin", b"two")
    assert fs.ls("/exp/new/shots", detail=False) == ["/exp/new/shots/0001.bin", "/exp/new/shots/sub"]
    with cluster.client().open("/exp/new/shots") as h:
        assert h.names() == ["0001.bin", "sub/0002.bin"]
    local = tmp_path / "local.bin"
    local.write_bytes(b"from disk" * 100)
    fs.put_file(str(local), "/exp/new/shots/0003.bin")
    assert fs.cat_file("/exp/new/shots/0003.bin") == b"from disk" * 100
    fs.put(str(local), "/exp/new/x3/local.bin")
    assert fs.info("/exp/new/x3/local.bin")["size"] == 900
    fs.pipe("/exp/other/a", b"1", replication="x3")
    assert fs.info("/exp/other")["replication"] == "x3"

    # exclusive writes refuse a committed record; overwrites store a new version of it
    with pytest.raises(FileExistsError) as e:
        fs.open("/exp/new/shots/0001.bin", "xb")
    assert isinstance(e.value, RecordExistsError)
    with pytest.raises(FileExistsError, match="write-once"):
        fs.pipe_file("/exp/new/shots/sub/0002.bin", b"other", mode="create")
    with pytest.raises(NotImplementedError, match="write-once"):
        fs.open("/exp/new/shots/0001.bin", "ab")
    assert fs.cat_file("/exp/new/shots/sub/0002.bin") == b"two"
    fs.pipe("/exp/new/shots/sub/0002.bin", b"second")  # fsspec's default mode: overwrite
    assert fs.cat_file("/exp/new/shots/sub/0002.bin") == b"second"
    with fs.open("/exp/new/shots/sub/0002.bin", "wb") as f:
        f.write(b"third")
    assert fs.cat_file("/exp/new/shots/sub/0002.bin") == b"third"
    with cluster.client().open("/exp/new/shots") as f:
        assert f.get("sub/0002.bin") == b"third" and f.record_meta("sub/0002.bin").version == 2
    # records live in StoreTorrent files, never directly in a namespace directory
    with pytest.raises(IsADirectoryError, match="namespace directory"):
        fs.pipe("/exp/new/loose.bin", b"x")
    with pytest.raises(IsADirectoryError):
        fs.pipe("/exp/new/shots", b"x")
    # a writer that fails inside its `with` block stores nothing (write-once: no partial records)
    with pytest.raises(RuntimeError):
        with fs.open("/exp/new/shots/0004.bin", "wb") as f:
            f.write(b"half")
            raise RuntimeError("writer died")
    assert not fs.exists("/exp/new/shots/0004.bin")


def test_rm_record_and_whole_file(run1):
    cluster, fs, _ = run1
    fs.pipe("/exp/run1/logs/a.txt", b"a")
    fs.pipe("/exp/run1/logs/b.txt", b"b")
    fs.rm_file("/exp/run1/part-0.parquet")
    assert not fs.exists("/exp/run1/part-0.parquet")
    with pytest.raises(FileNotFoundError):
        fs.cat_file("/exp/run1/part-0.parquet")
    with pytest.raises(FileNotFoundError):
        fs.rm_file("/exp/run1/part-0.parquet")
    c = cluster.client()
    with c.open("/exp/run1") as h:
        assert "part-0.parquet" not in h.names()
    fs.rm("/exp/run1/logs", recursive=True)  # a record prefix: its records
    assert fs.ls("/exp/run1", detail=False) == [f"/exp/run1/part-{i}.parquet" for i in (1, 2, 3)]
    with pytest.raises(IsADirectoryError):
        fs.rm("/exp/run1")
    fs.rm("storetorrent:///exp/run1", recursive=True)  # the whole StoreTorrent file
    with pytest.raises(StFileNotFoundError):
        c.open("/exp/run1")
    assert not fs.exists("/exp/run1")
    with pytest.raises(FileNotFoundError):
        fs.rm("/exp/run1", recursive=True)
    # namespace directories: rmdir removes an empty one, refuses a full one
    fs.pipe("/exp/keep/f/x.txt", b"x")
    with pytest.raises(OSError) as e:
        fs.rmdir("/exp")
    assert e.value.errno == errno.ENOTEMPTY
    fs.rm("/exp/keep/f", recursive=True)
    fs.rmdir("/exp/keep")
    assert not fs.exists("/exp/keep")


def test_read_survives_a_killed_peer(run1):
    cluster, fs, frames = run1
    c = cluster.client()
    blobs = {f"r{i:02d}": bytes([i]) * (100 + i) for i in range(24)}
    with c.create("/exp/spread", replication="x2", blocksize=1) as f:
        for k, v in blobs.items():
            f.queue_put(k, v)
    h = c.open("/exp/spread")
    dead = cluster.kill_peer(0)
    dead_idx = next(i for i, p in h.peers.items() if p.addr == dead)
    first_on_dead = [k for k in blobs if h._infofile().lookup(k).peers[0] == dead_idx]
    h.close()
    assert first_on_dead, "some records must have their first copy on the killed peer"

    remote = fsspec.filesystem("storetorrent", tracker=cluster.tracker_addr, local_reads=False)
    assert {k: remote.cat_file(f"/exp/spread/{k}") for k in blobs} == blobs
    assert remote.stats["get_reads"] == len(blobs) and remote.stats["get_local_calls"] == 0
    df = pd.read_parquet("/exp/run1/part-1.parquet", filesystem=remote)
    pd.testing.assert_frame_equal(df, frames[1])
    # local reads: GET_LOCAL leaves the dead peer out of the ring, the survivors reveal everything
    assert {k: fs.cat_file(f"/exp/spread/{k}") for k in blobs} == blobs
    assert fs.stats["local_reads"] == len(blobs)


def test_local_reads_use_revealed_paths(run1):
    cluster, fs, frames = run1
    assert fs.cat_file("/exp/run1/part-0.parquet") == parquet(frames[0])
    assert fs.stats == {"local_reads": 1, "get_reads": 0, "local_fallbacks": 0, "get_local_calls": 1, "cache_hits": 0}
    for i in range(3):
        pd.testing.assert_frame_equal(pd.read_parquet(f"/exp/run1/part-{i}.parquet", filesystem=fs), frames[i])
    assert fs.stats["get_local_calls"] == 1  # once per StoreTorrent file and instance
    assert fs.stats["local_reads"] == 3 and fs.stats["get_reads"] == 0
    assert fs.stats["cache_hits"] >= 3  # pyarrow opens each record twice; read once

    # A local copy that does not match its committed CRC-32C is not used:
    # the record comes by GET (which skips the bad copy too).
    with cluster.client().open("/exp/run1") as h:
        revealed = {r.name: r.path for r in h.get_local()}
    with open(revealed["part-3.parquet"], "r+b") as f:
        f.seek(100)
        f.write(b"\xff" * 16)
    pd.testing.assert_frame_equal(pd.read_parquet("/exp/run1/part-3.parquet", filesystem=fs), frames[3])
    assert fs.stats["local_fallbacks"] == 1 and fs.stats["get_reads"] == 1

    # records committed after the GET_LOCAL map was made come by GET ...
    fs.pipe("/exp/run1/late.bin", b"late")
    assert fs.cat_file("/exp/run1/late.bin") == b"late"
    assert fs.stats["get_reads"] == 2
    # ... until invalidate_cache() makes a new map (and empties the record cache)
    fs.invalidate_cache()
    assert fs.cat_file("/exp/run1/late.bin") == b"late"
    assert fs.stats["local_reads"] == 4 and fs.stats["get_local_calls"] == 2

    remote = fsspec.filesystem("storetorrent", tracker=cluster.tracker_addr, local_reads=False, record_cache_bytes=0)
    assert remote.cat_file("/exp/run1/part-1.parquet") == remote.cat_file("/exp/run1/part-1.parquet")
    assert remote.stats == {
        "local_reads": 0,
        "get_reads": 2,
        "local_fallbacks": 0,
        "get_local_calls": 0,
        "cache_hits": 0,
    }


def test_close_and_ended_threads_release_open_files(run1):
    """The filesystem closes what it opened: the files of a thread that
    ended (when another thread opens its own), every file and the tracker
    connection on close() (and when the instance is collected), after which
    it reopens them on use."""
    cluster, _, frames = run1
    fs = fsspec.filesystem("storetorrent", tracker=cluster.tracker_addr, local_reads=False, record_cache_bytes=0)
    t = threading.Thread(target=fs.cat_file, args=("/exp/run1/part-1.parquet",))
    t.start()
    t.join()
    [(thread_file, _)] = [h for st in fs._res.states for h in st.handles.values()]
    assert not thread_file._closed
    assert fs.cat_file("/exp/run1/part-2.parquet") == parquet(frames[2])  # this thread's own file
    assert thread_file._closed
    [(mine, _)] = [h for st in fs._res.states for h in st.handles.values()]
    fs.close()
    assert mine._closed and not fs._res.states and fs._res.client is None
    assert fs.cat_file("/exp/run1/part-3.parquet") == parquet(frames[3])
    fs.close()


def test_striped_objects_are_files_of_their_full_size_and_stripes_never_show(cluster):
    """One object model (docs/composition.md): an object is a file of its
    whole size everywhere in fsspec, read by ranges; .st-stripe/ never
    shows (ls, find, glob, du, info, open)."""
    import io as _io

    import pandas as _pd

    from st_integrations.fsspec_fs import StoreTorrentFileSystem

    frame = _pd.DataFrame({"i": range(20_000), "k": ["abc"] * 20_000})
    csv = frame.to_csv(index=False).encode()
    with cluster.client().create("/fo/f", replication="x2") as f:
        f.put("small.csv", b"i,k\n1,x\n")
        meta = f.put_object("sub/big.csv", csv, stripe_size=16 << 10)
    assert meta.stripes > 3
    fs = StoreTorrentFileSystem(tracker=cluster.tracker_addr)
    assert fs.ls("/fo/f", detail=False) == ["/fo/f/small.csv", "/fo/f/sub"]
    assert fs.ls("/fo/f/sub", detail=False) == ["/fo/f/sub/big.csv"]
    info = fs.info("/fo/f/sub/big.csv")
    assert info["type"] == "file" and info["st_type"] == "object" and info["size"] == len(csv)
    assert fs.find("/fo/f") == ["/fo/f/small.csv", "/fo/f/sub/big.csv"]
    assert fs.glob("/fo/f/**/*.csv") == ["/fo/f/small.csv", "/fo/f/sub/big.csv"]
    assert fs.du("/fo/f") == len(csv) + 8
    assert not fs.exists("/fo/f/.st-stripe") and not fs.exists(f"/fo/f/.st-stripe/sub/big.csv/{0:08d}")
    assert fs.isfile("/fo/f/sub/big.csv") and fs.isdir("/fo/f/sub")
    assert fs.cat_file("/fo/f/sub/big.csv", start=100_000, end=100_050) == csv[100_000:100_050]
    with fs.open("/fo/f/sub/big.csv", "rb") as fh:
        fh.seek(len(csv) - 20)
        assert fh.read() == csv[-20:]
    back = _pd.read_csv(f"storetorrent://{cluster.tracker_addr}/fo/f/sub/big.csv")
    _pd.testing.assert_frame_equal(back, frame)
    assert _io.BytesIO(fs.cat_file("/fo/f/sub/big.csv")).getvalue() == csv


def test_a_walk_over_many_files_keeps_a_bounded_number_open(cluster, monkeypatch):
    """A thread keeps at most MAX_OPEN_FILES StFile handles (each an infofile
    connection and an epoll descriptor): `find` over 10^4 files ran out of
    descriptors before. The least recently used is closed first, unless an
    object reader still reads through it; then it is closed once that reader
    is gone. Every answer stays right."""
    from st_integrations import fsspec_resources

    monkeypatch.setattr(fsspec_resources, "MAX_OPEN_FILES", 3)
    c = cluster.client()
    obj = bytes(range(256)) * 40  # 10 KiB in stripes of 1 KiB
    with c.create("/many/f0", replication="x1") as f:
        f.put_object("obj", obj, stripe_size=1024)
    for i in range(1, 8):
        with c.create(f"/many/f{i}", replication="x1") as f:
            f.put("r", f"record {i}".encode())
    fs = fsspec.filesystem("storetorrent", tracker=cluster.tracker_addr, local_reads=False, record_cache_bytes=0)
    reader = fs.open("/many/f0/obj", "rb")
    assert reader.read(100) == obj[:100]
    [st] = fs._res.states
    (held, _) = st.handles["/many/f0"]
    for i in range(1, 8):
        assert fs.cat_file(f"/many/f{i}/r") == f"record {i}".encode()
        assert len(st.handles) <= 3
    assert "/many/f0" not in st.handles and not held._closed  # evicted, but its reader still reads
    assert reader.read() == obj[100:]
    evicted = [h for h in st.retired] + [h for h, _ in st.handles.values()]
    reader.close()
    del reader
    gc.collect()
    assert sorted(fs.find("/many")) == ["/many/f0/obj"] + [f"/many/f{i}/r" for i in range(1, 8)]
    assert held._closed and not st.retired  # closed once its reader was gone
    assert all(h._closed for h in evicted if all(h is not k for k, _ in st.handles.values()))
    assert len(st.handles) <= 3
    fs.close()


def test_a_filesystem_made_for_a_new_cluster_on_a_reused_address_reads_that_cluster(tmp_path, peer_bin):
    """Two clusters one after the other on one tracker address (the second
    a new namespace on the port the first released, as a later test's
    cluster or another `storetorrent up --port` gets it), the same file and
    record names in both: a filesystem made with the same arguments for
    the second reads the second's bytes. Before, fsspec handed back the
    first cluster's cached instance, whose open StFile (its infofile still
    on disk) and record cache served the first cluster's bytes."""
    from st_py.deploy.cluster import LocalCluster

    with LocalCluster(tmp_path / "a", n_peers=1, announce_interval=0.3) as a:
        port = a.tracker_port
        with a.client() as c, c.create("/reuse/f", replication="x1") as f:
            f.put("r.bin", b"the first cluster's")
        first = fsspec.filesystem("storetorrent", tracker=a.tracker_addr)
        assert first.cat_file("/reuse/f/r.bin") == b"the first cluster's"
        assert first.ls("/reuse", detail=False) == ["/reuse/f"]
    with LocalCluster(tmp_path / "b", n_peers=1, announce_interval=0.3, tracker_port=port) as b:
        assert b.tracker_addr == f"127.0.0.1:{port}"
        with b.client() as c, c.create("/reuse/f", replication="x1") as f:
            f.put("r.bin", b"the second cluster's!")
            f.put("s.bin", b"only in the second")
        second = fsspec.filesystem("storetorrent", tracker=b.tracker_addr)
        assert second.cat_file("/reuse/f/r.bin") == b"the second cluster's!"
        assert second.ls("/reuse/f", detail=False) == ["/reuse/f/r.bin", "/reuse/f/s.bin"]
        with fsspec.open(f"storetorrent://{b.tracker_addr}/reuse/f/r.bin") as fh:
            assert fh.read() == b"the second cluster's!"

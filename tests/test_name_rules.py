"""The rule for record names (docs/decisions.md, "Record names"),
through every way in, against real processes: a new name
is a relative path (no leading or trailing '/', no empty, '.' or '..'
component), and a name is a record or a folder, never both (issue 38,
items 2 and 4); a file put onto a namespace directory says it is one
(item 12)."""

from __future__ import annotations

import io
import threading
from contextlib import closing

import fsspec
import pandas as pd
import pytest
from helpers import run_cli

from st_integrations.fsspec_fs import StoreTorrentFileSystem
from st_py.core.infofile import InfofileReader
from st_py.errors import (
    BadNameError,
    RecordIsADirectoryError,
    RecordNameRuleError,
    RecordNotADirectoryError,
    StoreTorrentError,
)

REFUSED_PATHS = {
    "../escape.txt": "'..' component",
    "a/../../escape2.txt": "'..' component",
    "/abs.txt": "starts with '/'",
    "a//b": "empty component",
    "a/": "ends with '/'",
    "./x": "'.' component",
    "a/.": "'.' component",
    "/" * 300: "starts with '/'",
}


def names_of(cluster, file: str) -> list[str]:
    with closing(InfofileReader(cluster.namespace / file.strip("/"))) as r:
        return sorted(r.names())


def parquet(df: pd.DataFrame) -> bytes:
    out = io.BytesIO()
    df.to_parquet(out, index=False)
    return out.getvalue()


def test_the_client_refuses_names_that_are_no_relative_path(module_cluster):
    c = module_cluster.client()
    with c.create("/rules/paths", replication="x1") as f:
        f.put("keep", b"k")  # an appended file checks names against its infofile too
    with c.open("/rules/paths") as f:
        for name, why in REFUSED_PATHS.items():
            for put in (f.put, f.queue_put):
                with pytest.raises(RecordNameRuleError, match=why) as e:
                    put(name, b"x")
                assert isinstance(e.value, BadNameError) and e.value.name == name and "relative path" in str(e.value)
            with pytest.raises(RecordNameRuleError):
                f.put_object(name, io.BytesIO(b"x"))
        # otherwise literal: kept exactly
        for name in ("a\\..\\b", "%2e%2e/x", "..a", "a..", "...", ".hidden/x", "sp ace/[b]"):
            f.put(name, name.encode())
    assert names_of(module_cluster, "/rules/paths") == sorted(
        ["keep", "a\\..\\b", "%2e%2e/x", "..a", "a..", "...", ".hidden/x", "sp ace/[b]"]
    )


def test_a_name_is_a_record_or_a_folder_never_both(module_cluster):
    c = module_cluster.client()
    with c.create("/rules/tree", replication="x2") as f:
        f.put("a/b/c", b"c")
        # the handle's own puts in flight
        f.queue_put("q/r", b"r")
        with pytest.raises(RecordNotADirectoryError) as e:
            f.queue_put("q/r/s", b"s")
        assert isinstance(e.value, NotADirectoryError) and isinstance(e.value, StoreTorrentError)
        assert (e.value.file, e.value.name, e.value.record) == ("/rules/tree", "q/r/s", "q/r")
        with pytest.raises(RecordIsADirectoryError) as e:
            f.queue_put("q", b"q")
        assert e.value.record == "q/r"
    with c.open("/rules/tree") as f:  # against the infofile: refused before anything is sent
        with pytest.raises(RecordIsADirectoryError) as e:
            f.put("a/b", b"x")
        assert isinstance(e.value, IsADirectoryError) and e.value.record == "a/b/c"
        assert "is a folder" in str(e.value) and "a/b/c" in str(e.value)
        with pytest.raises(RecordIsADirectoryError):
            f.put("a", b"x")
        with pytest.raises(RecordNotADirectoryError) as e:
            f.put("a/b/c/d", b"x")
        assert e.value.record == "a/b/c"
        f.put("a/b/c", b"c2", replace=True)  # a new version of the same name is fine
        f.put("a/b/cc", b"x")  # a sibling is fine, and so is a name that only shares characters
        f.put("a/b c", b"x")
        f.delete("a/b/c")
        f.delete("a/b/cc")
        f.put("a/b", b"now a record")  # deleted records no longer block
    with c.open("/rules/tree") as f:
        assert f.get("a/b") == b"now a record"
    assert names_of(module_cluster, "/rules/tree") == ["a/b", "a/b c", "q/r"]


def test_the_tracker_decides_between_two_writers(module_cluster):
    """Two clients whose handles saw an empty file (no check up front) put
    ``a/b`` and ``a/b/c`` at once: exactly one commits; the other hears
    the tracker's refusal as its own error, the same way a duplicate name
    is reported."""
    for round_ in range(3):
        name = f"/rules/race{round_}"
        module_cluster.client().create(name, replication="x2").close()
        handles = [module_cluster.client().open(name) for _ in range(2)]
        results: dict[str, object] = {}
        go = threading.Barrier(2)

        def write(f, rec):
            go.wait()
            try:
                f.put(rec, rec.encode())
                f.flush()
                results[rec] = "ok"
            except StoreTorrentError as e:
                results[rec] = e
            finally:
                f.close()

        threads = [threading.Thread(target=write, args=(h, r)) for h, r in zip(handles, ("a/b", "a/b/c"), strict=True)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        won = [r for r, v in results.items() if v == "ok"]
        assert len(won) == 1, results
        lost = "a/b/c" if won == ["a/b"] else "a/b"
        err = results[lost]
        want = RecordNotADirectoryError if lost == "a/b/c" else RecordIsADirectoryError
        assert isinstance(err, want), err
        assert err.record == won[0] and err.name == lost and err.file == name
        assert names_of(module_cluster, name) == won


def test_item2_a_write_onto_a_folder_path_is_refused_everywhere(module_cluster, tmp_path):
    """Issue 38 item 2: ``src/tables`` holds three Parquet records (30
    rows); writing a frame onto that folder's path is refused (as a local
    disk refuses it) by pandas, fsspec and put, writing below a record is
    too, and every reader still sees the 30 rows."""
    from st_integrations.dask_reader import read_storetorrent

    T = module_cluster.tracker_addr
    fs = fsspec.filesystem("storetorrent", tracker=T, skip_instance_cache=True)
    module_cluster.client().create("/exp/run1", replication="x2").close()
    for i in range(3):
        fs.pipe_file(f"/exp/run1/src/tables/p{i}.parquet", parquet(pd.DataFrame({"i": range(i * 10, i * 10 + 10)})))
    url = f"storetorrent://{T}/exp/run1/src/tables"
    with pytest.raises(IsADirectoryError):
        pd.DataFrame({"x": [1, 2]}).to_parquet(url)
    with pytest.raises(RecordIsADirectoryError):
        fs.pipe_file("/exp/run1/src/tables", b"x")
    with pytest.raises(RecordIsADirectoryError):
        fs.open("/exp/run1/src/tables", "wb")
    with pytest.raises(RecordIsADirectoryError):
        fs.pipe_file("/exp/run1/src", b"x")
    local = tmp_path / "one.bin"
    local.write_bytes(b"x")
    with pytest.raises(IsADirectoryError):  # (fs.put onto a folder copies into it, as cp does)
        fs.put_file(str(local), "/exp/run1/src/tables")
    with pytest.raises(NotADirectoryError):
        fs.put(str(local), "/exp/run1/src/tables/p0.parquet/one.bin")
    with pytest.raises(RecordNotADirectoryError) as e:
        fs.pipe_file("/exp/run1/src/tables/p0.parquet/x", b"x")
    assert e.value.record == "src/tables/p0.parquet"
    with pytest.raises(NotADirectoryError):
        pd.DataFrame({"x": [1]}).to_parquet(f"{url}/p1.parquet/more.parquet")
    assert names_of(module_cluster, "/exp/run1") == [f"src/tables/p{i}.parquet" for i in range(3)]
    # every reader: the original 30 rows, no column x
    back = pd.read_parquet(url)
    assert sorted(back["i"]) == list(range(30)) and list(back.columns) == ["i"]
    dask_rows = read_storetorrent("/exp/run1", tracker=T).compute()
    assert sorted(dask_rows["i"]) == list(range(30)) and "x" not in dask_rows.columns
    # ls and info say which a path is, once
    listed = fs.ls("/exp/run1/src")
    assert [(d["name"], d["type"]) for d in listed] == [("/exp/run1/src/tables", "directory")]
    assert fs.info("/exp/run1/src/tables")["type"] == "directory"
    assert fs.info("/exp/run1/src/tables/p0.parquet")["type"] == "file"
    StoreTorrentFileSystem.clear_instance_cache()  # pandas' cached filesystem: not for a later cluster's port


def test_item4_fsspec_refuses_dots_instead_of_storing_them(module_cluster):
    fs = fsspec.filesystem("storetorrent", tracker=module_cluster.tracker_addr, skip_instance_cache=True)
    module_cluster.client().create("/exp/dots", replication="x1").close()
    fs.pipe_file("/exp/dots/keep", b"k")
    for path in ("/exp/dots/../escape.txt", "/exp/dots/a/./b", "/exp/dots/a/../b"):
        with pytest.raises(RecordNameRuleError):
            fs.pipe_file(path, b"x")
        with pytest.raises(ValueError):
            fs.open(path, "wb")
    assert names_of(module_cluster, "/exp/dots") == ["keep"]


def test_the_writers_go_through_the_rule(module_cluster, monkeypatch):
    dd = pytest.importorskip("dask.dataframe")
    from st_integrations.dask_writer import to_storetorrent

    T = module_cluster.tracker_addr
    monkeypatch.setenv("STORETORRENT_TRACKER", T)
    ddf = dd.from_pandas(pd.DataFrame({"i": range(20)}), npartitions=2)
    with pytest.raises(RecordNameRuleError):
        to_storetorrent(ddf, "/rules/dask", prefix="../up")
    with pytest.raises(StoreTorrentError):  # nothing was made
        module_cluster.client().open("/rules/dask")
    assert to_storetorrent(ddf, "/rules/dask", prefix="t/p") == 2
    with pytest.raises(RecordNotADirectoryError) as e:  # below a record: refused before any task runs
        to_storetorrent(ddf, "/rules/dask", mode="append", prefix="t/p-00000-0000.parquet/q")
    assert e.value.record == "t/p-00000-0000.parquet"
    assert names_of(module_cluster, "/rules/dask") == ["t/p-00000-0000.parquet", "t/p-00001-0000.parquet"]


def test_a_staged_commit_checks_the_tree_before_committing(module_cluster):
    """The commit of a write job (every task's staged records in one
    transaction): two tasks staging ``j/a`` and ``j/a/b`` (each alone is
    fine) are refused with nothing committed; and a task's staged name
    below a record committed meanwhile is too."""
    c = module_cluster.client()
    c.create("/rules/staged", replication="x1").close()

    def stage(rec: str) -> list[dict]:
        with c.open_staged("/rules/staged") as f:
            f.put(rec, b"x")
            return f.staged_commits()

    tasks = [stage("j/a"), stage("j/a/b")]
    with pytest.raises(RecordNotADirectoryError) as e:
        c.commit_staged("/rules/staged", [r for t in tasks for r in t])
    assert (e.value.name, e.value.record) == ("j/a/b", "j/a")
    assert names_of(module_cluster, "/rules/staged") == []
    staged = stage("k/a/b")
    with c.open("/rules/staged") as f:
        f.put("k/a", b"meanwhile")
    with pytest.raises(RecordNotADirectoryError):
        c.commit_staged("/rules/staged", staged)
    assert names_of(module_cluster, "/rules/staged") == ["k/a"]


def test_ray_writer_refuses_a_prefix_below_a_record(module_cluster, monkeypatch):
    ray = pytest.importorskip("ray")
    from st_integrations.ray_writer import write_storetorrent

    monkeypatch.setenv("STORETORRENT_TRACKER", module_cluster.tracker_addr)
    fs = fsspec.filesystem("storetorrent", tracker=module_cluster.tracker_addr, skip_instance_cache=True)
    module_cluster.client().create("/rules/ray", replication="x2").close()
    fs.pipe_file("/rules/ray/rec", b"r")
    try:
        ds = ray.data.from_pandas(pd.DataFrame({"i": range(10)}))
        with pytest.raises(RecordNotADirectoryError):
            write_storetorrent(ds, "/rules/ray", mode="append", prefix="rec/part")
        with pytest.raises(RecordNameRuleError):
            write_storetorrent(ds, "/rules/ray", mode="append", prefix="a/../b")
    finally:
        ray.shutdown()
    assert names_of(module_cluster, "/rules/ray") == ["rec"]


def test_cli_put_refuses_a_folder_name_and_a_namespace_directory(module_cluster, tmp_path):
    c = module_cluster.client()
    with c.create("/cliname/f", replication="x1") as f:
        f.put("tables/p0", b"p")
    (tmp_path / "tables").write_bytes(b"a file where a folder is")
    r = run_cli(module_cluster, "put", "/cliname/f", str(tmp_path / "tables"))
    assert r.returncode == 1, r.stderr
    assert "tables" in r.stderr and "is a folder" in r.stderr
    assert names_of(module_cluster, "/cliname/f") == ["tables/p0"]
    # item 12: a namespace directory is no file, and is never to be deleted for a put
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_bytes(b"a")
    r = run_cli(module_cluster, "put", "/cliname", str(src) + "/")
    assert r.returncode != 0
    assert "/cliname is a directory in the namespace" in r.stderr, r.stderr
    assert "storetorrent put /cliname/NAME" in r.stderr and "delete" not in r.stderr
    # ls -r says which a name is
    out = run_cli(module_cluster, "ls", "-r", "/cliname/f", "--format", "json", check=True).stdout
    assert '"kind": "record"' in out


def test_names_an_older_file_holds_stay_readable(module_cluster, tmp_path):
    """Only puts are refused: an older file's ``../escape.txt``,
    ``/abs.txt`` and ``a//b`` are read and deleted as before, and
    ``get -r`` fetches every other record (item 4: one such name blocked
    the whole file), naming those it leaves out."""
    from helpers import rename_in_infofile

    c = module_cluster.client()
    legacy = {"tmp0": "../escape.txt", "tmp1": "/abs.txt", "tmp2": "a//b"}
    with c.create("/rules/legacy", replication="x2") as f:
        for t in legacy:
            f.put(t, legacy[t].encode())
        f.put("d/ok", b"ok")
    rename_in_infofile(module_cluster, "/rules/legacy", legacy)
    c = module_cluster.client()
    with c.open("/rules/legacy") as f:
        for n in legacy.values():
            assert f.get(n) == n.encode()
    out = tmp_path / "out"
    r = run_cli(module_cluster, "get", "/rules/legacy", "-r", "-o", str(out))
    assert r.returncode == 1 and "fetched 1 records" in r.stdout, r.stdout + r.stderr
    assert (out / "d" / "ok").read_bytes() == b"ok" and sorted(p.name for p in out.iterdir()) == ["d"]
    for n in legacy.values():
        assert n in r.stderr
    assert "3 of 4 records" in r.stderr
    with c.open("/rules/legacy") as f:
        f.delete("../escape.txt")
    assert names_of(module_cluster, "/rules/legacy") == ["/abs.txt", "a//b", "d/ok"]


def test_the_tracker_refuses_what_a_client_did_not_check(module_cluster):
    """A commit sent past st_py's checks (a raw Commit) meets the same rule
    at the tracker, with its kind and the record it met."""
    from st_py._proto import tracker_pb2 as pb

    c = module_cluster.client()
    with c.create("/rules/raw", replication="x1") as f:
        f.put("r/s", b"x")
    info = c.tracker.open("/rules/raw")

    def commit(name: str):
        rec = pb.RecordCommit(name=name, size=1, crc32c=0, peer_idx=[0])
        return c.tracker.at(info.file_tracker).commit("/rules/raw", info.file_id, [rec])

    for name, kind, record in (
        ("../x", "bad-name", ""),
        ("/abs", "bad-name", ""),
        ("r", "is-a-directory", "r/s"),
        ("r/s/t", "not-a-directory", "r/s"),
    ):
        reply = commit(name)
        assert (list(reply.conflict_names), list(reply.conflict_kinds), list(reply.conflict_records)) == (
            [name],
            [kind],
            [record],
        ), name
        assert reply.committed == 0
    assert names_of(module_cluster, "/rules/raw") == ["r/s"]


def test_the_batch_check_agrees_with_the_check_of_one_name(tmp_path):
    """The tracker's check of a whole commit (two statements a table) and
    a put's check of one name (one statement) give the same conflict for
    every name, objects included (no processes: an infofile alone)."""
    from st_py.core.record_names import name_state, tree_conflict, tree_conflicts
    from st_py.tracker.infofile_writer import InfofileWriter, create_infofile

    path = tmp_path / "f"
    create_infofile(path, {"file_id": 1, "copies": 1, "name": "/f"}, [(0, "p0", "h:1")])
    w = InfofileWriter(path)
    committed = ["a/b/c", "a/bc", "x", "d/e/f/g", "sp ace/[1]", "u/é"]
    w.commit([(n, 1, i, [0]) for i, n in enumerate(committed)])
    w.commit([(f".st-stripe/obj/d/{i:08d}", 1, i, [0]) for i in range(1)])
    assert w.commit_objects([("obj/d", 1, 4096, 1, 0)])[1] == 1
    probes = ["a", "a/b", "a/b/c/d", "a/bc/x", "a/b c", "x/y", "x", "d/e", "d/e/f/g/h", "obj", "obj/d/e", "sp ace", "u"]
    probes += ["u/é/x", "zz", "a/b/cc", "d/e/f/gg"]
    one = {n: tree_conflict(w.conn, n) for n in probes}
    assert {n: h for n, h in one.items() if h is not None} == tree_conflicts(w.conn, probes)
    assert one["a"] == ("is-a-directory", "a/b/c") and one["a/b/c/d"] == ("not-a-directory", "a/b/c")
    assert one["obj"] == ("is-a-directory", "obj/d") and one["obj/d/e"] == ("not-a-directory", "obj/d")
    assert one["a/b c"] is None and one["a/b/cc"] is None and one["x"] is None  # x itself: a replacement
    assert name_state(w.conn, "x") == (True, None) and name_state(w.conn, "obj/d") == (True, None)
    w.conn.close()


def test_name_states_gives_name_state_of_every_name(tmp_path):
    """The write batch's check of a whole slice (issue 41: two statements
    a table) gives, for every name, exactly the one-name check's answer:
    existence and conflict, records and objects judged together (the
    shortest committed parent of either table, else the first name below
    in either), names committed before the rule included."""
    import sqlite3

    from st_py.core.record_names import name_state, name_states
    from st_py.tracker.infofile_writer import InfofileWriter, create_infofile

    path = tmp_path / "f"
    create_infofile(path, {"file_id": 1, "copies": 1, "name": "/f"}, [(0, "p0", "h:1")])
    w = InfofileWriter(path)
    committed = ["a/b/c", "a/bc", "x", "d/e/f/g", "sp ace/[1]", "u/é", "m/x", "m/y/z"]
    committed += [f"bulk/d{i % 7}/r{i:05d}" for i in range(600)]
    w.commit([(n, 1, i, [0]) for i, n in enumerate(committed)])
    w.commit([(f".st-stripe/{o}/{0:08d}", 1, i, [0]) for i, o in enumerate(["obj/d", "m/a"])])
    assert w.commit_objects([("obj/d", 1, 4096, 1, 0), ("m/a", 1, 4096, 1, 0)])[1] == 2
    # objects committed before the rule (no commit would take them now): against the records' tree
    for o in ("a/b", "x/y"):
        w.conn.execute(
            "INSERT INTO objects(name, size, stripe_size, stripes, crc32c, commit_seq, committed_at) "
            "VALUES (?, 1, 4096, 1, 0, 0, 0)",
            (o,),
        )
    w.conn.commit()
    probes = ["a", "a/b", "a/b/c", "a/b/c/d", "a/bc/x", "a/b c", "x", "x/y", "x/y/z", "d/e", "d/e/f/g/h", "obj"]
    probes += ["obj/d", "obj/d/e", "sp ace", "u", "u/é/x", "zz", "a/b/cc", "d/e/f/gg", "m", "m/a/b", "m/y", "bulk"]
    probes += [f"bulk/d{i % 9}/r{i:05d}" for i in range(0, 900, 3)]  # committed or not; folders d7, d8 hold none
    probes += committed[8::4]  # committed
    probes += [f"bulk/d{i % 7}/r{i:05d}/below" for i in range(0, 600, 50)] + [f"bulk/d{i}" for i in range(9)]
    statements: list[str] = []
    w.conn.set_trace_callback(statements.append)
    many = name_states(w.conn, probes + probes[:20])  # a name given twice: one answer
    w.conn.set_trace_callback(None)
    assert len(statements) == 4  # two a table, whatever the count
    assert many == {n: name_state(w.conn, n) for n in probes}
    assert many["m"] == (False, ("is-a-directory", "m/a"))  # the object before the record m/x
    assert many["a/b/c/d"] == (False, ("not-a-directory", "a/b"))  # the object a/b: shorter than a/b/c
    assert many["x"] == (True, ("is-a-directory", "x/y")) and many["x/y"] == (True, ("not-a-directory", "x"))
    assert many["bulk/d3/r00003"] == (True, None) and many["bulk/d0/r00009"] == (False, None)
    assert many["bulk/d8"] == (False, None)
    assert many["bulk/d3"] == (False, ("is-a-directory", "bulk/d3/r00003"))
    assert many["bulk/d1/r00050/below"] == (False, ("not-a-directory", "bulk/d1/r00050"))
    assert sum(s is not None for _, s in many.values()) > 20 and sum(e for e, _ in many.values()) > 100
    records_only = name_states(w.conn, probes, objects=False)
    assert records_only == {n: name_state(w.conn, n, objects=False) for n in probes}
    assert records_only["m"] == (False, ("is-a-directory", "m/x"))
    assert name_states(w.conn, []) == {}
    w.conn.execute("DROP TABLE objects")  # a file made before striped objects: records only
    assert name_states(w.conn, probes) == records_only
    with pytest.raises(sqlite3.OperationalError):
        name_state(w.conn, "m")  # the one-name check is told (InfofileReader passes objects=False)
    w.conn.close()


def test_a_name_trees_bulk_counts_equal_one_name_at_a_time():
    """``NameTree.add_many``/``discard_many`` (a write batch's slice, a
    group commit's records: issue 41) leave the tree exactly as ``add``
    and ``discard`` of each name do, for names repeated, nested, at the
    top level and discarded without being added, and the tree answers
    the same conflicts (no processes)."""
    from hypothesis import given, settings
    from hypothesis import strategies as hst

    from st_py.core.record_names import NameTree

    part = hst.sampled_from(["a", "b", "a/b", "c/d/e", "é", "x y"])
    name = hst.lists(part, min_size=1, max_size=3).map("/".join)

    @settings(deadline=None, max_examples=200, database=None)
    @given(
        adds=hst.lists(hst.lists(name, max_size=8), max_size=4),
        drops=hst.lists(hst.lists(name, max_size=8), max_size=4),
    )
    def check(adds, drops):
        one, many = NameTree(), NameTree()
        for batch in adds:
            for n in batch:
                one.add(n)
            many.add_many(batch)
        for batch in drops:
            for n in batch:
                one.discard(n)
            many.discard_many(batch)
        assert (one._names, one._folders) == (many._names, many._folders)
        for probe in {n for b in adds + drops for n in b} | {"a", "a/b/c", "zz"}:
            assert one.conflict(probe) == many.conflict(probe)

    check()


def test_a_slices_names_checked_at_once_agree_with_each_name_checked():
    """``check_new_names`` (a write batch's slice at once: issue 41) passes
    exactly the slices whose every name :func:`check_new_name` passes
    and that start with no reserved prefix, with the same bytes; and
    ``NameTree.conflicts_many`` gives each name's ``conflict`` (no
    processes)."""
    from hypothesis import given, settings
    from hypothesis import strategies as hst

    from st_py.core.record_names import MAX_NAME, NameTree, check_new_name, check_new_names
    from st_py.errors import BadNameError as Bad

    reserved = (".st-stripe/", ".st-version/")
    piece = hst.sampled_from(
        ["a", "b", ".", "..", "...", ".a", "a.", "", "/", "\x00", "é", "\ud800", " ", "\n", *reserved]
    )
    name = hst.one_of(
        hst.lists(piece, max_size=5).map("".join),
        hst.lists(hst.sampled_from(["a", "bb", "c/d"]), min_size=1, max_size=3).map("/".join),
        hst.just("x" * (MAX_NAME + 1)),
        hst.just("é" * (MAX_NAME // 2)),
        hst.integers(),  # not a str
    )

    def one(n):
        try:
            b = check_new_name(n)
        except Bad:
            return None
        return None if n.startswith(reserved) else b

    @settings(deadline=None, max_examples=400, database=None)
    @given(names=hst.lists(name, max_size=6), tree=hst.lists(name, max_size=6))
    def check(names, tree):
        each = [one(n) for n in names]
        want = None if any(b is None for b in each) else each
        assert check_new_names(names, reserved) == want
        good = [n for n in names if isinstance(n, str)]
        t = NameTree()
        for n in tree:
            if isinstance(n, str):
                t.add(n)
        assert t.conflicts_many(good) == {n: t.conflict(n) for n in good if t.conflict(n) is not None}

    check()


def test_a_set_of_names_in_each_others_way_is_found_at_once():
    """A write job's staged names are checked at once (``Client.commit_staged``:
    every name counted into one tree, then ``conflicts_many``), and the
    one-by-one check (each name against those before it) runs only to name
    the culprit: both find a conflict in exactly the same sets of distinct
    names (no processes)."""
    from hypothesis import given, settings
    from hypothesis import strategies as hst

    from st_py.core.record_names import NameTree

    part = hst.sampled_from(["a", "b", "a.b", "c", "é"])
    name = hst.lists(part, min_size=1, max_size=4).map("/".join)

    @settings(deadline=None, max_examples=400, database=None)
    @given(names=hst.lists(name, max_size=8, unique=True))
    def check(names):
        one, sequential = NameTree(), False
        for n in names:
            if one.conflict(n) is not None:
                sequential = True
                break
            one.add(n)
        whole = NameTree()
        whole.add_many(names)
        assert bool(whole.conflicts_many(names)) == sequential, names

    check()

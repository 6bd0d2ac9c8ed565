"""Every way in through a tracker failover (issue 39's composition cell):
three real etcd members, two trackers on one namespace, three peers; the
leader is SIGKILLed, and once the standby is elected every way in, given
both tracker addresses, reads what was written before and writes more: the
Client (names, get, get_local, as of a snapshot), the CLI, fsspec from
several threads, pandas through fsspec, Dask (read and write), DuckDB's SQL
over the infofiles and its ``records_data``, and an S3 endpoint (a key
PUT before, a multipart upload begun before and completed after). Answers
are the same as before the kill. Writers go on through the kill: a Dask job, a striped object, a
writer holding the lease, and the Ray and Dask writers overwriting a file
(tests/engine_jobs.py; the embedded tracker's restart:
tests/test_engine_writers_restart.py)."""

from __future__ import annotations

import io
import subprocess
import sys
import threading

import pandas as pd
import pytest
from analysis_data import N_PARTS, ROWS, parquet_part, put_parquet_file
from conftest import poll_for

try:
    from test_tracker_etcd import _start_standby

    from st_py.deploy.etcd import EtcdCluster, find_etcd

    find_etcd()
except Exception as e:  # pragma: no cover - CI installs both (./dev setup)
    pytest.skip(f"etcd or aetcd missing: {e}", allow_module_level=True)

TOTAL = N_PARTS * sum(range(ROWS))


@pytest.fixture
def ha(make_cluster, tmp_path, monkeypatch):
    """(cluster, both tracker addresses, client, kill): two trackers on one
    namespace, the log in three etcd members, three peers and a client that
    know both; ``kill()`` SIGKILLs the leader and returns once the standby
    says it was elected."""
    from st_py.client.client import Client

    with EtcdCluster(tmp_path / "etcd", 3) as etcd:
        args = ["--etcd", ",".join(etcd.endpoints), "--cluster-id", "mix", "--init-cluster"]
        cluster = make_cluster(3, tracker_args=args)
        standby, port_b, standby_log = _start_standby(cluster, tmp_path)
        try:
            both = f"{cluster.tracker_addr},127.0.0.1:{port_b}"
            cluster.set_standbys([f"127.0.0.1:{port_b}"])  # the peers announce to whichever answers
            monkeypatch.setenv("STORETORRENT_TRACKER", both)
            client = Client(both)

            def kill() -> None:
                cluster.tracker.kill()
                poll_for(
                    lambda: b"elected leader" in (tmp_path / "standby.log").read_bytes(),
                    timeout=30,
                    what="the standby's election",
                )

            yield cluster, both, client, kill
            client.close()
        finally:
            standby.kill()
            standby.wait()
            standby_log.close()


@pytest.fixture
def failed_over(ha):
    """(cluster, both tracker addresses, client, s3) after the leader's
    SIGKILL and the standby's election; /mix/pq (x2, N_PARTS Parquet
    records) and its snapshot ``before`` (taken with one more record)
    written before, and through an S3 endpoint given both addresses (in
    this process): key ``run/before.csv`` of bucket ``mixs3`` and the first
    part of a multipart upload of ``run/big.bin``. ``s3``: ``(boto3
    client, upload id, the first part's bytes and ETag)``."""
    from test_s3 import Endpoint

    cluster, both, client, kill = ha
    put_parquet_file(client, "/mix/pq")
    with client.open("/mix/pq") as f:
        f.put("extra.bin", b"gone after the snapshot")
    client.snapshot("/mix/pq", "before")
    with client.open("/mix/pq") as f:
        f.delete("extra.bin")
    ep = Endpoint(both, None)  # development mode: any access key
    s3 = ep.client("dev", "anything")
    s3.create_bucket(Bucket="mixs3")
    s3.put_object(Bucket="mixs3", Key="run/before.csv", Body=b"x,y\n1,2\n")
    upload = s3.create_multipart_upload(Bucket="mixs3", Key="run/big.bin")["UploadId"]
    part1 = bytes(range(256)) * (5 * 4096)  # 5 MiB: S3's smallest part but the last
    etag1 = s3.upload_part(Bucket="mixs3", Key="run/big.bin", UploadId=upload, PartNumber=1, Body=part1)["ETag"]
    kill()
    yield cluster, both, client, (s3, upload, part1, etag1)
    ep.stop()


def test_every_way_in_reads_and_writes_after_the_leader_is_killed(failed_over):
    cluster, both, client, (s3, upload, part1, etag1) = failed_over
    from st_integrations.dask_reader import read_storetorrent
    from st_integrations.dask_writer import to_storetorrent
    from st_integrations.duckdb_sql import sql
    from st_integrations.fsspec_fs import StoreTorrentFileSystem

    names = [f"part-{i:03d}.parquet" for i in range(N_PARTS)]
    # the Client: names, get, get_local, and as of the snapshot taken before the kill
    with client.open("/mix/pq") as f:
        assert sorted(f.names()) == names
        assert pd.read_parquet(io.BytesIO(f.get(names[1])))["x"].tolist() == parquet_part(1)["x"].to_pylist()
        assert sorted(r.name for r in f.get_local()) == names
    with client.open("/mix/pq", as_of="before") as f:
        assert sorted(f.names()) == sorted([*names, "extra.bin"]) and f.get("extra.bin") == b"gone after the snapshot"
    # the CLI, given both addresses
    out = subprocess.run(
        [sys.executable, "-m", "st_py.cli", "ls", "-r", "/mix/pq", "--as-of", "before", "--tracker", both],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and all(n in out.stdout for n in [*names, "extra.bin"]), out.stdout + out.stderr
    # fsspec from several threads, and pandas through it
    fs = StoreTorrentFileSystem(tracker=both)
    got: dict[str, bytes] = {}
    errors: list[BaseException] = []

    def cat(n: str) -> None:
        try:
            got[n] = fs.cat_file(f"/mix/pq/{n}")
        except BaseException as e:  # noqa: BLE001 - every error is a failure of the test
            errors.append(e)

    threads = [threading.Thread(target=cat, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    with client.open("/mix/pq") as f:
        assert all(got[n] == f.get(n) for n in names)
    df = pd.read_parquet(f"storetorrent:///mix/pq/{names[2]}")  # the tracker from $STORETORRENT_TRACKER
    assert df["x"].tolist() == parquet_part(2)["x"].to_pylist()
    # Dask reads, and writes a new file through the new leader
    ddf = read_storetorrent("/mix/pq", tracker=both)
    assert len(ddf) == N_PARTS * ROWS and int(ddf["row"].sum().compute()) == TOTAL
    to_storetorrent(ddf, "/mix/copy", tracker=both)
    assert int(read_storetorrent("/mix/copy", tracker=both)["row"].sum().compute()) == TOTAL
    # DuckDB: SQL over the infofiles and over the records' contents
    rows = sql(client, ["/mix/pq"], "SELECT count(*) AS n FROM records").to_pylist()
    assert rows == [{"n": N_PARTS}]
    rows = sql(client, ["/mix/pq"], "SELECT count(*) AS n, sum(row) AS s FROM records_data").to_pylist()
    assert rows == [{"n": N_PARTS * ROWS, "s": TOTAL}]
    # fsspec writes through the new leader, read back by another way in
    fs.pipe({f"/mix/new/r{i}": f"after {i}".encode() for i in range(20)})
    with client.open("/mix/new") as f:
        assert sorted(f.names()) == sorted(f"r{i}" for i in range(20)) and f.get("r7") == b"after 7"
    # S3, its endpoint given both addresses: a key PUT before, a multipart upload begun before and
    # completed after, a PUT after; listed, and read by the client and fsspec
    assert s3.get_object(Bucket="mixs3", Key="run/before.csv")["Body"].read() == b"x,y\n1,2\n"
    part2 = b"the last part"
    etag2 = s3.upload_part(Bucket="mixs3", Key="run/big.bin", UploadId=upload, PartNumber=2, Body=part2)["ETag"]
    parts = [{"PartNumber": 1, "ETag": etag1}, {"PartNumber": 2, "ETag": etag2}]
    s3.complete_multipart_upload(Bucket="mixs3", Key="run/big.bin", UploadId=upload, MultipartUpload={"Parts": parts})
    s3.put_object(Bucket="mixs3", Key="run/after.csv", Body=b"x,y\n3,4\n")
    listed = s3.list_objects_v2(Bucket="mixs3", Prefix="run/")["Contents"]
    assert [o["Key"] for o in listed] == ["run/after.csv", "run/before.csv", "run/big.bin"]
    assert s3.get_object(Bucket="mixs3", Key="run/big.bin")["Body"].read() == part1 + part2
    assert s3.list_multipart_uploads(Bucket="mixs3").get("Uploads", []) == []
    with client.open("/mixs3/run") as f:
        assert f.names() == ["after.csv", "before.csv", "big.bin"] and f.get("big.bin") == part1 + part2
    assert fs.cat_file("/mixs3/run/after.csv") == b"x,y\n3,4\n"


def test_writers_go_on_through_the_leaders_kill(ha):
    """The leader is SIGKILLed while a Dask job writes a file (one record per
    partition, committed at the end), a striped object is being stored, and
    a writer holding the file's lease puts, replaces and deletes: each
    finishes without an error, and everything acknowledged reads back."""
    import dask.dataframe as dd

    from st_integrations.dask_reader import read_storetorrent
    from st_integrations.dask_writer import to_storetorrent

    cluster, both, client, kill = ha
    frame = pd.DataFrame({"row": range(40_000), "part": [i // 1000 for i in range(40_000)]})
    big = bytes(range(256)) * (24 * 1024 * 1024 // 256)  # 24 MiB in stripes of 1 MiB
    errors: list[BaseException] = []
    started = threading.Event()

    def dask_job() -> None:
        try:
            started.set()
            to_storetorrent(dd.from_pandas(frame, npartitions=40), "/mix/dask", tracker=both)
        except BaseException as e:  # noqa: BLE001 - every error is a failure of the test
            errors.append(e)

    def striped() -> None:
        try:
            with client.create("/mix/obj", replication="x2") as f:
                f.put_object("big.bin", big, stripe_size=1024 * 1024)
        except BaseException as e:  # noqa: BLE001 - every error is a failure of the test
            errors.append(e)

    with client.create("/mix/leased", replication="x2") as g:
        g.put("doc", b"v0")
        g.put("old", b"old")
    g = client.open("/mix/leased")
    g.put("doc", b"v1", replace=True)  # takes the writer lease
    jobs = [threading.Thread(target=dask_job), threading.Thread(target=striped)]
    for t in jobs:
        t.start()
    started.wait(30)
    g.queue_put("a1", b"a1")
    running = [t.is_alive() for t in jobs]
    kill()
    assert any(running), "both jobs ended before the kill: make them longer"
    g.put("doc", b"v2", replace=True)
    g.delete("old")
    g.queue_put("a2", b"a2")
    g.close()
    for t in jobs:
        t.join(300)
    assert not errors, "\n".join(f"{type(e).__name__}: {e}" for e in errors)
    with client.open("/mix/leased") as f:
        assert sorted(f.names()) == ["a1", "a2", "doc"] and f.get("doc") == b"v2"
    with client.open("/mix/obj") as f:
        obj = f.object_meta("big.bin")
        assert obj is not None and f.get_object(obj) == big
    back = read_storetorrent("/mix/dask", tracker=both).compute()
    assert sorted(back["row"]) == list(range(40_000))


@pytest.mark.timeout(600)
def test_the_ray_and_dask_writers_overwrite_through_the_leaders_kill(ha, local_ray, tmp_path):
    """Issue 39: the Ray and Dask writers, each overwriting a file that holds
    an earlier job's record (mode overwrite, the writers' replacement), run
    while the leader is SIGKILLed: the Dask job's tasks (started first) all
    wait for the kill, and the Ray job's driver kills the leader as it
    starts to commit. Both jobs finish; every row each wrote reads back once
    through the Client and both readers, the old record gone
    (tests/engine_jobs.py)."""
    from engine_jobs import check_overwritten, dask_job, kill_once, ray_job, recover_when_killed, waiting_tasks
    from engine_jobs import write_old as write_earlier_job

    cluster, both, client, kill = ha
    old = {w: write_earlier_job(client, f"/mix/ow-{w}") for w in ("dask", "ray")}
    killed, dask_started, pid = tmp_path / "killed", tmp_path / "dask-started", cluster.tracker.proc.pid
    errors: list[BaseException] = []
    recovering = recover_when_killed(killed, kill, errors)  # kill(): reaped, and the standby elected
    outcomes: dict[str, object] = {}

    def dask_writer() -> None:
        try:
            outcomes["dask"] = dask_job("/mix/ow-dask", both, waiting_tasks(dask_started, killed))
        except Exception as e:  # noqa: BLE001 - held to the rule below
            outcomes["dask"] = e

    dask_thread = threading.Thread(target=dask_writer)
    dask_thread.start()
    poll_for(dask_started.exists, timeout=120, what="the Dask job's first task")
    try:
        outcomes["ray"] = ray_job("/mix/ow-ray", both, at_commit=lambda: kill_once(pid, killed))
    except Exception as e:  # noqa: BLE001 - held to the rule below
        outcomes["ray"] = e
    dask_thread.join(300)
    recovering.join(120)
    assert killed.exists() and not dask_thread.is_alive() and not recovering.is_alive() and not errors, errors
    for w in ("dask", "ray"):
        check_overwritten(client, both, f"/mix/ow-{w}", outcomes[w], old[w])
    failed = {w: o for w, o in outcomes.items() if isinstance(o, BaseException)}
    assert not failed, f"the leader's failover failed the jobs: {failed!r}"

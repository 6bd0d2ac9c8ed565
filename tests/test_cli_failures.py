"""The command line with features together, against real processes: a
large file stored by ``put`` is striped and reads back; no failed record is
ever reported as stored; resume works through filters; options fixed at
creation are refused, never ignored; names are data, never markup."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import run_cli

from st_py.client.striping import STRIPE_THRESHOLD
from st_py.errors import RecordTooLargeError


def test_put_of_a_file_over_the_record_limit_stores_an_object(cluster, tmp_path):
    big = tmp_path / "big.bin"
    body = os.urandom(1 << 20) * 65 + b"tail"  # 65 MiB + 4 bytes: over the 64 MiB record limit
    big.write_bytes(body)
    small = tmp_path / "small.txt"
    small.write_bytes(b"small")
    r = run_cli(cluster, "put", "/big/one", str(big), str(small))
    assert r.returncode == 0, r.stderr
    assert "stored 2 records" in r.stdout
    out = tmp_path / "back.bin"
    assert run_cli(cluster, "get", "/big/one", "big.bin", "-o", str(out)).returncode == 0
    assert out.read_bytes() == body
    listing = json.loads(run_cli(cluster, "ls", "/big", "--format", "json", check=True).stdout)
    assert [(e["name"], e["records"]) for e in listing] == [("/big/one", 2)]  # names, not stripe pieces
    rows = json.loads(run_cli(cluster, "ls", "-r", "/big/one", "--format", "json", check=True).stdout)
    assert [(r["name"], r["kind"], r["size"]) for r in rows] == [
        ("big.bin", "object", len(body)),
        ("small.txt", "record", 5),
    ]
    assert run_cli(cluster, "ls", "-r", "/big/one", check=True).stdout.split() == ["big.bin", "small.txt"]
    with cluster.client().open("/big/one") as f:
        assert len(f) == 2 and f.names() == ["big.bin", "small.txt"]
        # the library refuses, with its facts, what a peer could not take as one record
        with pytest.raises(RecordTooLargeError) as e:
            f.queue_put("too-big", body)
        assert (e.value.name, e.value.size, e.value.limit) == ("too-big", len(body), STRIPE_THRESHOLD)
    # resume skips the object by its original size and CRC-32C
    r = run_cli(cluster, "put", "/big/one", str(big), str(small), "--skip-existing")
    assert r.returncode == 0 and "2 already there" in r.stdout, r.stderr


# Ray waits a fixed 30 s (ray/_private/node.py, not configurable) for its raylet to register when
# read_storetorrent starts it here; twice this session a loaded 2-core CI machine missed that window
# ("The current node timed out during startup"). Ray's start is not the point of the test: its rows are.
@pytest.mark.flaky(reruns=2, reruns_delay=5)
def test_a_large_csv_put_with_the_cli_gives_the_same_rows_everywhere(cluster, tmp_path, monkeypatch):
    """The issue's new user: a CSV over the record limit stored by the CLI
    reads as the same rows from pandas, Ray, Dask and DuckDB."""
    import pandas as pd

    from st_integrations.dask_reader import read_storetorrent as dask_read
    from st_integrations.duckdb_sql import sql
    from st_integrations.ray_reader import read_storetorrent as ray_read

    monkeypatch.setenv("STORETORRENT_TRACKER", cluster.tracker_addr)
    n = 6_400_000  # ~ 70 MiB of CSV: one striped object
    csv = tmp_path / "big.csv"
    pd.DataFrame({"i": range(n), "k": [j % 97 for j in range(n)]}).to_csv(csv, index=False)
    assert csv.stat().st_size > STRIPE_THRESHOLD
    assert run_cli(cluster, "put", "/big/csv", str(csv)).returncode == 0
    want = (n, sum(range(n)), sum(j % 97 for j in range(n)))

    def facts(df) -> tuple:
        return (len(df), int(df["i"].sum()), int(df["k"].sum()))

    assert facts(pd.read_csv(f"storetorrent://{cluster.tracker_addr}/big/csv/big.csv")) == want
    ds = ray_read("/big/csv")
    assert (ds.count(), int(ds.sum("i")), int(ds.sum("k"))) == want
    assert facts(dask_read("/big/csv").compute()) == want
    t = sql(cluster.client(), ["/big/csv"], "SELECT count(*) AS n, sum(i) AS i, sum(k) AS k FROM records_data")
    assert tuple(int(t[c][0].as_py()) for c in ("n", "i", "k")) == want


def test_put_names_every_record_that_failed(make_cluster, tmp_path):
    cluster = make_cluster(2)
    src = tmp_path / "shots"
    src.mkdir()
    (src / "first.bin").write_bytes(b"1" * 100)
    assert run_cli(cluster, "put", "/fail/a", str(src), "--replication", "x2").returncode == 0
    for i in range(3):
        (src / f"{i}.bin").write_bytes(bytes([i]) * 100)
    cluster.kill_peer(1)  # class x2 on one live peer: no record can be stored
    r = run_cli(cluster, "put", "/fail/a", *(str(src / f"{i}.bin") for i in range(3)))
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "stored 0 records" in r.stdout
    for i in range(3):
        assert f"failed: {i}.bin" in r.stderr
    assert "3 of 3 records of /fail/a were not stored" in r.stderr
    # and the records are not there
    assert run_cli(cluster, "ls", "-r", "/fail/a", check=True).stdout.split() == ["shots/first.bin"]


def test_get_r_names_every_record_it_could_not_fetch(make_cluster, tmp_path):
    cluster = make_cluster(2)
    c = cluster.client()
    with c.create("/fail/x1", replication="x1", blocksize=1) as f:
        # both peers must hold records (random placement, or a peer that
        # missed an announce under load, can put the first 8 on one)
        for i in range(64):
            f.put(f"r{i}", bytes([i]) * 10)
            if i >= 7 and len({f.record_meta(n).peers[0] for n in f.names()}) == 2:
                break
    with c.open("/fail/x1") as f:
        holders = {n: f.peers[f.record_meta(n).peers[0]].addr for n in f.names()}
    assert len(set(holders.values())) == 2, holders
    victim = holders["r0"]
    cluster.kill_peer(cluster.peer_addrs.index(victim))
    lost = sorted(n for n, a in holders.items() if a == victim)
    r = run_cli(cluster, "get", "/fail/x1", "-r", "-o", str(tmp_path / "out"))
    assert r.returncode == 1
    assert f"fetched {len(holders) - len(lost)} records" in r.stdout
    for n in lost:
        assert f"failed: {n}:" in r.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(set(holders) - set(lost))


@pytest.mark.parametrize("filters", [["zstd"], ["aes-256-gcm"], ["zstd", "aes-256-gcm"]])
def test_skip_existing_compares_original_bytes_through_filters(cluster, tmp_path, filters):
    key = tmp_path / "key"
    key.write_bytes(os.urandom(32))
    env = {"STORETORRENT_KEY_FILE": str(key)}
    src = tmp_path / "d"
    src.mkdir()
    for i in range(4):
        (src / f"{i}.csv").write_text("a,b\n" + f"{i},x\n" * 200)
    args = [a for f in filters for a in ("--filter", f)]
    r = run_cli(cluster, "put", "/filt/a", str(src), *args, env=env)
    assert r.returncode == 0, r.stderr
    r = run_cli(cluster, "put", "/filt/a", str(src), "--skip-existing", env=env)
    assert r.returncode == 0, r.stderr
    assert "stored 0 records" in r.stdout and "4 already there" in r.stdout
    (src / "2.csv").write_text("changed")
    r = run_cli(cluster, "put", "/filt/a", str(src), "--skip-existing", env=env)
    assert r.returncode == 1 and "d/2.csv" in r.stderr and "other bytes" in r.stderr


def test_options_fixed_at_creation_are_refused_not_ignored(cluster, tmp_path):
    one = tmp_path / "one.txt"
    one.write_text("one")
    assert run_cli(cluster, "put", "/fixed/a", str(one)).returncode == 0
    two = tmp_path / "two.txt"
    two.write_text("two")
    for opt, value, have in (
        ("--filter", "zstd", "none"),
        ("--protocol", "chain", "client-sync"),
        ("--placement", "hash", "random"),
        ("--replication", "x3", "x2"),
    ):
        r = run_cli(cluster, "put", "/fixed/a", str(two), opt, value)
        assert r.returncode == 2, (opt, r.stdout)
        assert f"{opt} {value} (the file has {have})" in r.stderr
    # the same values as the file's are fine, and so is leaving them out
    assert run_cli(cluster, "put", "/fixed/a", str(two), "--protocol", "client-sync").returncode == 0
    with cluster.client().open("/fixed/a") as f:
        assert f.names() == ["one.txt", "two.txt"] and f.filter_names == ()


def test_names_are_data_not_markup(cluster, tmp_path):
    src = tmp_path / "s"
    src.mkdir()
    (src / "run[bold]2").write_text("bold")
    (src / "data[s, tz=UTC].csv").write_text("a\n1\n")
    r = run_cli(
        cluster, "put", "/mk/run[bold]2", str(src / "run[bold]2"), str(src / "data[s, tz=UTC].csv"), "--prefix", "[/]"
    )
    assert r.returncode == 0, r.stderr
    assert run_cli(cluster, "ls", "-r", "/mk/run[bold]2", check=True).stdout.split() == [
        "[/]data[s,",
        "tz=UTC].csv",
        "[/]run[bold]2",
    ]
    assert "/mk/run[bold]2" in run_cli(cluster, "ls", "/mk", check=True).stdout
    out = tmp_path / "o.csv"
    r = run_cli(cluster, "get", "/mk/run[bold]2", "[/]data[s, tz=UTC].csv", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert out.read_text() == "a\n1\n"
    r = run_cli(cluster, "get", "/mk/run[bold]2", "[red]missing")
    assert r.returncode == 2 and "[red]missing" in r.stderr and "Traceback" not in r.stderr
    r = run_cli(cluster, "rm", "/mk/run[bold]2", "[/]run[bold]2")
    assert r.returncode == 0 and "deleted record [/]run[bold]2 of /mk/run[bold]2" in r.stdout


def test_errors_show_full_arrow_types(cluster, tmp_path):
    with cluster.client().create("/mk/ts", replication="x1") as f:
        for name, typ in (("a.parquet", pa.timestamp("ms", tz="UTC")), ("b.parquet", pa.timestamp("ms"))):
            sink = pa.BufferOutputStream()
            pq.write_table(pa.table({"t": pa.array([0, 1], typ)}), sink)
            f.put(name, sink.getvalue().to_pybytes())
    r = run_cli(cluster, "sql", "SELECT count(*) FROM records_data", "--file", "/mk/ts")
    assert r.returncode != 0
    assert "timestamp[ms, tz=UTC] in the first and timestamp[ms] in the second" in r.stderr


def test_put_over_quota_names_every_refused_record(make_cluster, tmp_path):
    """A user's quota refuses the commit of a CLI put: the exit status is 1,
    every refused record is named, and the summary counts only what was
    committed (the quota is checked per commit group, so a group over it is
    refused whole)."""
    from st_py.tracker.access import add_user

    users = tmp_path / "users.toml"
    key = add_user(users, "alice", ["physics"], quota_bytes=1_000_000)
    cluster = make_cluster(2, users_file=users)
    env = {"STORETORRENT_API_KEY": key}
    first = tmp_path / "first.bin"
    first.write_bytes(b"f" * 1000)
    assert run_cli(cluster, "put", "/alice/q", str(first), "--replication", "x2", env=env).returncode == 0
    src = tmp_path / "shots"
    src.mkdir()
    for i in range(8):
        (src / f"{i}.bin").write_bytes(bytes([i]) * 200_000)  # 400 kB with both copies each
    r = run_cli(cluster, "put", "/alice/q", str(src), env=env)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "quota" in r.stderr and "Traceback" not in r.stderr
    failed = sorted(line.split("failed: ", 1)[1].split(":")[0] for line in r.stderr.splitlines() if "failed: " in line)
    with cluster.client(api_key=key).open("/alice/q") as f:
        stored = [n for n in f.names() if n != "first.bin"]
    assert len(stored) <= 2 and len(failed) >= 6  # at most 2 x 400 kB fit in 1 MB
    assert sorted(stored + failed) == sorted(f"shots/{i}.bin" for i in range(8))
    assert f"stored {len(stored)} records" in r.stdout

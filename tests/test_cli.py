"""The storetorrent command line against a cluster it starts itself."""

import json
import signal
import subprocess
import sys

from conftest import poll_for
from helpers import children_of, pid_alive, run_cli, st

from st_py.deploy.cluster import read_cluster_file


def test_up_put_get_ls_sql_status_and_ctrl_c(tmp_path, peer_bin):
    data = tmp_path / "st-data"
    up = subprocess.Popen(
        [sys.executable, "-m", "st_py.cli", "up", "--data", str(data), "--peers", "3", "--announce-interval", "0.3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        info = poll_for(lambda: read_cluster_file(data), timeout=60, what="storetorrent up to start")
        n = 4 + bool(info.get("s3"))  # the tracker, 3 peers and the S3 endpoint (when the s3 extra is installed)
        daemons = poll_for(lambda: len(children_of(up.pid)) == n and children_of(up.pid), what=f"{n} daemons")
        src = tmp_path / "shots"
        src.mkdir()
        for i in range(5):
            (src / f"{i}.bin").write_bytes(bytes([i]) * 1000)
        r = st("put", "/exp/run1", str(src), data=data)
        assert "stored 5 records" in r.stdout
        out = tmp_path / "out.bin"
        st("get", "/exp/run1", "shots/3.bin", "-o", str(out), data=data)
        assert out.read_bytes() == bytes([3]) * 1000
        assert "/exp/run1" in st("ls", "/exp", data=data).stdout
        assert st("ls", "-r", "/exp/run1", data=data).stdout.split() == [f"shots/{i}.bin" for i in range(5)]
        # a path inside a file (st_py.client.namespace_paths.lookup): its records at or below it
        assert st("ls", "/exp/run1/shots", data=data).stdout.split() == [f"shots/{i}.bin" for i in range(5)]
        assert st("ls", "/exp/run1/shots/3.bin", data=data).stdout.split() == ["shots/3.bin"]
        r = st(
            "sql",
            "SELECT count(*) AS n, sum(size) AS b FROM records",
            "--file",
            "/exp/run1",
            "--format",
            "json",
            data=data,
        )
        assert json.loads(r.stdout) == [{"n": 5, "b": 5000}]
        r = st("sql", "SELECT count(*) AS n FROM records", "--file", "/exp/run1", "--format", "csv", data=data)
        assert r.stdout.split() == ["n", "5"]
        r = st("status", data=data)
        assert "3 peers in service, 0 failed" in r.stdout
        assert "durability, 3 peers failing once in 5 years each" in " ".join(r.stdout.split())
        status = json.loads(st("status", "--format", "json", data=data).stdout)
        assert status["alive_peers"] == 3 and all(isinstance(p["free_bytes"], int) for p in status["peers"])
        # the expected durability of each class (CEFT's model, from the cluster's repair speed)
        dur = {d["replication"]: d for d in status["durability"]}
        assert sorted(dur) == ["x1", "x2", "x3"] and not dur["x2"]["repair_measured"]
        assert dur["x1"]["mttdl_years"] < dur["x2"]["mttdl_years"] < dur["x3"]["mttdl_years"]
        entries = json.loads(st("ls", "/exp", "--format", "json", data=data).stdout)
        assert entries == [
            {
                "mode": "-rw-r--r--",
                "owner": entries[0]["owner"],
                "group": entries[0]["group"],
                "name": "/exp/run1",
                "type": "file",
                "class": "x2",
                "records": 5,
                "bytes": 5000,  # the user's bytes (docs/infofile.md, "Sizes")
                "stored_bytes": 5000,  # one copy as stored: the same without filters
            }
        ]
        assert "KiB" in st("ls", "/exp", data=data).stdout  # sizes for people in the table
        records = json.loads(st("ls", "-r", "/exp/run1", "--format", "json", data=data).stdout)
        assert [(r["name"], r["size"]) for r in records] == [(f"shots/{i}.bin", 1000) for i in range(5)]
        # user errors: one line on stderr, status 2, no traceback
        for args, says in (
            (("get", "/exp/run1", "nope"), "no committed record 'nope'"),
            (("sql", "SELEC 1", "--file", "/exp/run1"), "error: SQL:"),
            (
                ("get", "/exp/run1", "shots/3.bin", "-o", str(tmp_path / "no" / "dir" / "x")),
                "No such file or directory",
            ),
            (("ls", "/nope"), "error:"),
        ):
            r = st(*args, data=data, check=False)
            assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
        st("rm", "/exp/run1", data=data)
        assert "/exp/run1" not in st("ls", "/exp", data=data).stdout
    finally:
        up.send_signal(signal.SIGINT)
        up.wait(30)
        up.stdout.close()
    assert up.returncode == 0
    poll_for(lambda: not [p for p in daemons if pid_alive(p)], timeout=5, what="the daemons to exit")


def test_up_killed_leaves_no_orphans(tmp_path, peer_bin):
    data = tmp_path / "st-data"
    up = subprocess.Popen(
        [sys.executable, "-m", "st_py.cli", "up", "--data", str(data), "--peers", "2"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    info = poll_for(lambda: read_cluster_file(data), timeout=60, what="storetorrent up to start")
    n = 3 + bool(info.get("s3"))  # the tracker, 2 peers and the S3 endpoint (when the s3 extra is installed)
    daemons = poll_for(lambda: len(children_of(up.pid)) == n and children_of(up.pid), what=f"{n} daemons")
    up.kill()
    up.wait()
    poll_for(lambda: not any(pid_alive(p) for p in daemons), timeout=10, what="daemons to die with `up`")


def test_put_resumes_get_r_and_rm_r(cluster, tmp_path):
    src = tmp_path / "shots"
    src.mkdir()
    for i in range(6):
        (src / f"{i}.bin").write_bytes(bytes([i]) * 500)
    run_cli(cluster, "put", "/cli/a", str(src / "0.bin"), str(src / "1.bin"), check=True)
    # an interrupted upload resumes: the two already there are skipped
    r = run_cli(cluster, "put", "/cli/a", str(src), "--skip-existing", "--prefix", "", check=True)
    assert "stored 6 records" in r.stdout  # names differ (shots/...), so all six are new
    r = run_cli(cluster, "put", "/cli/a", str(src), "--skip-existing", check=True)
    assert "stored 0 records" in r.stdout and "6 already there" in r.stdout
    (src / "2.bin").write_bytes(b"changed")
    r = run_cli(cluster, "put", "/cli/a", str(src), "--skip-existing", check=False)
    assert r.returncode == 1 and "shots/2.bin" in r.stderr and "other bytes" in r.stderr
    # --replace stores the changed file as a new version (docs/replication.md, "Versioned records")
    r = run_cli(cluster, "put", "/cli/a", str(src / "2.bin"), "--prefix", "shots/", "--replace", check=True)
    assert "stored 1 records" in r.stdout
    # a class that does not match the existing file is an error
    r = run_cli(cluster, "put", "/cli/a", str(src / "0.bin"), "--replication", "x3", check=False)
    assert r.returncode == 2 and "the file has x2" in r.stderr
    # get -r: a prefix into a folder
    out = tmp_path / "out"
    r = run_cli(cluster, "get", "/cli/a", "shots/", "-r", "-o", str(out), check=True)
    assert "fetched 6 records" in r.stdout
    assert sorted(p.name for p in (out / "shots").iterdir()) == [f"{i}.bin" for i in range(6)]
    assert (out / "shots" / "4.bin").read_bytes() == bytes([4]) * 500
    assert (out / "shots" / "2.bin").read_bytes() == b"changed"
    # get -o into an existing folder writes inside it, as cp does
    r = run_cli(cluster, "get", "/cli/a", "shots/4.bin", "-o", str(out), check=True)
    assert (out / "4.bin").read_bytes() == bytes([4]) * 500
    # a path inside a file names its record, for get, get -r and rm (as fsspec and S3 resolve it)
    r = run_cli(cluster, "get", "/cli/a/shots/5.bin", "-o", str(tmp_path / "five.bin"), check=True)
    assert (tmp_path / "five.bin").read_bytes() == bytes([5]) * 500
    r = run_cli(cluster, "get", "/cli/a/shots", "-r", "-o", str(tmp_path / "again"), check=True)
    assert "fetched 6 records" in r.stdout and (tmp_path / "again" / "shots" / "2.bin").read_bytes() == b"changed"
    run_cli(cluster, "put", "/cli/a", str(src / "0.bin"), "--prefix", "gone/", check=True)
    r = run_cli(cluster, "rm", "/cli/a/gone/0.bin", check=True)
    assert "deleted record gone/0.bin of /cli/a" in r.stdout
    assert "gone/0.bin" not in run_cli(cluster, "ls", "-r", "/cli/a", check=True).stdout.split()
    assert run_cli(cluster, "rm", "/cli/a/gone/0.bin", check=False).returncode != 0  # gone: an error
    # a prefix that makes names get -r cannot write back (or fsspec list) is refused, nothing stored
    for bad in ("../", "/abs/", "a//b/", "./"):
        r = run_cli(cluster, "put", "/cli/a", str(src / "0.bin"), "--prefix", bad, check=False)
        assert r.returncode == 2 and "--prefix" in r.stderr, (bad, r.stderr)
    assert "../0.bin" not in run_cli(cluster, "ls", "-r", "/cli/a", check=True).stdout
    # rm -r: every file below a directory, then the directories
    run_cli(cluster, "put", "/cli/sub/b", str(src / "0.bin"), check=True)
    r = run_cli(cluster, "rm", "-r", "/cli", check=True)
    assert "deleted /cli/a" in r.stdout and "deleted /cli/sub/b" in r.stdout
    assert "removed directory /cli/sub" in r.stdout and "removed directory /cli\n" in r.stdout
    assert json.loads(run_cli(cluster, "ls", "/", "--format", "json", check=True).stdout) == []


def test_a_table_too_wide_for_the_terminal_is_shown_a_field_per_line(monkeypatch, capsys):
    """repair, recover and status print many columns: on an 80-column terminal
    a folded table is unreadable, so each row becomes a block of field lines
    (psql's expanded display); a table that fits stays a table."""
    from rich.console import Console

    from st_py.cli import render as cli

    monkeypatch.setattr(cli, "console", Console(width=80, force_terminal=True, color_system=None))
    row = {
        "file": "/nycflights/flights-2013-by-month",
        "pending_found": 1234,
        "pending_stored": 1200,
        "lost_peers": "127.0.0.1:40159",
        "copies_restored": 12345,
        "under_replicated": 3,
        "conflicts": 0,
        "shared_domain": 0,
        "seconds": 1.2,
    }
    cli.emit([row, row], "table", title="repair")
    lines = capsys.readouterr().out.splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert lines[0] == "repair" and lines[1] == "-[ 1 of 2 ]-"
    assert lines[2].split() == ["file", "/nycflights/flights-2013-by-month"]
    assert [line.split()[0] for line in lines[2:11]] == list(row)
    assert lines[3].split() == ["pending_found", "1,234"]
    cli.emit([{"name": "a", "size": 3}], "table")
    assert capsys.readouterr().out.split() == ["name", "size", "a", "3"]


def test_ls_lists_a_directory_once_and_resolves_paths_inside_files(cluster, monkeypatch):
    """``storetorrent ls`` of a directory asks the tracker for one List
    (with sizes: the one shown), not a names-only one to resolve the path
    and then this one; a file is shown from its one List too; a path
    inside a file still lists its records below it, and a file's records
    are never summed for sizes they do not show."""
    from click.testing import CliRunner

    from st_py.cli.app import cli
    from st_py.wire.tracker_client import TrackerClient

    with cluster.client() as c, c.create("/lsd/run1", "x2") as f:
        for i in range(3):
            f.put(f"shots/{i}.bin", bytes([i]) * 10)
    calls: list[tuple[str, bool]] = []
    real = TrackerClient.list

    def counted(self, path, *a, **kw):
        calls.append((path, bool(kw.get("counts_only") or kw.get("names_only"))))
        return real(self, path, *a, **kw)

    monkeypatch.setattr(TrackerClient, "list", counted)

    def ls(*args: str) -> str:
        calls.clear()
        r = CliRunner().invoke(cli, ["ls", *args, "--tracker", cluster.tracker_addr], catch_exceptions=False)
        assert r.exit_code == 0, r.output
        return r.output

    out = ls("/lsd", "--format", "json")
    assert json.loads(out)[0]["name"] == "/lsd/run1" and json.loads(out)[0]["bytes"] == 30
    assert calls == [("/lsd", False)]  # one List, with sizes
    assert json.loads(ls("/lsd/run1", "--format", "json"))[0]["records"] == 3
    assert calls == [("/lsd/run1", False)]
    assert ls("/lsd/run1/shots").split() == [f"shots/{i}.bin" for i in range(3)]
    assert all(light for p, light in calls if p == "/lsd/run1")  # resolved without summing its records
    assert ls("-r", "/lsd/run1").split() == [f"shots/{i}.bin" for i in range(3)]
    assert calls == [("/lsd/run1", True)]

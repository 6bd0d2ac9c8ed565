"""Hosts that share no folder (issue 40's first tests): each peer is a host
of its own, in a network namespace of its own and a mount namespace in
which the namespace root, the trackers' state, the logs and the other
hosts' folders are empty tmpfs (``LocalCluster(private_hosts=True)``);
a client process on each host (an agent below) sees only its peer's data
folder and its own cache. Every way in gives the answers the shared mount
gives on the tracker's machine: names, get, as_of a snapshot, DuckDB over
the local copy, GET_LOCAL (each record revealed once across the hosts),
the CLI, fsspec and pandas; with a peer killed; and a record a writer on
host A commits is read on host B at once. Dask's reader and writer with a
worker on each host, the S3 endpoint on a host, and repair, drain and
spread run on hosts give the shared mount's answers too; ``recover
--from-peers`` on a host rebuilds a lost namespace (a cluster of its own).
Ray's reader and writer with a node on each host run in the soak
(``./dev soak --ray-hosts``): too slow for the suite."""

from __future__ import annotations

import hashlib
import io
import json
import os
import select
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from test_metadata_fetch import answers

from st_py.deploy import netns

FILE = "/hosts/a"
TESTS = str(Path(__file__).resolve().parent)

# A client process on one host: runs the Python it is sent (a JSON string a
# line) with `addr` (every tracker, as this host reaches them) and `cache`
# (this host's copies) set, and answers {"result": <its `result`>} or
# {"error": ...} a line. Library output goes to stderr, not the answers.
AGENT = textwrap.dedent(
    """
    import json, logging, os, sys
    sys.path.insert(0, sys.argv[1])
    logging.basicConfig(level=logging.INFO)
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    env = {"addr": sys.argv[2], "cache": sys.argv[3]}
    for line in sys.stdin:
        env.pop("result", None)
        try:
            exec(json.loads(line), env)
            answer = {"result": env.get("result")}
        except BaseException as e:
            answer = {"error": f"{type(e).__name__}: {e}"}
        out.write(json.dumps(answer) + "\\n")
        out.flush()
    """
)

SETUP = """
import hashlib
from st_py.client.client import Client
from test_metadata_fetch import answers
c = Client(addr, metadata_cache=cache)  # metadata="auto", the default
"""


def _no_etcd() -> str | None:
    """None if replicated trackers can run here (etcd and aetcd), else why not."""
    try:
        import aetcd  # noqa: F401 - the [ha] extra

        from st_py.deploy.etcd import find_etcd

        find_etcd()
    except Exception as e:  # pragma: no cover - CI installs both (./dev setup)
        return f"etcd or aetcd missing: {e}"
    return None


def _why_not() -> str | None:
    if why := netns.available():
        return why
    if shutil.which("unshare") is None:
        return "the unshare tool (util-linux) is missing"
    return None


def host_env(cluster, i: int) -> dict[str, str]:
    """The environment of a process on host ``i``: none of this process's
    STORETORRENT_ settings, the host's cache folder for infofile copies."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STORETORRENT_")}
    env["STORETORRENT_METADATA_CACHE"] = str(cluster.host_dir(i) / "cache")  # the CLI's and fsspec's too
    return env


def host_command(cluster, i: int, *args: str) -> subprocess.CompletedProcess:
    """``storetorrent ARGS --tracker ADDR`` run on host ``i`` (ADDR: every
    tracker as the host reaches them)."""
    argv = [sys.executable, "-m", "st_py.cli", *args, "--tracker", cluster.host_tracker_addr(i)]
    env = host_env(cluster, i)
    return subprocess.run(cluster.host_argv(i, argv), capture_output=True, text=True, timeout=120, env=env)


def host_python(cluster, i: int, code: str):
    """Run ``code`` in a Python process on host ``i`` with ``c`` a Client
    of every tracker; the JSON of its ``result``. AssertionError with its
    stderr if it failed."""
    setup = f"import json\nfrom st_py.client.client import Client\nc = Client({cluster.host_tracker_addr(i)!r})\n"
    argv = [sys.executable, "-c", setup + textwrap.dedent(code) + "\nprint(json.dumps(result))\nc.close()\n"]
    env = host_env(cluster, i)
    p = subprocess.run(cluster.host_argv(i, argv), capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, f"on host {i}: {p.stderr[-3000:]}"
    return json.loads(p.stdout.splitlines()[-1])


class Host:
    """A client process on host ``i`` of a ``private_hosts`` cluster."""

    def __init__(self, cluster, i: int):
        self.i, self.cluster = i, cluster
        self.dir = cluster.host_dir(i)
        script = self.dir / "agent.py"
        script.write_text(AGENT)
        self.addr = cluster.host_tracker_addr(i)
        self.env = host_env(cluster, i)
        self.log = (self.dir / "agent.log").open("wb")
        argv = [sys.executable, str(script), TESTS, self.addr, str(self.dir / "cache")]
        self.proc = subprocess.Popen(
            cluster.host_argv(i, argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, env=self.env
        )
        self.run(SETUP)

    def run(self, code: str, timeout: float = 120):
        """Run ``code`` on the host; its ``result``. AssertionError with the
        host's error if it raised."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write((json.dumps(textwrap.dedent(code)) + "\n").encode())
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else b""
        if not line:
            tail = (self.dir / "agent.log").read_text(errors="replace")[-3000:]
            raise AssertionError(f"host {self.i}'s agent gave no answer in {timeout} s:\n{tail}")
        answer = json.loads(line)
        if "error" in answer:
            raise AssertionError(f"on host {self.i}: {answer['error']}")
        return answer["result"]

    def command(self, *args: str) -> subprocess.CompletedProcess:
        """``storetorrent ARGS --tracker ADDR`` run on the host."""
        return host_command(self.cluster, self.i, *args)

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None and not pipe.closed:
                pipe.close()
        self.log.close()


def parquet(i: int) -> bytes:
    b = io.BytesIO()
    pd.DataFrame({"x": range(i * 40, (i + 1) * 40), "s": [f"v{j}" for j in range(40)]}).to_parquet(b, index=False)
    return b.getvalue()


@pytest.fixture(scope="module")
def hosts(make_module_cluster):
    """Replicated trackers on this machine (3, over 3 etcd members; 1 if
    etcd is missing) and 3 hosts (a peer each, peer_metadata "auto":
    copies fetched from the trackers), each with its client agent given
    every tracker's address;
    FILE (x2, a block a record: every peer holds some) with a snapshot s1, records after it, one replaced and one
    deleted, and two Parquet records."""
    if why := _why_not():
        pytest.skip(why)
    try:
        trackers = 1 if _no_etcd() else 3
        cluster = make_module_cluster(3, name="hosts", private_hosts=True, peer_metadata="auto", trackers=trackers)
    except netns.NetnsError as e:
        pytest.skip(f"network namespaces cannot be made here: {e}")
    c = cluster.client()
    f = c.create(FILE, replication="x2", blocksize=1)  # records spread over every peer
    for i in range(30):
        f.put(f"r{i:03d}", os.urandom(100 + i))
    f.put("part-0.parquet", parquet(0))
    f.flush()
    c.snapshot(FILE, "s1")
    for i in range(30, 40):
        f.put(f"r{i:03d}", os.urandom(50))
    f.put("part-1.parquet", parquet(1))
    f.put("r003", b"new version", replace=True)
    f.delete("r004")
    f.close()
    made = [Host(cluster, i) for i in range(3)]
    yield cluster, made
    for h in made:
        h.close()


LOOK = """
import os
seen = {d: os.listdir(d) for d in HIDDEN}
try:
    Client(addr, metadata="shared-mount").open(FILE).names()
    hidden = False
except FileNotFoundError:
    hidden = True  # the shared mount's client cannot read here: nothing is shared
f = c.open(FILE)
local = {r.name: hashlib.sha256(f.read_local(r)).hexdigest() for r in f.get_local()}
f.close()
result = {"seen": seen, "hidden": hidden, "answers": answers(c, FILE), "local": local}
"""


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def revealed_once(made: list[Host]) -> dict[str, str]:
    """``{record: sha256 of its bytes}`` that GET_LOCAL reveals of FILE on
    the hosts ``made``; fails if a record is revealed on two of them."""
    revealed: dict[str, str] = {}
    for h in made:
        local = h.run(
            f"""
            f = c.open({FILE!r})
            result = {{r.name: hashlib.sha256(f.read_local(r)).hexdigest() for r in f.get_local()}}
            f.close()
            """
        )
        assert not set(local) & set(revealed), f"a record revealed on two hosts: {set(local) & set(revealed)}"
        revealed.update(local)
    return revealed


def test_every_host_reads_what_the_shared_mount_reads(hosts):
    """On each host: the namespace root and the other hosts' folders are
    empty, a shared-mount client cannot read the file, and the default
    client's names, get, as_of s1 and DuckDB (current and as of s1) are
    the shared mount's; GET_LOCAL reveals each record on exactly one host,
    with its bytes. On host 1 the CLI lists and gets, and pandas reads a
    Parquet record through fsspec."""
    cluster, made = hosts
    for i, d in enumerate(cluster.peers):  # each peer too, seen through its /proc/PID/root
        assert d is not None
        view = Path(f"/proc/{d.pid}/root")
        assert os.listdir(f"{view}{cluster.namespace}") == [], f"peer {i} sees the namespace"
        assert os.listdir(f"{view}{cluster.data_dir}/peers/peer-{(i + 1) % 3}") == []
        assert os.listdir(f"{view}{cluster.data_dir}/peers/peer-{i}"), f"peer {i} does not see its data"
    shared = answers(cluster.client(), FILE)
    revealed: dict[str, str] = {}
    for h in made:
        hidden = [str(cluster.namespace)] + [str(p) for p in cluster.host_hidden(h.i)]
        got = h.run(f"HIDDEN, FILE = {hidden!r}, {FILE!r}\n{LOOK}")
        assert all(v == [] for v in got["seen"].values()), f"host {h.i} sees {got['seen']}"
        assert got["hidden"], f"host {h.i} read the namespace"
        assert got["answers"] == shared, f"host {h.i}"
        assert got["local"], f"host {h.i} revealed nothing"
        assert not set(got["local"]) & set(revealed), "a record revealed on two hosts"
        revealed.update(got["local"])
    assert revealed == {n: sha(bytes.fromhex(v)) for n, v in shared["data"].items()}

    b = made[1]
    ls = b.command("ls", "-r", FILE)
    assert ls.returncode == 0, ls.stderr
    assert ls.stdout.split() == shared["names"]
    out = b.dir / "r005.bin"
    get = b.command("get", FILE, "r005", "-o", str(out))
    assert get.returncode == 0, get.stderr
    assert out.read_bytes().hex() == shared["data"]["r005"]
    frame = b.run(
        f"""
        import pandas as pd
        df = pd.read_parquet("storetorrent://{FILE}/part-1.parquet", storage_options={{"tracker": addr}})
        result = df.to_dict(orient="list")
        """
    )
    assert frame == pd.read_parquet(io.BytesIO(parquet(1))).to_dict(orient="list")


def test_a_writer_on_host_a_commits_and_a_reader_on_host_b_reads_at_once(hosts):
    """A writer on host 0 commits records, a new version and a delete one
    at a time; after each commit returns, the reader on host 1 (a handle
    opened before the writes, its copy behind) gets the record, a fresh
    open lists the file as it is now and reads the new version, and its
    read says in the log that it waited to catch up."""
    cluster, made = hosts
    a, b = made[0], made[1]
    name = "/hosts/rw"
    a.run(f"w = c.create({name!r}, replication='x2'); w.put('first', b'0'); w.flush()")
    b.run(f"h = c.open({name!r}); result = h.names()")
    names = ["first"]
    for i in range(4):
        gen = a.run(f"w.put('k{i}', b'v{i}'); w.flush(); result = w.generation")
        names.append(f"k{i}")
        got = b.run(
            f"""
            v = h.get('k{i}').decode()  # the handle opened before: its copy is behind
            g = c.open({name!r})
            result = [v, g.names(), g.generation]
            g.close()
            """
        )
        assert got == [f"v{i}", sorted(names), gen]
    gen = a.run("w.put('first', b'1', replace=True); w.delete('k0'); w.flush(); result = w.generation")
    got = b.run(
        f"""
        g = c.open({name!r})
        result = [g.get('first').decode(), g.names(), g.generation]
        g.close()
        """
    )
    assert got == ["1", ["first", "k1", "k2", "k3"], gen]
    a.run("w.close()")
    b.run("h.close()")
    log = (b.dir / "agent.log").read_text(errors="replace")
    assert "infofile copy of /hosts/rw: a read waited" in log  # h.get said it caught up


def test_a_killed_peer(hosts):
    """Peer 2's process killed (its host's copies gone): host 1 gives the
    shared mount's answers, and GET_LOCAL on hosts 0 and 1 reveals each
    record once, every record. The peer is started again after."""
    cluster, made = hosts
    shared = answers(cluster.client(), FILE)
    with cluster.client().open(FILE) as f:  # the killed peer holds copies: their other copies are read
        on_2 = [n for n in f.names() if any(f.peers[i].addr == cluster.peer_addrs[2] for i in f.record_meta(n).peers)]
    assert on_2
    addr = cluster.kill_peer(2)
    try:
        assert made[1].run(f"result = answers(c, {FILE!r})") == shared
        assert revealed_once(made[:2]) == {n: sha(bytes.fromhex(v)) for n, v in shared["data"].items()}
    finally:
        cluster.start_peer(2, port=int(addr.rpartition(":")[2]))
        cluster.wait_for_peers(3)


DASK = """
from distributed import Client as DaskClient, LocalCluster as DaskCluster
dask_cluster = DaskCluster(
    n_workers=0, host={host!r}, protocol="tcp", scheduler_port=0, dashboard_address=None, processes=False
)
dc = DaskClient(dask_cluster)
result = dask_cluster.scheduler_address
"""

DASK_READ = """
import hashlib
import pandas as pd
import dask.dataframe as dd
from st_integrations.dask_reader import read_storetorrent
from st_integrations.dask_writer import to_storetorrent

def raw(**kw):
    df = read_storetorrent({file!r}, format="raw", tracker=addr, client=dc, **kw).compute()
    return {{r: d.hex() for r, d in zip(df["record"], df["data"])}}

frame = pd.DataFrame({{"x": range(90), "s": [f"w{{j}}" for j in range(90)]}})
written = to_storetorrent(dd.from_pandas(frame, npartitions=3), {out!r}, tracker=addr, client=dc)
back = read_storetorrent({out!r}, tracker=addr, client=dc).compute().sort_values("x")
result = {{"data": raw(), "as_of_data": raw(as_of="s1"), "written": written,
          "back": back.reset_index(drop=True).to_dict(orient="list")}}
"""


def test_dask_reads_and_writes_with_a_worker_on_each_host(hosts):
    """A Dask scheduler and its driver on host 0, a worker on each host
    (started there, named by its peer's address, so each partition is
    computed on its peer's host): ``read_storetorrent`` reads every
    record's bytes, current and as of s1, as the shared mount does;
    ``to_storetorrent`` writes a DataFrame that reads back the same, on
    the hosts and from the shared mount."""
    cluster, made = hosts
    shared = answers(cluster.client(), FILE)
    a = made[0]
    sched = a.run(DASK.format(host=cluster.peer_host(0)))
    workers = []
    try:
        for h in made:
            argv = [sys.executable, "-m", "distributed.cli.dask_worker", sched, "--name", cluster.peer_addrs[h.i]]
            argv += ["--nthreads", "1", "--no-nanny", "--no-dashboard", "--host", cluster.peer_host(h.i)]
            argv += ["--local-directory", str(h.dir / "dask")]
            log = (h.dir / "dask-worker.log").open("wb")
            workers.append(subprocess.Popen(h.cluster.host_argv(h.i, argv), stdout=log, stderr=log, env=h.env))
            log.close()
        a.run("dc.wait_for_workers(3, timeout=90)", timeout=120)
        got = a.run(DASK_READ.format(file=FILE, out="/hosts/dask-out"), timeout=180)
    finally:
        for p in workers:
            p.terminate()
        a.run("dc.close(); dask_cluster.close()")
        for p in workers:
            try:  # a worker may retry its closed scheduler for a while on a loaded machine: not this test's point
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(30)
    assert got["data"] == shared["data"]
    assert got["as_of_data"] == shared["as_of_data"]
    assert got["written"] == 3
    want = {"x": list(range(90)), "s": [f"w{j}" for j in range(90)]}
    assert got["back"] == want
    with cluster.client().open("/hosts/dask-out") as f:  # the shared mount reads what the hosts wrote
        here = pd.concat(pd.read_parquet(io.BytesIO(f.get(n))) for n in f.names()).sort_values("x")
    assert here.reset_index(drop=True).to_dict(orient="list") == want


def test_the_s3_endpoint_on_a_host(hosts):
    """``storetorrent s3`` on host 1 (its peer's copies read from disk,
    ``--peer-data``) answers boto3 from this machine: the file's records
    list and read as the shared mount reads them, and an object PUT there
    reads back from the shared mount."""
    pytest.importorskip("boto3")
    from test_s3 import s3_client

    cluster, made = hosts
    shared = answers(cluster.client(), FILE)
    b = made[1]
    argv = [sys.executable, "-m", "st_py.cli", "s3", "--tracker", b.addr, "--host", cluster.peer_host(1), "--port", "0"]
    argv += ["--peer-data", str(cluster.data_dir / "peers" / "peer-1")]
    log = (b.dir / "s3.log").open("wb")
    proc = subprocess.Popen(cluster.host_argv(1, argv), stdout=subprocess.PIPE, stderr=log, env=b.env)
    log.close()
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        line = proc.stdout.readline().decode() if ready else ""
        assert line.startswith("listening on "), (line, (b.dir / "s3.log").read_text(errors="replace")[-2000:])
        s3 = s3_client(f"http://{line.split()[-1]}", "dev", "x")
        bucket, prefix = FILE.strip("/").split("/")
        listed = s3.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/")
        keys = [o["Key"] for o in listed["Contents"]]
        assert keys == [f"{prefix}/{n}" for n in shared["names"]]
        got = {k.split("/", 1)[1]: s3.get_object(Bucket=bucket, Key=k)["Body"].read().hex() for k in keys}
        assert got == shared["data"]
        s3.create_bucket(Bucket="s3host")
        s3.put_object(Bucket="s3host", Key="run/x.bin", Body=b"put on host 1")
        s3.close()
    finally:
        proc.terminate()
        proc.wait(30)
        if proc.stdout is not None:
            proc.stdout.close()
    with cluster.client().open("/s3host/run") as f:
        assert f.get("x.bin") == b"put on host 1"


def test_repair_drain_and_spread_run_on_hosts(hosts):
    """The maintenance commands run on hosts: ``repair`` on host 2,
    ``drain`` of peer 2 on host 0 (every copy moved off it while it
    serves), ``drain --cancel`` and ``rebalance --spread`` on host 1
    (copies moved back onto it); after each, host 1 reads the file as the
    shared mount then does (the moves make generations), and its records
    are the ones they were before."""
    cluster, made = hosts
    before = answers(cluster.client(), FILE)

    def run(h, *args: str) -> dict:
        p = h.command(*args, "--format", "json")
        assert p.returncode == 0, f"{args} on host {h.i}: {p.stdout}\n{p.stderr}"
        return json.loads(p.stdout)

    def on_2() -> list[str]:
        with cluster.client().open(FILE) as f:
            return [n for n in f.names() if cluster.peer_addrs[2] in (f.peers[i].addr for i in f.record_meta(n).peers)]

    def same() -> None:
        shared = answers(cluster.client(), FILE)
        assert {k: shared[k] for k in ("names", "data", "as_of_names", "as_of_data")} == {
            k: before[k] for k in ("names", "data", "as_of_names", "as_of_data")
        }
        assert made[1].run(f"result = answers(c, {FILE!r})") == shared
        assert revealed_once(made) == {n: sha(bytes.fromhex(v)) for n, v in shared["data"].items()}

    (repaired,) = run(made[2], "repair", FILE)
    assert repaired["complete"], repaired
    assert on_2()
    drained = run(made[0], "drain", cluster.peer_addrs[2])
    assert drained["drain_state"] == "retired" and drained["copies_moved"], drained
    assert on_2() == []
    same()
    back = made[1].command("drain", "--cancel", cluster.peer_addrs[2])
    assert back.returncode == 0 and "in service again" in back.stdout, back.stdout + back.stderr
    # after the drain every record has its two copies on peers 0 and 1, so only moves onto peer 2 are
    # possible: the planner's greedy order (largest copies first, of ~40 records, two of them ~2 KB)
    # can leave peers 0 and 1 about 25% from the mean with no move left that helps (seen once; not a
    # matter of hosts): the tolerance asked is what this layout can reach
    spread = run(made[1], "rebalance", "--spread", FILE, "--tolerance", "0.5")
    assert spread["even"] and spread["copies_moved"], spread
    assert on_2()
    same()


def test_the_tracker_leader_killed(hosts):
    """The leading tracker SIGKILLed: a standby is elected, and on the hosts
    (their clients and peers given every tracker) the file reads as the
    shared mount read it before, GET_LOCAL still reveals each record once,
    and a record written on host 0 after the election reads on host 1."""
    if why := _no_etcd():
        pytest.skip(why)
    cluster, made = hosts
    every = ",".join([cluster.tracker_addr, *cluster.standby_addrs])
    from st_py.client.client import Client

    with Client(every, metadata="shared-mount") as here:
        shared = answers(here, FILE)
    assert cluster.tracker is not None
    cluster.tracker.kill()
    assert made[1].run(f"result = answers(c, {FILE!r})", timeout=180) == shared
    assert revealed_once(made) == {n: sha(bytes.fromhex(v)) for n, v in shared["data"].items()}
    made[0].run("w = c.create('/hosts/after', replication='x2'); w.put('a', b'after'); w.flush()")
    assert made[1].run("g = c.open('/hosts/after'); result = [g.names(), g.get('a').decode()]; g.close()") == [
        ["a"],
        "after",
    ]
    made[0].run("w.close()")
    logs = [cluster.data_dir / "logs" / f"tracker-{j}.log" for j in (1, 2)]
    assert any("elected leader" in p.read_text(errors="replace") for p in logs), "no standby was elected"


def test_private_hosts_refuse_peers_reading_the_namespace(tmp_path):
    """private_hosts with the peers' --namespace (hidden on their hosts) is
    refused before anything starts."""
    from st_py.deploy.cluster import LocalCluster
    from st_py.errors import InvalidOptionError

    with pytest.raises(InvalidOptionError) as e:
        LocalCluster(tmp_path, 3, private_hosts=True)
    assert e.value.option == "peer_metadata"


def test_recover_from_peers_on_a_host(make_cluster):
    """A namespace lost whole (one tracker, its log gone with it) comes back
    from the mirrors of peers that keep infofile copies (no namespace to
    mirror on their hosts; a copy is made by a GET_LOCAL on the host):
    ``recover --from-peers`` run on host 0, which has no cluster folder,
    says to give the capability key when the peers refuse for want of one,
    refuses a key file that does not exist, and with the key restores the
    file at its generation; host 1 reads every record again."""
    if why := _why_not():
        pytest.skip(why)
    from test_recover import _lose_namespace, _wait_for_mirrors

    cluster = make_cluster(
        2, name="recover", private_hosts=True, peer_metadata="auto", peer_args=["--mirror-interval", "0.2"]
    )
    name = "/hosts/lost"
    data = {f"r{i:02d}": f"value {i}".encode() * (i + 1) for i in range(20)}
    c = cluster.client()
    with c.create(name, replication="x2") as w:
        for k, v in data.items():
            w.put(k, v)
    info = c.tracker.open(name)
    c.close()
    # the peers keep copies of the files their hosts read: a GET_LOCAL on each makes them
    scan = f"f = c.open({name!r}); result = sorted(r.name for r in f.get_local()); f.close()"
    assert sorted(n for i in range(2) for n in host_python(cluster, i, scan)) == sorted(data)
    _wait_for_mirrors(cluster, [name])  # every peer of the file mirrors it at its generation
    _lose_namespace(cluster)
    recover = ("recover", "--from-peers", "--format", "json")
    if cluster.auth:  # the host has no DATA/secret.key: the peers refuse, and the error says what to give
        p = host_command(cluster, 0, *recover)
        assert p.returncode == 2, p.stdout + p.stderr
        assert "no key was given" in p.stderr and "--key-file FILE" in p.stderr, p.stderr
    p = host_command(cluster, 0, *recover, "--key-file", str(cluster.data_dir / "no-such.key"))
    assert p.returncode == 2 and "does not exist" in p.stderr, p.stdout + p.stderr  # not taken for "no key"
    p = host_command(cluster, 0, *recover, "--key-file", str(cluster.key_file))
    assert p.returncode == 0, p.stdout + p.stderr
    (got,) = [x for x in json.loads(p.stdout)["files"] if x["name"] == name]
    assert got["outcome"] == "restored" and got["generation"] == info.generation, got
    read = f"f = c.open({name!r}); result = {{n: f.get(n).decode() for n in f.names()}}; f.close()"
    assert host_python(cluster, 1, read) == {k: v.decode() for k, v in data.items()}


RAY_HOSTS = "ST_RAY_HOSTS"  # "1": run the Ray case (./dev soak --ray-hosts)

RAY_HEAD = """
import ray
from st_integrations.placement import peer_resource
ray.init(num_cpus=1, resources={{peer_resource({peer!r}): 1}}, include_dashboard=False, log_to_driver=False,
         _node_ip_address={ip!r})
ray.data.DataContext.get_current().enable_progress_bars = False
import os
auth = {{k: v for k, v in os.environ.items() if k.startswith("RAY_AUTH")}}  # what ray.init set: the nodes join with it
result = [ray.get_runtime_context().gcs_address, auth]
"""

RAY_READ = """
import time
import pandas as pd
from st_integrations.ray_reader import read_storetorrent
from st_integrations.ray_writer import write_storetorrent
deadline = time.monotonic() + 90
while len([n for n in ray.nodes() if n["Alive"]]) < 3 and time.monotonic() < deadline:
    time.sleep(0.2)

def raw(**kw):
    rows = read_storetorrent({file!r}, format="raw", tracker=addr, **kw).take_all()
    return {{r["record"]: r["data"].hex() for r in rows}}

frame = pd.DataFrame({{"x": range(90), "s": [f"w{{j}}" for j in range(90)]}})
written = write_storetorrent(ray.data.from_pandas(frame).repartition(3), {out!r}, tracker=addr)
back = read_storetorrent({out!r}, tracker=addr).to_pandas().sort_values("x")
result = {{"data": raw(), "as_of_data": raw(as_of="s1"), "written": written,
          "back": back.reset_index(drop=True).to_dict(orient="list")}}
"""


@pytest.mark.skipif(
    os.environ.get(RAY_HOSTS) != "1",
    reason=f"Ray on three hosts takes about 40 s: in the soak (./dev soak --ray-hosts sets {RAY_HOSTS}=1)",
)
def test_ray_reads_and_writes_with_a_node_on_each_host(hosts):
    """A Ray head and its driver on host 0, a Ray node on each other host
    (each with its peer's ``st-peer-*`` resource, so each read task runs on
    its peer's host): ``read_storetorrent`` reads every record's bytes,
    current and as of s1, as the shared mount does; ``write_storetorrent``
    writes a Dataset that reads back the same. Not in the suite: three Ray
    nodes start and stop in about 40 s on a loaded 2-core machine (Dask's
    test covers the same ways in within the suite's budget)."""
    pytest.importorskip("ray")
    from st_integrations.placement import peer_resource

    cluster, made = hosts
    shared = answers(cluster.client(), FILE)
    a = made[0]
    gcs, auth = a.run(RAY_HEAD.format(peer=cluster.peer_addrs[0], ip=cluster.peer_host(0)), timeout=120)
    nodes = []
    try:
        for h in made[1:]:
            argv = [str(Path(sys.executable).parent / "ray"), "start", "--address", gcs, "--block", "--num-cpus", "1"]
            argv += ["--resources", json.dumps({peer_resource(cluster.peer_addrs[h.i]): 1})]
            argv += ["--node-ip-address", cluster.peer_host(h.i), "--disable-usage-stats"]
            log = (h.dir / "ray-node.log").open("wb")
            env = {**h.env, **auth}
            nodes.append(subprocess.Popen(h.cluster.host_argv(h.i, argv), stdout=log, stderr=log, env=env))
            log.close()
        got = a.run(RAY_READ.format(file=FILE, out="/hosts/ray-out"), timeout=240)
    finally:
        for p in nodes:  # before the head: a node whose head is gone waits for it before it exits
            p.terminate()
        for p in nodes:
            p.wait(60)
        a.run("ray.shutdown()")
    assert got["data"] == shared["data"]
    assert got["as_of_data"] == shared["as_of_data"]
    assert got["written"] == 3
    assert got["back"] == {"x": list(range(90)), "s": [f"w{j}" for j in range(90)]}

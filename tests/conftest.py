"""Fixtures that start real StoreTorrent processes on ephemeral loopback ports.

A test that needs a cluster gets a tracker and peers as child processes (the
real ``st-peer`` binary and ``python -m st_py.tracker``); fault tests SIGKILL
them. On failure the daemons' logs are printed.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from pathlib import Path

import pytest

from st_py.deploy.cluster import LocalCluster, find_peer_binary

# A bare ray.init() (our readers call one when Ray is not running) joins any Ray that
# another process on this machine started, and its tasks' objects die with that process's
# driver (OwnerDiedError when two test runs overlapped; ../shared/FACTS.md): every test
# run starts a Ray of its own. Tests that build a multi-node Ray pass its address.
os.environ.setdefault("RAY_ADDRESS", "local")

# Hypothesis's pytest plugin imports hypothesis in its terminal summary when no test
# did, and pytest rewrites those modules as it imports them (ast.parse). CPython
# 3.11's ast.parse can fail with "AST constructor recursion depth mismatch" late in
# a session (helpers.parse_python): a run of tests/test_snapshots_ways_in.py under
# load passed its 7 tests and then died so (INTERNALERROR, exit status 1). Imported
# here, at the session's start, hypothesis is parsed before anything can upset that.
import hypothesis.internal.observability  # noqa: E402, F401


def poll_for(predicate, timeout: float = 10.0, interval: float = 0.05, what: str = "condition"):
    """Wait until ``predicate()`` is truthy; fail the test after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        v = predicate()
        if v:
            return v
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


@pytest.fixture(scope="session")
def peer_bin() -> str:
    try:
        return find_peer_binary()
    except FileNotFoundError as e:
        pytest.fail(str(e))


def _dump_logs(cluster: LocalCluster) -> None:
    logs = cluster.data_dir / "logs"
    if logs.is_dir():
        for p in sorted(logs.iterdir()):
            print(f"----- {p.name} -----")
            print("\n".join(p.read_text(errors="replace").splitlines()[-40:]))


@pytest.fixture
def make_cluster(tmp_path: Path, peer_bin, request):
    """Factory: ``make_cluster(n_peers=4, **kw)`` -> a started LocalCluster."""
    made: list[LocalCluster] = []

    def make(n_peers: int = 4, name: str = "cluster", **kw) -> LocalCluster:
        # ST_TEST_AUTH=0: the whole suite in development mode, without capabilities
        kw.setdefault("auth", os.environ.get("ST_TEST_AUTH", "1") != "0")
        c = LocalCluster(tmp_path / name, n_peers=n_peers, announce_interval=kw.pop("announce_interval", 0.3), **kw)
        made.append(c)
        c.start()
        return c

    yield make
    failed = getattr(request.node, "rep_call", None)
    for c in made:
        if failed is not None and failed.failed:
            _dump_logs(c)
        c.stop()


@pytest.fixture
def etcd(tmp_path):
    """Three real etcd members (st_py.deploy.etcd.EtcdCluster), stopped after the test."""
    from st_py.deploy.etcd import EtcdCluster

    with EtcdCluster(tmp_path / "etcd", 3) as c:
        yield c


@pytest.fixture
def make_site(make_cluster, tmp_path):
    """Factory: ``make_site(n_peers, alice=(["physics"], {"quota_bytes": N}),
    root=(["admin"], {"admin": True}), ...)`` -> ``(cluster, clients, keys)``:
    a cluster whose tracker has a users file with those users (their groups,
    and ``add_user``'s options), a client per user and each user's API key."""
    from st_py.tracker.access import add_user

    def make(n_peers: int, **users: tuple[list[str], dict]):
        users_file = tmp_path / "users.toml"
        keys = {name: add_user(users_file, name, groups, **options) for name, (groups, options) in users.items()}
        cluster = make_cluster(n_peers, users_file=users_file)
        return cluster, {u: cluster.client(api_key=k) for u, k in keys.items()}, keys

    return make


@pytest.fixture
def cluster(make_cluster) -> LocalCluster:
    """A tracker and 4 peers."""
    return make_cluster(4)


@pytest.fixture(scope="module")
def make_module_cluster(tmp_path_factory, peer_bin, request):
    """Factory: ``make_module_cluster(n_peers=4, name="module", **kw)`` -> a
    started LocalCluster shared by a module's tests, made as ``make_cluster``
    makes one and stopped when the module is done, for tests that each use
    files of their own names and kill, restart or fill nothing (a cluster
    start is 1.5 to 3 s, most of it the tracker's Python imports). Its
    daemons' logs are printed if a test of the module failed."""
    failed_before = request.session.testsfailed
    made: list[LocalCluster] = []

    def make(n_peers: int = 4, name: str = "module", **kw) -> LocalCluster:
        kw.setdefault("auth", os.environ.get("ST_TEST_AUTH", "1") != "0")
        kw.setdefault("announce_interval", 0.3)
        c = LocalCluster(tmp_path_factory.mktemp(name) / "cluster", n_peers=n_peers, **kw)
        made.append(c)
        c.start()
        return c

    yield make
    for c in made:
        if request.session.testsfailed != failed_before:
            _dump_logs(c)
        c.stop()


@pytest.fixture(scope="module")
def module_cluster(make_module_cluster) -> LocalCluster:
    """A tracker and 4 peers shared by a module's tests (see
    ``make_module_cluster``)."""
    return make_module_cluster(4)


@pytest.fixture(scope="module")
def parquet_cluster(make_module_cluster) -> LocalCluster:
    """A module's tracker and 4 peers holding the analysis tests' Parquet
    file, ``analysis_data.PARQUET_FILE`` (x2, ``N_PARTS`` records)."""
    from analysis_data import PARQUET_FILE, put_parquet_file

    c = make_module_cluster(4, name="analysis")
    with c.client() as cl:
        put_parquet_file(cl, PARQUET_FILE)
    return c


@pytest.fixture(scope="module")
def ray_nodes(parquet_cluster):
    """``{peer: Ray node id}`` of a Ray of two nodes standing for two hosts,
    each the host of two of ``parquet_cluster``'s peers (by the
    ``st-peer-HOST-PORT`` resources); this process is its driver."""
    ray = pytest.importorskip("ray")
    from helpers import start_ray_cluster

    from st_integrations.placement import peer_resource

    a, b = parquet_cluster.peer_addrs[:2], parquet_cluster.peer_addrs[2:]
    rc, (other,) = start_ray_cluster(
        {"num_cpus": 1, "resources": {peer_resource(p): 1 for p in a}},
        {"num_cpus": 1, "resources": {peer_resource(p): 1 for p in b}},
    )
    yield {**{p: rc.head_node.node_id for p in a}, **{p: other.node_id for p in b}}
    ray.shutdown()
    rc.shutdown()


@pytest.fixture(scope="module")
def dclient(parquet_cluster):
    """A Dask client of a cluster with one single-threaded worker per peer
    of ``parquet_cluster``, each named by its peer's address (a name stands
    for a host)."""
    pytest.importorskip("dask.dataframe")
    from distributed import Client, Scheduler, SpecCluster, Worker

    workers = {addr: {"cls": Worker, "options": {"name": addr, "nthreads": 1}} for addr in parquet_cluster.peer_addrs}
    spec = SpecCluster(workers=workers, scheduler={"cls": Scheduler, "options": {"dashboard_address": ":0"}})
    client = Client(spec)
    yield client
    client.close()
    spec.close()


@pytest.fixture(scope="module")
def local_ray():
    """A Ray of this process alone (2 CPUs, no dashboard), for the module."""
    ray = pytest.importorskip("ray")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray
    ray.shutdown()


@pytest.fixture
def local_dask():
    """A Dask client of an in-process cluster: one worker of 2 threads."""
    pytest.importorskip("dask.dataframe")
    from distributed import Client
    from distributed import LocalCluster as DaskCluster

    with (
        DaskCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0") as lc,
        Client(lc) as client,
    ):
        yield client


@pytest.fixture
def hosts_cluster(make_cluster) -> LocalCluster:
    """4 peers, each on its own loopback address (127.0.0.2 .. .5), as 4 hosts."""
    c = make_cluster(4, hosts=True)
    assert sorted(a.rsplit(":", 1)[0] for a in c.peer_addrs) == [f"127.0.0.{i}" for i in range(2, 6)]
    return c


@pytest.fixture
def placement_calls(monkeypatch) -> dict[str, int]:
    """How many times ``st_tools.dataloss`` called the real placement code
    (``choose_holders``, ``schedule``) during the test, counted as it runs."""
    from st_tools import dataloss as dl

    calls = {"choose_holders": 0, "schedule": 0}
    real_choose, real_schedule = dl.choose_holders, dl.schedule

    def choose(usable, copies, rng=None):
        calls["choose_holders"] += 1
        return real_choose(usable, copies, rng)

    def schedule(live, copies, est_size):
        calls["schedule"] += 1
        return real_schedule(live, copies, est_size)

    monkeypatch.setattr(dl, "choose_holders", choose)
    monkeypatch.setattr(dl, "schedule", schedule)
    return calls


# `./dev test` runs the suite on several pytest-xdist workers (--dist loadgroup). Each
# module's tests run on one worker, in order, so a module-scoped cluster is started once;
# modules that change the machine's own network state share one group, so they run one
# after another (their namespaces, links and addresses are each process's own and
# ip_forward stays on while any process holds namespaces: st_py/deploy/netns.py REGISTRY;
# the group keeps their link cuts and timing from meeting). pytest_configure stops a run
# whose pytest would ignore the groups.
ONE_WORKER = {
    "test_netns.py": "host-network",
    "test_tracker_netns.py": "host-network",
    "test_hosts_no_shared_folder.py": "host-network",
}


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        item.add_marker(pytest.mark.xdist_group(ONE_WORKER.get(item.path.name, item.path.name)))


def pytest_configure(config):
    """Stop at once if ``--dist loadgroup`` would not group: pytest-xdist
    (3.8) names an item's group by appending ``@group`` to
    ``item._nodeid``, which pytest 9.2 no longer reads, so the groups are
    silently ignored and the host-network modules run at once on several
    workers, breaking each other's routes (pyproject.toml pins pytest)."""
    if config.getvalue("dist") != "loadgroup" or hasattr(config, "workerinput"):  # the controller only
        return
    import inspect

    from _pytest.nodes import Node

    if "_nodeid" not in inspect.getsource(Node.nodeid.fget):
        raise pytest.UsageError(
            f"pytest {pytest.__version__} does not keep the node ids pytest-xdist's --dist loadgroup "
            "sets, so tests would not be grouped: install the versions pyproject.toml pins "
            "(pip install -e '.[dev]')"
        )


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


@pytest.fixture(autouse=True)
def _collect_garbage_after_test():
    """Collect garbage when the test and its function-scoped fixtures are
    done (this autouse fixture is torn down after them), so a socket, file or
    subprocess left open in a reference cycle is finalized now: its
    ResourceWarning, an error (pyproject.toml), then fails this test rather
    than whichever later test happens to trigger the collection.

    What survives is then frozen (``gc.freeze``), so the next test's
    collection looks only at the objects made since: a full collection walks
    the whole heap of Ray, Dask and pyarrow, 0.2 to 0.7 s after every test
    (a fifth of the suite's time). The module's end unfreezes and collects
    everything (``_no_ray_between_modules``): a leak in an object that
    outlived its test (a module-scoped fixture's, or one kept in a global)
    and became garbage later fails the module's last test."""
    yield
    gc.collect()
    gc.freeze()


@pytest.fixture(scope="module", autouse=True)
def _no_ray_between_modules():
    """A test that lets a reader start Ray on its own (as users do) must not
    leave it running for the next module, whose fixture starts its own."""
    yield
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()
    # What the module's tests left alive and has since become garbage (its
    # module-scoped fixtures, torn down by now): a leak there fails the
    # module's last test.
    gc.unfreeze()
    gc.collect()

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
def cluster(make_cluster) -> LocalCluster:
    """A tracker and 4 peers."""
    return make_cluster(4)


@pytest.fixture(scope="module")
def module_cluster(tmp_path_factory, peer_bin, request) -> LocalCluster:
    """A tracker and 4 peers shared by a module's tests, as ``cluster`` is
    made, for tests that each use files of their own names and kill,
    restart or fill nothing (a cluster start is 1.5 to 3 s, most of it the
    tracker's Python imports). Its daemons' logs are printed if a test of the
    module failed."""
    failed_before = request.session.testsfailed
    c = LocalCluster(
        tmp_path_factory.mktemp("module") / "cluster",
        n_peers=4,
        announce_interval=0.3,
        auth=os.environ.get("ST_TEST_AUTH", "1") != "0",
    )
    try:
        c.start()
        yield c
    finally:
        if request.session.testsfailed != failed_before:
            _dump_logs(c)
        c.stop()


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

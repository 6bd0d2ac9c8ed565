"""Per-file trackers under replicated trackers (issue 39; docs/metadata-log.md,
"Per-file trackers"): three real etcd members, two trackers on one namespace,
each starting one per-file tracker once elected. A per-file tracker's log
(its files' commits, writer leases and record deletes) is in etcd beside the
master's, fenced by its master's term: the leader's SIGKILL loses no
acknowledged commit of either shard, and a writer lease held on a per-file
tracker's file survives it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time

import pytest
from conftest import poll_for
from helpers import failover_writer, standby_argv

from st_py.deploy.etcd import EtcdCluster, find_etcd
from st_py.tracker.shards import shard_of

try:
    find_etcd()
    from st_py.tracker.log.etcd_log import EtcdLog  # aetcd: the [ha] extra
    from st_py.tracker.log.etcd_session import EtcdSession
except Exception as e:  # pragma: no cover - CI installs both (./dev setup)
    pytest.skip(f"etcd or aetcd missing: {e}", allow_module_level=True)


def _shard_head(etcd: EtcdCluster, cluster_id: str, shard: int) -> int:
    """The last index of shard ``shard``'s log in etcd (0: none)."""

    async def go() -> int:
        session = EtcdSession(etcd.endpoints)
        try:
            return await (await EtcdLog.open(session, cluster_id, shard=shard)).last_index()
        finally:
            await session.close()

    return asyncio.run(go())


def _name_in_shard(prefix: str, shard: int, shards: int) -> str:
    return next(n for i in range(100) if shard_of(n := f"{prefix}{i}", shards) == shard)


def test_per_file_trackers_keep_every_acknowledged_commit_and_lease_through_a_failover(make_cluster, etcd, tmp_path):
    from st_py.client.client import Client
    from st_py.deploy.ports import choose_ports

    args = ["--etcd", ",".join(etcd.endpoints), "--cluster-id", "ft", "--init-cluster"]
    cluster = make_cluster(3, tracker_args=args, file_trackers=1)
    (port_b,) = choose_ports([2])  # the standby and, once elected, its per-file tracker on the next port
    argv = standby_argv(cluster.tracker.argv, tmp_path / "state-b", port_b)  # its per-file tracker: port_b + 1
    standby_log = tmp_path / "standby.log"
    out = standby_log.open("wb")
    standby = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        poll_for(lambda: b"a standby until elected" in standby_log.read_bytes(), timeout=30)
        both = f"{cluster.tracker_addr},127.0.0.1:{port_b}"
        cluster.set_standbys([f"127.0.0.1:{port_b}"])
        client = Client(both)
        leased = _name_in_shard("/ft/leased", 1, 2)  # a file of the per-file tracker
        with client.create(leased, replication="x2") as g:
            g.put("doc", b"v0")
            g.put("base1", b"b1")
        assert _shard_head(etcd, "ft", 1) > 0, "the per-file tracker's commits are not in etcd"
        g = client.open(leased)
        g.put("doc", b"v1", replace=True)  # takes the writer lease, held by the per-file tracker
        g.flush()
        # a reader of a local copy, its handle opened before the kill: its copy's changes come
        # from the file's per-file tracker, which is another after the failover
        reader = Client(both, metadata="fetch", metadata_cache=str(tmp_path / "cache"), metadata_max_age_s=0)
        r = reader.open(leased)
        assert r.get("doc") == b"v1"
        acked: dict[str, dict[str, bytes]] = {}
        errors: list[BaseException] = []
        stop = threading.Event()
        th = threading.Thread(target=failover_writer, args=(client, "/ft/w", acked, errors, stop))
        th.start()
        poll_for(lambda: len(acked) >= 4, timeout=60, what="the writer to get going")
        g.queue_put("a1", b"a1").result()  # acknowledged by the peers, its commit waiting
        g.queue_put("doc", b"v2", replace=True).result()
        cluster.tracker.kill()  # its per-file tracker dies with it
        before = len(acked)
        poll_for(lambda: b"elected leader" in standby_log.read_bytes(), timeout=30, interval=0.05)
        poll_for(lambda: len(acked) >= before + 4 or errors, timeout=90, what="writes to resume on the standby")
        g.delete("base1")
        g.queue_put("a2", b"a2")
        g.put("doc", b"v3", replace=True)  # under the lease the new per-file tracker read from etcd
        g.close()
        stop.set()
        th.join(60)
        assert not errors, errors
        shards = {shard_of(name, 2) for name in acked}
        assert shards == {0, 1}, f"the writer's files missed a shard: {sorted(acked)}"
        assert (r.get("doc"), r.get("a2"), sorted(r.names())) == (b"v3", b"a2", ["a1", "a2", "doc"])
        r.close()
        reader.close()
        with client.open(leased) as f:
            assert sorted(f.names()) == ["a1", "a2", "doc"]
            assert (f.get("a1"), f.get("a2"), f.get("doc")) == (b"a1", b"a2", b"v3")
        for name, recs in acked.items():
            with client.open(name) as f:
                assert sorted(f.names()) == sorted(recs), name
                assert all(f.get(k) == v for k, v in recs.items()), name
        assert [t.addr for t in client.status().file_trackers] == [f"127.0.0.1:{port_b + 1}"]
        client.close()
    finally:
        standby.kill()
        standby.wait()
        out.close()


def test_a_per_file_tracker_of_a_master_no_longer_leading_is_refused(etcd, tmp_path):
    """A per-file tracker started with a term that is not the elected one (its
    master was replaced) exits with one line and appends nothing."""
    from st_py.tracker.log.etcd_log import EtcdLog as Log

    async def make() -> None:
        session = EtcdSession(etcd.endpoints)
        try:
            await Log.open(session, "stale", create=True)
        finally:
            await session.close()

    asyncio.run(make())
    root = tmp_path / "ns"
    root.mkdir()
    argv = [sys.executable, "-m", "st_py.tracker", "--root", str(root), "--state-dir", str(tmp_path / "st")]
    argv += ["--etcd", ",".join(etcd.endpoints), "--cluster-id", "stale", "--shard", "1", "--shards", "2"]
    argv += ["--master", "127.0.0.1:1", "--master-pid", str(1), "--master-term", "7", "--port", "0"]
    t0 = time.monotonic()
    env = dict(os.environ, ST_TRACKER_INTERNAL_KEY="ab" * 32)
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("file tracker 1: metadata log (etcd") and "term 7" in last, r.stderr
    assert _shard_head(etcd, "stale", 1) == 0
    assert time.monotonic() - t0 < 30

"""The leader tracker SIGKILLed under load, checked as a history
(tests/failover.py, tests/history.py; issue 39): 3 real etcd members, a
leader tracker and a standby, 3 peers; a writer and 2 readers run while the
leader and one etcd member are SIGKILLed; the standby takes over, and every
acknowledged record reads back, nothing unacknowledged or deleted is
visible, every read saw what was acknowledged before it, every snapshot
reads as when taken, and one tracker appended per term. The soak of many
kills is ``./dev soak --tracker-failover``."""

from __future__ import annotations

import pytest

try:
    from st_py.deploy.etcd import find_etcd

    find_etcd()
    import aetcd  # noqa: F401 - the [ha] extra
except Exception as e:  # pragma: no cover - CI installs both (./dev setup)
    pytest.skip(f"etcd or aetcd missing: {e}", allow_module_level=True)

from failover import run
from history import check


@pytest.mark.timeout(300)
def test_the_leader_killed_under_load_loses_nothing(tmp_path, peer_bin):
    rep = run(tmp_path, kills=1, kill_etcd_every=1, log=print, at_least=(50, 20, 1))
    d = rep.as_dict()
    print(d)
    assert rep.ok, d["problems"]
    assert rep.kills == 1 and rep.etcd_kills == 1
    v = rep.verdict
    assert v.lost == 0 and v.acked >= 50 and v.reads >= 20, d  # the checks had something to check
    assert rep.entries > 0 and rep.resume_s[0] == rep.resume_s[0], d
    assert d["outcomes"].get("snapshot:ok", 0) > 0, d
    assert d["log_file_ops"] >= d["outcomes"]["create:ok"], d  # every file's create_file read from etcd

    # The checker fails on this very history when the state read back differs:
    # an acknowledged record missing, a record never acknowledged visible.
    final = rep.final
    file, name = next((f, n) for f, recs in sorted(final.files.items()) for n in sorted(recs))
    del final.files[file][name]
    final.files[file]["never-put"] = b"x"
    problems = "\n".join(check(rep.ops, final).problems)
    assert f"LOST {file}:{name}" in problems or "a delete of it returned" in problems, problems
    assert f"{file}:never-put is visible at the end, no one put it" in problems, problems


def test_a_standby_starting_leaves_the_leaders_half_made_infofiles_alone(make_cluster, tmp_path):
    """A half-made infofile (``.st-creating-*``, as the leader names one
    while it creates a file) must still be there once a standby of the same
    cluster has started on the same namespace and campaigns: only the
    elected tracker may clean up after a dead one."""
    from st_py.deploy.etcd import EtcdCluster

    with EtcdCluster(tmp_path / "etcd", 3) as etcd:
        args = ["--etcd", ",".join(etcd.endpoints), "--cluster-id", "half", "--init-cluster"]
        cluster = make_cluster(1, tracker_args=args)
        half = cluster.namespace / f".st-creating-f-{cluster.tracker.pid}-1"
        half.write_bytes(b"the leader's create, in progress")
        from test_tracker_etcd import _start_standby

        standby, _, log = _start_standby(cluster, tmp_path)
        try:
            assert half.exists(), "the standby removed the leader's half-made infofile"
        finally:
            standby.kill()
            standby.wait()
            log.close()

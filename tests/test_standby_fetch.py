"""Infofile copies made from any tracker replica, not only the leader
(issue 40 item 1; docs/metadata-log.md, "Copies from standbys"): standbys
that follow the log (`--own-namespace`) serve FetchInfofile on a port of
their own while they follow, clients spread their copies over them and fall
back to the leader, and a standby never hands out a state older than the one
asked for; peers that keep copies (`st-peer --metadata fetch`) learn the
standbys from their announce replies and do the same. Three real etcd
members, a leader and two standbys, real peers."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import grpc
import pytest
from conftest import poll_for
from helpers import http_get, metric_value, scrape_metrics, standby_argv

from st_py._proto import tracker_pb2 as pb
from st_py._proto import tracker_pb2_grpc as pb_grpc
from st_py.client.copies_status import copies_status
from st_py.deploy.ports import choose_ports
from st_py.errors import ReplicaBehindError
from st_py.wire.tracker_client import TrackerClient

try:
    from st_py.deploy.etcd import find_etcd

    find_etcd()
    import aetcd  # noqa: F401 - the [ha] extra
except Exception as e:  # pragma: no cover - CI installs both (./dev setup)
    pytest.skip(f"etcd or aetcd missing: {e}", allow_module_level=True)


def _leader_http(cluster) -> str:
    """The leader's metrics and status address, as it printed it once elected."""
    return cluster.tracker.log_path.read_text().split("Prometheus metrics at http://", 1)[1].split("/", 1)[0]


def _leader_fetches(cluster) -> float:
    """FetchInfofile calls the leader answered (its metrics)."""
    m = scrape_metrics(_leader_http(cluster))
    return metric_value(m, "st_tracker_rpcs_total", method="FetchInfofile", code="OK")


@pytest.fixture
def three(make_cluster, etcd, tmp_path):
    """(cluster, [fetch address of each standby], [its process]): a leader
    with 3 peers and two standbys with namespaces of their own, both listed
    by the leader."""
    yield from _with_standbys(make_cluster, etcd, tmp_path)


@pytest.fixture
def three_fetch_peers(make_cluster, etcd, tmp_path):
    """:func:`three` with peers that keep infofile copies
    (``--metadata fetch``) made only by GET_LOCAL (``--mirror-interval 0``:
    no pass catches up the files announce replies name)."""
    yield from _with_standbys(make_cluster, etcd, tmp_path, peer_metadata="fetch", peer_args=["--mirror-interval", "0"])


def _with_standbys(make_cluster, etcd, tmp_path, **kw):
    args = ["--etcd", ",".join(etcd.endpoints), "--cluster-id", "sf", "--init-cluster"]
    cluster = make_cluster(3, tracker_args=args, **kw)
    procs, logs, files = [], [], []
    for i, port in enumerate(choose_ports([1, 1])):
        argv = standby_argv(cluster.tracker.argv, tmp_path / f"state-s{i}", port, tmp_path / f"namespace-s{i}")
        logs.append(tmp_path / f"s{i}.log")
        files.append(logs[-1].open("wb"))
        procs.append(subprocess.Popen(argv, stdout=files[-1], stderr=subprocess.STDOUT, start_new_session=True))
    try:
        for lg in logs:
            poll_for(lambda lg=lg: b"a standby until elected" in lg.read_bytes(), timeout=30, what="a standby")
        fetch = [lg.read_text().split("fetch on ", 1)[1].split()[0] for lg in logs]
        leader = TrackerClient(cluster.tracker_addr)

        def listed() -> list[str]:
            return sorted(t.fetch_addr for t in leader.status().metadata_log.trackers if t.fetch_addr)

        poll_for(
            lambda: listed() == sorted(fetch),
            timeout=30,
            what="the leader to list both standbys' infofile ports",
        )
        leader.close()
        yield cluster, fetch, procs
    finally:
        for p in procs:
            p.kill()
            p.wait()
        for f in files:
            f.close()


def _write(client, name: str, n: int) -> dict[str, bytes]:
    recs = {f"r{i}": f"{name} {i}".encode() for i in range(n)}
    with client.create(name, replication="x2") as f:
        for k, v in recs.items():
            f.queue_put(k, v)
    return recs


def _followed(fetch: list[str], name: str, generation: int) -> bool:
    """Whether every standby has ``name`` at ``generation`` at least (asked
    at its infofile port with that want: a refusal says not yet, as for a
    file it has not made yet)."""
    for addr in fetch:
        t = TrackerClient(addr)
        try:
            t.fetch_infofile(name, 0, want_generation=generation)
        except ReplicaBehindError:
            return False
        finally:
            t.close()
    return True


def test_copies_come_from_the_standbys_and_read_as_the_leaders(three, tmp_path, caplog):
    """Fresh copies of files the standbys have applied come from the
    standbys, a different one first each time (the leader answers no
    FetchInfofile), and read back the names and bytes the leader's
    namespace holds; any other RPC at a standby's infofile port is
    UNAVAILABLE at once."""
    cluster, fetch, _ = three
    writer = cluster.client()
    acked = {f"/sf/f{i}": _write(writer, f"/sf/f{i}", 25) for i in range(4)}
    gens = {n: writer.tracker.open_unlocated(n).generation for n in acked}
    poll_for(lambda: all(_followed(fetch, n, g) for n, g in gens.items()), timeout=30, what="the standbys to follow")
    before = _leader_fetches(cluster)
    reader = cluster.client(metadata="fetch", metadata_cache=str(tmp_path / "cache"), metadata_max_age_s=60)
    sources = set()
    with caplog.at_level("INFO", logger="st.client"):
        for name, recs in acked.items():
            with reader.open(name) as f:
                assert sorted(f.names()) == sorted(recs), name
                assert all(f.get(k) == v for k, v in recs.items()), name
            last = reader.tracker.locator.last
            assert last.standby and last.kind == "snapshot", last
            sources.add(last.source)
    assert sources == set(fetch)  # spread over both
    assert _leader_fetches(cluster) == before
    # the leader's status page names each standby's infofile port
    page = http_get(_leader_http(cluster), "/")[1]
    assert all(f"<td>{a}</td>" in page for a in fetch) and "infofile copies</th>" in page, page
    assert any("from standby 127.0.0.1:" in r.getMessage() for r in caplog.records), caplog.text
    st = copies_status(tmp_path / "cache")  # status shows which replica each copy came from
    assert st.from_standbys == 4 and {c.checked_from for c in st.files} == set(fetch), st
    # every other RPC at an infofile port: UNAVAILABLE, at once
    ch = grpc.insecure_channel(fetch[0])
    t0 = time.monotonic()
    with pytest.raises(grpc.RpcError) as e:
        pb_grpc.TrackerStub(ch).Open(pb.OpenRequest(name="/sf/f0", user="x"), timeout=10)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE and time.monotonic() - t0 < 2.0
    assert "FetchInfofile only" in e.value.details()
    ch.close()
    reader.close()
    writer.close()


def test_a_standby_behind_the_wanted_state_is_passed_over(three, tmp_path):
    """A standby asked for a log position it has not applied refuses
    (ReplicaBehindError) before sending anything; a reader that opens a file
    right after each commit (the standbys hold the state before it) reads
    every acknowledged record, from the leader when the standbys are behind."""
    cluster, fetch, _ = three
    writer = cluster.client()
    _write(writer, "/sf/b", 5)
    info = writer.tracker.open_unlocated("/sf/b")
    # the standbys hold the file: each commit below leaves them an older state of it for a while
    poll_for(lambda: _followed(fetch, "/sf/b", info.generation), timeout=30, what="the standbys to follow")
    far = TrackerClient(fetch[0])
    with pytest.raises(ReplicaBehindError, match="has applied the metadata log through entry"):
        far.fetch_infofile("/sf/b", info.file_id, want_position=info.log_position + 10**6, want_log_id=info.log_id)
    far.close()
    reader = cluster.client(metadata="fetch", metadata_cache=str(tmp_path / "cache"), metadata_max_age_s=60)
    by_leader = 0
    with writer.open("/sf/b") as w:
        for i in range(5):
            w.put(f"n{i}", f"new {i}".encode())
            w.flush()  # acknowledged
            with reader.open("/sf/b") as f:  # the Open's state: every record acknowledged
                assert f.get(f"n{i}") == f"new {i}".encode()
                assert {f"n{j}" for j in range(i + 1)} <= set(f.names())
            by_leader += not reader.tracker.locator.last.standby
    assert by_leader >= 1  # standbys apply a commit only after the leader publishes it (every 3 s)
    reader.close()
    writer.close()


def test_a_standby_that_does_not_answer_is_passed_over_and_benched(three, tmp_path, monkeypatch, caplog):
    """A standby stopped (SIGSTOP: its port still accepts connections) costs
    one question at most its answer's deadline: the copy comes from the
    other standby or the leader, and the next questions skip it."""
    from st_py.client import infofile_copies

    monkeypatch.setattr(infofile_copies, "STANDBY_TIMEOUT_S", 3.0)  # the deadline of a standby's answer, shorter
    cluster, fetch, procs = three
    writer = cluster.client()
    acked = {f"/sf/s{i}": _write(writer, f"/sf/s{i}", 10) for i in range(3)}
    gens = {n: writer.tracker.open_unlocated(n).generation for n in acked}
    poll_for(lambda: all(_followed(fetch, n, g) for n, g in gens.items()), timeout=30, what="the standbys to follow")
    first = sorted(fetch)[0]  # asked first by a new client
    stopped = procs[fetch.index(first)]
    os.kill(stopped.pid, signal.SIGSTOP)
    try:
        reader = cluster.client(metadata="fetch", metadata_cache=str(tmp_path / "cache"), metadata_max_age_s=60)
        t0 = time.monotonic()
        with caplog.at_level("INFO", logger="st.client.copies"):
            for name, recs in acked.items():  # the stopped standby is first in turn for the 1st and 3rd
                with reader.open(name) as f:
                    assert sorted(f.names()) == sorted(recs) and f.get("r3") == recs["r3"], name
                assert reader.tracker.locator.last.source != first
        took = time.monotonic() - t0
        benched = [r for r in caplog.records if "did not answer a FetchInfofile" in r.getMessage()]
        assert len(benched) == 1 and first in benched[0].getMessage(), caplog.text  # asked once, then skipped
        assert took < 3 * infofile_copies.STANDBY_TIMEOUT_S, took  # one wait on it, bounded by its deadline (not 30 s)
        reader.close()
    finally:
        os.kill(stopped.pid, signal.SIGCONT)
    writer.close()


def _peer_fetches(cluster) -> tuple[float, float]:
    """(FetchInfofile calls of the peers that brought a copy forward, those
    of them a standby answered), over the cluster's peers' metrics."""
    ms = [scrape_metrics(d.metrics_addr) for d in cluster.peers]
    ok = sum(metric_value(m, "st_peer_infofile_copy_fetches_total", result="ok") for m in ms)
    return ok, sum(metric_value(m, "st_peer_infofile_copy_fetches_from_standbys_total") for m in ms)


def _reveal_all(writer, name: str, recs: dict[str, bytes]) -> None:
    """GET_LOCAL over the peers reveals every record of ``name`` once, with
    the bytes written."""
    with writer.open(name) as f:
        got = f.get_local()
        assert sorted(r.name for r in got) == sorted(recs), name
        assert all(f.read_local(r) == recs[r.name] for r in got), name


def test_peers_copies_come_from_the_standbys_never_behind(three_fetch_peers):
    """Peers that keep copies learn the standbys' infofile ports from their
    announce replies: a GET_LOCAL whose generation the standbys hold brings
    every peer's copy from them (the leader answers no FetchInfofile), and
    reveals every record once; right after a commit the standbys lack, the
    next GET_LOCAL still reveals every record (a standby behind refuses and
    the leader answers: nothing older than the plan's generation is used)."""
    cluster, fetch, _ = three_fetch_peers
    writer = cluster.client()
    name = "/sf/peers"
    recs = {f"r{i:02d}": os.urandom(300) for i in range(30)}
    with writer.create(name, replication="x2") as f:
        for k, v in recs.items():
            f.queue_put(k, v)
    gen = writer.tracker.open_unlocated(name).generation
    poll_for(lambda: _followed(fetch, name, gen), timeout=30, what="the standbys to follow")
    poll_for(
        lambda: all(
            b"standby(s) serving FetchInfofile: " in (cluster.data_dir / "logs" / f"peer-{i}.log").read_bytes()
            for i in range(3)
        ),
        timeout=15,
        what="the peers to learn the standbys from their announce replies",
    )
    before = _leader_fetches(cluster)
    _reveal_all(writer, name, recs)
    ok, from_standbys = _peer_fetches(cluster)
    assert ok >= 2 and from_standbys == ok, (ok, from_standbys)  # every copy from a standby
    assert _leader_fetches(cluster) == before
    # a commit the standbys have not applied yet (they follow the leader's published log, every few s)
    more = {f"n{i:02d}": os.urandom(200) for i in range(10)}
    with writer.open(name) as w:
        for k, v in more.items():
            w.put(k, v)
        w.flush()
    _reveal_all(writer, name, recs | more)
    writer.close()

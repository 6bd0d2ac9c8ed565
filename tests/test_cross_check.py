"""Every report agrees with every other and with the bytes (issue "One
truth", docs/reliability.md "Copy states"): after each step of a scripted
scenario (peer killed, a copy's bytes flipped and quarantined, peer back,
repair), ``status`` (RPC and CLI), ``/status.json``, the metrics,
``repair --dry-run``, DuckDB ``records.state``, ``ls -r`` and fsspec are
compared, and every record is read: available and under-replicated ones
give their bytes, lost and unreachable ones raise ``RecordUnavailableError``
saying which. Real tracker and peers."""

from __future__ import annotations

from collections import Counter

from checks import cli_json
from conftest import poll_for
from helpers import metric_sample, scrape_metrics, tracker_status

from st_py.errors import RecordUnavailableError

FILES = {"/cc/x2": "x2", "/cc/x1": "x1"}


def _blob(file: str, i: int) -> bytes:
    return f"{file} record {i};".encode() * 200


def _want() -> dict[str, dict[str, bytes]]:
    out = {f: {f"r{i:02d}": _blob(f, i) for i in range(20)} for f in FILES}
    out["/cc/x2"]["big.bin"] = bytes(range(256)) * 300  # a striped object: one name
    return out


def _duckdb_states(c) -> dict[tuple[str, str], str]:
    from st_integrations.duckdb_sql import connect_files

    con = connect_files(c, list(FILES))
    try:
        return {(f, n): s for f, n, s in con.execute("SELECT file, name, state FROM records").fetchall()}
    finally:
        con.close()


def _agree(cluster, c, want) -> dict:
    """Wait until the tracker's count matches DuckDB's (both read the copy
    model; the tracker counts every few seconds), then check every report
    against it and every record against its bytes. Returns the counts."""

    def settled():
        states = _duckdb_states(c)
        bad = Counter(s for s in states.values() if s != "available")
        st = c.status()
        if st.short_age_s < 0 or st.records_short != sum(bad.values()) or st.records_lost != bad["lost"]:
            return None
        return states, st

    states, st = poll_for(settled, timeout=40, what="the tracker's count to match the copy model")
    bad = {k: s for k, s in states.items() if s != "available"}
    # status: RPC, CLI, /status.json, metrics
    cli = cli_json(cluster, "status")
    js = tracker_status(cluster)["copies"]
    m = scrape_metrics(cluster.tracker.metrics_addr)
    for key in ("records_short", "records_lost", "records_waiting", "records_quarantined"):
        assert cli[key] == js[key] == getattr(st, key), (key, cli[key], js[key], getattr(st, key))
    assert metric_sample(m, "st_tracker_records_short_of_copies") == st.records_short
    assert metric_sample(m, "st_tracker_records_lost") == st.records_lost
    assert metric_sample(m, "st_tracker_records_waiting_for_peers") == st.records_waiting
    assert st.files_short == len({f for f, _ in bad})
    # repair --dry-run: the same records, per file, in the same states
    dry = {r["file"]: r for r in cli_json(cluster, "repair", "--dry-run", *FILES, ok=(0, 1))}
    for f in FILES:
        mine = Counter(s for (g, _), s in bad.items() if g == f)
        r = dry[f]
        assert r["lost"] == mine["lost"], (f, r, mine)
        assert r["lost"] + r["waiting"] + r["under_replicated"] == sum(mine.values()), (f, r, mine)
        assert r["complete"] == (not mine), (f, r)
    assert sum(r["waiting"] for r in dry.values()) == st.records_waiting
    # names: ls -r, fsspec and DuckDB list every committed name, lost ones too
    import fsspec

    fs = fsspec.filesystem("storetorrent", tracker=cluster.tracker_addr, skip_instance_cache=True)
    for f, w in want.items():
        rows = cli_json(cluster, "ls", "-r", f)
        assert {r["name"]: r["size"] for r in rows} == {n: len(d) for n, d in w.items()}, f
        assert {r["name"]: r["state"] for r in rows} == {n: s for (g, n), s in states.items() if g == f}
        assert sorted(p.rsplit("/", 1)[1] for p in fs.find(f)) == sorted(w)
        assert sorted(n for g, n in states if g == f) == sorted(w)
    # the bytes: every record reads back, or says why not
    for f, w in want.items():
        with c.open(f) as h:
            for n, d in w.items():
                state = states[(f, n)]
                try:
                    got = h.get(n) if n != "big.bin" else h.open(n).read()
                except RecordUnavailableError as e:
                    assert state != "available", (f, n, e)
                    assert e.lost == (state == "lost"), (f, n, state, e)
                    continue
                assert got == d, (f, n)
                assert state != "lost", (f, n)
    return {"short": st.records_short, "lost": st.records_lost, "waiting": st.records_waiting}


def test_every_report_agrees_after_each_step(make_cluster):
    cluster = make_cluster(4, peer_args=["--verify-interval", "1", "--verify-mbps", "50"])
    c = cluster.client()
    want = _want()
    for f, cls in FILES.items():
        with c.create(f, cls, blocksize=1) as h:
            for n, d in want[f].items():
                if n == "big.bin":
                    h.put_object(n, d, stripe_size=16 << 10)
                else:
                    h.put(n, d)
    assert _agree(cluster, c, want) == {"short": 0, "lost": 0, "waiting": 0}

    # a peer killed: its records wait for it (the tracker's --failed-after, 600 s)
    dead = cluster.kill_peer(3)
    poll_for(lambda: c.status().failed_peers == 1, timeout=20, what="the tracker to fail the peer")
    after_kill = _agree(cluster, c, want)
    assert after_kill["short"] > 0 and after_kill["waiting"] == after_kill["short"] and after_kill["lost"] == 0

    # the only copy of an x1 record on a live peer rots; its verifier quarantines it: lost
    with c.open("/cc/x1") as h:
        victim = next(r for r in h.get_local(allow_unavailable=True) if r.peer != dead)
    with open(victim.path, "r+b") as fh:
        data = bytearray(fh.read())
        data[len(data) // 2] ^= 0xFF
        fh.seek(0)
        fh.write(data)
    poll_for(lambda: c.status().records_lost == 1, timeout=40, what="the quarantined copy to count as lost")
    after_rot = _agree(cluster, c, want)
    assert after_rot["lost"] == 1 and after_rot["short"] == after_kill["short"] + 1

    # the peer returns: only the lost record is left
    cluster.start_peer(3)
    poll_for(lambda: c.status().failed_peers == 0, timeout=30, what="the peer to return")
    assert _agree(cluster, c, want) == {"short": 1, "lost": 1, "waiting": 0}

    # repair cannot invent it: it says so, and the reports still agree
    (r,) = cli_json(cluster, "repair", "/cc/x1", ok=(1,))
    assert r["lost"] == 1 and r["complete"] is False, r
    assert _agree(cluster, c, want) == {"short": 1, "lost": 1, "waiting": 0}

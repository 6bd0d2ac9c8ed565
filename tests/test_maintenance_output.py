"""What repair, drain and spread tell a person (issue 38, item 13):
repair's table shows ``waiting_until`` as a local time and how far it is
(JSON keeps the unix time), and after a drain or a spread the output says
how many bytes of old copies wait for the peers' scrubbers and from when
they go (``--scrub-age``); ``status`` says so of a retired peer."""

from __future__ import annotations

import json
import re
import time

from conftest import poll_for
from helpers import cli_stdout, run_cli


def _put(c, name: str, n: int) -> None:
    with c.create(name, "x2", blocksize=3) as f:
        for i in range(n):
            f.queue_put(f"r{i:04d}", (b"%d," % i) * 100)


def test_repair_shows_when_waiting_records_count_as_lost(make_cluster):
    cluster = make_cluster(3)
    c = cluster.client()
    _put(c, "/mo/wait", 30)
    cluster.kill_peer(1)
    poll_for(lambda: c.status().alive_peers == 2, timeout=30, what="the tracker to fail the killed peer")

    rows = json.loads(run_cli(cluster, "repair", "--failed-after", "600", "--format", "json").stdout)
    until = rows[0]["waiting_until"]
    assert rows[0]["waiting"] > 0 and abs(until - (time.time() + 600)) < 60  # a unix time in JSON

    out = run_cli(cluster, "repair", "--failed-after", "600")
    assert out.returncode == 1  # records waiting
    assert not re.search(r"\b1\d{9}(\.\d)?\b", out.stdout), out.stdout  # no raw unix time on screen
    assert time.strftime("%H:%M", time.localtime(until)) in out.stdout and "(in 9 min)" in out.stdout, out.stdout
    assert "count as lost at " in out.stdout and "--failed-after 600 s" in out.stdout


def test_drain_and_spread_say_what_waits_for_the_scrubbers(make_cluster):
    cluster = make_cluster(3)
    c = cluster.client()
    _put(c, "/mo/a", 60)
    cluster.add_peer()

    out = cli_stdout(cluster, "rebalance", "--spread", "--all", "--format", "json")
    spread = json.loads(out)
    assert spread["copies_moved"] > 0 and spread["old_copies_bytes"] == spread["bytes_moved"]
    assert abs(spread["old_copies_freed_from"] - (time.time() + 3600)) < 60 and spread["scrub_age_s"] == 3600

    victim = cluster.peer_addrs[0]
    out = cli_stdout(cluster, "drain", victim, "--format", "json")
    drained = json.loads(out)
    assert drained["bytes_moved"] > 0 and drained["old_copies_bytes"] == drained["bytes_moved"]

    cluster.add_peer()  # room for a table-format spread to move something
    out = cli_stdout(cluster, "rebalance", "--spread", "--all")
    assert "old copies: " in out and "--scrub-age after the move (default 1 h: from " in out, out
    assert "used space falls only then" in out

    assert "(in 1 h)" in out and "default 1 d)" in out

    # the retired peer still uses space until its scrubber runs: status says why
    out = cli_stdout(cluster, "drain", victim)  # retired already: nothing to move, no note
    assert "old copies:" not in out
    line = next(x for x in cli_stdout(cluster, "status").splitlines() if x.startswith(f"peer {victim} retired:"))
    assert "copies moved off it" in line and "--scrub-age after the move (default 1 h)" in line, line
    assert "remove its data directory" in line

"""One count of live peers in service (issue 38, item 9): after a drain,
``status`` counted the retired peer as alive ("4 alive") while a put said
"3 are alive"."""

from __future__ import annotations

import json

import pytest
from helpers import cli_stdout, tracker_status

from st_py.errors import NotEnoughPeersError


def test_status_and_a_refused_create_count_the_same_peers_in_service(cluster):
    c = cluster.client()
    with c.create("/pc/a", "x2") as f:
        f.put("r", b"data")
    victim = cluster.peer_addrs[3]
    assert "retired" in cli_stdout(cluster, "drain", victim)

    said = "3 peers in service, 1 retired, 0 failed"
    assert cli_stdout(cluster, "status").splitlines()[0].startswith(said + ", ")
    st = json.loads(cli_stdout(cluster, "status", "--format", "json"))
    assert (st["in_service_peers"], st["retired_peers"], st["alive_peers"]) == (3, 1, 4)
    assert tracker_status(cluster)["totals"]["peers_summary"] == said
    with pytest.raises(NotEnoughPeersError) as refused:
        c.create("/pc/b", "x4")
    assert "needs 4 live peers in service" in str(refused.value) and said in str(refused.value)

    cli_stdout(cluster, "drain", victim, "--cancel")  # back in service: the same count everywhere
    assert tracker_status(cluster)["totals"]["peers_summary"] == "4 peers in service, 0 failed"
    c.create("/pc/b", "x4").close()

"""Prometheus metrics of the peers (docs/operations.md, "Metrics"): every
peer of a local cluster serves /metrics, the official parser reads it, and
the counters follow what clients did."""

import urllib.error
import urllib.request

import pytest
from helpers import metric_value, scrape_metrics

from st_py.errors import RecordNotFoundError


def test_peer_metrics_follow_requests(cluster):
    c = cluster.client()
    with c.create("/metrics/a", "x1") as f:
        for i in range(20):
            f.put(f"r{i}", b"x" * 1000)
    f = c.open("/metrics/a")
    for i in range(20):
        assert f.get(f"r{i}") == b"x" * 1000
    with pytest.raises(RecordNotFoundError):
        f.delete("never-stored")  # every peer answers NOT_FOUND
    f.close()
    pages = [scrape_metrics(p.metrics_addr) for p in cluster.peers]
    total = lambda name, **kw: sum(metric_value(m, name, **kw) for m in pages)  # noqa: E731
    assert total("st_peer_requests_total", type="PUT") >= 20
    assert total("st_peer_requests_total", type="GET") >= 20
    assert total("st_peer_request_seconds_count", type="GET") >= 20
    assert total("st_peer_request_seconds_bucket", type="GET", le="+Inf") >= 20
    assert total("st_peer_errors_total", code="NOT_FOUND") >= len(cluster.peers)
    assert total("st_peer_records") == 20
    assert total("st_peer_used_bytes") == 20 * 1000
    assert total("st_peer_received_bytes_total") > 20 * 1000
    assert total("st_peer_sent_bytes_total") > 20 * 1000
    assert all(metric_value(m, "st_peer_filesystem_free_bytes") > 0 for m in pages)
    ids = {k for m in pages for k in m if k[0] == "st_peer_info"}
    assert len(ids) == len(cluster.peers)


def test_peer_metrics_endpoint_answers_only_metrics(cluster):
    addr = cluster.peers[0].metrics_addr
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"http://{addr}/nope", timeout=10)
    assert e.value.code == 404
    e.value.close()  # an HTTPError holds the response (and its socket) open
    with urllib.request.urlopen(f"http://{addr}/", timeout=10) as r:
        assert b"/metrics" in r.read()

"""The S3 endpoint's Prometheus metrics (``storetorrent s3 --metrics-port``):
its read counters (:meth:`.app.S3App.read_stats`) on a port of their own,
so no bucket name is taken from S3's namespace.

| metric | type | meaning |
|---|---|---|
| ``st_s3_stripes_total`` | counter | stripes fetched by GETs of striped objects |
| ``st_s3_stripes_in_flight_max`` | gauge | the most stripe GETs one GET had sent and not yet answered at once |
| ``st_s3_stripes_held_max`` | gauge | the most stripes one GET held at once |
| ``st_s3_local_reads_total`` | counter | copies read from a local peer's disk (``--peer-data``) |
| ``st_s3_local_read_bytes_total`` | counter | their bytes |
| ``st_s3_local_read_fallbacks_total`` | counter | local copies missing or bad, read by GET instead |

Thread safety: the collector reads :meth:`.app.S3App.read_stats`, which any
thread may call; the HTTP server runs in a daemon thread of its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from .app import S3App

_COUNTERS = (
    ("st_s3_stripes", "stripes", "Stripes fetched by GETs of striped objects."),
    ("st_s3_local_reads", "local_reads", "Copies read from a local peer's data directory (--peer-data)."),
    ("st_s3_local_read_bytes", "local_bytes", "Bytes of the copies read from a local peer's data directory."),
    ("st_s3_local_read_fallbacks", "local_fallbacks", "Local copies missing or bad, read by GET instead."),
    ("st_s3_quick_gets", "quick_gets", "GETs answered on the event loop, without a worker thread (docs/s3.md)."),
)
_GAUGES = (
    ("st_s3_stripes_in_flight_max", "max_stripes_in_flight", "Most stripe GETs one GET had unanswered at once."),
    ("st_s3_stripes_held_max", "max_stripes_held", "Most stripes one GET held at once."),
)


class ReadCollector(Collector):
    """The endpoint's read counters, collected at each scrape."""

    def __init__(self, app: S3App):
        self.app = app

    def collect(self) -> Iterator[Metric]:
        """One family per counter of :meth:`.app.S3App.read_stats`."""
        st = self.app.read_stats()
        for name, key, text in _COUNTERS:
            yield CounterMetricFamily(name, text, value=st[key])
        for name, key, text in _GAUGES:
            yield GaugeMetricFamily(name, text, value=st[key])


def serve_metrics(app: S3App, host: str, port: int) -> tuple[Any, int]:
    """Serve ``app``'s metrics at ``http://HOST:PORT/metrics`` (port 0: a
    free one) from a daemon thread: ``(server, port)``; ``server.shutdown()``
    stops it.

    Raises
    ------
    OSError
        The port cannot be bound.
    """
    registry = CollectorRegistry()
    registry.register(ReadCollector(app))
    server, _ = start_http_server(port, addr=host, registry=registry)
    return server, int(server.server_port)


__all__ = ["ReadCollector", "serve_metrics"]

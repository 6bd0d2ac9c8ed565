"""The tracker's Prometheus metrics (docs/operations.md, "Metrics").

One :class:`TrackerMetrics` per tracker, with its own ``CollectorRegistry``
(several trackers in one process do not share counters). Per-RPC counters and
latencies come from :class:`RpcMetrics`, a gRPC server interceptor; the rest
is read at scrape time from the tracker's own state (its peer registry,
reservations, group committers), so the tracker's logic knows nothing of
Prometheus.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import grpc
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .health import space_totals

if TYPE_CHECKING:
    from .service import TrackerService

# Upper bounds (seconds) of the RPC latency buckets, as the peers' (st_core/src/metrics.h) and beyond.
RPC_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class RpcMetrics(grpc.aio.ServerInterceptor):
    """Counts every RPC by method and status code and times it by method.

    A handler that aborts (``context.abort``) ends with the code it gave;
    one that raises ends UNKNOWN, one cancelled CANCELLED. RPCs refused
    with RESOURCE_EXHAUSTED (a user's or a file's quota) are also counted as
    quota refusals."""

    def __init__(self, registry: CollectorRegistry):
        self.rpcs = Counter(
            "st_tracker_rpcs", "RPCs served, by method and gRPC status code", ["method", "code"], registry=registry
        )
        self.seconds = Histogram(
            "st_tracker_rpc_seconds",
            "RPC latency, from the handler's start to its reply",
            ["method"],
            buckets=RPC_BUCKETS,
            registry=registry,
        )
        self.in_flight = Gauge("st_tracker_rpcs_in_flight", "RPCs being handled", registry=registry)
        self.quota_refusals = Counter(
            "st_tracker_quota_refusals",
            "RPCs refused because a user's or a file's quota would be exceeded",
            ["method"],
            registry=registry,
        )

    async def intercept_service(self, continuation, handler_call_details):
        """grpc.aio interceptor hook: wraps each unary-unary handler to count its
        RPCs by status code, time them and count quota refusals; streaming and
        unknown methods pass through unobserved."""
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:  # unknown method (UNIMPLEMENTED), or streaming
            return handler
        method = handler_call_details.method.rsplit("/", 1)[-1]
        behavior = handler.unary_unary

        async def observed(request, context):
            start = time.perf_counter()
            counted = False

            def count(code: grpc.StatusCode) -> None:
                nonlocal counted
                if counted:
                    return
                counted = True
                self.in_flight.dec()
                self.seconds.labels(method).observe(time.perf_counter() - start)
                self.rpcs.labels(method, code.name).inc()
                if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    self.quota_refusals.labels(method).inc()

            self.in_flight.inc()
            try:
                reply = await behavior(request, _CountingContext(context, count))
                count(_code_of(context) or grpc.StatusCode.OK)
                return reply
            except BaseException as e:
                count(_code_of(context) or (grpc.StatusCode.CANCELLED if _cancelled(e) else grpc.StatusCode.UNKNOWN))
                raise

        return grpc.unary_unary_rpc_method_handler(
            observed, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
        )


class _CountingContext:
    """The servicer context a handler sees: ``abort`` counts the RPC before
    grpc.aio sends its status (``abort`` sends, then raises), so a client
    that has its error already finds it in ``/metrics``. Everything else is
    the real context's."""

    __slots__ = ("_context", "_count")

    def __init__(self, context, count):
        self._context = context
        self._count = count

    async def abort(self, code, details="", trailing_metadata=()):
        self._count(code if isinstance(code, grpc.StatusCode) else grpc.StatusCode.UNKNOWN)
        await self._context.abort(code, details, trailing_metadata)

    def __getattr__(self, name):
        return getattr(self._context, name)


def _code_of(context) -> grpc.StatusCode | None:
    """The status code a handler set (``abort``, ``set_code``), if any."""
    code = context.code()
    if code is None or isinstance(code, grpc.StatusCode):
        return code
    for c in grpc.StatusCode:  # grpc.aio may keep the C core's integer
        if c.value[0] == code:
            return c
    return None


def _cancelled(e: BaseException) -> bool:
    return isinstance(e, asyncio.CancelledError)


class StateCollector(Collector):
    """Metrics read from the tracker's state at scrape time (on its event
    loop, where that state changes)."""

    def __init__(self, service: TrackerService, started: float, version: str):
        self.service = service
        self.started = started
        self.version = version

    def collect(self) -> Iterator[Metric]:
        """prometheus_client hook: the tracker's gauges (files, peers, space, copies, repair) now."""
        s = self.service
        reg = s.registry
        reg.sweep()
        info = GaugeMetricFamily("st_tracker_info", "constant 1: the tracker's version", labels=["version"])
        info.add_metric([self.version], 1)
        yield info
        yield GaugeMetricFamily(
            "st_tracker_start_time_seconds", "when the tracker started (Unix time)", value=self.started
        )
        yield GaugeMetricFamily("st_tracker_files", "files in the namespace", value=s.state.file_count())
        held = s.reservations.on_peers()
        peers = list(reg.peers.values())
        live = [p for p in peers if reg.alive(p)]
        by_state = GaugeMetricFamily(
            "st_tracker_peers",
            "peers known, by state (live: announced within the liveness window and not reported failed since)",
            labels=["state"],
        )
        by_state.add_metric(["live"], len(live))
        by_state.add_metric(["failed"], len(peers) - len(live))
        yield by_state
        space = space_totals(reg, peers)
        yield GaugeMetricFamily(
            "st_tracker_capacity_bytes",
            "capacity the live peers announced, each filesystem counted once",
            value=space.capacity_bytes,
        )
        yield GaugeMetricFamily(
            "st_tracker_used_bytes", "bytes the live peers announced they hold", value=space.used_bytes
        )
        yield GaugeMetricFamily(
            "st_tracker_free_bytes",
            "free bytes of the live peers (as announced, less "
            "commits since), each filesystem counted once, before reservations",
            value=space.free_bytes,
        )
        yield GaugeMetricFamily(
            "st_tracker_filesystems", "distinct filesystems the live peers store on", value=space.filesystems
        )
        h = s.copy_health
        if h.at:  # counted at least once (every few seconds, not per scrape)
            yield GaugeMetricFamily(
                "st_tracker_records_short_of_copies",
                "committed records (names) with fewer than F live copies (st_py/core/copy_health.py)",
                value=h.records_short,
            )
            yield GaugeMetricFamily(
                "st_tracker_files_short_of_copies", "files with records short of copies", value=h.files_short
            )
            yield GaugeMetricFamily(
                "st_tracker_records_pending_copies",
                "records short of copies with a copy pending (an async copy not stored yet)",
                value=h.records_pending,
            )
            yield GaugeMetricFamily(
                "st_tracker_records_quarantined_copies",
                "records short of copies with a copy a peer's verifier quarantined",
                value=h.records_quarantined,
            )
            yield GaugeMetricFamily(
                "st_tracker_records_lost",
                "records with no good copy left (no live or suspect copy)",
                value=h.records_lost,
            )
            yield GaugeMetricFamily(
                "st_tracker_records_waiting_for_peers",
                "records short of copies only on peers failed less than --failed-after",
                value=h.records_waiting,
            )
            yield GaugeMetricFamily(
                "st_tracker_versions_short_of_copies",
                "past versions kept for snapshots with fewer than F copies stored on live peers",
                value=h.versions_short,
            )
            yield GaugeMetricFamily(
                "st_tracker_versions_lost",
                "past versions kept for snapshots with no good copy left",
                value=h.versions_lost,
            )
            yield GaugeMetricFamily(
                "st_tracker_retained_bytes",
                "bytes (all copies) of past versions snapshots hold (docs/snapshots.md)",
                value=h.retained_bytes,
            )
            yield GaugeMetricFamily("st_tracker_snapshots", "snapshots over every file", value=h.snapshots)
            yield GaugeMetricFamily(
                "st_tracker_copies_counted_timestamp_seconds", "when those counts were made (Unix time)", value=h.at
            )
        if s.repair_progress is not None:
            yield GaugeMetricFamily(
                "st_tracker_repair_report_age_seconds",
                "seconds since the repair service's last progress report",
                value=s.repair_progress.age(),
            )
        yield GaugeMetricFamily(
            "st_tracker_reserved_bytes", "bytes held on peers by space reservations", value=sum(held.values())
        )
        yield GaugeMetricFamily(
            "st_tracker_reservations", "files holding a space reservation", value=len(s.reservations.by_file)
        )
        yield GaugeMetricFamily(
            "st_tracker_writer_leases", "files whose writer lease (replacing records) is held", value=s.leases.held()
        )
        alive = GaugeMetricFamily(
            "st_tracker_peer_alive", "1 if the peer is live, 0 if failed", labels=["peer_id", "addr"]
        )
        age = GaugeMetricFamily(
            "st_tracker_peer_last_announce_age_seconds",
            "seconds since the peer's last announce",
            labels=["peer_id", "addr"],
        )
        restarts = CounterMetricFamily(
            "st_tracker_peer_restarts",
            "process restarts of the peer the tracker has seen (a new start time announced)",
            labels=["peer_id", "addr"],
        )
        for p in sorted(peers, key=lambda p: p.addr):
            alive.add_metric([p.peer_id, p.addr], 1 if reg.alive(p) else 0)
            age.add_metric([p.peer_id, p.addr], reg.age(p))
            restarts.add_metric([p.peer_id, p.addr], p.restarts)
        yield alive
        yield age
        yield restarts
        yield CounterMetricFamily("st_tracker_announces", "peer announces received", value=reg.announces)
        yield CounterMetricFamily(
            "st_tracker_failure_reports",
            "ReportFailure RPCs (a client could not reach a peer)",
            value=reg.failure_reports,
        )
        failures = CounterMetricFamily(
            "st_tracker_peer_failures", "peers that went from live to failed, by cause", labels=["cause"]
        )
        for cause in ("reported", "missed_announces"):
            failures.add_metric([cause], reg.failures.get(cause, 0))
        yield failures
        bad = CounterMetricFamily(
            "st_tracker_bad_copies",
            "copies found not to match their CRC-32C, by who "
            "found them (peer: its verifier quarantined it; client: a checked read)",
            labels=["source"],
        )
        for source in ("peer", "client"):
            bad.add_metric([source], reg.bad_copies.get(source, 0))
        yield bad
        cs = s.commit_stats
        yield CounterMetricFamily(
            "st_tracker_commit_transactions",
            "group-commit transactions run (SQLite transactions on infofiles)",
            value=cs.transactions,
        )
        yield CounterMetricFamily(
            "st_tracker_commit_requests",
            "Commit requests those transactions took (requests / transactions: the group-commit factor)",
            value=cs.requests,
        )
        yield CounterMetricFamily("st_tracker_committed_records", "records newly committed", value=cs.records)
        lv = s.oplog.view()  # the metadata log (docs/metadata-log.md)
        li = GaugeMetricFamily(
            "st_tracker_log_info",
            "constant 1: where the metadata log is, and its identity",
            labels=["backend", "log_id"],
        )
        li.add_metric([lv["backend"], lv["log_id"]], 1)
        yield li
        yield GaugeMetricFamily("st_tracker_log_term", "this tracker's term in the metadata log", value=lv["term"])
        yield GaugeMetricFamily("st_tracker_log_last_index", "the last metadata log entry", value=lv["last_index"])
        yield GaugeMetricFamily(
            "st_tracker_log_applied_index",
            "every metadata log entry at or below this index is applied (or failed)",
            value=lv["applied_index"],
        )
        yield CounterMetricFamily(
            "st_tracker_log_appends", "metadata log append transactions (group appends)", value=lv["appends"]
        )
        yield CounterMetricFamily("st_tracker_log_entries", "metadata log entries appended", value=lv["entries"])
        r = lv.get("replicas")
        if r:  # with etcd: the replicated trackers (st_py/tracker/log/replicas.py)
            yield GaugeMetricFamily(
                "st_tracker_replicas", "trackers of this cluster running (leader, standbys)", value=len(r["trackers"])
            )
            members = GaugeMetricFamily(
                "st_tracker_etcd_member_healthy", "1 if the etcd member answered a status request", labels=["endpoint"]
            )
            for m in r["members"]:
                members.add_metric([m["endpoint"]], 1 if m["healthy"] else 0)
            yield members
            yield GaugeMetricFamily(
                "st_tracker_log_elections", "elections kept in etcd (the last 20)", value=len(r["failovers"])
            )


class TrackerMetrics:
    """The tracker's registry: RPC metrics (the interceptor), its state, and
    the process's (``process_*``: CPU, memory, open descriptors)."""

    def __init__(self, service: TrackerService, version: str, started: float | None = None):
        self.registry = CollectorRegistry()
        self.rpc = RpcMetrics(self.registry)
        self.registry.register(StateCollector(service, time.time() if started is None else started, version))
        ProcessCollector(registry=self.registry)

    def render(self) -> bytes:
        """The Prometheus text format (version 0.0.4)."""
        return generate_latest(self.registry)

"""Starting and stopping the tracker (grpc.aio)."""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import grpc
from prometheus_client import disable_created_metrics

from st_py._proto import tracker_pb2_grpc as pb_grpc
from st_py.core import gc_tuning, logs
from st_py.core.capability import CapabilityError, load_key
from st_py.core.copy_health import DEFAULT_FAILED_AFTER_S
from st_py.wire.tls import SERVER_OPTIONS, server_credentials

from .access import AccessError, Users
from .apply.backends import EtcdBackend
from .apply.oplog import KEEP_S, OpLog
from .bootstrap import copy_namespace
from .config import OptionsParser, apply_config
from .file_tracker import INTERNAL_KEY_ENV, run_file_tracker
from .file_trackers import FileTrackers, channel_to, internal_credentials
from .health import ShortCopies, keep_counting
from .httpd import StatusHttp
from .infofile_writer import DEFAULT_HISTORY_AGE_S, recover
from .leases import MAX_TTL_S
from .lock import TrackerLock, TrackerLockedError
from .log.errors import LogError, StandbyBehindError
from .metrics import TrackerMetrics
from .peers import PeerRegistry
from .rpc.standby_fetch import start_fetch_port
from .service import TrackerService
from .state import TrackerState
from .web import render_html, snapshot

log = logging.getLogger("st.tracker")


@dataclass
class FileTrackerOptions:
    """How a master runs its per-file trackers (paper 3.5;
    st_py/tracker/file_trackers.py)."""

    n: int = 0  # per-file tracker processes
    argv: list[str] = field(default_factory=list)  # their options shared with the master (root, key, users, TLS)
    advertise_host: str = ""  # where clients reach them ("" : the master's --host)
    base_port: int | None = None  # tracker i on base_port + i - 1; 0: free ports; None: the master's port + 1
    creds: object = None  # grpc.ChannelCredentials for the calls between trackers (TLS)


async def serve(
    root: Path,
    state_dir: Path,
    host: str = "127.0.0.1",
    port: int = 0,
    announce_interval: float = 2.0,
    misses: int = 3,
    quota_bytes: int | None = None,
    key: bytes | None = None,
    capability_ttl_s: float = 3600.0,
    users: Users | None = None,
    tls: tuple[str, str, str | None] | None = None,
    reservation_lease_s: float = 900.0,
    metrics_port: int | None = None,
    file_trackers: FileTrackerOptions | None = None,
    failed_after_s: float = DEFAULT_FAILED_AFTER_S,
    history_age_s: float = DEFAULT_HISTORY_AGE_S,
    log_backend: EtcdBackend | None = None,
    log_keep_s: float = KEEP_S,
    fetch_port: int = 0,
) -> None:
    """Run the tracker until SIGINT/SIGTERM.

    Prints ``listening on HOST:PORT`` on stdout once it accepts RPCs (port 0
    picks a free port). Stops at once on a signal (paper 5). With
    ``metrics_port`` it serves Prometheus metrics at /metrics and its status
    page at / and /status.json on that port (0: a free one), and prints
    ``metrics on HOST:PORT`` before ``listening on``. With
    ``file_trackers.n`` > 0 it starts that many per-file trackers before
    it says it listens (paper 3.5), and stops them when it stops. With
    ``log_backend`` its metadata log is in etcd: it is elected first, and
    exits (status 75) when its term ends, so a supervisor starts it again to
    campaign (docs/metadata-log.md); a standby with a namespace of its own
    (``log_backend.follows``) serves FetchInfofile on ``fetch_port`` (0: a
    free one, -1: none) until it is elected, and prints ``fetch on HOST:PORT``
    (st_py/tracker/rpc/standby_fetch.py).
    """
    started = time.time()
    # one tracker per namespace, never nested: before touching anything (it makes the root);
    # with the log in etcd, trackers may share a namespace (a leader and its standbys): the
    # election decides which one writes, and each locks only its own state folder
    lock = TrackerLock([state_dir]) if log_backend is not None else TrackerLock([root, state_dir], nest_root=root)
    try:
        await _serve(
            lock,
            started,
            root,
            state_dir,
            host,
            port,
            announce_interval,
            misses,
            quota_bytes,
            key,
            capability_ttl_s,
            users,
            tls,
            reservation_lease_s,
            metrics_port,
            file_trackers or FileTrackerOptions(),
            failed_after_s,
            history_age_s,
            log_backend,
            log_keep_s,
            fetch_port,
        )
    finally:
        lock.release()


async def _serve(
    lock: TrackerLock,
    started: float,
    root: Path,
    state_dir: Path,
    host: str,
    port: int,
    announce_interval: float,
    misses: int,
    quota_bytes: int | None,
    key: bytes | None,
    capability_ttl_s: float,
    users: Users | None,
    tls: tuple[str, str, str | None] | None,
    reservation_lease_s: float,
    metrics_port: int | None,
    ft: FileTrackerOptions,
    failed_after_s: float = DEFAULT_FAILED_AFTER_S,
    history_age_s: float = DEFAULT_HISTORY_AGE_S,
    log_backend: EtcdBackend | None = None,
    log_keep_s: float = KEEP_S,
    fetch_port: int = 0,
) -> None:
    if log_backend is None or log_backend.follows:  # else only once elected: it shares the leader's namespace
        _recover_namespace(root)
    state = TrackerState(state_dir)
    registry = PeerRegistry(state, announce_interval, misses)
    service = TrackerService(
        root.resolve(), state, registry, quota_bytes, key, capability_ttl_s, users, reservation_lease_s
    )
    service.mutual_tls = bool(tls and tls[2])
    service.failed_after_s = failed_after_s  # what repair and the copy counts take as lost (copy_health)
    service.history_age_s = history_age_s  # history no snapshot holds is kept this long (docs/snapshots.md)
    service.shards = ft.n + 1  # files hash over the master and its per-file trackers (shards.py)
    if key is None:
        log.warning(
            "no --key-file: files are opened without capabilities; peers started without "
            "--key-file do not check them (development mode, docs/capabilities.md)"
        )
    version = _version()
    metrics = TrackerMetrics(service, version, started)
    server = grpc.aio.server(
        options=SERVER_OPTIONS,
        interceptors=[metrics.rpc],
    )
    pb_grpc.add_TrackerServicer_to_server(service, server)
    if tls:  # (cert, key, client CA or None): docs/security.md
        bound = server.add_secure_port(f"{host}:{port}", server_credentials(*tls))
    else:
        bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise SystemExit(f"tracker: cannot listen on {host}:{port}")
    if log_backend is not None:
        log_backend.addr = log_backend.addr or f"{advertised_host(host)}:{bound}"  # what followers will name
        service.oplog = OpLog(log_backend)
        service.oplog.checkpoint = service.tracker_ops.checkpoint  # kept in etcd before it compacts
        if log_backend.follows:  # behind the log's first entry: the namespace copied from a live replica
            own, creds = log_backend.addr, ft.creds

            def copy(behind: StandbyBehindError) -> Awaitable[int]:
                return copy_namespace(service, own, key, lambda addr: channel_to(addr, creds), behind)

            service.copy_namespace = copy
    service.oplog.keep_s = service.tracker_ops.keep_s = log_keep_s
    fetch_server = None  # a following standby's infofile port, closed once elected
    if log_backend is not None and log_backend.follows and fetch_port >= 0:
        fetch_server, fport = await start_fetch_port(
            service, host, fetch_port, server_credentials(*tls) if tls else None
        )
        log_backend.fetch_addr = f"{advertised_host(host)}:{fport}"  # shown to clients in the leader's Status
        log.info("serving FetchInfofile on %s:%d while a standby", host, fport)
        print(f"fetch on {host}:{fport}", flush=True)
    if log_backend is not None:
        log.info("campaigning in %s as %s: a standby until elected", log_backend.describe, log_backend.addr)
        print(f"campaigning as {log_backend.addr}", flush=True)  # a supervisor's sign of life (st_py.deploy)
    try:
        if log_backend is not None and log_backend.follows:
            term = await _follow_until_elected(service)
        else:
            term = await service.oplog.start()
    except (LogError, TimeoutError) as e:
        raise SystemExit(f"tracker: metadata log ({service.oplog.backend.describe}): {e}") from None
    finally:
        if fetch_server is not None:  # elected (its tracker address serves it all now), or stopping
            await fetch_server.stop(grace=0.5)
    log.info("metadata log %s, term %d", service.oplog.backend.describe, term)
    if log_backend is not None:  # elected: no other tracker writes this namespace now (its term is over)
        await asyncio.to_thread(_recover_namespace, root)
        service.registry.presume_alive()  # the peers it knew heard from no one here while it waited
    await service.load_checkpoint()  # with etcd: the state the last leader's checkpoint kept
    await service.replay_log()  # what the infofiles miss of the log, before anything is served
    service.serving_since = time.monotonic()
    await server.start()
    web = None
    if metrics_port is not None:
        web = StatusHttp(metrics.render, lambda: snapshot(service, started, version, f"{host}:{bound}"), render_html)
        try:
            mport = await web.start(host, metrics_port)
        except OSError as e:
            await server.stop(grace=0)
            raise SystemExit(f"tracker: cannot serve metrics on {host}:{metrics_port}: {e}") from None
        log.info("Prometheus metrics at http://%s:%d/metrics, status page at http://%s:%d/", host, mport, host, mport)
        print(f"metrics on {host}:{mport}", flush=True)  # before "listening on", as st-peer
    trackers = None
    if ft.n:
        try:
            trackers = await _start_file_trackers(service, ft, host, port, bound, key)
        except BaseException:
            await server.stop(grace=0)
            raise
    lock.serving(f"{host}:{bound}")
    print(f"listening on {host}:{bound}", flush=True)
    log.info("tracker %s serving %s on %s:%d", version, root, host, bound)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    sweeper = asyncio.create_task(_sweep(registry, min(announce_interval, 1.0)))
    counter = asyncio.create_task(keep_counting(service, ShortCopies(root.resolve())))
    lapses = asyncio.create_task(service.end_lapsed_reservations())
    ended = asyncio.create_task(_term_ended(service.oplog))
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait({ended, stopped}, return_when=asyncio.FIRST_COMPLETED)
    term_over = ended.done() and not stopped.done()
    ended.cancel()
    stopped.cancel()
    sweeper.cancel()
    counter.cancel()
    lapses.cancel()
    if trackers is not None:
        await trackers.stop()
    if web is not None:
        await web.stop()
    await server.stop(grace=0.2)
    service.close()
    await service.oplog.aclose()
    state.close()
    if term_over:
        raise SystemExit(75)  # EX_TEMPFAIL: start again to campaign


async def _follow_until_elected(service: TrackerService) -> int:
    """A standby with a namespace of its own: apply the log to it as it
    grows (OpLog.follow) while it campaigns; returns the term once elected
    (the rest of the log is replayed after, as by any tracker elected).
    Raises what following raises (StandbyBehindError)."""
    await service.oplog.connect()
    follower = asyncio.create_task(service.follow_log())
    campaign = asyncio.create_task(service.oplog.start())
    await asyncio.wait({follower, campaign}, return_when=asyncio.FIRST_COMPLETED)
    if follower.done() and not campaign.done():
        campaign.cancel()
        follower.result()  # raises why it stopped
    follower.cancel()
    try:
        await follower
    except asyncio.CancelledError:
        pass
    log.info("elected after following the metadata log through entry %d", service.oplog.followed)
    return campaign.result()


def _recover_namespace(root: Path) -> None:
    """Roll back the infofile transactions a crash left and remove
    half-made infofiles (infofile_writer.recover): before serving, and with
    etcd only once elected, never while another tracker writes there."""
    rolled, removed = recover(root)
    if rolled or removed:
        log.warning(
            "recovered after a crash: %d infofile transactions rolled back, %d half-created infofiles removed",
            rolled,
            removed,
        )


async def _term_ended(oplog: OpLog) -> None:
    """Return when this tracker's term ends: its election lease lapsed, or
    an append was refused (a newer term). It must then stop answering writes."""
    waits = [asyncio.create_task(oplog.fenced.wait())]
    lost = getattr(oplog.backend, "lost", None)
    if lost is not None:
        waits.append(asyncio.create_task(lost.wait()))
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
    log.error("term %d ended (another tracker leads, or etcd could not renew the lease): stopping", oplog.term)


def _log_backend(a) -> EtcdBackend | None:
    """The replicated log the flags ask for (None: the local one)."""
    if a.log_keep < MAX_TTL_S and not a.etcd:
        raise SystemExit(
            f"tracker: --log-keep {a.log_keep:g} is shorter than the longest writer lease ({MAX_TTL_S:g} s), "
            "which the local log keeps only in its entries: give at least that, or use --etcd"
        )
    if not a.etcd:
        if a.cluster_id or a.init_cluster or a.own_namespace:
            raise SystemExit("tracker: --cluster-id, --init-cluster and --own-namespace go with --etcd")
        return None
    if not a.cluster_id:
        raise SystemExit("tracker: --etcd needs --cluster-id NAME (the cluster's name in etcd)")
    if a.file_trackers and a.own_namespace:
        raise SystemExit(
            "tracker: --file-trackers with --own-namespace is not built (a standby follows the master's log, "
            "not its per-file trackers' logs: docs/metadata-log.md, 'Per-file trackers'); run the trackers "
            "over one shared namespace, or without per-file trackers"
        )
    endpoints = [e.strip() for e in a.etcd.split(",") if e.strip()]
    # a standby waits to be elected as long as it takes (the leader's lease must run out)
    backend = EtcdBackend(endpoints, a.cluster_id, "", create=a.init_cluster, campaign_s=None)
    backend.follows = a.own_namespace
    return backend


def advertised_host(host: str, advertise: str = "") -> str:
    """The host clients reach this tracker's per-file trackers at:
    ``advertise``, else ``host`` unless it is a wildcard (0.0.0.0, ::, ""),
    else this machine's name."""
    if advertise:
        return advertise
    return host if host not in ("", "0.0.0.0", "::", "[::]") else socket.getfqdn()


async def _start_file_trackers(
    service: TrackerService, ft: FileTrackerOptions, host: str, port: int, bound: int, key: bytes | None
) -> FileTrackers:
    """Start the master's per-file trackers and wait until each serves."""
    adv = advertised_host(host, ft.advertise_host)
    master = f"{adv}:{bound}"
    env = dict(os.environ)
    if key is None:  # their calls to each other are signed all the same (routing.new_internal_key)
        env[INTERNAL_KEY_ENV] = service.internal_key.hex()
    base = ft.base_port if ft.base_port is not None else (port + 1 if port else 0)

    def argv(shard: int, p: int) -> list[str]:
        return [
            sys.executable,
            "-m",
            "st_py.tracker",
            *ft.argv,
            "--shard",
            str(shard),
            "--shards",
            str(ft.n + 1),
            "--master",
            master,
            "--master-pid",
            str(os.getpid()),
            "--master-epoch",
            service.epoch,
            "--master-term",  # with --etcd: the term its log's appends are fenced by
            str(service.oplog.term),
            "--port",
            str(p),
        ]

    trackers = FileTrackers(
        ft.n,
        argv,
        adv,
        base,
        ft.creds,
        on_death=service.shard_died,  # type: ignore[arg-type]
        env=env,
    )
    try:
        await trackers.start()
    except BaseException:
        await trackers.stop()
        raise
    service.file_trackers = trackers
    return trackers


async def _sweep(registry: PeerRegistry, every_s: float) -> None:
    """Notice (log, count, list) peers failing by missed announces."""
    while True:
        registry.sweep()
        await asyncio.sleep(every_s)


def _shared_argv(a: argparse.Namespace, state_dir: Path) -> list[str]:
    """The options a master passes on to its per-file trackers: the same
    namespace, key, users file, quotas, TLS and logs."""
    out = [
        "--root",
        str(a.root.resolve()),
        "--state-dir",
        str(state_dir.resolve()),
        "--host",
        a.host,
        "--log-level",
        a.log_level,
        "--log-format",
        a.log_format,
    ]
    for flag, v in (
        ("--key-file", a.key_file),
        ("--users", a.users),
        ("--quota-bytes", a.quota_bytes),
        ("--history-age", a.history_age),
        ("--user-quota-bytes", a.user_quota_bytes),
        ("--tls-cert", a.tls_cert),
        ("--tls-key", a.tls_key),
        ("--tls-client-ca", a.tls_client_ca),
        ("--tracker-ca", a.tracker_ca),
        ("--tracker-cert", a.tracker_cert),
        ("--tracker-key", a.tracker_key),
        ("--etcd", a.etcd or None),  # each per-file tracker's log is in etcd too (its shard's)
        ("--cluster-id", a.cluster_id or None),
        ("--log-keep", a.log_keep),
    ):
        if v is not None:
            out += [flag, str(Path(v).resolve()) if isinstance(v, Path) else str(v)]
    return out


def _version() -> str:
    try:
        return metadata.version("storetorrent")
    except metadata.PackageNotFoundError:
        return "unknown"


def main(argv: list[str] | None = None) -> None:
    """``python -m st_py.tracker``: parse the options from ``argv`` (and the
    TOML file of ``--config``) and serve until SIGINT/SIGTERM. Exits with a one-line
    message when another tracker holds the namespace. ``kill -USR1 <pid>``
    prints every thread's Python stack to its log (stderr), for a tracker
    that does not answer (docs/operations.md)."""
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    ap = OptionsParser(prog="python -m st_py.tracker", description="StoreTorrent tracker")
    ap.add_argument("--root", required=True, type=Path, help="namespace root: infofiles live here")
    ap.add_argument("--state-dir", type=Path, help="tracker state (default: <root>/../tracker-state)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--announce-interval", type=float, default=2.0, help="seconds between peer announces")
    ap.add_argument("--misses", type=int, default=3, help="announces a peer may miss before it is failed")
    ap.add_argument("--quota-bytes", type=int, default=None, help="per-file quota of stored bytes (all copies)")
    ap.add_argument(
        "--failed-after",
        type=float,
        default=DEFAULT_FAILED_AFTER_S,
        help="seconds a peer must have been failed before its copies count as gone and repair restores "
        'them elsewhere; sooner they are suspect (docs/reliability.md, "Copy states")',
    )
    ap.add_argument(
        "--history-age",
        type=float,
        default=DEFAULT_HISTORY_AGE_S,
        help="seconds the history of replaced and deleted records is kept when no snapshot holds it; at least "
        'the peers\' --scrub-age (docs/snapshots.md, "Retention")',
    )
    ap.add_argument("--key-file", type=Path, help="shared secret for signing capabilities (docs/capabilities.md)")
    ap.add_argument("--capability-ttl", type=float, default=3600.0, help="seconds a capability is valid")
    ap.add_argument(
        "--users",
        type=Path,
        help="users file (TOML): API keys, groups, quotas (docs/security.md); "
        "without it the tracker trusts the user name clients claim",
    )
    ap.add_argument(
        "--user-quota-bytes", type=int, default=None, help="default per-user quota of stored bytes (all copies)"
    )
    ap.add_argument("--tls-cert", help="serve gRPC over TLS with this certificate (PEM)")
    ap.add_argument("--tls-key", help="the certificate's private key (PEM)")
    ap.add_argument(
        "--tls-client-ca",
        help="mutual TLS: clients need a certificate signed by this CA; its common name is the user name",
    )
    ap.add_argument(
        "--reservation-lease",
        type=float,
        default=900.0,
        help="seconds a file's space reservation (est_size) outlives its last commit or open for "
        "writing when its creator does not close it (docs/replication.md)",
    )
    ap.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus metrics at http://HOST:PORT/metrics and the status page at / "
        "(0 picks a free port; default: none). docs/operations.md",
    )
    ap.add_argument(
        "--file-trackers",
        type=int,
        default=0,
        help="per-file tracker processes this master spawns (paper 3.5): the metadata writes of each "
        "file (commits, leases, record deletes) go to the one its name hashes to, of N+1 with the "
        'master; clients are redirected on open. docs/architecture.md, "Per-file trackers"',
    )
    ap.add_argument(
        "--file-tracker-port",
        type=int,
        default=None,
        help="per-file tracker i listens on this port + i - 1 (0: free ports; default: --port + 1, "
        "or free ports when --port is 0)",
    )
    ap.add_argument(
        "--advertise-host",
        default="",
        help="the host clients reach the per-file trackers at (default: --host, or this machine's "
        "name when --host is 0.0.0.0)",
    )
    ap.add_argument(
        "--tracker-ca",
        help="TLS between the master and its per-file trackers: the CA that signed "
        "--tls-cert (default: --tls-client-ca)",
    )
    ap.add_argument(
        "--tracker-cert",
        help="mutual TLS between the master and its per-file trackers: a client "
        "certificate signed by --tls-client-ca (PEM)",
    )
    ap.add_argument("--tracker-key", help="that certificate's private key (PEM)")
    # Set by a master for the per-file trackers it spawns, never by hand (nor in a config file).
    ap.add_argument("--shard", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--shards", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--master", default="", help=argparse.SUPPRESS)
    ap.add_argument("--master-pid", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--master-epoch", default="", help=argparse.SUPPRESS)
    ap.add_argument("--master-term", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument(
        "--etcd",
        default="",
        help="keep the metadata log in these etcd members (host:port,host:port,...) instead of "
        "<state-dir>/log.db: every change is on a majority of them before it is answered "
        "(docs/metadata-log.md); needs --cluster-id",
    )
    ap.add_argument("--cluster-id", default="", help="this cluster's name in etcd (with --etcd)")
    ap.add_argument(
        "--log-keep",
        type=float,
        default=KEEP_S,
        metavar="SECONDS",
        help="how long applied entries stay in the metadata log: an infofile put back from a copy "
        "at most this old is brought forward by them (with --etcd the tracker's own state is "
        "checkpointed in etcd before older ones go); without --etcd at least 300 s, the longest "
        "writer lease, whose renewals the local log alone keeps",
    )
    ap.add_argument(
        "--init-cluster",
        action="store_true",
        help="with --etcd: make the cluster in etcd if it is not there (its first start)",
    )
    ap.add_argument(
        "--own-namespace",
        action="store_true",
        help="with --etcd: this tracker's --root is its own, not shared with the other trackers; as a "
        "standby it applies the metadata log to it as the log grows, so the leader's disk is not "
        "needed when it takes over (docs/metadata-log.md, 'Standbys that follow the log')",
    )
    ap.add_argument(
        "--fetch-port",
        type=int,
        default=0,
        help="with --own-namespace: while a standby, serve FetchInfofile (clients' infofile copies) on this "
        "port of --host (0: a free one, -1: none); it prints 'fetch on HOST:PORT' and the leader's status "
        "lists it (docs/metadata-log.md, 'Copies from standbys')",
    )
    ap.add_argument("--log-level", default="INFO")
    ap.add_argument(
        "--log-format",
        choices=logs.FORMATS,
        default="text",
        help="text: 'YYYY-MM-DD HH:MM:SS.mmm LEVEL logger: message' (as st-peer); json: one "
        "object per line (ts, level, logger, msg, ...)",
    )
    ap.add_argument(
        "--config",
        type=Path,
        help='a TOML file of these options (key_file = "...", users, '
        "tls_cert ...); flags given on the command line win",
    )
    pre_ap = argparse.ArgumentParser(add_help=False)
    pre_ap.add_argument("--config", type=Path)
    pre, _ = pre_ap.parse_known_args(argv)
    if pre.config:
        apply_config(ap, pre.config)  # every flag is a key; unknown keys and wrong types stop here
    a = ap.parse_args(argv)
    logs.setup(a.log_level, a.log_format)
    gc_tuning.tune()  # bursts of rows a commit: docs/benchmarks.md, "The collector's share of a commit"
    disable_created_metrics()  # no *_created series: this process is the tracker alone
    state_dir = a.state_dir or a.root.resolve().parent / "tracker-state"
    try:
        key = load_key(a.key_file) if a.key_file else None
    except (CapabilityError, OSError) as e:
        raise SystemExit(f"tracker: {e}") from None
    users = Users(a.users.resolve() if a.users else None, a.user_quota_bytes)
    if a.users:
        try:
            users.authenticate([], "")  # loads and checks the file
        except AccessError:
            pass
        except (OSError, ValueError) as e:
            raise SystemExit(f"tracker: cannot use --users {a.users}: {e}") from None
    if bool(a.tls_cert) != bool(a.tls_key):
        raise SystemExit("tracker: --tls-cert and --tls-key go together")
    tls = (a.tls_cert, a.tls_key, a.tls_client_ca) if a.tls_cert else None
    if a.shard:  # a per-file tracker its master started (st_py/tracker/file_tracker.py)
        run_file_tracker(a, key, users, tls)
        return
    if a.file_trackers < 0:
        raise SystemExit("tracker: --file-trackers must be 0 or more")
    try:
        # the calls between trackers: a master's to its per-file trackers, a standby's copying a replica
        internal = a.file_trackers or a.own_namespace
        creds = internal_credentials(tls, a.tracker_ca, a.tracker_cert, a.tracker_key) if internal else None
    except (ValueError, OSError) as e:
        raise SystemExit(f"tracker: {e}") from None
    ft = FileTrackerOptions(a.file_trackers, _shared_argv(a, state_dir), a.advertise_host, a.file_tracker_port, creds)
    backend = _log_backend(a)
    try:
        asyncio.run(
            serve(
                a.root,
                state_dir,
                a.host,
                a.port,
                a.announce_interval,
                a.misses,
                a.quota_bytes,
                key,
                a.capability_ttl,
                users,
                tls,
                a.reservation_lease,
                a.metrics_port,
                ft,
                a.failed_after,
                a.history_age,
                backend,
                a.log_keep,
                a.fetch_port,
            )
        )
    except TrackerLockedError as e:  # one line, no traceback
        raise SystemExit(f"tracker: {e}") from None

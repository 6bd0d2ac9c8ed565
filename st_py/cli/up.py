"""``storetorrent up``: a local cluster (tracker + N peers) until Ctrl-C."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import click

from st_py.cli.app import DATA_DEFAULT, cli
from st_py.cli.render import console


@cli.command()
@click.option("--data", default=DATA_DEFAULT, show_default=True, type=click.Path(file_okay=False))
@click.option("--peers", default=4, show_default=True, help="number of peers")
@click.option("--announce-interval", default=1.0, show_default=True, help="seconds between announces")
@click.option("--tls", is_flag=True, help="serve the tracker over TLS with a local CA made in DATA/tls")
@click.option("--mtls", is_flag=True, help="mutual TLS: clients need a certificate of the local CA")
@click.option(
    "--users",
    "users_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="users file (API keys, groups, quotas); see `storetorrent user add`",
)
@click.option(
    "--port", "tracker_port", type=int, default=0, help="the tracker's port (default: the last run's, else a free one)"
)
@click.option(
    "--metrics-port",
    type=int,
    default=0,
    help="the tracker's status page and metrics port (default: the last run's, else a free one)",
)
@click.option(
    "--repair-interval",
    type=float,
    default=30.0,
    show_default=True,
    help="seconds between full repair passes (pending copies, long-failed peers); a peer returning or "
    "failed --failed-after starts one at once; 0: no repair",
)
@click.option(
    "--failed-after",
    type=float,
    default=600.0,
    show_default=True,
    help="the tracker's --failed-after: a peer failed this long (seconds) is lost, and repair restores its "
    "copies elsewhere; sooner its copies are suspect and their records waiting",
)
@click.option(
    "--file-trackers",
    type=click.IntRange(0, 64),
    default=0,
    show_default=True,
    help="per-file tracker processes the tracker spawns: each file's commits go to the one its name "
    "hashes to (of N+1 with the tracker itself); clients are redirected on open (paper 3.5)",
)
@click.option(
    "--s3-port",
    type=int,
    default=0,
    help="the S3 endpoint's port (docs/s3.md; default: the last run's, else a free one)",
)
@click.option(
    "--s3-keys",
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    envvar="STORETORRENT_S3_KEYS",
    help="the S3 endpoint's access keys (TOML: [users] NAME = API key); needed with --users; "
    "without --users and this: development mode, nothing checked",
)
@click.option("--no-s3", is_flag=True, help="run no S3 endpoint")
@click.option(
    "--trackers",
    type=click.IntRange(1, 5),
    default=1,
    show_default=True,
    help="replicated trackers: with 2 or more, 3 local etcd members keep the metadata log (Debian's "
    "etcd-server) and the trackers beyond the first wait as standbys, each taking over when the leader "
    "dies (docs/deployment.md, 'The metadata log in etcd')",
)
def up(
    data: str,
    peers: int,
    announce_interval: float,
    tls: bool,
    mtls: bool,
    users_file,
    tracker_port: int,
    metrics_port: int,
    repair_interval: float,
    failed_after: float,
    file_trackers: int,
    s3_port: int,
    s3_keys,
    no_s3: bool,
    trackers: int,
) -> None:
    """Run a local cluster (tracker and PEERS peers under DATA) until Ctrl-C.

    A daemon that dies is restarted on its port with backoff while the others
    keep serving; the tracker (its gRPC and status page ports) and peers come
    back on the same ports after `up` itself is restarted. Capabilities are
    always on (a key is made in DATA/secret.key). An S3 endpoint runs beside
    them, supervised the same way (docs/s3.md), unless --no-s3, the s3 extra
    is not installed, or --users is given without --s3-keys. docs/deployment.md,
    "A local cluster"."""
    from st_py.core import logs
    from st_py.deploy.cluster import LocalCluster
    from st_py.deploy.supervisor import Supervisor

    logs.setup("INFO", "text")  # the daemons' format (docs/operations.md, "Logs")
    s3_off = _s3_off(no_s3, users_file, s3_keys)
    cluster = LocalCluster(
        Path(data),
        n_peers=peers,
        announce_interval=announce_interval,
        die_with_parent=True,
        tls=tls,
        mutual_tls=mtls,
        users_file=Path(users_file).resolve() if users_file else None,
        tracker_port=tracker_port,
        metrics_port=metrics_port,
        keep_layout=True,
        file_trackers=file_trackers,
        tracker_args=["--failed-after", str(failed_after)],
        s3=s3_off is None,
        s3_port=s3_port,
        s3_keys=Path(s3_keys).resolve() if s3_keys else None,
        trackers=trackers,
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        cluster.start()  # a daemon that does not start: one line (PortInUseError names the port), exit 2
    except BaseException:
        if cluster.tracker is not None:  # else nothing started (another up's cluster.json stays)
            cluster.stop()  # the daemons started before the one that failed
        raise
    supervisor = Supervisor(cluster)
    if repair_interval > 0:
        from st_py.maintenance.repair_service import run_repair_service

        threading.Thread(
            target=run_repair_service,
            args=(cluster.tracker_addr, cluster.client_tls, repair_interval, stop),
            kwargs={"poll": cluster.announce_interval},
            name="repair",
            daemon=True,
        ).start()
    # One line per item, never wrapped (console: soft_wrap), no empty lines.
    try:
        console.print(f"tracker  {cluster.tracker_addr}" + ("   (leader)" if cluster.replicas is not None else ""))
        if cluster.replicas is not None:
            for j, a in enumerate(cluster.replicas.addrs):
                console.print(f"tracker-{j + 1} {a}   (standby: takes over when the leader dies)")
            for m in cluster.replicas.etcd.members if cluster.replicas.etcd is not None else []:
                console.print(f"{m.name}    {m.endpoint}   (etcd member: the metadata log)")
        if cluster.tracker is not None and cluster.tracker.metrics_addr:
            console.print(f"status   http://{cluster.tracker.metrics_addr}/   (metrics: /metrics)")
        if file_trackers:
            from st_py.wire.tracker_client import TrackerClient

            t = TrackerClient(cluster.tracker_addr, timeout=5, tls=cluster.client_tls)
            try:
                for ft in t.status().file_trackers:
                    console.print(f"file-tracker-{ft.shard} {ft.addr}   (files hashing to {ft.shard} of {ft.shards})")
            finally:
                t.close()
        for i, a in enumerate(cluster.peer_addrs):
            console.print(f"peer-{i}   {a}")
        if cluster.s3_url:
            mode = "" if s3_keys else "   (development mode: no keys checked)"
            console.print(f"s3       {cluster.s3_url}{mode}")
        elif s3_off:
            console.print(f"s3       off: {s3_off}")
        console.print(f"namespace {cluster.namespace}\nlogs      {cluster.data_dir / 'logs'}")
        every = ",".join([cluster.tracker_addr, *cluster.standby_addrs])
        console.print(f"export STORETORRENT_TRACKER={every}   # Ctrl-C stops the cluster")
        ca, cert, key = cluster.client_tls
        if ca:
            console.print(f"export STORETORRENT_TLS_CA={ca}")
        if cert:
            console.print(f"export STORETORRENT_TLS_CERT={cert} STORETORRENT_TLS_KEY={key}")
        while not stop.wait(0.5):
            supervisor.check()
    finally:
        stop.set()
        cluster.stop()
        console.print("cluster stopped")


def _s3_off(no_s3: bool, users_file, s3_keys) -> str | None:
    """Why `up` runs no S3 endpoint (None: it runs one)."""
    import importlib.util

    if no_s3:
        return "--no-s3"
    if importlib.util.find_spec("uvicorn") is None or importlib.util.find_spec("starlette") is None:
        return "the s3 extra is not installed (pip install 'storetorrent[s3]')"
    if users_file and not s3_keys:
        return "--users needs --s3-keys FILE (access keys: docs/s3.md)"
    return None

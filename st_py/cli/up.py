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
) -> None:
    """Run a local cluster (tracker and PEERS peers under DATA) until Ctrl-C.

    A daemon that dies is restarted on its port with backoff while the others
    keep serving; the tracker (its gRPC and status page ports) and peers come
    back on the same ports after `up` itself is restarted. Capabilities are
    always on (a key is made in DATA/secret.key). docs/deployment.md, "A
    local cluster"."""
    from st_py.core import logs
    from st_py.deploy.cluster import LocalCluster
    from st_py.deploy.supervisor import Supervisor

    logs.setup("INFO", "text")  # the daemons' format (docs/operations.md, "Logs")
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
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    cluster.start()
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
        console.print(f"tracker  {cluster.tracker_addr}")
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
        console.print(f"namespace {cluster.namespace}\nlogs      {cluster.data_dir / 'logs'}")
        console.print(f"export STORETORRENT_TRACKER={cluster.tracker_addr}   # Ctrl-C stops the cluster")
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

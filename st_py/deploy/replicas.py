"""Replicated trackers in a local cluster (``storetorrent up --trackers 3``;
issue 39): 3 real etcd members keep the metadata log, tracker 0 (the
cluster's ``tracker``) is the first leader and trackers 1.. wait as
standbys, each with a state folder of its own on the shared namespace
(docs/deployment.md, "The metadata log in etcd"). Ports are chosen as the
other daemons' are (st_py/deploy/ports.py) and kept in ``layout.json``: an
etcd member's peer URL is part of its cluster's membership, so the members
must come back on theirs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from st_py.deploy.etcd import EtcdCluster, EtcdMember
from st_py.deploy.ports import choose_ports

if TYPE_CHECKING:
    from st_py.deploy.cluster import Daemon, LocalCluster

CLUSTER_ID = "local"  # the cluster's name in its own etcd
MEMBERS = 3


class TrackerReplicas:
    """The etcd members and standby trackers of ``cluster`` (``n`` trackers
    in all). Not thread-safe: the thread that drives the cluster uses it."""

    def __init__(self, cluster: LocalCluster, n: int, wrap: Callable[[list[str]], list[str]] | None = None):
        self.cluster, self.n, self.wrap = cluster, n, wrap
        self.etcd: EtcdCluster | None = None
        self.standbys: list[Daemon | None] = [None] * (n - 1)
        self.ports: list[list[int]] = [[0, 0] for _ in range(n - 1)]  # (port, metrics port) of tracker j+1

    @property
    def addrs(self) -> list[str]:
        """The standby trackers' ``host:port`` (known before they listen)."""
        return [f"127.0.0.1:{p}" for p, _ in self.ports if p]

    def etcd_args(self) -> list[str]:
        """The flags that put a tracker's log in this cluster's etcd."""
        assert self.etcd is not None
        return ["--etcd", ",".join(self.etcd.endpoints), "--cluster-id", CLUSTER_ID, "--init-cluster"]

    def start_etcd(self, last: dict, taken: set[int]) -> None:
        """Start the 3 members (on the ports of ``last``, the last run's
        layout, if it has them) and wait until they are healthy.

        Raises
        ------
        EtcdNotInstalledError
            No ``etcd`` binary (Debian: ``apt install etcd-server``).
        RuntimeError
            Not healthy in time (the members' log tails).
        """
        base = self.cluster.data_dir / "etcd"
        kept = last.get("etcd") or []
        if len(kept) != MEMBERS:
            kept = [list(p) for p in zip(*[iter(choose_ports([1] * 2 * MEMBERS, taken=taken))] * 2)]
        members = [
            EtcdMember(f"etcd{i}", int(c), int(p), base / f"etcd{i}", self.cluster.data_dir / "logs" / f"etcd{i}.log")
            for i, (c, p) in enumerate(kept)
        ]
        self.etcd = EtcdCluster(base, MEMBERS, token=f"storetorrent-{os.getpid()}", members=members, wrap=self.wrap)
        self.etcd.start(timeout=60.0)
        for j, s in enumerate((last.get("standbys") or [])[: len(self.ports)]):
            self.ports[j] = [int(s[0]), int(s[1])]  # the last run's: the same addresses for clients

    def start_standby(self, j: int) -> Daemon:
        """Start tracker ``j + 1`` (a standby until elected) on its ports
        (chosen now if it has none) and wait until it campaigns.

        Raises
        ------
        DaemonStartError
        """
        from st_py.deploy.cluster import Daemon

        c = self.cluster
        if not self.ports[j][0]:
            # per-file trackers listen on the next ports, once this one is elected
            self.ports[j] = choose_ports([1 + c.file_trackers, 1], taken=c.held_ports())
        port, metrics = self.ports[j]
        argv = c.tracker_argv(c.data_dir / f"tracker-{j + 1}", port, metrics)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")])
        d = Daemon(
            f"tracker-{j + 1}",
            argv,
            c.data_dir / "logs" / f"tracker-{j + 1}.log",
            env=env,
            die_with_parent=c.die_with_parent,
            ready=("listening on ", "campaigning as "),
        )
        self.standbys[j] = d
        return d

    def start_standbys(self, timeout: float = 30.0) -> None:
        """Once tracker 0 leads (listens), start the others as standbys.

        Raises
        ------
        DaemonStartError
            Tracker 0 was not elected within ``timeout`` seconds, or a standby did not start.
        """
        self.cluster.wait_listening(timeout)
        for j in range(self.n - 1):
            self.start_standby(j)

    def held(self) -> set[int]:
        """Every port of the members and standbys."""
        out = {p for pair in self.ports for p in pair if p}
        out.update(p + i for p, _ in self.ports if p for i in range(1, 1 + self.cluster.file_trackers))
        if self.etcd is not None:
            out.update(p for m in self.etcd.members for p in (m.client_port, m.peer_port))
        return out

    def layout(self) -> dict:
        """What ``layout.json`` keeps of them."""
        return {
            "etcd": [[m.client_port, m.peer_port] for m in self.etcd.members] if self.etcd is not None else [],
            "standbys": [list(p) for p in self.ports],
        }

    def stop(self) -> None:
        """Stop the standbys (SIGTERM, then SIGKILL); the members after the
        trackers (:meth:`stop_etcd`)."""
        for d in self.standbys:
            if d is not None:
                d.stop()

    def stop_etcd(self) -> None:
        """Stop the etcd members."""
        if self.etcd is not None:
            self.etcd.stop()

"""A local etcd cluster: real ``etcd`` member processes on loopback ports,
for ``storetorrent up --trackers N`` and the tests of the replicated
tracker's log (docs/metadata-log.md).

Each member is its own process with its own data folder, client port and
peer port, as on a real cluster (Debian's ``etcd-server`` package; ``./dev
setup`` installs it). Members can be killed, paused and restarted one by one.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from st_py.deploy.ports import choose_ports
from st_py.errors import StoreTorrentError


class EtcdNotInstalledError(StoreTorrentError, FileNotFoundError):
    """No ``etcd`` executable on this machine.

    Attributes
    ----------
    searched : str
        The PATH searched.
    """

    def __init__(self, searched: str):
        super().__init__(
            "etcd not found on PATH: install Debian's etcd-server package "
            "(`sudo apt-get install etcd-server`, which ./dev setup does) or set ST_ETCD_BIN"
        )
        self.searched = searched


def find_etcd() -> str:
    """Path of the ``etcd`` executable (``$ST_ETCD_BIN``, else PATH).

    Raises
    ------
    EtcdNotInstalledError
    """
    env = os.environ.get("ST_ETCD_BIN")
    if env:
        return env
    found = shutil.which("etcd")
    if not found:
        raise EtcdNotInstalledError(os.environ.get("PATH", ""))
    return found


@dataclass
class EtcdMember:
    """One etcd member: ``name``, its client and peer ports, its data folder
    and log file; ``proc`` while it runs."""

    name: str
    client_port: int
    peer_port: int
    data_dir: Path
    log_path: Path
    proc: subprocess.Popen | None = None

    @property
    def client_url(self) -> str:
        """``http://127.0.0.1:<client port>``."""
        return f"http://127.0.0.1:{self.client_port}"

    @property
    def endpoint(self) -> str:
        """``127.0.0.1:<client port>``, as the trackers take it."""
        return f"127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        """``http://127.0.0.1:<peer port>``."""
        return f"http://127.0.0.1:{self.peer_port}"

    def alive(self) -> bool:
        """Whether the member's process runs."""
        return self.proc is not None and self.proc.poll() is None

    def healthy(self, timeout: float = 1.0) -> bool:
        """Whether the member answers ``/health`` with ``"health": "true"``
        (it is part of a quorum that has a leader)."""
        try:
            with urllib.request.urlopen(f"{self.client_url}/health", timeout=timeout) as r:
                return json.loads(r.read()).get("health") == "true"
        except (OSError, ValueError, urllib.error.URLError):
            return False


@dataclass
class EtcdCluster:
    """``n`` etcd members under ``base_dir`` on 127.0.0.1 (docs/metadata-log.md).

    Use as a context manager, or :meth:`start` then :meth:`stop`. Not
    thread-safe: one thread drives it.

    Parameters
    ----------
    base_dir : Path
        Each member's data folder and log go below it.
    n : int
        Members (1, 3 or 5; a majority must live for writes).
    token : str
        The cluster token (``--initial-cluster-token``): members of another
        cluster never join this one.
    listen_host : str
        The address the members' client ports listen on (default
        127.0.0.1; they advertise 127.0.0.1 either way).
    """

    base_dir: Path
    n: int = 3
    token: str = "storetorrent"
    members: list[EtcdMember] = field(default_factory=list)
    # wraps each member's command line (storetorrent up: the members die with it)
    wrap: Callable[[list[str]], list[str]] | None = None
    # the address each member's client port listens on; "0.0.0.0" lets a tracker in a
    # network namespace reach them through its link (tests/test_tracker_netns.py)
    listen_host: str = "127.0.0.1"

    def __post_init__(self) -> None:
        self.base_dir = Path(self.base_dir)
        if not self.members:
            # below the kernel's ephemeral ports: a member killed and started again finds its ports free
            ports = choose_ports([1] * (2 * self.n))
            self.members = [
                EtcdMember(
                    name=f"etcd{i}",
                    client_port=ports[2 * i],
                    peer_port=ports[2 * i + 1],
                    data_dir=self.base_dir / f"etcd{i}",
                    log_path=self.base_dir / f"etcd{i}.log",
                )
                for i in range(self.n)
            ]

    @property
    def endpoints(self) -> list[str]:
        """Every member's ``host:port`` for clients."""
        return [m.endpoint for m in self.members]

    def _argv(self, m: EtcdMember) -> list[str]:
        initial = ",".join(f"{x.name}={x.peer_url}" for x in self.members)
        return [
            find_etcd(),
            "--name", m.name,
            "--data-dir", str(m.data_dir),
            "--listen-client-urls", f"http://{self.listen_host}:{m.client_port}",
            "--advertise-client-urls", m.client_url,
            "--listen-peer-urls", m.peer_url,
            "--initial-advertise-peer-urls", m.peer_url,
            "--initial-cluster", initial,
            "--initial-cluster-token", self.token,
            "--initial-cluster-state", "new",
            # loopback members on a shared 2-core machine: the defaults
            # (100 ms heartbeats, 1 s elections) hold when it is loaded
            "--heartbeat-interval", "100",
            "--election-timeout", "1000",
            "--logger", "zap",
            "--log-outputs", "stderr",
        ]  # fmt: skip

    def start_member(self, i: int) -> EtcdMember:
        """Start member ``i`` (again, with its data folder as it was)."""
        m = self.members[i]
        if m.alive():
            return m
        m.data_dir.mkdir(parents=True, exist_ok=True)
        m.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = m.log_path.open("ab")
        try:
            argv = self.wrap(self._argv(m)) if self.wrap is not None else self._argv(m)
            m.proc = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            log.close()
        return m

    def start(self, timeout: float = 30.0) -> EtcdCluster:
        """Start every member and wait until they form a healthy cluster.

        Raises
        ------
        EtcdNotInstalledError
        RuntimeError
            Not healthy within ``timeout`` seconds (with the members' log tails).
        """
        self.base_dir.mkdir(parents=True, exist_ok=True)
        for i in range(self.n):
            self.start_member(i)
        self.wait_healthy(timeout)
        return self

    def wait_healthy(self, timeout: float = 30.0, members: list[int] | None = None) -> None:
        """Wait until the running members (or those of ``members``) answer healthy.

        Raises
        ------
        RuntimeError
            Not healthy within ``timeout`` seconds.
        """
        idx = members if members is not None else [i for i, m in enumerate(self.members) if m.alive()]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(self.members[i].healthy() for i in idx):
                return
            dead = [self.members[i].name for i in idx if not self.members[i].alive()]
            if dead:
                break
            time.sleep(0.1)
        tails = "\n".join(f"--- {self.members[i].name}:\n{self.tail(i)}" for i in idx)
        raise RuntimeError(f"etcd members {idx} not healthy within {timeout:g} s:\n{tails}")

    def tail(self, i: int, n: int = 15) -> str:
        """The last ``n`` lines of member ``i``'s log."""
        try:
            return "\n".join(self.members[i].log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def signal(self, i: int, sig: int) -> None:
        """Send ``sig`` to member ``i`` (SIGKILL, SIGSTOP, SIGCONT, ...)."""
        m = self.members[i]
        if m.proc is not None and m.alive():
            m.proc.send_signal(sig)
            if sig == signal.SIGKILL:
                m.proc.wait()

    def kill(self, i: int) -> None:
        """SIGKILL member ``i``, as a crash would."""
        self.signal(i, signal.SIGKILL)

    def stop(self) -> None:
        """Stop every member (SIGCONT first, for a paused one; then SIGKILL:
        the tests need no clean shutdown)."""
        for m in self.members:
            if m.proc is not None:
                if m.alive():
                    m.proc.send_signal(signal.SIGCONT)
                    m.proc.send_signal(signal.SIGKILL)
                m.proc.wait()

    def __enter__(self) -> EtcdCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

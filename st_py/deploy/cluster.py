"""An embedded local cluster: one tracker and N peers on loopback.

Used by ``storetorrent up``, ``storetorrent demo`` and the tests. Every daemon
is a real process started with port 0; we read its ``listening on HOST:PORT``
line. Layout under the data folder::

    <data>/namespace/          infofiles (the namespace root)
    <data>/tracker/            tracker state
    <data>/peers/peer-<i>/     each peer's record store
    <data>/logs/               daemons' stderr
    <data>/cluster.json        addresses, for the CLI (while it runs)
    <data>/layout.json         ports (tracker, its status page, peers, the S3
                               endpoint), reused by the next start (keep_layout)

With ``s3`` it also runs an S3 endpoint (``python -m st_integrations.s3``,
docs/s3.md) over the tracker, a daemon like the others.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from st_py.deploy.ports import choose_ports, port_in_use
from st_py.deploy.replicas import TrackerReplicas
from st_py.errors import DaemonStartError, InvalidOptionError, PortInUseError
from st_py.wire.locate import CLUSTER_FILE, read_cluster_file  # noqa: F401 (public here too)
from st_py.wire.tracker_client import TrackerClient, current_user


def find_peer_binary() -> str:
    """Path of the ``st-peer`` executable.

    Looks at ``$ST_PEER_BIN``, then PATH, then next to the Python executable
    (a virtualenv's bin/), then a development build under ``build/``.

    Raises
    ------
    FileNotFoundError
        With how to build it.
    """
    env = os.environ.get("ST_PEER_BIN")
    if env:
        return env
    found = shutil.which("st-peer")
    if found:
        return found
    beside = Path(sys.executable).parent / "st-peer"
    if beside.exists():
        return str(beside)
    repo = Path(__file__).resolve().parents[2]
    for cand in sorted(repo.glob("build/*/st_core/st-peer")):
        return str(cand)
    raise FileNotFoundError(
        "st-peer not found: install StoreTorrent with `pip install .` (it builds "
        "st_core with CMake) or set ST_PEER_BIN to the binary"
    )


def _die_with_parent(argv: list[str]) -> list[str]:
    """Prefix ``argv`` so the child gets SIGKILL when its parent dies
    (``setpriv --pdeathsig``, util-linux). No ``preexec_fn``: that can
    deadlock a child forked from a process with threads (gRPC has some).
    The signal follows the *thread* that started the child, so use this only
    from a long-lived main thread (``storetorrent up``)."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--", *argv] if setpriv else argv


class Daemon:
    """A child process that prints ``listening on HOST:PORT`` when ready
    (and ``metrics on HOST:PORT`` before it if it serves Prometheus metrics:
    ``metrics_addr``); ``ready`` names the line prefixes that count (a
    replicated tracker's ``campaigning as HOST:PORT``: a standby, ready
    without listening)."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        log_path: Path,
        env: dict | None = None,
        ready_timeout: float = 30.0,
        die_with_parent: bool = False,
        ready: tuple[str, ...] = ("listening on ",),
    ):
        self.name = name
        self.ready = ready
        self.argv = argv
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = log_path.open("ab")
        self.metrics_addr: str | None = None
        if die_with_parent:
            argv = _die_with_parent(argv)
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._log, env=env, start_new_session=True)
        self.addr = self._wait_ready(ready_timeout)
        # keep draining stdout so the child never blocks on a full pipe
        self._drainer = threading.Thread(target=self._drain, daemon=True)
        self._drainer.start()

    def _wait_ready(self, timeout: float) -> str:
        """The address of the ``listening on`` line, read within ``timeout``
        seconds however the child behaves (a child that neither prints nor
        exits is killed at the deadline).

        Raises
        ------
        DaemonStartError
            The child exited first, or the deadline passed (it is killed).
        """
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        pending = b""
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                break
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for i, line in enumerate(lines):
                text = line.decode(errors="replace").strip()
                if text.startswith("metrics on "):
                    self.metrics_addr = text.split("metrics on ", 1)[1]
                prefix = next((p for p in self.ready if text.startswith(p)), None)
                if prefix is not None:
                    self._log.write(b"".join(x + b"\n" for x in lines[i + 1 :]) + pending)  # the drainer logs the rest
                    return text[len(prefix) :]
        self.kill()
        raise DaemonStartError(self.name, str(self.log_path), self.tail())

    def _drain(self) -> None:
        try:
            while chunk := os.read(self.proc.stdout.fileno(), 65536):  # type: ignore[union-attr]
                self._log.write(chunk)
        except (ValueError, OSError):
            pass

    def tail(self, n: int = 20) -> str:
        """The last ``n`` lines of the daemon's log ('' if it cannot be read)."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self.proc.pid

    def alive(self) -> bool:
        """Whether the child process is still running."""
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self._release()

    def _release(self) -> None:
        """After the child exited: its stdout pipe (once drained) and the log."""
        drainer = getattr(self, "_drainer", None)
        if drainer is not None and drainer is not threading.current_thread():
            drainer.join(2.0)
        if self.proc.stdout is not None and (drainer is None or not drainer.is_alive()):
            self.proc.stdout.close()
        if drainer is None or not drainer.is_alive():
            self._log.close()

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM, then SIGKILL if it does not stop in ``timeout`` seconds."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc.wait()
        self._release()


@dataclass
class LocalCluster:
    """A tracker and ``n_peers`` peers under ``data_dir`` on 127.0.0.1.

    Parameters
    ----------
    data_dir : path
        Folder for the namespace, tracker state, peer stores and logs. Reused
        if it exists: a restarted cluster serves what it stored before.
    n_peers : int
    announce_interval : float
        Seconds between peer announces; a peer is failed after 3 misses.
    auth : bool
        Sign and check capabilities (docs/capabilities.md) with the key in
        ``data_dir/secret.key``, created on first start.
    capability_ttl : float
        Seconds a capability the tracker issues is valid.
    peer_metadata : str
        ``"namespace"`` (peers get ``--namespace``), ``"fetch"`` (peers run
        with ``--metadata fetch`` and no namespace: issue 40's copies) or
        ``"auto"`` (neither: st-peer's default, fetch for a peer with a
        tracker and no namespace).
    domains : list of str
        Failure domains: peer i runs with ``--domain domains[i]``
        (``"site/rack/host"``; docs/replication.md, "Failure domains").
    """

    data_dir: Path
    n_peers: int = 4
    announce_interval: float = 1.0
    peer_args: list[str] = field(default_factory=list)
    die_with_parent: bool = False  # SIGKILL the daemons if this process dies (storetorrent up)
    auth: bool = True
    capability_ttl: float = 3600.0
    users_file: Path | None = None  # API keys, groups, quotas (docs/security.md)
    tls: bool = False  # the tracker serves gRPC over TLS with a local CA in data_dir/tls
    mutual_tls: bool = False  # ... and requires client certificates
    tracker_args: list[str] = field(default_factory=list)
    # Start the tracker and each peer on the ports of the last run (layout.json)
    # when they are free, so addresses survive a restart (storetorrent up).
    keep_layout: bool = False
    # Several hosts on one machine: peer i listens (and is advertised) on
    # 127.0.0.<i+2>, the tracker on 127.0.0.1, so a peer's host tells which
    # node it is, as on a real cluster (docs/deployment.md).
    hosts: bool = False
    # Failure domains (docs/replication.md, "Failure domains"): peer i runs
    # with --domain domains[i] ("site/rack/host"); peers past the list or
    # given "" declare none (their host is their domain).
    domains: list[str] = field(default_factory=list)
    # Each peer in a network namespace of its own (root only; st_py.deploy.netns):
    # link_down(i) then cuts it off the network, a real network failure.
    netns: bool = False
    # Hosts that share nothing but the network (issue 40; implies netns): peer i and the
    # commands of host_argv(i) run in peer i's network namespace and a mount namespace
    # in which the namespace root, the trackers' and etcd's state, the logs and the
    # other hosts' folders (their peers' data, their hosts/host-j) are empty tmpfs.
    private_hosts: bool = False
    # Where the peers read infofiles (issue 40): "namespace" (--namespace, the
    # tracker's own root) or "fetch" (st-peer --metadata fetch and no
    # --namespace: copies in each peer's data/meta/ from the tracker).
    peer_metadata: str = "namespace"
    tracker: Daemon | None = None
    peers: list[Daemon | None] = field(default_factory=list)
    tracker_port: int = 0
    # The tracker's status page and metrics port (--metrics-port; 0: a free one);
    # kept, like tracker_port, when the tracker is restarted.
    metrics_port: int = 0
    # Per-file trackers the tracker spawns (--file-trackers; paper 3.5): files
    # hash over it and them, and clients are redirected to a file's on open.
    file_trackers: int = 0
    # Standby trackers' addresses (with --etcd in tracker_args: only the elected tracker
    # listens): peers started after they are set announce to whichever answers.
    standby_addrs: list[str] = field(default_factory=list)
    # An S3 endpoint over the cluster (docs/s3.md; the s3 extra): started after the
    # peers on s3_port (0: any; the last run's with keep_layout), with the access
    # keys in s3_keys (None: development mode); s3_daemon once it runs.
    s3: bool = False
    s3_port: int = 0
    s3_keys: Path | None = None
    s3_daemon: Daemon | None = None
    # Replicated trackers (issue 39; storetorrent up --trackers N): with 2 or more, 3 etcd
    # members keep the metadata log and trackers 1.. wait as standbys (st_py/deploy/replicas.py).
    trackers: int = 1
    replicas: TrackerReplicas | None = None
    # Where this cluster's clients (client()) read infofiles (st_py/client/infofile_copies.py):
    # None: $STORETORRENT_METADATA, else auto (the namespace where this node sees it, else copies);
    # copies are kept in <data>/client-cache unless the client is given a metadata_cache
    # (or, with metadata None or auto, $STORETORRENT_METADATA_CACHE is set).
    metadata: str | None = None
    _clients: list = field(default_factory=list, init=False, repr=False, compare=False)  # closed by stop()

    def __post_init__(self) -> None:
        self.data_dir = Path(self.data_dir).resolve()
        self.netns = self.netns or self.private_hosts
        if self.private_hosts and self.peer_metadata == "namespace":
            raise InvalidOptionError(
                "private_hosts: the peers do not see the namespace; give peer_metadata='auto' or 'fetch'",
                "peer_metadata",
                self.peer_metadata,
            )

    @property
    def namespace(self) -> Path:
        """The namespace root (``<data>/namespace``)."""
        return self.data_dir / "namespace"

    @property
    def tracker_addr(self) -> str:
        """The tracker's ``host:port`` (once it has started)."""
        assert self.tracker is not None
        return self.tracker.addr

    @property
    def peer_addrs(self) -> list[str]:
        """``host:port`` of every peer started (killed ones included)."""
        return [p.addr for p in self.peers if p is not None]

    @property
    def tls_dir(self) -> Path:
        """The local CA, certificates and keys of ``tls``/``mutual_tls`` (``<data>/tls``)."""
        return self.data_dir / "tls"

    @property
    def client_tls(self) -> tuple[str | None, str | None, str | None]:
        """(CA, client cert, client key) for clients of this cluster."""
        if not (self.tls or self.mutual_tls):
            return (None, None, None)
        d, u = self.tls_dir, (current_user() or "user")
        if self.mutual_tls:
            return (str(d / "ca.pem"), str(d / f"{u}.pem"), str(d / f"{u}.key"))
        return (str(d / "ca.pem"), None, None)

    @property
    def key_file(self) -> Path:
        """The capability key (``<data>/secret.key``) of ``auth``."""
        return self.data_dir / "secret.key"

    def mint(self, ops: int, file_id: int = 0, ttl: float = 3600.0, user: str = "admin") -> bytes:
        """A capability signed with this cluster's key (e.g. ADMIN for SCRUB)."""
        from st_py.core.capability import load_key, mint

        return mint(load_key(self.key_file), ops, file_id, ttl, user)

    def start(self, wait: bool = True) -> "LocalCluster":
        """Start the tracker, the peers and (``s3``) the S3 endpoint. Ports
        left 0 are, with ``keep_layout``, the last run's, else ones
        :mod:`st_py.deploy.ports` chooses (outside the kernel's ephemeral
        range, distinct), for every cluster: a restarted daemon asks for its
        port again, and a kernel-given port could be handed to any
        connection on the machine while the daemon is down. A last run's or
        chosen port found taken is chosen again, a port the caller set is
        not.

        Raises
        ------
        TrackerLockedError
            A tracker (of another ``storetorrent up`` on the same DATA)
            serves this namespace already: one tracker per namespace.
        PortInUseError
            Something else listens on a port the caller set
            (``tracker_port``, ``metrics_port``, ``s3_port``).
        DaemonStartError
            A daemon did not start for another reason (its log says why).
            Daemons started before it keep running: :meth:`stop` them.
        """
        from st_py.tracker.lock import TrackerLock

        # one line, before any daemon starts (a namespace nested in a served one too)
        TrackerLock([self.namespace, self.data_dir / "tracker"], nest_root=self.namespace).release()
        if self.auth and not self.key_file.exists():
            from st_py.core.capability import new_key_file

            new_key_file(self.key_file)
        if (self.tls or self.mutual_tls) and not (self.tls_dir / "ca.pem").exists():
            from st_py.wire.tls import make_local_ca

            make_local_ca(self.tls_dir, ["127.0.0.1", "localhost"], [current_user() or "user", "peer"])
        last = self._last_layout() if self.keep_layout else {}
        self._remembered = {p for k in ("tracker", "metrics", "s3") if (p := last.get(k))} | set(last.get("peers", []))
        if self.trackers > 1:
            self.replicas = TrackerReplicas(self, self.trackers, _die_with_parent if self.die_with_parent else None)
            self._remembered |= {p for pair in last.get("etcd", []) + last.get("standbys", []) for p in pair}
            self.replicas.start_etcd(last, self.held_ports())

        def tracker(ports: dict[str, int]) -> Daemon:
            self.tracker_port, self.metrics_port = ports["port"], ports["metrics port"]
            return self.start_tracker()

        given = {r for r, p in (("port", self.tracker_port), ("metrics port", self.metrics_port)) if p}
        self._start_keeping(
            {
                "port": self.tracker_port or last.get("tracker", 0),
                "metrics port": self.metrics_port or last.get("metrics", 0),
            },
            given,
            tracker,
            {"port": 1 + self.file_trackers},  # per-file trackers listen on the next ports
        )
        if self.replicas is not None:
            self.replicas.start_standbys()  # once the first one leads
            self.standby_addrs = self.replicas.addrs  # peers and clients are given every tracker
        elif "--etcd" in self.tracker_args:
            self.wait_listening()  # elected: it printed "campaigning as" first
        peer_ports = last.get("peers", [])
        for i in range(self.n_peers):

            def peer(ports: dict[str, int], i: int = i) -> Daemon:
                return self.start_peer(i, ports["port"])

            self._start_keeping({"port": peer_ports[i] if i < len(peer_ports) else 0}, set(), peer)
        if wait:
            self.wait_for_peers(self.n_peers)
        if self.s3:

            def s3(ports: dict[str, int]) -> Daemon:
                self.s3_port = ports["port"]
                return self.start_s3()

            self._start_keeping({"port": self.s3_port or last.get("s3", 0)}, {"port"} if self.s3_port else set(), s3)
        self._write_cluster_file()
        return self

    def _start_keeping(
        self,
        ports: dict[str, int],
        given: set[str],
        start: Callable[[dict[str, int]], Daemon],
        runs: dict[str, int] | None = None,
    ) -> Daemon:
        """``start(ports)``: a daemon on ``ports`` (its role, ``port`` or
        ``metrics port``, to a port; 0: one chosen by
        :func:`st_py.deploy.ports.choose_ports`, ``runs[role]``
        consecutive). A port in use that the caller did not give (a role not
        in ``given``: the last run's, taken by another program meanwhile, or
        one taken since it was chosen) is chosen again, twice at most.

        Raises
        ------
        PortInUseError
            A port the caller gave is in use (or a chosen one, three times).
        DaemonStartError
            The daemon did not start for another reason.
        """
        for attempt in range(3):
            free = [r for r, p in ports.items() if not p]
            chosen = choose_ports([(runs or {}).get(r, 1) for r in free], taken=self.held_ports())
            ports.update(zip(free, chosen))
            try:
                return start(ports)
            except PortInUseError as e:
                role = next((r for r, p in ports.items() if p == e.port), None)
                if role is None or role in given or attempt == 2:
                    raise
                ports[role] = 0
        raise AssertionError("unreachable")

    def held_ports(self) -> set[int]:
        """The ports this cluster's daemons listen on or the last run's
        layout remembers (no other daemon of it is given one of them)."""
        held = set(getattr(self, "_remembered", set()))
        if self.tracker_port:
            held.update(range(self.tracker_port, self.tracker_port + 1 + self.file_trackers))
        held.update(p for p in (self.metrics_port, self.s3_port) if p)
        held.update(int(a.rsplit(":", 1)[1]) for a in self.peer_addrs)
        if self.replicas is not None:
            held |= self.replicas.held()
        return held

    def _port_error(self, e: DaemonStartError, ports: list[tuple[int, str, str]], host: str) -> DaemonStartError:
        """``e``, or a :class:`PortInUseError` for the first of ``ports``
        (port, role, option of ``storetorrent up``; 0s skipped) that
        something listens on now (the daemon has exited: not itself)."""
        for port, role, option in ports:
            if port and port_in_use(port, "127.0.0.1" if host == "0.0.0.0" else host):
                return PortInUseError(e.daemon, e.log, port, host, role, option)
        return e

    @property
    def s3_url(self) -> str | None:
        """``http://HOST:PORT`` of the S3 endpoint, or None if none runs."""
        return f"http://{self.s3_daemon.addr}" if self.s3_daemon is not None else None

    def _peer_data_dirs(self) -> list[Path]:
        """The data directories of this cluster's peers that have their
        ``PEER_ID`` (started at least once): all on this host, so the S3
        endpoint reads their copies from disk (st_py/client/local_copies.py)."""
        root = self.data_dir / "peers"
        return sorted(p for p in root.glob("peer-*") if (p / "PEER_ID").is_file()) if root.is_dir() else []

    def s3_endpoint(self, port: int = 0, args: Sequence[str] = (), name: str = "s3") -> Daemon:
        """An S3 endpoint process over this cluster's tracker on ``port``
        (0: a free one), with this cluster's keys and client TLS files and
        ``args`` added (``--read-ahead 1``; ``--peer-data auto`` stands for
        its peers' data directories, all on this host). :meth:`start_s3`
        runs the cluster's own; others (a benchmark's) are the caller's to
        stop; ``name`` names its log, ``logs/NAME.log``.

        Raises
        ------
        DaemonStartError
        """
        extra: list[str] = []
        it = iter(args)
        for a in it:
            if a == "--peer-data":
                d = next(it)
                dirs = self._peer_data_dirs() if d == "auto" else [Path(d)]
                extra += [x for p in dirs for x in ("--peer-data", str(p))]
            else:
                extra.append(a)
        argv = [
            sys.executable,
            "-m",
            "st_integrations.s3",
            "--tracker",
            self.tracker_addr,
            "--port",
            str(port),
            *(["--keys", str(self.s3_keys)] if self.s3_keys else []),
            *extra,
        ]
        env = {k: v for k, v in os.environ.items() if k != "STORETORRENT_S3_KEYS"}  # --keys, or none
        root = Path(__file__).resolve().parents[2]  # st_py and st_integrations of this checkout, as the tracker's
        env["PYTHONPATH"] = os.pathsep.join([str(root), str(root / "integrations"), env.get("PYTHONPATH", "")])
        for var, path in zip(("STORETORRENT_TLS_CA", "STORETORRENT_TLS_CERT", "STORETORRENT_TLS_KEY"), self.client_tls):
            env.pop(var, None)
            if path:
                env[var] = path
        return Daemon(name, argv, self.data_dir / "logs" / f"{name}.log", env=env, die_with_parent=self.die_with_parent)

    def start_s3(self) -> Daemon:
        """Start the S3 endpoint (``python -m st_integrations.s3``) over the
        tracker on ``s3_port`` (0: any) and wait for its ``listening on``
        line; ``s3_port`` then holds its port, so a restart reuses it. It
        reaches the tracker with the cluster's client TLS files, reads
        the copies of the cluster's peers (all on this host) from their
        data directories (``--peer-data``: docs/s3.md, "The fast path") and
        serves its metrics on a free port (the daemon's ``metrics_addr``).

        Raises
        ------
        DaemonStartError
            The endpoint did not start (its log's last line; ``tail``: more);
            :class:`PortInUseError` when something else listens on ``s3_port``.
        """
        try:
            self.s3_daemon = self.s3_endpoint(self.s3_port, ("--peer-data", "auto", "--metrics-port", "0"))
        except DaemonStartError as e:
            raise self._port_error(e, [(self.s3_port, "port", "--s3-port")], "127.0.0.1") from None
        self.s3_port = int(self.s3_daemon.addr.rsplit(":", 1)[1])
        return self.s3_daemon

    def start_tracker(self) -> Daemon:
        """Start the tracker (``python -m st_py.tracker``) with this cluster's
        options on ``tracker_port`` (0: any) and wait for its ``listening on``
        line; ``tracker_port`` and ``metrics_port`` then hold its ports, so a
        restart reuses them.

        Raises
        ------
        DaemonStartError
            The tracker did not start (its log's last line; ``tail``: more);
            :class:`PortInUseError` when something else listens on one of its ports.
        """
        argv = self.tracker_argv(self.data_dir / "tracker", self.tracker_port, self.metrics_port)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")])
        try:
            self.tracker = Daemon(
                "tracker",
                argv,
                self.data_dir / "logs" / "tracker.log",
                env=env,
                die_with_parent=self.die_with_parent,
                ready=self._tracker_ready(),
            )
        except DaemonStartError as e:
            ports = [(self.tracker_port, "port", "--port"), (self.metrics_port, "metrics port", "--metrics-port")]
            raise self._port_error(e, ports, "0.0.0.0" if self.netns else "127.0.0.1") from None
        self.tracker_port = int(self.tracker.addr.rsplit(":", 1)[1])  # same ports after a restart
        if self.tracker.metrics_addr:
            self.metrics_port = int(self.tracker.metrics_addr.rsplit(":", 1)[1])
        elif self.metrics_port:  # a standby until elected: it serves its page on this port once it leads
            self.tracker.metrics_addr = f"{self.tracker.addr.rsplit(':', 1)[0]}:{self.metrics_port}"
        return self.tracker

    def wait_listening(self, timeout: float = 30.0) -> None:
        """Wait until the tracker listens (a replicated tracker once it is elected).

        Raises
        ------
        DaemonStartError
            Not within ``timeout`` seconds, or the tracker exited.
        """
        from st_py.wire.tracker_client import accepts_connections

        deadline = time.monotonic() + timeout
        while not accepts_connections(self.tracker_addr):
            if time.monotonic() > deadline or self.tracker is None or not self.tracker.alive():
                tail = self.tracker.tail() if self.tracker is not None else ""
                raise DaemonStartError("tracker", str(self.data_dir / "logs" / "tracker.log"), tail)
            time.sleep(0.05)

    def _tracker_ready(self) -> tuple[str, ...]:
        """The lines that tell a tracker started: with replicated trackers a
        standby's ``campaigning as`` too (it listens only once elected)."""
        replicated = self.replicas is not None or "--etcd" in self.tracker_args
        return ("listening on ", "campaigning as ") if replicated else ("listening on ",)

    def tracker_argv(self, state_dir: Path, port: int, metrics_port: int) -> list[str]:
        """The command line of a tracker of this cluster with its state in
        ``state_dir`` on ``port`` and ``metrics_port`` (0: any)."""
        argv = [
            sys.executable,
            "-m",
            "st_py.tracker",
            "--root",
            str(self.namespace),
            "--state-dir",
            str(state_dir),
            "--port",
            str(port),
            "--announce-interval",
            str(self.announce_interval),
            "--metrics-port",
            str(metrics_port),
        ]
        if self.auth:
            argv += ["--key-file", str(self.key_file), "--capability-ttl", str(self.capability_ttl)]
        if self.users_file:
            argv += ["--users", str(self.users_file)]
        if self.tls or self.mutual_tls:
            argv += ["--tls-cert", str(self.tls_dir / "tracker.pem"), "--tls-key", str(self.tls_dir / "tracker.key")]
            if self.mutual_tls:
                argv += ["--tls-client-ca", str(self.tls_dir / "ca.pem")]
        if self.file_trackers:
            argv += ["--file-trackers", str(self.file_trackers)]
            if self.tls or self.mutual_tls:  # the trackers check each other's certificate (the local CA's)
                argv += ["--tracker-ca", str(self.tls_dir / "ca.pem")]
                if self.mutual_tls:  # any client certificate of the CA will do: the peers'
                    argv += [
                        "--tracker-cert",
                        str(self.tls_dir / "peer.pem"),
                        "--tracker-key",
                        str(self.tls_dir / "peer.key"),
                    ]
        if self.netns:  # reachable from the peers' namespaces too
            argv += ["--host", "0.0.0.0"]
        if self.replicas is not None:
            argv += self.replicas.etcd_args()
        return argv + self.tracker_args

    def start_peer(self, i: int, port: int = 0, extra_args: list[str] | tuple[str, ...] = ()) -> Daemon:
        """Start peer ``i`` (on ``port``; 0: any), with ``extra_args`` after
        the cluster's ``peer_args`` (e.g. impact-control limits for one peer)."""
        while len(self.peers) <= i:
            self.peers.append(None)
        tracker = ",".join([self.tracker_addr, *self.standby_addrs])
        prefix: list[str] = []
        if self.netns:
            prefix = ["ip", "netns", "exec", self._namespaces().namespace(i)]
            tracker = self.host_tracker_addr(i)
        if self.private_hosts:
            prefix = self.host_argv(i, [])
        argv = [
            *prefix,
            find_peer_binary(),
            "--data",
            str(self.data_dir / "peers" / f"peer-{i}"),
            "--port",
            str(port),
            *{
                "namespace": ["--namespace", str(self.namespace)],
                "fetch": ["--metadata", "fetch"],
                "auto": [],  # st-peer's default: fetch, as it has --tracker and no --namespace
            }[self.peer_metadata],
            *(["--host", self.peer_host(i)] if self.hosts or self.netns else []),
            "--tracker",
            tracker,
            "--announce-interval",
            str(self.announce_interval),
            "--metrics-port",
            "0",
            *(["--domain", self.domains[i]] if i < len(self.domains) and self.domains[i] else []),
            *(["--key-file", str(self.key_file)] if self.auth else []),
            *self._peer_tls_args(),
            *self.peer_args,
            *extra_args,
        ]
        try:
            d = Daemon(
                f"peer-{i}", argv, self.data_dir / "logs" / f"peer-{i}.log", die_with_parent=self.die_with_parent
            )
        except DaemonStartError as e:
            raise (e if self.netns else self._port_error(e, [(port, "port", "")], self.peer_host(i))) from None
        self.peers[i] = d
        return d

    def add_peer(self, extra_args: list[str] | tuple[str, ...] = (), wait: bool = True) -> Daemon:
        """Grow the cluster by one peer (the next index, any port), as a new
        node joins a running cluster (paper 5): it takes new files after its
        first announce; ``storetorrent rebalance --spread`` moves existing
        copies onto it. With ``wait``, returns once the tracker counts it live.

        Raises
        ------
        DaemonStartError
            The peer did not start.
        TimeoutError
            It did not announce within 30 s.
        """
        i = len(self.peers)
        d = self._start_keeping({"port": 0}, set(), lambda ports: self.start_peer(i, ports["port"], extra_args))
        self.n_peers = len(self.peer_addrs)
        if wait:
            self.wait_for_peers(self.n_peers)
        if self.tracker is not None and (self.data_dir / CLUSTER_FILE).exists():
            self._write_cluster_file()
        return d

    def peer_host(self, i: int) -> str:
        """The address peer ``i`` listens on: 127.0.0.<i+2> with ``hosts``,
        its namespace's address with ``netns``."""
        if self.netns:
            return self._namespaces().peer_ip(i)
        return f"127.0.0.{i + 2}" if self.hosts else "127.0.0.1"

    def host_tracker_addr(self, i: int) -> str:
        """Every tracker's ``host:port`` (comma-separated) as peer ``i``'s
        network namespace reaches them (with ``netns``: this machine's end
        of its link; the trackers listen on every address)."""
        ports = [a.rpartition(":")[2] for a in [self.tracker_addr, *self.standby_addrs]]
        return ",".join(f"{self._namespaces().host_ip(i)}:{p}" for p in ports)

    def host_dir(self, i: int) -> Path:
        """Host ``i``'s own folder (``<data>/hosts/host-<i>``, made), for
        its clients' infofile copies and files: with ``private_hosts`` no
        other host sees it."""
        d = self.data_dir / "hosts" / f"host-{i}"
        d.mkdir(parents=True, exist_ok=True)
        return d

    def host_hidden(self, i: int) -> list[Path]:
        """The folders host ``i`` does not see with ``private_hosts``: every
        folder of ``<data>`` (namespace, tracker and etcd state, logs,
        client-cache) but ``peers``, ``hosts`` and ``tls`` (a host's
        credentials, as ``secret.key`` is), and in those two every other
        host's (made if missing, as a mount point). Files of ``<data>``
        stay seen."""
        n = max(self.n_peers, len(self.peers), i + 1)
        others = [j for j in range(n) if j != i]
        theirs = [self.data_dir / "peers" / f"peer-{j}" for j in others] + [self.host_dir(j) for j in others]
        for d in theirs:
            d.mkdir(parents=True, exist_ok=True)
        kept = {"peers", "hosts", "tls"}
        return sorted(p for p in self.data_dir.iterdir() if p.is_dir() and p.name not in kept) + theirs

    def host_argv(self, i: int, argv: list[str]) -> list[str]:
        """``argv`` run on host ``i`` with ``private_hosts``: in peer ``i``'s
        network namespace, with :meth:`host_hidden` hidden (an empty tmpfs
        over each, in a mount namespace of the command's own, gone with
        it). Root only (st_py.deploy.netns).

        Raises
        ------
        NetnsError
            The network namespace cannot be made here (not root, no ``ip``).
        """
        from st_py.deploy.netns import hidden_argv

        ns = self._namespaces().namespace(i)
        return ["ip", "netns", "exec", ns, *hidden_argv(self.host_hidden(i), argv)]

    def _namespaces(self):
        if getattr(self, "_netns", None) is None:
            from st_py.deploy.netns import NetNamespaces

            self._netns = NetNamespaces()
        return self._netns

    def link_down(self, i: int) -> None:
        """With ``netns``: cut peer ``i`` off the network (it keeps running)."""
        self._namespaces().link(i, False)

    def link_up(self, i: int) -> None:
        """With ``netns``: reconnect peer ``i`` to the network (undoes :meth:`link_down`)."""
        self._namespaces().link(i, True)

    def _peer_tls_args(self) -> list[str]:
        if not (self.tls or self.mutual_tls):
            return []
        args = ["--tracker-ca", str(self.tls_dir / "ca.pem")]
        if self.mutual_tls:
            args += ["--tracker-cert", str(self.tls_dir / "peer.pem"), "--tracker-key", str(self.tls_dir / "peer.key")]
        return args

    def set_standbys(self, addrs: list[str]) -> None:
        """Give every peer these standby trackers' addresses beside the
        leader's (``standby_addrs``): each peer is started again with all of
        them, as an operator changes the peers' ``--tracker``, and this
        returns once every peer announced to the tracker again."""
        self.standby_addrs = list(addrs)
        for i, d in enumerate(self.peers):
            if d is not None:
                addr = self.kill_peer(i)
                # on its port, as an operator restarts a peer: the peerlists and the standbys' state
                # keep naming it right (a new port would be unknown to a standby until it announces)
                self.start_peer(i, port=int(addr.rpartition(":")[2]))
        self.wait_for_peers(sum(d is not None for d in self.peers))

    def kill_peer(self, i: int) -> str:
        """SIGKILL peer ``i``; returns its address."""
        d = self.peers[i]
        assert d is not None
        d.kill()
        return d.addr

    def restart_tracker(self) -> None:
        """SIGKILL the tracker (a crash) and start it again on the same ports."""
        if self.tracker is not None:
            self.tracker.kill()
        self.start_tracker()

    def client(self, **kwargs):
        """A :class:`Client` of this cluster's tracker; :meth:`stop` closes
        it (its gRPC channel) if the caller has not."""
        from st_py.client.client import Client

        kwargs.setdefault("tls", self.client_tls)
        if self.metadata is not None:
            kwargs.setdefault("metadata", self.metadata)
        # copies (fetch, or auto for a file not seen here) in the cluster's folder, not ~/.cache
        m = kwargs.get("metadata")
        if m == "fetch" or (m in (None, "auto") and not os.environ.get("STORETORRENT_METADATA_CACHE")):
            kwargs.setdefault("metadata_cache", str(self.data_dir / "client-cache"))
        c = Client(self.tracker_addr, **kwargs)
        self._clients.append(c)
        return c

    def wait_for_peers(self, n: int, timeout: float = 30.0) -> None:
        """Wait until the tracker counts ``n`` live peers."""
        t = TrackerClient(self.tracker_addr, timeout=5, tls=self.client_tls)
        deadline = time.monotonic() + timeout
        alive = 0
        try:
            while True:
                try:
                    alive = t.status().alive_peers
                    if alive >= n:
                        return
                except Exception:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(f"only {alive} of {n} peers announced to the tracker")
                time.sleep(0.05)
        finally:
            t.close()

    def _write_cluster_file(self) -> None:
        info = {
            "tracker": ",".join([self.tracker_addr, *self.standby_addrs]),
            "peers": self.peer_addrs,
            "namespace": str(self.namespace),
            "pid": os.getpid(),
            "tls": list(self.client_tls),
            "status": self.tracker.metrics_addr if self.tracker is not None else None,
            "s3": self.s3_url,
        }
        (self.data_dir / CLUSTER_FILE).write_text(json.dumps(info, indent=1))
        layout = {
            "tracker": self.tracker_port,
            "metrics": self.metrics_port,
            "peers": [int(a.rsplit(":", 1)[1]) for a in self.peer_addrs],
            "s3": self.s3_port if self.s3_daemon is not None else self._last_layout().get("s3", 0),
            **(self.replicas.layout() if self.replicas is not None else {}),
        }
        (self.data_dir / "layout.json").write_text(json.dumps(layout))

    def _last_layout(self) -> dict:
        try:
            return json.loads((self.data_dir / "layout.json").read_text())
        except (OSError, ValueError):
            return {}

    def stop(self) -> None:
        """Close the clients made by :meth:`client`, stop every peer and the
        tracker (SIGTERM, then SIGKILL), remove the network namespaces and
        ``cluster.json``. The data folder is kept."""
        clients, self._clients = self._clients, []
        for c in clients:
            c.close()
        if self.s3_daemon is not None:
            self.s3_daemon.stop()
        for d in self.peers:
            if d is not None:
                d.stop()
        if self.replicas is not None:
            self.replicas.stop()
        if self.tracker is not None:
            self.tracker.stop()
        if self.replicas is not None:
            self.replicas.stop_etcd()
        if getattr(self, "_netns", None) is not None:
            self._netns.destroy()
        try:
            (self.data_dir / CLUSTER_FILE).unlink()
        except FileNotFoundError:
            pass

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

"""The master's per-file trackers (paper 3.5: "the master tracker running at
the well-known address may spawn per-file trackers to handle metadata load
for one or more files"): child processes of the master, one per shard
(st_py/tracker/shards.py), each the one writer of its files' infofiles.

The master starts them with its own options (namespace root, key, users
file, TLS) and ``--shard I --shards N+1 --master ADDR``, waits for each
``listening on HOST:PORT`` line, and keeps a gRPC channel to each for the
calls it makes on its users' behalf (forwarded commits, chmod, deletes).
Each child gets SIGKILL when the master dies (``setpriv --pdeathsig``), so
a restarted master never meets an orphan; each also holds a lock on its
shard, so two processes never write the same files.

A child that dies is started again, on the same port when it is free: after
the master has decided what the dead one's unsettled admissions did
(:meth:`Admissions.resolve`), after a backoff of 0.2 s doubling to 5 s (and
back to 0.2 s once it has run for 30 s). Clients retry their commits
meanwhile (the request ids make retries safe) and, if it came back at
another address, re-open the file through the master.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from st_py._proto import tracker_pb2 as pb
from st_py._proto import tracker_pb2_grpc as pb_grpc

log = logging.getLogger("st.tracker")

FIRST_BACKOFF_S = 0.2
MAX_BACKOFF_S = 5.0
STABLE_AFTER_S = 30.0
READY_TIMEOUT_S = 30.0
STOP_GRACE_S = 5.0
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 256 * 1024 * 1024),
    ("grpc.max_send_message_length", 256 * 1024 * 1024),
]


@dataclass
class FileTracker:
    """One per-file tracker process, as the master sees it."""

    shard: int
    port: int = 0  # the port it listens on (kept for its restarts)
    addr: str = ""  # host:port clients are sent to ("" before it first served)
    proc: asyncio.subprocess.Process | None = None
    alive: bool = False
    restarts: int = 0
    started: float = 0.0  # time.monotonic() of its last start
    backoff: float = FIRST_BACKOFF_S
    channel: grpc.aio.Channel | None = None
    stub: pb_grpc.TrackerStub | None = None
    tasks: list[asyncio.Task] = field(default_factory=list)


def die_with_parent(argv: list[str]) -> list[str]:
    """Prefix ``argv`` so the child gets SIGKILL when the master dies
    (``setpriv --pdeathsig``, util-linux; the signal follows the thread that
    started the child, here the event loop's, which lives as long as the
    master). Without setpriv the child watches its parent instead
    (``--master-pid``)."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--", *argv] if setpriv else argv


def channel_to(addr: str, creds: grpc.ChannelCredentials | None) -> grpc.aio.Channel:
    """An asyncio gRPC channel to another tracker of this master (TLS when
    ``creds``)."""
    if creds is None:
        return grpc.aio.insecure_channel(addr, options=CHANNEL_OPTIONS)
    return grpc.aio.secure_channel(addr, creds, options=CHANNEL_OPTIONS)


def internal_credentials(
    tls: tuple[str, str, str | None] | None, ca: str | None, cert: str | None, key: str | None
) -> grpc.ChannelCredentials | None:
    """TLS for the calls between a master and its per-file trackers, which
    serve with the master's certificate: trust ``ca`` (default: the client
    CA of mutual TLS) and, under mutual TLS, show client certificate
    ``cert`` / ``key`` (any the client CA signed: the user a call is made
    for travels in its TRACKER capability). None without TLS.

    Raises
    ------
    ValueError
        TLS without a CA to check the trackers' certificate with, or mutual
        TLS without a client certificate.
    """
    if not tls:
        return None
    ca = ca or tls[2]
    if not ca:
        raise ValueError(
            "per-file trackers over TLS: give --tracker-ca, the CA that signed --tls-cert, so the "
            "trackers can check each other's certificate"
        )
    if tls[2] and not (cert and key):
        raise ValueError(
            "per-file trackers with mutual TLS: give --tracker-cert and --tracker-key, a client "
            "certificate signed by --tls-client-ca, for the calls between trackers"
        )
    return grpc.ssl_channel_credentials(
        root_certificates=Path(ca).read_bytes(),
        private_key=Path(key).read_bytes() if cert and key else None,
        certificate_chain=Path(cert).read_bytes() if cert and key else None,
    )


class FileTrackers:
    """Starts, watches and restarts the master's N per-file trackers.

    Parameters
    ----------
    n : int
        Per-file trackers; files hash over N + 1 shards, 0 the master's.
    argv : callable(shard, port) -> list of str
        The command line of per-file tracker ``shard`` listening on ``port``.
    advertise_host : str
        The host clients (and the master) reach them at.
    base_port : int
        Per-file tracker i listens on ``base_port + i - 1``; 0: free ports.
    creds : grpc.ChannelCredentials, optional
        TLS for the master's calls to them.
    on_death : async callable(shard)
        Called after a child died and was reaped, before it is started again.
    env : dict, optional
        The children's environment.
    """

    def __init__(
        self,
        n: int,
        argv: Callable[[int, int], list[str]],
        advertise_host: str,
        base_port: int = 0,
        creds: grpc.ChannelCredentials | None = None,
        on_death: Callable[[int], Awaitable[None]] | None = None,
        env: dict | None = None,
    ):
        self.n = n
        self._argv, self._host, self._creds = argv, advertise_host, creds
        self._on_death, self._env = on_death, env
        self.trackers = [FileTracker(i, base_port + i - 1 if base_port else 0) for i in range(1, n + 1)]
        self._stopping = False

    @property
    def shards(self) -> int:
        """N + 1: the shards files hash over (0 is the master's)."""
        return self.n + 1

    async def start(self) -> None:
        """Start every per-file tracker and wait until each serves.

        Raises
        ------
        RuntimeError
            One did not print ``listening on`` within 30 s (its stderr is the
            master's).
        """
        await asyncio.gather(*(self._first_spawn(t) for t in self.trackers))
        for t in self.trackers:
            t.tasks.append(asyncio.create_task(self._watch(t)))

    async def _first_spawn(self, t: FileTracker) -> None:
        """Start ``t`` on its port or, if that is taken (by another program,
        or an old per-file tracker of a master that just restarted not yet
        gone), on any port: clients learn its address from the master on
        open, so a fixed port is a convenience, not a contract."""
        try:
            await self._spawn(t)
        except (RuntimeError, OSError) as e:
            if not t.port:
                raise
            log.warning("file tracker %d: cannot start on port %d (%s); trying any port", t.shard, t.port, e)
            t.port = 0
            await self._spawn(t)

    async def _spawn(self, t: FileTracker) -> None:
        argv = die_with_parent(self._argv(t.shard, t.port))
        t.proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, env=self._env, start_new_session=True
        )
        assert t.proc.stdout is not None
        try:
            addr = await asyncio.wait_for(_listening(t.proc.stdout), READY_TIMEOUT_S)
        except (asyncio.TimeoutError, EOFError):
            if t.proc.returncode is None:
                t.proc.kill()
            await t.proc.wait()
            raise RuntimeError(
                f"file tracker {t.shard} did not start (exit status {t.proc.returncode}; its log is the master's)"
            ) from None
        t.port = int(addr.rsplit(":", 1)[1])
        t.addr = f"{self._host}:{t.port}"
        if t.channel is not None:
            await t.channel.close()
        t.channel = channel_to(t.addr, self._creds)
        t.stub = pb_grpc.TrackerStub(t.channel)
        t.alive, t.started = True, time.monotonic()
        t.tasks = [x for x in t.tasks if not x.done()]
        t.tasks.append(asyncio.create_task(_drain(t.proc.stdout)))
        log.info("file tracker %d of %d serving at %s (pid %d)", t.shard, self.n, t.addr, t.proc.pid)

    async def _watch(self, t: FileTracker) -> None:
        """Start ``t`` again whenever it dies, until :meth:`stop`."""
        while True:
            assert t.proc is not None
            code = await t.proc.wait()
            if self._stopping:
                return
            t.alive = False
            up = time.monotonic() - t.started
            if up >= STABLE_AFTER_S:
                t.backoff = FIRST_BACKOFF_S
            log.warning(
                "file tracker %d (pid %d, %s) exited with status %s after %.1f s; starting it again in %.1f s",
                t.shard,
                t.proc.pid,
                t.addr,
                code,
                up,
                t.backoff,
            )
            if self._on_death is not None:
                try:
                    await self._on_death(t.shard)
                except Exception:
                    log.exception("file tracker %d: settling what it held failed", t.shard)
            await asyncio.sleep(t.backoff)
            t.backoff = min(t.backoff * 2, MAX_BACKOFF_S)
            while not self._stopping:
                try:
                    await self._spawn(t)
                    break
                except (RuntimeError, OSError) as e:
                    if t.port:  # its port may be taken now: any port (clients re-open through the master)
                        log.warning(
                            "file tracker %d: cannot start on port %d (%s); trying any port", t.shard, t.port, e
                        )
                        t.port = 0
                        continue
                    log.error("file tracker %d: %s; trying again in %.1f s", t.shard, e, t.backoff)
                    await asyncio.sleep(t.backoff)
                    t.backoff = min(t.backoff * 2, MAX_BACKOFF_S)
            t.restarts += 1

    def addr(self, shard: int) -> str:
        """Where clients send the writes of shard ``shard``'s files (its
        last address while it restarts)."""
        return self.trackers[shard - 1].addr

    def stub(self, shard: int) -> pb_grpc.TrackerStub | None:
        """The master's stub to per-file tracker ``shard`` (None while it is down)."""
        t = self.trackers[shard - 1]
        return t.stub if t.alive else None

    def status(self, load: Callable[[int], tuple[int, int]] = lambda shard: (0, 0)) -> list[pb.FileTracker]:
        """Each per-file tracker as ``pb.FileTracker``; ``load(shard)`` gives
        the commits and records the master admitted for it."""
        now = time.monotonic()
        out = []
        for t in self.trackers:
            commits, records = load(t.shard)
            out.append(
                pb.FileTracker(
                    shard=t.shard,
                    shards=self.shards,
                    addr=t.addr,
                    alive=t.alive,
                    pid=t.proc.pid if t.proc is not None else 0,
                    restarts=t.restarts,
                    uptime_s=now - t.started if t.alive else 0.0,
                    commits=commits,
                    records=records,
                )
            )
        return out

    async def stop(self) -> None:
        """SIGTERM every per-file tracker, SIGKILL those still running after
        5 s, and close the channels."""
        self._stopping = True
        procs = [t.proc for t in self.trackers if t.proc is not None and t.proc.returncode is None]
        for p in procs:
            try:
                p.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
        try:
            await asyncio.wait_for(asyncio.gather(*(p.wait() for p in procs)), STOP_GRACE_S)
        except asyncio.TimeoutError:
            for p in procs:
                if p.returncode is None:
                    p.kill()
            await asyncio.gather(*(p.wait() for p in procs))
        for t in self.trackers:
            for task in t.tasks:
                task.cancel()
            if t.channel is not None:
                await t.channel.close()
            t.alive = False


async def _listening(stream: asyncio.StreamReader) -> str:
    """The ``HOST:PORT`` of the child's ``listening on`` line.

    Raises
    ------
    EOFError
        Its stdout closed first (it exited).
    """
    while True:
        line = await stream.readline()
        if not line:
            raise EOFError
        text = line.decode(errors="replace").strip()
        if text.startswith("listening on "):
            return text.split("listening on ", 1)[1]


async def _drain(stream: asyncio.StreamReader) -> None:
    """Keep reading the child's stdout so it never blocks on a full pipe."""
    while await stream.readline():
        pass


def master_pid_watch(master_pid: int, every_s: float = 1.0) -> Callable[[], Awaitable[None]]:
    """A coroutine function for a per-file tracker started without setpriv:
    returns once its master (``master_pid``) is gone (its parent changed)."""

    async def watch() -> None:
        while os.getppid() == master_pid:
            await asyncio.sleep(every_s)

    return watch

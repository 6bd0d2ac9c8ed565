"""Keeping a local cluster running (``storetorrent up``): a daemon (the
tracker, a peer, the S3 endpoint; with replicated trackers each standby
tracker and etcd member) that dies
is restarted on the same port with exponential backoff, and the cluster keeps
serving meanwhile (paper 4.3: the others carry on; the restarted peer comes
back with its records and announces again).

Backoff per daemon: a daemon that had run at least ``STABLE_AFTER_S`` (10 s)
when it died is restarted after ``FIRST_BACKOFF_S`` (0.2 s): a crash of a
healthy daemon costs its clients a restart, not a wait that grew with
earlier crashes (issue 39: a tracker killed every 15 s stayed down 3.3, 5.8
and 10 s when the backoff only reset after 60 s up). One that dies sooner is
in a crash loop, and waits twice as long each time, up to 30 s. Every exit
and restart is logged (``storetorrent.supervisor``) and kept in
:attr:`Supervisor.events`.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass

from st_py.deploy.cluster import Daemon, LocalCluster

log = logging.getLogger("storetorrent.supervisor")

FIRST_BACKOFF_S = 0.2
MAX_BACKOFF_S = 30.0
STABLE_AFTER_S = 10.0


@dataclass
class _State:
    backoff: float = FIRST_BACKOFF_S
    restart_at: float | None = None  # monotonic; None: running
    started: float = 0.0
    restarts: int = 0


class _Member:
    """An etcd member seen as a daemon by :meth:`Supervisor.check`."""

    def __init__(self, m):
        self.m = m
        self.proc = m.proc

    def alive(self) -> bool:
        return self.m.alive()

    def kill(self) -> None:
        if self.m.proc is not None:
            self.m.proc.wait()


class Supervisor:
    """Restarts the dead daemons of ``cluster``; call :meth:`check` often
    (every half second is plenty)."""

    def __init__(self, cluster: LocalCluster, clock=time.monotonic):
        self.cluster = cluster
        self.clock = clock
        self.events: deque[tuple[float, str, str]] = deque(maxlen=1000)  # (unix time, daemon, what)
        self._state: dict[str, _State] = {}

    def _daemons(self) -> list[tuple[str, Daemon | _Member | None, int | None]]:
        c = self.cluster
        out: list[tuple[str, Daemon | _Member | None, int | None]] = [("tracker", c.tracker, None)]
        out += [(f"peer-{i}", d, i) for i, d in enumerate(c.peers)]
        if c.s3:
            out.append(("s3", c.s3_daemon, None))
        if c.replicas is not None:
            out += [(f"tracker-{j + 1}", d, j) for j, d in enumerate(c.replicas.standbys)]
            if c.replicas.etcd is not None:
                out += [(m.name, _Member(m), k) for k, m in enumerate(c.replicas.etcd.members)]
        return out

    def _note(self, name: str, what: str, level: int = logging.WARNING) -> None:
        self.events.append((time.time(), name, what))
        log.log(level, "%s: %s", name, what)

    def check(self) -> None:
        """Restart the daemons found dead: note the exit, wait the daemon's backoff
        (0.2 s for one that had run 10 s or more, else doubling to 30 s), then
        start it again on its port. A failed restart is retried after the next backoff; never
        raises for a daemon that will not start."""
        now = self.clock()
        for name, d, idx in self._daemons():
            st = self._state.setdefault(name, _State(started=now))
            if d is not None and d.alive():
                if st.restart_at is None and now - st.started >= STABLE_AFTER_S:
                    st.backoff = FIRST_BACKOFF_S
                continue
            if st.restart_at is None:  # just found dead
                if now - st.started >= STABLE_AFTER_S:  # it had run a while: no crash loop
                    st.backoff = FIRST_BACKOFF_S
                code = d.proc.returncode if d is not None else None
                st.restart_at = now + st.backoff
                self._note(name, f"exited (status {code}); restarting in {st.backoff:g} s")
                if d is not None:
                    d.kill()  # reap it and release its pipe and log
                continue
            if now < st.restart_at:
                continue
            try:
                self._restart(name, d, idx)
            except (RuntimeError, OSError) as e:
                st.restart_at = now + st.backoff
                self._note(name, f"restart failed ({e}); trying again in {st.backoff:g} s")
            else:
                st.restarts += 1
                st.restart_at = None
                st.started = now
                self._note(name, f"restarted (restart {st.restarts}) at {self._addr(name, idx)}", logging.INFO)
            st.backoff = min(st.backoff * 2, MAX_BACKOFF_S)

    def _addr(self, name: str, idx: int | None) -> str:
        c = self.cluster
        if name.startswith("etcd") and c.replicas is not None and c.replicas.etcd is not None:
            return c.replicas.etcd.members[idx or 0].endpoint
        if name.startswith("tracker-") and c.replicas is not None:
            s = c.replicas.standbys[idx or 0]
            return s.addr if s is not None else "?"
        d = c.s3_daemon if name == "s3" else c.tracker if idx is None else c.peers[idx]
        return d.addr if d is not None else "?"

    def _restart(self, name: str, d, idx: int | None) -> None:
        c = self.cluster
        if name.startswith("etcd") and c.replicas is not None and c.replicas.etcd is not None:
            c.replicas.etcd.start_member(idx or 0)  # its data folder as it was: it rejoins
            return
        if name.startswith("tracker-") and c.replicas is not None:
            c.replicas.start_standby(idx or 0)  # a standby until elected
            return
        if name == "s3":
            c.start_s3()  # on its port (LocalCluster keeps s3_port)
            return
        if idx is None:
            c.start_tracker()  # on its port (LocalCluster keeps tracker_port)
            return
        port = int(d.addr.rsplit(":", 1)[1]) if d is not None else 0
        c.start_peer(idx, port)  # same port: the same address for clients and peerlists

    def restarts(self) -> dict[str, int]:
        """Restarts done so far, by daemon name (``tracker``, ``peer-<i>``, ``s3``)."""
        return {n: s.restarts for n, s in self._state.items()}

"""Peer registry and liveness from announces (paper 3.3, 4.3).

Liveness is soft state: a peer is alive while its last announce is younger
than ``window = interval * misses``. Known peers are also kept in the tracker's
SQLite state so that after a tracker restart they get one window of grace to
announce again instead of being reported failed at once, with the space they
last announced (kept at their first announce and then at most every
``SAVE_SPACE_S``), so that creates can be scheduled before they announce
again (issue 14). A peer the state knows no space of (kept by an older
tracker) has ``space_known`` False until it announces.

The registry also keeps what an operator asks after (the status page and
metrics, docs/operations.md): counts of announces and failure reports, and
the last ``EVENTS_KEPT`` peer events (a client's failure report, a peer
failed for missing its announces, a failed peer announcing again, the
tracker's own stalls), noticed by :meth:`PeerRegistry.sweep`, which the
tracker runs every announce interval and before each status page or
scrape; peer events are kept in the tracker state, so the failure history
survives a restart.

Each announce also says when the peer's process started, its data
directory and that directory's filesystem: a new start time counts as a
restart (kept in the tracker state, an event on the status page), the
peer's *name* is the last component of its data directory (``peer-1``
under ``storetorrent up``), and peers announcing one filesystem id share
its space (:func:`st_py.tracker.health.space_totals`).

A peer an operator drains (``storetorrent drain``) is ``draining`` while its
copies are moved off and ``retired`` once none is left: either way it stays
readable while it runs, but :meth:`PeerRegistry.schedulable` leaves it out,
so no new file is scheduled on it and no peerlist grows by it. The state is
kept in the tracker state until the operator puts the peer back in service.

The tracker's own stalls are not peer failures: a gap in the sweeper's
clock longer than half a liveness window is not counted against any peer
(:meth:`PeerRegistry._catch_up`).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from st_py.core.peer_counts import PeerCounts, in_service
from st_py.core.placement import Domain, normalize_domain, peer_domain

from .state import TrackerState

SAVE_SPACE_S = 30.0  # how often a peer's announced space is written to the state
EVENTS_KEPT = 50  # recent peer events shown on the status page
STALL_MIN_S = 1.0  # the shortest gap in the sweeper's clock taken as the tracker's own stall

log = logging.getLogger("st.tracker")


@dataclass
class PeerInfo:
    """What the tracker knows of one peer: its last announce (space in bytes,
    records, load, start time, filesystem, domain), its liveness bookkeeping
    and drain state. Mutated by :class:`PeerRegistry` only."""

    peer_id: str
    addr: str
    capacity_bytes: int = 0
    used_bytes: int = 0
    free_bytes: int = 0
    records: int = 0
    last_announce: float = field(default_factory=time.monotonic)
    announced: bool = False  # announced since this tracker started
    reported_failed: bool = False
    space_known: bool = True  # False: loaded from a state without its space, not announced since
    unannounced_bytes: int = 0  # committed to it since its last announce (not in free_bytes yet)
    saved_at: float = 0.0  # when its space was last written to the state (time.monotonic())
    load: float = 0.0  # event-loop busy fraction it announced (0..1)
    was_alive: bool = True  # live when last looked at (sweep): a change is an event
    lapsed: bool = False  # its announces stopped for a liveness window (sweep), even if reported failed before
    # its verifying scrubber's counters since it started (docs/peer.md, "Verifier")
    copies_verified: int = 0
    copies_bad: int = 0
    copies_quarantined: int = 0
    drain_state: str = ""  # "": in service; "draining", "retired" (storetorrent drain)
    name: str = ""  # the last component of its data directory ("": not announced)
    started_at: float = 0.0  # Unix time its process started, as announced (0: unknown)
    restarts: int = 0  # new start times seen (kept in the tracker state)
    returns: int = 0  # announces after being failed, since the tracker started
    fs_id: str = ""  # its data directory's filesystem ("<host>:<st_dev>"; "": unknown)
    fs_size_bytes: int = 0  # that filesystem's size and available bytes, before --capacity
    fs_free_bytes: int = 0
    domain: str = ""  # its failure domain as declared (st-peer --domain); "": its host
    # its infofile copies (st-peer --metadata fetch) as it announced them: see infofile_copies()
    infofile_copies: int = 0
    infofile_copies_behind: int = 0
    infofile_copies_max_lag: int = 0
    infofile_copies_caught_up_at: float = 0.0

    @property
    def usable_free(self) -> int:
        """Free bytes as announced, less what was committed to it since."""
        return self.free_bytes - self.unannounced_bytes

    @property
    def failure_domain(self) -> Domain:
        """Its failure domain, coarsest first: the one it declared, else its
        host (docs/replication.md, "Failure domains")."""
        return peer_domain(self.domain, self.addr)


@dataclass
class PeerEvent:
    """Something that happened to a peer, for the status page."""

    at: float  # time.time()
    kind: str  # "reported" (a client's ReportFailure), "failed" (missed announces), "returned"
    addr: str
    peer_id: str
    detail: str
    count: int = 1  # the same report repeated while the peer stayed failed
    seq: int = 0  # its row in the tracker state (kept across restarts)


class PeerRegistry:
    """Every peer the tracker knows, their liveness from announces (window
    ``interval_s * misses`` seconds, paper 4.3) and the events an operator
    sees; loaded from and kept in the tracker state.

    Not thread-safe: used on the tracker's event loop."""

    def __init__(self, state: TrackerState, interval_s: float, misses: int):
        self.state = state
        self.interval_s = interval_s
        self.window_s = interval_s * misses
        self.peers: dict[str, PeerInfo] = {}
        self.events: deque[PeerEvent] = deque(maxlen=EVENTS_KEPT)
        self.announces = 0  # announces received
        self.failure_reports = 0  # ReportFailure RPCs
        self.failures: dict[str, int] = {}  # cause ("reported", "missed_announces") -> live-to-failed transitions
        self.stalls = 0  # times this tracker found itself stalled (its own clock jumped)
        self.bad_copies: dict[str, int] = {}  # who found it ("peer" verifier, "client" scan) -> reports
        self._tick: float | None = None  # last look at the clock by sweep(); None: no sweeper runs
        for seq, at, kind, addr, peer_id, detail, count in state.peer_events(EVENTS_KEPT):
            self.events.append(PeerEvent(at, kind, addr, peer_id, detail, count, seq))
        now = time.monotonic()
        for peer_id, addr, capacity, used, free in state.known_peers():
            self.peers[peer_id] = PeerInfo(
                peer_id, addr, capacity or 0, used or 0, free or 0, last_announce=now, space_known=free is not None
            )
        for peer_id, drain_state in state.drain_states().items():
            if peer_id in self.peers:
                self.peers[peer_id].drain_state = drain_state
        for peer_id, (started_at, restarts) in state.peer_starts().items():
            if peer_id in self.peers:
                self.peers[peer_id].started_at, self.peers[peer_id].restarts = started_at, restarts
        for peer_id, domain in state.peer_domains().items():
            if peer_id in self.peers:
                self.peers[peer_id].domain = domain

    def announce(
        self,
        peer_id: str,
        addr: str,
        capacity: int,
        used: int,
        free: int,
        records: int,
        load: float = 0.0,
        *,
        started_at: float = 0.0,
        data_dir: str = "",
        fs_id: str = "",
        fs_size: int = 0,
        fs_free: int = 0,
        domain: str = "",
    ) -> None:
        """A peer's announce (paper 3.3): it is live, with this space.

        Parameters
        ----------
        capacity, used, free : int
            Bytes, as the peer announced them (``--capacity`` applied).
        load : float
            Its event loop's busy fraction, 0..1.
        started_at : float
            Unix time its process started (0: an older peer, unknown); a
            value other than the last one seen is a restart.
        data_dir, fs_id : str
            Its data directory (its last component names the peer) and that
            directory's filesystem id.
        fs_size, fs_free : int
            That filesystem's size and available bytes, before ``--capacity``.
        domain : str
            Its failure domain as declared (``st-peer --domain site/rack/host``;
            ``""``: none, its host is its domain); kept in the tracker state.
        """
        self.announces += 1
        p = self.peers.get(peer_id)
        if p is None:
            p = self.peers[peer_id] = PeerInfo(peer_id, addr)
            # out of service before this tracker heard of it (a standby elected, a checkpoint)
            p.drain_state = self.state.drain_states().get(peer_id, "")
        now = time.monotonic()
        restarted = started_at > 0 and p.started_at > 0 and started_at != p.started_at
        if restarted:
            p.restarts += 1
            log.info("peer %s (%s) restarted (restart %d)", addr, peer_id, p.restarts)
        # A restart is one event: part of the return of a failed peer, else its own.
        again = f"its process restarted (restart {p.restarts})" if restarted else ""
        if not p.was_alive:
            self._event(
                "returned",
                p,
                f"announced again after {now - p.last_announce:.1f} s" + (f"; {again}" if again else ""),
                addr,
            )
            log.info("peer %s (%s) announced again", addr, peer_id)
            p.was_alive = True
            p.returns += 1
        elif restarted:
            self._event("restarted", p, f"{again}, within the liveness window", addr)
        if p.addr != addr or not p.announced or now - p.saved_at >= SAVE_SPACE_S:
            self.state.remember_peer(peer_id, addr, capacity, used, free)
            p.saved_at = now
        p.addr, p.capacity_bytes, p.used_bytes, p.free_bytes, p.records = addr, capacity, used, free, records
        if started_at > 0 and started_at != p.started_at:
            p.started_at = started_at
            self.state.remember_start(peer_id, started_at, p.restarts)
        if data_dir:
            p.name = PurePosixPath(data_dir).name or data_dir
        domain = normalize_domain(domain)
        if domain != p.domain:
            if p.announced or p.domain:
                log.info(
                    "peer %s (%s) is now in failure domain %s (was %s)",
                    addr,
                    peer_id,
                    domain or "of its host",
                    p.domain or "of its host",
                )
            p.domain = domain
            self.state.remember_domain(peer_id, domain)
        p.fs_id, p.fs_size_bytes, p.fs_free_bytes = fs_id, fs_size, fs_free
        p.load = min(max(load, 0.0), 1.0)
        p.last_announce = now
        p.announced = p.space_known = True
        p.reported_failed = p.lapsed = False
        p.unannounced_bytes = 0

    def verified(self, peer_id: str, verified: int, bad: int, quarantined: int) -> None:
        """The verifier counters a peer announced."""
        p = self.peers.get(peer_id)
        if p is not None:
            p.copies_verified, p.copies_bad, p.copies_quarantined = verified, bad, quarantined

    def infofile_copies(self, peer_id: str, copies: int, behind: int, max_lag: int, caught_up_at: float) -> None:
        """The infofile copies a peer announced (st-peer --metadata fetch;
        the peer counts them, st_core/src/infofile_copy.h, ``Stats``): how
        many, how many files the tracker named are below the generation it
        named, the largest lag (generations) and the Unix time they were
        last all current (0: never)."""
        p = self.peers.get(peer_id)
        if p is not None:
            p.infofile_copies, p.infofile_copies_behind = copies, behind
            p.infofile_copies_max_lag, p.infofile_copies_caught_up_at = max_lag, caught_up_at

    def bad_copy(self, addr: str, detail: str, source: str) -> None:
        """A copy on ``addr`` failed its CRC-32C check: found by the peer's
        verifier (``source`` "peer", the copy is quarantined) or by a
        client's checked read (``source`` "client"). An event on the status
        page; the peer stays live."""
        self.bad_copies[source] = self.bad_copies.get(source, 0) + 1
        p = next((q for q in self.peers.values() if q.addr == addr), None)
        if p is not None:
            self._event("bad-copy", p, detail)

    def report_failed(self, addr: str, reason: str = "") -> bool:
        """A client saw ``addr`` fail: treat it as failed until it announces again."""
        self.failure_reports += 1
        for p in self.peers.values():
            if p.addr == addr:
                p.reported_failed = True
                last = self.events[-1] if self.events else None
                if (
                    not p.was_alive
                    and last is not None
                    and last.kind == "reported"
                    and last.addr == addr
                    and last.detail == reason
                ):
                    last.count += 1  # another client saw the same failure
                    last.at = time.time()
                    self.state.update_peer_event(last.seq, last.at, last.count)
                else:
                    self._event("reported", p, reason)
                if p.was_alive:
                    p.was_alive = False
                    self.failures["reported"] = self.failures.get("reported", 0) + 1
                return True
        return False

    def _catch_up(self) -> None:
        """The tracker's own stalls are not the peers' failures. Once the
        sweeper runs (every announce interval, at most 1 s), a gap of more
        than half a liveness window between two looks at the clock means
        this process did not run (SIGSTOP, a blocked event loop, a paused
        VM; and at least ``STALL_MIN_S``): the announces of that time could not be received, so the gap
        is not counted against any peer (each one alive before it keeps the
        age it had). Peers whose announces had stopped before still fail."""
        now = time.monotonic()
        if self._tick is not None:
            gap = now - self._tick
            if gap > max(self.window_s / 2, STALL_MIN_S):
                self.stalls += 1
                for p in self.peers.values():
                    if self._tick - p.last_announce <= self.window_s:
                        p.last_announce += gap
                log.warning(
                    "tracker stalled for %.1f s (no sweep since): peers are not failed for announces it "
                    "could not receive",
                    gap,
                )
                at, detail = time.time(), f"the tracker did not run for {gap:.1f} s; no peer failed for it"
                seq = self.state.add_peer_event(at, "tracker-stall", "", "", detail, EVENTS_KEPT)
                self.events.append(PeerEvent(at, "tracker-stall", "", "", detail, seq=seq))
        self._tick = now

    def sweep(self) -> None:
        """Notice peers that missed their announces for a liveness window
        (liveness is otherwise computed when asked, with no moment of
        failing). A peer a client reported failed gets this event too: it
        confirms the report, where announcing again would refute it."""
        self._catch_up()
        for p in self.peers.values():
            age = self.age(p)
            if not p.lapsed and age > self.window_s:
                p.lapsed = True
                if p.was_alive:
                    p.was_alive = False
                    self.failures["missed_announces"] = self.failures.get("missed_announces", 0) + 1
                self._event("failed", p, f"no announce for {age:.2f} s (liveness window {self.window_s:.2f} s)")
                log.warning("peer %s (%s) failed: no announce for %.1f s", p.addr, p.peer_id, age)

    def _event(self, kind: str, p: PeerInfo, detail: str, addr: str = "") -> None:
        at, addr = time.time(), addr or p.addr
        seq = self.state.add_peer_event(at, kind, addr, p.peer_id, detail, EVENTS_KEPT)
        self.events.append(PeerEvent(at, kind, addr, p.peer_id, detail, seq=seq))

    def alive(self, p: PeerInfo) -> bool:
        """Whether peer ``p`` announced within the liveness window and was not reported failed since."""
        return not p.reported_failed and self.age(p) <= self.window_s

    def uptime(self, p: PeerInfo) -> float:
        """Seconds since peer ``p``'s process started (0: unknown)."""
        return max(0.0, time.time() - p.started_at) if p.started_at > 0 else 0.0

    def age(self, p: PeerInfo) -> float:
        """Seconds since peer ``p``'s last announce (monotonic clock)."""
        if self._tick is not None:
            self._catch_up()  # a stall is noticed before any answer counts it against a peer
        return time.monotonic() - p.last_announce

    def get(self, peer_id: str) -> PeerInfo | None:
        """The peer with id ``peer_id``, or None."""
        return self.peers.get(peer_id)

    def live(self) -> list[PeerInfo]:
        """The live peers (:meth:`alive`), draining ones included."""
        return [p for p in self.peers.values() if self.alive(p)]

    def schedulable(self) -> list[PeerInfo]:
        """Live peers in service: what new files and grown peerlists may use
        (not draining or retired; st_py.core.peer_counts.in_service)."""
        return [p for p in self.peers.values() if in_service(self.alive(p), p.drain_state)]

    def counts(self) -> PeerCounts:
        """The peers by service state (st_py.core.peer_counts): what Status,
        the status page and a refused create report."""
        return PeerCounts.of((self.alive(p), p.drain_state) for p in self.peers.values())

    def find(self, peer: str) -> PeerInfo | None:
        """The peer of id or ``host:port`` ``peer``, or None."""
        p = self.peers.get(peer)
        return p if p is not None else next((q for q in self.peers.values() if q.addr == peer), None)

    def presume_alive(self) -> None:
        """A tracker that starts serving after waiting as a standby: every
        peer its state knows gets one liveness window from now to announce
        (as at a start), instead of looking failed since the process started."""
        now = time.monotonic()
        for p in self.peers.values():
            p.last_announce = max(p.last_announce, now)

    def apply_drain_state(self, peer_id: str, drain_state: str) -> None:
        """The metadata log's ``set_drain`` (st_py/tracker/tracker_ops.py):
        peer ``peer_id`` out of service or back, whether or not it has
        announced to this tracker yet (kept in the tracker state either way)."""
        p = self.peers.get(peer_id)
        if p is not None:
            self.set_drain_state(p, drain_state)
        else:
            self.state.set_drain_state(peer_id, drain_state)

    def set_drain_state(self, p: PeerInfo, drain_state: str) -> None:
        """Take peer ``p`` out of service (``"draining"``, ``"retired"``) or
        put it back (``""``); kept in the tracker state, and an event on the
        status page."""
        if drain_state == p.drain_state:
            return
        p.drain_state = drain_state
        self.state.set_drain_state(p.peer_id, drain_state)
        self._event(
            drain_state or "in-service",
            p,
            {
                "draining": "being drained: nothing new is placed on it",
                "retired": "drained: it holds no committed copy",
            }.get(drain_state, "back in service"),
        )

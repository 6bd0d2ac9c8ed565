"""Peer registry and liveness from announces (paper 3.3, 4.3).

Liveness is soft state: a peer is alive while its last announce is younger
than ``window = interval * misses``. Known peers are also kept in the tracker's
SQLite state so that after a tracker restart they get one window of grace to
announce again instead of being reported failed at once, with the space they
last announced (kept at their first announce and then at most every
``SAVE_SPACE_S``), so that creates can be scheduled before they announce
again (issue 14). A peer the state knows no space of (kept by an older
tracker) has ``space_known`` False until it announces.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from .state import TrackerState

SAVE_SPACE_S = 30.0  # how often a peer's announced space is written to the state


@dataclass
class PeerInfo:
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

    @property
    def usable_free(self) -> int:
        """Free bytes as announced, less what was committed to it since."""
        return self.free_bytes - self.unannounced_bytes


class PeerRegistry:
    def __init__(self, state: TrackerState, interval_s: float, misses: int):
        self.state = state
        self.interval_s = interval_s
        self.window_s = interval_s * misses
        self.peers: dict[str, PeerInfo] = {}
        now = time.monotonic()
        for peer_id, addr, capacity, used, free in state.known_peers():
            self.peers[peer_id] = PeerInfo(peer_id, addr, capacity or 0, used or 0, free or 0, last_announce=now,
                                           space_known=free is not None)

    def announce(self, peer_id: str, addr: str, capacity: int, used: int, free: int, records: int,
                 load: float = 0.0) -> None:
        p = self.peers.get(peer_id)
        if p is None:
            p = self.peers[peer_id] = PeerInfo(peer_id, addr)
        now = time.monotonic()
        if p.addr != addr or not p.announced or now - p.saved_at >= SAVE_SPACE_S:
            self.state.remember_peer(peer_id, addr, capacity, used, free)
            p.saved_at = now
        p.addr, p.capacity_bytes, p.used_bytes, p.free_bytes, p.records = addr, capacity, used, free, records
        p.load = min(max(load, 0.0), 1.0)
        p.last_announce = now
        p.announced = p.space_known = True
        p.reported_failed = False
        p.unannounced_bytes = 0

    def report_failed(self, addr: str) -> bool:
        """A client saw ``addr`` fail: treat it as failed until it announces again."""
        for p in self.peers.values():
            if p.addr == addr:
                p.reported_failed = True
                return True
        return False

    def alive(self, p: PeerInfo) -> bool:
        return not p.reported_failed and (time.monotonic() - p.last_announce) <= self.window_s

    def age(self, p: PeerInfo) -> float:
        return time.monotonic() - p.last_announce

    def get(self, peer_id: str) -> PeerInfo | None:
        return self.peers.get(peer_id)

    def live(self) -> list[PeerInfo]:
        return [p for p in self.peers.values() if self.alive(p)]

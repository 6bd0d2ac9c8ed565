"""How many peers can take new data: the one count of live peers in
service that ``storetorrent status``, the status page and a create refused
for lack of peers all say (issue 38).

A peer is *in service* when it announced within the liveness window and
is neither draining nor retired (``storetorrent drain``): only those get
new files' peerlists and grown ones. A draining or retired peer is counted
apart whether it runs or not (it is out of service, not failed); a failed
peer is one in service that stopped announcing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


def in_service(alive: bool, drain_state: str) -> bool:
    """Whether a peer can take new data: alive and not draining or retired."""
    return alive and not drain_state


@dataclass(frozen=True)
class PeerCounts:
    """The peers of a cluster by service state (plain data).

    Attributes
    ----------
    in_service : live peers neither draining nor retired (:func:`in_service`)
    draining, retired : peers in that drain state, alive or not
    failed : peers in service that are not alive
    """

    in_service: int = 0
    draining: int = 0
    retired: int = 0
    failed: int = 0

    @classmethod
    def of(cls, peers: Iterable[tuple[bool, str]]) -> PeerCounts:
        """The counts of ``(alive, drain_state)`` pairs, one per peer."""
        n = {"in_service": 0, "draining": 0, "retired": 0, "failed": 0}
        for alive, drain_state in peers:
            if drain_state in ("draining", "retired"):
                n[drain_state] += 1
            else:
                n["in_service" if in_service(alive, drain_state) else "failed"] += 1
        return cls(**n)

    def summary(self) -> str:
        """``"3 peers in service, 1 retired, 0 failed"`` (draining and
        retired named only when there are some)."""
        out = [f"{self.in_service} peer{'' if self.in_service == 1 else 's'} in service"]
        out += [f"{n} {what}" for n, what in ((self.draining, "draining"), (self.retired, "retired")) if n]
        return ", ".join([*out, f"{self.failed} failed"])

"""Scheduling peers to a new file at create time (paper 3.3).

The peerlist is every live peer whose free space can take its share of the
file's estimated size, fullest last; the client then places records at random
among them (paper 3.1, 4.2: non-deterministic placement). Peers too full to
take a share are left out so they do not become hot spots.
"""

from __future__ import annotations

from .peers import PeerInfo

HEADROOM = 1.2  # ask each peer for 20% more than its even share


class SchedulingError(Exception):
    """Peers cannot be scheduled; ``reason`` is ``"not-enough-peers"`` or
    ``"no-space"`` (sent to clients as the ``st-error`` trailing metadata)."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


def schedule(live: list[PeerInfo], copies: int, est_size: int) -> list[PeerInfo]:
    """Choose the peerlist of a new file.

    Parameters
    ----------
    live : peers alive now
    copies : F of the replication class
    est_size : estimated user bytes of the file (one copy)

    Raises
    ------
    SchedulingError
        If fewer than ``copies`` peers are alive or have room.
    """
    if len(live) < copies:
        raise SchedulingError(
            f"replication class x{copies} needs {copies} live peers, but {len(live)} are alive; "
            "start more peers or choose a smaller class", "not-enough-peers")
    share = int(est_size * copies / len(live) * HEADROOM) if live else 0
    fit = [p for p in live if p.free_bytes >= share]
    if len(fit) < copies:
        raise SchedulingError(
            f"not enough space: x{copies} of {est_size} bytes needs {copies} peers with "
            f"{share} bytes free each, {len(fit)} have it; free space or add peers", "no-space")
    return sorted(fit, key=lambda p: (-p.free_bytes, p.peer_id))

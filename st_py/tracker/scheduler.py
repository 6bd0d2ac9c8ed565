"""Scheduling peers to a new file at create time (paper 3.3).

The peerlist is the largest set of live peers each of which has room for its
even share of the file's estimated size, fullest last; the client then places
records among them by the file's placement policy (paper 3.1, 4.2; st_py.placement).
Peers too full to take a share are left out so they do not become hot spots.

A peer's room is its announced free space less what was committed to it
since that announce and less the space other files have reserved on it
(docs/replication.md, "Space reservation"), so two creates cannot both count
on the same free bytes.
"""

from __future__ import annotations

from collections.abc import Mapping

from .peers import PeerInfo

HEADROOM = 1.2  # ask each peer for 20% more than its even share


class SchedulingError(Exception):
    """Peers cannot be scheduled; ``reason`` is ``"not-enough-peers"`` or
    ``"no-space"`` (sent to clients as the ``st-error`` trailing metadata)."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


def share_of(est_size: int, copies: int, npeers: int) -> int:
    """Bytes each of ``npeers`` peers stores of a file of ``est_size`` user
    bytes in class x``copies``, spread evenly (rounded up)."""
    return -(-est_size * copies // npeers)


def schedule(live: list[PeerInfo], copies: int, est_size: int,
             reserved: Mapping[str, int] | None = None) -> list[PeerInfo]:
    """Choose the peerlist of a new file.

    Parameters
    ----------
    live : peers alive now
    copies : F of the replication class
    est_size : estimated user bytes of the file (one copy)
    reserved : ``{peer_id: bytes}`` other files have reserved on each peer

    Returns
    -------
    The largest set of peers (at least ``copies``) each with room for
    ``HEADROOM`` times its even share, in decreasing order of room.

    Raises
    ------
    SchedulingError
        If fewer than ``copies`` peers are alive or have room.
    """
    if len(live) < copies:
        raise SchedulingError(
            f"replication class x{copies} needs {copies} live peers, but {len(live)} are alive; "
            "start more peers or choose a smaller class", "not-enough-peers")
    reserved = reserved or {}
    room = {p.peer_id: p.usable_free - reserved.get(p.peer_id, 0) for p in live}
    ordered = sorted(live, key=lambda p: (-room[p.peer_id], p.peer_id))
    # With k peers each takes est*F/k; the k roomiest all fit when the k-th does.
    for k in range(len(ordered), copies - 1, -1):
        if room[ordered[k - 1].peer_id] >= int(share_of(est_size, copies, k) * HEADROOM):
            return ordered[:k]
    need = int(share_of(est_size, copies, copies) * HEADROOM)
    fit = sum(1 for r in room.values() if r >= need)
    held = sum(1 for p in live if reserved.get(p.peer_id))
    raise SchedulingError(
        f"not enough space: x{copies} of {est_size} bytes needs at least {copies} peers with {need} bytes "
        f"free each, {fit} have it" + (f" ({held} peers hold space reserved by files being written)"
                                       if held else "") + "; free space or add peers", "no-space")

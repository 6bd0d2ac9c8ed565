"""Scheduling peers to a new file at create time (paper 3.3).

The peerlist is the largest set of live peers each of which has room for its
share of the file's estimated size, fullest last; the client then places
records among them by the file's placement policy (paper 3.1, 4.2; st_py.core.placement).
Peers too full to take a share are left out so they do not become hot spots.

A peer's share is even (``est_size x F / k`` on each of k peers) unless the
peers span several failure domains (docs/replication.md, "Failure domains"):
placement then puts the copies of a record in distinct domains, so a domain
holds at most one copy of each record, and the peers of a small domain hold
more than the even share (:func:`domain_shares`). When a peer must be left
out, one whose domain keeps other peers in the list goes first: the
scheduler prefers a peerlist that spans the domains.

A peer's room is its announced free space less what was committed to it
since that announce and less the space other files have reserved on it
(docs/replication.md, "Space reservation"), so two creates cannot both count
on the same free bytes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from st_py.core.peer_counts import PeerCounts

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


def domain_shares(peers: Sequence[PeerInfo], copies: int, est_size: int) -> dict[str, int]:
    """Bytes each of ``peers`` stores of a file of ``est_size`` user bytes in
    class x``copies`` (rounded up), by ``peer_id``.

    Even (:func:`share_of`) when the peers span one failure domain, or fewer
    than F. Otherwise each record's F copies are in F distinct domains, so a
    domain holds at most ``est_size``; the ``est_size x F`` bytes are
    water-filled over the domains in proportion to their peers under that
    cap, and split evenly within a domain. Domains are compared whole
    (``site/rack/host``), which is what placement keeps apart first.
    """
    by: dict[tuple[str, ...], list[PeerInfo]] = {}
    for p in peers:
        by.setdefault(p.failure_domain, []).append(p)
    if len(by) < max(2, copies):
        each = share_of(est_size, copies, len(peers)) if peers else 0
        return {p.peer_id: each for p in peers}
    load: dict[tuple[str, ...], float] = {}
    left, budget = dict(by), float(est_size * copies)
    while left:
        rate = budget / sum(len(v) for v in left.values())  # bytes per peer
        capped = [d for d, v in left.items() if rate * len(v) > est_size]
        if not capped:
            load.update({d: rate * len(v) for d, v in left.items()})
            break
        for d in capped:
            load[d] = float(est_size)
            budget -= est_size
            del left[d]
    return {p.peer_id: -(-int(load[d]) // len(v)) for d, v in by.items() for p in v}


def schedule(
    live: list[PeerInfo],
    copies: int,
    est_size: int,
    reserved: Mapping[str, int] | None = None,
    counts: PeerCounts | None = None,
) -> list[PeerInfo]:
    """Choose the peerlist of a new file.

    Parameters
    ----------
    live : peers alive now and in service (``PeerRegistry.schedulable``)
    copies : F of the replication class
    est_size : estimated user bytes of the file (one copy)
    reserved : ``{peer_id: bytes}`` other files have reserved on each peer
    counts : the cluster's peers by service state, for the refusal's message
        (``PeerRegistry.counts``; None: ``len(live)`` in service)

    Returns
    -------
    The largest set of peers (at least ``copies``) each with room for
    ``HEADROOM`` times its share (:func:`domain_shares`), in decreasing
    order of room: every live peer while all have room; else peers that do
    not are left out one at a time, tightest first, but a peer whose
    failure domain would leave the list only after those whose domain keeps
    other peers in it.

    Raises
    ------
    SchedulingError
        If fewer than ``copies`` peers are alive or have room.
    """
    if len(live) < copies:
        counts = counts or PeerCounts(in_service=len(live))
        raise SchedulingError(
            f"replication class x{copies} needs {copies} live peers in service, but the cluster has "
            f"{counts.summary()} (storetorrent status); start more peers, put drained ones back "
            "(storetorrent drain --cancel) or choose a smaller class",
            "not-enough-peers",
        )
    reserved = reserved or {}
    room = {p.peer_id: p.usable_free - reserved.get(p.peer_id, 0) for p in live}
    chosen = sorted(live, key=lambda p: (-room[p.peer_id], p.peer_id))
    while len(chosen) >= copies:
        share = domain_shares(chosen, copies, est_size)
        short = [p for p in chosen if room[p.peer_id] < int(share[p.peer_id] * HEADROOM)]
        if not short:
            return chosen
        per_domain = Counter(p.failure_domain for p in chosen)
        chosen.remove(
            min(
                short,
                key=lambda p: (
                    per_domain[p.failure_domain] == 1,
                    room[p.peer_id] / max(1, share[p.peer_id]),
                    p.peer_id,
                ),
            )
        )
    need = int(share_of(est_size, copies, copies) * HEADROOM)
    fit = sum(1 for r in room.values() if r >= need)
    held = sum(1 for p in live if reserved.get(p.peer_id))
    raise SchedulingError(
        f"not enough space: x{copies} of {est_size} bytes needs at least {copies} peers with {need} bytes "
        f"free each, {fit} have it"
        + (f" ({held} peers hold space reserved by files being written)" if held else "")
        + "; free space or add peers",
        "no-space",
    )

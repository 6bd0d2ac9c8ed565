"""Draining a peer out of service, online: :func:`drain` (``storetorrent
drain PEER``) takes a live peer out of service (nothing new is placed on it),
moves every copy it holds to the others while it still serves, then marks it
retired. FreeLoader (seed 004, 3.1, "User Impact Control") lets a donor
"ultimately withdraw" its space; the paper treats a removed node as a
failure (section 5). Each copy moves as :mod:`st_py.maintenance.moves` says.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from st_py.core.history import ADOPT, LIVE, STALE
from st_py.core.infofile import RecordMeta
from st_py.core.placement import Domain, farthest
from st_py.errors import (
    InvalidOptionError,
    PeerNotLiveError,
    StoreTorrentError,
)
from st_py.maintenance.moves import (
    DEFAULT_TOLERANCE,
    FileMoves,
    Move,
    Progress,
    Throttle,
    check_options,
    execute,
    find_peer,
    grow_peerlist,
    holdings,
    move_retained,
    prepare,
    short_of_peers,
    spaces,
    standing,
)
from st_py.maintenance.repair import all_files

MAX_DRAIN_PASSES = 5
DRAINING, RETIRED = "draining", "retired"


@dataclass
class DrainReport:
    """What :func:`drain` did to peer ``peer`` (``host:port``).

    ``copies_left`` are committed copies still on it after the last pass
    (0: drained), ``failed_files`` files that could not be drained (a
    tracker or permission error: ``(file, reason)``). ``drain_state`` is the
    peer's state now: ``"retired"`` when nothing is left, else
    ``"draining"`` (run the drain again)."""

    peer: str
    peer_id: str
    drain_state: str = DRAINING
    files: list[FileMoves] = field(default_factory=list)
    copies_left: int = 0
    failed_files: list[tuple[str, str]] = field(default_factory=list)
    passes: int = 0
    seconds: float = 0.0

    @property
    def copies_moved(self) -> int:
        """Copies moved off the peer, over every file."""
        return sum(f.copies_moved for f in self.files)

    @property
    def bytes_moved(self) -> int:
        """Bytes moved off the peer (each copy counted), over every file."""
        return sum(f.bytes_moved for f in self.files)

    @property
    def taken_back(self) -> int:
        """Of the copies moved, those a peer took back (it had them from
        before a move: ``FileMoves.taken_back``)."""
        return sum(f.taken_back for f in self.files)

    @property
    def complete(self) -> bool:
        """The peer holds no committed copy and is retired."""
        return self.drain_state == RETIRED

    @property
    def to_finish(self) -> str:
        """What would let the drain finish, "" if nothing is stuck: each
        stuck copy (``FileMoves.stuck``) says why with its numbers ("3 copies
        need 3 peers in service; 2 are")."""
        if not any(f.stuck for f in self.files):
            return ""
        kept = any("(the version ended at generation" in s for f in self.files for s in f.stuck)
        return (
            "add a peer in service (a version's copies each need a peer of their own) and run drain again"
            + (
                "; or delete the snapshots that keep those past versions (storetorrent snapshot delete FILE "
                "NAME: they go once --history-age has passed too)"
                if kept
                else ""
            )
            + "; a file's replication class cannot be lowered in place (copy its records into a file of a "
            "lower one); or put the peer back in service (storetorrent drain --cancel PEER)"
        )

    def as_dict(self) -> dict:
        """The report as a JSON-ready dict (files with nothing to move left out)."""
        return {
            "peer": self.peer,
            "peer_id": self.peer_id,
            "drain_state": self.drain_state,
            "copies_moved": self.copies_moved,
            "bytes_moved": self.bytes_moved,
            "taken_back": self.taken_back,
            "copies_left": self.copies_left,
            "failed_files": [list(x) for x in self.failed_files],
            "to_finish": self.to_finish,
            "passes": self.passes,
            "seconds": round(self.seconds, 3),
            "files": [f.as_dict() for f in self.files if f.copies_planned or f.stuck or f.skipped],
        }


def _plan_drain(
    metas: Mapping[str, RecordMeta],
    drained: int,
    peers: list[int],
    space: Mapping[int, int],
    taken: dict[str, set[int]],
    fallback: dict[str, set[int]],
    domains: Mapping[int, Domain] | None = None,
    same: Mapping[str, set[int]] | None = None,
) -> tuple[list[Move], list[str]]:
    """A move for every copy on peer ``drained``, each to the peer in service
    whose fill it raises least among those that may take it (none of
    ``taken``: holders, peers with a live copy under its stored name, and
    the ``fallback`` ones) and, with ``domains``, farthest by failure domain
    from its other copies; one of ``fallback`` (a moved-away copy of another
    rank older plans may read) only if no other can take it; one of
    ``same`` (peers holding this very copy already: another version's copy
    of its bytes at its rank under its stored name, moves.together) before
    any other. Returns
    (moves, records no peer can take, each with why:
    :func:`~st_py.maintenance.moves.short_of_peers`)."""
    held, _ = holdings(metas, peers)
    moves, stuck = [], []
    for m in sorted(metas.values(), key=lambda m: (-m.size, m.name)):
        for rank, p in m.copies().items():
            if p != drained:
                continue
            for avoid in (taken[m.name], taken[m.name] - fallback.get(m.name, set())):
                cands = [r for r in peers if r not in avoid and r not in m.peers]
                if cands:
                    break
            if not cands:
                stuck.append(f"{m.name}: {short_of_peers(len(m.peers), len(peers))}")
                continue
            cands = farthest(cands, [p for p in m.peers if p != drained], domains)
            cands = [r for r in cands if r in (same or {}).get(m.name, ())] or cands
            r = min(cands, key=lambda r: ((held[r] + m.size) / space[r], r))
            held[r] += m.size
            taken[m.name].add(r)
            moves.append(Move(m.name, rank, drained, r, m.size))
    return moves, stuck


def _drain_file(
    f, peer_id: str, in_service: dict[str, int], throttle: Throttle, progress: Progress | None
) -> tuple[FileMoves, int]:
    """Move every copy of open file ``f`` off peer ``peer_id``; returns the
    moves and how many copies it held when the pass looked."""
    fm = FileMoves(f.name)
    prepare(f)
    drained = next((i for i, p in f.peers.items() if p.peer_id == peer_id), None)
    if drained is None:
        return fm, 0
    reader = f.infofile()
    if not reader.copies_held_by([drained]) and not reader.retained_held_by([drained]):
        return fm, 0
    grow_peerlist(f, set(in_service), fm)
    metas = reader.copies_held_by(sorted(f.peers))
    on_drained = {n: m for n, m in metas.items() if drained in m.peers}
    peers = sorted(i for i, p in f.peers.items() if p.peer_id in in_service and f.peer_usable(i))
    space = {i: in_service[f.peers[i].peer_id] for i in peers}
    held, _ = holdings(metas, f.peers)
    rank_on = {n: next(r for r, p in m.copies().items() if p == drained) for n, m in on_drained.items()}
    st = standing(reader, [(m, rank_on[n]) for n, m in on_drained.items()])
    rule = {n: st.get((m.key, rank_on[n]), {}) for n, m in on_drained.items()}
    recent = {n: {p for p, s in r.items() if s == STALE} for n, r in rule.items()}
    taken = {n: set(m.peers) | {p for p, s in rule[n].items() if s in (LIVE, STALE)} for n, m in on_drained.items()}
    same = {n: {p for p, s in r.items() if s == ADOPT} for n, r in rule.items()}
    moves, fm.stuck = _plan_drain(on_drained, drained, peers, space, taken, recent, f.placement_domains, same)
    execute(f, moves, peers, space, held, fm, throttle, progress, allow_recent=True)
    planned = len(moves) + len(fm.stuck)
    # the copies of past versions kept for snapshots go too (docs/snapshots.md)
    return fm, planned + move_retained(f, {drained}, peers, fm, throttle)


def drain(
    client,
    peer: str,
    max_mb_per_s: float | None = None,
    progress: Progress | None = None,
    max_passes: int = MAX_DRAIN_PASSES,
) -> DrainReport:
    """Take live peer ``peer`` out of service and move every copy it holds to
    the peers in service, while it still serves; then retire it
    (FreeLoader's donor withdrawal, seed 004 3.1; paper 5).

    The tracker marks the peer ``draining`` first: no new file is scheduled
    on it and no peerlist grows by it, and writers that open a file from
    then on place no copy on it. Every file of the namespace is then
    drained, one move at a time as :func:`~st_py.maintenance.spread.spread` moves (its x1 records are
    read from the peer itself: it is alive, so they stay readable
    throughout). Writers that opened a file before the drain may still put
    copies on it, so passes repeat until one finds nothing left (at most
    ``max_passes``). Then the peer is marked ``retired`` (kept by the
    tracker across restarts; ``storetorrent status`` shows it): stop it and
    remove its data directory when convenient. Its old copies are left to
    its scrubber meanwhile (st_py.maintenance.moves).

    Parameters
    ----------
    client : Client
    peer : str
        ``host:port``, peer id, or a host only one peer runs on.
    max_mb_per_s : float, optional
        Cap on the copies written, in MB/s (10^6 bytes).
    progress : callable(file, moved, planned), optional
    max_passes : int

    Returns
    -------
    DrainReport
        ``complete`` when the peer holds no committed copy and is retired;
        otherwise it stays ``draining`` and ``copies_left`` says how many
        copies are still on it (copies no peer in service can take, each
        with why in its file's ``stuck``, and ``to_finish`` what would let
        the drain finish; files that could not be opened:
        ``failed_files``). A copy goes to any peer in service holding no
        live copy of its version (``st_py.maintenance.moves``, "Where a copy
        may go"), so it is stuck only when too few peers are in service.

    Raises
    ------
    UnknownPeerError
        ``peer`` names no known peer (or several).
    PeerNotLiveError
        The peer is not live: its copies cannot be read from it; restore them
        from their other copies with ``storetorrent rebalance --lost``.
    InvalidOptionError
        ``max_mb_per_s`` not above 0, or ``max_passes`` below 1.
    PermissionDeniedError
        Not an admin (a tracker with a users file).
    TrackerUnavailableError
    """
    check_options(DEFAULT_TOLERANCE, max_mb_per_s)
    if max_passes < 1:
        raise InvalidOptionError(f"max_passes {max_passes} must be at least 1", "max_passes", max_passes)
    t0 = time.monotonic()
    ref = find_peer(client, peer)
    if not ref.alive:
        raise PeerNotLiveError(
            f"peer {ref.addr} is not live: a drain reads its copies from it while it serves; "
            f"restore its copies from their other copies with `storetorrent rebalance --lost "
            f"{ref.addr}` (every file) instead",
            ref.addr,
            ref.peer_id,
        )
    report = DrainReport(ref.addr, ref.peer_id)
    report.drain_state = client.tracker.set_peer_state(ref.peer_id, DRAINING).drain_state
    throttle = Throttle(max_mb_per_s)
    by_file: dict[str, FileMoves] = {}
    for n in range(1, max_passes + 1):
        report.passes = n
        in_service = spaces(
            p for p in client.status().peers if p.alive and not p.drain_state and p.peer_id != ref.peer_id
        )
        found = moved = 0
        report.failed_files = []
        for name in all_files(client):
            try:
                with client.open(name) as f:
                    fm, held = _drain_file(f, ref.peer_id, in_service, throttle, progress)
            except StoreTorrentError as e:
                report.failed_files.append((name, str(e)))
                continue
            found += held
            moved += fm.copies_moved
            _merge(by_file.setdefault(name, FileMoves(name)), fm)
        report.copies_left = found - moved
        if found == 0 or moved == 0:
            break
    else:
        report.copies_left = _count_on(client, ref.peer_id, report)
    report.files = list(by_file.values())
    if report.copies_left == 0 and not report.failed_files:
        report.drain_state = client.tracker.set_peer_state(ref.peer_id, RETIRED).drain_state
    report.seconds = time.monotonic() - t0
    return report


def _merge(into: FileMoves, fm: FileMoves) -> None:
    into.copies_planned += fm.copies_planned
    into.copies_moved += fm.copies_moved
    into.bytes_moved += fm.bytes_moved
    into.taken_back += fm.taken_back
    into.peers_added += fm.peers_added
    into.skipped += fm.skipped
    into.conflicts += fm.conflicts
    into.stuck = fm.stuck  # as of the last pass
    into.generation = max(into.generation, fm.generation)


def _count_on(client, peer_id: str, report: DrainReport) -> int:
    """Committed copies still on peer ``peer_id``, over every file."""
    left = 0
    report.failed_files = []
    for name in all_files(client):
        try:
            with client.open(name) as f:
                idx = [i for i, p in f.peers.items() if p.peer_id == peer_id]
                reader = f.infofile()
                left += sum(1 for m in reader.copies_held_by(idx).values() for p in m.peers if p in idx)
                left += sum(1 for m in reader.retained_held_by(idx).values() for p in m.peers if p in idx)
        except StoreTorrentError as e:
            report.failed_files.append((name, str(e)))
    return left


__all__ = ["DRAINING", "MAX_DRAIN_PASSES", "RETIRED", "DrainReport", "drain"]

"""Spreading copies over the peers, online: :func:`spread` (``storetorrent
rebalance --spread``) moves copies from the fullest peers to the emptiest
(new peers first) until every peer's fill is within a tolerance of the mean.

The paper (section 5) lets new peers take new files from their first
announce and leaves existing files where they are ("no effort is made to
automatically rebalance existing files after expansion"). Each copy moves as
:mod:`st_py.maintenance.moves` says (readers stay exactly-once; the old copy
is left to its holder's scrubber).

**Fill.** A peer's fill is the bytes of the committed copies it holds of the
files considered (the copies of past versions kept for snapshots too:
docs/snapshots.md, "Maintenance of retained copies") (one file, the files named, or every file with ``--all``)
divided by its space, the capacity it announces (the space StoreTorrent may
occupy on it: its disk, or ``--capacity``; a disk several peers share is
split evenly between them, :func:`spaces`), which does not move as copies
move, so a second spread of an even cluster moves nothing. Each file is spread over the peers in service in proportion
to their space, so the cluster's fill evens out with every file, and each
file is read from every peer in parallel. The tolerance is relative to the
mean fill: with ``0.1`` every peer ends within 10% of it, as far as the
records' sizes allow (a file of a few records cannot be split finely; the
report says whether the fill is even).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace

from st_py.core.history import LIVE, STALE, Standings
from st_py.core.infofile import RecordMeta
from st_py.core.placement import Domain, nearness
from st_py.errors import (
    StoreTorrentError,
)
from st_py.maintenance.moves import (
    DEFAULT_TOLERANCE,
    FileMoves,
    KeptMove,
    Move,
    PeerFill,
    Progress,
    Throttle,
    by_peer_id,
    check_options,
    execute,
    grow_peerlist,
    holdings,
    move_kept,
    planning_standings,
    prepare,
    spaces,
)
from st_py.maintenance.repair import all_files


def _fill_deviation(peers: Iterable[PeerFill], after: bool) -> tuple[float, float]:
    """(mean fill, largest |fill - mean| / mean) over ``peers``."""
    peers = list(peers)
    space = sum(p.space_bytes for p in peers)
    held = sum(p.bytes_after if after else p.bytes_before for p in peers)
    if not space or not held:
        return 0.0, 0.0
    mean = held / space
    return mean, max(abs((p.fill_after if after else p.fill_before) - mean) / mean for p in peers)


@dataclass
class SpreadReport:
    """What :func:`spread` did: per file and per peer in service.

    ``mean_fill`` is the fill every peer would have if the copies were spread
    perfectly (bytes held / space, over the peers in service);
    ``deviation`` the largest relative distance of a peer's fill from it,
    after the moves (``deviation_before``: before them); ``even`` is
    ``deviation <= tolerance``."""

    tolerance: float
    files: list[FileMoves] = field(default_factory=list)
    peers: list[PeerFill] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def copies_moved(self) -> int:
        """Copies moved, over every file."""
        return sum(f.copies_moved for f in self.files)

    @property
    def bytes_moved(self) -> int:
        """Bytes moved (each copy counted), over every file."""
        return sum(f.bytes_moved for f in self.files)

    @property
    def mean_fill(self) -> float:
        """Bytes held / space over the peers in service, after the moves (0..1)."""
        return _fill_deviation(self.peers, True)[0]

    @property
    def deviation(self) -> float:
        """Largest ``|fill - mean_fill| / mean_fill`` of a peer after the moves."""
        return _fill_deviation(self.peers, True)[1]

    @property
    def deviation_before(self) -> float:
        """The same deviation before the moves."""
        return _fill_deviation(self.peers, False)[1]

    @property
    def even(self) -> bool:
        """Every peer's fill is within ``tolerance`` of the mean."""
        return self.deviation <= self.tolerance + 1e-12

    @property
    def complete(self) -> bool:
        """Even, and no move was refused or left out."""
        return self.even and not any(f.conflicts or f.skipped for f in self.files)

    def as_dict(self) -> dict:
        """The report as a JSON-ready dict: totals, per file, per peer (bytes)."""
        return {
            "tolerance": self.tolerance,
            "even": self.even,
            "deviation_before": round(self.deviation_before, 4),
            "deviation": round(self.deviation, 4),
            "copies_moved": self.copies_moved,
            "bytes_moved": self.bytes_moved,
            "seconds": round(self.seconds, 3),
            "files": [f.as_dict() for f in self.files],
            "peers": [
                {
                    "peer": p.addr,
                    "peer_id": p.peer_id,
                    "space_bytes": p.space_bytes,
                    "bytes_before": p.bytes_before,
                    "bytes_after": p.bytes_after,
                }
                for p in self.peers
            ],
        }


def _is_even(held: Mapping, space: Mapping, tolerance: float) -> bool:
    total, room = sum(held.values()), sum(space[p] for p in held)
    if not total or not room:
        return True
    mean = total / room
    return all(abs(held[p] / space[p] - mean) <= tolerance * mean for p in held)


def _plan_spread(
    metas: Mapping[str, RecordMeta],
    peers: list[int],
    space: Mapping[int, int],
    taken: dict[str, set[int]],
    prior: Mapping[int, int] | None = None,
    domains: Mapping[int, Domain] | None = None,
    rule: Standings | None = None,
    keys: Mapping[str, str] | None = None,
) -> list[Move]:
    """Moves that bring each of ``peers`` (in service, usable) to its share
    of the file's copy bytes, in proportion to ``space``. ``prior`` are the
    bytes each peer holds of the files spread before this one: a peer's
    share is what brings its total to its proportion of the total, so what
    small files cannot split evenly does not pile up on the same peers (for
    a large file it is its plain proportional share). The peers furthest
    above their share give their largest copies first, each to the peer
    furthest below its share that holds none of the record (``taken``:
    holders and recent holders, updated); a move is planned only if it
    brings the two peers closer to their shares (the sum over peers of
    ``(bytes - share)^2 / space`` falls), so planning ends and a second
    spread plans nothing new. With ``domains`` a copy never moves nearer,
    by failure domain, to the record's other copies than it was
    (docs/replication.md, "Failure domains"). With ``rule`` (the placement
    rule of the stored names ``keys[name]``: moves.planning_standings) a
    copy goes only to a peer the rule lets take it without a last resort
    (not ``LIVE`` nor ``STALE``), and each planned move is entered in it, so
    every later choice, of this copy's other ranks and of the other copies
    stored under the same name (a kept version and the current record, a
    stripe put again), is judged as the next spread will judge it."""
    prior = prior or {}
    keys = keys or {}
    held, on = holdings(metas, peers)
    follow = _one_file(metas, keys, on)
    total, room = sum(held.values()), sum(space[p] for p in peers)
    if len(peers) < 2 or not total:
        return []
    before = sum(prior.get(p, 0) for p in peers)
    share = {p: (total + before) * space[p] / room - prior.get(p, 0) for p in peers}
    planned: dict[tuple[str, int], Move] = {}  # one move per copy, from its committed holder

    now: dict[str, list[int]] = {}  # holders of records with a move planned, as planned
    progress = True
    while progress:  # passes until one plans nothing: a spread of what this plans plans nothing
        progress = False
        for s in sorted(peers, key=lambda p: (-(held[p] - share[p]) / space[p], p)):
            if held[s] <= share[s]:
                break  # the rest are at or below their share
            for size, name, rank in sorted(on[s], reverse=True):
                es = held[s] - share[s]
                if es <= 0 or all(held[r] >= share[r] for r in peers if r != s):
                    break
                best, best_gap = None, 0.0
                along = follow.get((name, rank, s), [])  # the same file's copies of other versions
                size *= 1 + len(along)  # one move carries them all
                others = [p for p in now.get(name, metas[name].peers) if p != s]
                limit = nearness(s, others, domains)
                m = metas[name]
                barred = rule.of(keys.get(name, name), rank, m.crc32c, m.size) if rule is not None else {}
                for r in peers:
                    er = held[r] - share[r]
                    if (
                        r == s
                        or er >= 0
                        or r in taken[name]
                        or any(r in taken[c] for c in along)
                        or barred.get(r) in (LIVE, STALE)
                        or nearness(r, others, domains) > limit
                    ):
                        continue
                    gain = ((es - size) ** 2 - es**2) / space[s] + ((er + size) ** 2 - er**2) / space[r]
                    if gain < 0 and -er / space[r] > best_gap:
                        best, best_gap = r, -er / space[r]
                if best is None:
                    continue
                held[s] -= size
                held[best] += size
                on[s].remove((m.size, name, rank))
                on[best].append((m.size, name, rank))
                follow[(name, rank, best)] = follow.pop((name, rank, s), [])
                for n in (name, *along):
                    taken[n].discard(s)
                    taken[n].add(best)
                    now[n] = [p for p in now.get(n, metas[n].peers) if p != s] + [best]
                    first = planned.pop((n, rank), None)
                    src = first.src if first is not None else s
                    if best != src:
                        planned[(n, rank)] = Move(n, rank, src, best, m.size)
                    if rule is not None:
                        rule.move((n, rank), keys.get(n, n), rank, s, best, m.crc32c, m.size)
                progress = True
    return sorted(planned.values(), key=lambda mv: (mv.src, -mv.size, mv.name, mv.rank))


def _one_file(
    metas: Mapping[str, RecordMeta], keys: Mapping[str, str], on: dict[int, list]
) -> dict[tuple[str, int, int], list[str]]:
    """The copies that are one file on their peer: copies of several
    versions under one stored name (``keys``), at the same rank, of the same
    bytes, on the same peer (a name put again with the same bytes, adopted
    by its peers; docs/snapshots.md, "Putting a name again"). Returns
    ``{(leader, rank, peer): [the others]}`` and takes the others out of
    ``on`` (what a peer's copies are, as :func:`holdings` gives it): only
    the leader's move is planned, and it carries them, so two versions
    sharing a stored name never end up with copies of different ranks on
    one peer (moves.together says why that matters)."""
    group: dict[tuple, list[str]] = {}
    for n, m in metas.items():
        for rank, p in m.copies().items():
            if p in on:
                group.setdefault((keys.get(n, n), rank, p, m.crc32c, m.size), []).append(n)
    out: dict[tuple[str, int, int], list[str]] = {}
    for (_, rank, p, _, size), names in group.items():
        if len(names) > 1:
            leader, *rest = sorted(names)
            out[(leader, rank, p)] = rest
            for n in rest:
                on[p].remove((size, n, rank))
    return out


def _spread_file(
    f,
    in_service: dict[str, int],
    tolerance: float,
    throttle: Throttle,
    progress: Progress | None,
    so_far: Mapping[str, int],
) -> FileMoves:
    """Spread open file ``f`` over the peers ``in_service`` (``{peer_id:
    space}``; ``so_far``: their bytes of the files spread before); see
    :func:`spread`."""
    fm = FileMoves(f.name)
    prepare(f)
    reader = f.infofile()
    metas = reader.copies_held_by(sorted(f.peers))
    # the copies of past versions kept for snapshots occupy the disks too and
    # spread with the others, each under a key no record name can take
    kept = {_kept_key(k): (k, m) for k, m in reader.retained_held_by().items()}
    units: dict[str, RecordMeta] = {**metas, **{key: replace(m, name=key) for key, (_, m) in kept.items()}}
    metas = units
    held, _ = holdings(metas, f.peers)
    fm.before = by_peer_id(f, held, in_service)
    fm.generation = reader.generation()
    if _is_even(fm.before, in_service, tolerance):
        fm.after = dict(fm.before)
        return fm
    grow_peerlist(f, set(in_service), fm)
    peers = sorted(i for i, p in f.peers.items() if p.peer_id in in_service and f.peer_usable(i))
    space = {i: in_service[f.peers[i].peer_id] for i in peers}
    # where each copy may go (moves.standing), as the plan moves copies: none holding a
    # live copy under its stored name, nor one whose moved-away copy of another rank
    # older plans read; a kept version's stored name is its own meta's
    keys = {n: kept[n][1].key if n in kept else m.key for n, m in metas.items()}
    rule = planning_standings(reader, {kept[n][0][0] if n in kept else n for n in metas})
    taken = {n: set(m.peers) for n, m in metas.items()}
    prior = {i: so_far.get(f.peers[i].peer_id, 0) for i in peers}
    moves = _plan_spread(metas, peers, space, taken, prior, f.placement_domains, rule, keys)
    held, _ = holdings(metas, f.peers)
    for step in _in_order(moves, keys):
        execute(f, [mv for mv in step if mv.name not in kept], peers, space, held, fm, throttle, progress)
        wanted: list[KeptMove] = [(kept[mv.name][0], mv.rank, mv.src, mv.dst) for mv in step if mv.name in kept]
        fm.copies_planned += len(wanted)
        move_kept(f, wanted, peers, fm, throttle, held=held, space=space)
    fm.after = by_peer_id(f, held, in_service)
    return fm


def _in_order(moves: list[Move], keys: Mapping[str, str]) -> Iterator[list[Move]]:
    """``moves`` in steps such that a copy that goes to a peer another copy
    under the same stored name leaves (``keys``: planning name -> stored
    name; a kept version taking back the bytes the current record leaves,
    say) moves in a later step than that one: the plan counted on it
    leaving first, and the rule (moves.standing) refuses a peer while it
    holds a live copy under that name. Two such copies that wait for each
    other (a swap) move in the last step, placed as the rule allows then."""
    pending = list(moves)
    while pending:
        leaves = {(keys.get(mv.name, mv.name), mv.src) for mv in pending}
        ready = [mv for mv in pending if (keys.get(mv.name, mv.name), mv.dst) not in leaves]
        if not ready:
            yield pending
            return
        yield ready
        pending = [mv for mv in pending if (keys.get(mv.name, mv.name), mv.dst) in leaves]


def _kept_key(k: tuple[str, int]) -> str:
    """The planning key of the past version ``(name, until)``: starts with
    NUL, which no record name may contain (st_py.client.record_writer)."""
    return f"\0kept\0{k[1]}\0{k[0]}"


def spread(
    client,
    names: Iterable[str] | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    max_mb_per_s: float | None = None,
    progress: Progress | None = None,
) -> SpreadReport:
    """Move copies onto the peers with the most room (new peers first) until
    every peer's fill is within ``tolerance`` of the mean, online (paper 5;
    st_py.maintenance.moves says how readers stay exactly-once and when the old
    copies go).

    Parameters
    ----------
    client : Client
    names : iterable of str, optional
        The files to spread; default: every file of the namespace. The fill
        counted is these files' committed copies.
    tolerance : float
        How far a peer's fill may stay from the mean, as a fraction of the
        mean (0.1: within 10%). A file already within it is left alone.
    max_mb_per_s : float, optional
        Cap on the copies written, in MB/s (10^6 bytes); None: no cap (the
        peers' own ``--max-write-mb-per-s`` still hold).
    progress : callable(file, moved, planned), optional
        Called after each batch of moves.

    Returns
    -------
    SpreadReport
        ``even`` says whether every peer in service ended within the
        tolerance; ``complete`` also that no move was left out or refused.

        A file that cannot be spread (deleted meanwhile, no write
        permission) has its error among its ``conflicts``; the others go on.

    Raises
    ------
    InvalidOptionError
        ``tolerance`` not in [0, 1), or ``max_mb_per_s`` not above 0.
    TrackerUnavailableError
    """
    check_options(tolerance, max_mb_per_s)
    t0 = time.monotonic()
    peers = [p for p in client.status().peers if p.alive and not p.drain_state]
    in_service = spaces(peers)
    report = SpreadReport(tolerance, peers=[PeerFill(p.addr, p.peer_id, in_service[p.peer_id]) for p in peers])
    throttle = Throttle(max_mb_per_s)
    for name in list(names) if names is not None else list(all_files(client)):
        try:
            with client.open(name) as f:
                fm = _spread_file(
                    f, in_service, tolerance, throttle, progress, {p.peer_id: p.bytes_after for p in report.peers}
                )
        except StoreTorrentError as e:  # deleted meanwhile, not ours to move: the others go on
            report.files.append(FileMoves(name, conflicts=[f"{name}: {e}"]))
            continue
        report.files.append(fm)
        for p in report.peers:
            p.bytes_before += fm.before.get(p.peer_id, 0)
            p.bytes_after += fm.after.get(p.peer_id, 0)
    report.seconds = time.monotonic() - t0
    return report


__all__ = ["DEFAULT_TOLERANCE", "SpreadReport", "spread"]

"""Rebalance: restore F copies after a peer is lost for good (paper 4.4).

A degraded read, then a write: every record with a copy on a lost peer is
read from a live holder (CRC-checked), written at the same copy rank to a
live peer that may take it (:func:`st_py.maintenance.moves.standing`: no
live copy under its stored name; ``PUT`` with the REPLACE flag, so a stale or
half-finished copy there is overwritten; a peer the copy was moved off at
that rank takes it back without ``REPLACE``, read back before the commit; one
whose moved-away copy of another rank older plans may read only if no other
can), and the move is committed to the infofile by the tracker. Live holders keep their copies: only lost ones are
replaced. Moved copies go to the infofile's ``copy_history``, so a GET_LOCAL
planned before the move still reveals each record exactly once, and one
planned after it never reveals the lost peer's stale copies, even when that
peer comes back (paper 4.5; docs/decisions.md, "A returning peer").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from st_py._proto import tracker_pb2 as pb
from st_py.client.copies import CopyOutcome, CopyToStore
from st_py.client.getlocal import ping_all
from st_py.core.history import ADOPT
from st_py.core.infofile import RecordMeta
from st_py.core.placement import shares_domain
from st_py.errors import BadNameError
from st_py.maintenance.moves import FileMoves, Throttle, admissible, move_retained, standing, together, verify_adopted

BATCH = 256  # records read, rewritten and committed together


@dataclass
class RebalanceReport:
    """What a rebalance did.

    ``unavailable`` are records with every copy on lost peers (nothing to
    read them from); ``under_replicated`` are records that kept fewer than
    F copies because no live peer could take a copy; ``shared_domain`` are
    records given a copy whose holders now share a failure domain, because
    no live peer in another domain could take it (docs/replication.md,
    "Failure domains"; only when the peerlist spans several domains); they
    count as restored. The copies of past versions kept for snapshots
    (docs/snapshots.md) on the lost peers are restored too
    (``retained_affected``, ``retained_moved``); one that cannot be is
    listed with the version's end generation.
    """

    file: str
    lost: list[str]
    records_affected: int = 0
    copies_moved: int = 0
    unavailable: list[str] = field(default_factory=list)
    under_replicated: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    shared_domain: list[str] = field(default_factory=list)
    peers_added: list[str] = field(default_factory=list)
    generation: int = 0
    seconds: float = 0.0
    retained_affected: int = 0  # copies of past versions kept for snapshots on the lost peers
    retained_moved: int = 0  # of those, restored on live peers (counted in copies_moved too)

    @property
    def complete(self) -> bool:
        """Every record has F copies on live peers again."""
        return not (self.unavailable or self.under_replicated or self.conflicts)


def _lost_indexes(f, lost: Iterable[str] | None) -> list[int]:
    by_addr = {p.addr: i for i, p in f.peers.items()}
    if lost is not None:
        lost = list(lost)
        unknown = [a for a in lost if a not in by_addr]
        if unknown:
            raise BadNameError(
                f"not in the peerlist of {f.name}: {', '.join(unknown)}; its peers are {', '.join(sorted(by_addr))}"
            )
        return sorted(by_addr[a] for a in lost)
    # Default: peers the tracker reports failed, and peers that do not answer.
    alive = [p.addr for p in f.peers.values() if p.alive]
    answers = ping_all(alive)
    return sorted(i for i, p in f.peers.items() if not p.alive or answers.get(p.addr) is not None)


def rebalance_file(
    client, name: str, lost: Iterable[str] | None = None, progress: Callable[[int, int], None] | None = None
) -> RebalanceReport:
    """Restore F copies of every record of file ``name`` after peers are
    lost for good (paper 4.4; ``storetorrent rebalance``): opens it with
    ``client`` (a :class:`~st_py.client.client.Client`) and runs
    :func:`rebalance` on it; the parameters, result and errors are that
    function's, plus ``StFileNotFoundError`` for an unknown file."""
    with client.open(name) as f:
        return rebalance(f, lost, progress)


def rebalance(
    f, lost: Iterable[str] | None = None, progress: Callable[[int, int], None] | None = None
) -> RebalanceReport:
    """Restore F copies of every record of open file ``f`` (paper 4.4).

    Parameters
    ----------
    f : StFile
        The open file.
    lost : iterable of ``host:port``, optional
        The peers lost for good. By default, every peer of the peerlist the
        tracker reports failed or that does not answer a PING.
    progress : callable(done, total), optional
        Called after each batch with records processed so far.

    Returns
    -------
    RebalanceReport
        ``complete`` is False when records are unavailable (all F copies
        lost), under-replicated (too few live peers) or in conflict.

    Raises
    ------
    BadNameError
        If a ``lost`` address is not in the file's peerlist.
    TrackerError
        If the tracker cannot be reached.
    """
    t0 = time.monotonic()
    f.check_open()
    f.flush()
    f.refresh()
    lost_idx = _lost_indexes(f, lost)
    report = RebalanceReport(f.name, [f.peers[i].addr for i in lost_idx])
    if not lost_idx:
        report.generation = f.infofile().generation()
        report.seconds = time.monotonic() - t0
        return report
    report.peers_added = [f.peers[i].addr for i in f.extend_peerlist()]
    lost_set = set(lost_idx)
    for i in lost_idx:
        f.mark_peer_failed(i, "declared lost by rebalance")
    in_service = set(f.write_targets())  # not onto peers being drained (storetorrent drain)
    usable = [i for i in sorted(f.peers) if i not in lost_set and i in in_service]

    affected = f.infofile().copies_held_by(lost_idx)
    names = sorted(affected)
    report.records_affected = len(names)
    for start in range(0, len(names), BATCH):
        _rebalance_batch(f, [affected[n] for n in names[start : start + BATCH]], lost_set, usable, report)
        if progress:
            progress(min(start + BATCH, len(names)), len(names))
    # the copies of past versions kept for snapshots, restored the same way (docs/snapshots.md)
    fm = FileMoves(f.name)
    report.retained_affected = move_retained(f, lost_set, usable, fm, Throttle(None))
    report.copies_moved += fm.copies_moved
    report.retained_moved = fm.copies_moved
    report.conflicts += fm.conflicts
    report.under_replicated += fm.stuck
    report.unavailable += [s for s in fm.skipped if "not readable" in s]
    report.generation = f.infofile().generation()
    report.seconds = time.monotonic() - t0
    return report


def _rebalance_batch(f, metas, lost_set: set[int], usable: list[int], report: RebalanceReport) -> None:
    # 1. Degraded read of every record that still has a live copy.
    data: dict[str, bytes] = {}
    pending = []
    for m in metas:
        if all(p in lost_set for p in m.peers):
            report.unavailable.append(m.name)
            continue
        pending.append((m, f.queue_get(m.name, stored=True)))
    for m, fut in pending:
        exc = fut.exception()
        if exc is None:
            data[m.name] = fut.result()
        else:
            report.unavailable.append(m.name)

    # 2. Write each lost copy, same rank, to a live peer holding no copy (under hash
    # placement the first such peer in the record's ranking, where readers look),
    # apart by failure domain from the live copies (docs/replication.md).
    holders_of: dict[str, dict[int, int]] = {}  # rank -> peer, as placed so far
    tried: dict[tuple[str, int], set[int]] = {}
    st = standing(
        f.infofile(),
        [(m, r) for m in metas if m.name in data for r, p in m.copies().items() if p in lost_set],
    )

    def place(m: RecordMeta, rank: int) -> int | None:
        holders = holders_of[m.name]
        t = tried[(m.name, rank)]
        rule = st.get((m.key, rank), {})
        first, last = admissible(rule, [i for i in usable if i not in t and f.peer_usable(i)])
        keep = [p for r, p in holders.items() if r != rank and p not in lost_set]
        new = None
        for cands in (together(rule, first), first, last):  # a peer holding this very copy first
            new = f.spare_peer(m.name, cands, list(holders.values()), keep)
            if new is not None:
                break
        if new is None:
            report.under_replicated.append(m.name)
            return None
        t.add(new)
        holders[rank] = new  # reserved now, so another lost rank of m cannot pick it
        return new

    placed: list[tuple[str, dict[int, int]]] = []

    def copies() -> Iterator[CopyToStore]:
        for m in metas:
            if m.name not in data:
                continue
            holders = holders_of[m.name] = m.copies()
            placed.append((m.name, holders))
            for rank, p in list(holders.items()):
                if p in lost_set:
                    tried[(m.name, rank)] = set()
                    new = place(m, rank)
                    if new is not None:
                        yield CopyToStore(m, rank, new, data[m.name])

    # a copy whose new holder fails goes to another spare (paper 4.3)
    def adopts(c: CopyToStore | CopyOutcome, p: int) -> bool:
        return st.get((c.record.key, c.rank), {}).get(p) == ADOPT

    outcomes = f.store_copies(copies(), lambda o: place(o.record, o.rank), adopts)
    bad = verify_adopted(f, [(o.record, o.rank, o.peer) for o in outcomes if o.stored and adopts(o, o.peer)])
    moves: list[pb.CopyMove] = []
    for o in outcomes:
        if (exc := bad.get((o.record.key, o.rank, o.peer))) is not None:
            report.conflicts.append(
                f"{o.record.name}: peer {o.peer} took copy {o.rank} back but it does not read back: {exc}"
            )
        elif o.stored:
            moves.append(
                pb.CopyMove(
                    name=o.record.name,
                    copy_rank=o.rank,
                    from_peer_idx=o.record.copies()[o.rank],
                    to_peer_idx=o.peer,
                    stored_as=o.record.stored_as or "",
                )
            )
        elif not o.peer_failed:
            report.conflicts.append(f"{o.record.name}: {o.error}")
    domains = f.placement_domains
    if domains is not None:  # the peerlist spans several domains (one: a single machine, nothing to spread)
        short = set(report.under_replicated)
        report.shared_domain += [n for n, h in placed if n not in short and shares_domain(list(h.values()), domains)]

    # 3. Commit the moves: from now on the new holders serve these copies.
    if moves:
        reply = f.commit_moved_copies(moves)
        report.copies_moved += reply.moved
        report.conflicts.extend(reply.conflicts)
        report.generation = reply.generation

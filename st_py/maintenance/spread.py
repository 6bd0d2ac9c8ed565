"""Growing and draining the cluster: copies moved between live peers, online.

The paper (section 5) lets new peers take new files from their first
announce and leaves existing files where they are ("no effort is made to
automatically rebalance existing files after expansion"), and treats the
removal of a storage node as a failure. FreeLoader (seed 004, 3.1, "User
Impact Control") adds that a donor will "ultimately withdraw" its space.
Two operations do both without taking anything offline:

- :func:`spread` (``storetorrent rebalance --spread``) moves copies from the
  fullest peers to the emptiest (new peers first) until every peer's fill
  is within a tolerance of the mean;
- :func:`drain` (``storetorrent drain PEER``) takes a live peer out of
  service (nothing new is placed on it), moves every copy it holds to the
  others while it still serves, then marks it retired.

**One move**, as :mod:`st_py.maintenance.rebalance` does it for lost peers: the record
is read from a holder (CRC-checked, failing over between copies; a drained
peer's x1 records are read from the drained peer itself, which is alive),
written at the same copy rank to a live peer in service that holds no copy
of it (``PUT`` with ``REPLACE``), and the tracker commits the move
(``MoveCopies``: the old holder goes to ``copy_history``, valid until the
move's generation). Readers stay exactly-once throughout:

- before the commit the new copy is not committed, so no GET asks for it and
  no GET_LOCAL reveals it;
- the commit is one SQLite transaction per batch: a move is committed or
  not, whatever process dies (a peer SIGKILLed mid-move, this client);
- a GET_LOCAL planned before the move reveals the old copy (its generation
  precedes the move), one planned after it the new one: each record once;
- the old copy is **left on the old holder for its scrubber**, which keeps
  it ``--scrub-age`` seconds (default an hour) after the move (the move's
  ``until_at``, as for a replaced version's copies), so a scan planned
  before the move can still read the local paths it was given, and a GET
  holding metadata read before the move still finds it. Deleting it at once
  would break both; the client cannot know when the last such reader is
  done, and the peer's scrubber already decides from the infofile alone.
  The old holder's space therefore comes back ``--scrub-age`` after the
  move, at its next scrub (``--scrub-interval``).

A move never targets a peer that held a copy of the record within the last
``RECENT_HOLDER_S`` seconds (a ``REPLACE`` there would overwrite a copy that
an older plan may still read) unless no other peer can take it.

**Fill.** A peer's fill is the bytes of the committed copies it holds of the
files considered (one file, the files named, or every file with ``--all``)
divided by its space, the capacity it announces (the space StoreTorrent may
occupy on it: its disk, or ``--capacity``; a disk several peers share is
split evenly between them, :func:`_spaces`), which does not move as copies
move, so a second spread of an even cluster moves nothing. Each file is spread over the peers in service in proportion
to their space, so the cluster's fill evens out with every file, and each
file is read from every peer in parallel. The tolerance is relative to the
mean fill: with ``0.1`` every peer ends within 10% of it, as far as the
records' sizes allow (a file of a few records cannot be split finely; the
report says whether the fill is even).

Copies move at most ``max_mb_per_s`` (10^6 bytes per second of copies
written, client side); the peers' own caps (``st-peer --max-write-mb-per-s``,
``--max-read-mb-per-s``, ``--max-request-rate``; docs/operations.md, "Impact
control") hold as well.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from st_py._proto import tracker_pb2 as pb
from st_py.client.copies import CopyOutcome, CopyToStore
from st_py.core.infofile import RecordMeta
from st_py.core.placement import Domain, farthest, nearness
from st_py.errors import (
    InvalidOptionError,
    PeerNotLiveError,
    StoreTorrentError,
    UnknownPeerError,
)
from st_py.maintenance.repair import all_files

DEFAULT_TOLERANCE = 0.1
BATCH = 256  # moves read, written and committed together
BATCH_BYTES = 64 << 20  # ... and at most this many bytes of records held in memory
RECENT_HOLDER_S = 3600.0  # the peers' default --scrub-age: how long a moved-away copy may still be read
MAX_DRAIN_PASSES = 5
DRAINING, RETIRED = "draining", "retired"

Progress = Callable[[str, int, int], None]  # (file, copies moved so far, copies planned) after each batch


@dataclass(frozen=True)
class PeerRef:
    """A peer as the tracker knows it: ``addr`` (``host:port``), stable
    ``peer_id``, liveness and ``drain_state`` (``""`` in service,
    ``"draining"`` or ``"retired"``)."""

    addr: str
    peer_id: str
    alive: bool
    drain_state: str = ""


@dataclass
class PeerFill:
    """One peer's share of the files considered.

    ``space_bytes`` is what StoreTorrent may occupy on it (its announced
    capacity, a shared disk split evenly: :func:`_spaces`); ``bytes_before`` and ``bytes_after`` the committed copy
    bytes it holds of the files, before and after the operation."""

    addr: str
    peer_id: str
    space_bytes: int
    bytes_before: int = 0
    bytes_after: int = 0
    drain_state: str = ""

    @property
    def fill_before(self) -> float:
        """``bytes_before / space_bytes`` (0 to 1)."""
        return self.bytes_before / self.space_bytes if self.space_bytes else 0.0

    @property
    def fill_after(self) -> float:
        """``bytes_after / space_bytes`` (0 to 1)."""
        return self.bytes_after / self.space_bytes if self.space_bytes else 0.0


@dataclass
class FileMoves:
    """What a spread or a drain did to one file.

    ``copies_planned`` moves were planned, ``copies_moved`` of them
    committed (``bytes_moved`` bytes, one copy each). ``skipped`` are moves
    left out before anything was written (the record was deleted, replaced
    or moved by someone else meanwhile, could not be read, or no live peer
    could take it); ``conflicts`` moves the tracker refused; ``stuck`` (a
    drain) records with a copy on the drained peer that no peer in service
    can take (every one holds a copy already). ``peers_added`` is how the
    peerlist grew (``host:port``)."""

    file: str
    copies_planned: int = 0
    copies_moved: int = 0
    bytes_moved: int = 0
    peers_added: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    generation: int = 0
    before: dict[str, int] = field(default_factory=dict)  # peer_id -> committed copy bytes
    after: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict:
        """The counts as a JSON-ready dict."""
        return {
            "file": self.file,
            "copies_planned": self.copies_planned,
            "copies_moved": self.copies_moved,
            "bytes_moved": self.bytes_moved,
            "peers_added": list(self.peers_added),
            "skipped": len(self.skipped),
            "conflicts": len(self.conflicts),
            "stuck": len(self.stuck),
            "generation": self.generation,
        }


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
    def complete(self) -> bool:
        """The peer holds no committed copy and is retired."""
        return self.drain_state == RETIRED

    def as_dict(self) -> dict:
        """The report as a JSON-ready dict (files with nothing to move left out)."""
        return {
            "peer": self.peer,
            "peer_id": self.peer_id,
            "drain_state": self.drain_state,
            "copies_moved": self.copies_moved,
            "bytes_moved": self.bytes_moved,
            "copies_left": self.copies_left,
            "failed_files": [list(x) for x in self.failed_files],
            "passes": self.passes,
            "seconds": round(self.seconds, 3),
            "files": [f.as_dict() for f in self.files if f.copies_planned or f.stuck or f.skipped],
        }


# -- peers ---------------------------------------------------------------------
def _ref(p) -> PeerRef:
    return PeerRef(p.addr, p.peer_id, bool(p.alive), p.drain_state)


def find_peer(client, peer: str) -> PeerRef:
    """The peer ``peer`` names: a ``host:port``, a peer id, or a host that
    only one peer listens on.

    Raises
    ------
    UnknownPeerError
        No peer known to the tracker matches, or a host matches several.
    TrackerUnavailableError
    """
    peers = list(client.status().peers)
    for p in peers:
        if peer in (p.addr, p.peer_id):
            return _ref(p)
    on_host = [p for p in peers if p.addr.rsplit(":", 1)[0] == peer]
    known = sorted(p.addr for p in peers)
    if len(on_host) == 1:
        return _ref(on_host[0])
    if on_host:
        raise UnknownPeerError(
            f"{len(on_host)} peers run on host {peer}: name one as HOST:PORT ({', '.join(p.addr for p in on_host)})",
            peer,
            known,
        )
    raise UnknownPeerError(
        f"no peer {peer!r} is known to the tracker; its peers are {', '.join(known) or 'none'}", peer, known
    )


def set_in_service(client, peer: str) -> PeerRef:
    """Put a drained (or draining) peer back in service: new files may be
    scheduled on it again. Copies already moved off stay where they are
    (``storetorrent drain --cancel``; :func:`spread` moves some back).

    Raises
    ------
    UnknownPeerError, PermissionDeniedError (not an admin), TrackerUnavailableError
    """
    ref = find_peer(client, peer)
    return _ref(client.tracker.set_peer_state(ref.peer_id, ""))


def _spaces(peers) -> dict[str, int]:
    """``{peer_id: space}``: what StoreTorrent may occupy on each of
    ``peers`` (``pb.Peer``): its announced capacity (its disk, or its
    ``--capacity``), a filesystem that several of them share (``fs_id``, as
    ``storetorrent up``'s peers do) split evenly between them; else used
    plus free bytes; else 1 (never announced).

    Not used plus free, which moves as copies move (a moved-away copy waits
    for the scrubber, so both holders count it for ``--scrub-age``): the
    shares then changed between two spreads, and a second spread of an even
    cluster moved copies again."""
    peers = list(peers)
    sharing: dict[str, int] = {}
    for p in peers:
        if p.fs_id:
            sharing[p.fs_id] = sharing.get(p.fs_id, 0) + 1
    out = {}
    for p in peers:
        cap = int(p.capacity_bytes) // max(1, sharing.get(p.fs_id, 1) if p.fs_id else 1)
        out[p.peer_id] = cap or int(p.used_bytes + p.free_bytes) or 1
    return out


# -- options -------------------------------------------------------------------
def _check_options(tolerance: float, max_mb_per_s: float | None) -> None:
    if not 0 <= tolerance < 1:
        raise InvalidOptionError(
            f"tolerance {tolerance} must be at least 0 and below 1 (a fraction of the mean fill: 0.1 is 10%)",
            "tolerance",
            tolerance,
        )
    if max_mb_per_s is not None and not max_mb_per_s > 0:
        raise InvalidOptionError(
            f"max_mb_per_s {max_mb_per_s} must be above 0 (None: no cap)", "max_mb_per_s", max_mb_per_s
        )


class _Throttle:
    """A token bucket over the bytes the move loop writes, holding a tenth
    of a second of its rate (as the peers' impact-control limits do)."""

    def __init__(self, mb_per_s: float | None):
        self.rate = mb_per_s * 1e6 if mb_per_s else 0.0
        self.burst = max(self.rate / 10, 1.0)
        self.tokens = self.burst
        self.last = time.monotonic()

    def take(self, n: int, poll: Callable[[float], object]) -> None:
        """Account ``n`` bytes; wait (running ``poll(seconds)``, which keeps
        replies flowing) until the bucket allows them."""
        if not self.rate:
            return
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate) - n
        self.last = now
        if self.tokens < 0:
            until = now + -self.tokens / self.rate
            while (left := until - time.monotonic()) > 0:
                poll(min(left, 0.05))


# -- planning ------------------------------------------------------------------
@dataclass
class _Move:
    name: str
    rank: int
    src: int
    dst: int
    size: int


def _recent_holders(reader, names: Iterable[str] | None = None) -> dict[str, set[int]]:
    """``{record: peer indexes}`` that held one of its copies within the last
    ``RECENT_HOLDER_S`` seconds (a copy moved away, or a replaced version),
    whose scrubber may still keep it for older readers."""
    since = time.time() - RECENT_HOLDER_S
    out: dict[str, set[int]] = {}
    try:
        if names is None:
            rows = reader.conn.execute("SELECT name, peer_idx FROM copy_history WHERE until_at >= ?", (since,))
        else:
            names = list(names)
            rows = []
            for i in range(0, len(names), 500):
                chunk = names[i : i + 500]
                rows += reader.conn.execute(
                    f"SELECT name, peer_idx FROM copy_history WHERE until_at >= ? AND name IN "
                    f"({','.join('?' * len(chunk))})",
                    [since, *chunk],
                ).fetchall()
        for name, idx in rows:
            out.setdefault(name, set()).add(idx)
    except sqlite3.OperationalError:  # a file made before versions: no until_at, nothing recent
        pass
    return out


def _holdings(metas: Mapping[str, RecordMeta], peers: Iterable[int]) -> tuple[dict[int, int], dict[int, list]]:
    """Bytes and ``(size, name, rank)`` of the copies each of ``peers`` holds."""
    held = {p: 0 for p in peers}
    on: dict[int, list] = {p: [] for p in held}
    for m in metas.values():
        for rank, p in m.copies().items():
            if p in held:
                held[p] += m.size
                on[p].append((m.size, m.name, rank))
    return held, on


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
) -> list[_Move]:
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
    (docs/replication.md, "Failure domains")."""
    prior = prior or {}
    held, on = _holdings(metas, peers)
    total, room = sum(held.values()), sum(space[p] for p in peers)
    if len(peers) < 2 or not total:
        return []
    before = sum(prior.get(p, 0) for p in peers)
    share = {p: (total + before) * space[p] / room - prior.get(p, 0) for p in peers}
    moves: list[_Move] = []
    now: dict[str, list[int]] = {}  # holders of records with a move planned, as planned
    for s in sorted(peers, key=lambda p: (-(held[p] - share[p]) / space[p], p)):
        if held[s] <= share[s]:
            break  # the rest are at or below their share
        for size, name, rank in sorted(on[s], reverse=True):
            es = held[s] - share[s]
            if es <= 0 or all(held[r] >= share[r] for r in peers if r != s):
                break
            best, best_gap = None, 0.0
            others = [p for p in now.get(name, metas[name].peers) if p != s]
            limit = nearness(s, others, domains)
            for r in peers:
                er = held[r] - share[r]
                if r == s or er >= 0 or r in taken[name] or nearness(r, others, domains) > limit:
                    continue
                gain = ((es - size) ** 2 - es**2) / space[s] + ((er + size) ** 2 - er**2) / space[r]
                if gain < 0 and -er / space[r] > best_gap:
                    best, best_gap = r, -er / space[r]
            if best is None:
                continue
            held[s] -= size
            held[best] += size
            taken[name].add(best)
            now[name] = others + [best]
            moves.append(_Move(name, rank, s, best, size))
    return moves


def _plan_drain(
    metas: Mapping[str, RecordMeta],
    drained: int,
    peers: list[int],
    space: Mapping[int, int],
    taken: dict[str, set[int]],
    fallback: dict[str, set[int]],
    domains: Mapping[int, Domain] | None = None,
) -> tuple[list[_Move], list[str]]:
    """A move for every copy on peer ``drained``, each to the peer in service
    whose fill it raises least among those holding no copy of the record
    (``taken``) and, with ``domains``, farthest by failure domain from its
    other copies; one that held a copy recently (``fallback``) only if no
    other can take it. Returns (moves, records no peer can take)."""
    held, _ = _holdings(metas, peers)
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
                stuck.append(m.name)
                continue
            cands = farthest(cands, [p for p in m.peers if p != drained], domains)
            r = min(cands, key=lambda r: ((held[r] + m.size) / space[r], r))
            held[r] += m.size
            taken[m.name].add(r)
            moves.append(_Move(m.name, rank, drained, r, m.size))
    return moves, stuck


# -- moving --------------------------------------------------------------------
def _batches(moves: list[_Move]) -> Iterable[list[_Move]]:
    batch: list[_Move] = []
    size = 0
    for mv in moves:
        if batch and (len(batch) >= BATCH or size + mv.size > BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(mv)
        size += mv.size
    if batch:
        yield batch


def _execute(
    f,
    moves: list[_Move],
    peers: list[int],
    space: Mapping[int, int],
    held: dict[int, int],
    fm: FileMoves,
    throttle: _Throttle,
    progress: Progress | None,
    allow_recent: bool = False,
) -> None:
    """Carry out ``moves`` on open file ``f`` in batches (read, write, commit);
    ``held`` (bytes per peer index) follows the committed moves. A copy
    whose planned peer cannot take it goes to another peer in service
    (``peers``); to one that held a copy of the record recently only with
    ``allow_recent`` and no other choice."""
    fm.copies_planned += len(moves)
    done = 0
    for batch in _batches(moves):
        _move_batch(f, batch, peers, space, held, fm, throttle, allow_recent)
        done += len(batch)
        if progress:
            progress(f.name, done, len(moves))


def _move_batch(
    f,
    batch: list[_Move],
    peers: list[int],
    space: Mapping[int, int],
    held: dict[int, int],
    fm: FileMoves,
    throttle: _Throttle,
    allow_recent: bool,
) -> None:
    reader = f.infofile()
    names = sorted({mv.name for mv in batch})
    metas = reader.lookup_many(names)  # as committed now: writers and other movers go on meanwhile
    recent = _recent_holders(reader, names)
    taken = {n: set(m.peers) for n, m in metas.items()}  # holders, and peers given a copy in this batch
    valid: list[tuple[_Move, RecordMeta]] = []
    for mv in batch:
        m = metas.get(mv.name)
        if m is None or m.copies().get(mv.rank) != mv.src:
            fm.skipped.append(f"{mv.name}: deleted, replaced or moved since the move was planned")
        else:
            valid.append((mv, m))
    reads = {n: f.queue_get(n, stored=True) for n in sorted({mv.name for mv, _ in valid})}
    data: dict[str, bytes] = {}
    for n, fut in reads.items():
        exc = fut.exception()
        if exc is None:
            data[n] = fut.result()
        else:  # every copy failed: nothing is written, the record stays where it is
            fm.skipped.append(f"{n}: not readable now: {exc}")
    tried: dict[tuple[str, int], set[int]] = {}
    move_of: dict[tuple[str, int], _Move] = {}

    def place(mv: _Move, m: RecordMeta, dst: int | None) -> int | None:
        t = tried[(mv.name, mv.rank)]

        def ok(r: int) -> bool:
            return r not in t and r not in taken[mv.name] and f.peer_usable(r)

        old = recent.get(mv.name, set())
        if dst is None or not ok(dst) or (dst in old and not allow_recent):
            cands = [r for r in peers if ok(r) and r not in old] or (
                [r for r in peers if ok(r)] if allow_recent else []
            )
            cands = farthest(cands, [p for p in m.peers if p != mv.src], f.placement_domains)  # apart by failure domain
            dst = min(cands, key=lambda r: ((held.get(r, 0) + m.size) / space[r], r)) if cands else None
        if dst is None:
            fm.skipped.append(f"{mv.name}: no live peer in service can take copy {mv.rank}")
            return None
        t.add(dst)
        taken[mv.name].add(dst)
        return dst

    def copies() -> Iterator[CopyToStore]:
        for mv, m in valid:
            if mv.name in data:
                throttle.take(m.size, f.poll)
                tried[(mv.name, mv.rank)] = set()
                move_of[(mv.name, mv.rank)] = mv
                dst = place(mv, m, mv.dst)
                if dst is not None:
                    yield CopyToStore(m, mv.rank, dst, data[mv.name])

    def fail_over(o: CopyOutcome) -> int | None:
        return place(move_of[(o.record.name, o.rank)], o.record, None)  # another peer (paper 4.3); not throttled: rare

    moved: list[tuple[_Move, RecordMeta, int]] = []
    for o in f.store_copies(copies(), fail_over):
        if o.stored:
            moved.append((move_of[(o.record.name, o.rank)], o.record, o.peer))
        elif not o.peer_failed:
            fm.conflicts.append(f"{o.record.name}: {o.error}")
    if not moved:
        return
    reply = f.commit_moved_copies(
        [
            pb.CopyMove(
                name=mv.name, copy_rank=mv.rank, from_peer_idx=mv.src, to_peer_idx=dst, stored_as=m.stored_as or ""
            )
            for mv, m, dst in moved
        ],
    )
    fm.conflicts.extend(reply.conflicts)
    fm.generation = max(fm.generation, int(reply.generation))
    now = reader.lookup_many(sorted({mv.name for mv, _, _ in moved}))  # what the tracker committed
    for mv, m, dst in moved:
        n = now.get(mv.name)
        if n is not None and n.copies().get(mv.rank) == dst:
            fm.copies_moved += 1
            fm.bytes_moved += m.size
            held[mv.src] = held.get(mv.src, 0) - m.size
            held[dst] = held.get(dst, 0) + m.size


def _prepare(f) -> None:
    f.check_open()
    f.flush()
    f.refresh()


def _grow_peerlist(f, in_service: set[str], fm: FileMoves) -> None:
    """Add every peer in service not yet in the file's peerlist (the tracker
    adds its live peers in service: ``ExtendPeerlist``)."""
    have = {p.peer_id for p in f.peers.values()}
    if in_service - have:
        fm.peers_added = [f.peers[i].addr for i in f.extend_peerlist()]


def _by_peer_id(f, held: Mapping[int, int], peer_ids: Iterable[str]) -> dict[str, int]:
    out = {pid: 0 for pid in peer_ids}
    for i, b in held.items():
        pid = f.peers[i].peer_id
        if pid in out:
            out[pid] += b
    return out


def _spread_file(
    f,
    in_service: dict[str, int],
    tolerance: float,
    throttle: _Throttle,
    progress: Progress | None,
    so_far: Mapping[str, int],
) -> FileMoves:
    """Spread open file ``f`` over the peers ``in_service`` (``{peer_id:
    space}``; ``so_far``: their bytes of the files spread before); see
    :func:`spread`."""
    fm = FileMoves(f.name)
    _prepare(f)
    reader = f.infofile()
    metas = reader.copies_held_by(sorted(f.peers))
    held, _ = _holdings(metas, f.peers)
    fm.before = _by_peer_id(f, held, in_service)
    fm.generation = reader.generation()
    if _is_even(fm.before, in_service, tolerance):
        fm.after = dict(fm.before)
        return fm
    _grow_peerlist(f, set(in_service), fm)
    peers = sorted(i for i, p in f.peers.items() if p.peer_id in in_service and f.peer_usable(i))
    space = {i: in_service[f.peers[i].peer_id] for i in peers}
    recent = _recent_holders(reader)
    taken = {n: set(m.peers) | recent.get(n, set()) for n, m in metas.items()}
    prior = {i: so_far.get(f.peers[i].peer_id, 0) for i in peers}
    moves = _plan_spread(metas, peers, space, taken, prior, f.placement_domains)
    held, _ = _holdings(metas, f.peers)
    _execute(f, moves, peers, space, held, fm, throttle, progress)
    fm.after = _by_peer_id(f, held, in_service)
    return fm


def spread(
    client,
    names: Iterable[str] | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    max_mb_per_s: float | None = None,
    progress: Progress | None = None,
) -> SpreadReport:
    """Move copies onto the peers with the most room (new peers first) until
    every peer's fill is within ``tolerance`` of the mean, online (paper 5;
    the module docstring says how readers stay exactly-once and when the old
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
    _check_options(tolerance, max_mb_per_s)
    t0 = time.monotonic()
    peers = [p for p in client.status().peers if p.alive and not p.drain_state]
    in_service = _spaces(peers)
    report = SpreadReport(tolerance, peers=[PeerFill(p.addr, p.peer_id, in_service[p.peer_id]) for p in peers])
    throttle = _Throttle(max_mb_per_s)
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


def _drain_file(
    f, peer_id: str, in_service: dict[str, int], throttle: _Throttle, progress: Progress | None
) -> tuple[FileMoves, int]:
    """Move every copy of open file ``f`` off peer ``peer_id``; returns the
    moves and how many copies it held when the pass looked."""
    fm = FileMoves(f.name)
    _prepare(f)
    drained = next((i for i, p in f.peers.items() if p.peer_id == peer_id), None)
    if drained is None:
        return fm, 0
    reader = f.infofile()
    if not reader.copies_held_by([drained]):
        return fm, 0
    _grow_peerlist(f, set(in_service), fm)
    metas = reader.copies_held_by(sorted(f.peers))
    on_drained = {n: m for n, m in metas.items() if drained in m.peers}
    peers = sorted(i for i, p in f.peers.items() if p.peer_id in in_service and f.peer_usable(i))
    space = {i: in_service[f.peers[i].peer_id] for i in peers}
    held, _ = _holdings(metas, f.peers)
    recent = _recent_holders(reader, on_drained)
    taken = {n: set(m.peers) | recent.get(n, set()) for n, m in on_drained.items()}
    moves, fm.stuck = _plan_drain(on_drained, drained, peers, space, taken, recent, f.placement_domains)
    _execute(f, moves, peers, space, held, fm, throttle, progress, allow_recent=True)
    return fm, len(moves) + len(fm.stuck)


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
    drained, one move at a time as :func:`spread` moves (its x1 records are
    read from the peer itself: it is alive, so they stay readable
    throughout). Writers that opened a file before the drain may still put
    copies on it, so passes repeat until one finds nothing left (at most
    ``max_passes``). Then the peer is marked ``retired`` (kept by the
    tracker across restarts; ``storetorrent status`` shows it): stop it and
    remove its data directory when convenient. Its old copies are left to
    its scrubber meanwhile (module docstring).

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
        copies are still on it (records no peer in service can take: add
        peers; files that could not be opened: ``failed_files``).

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
    _check_options(DEFAULT_TOLERANCE, max_mb_per_s)
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
    throttle = _Throttle(max_mb_per_s)
    by_file: dict[str, FileMoves] = {}
    for n in range(1, max_passes + 1):
        report.passes = n
        in_service = _spaces(
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
                left += sum(1 for m in f.infofile().copies_held_by(idx).values() for p in m.peers if p in idx)
        except StoreTorrentError as e:
            report.failed_files.append((name, str(e)))
    return left


__all__ = [
    "DEFAULT_TOLERANCE",
    "DrainReport",
    "FileMoves",
    "PeerFill",
    "PeerRef",
    "SpreadReport",
    "drain",
    "find_peer",
    "set_in_service",
    "spread",
]

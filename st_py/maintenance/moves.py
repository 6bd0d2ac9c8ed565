"""One move of a copy between live peers, online: what :mod:`spread` and
:mod:`drain` (st_py.maintenance) share (paper 4.4 and 5).

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

**Where a copy may go** (:func:`standing`, the rule of
:func:`st_py.core.history.copy_standing`, for current records, objects'
stripes and kept past versions alike): to any live peer in service that
holds no live copy under that stored name but this copy's own bytes at its
rank (another version sharing the stored name with the same bytes: the
same file, taken as below). A peer the copy was moved away
from earlier, at the same copy rank, may still have its bytes: the copy is
sent to it without ``REPLACE``, the peer answers ``OK`` without writing
(same rank and CRC-32C: it takes the copy back), the mover reads it back
from there (CRC-checked) and commits the move. A peer whose moved-away copy
was at another rank within the last ``RECENT_HOLDER_S`` seconds is used only
when no other peer can take the copy (a ``REPLACE`` there changes the file
an older plan may still read); drain and rebalance do so, spread does not.

Copies move at most ``max_mb_per_s`` (10^6 bytes per second of copies
written, client side); the peers' own caps (``st-peer --max-write-mb-per-s``,
``--max-read-mb-per-s``, ``--max-request-rate``; docs/operations.md, "Impact
control") hold as well.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace

from st_py._proto import tracker_pb2 as pb
from st_py.client.copies import CopyOutcome, CopyToStore
from st_py.core.history import ADOPT, LIVE, STALE, Standings, copy_standing, standings
from st_py.core.infofile import RecordMeta
from st_py.core.placement import farthest
from st_py.errors import (
    InvalidOptionError,
    UnknownPeerError,
)

DEFAULT_TOLERANCE = 0.1
BATCH = 256  # moves read, written and committed together
BATCH_BYTES = 64 << 20  # ... and at most this many bytes of records held in memory
RECENT_HOLDER_S = 3600.0  # the peers' default --scrub-age: how long a moved-away copy may still be read
DEFAULT_SCRUB_INTERVAL_S = 86400.0  # the peers' default --scrub-interval


def old_copies(bytes_moved: int, now: float | None = None) -> dict:
    """What moves of ``bytes_moved`` bytes leave on the old holders for
    their scrubbers (module docstring), as a JSON-ready dict:
    ``old_copies_bytes`` (= ``bytes_moved``: each move leaves its old copy),
    ``old_copies_freed_from`` (unix s: ``now`` plus the peers' default
    ``--scrub-age``, the earliest the last of them can go; each goes at its
    holder's first scrub after that, within ``--scrub-interval``) and
    ``scrub_age_s`` (the default assumed: the client cannot see a peer's flags)."""
    now = time.time() if now is None else now
    return {
        "old_copies_bytes": bytes_moved,
        "old_copies_freed_from": round(now + RECENT_HOLDER_S, 1) if bytes_moved else None,
        "scrub_age_s": RECENT_HOLDER_S,
    }


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
    capacity, a shared disk split evenly: :func:`spaces`); ``bytes_before`` and ``bytes_after`` the committed copy
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
    taken_back: int = 0
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
            "taken_back": self.taken_back,
            "peers_added": list(self.peers_added),
            "skipped": len(self.skipped),
            "conflicts": len(self.conflicts),
            "stuck": len(self.stuck),
            "generation": self.generation,
        }


# -- peers ---------------------------------------------------------------------
def peer_ref(p) -> PeerRef:
    """The :class:`PeerRef` of a tracker status peer (``pb.Peer``)."""
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
            return peer_ref(p)
    on_host = [p for p in peers if p.addr.rsplit(":", 1)[0] == peer]
    known = sorted(p.addr for p in peers)
    if len(on_host) == 1:
        return peer_ref(on_host[0])
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
    (``storetorrent drain --cancel``; :func:`~st_py.maintenance.spread.spread` moves some back).

    Raises
    ------
    UnknownPeerError, PermissionDeniedError (not an admin), TrackerUnavailableError
    """
    ref = find_peer(client, peer)
    return peer_ref(client.tracker.set_peer_state(ref.peer_id, ""))


def spaces(peers) -> dict[str, int]:
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
def check_options(tolerance: float, max_mb_per_s: float | None) -> None:
    """Raise :class:`~st_py.errors.InvalidOptionError` unless ``0 <= tolerance < 1``
    and ``max_mb_per_s`` is None or above 0."""
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


class Throttle:
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
class Move:
    """A planned move: copy ``rank`` of record ``name`` (``size`` bytes) from
    peer index ``src`` to ``dst``."""

    name: str
    rank: int
    src: int
    dst: int
    size: int


def standing(reader, copies: Iterable[tuple[RecordMeta, int]]) -> dict[tuple[str, int], dict[int, str]]:
    """Which peers may take each copy ``(version, copy rank)``, as
    ``{(stored name, rank): {peer: standing}}``:
    :func:`st_py.core.history.copy_standing` (the rule), with the
    moved-away copies of the last ``RECENT_HOLDER_S`` seconds counted as
    still read by older plans."""
    return copy_standing(
        reader, [(m.name, m.key, rank, m.crc32c, m.size) for m, rank in copies], time.time() - RECENT_HOLDER_S
    )


def planning_standings(reader, names: Iterable[str]) -> Standings:
    """The rule of :func:`standing` for every copy stored under the stored
    names of records and past versions ``names``, as a model a planner
    moves copies in (:class:`st_py.core.history.Standings`): after each
    planned move it answers what :func:`standing` will answer once the
    moves are committed."""
    return standings(reader, list(names), time.time() - RECENT_HOLDER_S)


def admissible(rule: Mapping[int, str], cands: Iterable[int]) -> tuple[list[int], list[int]]:
    """``(first choice, last resort)`` of ``cands`` for one copy by its
    :func:`standing` ``rule``: those with no live copy under its stored name
    and no moved-away copy of another rank older plans may read (a peer that
    takes the copy back is among them), then those only the latter bars."""
    ok = [p for p in cands if rule.get(p) != LIVE]
    return [p for p in ok if rule.get(p) != STALE], ok


def together(rule: Mapping[int, str], cands: list[int]) -> list[int]:
    """Those of ``cands`` that hold this very copy already (``ADOPT`` by its
    :func:`standing` ``rule``: another version's copy of the same bytes at
    the same rank under the stored name, or its own moved-away file), else
    all of ``cands``. Copies of two versions that share a stored name are
    one file on a peer; placed apart (one version's copy on a peer that
    holds the other's at another rank), each leaves the other no peer once
    only as many peers as copies are in service (docs/snapshots.md, "Where a
    copy may go"), so every placement asks this first."""
    same = [p for p in cands if rule.get(p) == ADOPT]
    return same or cands


def short_of_peers(copies: int, in_service: int) -> str:
    """Why a copy cannot be placed, with the numbers: ``"3 copies need 3
    peers in service; 2 are"``, or, with enough peers, that every one of
    them holds a copy of the version or refused it."""
    if in_service < copies:
        return f"{copies} copies need {copies} peers in service; {in_service} are"
    return (
        f"each of the {in_service} peers in service holds one of its {copies} copies, "
        "holds another version under its stored name, or cannot take it now"
    )


def verify_adopted(f, taken_back: list[tuple[RecordMeta, int, int]]) -> dict[tuple[str, int, int], Exception]:
    """Read each copy a peer took back (``(version, copy rank, peer)``: a
    ``PUT`` answered ``OK`` without writing, the bytes it had from before a
    move) from that peer alone, CRC-32C checked by the peer and end to end;
    returns ``{(stored name, rank, peer): error}`` of those that do not read
    back whole (not to be committed)."""
    reads = {(m.key, rank, p): f.queue_get_version(replace(m, peers=(p,), ranks=(rank,))) for m, rank, p in taken_back}
    return {k: exc for k, fut in reads.items() if (exc := fut.exception()) is not None}


def holdings(metas: Mapping[str, RecordMeta], peers: Iterable[int]) -> tuple[dict[int, int], dict[int, list]]:
    """Bytes and ``(size, name, rank)`` of the copies each of ``peers`` holds."""
    held = {p: 0 for p in peers}
    on: dict[int, list] = {p: [] for p in held}
    for m in metas.values():
        for rank, p in m.copies().items():
            if p in held:
                held[p] += m.size
                on[p].append((m.size, m.name, rank))
    return held, on


# -- moving --------------------------------------------------------------------
def _batches(moves: list[Move]) -> Iterable[list[Move]]:
    batch: list[Move] = []
    size = 0
    for mv in moves:
        if batch and (len(batch) >= BATCH or size + mv.size > BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(mv)
        size += mv.size
    if batch:
        yield batch


def execute(
    f,
    moves: list[Move],
    peers: list[int],
    space: Mapping[int, int],
    held: dict[int, int],
    fm: FileMoves,
    throttle: Throttle,
    progress: Progress | None,
    allow_recent: bool = False,
) -> None:
    """Carry out ``moves`` on open file ``f`` in batches (read, write, commit);
    ``held`` (bytes per peer index) follows the committed moves. A copy
    whose planned peer cannot take it goes to another peer in service
    (``peers``) that :func:`standing` lets take it (one that had it from
    before a move takes it back, verified by reading it from there); to one
    whose moved-away copy of another rank older plans may still read only
    with ``allow_recent`` and no other choice."""
    fm.copies_planned += len(moves)
    done = 0
    for batch in _batches(moves):
        _move_batch(f, batch, peers, space, held, fm, throttle, allow_recent)
        done += len(batch)
        if progress:
            progress(f.name, done, len(moves))


def _move_batch(
    f,
    batch: list[Move],
    peers: list[int],
    space: Mapping[int, int],
    held: dict[int, int],
    fm: FileMoves,
    throttle: Throttle,
    allow_recent: bool,
) -> None:
    reader = f.infofile()
    names = sorted({mv.name for mv in batch})
    metas = reader.lookup_many(names)  # as committed now: writers and other movers go on meanwhile
    taken = {n: set(m.peers) for n, m in metas.items()}  # holders, and peers given a copy in this batch
    valid: list[tuple[Move, RecordMeta]] = []
    for mv in batch:
        m = metas.get(mv.name)
        if m is None or m.copies().get(mv.rank) != mv.src:
            fm.skipped.append(f"{mv.name}: deleted, replaced or moved since the move was planned")
        else:
            valid.append((mv, m))
    st = standing(reader, [(m, mv.rank) for mv, m in valid])
    reads = {n: f.queue_get(n, stored=True) for n in sorted({mv.name for mv, _ in valid})}
    data: dict[str, bytes] = {}
    for n, fut in reads.items():
        exc = fut.exception()
        if exc is None:
            data[n] = fut.result()
        else:  # every copy failed: nothing is written, the record stays where it is
            fm.skipped.append(f"{n}: not readable now: {exc}")
    tried: dict[tuple[str, int], set[int]] = {}
    move_of: dict[tuple[str, int], Move] = {}

    def place(mv: Move, m: RecordMeta, dst: int | None) -> int | None:
        t = tried[(mv.name, mv.rank)]
        rule = st.get((m.key, mv.rank), {})

        def ok(r: int) -> bool:
            return r not in t and r not in taken[mv.name] and rule.get(r) != LIVE and f.peer_usable(r)

        if dst is None or not ok(dst) or (rule.get(dst) == STALE and not allow_recent):
            cands = [r for r in peers if ok(r) and rule.get(r) != STALE] or (
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

    def adopts(c: CopyToStore, p: int) -> bool:
        return st.get((c.record.key, c.rank), {}).get(p) == ADOPT

    moved: list[tuple[Move, RecordMeta, int]] = []
    for o in f.store_copies(copies(), fail_over, adopts):
        if o.stored:
            moved.append((move_of[(o.record.name, o.rank)], o.record, o.peer))
        elif not o.peer_failed:
            fm.conflicts.append(f"{o.record.name}: {o.error}")
    back = [(m, mv.rank, dst) for mv, m, dst in moved if st.get((m.key, mv.rank), {}).get(dst) == ADOPT]
    bad = verify_adopted(f, back)
    for mv, m, dst in moved:
        if (exc := bad.get((m.key, mv.rank, dst))) is not None:
            fm.skipped.append(f"{mv.name}: peer {dst} took copy {mv.rank} back but it does not read back: {exc}")
    moved = [(mv, m, dst) for mv, m, dst in moved if (m.key, mv.rank, dst) not in bad]
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
    now = f.infofile().lookup_many(sorted({mv.name for mv, _, _ in moved}))  # what the tracker committed (its reply on)
    for mv, m, dst in moved:
        n = now.get(mv.name)
        if n is not None and n.copies().get(mv.rank) == dst:
            fm.copies_moved += 1
            fm.bytes_moved += m.size
            fm.taken_back += st.get((m.key, mv.rank), {}).get(dst) == ADOPT
            held[mv.src] = held.get(mv.src, 0) - m.size
            held[dst] = held.get(dst, 0) + m.size


def prepare(f) -> None:
    """Before planning moves on open file ``f``: its own writes committed and
    its peers and liveness read again."""
    f.check_open()
    f.flush()
    f.refresh()


def grow_peerlist(f, in_service: set[str], fm: FileMoves) -> None:
    """Add every peer in service not yet in the file's peerlist (the tracker
    adds its live peers in service: ``ExtendPeerlist``)."""
    have = {p.peer_id for p in f.peers.values()}
    if in_service - have:
        fm.peers_added = [f.peers[i].addr for i in f.extend_peerlist()]


def by_peer_id(f, held: Mapping[int, int], peer_ids: Iterable[str]) -> dict[str, int]:
    """``held`` (bytes per peer index of ``f``) summed per peer id, for ``peer_ids`` only."""
    out = {pid: 0 for pid in peer_ids}
    for i, b in held.items():
        pid = f.peers[i].peer_id
        if pid in out:
            out[pid] += b
    return out


# -- past versions kept for snapshots (docs/snapshots.md) -------------------------
KeptMove = tuple[tuple[str, int], int, int, "int | None"]
"""A move of a copy of a kept past version: ``((name, until), copy_rank,
from peer, to peer or None: any that can take it)``."""


def move_retained(f, off: set[int], peers: list[int], fm: FileMoves, throttle: Throttle) -> int:
    """Move the copies of past versions (``retained_copies``: kept for
    snapshots and older readers) that peers ``off`` hold onto other peers of
    ``peers`` (in service, usable), as current copies move: read from any
    holder (CRC-checked; a drained peer serves its own), stored under the
    version's stored name on a peer that :func:`standing` lets take it
    (one that had it from before a move takes it back), then committed with
    the version's ``until`` (``MoveCopies``). Used by drain (``off``: the
    drained peer, alive) and rebalance (``off``: lost peers, read from the
    other holders): a peer whose moved-away copy of another rank older
    plans may still read takes it when no other can. Returns how many such
    copies were on ``off`` when it looked; what moved is added to ``fm``."""
    versions = f.infofile().retained_held_by(sorted(off))
    wanted: list[KeptMove] = [
        (k, rank, src, None) for k, m in sorted(versions.items()) for rank, src in zip(m.ranks, m.peers) if src in off
    ]
    move_kept(f, wanted, peers, fm, throttle, avoid=off, allow_recent=True)
    return len(wanted)


def move_kept(
    f,
    wanted: list[KeptMove],
    peers: list[int],
    fm: FileMoves,
    throttle: Throttle,
    avoid: set[int] | None = None,
    held: dict[int, int] | None = None,
    space: Mapping[int, int] | None = None,
    allow_recent: bool = False,
) -> None:
    """Carry out ``wanted`` moves of kept past versions' copies in batches
    (see :func:`move_retained`): each version is read again as committed
    now (a move whose source no longer holds the copy is skipped), a planned
    peer is used if it can take the copy, else the least-filled peer of
    ``peers`` that can (never one of ``avoid``; :func:`standing` says which
    can: none holding a live copy under that stored name; one whose
    moved-away copy of another rank older plans may read only with
    ``allow_recent`` and no other choice; one that had this copy takes it
    back, verified by reading it from there). A copy no peer can take is
    ``stuck``, with the numbers (:func:`short_of_peers`). ``held`` (bytes
    per peer index, against ``space``) follows the committed moves, as
    :func:`execute` keeps it."""
    for i in range(0, len(wanted), BATCH):
        _move_kept_batch(f, wanted[i : i + BATCH], peers, fm, throttle, avoid or set(), held, space, allow_recent)


def _move_kept_batch(
    f,
    wanted: list[KeptMove],
    peers: list[int],
    fm: FileMoves,
    throttle: Throttle,
    avoid: set[int],
    held: dict[int, int] | None,
    space: Mapping[int, int] | None,
    allow_recent: bool,
) -> None:
    reader = f.infofile()
    versions = reader.retained_held_by(None, sorted({k for k, _, _, _ in wanted}))  # as committed now
    valid = []
    for k, rank, src, dst in wanted:
        m = versions.get(k)
        if m is None or m.copies().get(rank) != src:
            fm.skipped.append(f"{k[0]} (the version ended at generation {k[1]}): no longer kept there")
        else:
            valid.append((k, rank, src, dst))
    st = standing(reader, [(versions[k], rank) for k, rank, _, _ in valid])
    reads = {k: f.queue_get_version(versions[k]) for k in sorted({k for k, _, _, _ in valid})}
    key_of = {id(m): k for k, m in versions.items()}  # a CopyOutcome names its RecordMeta
    taken = {k: set(versions[k].peers) for k in reads}
    src_of: dict[tuple[tuple[str, int], int], int] = {}
    planned: dict[tuple[tuple[str, int], int], int | None] = {}
    to_store: list[tuple[tuple[str, int], int, bytes]] = []
    for k, rank, src, dst in valid:
        exc = reads[k].exception()
        if exc is not None:
            fm.skipped.append(f"{k[0]} (the version ended at generation {k[1]}): not readable now: {exc}")
            continue
        src_of[(k, rank)], planned[(k, rank)] = src, dst
        to_store.append((k, rank, reads[k].result()))

    def rule(k: tuple[str, int], rank: int) -> dict[int, str]:
        return st.get((versions[k].key, rank), {})

    def ok(k: tuple[str, int], rank: int, p: int) -> bool:
        return p not in taken[k] and p not in avoid and rule(k, rank).get(p) != LIVE and f.peer_usable(p)

    def place(k: tuple[str, int], rank: int) -> int | None:
        dst = planned.pop((k, rank), None)
        if dst is None or not ok(k, rank, dst) or rule(k, rank).get(dst) == STALE:
            cands = [p for p in peers if ok(k, rank, p) and rule(k, rank).get(p) != STALE] or (
                [p for p in peers if ok(k, rank, p)] if allow_recent else []
            )
            if not cands:
                n = len([p for p in peers if p not in avoid])
                fm.stuck.append(
                    f"{k[0]} (the version ended at generation {k[1]}): {short_of_peers(len(versions[k].peers), n)}"
                )
                return None
            cands = together(rule(k, rank), cands)
            if held is not None and space is not None:
                dst = min(cands, key=lambda p: ((held.get(p, 0) + versions[k].size) / space[p], p))
            else:
                dst = min(cands, key=lambda p: (sum(1 for t in taken.values() if p in t), p))
        taken[k].add(dst)
        return dst

    def copies() -> Iterator[CopyToStore]:
        for k, rank, data in to_store:
            throttle.take(versions[k].size, f.poll)
            dst = place(k, rank)
            if dst is not None:
                yield CopyToStore(versions[k], rank, dst, data)

    def adopts(c: CopyToStore, p: int) -> bool:
        return rule(key_of[id(c.record)], c.rank).get(p) == ADOPT

    moved: list[tuple[tuple[str, int], int, int, int]] = []
    for o in f.store_copies(copies(), lambda o: place(key_of[id(o.record)], o.rank), adopts):
        k = key_of[id(o.record)]
        if o.stored:
            moved.append((k, o.rank, src_of[(k, o.rank)], o.peer))
        elif not o.peer_failed:
            fm.conflicts.append(f"{o.record.name}: {o.error}")
    moved = _drop_unverified(f, moved, versions, rule, fm)
    if not moved:
        return
    _commit_kept(f, moved, versions, fm)
    now = f.infofile().retained_held_by(None, sorted({k for k, _, _, _ in moved}))  # what the tracker committed
    for k, rank, src, dst in moved:
        n = now.get(k)
        if n is not None and n.copies().get(rank) == dst:
            fm.copies_moved += 1
            fm.bytes_moved += versions[k].size
            fm.taken_back += rule(k, rank).get(dst) == ADOPT
            if held is not None:
                held[src] = held.get(src, 0) - versions[k].size
                held[dst] = held.get(dst, 0) + versions[k].size


def _drop_unverified(
    f,
    moved: list[tuple[tuple[str, int], int, int, int]],
    versions: Mapping[tuple[str, int], RecordMeta],
    rule: Callable[[tuple[str, int], int], dict[int, str]],
    fm: FileMoves,
) -> list[tuple[tuple[str, int], int, int, int]]:
    """``moved`` (``(version, rank, from, to)``) without the copies a peer
    took back (``ADOPT``) that do not read back whole from it
    (:func:`verify_adopted`; reported in ``fm.skipped``)."""
    back = [(versions[k], rank, dst) for k, rank, _, dst in moved if rule(k, rank).get(dst) == ADOPT]
    bad = verify_adopted(f, back)
    out = []
    for k, rank, src, dst in moved:
        exc = bad.get((versions[k].key, rank, dst))
        if exc is None:
            out.append((k, rank, src, dst))
        else:
            fm.skipped.append(
                f"{k[0]} (the version ended at generation {k[1]}): peer {dst} took copy {rank} back "
                f"but it does not read back: {exc}"
            )
    return out


def restore_unstored_retained(f, fm: FileMoves) -> tuple[int, int]:
    """Store again the copies of past versions that are not stored
    (``retained_unstored``: a holder's verifier quarantined them, or the
    version ended with them quarantined or pending; docs/snapshots.md,
    "Maintenance"), as repair does a current record's: the version is read
    from one of its stored copies (CRC-checked), written under its stored
    name at the copy's rank to a live peer that :func:`standing` lets take
    it (the copy's own holder only if no other can), and committed with the
    version's ``until`` (``MoveCopies`` from the holder the copy was
    committed to). Returns ``(copies found, copies of versions with no
    stored copy left)``; what was stored is added to ``fm``."""
    versions = f.infofile().retained_unstored()
    found = sum(len(u) for _, u in versions.values())
    lost = sum(len(u) for m, u in versions.values() if not m.peers)
    keys = sorted(k for k, (m, _) in versions.items() if m.peers)
    for i in range(0, len(keys), BATCH):
        _restore_batch(f, {k: versions[k] for k in keys[i : i + BATCH]}, fm)
    return found, lost


def _restore_batch(f, versions: dict[tuple[str, int], tuple[RecordMeta, list[tuple[int, int]]]], fm: FileMoves) -> None:
    reader = f.infofile()
    reads = {k: f.queue_get_version(m) for k, (m, _) in versions.items()}
    taken = {k: set(m.peers) for k, (m, _) in versions.items()}
    key_of = {id(m): k for k, (m, _) in versions.items()}
    metas = {k: m for k, (m, _) in versions.items()}
    st = standing(reader, [(m, rank) for m, unstored in versions.values() for rank, _ in unstored])
    holder: dict[tuple[tuple[str, int], int], int] = {}
    to_store: list[tuple[tuple[str, int], int, bytes]] = []
    for k, (m, unstored) in versions.items():
        exc = reads[k].exception()
        if exc is not None:
            fm.skipped.append(f"{m.name} (the version ended at generation {k[1]}): not readable now: {exc}")
            continue
        for rank, was in unstored:
            holder[(k, rank)] = was
            to_store.append((k, rank, reads[k].result()))

    def rule(k: tuple[str, int], rank: int) -> dict[int, str]:
        return st.get((metas[k].key, rank), {})

    def place(k: tuple[str, int], rank: int) -> int | None:
        m = metas[k]
        # the rule of moves (standing); the holder whose verifier found the copy bad last
        first, last = admissible(rule(k, rank), [p for p in sorted(f.peers) if p not in taken[k] and f.peer_usable(p)])
        was = holder[(k, rank)]
        cands = together(rule(k, rank), [p for p in first if p != was] or [p for p in last if p != was] or last)
        if not cands:
            fm.stuck.append(
                f"{m.name} (the version ended at generation {k[1]}): "
                f"{short_of_peers(len(m.peers) + len(versions[k][1]), sum(1 for p in f.peers if f.peer_usable(p)))}"
            )
            return None
        dst = min(cands, key=lambda p: (sum(1 for t in taken.values() if p in t), p))
        taken[k].add(dst)
        return dst

    def copies() -> Iterator[CopyToStore]:
        for k, rank, data in to_store:
            dst = place(k, rank)
            if dst is not None:
                yield CopyToStore(versions[k][0], rank, dst, data)

    def adopts(c: CopyToStore, p: int) -> bool:
        return rule(key_of[id(c.record)], c.rank).get(p) == ADOPT

    stored: list[tuple[tuple[str, int], int, int, int]] = []
    for o in f.store_copies(copies(), lambda o: place(key_of[id(o.record)], o.rank), adopts):
        k = key_of[id(o.record)]
        if o.stored:
            stored.append((k, o.rank, holder[(k, o.rank)], o.peer))
        elif not o.peer_failed:
            fm.conflicts.append(f"{o.record.name}: {o.error}")
    stored = _drop_unverified(f, stored, metas, rule, fm)
    if not stored:
        return
    reply = _commit_kept(f, stored, metas, fm)
    fm.copies_moved += int(reply.moved)


def _commit_kept(
    f, moved: list[tuple[tuple[str, int], int, int, int]], versions: Mapping[tuple[str, int], RecordMeta], fm: FileMoves
):
    """Commit copies of kept past versions stored on new holders
    (``((name, until), copy_rank, from peer, to peer)``) as moves with the
    version's ``until`` (``MoveCopies``); the tracker's conflicts and
    generation go to ``fm``. Returns its reply."""
    reply = f.commit_moved_copies(
        [
            pb.CopyMove(
                name=k[0],
                copy_rank=rank,
                from_peer_idx=src,
                to_peer_idx=dst,
                stored_as=versions[k].stored_as or "",
                until=k[1],
            )
            for k, rank, src, dst in moved
        ]
    )
    fm.conflicts.extend(reply.conflicts)
    fm.generation = max(fm.generation, int(reply.generation))
    return reply

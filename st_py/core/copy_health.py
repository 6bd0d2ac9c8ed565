"""The one model of a record's copies (docs/reliability.md, "Copy states").

Every report about copies reads it from here: the tracker's count of records
short of copies (``storetorrent status``, the status page, ``/status.json``,
metrics; :mod:`st_py.tracker.health`), ``storetorrent repair`` and its exit
code (:mod:`st_py.maintenance.repair`), and the readers that name a record nobody can
read (``get``, ``get_local`` and the scans raise
:class:`~st_py.errors.RecordUnavailableError` with this module's reason).

A **copy** of a committed record is in one state (:class:`CopyState`):

============== ==============================================================
``live``        stored on a peer the tracker sees live (it announces)
``suspect``     stored on a peer that failed less than ``failed_after_s`` ago
                (the tracker's ``--failed-after``): it may come back with it
``gone``        stored on a peer failed for ``failed_after_s`` or longer, or
                that the tracker no longer knows: repair restores it elsewhere
``pending``     not stored yet: an async protocol's copy (paper 4.3; its writer
                or repair stores it)
``quarantined`` the holder's verifier found it bad and moved it aside (paper
                3.6's end-to-end check): repair stores a good copy in its place
============== ==============================================================

The copies of past versions kept for snapshots and older readers
(``retained_copies``, docs/snapshots.md) are in the same states (their
quarantined and pending ones in ``retained_unstored``); each kept version
is classified as a record is, in :attr:`FileHealth.versions`.

A **record** is then (:class:`RecordState`) ``available`` (F live copies),
``under_replicated`` (fewer than F live copies, but a live one, or a suspect
one that may come back: reads work, or wait for that peer) or ``lost`` (no
live and no suspect copy: no good copy is left anywhere). A striped object
is one record: its state is that of its worst stripe, and counts count names,
never stripes.

Who owns the inputs: the copy rows are the infofile's (the tracker writes
them: commits, repair's stores, the verifiers' quarantines); a peer's
liveness is the tracker's view from announces (:class:`Liveness`), as stale
as one announce interval plus the liveness window. In that window a read may
still try a copy on a peer that just failed; it fails over to the next copy
(paper 4.3), so the state is a report, never a reason to return wrong bytes.

Thread safety: every object here is immutable plain data, or built once and
only read; share them freely.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from st_py.core.infofile import STRIPE_PREFIX, InfofileReader

DEFAULT_FAILED_AFTER_S = 600.0
"""Seconds a peer must have been failed before its copies count as ``gone``
(the tracker's ``--failed-after``; repair restores them elsewhere then)."""


class CopyState(str, enum.Enum):
    """The state of one copy of a committed record (see the module)."""

    LIVE = "live"
    SUSPECT = "suspect"
    GONE = "gone"
    PENDING = "pending"
    QUARANTINED = "quarantined"


class RecordState(str, enum.Enum):
    """The state of a committed record or striped object (see the module)."""

    AVAILABLE = "available"
    UNDER_REPLICATED = "under_replicated"
    LOST = "lost"


@dataclass(frozen=True)
class Liveness:
    """The tracker's view of its peers, as one ``Status`` reply or its own
    registry gives it.

    ``failed_for`` maps a peer id to the seconds since the tracker failed it
    (``None``: live); a peer id absent from it is not known to the tracker
    (its copies are ``gone``). ``failed_after_s`` is the tracker's
    ``--failed-after``. ``at`` is the Unix time of the view. ``addrs`` gives
    each known peer's ``host:port`` for messages.
    """

    failed_for: Mapping[str, float | None]
    failed_after_s: float = DEFAULT_FAILED_AFTER_S
    at: float = field(default_factory=time.time)
    addrs: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_status(cls, status, failed_after_s: float | None = None) -> Liveness:
        """The view in a ``Client.status()`` reply; ``failed_after_s``
        overrides the tracker's (``repair --failed-after``)."""
        fa = failed_after_s
        if fa is None:
            fa = getattr(status, "failed_after_s", 0.0) or DEFAULT_FAILED_AFTER_S
        return cls(
            {p.peer_id: None if p.alive else float(p.last_announce_age_s) for p in status.peers},
            fa,
            time.time(),
            {p.peer_id: p.addr for p in status.peers},
        )

    def copy_state(self, peer_id: str) -> CopyState:
        """``live``, ``suspect`` or ``gone`` for a copy stored on ``peer_id``."""
        if peer_id not in self.failed_for:
            return CopyState.GONE
        age = self.failed_for[peer_id]
        if age is None:
            return CopyState.LIVE
        return CopyState.SUSPECT if age < self.failed_after_s else CopyState.GONE

    def lost_at(self, peer_id: str) -> float:
        """Unix time at which a suspect peer's copies count as ``gone``."""
        age = self.failed_for.get(peer_id) or 0.0
        return self.at + max(0.0, self.failed_after_s - age)

    def not_live(self, peer_ids: Iterable[str]) -> set[str]:
        """Those of ``peer_ids`` that are not live."""
        return {p for p in peer_ids if self.copy_state(p) is not CopyState.LIVE}


@dataclass(frozen=True)
class CopyInfo:
    """One copy: its rank, holder (peer id and address) and state."""

    rank: int
    peer_id: str
    addr: str
    state: CopyState

    def describe(self, lv: Liveness) -> str:
        """A phrase for reports, e.g. ``copy 1 on failed peer host:port (lost in 30 s)``."""
        where = self.addr or self.peer_id
        if self.state is CopyState.SUSPECT:
            return f"copy {self.rank} on failed peer {where} (lost in {lv.lost_at(self.peer_id) - lv.at:.0f} s)"
        if self.state is CopyState.GONE:
            return f"copy {self.rank} on lost peer {where}"
        if self.state is CopyState.PENDING:
            return f"copy {self.rank} pending for {where}"
        if self.state is CopyState.QUARANTINED:
            return f"copy {self.rank} quarantined by {where}'s verifier"
        return f"copy {self.rank} live on {where}"


@dataclass(frozen=True)
class RecordHealth:
    """A committed record (or striped object) that is not ``available``.

    ``name`` is the name users see (an object's, for its stripes);
    ``copies`` its copies (of its worst stripe, for an object); ``reason``
    one line naming each copy that is not live; ``until`` the Unix time at
    which its suspect copies count as gone (0.0: none suspect).
    """

    name: str
    state: RecordState
    copies: tuple[CopyInfo, ...]
    reason: str
    until: float = 0.0

    @property
    def live(self) -> int:
        """Live copies."""
        return sum(c.state is CopyState.LIVE for c in self.copies)

    @property
    def waiting(self) -> bool:
        """Short of copies only because holders are suspect: waiting for
        them to return (or to count as lost at ``until``)."""
        return self.until > 0 and all(c.state in (CopyState.LIVE, CopyState.SUSPECT) for c in self.copies)

    def has(self, state: CopyState) -> bool:
        """Whether a copy of the record is in ``state``."""
        return any(c.state is state for c in self.copies)


@dataclass
class FileHealth:
    """The copies of one file: its records that are not available.

    ``records`` maps each such name to its :class:`RecordHealth`; every
    other committed record has F live copies. ``versions`` does the same for
    the past versions kept for snapshots and older readers
    (docs/snapshots.md): ``(name, until)`` (the generation at which the
    version stopped being current) to its health, whose ``name`` is the
    record's. Plain data.
    """

    file: str
    copies: int
    records: dict[str, RecordHealth] = field(default_factory=dict)
    versions: dict[tuple[str, int], RecordHealth] = field(default_factory=dict)

    def names(self, state: RecordState) -> list[str]:
        """Sorted names of the records in ``state``."""
        return sorted(n for n, r in self.records.items() if r.state is state)

    @property
    def lost(self) -> list[str]:
        """Names with no good copy left."""
        return self.names(RecordState.LOST)

    @property
    def under_replicated(self) -> list[str]:
        """Names with fewer than F live copies and a good one somewhere."""
        return self.names(RecordState.UNDER_REPLICATED)

    @property
    def waiting(self) -> list[str]:
        """Under-replicated names whose only trouble is a suspect holder."""
        return sorted(n for n, r in self.records.items() if r.waiting)

    @property
    def until(self) -> float:
        """When the last suspect holder counts as lost (0.0: none)."""
        return max((r.until for r in self.records.values()), default=0.0)

    def count(self, state: CopyState) -> int:
        """Names with a copy in ``state``."""
        return sum(r.has(state) for r in self.records.values())

    @property
    def complete(self) -> bool:
        """Whether every committed record and every kept past version has F
        live copies."""
        return not self.records and not self.versions

    def versions_in(self, state: RecordState) -> list[str]:
        """The kept past versions in ``state``, as ``name (until generation
        U)``, sorted."""
        return sorted(f"{n} (until generation {u})" for (n, u), r in self.versions.items() if r.state is state)


def user_name(name: str) -> str:
    """The name users see for a stored record name: a stripe record
    (``.st-stripe/<object>/<8 digits>``) is its object's."""
    if name.startswith(STRIPE_PREFIX):
        return name[len(STRIPE_PREFIX) : -9]
    return name


_RANK = {
    RecordState.LOST: 2,
    RecordState.UNDER_REPLICATED: 1,
    RecordState.AVAILABLE: 0,
}


def classify(copies: list[CopyInfo], f: int) -> RecordState:
    """The state of a record of class x``f`` with ``copies``."""
    live = sum(c.state is CopyState.LIVE for c in copies)
    if live >= f:
        return RecordState.AVAILABLE
    if live == 0 and not any(c.state is CopyState.SUSPECT for c in copies):
        return RecordState.LOST
    return RecordState.UNDER_REPLICATED


def file_health(
    reader: InfofileReader, liveness: Liveness | None = None, file: str = "", names: list[str] | None = None
) -> FileHealth:
    """The :class:`FileHealth` of the infofile ``reader`` against
    ``liveness`` (default: every peer of the peerlist live, which is right
    for records with no stored copy left). Reads only the damaged records
    (pending or quarantined copies, copies on peers not live), or with
    ``names`` only those stored record names: a healthy file costs a few
    index probes.

    Raises
    ------
    sqlite3.Error, OSError
        The infofile cannot be read.
    """
    meta = reader.meta()
    f = int(meta.get("copies") or 1)
    peers = {i: (pid, addr) for i, pid, addr in reader.peerlist()}
    if liveness is None:
        liveness = Liveness({pid: None for pid, _ in peers.values()}, addrs={pid: a for pid, a in peers.values()})
    non_live = [i for i, (pid, _) in peers.items() if liveness.copy_state(pid) is not CopyState.LIVE]
    out = FileHealth(file or str(meta.get("name", "")), f)
    for stored, rows in reader.copy_rows(non_live, names).items():
        h = _health(stored, rows, f, peers, liveness)
        if h is None:
            continue
        old = out.records.get(h.name)
        if old is None or _RANK[h.state] > _RANK[old.state]:
            out.records[h.name] = h
    if names is None and hasattr(reader, "retained_copy_rows"):  # the current view: past versions too
        for (stored, until), rows in reader.retained_copy_rows(non_live).items():
            h = _health(stored, rows, f, peers, liveness, f"the version until generation {until}: ")
            if h is None:
                continue
            key = (h.name, until)
            old = out.versions.get(key)
            if old is None or _RANK[h.state] > _RANK[old.state]:
                out.versions[key] = h
    return out


def _health(
    stored: str,
    rows: list[tuple[int, int, str]],
    f: int,
    peers: Mapping[int, tuple[str, str]],
    liveness: Liveness,
    prefix: str = "",
) -> RecordHealth | None:
    """The health of one stored record (or one past version) from its copy
    rows ``(copy_rank, peer_idx, kind)``; None when it is available."""
    copies = []
    for rank, idx, kind in sorted(rows):
        pid, addr = peers.get(idx, (f"peer#{idx}", ""))
        if kind == "pending":
            st = CopyState.PENDING
        elif kind == "quarantined":
            st = CopyState.QUARANTINED
        else:
            st = liveness.copy_state(pid)
        copies.append(CopyInfo(rank, pid, liveness.addrs.get(pid) or addr, st))
    state = classify(copies, f)
    if state is RecordState.AVAILABLE:
        return None
    until = max((liveness.lost_at(c.peer_id) for c in copies if c.state is CopyState.SUSPECT), default=0.0)
    bad = [c.describe(liveness) for c in copies if c.state is not CopyState.LIVE]
    live = sum(c.state is CopyState.LIVE for c in copies)
    if len(copies) < f:
        bad.append(f"{f - len(copies)} copies not recorded")
    reason = prefix + f"{live} of {f} copies live: " + "; ".join(bad)
    name = user_name(stored)
    if name != stored:
        reason = f"stripe {stored[-8:]}: {reason}"
    return RecordHealth(name, state, tuple(copies), reason, until)


def unavailable_reason(h: RecordHealth | None) -> str:
    """Why a record cannot be read now, for :class:`RecordUnavailableError`."""
    if h is None:
        return "no live copy"
    if h.state is RecordState.LOST:
        return "lost, no good copy left: " + h.reason
    return "no live copy now: " + h.reason


def without_stored_copy(reader: InfofileReader, name: str, file: str = "") -> RecordHealth | None:
    """The health of committed record ``name`` when it has no stored copy
    at all (every copy quarantined or pending): it is lost, whatever the
    peers' liveness. None: not committed, or it has a stored copy."""
    h = file_health(reader, None, file, names=[name]).records.get(user_name(name))
    return h if h is not None and not any(c.state is CopyState.LIVE for c in h.copies) else None


def unavailable_error(file: str, h: RecordHealth):
    """The :class:`~st_py.errors.RecordUnavailableError` every reader raises
    for a record in state ``h`` that it cannot read."""
    from st_py.errors import RecordUnavailableError

    why = unavailable_reason(h)
    lost = h.state is RecordState.LOST
    advice = (
        "no peer holds a good copy: write it again, or restore it from elsewhere"
        if lost
        else "restart the failed peers, or wait for repair"
    )
    return RecordUnavailableError(
        f"record {h.name!r} of {file} is unavailable: {why}; {advice}", h.name, file, why, lost
    )


def copy_states_text(c: Mapping) -> str:
    """``, 3 lost (no good copy left), 5 waiting for failed peers ...``:
    the states of the records short of copies, from the tracker's counts
    (``records_lost``, ``records_waiting``, ``records_quarantined``,
    ``records_pending``, ``failed_after_s``), as ``storetorrent status``
    and the status page both say them."""
    parts = [
        (c.get("records_lost", 0), "lost (no good copy left)"),
        (c.get("records_waiting", 0), f"waiting for failed peers (lost after {c.get('failed_after_s', 0):g} s)"),
        (c.get("records_quarantined", 0), "with a copy quarantined"),
        (c.get("records_pending", 0), "with a copy pending"),
    ]
    return "".join(f", {n:,} {what}" for n, what in parts if n)


def versions_text(c: Mapping) -> str:
    """``; 2 past versions kept for snapshots short of copies (1 lost)``:
    the tracker's counts ``versions_short`` and ``versions_lost`` as
    ``storetorrent status`` and the status page say them ("" when none)."""
    n, lost = c.get("versions_short", 0), c.get("versions_lost", 0)
    if not n:
        return ""
    return f"; {n:,} past version{'' if n == 1 else 's'} kept for snapshots short of copies" + (
        f" ({lost:,} lost, no good copy left)" if lost else ""
    )

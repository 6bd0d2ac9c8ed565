"""Repair: bring every committed record back to F stored copies (paper 4.4;
BLAST's rejoin, seed 002).

Copies are in the states of :mod:`st_py.core.copy_health` (the one model that
``storetorrent status`` counts with too); repair works on three of them,
in two steps per file, then reports what is left in the same model:

1. **Pending and quarantined copies**: a copy an async protocol's writer
   could not finish (docs/replication.md) stays in ``pending_copies``; a
   copy a peer's verifier found bad is in ``quarantined_copies``. Repair
   reads the record from a live stored copy (CRC-checked), writes the copy
   at its rank to its holder if that peer is live (a returning peer catches
   up this way), else to a live peer holding no copy, and reports it stored
   (``StoreCopies``): from the next generation GET and GET_LOCAL use it. A
   record with no stored copy left is **lost**: reported, never invented.
2. **Gone copies**: a peer failed for ``failed_after`` seconds or longer
   (the tracker's ``--failed-after``, read from its ``Status`` reply unless
   given) is lost, and :func:`st_py.maintenance.rebalance.rebalance` restores F copies
   of every record it held. A peer failed for less is **suspect**: its
   copies are left where they are, and the records short of them are
   reported as ``waiting`` (until ``waiting_until``), so a pass before
   ``failed_after`` is not complete.

:func:`repair` does one pass; :func:`watch` repeats it (``storetorrent
repair --watch``, deploy/storetorrent-repair.service), which is how a
cluster heals without an operator: it looks at the tracker's status every
second and repairs at once when a peer returns (it catches up on the copies
pending for it) or has been failed ``failed_after`` seconds, and reports
its progress to the tracker, which shows it with the records short of
copies it counts itself (docs/operations.md, "Status page").
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from st_py._proto import tracker_pb2 as pb
from st_py.client.copies import CopyOutcome, CopyToStore
from st_py.core.copy_health import DEFAULT_FAILED_AFTER_S, CopyState, FileHealth, Liveness, RecordState, file_health
from st_py.core.history import ADOPT
from st_py.core.infofile import RecordMeta
from st_py.core.placement import shares_domain
from st_py.errors import StoreTorrentError, TrackerUnavailableError
from st_py.maintenance.moves import FileMoves, admissible, restore_unstored_retained, standing, together, verify_adopted
from st_py.maintenance.rebalance import rebalance

log = logging.getLogger("storetorrent.repair")

BATCH = 256


@dataclass
class RepairReport:
    """What one repair pass did to one file, and what is left of its
    damage in the copy model (:mod:`st_py.core.copy_health`).

    ``pending_found`` / ``quarantined_found`` are the pending and
    quarantined copies found, ``pending_stored`` the copies of either kind
    stored; ``pending_left`` are records with such a copy still missing
    after the pass (no live peer to take it, or no live stored copy to read
    now); ``lost`` are records with no good copy left anywhere (every copy
    quarantined, pending or on lost peers); ``waiting`` are records short
    only of copies on suspect peers (failed less than ``failed_after`` s),
    which count as lost at ``waiting_until`` (Unix s); ``lost_peers`` are
    the peers failed ``failed_after`` or longer whose copies were restored
    elsewhere (``copies_restored``); ``shared_domain`` are records whose
    restored or stored copies share a failure domain because no live peer
    in another domain could take them (docs/replication.md, "Failure
    domains"; they count as complete).

    The past versions kept for snapshots and older readers
    (docs/snapshots.md, "Maintenance") are in the same model, named ``name
    (until generation U)``: ``versions_unstored_found`` copies of them were
    quarantined or pending, ``versions_stored`` of those were stored again;
    after the pass ``versions_lost`` have no good copy left,
    ``versions_waiting`` wait only for suspect peers and
    ``versions_short`` are short of copies otherwise. Plain data.
    """

    file: str
    pending_found: int = 0
    quarantined_found: int = 0
    pending_stored: int = 0
    pending_left: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    waiting_until: float = 0.0
    failed_after: float = DEFAULT_FAILED_AFTER_S
    lost_peers: list[str] = field(default_factory=list)
    copies_restored: int = 0
    unavailable: list[str] = field(default_factory=list)
    under_replicated: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    shared_domain: list[str] = field(default_factory=list)
    versions_unstored_found: int = 0
    versions_stored: int = 0
    versions_lost: list[str] = field(default_factory=list)
    versions_waiting: list[str] = field(default_factory=list)
    versions_short: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def complete(self) -> bool:
        """Every record of the file, and every past version it keeps, has F
        stored copies on live peers."""
        return self.complete_but_waiting and not self.waiting and not self.versions_waiting

    @property
    def complete_but_waiting(self) -> bool:
        """Complete but for records waiting for suspect peers (``repair
        --wait-ok`` exits 0 then)."""
        return not (
            self.pending_left
            or self.unavailable
            or self.under_replicated
            or self.conflicts
            or self.lost
            or self.versions_lost
            or self.versions_short
        )

    def as_dict(self) -> dict:
        """The counts as a JSON-ready dict."""
        return {
            "file": self.file,
            "pending_found": self.pending_found,
            "quarantined_found": self.quarantined_found,
            "pending_stored": self.pending_stored,
            "pending_left": len(self.pending_left),
            "lost": len(self.lost),
            "waiting": len(self.waiting),
            "waiting_until": round(self.waiting_until, 1) if self.waiting else None,
            "lost_peers": self.lost_peers,
            "copies_restored": self.copies_restored,
            "unavailable": len(self.unavailable),
            "under_replicated": len(self.under_replicated),
            "conflicts": len(self.conflicts),
            "shared_domain": len(self.shared_domain),
            "versions_unstored_found": self.versions_unstored_found,
            "versions_stored": self.versions_stored,
            "versions_lost": len(self.versions_lost),
            "versions_waiting": len(self.versions_waiting),
            "versions_short": len(self.versions_short),
            "complete": self.complete,
            "seconds": round(self.seconds, 3),
        }


def liveness(client, failed_after: float | None = None) -> Liveness:
    """The tracker's view of its peers (one ``Status`` RPC), with its
    ``--failed-after`` unless ``failed_after`` overrides it."""
    return Liveness.from_status(client.status(), failed_after)


def lost_peers(client, failed_after: float | None = None) -> set[str]:
    """Addresses of peers the tracker has seen failed for at least
    ``failed_after`` seconds (default: the tracker's ``--failed-after``)."""
    return _gone(liveness(client, failed_after))


def _gone(lv: Liveness) -> set[str]:
    """Addresses of the peers whose copies are ``gone`` in ``lv``."""
    return {lv.addrs.get(pid, "") for pid in lv.failed_for if lv.copy_state(pid) is CopyState.GONE}


def repair_file(client, name: str, failed_after: float | None = None, dry_run: bool = False) -> RepairReport:
    """One repair pass over file ``name`` (see the module docstring).

    Parameters
    ----------
    client : Client
    name : str
        The file.
    failed_after : float, optional
        Seconds a peer must have been failed to count as lost (its copies
        are restored elsewhere); default: the tracker's ``--failed-after``.
    dry_run : bool
        Change nothing: report what the pass would find, in the copy model
        (:mod:`st_py.core.copy_health`): copies pending and quarantined, the lost
        peers whose copies it would restore, lost and waiting records.

    Raises
    ------
    StFileNotFoundError, TrackerUnavailableError
    """
    t0 = time.monotonic()
    lv = liveness(client, failed_after)
    report = RepairReport(name, failed_after=lv.failed_after_s)
    if dry_run:
        with client.open(name) as f:
            h = file_health(f.infofile(), lv, f.name)
            report.pending_found = h.count(CopyState.PENDING)
            report.quarantined_found = h.count(CopyState.QUARANTINED)
            report.lost_peers = sorted(_gone(lv) & {p.addr for p in f.peers.values()})
            report.lost, report.waiting = h.lost, h.waiting
            report.waiting_until = max((h.records[n].until for n in h.waiting), default=0.0)
            report.under_replicated = sorted(set(h.under_replicated) - set(h.waiting))
            report.versions_unstored_found = sum(
                v.has(CopyState.PENDING) or v.has(CopyState.QUARANTINED) for v in h.versions.values()
            )
            _versions_left(h, report)
        report.seconds = time.monotonic() - t0
        return report
    with client.open(name) as f:
        _store_pending(f, report)
        _store_versions(f, report)
        lost = sorted(_gone(lv) & {p.addr for p in f.peers.values()})
        if lost:
            rb = rebalance(f, lost=lost)
            report.lost_peers = lost
            report.copies_restored = rb.copies_moved
            report.unavailable = rb.unavailable
            report.under_replicated = rb.under_replicated
            report.shared_domain += rb.shared_domain
            report.conflicts += rb.conflicts
        _what_is_left(f, liveness(client, lv.failed_after_s), report)
    report.seconds = time.monotonic() - t0
    return report


def _what_is_left(f, lv: Liveness, report: RepairReport) -> None:
    """The file's damage after the pass, in the copy model: lost and
    waiting records, and under-replicated ones the steps above missed."""
    f.refresh()
    h = file_health(f.infofile(), lv, f.name)
    report.lost = h.lost
    report.waiting = h.waiting
    report.waiting_until = max((h.records[n].until for n in h.waiting), default=0.0)
    known = set(report.lost) | set(report.waiting) | set(report.unavailable) | set(report.pending_left)
    report.under_replicated = sorted(set(report.under_replicated) | (set(h.under_replicated) - known))
    _versions_left(h, report)


def _versions_left(h: FileHealth, report: RepairReport) -> None:
    """The kept past versions still short of copies, by state."""
    report.versions_lost = h.versions_in(RecordState.LOST)
    report.versions_waiting = sorted(f"{n} (until generation {u})" for (n, u), v in h.versions.items() if v.waiting)
    waiting = set(report.versions_waiting)
    report.versions_short = [v for v in h.versions_in(RecordState.UNDER_REPLICATED) if v not in waiting]


def _store_versions(f, report: RepairReport) -> None:
    """Store again the copies of kept past versions that are quarantined or
    pending (``retained_unstored``), read from a good copy of the version
    (docs/snapshots.md, "Maintenance")."""
    fm = FileMoves(f.name)
    found, _ = restore_unstored_retained(f, fm)
    report.versions_unstored_found = found
    report.versions_stored = fm.copies_moved
    report.conflicts += fm.conflicts


def _store_pending(f, report: RepairReport) -> None:
    f.refresh()
    reader = f.infofile()
    while True:
        skip = set(report.pending_left) | set(report.lost)
        rows = [p for p in reader.copies_to_restore(limit=BATCH) if p[0].name not in skip]
        if not rows:
            return
        pending = []
        for meta, rank, peer, kind in rows:
            if not meta.peers:  # no stored copy to read: lost (copy_health says so at the end)
                if meta.name not in report.lost:
                    report.lost.append(meta.name)
                continue
            if kind == "quarantined":
                report.quarantined_found += 1
            else:
                report.pending_found += 1
            pending.append((meta, rank, peer))
        if not pending:
            continue
        stored = _store_batch(f, pending, report)
        if not stored:
            return
        reply = f.commit_stored_copies(stored)
        report.pending_stored += reply.moved
        report.conflicts += list(reply.conflicts)
        if reply.moved == 0:
            return  # nothing changed: do not loop on the same rows


def _store_batch(f, pending, report: RepairReport) -> list[pb.CopyStored]:
    """Write each pending copy; returns the ones stored."""
    by_name: dict[str, list[tuple[int, int]]] = {}
    metas = {}
    for meta, rank, peer in pending:
        by_name.setdefault(meta.name, []).append((rank, peer))
        metas[meta.name] = meta
    reads = {n: f.queue_get(n, stored=True) for n in by_name}
    taken_of: dict[str, list[int]] = {}  # a record's holders, and the peers given its pending copies
    tried: dict[tuple[str, int], set[int]] = {}
    st = standing(f.infofile(), [(meta, rank) for meta, rank, _ in pending])

    def place(meta: RecordMeta, rank: int, target: int | None) -> int | None:
        taken, t = taken_of[meta.name], tried[(meta.name, rank)]
        usable = [i for i in f.write_targets() if i not in t]  # in service (not being drained)
        if target is None or target not in usable or target in taken:
            # apart by failure domain from the others, where moves.standing lets it go
            rule = st.get((meta.key, rank), {})
            first, last = admissible(rule, usable)
            for cands in (together(rule, first), first, last):  # a peer holding this very copy first
                target = f.spare_peer(meta.name, cands, taken)
                if target is not None:
                    break
            if target is not None and shares_domain(taken + [target], f.placement_domains):
                report.shared_domain.append(meta.name)
        if target is None:
            report.pending_left.append(meta.name)
            return None
        t.add(target)
        taken.append(target)
        return target

    def fail_over(o: CopyOutcome) -> int | None:
        taken_of[o.record.name].remove(o.peer)
        return place(o.record, o.rank, None)  # another live peer (paper 4.3)

    data: dict[str, bytes] = {}
    for n, fut in reads.items():
        exc = fut.exception()
        if exc is None:
            data[n] = fut.result()
        else:
            log.warning("repair of %s: record %r has no readable stored copy: %s", f.name, n, exc)
            report.pending_left.append(n)

    def copies() -> Iterator[CopyToStore]:
        for n, ranks in by_name.items():
            if n not in data:
                continue
            taken = taken_of[n] = list(metas[n].copies().values()) + [p for _, p in ranks]
            for rank, peer in ranks:
                taken.remove(peer)
                tried[(n, rank)] = set()
                target = place(metas[n], rank, peer)  # its pending holder if that peer is live
                if target is not None:
                    yield CopyToStore(metas[n], rank, target, data[n])

    def adopts(c: CopyToStore | CopyOutcome, p: int) -> bool:  # moves.standing: it may take its bytes back
        return st.get((c.record.key, c.rank), {}).get(p) == ADOPT

    outcomes = f.store_copies(copies(), fail_over, adopts)
    bad = verify_adopted(f, [(o.record, o.rank, o.peer) for o in outcomes if o.stored and adopts(o, o.peer)])
    stored: list[pb.CopyStored] = []
    for o in outcomes:
        if (exc := bad.get((o.record.key, o.rank, o.peer))) is not None:
            report.conflicts.append(
                f"{o.record.name}: peer {o.peer} took copy {o.rank} back but it does not read back: {exc}"
            )
        elif o.stored:
            stored.append(
                pb.CopyStored(name=o.record.name, copy_rank=o.rank, peer_idx=o.peer, stored_as=o.record.stored_as or "")
            )
        elif not o.peer_failed:
            report.conflicts.append(f"{o.record.name}: {o.error}")
    return stored


def repair(
    client,
    names: Iterable[str] | None = None,
    failed_after: float | None = None,
    on_report: Callable[[RepairReport], None] | None = None,
    report: bool = False,
    dry_run: bool = False,
) -> list[RepairReport]:
    """One repair pass over ``names`` (default: every file of the namespace);
    with ``dry_run`` nothing is changed and nothing reported to the tracker
    (see :func:`repair_file`).

    A file that cannot be repaired now (tracker error, too few peers) is
    logged and reported with a conflict; the pass goes on with the others.
    With ``report``, the pass's progress goes to the tracker as the repair
    service's does (:func:`watch`), with the reason ``storetorrent repair``.

    Raises
    ------
    TrackerUnavailableError
        Listing the namespace failed (default ``names`` only).
    """
    files = list(names) if names is not None else list(all_files(client))
    if dry_run:
        out = []
        for name in files:
            try:
                r = repair_file(client, name, failed_after, dry_run=True)
            except StoreTorrentError as e:
                r = RepairReport(name, conflicts=[str(e)])
            out.append(r)
            if on_report:
                on_report(r)
        return out
    return _one_pass(
        client,
        files,
        failed_after,
        "storetorrent repair",
        on_report,
        _Reporter(client if report else None, None),
        lambda: False,
    )


def all_files(client, path: str = "/") -> Iterable[str]:
    """Every file of the namespace below ``path``
    (:meth:`~st_py.client.client.Client.files`)."""
    yield from client.files(path)


@dataclass(frozen=True)
class PeerLook:
    """One peer as a look at the tracker's status saw it (plain data)."""

    peer_id: str
    addr: str
    name: str
    alive: bool
    restarts: int
    lost: bool  # failed for at least ``failed_after`` seconds
    returns: int = 0  # times it announced again after being failed (the tracker's count)

    @property
    def label(self) -> str:
        """``peer-1 (10.0.0.7:7100)``, or the address alone."""
        return f"{self.name} ({self.addr})" if self.name else self.addr


@dataclass
class ClusterLook:
    """What the repair service needs of one ``Status`` reply: each peer's
    liveness, restarts and loss, and the tracker's count of records with a
    copy pending (docs/operations.md, "Status page")."""

    peers: dict[str, PeerLook]
    records_pending: int = 0
    records_short: int = 0
    records_quarantined: int = 0


def look(status, failed_after: float | None = None) -> ClusterLook:
    """A :class:`ClusterLook` of a ``Client.status()`` reply; a peer failed
    for at least ``failed_after`` seconds (default: the tracker's
    ``--failed-after``) is lost."""
    lv = Liveness.from_status(status, failed_after)
    peers = {
        p.peer_id: PeerLook(
            p.peer_id,
            p.addr,
            p.name,
            p.alive,
            p.restarts,
            lv.copy_state(p.peer_id) is CopyState.GONE,
            getattr(p, "returns", 0),
        )
        for p in status.peers
    }
    return ClusterLook(peers, status.records_pending, status.records_short, getattr(status, "records_quarantined", 0))


def wake_reasons(before: ClusterLook, after: ClusterLook) -> list[str]:
    """Why a repair pass should run now rather than at its interval, from
    two looks at the tracker (empty: no reason). A peer that returned,
    restarted or joined can take the copies pending for it (it catches up,
    paper 4.5); a peer newly lost has its copies restored elsewhere; more
    records with a copy pending (a writer died, a verifier quarantined a
    copy) are stored."""
    out = []
    for pid, p in after.peers.items():
        b = before.peers.get(pid)
        if p.alive and b is None:
            out.append(f"peer {p.label} joined")
        elif p.alive and b is not None and (not b.alive or p.returns != b.returns):
            # failed and back between the two looks (during a long pass) counts too
            out.append(f"peer {p.label} returned")
        elif p.alive and b is not None and p.restarts > b.restarts:
            out.append(f"peer {p.label} restarted")
        if p.lost and (b is None or not b.lost):
            out.append(f"peer {p.label} failed longer than --failed-after")
    if after.records_pending > before.records_pending:
        out.append(f"{after.records_pending:,} records with a copy pending")
    if after.records_quarantined > before.records_quarantined:
        out.append(f"{after.records_quarantined:,} records with a copy quarantined")
    return out


@dataclass
class PassProgress:
    """A repair pass as the repair service reports it to the tracker
    (``ReportRepair``) and to ``on_progress``: plain data, counts of
    files and copies, ``seconds`` since the pass started (or its length once
    done), ``passes`` finished since the service started. ``copies_stored``
    counts pending and quarantined copies stored again, of current records
    and of kept past versions; ``records_left`` counts both too (a past
    version once per ``(name, until)``)."""

    reason: str = ""
    running: bool = False
    files_done: int = 0
    files_total: int = 0
    copies_stored: int = 0
    copies_restored: int = 0
    records_left: int = 0
    seconds: float = 0.0
    passes: int = 0


DEFAULT_POLL_S = 1.0  # how often the repair service looks at the tracker's status
HEARTBEAT_S = 10.0  # an idle repair service reports at least this often
REPORT_EVERY_S = 1.0  # a running pass reports at most this often


def watch(
    client,
    interval: float = 10.0,
    failed_after: float | None = None,
    names: Iterable[str] | None = None,
    on_report: Callable[[RepairReport], None] | None = None,
    stop: Callable[[], bool] = lambda: False,
    poll: float = DEFAULT_POLL_S,
    on_progress: Callable[[PassProgress], None] | None = None,
    report: bool = True,
) -> None:
    """The repair service (``storetorrent repair --watch``): repair passes
    until ``stop()`` is true.

    A pass runs at start, every ``interval`` seconds, and at once when a
    look at the tracker's status (every ``poll`` seconds, one ``Status``
    RPC: the tracker counts pending copies itself, off its event loop)
    gives a reason (:func:`wake_reasons`): a peer returned, restarted or
    joined (its pending copies are stored on it: it catches up), a peer has
    been failed ``failed_after`` seconds (default: the tracker's
    ``--failed-after``; its copies are restored elsewhere), or more records
    have a copy pending or quarantined.

    With ``report``, the progress of each pass (and, while idle, a heartbeat
    every ``HEARTBEAT_S``) goes to the tracker (``ReportRepair``), which
    shows it in ``storetorrent status`` and on its status page; a tracker
    that refuses the report (not an admin, an older tracker) is not asked
    again. ``on_report`` gets each file's :class:`RepairReport`,
    ``on_progress`` each :class:`PassProgress`. Errors reaching the tracker
    are logged and retried; they never end the watch.
    """
    reporter = _Reporter(client if report else None, on_progress)
    last: ClusterLook | None = None
    reason = "start"
    next_pass = time.monotonic()
    blind = False  # the last look failed (logged once, not every poll)
    while not stop():
        try:
            now_look: ClusterLook | None = look(client.status(), failed_after)
            if blind:
                log.info("repair: the tracker's status can be read again")
            blind = False
        except StoreTorrentError as e:  # the tracker is down: look again next round
            if not blind:
                log.warning("repair: cannot read the tracker's status (looking again every %g s): %s", poll, e)
            blind, now_look = True, None
        if now_look is not None:
            if last is not None:
                why = wake_reasons(last, now_look)
                if why:
                    reason, next_pass = "; ".join(why), time.monotonic()
            last = now_look
        if time.monotonic() >= next_pass:
            _one_pass(client, names, failed_after, reason, on_report, reporter, stop)
            reason, next_pass = "interval", time.monotonic() + interval
        else:
            reporter.heartbeat()
        deadline = min(next_pass, time.monotonic() + poll)
        while not stop() and time.monotonic() < deadline:
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))


def _one_pass(
    client,
    names: Iterable[str] | None,
    failed_after: float | None,
    reason: str,
    on_report: Callable[[RepairReport], None] | None,
    reporter: _Reporter,
    stop: Callable[[], bool],
) -> list[RepairReport]:
    """Repair ``names`` (default: every file), keeping ``reporter.progress``
    up to date and sending it; returns each file's report."""
    out: list[RepairReport] = []
    t0 = time.monotonic()
    prog = reporter.progress
    prog.reason, prog.running, prog.seconds = reason, True, 0.0
    prog.files_done = prog.copies_stored = prog.copies_restored = prog.records_left = 0
    try:
        files = list(names) if names is not None else list(all_files(client))
    except StoreTorrentError as e:
        log.warning("repair pass (%s) failed: %s", reason, e)
        prog.running = False
        reporter.send(force=True)
        return out
    prog.files_total = len(files)
    reporter.send(force=True)
    for name in files:
        if stop():
            break
        try:
            r = repair_file(client, name, failed_after)
        except StoreTorrentError as e:
            log.warning("repair of %s failed: %s", name, e)
            r = RepairReport(name, conflicts=[str(e)])
        prog.files_done += 1
        prog.copies_stored += r.pending_stored + r.versions_stored
        prog.copies_restored += r.copies_restored
        prog.records_left += (
            len(set(r.pending_left) | set(r.unavailable) | set(r.under_replicated) | set(r.lost) | set(r.waiting))
            + len(r.versions_lost)
            + len(r.versions_waiting)
            + len(r.versions_short)
        )
        prog.seconds = time.monotonic() - t0
        out.append(r)
        if on_report:
            on_report(r)
        reporter.send()
    prog.running, prog.seconds = False, time.monotonic() - t0
    prog.passes += 1
    if prog.copies_stored or prog.copies_restored or prog.records_left:
        log.info(
            "repair pass (%s): %d files, %d pending copies stored, %d copies restored, %d records left, %.1f s",
            reason,
            prog.files_total,
            prog.copies_stored,
            prog.copies_restored,
            prog.records_left,
            prog.seconds,
        )
    reporter.send(force=True)
    return out


class _Reporter:
    """Sends :class:`PassProgress` to the tracker (rate-limited, best
    effort) and to a callback."""

    def __init__(self, client, on_progress: Callable[[PassProgress], None] | None):
        self.client = client
        self.on_progress = on_progress
        self.progress = PassProgress()
        self.repairer = f"{socket.gethostname()}:{os.getpid()}"
        self._sent = 0.0

    def heartbeat(self) -> None:
        if time.monotonic() - self._sent >= HEARTBEAT_S:
            self.send(force=True)

    def send(self, force: bool = False) -> None:
        if not force and time.monotonic() - self._sent < REPORT_EVERY_S:
            return
        self._sent = time.monotonic()
        p = self.progress
        if self.on_progress:
            self.on_progress(PassProgress(**vars(p)))
        if self.client is None:
            return
        try:
            self.client.tracker.report_repair(
                pb.RepairStatus(
                    repairer=self.repairer,
                    running=p.running,
                    reason=p.reason,
                    files_done=p.files_done,
                    files_total=p.files_total,
                    copies_stored=p.copies_stored,
                    copies_restored=p.copies_restored,
                    records_left=p.records_left,
                    pass_seconds=p.seconds,
                    passes=p.passes,
                )
            )
        except TrackerUnavailableError:
            pass  # the status look says so; the next report tries again
        except StoreTorrentError as e:  # not an admin, or a tracker without ReportRepair
            log.warning("repair: the tracker refuses progress reports (%s); repairing without them", e)
            self.client = None

"""What the operator asks first (docs/operations.md, "Status page"): are
records short of copies, in how many files, is a repair at work on them,
and how much space the cluster really has.

* :class:`ShortCopies` counts, from the infofiles, the committed records
  (names: an object once, never its stripes) that are not available in the
  one copy model, :mod:`st_py.core.copy_health`, which ``repair`` reads too:
  under-replicated (a copy pending, quarantined, or on a peer that is not
  live; ``waiting`` when only suspect peers, failed less than the tracker's
  ``--failed-after``, are to blame) or lost (no good copy left). The count
  is the tracker's own, so it is right whether or not a repair service runs. It is made in a thread every few seconds
  (:func:`keep_counting`), never per status request, and each infofile is
  read again only when it changed (size, mtime, inode) or the live peers
  of its peerlist did: a healthy, idle namespace costs one ``stat`` per
  file per count.
* :class:`RepairProgress` is what the repair service (``storetorrent repair
  --watch``) last reported with the ``ReportRepair`` RPC.
* :func:`space_totals` sums the live peers' space counting each filesystem
  once: peers on one disk (several per node, or ``storetorrent up``) each
  announce that disk's size and free bytes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from st_py.core import namespace
from st_py.core.copy_health import CopyState, FileHealth, Liveness, RecordState, file_health
from st_py.core.history import retained_bytes, snapshot_count
from st_py.core.infofile import InfofileReader

if TYPE_CHECKING:
    from .peer_files import PeerFiles
    from .peers import PeerInfo, PeerRegistry
    from .state import TrackerState


class Counted(Protocol):
    """What counting needs of the tracker's service (``TrackerService`` is
    one): its peers, ``--failed-after``, its files, and where the count goes."""

    registry: PeerRegistry
    failed_after_s: float
    state: TrackerState
    copy_health: CopyHealth
    peer_files: PeerFiles


log = logging.getLogger("st.tracker")

COUNT_EVERY_S = 5.0  # a count at least this often; at once when the live peers change
MAX_DUTY = 0.1  # counts take at most this fraction of the time (a count of 2 s: every 20 s)
# An infofile's count holds a read lock its commits wait for: a file that
# changed is read again at most this often, in proportion to what its last
# read took (0.5 s: every 25 s), unless the liveness of its peers changed.
FILE_DUTY = 0.02


@dataclass
class CopyHealth:
    """One count of the namespace's copies (plain data; see the module).

    ``records_short``: committed names with fewer than F copies live
    (:mod:`st_py.core.copy_health`; an object counts once, whatever its stripes);
    ``files_short``: files with such records (or versions); of those records,
    ``records_pending`` have a copy pending, ``records_quarantined`` a copy
    quarantined, ``records_lost`` no good copy, ``records_waiting`` only
    copies on suspect peers missing; ``files``: files counted; ``errors``:
    infofiles that could not be read (counted at their last count);
    ``at``: Unix time the count ended (0: none yet); ``seconds``: how long
    it took; ``reread``: infofiles it had to read (the others were cached).
    """

    records_short: int = 0
    files_short: int = 0
    records_pending: int = 0
    records_quarantined: int = 0
    records_lost: int = 0
    records_waiting: int = 0
    files: int = 0
    errors: int = 0
    at: float = 0.0
    seconds: float = 0.0
    reread: int = 0
    retained_bytes: int = 0  # bytes (all copies) of past versions snapshots hold (docs/snapshots.md, "Space")
    snapshots: int = 0  # snapshots over every file
    versions_short: int = 0  # kept past versions with fewer than F live copies (FileHealth.versions)
    versions_lost: int = 0  # of those, with no good copy left

    def age(self, now: float | None = None) -> float:
        """Seconds since the count (-1.0: never counted)."""
        return -1.0 if not self.at else max(0.0, (time.time() if now is None else now) - self.at)


@dataclass
class _FileCount:
    stat_key: tuple[int, int, int]  # inode, mtime_ns, size of the infofile when read
    peer_ids: dict[int, str]  # its peerlist
    states: tuple  # (peer index, copy state) of its peers not live when counted
    health: FileHealth
    next_at: float = 0.0
    retained: int = 0  # bytes (all copies) of past versions its snapshots hold
    snapshots: int = 0  # time.monotonic() before which a change of the file alone is not read again
    generation: int = 0  # its generation when read

    @property
    def short(self) -> int:
        return len(self.health.records) + len(self.health.versions)


class ShortCopies:
    """Counts records short of copies over the whole namespace (thread-safe
    to call from one thread at a time: :func:`keep_counting` runs it in
    ``asyncio.to_thread``)."""

    def __init__(self, root: Path):
        self.root = root
        self._files: dict[str, _FileCount] = {}
        self.current = CopyHealth()

    def count(
        self, files: Iterable[tuple[str, int]], liveness: Liveness, peer_files: PeerFiles | None = None
    ) -> CopyHealth:
        """Count every file of ``files`` (``(name, file_id)``, as the
        tracker's state lists them) against the peers' ``liveness``; each
        file's generation and peerlist, as read, go to ``peer_files`` (which
        then keeps only these files).

        Blocking (stats and SQLite reads): call it off the event loop.
        Returns the new :class:`CopyHealth` (also kept as ``current``).
        """
        t0 = time.monotonic()
        out = CopyHealth()
        seen: set[str] = set()
        ids: list[int] = []
        for name, file_id in files:
            seen.add(name)
            ids.append(file_id)
            out.files += 1
            path = namespace.infofile_path(self.root, name)
            try:
                st = os.stat(path)
            except OSError:
                self._files.pop(name, None)  # deleted meanwhile
                continue
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
            old = self._files.get(name)
            try:
                fc = self._count_file(path, key, old, liveness)
            except (sqlite3.Error, OSError, ValueError) as e:
                out.errors += 1
                log.debug("counting copies of %s: %s", name, e)
                if old is None:
                    continue
                fc = old
            if fc is not old:
                out.reread += 1
                self._files[name] = fc
            if peer_files is not None:
                peer_files.note(file_id, name, fc.generation, fc.peer_ids.values())
            out.retained_bytes += fc.retained
            out.snapshots += fc.snapshots
            if fc.short:
                h = fc.health
                out.files_short += 1
                out.records_short += len(h.records)
                out.versions_short += len(h.versions)
                out.versions_lost += len(h.versions_in(RecordState.LOST))
                out.records_pending += h.count(CopyState.PENDING)
                out.records_quarantined += h.count(CopyState.QUARANTINED)
                out.records_lost += len(h.lost)
                out.records_waiting += len(h.waiting)
        for gone in set(self._files) - seen:
            del self._files[gone]
        if peer_files is not None:
            peer_files.keep_only(ids)
        out.at = time.time()
        out.seconds = time.monotonic() - t0
        self.current = out
        return out

    @staticmethod
    def _count_file(path: Path, key: tuple[int, int, int], old: _FileCount | None, lv: Liveness) -> _FileCount:
        if old is not None:
            states = _states(old.peer_ids, lv)
            if states == old.states and (old.stat_key == key or time.monotonic() < old.next_at):
                return old  # its peers' states did not change, and the file did not or was read just now
        t0 = time.monotonic()
        r = InfofileReader(path)
        try:
            with r.read_transaction():  # one read view for the peerlist and the copies
                peer_ids = {int(i): str(pid) for i, pid, _ in r.peerlist()}
                health = file_health(r, lv)
                retained = retained_bytes(r.conn) * int(r.meta().get("copies", 1))
                snaps = snapshot_count(r.conn)
                gen = r.generation()
        finally:
            r.close()
        took = time.monotonic() - t0
        return _FileCount(
            key, peer_ids, _states(peer_ids, lv), health, t0 + took + took / FILE_DUTY, retained, snaps, gen
        )


def _states(peer_ids: dict[int, str], lv: Liveness) -> tuple:
    """The copy states of a peerlist's peers that are not live, as a key
    that changes when a peer fails, returns or counts as lost."""
    return tuple(
        sorted((i, lv.copy_state(pid).value) for i, pid in peer_ids.items() if lv.copy_state(pid) is not CopyState.LIVE)
    )


def liveness_of(service: Counted) -> Liveness:
    """The tracker's :class:`~st_py.core.copy_health.Liveness` now: every known
    peer with the seconds since its last announce when it is not live."""
    reg = service.registry
    return Liveness(
        {p.peer_id: None if reg.alive(p) else reg.age(p) for p in reg.peers.values()},
        service.failed_after_s,
        time.time(),
        {p.peer_id: p.addr for p in reg.peers.values()},
    )


async def keep_counting(service: Counted, counter: ShortCopies, every_s: float = COUNT_EVERY_S) -> None:
    """Count records short of copies (in a thread) every ``every_s`` seconds,
    or longer if a count takes more than ``MAX_DUTY`` of the time, and at
    once when a peer fails, returns or counts as lost. The result goes to
    ``service.copy_health``; runs until cancelled."""
    last_live: tuple | None = None
    next_at = 0.0
    wait = every_s
    while True:
        lv = liveness_of(service)
        live = tuple(sorted((pid, lv.copy_state(pid).value) for pid in lv.failed_for))
        now = time.monotonic()
        if live != last_live or now >= next_at:
            files = service.state.file_ids()
            try:
                service.copy_health = await asyncio.to_thread(counter.count, files, lv, service.peer_files)
            except Exception:  # never stop counting: the next round tries again
                log.exception("counting records short of copies failed")
            last_live = live
            wait = max(every_s, service.copy_health.seconds / MAX_DUTY)
            next_at = time.monotonic() + wait
        await asyncio.sleep(min(0.5, wait))


@dataclass
class RepairProgress:
    """The repair service's last report (``ReportRepair``), as the tracker
    keeps it; ``received`` is ``time.monotonic()`` of the report."""

    repairer: str
    running: bool
    reason: str
    files_done: int
    files_total: int
    copies_stored: int
    copies_restored: int
    records_left: int
    pass_seconds: float
    passes: int
    received: float = field(default_factory=time.monotonic)

    def age(self) -> float:
        """Seconds since the report."""
        return max(0.0, time.monotonic() - self.received)

    def as_dict(self) -> dict:
        """Plain data for /status.json (``age_s`` instead of ``received``)."""
        return {
            "repairer": self.repairer,
            "running": self.running,
            "reason": self.reason,
            "files_done": self.files_done,
            "files_total": self.files_total,
            "copies_stored": self.copies_stored,
            "copies_restored": self.copies_restored,
            "records_left": self.records_left,
            "pass_seconds": round(self.pass_seconds, 3),
            "passes": self.passes,
            "age_s": round(self.age(), 3),
        }


@dataclass
class SpaceTotals:
    """The live peers' space, each filesystem counted once (bytes)."""

    capacity_bytes: int = 0
    used_bytes: int = 0
    free_bytes: int = 0
    filesystems: int = 0


def space_totals(registry: PeerRegistry, peers: Iterable[PeerInfo] | None = None) -> SpaceTotals:
    """Sum the space of the live ones of ``peers`` (default: every peer).

    Peers that announce the same filesystem id share one disk: its capacity
    is the smaller of the disk's size and the peers' capacities (each
    ``--capacity`` or the disk), its free bytes the smaller of the disk's
    free bytes (the latest announce, less what was committed to the group
    since) and the peers' own free bytes. Used bytes are each peer's own.
    Peers that announce no filesystem id (older ones) count alone.
    """
    groups: dict[str, list[PeerInfo]] = {}
    for p in registry.peers.values() if peers is None else peers:
        if registry.alive(p):
            groups.setdefault(p.fs_id or f"peer:{p.peer_id}", []).append(p)
    out = SpaceTotals(filesystems=len(groups))
    for g in groups.values():
        cap = sum(p.capacity_bytes for p in g)
        free = sum(max(0, p.usable_free) for p in g)
        disk = [p for p in g if p.fs_id and p.fs_size_bytes]
        if disk:
            latest = max(disk, key=lambda p: p.last_announce)
            cap = min(cap, max(p.fs_size_bytes for p in disk))
            free = min(free, max(0, latest.fs_free_bytes - sum(p.unannounced_bytes for p in g)))
        out.capacity_bytes += cap
        out.free_bytes += free
        out.used_bytes += sum(p.used_bytes for p in g)
    return out

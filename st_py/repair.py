"""Repair: bring every committed record back to F stored copies (paper 4.4;
BLAST's rejoin, seed 002).

Two kinds of damage, two steps per file:

1. **Pending copies** (async protocols, docs/replication.md): a record is
   committed once copy rank 0 is stored; a copy its writer could not finish
   (the writer died, or the holder was down) stays in ``pending_copies``.
   Repair reads the record from a stored copy (CRC-checked), writes the
   pending copy at its rank to its holder if that peer is live (a returning
   peer catches up this way), else to a live peer holding no copy, and
   reports it stored (``StoreCopies``): from the next generation GET and
   GET_LOCAL use it.
2. **Lost peers**: a peer failed for longer than ``failed_after`` seconds
   (the tracker's liveness, ``last_announce_age_s``) is taken as lost, and
   :func:`st_py.rebalance.rebalance` restores F copies of every record it
   held. A peer that comes back sooner keeps its copies.

:func:`repair` does one pass; :func:`watch` repeats it (``storetorrent
repair --watch``), which is how a cluster heals without an operator.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ._proto import tracker_pb2 as pb
from .errors import PeerError, PeerUnavailableError, StoreTorrentError
from .protocol import FLAG_REPLACE, put_prefix
from .rebalance import rebalance

log = logging.getLogger("storetorrent.repair")

DEFAULT_FAILED_AFTER_S = 600.0
BATCH = 256


@dataclass
class RepairReport:
    """What one repair pass did to one file.

    ``pending_left`` are copies still pending after the pass (no stored copy
    to read, or no live peer to take them); ``lost_peers`` are the peers
    failed longer than ``failed_after`` whose copies were restored
    elsewhere (``copies_restored``).
    """

    file: str
    pending_found: int = 0
    pending_stored: int = 0
    pending_left: list[str] = field(default_factory=list)
    lost_peers: list[str] = field(default_factory=list)
    copies_restored: int = 0
    unavailable: list[str] = field(default_factory=list)
    under_replicated: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def complete(self) -> bool:
        """Every record of the file has F stored copies on live peers."""
        return not (self.pending_left or self.unavailable or self.under_replicated or self.conflicts)

    def as_dict(self) -> dict:
        return {"file": self.file, "pending_found": self.pending_found, "pending_stored": self.pending_stored,
                "pending_left": len(self.pending_left), "lost_peers": self.lost_peers,
                "copies_restored": self.copies_restored, "unavailable": len(self.unavailable),
                "under_replicated": len(self.under_replicated), "conflicts": len(self.conflicts),
                "complete": self.complete, "seconds": round(self.seconds, 3)}


def lost_peers(client, failed_after: float) -> set[str]:
    """Addresses of peers the tracker has seen failed for at least
    ``failed_after`` seconds."""
    return {p.addr for p in client.status().peers if not p.alive and p.last_announce_age_s >= failed_after}


def repair_file(client, name: str, failed_after: float | None = DEFAULT_FAILED_AFTER_S) -> RepairReport:
    """One repair pass over file ``name`` (see the module docstring).

    Parameters
    ----------
    client : Client
    name : str
        The file.
    failed_after : float or None
        Seconds a peer must have been failed to count as lost; None: do not
        restore lost peers' copies (only complete pending copies).

    Raises
    ------
    StFileNotFoundError, TrackerUnavailableError
    """
    t0 = time.monotonic()
    report = RepairReport(name)
    with client.open(name) as f:
        _store_pending(f, report)
        if failed_after is not None:
            lost = sorted(lost_peers(client, failed_after) & {p.addr for p in f.peers.values()})
            if lost:
                rb = rebalance(f, lost=lost)
                report.lost_peers = lost
                report.copies_restored = rb.copies_moved
                report.unavailable = rb.unavailable
                report.under_replicated = rb.under_replicated
                report.conflicts += rb.conflicts
    report.seconds = time.monotonic() - t0
    return report


def _store_pending(f, report: RepairReport) -> None:
    f.refresh()
    reader = f._infofile()
    while True:
        pending = [p for p in reader.pending_copies(limit=BATCH) if p[0].name not in report.pending_left]
        if not pending:
            return
        report.pending_found += len(pending)
        stored = _store_batch(f, pending, report)
        if not stored:
            return
        reply = f._tracker.store_copies(f.name, f.file_id, stored)
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
    stored: list[pb.CopyStored] = []
    outstanding = {"n": 0}

    def place(meta, rank: int, target: int | None, taken: list[int], tried: set[int]) -> None:
        usable = [i for i in f._write_targets() if i not in tried]  # in service (not being drained)
        if target is None or target not in usable or target in taken:
            target = f._spare(meta.name, usable, taken)
        if target is None:
            report.pending_left.append(meta.name)
            return
        tried.add(target)
        taken.append(target)
        body = data[meta.name]
        name_b = meta.key.encode("utf-8", "surrogateescape")  # a replaced record: its version's name

        def done(fr, exc, target=target):
            outstanding["n"] -= 1
            if exc is None:
                stored.append(pb.CopyStored(name=meta.name, copy_rank=rank, peer_idx=target,
                                            stored_as=meta.stored_as or ""))
            elif isinstance(exc, (PeerUnavailableError, PeerError)):
                taken.remove(target)
                place(meta, rank, None, taken, tried)  # another live peer (paper 4.3)
            else:
                report.conflicts.append(f"{meta.name}: {exc}")

        outstanding["n"] += 1
        # REPLACE: a stale or half-written copy of this record at the target is ours to overwrite.
        f._transport.send(f.peers[target].addr,
                          lambda seq: [put_prefix(seq, f.file_id, rank, meta.crc32c, name_b, len(body),
                                                  FLAG_REPLACE), body],
                          done)

    data: dict[str, bytes] = {}
    for n, fut in reads.items():
        exc = fut.exception()
        if exc is None:
            data[n] = fut.result()
        else:
            log.warning("repair of %s: record %r has no readable stored copy: %s", f.name, n, exc)
            report.pending_left.append(n)
    for n, ranks in by_name.items():
        if n not in data:
            continue
        taken = list(metas[n].copies().values()) + [p for _, p in ranks]
        for rank, peer in ranks:
            taken.remove(peer)
            place(metas[n], rank, peer, taken, set())
    f._transport.wait(lambda: outstanding["n"] == 0)
    return stored


def repair(client, names: Iterable[str] | None = None, failed_after: float | None = DEFAULT_FAILED_AFTER_S,
           on_report: Callable[[RepairReport], None] | None = None) -> list[RepairReport]:
    """One repair pass over ``names`` (default: every file of the namespace).

    A file that cannot be repaired now (tracker error, too few peers) is
    logged and reported with a conflict; the pass goes on with the others.
    """
    out = []
    for name in (list(names) if names is not None else list(all_files(client))):
        try:
            r = repair_file(client, name, failed_after)
        except StoreTorrentError as e:
            log.warning("repair of %s failed: %s", name, e)
            r = RepairReport(name, conflicts=[str(e)])
        out.append(r)
        if on_report:
            on_report(r)
    return out


def all_files(client, path: str = "/") -> Iterable[str]:
    """Every file of the namespace below ``path``."""
    for e in client.ls(path):
        if e.is_dir:
            yield from all_files(client, e.name)
        else:
            yield e.name


def watch(client, interval: float = 10.0, failed_after: float = DEFAULT_FAILED_AFTER_S,
          names: Iterable[str] | None = None, on_report: Callable[[RepairReport], None] | None = None,
          stop: Callable[[], bool] = lambda: False) -> None:
    """Repair every ``interval`` seconds until ``stop()`` is true
    (``storetorrent repair --watch``)."""
    while not stop():
        t0 = time.monotonic()
        try:
            repair(client, names, failed_after, on_report)
        except StoreTorrentError as e:  # the tracker is down: try again next round
            log.warning("repair pass failed: %s", e)
        deadline = t0 + interval
        while not stop() and time.monotonic() < deadline:
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))

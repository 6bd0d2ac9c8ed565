"""Admitting commits: permission, quota and reserved space (docs/security.md,
docs/replication.md "Space reservation"), for the master's own commits and
for those of its per-file trackers (paper 3.5; st_py/tracker/shards.py).

The master owns every piece of state a commit is judged by: the owners and
modes of directories, each user's usage against their quota, the files'
space reservations and the peers' free space. A per-file tracker owns the
infofiles of its files (their one writer) and asks the master, with one
``Admit`` RPC per group of concurrent requests, to admit each commit before
it runs. An admitted commit's bytes are *held*: charged to the owner's
usage, to the file's reservation and to its holders at once, so that two
commits to two files of one owner on two trackers cannot both pass a check
that only one of them fits. After the commit the per-file tracker settles
the difference (records already committed, conflicts, versions replaced,
records removed by an overwrite: all copies of what really changed), and a
refused or failed commit gives the whole amount back.

If a per-file tracker dies before it settles, its master decides each
admission it still holds from the infofile (:meth:`Admissions.resolve`):
a Commit request whose id is in ``commit_requests`` was applied and keeps
its charge; any other is given back. The master does this after the dead
process is reaped and before it starts the next one, so no commit of that
shard runs meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from st_py.core import namespace
from st_py.core.infofile import InfofileReader

from .access import AccessError, Owner, User, W
from .guard import Guard, owner_of_meta
from .peers import PeerRegistry
from .reservations import Reservation, Reservations

log = logging.getLogger("st.tracker")


@dataclass
class Held:
    """What an admitted commit holds until it is settled."""

    shard: int
    name: str  # the file
    file_id: int
    owner: str
    request_id: str  # the Commit request's id: how a dead tracker's admission is decided
    charge: int  # bytes (all copies) charged to the owner
    written: int  # user bytes (one copy) counted as used of the file's reservation
    on_peers: dict[str, int] = field(default_factory=dict)  # bytes (one copy) added to each holder
    at: float = field(default_factory=time.monotonic)


@dataclass
class ShardLoad:
    """What the master admitted for one shard's files (the status page)."""

    commits: int = 0
    records: int = 0


class Admissions:
    """The master's admission of commits and the bytes it holds for them."""

    def __init__(self, guard: Guard, reservations: Reservations, registry: PeerRegistry):
        self.guard, self.reservations, self.registry = guard, reservations, registry
        self.held: dict[str, Held] = {}  # by admission id (per-file trackers' commits only)
        self.load: dict[int, ShardLoad] = {}

    def admit(
        self,
        user: User,
        name: str,
        file_id: int,
        meta: dict,
        what: str,
        size: int = 0,
        copies: int = 1,
        on_peers: dict[str, int] | None = None,
    ) -> Owner:
        """Check that ``user`` may ``what`` (write, ...) file ``name`` whose
        infofile meta (owner, group, mode) is ``meta``, and for a commit of
        ``size`` user bytes (one copy) of a file of ``copies`` copies, with
        ``on_peers`` bytes on each holder (by peer id), that the owner's
        quota and the space other files reserved allow it; then charge it
        (the caller settles the difference later: :meth:`apply`).

        Returns
        -------
        Owner
            The file's owner, group and mode.

        Raises
        ------
        AccessError
            ``denied`` (no search permission on a directory, or no write
            permission on the file), ``quota`` (the owner's quota), or
            ``no-space`` (beyond its reservation, the commit would take space
            other files reserved on a holder).
        """
        o = self.guard.check_file(user, name, meta, W, what)
        if not size:
            return o
        res = self.reservations.get(file_id)
        beyond = max(0, size - (res.remaining if res else 0))  # bytes the reservation does not cover
        # The reserved part is already in the quota's count (two-phase quota): only what goes beyond is new.
        self.guard.check_quota(o.owner, beyond * copies, f"a commit to {name}")
        if beyond:
            self._check_unreserved(name, res, on_peers or {}, beyond / size)
        self.apply(o.owner, file_id, size * copies, size, on_peers or {})
        return o

    def _check_unreserved(self, name: str, res: Reservation | None, on_peers: dict[str, int], beyond: float) -> None:
        """Refuse a commit whose bytes beyond the file's reservation (the
        fraction ``beyond`` of the batch) would take, on some holder, space
        that other files have reserved (docs/replication.md, "Space
        reservation"). Holders no other file has reserved space on are not
        checked: the peer itself refuses a PUT it has no room for.

        Raises
        ------
        AccessError("no-space")
        """
        held = self.reservations.on_peers(exclude_file=res.file_id if res else 0)
        if not held:
            return
        for peer_id, b in sorted(on_peers.items()):
            peer = self.registry.get(peer_id)
            others = held.get(peer_id, 0) if peer is not None else 0
            if peer is None or not others:
                continue
            extra = int(b * beyond + 0.999)
            room = peer.usable_free - others
            if extra > room:
                what = (
                    f"goes {extra:,} bytes beyond its reservation (est_size {res.est_size:,})"
                    if res
                    else f"adds {extra:,} bytes and it has no reservation (no est_size at create)"
                )
                raise AccessError(
                    "no-space",
                    f"commit to {name} refused: it {what} on peer {peer.addr}, which has "
                    f"{max(0, room):,} bytes free that other files have not reserved ({others:,} "
                    "reserved); create the file with a larger est_size, or free space",
                )

    def apply(self, owner: str, file_id: int, charge: int, written: int, on_peers: dict[str, int]) -> None:
        """Add ``charge`` bytes (all copies) to ``owner``'s usage, ``written``
        user bytes to file ``file_id``'s reservation use, and each holder's
        bytes to what it has not announced yet (any may be negative: a
        refund)."""
        if charge:
            self.guard.charge(owner, charge)
        if written:
            self.reservations.committed(file_id, written)
        for peer_id, b in on_peers.items():
            peer = self.registry.get(peer_id) if b else None
            if peer is not None:  # in the peer's free space from its next announce on
                peer.unannounced_bytes = max(0, peer.unannounced_bytes + b)

    def hold(self, admit_id: str, held: Held, records: int) -> None:
        """Keep what admission ``admit_id`` of a per-file tracker charged
        until it is settled."""
        self.held[admit_id] = held
        load = self.load.setdefault(held.shard, ShardLoad())
        load.commits += 1
        load.records += records

    def settle(
        self, admit_id: str, owner: str, file_id: int, charge: int, written: int, on_peers: dict[str, int]
    ) -> bool:
        """A per-file tracker's correction (deltas, as :meth:`apply`) of what
        admission ``admit_id`` holds, or a change made without one
        (``admit_id`` ""). One naming an admission not held (never admitted,
        settled already, or decided after its tracker died) is ignored:
        returns False."""
        if admit_id and self.held.pop(admit_id, None) is None:
            return False
        self.apply(owner, file_id, charge, written, on_peers)
        return True

    async def resolve(self, shard: int, root) -> tuple[int, int]:
        """Decide every admission held for ``shard``, whose tracker died
        before settling them: a commit the infofile has applied (its request
        id in ``commit_requests``) keeps its charge, any other is given back.
        Call only while no process serves the shard.

        Returns
        -------
        (kept, given back)
        """
        mine = [(k, h) for k, h in self.held.items() if h.shard == shard]
        kept = back = 0
        for k, h in mine:
            applied = await asyncio.to_thread(_applied, root, h.name, h.file_id, h.request_id)
            self.held.pop(k, None)
            if applied:
                kept += 1
            else:
                self.apply(h.owner, h.file_id, -h.charge, -h.written, {p: -b for p, b in h.on_peers.items()})
                back += 1
        if mine:
            log.info(
                "file tracker %d died holding %d admitted commits: %d applied (kept), %d not (given back)",
                shard,
                len(mine),
                kept,
                back,
            )
        return kept, back


def _applied(root, name: str, file_id: int, request_id: str) -> bool:
    """Commit request ``request_id`` was applied to file ``name`` (id
    ``file_id``): its id is in the infofile's ``commit_requests``."""
    if not request_id:
        return False
    try:
        r = InfofileReader(namespace.infofile_path(root, name))
    except (FileNotFoundError, OSError):
        return False
    try:
        if int(r.meta().get("file_id", 0)) != file_id:
            return False
        row = r.conn.execute("SELECT 1 FROM commit_requests WHERE request_id = ?", (request_id,)).fetchone()
        return row is not None
    except Exception:  # no commit_requests table (an old infofile): never applied through it
        return False
    finally:
        r.close()


def meta_of(owner: str, group: str, mode: int) -> dict:
    """An infofile meta dict of ``owner``, ``group`` and ``mode`` bits
    (what :func:`~st_py.tracker.guard.owner_of_meta` reads back)."""
    return {"owner": owner, "group": group, "mode": f"{mode:04o}"}


__all__ = ["Admissions", "Held", "ShardLoad", "meta_of", "owner_of_meta"]

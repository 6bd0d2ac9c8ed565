"""Space reservations (FreeLoader, seed 004 section 4.1.1; paper 4.4's
two-phase quota): a file created with ``est_size`` holds that many bytes per
copy on its peers until it is closed, so concurrent creates cannot overbook a
peer and quotas count bytes about to be written (docs/replication.md, "Space
reservation").

A reservation is per file: ``est_size`` user bytes (one copy) times F, spread
evenly over the peers the scheduler chose. Commits of the file use it up;
what is left is held on each of those peers as ``remaining * F / peers``.
It ends when its creator closes the file (``Close``), when the file is
deleted, or when nobody has committed to or opened the file for writing for
``lease_s`` seconds (a writer that died). The tracker keeps reservations in
its state, so a restart does not drop them; each comes back with a fresh
lease and what its file has committed since.
"""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass
class Reservation:
    """One file's space reservation: ``est_size`` user bytes (one copy) times
    ``copies``, spread over ``peer_ids``; ``written`` bytes of it are
    committed; it lapses at ``expires`` (``time.monotonic()``)."""

    file_id: int
    name: str
    owner: str
    copies: int
    est_size: int  # user bytes, one copy
    peer_ids: list[str]  # the peers it is held on
    written: int = 0  # user bytes committed since create (one copy)
    expires: float = 0.0  # time.monotonic()

    @property
    def remaining(self) -> int:
        """User bytes (one copy) not yet committed."""
        return max(0, self.est_size - self.written)

    def per_peer(self) -> int:
        """Bytes held on each of its peers now."""
        return -(-self.remaining * self.copies // len(self.peer_ids)) if self.peer_ids else 0


class Reservations:
    """The tracker's reservations, by file id, persisted in its state."""

    def __init__(self, state, lease_s: float):
        self.state = state
        self.lease_s = lease_s
        self.by_file: dict[int, Reservation] = {}
        # lapsed here and no longer counted, but kept in the state until an end_reservation
        # through the metadata log releases them on every replica (end_lapsed, st_py/tracker/server.py)
        self.lapsed: dict[int, Reservation] = {}

    def load(self, written_of) -> None:
        """Reservations kept in the state; ``written_of(name, file_id)`` is
        the user bytes the file has committed (None: the file is gone)."""
        for file_id, name, owner, copies, est_size, peer_ids in self.state.reservations():
            written = written_of(name, file_id)
            if written is None:
                self.state.drop_reservation(file_id)
                continue
            self.by_file[file_id] = Reservation(
                file_id, name, owner, copies, est_size, peer_ids, written, time.monotonic() + self.lease_s
            )

    def add(self, file_id: int, name: str, owner: str, copies: int, est_size: int, peer_ids: list[str]) -> None:
        """Reserve space for new file ``file_id``: ``est_size`` user bytes (one
        copy) times ``copies`` on ``peer_ids``, for ``lease_s`` seconds. In
        memory until :meth:`persist`."""
        self.by_file[file_id] = Reservation(
            file_id, name, owner, copies, est_size, list(peer_ids), 0, time.monotonic() + self.lease_s
        )

    def persist(self, file_id: int) -> None:
        """Write file ``file_id``'s reservation (if any) into the tracker state."""
        r = self.by_file.get(file_id)
        if r is not None:
            self.state.add_reservation(r.file_id, r.name, r.owner, r.copies, r.est_size, r.peer_ids)

    def release(self, file_id: int) -> Reservation | None:
        """End file ``file_id``'s reservation (in memory and in the state); returns it, or None."""
        r = self.by_file.pop(file_id, None)
        lapsed = self.lapsed.pop(file_id, None)
        # from the state even when not loaded here: a replayed create_file put it back in the
        # state after this tracker loaded it (st_py/tracker/rpc/log_apply.py), its end follows
        self.state.drop_reservation(file_id)
        return r or lapsed

    def get(self, file_id: int) -> Reservation | None:
        """File ``file_id``'s reservation, or None (expired ones are dropped first)."""
        self.expire()
        return self.by_file.get(file_id)

    def renew(self, file_id: int) -> None:
        """Extend file ``file_id``'s reservation by ``lease_s`` seconds from now (a writer is still at it)."""
        r = self.by_file.get(file_id)
        if r is not None:
            r.expires = time.monotonic() + self.lease_s

    def expire(self) -> list[Reservation]:
        """Stop counting reservations whose lease ran out; returns them. They
        stay in the state, in :attr:`lapsed`, until :meth:`release` (an
        ``end_reservation`` the leader puts through the metadata log, so a
        new leader does not hold them again for another lease)."""
        now = time.monotonic()
        gone = [r for r in self.by_file.values() if r.expires < now]
        for r in gone:
            self.lapsed[r.file_id] = self.by_file.pop(r.file_id)
        return gone

    def committed(self, file_id: int, nbytes: int) -> None:
        """``nbytes`` user bytes (one copy) of the file were committed."""
        r = self.by_file.get(file_id)
        if r is not None:
            r.written += nbytes
            r.expires = time.monotonic() + self.lease_s

    def on_peers(self, exclude_file: int = 0) -> dict[str, int]:
        """``{peer_id: bytes held}`` over every reservation but
        ``exclude_file``'s."""
        self.expire()
        out: dict[str, int] = {}
        for r in self.by_file.values():
            if r.file_id == exclude_file:
                continue
            share = r.per_peer()
            if share:
                for pid in r.peer_ids:
                    out[pid] = out.get(pid, 0) + share
        return out

    def of_owner(self, owner: str) -> int:
        """Bytes (all copies) reserved for ``owner``'s files and not yet
        committed: what their quota counts besides committed bytes."""
        self.expire()
        return sum(r.remaining * r.copies for r in self.by_file.values() if r.owner == owner)

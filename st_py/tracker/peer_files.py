"""Which files name which peer, at which generation: what a peer that keeps
infofile copies (``st-peer --metadata fetch``; issue 40, docs/peer.md,
"Infofile copies") is told with each announce reply, so that every file it
serves has a current copy on it, and ``recover --from-peers`` can rebuild
every file, not only those a GET_LOCAL or a scrub asked about.

The tracker learns a file's generation and peerlist from two places, both
feeding :meth:`PeerFiles.note`:

* its committers, after each change they make (at once:
  :class:`~st_py.tracker.committer.Committer`'s ``on_change``);
* the count of records short of copies (:mod:`st_py.tracker.health`), which
  reads every infofile that changed every few seconds: files written by a
  per-file tracker, known from before a restart, or applied by a replica.

A generation only rises (a late count never lowers what a commit said), and
peers are only added to a peerlist, so the two agree. Each change of an
entry takes the next sequence number; a peer's announce carries the last
reply's ``(epoch, cursor)`` and is answered with the entries naming it whose
sequence number is above the cursor, oldest first, at most :data:`MAX_REPLY`
of them. The epoch is this process's: a restarted tracker, or another
replica, answers with every entry naming the peer. Deleted files leave the
index (:meth:`retire`, and :meth:`keep_only` after each count); a peer learns
of a deletion from FetchInfofile, as before.

Thread-safety: every method takes the index's lock (the count runs in a
worker thread, announces and committers on the event loop).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

MAX_REPLY = 4096  # entries in one announce reply at most (about 40 bytes each)


@dataclass(frozen=True)
class PeerFile:
    """A file whose peerlist names a peer: ``file_id``, namespace ``name``,
    the ``generation`` the tracker last saw."""

    file_id: int
    name: str
    generation: int


@dataclass
class _Entry:
    name: str
    generation: int
    peer_ids: frozenset[str]
    seq: int


class PeerFiles:
    """The index (see the module): file id -> (name, generation, peer ids,
    sequence number of its last change), in the order of those changes."""

    def __init__(self) -> None:
        self.epoch = os.urandom(8).hex()
        self._lock = threading.Lock()
        self._seq = 0
        self._files: OrderedDict[int, _Entry] = OrderedDict()  # oldest change first

    def note(self, file_id: int, name: str, generation: int, peer_ids: Iterable[str]) -> None:
        """File ``file_id`` (namespace ``name``) is at ``generation`` at
        least and its peerlist names ``peer_ids`` (among others, perhaps).
        A change of generation (up), name or peers takes a new sequence
        number; anything else changes nothing."""
        ids = frozenset(peer_ids)
        with self._lock:
            e = self._files.get(file_id)
            if e is not None:
                gen = max(e.generation, generation)
                if gen == e.generation and e.name == name and ids <= e.peer_ids:
                    return
                ids = e.peer_ids | ids
            else:
                gen = generation
            self._seq += 1
            self._files[file_id] = _Entry(name, gen, ids, self._seq)
            self._files.move_to_end(file_id)

    def retire(self, file_id: int) -> None:
        """File ``file_id`` was deleted: forget it."""
        with self._lock:
            self._files.pop(file_id, None)

    def keep_only(self, file_ids: Iterable[int]) -> None:
        """Forget every file not in ``file_ids`` (the tracker's files, after a count)."""
        keep = set(file_ids)
        with self._lock:
            for fid in [f for f in self._files if f not in keep]:
                del self._files[fid]

    def changed_since(self, peer_id: str, epoch: str, cursor: int) -> tuple[list[PeerFile], int, bool]:
        """What to tell peer ``peer_id`` whose last reply said ``(epoch,
        cursor)``: ``(files, new cursor, more)``. The files name the peer
        and changed after ``cursor`` (every one if ``epoch`` is not this
        index's), oldest change first, at most :data:`MAX_REPLY`; ``more``
        if some were left for the next announce (the new cursor is then the
        last one sent). Costs O(changes after the cursor)."""
        if epoch != self.epoch:
            cursor = 0
        with self._lock:
            newer: list[tuple[int, _Entry]] = []
            for fid in reversed(self._files):
                e = self._files[fid]
                if e.seq <= cursor:
                    break
                newer.append((fid, e))
            top = self._seq
        newer.reverse()
        out: list[PeerFile] = []
        for fid, e in newer:
            if peer_id not in e.peer_ids:
                continue
            if len(out) == MAX_REPLY:
                return out, e.seq - 1, True
            out.append(PeerFile(fid, e.name, e.generation))
        return out, top, False

    def __len__(self) -> int:
        with self._lock:
            return len(self._files)

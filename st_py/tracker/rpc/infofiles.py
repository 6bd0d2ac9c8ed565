"""The open infofiles: committers, FileInfo and grants.

A part of the tracker's gRPC servicer (proto/storetorrent/v1/tracker.proto),
composed in st_py/tracker/service.py (the master) and
st_py/tracker/file_tracker.py (a per-file tracker).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import grpc

from st_py.core import capability, namespace
from st_py.core.infofile import InfofileReader

from ..committer import Committer
from ..infofile_writer import (
    InfofileWriter,
)
from .parts import TrackerParts

log = logging.getLogger("st.tracker")

FILE_OPS = capability.READ | capability.WRITE | capability.DELETE
MAX_SCHEMA_BYTES = 1 << 20  # one record schema kept in an infofile (Arrow IPC)


class Infofiles(TrackerParts):
    """The servicer's part for the infofiles this tracker writes: one
    :class:`~st_py.tracker.committer.Committer` per open infofile, the
    FileInfo a client is handed (peers, reservations, capability).

    Not thread-safe: runs on the tracker's event loop (see
    :class:`~st_py.tracker.service.TrackerService`)."""

    # -- helpers -------------------------------------------------------------
    @contextlib.contextmanager
    def creating(self, name: str) -> Iterator[None]:
        """While in this context, file ``name`` (normalized) is being
        created or restored: RemoveDir refuses to remove its directories,
        as if it were there already. Nests."""
        self._creating[name] = self._creating.get(name, 0) + 1
        try:
            yield
        finally:
            self._creating[name] -= 1
            if not self._creating[name]:
                del self._creating[name]

    def forget_peer_ids(self, file_id: int) -> None:
        """Drop the ``{peer_idx: peer_id}`` of file ``file_id`` cached for
        its commits; the next commit reads them from its infofile again
        (its peerlist grew, or the infofile was put there anew:
        RestoreInfofile)."""
        self._peer_ids.pop(file_id, None)

    def _committer(self, name: str) -> Committer | None:
        c = self._committers.get(name)
        if c is None:
            path = namespace.infofile_path(self.root, name)
            if not path.is_file():
                return None
            writer = InfofileWriter(path)
            writer.history_age = self.history_age_s
            writer.copies_wanted = lambda: self.copy_demand.wanted(name)  # changesets for copies only
            c = self._committers[name] = Committer(writer, self.commit_stats, self.oplog, name)
            c.on_change = self.peer_files.note  # which files name which peer (peer_files.py)
        return c

    def _drop_committer(self, name: str) -> None:
        c = self._committers.pop(name, None)
        if c is not None:
            c.close()

    def _committed_bytes(self, name: str, file_id: int) -> int | None:
        """User bytes committed to file ``name`` (None if it is gone or
        another file took its name): how much of a reservation kept in the
        state was used before a restart."""
        try:
            r = InfofileReader(namespace.infofile_path(self.root, name))
        except (FileNotFoundError, OSError):
            return None
        try:
            if int(r.meta()["file_id"]) != file_id:
                return None
            return r.stats()[1]
        finally:
            r.close()

    async def _open_committer(self, context, name: str, file_id: int) -> Committer:
        c = self._committer(name)
        if c is not None and file_id and c.meta.file_id != file_id:
            # Kept for an earlier file of this name, unlinked behind its back (a namespace restored
            # from a backup, say): open the name again, and close that one after its transactions.
            self._committers.pop(name, None)
            await c.aclose()
            c = self._committer(name)
        if c is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no StoreTorrent file {name}; was it deleted?")
        assert c is not None  # context.abort raises
        if file_id and c.meta.file_id != file_id:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"file {name} was deleted and created again since it was opened; reopen it",
            )
        return c

    def close(self) -> None:
        """Close the infofile writers of every open committer (at tracker
        shutdown; the log is closed by ``await oplog.aclose()``)."""
        for name in list(self._committers):
            self._drop_committer(name)

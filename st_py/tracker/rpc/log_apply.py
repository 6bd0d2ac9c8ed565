"""The metadata log on the tracker: replies kept, checkpoint, replay and following.

A part of the tracker's gRPC servicer (proto/storetorrent/v1/tracker.proto),
composed in st_py/tracker/service.py (the master) and
st_py/tracker/file_tracker.py (a per-file tracker).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import time

from st_py.core import capability, namespace
from st_py.core.infofile import InfofileReader, holds_no_record

from ..access import User
from ..apply.oplog import ReplayReport
from ..apply.ops import IF_EMPTY, InfofileOp
from ..infofile_writer import (
    InfofileWriter,
    clock_at,
    create_infofile,
)
from ..log.errors import StandbyBehindError
from ..tracker_ops import namespace_files
from .parts import TrackerParts

log = logging.getLogger("st.tracker")

FILE_OPS = capability.READ | capability.WRITE | capability.DELETE
MAX_SCHEMA_BYTES = 1 << 20  # one record schema kept in an infofile (Arrow IPC)


class LogApply(TrackerParts):
    """The servicer's part for the metadata log's side of the servicer
    (docs/metadata-log.md): replies kept by request id, the checkpoint, replay
    at start and election, a standby following the log.

    Not thread-safe: runs on the tracker's event loop (see
    :class:`~st_py.tracker.service.TrackerService`)."""

    async def _log_state(self, kind: str, name: str, args: tuple, file_id: int = 0) -> None:
        """Append the operation ``kind`` on the tracker's own state (a lease,
        a directory's owner, a peer's drain state; st_py/tracker/tracker_ops.py)
        to the metadata log and apply it, before the caller hears: a restart
        or a failover keeps what it was told. Raises what the log's append raises."""

        async def apply(op: InfofileOp, index: int) -> None:
            self.tracker_ops.apply(op)

        await self.oplog.run(InfofileOp(name, file_id, kind, args, time.time()).encode(), apply)

    async def end_lapsed_reservations(self, every_s: float = 1.0) -> None:
        """The leader's loop (st_py/tracker/server.py): every ``every_s``
        seconds, end each space reservation whose lease lapsed with an
        ``end_reservation`` through the metadata log, so every replica drops
        it (a new leader would otherwise hold it one lease more; issue 39).
        One that cannot be logged (the term ended) is tried again next time
        or by the next leader, which holds it until then."""
        while True:
            await asyncio.sleep(every_s)
            self.reservations.expire()
            for r in list(self.reservations.lapsed.values()):
                try:
                    await self._log_state("end_reservation", r.name, (), r.file_id)
                except Exception as e:  # the log refused (a term ended): the next pass or leader does it
                    log.warning("could not end the lapsed reservation of %s (%s): tried again", r.name, e)
                    break
                log.info("space reservation of %s lapsed (%d bytes not written): ended", r.name, r.remaining)

    def _replied(self, request, rpc: str, user, reply_type):
        """The reply a retry of ``request`` (its request id) got the first
        time, decoded as ``reply_type``, or None."""
        got = self.tracker_ops.replied(getattr(request, "request_id", ""), rpc, user.name)
        return reply_type.FromString(got) if got is not None else None

    async def _answered(self, request, rpc: str, user, reply):
        """Log that ``request`` (with a request id) got ``reply``, then return
        it: its retry across a restart or failover gets the same reply."""
        if getattr(request, "request_id", ""):
            await self._log_state("request_done", request.request_id, (rpc, user.name, reply.SerializeToString()))
        return reply

    async def load_checkpoint(self) -> None:
        """Before the replay at start: with a replicated log, the tracker's
        own state as the last leader's checkpoint kept it (directories'
        owners and modes, drain states; the entries after it are replayed),
        and the files the namespace holds (a standby's tracker.db knows
        neither; :meth:`replay_log` then counts each owner's usage again).
        Nothing with the local log: tracker.db beside it is the state."""
        cp = await self.oplog.backend.load_checkpoint()
        if cp is None and self.oplog.backend.describe == "local":
            return
        if cp is not None:
            dirs, drains = self.tracker_ops.restore(cp[1])
            log.info("metadata log checkpoint at %d: %d directories, %d drained peers", cp[0], dirs, drains)
        files = await asyncio.to_thread(namespace_files, self.root)
        self.state.replace_files(files)
        self._recount_usage = True
        log.info("%d files in the namespace", len(files))

    async def follow_log(self) -> None:
        """As a standby with a namespace of its own (``--own-namespace``):
        apply the metadata log to it as it grows, from where this tracker's
        state says it stopped (:meth:`OpLog.follow`), until cancelled.
        Raises StandbyBehindError."""
        log_id = self.oplog.log_id
        self.oplog.followed = self.state.followed(log_id)
        if self.oplog.followed:
            log.info("following the metadata log from entry %d on", self.oplog.followed + 1)

        def done(index: int) -> None:
            self.state.set_followed(log_id, index)

        for attempt in range(3):
            try:
                await self.oplog.follow(self._writer_for, self._replay_file_op, self.tracker_ops.apply, done)
            except StandbyBehindError as e:
                if self.copy_namespace is None or attempt == 2:
                    raise
                log.warning("%s: copying the namespace from a live replica instead", e)
                for name in list(self._committers):  # the infofiles are replaced whole
                    self._drop_committer(name)
                index = await self.copy_namespace(e)
                self.oplog.followed = index
                done(index)

    async def replay_log(self, file_id: int | None = None) -> ReplayReport:
        """Apply what the metadata log holds that the infofiles miss (an
        infofile put back from an older copy; with etcd, an entry in flight
        when the last tracker died), before serving; with ``file_id``, for
        that file alone (a RestoreInfofile). Raises BadOperationError for an
        entry it cannot decode."""
        rep = await self.oplog.replay(self._writer_for, file_id, self._replay_file_op, self.tracker_ops.apply)
        if file_id is None and self._recount_usage:  # what the files hold once the log is applied
            self._recount_usage = False
            await asyncio.to_thread(self.guard.count_usage)
        if file_id is None and rep.read:  # the reservations as the log left them, each with a fresh lease
            self._reload_reservations()
        if file_id is None:
            kept = self.leases.restarted(rep.last_at)
            if kept:
                log.info("metadata log replayed: %d writer leases kept, each for at least one TTL", kept)
        if rep.read:
            log.info(
                "metadata log replayed: %d entries, %d applied (%d files), %d seen, %d unanswered, %d of gone files",
                rep.read,
                rep.applied,
                len(rep.files),
                rep.skipped,
                rep.unanswered,
                rep.gone,
            )
        return rep

    # -- file operations (the metadata log's create_file and delete_file) ------------
    async def _apply_create(self, op: InfofileOp, index: int) -> None:
        """Make the infofile ``op`` describes (live: its Create's; FileExistsError,
        NotADirectoryError as create_infofile raises them) and the state's row."""
        await asyncio.to_thread(_create_file, self.root, op, index, self.oplog.log_id)
        self.state.add_file(op.name, op.file_id, str(op.args[0]["owner"]))
        self.state.remember_file_id(op.file_id)

    def _reload_reservations(self) -> None:
        """The reservations as the state holds them after a replay (a per-file
        tracker has none: they are the master's)."""
        self.reservations.by_file.clear()
        self.reservations.load(self._committed_bytes)

    def _drop_reservation(self, file_id: int) -> None:
        """A replayed delete ends the file's reservation (the master's)."""
        self.reservations.release(file_id)

    def _replay_file_op(self, op: InfofileOp, index: int) -> bool:
        """A create or delete replayed at start or after a restore: done only
        if the namespace does not show it yet. Returns whether it changed anything."""
        path = namespace.infofile_path(self.root, op.name)
        if op.kind == "create_file":
            made = not path.exists()
            if made:
                _create_file(self.root, op, index, self.oplog.log_id)
            # this tracker's state learns the file and its directories' owners either way (a
            # standby on a namespace the leader kept: the infofile is there, the state's rows not)
            meta = op.args[0]
            self.state.add_file(op.name, op.file_id, str(meta["owner"]))
            self.state.remember_file_id(op.file_id)
            if int(meta.get("est_size", 0) or 0):  # its space reservation, until an end_reservation or delete_file
                peers = [str(p[1]) for p in op.args[1]]
                self.state.add_reservation(
                    op.file_id, op.name, str(meta["owner"]), int(meta["copies"]), int(meta["est_size"]), peers
                )
            owner = User(str(meta["owner"]), (str(meta["group"]),) if meta.get("group") else ())
            self.guard.made_dirs(owner, [d for d in namespace.ancestors(op.name) if self.state.dir_owner(d) is None])
            return made
        self.leases.drop(op.file_id)  # the file's lease and reservation went with it
        self._drop_reservation(op.file_id)
        try:
            r = InfofileReader(path)
        except (OSError, sqlite3.Error):
            return False
        try:
            fid = int(r.meta().get("file_id", 0))
            kept = IF_EMPTY in op.args and not holds_no_record(r.conn)
        finally:
            r.close()
        if op.file_id and fid != op.file_id:
            return False  # another file has the name now
        if kept:
            return False  # as live: a record committed before it keeps the file (S3 DeleteBucket)
        self._drop_committer(op.name)
        path.unlink(missing_ok=True)
        self.state.remove_file(op.name, fid)
        return True

    def _writer_for(self, op: InfofileOp) -> InfofileWriter | None:
        """The writer of ``op``'s infofile, if that file (name and id) is still there."""
        try:
            c = self._committer(op.name)
        except (OSError, sqlite3.DatabaseError):
            return None
        if c is None or c.meta.file_id != op.file_id:
            return None
        return c.writer


def _create_file(root: str | os.PathLike, op: InfofileOp, index: int, log_id: str) -> None:
    """The infofile of ``op`` (a create_file), at the op's time, its
    ``meta.log_index`` the entry's index in log ``log_id`` (the first in its chain)."""
    meta, peers, mode = op.args
    with clock_at(op.at):
        create_infofile(
            namespace.infofile_path(root, op.name),
            {**meta, "log_index": index, "log_id": log_id},
            [tuple(p) for p in peers],
            mode,
        )

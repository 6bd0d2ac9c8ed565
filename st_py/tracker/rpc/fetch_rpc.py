"""Infofiles handed to nodes: FetchInfofile and RestoreInfofile.

A part of the tracker's gRPC servicer (proto/storetorrent/v1/tracker.proto),
composed in st_py/tracker/service.py (the master) and
st_py/tracker/file_tracker.py (a per-file tracker).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from pathlib import Path
from urllib.parse import quote

import grpc

from st_py.core import capability, namespace
from st_py.core.infofile import InfofileReader
from st_py.errors import ERROR_KIND_KEY

from ..access import R, may, mode_text
from ..guard import owner_of_meta
from ..infofile_fetch import Snapshot, changes_for, take_snapshot, unchanged_since
from ..state import TrackerState
from .parts import TrackerParts

log = logging.getLogger("st.tracker")

FILE_OPS = capability.READ | capability.WRITE | capability.DELETE
MAX_SCHEMA_BYTES = 1 << 20  # one record schema kept in an infofile (Arrow IPC)
FILE_DELETED = "file-deleted"  # ERROR_KIND_KEY of a FetchInfofile by id of a deleted file (st-peer's scrubber)


class FetchRpc(TrackerParts):
    """The servicer's part for infofiles leaving and entering the tracker:
    FetchInfofile (copies on clients and peers, docs/metadata-fetch.md) and
    RestoreInfofile (recover --from-peers).

    Not thread-safe: runs on the tracker's event loop (see
    :class:`~st_py.tracker.service.TrackerService`)."""

    async def FetchInfofile(self, request, context):
        """rpc FetchInfofile (proto/storetorrent/v1/tracker.proto; issue 40): a
        node's copy of a file's infofile brought forward by the changesets its
        writer kept since the copy's log position, or a snapshot of the
        infofile when there is no copy or the changes no longer reach back
        (st_py/tracker/infofile_fetch.py). Read permission, as Open; a peer
        (``user`` "peer:<peer_id>", st-peer --metadata fetch) authenticates as
        for announces (its PEER capability when the tracker has a key) and
        gets only the files whose peerlist names it. A peer may name the file
        by its id alone (``name`` empty: its scrubber, docs/peer.md,
        "Scrubber"); of a file id this tracker deleted, the answer is
        NOT_FOUND with the trailer ``st-error: file-deleted``, and only
        then."""
        peer_id = await self._fetching_peer(context, request.user)
        user = None if peer_id else await self.authenticate(context, request.user)
        if not request.name and peer_id:
            name = await self._name_of_id(context, request.file_id)
        else:
            name = await self._name(context, request.name)
        if user is not None:
            await self._search_allowed(context, user, name)
        path = namespace.infofile_path(self.root, name)
        self.copy_demand.note(name)  # before any snapshot: its writer keeps changesets from now on
        has_copy = bool(request.have_log_id and request.have_schema)
        # one thread hop: the meta, the permission it gives and, for a node with no copy, the snapshot
        file_id, refusal, snap = await asyncio.to_thread(
            _look, path, name, request.file_id, user, peer_id, not has_copy
        )
        if refusal is not None:
            await context.abort(*refusal)
        if snap is not None:
            async for m in _send(snap, name, file_id, context):
                yield m
            return
        c = self._committers.get(name)
        window = c.writer.window if c is not None and c.meta.file_id == file_id else None
        # a copy at the infofile's state with no changesets kept (a tracker restarted, a file not
        # written since) gets "current" below (unchanged_since), not a snapshot
        reply = changes_for(window, request, file_id)
        if reply is not None:
            log.debug("FetchInfofile %s: %s, %d changesets", name, reply[0].kind, len(reply) - 1)
            for m in reply:
                yield m
            return
        if has_copy:  # a copy that may be at the infofile's state
            try:
                same = await asyncio.to_thread(unchanged_since, path, request, file_id)
            except FileNotFoundError:
                await context.abort(grpc.StatusCode.NOT_FOUND, f"no StoreTorrent file {name}; was it deleted?")
            if same is not None:
                yield same
                return
        try:
            snap = await asyncio.to_thread(take_snapshot, path)
        except FileNotFoundError:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no StoreTorrent file {name}; was it deleted?")
        async for m in _send(snap, name, file_id, context):
            yield m

    async def _name_of_id(self, context, file_id: int) -> str:
        """The name of the file of id ``file_id``, for a peer that asks by id
        (TrackerState.file_by_id). Aborts NOT_FOUND, with the trailer
        ``st-error: file-deleted`` only if this tracker recorded the file's
        deletion; FAILED_PRECONDITION on a per-file tracker (the files are the
        master's) or without a file id."""
        if not file_id:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "FetchInfofile needs a name or a file id")
        state: TrackerState | None = getattr(self, "state", None)
        if state is None:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                "a per-file tracker finds no file by its id: ask the master tracker",
            )
            raise AssertionError("unreachable: context.abort raises")
        name, deleted = state.file_by_id(file_id)
        if name is not None:
            return name
        if deleted:
            await context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"file id {file_id:016x} was deleted",
                trailing_metadata=((ERROR_KIND_KEY, FILE_DELETED),),
            )
        await context.abort(
            grpc.StatusCode.NOT_FOUND,
            f"this tracker knows no file of id {file_id:016x} (neither a file nor one it deleted)",
        )
        raise AssertionError("unreachable: context.abort raises")

    async def RestoreInfofile(self, request_iterator, context):
        """Recovery without the namespace: an infofile from a peer's mirror
        goes back into the namespace (st_py/tracker/restore.py)."""
        from ..restore import restore_infofile

        return await restore_infofile(self, request_iterator, context)


async def _send(snap: Snapshot, name: str, file_id: int, context):
    """The snapshot's messages (NOT_FOUND if it is another file's: the name
    was deleted and made again since its meta was read); its memory or
    temporary file released after."""
    try:
        if snap.file_id != file_id:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no StoreTorrent file {name}; was it deleted?")
        log.debug("FetchInfofile %s: snapshot at generation %d", name, snap.generation)
        for m in snap.chunks():
            yield m
    finally:
        snap.discard()


def _look(
    path: Path, name: str, want_file_id: int, user, peer_id: str, snapshot: bool
) -> tuple[int, tuple[grpc.StatusCode, str] | None, Snapshot | None]:
    """In a worker thread: the file id of the infofile at ``path``, why the
    caller may not fetch it (a status and message for ``context.abort``;
    None: it may) and, if ``snapshot`` and it may, a snapshot of it. Read
    permission, as Open; a peer gets only the files whose peerlist names it."""
    try:
        meta = _infofile_meta(path)
    except FileNotFoundError:
        meta = None
    file_id = int(meta["file_id"]) if meta is not None else 0
    if meta is None or (want_file_id and file_id != want_file_id):
        return file_id, (grpc.StatusCode.NOT_FOUND, f"no StoreTorrent file {name}; was it deleted?"), None
    o = owner_of_meta(meta)
    if peer_id:
        if peer_id not in _peerlist_ids(path):
            why = (
                f"peer {peer_id} is not in the peerlist of {name}: a peer fetches only the infofiles "
                "of the files it serves"
            )
            return file_id, (grpc.StatusCode.PERMISSION_DENIED, why), None
    elif not may(user, o, R):
        why = f"user {user.name} may not read {name} ({mode_text(o.mode)} {o.owner}:{o.group})"
        return file_id, (grpc.StatusCode.PERMISSION_DENIED, why), None
    if not snapshot:
        return file_id, None, None
    try:
        return file_id, None, take_snapshot(path)
    except FileNotFoundError:
        return file_id, (grpc.StatusCode.NOT_FOUND, f"no StoreTorrent file {name}; was it deleted?"), None


def _peerlist_ids(path: Path) -> set[str]:
    """The peer ids of the infofile's peerlist (its ``peers`` table)."""
    db = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True)
    try:
        db.execute("PRAGMA busy_timeout=10000")
        return {str(r[0]) for r in db.execute("SELECT peer_id FROM peers")}
    finally:
        db.close()


def _infofile_meta(path: Path) -> dict:
    """The meta table of the infofile at ``path`` (FileNotFoundError if none)."""
    r = InfofileReader(path)
    try:
        return r.meta()
    finally:
        r.close()

"""A file's records: group commits, deletes, snapshots, copies.

A part of the tracker's gRPC servicer (proto/storetorrent/v1/tracker.proto),
composed in st_py/tracker/service.py (the master) and
st_py/tracker/file_tracker.py (a per-file tracker).
"""

from __future__ import annotations

import logging
import time
import uuid

import grpc
import pyarrow as pa

from st_py._proto import tracker_pb2 as pb
from st_py.core import capability
from st_py.core.record_format import FORMATS, ignored, load_schema
from st_py.errors import ERROR_KIND_KEY, FileNotEmptyError

from ..access import R, W, may, mode_text
from ..apply.ops import IF_EMPTY, InfofileOp
from ..file_quota import commit_refusal, file_room
from ..guard import owner_of_meta
from ..infofile_writer import (
    InfofileWriter,
    NoSuchSnapshotError,
    SnapshotExistsError,
)
from .commit_rows import bytes_on_peers, commit_rows, user_meta_problem
from .parts import TrackerParts

log = logging.getLogger("st.tracker")

FILE_OPS = capability.READ | capability.WRITE | capability.DELETE
MAX_SCHEMA_BYTES = 1 << 20  # one record schema kept in an infofile (Arrow IPC)


class RecordRpc(TrackerParts):
    """The servicer's part for the RPCs that change a file's records: Commit
    (the group commit, paper 3.4), CommitObjects, StoreCopies, MoveCopies,
    Delete, Snapshot; served by the master and by per-file trackers.

    Not thread-safe: runs on the tracker's event loop (see
    :class:`~st_py.tracker.service.TrackerService`)."""

    async def _quota_fit(self, c, batch: list[tuple], f: int, owners: bool = True) -> tuple[int, tuple[str, int, int]]:
        """How many records of ``batch`` (in order; ``r[1]``: bytes of one
        copy, ``f`` copies) fit the quotas: the file's ``--quota-bytes``
        (file_quota.py) and, with ``owners`` where this tracker admits commits
        itself (the master), its owner's quota beyond the file's reservation.
        Returns that number and, when it is short of the batch, ``(scope,
        quota, used)`` of the quota that stops it (bytes, all copies). Records
        the file has already (a retried commit's) count nothing. A per-file
        tracker leaves the owner's quota to the master, which refuses such a
        commit whole."""
        rooms: list[tuple[str, int, int, int]] = []  # (scope, quota, used, reserved part)
        room = await file_room(c, self.quota_bytes)
        if room is not None:
            rooms.append(room)
        if owners and not self.shard:
            owner = owner_of_meta(c.writer_meta()).owner
            q = self.admissions.guard.quota_of(owner)
            if q is not None:
                used_u, _ = self.admissions.guard.used(owner)
                res = self.reservations.get(c.meta.file_id)
                rooms.append(("user", q, used_u, res.remaining if res else 0))
        if not rooms:
            return len(batch), ("", 0, 0)
        have = await c.run(c.writer.committed_among, [r[0] for r in batch])  # a retry's: counted already
        total = 0
        for k, r in enumerate(batch):
            if r[0] in have:
                continue
            total += r[1]
            for scope, q, used, reserved in rooms:
                if used + max(0, total - reserved) * f > q:
                    return k, (scope, q, used)
        return len(batch), ("", 0, 0)

    async def Commit(self, request, context):
        """rpc Commit (proto/storetorrent/v1/tracker.proto): group commit of a batch of
        acknowledged records (paper 3.5)."""
        user = await self.authenticate(context, request.user)
        name = await self._name(context, request.name)
        if not await self._here(context, name):  # a per-file tracker writes this file (paper 3.5)
            return await self._forward(context, "Commit", request, user, name)
        c = await self._open_committer(context, name, request.file_id)
        # the quota's look and the commit as one step per file (file_quota.QuotaTurns)
        async with self._quota_turns.turn(c.meta.file_id, self.quota_bytes):
            return await self._commit_in_turn(context, request, user, name, c)

    async def _commit_in_turn(self, context, request, user, name, c):
        """:meth:`Commit` once its file's committer is open (and, under a
        per-file quota, its turn held): rows, quota, admission, commit, settlement."""
        f = c.meta.copies
        schemas = await self._record_schemas(context, request.schemas)
        rows, why = commit_rows(request, f, c.meta.npeers, schemas)
        batch = rows
        if why:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, why)
        refused: list[str] = []
        quota: tuple[str, int, int] = ("", 0, 0)
        objs = await _object_rows(context, request.objects, schemas) if request.objects else []
        if request.partial_ok and not (request.delete or request.replace_all or objs):  # independent: commit what fits
            fit, quota = await self._quota_fit(c, batch, f)
            batch, refused = batch[:fit], [r[0] for r in batch[fit:]]
            if not batch:
                return pb.CommitReply(
                    columns_read=len(request.columns.names),
                    quota_refused=refused,
                    quota_scope=quota[0],
                    quota_bytes=quota[1],
                    quota_used_bytes=quota[2],
                )
        if refused:  # trimmed: the records of the request under the names kept (a name may come twice)
            names = {r[0] for r in batch}
            kept = [r for r in rows if r[0] in names]
        else:
            kept = rows
        replaced = [r[0] for r in kept if r[5] and not r[8]]
        if replaced or (
            request.lease_id and (objs or request.delete)
        ):  # new versions: only the lease holder (MORRIS 3.2)
            await self._check_lease(context, name, c.meta.file_id, request.lease_id)
        # A compose's records take over the copies of the parts it deletes (stored_as, new_only): no byte
        # is stored, so admission counts only the others (the settlement below nets the parts out as well).
        fresh = await _not_reusing(c, kept, list(request.delete))
        on_peer = bytes_on_peers(fresh)  # peer_idx -> bytes of this batch it holds
        size = sum(r[1] for r in batch)  # one copy
        add = size * f
        new_size = sum(r[1] for r in fresh) if fresh is not kept else size  # one copy, stored by this commit
        if self.quota_bytes is not None and not request.partial_ok:  # partial_ok: trimmed above
            fit, (scope, q, used) = await self._quota_fit(c, fresh, f, owners=False)  # the owner's: admission
            if fit < len(fresh):
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, commit_refusal(scope, q, used, new_size * f))
        file_id = c.meta.file_id
        ids = self._peer_ids.get(file_id)
        if ids is None:
            ids = self._peer_ids[file_id] = dict(await c.run(_read_peer_ids, c.writer))
        on_peers: dict[str, int] = {}  # peer id -> bytes (one copy) of this batch it holds
        for idx, b in on_peer.items():
            on_peers[ids.get(idx, "")] = on_peers.get(ids.get(idx, ""), 0) + b
        # A per-file tracker names every request, so its master can tell whether it was applied if the
        # tracker dies before settling its admission (st_py/tracker/admission.py).
        rid = request.request_id or (f"st-{uuid.uuid4().hex}" if self.shard else "")
        # Permission, quota and reserved space: the bytes are held from here on (admission.py)
        o, adm = await self._admit(context, user, name, c, "write", new_size, on_peers, rid, len(batch))
        removed = removed_bytes = superseded = n = 0
        try:
            # The versions these replace stop counting (only the lease holder replaces them: no race).
            superseded = await c.run(_committed_bytes_of, c.writer, replaced) if replaced else 0
            if request.delete or request.replace_all or objs:  # the old names go in the same transaction
                args = (batch, list(request.delete), rid, request.replace_all) + ((objs,) if objs else ())
                gen, new, conflicts, removed, removed_bytes = await c.write("commit_replacing", *args)
                n = sum(1 for r in batch if r[0] in new)
            else:
                gen, n, conflicts = await c.commit(batch, rid)
        except Exception as e:  # nothing committed: what the admission held goes back
            await self._settle(adm, o.owner, file_id, 0, 0, {})
            if isinstance(e, FileNotFoundError):  # deleted meanwhile (Committer.retire)
                await context.abort(grpc.StatusCode.NOT_FOUND, f"file {name} was deleted")
            raise
        # What the commit really added: exact when every record of the batch is new (retries and
        # conflicts are rare); the versions it replaced and the names an overwrite removed are freed.
        whole = len(batch) or 1
        await self._settle(
            adm,
            o.owner,
            file_id,
            add * n // whole - superseded * f - removed_bytes * f,
            new_size * n // whole,
            {p: b * n // whole for p, b in on_peers.items()},
        )
        return pb.CommitReply(
            columns_read=len(request.columns.names),
            quota_refused=refused,
            quota_scope=quota[0],
            quota_bytes=quota[1],
            quota_used_bytes=quota[2],
            generation=gen,
            committed=n,
            conflicts=[f"{x.name}: {x.reason}" for x in conflicts],
            conflict_names=[x.name for x in conflicts],
            conflict_kinds=[x.kind for x in conflicts],
            conflict_records=[x.record for x in conflicts],
            deleted=removed,
        )

    async def _record_schemas(self, context, schemas) -> list[tuple[str, bytes]]:
        """The request's record schemas as ``(format, Arrow IPC schema)``,
        each checked once (a known format, at most ``MAX_SCHEMA_BYTES``, a
        schema Arrow reads): the infofile keeps them for every reader
        (docs/infofile.md, "Record schemas")."""
        out = []
        for s in schemas:
            key = (s.format, bytes(s.schema))
            if key not in self._schemas_seen:
                if s.format not in FORMATS or len(s.schema) > MAX_SCHEMA_BYTES:
                    await context.abort(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"record schema of format {s.format[:40]!r} and {len(s.schema)} bytes: "
                        f"the format must be one of {list(FORMATS)} and the schema at most "
                        f"{MAX_SCHEMA_BYTES} bytes",
                    )
                try:
                    load_schema(key[1])
                except (pa.ArrowException, ValueError) as e:
                    await context.abort(
                        grpc.StatusCode.INVALID_ARGUMENT, f"a record schema is not an Arrow IPC schema: {e}"
                    )
                if len(self._schemas_seen) > 4096:
                    self._schemas_seen.clear()
                self._schemas_seen.add(key)
            out.append(key)
        return out

    async def Delete(self, request, context):
        """rpc Delete (proto/storetorrent/v1/tracker.proto): removes records, or a whole file
        (write permission on its directory)."""
        user = await self.authenticate(context, request.user)
        name = await self._name(context, request.name)
        if (again := self._replied(request, "Delete", user, pb.DeleteReply)) is not None:
            return again  # a retry of a delete done before (a restart, a failover)
        here = await self._here(context, name)
        if request.whole_file:  # as in UNIX: write permission on the directory
            if here:
                c = await self._open_committer(context, name, request.file_id)
            parent = name.rsplit("/", 1)[0] or "/"
            await self._allowed(context, self.guard.check_dir, user, parent, W, "delete entries in directory")
            if here:
                await refuse_if_snapshots(context, name, await c.run(c.writer.snapshots))

            async def drop(op: InfofileOp, index: int) -> tuple[int, int, int, int, str]:
                if here:  # after the commits queued before it, and none after (Committer.retire)
                    n, b = await c.retire(unlink=True, if_empty=request.if_empty)
                    self._committers.pop(name, None)
                    self.leases.drop(c.meta.file_id)
                    self._peer_ids.pop(c.meta.file_id, None)
                    self.peer_files.retire(c.meta.file_id)
                    return n, b, c.meta.file_id, c.meta.copies, owner_of_meta(c.writer_meta()).owner
                # its per-file tracker closes and unlinks it, and forgets its lease
                r = await self._control(context, name, "drop-if-empty" if request.if_empty else "drop", request.file_id)
                return r.records, r.bytes, r.file_id, r.copies, r.owner

            # in the metadata log before the infofile goes: a replay never makes it again (and
            # with if_empty, a replay deletes it only if it still holds no record: log_apply.py)
            args = (IF_EMPTY,) if request.if_empty else ()
            gone = InfofileOp(name, c.meta.file_id if here else request.file_id, "delete_file", args, time.time())
            try:
                n, b, file_id, copies, owner = await self.oplog.run(gone.encode(), drop)
            except FileNotEmptyError as e:
                await refuse_not_empty(context, e.file or name)
            self.state.remove_file(name, file_id)
            self.reservations.release(file_id)
            self.guard.charge(owner, -b * copies)
            log.info("deleted file %s (%d records) for %s", name, n, user.name)
            return await self._answered(request, "Delete", user, pb.DeleteReply(deleted=n))
        if not here:
            return await self._forward(context, "Delete", request, user, name)
        c = await self._open_committer(context, name, request.file_id)
        o, _ = await self._admit(context, user, name, c, "delete records of")
        gen, n, b, kept = await c.write("delete_records", list(request.records))
        await self._settle(None, o.owner, c.meta.file_id, -b * c.meta.copies, 0, {})
        return await self._answered(request, "Delete", user, pb.DeleteReply(deleted=n, generation=gen, kept=kept))

    async def Snapshot(self, request, context):
        """rpc Snapshot (proto/storetorrent/v1/tracker.proto): create, delete or
        list the snapshots of one file (docs/snapshots.md). Create and delete
        need write permission on the file, list read permission."""
        user = await self.authenticate(context, request.user)
        name = await self._name(context, request.name)
        if (again := self._replied(request, "Snapshot", user, pb.SnapshotReply)) is not None:
            return again  # a retry of a create or delete done before (a restart, a failover)
        if not await self._here(context, name):
            return await self._forward(context, "Snapshot", request, user, name)
        c = await self._open_committer(context, name, request.file_id)
        op = request.op
        if op not in ("create", "delete", "list"):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown snapshot op {op[:40]!r}")
        if op == "list":
            o = owner_of_meta(c.writer_meta())
            if not may(user, o, R):
                await context.abort(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"user {user.name} may not read {name} ({mode_text(o.mode)} {o.owner}:{o.group})",
                )
            rows = await c.run(c.writer.snapshots)
        else:
            await self._admit(context, user, name, c, f"{op} a snapshot of")
            why = snapshot_name_problem(request.snapshot)
            if why:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"snapshot name {request.snapshot!r}: {why}")
            try:
                if op == "create":
                    made = await c.write("create_snapshot", request.snapshot, user.name)
                    rows = [(*made, user.name)]
                    log.info("snapshot %s of %s at generation %d for %s", made[0], name, made[1], user.name)
                else:
                    gone = await c.write("delete_snapshot", request.snapshot)
                    rows = [(*gone[:3], "")]
                    o = owner_of_meta(c.writer_meta())
                    # what only it kept is no longer counted (docs/snapshots.md, "Space")
                    await self._settle(None, o.owner, c.meta.file_id, -gone[3] * c.meta.copies, 0, {})
                    log.info("deleted snapshot %s of %s for %s", gone[0], name, user.name)
            except SnapshotExistsError:
                await context.abort(
                    grpc.StatusCode.ALREADY_EXISTS,
                    f"{name} has a snapshot named {request.snapshot!r} already: choose another name",
                    trailing_metadata=((ERROR_KIND_KEY, "snapshot-exists"),),
                )
            except NoSuchSnapshotError:
                await context.abort(
                    grpc.StatusCode.NOT_FOUND,
                    f"{name} has no snapshot named {request.snapshot!r} (storetorrent snapshot ls {name})",
                    trailing_metadata=((ERROR_KIND_KEY, "no-such-snapshot"),),
                )
        meta = await c.run(c.writer.meta)
        reply = pb.SnapshotReply(
            file_id=c.meta.file_id,
            snapshots=[pb.SnapshotInfo(name=n, generation=g, created_at=t, owner=u) for n, g, t, u in rows],
            generation=int(meta.get("generation", 0)),
            history_from=int(meta.get("history_from", 0)),
        )
        return reply if op == "list" else await self._answered(request, "Snapshot", user, reply)

    async def MoveCopies(self, request, context):
        """rpc MoveCopies (proto/storetorrent/v1/tracker.proto): commits copies a rebalance
        moved to new holders (paper 4.4)."""
        user = await self.authenticate(context, request.user)
        name = await self._name(context, request.name)
        if not await self._here(context, name):
            return await self._forward(context, "MoveCopies", request, user, name)
        c = await self._open_committer(context, name, request.file_id)
        await self._admit(context, user, name, c, "rebalance")
        moves = [(m.name, m.copy_rank, m.from_peer_idx, m.to_peer_idx, m.stored_as, m.until) for m in request.moves]
        gen, moved, conflicts = await c.move_copies(moves)
        log.info("rebalance of %s: %d copies moved, %d conflicts, generation %d", name, moved, len(conflicts), gen)
        return pb.MoveCopiesReply(generation=gen, moved=moved, conflicts=[f"{x.name}: {x.reason}" for x in conflicts])

    async def CommitObjects(self, request, context):
        """Striped objects whose stripe records are committed become visible
        (docs/striping.md)."""
        user = await self.authenticate(context, request.user)
        name = await self._name(context, request.name)
        if not await self._here(context, name):
            return await self._forward(context, "CommitObjects", request, user, name)
        c = await self._open_committer(context, name, request.file_id)
        await self._admit(context, user, name, c, "write")
        schemas = await self._record_schemas(context, request.schemas)
        objs = await _object_rows(context, request.objects, schemas)
        gen, added, conflicts = await c.write("commit_objects", objs)
        return pb.CommitReply(
            generation=gen,
            committed=added,
            conflicts=[f"{x.name}: {x.reason}" for x in conflicts],
            conflict_names=[x.name for x in conflicts],
            conflict_kinds=[x.kind for x in conflicts],
            conflict_records=[x.record for x in conflicts],
        )

    async def StoreCopies(self, request, context):
        """Pending copies (async protocols) are stored: they join ``copies``."""
        user = await self.authenticate(context, request.user)
        name = await self._name(context, request.name)
        if not await self._here(context, name):
            return await self._forward(context, "StoreCopies", request, user, name)
        c = await self._open_committer(context, name, request.file_id)
        await self._admit(context, user, name, c, "write")
        stored = [(x.name, x.copy_rank, x.peer_idx, x.stored_as) for x in request.copies]
        gen, done, conflicts = await c.write("store_copies", stored)
        log.debug("%s: %d pending copies stored, %d conflicts, generation %d", name, done, len(conflicts), gen)
        return pb.MoveCopiesReply(generation=gen, moved=done, conflicts=[f"{x.name}: {x.reason}" for x in conflicts])


def _committed_bytes_of(writer: InfofileWriter, names: list[str]) -> int:
    """Bytes (one copy) of the committed records among ``names`` that no
    snapshot holds: what replacing them frees (a version a snapshot holds
    stays retained and counted; docs/snapshots.md, "Space")."""
    return sum(int(b) for (b,) in writer.records_among("size", names, unheld=True))


async def _not_reusing(c, rows: list[tuple], deletes: list[str]) -> list[tuple]:
    """The rows of a commit that store bytes: all of ``rows`` (the same
    list) unless some take over the copies of a record the same commit
    deletes (a compose, docs/striping.md: ``stored_as`` the stored name of
    one of ``deletes``, ``new_only``) which no snapshot holds (one a
    snapshot holds stays counted as retained, and the settlement does not
    net it out either: :func:`_committed_bytes_of`)."""
    if not deletes or not any(r[5] and r[8] for r in rows):
        return rows
    freed = await c.run(_freed_stored_names, c.writer, deletes)
    return [r for r in rows if not (r[5] and r[8] and r[5] in freed)] if freed else rows


def _freed_stored_names(writer: InfofileWriter, names: list[str]) -> set[str]:
    """The names the copies of the committed records among ``names`` that
    no snapshot holds are stored under (``coalesce(stored_as, name)``): the
    copies deleting them frees."""
    return {k for (k,) in writer.records_among("coalesce(stored_as, name)", names, unheld=True)}


def _read_peer_ids(writer: InfofileWriter) -> list[tuple[int, str]]:
    return list(writer.conn.execute("SELECT peer_idx, peer_id FROM peers"))


def snapshot_name_problem(name: str) -> str:
    """Why ``name`` cannot name a snapshot ("" if it can): 1 to 255 bytes of
    UTF-8, no control characters, no ``/``."""
    if not name:
        return "empty"
    if len(name.encode()) > 255:
        return "longer than 255 bytes"
    if "/" in name or any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        return "has a '/' or a control character"
    return ""


async def refuse_if_snapshots(context, name: str, snapshots: list[tuple]) -> None:
    """Abort a whole-file delete of ``name`` that snapshots hold
    (docs/snapshots.md, "Deletes"), naming them."""
    if snapshots:
        names = [s[0] for s in snapshots]
        await context.abort(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"{name} is held by {len(names)} snapshot(s): {', '.join(names)}; delete them first "
            f"(storetorrent snapshot delete {name} NAME)",
            trailing_metadata=((ERROR_KIND_KEY, "snapshot-held"), ("st-snapshots", "\n".join(names))),
        )


async def refuse_not_empty(context, name: str) -> None:
    """Abort a whole-file delete ``if_empty`` of ``name``, which holds a
    record: nothing was deleted (FileNotEmptyError at the client)."""
    await context.abort(
        grpc.StatusCode.FAILED_PRECONDITION,
        f"{name} holds records, so it was not deleted (if_empty: S3 DeleteBucket deletes only "
        "empty files); delete its records first, or delete it without if_empty",
        trailing_metadata=((ERROR_KIND_KEY, "file-not-empty"), ("st-file", name)),
    )


async def _check_user_meta(context, name: str, meta: bytes) -> None:
    """Abort the call (INVALID_ARGUMENT) if ``meta``, a commit's user
    metadata of ``name``, is not what :mod:`st_py.core.user_meta` encodes
    (a client checks it first; this keeps a bad one out of the infofile)."""
    why = user_meta_problem(name, meta)
    if why:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, why)


async def _object_rows(context, objects, schemas: list[tuple[str, bytes]]) -> list[tuple]:
    """The rows of ``ObjectCommit`` messages for the infofile writer
    (``commit_objects``, ``commit_replacing``): ``(name, size, stripe_size,
    stripes, crc32c, (format, schema) or None, user metadata or None)``,
    each checked (its schema among the request's, its user metadata, a
    positive stripe size); a bad one aborts the call (INVALID_ARGUMENT)."""
    if any(o.schema > len(schemas) for o in objects):
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "an object's schema is not among the request's")
    rows = [
        (
            o.name,
            o.size,
            o.stripe_size,
            o.stripes,
            o.crc32c,
            schemas[o.schema - 1] if o.schema and not ignored(o.name) else None,
            o.meta or None,
        )
        for o in objects
    ]
    for o in objects:
        await _check_user_meta(context, o.name, o.meta)
    if any(r[2] <= 0 for r in rows):
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "an object needs a positive stripe_size")
    return rows

"""The master's side of per-file trackers (paper 3.5; st_py/tracker/shards.py):
which process writes a file's infofile, and how the master's own writes to
the files of a per-file tracker reach it. A mixin of
:class:`~st_py.tracker.service.TrackerService`.

Who owns what (docs/architecture.md, "Per-file trackers"):

- a file's **infofile** has one writer, the tracker of its shard: its
  committer (the group commit, the cached meta and peerlist size), its
  writer lease and its checked record schemas live in that process only;
- the **master** owns the namespace (create, whole-file delete, list,
  directories and their modes), the peers, the users' usage, the space
  reservations and the per-file trackers themselves.

The master's writes to another tracker's file go to that tracker: a
client's Commit, CommitObjects, StoreCopies, Lease, MoveCopies or record
Delete that reaches the master is forwarded as the same request, for the
user the master authenticated (a TRACKER capability, :class:`InternalTokens`);
chmod, whole-file delete, peerlist growth, copies quarantined by a peer and
a restored infofile are FileControl requests the owner carries out on its
committer. The owner asks the master to admit every write (Admit:
permission, quota, reserved space; st_py/tracker/admission.py).
"""

from __future__ import annotations

import asyncio
import logging
import secrets

import grpc

from st_py._proto import tracker_pb2 as pb
from st_py.core import namespace
from st_py.core.infofile import InfofileReader
from st_py.errors import ERROR_KIND_KEY

from .access import AccessError, Owner, User
from .admission import Held, meta_of
from .committer import Committer
from .guard import owner_of_meta
from .rpc.parts import TrackerParts
from .shards import InternalTokens, shard_of

log = logging.getLogger("st.tracker")

FORWARD_TIMEOUT_S = 60.0

REFUSAL_CODES = {
    "quota": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "no-space": grpc.StatusCode.FAILED_PRECONDITION,
    "unauthenticated": grpc.StatusCode.UNAUTHENTICATED,
}


class Admission:
    """What one write admitted on a tracker holds until it is settled:
    ``charge`` bytes (all copies) of ``owner``, ``written`` user bytes of
    file ``file_id``'s reservation, ``on_peers`` bytes (one copy) by peer id."""

    __slots__ = ("id", "owner", "file_id", "charge", "written", "on_peers")

    def __init__(self, admit_id: str, owner: str, file_id: int, charge: int, written: int, on_peers: dict[str, int]):
        self.id, self.owner, self.file_id = admit_id, owner, file_id
        self.charge, self.written, self.on_peers = charge, written, on_peers


async def refuse(context, e: AccessError) -> None:
    """Abort the RPC with the refusal ``e`` (denied, quota, no-space, unauthenticated)."""
    code = REFUSAL_CODES.get(e.code, grpc.StatusCode.PERMISSION_DENIED)
    trailer = ((ERROR_KIND_KEY, "no-space"),) if e.code == "no-space" else ()
    await context.abort(code, str(e), trailing_metadata=trailer)


def new_internal_key(key: bytes | None) -> bytes:
    """The key trackers sign their calls to each other with: the capability
    key when there is one, else a fresh random one the master hands its
    per-file trackers (so even a development-mode tracker's internal calls
    cannot be forged)."""
    return key if key is not None else secrets.token_bytes(32)


class Routing(TrackerParts):
    """Master-side routing of file writes to their owner (see the module)."""

    epoch: str

    def _init_routing(self, key: bytes | None) -> None:
        self.shard, self.shards = 0, 1  # serve() sets shards = N + 1 when it runs N per-file trackers
        self.file_trackers = None  # FileTrackers (file_trackers.py) when it runs per-file trackers
        self.internal_key = new_internal_key(key)
        self.internal = InternalTokens(self.internal_key)
        self.epoch = secrets.token_hex(8)  # this master's start: its per-file trackers name it in Admit

    # -- who takes a file's writes -------------------------------------------
    def owner_shard(self, name: str) -> int:
        """The shard of file ``name``: 0 the master, i per-file tracker i."""
        return shard_of(name, self.shards)

    def file_tracker_of(self, name: str) -> str:
        """``host:port`` of the per-file tracker taking file ``name``'s
        writes; "" when it is this tracker (FileInfo.file_tracker)."""
        shard = self.owner_shard(name)
        if shard == self.shard or self.file_trackers is None:
            return ""
        return self.file_trackers.addr(shard)  # type: ignore[attr-defined]

    async def _here(self, context, name: str) -> bool:
        """True if this tracker writes file ``name``'s infofile; False if the
        master should hand the request to the file's per-file tracker."""
        return self.owner_shard(name) == self.shard

    async def _stub(self, context, name: str):
        shard = self.owner_shard(name)
        stub = self.file_trackers.stub(shard) if self.file_trackers is not None else None  # type: ignore[attr-defined]
        if stub is None:
            await context.abort(
                grpc.StatusCode.UNAVAILABLE, f"file tracker {shard}, which writes {name}, is restarting; try again"
            )
        return stub, shard

    async def _forward(self, context, method: str, request, user: User, name: str):
        """Hand a client's request for file ``name`` to the file's per-file
        tracker, made for ``user``; its reply or its refusal is the answer."""
        stub, shard = await self._stub(context, name)
        try:
            return await getattr(stub, method)(
                request, metadata=self.internal.metadata(user.name), timeout=FORWARD_TIMEOUT_S
            )
        except grpc.aio.AioRpcError as e:
            await context.abort(
                e.code(),
                e.details() or f"file tracker {shard}: {e.code().name}",
                trailing_metadata=tuple((k, v) for k, v in (e.trailing_metadata() or ())),
            )

    async def _control(self, context, name: str, op: str, file_id: int = 0, **fields) -> pb.FileControlReply:
        """Have the per-file tracker of file ``name`` carry out FileControl
        ``op`` (set-meta, drop, forget, add-peers, unstore) on it; its
        refusal, or its being down, aborts this RPC the same way."""
        stub, shard = await self._stub(context, name)
        req = pb.FileControlRequest(name=name, file_id=file_id, op=op, **fields)
        try:
            return await stub.FileControl(req, metadata=self.internal.metadata("master"), timeout=FORWARD_TIMEOUT_S)
        except grpc.aio.AioRpcError as e:
            await context.abort(
                e.code(),
                e.details() or f"file tracker {shard}: {e.code().name}",
                trailing_metadata=tuple((k, v) for k, v in (e.trailing_metadata() or ())),
            )
            raise  # not reached: abort raises

    async def forget_file(self, name: str) -> None:
        """Drop what this tracker, or the per-file tracker of ``name``,
        cached of file ``name`` (its committer, its peer ids): an infofile
        was put there behind the writer's back (RestoreInfofile). Best
        effort: a per-file tracker that is down has nothing cached."""
        shard = self.owner_shard(name)
        if shard == self.shard:
            self._drop_committer(name)  # type: ignore[attr-defined]
            return
        stub = self.file_trackers.stub(shard) if self.file_trackers is not None else None  # type: ignore[attr-defined]
        if stub is None:
            return
        try:
            await stub.FileControl(
                pb.FileControlRequest(name=name, op="forget"),
                metadata=self.internal.metadata("master"),
                timeout=FORWARD_TIMEOUT_S,
            )
        except grpc.aio.AioRpcError as e:
            log.warning("file tracker %d could not forget %s: %s", shard, name, e.details())

    async def _remote_owner(self, context, name: str, file_id: int = 0) -> tuple[int, Owner]:
        """(file id, owner) of another tracker's file, from its infofile
        (read-only: its meta changes only through this master's FileControl)."""
        meta = await asyncio.to_thread(_read_meta, self.root, name)
        if meta is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no StoreTorrent file {name}; was it deleted?")
        assert meta is not None  # context.abort raises
        fid = int(meta["file_id"])
        if file_id and fid != file_id:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"file {name} was deleted and created again since it was opened; reopen it",
            )
        return fid, owner_of_meta(meta)

    # -- admission (master: here; a per-file tracker overrides) ----------------
    async def _admit(
        self,
        context,
        user: User,
        name: str,
        c: Committer,
        what: str,
        size: int = 0,
        on_peers: dict[str, int] | None = None,
        request_id: str = "",
        records: int = 0,
    ) -> tuple[Owner, Admission | None]:
        """May ``user`` ``what`` (write ...) file ``name``, and may a commit of
        ``size`` user bytes (one copy; ``on_peers`` by holder) be made? The
        bytes are held from now on (:meth:`_settle` corrects them). Aborts
        the RPC with the refusal."""
        f = c.meta.copies
        try:
            o = self.admissions.admit(user, name, c.meta.file_id, c.writer_meta(), what, size, f, on_peers)
        except AccessError as e:
            await refuse(context, e)
        if not size:
            return o, None
        return o, Admission("", o.owner, c.meta.file_id, size * f, size, dict(on_peers or {}))

    async def _settle(
        self, adm: Admission | None, owner: str, file_id: int, charge: int, written: int, on_peers: dict[str, int]
    ) -> None:
        """What a write really changed: ``charge`` bytes (all copies) of
        ``owner``, ``written`` user bytes of the file's reservation,
        ``on_peers`` bytes on holders; the part ``adm`` held already is not
        counted twice."""
        dc, dw, dp = admission_deltas(adm, charge, written, on_peers)
        self.admissions.apply(owner, file_id, dc, dw, dp)

    # -- the internal RPCs ----------------------------------------------------
    async def Admit(self, request, context):
        """A per-file tracker asks to admit writes and settles earlier ones
        (st_py/tracker/admission.py)."""
        await self._internal_only(context)
        if self.shard != 0:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "only a master tracker admits writes")
        if request.master_epoch != self.epoch:  # a per-file tracker of an earlier master (an orphan)
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"file tracker {request.shard} was started by another master; it must stop",
            )
        for s in request.settled:  # refunds first: they may make room for the new commits
            self.admissions.settle(
                s.id, s.owner, s.file_id, s.charge, s.written, {p.peer_id: p.bytes for p in s.on_peers}
            )
        results = []
        for it in request.items:
            on_peers = {p.peer_id: p.bytes for p in it.on_peers}
            try:
                user = self.users.lookup(it.user)  # type: ignore[attr-defined]
                o = self.admissions.admit(
                    user,
                    it.name,
                    it.file_id,
                    meta_of(it.owner, it.group, it.mode),
                    it.what,
                    it.bytes,
                    it.copies,
                    on_peers,
                )
            except AccessError as e:
                results.append(pb.AdmitResult(id=it.id, ok=False, refusal=e.code, message=str(e)))
                continue
            if it.bytes:
                self.admissions.hold(
                    it.id,
                    Held(
                        request.shard,
                        it.name,
                        it.file_id,
                        o.owner,
                        it.request_id,
                        it.bytes * it.copies,
                        it.bytes,
                        on_peers,
                    ),
                    it.records,
                )
            results.append(pb.AdmitResult(id=it.id, ok=True))
        return pb.AdmitReply(results=results)

    async def FileControl(self, request, context):
        """Only per-file trackers carry out FileControl (the master's writes
        to their files)."""
        await self._internal_only(context)
        await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "FileControl is for per-file trackers")

    async def shard_died(self, shard: int) -> None:
        """Per-file tracker ``shard`` died and was reaped: decide what its
        unsettled admissions did before it is started again."""
        await self.admissions.resolve(shard, self.root)

    def shard_load(self, shard: int) -> tuple[int, int]:
        """(commits, records) the master admitted for ``shard``'s files."""
        load = self.admissions.load.get(shard)
        return (load.commits, load.records) if load else (0, 0)


def admission_deltas(
    adm: Admission | None, charge: int, written: int, on_peers: dict[str, int]
) -> tuple[int, int, dict[str, int]]:
    """What is left to add once what ``adm`` held is counted."""
    if adm is None:
        return charge, written, dict(on_peers)
    dp = {p: on_peers.get(p, 0) - adm.on_peers.get(p, 0) for p in set(on_peers) | set(adm.on_peers)}
    return charge - adm.charge, written - adm.written, {p: b for p, b in dp.items() if b}


def _read_meta(root, name: str) -> dict | None:
    try:
        r = InfofileReader(namespace.infofile_path(root, name))
    except (FileNotFoundError, OSError):
        return None
    try:
        return r.meta()
    finally:
        r.close()

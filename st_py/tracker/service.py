"""The tracker's gRPC servicer (proto/storetorrent/v1/tracker.proto).

Mutating operations (create, commit, delete) are serialised by the tracker,
one SQLite transaction each (paper 3: "Trackers ... serialize create, write,
and delete operations"). Reads of record metadata never come here: clients
open the infofiles read-only.
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from pathlib import Path

import grpc

from .. import capability, namespace
from .._proto import tracker_pb2 as pb
from .._proto import tracker_pb2_grpc as pb_grpc
from ..errors import BadNameError
from ..infofile import InfofileReader, InfofileWriter, create_infofile
from ..replication import copies as class_copies
from .committer import Committer
from .peers import PeerRegistry
from .scheduler import SchedulingError, schedule
from .state import TrackerState

log = logging.getLogger("st.tracker")

DEFAULT_BLOCKSIZE = 16
FILE_OPS = capability.READ | capability.WRITE | capability.DELETE


class TrackerService(pb_grpc.TrackerServicer):
    def __init__(self, root: Path, state: TrackerState, registry: PeerRegistry,
                 quota_bytes: int | None = None, key: bytes | None = None,
                 capability_ttl_s: float = 3600.0):
        self.root = root
        self.state = state
        self.registry = registry
        self.quota_bytes = quota_bytes
        self.key = key
        self.capability_ttl_s = capability_ttl_s
        self._committers: dict[str, Committer] = {}

    # -- helpers -------------------------------------------------------------
    async def _name(self, context, name: str) -> str:
        try:
            return namespace.normalize(name)
        except BadNameError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))

    def _committer(self, name: str) -> Committer | None:
        c = self._committers.get(name)
        if c is None:
            path = namespace.infofile_path(self.root, name)
            if not path.is_file():
                return None
            c = self._committers[name] = Committer(InfofileWriter(path))
        return c

    def _drop_committer(self, name: str) -> None:
        c = self._committers.pop(name, None)
        if c is not None:
            c.close()

    def _peer_msg(self, idx: int, peer_id: str, fallback_addr: str) -> pb.Peer:
        p = self.registry.get(peer_id)
        if p is None:
            return pb.Peer(peer_idx=idx, peer_id=peer_id, addr=fallback_addr, alive=False)
        return pb.Peer(peer_idx=idx, peer_id=peer_id, addr=p.addr, alive=self.registry.alive(p),
                       capacity_bytes=p.capacity_bytes, used_bytes=p.used_bytes,
                       free_bytes=p.free_bytes, records=p.records,
                       last_announce_age_s=self.registry.age(p))

    def _file_info(self, name: str) -> pb.FileInfo | None:
        """FileInfo from a read-only connection (commits run in threads)."""
        path = namespace.infofile_path(self.root, name)
        try:
            r = InfofileReader(path)
        except FileNotFoundError:
            return None
        try:
            meta = r.meta()
            peers = [self._peer_msg(idx, pid, addr) for idx, pid, addr in
                     r.conn.execute("SELECT peer_idx, peer_id, addr FROM peers ORDER BY peer_idx")]
            n, b = r.stats()
        finally:
            r.close()
        return pb.FileInfo(file_id=int(meta["file_id"]), name=name, replication=meta["replication"],
                           copies=int(meta["copies"]), infofile_path=str(path.resolve()),
                           peers=peers, generation=int(meta["generation"]),
                           blocksize=int(meta["blocksize"]), records=n, bytes=b)

    def _grant(self, info: pb.FileInfo, user: str, ops: int) -> pb.FileInfo:
        """Attach a capability for ``ops`` on the file (docs/capabilities.md)."""
        if self.key is not None and ops:
            now = time.time()
            info.capability = capability.mint(self.key, ops, info.file_id, self.capability_ttl_s, user, now)
            info.capability_expires = int(now + self.capability_ttl_s)
            info.capability_ops = ops
        return info

    # -- RPCs ----------------------------------------------------------------
    async def Create(self, request, context):
        name = await self._name(context, request.name)
        replication = request.replication or "x2"
        try:
            f = class_copies(replication)
        except BadNameError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        if self.quota_bytes is not None and request.est_size * f > self.quota_bytes:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"estimated size {request.est_size} x{f} exceeds the quota of "
                                f"{self.quota_bytes} bytes; ask for a larger quota or split the data")
        path = namespace.infofile_path(self.root, name)
        if path.exists():
            await context.abort(grpc.StatusCode.ALREADY_EXISTS,
                                f"file {name} already exists; open it, or delete it first")
        try:
            chosen = schedule(self.registry.live(), f, request.est_size)
        except SchedulingError as e:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        file_id = secrets.randbits(63) or 1
        blocksize = request.blocksize or DEFAULT_BLOCKSIZE
        meta = {"file_id": file_id, "name": name, "replication": replication, "copies": f,
                "blocksize": blocksize, "est_size": request.est_size, "created_at": time.time(),
                "owner": request.user or ""}
        try:
            create_infofile(path, meta, [(i, p.peer_id, p.addr) for i, p in enumerate(chosen)])
        except FileExistsError:
            await context.abort(grpc.StatusCode.ALREADY_EXISTS, f"file {name} already exists")
        except NotADirectoryError:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"a parent of {name} is a file, not a directory")
        self.state.add_file(name, file_id, request.user)
        log.info("created %s id=%x class=%s peers=%d", name, file_id, replication, len(chosen))
        return self._grant(self._file_info(name), request.user, FILE_OPS)

    async def Open(self, request, context):
        name = await self._name(context, request.name)
        info = self._file_info(name)
        if info is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no StoreTorrent file {name}")
        return self._grant(info, request.user, FILE_OPS)

    async def Commit(self, request, context):
        name = await self._name(context, request.name)
        c = self._committer(name)
        if c is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no StoreTorrent file {name}; was it deleted?")
        if c.meta.file_id != request.file_id:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"file {name} was deleted and created again since it was opened; reopen it")
        f = c.meta.copies
        batch = []
        for r in request.records:
            if len(r.peer_idx) != f or len(set(r.peer_idx)) != f or any(p >= c.meta.npeers for p in r.peer_idx):
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                    f"record {r.name!r}: needs {f} copies on distinct peers of the peerlist, "
                                    f"got peer indexes {list(r.peer_idx)}")
            batch.append((r.name, r.size, r.crc32c, list(r.peer_idx)))
        if self.quota_bytes is not None:
            _, used = await c.run(c.writer.stats)
            add = sum(r[1] for r in batch) * f
            if used * f + add > self.quota_bytes:
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                    f"commit of {add} bytes would exceed the quota of {self.quota_bytes} bytes")
        gen, n, conflicts = await c.commit(batch)
        return pb.CommitReply(generation=gen, committed=n,
                              conflicts=[f"{x.name}: {x.reason}" for x in conflicts])

    async def Delete(self, request, context):
        name = await self._name(context, request.name)
        c = self._committer(name)
        if c is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no StoreTorrent file {name}")
        if request.file_id and c.meta.file_id != request.file_id:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"file {name} was deleted and created again since it was opened; reopen it")
        if request.whole_file:
            n, _ = await c.run(c.writer.stats)
            self._drop_committer(name)
            os.unlink(namespace.infofile_path(self.root, name))
            self.state.remove_file(name)
            log.info("deleted file %s (%d records)", name, n)
            return pb.DeleteReply(deleted=n)
        gen, n = await c.run(c.writer.delete_records, list(request.records))
        return pb.DeleteReply(deleted=n, generation=gen)

    async def List(self, request, context):
        path = request.path or "/"
        if path.strip("/"):
            path = await self._name(context, path)
        d = namespace.dir_path(self.root, path)
        if d.is_file():
            entries = [d]
        elif d.is_dir():
            entries = sorted(e for e in d.iterdir() if not e.name.startswith(".st-"))
        else:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no such directory or file {path}")
        out = []
        for e in entries:
            full = "/" + str(e.relative_to(self.root))
            if e.is_dir():
                out.append(pb.ListEntry(name=full, is_dir=True))
                continue
            try:
                r = InfofileReader(e)
                meta = r.meta()
                n, b = r.stats()
                r.close()
            except Exception:  # not an infofile: show it, say nothing more
                out.append(pb.ListEntry(name=full))
                continue
            out.append(pb.ListEntry(name=full, file_id=int(meta["file_id"]), replication=meta["replication"],
                                    records=n, bytes=b))
        return pb.ListReply(entries=out)

    async def Announce(self, request, context):
        if not request.peer_id or not request.addr:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "announce needs peer_id and addr")
        self.registry.announce(request.peer_id, request.addr, request.capacity_bytes,
                               request.used_bytes, request.free_bytes, request.records)
        return pb.AnnounceReply(interval_s=self.registry.interval_s)

    async def ReportFailure(self, request, context):
        if self.registry.report_failed(request.addr):
            log.warning("client reports peer %s failed: %s", request.addr, request.reason)
        return pb.ReportFailureReply()

    async def _open_committer(self, context, name: str, file_id: int) -> Committer:
        c = self._committer(name)
        if c is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no StoreTorrent file {name}; was it deleted?")
        if file_id and c.meta.file_id != file_id:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"file {name} was deleted and created again since it was opened; reopen it")
        return c

    async def ExtendPeerlist(self, request, context):
        name = await self._name(context, request.name)
        c = await self._open_committer(context, name, request.file_id)
        rows = await c.add_peers([(p.peer_id, p.addr) for p in self.registry.live()])
        for idx, pid, addr in rows:
            log.info("peerlist of %s: added peer %d %s (%s)", name, idx, addr, pid)
        return self._file_info(name)

    async def MoveCopies(self, request, context):
        name = await self._name(context, request.name)
        c = await self._open_committer(context, name, request.file_id)
        moves = [(m.name, m.copy_rank, m.from_peer_idx, m.to_peer_idx) for m in request.moves]
        gen, moved, conflicts = await c.move_copies(moves)
        log.info("rebalance of %s: %d copies moved, %d conflicts, generation %d",
                 name, moved, len(conflicts), gen)
        return pb.MoveCopiesReply(generation=gen, moved=moved,
                                  conflicts=[f"{x.name}: {x.reason}" for x in conflicts])

    async def Status(self, request, context):
        peers = [self._peer_msg(0, p.peer_id, p.addr) for p in
                 sorted(self.registry.peers.values(), key=lambda p: p.addr)]
        alive = [p for p in peers if p.alive]
        return pb.StatusReply(peers=peers, files=self.state.file_count(), alive_peers=len(alive),
                              failed_peers=len(peers) - len(alive),
                              capacity_bytes=sum(p.capacity_bytes for p in alive),
                              free_bytes=sum(p.free_bytes for p in alive),
                              liveness_window_s=self.registry.window_s)

    def close(self) -> None:
        for name in list(self._committers):
            self._drop_committer(name)


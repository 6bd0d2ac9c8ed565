"""What peers tell the tracker: announces, failures, bad copies, repairs.

A part of the tracker's gRPC servicer (proto/storetorrent/v1/tracker.proto),
composed in st_py/tracker/service.py (the master) and
st_py/tracker/file_tracker.py (a per-file tracker).
"""

from __future__ import annotations

import logging
import time

import grpc

from st_py._proto import tracker_pb2 as pb
from st_py.core import capability
from st_py.core.placement import domain_text
from st_py.errors import ERROR_KIND_KEY

from ..health import RepairProgress
from .parts import TrackerParts

log = logging.getLogger("st.tracker")

FILE_OPS = capability.READ | capability.WRITE | capability.DELETE
MAX_SCHEMA_BYTES = 1 << 20  # one record schema kept in an infofile (Arrow IPC)


class PeerRpc(TrackerParts):
    """The servicer's part for peers' reports: Announce (liveness, space,
    quarantined copies), ReportFailure, ReportBadCopy, SetPeerState (drain),
    ReportRepair.

    Not thread-safe: runs on the tracker's event loop (see
    :class:`~st_py.tracker.service.TrackerService`)."""

    async def Announce(self, request, context):
        """rpc Announce (proto/storetorrent/v1/tracker.proto): a peer's periodic soft-state
        report (paper 3.3)."""
        await self._peer_token(context)
        if not request.peer_id or not request.addr:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "announce needs peer_id and addr")
        self.registry.announce(
            request.peer_id,
            request.addr,
            request.capacity_bytes,
            request.used_bytes,
            request.free_bytes,
            request.records,
            request.load,
            started_at=request.started_at,
            data_dir=request.data_dir,
            fs_id=request.fs_id,
            fs_size=request.fs_size_bytes,
            fs_free=request.fs_free_bytes,
            domain=request.domain,
        )
        self.registry.verified(request.peer_id, request.copies_verified, request.copies_bad, request.copies_quarantined)
        if request.bad_copies:
            await self._quarantined(request.peer_id, request.addr, list(request.bad_copies), context)
        reply = pb.AnnounceReply(interval_s=self.registry.interval_s)
        if request.keeps_copies:  # tell it which files name it (peer_files.py)
            r = request
            self.registry.infofile_copies(r.peer_id, r.copies, r.copies_behind, r.copies_max_lag, r.copies_caught_up_at)
            files, cursor, more = self.peer_files.changed_since(
                request.peer_id, request.copies_epoch, request.copies_cursor
            )
            reply.peer_files.extend(pb.PeerFile(file_id=f.file_id, name=f.name, generation=f.generation) for f in files)
            reply.copies_epoch, reply.copies_cursor, reply.copies_more = self.peer_files.epoch, cursor, more
            # and where the standbys serve their copies (docs/peer.md, "Copies from standbys")
            reply.standby_fetch_addrs.extend(self.oplog.backend.fetch_addrs())
        return reply

    async def _quarantined(self, peer_id: str, addr: str, bad: list, context=None) -> None:
        """Copies a peer's verifier quarantined (docs/peer.md, "Verifier"):
        each becomes a quarantined copy in its file's infofile
        (``quarantined_copies``), so reads stop using it and ``repair``
        restores it from a good copy, or reports the record lost. A file of a
        per-file tracker that is down fails the announce (UNAVAILABLE), and
        the peer reports the copies again with its next one."""
        names = {fid: name for name, fid in self.state.file_ids()}
        by_file: dict[int, list] = {}
        for b in bad:
            by_file.setdefault(b.file_id, []).append(b)
        for fid, copies in by_file.items():
            name = names.get(fid)
            for b in copies:
                self.registry.bad_copy(
                    addr,
                    f"file {name or f'{fid:016x} (deleted)'} record {b.name!r} copy rank "
                    f"{b.copy_rank}: CRC-32C mismatch, {b.detail}",
                    "peer",
                )
            if name and context is not None and not await self._here(context, name):  # its writer does it
                r = await self._control(context, name, "unstore", fid, peer_id=peer_id, bad_copies=copies)
                moved, left = r.done, list(r.conflicts)
            else:
                c = self._committer(name) if name else None
                if c is None or c.meta.file_id != fid:
                    continue
                gen, moved, conflicts = await c.write(
                    "unstore_copies", [(b.name, b.copy_rank, peer_id, b.crc32c) for b in copies]
                )
                left = [f"{x.name}: {x.reason}" for x in conflicts]
            log.warning(
                "peer %s quarantined %d bad copies of %s: %d recorded as quarantined (repair restores them)%s",
                addr,
                len(copies),
                name,
                moved,
                "; left alone: " + "; ".join(left) if left else "",
            )

    async def ReportFailure(self, request, context):
        """rpc ReportFailure (proto/storetorrent/v1/tracker.proto): a client reports a peer it
        saw fail (paper 4.3)."""
        await self.authenticate(context)
        if self.registry.report_failed(request.addr, request.reason):
            log.warning("client reports peer %s failed: %s", request.addr, request.reason)
        return pb.ReportFailureReply()

    async def ReportBadCopy(self, request, context):
        """rpc ReportBadCopy (proto/storetorrent/v1/tracker.proto): a client's checked read
        found a corrupt copy."""
        await self.authenticate(context)
        log.warning(
            "client reports a bad copy of %r in %s on %s: %s",
            request.record,
            request.file,
            request.addr or "an unknown peer",
            request.detail,
        )
        self.registry.bad_copy(
            request.addr,
            f"file {request.file} record {request.record!r}: a checked read found it corrupt ({request.detail})",
            "client",
        )
        return pb.ReportBadCopyReply()

    async def ReportRepair(self, request, context):
        """The repair service's progress: kept (the last report only) for
        Status and the status page; an admin's when a users file is in force."""
        user = await self.authenticate(context, request.user)
        if self.users.enabled and not user.admin:
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                f"user {user.name} may not report repair progress: only an admin may "
                "(the repair service stores copies of every file)",
            )
        s = request.status
        self.repair_progress = RepairProgress(
            s.repairer[:200] or "unknown",
            s.running,
            s.reason[:200],
            s.files_done,
            s.files_total,
            s.copies_stored,
            s.copies_restored,
            s.records_left,
            s.pass_seconds,
            s.passes,
        )
        return pb.ReportRepairReply()

    async def SetPeerState(self, request, context):
        """Take a peer out of service (draining, retired) or put it back
        (storetorrent drain): scheduling and peerlist growth leave out a
        peer out of service; reads are not affected."""
        user = await self.authenticate(context, request.user)
        if self.users.enabled and not user.admin:
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                f"user {user.name} may not drain peers: only an admin may (storetorrent user add NAME --admin)",
            )
        if request.drain_state not in ("", "draining", "retired"):
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"drain state {request.drain_state[:40]!r} is not draining, retired or empty",
            )
        p = self.registry.find(request.peer)
        if p is None:
            await context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"no peer {request.peer[:80]!r} has announced to this tracker",
                trailing_metadata=((ERROR_KIND_KEY, "unknown-peer"),),
            )
        await self._log_state("set_drain", p.peer_id, (request.drain_state,))
        log.info("%s set peer %s (%s) %s", user.name, p.addr, p.peer_id, request.drain_state or "in service")
        return pb.SetPeerStateReply(peer=self._peer_msg(0, p.peer_id, p.addr))

    def _peer_msg(self, idx: int, peer_id: str, fallback_addr: str) -> pb.Peer:
        p = self.registry.get(peer_id)
        if p is None:
            # not heard of since this tracker began serving: presumed alive for one liveness window
            # (as a restarted tracker presumes the peers its state knows), then failed; a standby
            # just elected knows no peer before they announce to it
            fresh = time.monotonic() - self.serving_since < self.registry.window_s
            return pb.Peer(peer_idx=idx, peer_id=peer_id, addr=fallback_addr, alive=fresh)
        return pb.Peer(
            peer_idx=idx,
            peer_id=peer_id,
            addr=p.addr,
            alive=self.registry.alive(p),
            capacity_bytes=p.capacity_bytes,
            used_bytes=p.used_bytes,
            free_bytes=max(0, p.usable_free),
            records=p.records,
            last_announce_age_s=self.registry.age(p),
            load=p.load,
            drain_state=p.drain_state,
            name=p.name,
            uptime_s=self.registry.uptime(p) if self.registry.alive(p) else 0.0,
            restarts=p.restarts,
            returns=p.returns,
            fs_id=p.fs_id,
            domain=domain_text(p.failure_domain),
            copies=p.infofile_copies,
            copies_behind=p.infofile_copies_behind,
            copies_max_lag=p.infofile_copies_max_lag,
            copies_caught_up_at=p.infofile_copies_caught_up_at,
        )

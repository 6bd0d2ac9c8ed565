"""The Status RPC: the tracker's whole view for status, the status page and metrics.

A part of the tracker's gRPC servicer (proto/storetorrent/v1/tracker.proto),
composed in st_py/tracker/service.py (the master) and
st_py/tracker/file_tracker.py (a per-file tracker).
"""

from __future__ import annotations

import logging

from st_py._proto import tracker_pb2 as pb
from st_py.core import capability

from ..health import space_totals
from .parts import TrackerParts

log = logging.getLogger("st.tracker")

FILE_OPS = capability.READ | capability.WRITE | capability.DELETE
MAX_SCHEMA_BYTES = 1 << 20  # one record schema kept in an infofile (Arrow IPC)


class StatusRpc(TrackerParts):
    """The servicer's part for Status: peers, files, repair, copy health and
    the metadata log's replicas in one reply.

    Not thread-safe: runs on the tracker's event loop (see
    :class:`~st_py.tracker.service.TrackerService`)."""

    async def Status(self, request, context):
        """rpc Status (proto/storetorrent/v1/tracker.proto): cluster summary (peers, liveness,
        space, files, records short of copies, repair)."""
        # open to everyone: peers, liveness and space, no file names
        held = self.reservations.on_peers()
        peers = [
            self._peer_msg(0, p.peer_id, p.addr) for p in sorted(self.registry.peers.values(), key=lambda p: p.addr)
        ]
        for p in peers:
            p.reserved_bytes = held.get(p.peer_id, 0)
        alive = [p for p in peers if p.alive]
        space = space_totals(self.registry)
        h = self.copy_health
        return pb.StatusReply(
            peers=peers,
            files=self.state.file_count(),
            alive_peers=len(alive),
            failed_peers=len(peers) - len(alive),
            capacity_bytes=space.capacity_bytes,
            free_bytes=space.free_bytes,
            used_bytes=space.used_bytes,
            filesystems=space.filesystems,
            liveness_window_s=self.registry.window_s,
            records_short=h.records_short,
            files_short=h.files_short,
            records_pending=h.records_pending,
            records_quarantined=h.records_quarantined,
            retained_bytes=h.retained_bytes,
            snapshots=h.snapshots,
            records_lost=h.records_lost,
            records_waiting=h.records_waiting,
            versions_short=h.versions_short,
            versions_lost=h.versions_lost,
            failed_after_s=self.failed_after_s,
            short_age_s=h.age(),
            repair=self._repair_status(),
            metadata_log=self._log_status(),
            file_trackers=self.file_trackers.status(self.shard_load) if self.file_trackers is not None else [],
        )

    def _repair_status(self) -> pb.RepairStatus:
        r = self.repair_progress
        if r is None:
            return pb.RepairStatus()
        return pb.RepairStatus(
            repairer=r.repairer,
            age_s=r.age(),
            running=r.running,
            reason=r.reason,
            files_done=r.files_done,
            files_total=r.files_total,
            copies_stored=r.copies_stored,
            copies_restored=r.copies_restored,
            records_left=r.records_left,
            pass_seconds=r.pass_seconds,
            passes=r.passes,
        )

    def _log_status(self) -> pb.MetadataLogStatus:
        """The metadata log and, with etcd, the replicated trackers (OpLog.view)."""
        v = self.oplog.view()
        r = v.get("replicas") or {}
        return pb.MetadataLogStatus(
            backend=v["backend"],
            term=v["term"],
            last_index=v["last_index"],
            applied_index=v["applied_index"],
            trackers=[
                pb.TrackerReplica(
                    addr=t["addr"],
                    role=t["role"],
                    term=t.get("term", 0),
                    host=t.get("host", ""),
                    pid=t.get("pid", 0),
                    applied_index=t.get("applied_index", 0),
                    up_s=t.get("up_s", 0.0),
                    fetch_addr=t.get("fetch", ""),
                )
                for t in r.get("trackers", [])
            ],
            members=[pb.ConsensusMember(**m) for m in r.get("members", [])],
            failovers=[pb.Failover(**f) for f in r.get("failovers", [])],
        )

"""The tracker's gRPC servicer (proto/storetorrent/v1/tracker.proto).

Mutating operations (create, commit, delete) are serialised by the tracker,
one SQLite transaction each (paper 3: "Trackers ... serialize create, write,
and delete operations"). Reads of record metadata never come here: clients
open the infofiles read-only.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import grpc
import pyarrow as pa

from st_py._proto import tracker_pb2 as pb
from st_py._proto import tracker_pb2_grpc as pb_grpc
from st_py.core import capability, namespace, user_meta
from st_py.core.copy_health import DEFAULT_FAILED_AFTER_S
from st_py.core.filters import check_filters
from st_py.core.infofile import InfofileReader
from st_py.core.placement import DEFAULT_BLOCKSIZE, DEFAULT_POLICY, check_policy, domain_text
from st_py.core.record_format import FORMATS, ignored, load_schema
from st_py.core.replication import DEFAULT_PROTOCOL, check_protocol
from st_py.core.replication import copies as class_copies
from st_py.errors import ERROR_KIND_KEY, BadMetadataError, BadNameError, MetadataTooLargeError

from .access import DEFAULT_FILE_MODE, AccessError, Owner, R, User, Users, W, may, mode_text
from .admission import Admissions, meta_of
from .apply.backends import LocalBackend
from .apply.oplog import OpLog, ReplayReport
from .apply.ops import InfofileOp
from .committer import CommitStats, Committer
from .guard import Guard, disk_mode, owner_of_meta, set_disk_mode
from .health import CopyHealth, RepairProgress, space_totals
from .infofile_fetch import changes_for, take_snapshot, unchanged_since
from .infofile_writer import (
    DEFAULT_HISTORY_AGE_S,
    InfofileWriter,
    NoSuchSnapshotError,
    SnapshotExistsError,
    clock_at,
    create_infofile,
)
from .leases import LeaseHeld, LeaseLost, Leases
from .peers import PeerRegistry
from .reservations import Reservations
from .routing import Routing
from .scheduler import SchedulingError, schedule
from .state import TrackerState
from .tracker_ops import TrackerStateOps, namespace_files

log = logging.getLogger("st.tracker")

FILE_OPS = capability.READ | capability.WRITE | capability.DELETE
MAX_SCHEMA_BYTES = 1 << 20  # one record schema kept in an infofile (Arrow IPC)


class TrackerService(Routing, pb_grpc.TrackerServicer):
    """The tracker's gRPC servicer: one method per rpc of ``service Tracker``
    (proto/storetorrent/v1/tracker.proto), over the tracker's state, peer
    registry, permission guard, reservations, leases and one
    :class:`~.committer.Committer` per open infofile; with per-file trackers
    (paper 3.5) it forwards or admits what another tracker writes (``Routing``).

    Handlers abort the RPC (``context.abort``) with a gRPC status code on a
    refusal: UNAUTHENTICATED, PERMISSION_DENIED, RESOURCE_EXHAUSTED (quota),
    NOT_FOUND, INVALID_ARGUMENT...

    Not thread-safe: every handler runs on the server's one asyncio event loop,
    where this state changes; blocking work goes to worker threads
    (``asyncio.to_thread``) that only read it."""

    history_age_s = DEFAULT_HISTORY_AGE_S  # --history-age (docs/snapshots.md, "Retention")

    def __init__(
        self,
        root: Path,
        state: TrackerState,
        registry: PeerRegistry,
        quota_bytes: int | None = None,
        key: bytes | None = None,
        capability_ttl_s: float = 3600.0,
        users: Users | None = None,
        reservation_lease_s: float = 900.0,
    ):
        self.root = root
        self._schemas_seen: set[tuple[str, bytes]] = set()  # record schemas already checked
        self.state = state
        self.registry = registry
        self.quota_bytes = quota_bytes
        self.key = key
        self.capability_ttl_s = capability_ttl_s
        self.users = users or Users()
        self.mutual_tls = False  # set by serve(): client certificates name the user
        self.guard = Guard(root, state, self.users)
        self._committers: dict[str, Committer] = {}
        self.commit_stats = CommitStats()  # of every committer (metrics)
        self._peer_ids: dict[int, dict[int, str]] = {}  # file id -> {peer_idx: peer_id}, for commits
        self._creating: dict[str, int] = {}  # names being created: RemoveDir keeps their directories
        # Space reservations of files being written (docs/replication.md)
        self.reservations = Reservations(state, reservation_lease_s)
        self.reservations.load(self._committed_bytes)
        self.guard.reserved_of = self.reservations.of_owner
        # writer leases for replacing records: replicated state, through the metadata log
        # (st_py/tracker/leases.py), so a restart or a failover keeps them
        self.leases = Leases()
        # the one place the log's operations on the tracker's own state are applied
        self.tracker_ops = TrackerStateOps(state, registry, self.leases, self.reservations)
        self._recount_usage = False  # load_checkpoint learned the files: count usage after the replay
        # every change of an infofile is appended here before it is applied (docs/metadata-log.md)
        # (serve() may put the replicated log in its place before it starts it)
        self.oplog = OpLog(LocalBackend(state.dir / "log.db"))
        # Per-file trackers (paper 3.5): who writes which infofile; commits admitted for them (routing.py)
        self._init_routing(key)
        self.admissions = Admissions(self.guard, self.reservations, registry)
        # Records short of copies, counted every few seconds (health.keep_counting, started by serve())
        self.copy_health = CopyHealth()
        # --failed-after: a peer failed this long is lost (st_py/core/copy_health.py); the Status reply carries it
        self.failed_after_s = DEFAULT_FAILED_AFTER_S
        self.repair_progress: RepairProgress | None = None  # the repair service's last report
        self.serving_since = time.monotonic()  # serve() sets it when the server starts

    # -- who is asking, and may they ---------------------------------------------
    async def authenticate(self, context, claimed: str = "") -> User:
        """The user making the RPC of ``context``: the one another tracker
        of this master vouched for (routing.py), else the one its client
        certificate (mutual TLS) or API key names, else, in development mode
        (no users file), ``claimed`` (the request's ``user`` field). Aborts
        the RPC with UNAUTHENTICATED when a users file is in force and none
        of them names a known user, or a vouching token is bad
        (docs/security.md)."""
        try:  # a call another tracker of this master made for a user it authenticated (routing.py)
            vouched = self._vouched(context)
        except capability.CapabilityError as e:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, f"internal call refused: {e}")
        cert_names = [n.decode() for n in (context.peer_identities() or [])] if self.mutual_tls else []
        try:
            if vouched is not None:
                return self.users.lookup(vouched)
            return self.users.authenticate(context.invocation_metadata(), claimed, cert_names[:1])
        except AccessError as e:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(e))
        raise AssertionError("unreachable: context.abort raises")

    async def _allowed(self, context, check, *args):
        """Run a Guard check; an AccessError aborts the RPC with its reason."""
        try:
            return check(*args)
        except AccessError as e:
            code = grpc.StatusCode.RESOURCE_EXHAUSTED if e.code == "quota" else grpc.StatusCode.PERMISSION_DENIED
            await context.abort(code, str(e))

    async def _peer_token(self, context) -> None:
        """Announces must carry a PEER capability when a key is configured."""
        if self.key is None:
            return
        token = dict(context.invocation_metadata() or ()).get("x-st-capability", "")
        try:
            cap = capability.verify(self.key, bytes.fromhex(token))
            if not cap.allows(capability.PEER):
                raise capability.CapabilityError("the capability does not allow PEER")
        except (ValueError, capability.CapabilityError) as e:
            await context.abort(
                grpc.StatusCode.UNAUTHENTICATED,
                f"announce refused: {e}; peers announce with a PEER capability signed "
                "with the tracker's key (st-peer --key-file)",
            )

    async def _fetching_peer(self, context, claimed: str) -> str:
        """The peer id of a FetchInfofile made by a peer (``claimed``, the
        request's user, is "peer:<peer_id>"), or "" for a user's. With a key
        the peer must show a PEER capability (as its announces do; aborts
        UNAUTHENTICATED otherwise) and its id is the one the capability names;
        without a key, the claim is taken only in development mode (no users
        file, where users are taken at their word too)."""
        if not claimed.startswith("peer:"):
            return ""
        if self.key is not None:
            await self._peer_token(context)  # aborts without a PEER capability
            token = dict(context.invocation_metadata() or ()).get("x-st-capability", "")
            named = capability.verify(self.key, bytes.fromhex(token)).user
            if not named.startswith("peer:"):
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, "the PEER capability names no peer")
            return named.removeprefix("peer:")
        if not self.users.enabled:
            return claimed.removeprefix("peer:")
        await context.abort(
            grpc.StatusCode.UNAUTHENTICATED,
            "a peer fetches infofiles with a PEER capability: start the tracker and its peers with a key "
            "(--key-file, docs/capabilities.md)",
        )
        raise AssertionError("unreachable: context.abort raises")

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

    async def _name(self, context, name: str) -> str:
        try:
            return namespace.normalize(name)
        except BadNameError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        raise AssertionError("unreachable: context.abort raises")

    def _committer(self, name: str) -> Committer | None:
        c = self._committers.get(name)
        if c is None:
            path = namespace.infofile_path(self.root, name)
            if not path.is_file():
                return None
            writer = InfofileWriter(path)
            writer.history_age = self.history_age_s
            c = self._committers[name] = Committer(writer, self.commit_stats, self.oplog, name)
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
        )

    def _with_reservations(self, info: pb.FileInfo | None) -> pb.FileInfo | None:
        """Fill in what is reserved: the file's own reservation and what
        every reservation holds on each of its peers (on the event loop, where
        reservations change)."""
        if info is not None:
            r = self.reservations.get(info.file_id)
            info.reserved_bytes = r.remaining if r else 0
            held = self.reservations.on_peers()
            for p in info.peers:
                p.reserved_bytes = held.get(p.peer_id, 0)
        return info

    def _file_info(self, name: str) -> pb.FileInfo | None:
        """FileInfo from a read-only connection (commits run in threads)."""
        path = namespace.infofile_path(self.root, name)
        try:
            r = InfofileReader(path)
        except FileNotFoundError:
            return None
        try:
            meta = r.meta()
            peers = [
                self._peer_msg(idx, pid, addr)
                for idx, pid, addr in r.conn.execute("SELECT peer_idx, peer_id, addr FROM peers ORDER BY peer_idx")
            ]
            n = r.count()  # not r.stats(): its byte sum reads every record's row
        finally:
            r.close()
        o = owner_of_meta(meta)
        return pb.FileInfo(
            file_id=int(meta["file_id"]),
            name=name,
            replication=meta["replication"],
            copies=int(meta["copies"]),
            infofile_path=str(path.resolve()),
            peers=peers,
            generation=int(meta["generation"]),
            blocksize=int(meta["blocksize"]),
            records=n,
            owner=o.owner,
            group=o.group,
            mode=o.mode,
            # files made before these settings existed have neither key
            protocol=meta.get("protocol", DEFAULT_PROTOCOL),
            placement=meta.get("placement", DEFAULT_POLICY),
            est_size=int(meta.get("est_size") or 0),
            filters=meta.get("filters", ""),
            key_check=meta.get("key_check", ""),
            file_tracker=self.file_tracker_of(name),
            log_position=int(meta.get("log_index") or 0),
            log_id=meta.get("log_id") or "",
        )  # redirected on open (paper 3.5)

    def _grant(self, info: pb.FileInfo, user: User, name: str) -> pb.FileInfo:
        """Attach a capability for what ``user`` may do on the file
        (docs/capabilities.md): READ if they may read it; WRITE and DELETE if
        they may write it and its owner is within quota (else
        ``write_denied`` says why)."""
        o = Owner(info.owner, info.group, info.mode)
        ops = capability.READ if may(user, o, R) else 0
        own = self.reservations.get(info.file_id)
        info.write_denied = self.guard.write_denied(user, name, o, own.remaining * own.copies if own else 0)
        if not info.write_denied:
            ops |= capability.WRITE | capability.DELETE
        if self.key is not None and ops:
            now = time.time()
            info.capability = capability.mint(self.key, ops, info.file_id, self.capability_ttl_s, user.name, now)
            info.capability_expires = int(now + self.capability_ttl_s)
        info.capability_ops = ops
        return info

    # -- RPCs ----------------------------------------------------------------
    async def Create(self, request, context):
        """rpc Create (proto/storetorrent/v1/tracker.proto): creates a file, its infofile and
        its peerlist (paper 3.3)."""
        try:
            name = namespace.normalize(request.name)
        except BadNameError:
            name = ""  # refused by _create
        with self.creating(name):
            return await self._create(request, context)

    async def _create(self, request, context):
        user = await self.authenticate(context, request.user)
        name = await self._name(context, request.name)
        replication = request.replication or "x2"
        try:
            f = class_copies(replication)
            protocol = check_protocol(request.protocol)
            filters = ",".join(check_filters(request.filters.split(",")))
            if "aes-256-gcm" in filters and len(request.key_check) != 32:
                raise BadNameError(
                    "an aes-256-gcm file needs the key's check value (st_py.core.filters.key_check); "
                    "the tracker never sees the key itself"
                )
            placement = check_policy(request.placement)
        except BadNameError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        mode = request.mode or DEFAULT_FILE_MODE
        if mode > 0o777:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"mode {mode:o} is not 0 to 0777")
        new_dirs = await self._allowed(context, self.guard.check_create, user, name)
        if self.quota_bytes is not None and request.est_size * f > self.quota_bytes:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"estimated size {request.est_size} x{f} exceeds the quota of "
                f"{self.quota_bytes} bytes; ask for a larger quota or split the data",
            )
        path = namespace.infofile_path(self.root, name)
        if path.is_dir():  # never "delete it": that would remove every file below it
            await context.abort(
                grpc.StatusCode.ALREADY_EXISTS,
                f"{name} is a directory in the namespace, not a file: create a file below it, e.g. {name}/NAME",
                trailing_metadata=((ERROR_KIND_KEY, "is-a-directory"),),
            )
        if path.exists():
            if request.request_id and await asyncio.to_thread(self._created_by, path, request.request_id, user.name):
                # a retry of a create applied before its reply was lost (a restart): answered as then
                log.info("create of %s retried (request %s): already made by it", name, request.request_id)
                return self._grant(self._with_reservations(await asyncio.to_thread(self._file_info, name)), user, name)
            await context.abort(
                grpc.StatusCode.ALREADY_EXISTS, f"file {name} already exists; open it, or delete it first"
            )
        await self._wait_for_announces(f)
        if request.est_size:
            await self._wait_for_space_reports()
        # From the quota check to the reservation nothing awaits, so the event
        # loop serialises creates (FreeLoader 4.1.1): each sees the others'
        # reservations in the quota and on the peers.
        await self._allowed(
            context,
            self.guard.check_quota,
            user.name,
            request.est_size * f,
            f"creating {name} (est. {request.est_size:,} bytes x{f})",
        )
        try:
            chosen = schedule(
                self.registry.schedulable(), f, request.est_size, self.reservations.on_peers(), self.registry.counts()
            )
        except SchedulingError as e:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION, str(e), trailing_metadata=((ERROR_KIND_KEY, e.reason),)
            )
        self._log_domains(name, f, chosen)
        file_id = self.state.new_file_id()  # never a restored file's id
        if request.est_size:
            self.reservations.add(file_id, name, user.name, f, request.est_size, [p.peer_id for p in chosen])
        blocksize = request.blocksize or DEFAULT_BLOCKSIZE
        meta = {
            "file_id": file_id,
            "name": name,
            "replication": replication,
            "copies": f,
            "blocksize": blocksize,
            "est_size": request.est_size,
            "created_at": time.time(),
            "owner": user.name,
            "group": user.group,
            "mode": f"{mode:04o}",
            "protocol": protocol,
            "placement": placement,
            "filters": filters,
            "key_check": request.key_check if "aes-256-gcm" in filters else "",
        }
        if request.request_id:
            meta["create_request"] = request.request_id  # with the file, in its first transaction
        # Owners of the new directories before they exist: a create running
        # meanwhile in the same new directory must not find it ownerless.
        self.guard.made_dirs(user, new_dirs)
        try:  # through the metadata log: a replay makes the same infofile (and the state's row)
            op = InfofileOp(
                name,
                file_id,
                "create_file",
                (meta, [(i, p.peer_id, p.addr) for i, p in enumerate(chosen)], disk_mode(mode, False)),
                time.time(),
            )
            await self.oplog.run(op.encode(), self._apply_create)
        except BaseException as e:
            self.reservations.release(file_id)
            if isinstance(e, FileExistsError):
                await context.abort(grpc.StatusCode.ALREADY_EXISTS, f"file {name} already exists")
            if isinstance(e, NotADirectoryError):
                await context.abort(
                    grpc.StatusCode.FAILED_PRECONDITION, f"a parent of {name} is a file, not a directory"
                )
            raise
        self.reservations.persist(file_id)
        for d in new_dirs:  # made with the umask's bits
            self.guard.follow_on_disk(d, self.guard.dir_owner(d).mode, True)
        log.info(
            "created %s id=%x class=%s protocol=%s placement=%s peers=%d owner=%s%s",
            name,
            file_id,
            replication,
            protocol,
            placement,
            len(chosen),
            user.name,
            f" reserved={request.est_size}x{f}" if request.est_size else "",
        )
        return self._grant(self._with_reservations(await asyncio.to_thread(self._file_info, name)), user, name)

    @staticmethod
    def _created_by(path: Path, request_id: str, user: str) -> bool:
        """Whether the infofile at ``path`` was made by Create request
        ``request_id`` of ``user`` (its meta ``create_request`` and ``owner``)."""
        try:
            r = InfofileReader(path)
        except OSError:
            return False
        try:
            meta = r.meta()
            return meta.get("create_request") == request_id and meta.get("owner") == user
        except (OSError, ValueError, sqlite3.Error):
            return False
        finally:
            r.close()

    def _log_domains(self, name: str, copies: int, chosen: list) -> None:
        """Say at create when the peerlist cannot keep a record's copies in
        distinct failure domains (docs/replication.md, "Failure domains"):
        WARNING when the live peers span more domains than it does (peers
        left out for space), INFO when the cluster has fewer than F (one,
        a single machine: nothing to say)."""
        span = len({p.failure_domain for p in chosen})
        if span >= copies:
            return
        live = len({p.failure_domain for p in self.registry.schedulable()})
        if span < min(copies, live):
            log.warning(
                "%s: its %d peers span %d failure domains, the live peers %d: peers of the others lack "
                "room, so records of class x%d may have copies in one domain",
                name,
                len(chosen),
                span,
                live,
                copies,
            )
        elif live > 1:
            log.info(
                "%s: the live peers span %d failure domains, fewer than its %d copies: records will have "
                "copies in one domain",
                name,
                live,
                copies,
            )

    async def _wait_for_space_reports(self) -> None:
        """Live peers whose free space the tracker does not know (kept by an
        older tracker's state, not announced since this one started) may
        announce before a create with an ``est_size`` is scheduled: it waits
        until they have or are no longer live (one liveness window after the
        tracker started); until they announce they count as full (issue 14)."""
        deadline = time.monotonic() + self.registry.window_s
        while any(not p.space_known for p in self.registry.live()) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    async def _wait_for_announces(self, copies: int) -> None:
        """Just after this tracker began serving (a start, a standby elected),
        peers may not have announced to it yet: a create that finds fewer
        than ``copies`` peers in service waits for them up to one liveness
        window from then, instead of refusing (the writer sees latency)."""
        deadline = self.serving_since + self.registry.window_s
        while len(self.registry.schedulable()) < copies and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    async def Open(self, request, context):
        """rpc Open (proto/storetorrent/v1/tracker.proto): a file's FileInfo (peerlist with
        liveness, capability) for a reader or writer."""
        user = await self.authenticate(context, request.user)
        name = await self._name(context, request.name)
        await self._allowed(context, self.guard.check_search, user, name)
        info = self._with_reservations(await asyncio.to_thread(self._file_info, name))
        if info is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no StoreTorrent file {name}")
        o = Owner(info.owner, info.group, info.mode)
        if not (may(user, o, R) or may(user, o, W)):
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                f"user {user.name} may not open {name} ({mode_text(o.mode)} {o.owner}:{o.group})",
            )
        info = self._grant(info, user, name)
        if not info.write_denied and may(user, o, W):
            self.reservations.renew(info.file_id)  # a writer is still at it
        return info

    async def _quota_fit(self, c, batch: list[tuple], f: int) -> tuple[int, tuple[str, int, int]]:
        """How many records of ``batch`` (in order; ``r[1]``: bytes of one
        copy, ``f`` copies) fit the quotas: the file's ``--quota-bytes`` and,
        where this tracker admits commits itself (the master), its owner's
        quota beyond the file's reservation. Returns that number and, when
        it is short of the batch, ``(scope, quota, used)`` of the quota that
        stops it (bytes, all copies). A per-file tracker leaves the owner's
        quota to the master, which refuses such a commit whole."""
        rooms: list[tuple[str, int, int, int]] = []  # (scope, quota, used, reserved part)
        if self.quota_bytes is not None:
            _, used = await c.run(c.writer.stats)
            used += await c.run(c.writer.retained_bytes)  # what snapshots keep occupies disks too
            rooms.append(("file", self.quota_bytes, used * f, 0))
        if not self.shard:
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
        f = c.meta.copies
        batch = []
        on_peer: dict[int, int] = {}  # peer_idx -> bytes of this batch it holds
        schemas = await self._record_schemas(context, request.schemas)
        for r in request.records:
            if len(r.peer_idx) != f or len(set(r.peer_idx)) != f or any(p >= c.meta.npeers for p in r.peer_idx):
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"record {r.name!r}: needs {f} copies on distinct peers of the peerlist, "
                    f"got peer indexes {list(r.peer_idx)}",
                )
            pending = set(r.pending_ranks)
            if 0 in pending or any(p >= f for p in pending):
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"record {r.name!r}: pending copy ranks {sorted(pending)} must be among "
                    f"1..{f - 1}: copy rank 0 is stored before a record is committed",
                )
            if r.schema > len(schemas):
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"record {r.name!r}: schema {r.schema} is not among the request's {len(schemas)} schemas",
                )
            await _check_user_meta(context, r.name, r.meta)
            batch.append(
                (
                    r.name,
                    r.size,
                    r.crc32c,
                    list(r.peer_idx),
                    pending,
                    r.stored_as,
                    # a name readers skip keeps none, whoever sent one: scans rely on it (readplan.py)
                    schemas[r.schema - 1] if r.schema and not ignored(r.name) else None,
                    r.logical_size if r.HasField("logical_size") else None,
                    r.new_only,
                    r.meta or None,  # the version's user metadata (st_py/core/user_meta.py)
                )
            )
        refused: list[str] = []
        quota: tuple[str, int, int] = ("", 0, 0)
        if request.partial_ok and not request.delete:  # independent records: commit those that fit
            fit, quota = await self._quota_fit(c, batch, f)
            batch, refused = batch[:fit], [r[0] for r in batch[fit:]]
            if not batch:
                return pb.CommitReply(
                    quota_refused=refused, quota_scope=quota[0], quota_bytes=quota[1], quota_used_bytes=quota[2]
                )
        names = {r[0] for r in batch}
        for r in request.records:
            if r.name in names:
                for p in r.peer_idx:
                    on_peer[p] = on_peer.get(p, 0) + r.size
        replaced = [r.name for r in request.records if r.stored_as and not r.new_only and r.name in names]
        if replaced:  # new versions: only the lease holder (MORRIS 3.2)
            await self._check_lease(context, name, c.meta.file_id, request.lease_id)
        size = sum(r[1] for r in batch)  # one copy
        add = size * f
        if self.quota_bytes is not None and not request.partial_ok:  # partial_ok: trimmed above
            _, used = await c.run(c.writer.stats)
            if used * f + add > self.quota_bytes:
                await context.abort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"commit of {add} bytes would exceed the quota of {self.quota_bytes} bytes",
                )
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
        o, adm = await self._admit(context, user, name, c, "write", size, on_peers, rid, len(batch))
        removed = removed_bytes = superseded = n = 0
        try:
            # The versions these replace stop counting (only the lease holder replaces them: no race).
            superseded = await c.run(_committed_bytes_of, c.writer, replaced) if replaced else 0
            if request.delete:  # an overwrite: the old names go in the same transaction, alone
                gen, new, conflicts, removed, removed_bytes = await c.write(
                    "commit_replacing", batch, list(request.delete)
                )
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
            size * n // whole,
            {p: b * n // whole for p, b in on_peers.items()},
        )
        return pb.CommitReply(
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
                    n, b = await c.retire(unlink=True)
                    self._committers.pop(name, None)
                    self.leases.drop(c.meta.file_id)
                    self._peer_ids.pop(c.meta.file_id, None)
                    return n, b, c.meta.file_id, c.meta.copies, owner_of_meta(c.writer_meta()).owner
                # its per-file tracker closes and unlinks it, and forgets its lease
                r = await self._control(context, name, "drop", request.file_id)
                return r.records, r.bytes, r.file_id, r.copies, r.owner

            # in the metadata log before the infofile goes: a replay never makes it again
            gone = InfofileOp(name, c.meta.file_id if here else request.file_id, "delete_file", (), time.time())
            n, b, file_id, copies, owner = await self.oplog.run(gone.encode(), drop)
            self.state.remove_file(name)
            self.reservations.release(file_id)
            self.guard.charge(owner, -b * copies)
            log.info("deleted file %s (%d records) for %s", name, n, user.name)
            return await self._answered(request, "Delete", user, pb.DeleteReply(deleted=n))
        if not here:
            return await self._forward(context, "Delete", request, user, name)
        c = await self._open_committer(context, name, request.file_id)
        o, _ = await self._admit(context, user, name, c, "delete records of")
        gen, n, b = await c.write("delete_records", list(request.records))
        await self._settle(None, o.owner, c.meta.file_id, -b * c.meta.copies, 0, {})
        return await self._answered(request, "Delete", user, pb.DeleteReply(deleted=n, generation=gen))

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

    async def List(self, request, context):
        """rpc List (proto/storetorrent/v1/tracker.proto): the namespace entries below a
        directory (or one file)."""
        user = await self.authenticate(context)
        path = request.path or "/"
        if path.strip("/"):
            path = await self._name(context, path)
        d = namespace.dir_path(self.root, path)
        if d.is_dir():
            await self._allowed(context, self.guard.check_dir, user, path, R, "list directory")
        if d.is_file():
            entries = [d]
        elif d.is_dir():
            entries = sorted(e for e in d.iterdir() if namespace.is_entry(e.name))
        else:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no such directory or file {path}")
        out = await asyncio.to_thread(self._list_entries, entries, request.names_only)
        return pb.ListReply(entries=out)

    def _list_entries(self, entries: list[Path], names_only: bool = False) -> list[pb.ListEntry]:
        """ListEntry of each path (directories, and infofiles read-only): run
        in a thread, off the event loop. ``names_only``: no record counts."""
        out = []
        for e in entries:
            full = "/" + str(e.relative_to(self.root))
            if e.is_dir():
                o = self.guard.dir_owner(full)
                out.append(pb.ListEntry(name=full, is_dir=True, owner=o.owner, group=o.group, mode=o.mode))
                continue
            try:
                r = InfofileReader(e)
                meta = r.meta()
                n, b = r.stats() if not names_only else (0, 0)
                ub = r.user_bytes() if not names_only else 0
                r.close()
            except Exception:  # not an infofile: show it, say nothing more
                out.append(pb.ListEntry(name=full))
                continue
            o = owner_of_meta(meta)
            out.append(
                pb.ListEntry(
                    name=full,
                    file_id=int(meta["file_id"]),
                    replication=meta["replication"],
                    records=n,
                    bytes=b,
                    user_bytes=ub,
                    owner=o.owner,
                    group=o.group,
                    mode=o.mode,
                )
            )
        return out

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
        return pb.AnnounceReply(interval_s=self.registry.interval_s)

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

    async def _search_allowed(self, context, user: User, name: str) -> None:
        """Refuse (PERMISSION_DENIED) a user who may not search the
        directories down to ``name`` (as Open does)."""
        await self._allowed(context, self.guard.check_search, user, name)

    async def FetchInfofile(self, request, context):
        """rpc FetchInfofile (proto/storetorrent/v1/tracker.proto; issue 40): a
        node's copy of a file's infofile brought forward by the changesets its
        writer kept since the copy's log position, or a snapshot of the
        infofile when there is no copy or the changes no longer reach back
        (st_py/tracker/infofile_fetch.py). Read permission, as Open; a peer
        (``user`` "peer:<peer_id>", st-peer --metadata fetch) authenticates as
        for announces (its PEER capability when the tracker has a key) and
        gets only the files whose peerlist names it."""
        peer_id = await self._fetching_peer(context, request.user)
        user = None if peer_id else await self.authenticate(context, request.user)
        name = await self._name(context, request.name)
        if user is not None:
            await self._search_allowed(context, user, name)
        path = namespace.infofile_path(self.root, name)
        try:
            meta = await asyncio.to_thread(_infofile_meta, path)
        except FileNotFoundError:
            meta = None
        file_id = int(meta["file_id"]) if meta is not None else 0
        if meta is None or (request.file_id and file_id != request.file_id):
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no StoreTorrent file {name}; was it deleted?")
        assert meta is not None  # context.abort raises
        o = owner_of_meta(meta)
        if peer_id:
            if peer_id not in await asyncio.to_thread(_peerlist_ids, path):
                await context.abort(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"peer {peer_id} is not in the peerlist of {name}: a peer fetches only the infofiles "
                    "of the files it serves",
                )
        elif not may(user, o, R):
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                f"user {user.name} may not read {name} ({mode_text(o.mode)} {o.owner}:{o.group})",
            )
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
        try:
            same = await asyncio.to_thread(unchanged_since, path, request, file_id)
        except FileNotFoundError:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no StoreTorrent file {name}; was it deleted?")
        if same is not None:
            yield same
            return
        snap = await asyncio.to_thread(take_snapshot, path)
        try:
            if snap.file_id != file_id:
                await context.abort(grpc.StatusCode.NOT_FOUND, f"no StoreTorrent file {name}; was it deleted?")
            log.debug("FetchInfofile %s: snapshot at generation %d", name, snap.generation)
            for m in snap.chunks():
                yield m
        finally:
            snap.discard()

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

    async def ExtendPeerlist(self, request, context):
        """rpc ExtendPeerlist (proto/storetorrent/v1/tracker.proto): adds the live peers in
        service missing from a file's peerlist (paper 4.4)."""
        user = await self.authenticate(context, request.user)
        name = await self._name(context, request.name)
        peers = [(p.peer_id, p.addr) for p in self.registry.schedulable()]
        if await self._here(context, name):
            c = await self._open_committer(context, name, request.file_id)
            await self._allowed(context, self.guard.check_file, user, name, c.writer_meta(), W, "rebalance")
            rows = await c.add_peers(peers)
            self._peer_ids.pop(c.meta.file_id, None)
        else:  # the file's per-file tracker appends them (it writes the infofile, and caches its size)
            _, o = await self._remote_owner(context, name, request.file_id)
            await self._allowed(context, self.guard.check_file, user, name, _meta(o), W, "rebalance")
            r = await self._control(
                context,
                name,
                "add-peers",
                request.file_id,
                peers=[pb.Peer(peer_id=pid, addr=addr) for pid, addr in peers],
            )
            rows = [(x.peer_idx, x.peer_id, x.addr) for x in r.added]
        for idx, pid, addr in rows:
            log.info("peerlist of %s: added peer %d %s (%s)", name, idx, addr, pid)
        return self._with_reservations(await asyncio.to_thread(self._file_info, name))

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
        if any(o.schema > len(schemas) for o in request.objects):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "an object's schema is not among the request's")
        objs = [
            (
                o.name,
                o.size,
                o.stripe_size,
                o.stripes,
                o.crc32c,
                schemas[o.schema - 1] if o.schema and not ignored(o.name) else None,
                o.meta or None,
            )
            for o in request.objects
        ]
        for o in request.objects:
            await _check_user_meta(context, o.name, o.meta)
        if any(o[2] <= 0 for o in objs):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "an object needs a positive stripe_size")
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

    async def SetMode(self, request, context):
        """chmod / chgrp / chown: the owner may change mode and group (to one
        of their groups), only an admin the owner."""
        user = await self.authenticate(context, request.user)
        name = await self._name(context, request.name) if request.name.strip("/") else "/"  # "/": the root
        if request.mode > 0o777:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"mode {request.mode:o} is not 0 to 0777")
        is_dir = namespace.dir_path(self.root, name).is_dir()
        here = is_dir or await self._here(context, name)  # another tracker's file: it writes the meta
        c = None if is_dir or not here else self._committer(name)
        if here and not is_dir and c is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no such file or directory {name}")
        file_id, o = (0, Owner("", "", 0)) if here else await self._remote_owner(context, name)
        await self._allowed(context, self.guard.check_search, user, name)
        if here:
            o = self.guard.dir_owner(name) if is_dir else owner_of_meta(c.writer_meta())
        if not user.admin and user.name != o.owner:
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED, f"only the owner ({o.owner}) or an admin may change {name}"
            )
        if request.owner and request.owner != o.owner and not user.admin:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, "only an admin may change the owner")
        if request.group and not user.admin and request.group not in user.groups + (user.name,):
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"{user.name} is not in group {request.group}")
        new = Owner(request.owner or o.owner, request.group or o.group, request.mode or o.mode)
        try:  # POSIX access to the namespace follows (paper 3.5): the bits on disk first
            set_disk_mode(
                namespace.dir_path(self.root, name) if is_dir else namespace.infofile_path(self.root, name),
                new.mode,
                is_dir,
            )
        except OSError as e:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"cannot set the permission bits of {name} in the namespace on disk "
                f"({e.strerror}); nothing was changed",
            )
        if is_dir:
            await self._log_state("set_dir", name, (new.owner, new.group, new.mode))
        else:
            values = {"owner": new.owner, "group": new.group, "mode": f"{new.mode:04o}"}
            if c is not None:
                await c.set_meta(values)
                file_id, copies = c.meta.file_id, c.meta.copies
            else:  # the file's per-file tracker writes it, so its next permission checks see it
                r = await self._control(context, name, "set-meta", file_id, meta=values)
                file_id, copies = r.file_id, r.copies
            if new.owner != o.owner:  # the stored bytes move to the new owner's account
                b = (await c.run(c.writer.stats))[1] if c is not None else r.bytes
                self.guard.charge(o.owner, -b * copies)
                self.guard.charge(new.owner, b * copies)
                self.state.add_file(name, file_id, new.owner)
                res = self.reservations.get(file_id)
                if res is not None:  # and so does the reservation
                    res.owner = new.owner
                    self.reservations.persist(res.file_id)
        log.info("%s set %s to %s %s:%s", user.name, name, mode_text(new.mode), new.owner, new.group)
        return pb.SetModeReply(owner=new.owner, group=new.group, mode=new.mode)

    async def RemoveDir(self, request, context):
        """rmdir: an empty namespace directory goes, as in UNIX with write
        (and search) permission on its parent."""
        user = await self.authenticate(context, request.user)
        if (again := self._replied(request, "RemoveDir", user, pb.RemoveDirReply)) is not None:
            return again  # a retry of an rmdir done before (a restart, a failover)
        if not request.path.strip("/"):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the namespace root cannot be removed")
        name = await self._name(context, request.path)
        await self._allowed(context, self.guard.check_search, user, name)
        d = namespace.dir_path(self.root, name)
        if not d.is_dir():
            if d.exists():
                await context.abort(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"{name} is a file, not a directory: delete it with `storetorrent rm {name}`",
                    trailing_metadata=((ERROR_KIND_KEY, "not-a-directory"),),
                )
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no such directory {name}")
        parent = name.rsplit("/", 1)[0] or "/"
        await self._allowed(context, self.guard.check_dir, user, parent, W, "delete entries in directory")
        # No await from here to the rmdir: a create that starts meanwhile
        # either is in _creating or finds the directory gone (and makes it anew).
        busy = [n for n in self._creating if n.startswith(name + "/")]
        entries = sorted(e.name for e in d.iterdir())
        if busy or entries:
            shown = [e for e in entries if not e.startswith(namespace.TMP_PREFIX)]
            what = (
                f"{len(shown)} entries: {', '.join(shown[:3])}{', ...' if len(shown) > 3 else ''}"
                if shown
                else "a file is being created in it"
            )
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"directory {name} is not empty ({what}); delete what it holds first, or "
                f"everything with `storetorrent rm -r {name}`",
                trailing_metadata=((ERROR_KIND_KEY, "not-empty"),),
            )
        try:
            os.rmdir(d)
        except OSError as e:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"cannot remove directory {name}: {e.strerror}",
                trailing_metadata=((ERROR_KIND_KEY, "not-empty"),) if e.errno == errno.ENOTEMPTY else (),
            )
        await self._log_state("remove_dir", name, ())
        log.info("%s removed directory %s", user.name, name)
        return await self._answered(request, "RemoveDir", user, pb.RemoveDirReply())

    async def _check_lease(self, context, name: str, file_id: int, lease_id: str) -> None:
        """New versions commit only under the file's live writer lease."""
        try:
            self.leases.check(file_id, lease_id)
        except LeaseLost:
            await self._lease_lost(context, name, lease_id)

    async def _lease_lost(self, context, name: str, lease_id: str) -> None:
        await context.abort(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"replacing records of {name} needs its writer lease, and lease "
            f"{lease_id or '(none)'} is not held (expired, released, or the tracker "
            "restarted); acquire it again",
            trailing_metadata=((ERROR_KIND_KEY, "lease-lost"),),
        )

    async def Lease(self, request, context):
        """Acquire, renew or release a file's writer lease (MORRIS 3.2): kept
        by the tracker that writes the file, which checks it at commit."""
        user = await self.authenticate(context, request.user)
        name = await self._name(context, request.name)
        if not await self._here(context, name):
            return await self._forward(context, "Lease", request, user, name)
        c = await self._open_committer(context, name, request.file_id)
        await self._admit(context, user, name, c, "write")
        file_id = c.meta.file_id
        if request.release:
            self.leases.release(file_id, request.lease_id)
            await self._log_lease(name, file_id, "release_lease", (request.lease_id, "", "", 0.0, ""))
            log.info("%s: writer lease released by %s", name, user.name)
            return pb.LeaseReply(lease_id=request.lease_id, expires_in_s=0.0)
        if request.lease_id:
            try:
                lease = self.leases.renew(file_id, request.lease_id, request.ttl_s)
            except LeaseLost:
                await self._lease_lost(context, name, request.lease_id)
            await self._log_lease(name, file_id, "renew_lease", Leases.op_args(lease))
            return pb.LeaseReply(lease_id=lease.lease_id, expires_in_s=lease.expires_in())
        granted = self.leases.granted_to(file_id, request.request_id)
        if granted is not None:  # a retry of an acquire granted before (a lost reply, a failover)
            log.info("%s: writer lease acquire %s retried: already granted", name, request.request_id)
            return pb.LeaseReply(lease_id=granted.lease_id, expires_in_s=granted.expires_in())
        try:
            lease = self.leases.acquire(file_id, user.name, request.holder, request.ttl_s, request.request_id)
        except LeaseHeld as e:
            held = e.lease
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"the writer lease of {name} is held by {held.holder} (user {held.user}) for "
                f"{held.expires_in():.1f} s more; only one writer may replace records at a time",
                trailing_metadata=(
                    (ERROR_KIND_KEY, "lease-held"),
                    ("st-lease-holder", held.holder),
                    ("st-lease-expires-in", f"{held.expires_in():.3f}"),
                ),
            )
        try:
            await self._log_lease(name, file_id, "grant_lease", Leases.op_args(lease))
        except BaseException:
            self.leases.release(file_id, lease.lease_id)  # never granted: nobody heard of it
            raise
        log.info("%s: writer lease granted to %s (%s) for %.1f s", name, lease.holder, user.name, lease.ttl_s)
        return pb.LeaseReply(lease_id=lease.lease_id, expires_in_s=lease.expires_in())

    async def _log_lease(self, name: str, file_id: int, kind: str, args: tuple) -> None:
        """Append the lease operation ``kind`` and apply it (the lease was
        decided in :attr:`leases` already; applying it again is what a replay
        does), before the writer hears. Raises what the log's append raises."""
        await self._log_state(kind, name, args, file_id)

    async def _log_state(self, kind: str, name: str, args: tuple, file_id: int = 0) -> None:
        """Append the operation ``kind`` on the tracker's own state (a lease,
        a directory's owner, a peer's drain state; st_py/tracker/tracker_ops.py)
        to the metadata log and apply it, before the caller hears: a restart
        or a failover keeps what it was told. Raises what the log's append raises."""

        async def apply(op: InfofileOp, index: int) -> None:
            self.tracker_ops.apply(op)

        await self.oplog.run(InfofileOp(name, file_id, kind, args, time.time()).encode(), apply)

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

    async def Close(self, request, context):
        """The creator of a file is done writing: its reservation ends."""
        user = await self.authenticate(context, request.user)
        name = await self._name(context, request.name)
        if await self._here(context, name):
            c = await self._open_committer(context, name, request.file_id)
            file_id, o = c.meta.file_id, owner_of_meta(c.writer_meta())
        else:  # reservations are the master's, whoever writes the file
            file_id, o = await self._remote_owner(context, name, request.file_id)
        await self._allowed(context, self.guard.check_file, user, name, _meta(o), W, "close")
        r = self.reservations.release(file_id)
        if r is not None:
            await self._log_state("end_reservation", name, (), file_id)  # a new leader does not hold it again
            log.info(
                "%s closed: reservation of %d bytes x%d ended, %d bytes unused", name, r.est_size, r.copies, r.remaining
            )
        return pb.CloseReply(released_bytes=r.remaining if r else 0)

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
                )
                for t in r.get("trackers", [])
            ],
            members=[pb.ConsensusMember(**m) for m in r.get("members", [])],
            failovers=[pb.Failover(**f) for f in r.get("failovers", [])],
        )

    async def RestoreInfofile(self, request_iterator, context):
        """Recovery without the namespace: an infofile from a peer's mirror
        goes back into the namespace (st_py/tracker/restore.py)."""
        from .restore import restore_infofile

        return await restore_infofile(self, request_iterator, context)

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

        await self.oplog.follow(self._writer_for, self._replay_file_op, self.tracker_ops.apply, done)

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
        finally:
            r.close()
        if op.file_id and fid != op.file_id:
            return False  # another file has the name now
        self._drop_committer(op.name)
        path.unlink(missing_ok=True)
        self.state.remove_file(op.name)
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

    def close(self) -> None:
        """Close the infofile writers of every open committer (at tracker
        shutdown; the log is closed by ``await oplog.aclose()``)."""
        for name in list(self._committers):
            self._drop_committer(name)


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


def _meta(o: Owner) -> dict:
    """The meta keys of an infofile with owner, group and mode ``o``."""
    return meta_of(o.owner, o.group, o.mode)


def _committed_bytes_of(writer: InfofileWriter, names: list[str]) -> int:
    """Bytes (one copy) of the committed records among ``names`` that no
    snapshot holds: what replacing them frees (a version a snapshot holds
    stays retained and counted; docs/snapshots.md, "Space")."""
    marks = ",".join("?" * len(names))
    try:
        held = " AND NOT EXISTS (SELECT 1 FROM snapshots s WHERE s.generation >= records.commit_seq)"
        writer.conn.execute("SELECT 1 FROM snapshots LIMIT 0")
    except Exception:  # a file without the history tables
        held = ""
    return int(
        writer.conn.execute(
            f"SELECT coalesce(sum(size), 0) FROM records WHERE name IN ({marks}){held}", names
        ).fetchone()[0]
    )


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


async def _check_user_meta(context, name: str, meta: bytes) -> None:
    """Abort the call (INVALID_ARGUMENT) if ``meta``, a commit's user
    metadata of ``name``, is not what :mod:`st_py.core.user_meta` encodes
    (a client checks it first; this keeps a bad one out of the infofile)."""
    if not meta:
        return
    try:
        user_meta.decode(name, meta)
    except (BadMetadataError, MetadataTooLargeError) as e:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))

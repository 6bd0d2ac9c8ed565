"""The namespace's RPCs: create, open, list, modes, directories, peerlists.

A part of the tracker's gRPC servicer (proto/storetorrent/v1/tracker.proto),
composed in st_py/tracker/service.py (the master) and
st_py/tracker/file_tracker.py (a per-file tracker).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import sqlite3
import time
from pathlib import Path

import grpc

from st_py._proto import tracker_pb2 as pb
from st_py.core import capability, namespace
from st_py.core.filters import check_filters
from st_py.core.infofile import InfofileReader
from st_py.core.placement import DEFAULT_BLOCKSIZE, DEFAULT_POLICY, check_policy
from st_py.core.replication import DEFAULT_PROTOCOL, check_protocol
from st_py.core.replication import copies as class_copies
from st_py.errors import ERROR_KIND_KEY, BadNameError

from ..access import DEFAULT_FILE_MODE, Owner, R, User, W, may, mode_text
from ..admission import meta_of
from ..apply.ops import InfofileOp
from ..file_quota import create_refusal
from ..guard import disk_mode, owner_of_meta, set_disk_mode
from ..scheduler import SchedulingError, schedule
from .parts import TrackerParts

log = logging.getLogger("st.tracker")

FILE_OPS = capability.READ | capability.WRITE | capability.DELETE
MAX_SCHEMA_BYTES = 1 << 20  # one record schema kept in an infofile (Arrow IPC)


class NamespaceRpc(TrackerParts):
    """The servicer's part for the master's namespace RPCs: Create, Open,
    List, SetMode, RemoveDir, ExtendPeerlist, Close (paper 3.3).

    Not thread-safe: runs on the tracker's event loop (see
    :class:`~st_py.tracker.service.TrackerService`)."""

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
        if request.in_directory:
            await self._need_directory(context, name, request.in_directory)
        mode = request.mode or DEFAULT_FILE_MODE
        if mode > 0o777:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"mode {mode:o} is not 0 to 0777")
        new_dirs = await self._allowed(context, self.guard.check_create, user, name)
        too_big = create_refusal(self.quota_bytes, request.est_size, f)
        if too_big:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, too_big)
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

    async def _need_directory(self, context, name: str, directory: str) -> None:
        """Refuse the create of ``name`` unless ``directory`` (one of its
        ancestors) exists: NOT_FOUND, kind ``no-such-directory``. The create
        is in ``_creating`` already, so a RemoveDir from here on refuses
        that directory: an S3 PUT that races DeleteBucket either finds its
        bucket or is refused, and never makes the bucket again."""
        try:
            d = namespace.normalize(directory)
        except BadNameError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"in_directory: {e}")
            raise AssertionError("unreachable: context.abort raises") from None
        if d == name or not name.startswith(d.rstrip("/") + "/"):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"in_directory {d} is not a parent of {name}")
        if not namespace.dir_path(self.root, d).is_dir():
            await context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"no such directory {d}: {name} is made only while it exists (removed meanwhile?)",
                trailing_metadata=((ERROR_KIND_KEY, "no-such-directory"), ("st-directory", d)),
            )

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

    async def List(self, request, context):
        """rpc List (proto/storetorrent/v1/tracker.proto): the namespace entries below a
        directory (or one file)."""
        user = await self.authenticate(context, request.user)
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
        out = await asyncio.to_thread(self._list_entries, entries, request.names_only, request.counts_only)
        return pb.ListReply(entries=out)

    def _list_entries(
        self, entries: list[Path], names_only: bool = False, counts_only: bool = False
    ) -> list[pb.ListEntry]:
        """ListEntry of each path (directories, and infofiles read-only): run
        in a thread, off the event loop. ``names_only``: no record counts;
        ``counts_only``: record counts without bytes."""
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
                if names_only:
                    n, b, ub = 0, 0, 0
                elif counts_only:
                    n, b, ub = r.count_names(), 0, 0
                else:
                    n, b = r.stats()
                    ub = r.user_bytes()
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
            commit_columns=True,  # CommitRequest.columns (issue 41; st_py/tracker/rpc/commit_rows.py)
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


def _meta(o: Owner) -> dict:
    """The meta keys of an infofile with owner, group and mode ``o``."""
    return meta_of(o.owner, o.group, o.mode)

"""A per-file tracker (paper 3.5): a process the master tracker spawns to take
the metadata writes of the files of one shard (st_py/tracker/shards.py),
``python -m st_py.tracker --shard I --shards N+1 --master ADDR ...``.

It is the one writer of its files' infofiles and keeps what goes with that
in its memory: their committers (group commit, cached meta and peerlist
size), their writer leases and the record schemas it checked. It serves
Commit, CommitObjects, StoreCopies, Lease, MoveCopies and Delete of records
for its files, from clients the master redirected (FileInfo.file_tracker)
and from the master itself (forwarded, for the user the master
authenticated), and FileControl, the master's own writes. Everything else,
and any file of another shard, it refuses with ``wrong-tracker``, naming
the master.

What it does not own it asks the master for (:class:`MasterLink`): each
write is admitted by the master (permission, which needs the directories'
modes; quota and reserved space, which need every file's usage), and each
commit is settled with what it really added (st_py/tracker/admission.py).
It checks API keys against the same users file and client certificates
against the same CA as the master, and its capabilities are the master's
key's (it mints none).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import secrets
import signal
from pathlib import Path
from typing import Any

import grpc

from st_py._proto import tracker_pb2 as pb
from st_py._proto import tracker_pb2_grpc as pb_grpc
from st_py.errors import FileNotEmptyError
from st_py.wire.tls import SERVER_OPTIONS, server_credentials

from .access import AccessError, Owner, User, Users
from .apply.backends import EtcdBackend, LocalBackend
from .apply.oplog import KEEP_S, OpLog
from .committer import Committer
from .file_trackers import channel_to, master_pid_watch
from .guard import owner_of_meta
from .infofile_writer import DEFAULT_HISTORY_AGE_S
from .leases import Leases
from .lock import TrackerLock
from .log.errors import LogError
from .routing import Admission, admission_deltas, refuse
from .rpc.fetch_rpc import FetchRpc
from .rpc.identity import Identity
from .rpc.infofiles import Infofiles
from .rpc.leases_rpc import LeaseRpc
from .rpc.log_apply import LogApply
from .rpc.records_rpc import RecordRpc, refuse_if_snapshots, refuse_not_empty
from .shards import InternalTokens, shard_of
from .tracker_ops import TrackerStateOps

log = logging.getLogger("st.tracker")

ADMIT_TIMEOUT_S = 30.0
DONE_FLUSH_S = 1.0  # admissions done are reported at least this often
DONE_BATCH = 1024  # ... or once this many wait

# The RPCs only a master serves: a per-file tracker refuses them (wrong-tracker).
MASTER_ONLY = (
    "Create",
    "Open",
    "List",
    "Announce",
    "ReportFailure",
    "ReportBadCopy",
    "Status",
    "ExtendPeerlist",
    "SetMode",
    "Close",
    "RemoveDir",
    "SetPeerState",
    "ReportRepair",
    "Admit",
)


class MasterLink:
    """A per-file tracker's calls to its master: admissions and settlements,
    as few RPCs as possible. Requests that arrive while one Admit RPC is in
    flight go together in the next one (as commits do in a group commit),
    so under load the master sees one small RPC per group of concurrent
    commits."""

    def __init__(
        self,
        master: str,
        shard: int,
        tokens: InternalTokens,
        creds: grpc.ChannelCredentials | None = None,
        epoch: str = "",
    ):
        self.master, self.shard, self._tokens, self.epoch = master, shard, tokens, epoch
        self._channel = channel_to(master, creds)
        self._stub = pb_grpc.TrackerStub(self._channel)
        self._items: list[tuple[pb.AdmitItem, asyncio.Future]] = []
        self._settled: list[tuple[pb.Settlement, asyncio.Future]] = []
        self._done: list[str] = []  # admissions that added just what they held (done())
        self._sender: asyncio.Task | None = None
        self._ids = itertools.count(1)
        self._prefix = f"{shard}-{secrets.token_hex(4)}-"  # admission ids unique across restarts
        self.rpcs = 0  # Admit RPCs sent (its metrics, the benchmark)

    def new_id(self) -> str:
        """A fresh admission id."""
        return f"{self._prefix}{next(self._ids)}"

    async def admit(self, item: pb.AdmitItem) -> pb.AdmitResult:
        """The master's answer to ``item``.

        Raises
        ------
        grpc.aio.AioRpcError
            The master could not be asked (it may have admitted it: settle
            the id with the whole amount back, which it ignores if not).
        """
        fut = asyncio.get_running_loop().create_future()
        self._items.append((item, fut))
        self._kick()
        return await fut

    async def settle(self, s: pb.Settlement) -> None:
        """Report ``s`` to the master (raises as :meth:`admit`)."""
        fut = asyncio.get_running_loop().create_future()
        self._settled.append((s, fut))
        self._kick()
        await fut

    def done(self, admit_id: str) -> None:
        """Admission ``admit_id`` added just what it held: the master may
        forget it. Not sent by itself: it goes with the next Admit RPC, or
        within ``DONE_FLUSH_S`` when none comes (:meth:`flush_done`); if this
        tracker dies first, its master finds the commit applied in the
        infofile."""
        self._done.append(admit_id)
        if len(self._done) >= DONE_BATCH:
            self._kick()

    async def flush_done(self) -> None:
        """Send the admissions done but not reported yet, every
        ``DONE_FLUSH_S`` seconds, so the master does not hold them long."""
        while True:
            await asyncio.sleep(DONE_FLUSH_S)
            if self._done:
                self._kick()

    def _kick(self) -> None:
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._send())

    async def _send(self) -> None:
        while self._items or self._settled or self._done:
            items, self._items = self._items, []
            settled, self._settled = self._settled, []
            done, self._done = self._done, []
            self.rpcs += 1
            try:
                reply = await self._stub.Admit(
                    pb.AdmitRequest(
                        shard=self.shard,
                        master_epoch=self.epoch,
                        items=[i for i, _ in items],
                        settled=[s for s, _ in settled] + [pb.Settlement(id=d) for d in done],
                    ),
                    metadata=self._tokens.metadata(f"file-tracker-{self.shard}"),
                    timeout=ADMIT_TIMEOUT_S,
                )
            except grpc.aio.AioRpcError as e:
                for _, f in [*items, *settled]:
                    if not f.done():
                        f.set_exception(e)
                self._done[:0] = done  # the master may not have them: again with the next
                if not (self._items or self._settled):
                    return
                continue
            for (_, f), r in zip(items, reply.results):
                if not f.done():
                    f.set_result(r)
            for _, g in settled:
                if not g.done():
                    g.set_result(None)

    async def close(self) -> None:
        """Close the channel to the master."""
        await self._channel.close()


class FileTrackerService(
    Identity,
    Infofiles,
    RecordRpc,
    LeaseRpc,
    FetchRpc,
    LogApply,
    pb_grpc.TrackerServicer,
):
    """The servicer of a per-file tracker: the parts of
    :class:`~st_py.tracker.service.TrackerService` that write a file's
    records (st_py/tracker/rpc/: who is asking, the open infofiles, commits,
    leases, fetches, the log), for the files of shard ``shard`` of
    ``shards``, with admission by the master at ``master`` through ``link``;
    the master's RPCs (``MASTER_ONLY``) are refused with wrong-tracker.

    Not thread-safe: runs on its server's event loop."""

    def __init__(
        self,
        root: Path,
        shard: int,
        shards: int,
        master: str,
        link: MasterLink,
        internal_key: bytes,
        quota_bytes: int | None = None,
        key: bytes | None = None,
        users: Users | None = None,
        oplog: OpLog | None = None,
    ):
        # Only the writer's state: the namespace, peers, usage and reservations are the master's.
        if oplog is None:
            raise ValueError("a per-file tracker needs its shard's metadata log (serve_file_tracker opens it)")
        self._init_identity(key, users, 0.0)  # it mints no capabilities
        # this shard's metadata log (every change of its infofiles goes through it) and its leases (kept
        # in that log across its restarts)
        self._init_infofiles(root, oplog, Leases())
        self.quota_bytes = quota_bytes
        self.tracker_ops = TrackerStateOps(None, None, self.leases)  # leases and replies: the rest is the master's
        self.shard, self.shards = shard, shards
        self.file_trackers = None
        self.internal_key = internal_key
        self.internal = InternalTokens(internal_key)
        self.master, self.link = master, link
        self._background: set[asyncio.Future] = set()

    async def _here(self, context, name: str) -> bool:
        if shard_of(name, self.shards) != self.shard:
            await self._wrong_tracker(context, name, self.master)
        return True

    async def _search_allowed(self, context, user, name: str) -> None:
        """Directories are the master's: it checked them at Open; here the
        file must be this shard's (else wrong-tracker)."""
        await self._here(context, name)

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
        """As the master's, asking the master (one Admit item)."""
        o = owner_of_meta(c.writer_meta())
        f = c.meta.copies
        peers = dict(on_peers or {})
        item = pb.AdmitItem(
            id=self.link.new_id() if size else "",
            user=user.name,
            name=name,
            file_id=c.meta.file_id,
            owner=o.owner,
            group=o.group,
            mode=o.mode,
            what=what,
            bytes=size,
            copies=f,
            request_id=request_id,
            records=records,
            on_peers=[pb.PeerBytes(peer_id=p, bytes=b) for p, b in peers.items()],
        )
        try:
            r = await self.link.admit(item)
        except grpc.aio.AioRpcError as e:
            if size:  # it may have been admitted before the reply was lost: give it back
                task = asyncio.ensure_future(self._cancel(item))
                self._background.add(task)  # kept until done (the loop holds tasks weakly)
                task.add_done_callback(self._background.discard)
            await context.abort(
                grpc.StatusCode.UNAVAILABLE,
                f"the master tracker {self.master}, which admits writes, is unreachable ({e.code().name}); try again",
            )
        if not r.ok:
            await refuse(context, AccessError(r.refusal, r.message))
        if not size:
            return o, None
        return o, Admission(item.id, o.owner, c.meta.file_id, size * f, size, peers)

    async def _cancel(self, item: pb.AdmitItem) -> None:
        try:
            await self.link.settle(
                pb.Settlement(
                    id=item.id,
                    owner=item.owner,
                    file_id=item.file_id,
                    charge=-item.bytes * item.copies,
                    written=-item.bytes,
                    on_peers=[pb.PeerBytes(peer_id=p.peer_id, bytes=-p.bytes) for p in item.on_peers],
                )
            )
        except grpc.aio.AioRpcError:
            pass  # the master is gone: a new one counts usage from the infofiles

    async def _settle(
        self, adm: Admission | None, owner: str, file_id: int, charge: int, written: int, on_peers: dict[str, int]
    ) -> None:
        dc, dw, dp = admission_deltas(adm, charge, written, on_peers)
        if not (dc or dw or dp):  # just what was admitted (the common case), or nothing
            if adm is not None:
                self.link.done(adm.id)
            return
        try:
            await self.link.settle(
                pb.Settlement(
                    id=adm.id if adm else "",
                    owner=owner,
                    file_id=file_id,
                    charge=dc,
                    written=dw,
                    on_peers=[pb.PeerBytes(peer_id=p, bytes=b) for p, b in dp.items()],
                )
            )
        except grpc.aio.AioRpcError as e:
            log.warning(
                "could not settle a commit to file %x with the master (%s): its owner's usage is off by "
                "%d bytes until the master restarts",
                file_id,
                e.code().name,
                dc,
            )

    async def Delete(self, request, context):
        """Records of one of its files (a whole file is the master's:
        wrong-tracker)."""
        if request.whole_file:  # a namespace change: the master's
            await self._wrong_tracker(context, request.name, self.master)
        return await super().Delete(request, context)

    def _reload_reservations(self) -> None:
        """Nothing: reservations are the master's."""

    def _drop_reservation(self, file_id: int) -> None:
        """Nothing: reservations are the master's."""

    async def FileControl(self, request, context):
        """The master's own writes to one of this tracker's files."""
        await self._internal_only(context)
        name = await self._name(context, request.name)
        await self._here(context, name)
        op = request.op
        if op == "forget":
            c = self._committers.pop(name, None)
            if c is not None:
                self._peer_ids.pop(c.meta.file_id, None)
                await c.aclose()
            return pb.FileControlReply()
        if op == "unstore":  # lenient: a file gone or made anew since the peer's report has nothing to do
            c = self._committer(name)
            if c is None or (request.file_id and c.meta.file_id != request.file_id):
                return pb.FileControlReply(conflicts=[f"{name}: the file is gone"])
            gen, done, conflicts = await c.write(
                "unstore_copies", [(b.name, b.copy_rank, request.peer_id, b.crc32c) for b in request.bad_copies]
            )
            return pb.FileControlReply(
                file_id=c.meta.file_id,
                generation=gen,
                done=done,
                conflicts=[f"{x.name}: {x.reason}" for x in conflicts],
            )
        c = await self._open_committer(context, name, request.file_id)
        reply = pb.FileControlReply(
            file_id=c.meta.file_id, copies=c.meta.copies, owner=owner_of_meta(c.writer_meta()).owner
        )
        if op == "set-meta":
            await c.set_meta(dict(request.meta))
            reply.records, reply.bytes = await c.run(c.writer.stats)
        elif op in ("drop", "drop-if-empty"):  # after the transactions queued before it; none after (Committer.retire)
            await refuse_if_snapshots(context, name, await c.run(c.writer.snapshots))
            try:
                reply.records, reply.bytes = await c.retire(unlink=True, if_empty=op == "drop-if-empty")
            except FileNotEmptyError:
                await refuse_not_empty(context, name)
            self._committers.pop(name, None)
            self.leases.drop(c.meta.file_id)
            self._peer_ids.pop(c.meta.file_id, None)
            log.info("deleted file %s (%d records) for the master", name, reply.records)
        elif op == "add-peers":
            rows = await c.add_peers([(p.peer_id, p.addr) for p in request.peers])
            self._peer_ids.pop(c.meta.file_id, None)
            reply.added.extend(pb.Peer(peer_idx=i, peer_id=pid, addr=addr) for i, pid, addr in rows)
        else:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown FileControl op {op[:40]!r}")
        return reply

    def close(self) -> None:
        """Close every infofile writer (at exit)."""
        for name in list(self._committers):
            self._drop_committer(name)


def _refuse_here(method: str):
    async def handler(self, request, context):
        name = getattr(request, "name", "") or getattr(request, "path", "")
        await self._wrong_tracker(context, name or "(none)", self.master)

    handler.__name__ = method
    handler.__doc__ = f"A master's RPC: a per-file tracker refuses {method} (wrong-tracker)."
    return handler


for _m in MASTER_ONLY:
    setattr(FileTrackerService, _m, _refuse_here(_m))


async def RestoreInfofile(self, request_iterator, context):  # noqa: N802 (the RPC's name)
    """A master's RPC (streaming): a per-file tracker refuses it."""
    await self._wrong_tracker(context, "(a restored infofile)", self.master)


FileTrackerService.RestoreInfofile = RestoreInfofile  # type: ignore[method-assign]


INTERNAL_KEY_ENV = "ST_TRACKER_INTERNAL_KEY"  # hex: the key of internal calls when the trackers have no --key-file


async def serve_file_tracker(
    root: Path,
    state_dir: Path,
    host: str,
    port: int,
    shard: int,
    shards: int,
    master: str,
    master_pid: int,
    internal_key: bytes,
    key: bytes | None = None,
    users: Users | None = None,
    quota_bytes: int | None = None,
    tls: tuple[str, str, str | None] | None = None,
    creds: grpc.ChannelCredentials | None = None,
    epoch: str = "",
    history_age_s: float = DEFAULT_HISTORY_AGE_S,
    log_backend: EtcdBackend | None = None,
    log_keep_s: float = KEEP_S,
) -> None:
    """Run per-file tracker ``shard`` of ``shards`` for the master at
    ``master`` (process ``master_pid``) until SIGTERM/SIGINT, until the
    master is gone, or (``log_backend``, its shard's log in etcd) until an
    append is fenced: another tracker was elected. Prints ``listening on
    HOST:PORT`` once it serves. Without ``log_backend`` its log is
    ``state_dir/log-<shard>.db``.

    Raises
    ------
    TrackerLockedError
        Another process serves this shard (its lock in ``state_dir``).
    SystemExit
        Its log cannot be opened, or its master no longer leads.
    """
    lock = TrackerLock([state_dir], name=f".st-file-tracker-{shard}.lock")
    link = MasterLink(master, shard, InternalTokens(internal_key), creds, epoch)
    service = FileTrackerService(
        root.resolve(),
        shard,
        shards,
        master,
        link,
        internal_key,
        quota_bytes,
        key,
        users,
        oplog=OpLog(log_backend or LocalBackend(state_dir / f"log-{shard}.db"), log_keep_s),
    )
    service.mutual_tls = bool(tls and tls[2])
    service.history_age_s = history_age_s
    try:
        await service.oplog.start()
    except (LogError, TimeoutError) as e:
        raise SystemExit(f"file tracker {shard}: metadata log ({service.oplog.backend.describe}): {e}") from None
    await service.replay_log()  # what the infofiles miss of the log, before anything is served
    server = grpc.aio.server(options=SERVER_OPTIONS)
    pb_grpc.add_TrackerServicer_to_server(service, server)
    bound = (
        server.add_secure_port(f"{host}:{port}", server_credentials(*tls))
        if tls
        else server.add_insecure_port(f"{host}:{port}")
    )
    try:
        if bound == 0:
            raise SystemExit(f"file tracker {shard}: cannot listen on {host}:{port}")
        await server.start()
        lock.serving(f"{host}:{bound}")
        print(f"listening on {host}:{bound}", flush=True)
        log.info(
            "file tracker %d of %d serving %s on %s:%d for master %s", shard, shards - 1, root, host, bound, master
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        orphan: asyncio.Future[None] = asyncio.ensure_future(master_pid_watch(master_pid)())
        flusher = asyncio.create_task(link.flush_done())
        stopped: asyncio.Future[Any] = asyncio.create_task(stop.wait())
        fenced: asyncio.Future[Any] = asyncio.create_task(service.oplog.fenced.wait())
        done, _ = await asyncio.wait({orphan, stopped, fenced}, return_when=asyncio.FIRST_COMPLETED)
        if orphan in done:
            log.warning("file tracker %d: master %d is gone; stopping", shard, master_pid)
        if fenced in done:
            log.warning("file tracker %d: term %d ended (another tracker leads): stopping", shard, service.oplog.term)
        orphan.cancel()
        stopped.cancel()
        fenced.cancel()
        flusher.cancel()
        await server.stop(grace=0.2)
        service.close()
        await service.oplog.aclose()
        await link.close()
    finally:
        lock.release()


def _shard_log(a) -> EtcdBackend | None:
    """With ``--etcd`` (passed on by a master whose log is there): the log of
    shard ``a.shard`` in etcd, fenced by the master's term ``--master-term``."""
    if not a.etcd:
        return None
    endpoints = [e.strip() for e in a.etcd.split(",") if e.strip()]
    return EtcdBackend(endpoints, a.cluster_id, "", shard=a.shard, term=a.master_term)


def run_file_tracker(a, key: bytes | None, users: Users, tls) -> None:
    """``python -m st_py.tracker --shard I ...`` (started by a master, never
    by hand): parsed options ``a`` of st_py.tracker.server.main."""
    hexkey = os.environ.pop(INTERNAL_KEY_ENV, "")
    internal_key = key if key is not None else bytes.fromhex(hexkey) if hexkey else None
    if internal_key is None:
        raise SystemExit(
            f"file tracker {a.shard}: no key for the calls between trackers (--key-file, or "
            f"${INTERNAL_KEY_ENV} from its master)"
        )
    name = f"st.tracker.file-{a.shard}"

    class _Name(logging.Filter):  # its lines say which process wrote them (they share the master's stderr)
        def filter(self, record: logging.LogRecord) -> bool:
            if record.name == "st.tracker":
                record.name = name
            return True

    for h in logging.getLogger().handlers:
        h.addFilter(_Name())
    from .file_trackers import internal_credentials
    from .lock import TrackerLockedError

    try:
        creds = internal_credentials(tls, a.tracker_ca, a.tracker_cert, a.tracker_key)
        asyncio.run(
            serve_file_tracker(
                a.root,
                a.state_dir or a.root.resolve().parent / "tracker-state",
                a.host,
                a.port,
                a.shard,
                a.shards,
                a.master,
                a.master_pid,
                internal_key,
                key,
                users,
                a.quota_bytes,
                tls,
                creds,
                a.master_epoch,
                a.history_age,
                _shard_log(a),
                a.log_keep,
            )
        )
    except (TrackerLockedError, ValueError) as e:
        raise SystemExit(f"file tracker {a.shard}: {e}") from None


__all__ = ["FileTrackerService", "MasterLink", "serve_file_tracker", "run_file_tracker"]

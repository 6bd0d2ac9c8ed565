"""The client side of the tracker's gRPC service, with errors mapped to
StoreTorrent exceptions that say what to do."""

from __future__ import annotations

import builtins
import getpass
import os
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import grpc

from st_py._proto import tracker_pb2 as pb
from st_py._proto import tracker_pb2_grpc as pb_grpc
from st_py.core.namespace import normalize
from st_py.errors import (
    ERROR_KIND_KEY,
    BadNameError,
    DirectoryNotEmptyError,
    DirectoryNotFoundError,
    FileNotEmptyError,
    FileTrackerGoneError,
    LeaseHeldError,
    LeaseLostError,
    NoSpaceError,
    NotAuthenticatedError,
    NotEnoughPeersError,
    PermissionDeniedError,
    QuotaExceededError,
    ReplicaBehindError,
    SnapshotExistsError,
    SnapshotHeldError,
    SnapshotNotFoundError,
    StFileExistsError,
    StFileNotFoundError,
    StIsADirectoryError,
    StoreTorrentError,
    TrackerBusyError,
    TrackerError,
    TrackerMovedError,
    TrackerUnavailableError,
    UnknownPeerError,
)
from st_py.wire import tls as tlsmod
from st_py.wire.call_pool import CallPool
from st_py.wire.targets import addresses

DEFAULT_TIMEOUT = 30.0

# RPCs that only read: retried on a failed connection within the call's
# deadline (a repeat changes nothing). Writes are not retried here: Commit's
# own retries carry a request id (st_py.client.group_commit).
RETRY_SAFE = frozenset({"Open", "List", "Status"})
# Replies that carry the generation their change made (for a local copy of the infofile to reach)
GENERATION_REPLIES = frozenset({"Commit", "CommitObjects", "Delete", "MoveCopies", "StoreCopies"})
# How long a read keeps retrying while nothing accepts connections at the
# tracker's address (a restart's gap), before it says "unreachable"; with
# several tracker addresses (replicated trackers, issue 39) it waits as long
# as a write, RESTART_GRACE: a failover takes seconds, and one is expected.
RECONNECT_GRACE = 1.0
# How long a write that carries a request id (Create) keeps retrying while
# nothing accepts connections: a supervised restart of the tracker (issue 39)
# is latency for it, not an error.
RESTART_GRACE = 10.0
# How long a call to a per-file tracker (paper 3.5) retries while nothing
# accepts connections at its address before it says the file's writes may
# have moved (TrackerMovedError): its master restarts it on the same port
# within about this, while after a failover the new leader's per-file trackers
# listen elsewhere; the caller asks the master again (FileContext.relocate).
MOVED_AFTER_S = 2.0
PROBE_TIMEOUT = 0.5  # seconds for the TCP probe that tells busy from unreachable


def accepts_connections(address: str, timeout: float = PROBE_TIMEOUT) -> bool:
    """Whether a TCP connection to ``address`` (``host:port``, ``[v6]:port``,
    or several of them: any) opens within ``timeout`` seconds: something
    listens there (a running tracker, busy or not). False when refused,
    timed out or unresolvable."""
    for one in addresses(address):
        host, _, port = one.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]") or "localhost", int(port)), timeout=timeout):
                return True
        except (OSError, ValueError):
            continue
    return False


def current_user() -> str:
    """The OS user name, or '' if it cannot be found."""
    try:
        return getpass.getuser()
    except Exception:
        return ""


class TrackerClient:
    """A connection to the tracker at ``address`` (``host:port``); over TLS
    when ``tls`` = (CA, client cert, client key) or ``$STORETORRENT_TLS_CA``
    gives a CA (st_py.wire.tls)."""

    def __init__(
        self,
        address: str,
        timeout: float = DEFAULT_TIMEOUT,
        api_key: str | None = None,
        tls: tuple[str | None, str | None, str | None] = (None, None, None),
    ):
        self.address = address
        self.timeout = timeout
        self.user = current_user()
        api_key = api_key or os.environ.get("STORETORRENT_API_KEY", "")
        self._api_key, self._tls = api_key, tls
        self._metadata = (("authorization", f"Bearer {api_key}"),) if api_key else ()
        self._channel = tlsmod.channel(address, *tls)  # TLS with a CA (argument or $STORETORRENT_TLS_CA)
        self._stub = pb_grpc.TrackerStub(self._channel)
        self._calls = CallPool()  # commit_async, store_copies_async (st_py/wire/call_pool.py)
        self._others: dict[str, TrackerClient] = {}  # per-file trackers (at())
        # where this client's infofile copies are (metadata="fetch", st_py/client/infofile_copies.py):
        # None reads the tracker's infofiles on the shared namespace mount
        self.locator: Any = None
        # replicated trackers: a read waits out a failover (RESTART_GRACE), not RECONNECT_GRACE
        self._read_grace = RESTART_GRACE if len(addresses(address)) > 1 else RECONNECT_GRACE
        self.per_file = False  # a per-file tracker's client (at()): its address may stop serving the file

    def at(self, address: str) -> "TrackerClient":
        """A client of the tracker at ``address`` (``host:port``) with this
        one's user, API key, TLS and timeout: a per-file tracker a file's
        writes are redirected to (FileInfo.file_tracker, paper 3.5); this
        client itself for "" or its own address. Made once per address and
        closed with this client."""
        if not address or address == self.address:
            return self
        other = self._others.get(address)
        if other is None:
            other = self._others[address] = TrackerClient(address, self.timeout, self._api_key or None, self._tls)
            other.per_file = True
            other.user = self.user
            other.locator = self.locator
        return other

    def map_error(self, e: grpc.RpcError, method: str, timeout: float | None = None) -> Exception:
        """The StoreTorrent exception for a failed RPC (``timeout``: the
        call's deadline in seconds, None: the client's)."""
        code, detail = e.code(), e.details()
        trailer = dict(e.trailing_metadata() or ())
        kind = trailer.get(ERROR_KIND_KEY)
        if kind == "snapshot-exists":
            return SnapshotExistsError(detail)
        if kind == "no-such-snapshot":
            return SnapshotNotFoundError(detail)
        if kind == "snapshot-held":
            return SnapshotHeldError(detail, snapshots=[s for s in trailer.get("st-snapshots", "").split("\n") if s])
        if code == grpc.StatusCode.NOT_FOUND:
            if kind == "unknown-peer":
                return UnknownPeerError(detail)
            if kind == "no-such-directory":
                return DirectoryNotFoundError(detail, trailer.get("st-directory", ""))
            return StFileNotFoundError(detail)
        if code == grpc.StatusCode.ALREADY_EXISTS:
            if kind == "is-a-directory":
                return StIsADirectoryError(detail)
            return StFileExistsError(detail)
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            return BadNameError(detail)
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            return QuotaExceededError(detail)
        if code == grpc.StatusCode.PERMISSION_DENIED:
            return PermissionDeniedError(detail)
        if code == grpc.StatusCode.UNAUTHENTICATED:
            return NotAuthenticatedError(detail)
        if kind == "lease-held":
            return LeaseHeldError(
                detail,
                holder=trailer.get("st-lease-holder", ""),
                expires_in=float(trailer.get("st-lease-expires-in", 0.0)),
            )
        if kind == "lease-lost":
            return LeaseLostError(detail)
        if kind == "no-space":
            return NoSpaceError(detail)
        if kind == "not-enough-peers":
            return NotEnoughPeersError(detail)
        if kind == "not-empty":
            return DirectoryNotEmptyError(detail)
        if kind == "file-not-empty":
            return FileNotEmptyError(detail, trailer.get("st-file", ""))
        if kind == "replica-behind":  # a standby's infofile port (st_py/tracker/rpc/standby_fetch.py)
            return ReplicaBehindError(detail, address=self.address)
        if kind == "wrong-tracker":
            return TrackerMovedError(detail, tracker=trailer.get("st-tracker", ""))
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            return self.unavailable(code, detail, method, timeout or self.timeout)
        return TrackerError(f"tracker {method} failed: {code.name}: {detail}")

    def unavailable(self, code: grpc.StatusCode, detail: str, method: str, timeout: float) -> TrackerUnavailableError:
        """The error for an RPC that got no answer: :class:`TrackerBusyError`
        when the deadline passed and the tracker's port accepts connections
        (running but busy), else :class:`TrackerUnavailableError` (busy
        False: nothing answers at its address). Probes the port (at most
        ``PROBE_TIMEOUT`` seconds)."""
        if code == grpc.StatusCode.DEADLINE_EXCEEDED and accepts_connections(self.address):
            return TrackerBusyError(
                f"tracker at {self.address} is running but did not answer {method} within {timeout:g} s "
                "(busy, or its process is stopped); retry later, give the client a longer timeout "
                "(TrackerClient(timeout=...)), or lower the load on the tracker (storetorrent status)",
                address=self.address,
                timeout=timeout,
            )
        return TrackerUnavailableError(
            f"tracker at {self.address} unreachable ({code.name}: {detail}); "
            "is it running (storetorrent up / storetorrent status)?",
            address=self.address,
        )

    def _call(
        self, method: str, request, timeout: float | None = None, grace: float | None = None, tries: list | None = None
    ):
        """Call ``method`` with ``request`` within ``timeout`` seconds (None:
        the client's). A read (``RETRY_SAFE``), or a write made idempotent by
        its request id (``grace`` given), whose connection fails is retried
        with backoff within that deadline: while the tracker's port accepts
        connections (the channel reconnects), or for ``grace`` seconds
        (``RECONNECT_GRACE`` for reads, ``RESTART_GRACE`` with several
        tracker addresses) while nothing does; ``tries`` (a list) gets one
        item per retry. Raises the mapped
        error (:meth:`map_error`); a per-file tracker's client (:meth:`at`)
        retries at most ``MOVED_AFTER_S`` while nothing accepts connections
        there and then raises :class:`~st_py.errors.FileTrackerGoneError`."""
        total = timeout or self.timeout
        deadline = time.monotonic() + total
        retry, delay, wait = method in RETRY_SAFE or grace is not None, 0.05, False
        grace = self._read_grace if grace is None else grace
        if self.per_file:
            grace = min(grace, MOVED_AFTER_S)
        while True:
            remaining = max(deadline - time.monotonic(), 0.001)
            try:
                reply = getattr(self._stub, method)(
                    request, timeout=remaining, metadata=self._metadata, wait_for_ready=wait or None
                )
                if self.locator is not None:
                    self._saw(method, request, reply)
                return reply
            except grpc.RpcError as e:
                code = e.code()
                spent = total - (deadline - time.monotonic())
                if retry and code == grpc.StatusCode.UNAVAILABLE and deadline - time.monotonic() > delay:
                    # A port that accepts connections: wait for the channel to
                    # reconnect (gRPC's backoff would fail calls fast meanwhile).
                    wait = accepts_connections(self.address)
                    if wait or spent + delay < grace:
                        if tries is not None:
                            tries.append(code)
                        time.sleep(delay)
                        delay = min(delay * 2, 1.0)
                        continue
                if self.per_file and code == grpc.StatusCode.UNAVAILABLE and not accepts_connections(self.address):
                    raise FileTrackerGoneError(
                        f"per-file tracker at {self.address} unreachable ({e.details()}): the file's writes may "
                        "have moved (its master restarted it, or another tracker was elected); open the file "
                        "again through the tracker",
                        address=self.address,
                    ) from None
                raise self.map_error(e, method, total) from None

    def _saw(self, method: str, request, reply) -> None:
        """Tell the locator the state a reply shows (read your writes: a
        local copy of the infofile must reach it before the next read)."""
        if isinstance(reply, pb.FileInfo):
            self.locator.saw(reply.file_id, reply.generation, reply.log_position, reply.log_id)
        elif method in GENERATION_REPLIES and request.file_id:
            self.locator.saw(request.file_id, reply.generation)

    def create(
        self,
        name: str,
        replication: str,
        est_size: int,
        blocksize: int = 0,
        mode: int = 0,
        protocol: str = "",
        placement: str = "",
        filters: str = "",
        key_check: str = "",
        in_directory: str = "",
    ) -> pb.FileInfo:
        """Create file ``name`` (rpc Create; paper 3.3): ``replication`` is the
        replication class (``"x3"``...), ``est_size`` the user bytes (one copy)
        to reserve, ``blocksize`` 0 the default; ``mode`` 0 the default mode;
        empty ``protocol``, ``placement`` and ``filters`` the tracker's defaults;
        ``key_check`` the encryption key's check value (``aes-256-gcm`` filter);
        ``in_directory`` non-empty: made only while that ancestor exists.

        Raises
        ------
        BadNameError
            ``name`` is not a valid name (checked before anything is sent).
        DirectoryNotFoundError
            ``in_directory`` is gone (nothing was made).
        StFileExistsError, PermissionDeniedError, QuotaExceededError, NoSpaceError,
        NotEnoughPeersError, TrackerUnavailableError
        """
        name = normalize(name)  # a clear BadNameError before anything is sent
        # one id for every try: a retry across a tracker restart creates the file once
        return self._located(
            self._call(
                "Create",
                pb.CreateRequest(
                    request_id=uuid.uuid4().hex,
                    name=name,
                    replication=replication,
                    est_size=est_size,
                    blocksize=blocksize,
                    user=self.user,
                    mode=mode,
                    protocol=protocol,
                    placement=placement,
                    filters=filters,
                    key_check=key_check,
                    in_directory=in_directory,
                ),
                grace=RESTART_GRACE,
            )
        )

    def snapshot(
        self, name: str, op: str, snapshot: str = "", file_id: int = 0, request_id: str = "", retried: bool = False
    ) -> pb.SnapshotReply:
        """Create, delete or list the snapshots of file ``name`` (rpc
        Snapshot; ``op`` is ``"create"``, ``"delete"`` or ``"list"``; docs/snapshots.md).
        Send it to the file's writer (:meth:`at` its ``file_tracker``).
        ``request_id``: the same on every try of one create or delete (else
        a new one); ``retried``: an earlier try of it may have been applied
        (a create then meets its own snapshot and takes it as done).

        Raises
        ------
        SnapshotExistsError, SnapshotNotFoundError, BadNameError (a snapshot
        name refused), StFileNotFoundError, PermissionDeniedError,
        TrackerMovedError, TrackerUnavailableError
        """
        name = normalize(name)
        # a retry of a create or delete gets the first try's reply
        rid = "" if op == "list" else request_id or uuid.uuid4().hex
        req = pb.SnapshotRequest(name=name, file_id=file_id, op=op, snapshot=snapshot, user=self.user, request_id=rid)
        tries: list = []
        try:
            return self._call("Snapshot", req, grace=RESTART_GRACE, tries=tries)
        except SnapshotExistsError:
            # Retried across a failover: the tracker that died may have made it and not
            # logged its reply. The snapshot of that name this user owns is the answer.
            if op != "create" or not (tries or retried):
                raise
            listed = self._call("Snapshot", pb.SnapshotRequest(name=name, file_id=file_id, op="list", user=self.user))
            mine = [s for s in listed.snapshots if s.name == snapshot and s.owner == self.user]
            if not mine:
                raise
            del listed.snapshots[:]
            listed.snapshots.extend(mine)
            return listed

    def open(self, name: str, grace: float | None = None) -> pb.FileInfo:
        """The FileInfo of existing file ``name`` (rpc Open): peerlist with
        liveness, infofile path, capability. ``grace``: seconds it keeps
        retrying while nothing accepts connections (default: a read's,
        :data:`RECONNECT_GRACE`, or :data:`RESTART_GRACE` with several
        tracker addresses); a write job's task passes ``RESTART_GRACE``, so
        a restart of the tracker is latency for it, as for a commit.

        Raises
        ------
        BadNameError, StFileNotFoundError, PermissionDeniedError, TrackerUnavailableError
        """
        name = normalize(name)
        asked = time.monotonic()  # the reply holds every change acknowledged before this
        try:
            return self._located(self._call("Open", pb.OpenRequest(name=name, user=self.user), grace=grace), asked)
        except StFileNotFoundError:
            if self.locator is not None:  # a copy of a file deleted since is removed (docs/metadata-log.md)
                self.locator.forget(name)
            raise

    def open_unlocated(self, name: str) -> pb.FileInfo:
        """:meth:`open` without bringing a local infofile copy forward (the
        tracker's state of the file, as ``status`` compares copies with it).

        Raises BadNameError, StFileNotFoundError, PermissionDeniedError, TrackerUnavailableError."""
        return self._call("Open", pb.OpenRequest(name=normalize(name), user=self.user))

    def _located(self, info: pb.FileInfo, asked: float | None = None) -> pb.FileInfo:
        """``info`` with ``infofile_path`` where this client reads the file's
        infofile (:attr:`locator`; unchanged on the shared mount). ``asked``:
        when the request began (``time.monotonic()``), for an Open: a copy
        brought to its reply counts as checked then (close-to-open)."""
        return info if self.locator is None else self.locator.locate(self, info, asked)

    def fetch_infofile(
        self,
        name: str,
        file_id: int,
        have: tuple[int, int, str, str] = (0, 0, "", ""),
        want_generation: int = 0,
        timeout: float | None = None,
        want_position: int = 0,
        want_log_id: str = "",
    ):
        """rpc FetchInfofile (issue 40): the messages that bring a copy at
        ``have`` (generation, log position, log id, schema fingerprint; zeros:
        no copy) to at least ``want_generation`` (and ``want_position`` of log
        ``want_log_id``, :meth:`fetch_infofile_stream`): a first message saying
        ``snapshot``, ``changes`` or ``current`` and the state after it, then
        the snapshot's bytes or the changesets, one per message. A list.

        Raises
        ------
        StFileNotFoundError, PermissionDeniedError, TrackerUnavailableError,
        ReplicaBehindError
        """
        return list(
            self.fetch_infofile_stream(name, file_id, have, want_generation, timeout, want_position, want_log_id)
        )

    def fetch_infofile_stream(
        self,
        name: str,
        file_id: int,
        have: tuple[int, int, str, str] = (0, 0, "", ""),
        want_generation: int = 0,
        timeout: float | None = None,
        want_position: int = 0,
        want_log_id: str = "",
    ) -> Iterator:
        """:meth:`fetch_infofile`'s messages as they arrive (a snapshot can
        be written while the rest is on its way): the call is made at the
        first ``next``; read it to the end. ``want_position`` of log
        ``want_log_id``: the log position the copy must reach too (a
        standby that has not applied it refuses; the leader ignores it).

        Raises (while iterating)
        ------------------------
        StFileNotFoundError, PermissionDeniedError, TrackerUnavailableError,
        ReplicaBehindError (a standby's infofile port: not that far yet)
        """
        gen, pos, log_id, schema = have
        req = pb.FetchInfofileRequest(
            name=normalize(name),
            user=self.user,
            file_id=file_id,
            have_generation=gen,
            have_position=pos,
            have_log_id=log_id,
            have_schema=schema,
            want_generation=want_generation,
            want_position=want_position,
            want_log_id=want_log_id,
        )
        try:
            yield from self._stub.FetchInfofile(req, timeout=timeout or self.timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise self.map_error(e, "FetchInfofile", timeout or self.timeout) from None

    def commit(
        self,
        name: str,
        file_id: int,
        records: list[pb.RecordCommit],
        lease_id: str = "",
        request_id: str = "",
        delete=(),
        schemas=(),
        partial_ok: bool = False,
        grace: float | None = None,
        replace_all: bool = False,
        columns: pb.RecordColumns | None = None,
        objects=(),
    ) -> pb.CommitReply:
        """Group commit. ``request_id``: the same on every retry of one
        request, which the tracker then applies at most once. ``delete``:
        names removed in the same transaction (applied alone); ``replace_all``:
        every name the file holds removed so (an overwrite). ``schemas``:
        the ``pb.RecordSchema`` the records' ``schema`` fields point into.
        ``columns``: more records as a ``pb.RecordColumns``, after ``records``
        (only to a tracker whose ``FileInfo.commit_columns`` is set).
        ``objects``: ``pb.ObjectCommit`` made visible in the same transaction,
        after the records and ``delete`` (a replacement by or of a striped
        object; applied alone, all or nothing).
        ``grace`` (with a ``request_id``): retried here, across a restart or
        failover of the tracker, while nothing accepts connections for up to
        that many seconds (:meth:`_call`); without it, not retried (the
        group committer retries its own, st_py.client.group_commit)."""
        if grace is not None and not request_id:
            raise ValueError("a commit retried across a restart needs a request_id (else it may apply twice)")
        reply = self._call(
            "Commit",
            pb.CommitRequest(
                name=name,
                file_id=file_id,
                records=records,
                user=self.user,
                lease_id=lease_id,
                request_id=request_id,
                delete=list(delete),
                schemas=list(schemas),
                partial_ok=partial_ok,
                replace_all=replace_all,
                columns=columns,
                objects=list(objects),
            ),
            grace=grace,
        )
        return reply

    def commit_async(
        self,
        name: str,
        file_id: int,
        records: list[pb.RecordCommit],
        lease_id: str = "",
        request_id: str = "",
        schemas=(),
        partial_ok: bool = False,
        columns: pb.RecordColumns | None = None,
    ):
        """Start a commit (``columns``: as :meth:`commit`) on this client's
        call pool (:mod:`st_py.wire.call_pool`); returns its future
        (``.done()``; ``.result()`` raises grpc.RpcError: map it with :meth:`map_error`). ``partial_ok``: the
        tracker may commit the records that fit the quota and refuse the
        rest (``CommitReply.quota_refused``)."""
        return self._calls.submit(
            self._stub.Commit,
            pb.CommitRequest(
                name=name,
                file_id=file_id,
                records=records,
                user=self.user,
                lease_id=lease_id,
                request_id=request_id,
                schemas=list(schemas),
                partial_ok=partial_ok,
                columns=columns,
            ),
            timeout=self.timeout,
            metadata=self._metadata,
        )

    def lease(
        self,
        name: str,
        file_id: int,
        lease_id: str = "",
        ttl_s: float = 0.0,
        release: bool = False,
        holder: str = "",
        request_id: str = "",
    ) -> pb.LeaseReply:
        """Acquire (no ``lease_id``), renew or release a file's writer lease.
        Retried across a tracker restart or failover like a create: a renewal
        and a release change nothing when repeated, and an acquire carries a
        request id (the same on every try; ``request_id``, else a new one), so
        its retry gets the lease its first try was granted.

        Raises
        ------
        LeaseHeldError, LeaseLostError, TrackerUnavailableError
        """
        return self._call(
            "Lease",
            pb.LeaseRequest(
                name=normalize(name),
                file_id=file_id,
                user=self.user,
                lease_id=lease_id,
                ttl_s=ttl_s,
                release=release,
                holder=holder,
                request_id="" if lease_id else request_id or uuid.uuid4().hex,
            ),
            grace=RESTART_GRACE,
        )

    def commit_objects(
        self, name: str, file_id: int, objects: builtins.list[pb.ObjectCommit], schemas=()
    ) -> pb.CommitReply:
        """Make striped objects whose stripe records are committed visible (rpc
        CommitObjects, docs/striping.md); ``schemas`` as in :meth:`commit`."""
        return self._call(
            "CommitObjects",
            pb.CommitObjectsRequest(name=name, file_id=file_id, objects=objects, user=self.user, schemas=list(schemas)),
        )

    def store_copies(self, name: str, file_id: int, copies: builtins.list[pb.CopyStored]) -> pb.MoveCopiesReply:
        """Commit pending copies (async protocols) now stored by their writer or
        repair (rpc StoreCopies)."""
        return self._call(
            "StoreCopies", pb.StoreCopiesRequest(name=name, file_id=file_id, copies=copies, user=self.user)
        )

    def store_copies_async(self, name: str, file_id: int, copies: builtins.list[pb.CopyStored]):
        """Start a StoreCopies; returns a future (as :meth:`commit_async`)."""
        return self._calls.submit(
            self._stub.StoreCopies,
            pb.StoreCopiesRequest(name=name, file_id=file_id, copies=copies, user=self.user),
            timeout=self.timeout,
            metadata=self._metadata,
        )

    def close_file(self, name: str, file_id: int, timeout: float | None = None) -> pb.CloseReply:
        """End the space reservation of a file this client created."""
        # a repeat changes nothing (the reservation ended once): retried across a restart or failover
        return self._call(
            "Close", pb.CloseRequest(name=normalize(name), file_id=file_id, user=self.user), timeout, RESTART_GRACE
        )

    def delete(
        self,
        name: str,
        file_id: int = 0,
        records: list[str] | None = None,
        whole_file: bool = False,
        request_id: str = "",
        if_empty: bool = False,
    ) -> pb.DeleteReply:
        """Delete ``records`` of file ``name`` or, with ``whole_file``, the
        whole file (rpc Delete); with ``if_empty`` too, only while it holds
        no record (else FileNotEmptyError). ``request_id``: the same on every try of one
        delete (else a new one): a retry gets the first try's reply. The
        reply's ``deleted`` counts what went; ``kept`` names the stripe
        records asked for that stay because their object is committed
        (docs/striping.md, "Stripes a writer left").

        Raises
        ------
        BadNameError, StFileNotFoundError, PermissionDeniedError, TrackerUnavailableError, FileNotEmptyError
        """
        name = normalize(name)
        req = pb.DeleteRequest(
            name=name,
            file_id=file_id,
            records=records or [],
            whole_file=whole_file,
            user=self.user,
            request_id=request_id or uuid.uuid4().hex,
            if_empty=if_empty,
        )
        # one id for every try: a retry across a restart or failover gets the first try's reply
        reply = self._call("Delete", req, grace=RESTART_GRACE)
        if whole_file and self.locator is not None:  # its copy goes with it
            self.locator.forget(name)
        return reply

    def list(self, path: str = "/", names_only: bool = False, counts_only: bool = False) -> pb.ListReply:
        """The namespace entries below directory ``path`` (rpc List);
        ``names_only`` skips the counts, ``counts_only`` the bytes."""
        return self._call(
            "List", pb.ListRequest(path=path, names_only=names_only, counts_only=counts_only, user=self.user)
        )

    def status(self, timeout: float | None = None) -> pb.StatusReply:
        """The cluster summary (rpc Status); ``timeout`` in seconds (None: the client's)."""
        return self._call("Status", pb.StatusRequest(), timeout)

    def extend_peerlist(self, name: str, file_id: int) -> pb.FileInfo:
        """Add the live peers in service missing from file ``name``'s peerlist
        (rpc ExtendPeerlist, a rebalance's first step, paper 4.4); returns the new FileInfo."""
        return self._call("ExtendPeerlist", pb.ExtendPeerlistRequest(name=name, file_id=file_id, user=self.user))

    def move_copies(self, name: str, file_id: int, moves: builtins.list[pb.CopyMove]) -> pb.MoveCopiesReply:
        """Commit copies a rebalance moved to new holders (rpc MoveCopies, paper
        4.4); the reply lists conflicts (moves not applied)."""
        return self._call("MoveCopies", pb.MoveCopiesRequest(name=name, file_id=file_id, moves=moves, user=self.user))

    def set_peer_state(self, peer: str, drain_state: str) -> pb.Peer:
        """Take peer ``peer`` (its id or ``host:port``) out of service
        (``drain_state`` ``"draining"`` or ``"retired"``) or put it back
        (``""``); returns the peer as the tracker now has it.

        Raises
        ------
        UnknownPeerError, PermissionDeniedError (not an admin)
        """
        return self._call(
            "SetPeerState",
            pb.SetPeerStateRequest(peer=peer, drain_state=drain_state, user=self.user),
            grace=RESTART_GRACE,  # a repeat changes nothing
        ).peer

    def set_mode(self, name: str, mode: int = 0, group: str = "", owner: str = "") -> pb.SetModeReply:
        """chmod / chgrp / chown of file or directory ``name`` (``/``: the root);
        0 and "" leave mode, group or owner as they are (rpc SetMode).

        Raises
        ------
        PermissionDeniedError, StFileNotFoundError, TrackerUnavailableError
        """
        name = normalize(name) if name.strip("/") else "/"  # the root has a mode too
        return self._call(
            "SetMode",
            pb.SetModeRequest(name=name, mode=mode, group=group, owner=owner, user=self.user),
            grace=RESTART_GRACE,  # a repeat changes nothing: retried across a restart or failover
        )

    def remove_dir(self, path: str) -> pb.RemoveDirReply:
        """Remove empty namespace directory ``path`` (rpc RemoveDir).

        Raises
        ------
        DirectoryNotEmptyError, StFileNotFoundError, PermissionDeniedError
        """
        req = pb.RemoveDirRequest(path=normalize(path), user=self.user, request_id=uuid.uuid4().hex)
        return self._call("RemoveDir", req, grace=RESTART_GRACE)  # a retry gets the first try's reply

    def restore_infofile(
        self, data: bytes, chunk_size: int = 1 << 20, timeout: float | None = None, dry_run: bool = False
    ) -> pb.RestoreInfofileReply:
        """Put an infofile copied from a peer's mirror back into the namespace
        (admins only; ``storetorrent recover --from-peers``). ``data`` goes in
        chunks of ``chunk_size`` bytes, so infofiles beyond a gRPC message do
        too. The reply's ``outcome`` is ``restored``, ``present`` or
        ``conflict`` (nothing overwritten); with ``dry_run`` nothing is
        written and ``missing`` stands for ``restored``."""
        from st_py.wire.protocol import crc32c

        crc = crc32c(bytes(data))

        def chunks():
            yield pb.RestoreInfofileChunk(
                user=self.user, total_size=len(data), crc32c=crc, data=bytes(data[:chunk_size]), dry_run=dry_run
            )
            for off in range(chunk_size, len(data), chunk_size):
                yield pb.RestoreInfofileChunk(data=bytes(data[off : off + chunk_size]))

        try:
            return self._stub.RestoreInfofile(chunks(), timeout=timeout or self.timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise self.map_error(e, "RestoreInfofile") from None

    def report_failure(self, addr: str, reason: str) -> None:
        """Tell the tracker peer ``addr`` failed (rpc ReportFailure, paper 4.3).
        Best effort, 2 s timeout: never raises."""
        try:
            self._call("ReportFailure", pb.ReportFailureRequest(addr=addr, reason=reason), timeout=2.0)
        except StoreTorrentError:
            pass  # best effort: the tracker also sees the missing announces

    def report_repair(self, status: pb.RepairStatus) -> None:
        """The repair service's progress (``st_py.maintenance.repair.watch``): the
        tracker keeps the last report for Status and its status page.

        Raises
        ------
        PermissionDeniedError
            A users file is in force and the user is not an admin.
        TrackerUnavailableError
        """
        self._call("ReportRepair", pb.ReportRepairRequest(status=status, user=self.user), timeout=2.0)

    def report_bad_copy(self, file: str, record: str, addr: str, detail: str) -> None:
        """Tell the tracker a copy on peer ``addr`` failed a checked read
        (its CRC-32C did not match): an event on its status page and the
        ``st_tracker_bad_copies{source="client"}`` counter; the peer's
        verifier quarantines the copy on its next pass. Best effort: never
        raises."""
        try:
            self._call(
                "ReportBadCopy",
                pb.ReportBadCopyRequest(file=file, record=record, addr=addr, detail=detail),
                timeout=2.0,
            )
        except StoreTorrentError:
            pass

    def close(self) -> None:
        """Close the channel, and those of the per-file trackers' clients made by :meth:`at`."""
        for other in self._others.values():
            other.close()
        self._others.clear()
        self._channel.close()  # calls still running end with CANCELLED
        self._calls.close()

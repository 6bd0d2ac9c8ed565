"""Pipelined connections from a client to its peers (paper 3.2).

A :class:`Transport` owns one persistent TCP connection per peer. Requests are
queued as encoded frames; :meth:`Transport.poll` writes to each socket exactly
what it accepts (one ``sendmsg`` of many frames), reads large chunks, decodes
the replies back to back and matches them to requests by sequence number, in
any order. An explicit ``ERROR`` reply fails one request; a socket error or a
timeout fails every request in flight to that peer (paper 4.3).

Completions are collected while sockets are read and run after the read loop
(as dask/distributed's comms hand messages to handlers): a callback that
raises cannot break a connection, lose the replies read with it, or make a
healthy peer look failed. Its exception reaches the caller of
:meth:`Transport.poll` (or :meth:`Transport.wait`) once every other
completion has run.
"""

from __future__ import annotations

import errno
import functools
import os
import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable

from st_py.errors import OperationTimeoutError, PeerError, PeerUnavailableError
from st_py.wire.protocol import (
    DEFAULT_MAX_FRAME,
    FLAG_MORE,
    Frame,
    FrameDecoder,
    LocalEntries,
    MsgType,
    ProtocolError,
    crc32c,
    decode_local_list_native,
    decode_payload,
    encode_auth,
    put_prefix,
)

_OK = int(MsgType.OK)

# Replies sent in chunks (MORE on all but the last): merged into one list of entries.
_LISTS = (MsgType.LOCAL_LIST, MsgType.META_LIST)

try:  # the receive path in C++ (st_core/python/native.cc); ST_NATIVE=0 selects the Python one
    if os.environ.get("ST_NATIVE", "1") == "0":
        raise ImportError("ST_NATIVE=0")
    from st_py import _native  # type: ignore[attr-defined]
except ImportError:
    _native = None

NATIVE = _native is not None
_NATIVE_LISTS = hasattr(_native, "decode_local_list")  # a GET_LOCAL plan's entries by column, in C++
_PUT_BATCH = hasattr(getattr(_native, "Sender", None), "put_batch")
# Receiver.receive(oks): final empty OK replies come back as their seqs alone
_RECEIVE_OKS = getattr(_native, "RECEIVE_OKS", False)
# The frame every such reply is given to its callback as: shared, so none is
# made a reply (callbacks read an OK's payload, never change it or its seq).
_EMPTY_OK = Frame(int(MsgType.OK), 0, 0, {"payload": b""})

# Record bodies of up to 64 MiB are allocated and freed at GB/s: keep freed
# memory for reuse instead of page-faulting fresh pages in for every body
# (docs/benchmarks.md, get_1mib). Unless the user tuned glibc's malloc already.
KEEP_FREED_BYTES = 256 * 1024 * 1024
if NATIVE and not any(k.startswith("MALLOC_") for k in os.environ):
    _native.keep_freed_memory(KEEP_FREED_BYTES)


def crc32c_many(parts: list) -> list[int]:
    """CRC-32C of each buffer of ``parts`` (a list of bytes-like objects):
    one call to C++ with the GIL released where the extension is built,
    else :func:`st_py.wire.protocol.crc32c` of each."""
    many = getattr(_native, "crc32c_many", None)  # an extension built before write batches has none
    if many is not None:
        return many(parts)
    return [crc32c(p if isinstance(p, bytes) else bytes(p)) for p in parts]


IOV_MAX = 512
RECV_CHUNK = 256 * 1024

Callback = Callable[[Frame | None, Exception | None], None]


def split_addr(addr: str) -> tuple[str, int]:
    """``host:port`` (or ``[v6]:port``) -> ``(host, port)``. Raises ValueError for a bad port."""
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


class PeerConnection:
    """One persistent, pipelined connection to the peer at ``addr``."""

    def __init__(
        self,
        addr: str,
        connect_timeout: float,
        max_frame: int = DEFAULT_MAX_FRAME,
        complete: Callable[[Callback, Frame | None, Exception | None], None] | None = None,
    ):
        self.addr = addr
        # where finished requests go; by default their callbacks run at once
        self._complete = complete or (lambda cb, fr, exc: cb(fr, exc))
        self.sock = socket.create_connection(split_addr(addr), timeout=connect_timeout)
        self.sock.setblocking(False)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._native = _native.Receiver(self.sock.fileno(), max_frame) if _native is not None else None
        self._native_buffered = 0  # bytes of a partly received frame, at the last read
        self._oks: list[int] | None = [] if _RECEIVE_OKS else None  # seqs of empty OKs, per read
        # the send path in C++: frames queued and written by one sendmsg without the GIL
        self._sender = _native.Sender(self.sock.fileno()) if _native is not None else None
        if self._native is None:  # the Python receive path
            self.decoder = FrameDecoder(max_frame)
            self._rbuf = bytearray(RECV_CHUNK)  # reused: no allocation per read
            self._rview = memoryview(self._rbuf)
        self.out: deque = deque()  # the Python send path's queue
        self._out_bytes = 0
        # seq -> the callback of each request in flight (no object a request:
        # the garbage collector's full passes grow with long-lived objects)
        self.pending: dict[int, Callback] = {}
        self._chunks: dict[int, list[Frame]] = {}  # seq -> the chunks of a list reply so far
        self._seq = 0
        self.last_progress = time.monotonic()
        self.dead: Exception | None = None

    @property
    def out_bytes(self) -> int:
        """Bytes queued and not yet accepted by the socket."""
        return self._sender.out_bytes if self._sender is not None else self._out_bytes

    @property
    def has_out(self) -> bool:
        """Whether bytes wait to be sent."""
        return not self._sender.empty if self._sender is not None else bool(self.out)

    def _track(self, seq: int, callback: Callback) -> int:
        """Count request ``seq`` in flight, once its frame is queued (a frame
        that could not be built or queued leaves nothing waiting)."""
        if not self.pending:
            self.last_progress = time.monotonic()
        self.pending[seq] = callback
        return seq

    def send(self, build: Callable[[int], list], callback: Callback) -> int:
        """Queue one request. ``build(seq)`` returns the frame as a list of
        buffers (so large record bodies are not copied)."""
        self._seq += 1
        seq = self._seq
        for part in build(seq):
            if len(part):  # an empty record body adds nothing to send
                if self._sender is not None:
                    self._sender.queue(part)
                else:
                    self.out.append(part)
                    self._out_bytes += len(part)
        return self._track(seq, callback)

    def send_put(
        self, file_id: int, copy_rank: int, crc: int, name: bytes, data: bytes, flags: int, callback: Callback
    ) -> int:
        """Queue the PUT of one record copy (docs/wire-protocol.md), framed in
        C++ where the extension is built."""
        self._seq += 1
        seq = self._seq
        if self._sender is not None:
            self._sender.put(seq, file_id, copy_rank, crc, name, data, flags)
        else:
            prefix = put_prefix(seq, file_id, copy_rank, crc, name, len(data), flags)
            self.out.append(prefix)
            self._out_bytes += len(prefix)
            if len(data):
                self.out.append(data)
                self._out_bytes += len(data)
        return self._track(seq, callback)

    def send_put_batch(
        self,
        file_id: int,
        flags: int,
        ranks: list[int],
        crcs: list[int],
        names: list[bytes],
        datas: list,
        callbacks: list[Callback],
    ) -> None:
        """Queue the PUTs of many record copies at once (a write batch),
        copy ``i`` being ``ranks[i]``, ``crcs[i]``, ``names[i]``,
        ``datas[i]`` and told to ``callbacks[i]``: framed in one call to
        C++ where the extension is built (GIL released), with consecutive
        sequence numbers, laid out as :meth:`send_put` lays out each."""
        seq0 = self._seq + 1
        self._seq += len(ranks)
        if self._sender is not None and _PUT_BATCH:
            self._sender.put_batch(seq0, file_id, flags, ranks, crcs, names, datas)
        elif self._sender is not None:  # an extension built before write batches
            for i, data in enumerate(datas):
                self._sender.put(seq0 + i, file_id, ranks[i], crcs[i], names[i], data, flags)
        else:
            for i, data in enumerate(datas):
                prefix = put_prefix(seq0 + i, file_id, ranks[i], crcs[i], names[i], len(data), flags)
                self.out.append(prefix)
                self._out_bytes += len(prefix)
                if len(data):
                    self.out.append(data)
                    self._out_bytes += len(data)
        if not self.pending:
            self.last_progress = time.monotonic()
        pending = self.pending
        for i, cb in enumerate(callbacks):
            pending[seq0 + i] = cb

    def on_writable(self) -> None:
        """Send what is queued until the socket would block (the event loop's
        writable callback)."""
        if self._sender is not None:
            if self._sender.flush():
                self.last_progress = time.monotonic()
            return
        while self.out:
            bufs = [self.out[i] for i in range(min(len(self.out), IOV_MAX))]
            try:
                n = self.sock.sendmsg(bufs)
            except (BlockingIOError, InterruptedError):
                return
            self._out_bytes -= n
            self.last_progress = time.monotonic()
            while n:
                head = self.out[0]
                if len(head) <= n:
                    n -= len(head)
                    self.out.popleft()
                else:
                    self.out[0] = memoryview(head)[n:]
                    n = 0

    def on_readable(self) -> None:
        """Receive and dispatch every whole reply until the socket would block
        (the event loop's readable callback).

        Raises
        ------
        ConnectionResetError
            The peer closed the connection.
        ProtocolError
            A malformed frame.
        PeerError
            An ERROR frame with seq 0 (the connection itself was refused).
        """
        if self._native is not None:
            self._on_readable_native()
            return
        while True:
            view = self.decoder.big_view()
            try:
                if view is not None:  # a large frame: receive it in place
                    n = self.sock.recv_into(view)
                    want = len(view)
                    view.release()
                else:
                    n = self.sock.recv_into(self._rbuf)
                    want = RECV_CHUNK
                    data = self._rview[:n]
            except (BlockingIOError, InterruptedError):
                if view is not None:
                    view.release()
                return
            if not n:
                raise ConnectionResetError(errno.ECONNRESET, "connection closed by peer")
            self.last_progress = time.monotonic()
            frames = self.decoder.big_filled(n) if view is not None else self.decoder.feed(data)
            for fr in frames:
                self._dispatch(fr)
            if n < want and self.decoder.big_view() is None:
                return  # drained; in the middle of a large frame, read on until EAGAIN

    def _on_readable_native(self) -> None:
        """The same as the Python path below, with the reading, framing and the
        CRC-32C of DATA bodies done in C++ without the GIL. A DATA frame's
        fields also carry ``actual_crc32c``, the CRC of the bytes received."""
        assert self._native is not None
        oks = self._oks
        try:
            frames = self._native.receive(oks) if oks is not None else self._native.receive()
        except ValueError as e:
            if oks:
                oks.clear()  # the connection fails with every request in flight
            raise ProtocolError(str(e)) from None
        buffered = self._native.buffered
        if frames or oks or buffered > self._native_buffered:  # bytes of a large frame count as progress too
            self.last_progress = time.monotonic()
        self._native_buffered = buffered
        pending, complete = self.pending, self._complete
        if oks:  # PUTs' and DELETEs' final replies, by seq alone: _dispatch's path for them
            for seq in oks:
                cb = pending.pop(seq, None)
                if cb is not None:  # else a reply to a request we already gave up on
                    complete(cb, _EMPTY_OK, None)
            oks.clear()
        for t, flags, seq, payload, data_info in frames:
            if t == _OK and not flags & FLAG_MORE:  # a PUT's or DELETE's final reply: _dispatch's path, inline
                cb = pending.pop(seq, None)
                if cb is not None:  # else a reply to a request we already gave up on
                    complete(cb, Frame(t, seq, flags, {"payload": payload}), None)
                continue
            if t == _OK:  # an interim reply (PUT_CHAIN with ASYNC): nothing to parse
                fields = {"payload": payload}
            elif data_info is None and t == MsgType.LOCAL_LIST and _NATIVE_LISTS:
                fields = decode_local_list_native(_native, payload)
            elif data_info is None:
                fields = decode_payload(t, flags, memoryview(payload))
            else:
                crc, rank, actual = data_info
                fields = {"crc32c": crc, "copy_rank": rank, "data": payload, "actual_crc32c": actual}
            self._dispatch(Frame(t, seq, flags, fields))

    def _dispatch(self, fr: Frame) -> None:
        cb = self.pending.get(fr.seq)
        if cb is None:
            if fr.type == MsgType.ERROR and fr.seq == 0:
                raise PeerError(fr.fields["code"], fr.fields["message"], self.addr, 0)
            return  # a reply to a request we already gave up on
        if fr.type in _LISTS and fr.flags & FLAG_MORE:
            self._chunks.setdefault(fr.seq, []).append(fr)
            return
        if fr.flags & FLAG_MORE and fr.type != MsgType.ERROR:
            # An interim reply (PUT_CHAIN with ASYNC: the first copy is
            # stored); the request stays in flight for its final reply.
            self._complete(cb, fr, None)
            return
        del self.pending[fr.seq]
        chunks = self._chunks.pop(fr.seq, None) if self._chunks else None
        if fr.type in _LISTS and chunks:
            parts = [c.fields["entries"] for c in chunks] + [fr.fields["entries"]]
            if fr.type == MsgType.LOCAL_LIST:
                fr.fields["entries"] = LocalEntries.concat(parts)
            else:
                fr.fields["entries"] = [e for p in parts for e in p]
        if fr.type == MsgType.ERROR:
            self._complete(
                cb,
                None,
                PeerError(fr.fields["code"], fr.fields["message"], self.addr, fr.seq, fr.fields.get("peers", ())),
            )
        else:
            self._complete(cb, fr, None)

    def fail(self, exc: Exception) -> None:
        """Abort the connection: every request in flight fails with ``exc``."""
        if self.dead is None:
            self.dead = exc
            try:
                self.sock.close()
            except OSError:
                pass
        pending, self.pending = self.pending, {}
        self._chunks.clear()
        self.out.clear()
        self._out_bytes = 0
        if self._sender is not None:
            self._sender.clear()
        for cb in pending.values():
            self._complete(cb, None, exc)


def _locked(fn):
    """Run a :class:`Transport` method under its ``lock``."""

    @functools.wraps(fn)
    def locked(self, *args, **kwargs):
        with self.lock:
            return fn(self, *args, **kwargs)

    return locked


class Transport:
    """The set of peer connections of one client, driven by :meth:`poll`.

    Thread safety: may be shared between threads; its public methods run
    one at a time under :attr:`lock` (a thread waiting in :meth:`wait`
    releases it between turns, and a turn completes every thread's
    requests).

    Parameters
    ----------
    timeout : float
        Seconds without progress on a connection with requests in flight after
        which the peer is declared unavailable.
    on_peer_failure : callable(addr, reason), optional
        Told once per failed peer (the client reports it to the tracker).
    """

    def __init__(
        self,
        timeout: float = 30.0,
        connect_timeout: float = 3.0,
        on_peer_failure: Callable[[str, str], None] | None = None,
    ):
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.on_peer_failure = on_peer_failure
        self.conns: dict[str, PeerConnection] = {}
        self.failed: dict[str, str] = {}
        self.capabilities: dict[int, bytes] = {}  # file_id -> token, sent first on every connection
        self.auth_errors: dict[str, Exception] = {}
        self.sel = selectors.DefaultSelector()
        self._registered: dict[int, int] = {}
        self._completions: deque = deque()  # (callback, frame, exception) to run after the read loop
        self._last_poll = time.monotonic()
        # Held by every call that turns or feeds this transport, and by every
        # public method of the StFile that owns it (file.py): one thread at a
        # time, re-entrant for callbacks that send from inside poll().
        self.lock = threading.RLock()

    def _complete(self, callback: Callback, fr: Frame | None, exc: Exception | None) -> None:
        self._completions.append((callback, fr, exc))

    def _run_completions(self) -> None:
        """Run the collected callbacks; re-raise the first exception one of
        them raised, after all of them ran."""
        first: BaseException | None = None
        while self._completions:
            cb, fr, exc = self._completions.popleft()
            try:
                cb(fr, exc)
            except Exception as e:  # a callback's error is its caller's, not the connection's
                if first is None:
                    first = e
        if first is not None:
            raise first

    @_locked
    def connection(self, addr: str) -> PeerConnection:
        """The live connection to ``addr``, made on first use.

        Raises
        ------
        PeerUnavailableError
            If the peer refuses the connection or is already known dead.
        """
        c = self.conns.get(addr)
        if c is not None and c.dead is None:
            return c
        try:
            c = PeerConnection(addr, self.connect_timeout, complete=self._complete)
        except OSError as e:
            self._mark_failed(addr, f"cannot connect: {e.strerror or e}")
            raise PeerUnavailableError(addr, f"cannot connect: {e.strerror or e}") from None
        self.conns[addr] = c
        self.failed.pop(addr, None)
        for token in self.capabilities.values():
            self._send_auth(c, token)
        return c

    @_locked
    def set_capability(self, file_id: int, token: bytes) -> None:
        """Use ``token`` for ``file_id`` (docs/capabilities.md): sent as AUTH
        ahead of any later request, on every open and every new connection."""
        if not token or self.capabilities.get(file_id) == token:
            return
        self.capabilities[file_id] = token
        for c in self.conns.values():
            if c.dead is None:
                self._send_auth(c, token)

    def _send_auth(self, conn: PeerConnection, token: bytes) -> None:
        def done(fr, exc, addr=conn.addr):
            if exc is not None:  # the requests that need it will be DENIED with the reason
                self.auth_errors[addr] = exc

        conn.send(lambda seq: [encode_auth(seq, token)], done)

    @_locked
    def send(self, addr: str, build: Callable[[int], list], callback: Callback) -> None:
        """Queue a request to ``addr``; a connection failure is reported to
        ``callback`` like any other failure of the request."""
        try:
            conn = self.connection(addr)
        except PeerUnavailableError as e:
            callback(None, e)
            return
        conn.send(build, callback)

    @_locked
    def send_put(
        self,
        addr: str,
        file_id: int,
        copy_rank: int,
        crc: int,
        name: bytes,
        data: bytes,
        flags: int,
        callback: Callback,
    ) -> None:
        """Queue the PUT of one record copy to ``addr`` (see :meth:`send`):
        ``name`` is the record name's UTF-8 bytes, ``crc`` the CRC-32C of
        ``data``, ``flags`` the frame flags (e.g. ``FLAG_REPLACE``)."""
        try:
            conn = self.connection(addr)
        except PeerUnavailableError as e:
            callback(None, e)
            return
        conn.send_put(file_id, copy_rank, crc, name, data, flags, callback)

    @_locked
    def send_put_batch(
        self,
        addr: str,
        file_id: int,
        flags: int,
        ranks: list[int],
        crcs: list[int],
        names: list[bytes],
        datas: list,
        callbacks: list[Callback],
    ) -> None:
        """Queue the PUTs of many record copies to ``addr`` at once
        (:meth:`PeerConnection.send_put_batch`); they go out with the
        frames waiting, in as few ``sendmsg`` calls as the socket takes,
        at the next :meth:`poll`. A connection failure is reported to every
        callback like any other failure of its request."""
        try:
            conn = self.connection(addr)
        except PeerUnavailableError as e:
            for cb in callbacks:
                cb(None, e)
            return
        conn.send_put_batch(file_id, flags, ranks, crcs, names, datas, callbacks)

    @property
    def in_flight(self) -> int:
        """Requests sent on every connection and not answered yet."""
        return sum(len(c.pending) for c in self.conns.values())

    def in_flight_to(self, addr: str) -> int:
        """Requests sent to ``addr`` and not answered yet."""
        c = self.conns.get(addr)
        return len(c.pending) if c is not None and c.dead is None else 0

    @property
    def out_bytes(self) -> int:
        """Bytes queued but not yet accepted by the sockets."""
        return sum(c.out_bytes for c in self.conns.values())

    def _mark_failed(self, addr: str, reason: str) -> None:
        first = addr not in self.failed
        self.failed[addr] = reason
        if first and self.on_peer_failure is not None:
            self.on_peer_failure(addr, reason)

    def _kill(self, conn: PeerConnection, exc: Exception) -> None:
        fd = self._fd(conn)
        if fd is not None and fd in self._registered:
            try:
                self.sel.unregister(fd)
            except (KeyError, ValueError):
                pass
            del self._registered[fd]
        if isinstance(exc, PeerUnavailableError):
            self._mark_failed(conn.addr, exc.reason)
        conn.fail(exc)

    @staticmethod
    def _fd(conn: PeerConnection) -> int | None:
        try:
            fd = conn.sock.fileno()
        except OSError:
            return None
        return fd if fd >= 0 else None

    @_locked
    def poll(self, timeout: float = 0.0) -> None:
        """Make progress: write what the sockets accept, read and dispatch
        replies, fail connections that timed out. Waits at most ``timeout``."""
        active = [c for c in self.conns.values() if c.dead is None and (c.pending or c.has_out)]
        for c in active:
            if c.has_out:  # try first: usually the socket takes it all at once
                try:
                    c.on_writable()
                except OSError as e:
                    self._kill(c, PeerUnavailableError(c.addr, f"send failed: {e.strerror or e}"))
        want = {}
        for c in active:
            if c.dead is None:
                want[c.sock.fileno()] = (c, selectors.EVENT_READ | (selectors.EVENT_WRITE if c.has_out else 0))
        for fd in list(self._registered):
            if fd not in want:
                try:
                    self.sel.unregister(fd)
                except (KeyError, ValueError):
                    pass
                del self._registered[fd]
        for fd, (c, ev) in want.items():
            old = self._registered.get(fd)
            if old is None:
                self.sel.register(fd, ev, c)
            elif old != ev:
                self.sel.modify(fd, ev, c)
            self._registered[fd] = ev
        if not want:
            if self._completions:
                self._run_completions()
            elif timeout:
                time.sleep(min(timeout, 0.01))
            return
        for key, ev in self.sel.select(timeout):
            c = key.data
            if c.dead is not None:
                continue
            try:
                if ev & selectors.EVENT_READ:
                    c.on_readable()
                if ev & selectors.EVENT_WRITE and c.dead is None:
                    c.on_writable()
            except ProtocolError as e:
                self._kill(c, PeerUnavailableError(c.addr, f"protocol error: {e}"))
            except PeerError as e:
                self._kill(c, e)
            except OSError as e:
                self._kill(c, PeerUnavailableError(c.addr, f"connection lost: {e.strerror or e}"))
        now = time.monotonic()
        if now - self._last_poll > self.timeout / 2:
            # The caller did not poll for a while (parsing a record it got, a task between two
            # of its reads): time its peers could not be heard is not theirs to answer for.
            for c in active:
                c.last_progress = max(c.last_progress, now)
        self._last_poll = now
        for c in active:
            if c.dead is None and c.pending and now - c.last_progress > self.timeout:
                self._kill(c, PeerUnavailableError(c.addr, f"no reply for {self.timeout:.0f} s"))
        self._run_completions()

    def wait(self, done: Callable[[], bool], timeout: float | None = None) -> None:
        """Poll until ``done()`` is true (or ``timeout`` seconds pass)."""
        end = None if timeout is None else time.monotonic() + timeout
        while not done():
            if end is not None and time.monotonic() > end:
                raise OperationTimeoutError(f"operation did not finish in {timeout} s", timeout)
            self.poll(0.05)

    @_locked
    def close(self) -> None:
        """Close every connection and the selector; requests in flight are dropped (their callbacks are not called)."""
        for c in self.conns.values():
            if c.dead is None:
                try:
                    c.sock.close()
                except OSError:
                    pass
                c.dead = ConnectionAbortedError("closed")
        self.conns.clear()
        self.sel.close()

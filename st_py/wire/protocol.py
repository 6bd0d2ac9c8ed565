"""Encoding and decoding of the StoreTorrent wire protocol, version 1.

The byte layout is specified field by field in ``docs/wire-protocol.md``; the
C++ peer (``st_core/src/protocol.h``) implements the same grammar, and both are
checked against ``tests/vectors/wire.json``. Source: paper section 3 ("All
messages are length prefixed") and 3.2 (sequence numbers for pipelining).
"""

from __future__ import annotations

import enum
import re
import struct
from dataclasses import dataclass, field

import google_crc32c

from st_py.core.record_names import MAX_NAME  # noqa: F401  (re-exported: the frame's name limit is the names' rule)
from st_py.errors import ErrorCode, PeerError, StalePeerCopyError, StoreTorrentError  # noqa: F401  (ErrorCode: re-exported, the wire's codes)

VERSION = 1
HEADER = struct.Struct("<IBBHQ")  # length, type, version, flags, seq
HEADER_SIZE = HEADER.size  # 16: the length prefix plus the 12-byte header
DEFAULT_MAX_FRAME = 64 * 1024 * 1024 + 4096

FLAG_MORE = 0x0001
FLAG_REPLACE = 0x0002
FLAG_ASYNC = 0x0004  # PUT_CHAIN: OK with MORE once the first copy is stored, then the final reply
FLAG_FORWARDED = 0x0008  # PUT_CHAIN sent by a peer down its chain
FLAG_LEFTOVER = 0x0010  # PUT: replace a copy only if the connection that stored it has closed
# (a crashed writer's uncommitted copy, paper 4.4; docs/replication.md)
FLAG_AS_OF = 0x0020  # GET_LOCAL, RING_SEGMENT: the ring header ends with as_of:u64 (docs/snapshots.md)
MAX_CHAIN_HOPS = 7


class MsgType(enum.IntEnum):
    """The frame types of docs/wire-protocol.md: requests below 0x80, replies from 0x80."""

    PUT = 0x01
    GET = 0x02
    DELETE = 0x03
    DELETE_FILE = 0x04
    GET_LOCAL = 0x05
    PING = 0x06
    SCRUB = 0x07
    AUTH = 0x08  # payload: one capability token (docs/capabilities.md)
    PUT_CHAIN = 0x09  # PUT, then forwarded down the chain of holders
    LIST_META = 0x0A  # the peer's infofile mirrors (recovery without the namespace)
    GET_META = 0x0B  # bytes of one mirror
    RING_SEGMENT = 0x10
    OK = 0x80
    DATA = 0x82
    LOCAL_LIST = 0x85
    META_LIST = 0x86  # reply to LIST_META
    ERROR = 0xFF


class ProtocolError(StoreTorrentError, ValueError):
    """A frame that does not follow docs/wire-protocol.md."""


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """CRC-32C (Castagnoli) of ``data`` as an unsigned 32-bit int (RFC 3720)."""
    return google_crc32c.value(bytes(data) if isinstance(data, memoryview) else data)


def _str16(b: bytes) -> bytes:
    if len(b) > 0xFFFF:
        raise ProtocolError(f"string of {len(b)} bytes does not fit a str16")
    return struct.pack("<H", len(b)) + b


def _to_bytes(s: str | bytes) -> bytes:
    return s.encode("utf-8") if isinstance(s, str) else bytes(s)


def frame(msg_type: int, seq: int, payload: bytes = b"", flags: int = 0) -> bytes:
    """One whole frame: length prefix, header and payload."""
    return HEADER.pack(12 + len(payload), msg_type, VERSION, flags, seq) + payload


def put_prefix(seq: int, file_id: int, copy_rank: int, crc: int, name: bytes, data_len: int, flags: int = 0) -> bytes:
    """Everything of a PUT frame but its data, so the data can be sent as is.

    Returns the bytes to send before ``data_len`` bytes of record data.
    """
    fixed = struct.pack("<QBI", file_id, copy_rank, crc) + _str16(name)
    return HEADER.pack(12 + len(fixed) + data_len, MsgType.PUT, VERSION, flags, seq) + fixed


def put_chain_prefix(
    seq: int, file_id: int, copy_rank: int, crc: int, name: bytes, hops: list[str], data_len: int, flags: int = 0
) -> bytes:
    """Everything of a PUT_CHAIN frame but its data (docs/wire-protocol.md,
    "Chain replication"): the receiver stores ``copy_rank`` and forwards
    ``copy_rank + 1`` to ``hops[0]`` with the rest of ``hops``.

    Raises
    ------
    ProtocolError
        For more than :data:`MAX_CHAIN_HOPS` hops.
    """
    if len(hops) > MAX_CHAIN_HOPS:
        raise ProtocolError(f"a chain of {len(hops)} hops (at most {MAX_CHAIN_HOPS})")
    fixed = (
        struct.pack("<QBI", file_id, copy_rank, crc)
        + _str16(name)
        + struct.pack("<B", len(hops))
        + b"".join(_str16(h.encode("utf-8")) for h in hops)
    )
    return HEADER.pack(12 + len(fixed) + data_len, MsgType.PUT_CHAIN, VERSION, flags, seq) + fixed


def encode_put(
    seq: int, file_id: int, copy_rank: int, name: str | bytes, data: bytes, crc: int | None = None, flags: int = 0
) -> bytes:
    """PUT of record ``name`` (copy ``copy_rank``) of file ``file_id`` with
    ``data``; ``crc`` is its CRC-32C, computed when None. Returns the whole
    frame. Raises ProtocolError for a name over 65535 bytes."""
    name_b = _to_bytes(name)
    if crc is None:
        crc = crc32c(data)
    return put_prefix(seq, file_id, copy_rank, crc, name_b, len(data), flags) + bytes(data)


def encode_get(seq: int, file_id: int, name: str | bytes) -> bytes:
    """GET ``file_id:u64 name:str16``: read one copy of record ``name``."""
    return frame(MsgType.GET, seq, struct.pack("<Q", file_id) + _str16(_to_bytes(name)))


def encode_delete(seq: int, file_id: int, name: str | bytes) -> bytes:
    """DELETE ``file_id:u64 name:str16``: remove record ``name``'s copy on the peer."""
    return frame(MsgType.DELETE, seq, struct.pack("<Q", file_id) + _str16(_to_bytes(name)))


def encode_delete_file(seq: int, file_id: int) -> bytes:
    """DELETE_FILE ``file_id:u64``: remove every record of the file on the peer."""
    return frame(MsgType.DELETE_FILE, seq, struct.pack("<Q", file_id))


def _check_as_of(generation: int, as_of: int | None) -> None:
    """as_of is at most the ring's generation, unless that is 0 (the latest state)."""
    if as_of is not None and (as_of < 0 or (generation != 0 and as_of > generation)):
        raise ProtocolError(f"as_of {as_of} is after the ring's generation {generation}")


def _ring_header(file_id: int, generation: int, file_name: str, peers: list[str], as_of: int | None = None) -> bytes:
    _check_as_of(generation, as_of)
    parts = [struct.pack("<QQ", file_id, generation), _str16(_to_bytes(file_name)), struct.pack("<H", len(peers))]
    parts += [_str16(_to_bytes(p)) for p in peers]
    if as_of is not None:
        parts.append(struct.pack("<Q", as_of))
    return b"".join(parts)


def encode_get_local(
    seq: int, file_id: int, generation: int, file_name: str, peers: list[str], as_of: int | None = None
) -> bytes:
    """GET_LOCAL (paper 3.7): join the ring of ``peers`` (``host:port``, the
    file's peerlist) for generation ``generation`` of file ``file_name``;
    answered by LOCAL_LIST frames.

    Parameters
    ----------
    as_of : int or None
        The generation whose records the peers reveal (docs/snapshots.md),
        sent with :data:`FLAG_AS_OF` after the peers list; copies are read
        as held at ``generation`` (the plan's). None (the default): no flag,
        the records of ``generation`` itself. A ring with ``as_of`` equal to
        ``generation`` is the same ring as one without; send the flag only
        for an older generation (a peer that predates it refuses the frame
        with BAD_FRAME, an infofile without history with NO_NAMESPACE).

    Raises
    ------
    ProtocolError
        If ``as_of`` is after ``generation`` (a generation of 0, the latest
        state, takes any ``as_of``).
    """
    flags = FLAG_AS_OF if as_of is not None else 0
    return frame(MsgType.GET_LOCAL, seq, _ring_header(file_id, generation, file_name, peers, as_of), flags)


def encode_ping(seq: int) -> bytes:
    """PING (empty payload): answered OK with the peer's id and address."""
    return frame(MsgType.PING, seq)


def encode_scrub(seq: int) -> bytes:
    """SCRUB: run the peer's scrubber now (paper 3.1, 4.3); empty payload."""
    return frame(MsgType.SCRUB, seq)


def encode_auth(seq: int, token: bytes) -> bytes:
    """AUTH: present a capability token (docs/capabilities.md); the whole
    payload is the token. The peer answers OK, or ERROR DENIED saying why."""
    return frame(MsgType.AUTH, seq, bytes(token))


def encode_list_meta(seq: int) -> bytes:
    """LIST_META: the peer's infofile mirrors (docs/wire-protocol.md); empty
    payload. Answered by META_LIST frames (MORE on all but the last)."""
    return frame(MsgType.LIST_META, seq)


def encode_get_meta(seq: int, file_id: int, offset: int, length: int) -> bytes:
    """GET_META: at most ``length`` bytes of the mirror of ``file_id`` from
    ``offset``; answered by DATA (fewer bytes at the end of the mirror)."""
    return frame(MsgType.GET_META, seq, struct.pack("<QQI", file_id, offset, length))


META_ENTRY = struct.Struct("<QQQI")  # file_id, generation, size, crc32c (then name:str16)


def encode_meta_list(seq: int, entries: list[tuple[int, int, int, int, bytes]], flags: int = 0) -> bytes:
    """META_LIST: ``(file_id, generation, size, crc32c, name)`` per mirror."""
    body = [struct.pack("<I", len(entries))]
    for file_id, generation, size, crc, name in entries:
        body.append(META_ENTRY.pack(file_id, generation, size, crc) + _str16(_to_bytes(name)))
    return frame(MsgType.META_LIST, seq, b"".join(body), flags)


SCRUB_REPLY = struct.Struct("<QQQQQ")
SCRUB_REPLY_FIELDS = ("files", "removed_uncommitted", "removed_deleted_files", "removed_tmp", "kept")


def encode_scrub_reply(
    seq: int, files: int, removed_uncommitted: int, removed_deleted_files: int, removed_tmp: int, kept: int
) -> bytes:
    """The OK reply to SCRUB."""
    return encode_ok(seq, SCRUB_REPLY.pack(files, removed_uncommitted, removed_deleted_files, removed_tmp, kept))


def decode_scrub_reply(payload: bytes | bytearray | memoryview) -> dict:
    """The counts of an OK reply to SCRUB (its ``fields["payload"]``).

    Returns
    -------
    dict
        ``files``, ``removed_uncommitted``, ``removed_deleted_files``,
        ``removed_tmp``, ``kept`` (all int).

    Raises
    ------
    ProtocolError
        If the payload is not 40 bytes.
    """
    if len(payload) != SCRUB_REPLY.size:
        raise ProtocolError(f"SCRUB reply payload of {len(payload)} bytes, expected {SCRUB_REPLY.size}")
    return dict(zip(SCRUB_REPLY_FIELDS, SCRUB_REPLY.unpack(bytes(payload))))


def encode_ring_segment(
    seq: int,
    file_id: int,
    generation: int,
    file_name: str,
    peers: list[str],
    origin: int,
    entries: list[tuple[int, bytes]],
    flags: int = 0,
    as_of: int | None = None,
) -> bytes:
    """RING_SEGMENT (peer to peer, GET_LOCAL's ring): the ring header (with
    ``as_of`` and :data:`FLAG_AS_OF` added to ``flags`` when it is not
    None, as in :func:`encode_get_local`), then ``origin`` (the sending
    peer's ring index) and ``(copy_rank, name)`` entries."""
    body = [_ring_header(file_id, generation, file_name, peers, as_of), struct.pack("<HI", origin, len(entries))]
    for rank, name in entries:
        body.append(struct.pack("<B", rank) + _str16(_to_bytes(name)))
    if as_of is not None:
        flags |= FLAG_AS_OF
    return frame(MsgType.RING_SEGMENT, seq, b"".join(body), flags)


def encode_ok(seq: int, payload: bytes = b"") -> bytes:
    """OK with ``payload`` (empty for most requests)."""
    return frame(MsgType.OK, seq, payload)


def encode_data(seq: int, crc: int, copy_rank: int, data: bytes) -> bytes:
    """DATA ``crc32c:u32 copy_rank:u8 data``: the reply to GET (and GET_META)."""
    return frame(MsgType.DATA, seq, struct.pack("<IB", crc, copy_rank) + data)


def encode_error(seq: int, code: int, message: str, peers: tuple[str, ...] | list[str] = ()) -> bytes:
    """ERROR ``code:u16 message:str16 [count:u16 peer:str16 * count]``; the
    peers field (the peers the error concerns) is left out when empty."""
    payload = struct.pack("<H", code) + _str16(message.encode())
    if peers:
        payload += struct.pack("<H", len(peers)) + b"".join(_str16(p.encode()) for p in peers)
    return frame(MsgType.ERROR, seq, payload)


def encode_local_list(seq: int, entries: list[tuple[int, int, bytes, bytes]], flags: int = 0) -> bytes:
    """LOCAL_LIST: ``(copy_rank, size, name, path)`` entries (name and path as
    bytes, size in bytes); every frame but the last carries ``FLAG_MORE``."""
    body = [struct.pack("<I", len(entries))]
    for rank, size, name, path in entries:
        body.append(struct.pack("<BQ", rank, size) + _str16(name) + _str16(path))
    return frame(MsgType.LOCAL_LIST, seq, b"".join(body), flags)


@dataclass(slots=True)
class Frame:
    """A decoded frame. ``fields`` holds the payload's named fields."""

    type: int
    seq: int
    flags: int = 0
    fields: dict = field(default_factory=dict)


class LocalEntries:
    """The entries of a LOCAL_LIST reply by column: ``ranks``, ``sizes``,
    ``names`` and ``paths`` (str, UTF-8 with surrogateescape), one list
    each (a GET_LOCAL plan of a million records without an object per
    record). Decoded by ``st_py._native.decode_local_list`` when it is
    built, else from :func:`decode_payload`'s tuples."""

    __slots__ = ("ranks", "sizes", "names", "paths")

    def __init__(self, ranks: list, sizes: list, names: list, paths: list):
        self.ranks, self.sizes, self.names, self.paths = ranks, sizes, names, paths

    @classmethod
    def of(cls, entries) -> "LocalEntries":
        """From ``(rank, size, name bytes, path bytes)`` tuples, or as is."""
        if isinstance(entries, LocalEntries):
            return entries
        out = cls([], [], [], [])
        for rank, size, name, path in entries:
            out.ranks.append(rank)
            out.sizes.append(size)
            out.names.append(name.decode("utf-8", "surrogateescape"))
            out.paths.append(path.decode("utf-8", "surrogateescape"))
        return out

    @classmethod
    def concat(cls, parts) -> "LocalEntries":
        """One list of ``parts`` in order (``list.extend``: copies of
        pointers in C, not an iteration per entry; one part is returned as
        it is)."""
        parts = [cls.of(p) for p in parts]
        if len(parts) == 1:
            return parts[0]
        out = cls([], [], [], [])
        for p in parts:
            out.ranks.extend(p.ranks)
            out.sizes.extend(p.sizes)
            out.names.extend(p.names)
            out.paths.extend(p.paths)
        return out

    def __len__(self) -> int:
        return len(self.names)


def decode_local_list_native(native, payload) -> dict:
    """A LOCAL_LIST payload's fields with its entries by column
    (:class:`LocalEntries`) through the native decoder.

    Raises
    ------
    ProtocolError
        If the payload is malformed.
    """
    try:
        return {"entries": LocalEntries(*native.decode_local_list(bytes(payload)))}
    except ValueError as e:
        raise ProtocolError(str(e)) from None


class _Reader:
    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: memoryview, pos: int, end: int):
        self.buf, self.pos, self.end = buf, pos, end

    def take(self, n: int) -> memoryview:
        if self.pos + n > self.end:
            raise ProtocolError("payload shorter than its fields")
        v = self.buf[self.pos : self.pos + n]
        self.pos += n
        return v

    def u8(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        return struct.unpack("<H", self.take(2))[0]

    def u32(self) -> int:
        return struct.unpack("<I", self.take(4))[0]

    def u64(self) -> int:
        return struct.unpack("<Q", self.take(8))[0]

    def str16(self) -> bytes:
        return bytes(self.take(self.u16()))

    def rest(self) -> memoryview:
        return self.take(self.end - self.pos)

    def left(self) -> int:
        return self.end - self.pos

    def done(self) -> None:
        if self.pos != self.end:
            raise ProtocolError(f"{self.end - self.pos} trailing bytes after the payload")


def _ring_fields(r: _Reader, flags: int) -> dict:
    file_id, generation = r.u64(), r.u64()
    f = {"file_id": file_id, "generation": generation, "file_name": r.str16().decode("utf-8", "replace")}
    n = r.u16()
    f["peers"] = [r.str16().decode("utf-8", "replace") for _ in range(n)]
    if flags & FLAG_AS_OF:  # only then: frames without it decode as before
        f["as_of"] = as_of = r.u64()
        _check_as_of(generation, as_of)
    return f


def decode_payload(msg_type: int, flags: int, payload: memoryview) -> dict:
    """Decode the payload of one frame into a dict of named fields.

    Raises
    ------
    ProtocolError
        If the payload does not match the grammar of its type.
    """
    r = _Reader(payload, 0, len(payload))
    t = msg_type
    if t == MsgType.PUT:
        f = {"file_id": r.u64(), "copy_rank": r.u8(), "crc32c": r.u32(), "name": r.str16()}
        f["data"] = bytes(r.rest())
    elif t == MsgType.PUT_CHAIN:
        f = {"file_id": r.u64(), "copy_rank": r.u8(), "crc32c": r.u32(), "name": r.str16()}
        n = r.u8()
        if n > MAX_CHAIN_HOPS:
            raise ProtocolError(f"a chain of {n} hops (at most {MAX_CHAIN_HOPS})")
        f["hops"] = [r.str16().decode("utf-8", "replace") for _ in range(n)]
        f["data"] = bytes(r.rest())
    elif t in (MsgType.GET, MsgType.DELETE):
        f = {"file_id": r.u64(), "name": r.str16()}
    elif t == MsgType.DELETE_FILE:
        f = {"file_id": r.u64()}
    elif t == MsgType.GET_LOCAL:
        f = _ring_fields(r, flags)
    elif t in (MsgType.PING, MsgType.SCRUB, MsgType.LIST_META):
        f = {}
    elif t == MsgType.GET_META:
        f = {"file_id": r.u64(), "offset": r.u64(), "length": r.u32()}
    elif t == MsgType.AUTH:
        f = {"token": bytes(r.rest())}
    elif t == MsgType.RING_SEGMENT:
        f = _ring_fields(r, flags)
        f["origin"] = r.u16()
        n = r.u32()
        f["entries"] = [(r.u8(), r.str16()) for _ in range(n)]
    elif t == MsgType.OK:
        f = {"payload": bytes(r.rest())}
    elif t == MsgType.DATA:
        f = {"crc32c": r.u32(), "copy_rank": r.u8()}
        f["data"] = bytes(r.rest())
    elif t == MsgType.LOCAL_LIST:
        n = r.u32()
        entries = []
        for _ in range(n):
            rank, size = r.u8(), r.u64()
            entries.append((rank, size, r.str16(), r.str16()))
        f = {"entries": entries}
    elif t == MsgType.META_LIST:
        n = r.u32()
        metas = []
        for _ in range(n):
            file_id, generation, size, crc = META_ENTRY.unpack(r.take(META_ENTRY.size))
            metas.append((file_id, generation, size, crc, r.str16()))
        f = {"entries": metas}
    elif t == MsgType.ERROR:
        f = {"code": r.u16(), "message": r.str16().decode("utf-8", "replace")}
        if r.left():  # optional: the peers the error concerns
            n = r.u16()
            if n == 0:
                raise ProtocolError("an ERROR's peers field is present but empty")
            f["peers"] = [r.str16().decode("utf-8", "replace") for _ in range(n)]
    else:
        raise ProtocolError(f"unknown message type 0x{t:02x}")
    r.done()
    return f


class FrameDecoder:
    """Incremental decoder: feed bytes as they arrive, take whole frames out.

    Many frames arriving in one read are decoded back to back (paper 3.2).
    ``max_frame`` bounds the memory a peer can make us buffer.
    """

    BIG = 256 * 1024  # frames this large are received straight into their own buffer

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME):
        self.max_frame = max_frame
        self._buf = bytearray()
        # A large frame is received into one reused buffer: fresh large
        # allocations cost page faults, which dominate at GB/s.
        self._big = bytearray()
        self._big_len = 0  # 0: not in a large frame
        self._big_pos = 0

    def big_view(self) -> memoryview | None:
        """While a large frame is incomplete: the part of its buffer still to
        fill, for ``socket.recv_into`` (one copy from the kernel, no more)."""
        if not self._big_len:
            return None
        return memoryview(self._big)[self._big_pos : self._big_len]

    def big_filled(self, n: int) -> list[Frame]:
        """``n`` bytes were received into :meth:`big_view`."""
        self._big_pos += n
        if self._big_pos < self._big_len:
            return []
        end, self._big_len = self._big_len, 0
        _, t, _, flags, seq = HEADER.unpack_from(self._big, 0)
        payload = memoryview(self._big)[HEADER_SIZE:end]
        try:
            fields = decode_payload(t, flags, payload)
        finally:
            payload.release()
        return [Frame(t, seq, flags, fields)]

    def feed(self, data: bytes | memoryview) -> list[Frame]:
        """Decode every whole frame in the bytes received so far.

        ``data`` may be a view of a reused receive buffer: nothing returned
        refers to it. Raises :class:`ProtocolError` on a malformed frame.
        """
        if self._buf:
            self._buf += data
            buf: bytearray | memoryview = self._buf
        else:  # common case: parse straight from the receive buffer, no copy
            buf = data if isinstance(data, memoryview) else memoryview(data)
        out: list[Frame] = []
        pos = 0
        n = len(buf)
        while n - pos >= HEADER_SIZE:
            length, t, version, flags, seq = HEADER.unpack_from(buf, pos)
            if length < 12 or length > self.max_frame:
                raise ProtocolError(f"frame length {length} outside [12, {self.max_frame}]")
            if version != VERSION:
                raise ProtocolError(f"protocol version {version}, expected {VERSION}")
            if n - pos < 4 + length:
                if 4 + length >= self.BIG:  # switch to filling the large-frame buffer
                    if len(self._big) < 4 + length:
                        self._big = bytearray(4 + length)
                    self._big[: n - pos] = buf[pos:n]
                    self._big_len, self._big_pos = 4 + length, n - pos
                    pos = n
                break
            payload = memoryview(buf)[pos + HEADER_SIZE : pos + 4 + length]
            try:
                fields = decode_payload(t, flags, payload)
            finally:
                payload.release()
            out.append(Frame(t, seq, flags, fields))
            pos += 4 + length
        if buf is self._buf:
            if pos:
                del buf[:pos]
        elif pos < n:
            self._buf = bytearray(buf[pos:n])
        return out

    @property
    def buffered(self) -> int:
        """Bytes received and not yet decoded (of a partial frame)."""
        return len(self._buf) + (self._big_pos if self._big_len else 0)


# The peer's STALE_INFOFILE message (st_core/src/get_local.cc writes it):
# "... is at generation H and the plan asks for generation G: the tracker T could not ..."
_STALE = re.compile(r"is at generation (\d+) and the plan asks for generation (\d+): the tracker (\S+) could not")


def stale_infofile_error(exc: PeerError) -> StalePeerCopyError:
    """The :class:`~st_py.errors.StalePeerCopyError` of a peer's
    STALE_INFOFILE refusal of a GET_LOCAL (``exc.code`` is
    :data:`ErrorCode.STALE_INFOFILE`), its fields read from the peer's
    message (0 and "" if a field is not in it)."""
    m = _STALE.search(exc.message)
    have, generation, tracker = (int(m.group(1)), int(m.group(2)), m.group(3)) if m else (0, 0, "")
    return StalePeerCopyError(
        f"peer {exc.peer} refused GET_LOCAL: {exc.message}",
        peer=exc.peer,
        generation=generation,
        have=have,
        tracker=tracker,
        reason=exc.message,
    )

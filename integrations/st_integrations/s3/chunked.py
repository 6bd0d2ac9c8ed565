"""The bodies of S3 PUTs: ``aws-chunked`` streaming payloads decoded, and
the checksums clients send (``x-amz-checksum-crc32``, ``-crc32c``,
``-sha256``, ``Content-MD5``; in a header or an ``aws-chunked`` trailer)
checked against the bytes received.

An ``aws-chunked`` body is ``HEX-SIZE[;chunk-signature=SIG]\\r\\nBYTES\\r\\n``
chunks ending with a ``0``-size chunk, then trailer lines
``name:value\\r\\n`` and an empty line (AWS "Signature Calculations for the
Authorization Header: Transferring Payload in Multiple Chunks"). Signed
chunks (``STREAMING-AWS4-HMAC-SHA256-PAYLOAD[-TRAILER]``, what the AWS SDK
for Java v2 and minio-go send over plain http) are checked against a
:class:`ChunkChain`: each chunk's signature chains from the one before,
the first from the ``Authorization`` header's (the seed), and a signed
trailer's (``x-amz-trailer-signature``) from the last chunk's (AWS
"Signature calculation: Transferring payload in multiple chunks").

Thread safety: the functions are pure; a decoder or checksum accumulator
is one body's, used by one thread at a time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import zlib
from dataclasses import dataclass
from typing import Any

from .errors import S3Error

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


@dataclass(frozen=True)
class ChunkChain:
    """What signs an ``aws-chunked`` body's chunks: the request's SigV4
    signing ``key``, its ``amz_date`` (``x-amz-date``), credential
    ``scope`` (``DATE/REGION/s3/aws4_request``) and ``seed`` signature
    (the ``Authorization`` header's, checked already); ``trailer``: the
    body ends with a signed trailer (``...-PAYLOAD-TRAILER``)."""

    key: bytes
    amz_date: str
    scope: str
    seed: str
    trailer: bool = False

    def chunk(self, prev: str, data) -> str:
        """The signature of a chunk of ``data`` following signature ``prev``."""
        return self.chunk_digest(prev, hashlib.sha256(data).hexdigest())

    def chunk_digest(self, prev: str, digest: str) -> str:
        """The signature of a chunk whose SHA-256 is ``digest`` (hex)
        following signature ``prev``."""
        to_sign = "\n".join(["AWS4-HMAC-SHA256-PAYLOAD", self.amz_date, self.scope, prev, EMPTY_SHA256, digest])
        return hmac.new(self.key, to_sign.encode(), hashlib.sha256).hexdigest()

    def trailing(self, prev: str, canonical: bytes) -> str:
        """The signature of the trailer whose lines are ``canonical``
        (``name:value\\n`` each), following the last chunk's ``prev``."""
        digest = hashlib.sha256(canonical).hexdigest()
        to_sign = "\n".join(["AWS4-HMAC-SHA256-TRAILER", self.amz_date, self.scope, prev, digest])
        return hmac.new(self.key, to_sign.encode(), hashlib.sha256).hexdigest()


def _bad_signature(what: str) -> S3Error:
    return S3Error(
        "SignatureDoesNotMatch",
        f"the {what} signature we calculated does not match the signature you provided; check your key",
    )


MAX_CHUNK_HEADER = 4096  # bytes of one chunk's header line (HEX;chunk-signature=64 hex), at most
MAX_TRAILER = 16 << 10  # bytes of the trailer lines, at most


class ChunkedDecoder:
    """An ``aws-chunked`` body decoded as its bytes arrive, in pieces of
    any size: :meth:`feed` returns the payload's bytes in it (views of the
    piece fed, no copy), :meth:`finish` the trailers once every byte was
    fed. With ``chain``, every chunk's ``chunk-signature`` (the final empty
    chunk's too) and a signed trailer's ``x-amz-trailer-signature`` must be
    the chain's; a chunk is checked when its last byte arrives, before the
    next one is given.

    Raises (from :meth:`feed` and :meth:`finish`)
    ------
    S3Error
        ``IncompleteBody`` / ``InvalidRequest``: the framing is broken;
        ``SignatureDoesNotMatch``: a chunk's or the trailer's signature is
        missing or not the chain's.

    Not thread-safe: one body, one thread at a time.
    """

    def __init__(self, chain: ChunkChain | None = None):
        self._chain = chain
        self._prev = chain.seed if chain is not None else ""
        self._head = bytearray()  # a chunk header line not ended yet
        self._state = "head"  # head, data, crlf, trailer
        self._need = 0  # bytes of the chunk's data still to come (data), or of its CRLF (crlf)
        self._sig = b""  # the chunk's signature as sent
        self._hash: Any = None  # the chunk's SHA-256 so far (signed chunks)
        self._trailer = bytearray()

    def feed(self, piece) -> list[memoryview]:
        """The payload bytes in ``piece`` (the body's next bytes), in order."""
        view = memoryview(piece).cast("B")
        out: list[memoryview] = []
        pos, n = 0, len(view)
        while pos < n:
            if self._state == "head":
                eol = bytes(view[pos : pos + MAX_CHUNK_HEADER]).find(b"\n")
                if eol < 0:
                    self._head += view[pos:]
                    if len(self._head) > MAX_CHUNK_HEADER:
                        raise S3Error("InvalidRequest", "an aws-chunked chunk header is too long")
                    return out
                self._head += view[pos : pos + eol + 1]
                pos += eol + 1
                self._start_chunk(bytes(self._head))
                self._head.clear()
            elif self._state == "data":
                take = min(self._need, n - pos)
                part = view[pos : pos + take]
                if self._hash is not None:
                    self._hash.update(part)
                out.append(part)
                pos += take
                self._need -= take
                if self._need == 0:
                    self._end_chunk()
                    self._state, self._need = "crlf", 2
            elif self._state == "crlf":
                take = min(self._need, n - pos)
                if bytes(view[pos : pos + take]) != b"\r\n"[2 - self._need : 2 - self._need + take]:
                    raise S3Error("IncompleteBody", "an aws-chunked chunk is shorter than its size says")
                pos += take
                self._need -= take
                if self._need == 0:
                    self._state = "head"
            else:  # trailer: every byte left
                self._trailer += view[pos:]
                if len(self._trailer) > MAX_TRAILER:
                    raise S3Error("InvalidRequest", "the aws-chunked trailer is too long")
                return out
        return out

    def _start_chunk(self, line: bytes) -> None:
        if not line.endswith(b"\r\n"):
            raise S3Error("InvalidRequest", "an aws-chunked chunk header does not end with CRLF")
        head, _, ext = line[:-2].partition(b";")
        try:
            size = int(head.strip(), 16)
        except ValueError:
            raise S3Error("InvalidRequest", f"bad aws-chunked chunk size {head[:20]!r}") from None
        if self._chain is not None:
            name, _, sig = ext.partition(b"=")
            if name.strip() != b"chunk-signature":
                raise _bad_signature("chunk")
            self._sig, self._hash = sig.strip(), hashlib.sha256()
        self._need = size
        if size == 0:
            self._end_chunk()
            self._state = "trailer"
        else:
            self._state = "data"

    def _end_chunk(self) -> None:
        chain = self._chain
        if chain is None:
            return
        assert self._hash is not None
        want = chain.chunk_digest(self._prev, self._hash.hexdigest())
        if not hmac.compare_digest(want.encode(), self._sig):
            raise _bad_signature("chunk")
        self._prev = want

    def finish(self) -> dict[str, str]:
        """The trailers (names lower-cased), once every byte was fed.

        Raises
        ------
        S3Error
            ``IncompleteBody``: the body ended before its last (empty)
            chunk; ``InvalidRequest``: a bad trailer line;
            ``SignatureDoesNotMatch``: the trailer's signature.
        """
        if self._state != "trailer":
            what = "a chunk header" if self._state == "head" else "a chunk"
            raise S3Error("IncompleteBody", f"an aws-chunked body ended inside {what}")
        trailers: dict[str, str] = {}
        canonical, signature = b"", None
        for line in bytes(self._trailer).replace(b"\r\n", b"\n").split(b"\n"):
            if not line:
                continue
            name, sep, value = line.partition(b":")
            if not sep:
                raise S3Error("InvalidRequest", "a bad aws-chunked trailer line")
            key, text = name.strip().lower().decode("latin-1"), value.strip().decode("latin-1")
            if key == "x-amz-trailer-signature":
                signature = value.strip()
                continue
            trailers[key] = text
            canonical += f"{key}:{text}\n".encode("latin-1")
        chain = self._chain
        if chain is not None and chain.trailer:
            if signature is None or not hmac.compare_digest(chain.trailing(self._prev, canonical).encode(), signature):
                raise _bad_signature("trailer")
        return trailers


def decode_aws_chunked(body: bytes, chain: ChunkChain | None = None) -> tuple[bytes, dict[str, str]]:
    """``(payload, trailers)`` of a whole ``aws-chunked`` body
    (:class:`ChunkedDecoder` fed at once); the payload is the chunks'
    bytes copied once (one join of views of ``body``).

    Raises
    ------
    S3Error
        As :class:`ChunkedDecoder`.
    """
    d = ChunkedDecoder(chain)
    pieces = d.feed(body)
    trailers = d.finish()
    return b"".join(pieces), trailers


def _crc32c_extend(crc: int, data) -> int:
    """CRC-32C of the bytes before (``crc``) and then ``data``."""
    import google_crc32c

    return int(google_crc32c.extend(crc, bytes(data) if isinstance(data, memoryview) else data))


def _b64(n: int, width: int = 4) -> str:
    return base64.b64encode(n.to_bytes(width, "big")).decode()


def crc32c_b64(crc: int) -> str:
    """The ``x-amz-checksum-crc32c`` form of a CRC-32C: base64 of its 4
    big-endian bytes."""
    return _b64(crc)


class Checksums:
    """The checksums a client may send of a body (``Content-MD5``,
    ``x-amz-checksum-crc32``, ``-crc32c``, ``-sha1``, ``-sha256``; names
    lower-cased), computed as its payload passes (:meth:`update`) for the
    names in ``wanted`` (those it sent, in headers or declared in
    ``x-amz-trailer``), then checked (:meth:`check`).

    Not thread-safe: one body, one thread at a time."""

    KNOWN = (
        "content-md5",
        "x-amz-checksum-crc32",
        "x-amz-checksum-crc32c",
        "x-amz-checksum-sha1",
        "x-amz-checksum-sha256",
    )

    def __init__(self, wanted):
        self._want = {n for n in wanted if n in self.KNOWN}
        self._md5 = hashlib.md5() if "content-md5" in self._want else None
        self._sha1 = hashlib.sha1() if "x-amz-checksum-sha1" in self._want else None
        self._sha256 = hashlib.sha256() if "x-amz-checksum-sha256" in self._want else None
        self._crc32 = 0 if "x-amz-checksum-crc32" in self._want else None
        self._crc32c = 0 if "x-amz-checksum-crc32c" in self._want else None

    def update(self, data) -> None:
        """Add the payload's next bytes."""
        for h in (self._md5, self._sha1, self._sha256):
            if h is not None:
                h.update(data)
        if self._crc32 is not None:
            self._crc32 = zlib.crc32(data, self._crc32)
        if self._crc32c is not None:
            self._crc32c = _crc32c_extend(self._crc32c, data)

    def check(self, sent: dict[str, str]) -> None:
        """Check every checksum in ``sent`` (headers and trailers) against
        the payload given to :meth:`update`.

        Raises
        ------
        S3Error
            ``BadDigest`` (``Content-MD5``) or ``XAmzContentChecksumMismatch``;
            ``InvalidRequest``: a checksum arrived that was not declared
            (a trailer not in ``x-amz-trailer``).
        """
        for name in self.KNOWN:
            value = sent.get(name)
            if value is None:
                continue
            if name not in self._want:
                raise S3Error("InvalidRequest", f"{name} was sent in a trailer not declared in x-amz-trailer")
            if name == "content-md5":
                assert self._md5 is not None
                if base64.b64encode(self._md5.digest()).decode() != value:
                    raise S3Error("BadDigest", "the Content-MD5 you specified did not match what we received")
                continue
            if value != self._value(name):
                raise S3Error(
                    "XAmzContentChecksumMismatch",
                    f"the {name} you specified did not match the calculated checksum",
                )

    def _value(self, name: str) -> str:
        if name == "x-amz-checksum-crc32":
            return _b64(self._crc32 or 0)
        if name == "x-amz-checksum-crc32c":
            return _b64(self._crc32c or 0)
        h = self._sha1 if name == "x-amz-checksum-sha1" else self._sha256
        assert h is not None
        return base64.b64encode(h.digest()).decode()


def check_checksums(data: bytes, headers: dict[str, str]) -> None:
    """Check every checksum the client sent (headers and trailers, names
    lower-cased) against ``data`` (:class:`Checksums` of the whole).

    Raises
    ------
    S3Error
        ``BadDigest`` (``Content-MD5``) or ``XAmzContentChecksumMismatch``.
    """
    c = Checksums(headers)
    c.update(data)
    c.check(headers)

"""The bodies of S3 PUTs: ``aws-chunked`` streaming payloads decoded, and
the checksums clients send (``x-amz-checksum-crc32``, ``-crc32c``,
``-sha256``, ``Content-MD5``; in a header or an ``aws-chunked`` trailer)
checked against the bytes received.

An ``aws-chunked`` body is ``HEX-SIZE[;chunk-signature=SIG]\\r\\nBYTES\\r\\n``
chunks ending with a ``0``-size chunk, then trailer lines
``name:value\\r\\n`` and an empty line (AWS "Signature Calculations for the
Authorization Header: Transferring Payload in Multiple Chunks"). Chunk
signatures (``STREAMING-AWS4-HMAC-SHA256-PAYLOAD``) are not verified in
this slice: such requests are refused by :mod:`.auth`.

Thread safety: pure functions.
"""

from __future__ import annotations

import base64
import hashlib
import zlib

from .errors import S3Error

STREAMING = ("STREAMING-UNSIGNED-PAYLOAD-TRAILER",)


def decode_aws_chunked(body: bytes) -> tuple[bytes, dict[str, str]]:
    """``(payload, trailers)`` of an ``aws-chunked`` body; trailer names
    lower-cased. The payload is the chunks' bytes copied once (one join of
    views of ``body``).

    Raises
    ------
    S3Error
        ``IncompleteBody`` / ``InvalidRequest``: the framing is broken.
    """
    view = memoryview(body)
    pieces: list[memoryview] = []
    pos, n = 0, len(body)
    while True:
        eol = body.find(b"\r\n", pos)
        if eol < 0:
            raise S3Error("IncompleteBody", "an aws-chunked body ended inside a chunk header")
        head = body[pos:eol].split(b";", 1)[0].strip()
        try:
            size = int(head, 16)
        except ValueError:
            raise S3Error("InvalidRequest", f"bad aws-chunked chunk size {head[:20]!r}") from None
        pos = eol + 2
        if size == 0:
            break
        if pos + size + 2 > n or body[pos + size : pos + size + 2] != b"\r\n":
            raise S3Error("IncompleteBody", "an aws-chunked chunk is shorter than its size says")
        pieces.append(view[pos : pos + size])
        pos += size + 2
    trailers: dict[str, str] = {}
    for line in body[pos:].split(b"\r\n"):
        if not line:
            continue
        name, sep, value = line.partition(b":")
        if not sep:
            raise S3Error("InvalidRequest", "a bad aws-chunked trailer line")
        trailers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
    return b"".join(pieces), trailers


def _crc32c(data: bytes) -> int:
    from st_py._native import crc32c  # the C++ CRC-32C every record is checked with

    return int(crc32c(data))


def _b64(n: int, width: int = 4) -> str:
    return base64.b64encode(n.to_bytes(width, "big")).decode()


def crc32c_b64(crc: int) -> str:
    """The ``x-amz-checksum-crc32c`` form of a CRC-32C: base64 of its 4
    big-endian bytes."""
    return _b64(crc)


def check_checksums(data: bytes, headers: dict[str, str]) -> None:
    """Check every checksum the client sent (headers and trailers, names
    lower-cased) against ``data``.

    Raises
    ------
    S3Error
        ``BadDigest`` (``Content-MD5``) or ``XAmzContentChecksumMismatch``.
    """
    md5 = headers.get("content-md5")
    if md5 and base64.b64encode(hashlib.md5(data).digest()).decode() != md5:
        raise S3Error("BadDigest", "the Content-MD5 you specified did not match what we received")
    checks = {
        "x-amz-checksum-crc32": lambda: _b64(zlib.crc32(data)),
        "x-amz-checksum-crc32c": lambda: _b64(_crc32c(data)),
        "x-amz-checksum-sha256": lambda: base64.b64encode(hashlib.sha256(data).digest()).decode(),
        "x-amz-checksum-sha1": lambda: base64.b64encode(hashlib.sha1(data).digest()).decode(),
    }
    for name, compute in checks.items():
        sent = headers.get(name)
        if sent is not None and sent != compute():
            raise S3Error(
                "XAmzContentChecksumMismatch",
                f"the {name} you specified did not match the calculated checksum",
            )

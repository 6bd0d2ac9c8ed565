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

Thread safety: pure functions.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import zlib
from dataclasses import dataclass

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
        digest = hashlib.sha256(data).hexdigest()
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


def decode_aws_chunked(body: bytes, chain: ChunkChain | None = None) -> tuple[bytes, dict[str, str]]:
    """``(payload, trailers)`` of an ``aws-chunked`` body; trailer names
    lower-cased. The payload is the chunks' bytes copied once (one join of
    views of ``body``). With ``chain``, every chunk's ``chunk-signature``
    (the final empty chunk's too) and a signed trailer's
    ``x-amz-trailer-signature`` must be the chain's.

    Raises
    ------
    S3Error
        ``IncompleteBody`` / ``InvalidRequest``: the framing is broken;
        ``SignatureDoesNotMatch``: a chunk's or the trailer's signature is
        missing or not the chain's.
    """
    view = memoryview(body)
    pieces: list[memoryview] = []
    pos, n = 0, len(body)
    prev = chain.seed if chain is not None else ""
    while True:
        eol = body.find(b"\r\n", pos)
        if eol < 0:
            raise S3Error("IncompleteBody", "an aws-chunked body ended inside a chunk header")
        head, _, ext = body[pos:eol].partition(b";")
        try:
            size = int(head.strip(), 16)
        except ValueError:
            raise S3Error("InvalidRequest", f"bad aws-chunked chunk size {head[:20]!r}") from None
        pos = eol + 2
        if size and (pos + size + 2 > n or body[pos + size : pos + size + 2] != b"\r\n"):
            raise S3Error("IncompleteBody", "an aws-chunked chunk is shorter than its size says")
        if chain is not None:
            name, _, sig = ext.partition(b"=")
            if name.strip() != b"chunk-signature":
                raise _bad_signature("chunk")
            want = chain.chunk(prev, view[pos : pos + size])
            if not hmac.compare_digest(want.encode(), sig.strip()):
                raise _bad_signature("chunk")
            prev = want
        if size == 0:
            break
        pieces.append(view[pos : pos + size])
        pos += size + 2
    trailers: dict[str, str] = {}
    canonical, signature = b"", None
    for line in body[pos:].replace(b"\r\n", b"\n").split(b"\n"):
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
    if chain is not None and chain.trailer:
        if signature is None or not hmac.compare_digest(chain.trailing(prev, canonical).encode(), signature):
            raise _bad_signature("trailer")
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

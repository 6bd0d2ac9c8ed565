"""The body of an S3 PUT checked as the client signed and summed it
(docs/s3.md, "Access keys", "Signed chunks", "Large PUTs"): the signed
``x-amz-content-sha256`` of the body as sent, an ``aws-chunked`` body
decoded (its chunks' signatures checked: :mod:`.chunked`), its declared
decoded length, and every checksum sent in a header or a trailer.

:class:`PayloadCheck` does it as the body's bytes arrive, in pieces of any
size; :func:`check_payload` of a whole body, and :class:`StreamedBody`
reads a body from the network as a binary file (a PUT over
``STRIPE_THRESHOLD`` stored stripe by stripe), both through it: one owner
of what a body must be.

Thread safety: a check or a stream is one request's, used by one thread at
a time.
"""

from __future__ import annotations

import hashlib
import re
from collections import deque
from collections.abc import Callable

from .auth import STREAM_SIGNED, STREAM_SIGNED_TRAILER, STREAMING, Keys, chunk_chain
from .chunked import Checksums, ChunkedDecoder
from .errors import S3Error
from .pieces import Piece, PieceReader

_HEX64 = re.compile(r"[0-9a-f]{64}")


class PayloadCheck:
    """What one request's body must be, checked as it arrives: :meth:`feed`
    the body's bytes as sent (returns the payload's bytes in them),
    then :meth:`finish` (raises if anything did not match).

    ``headers``: the request's (lower-cased names); ``keys``: the
    endpoint's (signed chunks are checked outside development mode).
    """

    def __init__(self, headers: dict[str, list[str]], keys: Keys | None):
        self._sums = {k: v[0] for k, v in headers.items() if k.startswith("x-amz-checksum-") or k == "content-md5"}
        payload = (headers.get("x-amz-content-sha256") or [""])[0]
        encoding = (headers.get("content-encoding") or [""])[0]
        # a signed payload hash is of the body as sent, aws-chunked or not: never skipped
        self._want_sha = payload if _HEX64.fullmatch(payload) else None
        self._sha = hashlib.sha256() if self._want_sha else None
        self._decoder: ChunkedDecoder | None = None
        self.declared: int | None = None  # the payload's length as the client declared it
        if payload in STREAMING or "aws-chunked" in encoding:
            chain = chunk_chain(keys, headers) if keys is not None else None
            if chain is None and payload in (STREAM_SIGNED, STREAM_SIGNED_TRAILER) and (keys is None or not keys.open):
                raise S3Error("InternalError", "signed chunks reached a check without the endpoint's keys")
            self._decoder = ChunkedDecoder(chain)
            decoded = (headers.get("x-amz-decoded-content-length") or [""])[0]
            self.declared = int(decoded) if decoded.isdigit() else None
        else:
            length = (headers.get("content-length") or [""])[0]
            self.declared = int(length) if length.isdigit() else None
        trailer_names = {t.strip().lower() for v in headers.get("x-amz-trailer", []) for t in v.split(",")}
        self._checks = Checksums(set(self._sums) | trailer_names)
        self.size = 0  # payload bytes given so far

    def feed(self, piece) -> list:
        """The payload's bytes in ``piece`` (the body's next bytes as
        sent), in order: ``piece`` itself unless the body is ``aws-chunked``.

        Raises
        ------
        S3Error
            As :class:`.chunked.ChunkedDecoder` (a chunk's signature, the framing).
        """
        if self._sha is not None:
            self._sha.update(piece)
        out = [piece] if self._decoder is None else self._decoder.feed(piece)
        for p in out:
            self._checks.update(p)
            self.size += len(p)
        return out

    def finish(self) -> None:
        """Check what can be checked only at the end.

        Raises
        ------
        S3Error
            ``XAmzContentSHA256Mismatch``, ``IncompleteBody`` (the payload
            is not its declared length, or an ``aws-chunked`` body ended
            early), ``SignatureDoesNotMatch`` (the trailer's),
            ``XAmzContentChecksumMismatch`` / ``BadDigest``.
        """
        if self._sha is not None and self._sha.hexdigest() != self._want_sha:
            raise S3Error("XAmzContentSHA256Mismatch", "the provided x-amz-content-sha256 does not match the body")
        sums = dict(self._sums)
        if self._decoder is not None:
            sums.update(self._decoder.finish())
            if self.declared is not None and self.declared != self.size:
                raise S3Error("IncompleteBody", "the decoded body is not x-amz-decoded-content-length bytes")
        elif self.declared is not None and self.declared != self.size:
            raise S3Error("IncompleteBody", f"the body is {self.size} bytes, not its Content-Length {self.declared}")
        self._checks.check(sums)


def check_payload(headers: dict[str, list[str]], body: bytes, keys: Keys | None = None) -> bytes:
    """The payload of a whole request ``body``, checked (:class:`PayloadCheck`):
    ``body`` itself, or an ``aws-chunked`` body's chunks joined (copied once).

    Raises
    ------
    S3Error
        As :meth:`PayloadCheck.feed` and :meth:`PayloadCheck.finish`.
    """
    check = PayloadCheck(headers, keys)
    pieces = check.feed(body)
    check.finish()
    if len(pieces) == 1 and pieces[0] is body:
        return body
    return b"".join(pieces)


class StreamedBody(PieceReader):
    """A request's payload as a read-only binary file (:class:`.pieces.PieceReader`),
    read from the network as it is consumed (``next_piece()``: the body's
    next bytes as sent, None at its end) and checked as it passes
    (:class:`PayloadCheck`): the read that meets the end raises if
    anything did not match, so a stripe store that reads to the end
    commits nothing from a bad body. ``read(n)`` gives up to ``n`` bytes
    (fewer at a piece's end). A read raises ``S3Error``: what
    :class:`PayloadCheck` finds (a read after that gives ``b""``), or
    ``EntityTooLarge`` past ``limit`` bytes of payload.

    Not thread-safe: one reader, one thread."""

    def __init__(self, next_piece: Callable[[], bytes | None], check: PayloadCheck, limit: int):
        super().__init__(self._next_payload)
        self._next, self._check, self._limit = next_piece, check, limit
        self._pending: deque = deque()  # the payload's pieces of the body's bytes taken, not yet given
        self._done = False

    def _next_payload(self) -> Piece:
        """The payload's next piece (never empty), b"" at its end (checked then)."""
        while not self._pending:
            if self._done:
                return b""
            raw = self._next()
            if raw is None:
                self._done = True
                self._check.finish()
                return b""
            self._pending.extend(p for p in self._check.feed(raw) if len(p))
            if self._check.size > self._limit:
                raise S3Error("EntityTooLarge", "your proposed upload exceeds the maximum allowed object size")
        return self._pending.popleft()

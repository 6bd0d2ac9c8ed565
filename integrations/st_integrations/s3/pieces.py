"""A read-only binary file over a source of pieces: the one reader under
the endpoint's streamed bodies (docs/s3.md, "Large PUTs", "Multipart
uploads"). Each subclass says only where its pieces come from:
:class:`.multipart.PartsReader` (an upload's parts, read from their
records), :class:`.objstream.BodyReader` (an object's stripes, as a GET
streams them) and :class:`.payload.StreamedBody` (a request's payload,
from the network through :class:`.payload.PayloadCheck`); what reads them
is :meth:`st_py.client.file.StFile.put_object`, a stripe at a time.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable

Piece = bytes | bytearray | memoryview


class PieceReader(io.RawIOBase):
    """The pieces ``next_piece()`` gives, in order, as one read-only
    binary file (``io.RawIOBase``; not seekable).

    Shapes and units: ``next_piece()`` returns the stream's next piece, a
    bytes-like object (bytes, bytearray or a byte memoryview) of any
    length, or an empty one at the stream's end, after which it is not
    called again. ``read(n)`` gives up to ``n`` bytes of the current piece
    as ``bytes``: fewer at a piece's end (as a raw file may; a whole piece
    asked for whole is given without a copy when it is ``bytes``), ``b""``
    at the stream's end only; ``read(-1)`` the rest of the stream joined.
    ``readinto(b)`` fills a writable buffer the same way (its size in
    bytes). A piece is held until it is given whole, never more than one.

    Errors: what ``next_piece()`` raises is raised by the read that needed
    the next piece; the reader keeps its place, so a later read asks
    ``next_piece()`` again (each source says what that gives). A
    subclass's ``close`` releases its source; this one's only closes the
    file.

    Thread safety: none. One reader, one thread.
    """

    def __init__(self, next_piece: Callable[[], Piece]):
        super().__init__()
        self._next_piece = next_piece
        self._piece: Piece = b""
        self._at = 0  # bytes of the piece given
        self._ended = False

    def readable(self) -> bool:
        """``io.RawIOBase``: True, a read-only stream."""
        return True

    def _take(self, n: int) -> Piece:
        """Up to ``n`` (> 0) bytes of the current piece, the next one asked
        for when it is all given; empty at the stream's end."""
        while self._at >= len(self._piece):
            if self._ended:
                return b""
            piece = self._next_piece()
            if not len(piece):
                self._ended = True
                self._piece, self._at = b"", 0
                return b""
            self._piece, self._at = piece, 0
        piece, at = self._piece, self._at
        end = min(len(piece), at + n)
        if end == len(piece):  # given whole: not held any longer
            self._piece, self._at = b"", 0
            return piece if at == 0 else piece[at:]
        self._at = end
        return piece[at:end]

    def read(self, n: int | None = -1) -> bytes:
        """Up to ``n`` bytes of the current piece, ``b""`` at the stream's
        end; -1 (or None): the rest of the stream.

        Raises
        ------
        Exception
            What ``next_piece()`` raises (the subclass's source says).
        """
        if n is None or n < 0:
            return b"".join(iter(lambda: self.read(sys.maxsize), b""))
        if n == 0:
            return b""
        out = self._take(n)
        return out if type(out) is bytes else bytes(out)

    def readinto(self, b) -> int:
        """``io.RawIOBase``: :meth:`read` of up to the size of the writable
        buffer ``b`` into it; the bytes given (0 at the stream's end).
        Raises as :meth:`read`."""
        view = memoryview(b).cast("B")
        if not len(view):
            return 0
        piece = self._take(len(view))
        view[: len(piece)] = piece
        return len(piece)


__all__ = ["Piece", "PieceReader"]

"""The body of a GET of a striped object, streamed to the client as its
stripes arrive (docs/s3.md, "The fast path"): the stripes come from
:func:`st_py.client.object_stream.stream_object` (bounded read-ahead over
the file's pipelined GETs, failover per stripe, local copies read from
disk), the file handle stays borrowed until the last byte is given or the
client goes away, then it is released (:attr:`ObjectBody.release`).

Thread safety: one :class:`ObjectBody` per response; its steps run one at
a time (Starlette's worker threads, in turn).
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable, Iterator

from starlette.concurrency import run_in_threadpool

from st_py.client.object_stream import StreamStats

from .pieces import PieceReader


class ObjectBody:
    """Pieces of an object, in order, from ``pieces``; ``length`` bytes in all.

    ``release(ok)`` is set by whoever lent the handle the pieces are read
    through, and called once: when the last piece was given (``ok``
    True), or the stream failed or was abandoned (False: the handle is
    closed rather than kept). ``done(stats)`` is called once too, with the
    stream's counters.
    """

    def __init__(self, pieces: Iterator[bytes], length: int, stats: StreamStats, done: Callable[[StreamStats], None]):
        self._it, self.length, self.stats, self._done = pieces, length, stats, done
        self.release: Callable[[bool], None] | None = None
        self._first: bytes | None = None
        self._ended = False
        self._given = 0  # bytes taken by the response
        self._lock = threading.Lock()

    @property
    def ended(self) -> bool:
        """Whether the stream has ended (every piece read, or failed, or abandoned)."""
        return self._ended

    def prefetch(self) -> None:
        """Read the first piece now (in the request's worker thread), so a
        failure to read the object's first stripe is the request's error
        (an S3 error document) rather than a body cut short.

        Raises
        ------
        StoreTorrentError
            As :func:`st_py.client.object_stream.stream_object`.
        """
        try:
            self._first = next(self._it)
        except StopIteration:
            self._first = None
            self.finish(True)
        except BaseException:
            self.finish(False)
            raise

    def _next(self) -> bytes | None:
        """The next piece, or None at the end. The stream ends (the handle
        released, the counters given) as its last piece is taken, before
        that piece is sent: whoever has every byte sees it ended."""
        piece = self._first
        self._first = None
        if piece is None:
            if self._ended:
                return None
            try:
                piece = next(self._it)
            except StopIteration:
                self.finish(True)
                return None
            except BaseException:
                self.finish(False)
                raise
        self._given += len(piece)
        if self._given >= self.length:
            self.finish(True)
        return piece

    def finish(self, ok: bool) -> None:
        """End the stream (once): the handle released, the counters given."""
        with self._lock:
            if self._ended:
                return
            self._ended = True
        try:
            close = getattr(self._it, "close", None)
            if close is not None:
                try:
                    close()
                except ValueError:  # a worker thread is in it still (the client went away): the handle's close ends it
                    pass
        finally:
            try:
                self._done(self.stats)
            finally:
                if self.release is not None:
                    self.release(ok)

    def __iter__(self) -> Iterator[bytes]:
        """The pieces, read in the calling thread."""
        try:
            while True:
                piece = self._next()
                if piece is None:
                    return
                yield piece
        finally:
            self.finish(False)  # a no-op once ended

    async def aiter(self) -> AsyncIterator[bytes]:
        """The pieces for Starlette's ``StreamingResponse``, each read in a
        worker thread; the client going away (the task cancelled) ends the
        stream and closes the handle."""
        try:
            while True:
                piece = await run_in_threadpool(self._next)
                if piece is None:
                    return
                yield piece
        finally:
            self.finish(False)  # a no-op once ended


class BodyReader(PieceReader):
    """An :class:`ObjectBody` as a read-only binary file
    (:class:`.pieces.PieceReader`), its pieces (the object's stripes, or
    the parts of them a range asks for) read in the calling thread:
    CopyObject of a striped object streams its source into the copy this
    way, never holding it whole. ``read(n)`` gives up to ``n`` bytes
    (fewer at a piece's end); a read raises what
    :meth:`ObjectBody.prefetch` does. Closing it before the end ends the
    body (its handle closed, not kept).

    Not thread-safe: one reader, one thread."""

    def __init__(self, body: ObjectBody):
        super().__init__(self._next_body_piece)
        self._body = body
        self._pieces = iter(body)

    def _next_body_piece(self) -> bytes:
        """The body's next piece that is not empty, b"" at its end."""
        for piece in self._pieces:
            if len(piece):
                return piece
        return b""

    def close(self) -> None:
        """End the body (its handle released; closed, not kept, before
        the end), then this stream."""
        self._body.finish(False)  # a no-op once every piece was read
        super().close()


__all__ = ["BodyReader", "ObjectBody"]

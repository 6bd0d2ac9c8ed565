"""The outcome of a queued operation (``queue_put``, ``queue_get``).

Why not :class:`concurrent.futures.Future`: the client library is one
thread driving its own event loop (paper 3.2's pipelining: frames are sent
and replies received only while the caller polls). A Future's ``result()``
waits on a condition for another thread to set it, which here would never
come: ``Pending.result()`` instead turns the file's transport until the
operation is done. It keeps the Future's method names (``done``,
``result``, ``exception``) so code written for futures reads the same.
"""

from __future__ import annotations

from typing import Any


class Pending:
    """The outcome of a queued operation: ``done()``, ``result()``, ``exception()``.

    ``result()`` and ``exception()`` wait, turning the open file's
    transport (sending queued frames, receiving replies) until the
    operation is done.
    """

    __slots__ = ("name", "_done", "_result", "_exc", "_file")

    def __init__(self, file: Any, name: str):
        self._file, self.name = file, name  # the StFile whose transport completes it
        self._done = False
        self._result: object = None
        self._exc: Exception | None = None

    def _set(self, result=None, exc: Exception | None = None) -> None:
        self._done, self._result, self._exc = True, result, exc

    def done(self) -> bool:
        return self._done

    def exception(self) -> Exception | None:
        """The operation's error, or None, once it is done."""
        self._file._transport.wait(lambda: self._done)
        return self._exc

    def result(self):
        """The operation's result once it is done.

        Raises
        ------
        StoreTorrentError
            The operation's own error (e.g. RecordExistsError, PeerError).
        """
        exc = self.exception()
        if exc is not None:
            raise exc
        return self._result

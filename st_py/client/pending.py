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

from collections.abc import Callable


class Pending:
    """The outcome of a queued operation: ``done()``, ``result()``, ``exception()``.

    ``result()`` and ``exception()`` wait, turning the open file's
    transport (sending queued frames, receiving replies) until the
    operation is done. The file completes it with :meth:`set_result` or
    :meth:`set_exception`, once.

    Thread safety: may be waited on from any thread (the file's transport
    turns under the file's lock; ``tests/test_threads.py``).
    """

    __slots__ = ("name", "_done", "_value", "_error", "_wait")

    def __init__(self, wait: Callable[[Callable[[], bool]], None], name: str):
        """``wait(predicate)`` turns the file's transport until
        ``predicate()`` is true (the file's ``Transport.wait``); ``name``
        is the record the operation is about."""
        self._wait, self.name = wait, name
        self._done = False
        self._value: object = None
        self._error: Exception | None = None

    def set_result(self, value: object = None) -> None:
        """Complete the operation with ``value`` (called by the file)."""
        self._done, self._value, self._error = True, value, None

    def set_exception(self, exc: Exception) -> None:
        """Complete the operation with the error ``exc`` (called by the file)."""
        self._done, self._value, self._error = True, None, exc

    def done(self) -> bool:
        """Whether the operation is done (acknowledged, read or failed), without
        waiting or turning the transport: poll the file to make progress."""
        return self._done

    def exception(self) -> Exception | None:
        """The operation's error, or None, once it is done."""
        if not self._done:
            self._wait(lambda: self._done)
        return self._error

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
        return self._value

"""A connection to an etcd cluster that moves to the next member when the
one it talks to does not answer (docs/metadata-log.md, "Backends").

aetcd (asyncio over gRPC; chosen on evidence in docs/metadata-log.md) dials
one endpoint; a member that is dead, or alive but cut off from the majority
(its linearizable requests time out), makes :meth:`EtcdSession.call` try the
next one until the call's deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import aetcd
import aetcd.exceptions as etcd_errors

from st_py.tracker.log.errors import ConsensusUnavailableError

T = TypeVar("T")

# what a member that cannot serve says (or does not say): try the next one
_RETRYABLE = (etcd_errors.ConnectionFailedError, etcd_errors.ConnectionTimeoutError, etcd_errors.InternalError)
# what a member says when it cannot reach a quorum in time (etcd's
# rpctypes: ErrTimeout, ErrLeaderChanged, ErrNoLeader, ErrTooManyRequests,
# and a server-side context deadline): transient, so try again
_TRANSIENT = (
    "context deadline exceeded",
    "etcdserver: request timed out",
    "etcdserver: leader changed",
    "etcdserver: no leader",
    "etcdserver: too many requests",
)


def _transient(e: Exception) -> bool:
    if isinstance(e, _RETRYABLE):
        return True
    return isinstance(e, etcd_errors.ClientError) and any(t in str(e) for t in _TRANSIENT)


class EtcdSession:
    """Calls to the members ``endpoints`` (``host:port`` each).

    Use from one event loop. ``request_timeout`` bounds each try at one
    member; a call's ``deadline_s`` bounds all its tries.
    """

    def __init__(self, endpoints: list[str], request_timeout: float = 2.0, deadline_s: float = 10.0):
        if not endpoints:
            raise ValueError("no etcd endpoints given")
        self.endpoints = list(endpoints)
        self.request_timeout = request_timeout
        self.deadline_s = deadline_s
        self._current = 0
        self._client: aetcd.Client | None = None

    def _make(self) -> aetcd.Client:
        host, _, port = self.endpoints[self._current].rpartition(":")
        return aetcd.Client(host=host, port=int(port), timeout=self.request_timeout)

    async def client(self) -> aetcd.Client:
        """The client of the member in use (connected)."""
        if self._client is None:
            self._client = self._make()
            await self._client.connect()
        return self._client

    async def _next(self) -> None:
        old, self._client = self._client, None
        self._current = (self._current + 1) % len(self.endpoints)
        if old is not None:
            try:  # a channel whose packets vanish may not close at once: it is dropped anyway
                await asyncio.wait_for(old.close(), 1.0)
            except (Exception, asyncio.TimeoutError):  # noqa: BLE001 - a broken channel may fail to close
                pass

    async def call(self, fn: Callable[[aetcd.Client], Awaitable[T]], deadline_s: float | None = None) -> T:
        """``await fn(client)``, moved to the next member on a connection
        failure or a timeout until ``deadline_s`` seconds have passed.

        Raises
        ------
        ConsensusUnavailableError
            No member answered in time.
        aetcd.exceptions.ClientError
            Any other refusal from etcd, as it came.
        """
        deadline = time.monotonic() + (self.deadline_s if deadline_s is None else deadline_s)
        last = "no member tried"
        while True:
            # each try bounded too (then the next member, on a new connection): a stream (a
            # lease's keepalive) on a connection whose packets vanish waited forever, and a
            # leader cut off the network never learned its term ended (test_tracker_netns)
            try_s = max(min(3 * self.request_timeout, deadline - time.monotonic()), 0.05)
            try:
                return await asyncio.wait_for(self._try(fn), try_s)
            except etcd_errors.ClientError as e:
                if not _transient(e):
                    raise
                last = f"{self.endpoints[self._current]}: {type(e).__name__} {e}".strip()
                await self._next()
            except asyncio.TimeoutError:
                last = f"{self.endpoints[self._current]}: no answer within {try_s:.1f} s"
                await self._next()
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # this call itself was cancelled
                # another call moved to the next member and closed the channel under this one
                last = f"{self.endpoints[self._current]}: the connection was closed during the call"
            if time.monotonic() >= deadline:
                raise ConsensusUnavailableError(self.endpoints, last)
            await asyncio.sleep(0.05)

    async def _try(self, fn: Callable[[aetcd.Client], Awaitable[T]]) -> T:
        return await fn(await self.client())

    async def close(self) -> None:
        """Close the connection."""
        if self._client is not None:
            c, self._client = self._client, None
            await c.close()

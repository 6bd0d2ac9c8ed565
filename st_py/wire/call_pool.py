"""Tracker calls started without waiting for them (a group commit, a
report of stored copies), run as blocking gRPC calls on a few threads of
their tracker's client.

Why not gRPC's own ``Multicallable.future()``: a channel with no such call
in flight starts a new thread for the next one, and a writer's commits go
out one or two at a time, so nearly every commit started a thread: 0.5-3 ms
of the writer's thread a commit on this machine, up to 12 us a record of
a put loop on a loaded machine (docs/benchmarks.md, "Acknowledgements by
seq and commits on a pool"). gRPC's maintainers point users who want
calls on a bounded pool to a layer like this one (grpc/grpc#23111). A
blocking call owns its completion queue, so no thread is started per
call; the pool's threads are made on first use and kept.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

# Calls of one tracker's client in flight at once. A file keeps at most a
# few commits in flight (st_py/client/group_commit.py MAX_COMMITS_IN_FLIGHT),
# but threads sharing a client each wait on their own handle's commits (16
# threads putting and flushing: 682-748 objects/s with 4 workers, 837-994
# with 32, 968-1,030 with gRPC's future(); docs/benchmarks.md); threads are
# made only as calls overlap, and more calls wait in the pool's queue, in
# order. One pool a tracker, so a tracker that stops answering holds up
# only the calls made to it.
WORKERS = 32


class CallPool:
    """Runs calls on threads of its own, made on first use (again in a
    forked child: a parent's threads do not exist there).

    :meth:`submit` returns a :class:`concurrent.futures.Future`: ``done()``,
    ``result()`` (raising the call's own exception, a ``grpc.RpcError`` for
    a gRPC call), as gRPC's futures answer. Thread-safe.
    """

    def __init__(self, name: str = "st-tracker-call"):
        self._name = name
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._pid = 0

    def submit(self, call: Callable, *args, **kwargs) -> Future:
        """Start ``call(*args, **kwargs)`` (a blocking gRPC call, with its
        ``timeout``); returns its future."""
        pool = self._pool
        if pool is None or self._pid != os.getpid():
            with self._lock:
                if self._pool is None or self._pid != os.getpid():
                    self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix=self._name)
                    self._pid = os.getpid()
                pool = self._pool
        return pool.submit(call, *args, **kwargs)

    def close(self) -> None:
        """Let the threads go once the calls started have ended (they are
        not waited for here); a later :meth:`submit` makes new ones."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)


__all__ = ["CallPool", "WORKERS"]

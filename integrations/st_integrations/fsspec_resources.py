"""What one fsspec filesystem instance holds open, per thread and per
process: StFile handles (peer sockets, infofile connections) and the
tracker client. Kept apart from :class:`st_integrations.fsspec_fs.StoreTorrentFileSystem`
so that ``weakref.finalize`` can close them when the instance is dropped,
and so that threads and forked processes never share a handle.

fsspec caches filesystem instances for the life of the process, so a
program that never closes one still holds its handles when it ends: an
``atexit`` hook closes every instance's handles and tracker client before
Python finalizes. Otherwise the peer connections' native senders and
receivers (``st_py._native``) outlive the interpreter, which nanobind
reports as leaked instances. At exit a handle with operations still in
flight (a thread of the program still reading) is only dropped, not
flushed: its peers may never answer.
"""

from __future__ import annotations

import atexit
import os
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field

# StFile handles a thread keeps open, most recently used first: each holds an
# infofile connection and an epoll descriptor (and sockets to the peers it
# read from), so a walk over 10,000 files would otherwise run out of file
# descriptors (found by `./dev bench --scale`, fsspec find over 10^4 files).
MAX_OPEN_FILES = 64


@dataclass
class ThreadState:
    """Open StFile handles of one thread: a StFile (its peer transport and
    infofile connection) is never shared between threads, and pyarrow and
    DuckDB read from thread pools. At most :data:`MAX_OPEN_FILES` are kept,
    the least recently used closed first; one that an object reader still
    uses is closed when that reader is gone."""

    epoch: int
    pid: int
    thread: threading.Thread
    handles: OrderedDict = field(default_factory=OrderedDict)  # file name -> (StFile, infofile inode)
    readers: weakref.WeakSet = field(default_factory=weakref.WeakSet)  # object readers handed out
    retired: list = field(default_factory=list)  # evicted handles a reader still used

    def get(self, fname: str):
        """``(StFile, inode)`` of ``fname``, marked most recently used, or None."""
        cur = self.handles.get(fname)
        if cur is not None:
            self.handles.move_to_end(fname)
        return cur

    def keep(self, fname: str, h, ino) -> None:
        """Keep ``h`` open for ``fname``; close the least recently used
        handles beyond :data:`MAX_OPEN_FILES`."""
        self.handles[fname] = (h, ino)
        self.handles.move_to_end(fname)
        while len(self.handles) > MAX_OPEN_FILES:
            _, (old, _) = self.handles.popitem(last=False)
            self.retired.append(old)
        if self.retired:
            used = {id(r._f) for r in list(self.readers)}
            for old in [o for o in self.retired if id(o) not in used]:
                self.retired.remove(old)
                close_quietly(old)

    def pop(self, fname: str):
        """Take the ``(StFile, infofile inode)`` of file ``fname`` out of this
        thread's handles (not closed), or None."""
        return self.handles.pop(fname, None)

    def close(self, at_exit: bool = False) -> None:
        """Close every handle (``at_exit``: only those with nothing in
        flight; the others are dropped)."""
        handles, self.handles = self.handles, OrderedDict()
        retired, self.retired = self.retired, []
        for h in [h for h, _ in handles.values()] + retired:
            if not at_exit or not getattr(h, "inflight", 0):
                close_quietly(h)


class Resources:
    """What one filesystem instance holds open: every thread's StFile handles
    (peer sockets, infofile connections) and the tracker client (a gRPC
    channel). Kept apart from the instance so that ``weakref.finalize`` can
    close them when the instance is dropped: fsspec caches instances and
    never closes them itself. Only what this process opened is closed: after
    a fork the parent's sockets and channel are left alone."""

    def __init__(self):
        self.lock = threading.Lock()
        self.states: list[ThreadState] = []
        self.client = None
        self.client_pid: int | None = None
        _LIVE.add(self)

    def add(self, st: ThreadState) -> None:
        """Keep ``st``; close the handles of threads of this process that ended."""
        with self.lock:
            ended = [s for s in self.states if s.pid == st.pid and not s.thread.is_alive()]
            self.states = [s for s in self.states if s not in ended] + [st]
        for s in ended:
            s.close()

    def drop(self, st: ThreadState) -> None:
        """Close the handles of ``st`` (of the calling thread) and forget it."""
        with self.lock:
            self.states = [s for s in self.states if s is not st]
        st.close()

    def close(self, at_exit: bool = False) -> None:
        """Close what this process opened: every thread's handles and the
        tracker client (``at_exit``: see :meth:`ThreadState.close`)."""
        pid = os.getpid()
        with self.lock:
            mine = [s for s in self.states if s.pid == pid]
            self.states = [s for s in self.states if s.pid != pid]
            client = self.client if self.client_pid == pid else None
            if client is not None:
                self.client = self.client_pid = None
        for s in mine:
            s.close(at_exit)
        if client is not None and at_exit:
            close_quietly(client)
        elif client is not None:
            client.close()


_LIVE: weakref.WeakSet = weakref.WeakSet()  # every Resources of this process


def _close_all_at_exit() -> None:
    """Close the handles and clients of every filesystem instance still
    alive at exit (held by the caller to the end)."""
    for res in list(_LIVE):
        try:
            res.close(at_exit=True)
        except Exception:  # at exit nothing more can be done about it
            pass


atexit.register(_close_all_at_exit)


def inode(path: str):
    """The inode number of ``path``, or None if it cannot be stat'ed (a
    replaced infofile has another: its handles are stale)."""
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def close_quietly(h) -> None:
    """Close ``h``, ignoring any error (a handle whose peers or tracker are
    gone)."""
    try:
        h.close()
    except Exception:
        pass

"""The endpoint's fast path (docs/s3.md, "The fast path"): open handles of
the files S3 requests touch, kept between requests, and one group commit
shared by the concurrent PUTs of new keys into a file.

**What is kept.** Per caller (one :class:`.ops.Ops`), up to
``MAX_FILES`` files, least recently used out first; per file, idle
read handles (at most ``MAX_IDLE_READERS``) and one write handle, each
reopened after ``HANDLE_TTL_S`` seconds. A kept file is also the key
resolution: when ``/B/P`` is a file, a key ``P/REST`` names record
``REST`` of it (no longer prefix can be a file, ``/B/P`` not being a
directory; no shorter one, those being its directories: the rule of
:meth:`st_integrations.keymap.KeyMap.resolve`), so a key under a kept file
is resolved without asking the tracker.

**Why a stale entry never answers wrong.** Every use of a kept handle
first reads its generation (:attr:`StFile.generation`), which checks that
the file's name still holds the handle's file (the shared namespace's
inode and file id, or the tracker under ``metadata="fetch"``) and raises
:class:`StFileNotFoundError` when the file was deleted or its name given
to another file, through this endpoint or any other client; the entry is
then dropped and the request goes the slow way (the tracker's List, a new
handle). DeleteBucket drops the bucket's entries at once. A handle that
failed otherwise (a tracker failover, a peer error) is closed, not kept.

**Group commit.** Concurrent PUTs of new records into one file are queued;
one of the callers (the leader) takes everything queued, ``queue_put``\\ s
it on the file's write handle and ``flush``\\ es: one commit to the tracker
for the group. Each caller returns when its own record is committed (or
has failed): an S3 PUT is never answered 200 before its commit. Callers
that arrive during a commit form the next group.

Thread safety: every class here may be used from any thread.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from st_py.errors import RecordExistsError, StFileNotFoundError

from ..keymap import TOP_FILE, bucket_dir

HANDLE_TTL_S = 5.0  # a kept handle is reopened after this long: its peerlist, options and rights read anew
MAX_FILES = 64  # files kept per caller
MAX_IDLE_READERS = 8  # idle read handles kept per file


def _close_quietly(h) -> None:
    try:
        h.close()
    except Exception:  # noqa: BLE001 (a handle being dropped: its failure was reported already, or is moot)
        pass


@dataclass
class _Put:
    record: str
    data: bytes
    meta: dict[str, str] | None
    done: bool = False
    exists: bool = False  # the record exists (committed meanwhile): the caller replaces it instead
    error: BaseException | None = None
    stat: Any = None


class FileHandles:
    """The kept handles of one StoreTorrent file.

    Parameters
    ----------
    client : st_py.client.client.Client
    name : str
        The file's name (``/B/...``).
    """

    def __init__(self, client, name: str):
        self.client, self.name = client, name
        self._idle: list[tuple[Any, float]] = []  # (handle, opened at, monotonic s)
        self._lock = threading.Lock()
        self._dropped = False
        self._cond = threading.Condition()
        self._queue: list[_Put] = []
        self._busy = False
        self._writer: tuple[Any, float] | None = None

    # -- reads ---------------------------------------------------------------------
    def borrow(self) -> tuple[Any, float]:
        """``(handle, opened)``: an idle read handle or a new one, checked
        to still be this file's (give it back with :meth:`give_back`).

        Raises
        ------
        StFileNotFoundError
            The file was deleted, or its name given to another file (the
            caller drops this entry).
        """
        now = time.monotonic()
        got = None
        with self._lock:
            while self._idle:
                h, opened = self._idle.pop()
                if now - opened < HANDLE_TTL_S:
                    got = (h, opened)
                    break
                _close_quietly(h)
        if got is None:
            got = (self.client.open(self.name), now)
        try:
            got[0].generation  # noqa: B018 (the check: raises StFileNotFoundError when the name moved on)
        except BaseException:
            _close_quietly(got[0])
            raise
        return got

    def borrow_idle(self) -> tuple[Any, float] | None:
        """``(handle, opened)``: the last idle read handle, not yet checked
        (see :meth:`borrow`), or None when none is idle or it is past
        ``HANDLE_TTL_S``: never opens or closes one (no tracker call: the
        event loop's quick GETs, :meth:`.ops.Ops.get_object_quick`).
        Give it back with :meth:`give_back`."""
        with self._lock:  # an expired one is left for borrow() to close (closing may ask the tracker)
            if self._idle and time.monotonic() - self._idle[-1][1] < HANDLE_TTL_S:
                return self._idle.pop()
        return None

    def give_back(self, got: tuple[Any, float], ok: bool) -> None:
        """Keep a borrowed handle for the next request, or close it
        (``ok`` False: it failed; or the entry was dropped; or enough are idle)."""
        with self._lock:
            if ok and not self._dropped and len(self._idle) < MAX_IDLE_READERS:
                self._idle.append(got)
                return
        _close_quietly(got[0])

    # -- writes --------------------------------------------------------------------
    def put_new(self, record: str, data: bytes, meta: dict[str, str] | None, stat: Callable[[Any, str], Any]):
        """Store new record ``record`` in this file's next group commit and
        return ``stat(handle, record)`` once it is committed; None if the
        record exists (committed before, or by a PUT of the same key in the
        same group): the caller then replaces it.

        Raises
        ------
        StoreTorrentError
            The record's put or the group's commit failed (nothing of this
            record is visible, or the error says it may be: never a 200).
        """
        p = _Put(record, data, meta)
        with self._cond:
            self._queue.append(p)
            while not p.done and self._busy:
                self._cond.wait()
            batch = None
            if not p.done:
                self._busy = True
                batch, self._queue = self._queue, []
        if batch is not None:
            try:
                self._commit(batch, stat)
            finally:
                with self._cond:
                    self._busy = False
                    for q in batch:
                        q.done = True
                    self._cond.notify_all()
                    w = self._writer if self._dropped else None
                    if w is not None:  # dropped while this group was committed: nobody keeps it
                        self._writer = None
                if w is not None:
                    _close_quietly(w[0])
        if p.error is not None:
            raise p.error
        return None if p.exists else p.stat

    def _write_handle(self):
        now = time.monotonic()
        if self._writer is not None and now - self._writer[1] >= HANDLE_TTL_S:
            _close_quietly(self._writer[0])
            self._writer = None
        if self._writer is None:
            self._writer = (self.client.open(self.name), now)
        self._writer[0].generation  # noqa: B018 (raises StFileNotFoundError when the name moved on)
        return self._writer[0]

    def _commit(self, batch: list[_Put], stat: Callable[[Any, str], Any]) -> None:
        """The leader's part: every put of ``batch`` queued on the write
        handle, one flush (the group's commit), then each one's outcome."""
        failed: dict[str, BaseException] = {}

        def told(name: str, exc: BaseException | None) -> None:
            if exc is not None:  # a failure after the acknowledgement (the commit) overrides it
                failed[name] = exc

        try:
            h = self._write_handle()
            for q in batch:
                try:
                    h.queue_put(q.record, q.data, told, meta=q.meta)
                except RecordExistsError:
                    q.exists = True
                except Exception as e:  # noqa: BLE001 (this record's refusal: BadNameError, metadata, ...)
                    q.error = e
            h.flush()
        except BaseException as e:
            # the handle is suspect (a tracker failover, a failed commit): closed, and every
            # put not yet decided fails with the error; none is answered 200
            w, self._writer = self._writer, None
            if w is not None:
                _close_quietly(w[0])
            for q in batch:
                if q.error is None and not q.exists:
                    q.error = e
            return
        for q in batch:
            if q.error is not None or q.exists:
                continue
            err = failed.get(q.record)
            if isinstance(err, RecordExistsError):
                q.exists = True
            elif err is not None:
                q.error = err
            else:
                try:
                    q.stat = stat(h, q.record)
                except Exception as e2:  # noqa: BLE001 (told to this put's caller)
                    q.error = e2

    def drop(self) -> None:
        """Close the idle handles and the write handle (once no group is
        being committed); handles borrowed now are closed when given back."""
        with self._lock:
            self._dropped = True
            idle, self._idle = self._idle, []
        for h, _ in idle:
            _close_quietly(h)
        with self._cond:
            while self._busy:
                self._cond.wait()
            w, self._writer = self._writer, None
        if w is not None:
            _close_quietly(w[0])

    @property
    def dropped(self) -> bool:
        """Whether :meth:`drop` was called (the entry is out of the cache)."""
        return self._dropped


class HandleCache:
    """The kept files of one caller, at most ``MAX_FILES``, least recently
    used out first (see the module docstring).

    Parameters
    ----------
    client : st_py.client.client.Client
        The caller's client.
    """

    def __init__(self, client, max_files: int = MAX_FILES):
        self.client = client
        self.max_files = max_files
        self._files: OrderedDict[str, FileHandles] = OrderedDict()
        self._lock = threading.Lock()

    def find(self, bucket: str, key: str) -> tuple[FileHandles, str] | None:
        """``(kept file, record)`` key ``key`` of bucket ``bucket`` names if
        the file holding it is kept, else None. ``key`` must have passed
        :func:`st_integrations.keymap.check_key`."""
        d = bucket_dir(bucket)
        parts = key.split("/")
        with self._lock:
            if len(parts) == 1:
                cands = [(d + "/" + TOP_FILE, key)]
            else:
                cands = [(d + "/" + "/".join(parts[:n]), "/".join(parts[n:])) for n in range(len(parts) - 1, 0, -1)]
            for name, record in cands:
                f = self._files.get(name)
                if f is not None:
                    self._files.move_to_end(name)
                    return f, record
        return None

    def keep(self, name: str) -> FileHandles:
        """The entry of file ``name``, made if missing (the least recently
        used one dropped past ``max_files``)."""
        out = []
        with self._lock:
            f = self._files.get(name)
            if f is None:
                f = self._files[name] = FileHandles(self.client, name)
                while len(self._files) > self.max_files:
                    out.append(self._files.popitem(last=False)[1])
            else:
                self._files.move_to_end(name)
        for g in out:
            g.drop()
        return f

    def forget(self, f: FileHandles) -> None:
        """Drop entry ``f`` (its file is gone or its handles failed)."""
        with self._lock:
            if self._files.get(f.name) is f:
                del self._files[f.name]
        f.drop()

    def forget_bucket(self, bucket: str) -> None:
        """Drop every entry of bucket ``bucket`` (DeleteBucket)."""
        d = bucket_dir(bucket) + "/"
        with self._lock:
            out = [self._files.pop(n) for n in [n for n in self._files if n.startswith(d)]]
        for f in out:
            f.drop()

    def close(self) -> None:
        """Drop every entry (the endpoint stops)."""
        with self._lock:
            out = list(self._files.values())
            self._files.clear()
        for f in out:
            f.drop()

    def __len__(self) -> int:
        with self._lock:
            return len(self._files)


__all__ = ["HandleCache", "FileHandles", "StFileNotFoundError", "HANDLE_TTL_S", "MAX_FILES", "MAX_IDLE_READERS"]

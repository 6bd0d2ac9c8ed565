"""Group commit across clients: one SQLite transaction for every commit
request that is waiting for an infofile (paper 3.5, "allowing the tracker to
update the metadata of many records at once").

Each infofile has one committer. Requests queue up while a transaction runs
in a worker thread; the next transaction takes all of them. Deletes go
through the same lock, so one connection never runs two transactions.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from st_py.core.infofile import holds_no_record
from st_py.errors import FileNotEmptyError

from .apply.applier import SKIPPED, apply_infofile_op
from .apply.oplog import OpLog
from .apply.ops import INFOFILE_WRITES, InfofileOp
from .infofile_writer import Conflict, InfofileWriter
from .log.errors import LogError


@dataclass
class CommitStats:
    """What the committers of one tracker did (its metrics)."""

    transactions: int = 0  # commit transactions run
    requests: int = 0  # Commit requests they took
    records: int = 0  # records newly committed


@dataclass(frozen=True)
class FileMeta:
    """The immutable part of an infofile's meta table."""

    file_id: int
    copies: int
    npeers: int


class Committer:
    """The group committer of one infofile (paper 3.5): commit requests that
    arrive while a transaction runs are taken together by the next one;
    deletes and other writes (:meth:`run`) go through the same lock.

    Every change goes through the metadata log first (:meth:`write`,
    docs/metadata-log.md): the operation is appended, then applied by
    :func:`~.apply.applier.apply_infofile_op` from its encoded form (so the
    first apply is the one a replay repeats), and its result is the reply.

    Not thread-safe: used on the tracker's event loop; the transactions run in
    a worker thread, one at a time."""

    def __init__(
        self, writer: InfofileWriter, stats: CommitStats | None = None, log: OpLog | None = None, name: str = ""
    ):
        self.writer = writer
        self.log = log
        self.stats = stats if stats is not None else CommitStats()
        meta = writer.meta()
        self._meta = meta
        npeers = writer.conn.execute("SELECT count(*) FROM peers").fetchone()[0]
        self.meta = FileMeta(int(meta["file_id"]), int(meta["copies"]), int(npeers))
        self.name = name or str(meta.get("name", ""))  # the file's namespace name, in its log entries
        self._lock = asyncio.Lock()
        self._queue: list[tuple[list, asyncio.Future, str]] = []
        self.gone = False  # retired (its file deleted): every later request fails with FileNotFoundError
        # Called on the event loop after each change with (file id, name, generation, peer ids of the
        # peerlist): the tracker's index of which files name which peer (peer_files.py)
        self.on_change: Callable[[int, str, int, frozenset[str]], None] | None = None
        self._peer_id_set: frozenset[str] | None = None  # read with the first change, again on add_peers

    async def commit(self, batch: list[tuple], request_id: str = "") -> tuple[int, int, list[Conflict]]:
        """Commit ``batch`` (``(name, size, crc32c, peer_idx per rank,
        pending ranks, stored_as, (format, schema) or None)`` each) together with whatever else is
        queued. A ``request_id`` applied before is not applied again (a
        retry: InfofileWriter.commit_requests).

        Returns (generation, records newly committed from this batch, its conflicts).
        """
        fut = asyncio.get_running_loop().create_future()
        self._queue.append((batch, fut, request_id))
        # the transaction goes on if this caller is cancelled (its client went away): the others wait for it
        await asyncio.shield(asyncio.ensure_future(self._commit_queued(fut)))
        return await fut

    async def _commit_queued(self, fut: asyncio.Future) -> None:
        """Commit every queued request in one transaction, unless ``fut``'s
        was taken by an earlier one."""
        async with self._lock:
            if not fut.done():
                jobs, self._queue = self._queue, []
                try:
                    self._check_here()
                    gen, new, per, _ = await self._write("commit_requests", [(rid, b) for b, _, rid in jobs])
                except Exception as e:  # every waiting request hears of it
                    for _, f, _ in jobs:
                        if not f.done():
                            f.set_exception(e)
                else:
                    self.stats.transactions += 1
                    self.stats.requests += len(jobs)
                    self.stats.records += len(new)
                    for (_, f, _), (mine, hit) in zip(jobs, per):  # each request's own: not by name alone
                        f.set_result((gen, len(mine), hit))

    def writer_meta(self) -> dict:
        """The infofile's meta (owner, group, mode ...) as cached: only
        :meth:`set_meta` changes those keys."""
        return dict(self._meta)

    async def set_meta(self, values: dict) -> None:
        """Set infofile meta keys ``values`` (owner, group, mode...) and the cached copy of them."""
        await self.write("set_meta", values)
        self._meta.update(values)

    async def move_copies(self, moves: list[tuple]) -> tuple[int, int, list[Conflict]]:
        """Rebalance moves in one transaction, after the commits queued now."""
        return await self.write("move_copies", moves)

    async def add_peers(self, peers: list[tuple[str, str]]) -> list[tuple[int, str, str]]:
        """Extend the peerlist; commits may then name the new peer indexes."""
        rows = await self.write("add_peers", peers)
        if rows:
            self.meta = replace(self.meta, npeers=self.meta.npeers + len(rows))
        return rows

    async def run(self, fn, *args):
        """Run ``fn(*args)``, a read of the writer's infofile, in a thread,
        alone. Writes go through :meth:`write`.

        Raises
        ------
        FileNotFoundError
            The committer was retired (:meth:`retire`): its file is gone.
        ValueError
            ``fn`` is a write of the infofile (one of INFOFILE_WRITES).
        """
        if getattr(fn, "__name__", "") in INFOFILE_WRITES and getattr(fn, "__self__", None) is self.writer:
            raise ValueError(f"{fn.__name__} changes the infofile: use Committer.write")
        async with self._lock:
            self._check_here()
            return await asyncio.to_thread(fn, *args)

    async def write(self, kind: str, *args):
        """Change the infofile: the writer method ``kind`` (one of
        INFOFILE_WRITES) with ``args``, through the metadata log, alone;
        returns the method's result.

        Raises
        ------
        FileNotFoundError
            The committer was retired (:meth:`retire`): its file is gone.
        Exception
            Whatever the log's append raises (nothing changed), or the
            writer method (its transaction rolled back; the entry is marked
            failed, so no replay applies it).
        """
        # the change goes on if this caller is cancelled: the log took it, so it is applied
        return await asyncio.shield(asyncio.ensure_future(self._locked_write(kind, *args)))

    async def _locked_write(self, kind: str, *args):
        async with self._lock:
            self._check_here()
            return await self._write(kind, *args)

    async def _write(self, kind: str, *args):
        """:meth:`write` under the lock the caller holds."""
        if self.log is None:  # a writer outside a tracker (tools, tests of the format)
            return await asyncio.to_thread(getattr(self.writer, kind), *args)
        payload = InfofileOp(
            self.name, self.meta.file_id, kind, tuple(args), time.time(), self.writer.position(self.log.log_id)
        ).encode()
        log_id = self.log.log_id

        seen: list[tuple[int, frozenset[str]]] = []

        def apply_and_look(op: InfofileOp, index: int):
            res = apply_infofile_op(self.writer, op, index, log_id)
            if self.on_change is not None and res is not SKIPPED:
                seen.append(self._generation_and_peers(kind))
            return res

        async def apply(op: InfofileOp, index: int):  # from the entry, as a replay applies it
            res = await asyncio.to_thread(apply_and_look, op, index)
            if res is SKIPPED:  # a new entry the infofile says it has: two logs mixed up
                raise LogError(
                    f"infofile of {self.name} already has entry {index} of log {log_id}: "
                    "is another tracker writing it? nothing was applied"
                )
            return res

        res = await self.log.run(payload, apply)  # a failure is marked: no replay applies it
        if seen and self.on_change is not None:
            self.on_change(self.meta.file_id, self.name, *seen[-1])
        return res

    def _generation_and_peers(self, kind: str) -> tuple[int, frozenset[str]]:
        """The infofile's generation and its peerlist's peer ids, read on the
        writer's connection after a change ``kind`` (in the applying thread;
        the peerlist only the first time and after ``add_peers``)."""
        conn = self.writer.conn
        gen = int(conn.execute("SELECT value FROM meta WHERE key='generation'").fetchone()[0])
        if self._peer_id_set is None or kind == "add_peers":
            self._peer_id_set = frozenset(str(p) for (p,) in conn.execute("SELECT peer_id FROM peers"))
        return gen, self._peer_id_set

    def _check_here(self) -> None:
        if self.gone:
            raise FileNotFoundError(f"infofile {self.writer.path} was deleted")

    async def retire(self, unlink: bool, if_empty: bool = False) -> tuple[int, int]:
        """After every transaction queued before it: count the file's
        names and bytes (one copy), close the writer and, with ``unlink``,
        remove the infofile (a whole-file delete), so no later request can
        write into a deleted file. Returns ``(names, bytes)``.

        Raises
        ------
        FileNotEmptyError
            ``if_empty`` and the file holds a record (hidden ones too):
            nothing changed (S3 DeleteBucket).
        """
        async with self._lock:
            self._check_here()
            if if_empty and not await asyncio.to_thread(holds_no_record, self.writer.conn):
                raise FileNotEmptyError(
                    f"{self.name} holds records: not deleted (if_empty); delete its records first", self.name
                )
            n, b = await asyncio.to_thread(self.writer.stats)
            self.gone = True
            self.writer.close()
            if unlink:
                self.writer.path.unlink(missing_ok=True)
            return n, b

    async def aclose(self) -> None:
        """Close the writer once no transaction runs on it."""
        async with self._lock:
            if not self.gone:
                self.gone = True
                self.writer.close()

    def close(self) -> None:
        """Close the writer at once (tracker shutdown); later requests fail with FileNotFoundError."""
        self.gone = True
        self.writer.close()

"""The replicated metadata log in etcd (docs/metadata-log.md, "Backends").

Keys of cluster ``C`` (``K`` = ``/storetorrent/C/``):

- ``/storetorrent-clusters/C``: the cluster exists (its creation time);
- ``K + leader``: the elected tracker's address under its etcd lease
  (:mod:`st_py.tracker.log.election`); its ``create_revision`` is the term;
- ``K + log/head``: the index of the last entry;
- ``K + log/<index, 20 digits>``: each entry (:class:`Entry`'s encoding);
- ``K + applied/<tracker id>``: the index each tracker applied (compaction);
- ``K + checkpoint``: the tracker's own state (directories' owners and
  modes, peers' drain states) as of an index, written by the leader before
  it compacts the entries below it: a standby elected later starts from it
  and applies the entries after it;
- ``K + shards/<i>/log/...``, ``K + shards/<i>/failed/...``: the log of
  the leader's per-file tracker ``i`` (its files' commits, leases and
  record deletes), fenced by the same election key: a shard's appends
  carry the term of the master that started its per-file tracker.

An append is one etcd transaction per batch that compares the election
key's ``create_revision`` with the appender's term and ``head`` with the
index it last saw, then writes the entries and the new head: a tracker whose
term ended cannot append, and two appenders can never write one index.
"""

from __future__ import annotations

import time

import aetcd

from st_py.tracker.log.entry import Entry
from st_py.tracker.log.errors import FencedError, WrongClusterError
from st_py.tracker.log.etcd_session import EtcdSession

CLUSTERS = b"/storetorrent-clusters/"
MAX_TXN_BYTES = 1 << 20  # etcd refuses requests over 1.5 MiB by default
MAX_TXN_OPS = 100  # etcd's default --max-txn-ops is 128 (the head is one more)


def cluster_prefix(cluster_id: str) -> bytes:
    """``/storetorrent/<cluster_id>/``."""
    return f"/storetorrent/{cluster_id}/".encode()


def shard_prefix(cluster_id: str, shard: int) -> bytes:
    """Where the log of ``shard`` lives: the cluster's prefix for the master's
    (shard 0), ``.../shards/<shard>/`` for per-file tracker ``shard``'s."""
    p = cluster_prefix(cluster_id)
    return p if shard == 0 else p + b"shards/%d/" % shard


def _end(prefix: bytes) -> bytes:
    """The first key after every key that starts with ``prefix``."""
    return prefix[:-1] + bytes([prefix[-1] + 1])


class EtcdLog:
    """The log of cluster ``cluster_id`` over ``session``.

    Use from one event loop; open with :meth:`open`.
    """

    def __init__(self, session: EtcdSession, cluster_id: str, shard: int = 0):
        self.session = session
        self.cluster_id = cluster_id
        self.shard = shard
        self.leader_key = cluster_prefix(cluster_id) + b"leader"  # one election fences every shard's log
        p = shard_prefix(cluster_id, shard)
        self.head_key = p + b"log/head"
        self.first_key = p + b"log/first"  # the first entry a compaction kept (absent: 1)
        self.entry_prefix = p + b"log/e/"
        self.applied_prefix = p + b"applied/"
        self.checkpoint_key = p + b"checkpoint"
        self.failed_prefix = p + b"failed/"  # marks of entries whose apply failed (apply/backends.py)
        self._head: int | None = None  # the head this appender last wrote or read

    def entry_key(self, index: int) -> bytes:
        """The key of entry ``index``."""
        return self.entry_prefix + b"%020d" % index

    @classmethod
    async def open(cls, session: EtcdSession, cluster_id: str, create: bool = False, shard: int = 0) -> EtcdLog:
        """The log of ``cluster_id`` (of its per-file tracker ``shard`` when
        not 0), made first when ``create``.

        Raises
        ------
        WrongClusterError
            The consensus service holds no such cluster (and not ``create``).
        ConsensusUnavailableError
        """
        if not cluster_id or "/" in cluster_id:
            raise WrongClusterError(cluster_id, [], f"bad cluster id {cluster_id!r}: give a name without '/'")
        log = cls(session, cluster_id, shard)
        marker = CLUSTERS + cluster_id.encode()

        async def check(c: aetcd.Client):
            if create:
                await c.transaction(
                    compare=[c.transactions.create(marker) == 0],
                    success=[c.transactions.put(marker, repr(time.time()).encode())],
                    failure=[],
                )
            got = await c.get(marker)
            if got is None:
                found = await c.get_prefix(CLUSTERS)
                return [kv.key[len(CLUSTERS) :].decode(errors="replace") for kv in found]
            return None

        missing = await session.call(check)
        if missing is not None:
            raise WrongClusterError(cluster_id, missing)
        return log

    async def last_index(self) -> int:
        """The index of the last entry (0: none yet)."""

        async def get(c: aetcd.Client):
            return await c.get(self.head_key)

        got = await self.session.call(get)
        self._head = int(got.value) if got is not None else 0
        return self._head

    async def append(self, payloads: list[bytes], term: int) -> int:
        """Append ``payloads`` as the next entries under ``term``; return the
        last one's index once etcd committed them (a majority of members has
        them). A large append goes as several transactions, each fenced.

        Raises
        ------
        FencedError
            ``term`` is not the elected term (or another appender wrote
            meanwhile): nothing of the failed transaction was written.
        ConsensusUnavailableError
            No majority answered; the append may or may not have been
            written (the caller must read the log before retrying).
        """
        if self._head is None:
            await self.last_index()
        batch: list[bytes] = []
        size = 0
        last = self._head or 0
        for p in payloads:
            if batch and (size + len(p) > MAX_TXN_BYTES or len(batch) >= MAX_TXN_OPS):
                last = await self._append_batch(batch, term)
                batch, size = [], 0
            batch.append(p)
            size += len(p) + 64
        if batch:
            last = await self._append_batch(batch, term)
        return last

    async def _append_batch(self, payloads: list[bytes], term: int) -> int:
        head = self._head or 0
        first = Entry(head + 1, term, payloads[0]).encode()

        async def txn(c: aetcd.Client):
            t = c.transactions
            cmp_head = (t.version(self.head_key) == 0) if head == 0 else (t.value(self.head_key) == str(head).encode())
            puts = [t.put(self.entry_key(head + 1), first)]
            puts += [
                t.put(self.entry_key(head + 1 + i), Entry(head + 1 + i, term, p).encode())
                for i, p in enumerate(payloads)
                if i
            ]
            puts.append(t.put(self.head_key, str(head + len(payloads)).encode()))
            # on failure, what tells a lost reply of this very append from a refusal
            why = [t.get(self.leader_key), t.get(self.head_key), t.get(self.entry_key(head + 1))]
            return await c.transaction(compare=[t.create(self.leader_key) == term, cmp_head], success=puts, failure=why)

        ok, responses = await self.session.call(txn)
        if not ok:
            leader, head_now, entry = (r[0] if r else None for r in responses)
            leader_term = int(leader[1].create_revision) if leader else 0
            wrote = (
                leader_term == term
                and head_now is not None
                and int(head_now[0]) == head + len(payloads)
                and entry is not None
                and entry[0] == first
            )
            if not wrote:  # not a retry of an append that was committed while its reply was lost
                self._head = None  # read again before the next append
                raise FencedError(term, leader_term, leader[0].decode() if leader else "")
        self._head = head + len(payloads)
        return self._head

    async def leader(self) -> tuple[str, int]:
        """The elected leader's address and term (``("", 0)``: none)."""

        async def get(c: aetcd.Client):
            return await c.get(self.leader_key)

        got = await self.session.call(get)
        if got is None:
            return "", 0
        return got.value.decode(), int(got.create_revision)

    async def first_index(self) -> int:
        """The first entry the log still holds (entries below it were
        compacted away; 1 if none were)."""

        async def get(c: aetcd.Client):
            return await c.get(self.first_key)

        got = await self.session.call(get)
        return int(got.value) if got is not None else 1

    async def read(self, start: int, limit: int = 256) -> list[Entry]:
        """Up to ``limit`` entries from index ``start`` on, in order (fewer
        at the end of the log); a ``start`` below a compaction reads from the
        first entry kept (:meth:`first_index`)."""
        start = max(start, await self.first_index())

        async def rng(c: aetcd.Client):
            return await c.get_range(self.entry_key(start), self.entry_key(start + limit))

        got = await self.session.call(rng)
        out = []
        for kv in got:
            index = int(kv.key[len(self.entry_prefix) :])
            out.append(Entry.decode(index, kv.value))
        return out

    async def wait_for(self, index: int, timeout: float) -> int:
        """Wait until the log's head is at least ``index`` or ``timeout``
        seconds passed; return the head seen last."""
        deadline = time.monotonic() + timeout
        while True:
            head = await self.last_index()
            left = deadline - time.monotonic()
            if head >= index or left <= 0:
                return head

            async def watch(c: aetcd.Client, left=left):
                try:
                    await c.watch_once(self.head_key, timeout=min(left, 1.0))
                except aetcd.exceptions.WatchTimeoutError:
                    pass

            await self.session.call(watch, deadline_s=left + 1.0)

    async def set_applied(self, tracker_id: str, index: int) -> None:
        """Publish that ``tracker_id`` applied the log up to ``index``."""

        async def put(c: aetcd.Client):
            await c.put(self.applied_prefix + tracker_id.encode(), str(index).encode())

        await self.session.call(put)

    async def applied(self) -> dict[str, int]:
        """The index every tracker published as applied."""

        async def get(c: aetcd.Client):
            return await c.get_prefix(self.applied_prefix)

        got = await self.session.call(get)
        return {kv.key[len(self.applied_prefix) :].decode(): int(kv.value) for kv in got}

    async def put_checkpoint(self, term: int, index: int, blob: bytes) -> None:
        """Keep ``blob``, the tracker's own state as of entry ``index``,
        fenced by ``term`` like an append.

        Raises
        ------
        FencedError
            Another tracker leads: nothing was written.
        """
        value = b"%020d" % index + blob

        async def txn(c: aetcd.Client):
            t = c.transactions
            return await c.transaction(
                compare=[t.create(self.leader_key) == term],
                success=[t.put(self.checkpoint_key, value)],
                failure=[t.get(self.leader_key)],
            )

        ok, responses = await self.session.call(txn)
        if not ok:
            leader = responses[0][0] if responses and responses[0] else None
            leader_term = int(leader[1].create_revision) if leader else 0
            raise FencedError(term, leader_term, leader[0].decode() if leader else "")

    async def checkpoint(self) -> tuple[int, bytes] | None:
        """The last checkpoint: ``(index, blob)``, or None."""

        async def get(c: aetcd.Client):
            return await c.get(self.checkpoint_key)

        got = await self.session.call(get)
        if got is None:
            return None
        value = bytes(got.value)
        return int(value[:20]), value[20:]

    async def compact(self, upto: int) -> None:
        """Drop the entries below ``upto`` (every replica applied them) and
        etcd's history of them."""

        async def drop(c: aetcd.Client):
            # the low-water mark first: a reader from below it reads from it (read)
            got = await c.get(self.first_key)
            if got is None or int(got.value) < upto:
                await c.put(self.first_key, b"%d" % upto)
            await c.delete_range(self.entry_key(0), self.entry_key(upto))
            got = await c.get_range(self.head_key, self.head_key + b"\x00")
            await c.compact(got.header.revision)

        await self.session.call(drop)

"""Where the metadata log lives (docs/metadata-log.md, "Backends"): the
embedded default's local SQLite log, or the replicated log in etcd with the
election that fences it. :class:`~st_py.tracker.apply.oplog.OpLog` uses
either through the same calls.

- :class:`LocalBackend`: ``<state-dir>/log.db`` on the tracker's disk; a term
  per tracker run. Applied entries are marked (lazily) so a replay can tell
  an entry answered from one in flight when the tracker died.
- :class:`EtcdBackend`: entries in etcd, committed by a majority of its
  members before the tracker applies and answers; the tracker must win the
  election first, and every append is fenced by its term. Every committed
  entry is the decision (as in etcd's own apply loop): a replay applies each
  one that did not fail, including one in flight when the tracker died (its
  client retries it with its request id, applied once).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from st_py.tracker.log.entry import Entry
from st_py.tracker.log.local import LocalLog

log = logging.getLogger("st.tracker.log")

if TYPE_CHECKING:  # aetcd is the [ha] extra's: imported when an EtcdBackend starts
    from st_py.tracker.log.election import Election
    from st_py.tracker.log.etcd_log import EtcdLog
    from st_py.tracker.log.etcd_session import EtcdSession
    from st_py.tracker.log.replicas import Replicas

FAILED = -1  # the mark of an entry whose first apply failed (and said so)
APPLIED = 1


class LocalBackend:
    """The log in a local SQLite file (``path``). Use from one event loop."""

    applies_unmarked = False  # an entry with no mark may have been in flight, never answered
    describe = "local"

    def __init__(self, path: Path):
        self.path = path
        self.log: LocalLog | None = None
        self.lost: asyncio.Event | None = None  # a local log's term never ends

    async def start(self) -> int:
        """Open the log and this run's term; return it."""
        self.log = LocalLog(self.path)
        return self.log.open_term(time.time())

    def _l(self) -> LocalLog:
        if self.log is None:
            raise RuntimeError("the metadata log is not started (OpLog.start)")
        return self.log

    async def log_id(self) -> str:
        """This log's identity (``local:<uuid>``)."""
        return self._l().log_id()

    async def last_index(self) -> int:
        """The last entry's index (0: none)."""
        return self._l().last_index()

    async def append(self, payloads: list[bytes], term: int, marks: list[int]) -> int:
        """Append durably, marking ``marks`` applied in the same transaction."""
        return await asyncio.get_running_loop().run_in_executor(None, self._l().append_now, payloads, term, marks)

    async def read(self, start: int, limit: int) -> list[Entry]:
        """Entries from ``start`` on."""
        return await self._l().read(start, limit)

    async def marks(self, start: int) -> dict[int, int]:
        """Marks (APPLIED, FAILED) of entries from ``start`` on."""
        return self._l().marks(start)

    async def mark(self, indexes: list[int], value: int) -> None:
        """Mark entries APPLIED or FAILED."""
        await asyncio.get_running_loop().run_in_executor(None, self._l().mark_applied, indexes, value)

    def followers_floor(self) -> int | None:
        """None: no standby follows a local log."""
        return None

    def fetch_addrs(self) -> list[str]:
        """[]: no standby follows a local log."""
        return []

    async def save_checkpoint(self, term: int, index: int, blob: bytes) -> None:
        """Nothing: the tracker's own state is ``tracker.db`` beside this log."""

    async def load_checkpoint(self) -> tuple[int, bytes] | None:
        """None: ``tracker.db`` beside this log is the state."""
        return None

    async def compact(self, upto: int) -> None:
        """Drop the entries below ``upto``."""
        await asyncio.get_running_loop().run_in_executor(None, self._l().compact_now, upto)

    async def aclose(self) -> None:
        """Close the log."""
        if self.log is not None:
            self.log.close()
            self.log = None


class EtcdBackend:
    """The log of cluster ``cluster_id`` in the etcd members at
    ``endpoints`` (``host:port`` each); this tracker campaigns as ``addr``.
    Use from one event loop.

    Parameters
    ----------
    create : bool
        Make the cluster in etcd if it is not there (the first tracker of a
        new cluster, ``--init-cluster``); otherwise a cluster id etcd does not
        hold is refused (WrongClusterError).
    campaign_s : float or None
        Seconds to wait to be elected at start (another leader's lease must
        run out first); None: as long as it takes (a standby).
    shard, term : int
        Not 0: the log of the leader's per-file tracker ``shard``
        (docs/metadata-log.md, "Per-file trackers"), which campaigns for
        nothing: it appends under ``term``, its master's, and is fenced with
        it when another tracker is elected.
    """

    applies_unmarked = True

    def __init__(
        self,
        endpoints: list[str],
        cluster_id: str,
        addr: str,
        create: bool = False,
        ttl: int = 3,
        campaign_s: float | None = 30.0,
        shard: int = 0,
        term: int = 0,
    ):
        self.endpoints, self.cluster_id, self.addr = endpoints, cluster_id, addr
        self.create, self.ttl, self.campaign_s = create, ttl, campaign_s
        self.shard, self.shard_term = shard, term
        self.describe = f"etcd {','.join(endpoints)} cluster {cluster_id}" + (f" shard {shard}" if shard else "")
        self.session: EtcdSession | None = None
        self.log: EtcdLog | None = None
        self.election: Election | None = None
        self.lost: asyncio.Event | None = None  # set when this tracker's term ends
        self.replicas: Replicas | None = None  # the operator's view (st_py/tracker/log/replicas.py)
        self.applied_through: Callable[[], int] = lambda: 0  # set by the OpLog that uses this log
        self.follows = False  # a standby with a namespace of its own: follows the log (OpLog.follow)
        self.fetch_addr = ""  # where such a standby serves FetchInfofile (rpc/standby_fetch.py; "": nowhere)

    async def connect(self, follows: bool = False) -> None:
        """Connect and check the cluster, and appear in the trackers' list as
        a standby (``follows``: one that applies the log to a namespace of
        its own); :meth:`start` campaigns after.

        Raises
        ------
        WrongClusterError, ConsensusUnavailableError
        """
        from st_py.tracker.log.etcd_log import EtcdLog
        from st_py.tracker.log.etcd_session import EtcdSession
        from st_py.tracker.log.replicas import Replicas

        self.session = EtcdSession(self.endpoints)
        self.log = await EtcdLog.open(self.session, self.cluster_id, create=self.create, shard=self.shard)
        if self.shard:  # a per-file tracker's log: it is no replica of its own
            return
        self.replicas = Replicas(self.session, self.cluster_id, self.addr, lambda: self.applied_through())
        self.replicas.follows = follows
        self.replicas.fetch_addr = self.fetch_addr
        await self.replicas.start()  # listed as a standby while it campaigns

    async def start(self) -> int:
        """Connect (unless :meth:`connect` did), check the cluster, win the
        election; return the term.

        Raises
        ------
        WrongClusterError, ConsensusUnavailableError
        TimeoutError
            Not elected within ``campaign_s`` (another tracker leads).
        """
        from st_py.tracker.log.election import Election

        if self.session is None:
            await self.connect()
        if self.shard:
            return await self._master_term()
        assert self.session is not None and self.replicas is not None
        self.election = Election(self.session, self.cluster_id, self.addr, self.ttl)
        term = await self.election.campaign(timeout=self.campaign_s)
        self.lost = self.election.lost
        await self.replicas.elected(term)
        return term

    async def _master_term(self) -> int:
        """A per-file tracker's start: its master's term, if that master
        still leads.

        Raises
        ------
        FencedError
            Another tracker was elected since the master started this one.
        """
        from st_py.tracker.log.errors import FencedError

        addr, term = await self._l().leader()
        if term != self.shard_term:
            raise FencedError(self.shard_term, term, addr)
        return term

    def view(self) -> dict | None:
        """The trackers, failovers and etcd members as this leader last read
        them (every few seconds), or None before the first read."""
        v = self.replicas.last_view if self.replicas is not None else None
        return v.as_dict() if v is not None else None

    def _l(self) -> EtcdLog:
        if self.log is None:
            raise RuntimeError("the metadata log is not started (OpLog.start)")
        return self.log

    def _failed_prefix(self) -> bytes:
        return self._l().failed_prefix

    def _failed_key(self, index: int) -> bytes:
        return self._failed_prefix() + b"%020d" % index

    async def log_id(self) -> str:
        """This log's identity: ``etcd:<cluster id>:<when the cluster was made
        in etcd>`` (a cluster made again under the same id is another log)."""
        assert self.session is not None
        marker = b"/storetorrent-clusters/" + self.cluster_id.encode()  # etcd_log.CLUSTERS

        async def get(c: Any):
            return await c.get(marker)

        got = await self.session.call(get)
        made = got.value.decode() if got is not None else ""
        return f"etcd:{self.cluster_id}:{made}" + (f":shard{self.shard}" if self.shard else "")

    async def last_index(self) -> int:
        """The last entry's index (0: none)."""
        return await self._l().last_index()

    async def first_index(self) -> int:
        """The first entry the log still holds (1 unless compacted)."""
        return await self._l().first_index()

    async def leader_applied(self) -> int:
        """The index the leader last published as applied (0: none)."""
        assert self.replicas is not None
        return await self.replicas.leader_applied()

    def followers_floor(self) -> int | None:
        """The lowest index a standby that follows the log has applied (as
        the leader last read the trackers' list), or None."""
        return self.replicas.followers_floor() if self.replicas is not None else None

    def fetch_addrs(self) -> list[str]:
        """The standbys' infofile ports (Replicas.fetch_addrs; [] for a
        per-file tracker's log, which no standby follows)."""
        return self.replicas.fetch_addrs() if self.replicas is not None else []

    async def append(self, payloads: list[bytes], term: int, marks: list[int]) -> int:
        """Append, fenced by ``term``; returns once a majority has the entries
        (applied marks are not kept: every committed entry is applied)."""
        return await self._l().append(payloads, term)

    async def read(self, start: int, limit: int) -> list[Entry]:
        """Entries from ``start`` on."""
        return await self._l().read(start, limit)

    async def marks(self, start: int) -> dict[int, int]:
        """The FAILED marks from ``start`` on."""
        prefix = self._failed_prefix()
        assert self.session is not None

        async def get(c: Any):
            return await c.get_prefix(prefix)

        got = await self.session.call(get)
        out = {int(kv.key[len(prefix) :]): FAILED for kv in got}
        return {i: m for i, m in out.items() if i >= start}

    async def mark(self, indexes: list[int], value: int) -> None:
        """Keep FAILED marks (one key each); APPLIED needs none here."""
        if value != FAILED or not indexes:
            return
        assert self.session is not None
        keys = [self._failed_key(i) for i in indexes]

        async def put(c: Any):
            for k in keys:
                await c.put(k, b"1")

        await self.session.call(put)

    async def save_checkpoint(self, term: int, index: int, blob: bytes) -> None:
        """Keep the tracker's own state as of entry ``index`` in etcd (fenced
        by ``term``), before the entries below it are dropped."""
        await self._l().put_checkpoint(term, index, blob)

    async def load_checkpoint(self) -> tuple[int, bytes] | None:
        """The last checkpoint ``(index, blob)``, or None."""
        return await self._l().checkpoint()

    async def compact(self, upto: int) -> None:
        """Drop the entries (and failed marks) below ``upto``."""
        await self._l().compact(upto)
        assert self.session is not None
        lo, hi = self._failed_key(0), self._failed_key(upto)

        async def drop(c: Any):
            await c.delete_range(lo, hi)

        await self.session.call(drop)

    async def aclose(self) -> None:
        """Resign and close the session. Best effort: a tracker cut off from
        etcd stops all the same (its lease runs out by itself)."""
        try:
            if self.shard:  # a per-file tracker's log: its master holds the election
                pass
            elif self.replicas is not None:
                await self.replicas.resigned()
            if self.election is not None:
                await self.election.resign()
        except Exception as e:  # noqa: BLE001 - shutting down: say so, go on
            log.warning("could not resign in etcd (%s): the election lease runs out by itself", e)
        if self.session is not None:
            await self.session.close()

"""Electing the leader tracker (docs/metadata-log.md, "Leader election and
fencing").

A tracker campaigns by creating the election key ``/storetorrent/C/leader``
under an etcd lease it keeps alive; the key's ``create_revision`` is its
**term**. The key goes when the lease runs out (a dead, paused or cut-off
leader stops renewing it), and the next campaigner creates it with a higher
revision. Being elected is not what makes a write safe: every append
compares the term (:class:`st_py.tracker.log.etcd_log.EtcdLog`), so a
leader that wakes up after its term ended is refused by etcd itself.
"""

from __future__ import annotations

import asyncio
import logging
import time

import aetcd

from st_py.tracker.log.errors import ConsensusUnavailableError
from st_py.tracker.log.etcd_log import cluster_prefix
from st_py.tracker.log.etcd_session import EtcdSession

log = logging.getLogger(__name__)


class Election:
    """This tracker's candidacy in cluster ``cluster_id``, as ``addr`` (the
    address clients are sent to while it leads).

    Use from one event loop. :attr:`lost` is set when the term ends (the
    lease could not be renewed within its TTL, or was revoked).

    Parameters
    ----------
    ttl : int
        Seconds the election lease lasts unrenewed (etcd leases count whole
        seconds): how long a dead leader keeps the term.
    """

    def __init__(self, session: EtcdSession, cluster_id: str, addr: str, ttl: int = 3):
        self.session = session
        self.key = cluster_prefix(cluster_id) + b"leader"
        self.addr = addr
        self.ttl = ttl
        self.term = 0
        self.lost = asyncio.Event()
        self._lease = None
        self._renewed = 0.0  # time.monotonic() of the last renewal etcd confirmed
        self._keepalive: asyncio.Task | None = None
        self._watchdog: asyncio.Task | None = None

    async def campaign(self, timeout: float | None = None) -> int:
        """Wait until elected; return the term.

        Raises
        ------
        TimeoutError
            Not elected within ``timeout`` seconds.
        ConsensusUnavailableError
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            term = await self._try_once()
            if term:
                return term
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(f"not elected within {timeout:g} s")

            async def wait_change(c: aetcd.Client, left=left):
                try:
                    await c.watch_once(self.key, timeout=min(self.ttl, left) if left else self.ttl)
                except aetcd.exceptions.WatchTimeoutError:
                    pass

            await self.session.call(wait_change, deadline_s=self.ttl + 5.0)

    async def _try_once(self) -> int:
        async def txn(c: aetcd.Client):
            lease = await c.lease(self.ttl)
            t = c.transactions
            ok, responses = await c.transaction(
                compare=[t.create(self.key) == 0],
                success=[t.put(self.key, self.addr.encode(), lease=lease)],
                failure=[],
            )
            if not ok:
                await c.revoke_lease(lease.id)
                return 0, None
            return responses[0].response_put.header.revision, lease

        started = time.monotonic()
        term, lease = await self.session.call(txn)
        if not term:
            return 0
        self.term, self._lease, self._renewed = int(term), lease, started
        self.lost.clear()
        self._keepalive = asyncio.create_task(self._keep_alive())
        self._watchdog = asyncio.create_task(self._watch_lease())
        log.info("elected leader in term %d as %s", self.term, self.addr)
        return self.term

    def leads(self) -> bool:
        """Whether this tracker may still consider itself the leader: its
        last confirmed renewal is younger than the lease's TTL (a conservative
        check for reads; writes are fenced by etcd whatever this says)."""
        return bool(self.term) and not self.lost.is_set() and time.monotonic() - self._renewed < self.ttl

    async def _keep_alive(self) -> None:
        lease = self._lease
        assert lease is not None  # set by the campaign that started this task
        while not self.lost.is_set():
            # Every ttl/3, and at once when less than 2/3 of the lease is known to be left: a campaign
            # whose transaction etcd answered late (a loaded machine) starts its term with the lease
            # asked for seconds ago, and the watchdog would end it before a renewal every ttl/3
            # (a standby elected and stopped 0.5 s later, leaving no leader: CI, test_standby_follows).
            left = self.ttl - (time.monotonic() - self._renewed)
            await asyncio.sleep(max(0.0, min(self.ttl / 3, left - 2 * self.ttl / 3)))
            asked = time.monotonic()
            try:
                reply = await self.session.call(lambda c: c.refresh_lease(lease.id), deadline_s=self.ttl)
            except (ConsensusUnavailableError, aetcd.exceptions.ClientError) as e:
                reply, why = None, str(e)
            else:
                why = "lease expired"
            if reply is not None and reply.TTL > 0:
                self._renewed = asked
                continue
            if reply is None and time.monotonic() - self._renewed < self.ttl:
                continue  # a failed renewal; the lease still runs
            log.warning("term %d ended: %s", self.term, why)
            self.lost.set()

    async def _watch_lease(self) -> None:
        """End the term once no renewal was confirmed for the lease's TTL,
        whatever the renewal in progress is doing: one waiting on a
        connection whose packets vanish must not keep a leader that etcd
        already dropped (a tracker cut off the network; test_tracker_netns).
        ``_renewed`` is when a confirmed renewal was *asked*, so this ends
        the term no later than etcd expires the lease."""
        while not self.lost.is_set():
            await asyncio.sleep(min(0.5, self.ttl / 6))
            if time.monotonic() - self._renewed >= self.ttl:
                log.warning("term %d ended: no renewal of its election lease confirmed for %d s", self.term, self.ttl)
                self.lost.set()

    async def resign(self) -> None:
        """End this tracker's term now (revoke the lease: the key goes)."""
        if self._keepalive is not None:
            self._keepalive.cancel()
        if self._watchdog is not None:
            self._watchdog.cancel()
        self.lost.set()
        if self._lease is not None:
            lease, self._lease = self._lease, None
            try:
                await self.session.call(lambda c: c.revoke_lease(lease.id), deadline_s=self.ttl)
            except (ConsensusUnavailableError, aetcd.exceptions.ClientError):
                pass  # it runs out by itself

"""The operator's view of a replicated tracker (issue 39, item 5;
docs/operations.md, "Replicated trackers"): which trackers run, which one
leads, how far each applied the log, the etcd members' health, and the
failovers with their reason.

Keys of cluster ``C`` (``K`` = ``/storetorrent/C/``), beside the log's:

- ``K + trackers/<addr>``: each running tracker (leader or standby), under
  an etcd lease of its own that it keeps alive, so a dead one drops out
  within :data:`PRESENCE_TTL_S`: its role, host, pid, the index it applied
  and since when it runs (JSON);
- ``K + terms/<term, 20 digits>``: each election (JSON): the leader, when,
  the previous leader and why it changed (``reason``); ``ended`` is set by a
  leader that resigned (it stopped), so the next election can tell a clean
  hand-over from a lease that ran out. The last :data:`TERMS_KEPT` are kept.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import aetcd

from st_py.tracker.log.etcd_log import cluster_prefix
from st_py.tracker.log.etcd_session import EtcdSession

log = logging.getLogger("st.tracker.replicas")

PRESENCE_TTL_S = 10  # a tracker that stops renewing drops out of the list within this
REFRESH_S = 3.0  # how often a tracker refreshes its entry (its applied index)
TERMS_KEPT = 20
MEMBER_TIMEOUT_S = 1.0  # per etcd member, for its health
MEMBERS_CACHE_S = 2.0


@dataclass
class Failover:
    """One election: ``term``, the ``leader`` elected, ``at`` (unix s), the
    ``previous`` leader and the ``reason`` the lead changed."""

    term: int
    leader: str
    at: float
    previous: str
    reason: str


@dataclass
class MemberHealth:
    """One etcd member as this tracker saw it: its ``endpoint``, whether it
    answered (``healthy``, else ``detail`` says what failed), whether it is
    etcd's raft leader, its raft index and term, and its version."""

    endpoint: str
    healthy: bool
    detail: str = ""
    raft_leader: bool = False
    raft_index: int = 0
    raft_term: int = 0
    version: str = ""


@dataclass
class ReplicasView:
    """What :meth:`Replicas.view` returns: the trackers (dicts of addr, role,
    host, pid, applied_index, up_s), the failovers, newest first, and the
    etcd members' health."""

    trackers: list[dict] = field(default_factory=list)
    failovers: list[Failover] = field(default_factory=list)
    members: list[MemberHealth] = field(default_factory=list)

    def as_dict(self) -> dict:
        """Plain data (status.json)."""
        return {
            "trackers": self.trackers,
            "failovers": [asdict(f) for f in self.failovers],
            "members": [asdict(m) for m in self.members],
        }


class Replicas:
    """This tracker's presence in cluster ``cluster_id`` and the view of all
    of them, over ``session``. ``applied`` gives the index this tracker
    applied. Use from one event loop: :meth:`start` before campaigning."""

    def __init__(self, session: EtcdSession, cluster_id: str, addr: str, applied: Callable[[], int] = lambda: 0):
        self.session, self.addr, self.applied = session, addr, applied
        p = cluster_prefix(cluster_id)
        self.trackers_prefix = p + b"trackers/"
        self.terms_prefix = p + b"terms/"
        self.role = "standby"
        self.term = 0
        self.started = time.time()
        self._lease = None
        self._task: asyncio.Task | None = None
        self._members: tuple[float, list[MemberHealth]] = (0.0, [])
        self.last_view: ReplicasView | None = None  # the leader's, refreshed every REFRESH_S
        # a standby with a namespace of its own follows the log: it shows how far it applied,
        # and the leader keeps the entries it has not (OpLog._maybe_compact)
        self.follows = False
        # where it serves FetchInfofile while a standby (st_py/tracker/rpc/standby_fetch.py; "": nowhere),
        # shown to clients in the leader's Status so their copies are made from standbys too
        self.fetch_addr = ""

    def _value(self) -> bytes:
        return json.dumps(
            {
                "addr": self.addr,
                "role": self.role,
                "term": self.term,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "applied_index": int(self.applied()) if self.role == "leader" or self.follows else 0,
                "follows": self.follows,
                "fetch": self.fetch_addr if self.role != "leader" else "",
                "since": self.started,
            }
        ).encode()

    async def start(self) -> None:
        """Appear in the list (as a standby) and keep the entry alive."""
        await self._publish()
        self._task = asyncio.create_task(self._keep())

    async def _publish(self) -> None:
        key, value = self.trackers_prefix + self.addr.encode(), self._value()

        async def put(c: aetcd.Client):
            if self._lease is None:
                self._lease = await c.lease(PRESENCE_TTL_S)
            else:
                await c.refresh_lease(self._lease.id)
            await c.put(key, value, lease=self._lease)

        await self.session.call(put, deadline_s=PRESENCE_TTL_S)

    async def _keep(self) -> None:
        while True:
            await asyncio.sleep(REFRESH_S)
            try:
                await self._publish()
            except Exception as e:  # noqa: BLE001 - the view only: keep trying, say so
                self._lease = None  # it may have run out: a new one next time
                log.warning("could not refresh this tracker's entry in etcd (%s); retrying", e)
            await self._refresh_view()

    async def _refresh_view(self) -> None:
        if self.role != "leader":
            return
        try:
            self.last_view = await self.view()
        except Exception as e:  # noqa: BLE001 - the view only
            log.warning("could not read the trackers' view from etcd (%s)", e)

    async def elected(self, term: int) -> Failover:
        """This tracker won ``term``: record the election with why the lead
        changed, and show this tracker as the leader."""
        self.role, self.term = "leader", term

        async def last(c: aetcd.Client):
            return list(await c.get_prefix(self.terms_prefix, sort_order="descend"))[:1]

        got = await self.session.call(last)
        prev = json.loads(got[0].value) if got else None
        if prev is None:
            reason, previous = "first leader of the cluster", ""
        elif prev.get("ended"):
            reason, previous = f"the previous leader {prev['leader']} {prev['ended']}", prev["leader"]
        else:
            previous = prev["leader"]
            reason = (
                f"the previous leader {previous}'s election lease ran out (its process died, was paused, or lost etcd)"
            )
        f = Failover(term, self.addr, time.time(), previous, reason)
        key = self.terms_prefix + b"%020d" % term

        async def put(c: aetcd.Client):
            await c.put(key, json.dumps(asdict(f)).encode())
            for kv in await c.get_prefix(self.trackers_prefix):  # the old leader's entry: its term is over
                if json.loads(kv.value).get("role") == "leader" and kv.key != self.trackers_prefix + self.addr.encode():
                    await c.delete(kv.key)
            old = [kv.key for kv in await c.get_prefix(self.terms_prefix, sort_order="descend", keys_only=True)]
            for k in old[TERMS_KEPT:]:
                await c.delete(k)

        await self.session.call(put)
        try:
            await self._publish()
        except Exception as e:  # noqa: BLE001 - the view only
            log.warning("could not show this tracker as the leader in etcd (%s)", e)
        log.info("elected leader for term %d: %s", term, reason)
        await self._refresh_view()
        return f

    async def resigned(self, how: str = "stopped and resigned") -> None:
        """This leader stops: say so in its term's record, and leave the list."""
        if self._task is not None:
            self._task.cancel()
        term_key = self.terms_prefix + b"%020d" % self.term
        me = self.trackers_prefix + self.addr.encode()

        async def put(c: aetcd.Client):
            if self.term:
                got = await c.get(term_key)
                if got is not None:
                    rec = json.loads(got.value)
                    rec["ended"] = how
                    await c.put(term_key, json.dumps(rec).encode())
            await c.delete(me)

        try:
            await self.session.call(put, deadline_s=3.0)
        except Exception as e:  # noqa: BLE001 - at shutdown: the lease runs out anyway
            log.warning("could not record this tracker's resignation in etcd (%s)", e)

    async def view(self) -> ReplicasView:
        """The trackers, failovers and members' health (members cached for
        :data:`MEMBERS_CACHE_S`). Raises ConsensusUnavailableError."""

        async def get(c: aetcd.Client):
            trackers = [kv.value for kv in await c.get_prefix(self.trackers_prefix)]
            terms = [kv.value for kv in await c.get_prefix(self.terms_prefix, sort_order="descend")]
            return trackers, terms

        trackers, terms = await self.session.call(get, deadline_s=3.0)
        now = time.time()
        rows = []
        for v in trackers:
            t = json.loads(v)
            t["up_s"] = round(now - float(t.pop("since", now)), 1)
            rows.append(t)
        rows.sort(key=lambda t: (t["role"] != "leader", t["addr"]))
        failovers = []
        for v in terms:
            d = json.loads(v)
            d.pop("ended", None)
            failovers.append(Failover(**d))
        return ReplicasView(rows, failovers, await self.members())

    async def leader_applied(self) -> int:
        """The index the leader last published as applied (0: no leader
        listed). Raises ConsensusUnavailableError."""

        async def get(c: aetcd.Client):
            return [json.loads(kv.value) for kv in await c.get_prefix(self.trackers_prefix)]

        rows = await self.session.call(get, deadline_s=3.0)
        return max((int(t.get("applied_index", 0)) for t in rows if t.get("role") == "leader"), default=0)

    def followers_floor(self) -> int | None:
        """The lowest index the standbys that follow the log (as the leader
        last saw them) have applied, or None if none follows."""
        if self.last_view is None:
            return None
        rows = self.last_view.trackers
        got = [int(t.get("applied_index", 0)) for t in rows if t.get("follows") and t["role"] != "leader"]
        return min(got) if got else None

    def fetch_addrs(self) -> list[str]:
        """Where the standbys serve FetchInfofile (each one's ``fetch``
        entry, the Status's ``TrackerReplica.fetch_addr``), sorted, as the
        leader last read the trackers' list; [] before the first read or with
        none. What the leader's announce replies tell peers that keep copies
        (``AnnounceReply.standby_fetch_addrs``)."""
        if self.last_view is None:
            return []
        return sorted(t["fetch"] for t in self.last_view.trackers if t.get("fetch") and t.get("role") != "leader")

    async def members(self) -> list[MemberHealth]:
        """Each etcd member's health, asked directly (not through the session)."""
        at, cached = self._members
        if time.monotonic() - at < MEMBERS_CACHE_S:
            return cached
        out = await asyncio.gather(*(_member_health(e) for e in self.session.endpoints))
        self._members = (time.monotonic(), list(out))
        return list(out)


async def _member_health(endpoint: str) -> MemberHealth:
    host, _, port = endpoint.rpartition(":")
    c = aetcd.Client(host=host, port=int(port), timeout=MEMBER_TIMEOUT_S)
    try:
        await asyncio.wait_for(c.connect(), MEMBER_TIMEOUT_S)
        st = await asyncio.wait_for(c.status(), MEMBER_TIMEOUT_S * 2)
        urls = list(getattr(st.leader, "client_urls", []) or []) if st.leader is not None else []
        return MemberHealth(
            endpoint,
            True,
            raft_leader=any(u.endswith(f"{host}:{port}") for u in urls),
            raft_index=int(st.raft_index),
            raft_term=int(st.raft_term),
            version=str(st.version),
        )
    except Exception as e:  # noqa: BLE001 - a member that does not answer is the answer
        return MemberHealth(endpoint, False, detail=f"{type(e).__name__}: {e}".strip()[:200])
    finally:
        try:
            await c.close()
        except Exception:  # noqa: BLE001
            pass

"""GET_LOCAL from the client side (paper 3.7, 4.5).

The client asks the peer on its own node, giving the peerlist. The peers run
the ring exchange of their indexes among themselves and each returns the local
paths of the records it must reveal. This module holds the parts that run
inside analysis tasks: a :class:`GetLocalPlan` (plain data, picklable, made by
the driver) and :func:`reveal` (one peer's answer).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from .errors import GetLocalError, PeerError, PeerUnavailableError
from .protocol import ErrorCode, MsgType, encode_get_local, encode_ping
from .transport import Transport, split_addr


@dataclass(frozen=True)
class LocalRecord:
    """One record revealed to this node: read ``path`` with plain open()."""

    name: str
    path: str
    size: int
    copy_rank: int
    peer: str


@dataclass(frozen=True)
class GetLocalPlan:
    """What a GET_LOCAL needs, as plain picklable data.

    ``ring`` is the list of live peers (``host:port``) in peerlist order;
    ``dead`` the peers left out. ``copies`` is F of the class: with ``dead``
    holding F or more peers some records may be unavailable.
    """

    file_name: str
    file_id: int
    generation: int
    ring: tuple[str, ...]
    dead: tuple[str, ...]
    copies: int
    records: int

    def without(self, addr: str) -> "GetLocalPlan":
        return GetLocalPlan(self.file_name, self.file_id, self.generation,
                            tuple(a for a in self.ring if a != addr), self.dead + (addr,),
                            self.copies, self.records)


def ping_all(addrs: list[str], timeout: float = 2.0) -> dict[str, str | None]:
    """PING every peer at once. Returns ``{addr: None if alive else reason}``."""
    t = Transport(timeout=timeout, connect_timeout=timeout)
    result: dict[str, str | None] = {}
    try:
        for a in addrs:
            def cb(fr, exc, a=a):
                result[a] = None if exc is None else str(exc)
            t.send(a, lambda seq: [encode_ping(seq)], cb)
        t.wait(lambda: len(result) == len(addrs), timeout=timeout + 1)
    except TimeoutError:
        for a in addrs:
            result.setdefault(a, "no reply to PING")
    finally:
        t.close()
    return result


def reveal(peer: str, plan: GetLocalPlan, timeout: float | None = None,
           transport: Transport | None = None) -> list[LocalRecord]:
    """Ask ``peer`` for the records it reveals to its node.

    Retries with a smaller ring when a ring peer turns out to be dead
    (paper 4.5: "the client library ... removes the offending peer and
    restarts the operation").

    Raises
    ------
    GetLocalError
        If ``peer`` itself is down, an invariant is broken, or more peers
        failed than the ring can lose.
    """
    own = transport is None
    t = transport or Transport(timeout=timeout or 10 + 1.0 * len(plan.ring))
    try:
        while True:
            if peer not in plan.ring:
                raise GetLocalError(f"peer {peer} is not in the live peerlist {list(plan.ring)}")
            box: dict = {}
            t.send(peer, lambda seq: [encode_get_local(seq, plan.file_id, plan.generation,
                                                       plan.file_name, list(plan.ring))],
                   lambda fr, exc: box.update(fr=fr, exc=exc))
            t.wait(lambda: box)
            exc = box["exc"]
            if exc is None:
                fr = box["fr"]
                assert fr.type == MsgType.LOCAL_LIST
                return [LocalRecord(name.decode("utf-8", "surrogateescape"),
                                    path.decode("utf-8", "surrogateescape"), size, rank, peer)
                        for rank, size, name, path in fr.fields["entries"]]
            if isinstance(exc, PeerUnavailableError):
                raise GetLocalError(f"GET_LOCAL: the local peer {peer} is unavailable: {exc.reason}") from exc
            if isinstance(exc, PeerError) and exc.code in (ErrorCode.PEER_UNREACHABLE, ErrorCode.TIMEOUT):
                bad = [a for a in plan.ring if a != peer and a in exc.message]
                if not bad:
                    raise GetLocalError(f"GET_LOCAL failed: {exc}") from exc
                for a in bad:
                    plan = plan.without(a)
                continue
            raise GetLocalError(f"GET_LOCAL failed: {exc}") from exc
    finally:
        if own:
            t.close()


def local_addresses() -> set[str]:
    """IP addresses of this host (loopback included)."""
    addrs = {"127.0.0.1", "::1", "localhost"}
    try:
        host = socket.gethostname()
        addrs.add(host)
        for info in socket.getaddrinfo(host, None):
            addrs.add(info[4][0])
    except OSError:
        pass
    return addrs


def is_local(addr: str) -> bool:
    host, _ = split_addr(addr)
    return host in local_addresses() or host.startswith("127.")

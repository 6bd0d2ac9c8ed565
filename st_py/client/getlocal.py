"""GET_LOCAL from the client side (paper 3.7, 4.5).

The client asks the peer on its own node, giving the peerlist. The peers run
the ring exchange of their indexes among themselves and each returns the local
paths of the records it must reveal. This module holds the parts that run
inside analysis tasks: a :class:`GetLocalPlan` (plain data, picklable, made by
the driver) and :func:`reveal` (one peer's answer).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, replace
from typing import Any

from st_py.errors import (
    ChecksumError,
    CopyGoneError,
    GetLocalError,
    PeerError,
    PeerUnavailableError,
    RecordsUnavailableError,
)
from st_py.wire.protocol import (
    ErrorCode,
    LocalEntries,
    MsgType,
    crc32c,
    encode_get_local,
    encode_ping,
    stale_infofile_error,
)
from st_py.wire.transport import Transport, split_addr


@dataclass(frozen=True)
class LocalRecord:
    """One record revealed to this node: read ``path`` with plain open()."""

    name: str
    path: str
    size: int
    copy_rank: int
    peer: str

    @property
    def crc32c(self) -> int | None:
        """The CRC-32C the copy was stored with (from its path)."""
        return path_crc32c(self.path)

    def read(self, file: str = "") -> bytes:
        """The copy's bytes, checked against its size and CRC-32C (as GET
        checks them; paper 3.6).

        Raises
        ------
        ChecksumError
            The bytes on disk are not the record's (bit rot, a truncated or
            overwritten file): read another copy with ``StFile.get``.
        CopyGoneError
            The file is gone (moved by its peer, deleted meanwhile, or the
            disk lost it): read the record with ``StFile.get``.
        """
        return read_verified(self.path, self.size, self.name, file)


def path_crc32c(path: str) -> int | None:
    """The CRC-32C in a peer's record file name
    (``<name>@<copy rank>@<crc:08x>[.name]``, docs/peer.md), or None."""
    base = path.rsplit("/", 1)[-1]
    if base.endswith(".name"):
        base = base[:-5]
    tail = base.rsplit("@", 1)
    if len(tail) != 2 or len(tail[1]) != 8:
        return None
    try:
        return int(tail[1], 16)
    except ValueError:
        return None


def read_verified(path: str, size: int, record: str = "", file: str = "") -> bytes:
    """Read a revealed copy and check its size and CRC-32C (the one in its
    path); see :meth:`LocalRecord.read`.

    Raises
    ------
    ChecksumError, CopyGoneError
    """
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        raise CopyGoneError(
            f"record {record!r} of {file or 'its file'}, revealed at {path}, is gone (moved to "
            "quarantine or elsewhere, deleted, or lost by the peer's disk since it was revealed): "
            "read it by GET from another copy (StFile.get), as the scans do",
            record=record,
            file=file,
            path=path,
        ) from None
    want = path_crc32c(path)
    got = crc32c(data)
    if len(data) != size or (want is not None and got != want):
        raise ChecksumError(
            f"record {record!r} of {file or 'its file'}: the copy at {path} has {len(data)} bytes "
            f"and CRC-32C {got:08x}, it was stored with {size} bytes and "
            f"{want if want is None else format(want, '08x')}; read it by GET from another copy "
            "(StFile.get), and run `storetorrent repair`",
            record=record,
            file=file,
            path=path,
            expected=want,
            actual=got,
        )
    return data


def read_copies(paths: list[str], sizes: list[int], check: bool = True) -> tuple[bytes, list[tuple[int, int]]]:
    """Read revealed copies into one bytes object, each at the offset the
    sizes before it give, checking each one's size and (with ``check``)
    the CRC-32C in its path (issue "Many small records": one native call
    per batch, the GIL released for the I/O and the CRCs).

    Returns
    -------
    (data, bad)
        ``bad`` lists ``(index, reason)`` of the copies that failed (reason
        1: missing, 2: size or CRC-32C differs, 3: another I/O error); their
        slots in ``data`` hold garbage: read them with :func:`read_verified`
        (which raises the right error) or by GET.
    """
    try:
        from st_py import _native  # type: ignore[attr-defined]
    except ImportError:
        _native = None
    if _native is not None and check:
        data, bad = _native.read_copies(paths, sizes)
        return data, [(b[0], b[1]) for b in bad]
    out, bad = bytearray(), []
    for i, (p, n) in enumerate(zip(paths, sizes)):
        try:
            with open(p, "rb") as fh:
                d = fh.read()
        except FileNotFoundError:
            d, reason = b"", 1
        except OSError:
            d, reason = b"", 3
        else:
            want = path_crc32c(p) if check else None
            reason = 2 if len(d) != n or (want is not None and crc32c(d) != want) else 0
        if reason:
            bad.append((i, reason))
            d = bytes(n)
        out += d
    return bytes(out), bad


@dataclass(frozen=True)
class GetLocalPlan:
    """What a GET_LOCAL needs, as plain picklable data.

    ``ring`` is the list of live peers (``host:port``) in peerlist order;
    ``dead`` the peers left out. ``copies`` is F of the class: with ``dead``
    holding F or more peers some records may be unavailable. ``records`` is
    the number committed at ``generation`` (the snapshot every peer of the
    ring reveals); ``unavailable`` how many of them have every copy on dead
    peers, so a complete scan reveals ``records - unavailable``.
    """

    file_name: str
    file_id: int
    generation: int
    ring: tuple[str, ...]
    dead: tuple[str, ...]
    copies: int
    records: int
    unavailable: int = 0
    infofile_path: str = ""
    capability: bytes = b""  # the READ token the peers check (docs/capabilities.md)
    as_of: int | None = None  # the past generation whose records are revealed (docs/snapshots.md); None: generation

    @property
    def expected(self) -> int:
        """Records a complete scan reveals across the ring."""
        return self.records - self.unavailable

    def without(self, addrs) -> "GetLocalPlan":
        """The plan with peers ``addrs`` moved from the ring to ``dead``
        (``unavailable`` is recounted from the infofile when it can be)."""
        addrs = {addrs} if isinstance(addrs, str) else set(addrs)
        dead = self.dead + tuple(a for a in self.ring if a in addrs)
        unavailable = self.unavailable
        if self.infofile_path:  # count_unavailable is quick when too few are dead and none is damaged
            unavailable = count_unavailable(self.infofile_path, dead, self.copies, self.as_of)
        return replace(self, ring=tuple(a for a in self.ring if a not in addrs), dead=dead, unavailable=unavailable)

    def check_available(self) -> None:
        """Raise :class:`RecordsUnavailableError` if records have no live
        copy: every copy on dead peers (paper 4.2: more failures than the
        class tolerates), or none left (quarantined: lost). The error names
        them with their reasons (:mod:`st_py.core.copy_health`)."""
        if not self.unavailable:
            return
        reasons = self.unavailable_reasons()
        names = tuple(sorted(reasons))
        lost = bool(reasons) and all(r.startswith("lost") for r in reasons.values())
        some = "; ".join(f"{n!r}: {reasons[n]}" for n in names[:3]) + (" ..." if len(names) > 3 else "")
        if self.dead:
            advice = (
                f"{len(self.dead)} dead: {', '.join(self.dead)}; class x{self.copies} tolerates "
                f"{self.copies - 1}; restart those peers, or pass allow_unavailable=True to read the rest"
            )
        else:
            advice = "no good copy is left of them: write them again, or pass allow_unavailable=True to read the rest"
        raise RecordsUnavailableError(
            f"{self.unavailable} of {self.records} records of {self.file_name} are unavailable ({some}); {advice}",
            self.unavailable,
            self.records,
            self.dead,
            names,
            reasons,
            self.file_name,
            lost,
        )

    def unavailable_reasons(self, limit: int = 100) -> dict[str, str]:
        """``{record: why}`` of (at most ``limit``) records with no live copy,
        the peers of ``dead`` taken as failed just now."""
        if not self.infofile_path:
            return {}
        from st_py.core.copy_health import Liveness, file_health, unavailable_reason
        from st_py.core.infofile import InfofileReader

        r = InfofileReader(self.infofile_path)
        expired: list[str] = []
        try:
            peers = r.peerlist()
            dead = set(self.dead)
            view: Any = r
            if self.as_of is not None:  # the same model, at that generation (docs/snapshots.md)
                from st_py.core.history import AsOf

                at = AsOf(r, self.as_of, self.file_name)
                expired = at.unavailable_names([i for i, _, a in peers if a in dead], limit)
                view = at
            lv = Liveness(
                {pid: (0.0 if addr in dead else None) for _, pid, addr in peers},
                float("inf"),
                addrs={pid: addr for _, pid, addr in peers},
            )
            h = file_health(view, lv, self.file_name)
        finally:
            r.close()
        out = {}
        for name in sorted(h.records):
            rh = h.records[name]
            if rh.live == 0:
                out[name] = unavailable_reason(rh)
                if len(out) >= limit:
                    return out
        for name in expired:  # no copy row at all: its history was dropped (docs/snapshots.md, "Retention")
            if name not in out and len(out) < limit:
                out[name] = f"no copy of it is kept at generation {self.as_of} (its history was dropped)"
        return out


def count_unavailable(infofile_path: str, dead: tuple[str, ...], copies: int, as_of: int | None = None) -> int:
    """Committed records of the infofile (as of generation ``as_of``, if
    given) whose every copy is on a peer whose address is in ``dead``."""
    from st_py.core.history import AsOf
    from st_py.core.infofile import InfofileReader

    r = InfofileReader(infofile_path)
    try:
        idxs = [i for i, _, a in r.peerlist() if a in set(dead)]
        view = r if as_of is None else AsOf(r, as_of, infofile_path)
        return view.count_unavailable(idxs, copies)
    finally:
        r.close()


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


class _Reply:
    """The one reply to a request, filled by its transport callback."""

    __slots__ = ("fr", "exc", "_done")

    def __init__(self):
        self.fr, self.exc, self._done = None, None, False

    def update_reply(self, fr, exc) -> None:
        self.fr, self.exc, self._done = fr, exc, True

    def done(self) -> bool:
        return self._done


def _get_local_request(plan: GetLocalPlan):
    def build(seq: int) -> list:
        as_of = plan.as_of if plan.as_of != plan.generation else None
        return [encode_get_local(seq, plan.file_id, plan.generation, plan.file_name, list(plan.ring), as_of=as_of)]

    return build


RING_RETRIES = 3  # restarts of the collective with the same ring before giving up


def reveal(
    peer: str,
    plan: GetLocalPlan,
    timeout: float | None = None,
    transport: Transport | None = None,
    allow_unavailable: bool = False,
) -> list[LocalRecord]:
    """Ask ``peer`` for the records it reveals to its node (paper 3.7); see
    :func:`reveal_ring`, which also says which ring answered."""
    return reveal_ring(peer, plan, timeout, transport, allow_unavailable)[0]


def reveal_ring(
    peer: str,
    plan: GetLocalPlan,
    timeout: float | None = None,
    transport: Transport | None = None,
    allow_unavailable: bool = False,
) -> tuple[list[LocalRecord], tuple[str, ...]]:
    """Ask ``peer`` for the records it reveals to its node (paper 3.7); see
    :func:`reveal_entries`, which gives them by column."""
    e, ring = reveal_entries(peer, plan, timeout, transport, allow_unavailable)
    return [
        LocalRecord(name, path, size, rank, peer) for rank, size, name, path in zip(e.ranks, e.sizes, e.names, e.paths)
    ], ring


def reveal_entries(
    peer: str,
    plan: GetLocalPlan,
    timeout: float | None = None,
    transport: Transport | None = None,
    allow_unavailable: bool = False,
) -> tuple[LocalEntries, tuple[str, ...]]:
    """Ask ``peer`` for the records it reveals to its node (paper 3.7), by
    column (:class:`st_py.wire.protocol.LocalEntries`: no object per record, for
    plans of millions of records).

    When the ring fails (a peer timed out or is unreachable), the peers the
    error names are PINGed; those that do not answer are removed from the
    ring and the collective restarts (paper 4.5: "the client library ...
    removes the offending peer and restarts the operation"). Only peers that
    fail a PING are removed, so the tasks of one scan, each asking its own
    peer, agree on the ring. The peers' timeout is scaled with the ring size
    (``--ring-timeout-base`` + ``--ring-timeout-per-peer`` x N); this call
    waits 10 s + 1 s x N by default.

    Returns
    -------
    (LocalEntries, ring)
        ``ring`` is the peerlist of the collective that answered. The tasks of
        one scan must all report the same ring: if a peer failed between two
        tasks' requests they may not, and the scan must be run again (the
        integrations check this).

    Raises
    ------
    RecordsUnavailableError
        If removing dead peers leaves records with no live copy (unless
        ``allow_unavailable``): says how many.
    GetLocalError
        If ``peer`` itself is down, the ring keeps failing, or a peer reports
        a broken invariant (the message names the offending peers).
    """
    own = transport is None
    t = transport or Transport(timeout=timeout or 10 + 1.0 * len(plan.ring))
    t.set_capability(plan.file_id, plan.capability)
    attempts = 0
    try:
        while True:
            if peer not in plan.ring:
                raise GetLocalError(f"peer {peer} is not in the live peerlist {list(plan.ring)}")
            if not allow_unavailable:
                plan.check_available()
            box = _Reply()
            t.send(peer, _get_local_request(plan), box.update_reply)
            t.wait(box.done)
            exc = box.exc
            if exc is None:
                fr = box.fr
                assert fr.type == MsgType.LOCAL_LIST
                return LocalEntries.of(fr.fields["entries"]), plan.ring
            if isinstance(exc, PeerUnavailableError):
                raise GetLocalError(f"GET_LOCAL: the local peer {peer} is unavailable: {exc.reason}") from exc
            if isinstance(exc, PeerError) and exc.code == ErrorCode.STALE_INFOFILE:
                raise stale_infofile_error(exc) from exc
            if isinstance(exc, PeerError) and exc.code == ErrorCode.INVARIANT:
                raise GetLocalError(f"GET_LOCAL on {plan.file_name} stopped: {exc.message}") from exc
            if not (isinstance(exc, PeerError) and exc.code in (ErrorCode.PEER_UNREACHABLE, ErrorCode.TIMEOUT)):
                raise GetLocalError(f"GET_LOCAL failed: {exc}") from exc
            attempts += 1
            named = [a for a in plan.ring if a != peer and a in exc.peers] or [a for a in plan.ring if a != peer]
            answers = ping_all(named) if named else {}
            dead = [a for a in named if answers.get(a) is not None]
            if dead:
                plan = plan.without(dead)
            elif attempts >= RING_RETRIES:
                raise GetLocalError(f"GET_LOCAL failed {attempts} times with the same ring: {exc}") from exc
    finally:
        if own:
            t.close()


def check_complete(plan: GetLocalPlan, parts: list[tuple[int, tuple[str, ...]]]) -> None:
    """Every committed record must be revealed exactly once (paper 3.7):
    every task answered from the same ring, and the counts add up to the
    plan's ``expected``.

    Parameters
    ----------
    parts : list of (records revealed, ring) from one :func:`reveal_ring` per peer

    Raises
    ------
    st_py.GetLocalError
        Saying how many records are missing and which peers are down, or that
        a peer failed during the scan so that tasks used different rings.
    """
    rings = {ring for _, ring in parts}
    if len(rings) > 1:
        raise GetLocalError(
            f"a peer failed during the GET_LOCAL scan of {plan.file_name}: its tasks were answered by "
            f"{len(rings)} different rings ({' / '.join(','.join(r) for r in sorted(rings))}), so records "
            "could be revealed twice or not at all; run the scan again"
        )
    total = sum(n for n, _ in parts)
    if total != plan.expected:
        raise GetLocalError(
            f"GET_LOCAL revealed {total} of the {plan.expected} records of {plan.file_name} it should "
            f"({plan.records} committed at generation {plan.generation}, {plan.unavailable} without a live "
            f"copy; peers down: {', '.join(plan.dead) or 'none'}; class x{plan.copies} tolerates "
            f"{plan.copies - 1}). A peer failed or the file changed during the scan: run it again, "
            "or restart the peers / rebalance"
        )


def local_addresses() -> set[str]:
    """IP addresses of this host (loopback included): the host name's, and
    every interface's when psutil is installed (it comes with Ray and Dask)."""
    addrs = {"127.0.0.1", "::1", "localhost"}
    try:
        host = socket.gethostname()
        addrs.add(host)
        for info in socket.getaddrinfo(host, None):
            addrs.add(str(info[4][0]))
    except OSError:
        pass
    try:
        import psutil

        for nic in psutil.net_if_addrs().values():
            addrs.update(a.address.split("%", 1)[0] for a in nic if a.family in (socket.AF_INET, socket.AF_INET6))
    except (ImportError, OSError):
        pass
    return addrs


def is_local(addr: str) -> bool:
    """Whether peer address ``addr`` (``host:port``) is one of this machine's (or loopback)."""
    host, _ = split_addr(addr)
    return host in local_addresses() or host.startswith("127.")

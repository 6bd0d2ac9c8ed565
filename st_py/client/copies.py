"""Storing copies of committed records on chosen peers: the write half of
rebalance (paper 4.4), of repair's catch-up of pending copies (paper 4.5;
docs/replication.md) and of spread and drain's moves (paper 5).

Each copy is a ``PUT`` of the record's stored bytes (as
``queue_get(name, stored=True)`` reads them: after the file's filters) at
its copy rank, under the name its copies are stored under
(``RecordMeta.key``: a replaced record's version name) and with its
committed CRC-32C, which the peer checks. The ``REPLACE`` flag lets the
peer overwrite a stale or half-written copy of the record it may hold: the
callers choose peers holding no committed copy of it, so whatever is there
is left over (a crashed writer, an earlier move); a caller may send a copy
without it to a peer that may still hold the same bytes from before a move
(``keep_existing``: the peer takes them back, or answers ``EXISTS``). Nothing is committed here:
the caller commits what was stored (:meth:`StFile.commit_moved_copies`,
:meth:`StFile.commit_stored_copies`). :class:`Copies` does it for one open
file (:class:`st_py.client.file.StFile` delegates ``store_copies`` to it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from st_py.core.infofile import RecordMeta
from st_py.errors import PeerError, PeerUnavailableError
from st_py.wire.protocol import FLAG_REPLACE


@dataclass(frozen=True)
class CopyToStore:
    """One copy of a committed record to store on a peer
    (:meth:`StFile.store_copies`). Immutable: may be shared between threads.

    Attributes
    ----------
    record : RecordMeta
        The record as committed: the copy is stored under ``record.key``
        with CRC-32C ``record.crc32c``.
    rank : int
        The copy rank it is stored at.
    peer : int
        The peer index (of :attr:`StFile.peers`) to store it on first.
    data : bytes
        The record's stored bytes, as ``queue_get(record.name,
        stored=True)`` returns them.
    """

    record: RecordMeta
    rank: int
    peer: int
    data: bytes


@dataclass(frozen=True)
class CopyOutcome:
    """How one copy of :meth:`StFile.store_copies` ended. Immutable: may be
    shared between threads.

    Attributes
    ----------
    record : RecordMeta
        The record, as given in its :class:`CopyToStore`.
    rank : int
        Its copy rank.
    peer : int
        The peer index that stored the copy; when it failed, the last one
        tried.
    error : Exception or None
        None if the copy is stored on ``peer``; else why the last attempt
        failed.
    """

    record: RecordMeta
    rank: int
    peer: int
    error: Exception | None = None

    @property
    def stored(self) -> bool:
        """The copy is stored on :attr:`peer`."""
        return self.error is None

    @property
    def peer_failed(self) -> bool:
        """The last attempt failed at its peer (paper 4.3): it did not answer
        (:class:`PeerUnavailableError`) or refused the copy with an error
        reply (:class:`PeerError`): another peer may take the copy."""
        return isinstance(self.error, (PeerUnavailableError, PeerError))


class CopyTarget(Protocol):
    """What :class:`Copies` needs of an open file (a
    :class:`~st_py.client.file_context.FileContext` has it)."""

    @property
    def file_id(self) -> int:
        """The file's id (the peers store its records under it)."""
        ...

    @property
    def transport(self) -> Any:  # a Transport: send_put(...), wait(predicate)
        """The file's pipelined peer connections (:class:`st_py.wire.transport.Transport`)."""
        ...

    def addr(self, idx: int) -> str:
        """The ``host:port`` of peer index ``idx`` of the file's peerlist."""
        ...

    def check_open(self) -> None:
        """Raise :class:`StoreTorrentError` if the file is closed."""
        ...

    def renew_capability(self) -> None:
        """Renew the file's capability when it is about to expire
        (docs/capabilities.md); raises :class:`TrackerUnavailableError` when
        the tracker cannot renew it in time."""
        ...


class Copies:
    """Stores copies of committed records on chosen peers for one open
    file; owns nothing but the calls in flight of one :meth:`store_copies`.

    Thread safety: not safe to share between threads by itself; it runs
    inside its file's public methods, one at a time under the file's lock.
    """

    def __init__(self, ctx: CopyTarget):
        self.ctx = ctx

    def store_copies(
        self,
        copies: Iterable[CopyToStore],
        fail_over: Callable[[CopyOutcome], int | None] | None = None,
        keep_existing: Callable[[CopyToStore, int], bool] | None = None,
    ) -> list[CopyOutcome]:
        """Store each copy on its peer: :meth:`st_py.client.file.StFile.store_copies` (the public docstring)."""
        ctx = self.ctx
        ctx.check_open()
        ctx.renew_capability()
        outcomes: list[CopyOutcome] = []
        outstanding = 0

        def send(c: CopyToStore, peer: int) -> None:
            nonlocal outstanding
            key = c.record.key.encode("utf-8", "surrogateescape")  # a replaced record: its version's name
            body, crc = c.data, c.record.crc32c
            outstanding += 1
            ctx.transport.send_put(
                ctx.addr(peer),
                ctx.file_id,
                c.rank,
                crc,
                key,
                body,
                0 if keep_existing is not None and keep_existing(c, peer) else FLAG_REPLACE,
                lambda fr, exc: done(c, peer, exc),
            )

        def done(c: CopyToStore, peer: int, exc: Exception | None) -> None:
            nonlocal outstanding
            outstanding -= 1
            outcome = CopyOutcome(c.record, c.rank, peer, exc)
            if outcome.peer_failed and fail_over is not None:
                new = fail_over(outcome)
                if new is not None:
                    send(c, new)
                    return
            outcomes.append(outcome)

        for c in copies:
            send(c, c.peer)
        ctx.transport.wait(lambda: outstanding == 0)
        return outcomes


__all__ = ["Copies", "CopyOutcome", "CopyTarget", "CopyToStore"]

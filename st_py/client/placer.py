"""Where one writer's copies go (paper 3.1, 4.1, 4.3; docs/replication.md).

:class:`Placer` chooses the holders of each record an open file writes by
the file's placement policy (:mod:`st_py.core.placement`, the pure functions):
records go in blocks of ``blocksize`` to one set of holders, in copy-rank
order, apart by failure domain as far as the usable peers allow; under hash
placement each record's holders follow from its name; under local-first
placement (or with ``prefer_peer``) copy rank 0 is on this writer's node. It
also picks the spare peer that takes over a failed copy (paper 4.3), and
counts the records whose copies had to share a failure domain.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from st_py.client.file_context import FileContext
from st_py.core.placement import (
    DomainShortfall,
    choose_holders,
    choose_spare,
    hash_holders,
    hash_spare,
    local_first_holders,
    pick_local_peer,
    shares_domain,
)
from st_py.errors import NotEnoughPeersError

log = logging.getLogger("storetorrent.client")


class Placer:
    """The placement of one open file's writes: owns the current block
    (its holders and the records left in it), this writer's own peer under
    local-first placement, and :attr:`domain_shortfall`.

    Parameters
    ----------
    ctx : FileContext
    blocksize : int
        Records per block of holders (the file's, by default).
    prefer_peer : str, optional
        ``host:port`` of the peer that takes copy rank 0 when usable.
    local_addresses : callable() -> set of str
        This machine's addresses (looked up once, under local-first placement).

    Thread safety: not safe to share between threads by itself; it runs
    inside its file's public methods, one at a time under the file's lock.
    """

    def __init__(
        self,
        ctx: FileContext,
        blocksize: int,
        prefer_peer: str | None,
        local_addresses: Callable[[], set[str]],
    ):
        self.ctx = ctx
        self.blocksize = blocksize
        # prefer_peer: rank 0 on this peer when it is usable (local-first
        # placement, FreeLoader seed 004 section 4.1), whatever the file's
        # policy unless it is hash; _local_peer: the one this writer uses
        self.prefer_peer = prefer_peer
        self._local_addresses = local_addresses
        self._local_peer: int | None = None
        self._local_hosts: set[str] | None = None  # this machine's addresses, looked up once
        self._block: list[int] = []
        self._block_left = 0
        self._block_shared = False  # two holders of the block share a failure domain
        # Records (and stripes) this handle placed with two copies in one
        # failure domain because the usable peers allowed no better
        # (docs/replication.md, "Failure domains"): never a silent downgrade.
        self.domain_shortfall = DomainShortfall()

    def place(self, name: str, holders: list[int] | None = None) -> list[int]:
        """The holders of record ``name`` by copy rank: the current block's
        (a new block when it is used up, holds an unusable peer, or under
        hash placement), or ``holders`` as given (a stripe of an object,
        placed by ``put_object``). A record whose holders share a failure
        domain is counted (:meth:`note_domains`).

        Raises
        ------
        NotEnoughPeersError
            Fewer usable peers than the file's class needs.
        """
        ctx = self.ctx
        if holders is not None:
            holders = list(holders)
            shared = shares_domain(holders, ctx.domains)
        else:
            if self._block_left <= 0 or ctx.hash_placement or not all(ctx.peer_usable(i) for i in self._block):
                self._block = self.choose_block(name)
                self._block_shared = shares_domain(self._block, ctx.domains)
                self._block_left = self.blocksize
            self._block_left -= 1
            holders = list(self._block)
            shared = self._block_shared
        if shared:
            self.note_domains(name, holders)
        return holders

    def place_many(self, names: list[str]) -> list[list[int]]:
        """The holders of each of ``names`` by copy rank, as :meth:`place`
        gives them one by one, for a write batch: the usable peers are
        looked at once per block (nothing changes them between two
        records of one call: replies are taken only while the file polls),
        not once per record.

        Raises
        ------
        NotEnoughPeersError
            Fewer usable peers than the file's class needs.
        """
        ctx = self.ctx
        if ctx.hash_placement:
            return [self.place(n) for n in names]
        out: list[list[int]] = []
        checked = False  # the current block's peers were found usable in this call
        live: list[int] | None = None  # the write targets, looked at once for the call
        for name in names:
            if self._block_left <= 0 or not (checked or all(ctx.peer_usable(i) for i in self._block)):
                if live is None:
                    live = ctx.write_targets()
                self._block = self.choose_block(name, live)
                self._block_shared = shares_domain(self._block, ctx.domains)
                self._block_left = self.blocksize
            checked = True
            self._block_left -= 1
            holders = list(self._block)
            if self._block_shared:
                self.note_domains(name, holders)
            out.append(holders)
        return out

    def choose_block(self, name: str, live: list[int] | None = None) -> list[int]:
        """The holders of the next block of records by the file's placement
        policy (st_py.core.placement), in copy-rank order, apart by failure domain
        as far as the usable peers allow; under hash placement, of record
        ``name`` alone. ``live``: the file's write targets
        (:meth:`FileContext.write_targets`) when the caller has them.

        Raises
        ------
        NotEnoughPeersError
        """
        ctx = self.ctx
        if live is None:
            live = ctx.write_targets()
        if len(live) < ctx.copies:
            raise NotEnoughPeersError(
                f"file {ctx.name} (class {ctx.replication}) needs {ctx.copies} live peers, "
                f"{len(live)} of {len(ctx.peers)} are usable; start peers or wait for them to announce"
            )
        if ctx.hash_placement:
            return hash_holders(ctx.file_id, name, ctx.peer_ids, ctx.copies, set(live), ctx.spread)
        local = self.writer_peer(live)
        if local is not None:
            return local_first_holders(live, ctx.copies, local, domains=ctx.spread)
        return choose_holders(live, ctx.copies, domains=ctx.spread)

    def note_domains(self, name: str, holders: list[int]) -> None:
        """Count record ``name``, two of whose ``holders`` share a failure
        domain (callers check), in :attr:`domain_shortfall`, and log the
        first once per handle: a WARNING when the peerlist spans several
        domains, INFO in a one-domain cluster (a single machine), which has
        none to take copies apart by."""
        ctx = self.ctx
        s = self.domain_shortfall
        if s.records:  # logged already: only counted (cheap, per record)
            s.records += 1
            return
        live = ctx.write_targets()
        if s.note(name, holders, ctx.domains, live):
            log.log(
                logging.WARNING if ctx.spread is not None else logging.INFO,
                "file %s: copies of record %r share failure domain %s: its %d usable peers span %d failure "
                "domain(s) and class %s needs %d, so copies are on distinct peers only (the count: "
                'StFile.domain_shortfall; docs/replication.md, "Failure domains")',
                ctx.name,
                name,
                s.domain,
                len(live),
                s.domains,
                ctx.replication,
                ctx.copies,
            )

    def writer_peer(self, live: list[int]) -> int | None:
        """The peer on this writer's node that takes copy rank 0 of records
        and stripes under local-first placement or with ``prefer_peer``
        (FreeLoader seed 004 section 4.1), kept while it is in ``live``;
        None under other policies (and always under hash), or when this node
        has no usable peer."""
        ctx = self.ctx
        if ctx.hash_placement or (self.prefer_peer is None and ctx.placement != "local-first"):
            return None
        if self._local_peer not in live:  # first use, or this writer's node went away
            if self._local_hosts is None:
                self._local_hosts = self._local_addresses() if ctx.placement == "local-first" else set()
            self._local_peer = pick_local_peer(
                {i: ctx.addr(i) for i in ctx.peers}, live, self._local_hosts, self.prefer_peer
            )
        return self._local_peer

    def spare_peer(
        self, name: str, usable: list[int], holders: list[int], apart_from: list[int] | None = None
    ) -> int | None:
        """A peer index to take over a failed or lost copy of record
        ``name`` (see :meth:`st_py.client.file.StFile.spare_peer`)."""
        ctx = self.ctx
        if ctx.hash_placement:
            return hash_spare(ctx.file_id, name, ctx.peer_ids, usable, holders, ctx.spread, apart_from)
        return choose_spare(usable, holders, domains=ctx.spread, apart_from=apart_from)

    def move_copy(self, name: str, holders: list[int], rank: int, usable: list[int]) -> int | None:
        """Put copy ``rank`` of record ``name`` on a spare among ``usable``
        (paper 4.3), apart by failure domain from the copies that stay:
        ``holders[rank]`` becomes the spare, which is returned; None (and
        ``holders`` unchanged) if there is none. A spare that must share a
        domain is counted."""
        others = [p for r, p in enumerate(holders) if r != rank]
        new = self.spare_peer(name, usable, holders, others)
        if new is None:
            return None
        before = shares_domain(holders, self.ctx.domains)
        holders[rank] = new
        if not before and shares_domain(holders, self.ctx.domains):
            self.note_domains(name, holders)
        return new


__all__ = ["Placer"]

"""GET_LOCAL planning on an open file (paper 3.7, 4.3): the live
peerlist by PING, the commit generation, and the records without a live
copy; then the records revealed to this node. :class:`LocalReads` does it
for one open file (:class:`st_py.client.file.StFile` delegates to it).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from st_py.client.file_context import FileContext
from st_py.client.getlocal import GetLocalPlan, LocalRecord, is_local, ping_all, reveal
from st_py.core.infofile import STRIPE_PREFIX
from st_py.errors import GetLocalError, TrackerUnavailableError


class LocalReads:
    """GET_LOCAL for one open file: plans (the live ring by PING, the
    commit generation, the records without a live copy), the records
    revealed to this node, and their local reads. Owns no state of its own.

    Parameters
    ----------
    ctx : FileContext
    flush : callable()
        Commits the file's acknowledged records (a plan must see them).

    Thread safety: not safe to share between threads by itself; it runs
    inside its file's public methods, one at a time under the file's lock.
    """

    def __init__(self, ctx: FileContext, flush: Callable[[], None]):
        self.ctx = ctx
        self.flush = flush

    def get_local_plan(self, allow_unavailable: bool = False) -> GetLocalPlan:
        """The live peerlist and commit generation for a GET_LOCAL, as plain
        data to hand to analysis tasks. Peers that do not answer a PING are
        left out (paper 4.3: initial failures); the PING, not the tracker's
        announce-based view, decides, since it is current.

        Raises
        ------
        RecordsUnavailableError
            If F or more peers are dead and records have no live copy (paper
            4.2), saying how many; unless ``allow_unavailable``.
        """
        ctx = self.ctx
        self.flush()
        try:
            ctx.refresh()
        except TrackerUnavailableError:
            # Read access while the tracker is down (paper 3.5): the peerlist
            # and the capability of the open file serve until it expires; the
            # PINGs below decide liveness anyway.
            if ctx.info.capability and time.time() >= ctx.info.capability_expires:
                raise
        ordered = [ctx.peers[i] for i in sorted(ctx.peers)]
        # PING every peer, even those the tracker reports failed: a peer that
        # just restarted answers before its first announce reaches the tracker.
        answers = ping_all([p.addr for p in ordered])
        ring = tuple(p.addr for p in ordered if answers.get(p.addr) is None)
        dead = tuple(p.addr for p in ordered if p.addr not in ring)
        reader = ctx.infofile()
        generation, records = reader.counted()
        # quick when fewer than F are dead and no copy is pending or quarantined
        unavailable = reader.count_unavailable([p.peer_idx for p in ordered if p.addr in dead], ctx.copies)
        plan = GetLocalPlan(
            ctx.name,
            ctx.file_id,
            generation,
            ring,
            dead,
            ctx.copies,
            records,
            unavailable,
            str(ctx.infofile_path),
            bytes(ctx.info.capability),
            ctx.as_of,
        )
        if not allow_unavailable:
            plan.check_available()
        return plan

    def get_local(
        self, peer: str | None = None, allow_unavailable: bool = False, stripes: bool = False
    ) -> list[LocalRecord]:
        """Records revealed to this node, as local paths (paper 3.7). The
        stripes of striped objects are left out unless ``stripes`` (see
        ``local_stripes()``).

        Parameters
        ----------
        peer : str, optional
            ``host:port`` of the peer to ask. By default every live peer on
            this host is asked (one on a real cluster node; all of them on a
            local cluster) and the lists are joined.
        allow_unavailable : bool
            Reveal what is available when records have no live copy, instead
            of raising.

        Returns
        -------
        list of LocalRecord(name, path, size, copy_rank, peer)
            Across all peers of the file every record committed at the plan's
            generation is revealed exactly once, lower copy ranks first;
            uncommitted records never.

        Raises
        ------
        RecordsUnavailableError
            More peers dead than the class tolerates; says how many records.
        GetLocalError
            A broken invariant (naming the peers), or a ring that keeps failing.
        """
        plan = self.get_local_plan(allow_unavailable)
        targets = [peer] if peer else [a for a in plan.ring if is_local(a)]
        if not targets:
            raise GetLocalError(f"no live peer of {self.ctx.name} runs on this host; live peers: {list(plan.ring)}")
        out: list[LocalRecord] = []
        for a in targets:
            out.extend(reveal(a, plan, allow_unavailable=allow_unavailable))
        if not stripes:  # the stripes of striped objects: see local_stripes()
            out = [r for r in out if not r.name.startswith(STRIPE_PREFIX)]
        return out

    def read_local(self, record: LocalRecord) -> bytes:
        """The record's bytes from its revealed local copy, checked against
        the size and CRC-32C it was stored with (paper 3.6's end-to-end
        check, on the local path of 3.7) and decoded with the file's
        client-side filters (docs/filters.md): what :meth:`get` returns,
        without the network. Used by the fsspec filesystem's local reads.

        Raises
        ------
        ChecksumError
            The copy on disk is not the record's (bit rot, a truncated or
            overwritten file): read it with :meth:`get` (another copy) and
            report it (:meth:`report_bad_copy`).
        GetLocalError
            The copy is gone (deleted meanwhile, or lost by the disk).
        WrongKeyError, FilterError
            The file's filters cannot decode it (a wrong key).
        """
        ctx = self.ctx
        data = record.read(ctx.name)
        if ctx.filters:
            data = ctx.filters.decode(ctx.file_id, record.name, data)
        return data


__all__ = ["LocalReads"]

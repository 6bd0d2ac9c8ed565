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
        """A GET_LOCAL plan: :meth:`st_py.client.file.StFile.get_local_plan` (the public docstring)."""
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
        reader = ctx.live_infofile()  # live: every commit acknowledged before the plan
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
        """The records revealed to this node: :meth:`st_py.client.file.StFile.get_local` (the public docstring)."""
        return self.reveal_plan(self.get_local_plan(allow_unavailable), peer, allow_unavailable, stripes)

    def reveal_plan(
        self, plan: GetLocalPlan, peer: str | None = None, allow_unavailable: bool = False, stripes: bool = False
    ) -> list[LocalRecord]:
        """The records ``plan`` reveals to this node (``peer``: that peer's
        alone), as of the plan's generation; ``stripes``: the stripes of
        striped objects too."""
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
        """A revealed record's bytes: :meth:`st_py.client.file.StFile.read_local` (the public docstring)."""
        ctx = self.ctx
        data = record.read(ctx.name)
        if ctx.filters:
            data = ctx.filters.decode(ctx.file_id, record.name, data)
        return data


__all__ = ["LocalReads"]

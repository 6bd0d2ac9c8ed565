"""GET_LOCAL planning on an open file (paper 3.7, 4.3): the live
peerlist by PING, the commit generation, and the records without a live
copy; then the records revealed to this node. A mixin of
:class:`st_py.file.StFile`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from .errors import GetLocalError, TrackerUnavailableError
from .getlocal import GetLocalPlan, LocalRecord, is_local, ping_all, reveal
from .infofile import STRIPE_PREFIX


class LocalReadsMixin:
    if TYPE_CHECKING:  # provided by StFile
        from ._proto import tracker_pb2 as pb
        from .infofile import InfofileReader

        name: str
        file_id: int
        copies: int
        peers: dict
        info: pb.FileInfo
        filters: Any

        @property
        def infofile_path(self) -> str: ...
        def _infofile(self) -> InfofileReader: ...
        def flush(self) -> None: ...
        def refresh(self) -> None: ...

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
        self.flush()
        try:
            self.refresh()
        except TrackerUnavailableError:
            # Read access while the tracker is down (paper 3.5): the peerlist
            # and the capability of the open file serve until it expires; the
            # PINGs below decide liveness anyway.
            if self.info.capability and time.time() >= self.info.capability_expires:
                raise
        ordered = [self.peers[i] for i in sorted(self.peers)]
        # PING every peer, even those the tracker reports failed: a peer that
        # just restarted answers before its first announce reaches the tracker.
        answers = ping_all([p.addr for p in ordered])
        ring = tuple(p.addr for p in ordered if answers.get(p.addr) is None)
        dead = tuple(p.addr for p in ordered if p.addr not in ring)
        reader = self._infofile()
        generation, records = reader.snapshot()
        # quick when fewer than F are dead and no copy is pending or quarantined
        unavailable = reader.count_unavailable([p.peer_idx for p in ordered if p.addr in dead], self.copies)
        plan = GetLocalPlan(
            self.name,
            self.file_id,
            generation,
            ring,
            dead,
            self.copies,
            records,
            unavailable,
            str(self.infofile_path),
            bytes(self.info.capability),
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
            raise GetLocalError(f"no live peer of {self.name} runs on this host; live peers: {list(plan.ring)}")
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
        data = record.read(self.name)
        if self.filters:
            data = self.filters.decode(self.file_id, record.name, data)
        return data

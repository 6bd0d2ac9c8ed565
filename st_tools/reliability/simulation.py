"""The Monte-Carlo check of the chain: files placed with the real placement
code (:mod:`st_tools.dataloss.simulation`), then an event-driven run of
exponential failures and repairs until the first data loss
(:mod:`st_tools.reliability`, "Monte-Carlo check")."""

from __future__ import annotations

import heapq
import random
import secrets
from dataclasses import dataclass

import numpy as np

from st_py.core.placement import DEFAULT_BLOCKSIZE, choose_spare
from st_tools.dataloss.model import rack_of
from st_tools.dataloss.simulation import RECORD_BYTES, make_peerlist, place_records
from st_tools.reliability.model import DEFAULT_RECORDS, ClusterParams, check_int

SIM_REPAIRS = ("rebuild", "respread")


@dataclass
class SimResult:
    """Loss times of independent simulated files.

    Attributes
    ----------
    loss_hours : numpy.ndarray, shape (runs,), float64
        Time of the first data loss of each run, hours.
    events : numpy.ndarray, shape (runs,), int64
        Failures plus repairs simulated in each run (the last failure included).
    seed : int or str
        Seed of the run (numpy ``default_rng`` for the clocks, ``random.Random``
        for the placement).
    """

    loss_hours: np.ndarray
    events: np.ndarray
    seed: int | str


def _one_run(
    params: ClusterParams,
    sim_repair: str,
    prng: random.Random,
    rng: np.random.Generator,
    max_events: int,
) -> tuple[float, int]:
    peers, copies, records, blocksize = params.peers, params.copies, params.records, params.blocksize
    lam, mu, repair, domains = params.fail_rate_per_h, params.repair_rate_per_h, params.repair, params.domains
    # The units that fail: the peers, or (domains > 0) whole racks of them.
    if domains:
        peerlist = make_peerlist(peers, copies, records * RECORD_BYTES, domains)
        usable = list(range(len(peerlist)))
        doms = {k: p.failure_domain for k, p in enumerate(peerlist)} if params.aware else None
        holders, _ = place_records(usable, copies, records, blocksize, prng, doms)
        unit_of = [rack_of(int(p.peer_id[4:]), domains) for p in peerlist]
    else:
        peerlist = make_peerlist(peers, copies, records * RECORD_BYTES)
        usable = list(range(len(peerlist)))
        holders, _ = place_records(usable, copies, records, blocksize, prng)
        unit_of = usable
    units = domains or peers
    nblocks = len(holders)
    # blocks of each unit, and how many distinct units hold each block: it is
    # lost when all of them are down (F for peers: a block never has two
    # copies on one peer)
    of_peer: list[set[int]] = [set() for _ in range(units)]
    need = np.empty(nblocks, dtype=np.int64)
    for blk, hs in enumerate(holders.tolist()):
        us = {unit_of[p] for p in hs}
        need[blk] = len(us)
        for u in us:
            of_peer[u].add(blk)
    holders_l = holders.tolist()
    down_count = np.zeros(nblocks, dtype=np.int64)
    is_up = [True] * units
    queue: list[int] = []  # serial repair: failed units in failure order
    heap = [(float(rng.exponential(1.0 / lam)), 0, p) for p in range(units)]  # (time, kind 0=fail/1=repair, unit)
    heapq.heapify(heap)
    events = 0
    while heap:
        t, kind, p = heapq.heappop(heap)
        events += 1
        if events > max_events:
            raise RuntimeError(
                f"no data loss within {max_events} events (t = {t:.4g} h): raise the "
                "failure rate or lower the repair rate so that runs end"
            )
        if kind == 0:  # peer p fails
            is_up[p] = False
            blks = np.fromiter(of_peer[p], dtype=np.int64, count=len(of_peer[p]))
            down_count[blks] += 1
            if blks.size and bool(np.any(down_count[blks] >= need[blks])):
                return t, events
            if mu > 0:
                if repair == "parallel":
                    heapq.heappush(heap, (t + float(rng.exponential(1.0 / mu)), 1, p))
                else:
                    queue.append(p)
                    if len(queue) == 1:
                        heapq.heappush(heap, (t + float(rng.exponential(1.0 / mu)), 1, p))
        else:  # peer p repaired
            blks = np.fromiter(of_peer[p], dtype=np.int64, count=len(of_peer[p]))
            down_count[blks] -= 1
            if sim_repair == "respread":  # rebalance: each copy to a spare, p replaced empty
                live = [i for i in range(peers) if is_up[i]]
                for blk in blks.tolist():
                    hs = holders_l[blk]
                    spare = choose_spare(live, hs, prng)
                    if spare is None:  # no live peer without a copy: keep it on p
                        continue
                    hs[hs.index(p)] = spare
                    of_peer[p].discard(blk)
                    of_peer[spare].add(blk)
            is_up[p] = True
            heapq.heappush(heap, (t + float(rng.exponential(1.0 / lam)), 0, p))
            if repair == "serial":
                queue.pop(0)
                if queue:
                    heapq.heappush(heap, (t + float(rng.exponential(1.0 / mu)), 1, queue[0]))
    raise AssertionError("the event heap never empties")  # pragma: no cover


def run_simulation(
    params: ClusterParams,
    runs: int,
    sim_repair: str = "rebuild",
    seed: int | str | None = None,
    max_events: int = 1_000_000,
) -> SimResult:
    """:func:`simulate` of ``params``'s file."""
    runs = check_int("runs", runs, 1)
    if params.domains and sim_repair != "rebuild":
        raise ValueError("with domains, sim_repair must be rebuild (a rack comes back with its copies)")
    max_events = check_int("max_events", max_events, 1)
    if sim_repair not in SIM_REPAIRS:
        raise ValueError(f"sim_repair must be one of {', '.join(SIM_REPAIRS)}, got {sim_repair!r}")
    if seed is None:
        seed = secrets.randbits(32)
    rng = np.random.default_rng(list(str(seed).encode()))
    prng = random.Random(f"{seed}:placement")
    out = np.empty(runs)
    ev = np.empty(runs, dtype=np.int64)
    for i in range(runs):
        out[i], ev[i] = _one_run(params, sim_repair, prng, rng, max_events)
    return SimResult(loss_hours=out, events=ev, seed=seed)


def simulate(
    peers: int,
    copies: int,
    fail_rate_per_h: float,
    repair_rate_per_h: float,
    runs: int,
    records: int = DEFAULT_RECORDS,
    blocksize: int = DEFAULT_BLOCKSIZE,
    repair: str = "parallel",
    sim_repair: str = "rebuild",
    seed: int | str | None = None,
    max_events: int = 1_000_000,
    domains: int = 0,
    aware: bool = True,
) -> SimResult:
    """Simulate independent files until their first data loss.

    Each run schedules a new file on N peers (``schedule()``), places its R
    records with one ``choose_holders`` call per block, then draws an
    exponential lifetime (rate lambda) for every peer and an exponential
    repair time (rate mu) for every failure -- started at the failure for
    ``repair="parallel"``, when the previous repair ends for ``"serial"``
    (first failed, first repaired) -- and processes the events in time order
    until a failure leaves some block with all F holders failed.

    Parameters
    ----------
    peers, copies, fail_rate_per_h, repair_rate_per_h, records, blocksize, repair
        As in :func:`build_chain`.
    runs : int
        Independent files, >= 1.
    sim_repair : {"rebuild", "respread"}
        What a repair does: the peer returns with its copies (``"rebuild"``)
        or its copies move to spares drawn by ``choose_spare`` and it is
        replaced by an empty peer (``"respread"``, StoreTorrent's rebalance).
    seed : int or str, optional
        Seed; random (and returned) if None.
    max_events : int
        Safety limit on the events of one run.
    domains : int
        D >= 1: whole racks fail instead of peers (module docstring,
        "Correlated failures"); ``sim_repair`` must be ``"rebuild"``.
    aware : bool
        With ``domains``: domain-aware placement (the peers' domains given to
        ``choose_holders``) or blind.

    Returns
    -------
    SimResult

    Raises
    ------
    ValueError
        For arguments out of range, or ``"respread"`` with ``domains``.
    RuntimeError
        If a run has no data loss within ``max_events`` events.
    """
    params = ClusterParams(
        peers, copies, fail_rate_per_h, repair_rate_per_h, records, blocksize, repair, domains, aware
    )
    return run_simulation(params, runs, sim_repair, seed, max_events)

"""The data-loss measurements with the real placement code: a peerlist from
the tracker's :func:`~st_py.tracker.scheduler.schedule`, records placed one
:func:`~st_py.core.placement.choose_holders` call per block, as
:class:`st_py.client.file.StFile` places them, then failed peers or whole failed
racks and the records lost (:mod:`st_tools.dataloss` describes the analysis).
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from st_py.core.placement import Domain, choose_holders
from st_py.tracker.peers import PeerInfo
from st_py.tracker.scheduler import schedule
from st_tools.dataloss.model import block_weights, check_args, check_domain_args, rack_of

RECORD_BYTES = 4096  # nominal record size, only used for schedule()'s est_size
PEER_FREE_BYTES = 1 << 50  # every simulated peer has room, so the peerlist is all N peers


def _placement_code(name: str) -> Callable[..., Any]:
    """``schedule`` or ``choose_holders``, looked up on the package face
    :mod:`st_tools.dataloss` at each call, so that a test that substitutes
    one there (to count the calls, as the tests of the single-module tool
    did) sees every call made here and by :mod:`st_tools.reliability`."""
    default: Callable[..., Any] = schedule if name == "schedule" else choose_holders
    fn: Callable[..., Any] = getattr(sys.modules.get("st_tools.dataloss"), name, default)
    return fn


def make_peerlist(peers: int, copies: int, est_size: int, domains: int = 0) -> list[PeerInfo]:
    """The peerlist of a new file on ``peers`` equal peers, from the real
    tracker scheduler :func:`st_py.tracker.scheduler.schedule`.

    Parameters
    ----------
    peers : int
        N, live peers, each with ``PEER_FREE_BYTES`` free.
    copies : int
        F of the class.
    est_size : int
        Estimated user bytes of the file (one copy).
    domains : int
        D > 0: peer i declares failure domain ``dc1/rack<i mod D>/node<i>``
        (:func:`rack_of`); 0: none (each its own host).

    Returns
    -------
    list of PeerInfo, length N
        In the scheduler's order; list position is the peer index used by
        the client.

    Raises
    ------
    ValueError
        If N < 1 or F > N.
    st_py.tracker.scheduler.SchedulingError
        If the scheduler refuses (not expected with the free space given).
    RuntimeError
        If the scheduler left peers out (then the analysis would not be
        over N peers).
    """
    check_args(peers, copies, 0)
    live = [
        PeerInfo(
            peer_id=f"peer{i:05d}",
            addr=f"10.0.{i // 250}.{i % 250 + 1}:7000",
            capacity_bytes=PEER_FREE_BYTES,
            free_bytes=PEER_FREE_BYTES,
            domain=f"dc1/rack{rack_of(i, domains):03d}/node{i:05d}" if domains else "",
        )
        for i in range(peers)
    ]
    chosen = _placement_code("schedule")(live, copies, est_size)
    if len(chosen) != peers:
        raise RuntimeError(f"schedule() kept {len(chosen)} of {peers} peers")
    return chosen


def place_records(
    usable: Sequence[int],
    copies: int,
    records: int,
    blocksize: int,
    rng: random.Random,
    domains: dict[int, Domain] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Place R records of class xF, one :func:`choose_holders` call per block.

    Mirrors :meth:`st_py.client.file.StFile.queue_put`: every ``blocksize``
    consecutive records share the holder set drawn for their block.

    Parameters
    ----------
    usable : sequence of int
        Peer indexes of the peerlist that are alive.
    copies : int
        F.
    records : int
        R >= 1.
    blocksize : int
        Records per block, >= 1.
    rng : random.Random
        Seeded source passed to ``choose_holders``.
    domains : dict, optional
        ``{peer index: Domain}``: domain-aware placement, as the client
        places when the peerlist spans several domains; None: blind.

    Returns
    -------
    holders : numpy.ndarray, shape (nblocks, F), int64
        Peer index of each copy rank of each block.
    weights : numpy.ndarray, shape (nblocks,), int64
        Records in each block (see :func:`block_weights`).

    Raises
    ------
    ValueError
        From ``choose_holders`` if fewer than F peers are usable, or for
        records/blocksize < 1.
    """
    weights = block_weights(records, blocksize)
    nblocks = len(weights)
    choose = _placement_code("choose_holders")
    if domains is None:
        it = (i for _ in range(nblocks) for i in choose(usable, copies, rng))
    else:
        it = (i for _ in range(nblocks) for i in choose(usable, copies, rng, domains))
    flat = np.fromiter(it, dtype=np.int64, count=nblocks * copies)
    return flat.reshape(nblocks, copies), weights


def unavailable_fraction(holders: np.ndarray, weights: np.ndarray, failed: Sequence[int], peers: int) -> float:
    """Fraction of records whose every copy is on a failed peer.

    Parameters
    ----------
    holders : numpy.ndarray, shape (nblocks, F), int
        From :func:`place_records`.
    weights : numpy.ndarray, shape (nblocks,), int
        Records per block.
    failed : sequence of int
        Indexes of failed peers (any set: the result does not assume the
        failures are independent, paper 4.2).
    peers : int
        N, size of the peerlist (indexes are in ``range(N)``).

    Returns
    -------
    float
        Unavailable records / all records, in [0, 1].
    """
    down = np.zeros(peers, dtype=bool)
    down[list(failed)] = True
    lost = down[holders].all(axis=1)
    return float(weights[lost].sum()) / float(weights.sum())


def simulate(
    peers: int, copies: int, records: int, failed_counts: Sequence[int], trials: int, blocksize: int, seed: int | str
) -> np.ndarray:
    """Measure the unavailable fraction over independent trials.

    Each trial schedules a new file on N peers, places R records of class xF
    (one ``choose_holders`` call per block), then, for each G in
    ``failed_counts``, fails G peers drawn uniformly at random and counts the
    lost records.

    Parameters
    ----------
    peers : int
        N >= 1.
    copies : int
        F, 1 <= F <= N.
    records : int
        R >= 1, records per trial (per file).
    failed_counts : sequence of int
        The G values, each 0 <= G <= N.
    trials : int
        Number of independent files, >= 1.
    blocksize : int
        Records per block (the client's default is 16).
    seed : int or str
        Seed of the ``random.Random`` used for placement and failures.

    Returns
    -------
    numpy.ndarray, shape (len(failed_counts), trials), float64
        Fraction of records unavailable, per G and trial.

    Raises
    ------
    ValueError
        For any argument out of range (G > N, F > N, ...).
    """
    check_args(peers, copies, 0)
    for g in failed_counts:
        check_args(peers, copies, g)
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    block_weights(records, blocksize)  # validates records and blocksize
    rng = random.Random(seed)
    out = np.zeros((len(failed_counts), trials))
    for t in range(trials):
        peerlist = make_peerlist(peers, copies, records * RECORD_BYTES)
        usable = list(range(len(peerlist)))
        holders, weights = place_records(usable, copies, records, blocksize, rng)
        for k, g in enumerate(failed_counts):
            out[k, t] = unavailable_fraction(holders, weights, rng.sample(usable, g), peers)
    return out


@dataclass(frozen=True)
class DomainFractions:
    """The fractions of records unavailable of :func:`simulate_domains`.

    Attributes
    ----------
    aware, blind : numpy.ndarray, shape (D+1, trials), float64
        Per number g of failed domains and trial, with domain-aware and with
        blind placement of the same file.
    """

    aware: np.ndarray
    blind: np.ndarray


def simulate_domains(
    peers: int, domains: int, copies: int, records: int, trials: int, blocksize: int, seed: int | str
) -> DomainFractions:
    """Measure the unavailable fraction when g = 0..D whole domains fail,
    with domain-aware and with blind placement of the same file.

    Each trial schedules a file on N peers in D racks (:func:`make_peerlist`),
    places R records twice (one :func:`choose_holders` call per block, with
    and without the peers' domains), then for each g fails the peers of g
    racks drawn at random (the same racks for both placements).

    Parameters
    ----------
    peers, domains, copies, records, trials, blocksize : int
        N, D, F, R per trial, trials, records per block.
    seed : int or str
        Seed of the ``random.Random`` of placement and failures.

    Returns
    -------
    DomainFractions

    Raises
    ------
    ValueError
        For arguments out of range.
    """
    check_domain_args(peers, domains, copies, 0)
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    block_weights(records, blocksize)
    rng = random.Random(seed)
    out = {"aware": np.zeros((domains + 1, trials)), "blind": np.zeros((domains + 1, trials))}
    for t in range(trials):
        peerlist = make_peerlist(peers, copies, records * RECORD_BYTES, domains)
        usable = list(range(len(peerlist)))
        doms = {k: p.failure_domain for k, p in enumerate(peerlist)}
        rack = {k: rack_of(int(p.peer_id[4:]), domains) for k, p in enumerate(peerlist)}
        placed = {
            "aware": place_records(usable, copies, records, blocksize, rng, doms),
            "blind": place_records(usable, copies, records, blocksize, rng),
        }
        for g in range(domains + 1):
            down = set(rng.sample(range(domains), g))
            failed = [k for k in usable if rack[k] in down]
            for kind, (holders, weights) in placed.items():
                out[kind][g, t] = unavailable_fraction(holders, weights, failed, peers)
    return DomainFractions(aware=out["aware"], blind=out["blind"])

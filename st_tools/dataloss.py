"""Data-loss analysis (paper 4.2): how many records become unavailable when
G of N storage nodes fail?

The tool places records with the real placement code -- the peerlist comes
from :func:`st_py.tracker.scheduler.schedule` and every block of
``blocksize`` consecutive records gets its F holders from
:func:`st_py.placement.choose_holders`, exactly as :class:`st_py.file.StFile`
does -- then fails G peers chosen uniformly at random and counts the records
whose F copies are all on failed peers. It compares the measured fraction
with

* the exact probability under uniform placement of F distinct holders, the
  hypergeometric ``C(G, F) / C(N, F) = G(G-1)...(G-F+1) / (N(N-1)...(N-F+1))``;
* the paper's formula ``G/N * G/(N-1) * ... `` (F factors) and its limit
  ``(G/N)**F``;
* the paper's worked example (N=100, x2, two failures: ``1/100 * 1/99``).

Blocks do not change the expected fraction (every block is placed uniformly),
but a whole block is lost or kept together, so the spread of the fraction
across files/trials grows like ``sqrt(blocksize)``; the tool measures it by
repeating the run with ``--compare-blocksize`` (default 1).

**Failure domains** (``--domains D``, docs/reliability.md, "Correlated
failures"). The peers are split evenly into D racks (peer i in rack
``i mod D``, declared as its ``--domain``), whole racks fail (a switch, a
power feed: the paper's "nodes failing in the same rack", 4.2) and the tool
compares the records lost with the client's domain-aware placement
(:func:`st_py.placement.choose_holders` with the peers' domains, as
:class:`st_py.file.StFile` places when the peerlist spans several domains)
and with domain-blind placement (without them), against the exact
fractions :func:`exact_domain_loss`. The paper's claim that its analysis
"does not require the failures to be independent" holds for the expected
fraction at a given number of failed *peers*; a rack failure fails N/D
peers at once, which blind placement turns into a loss of about
``(1/D)^F`` of the records at the first rack lost, and aware placement into
none until F racks are down.

Run ``python -m st_tools.dataloss --help``; the results are in
docs/reliability.md.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import secrets
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from st_py.placement import DEFAULT_BLOCKSIZE, Domain, choose_holders
from st_py.tracker.peers import PeerInfo
from st_py.tracker.scheduler import schedule

#: The paper's worked example (4.2): N=100 peers, class x2, two failed peers.
PAPER_EXAMPLE = {"peers": 100, "copies": 2, "failed": 2, "value": 1 / 100 * 1 / 99}

RECORD_BYTES = 4096  # nominal record size, only used for schedule()'s est_size
PEER_FREE_BYTES = 1 << 50  # every simulated peer has room, so the peerlist is all N peers


# -- formulas -------------------------------------------------------------------


def _check(peers: int, copies: int, failed: int) -> None:
    """Validate N, F, G; raise ValueError with a clear message."""
    if peers < 1:
        raise ValueError(f"the number of peers N must be >= 1, got {peers}")
    if copies < 1:
        raise ValueError(f"the number of copies F (class xF) must be >= 1, got {copies}")
    if copies > peers:
        raise ValueError(f"class x{copies} needs {copies} distinct peers, but only N={peers} exist (F > N)")
    if failed < 0:
        raise ValueError(f"the number of failed peers G must be >= 0, got {failed}")
    if failed > peers:
        raise ValueError(f"cannot fail G={failed} peers out of N={peers} (G > N)")


def exact_unavailable(peers: int, copies: int, failed: int) -> float:
    """Exact probability that a record has all its copies on failed peers.

    With the F holders a uniformly random F-subset of the N peers (what
    :func:`st_py.placement.choose_holders` draws) and a set C of G failed
    peers chosen independently of the placement, the number of holders in C is
    hypergeometric, and

    ``P(all F copies in C) = C(G, F) / C(N, F) = prod_{i<F} (G-i) / (N-i)``.

    Parameters
    ----------
    peers : int
        N, the number of peers in the file's peerlist (>= 1).
    copies : int
        F, the copies of the replication class xF (1 <= F <= N).
    failed : int
        G, the number of failed peers (0 <= G <= N).

    Returns
    -------
    float
        Probability in [0, 1] (equivalently the expected fraction of records
        unavailable); 0 when G < F.

    Raises
    ------
    ValueError
        If N < 1, F < 1, F > N, G < 0 or G > N.

    Notes
    -----
    Source: paper section 4.2, corrected (see :func:`paper_formula`).
    """
    _check(peers, copies, failed)
    return math.comb(failed, copies) / math.comb(peers, copies)


def paper_formula(peers: int, copies: int, failed: int) -> float:
    """The paper's formula ``P = G/N * G/(N-1) * ...`` with F factors.

    The paper prints ``G/N*G/(N-1)*...G/(N-F)``; read literally that has
    F+1 factors, which would not even give G/N for x1, so the F-factor
    reading ``prod_{i<F} G/(N-i)`` (the pattern of its worked example
    ``1/100 * 1/99``) is used. It is an upper bound of
    :func:`exact_unavailable`: the ratio is ``G**F / (G(G-1)...(G-F+1))``,
    which is 1 for F=1, ``G/(G-1)`` for F=2 (2 at G=2) and tends to 1 only
    when G >> F.

    Parameters
    ----------
    peers, copies, failed : int
        N, F and G as in :func:`exact_unavailable`.

    Returns
    -------
    float
        The paper's value (not a probability bounded by 1 in general).

    Raises
    ------
    ValueError
        If N < 1, F < 1, F > N, G < 0 or G > N.

    Notes
    -----
    Source: paper section 4.2.
    """
    _check(peers, copies, failed)
    return math.prod(failed / (peers - i) for i in range(copies))


def paper_limit(peers: int, copies: int, failed: int) -> float:
    """The paper's approximation "for F << N this approaches (G/N)^F".

    Also an upper bound of :func:`exact_unavailable`; it is close to the
    exact value only when F << G (not merely F << N).

    Parameters
    ----------
    peers, copies, failed : int
        N, F and G as in :func:`exact_unavailable`.

    Returns
    -------
    float
        ``(G/N)**F``.

    Raises
    ------
    ValueError
        If N < 1, F < 1, F > N, G < 0 or G > N.

    Notes
    -----
    Source: paper section 4.2.
    """
    _check(peers, copies, failed)
    return (failed / peers) ** copies


def block_weights(records: int, blocksize: int) -> np.ndarray:
    """Records per block when ``records`` records are cut into blocks.

    Parameters
    ----------
    records : int
        R >= 1.
    blocksize : int
        Records per block, >= 1; the last block may be shorter.

    Returns
    -------
    numpy.ndarray, shape (ceil(R / blocksize),), int64
        Records in each block; sums to R.

    Raises
    ------
    ValueError
        If ``records`` or ``blocksize`` is < 1.
    """
    if records < 1:
        raise ValueError(f"records must be >= 1, got {records}")
    if blocksize < 1:
        raise ValueError(f"blocksize must be >= 1, got {blocksize}")
    nblocks = -(-records // blocksize)
    w = np.full(nblocks, blocksize, dtype=np.int64)
    w[-1] = records - blocksize * (nblocks - 1)
    return w


def trial_std(p: float, records: int, blocksize: int) -> float:
    """Theoretical standard deviation of the unavailable fraction of one trial.

    Each block is lost independently with probability p and takes all its
    records with it, so the fraction ``sum_j w_j X_j / R`` has variance
    ``p (1-p) sum_j w_j**2 / R**2`` -- about ``p (1-p) blocksize / R``,
    i.e. blocks multiply the standard deviation by ``sqrt(blocksize)`` and
    leave the mean at p.

    Parameters
    ----------
    p : float
        Per-record (= per-block) loss probability, in [0, 1].
    records : int
        R, records placed per trial.
    blocksize : int
        Records per block.

    Returns
    -------
    float
        Standard deviation of the per-trial fraction (dimensionless).

    Raises
    ------
    ValueError
        If p is outside [0, 1], or records/blocksize < 1.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be in [0, 1], got {p}")
    w = block_weights(records, blocksize).astype(np.float64)
    return math.sqrt(p * (1.0 - p) * float(np.sum(w * w))) / records


# -- simulation with the real placement code -------------------------------------


def rack_of(peer: int, domains: int) -> int:
    """The rack (failure domain) of simulated peer ``peer`` among ``domains``:
    ``peer mod domains``, so racks differ in size by at most one peer."""
    return peer % domains


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
    _check(peers, copies, 0)
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
    chosen = schedule(live, copies, est_size)
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

    Mirrors :meth:`st_py.file.StFile.queue_put`: every ``blocksize``
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
    if domains is None:
        it = (i for _ in range(nblocks) for i in choose_holders(usable, copies, rng))
    else:
        it = (i for _ in range(nblocks) for i in choose_holders(usable, copies, rng, domains))
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
    _check(peers, copies, 0)
    for g in failed_counts:
        _check(peers, copies, g)
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


def analyse(
    peers: int = 100,
    records: int = 100_000,
    trials: int = 20,
    seed: int | None = None,
    blocksize: int = DEFAULT_BLOCKSIZE,
    classes: Sequence[int] = (1, 2, 3),
    max_failed: int | None = None,
    compare_blocksize: int = 1,
) -> dict[str, Any]:
    """Run the whole analysis and return JSON-ready results.

    Parameters
    ----------
    peers, records, trials, blocksize : int
        N, R per trial, trials, records per block.
    seed : int, optional
        Master seed; a random one is drawn (and returned) if None. Each
        (class, blocksize) run gets its own stream derived from it.
    classes : sequence of int
        The F values (x1, x2, ...).
    max_failed : int, optional
        G runs over ``0..max_failed``; default ``min(10, N)``.
    compare_blocksize : int
        Second blocksize to measure the spread with (0: skip).

    Returns
    -------
    dict
        ``seed``, parameters, ``rows`` (one per class and G with
        ``measured_mean``, ``measured_std`` (std over trials, ddof=1),
        ``theory_std``, ``z`` (standardised error of the mean vs exact),
        ``exact``, ``paper``, ``paper_limit``, per-trial ``fractions`` and
        the same for ``compare_blocksize`` if run), ``paper_example`` and
        ``elapsed_s``.

    Raises
    ------
    ValueError
        For arguments out of range (G > N, F > N, trials < 2, ...).
    """
    if seed is None:
        seed = secrets.randbits(32)
    if trials < 2:
        raise ValueError(f"trials must be >= 2 to measure a spread, got {trials}")
    if max_failed is None:
        max_failed = min(10, peers)
    if not classes:
        raise ValueError("no replication class given")
    for f in classes:
        _check(peers, f, max_failed)
    if compare_blocksize < 0:
        raise ValueError(f"compare_blocksize must be >= 0, got {compare_blocksize}")
    if compare_blocksize == blocksize:
        compare_blocksize = 0
    gs = list(range(0, max_failed + 1))
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for f in classes:
        runs = {blocksize: simulate(peers, f, records, gs, trials, blocksize, f"{seed}:x{f}:b{blocksize}")}
        if compare_blocksize:
            runs[compare_blocksize] = simulate(
                peers, f, records, gs, trials, compare_blocksize, f"{seed}:x{f}:b{compare_blocksize}"
            )
        for k, g in enumerate(gs):
            p = exact_unavailable(peers, f, g)
            row: dict[str, Any] = {
                "copies": f,
                "failed": g,
                "exact": p,
                "paper": paper_formula(peers, f, g),
                "paper_limit": paper_limit(peers, f, g),
            }
            for b, fr in runs.items():
                sfx = "" if b == blocksize else "_b" + str(b)
                sd = trial_std(p, records, b)
                mean = float(fr[k].mean())
                row["measured_mean" + sfx] = mean
                row["measured_std" + sfx] = float(fr[k].std(ddof=1))
                row["theory_std" + sfx] = sd
                row["z" + sfx] = (mean - p) / (sd / math.sqrt(trials)) if sd > 0 else 0.0
                row["fractions" + sfx] = fr[k].tolist()
            rows.append(row)
    ex = PAPER_EXAMPLE
    example = dict(
        ex,
        exact=exact_unavailable(ex["peers"], ex["copies"], ex["failed"]),
        paper_formula=paper_formula(ex["peers"], ex["copies"], ex["failed"]),
    )
    return {
        "seed": seed,
        "peers": peers,
        "records": records,
        "trials": trials,
        "blocksize": blocksize,
        "compare_blocksize": compare_blocksize,
        "classes": list(classes),
        "failed": gs,
        "rows": rows,
        "paper_example": example,
        "elapsed_s": time.perf_counter() - t0,
    }


# -- correlated failures: whole failure domains ---------------------------------------


def _check_domains(peers: int, domains: int, copies: int, failed_domains: int) -> None:
    _check(peers, copies, 0)
    if domains < 1:
        raise ValueError(f"the number of failure domains D must be >= 1, got {domains}")
    if domains > peers:
        raise ValueError(f"D={domains} failure domains need at least as many peers, N={peers} (D > N)")
    if not 0 <= failed_domains <= domains:
        raise ValueError(f"cannot fail {failed_domains} of D={domains} failure domains")


def exact_domain_loss(peers: int, domains: int, copies: int, failed_domains: int, aware: bool) -> float:
    """Exact probability that a record has every copy in ``failed_domains``
    failed domains (chosen uniformly, independently of the placement).

    * Domain-aware placement with D >= F: the F copies are in F distinct
      domains, a uniform F-subset of the D (racks of equal size; sizes that
      differ by one peer skew this slightly), so the probability is
      ``C(g, F) / C(D, F)``: 0 until F domains are down.
    * Domain-aware with D < F: every domain holds a copy, so a record is
      lost only when all D are down.
    * Blind placement: the failed peers are the g domains' peers, G of N
      (G = g N / D when D divides N), and the F holders a uniform F-subset:
      ``C(G, F) / C(N, F)``, as :func:`exact_unavailable`.

    Parameters
    ----------
    peers, domains, copies, failed_domains : int
        N, D (the peers of rack d are those with ``i mod D == d``), F, g.
    aware : bool
        Domain-aware (True) or blind placement.

    Returns
    -------
    float
        Probability in [0, 1].

    Raises
    ------
    ValueError
        For N < 1, F > N, D < 1, D > N or g outside 0..D.

    Notes
    -----
    Paper section 4.2 (the "twin nodes" and racks of its last paragraph).
    """
    _check_domains(peers, domains, copies, failed_domains)
    if aware:
        if domains >= copies:
            return math.comb(failed_domains, copies) / math.comb(domains, copies)
        return 1.0 if failed_domains == domains else 0.0
    if peers % domains == 0:
        return exact_unavailable(peers, copies, failed_domains * peers // domains)
    # racks of two sizes: average over which racks fail (exact, by their sizes)
    big, small = peers % domains, domains - peers % domains  # racks of size q+1 and q
    q = peers // domains
    total = 0.0
    for b in range(max(0, failed_domains - small), min(big, failed_domains) + 1):
        w = math.comb(big, b) * math.comb(small, failed_domains - b) / math.comb(domains, failed_domains)
        total += w * exact_unavailable(peers, copies, b * (q + 1) + (failed_domains - b) * q)
    return total


def simulate_domains(
    peers: int, domains: int, copies: int, records: int, trials: int, blocksize: int, seed: int | str
) -> dict[str, np.ndarray]:
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
    dict
        ``"aware"`` and ``"blind"``: numpy.ndarray, shape (D+1, trials),
        float64, the fraction of records unavailable per g and trial.

    Raises
    ------
    ValueError
        For arguments out of range.
    """
    _check_domains(peers, domains, copies, 0)
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
    return out


def analyse_domains(
    peers: int = 100,
    domains: int = 10,
    records: int = 100_000,
    trials: int = 20,
    seed: int | None = None,
    blocksize: int = DEFAULT_BLOCKSIZE,
    classes: Sequence[int] = (1, 2, 3),
) -> dict[str, Any]:
    """The correlated-failure analysis (``--domains D``), JSON-ready.

    Parameters
    ----------
    peers, domains, records, trials, blocksize : int
        N, D racks, R per trial, trials, records per block.
    seed : int, optional
        Master seed (random and returned if None); class F uses
        ``"{seed}:x{F}:domains"``.
    classes : sequence of int
        The F values.

    Returns
    -------
    dict
        ``seed``, the parameters, ``rows`` (one per class and number of
        failed domains g: ``failed_peers`` (the peers of the g largest
        racks: g N / D when D divides N), and for
        ``aware`` and ``blind`` placement ``*_mean``, ``*_std`` (over
        trials) and ``*_exact`` (:func:`exact_domain_loss`)) and
        ``elapsed_s``.

    Raises
    ------
    ValueError
        For arguments out of range (trials < 2, D > N, F > N, ...).
    """
    if seed is None:
        seed = secrets.randbits(32)
    if trials < 2:
        raise ValueError(f"trials must be >= 2 to measure a spread, got {trials}")
    if not classes:
        raise ValueError("no replication class given")
    for f in classes:
        _check_domains(peers, domains, f, 0)
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for f in classes:
        fr = simulate_domains(peers, domains, f, records, trials, blocksize, f"{seed}:x{f}:domains")
        for g in range(domains + 1):
            row: dict[str, Any] = {
                "copies": f,
                "failed_domains": g,
                "failed_peers": sum(1 for i in range(peers) if rack_of(i, domains) < g),
            }
            for kind in ("aware", "blind"):
                row[f"{kind}_mean"] = float(fr[kind][g].mean())
                row[f"{kind}_std"] = float(fr[kind][g].std(ddof=1))
                row[f"{kind}_exact"] = exact_domain_loss(peers, domains, f, g, kind == "aware")
            rows.append(row)
    return {
        "mode": "domains",
        "seed": seed,
        "peers": peers,
        "domains": domains,
        "records": records,
        "trials": trials,
        "blocksize": blocksize,
        "classes": list(classes),
        "rows": rows,
        "elapsed_s": time.perf_counter() - t0,
    }


def print_domain_report(res: dict[str, Any], console: Any = None) -> None:
    """Print :func:`analyse_domains`'s results as a rich table: per class and
    number of failed domains, the fraction lost with aware and blind
    placement, measured and exact.

    Parameters
    ----------
    res : dict
        The result of :func:`analyse_domains`.
    console : rich.console.Console, optional
        Where to print (default: 120 columns at least when not a terminal).
    """
    from rich import box
    from rich.console import Console
    from rich.table import Table

    if console is None:
        console = Console()
        if not console.is_terminal and console.width < 120:
            console = Console(width=120)
    console.print(
        f"seed {res['seed']}: N={res['peers']} peers in D={res['domains']} racks, R={res['records']} "
        f"records per trial, {res['trials']} trials, blocksize {res['blocksize']} "
        f"(rerun with --seed {res['seed']})"
    )
    t = Table(
        title="Fraction of records unavailable with g whole racks failed: domain-aware vs blind placement",
        box=box.SIMPLE_HEAD,
    )
    for name in (
        "class",
        "racks down",
        "peers down",
        "aware measured",
        "aware exact",
        "blind measured",
        "blind std/trial",
        "blind exact",
    ):
        t.add_column(name, justify="right")
    prev = None
    for r in res["rows"]:
        if r["failed_domains"] > max(r["copies"] + 2, 3) and r["failed_domains"] < res["domains"]:
            continue  # the table's point is the first racks lost
        if prev is not None and r["copies"] != prev:
            t.add_section()
        prev = r["copies"]
        t.add_row(
            f"x{r['copies']}",
            str(r["failed_domains"]),
            str(r["failed_peers"]),
            _pct(r["aware_mean"]),
            _pct(r["aware_exact"]),
            _pct(r["blind_mean"]),
            _pct(r["blind_std"]),
            _pct(r["blind_exact"]),
        )
    console.print(t)
    console.print(f"elapsed {res['elapsed_s']:.1f} s")


def plot_domains(res: dict[str, Any], path: str | Path) -> None:
    """Write the figure of :func:`analyse_domains`: fraction unavailable vs
    racks failed (log y), aware (filled) and blind (open) placement, the
    exact values as lines.

    Raises
    ------
    RuntimeError
        If matplotlib is not installed.
    """
    try:
        import matplotlib
    except ImportError as e:  # pragma: no cover - matplotlib is in the test extra
        raise RuntimeError("--plot needs matplotlib: pip install matplotlib") from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 5))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ci, f in enumerate(res["classes"]):
        c = colours[ci % len(colours)]
        rows = [r for r in res["rows"] if r["copies"] == f and r["failed_domains"] >= 1]
        g = np.array([r["failed_domains"] for r in rows])
        for kind, mk, ls in (("aware", "o", "-"), ("blind", "s", "--")):
            exact = np.array([r[f"{kind}_exact"] for r in rows])
            mean = np.array([r[f"{kind}_mean"] for r in rows])
            pos, m = exact > 0, mean > 0
            ax.plot(g[pos], exact[pos], ls, color=c, alpha=0.8)
            ax.plot(g[m], mean[m], mk, color=c, mfc=c if kind == "aware" else "none", ms=5, label=f"x{f} {kind}")
    ax.set_yscale("log")
    ax.set_xlabel(f"racks failed (of D={res['domains']}, {res['peers'] // res['domains']} peers each)")
    ax.set_ylabel("fraction of records unavailable")
    ax.set_title(
        f"Whole racks failing: domain-aware vs blind placement\n"
        f"N={res['peers']}, R={res['records']}, {res['trials']} trials (lines: exact)",
        fontsize=10,
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2, loc="lower right")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- output -----------------------------------------------------------------------


def _pct(x: float) -> str:
    return "0" if x == 0 else f"{100 * x:.3g}%"


def print_report(res: dict[str, Any], console: Any = None) -> None:
    """Print the results as rich tables: measured vs formulas, the paper's
    worked example, then the blocksize effect (if it was measured).

    Parameters
    ----------
    res : dict
        The result of :func:`analyse`.
    console : rich.console.Console, optional
        Where to print; default a console at least 120 columns wide when
        the output is not a terminal.
    """
    from rich import box
    from rich.console import Console
    from rich.table import Table

    if console is None:
        console = Console()
        if not console.is_terminal and console.width < 120:
            console = Console(width=120)
    b, b2 = res["blocksize"], res["compare_blocksize"]
    console.print(
        f"seed {res['seed']}: N={res['peers']} peers, R={res['records']} records per trial, "
        f"{res['trials']} trials, blocksize {b} (rerun with --seed {res['seed']})"
    )
    t = Table(
        title=f"Fraction of records unavailable with G of N={res['peers']} peers failed (blocksize {b})",
        box=box.SIMPLE_HEAD,
    )
    for name in ("class", "G", "measured", "std/trial", "exact", "z", "paper", "paper/exact", "(G/N)^F"):
        t.add_column(name, justify="right")
    prev = None
    for r in res["rows"]:
        if prev is not None and r["copies"] != prev:
            t.add_section()
        prev = r["copies"]
        ratio = f"{r['paper'] / r['exact']:.3f}" if r["exact"] > 0 else "-"
        t.add_row(
            f"x{r['copies']}",
            str(r["failed"]),
            _pct(r["measured_mean"]),
            _pct(r["measured_std"]),
            _pct(r["exact"]),
            f"{r['z']:+.2f}",
            _pct(r["paper"]),
            ratio,
            _pct(r["paper_limit"]),
        )
    console.print(t)
    ex = res["paper_example"]
    console.print(
        f"Paper's worked example (N={ex['peers']}, x{ex['copies']}, G={ex['failed']}): "
        f"1/100*1/99 = {_pct(ex['value'])}; exact = {_pct(ex['exact'])} "
        f"(x{ex['exact'] / ex['value']:.2f}); paper's formula = {_pct(ex['paper_formula'])}."
    )
    console.print("z = (measured - exact) / (theory std / sqrt(trials)); |z| < ~3 agrees with exact.")
    if b2:
        t2 = Table(
            title=f"Effect of blocksize: spread of the fraction across trials, blocksize {b} vs {b2}",
            box=box.SIMPLE_HEAD,
        )
        for name in (
            "class",
            "G",
            "exact",
            f"mean b={b}",
            f"mean b={b2}",
            f"std b={b}",
            f"std b={b2}",
            "std ratio",
            "theory ratio",
        ):
            t2.add_column(name, justify="right")
        prev = None
        for r in res["rows"]:
            if r["exact"] == 0:
                continue
            if prev is not None and r["copies"] != prev:
                t2.add_section()
            prev = r["copies"]
            s1, s2 = r["measured_std"], r[f"measured_std_b{b2}"]
            t2.add_row(
                f"x{r['copies']}",
                str(r["failed"]),
                _pct(r["exact"]),
                _pct(r["measured_mean"]),
                _pct(r[f"measured_mean_b{b2}"]),
                _pct(s1),
                _pct(s2),
                f"{s1 / s2:.2f}" if s2 > 0 else "-",
                f"{r['theory_std'] / r[f'theory_std_b{b2}']:.2f}",
            )
        console.print(t2)
    console.print(f"elapsed {res['elapsed_s']:.1f} s")


def plot(res: dict[str, Any], path: str | Path) -> None:
    """Write the figure: fraction unavailable vs G (log y) with the measured
    means +- std over trials, the exact and the paper curves per class; and
    the spread across trials for both blocksizes with its theory.

    Parameters
    ----------
    res : dict
        The result of :func:`analyse`.
    path : str or Path
        PNG to write (parent directories are created).

    Raises
    ------
    RuntimeError
        If matplotlib is not installed.
    """
    try:
        import matplotlib
    except ImportError as e:  # pragma: no cover - matplotlib is in the test extra
        raise RuntimeError("--plot needs matplotlib: pip install matplotlib") from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    b, b2 = res["blocksize"], res["compare_blocksize"]
    fig, axes = plt.subplots(1, 2 if b2 else 1, figsize=(12 if b2 else 7, 5), squeeze=False)
    ax = axes[0][0]
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    handles: list[Any] = []
    for ci, f in enumerate(res["classes"]):
        c = colours[ci % len(colours)]
        rows = [r for r in res["rows"] if r["copies"] == f and r["failed"] >= 1]
        g = np.array([r["failed"] for r in rows])
        exact = np.array([r["exact"] for r in rows])
        paper = np.array([r["paper"] for r in rows])
        mean = np.array([r["measured_mean"] for r in rows])
        std = np.array([r["measured_std"] for r in rows])
        pos = exact > 0
        ax.plot(g[pos], exact[pos], "-", color=c)
        ax.plot(g[pos], paper[pos], "--", color=c, alpha=0.8)
        m = mean > 0
        lower = np.minimum(std[m], mean[m] * (1 - 1e-9))  # mean - std <= 0 runs off the axis
        ax.errorbar(g[m], mean[m], yerr=[lower, std[m]], fmt="o", color=c, capsize=3, ms=4)
        handles.append(Line2D([], [], color=c, lw=6, label=f"x{f}"))
    ex = res["paper_example"]
    if ex["peers"] == res["peers"] and ex["copies"] in res["classes"]:
        ax.plot([ex["failed"]], [ex["value"]], "k*", ms=10)
        handles.append(Line2D([], [], color="k", marker="*", ls="", ms=10, label="paper's example 1/100\u00b71/99"))
    ax.set_yscale("log")
    floor = min([r["exact"] for r in res["rows"] if r["exact"] > 0], default=None)
    if floor is not None:
        ax.set_ylim(bottom=floor / 20)  # error bars reaching mean - std <= 0 run off the bottom
    ax.set_xlabel("G, failed peers")
    ax.set_ylabel("fraction of records unavailable")
    ax.set_title(f"N={res['peers']} peers, R={res['records']} records, {res['trials']} trials, blocksize {b}")
    ax.grid(True, which="both", alpha=0.3)
    handles[len(res["classes"]) : len(res["classes"])] = [
        Line2D([], [], color="k", marker="o", ms=4, ls="", label="measured, \u00b1 std over trials"),
        Line2D([], [], color="k", ls="-", label="exact C(G,F)/C(N,F)"),
        Line2D([], [], color="k", ls="--", label="paper \u220f G/(N-i), F factors"),
    ]
    ax.legend(handles=handles, fontsize=7, loc="lower right", ncol=2)
    if b2:
        ax = axes[0][1]
        for ci, f in enumerate(res["classes"]):
            c = colours[ci % len(colours)]
            rows = [r for r in res["rows"] if r["copies"] == f and r["exact"] > 0]
            g = np.array([r["failed"] for r in rows])
            for bb, sfx, mk, ls in ((b, "", "o", "-"), (b2, f"_b{b2}", "s", ":")):
                sd = np.array([r["measured_std" + sfx] for r in rows])
                th = np.array([r["theory_std" + sfx] for r in rows])
                ax.plot(g, th, ls, color=c, alpha=0.7)
                m = sd > 0
                ax.plot(g[m], sd[m], mk, color=c, mfc=c if bb == b else "none", ms=5, label=f"x{f} blocksize {bb}")
        ax.set_yscale("log")
        ax.set_xlabel("G, failed peers")
        ax.set_ylabel("std of the fraction across trials")
        ax.set_title(f"Spread across trials, blocksize {b} vs {b2} (lines: theory)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit status (2 for bad arguments)."""
    ap = argparse.ArgumentParser(
        prog="python -m st_tools.dataloss", description="Data-loss analysis (paper 4.2) with the real placement code."
    )
    ap.add_argument("--peers", type=int, default=100, help="N, storage peers (default 100)")
    ap.add_argument("--records", type=int, default=100_000, help="R, records per trial (default 100000)")
    ap.add_argument("--trials", type=int, default=20, help="independent files/failure draws (default 20)")
    ap.add_argument("--seed", type=int, default=None, help="master seed (default: random, printed)")
    ap.add_argument(
        "--blocksize",
        type=int,
        default=DEFAULT_BLOCKSIZE,
        help=f"records per holder set (default {DEFAULT_BLOCKSIZE}, the tracker's default)",
    )
    ap.add_argument(
        "--compare-blocksize",
        type=int,
        default=1,
        help="second blocksize to compare the spread with (default 1; 0 skips)",
    )
    ap.add_argument("--classes", default="1,2,3", help="comma-separated F values (default 1,2,3)")
    ap.add_argument("--max-failed", type=int, default=None, help="largest G (default min(10, N))")
    ap.add_argument(
        "--domains",
        type=int,
        default=0,
        metavar="D",
        help="correlated failures: the peers in D racks (failure domains), whole racks fail, "
        "domain-aware vs blind placement (default 0: independent peer failures)",
    )
    ap.add_argument("--plot", default=None, help="write the figure to this PNG")
    ap.add_argument("--json", default=None, help="write the results to this JSON file")
    a = ap.parse_args(argv)
    try:
        classes = [int(x) for x in a.classes.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--classes must be comma-separated integers, got {a.classes!r}")
    try:
        if a.domains:
            res = analyse_domains(
                peers=a.peers,
                domains=a.domains,
                records=a.records,
                trials=a.trials,
                seed=a.seed,
                blocksize=a.blocksize,
                classes=classes,
            )
        else:
            res = analyse(
                peers=a.peers,
                records=a.records,
                trials=a.trials,
                seed=a.seed,
                blocksize=a.blocksize,
                classes=classes,
                max_failed=a.max_failed,
                compare_blocksize=a.compare_blocksize,
            )
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    (print_domain_report if a.domains else print_report)(res)
    if a.plot:
        (plot_domains if a.domains else plot)(res, a.plot)
        print(f"wrote {a.plot}")
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(res, indent=1))
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

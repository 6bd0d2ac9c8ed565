"""Markov reliability model (CEFT section 6) of a class xF file: mean time
to data loss (MTTDL) and the probability of data loss within a mission time,
with a Monte-Carlo check that uses the real placement code.

The chain
---------
A file of R records of class xF is spread over N peers in blocks: every block
of ``blocksize`` consecutive records gets F distinct holders drawn uniformly
by :func:`st_py.placement.choose_holders` (``B = ceil(R / blocksize)``
blocks). Peers fail independently, each at rate ``lambda`` (1/h) while it is
up (exponential lifetimes, CEFT assumption 2). A failed peer is repaired --
its copies are written again from the surviving holders and it counts as up
-- after an exponential time of rate ``mu`` (1/h).

The state is k, the number of failed (not yet repaired) peers, k = 0..N-1,
plus one absorbing state DL (data loss: some record has all F copies on
failed peers). From state k:

* a failure, at total rate ``(N-k) lambda``, goes to k+1 with the *safety
  probability* ``r_k = s(k+1) / s(k)`` and to DL with ``1 - r_k``;
* a repair goes to k-1 at rate ``k mu`` (``repair="parallel"``, the default)
  or ``mu`` for k >= 1 (``repair="serial"``).

Repair rate per failed peer (the default) is CEFT's choice (its eq. 10: the
rate back to one failure fewer is the number of failed nodes times mu, with
MTTR = 1/mu, as in the classic RAID-1 model): every failed peer is repaired
independently and in parallel. That is how StoreTorrent repairs:
``rebalance`` reads each lost copy from any live holder and writes it to a
spare, so the repairs of different failed peers need not wait for each
other. ``"serial"`` (one repair
process working through the failed peers one at a time) is the model of an
operator running one rebalance after another. The two differ only in the
states k >= 2, so they agree closely for x1 and x2 and differ for x3.

The safety probability (CEFT eqs. 5-7)
---------------------------------------
CEFT computes the probability that the system "remains functional" when one
more node fails as the ratio of the probabilities that it is functional with
the larger and with the smaller failed set, ``P(m+1) / P(m)``, where P(m) is
the probability that m nodes failed at random do not include a whole mirror
pair. Here, with k failed peers forming a uniformly random k-subset (peers
are exchangeable and the failures independent of the placement), one block's
F holders (a uniform F-subset of the N peers) are all failed with probability
``C(k, F) / C(N, F)`` (hypergeometric, as in :mod:`st_tools.dataloss`), and
the B blocks are placed independently, so

    s(k) = P(no block has all F holders among k failed peers)
         = (1 - C(k, F) / C(N, F)) ** B.

Since a failure adds a peer to the failed set, the failed set of k+1 peers
contains the one of k peers, and "safe with k+1 failed" implies "safe with k
failed": ``P(safe at k+1 | safe at k) = s(k+1) / s(k)``. For the first
transition that can lose data, k+1 = F, ``s(F-1) = 1`` and the branch to DL
is the probability that a given set of F failed peers shares at least one
record,

    1 - s(F) = 1 - (1 - 1 / C(N, F)) ** B,        B = ceil(R / blocksize),

the figure the issue asks for. ``s(k) = 1`` for k < F (no loss possible) and
``s(N) = 0`` (every peer failed), so the failure from state N-1 always goes to
DL. If B >> C(N, F) every F-set holds a block, ``1 - s(F) = 1``, and the chain
is the classic one absorbed at the F-th concurrent failure.

What the chain ignores (as CEFT does): after a repair the failed set is no
longer a superset of earlier ones, and the chain forgets which sets were
already seen to be safe: it draws the safety of every new state afresh from
s(k). This is exact when nothing is repaired before the loss (mu = 0) and
when ``1 - s(F) = 1``; otherwise the chain is an approximation, which the
Monte-Carlo simulation (:func:`simulate`) measures.

Numerics (no scipy)
-------------------
* MTTDL is the expected absorption time from state 0, the solution of
  ``-Q_T tau = 1`` on the transient states (Q_T the generator restricted to
  them). The chain is tridiagonal, so the system is solved by elimination
  from the top state down: with ``tau_k = x_k + y_k tau_(k-1)``,

      e_k = b_k + c_k + a_k z_(k+1),  x_k = (1 + a_k x_(k+1)) / e_k,
      y_k = b_k / e_k,  z_k = 1 - y_k = (c_k + a_k z_(k+1)) / e_k,

  (a_k, b_k, c_k the rates up, down and to DL); every step adds and divides
  positive numbers, so MTTDL keeps full relative precision however many
  times larger than the repair time it is (no cancellation, unlike the
  subtraction of nearly equal numbers in a dense LU solve).
* ``P(loss by t)`` is the DL entry of row 0 of ``exp(Q t)``, computed by
  uniformization and squaring: with ``Lambda = max_k`` total rate and
  ``P = I + Q / Lambda`` (a non-negative matrix), ``exp(Q h) = exp(-Lambda
  h) sum_n (Lambda h)^n / n! P^n`` for a step ``h = t / 2^s`` with
  ``Lambda h <= 1/2`` (the series is cut at 30 terms, relative error below
  1e-30), then s squarings of ``[[E, L], [0, 1]]``: ``L <- L + E L``,
  ``E <- E E``. Every operation is on non-negative numbers, so a tiny loss
  probability (1e-12) keeps its relative precision, which ``1 - survival``
  would not; the s squarings multiply the rounding error of the first step
  by ``2^s ~ Lambda t``, so the relative error is about ``Lambda t * 1e-16``
  (1e-7 for a 100-peer file with one-hour repairs over 1,000 years). The cost
  is O(N^3 log(Lambda t)). Eigen-decomposition was rejected: symmetrising the
  birth-death generator needs scale factors ``prod sqrt(a_i / b_(i+1))`` that
  underflow for N = 100 and lambda/mu = 1e-4, and its eigenvectors have
  absolute, not relative, accuracy.

Monte-Carlo check
-----------------
:func:`simulate` places the records with the real code (the peerlist from
the tracker's ``schedule()`` and one ``choose_holders`` call per block, via
:func:`st_tools.dataloss.place_records`), then runs an event-driven
simulation with per-peer exponential failure clocks and exponential repair
times (a heap of events), until some block has all its holders failed. Two
repair policies: ``"rebuild"`` (the failed peer comes back with its copies,
written again from the survivors: the placement never changes, as the
chain's symmetric peers assume) and ``"respread"`` (StoreTorrent's
rebalance: each of the failed peer's copies moves to a spare drawn by
:func:`st_py.placement.choose_spare` among the live peers holding no copy of
its block, and the peer is replaced by an empty one).

Correlated failures (failure domains)
------------------------------------
With ``domains=D`` (``--domains D``) the units that fail are whole racks,
not peers: the N peers sit in D racks of N/D (peer i in rack ``i mod D``,
declared as its ``--domain``, :func:`st_tools.dataloss.rack_of`), each
rack fails at rate ``lambda`` (its switch or power feed: every peer of it at
once) and is repaired at rate ``mu``, and k is the number of racks down.
The chain is the same birth-death chain over D units; only the safety
probability changes, to the exact one of the placement
(:func:`st_tools.dataloss.exact_domain_loss` per block):

* domain-aware placement (what the client does when the peerlist spans
  several domains, docs/replication.md, "Failure domains"): a block's F
  copies are on F distinct racks, ``s(k) = (1 - C(k, F)/C(D, F))^B``, so
  no data is lost before F racks are down at once;
* blind placement: the k racks' ``kN/D`` peers are a failed set like any
  other, ``s(k) = (1 - C(kN/D, F)/C(N, F))^B``, and the first rack lost
  already loses data when B is large.

Peer failures within racks are left out of this mode (they add the
independent chain's rate of loss); :func:`simulate` checks it with the real
placement code, repair ``"rebuild"`` only.

Run ``python -m st_tools.reliability --help``; the results are in
docs/reliability.md, sections "Markov reliability model (CEFT section 6)"
and "Correlated failures".
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import secrets
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from st_py.placement import DEFAULT_BLOCKSIZE, choose_spare
from st_tools.dataloss import RECORD_BYTES, block_weights, exact_domain_loss, make_peerlist, place_records, rack_of

HOURS_PER_YEAR = 365.25 * 24  # 8766 h, the Julian year
DEFAULT_RECORDS = 100_000  # as st_tools.dataloss
REPAIR_MODES = ("parallel", "serial")
SIM_REPAIRS = ("rebuild", "respread")
Z95 = 1.959963984540054  # two-sided 95% normal quantile

_SERIES_TERMS = 30  # uniformization series terms for a step with Lambda h <= 1/2
_STEP = 0.5  # largest Lambda h of the series step


# -- validation -------------------------------------------------------------------


def _int(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    return int(value)


def _rate(name: str, value: Any, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or v < 0 or (positive and v == 0):
        raise ValueError(f"{name} must be a finite number {'> 0' if positive else '>= 0'}, got {value!r}")
    return v


def _check(
    peers: Any,
    copies: Any,
    fail_rate: Any,
    repair_rate: Any,
    records: Any,
    blocksize: Any,
    repair: Any,
    domains: Any = 0,
) -> tuple[int, int, float, float, int, int]:
    """Validate the chain's parameters; raise ValueError with a clear message."""
    n = _int("peers (N)", peers, 1)
    f = _int("copies (F, class xF)", copies, 1)
    if f > n:
        raise ValueError(f"class x{f} needs {f} distinct peers, but only N={n} exist (F > N)")
    d = _int("domains (D)", domains, 0)
    if d > n:
        raise ValueError(f"D={d} failure domains need at least as many peers, N={n} (D > N)")
    lam = _rate("fail_rate_per_h (lambda)", fail_rate, positive=True)
    mu = _rate("repair_rate_per_h (mu)", repair_rate, positive=False)
    r = _int("records (R)", records, 1)
    b = _int("blocksize", blocksize, 1)
    if repair not in REPAIR_MODES:
        raise ValueError(f"repair must be one of {', '.join(REPAIR_MODES)}, got {repair!r}")
    return n, f, lam, mu, r, b


# -- the chain ----------------------------------------------------------------------


def log_safety_domains(peers: int, domains: int, copies: int, blocks: int, aware: bool = True) -> np.ndarray:
    """``log s(k)`` when k of D whole racks are down, k = 0..D (module
    docstring, "Correlated failures").

    Parameters
    ----------
    peers : int
        N >= 1, in D racks (peer i in rack ``i mod D``).
    domains : int
        D, 1 <= D <= N.
    copies : int
        F, 1 <= F <= N.
    blocks : int
        B >= 1.
    aware : bool
        Domain-aware (True) or blind placement.

    Returns
    -------
    numpy.ndarray, shape (D+1,), float64
        ``B log(1 - p_k)`` with ``p_k`` :func:`st_tools.dataloss.exact_domain_loss`;
        ``-inf`` where every block is lost (k = D).

    Raises
    ------
    ValueError
        For arguments out of range.
    """
    b = _int("blocks (B)", blocks, 1)
    out = np.empty(domains + 1)
    for k in range(domains + 1):
        hit = exact_domain_loss(peers, domains, copies, k, aware)
        out[k] = -math.inf if hit >= 1.0 else b * math.log1p(-hit)
    return out


def log_safety(peers: int, copies: int, blocks: int) -> np.ndarray:
    """``log s(k)``, the log-probability that k random failed peers hold no
    block's F copies, for k = 0..N.

    Parameters
    ----------
    peers : int
        N >= 1.
    copies : int
        F, 1 <= F <= N.
    blocks : int
        B >= 1, blocks placed independently (uniform F-subsets).

    Returns
    -------
    numpy.ndarray, shape (N+1,), float64
        ``B log(1 - C(k,F)/C(N,F))``: 0 for k < F, ``-inf`` at k = N.

    Raises
    ------
    ValueError
        If N < 1, F < 1, F > N or B < 1.
    """
    n = _int("peers (N)", peers, 1)
    f = _int("copies (F, class xF)", copies, 1)
    b = _int("blocks (B)", blocks, 1)
    if f > n:
        raise ValueError(f"class x{f} needs {f} distinct peers, but only N={n} exist (F > N)")
    total = math.comb(n, f)
    out = np.empty(n + 1)
    for k in range(n + 1):
        hit = math.comb(k, f)
        out[k] = -math.inf if hit == total else b * math.log1p(-hit / total)
    return out


@dataclass(frozen=True)
class Chain:
    """Rates of the transient states k = 0..N-1 of the chain (all in 1/h).

    Attributes
    ----------
    up : numpy.ndarray, shape (N,)
        a_k, rate k -> k+1 (a failure that loses nothing); a_(N-1) = 0.
    down : numpy.ndarray, shape (N,)
        b_k, rate k -> k-1 (a repair); b_0 = 0.
    loss : numpy.ndarray, shape (N,)
        c_k, rate k -> DL (a failure that loses a record).
    branch : numpy.ndarray, shape (N,)
        ``1 - s(k+1)/s(k)``, the probability that the next failure in state
        k loses data (dimensionless).
    blocks : int
        B = ceil(R / blocksize).
    """

    up: np.ndarray
    down: np.ndarray
    loss: np.ndarray
    branch: np.ndarray
    blocks: int


def build_chain(
    peers: int,
    copies: int,
    fail_rate_per_h: float,
    repair_rate_per_h: float,
    records: int = DEFAULT_RECORDS,
    blocksize: int = DEFAULT_BLOCKSIZE,
    repair: str = "parallel",
    domains: int = 0,
    aware: bool = True,
) -> Chain:
    """The transition rates of the chain (see the module docstring).

    Parameters
    ----------
    peers : int
        N >= 1, peers of the file's peerlist.
    copies : int
        F, the class xF, 1 <= F <= N.
    fail_rate_per_h : float
        lambda > 0, failures per hour of one up peer (1 / MTTF).
    repair_rate_per_h : float
        mu >= 0, repairs per hour (1 / mean repair time); per failed peer for
        ``repair="parallel"``, of the single repair process for ``"serial"``.
    records : int
        R >= 1, records of the file.
    blocksize : int
        Records per holder set (default 16, the tracker's default).
    repair : {"parallel", "serial"}
        Repair rate ``k mu`` or ``mu`` in state k >= 1.
    domains : int
        0: peers fail (the chain's units are the N peers). D >= 1: whole
        racks fail (D units of N/D peers; lambda and mu are a rack's), module
        docstring "Correlated failures".
    aware : bool
        With ``domains``: domain-aware placement (True) or blind.

    Returns
    -------
    Chain

    Raises
    ------
    ValueError
        For any argument out of range (F > N, lambda <= 0, mu < 0, R < 1, D > N, ...).
    """
    n, f, lam, mu, r, b = _check(peers, copies, fail_rate_per_h, repair_rate_per_h, records, blocksize, repair, domains)
    blocks = len(block_weights(r, b))
    units = domains or n
    ls = log_safety_domains(n, domains, f, blocks, aware) if domains else log_safety(n, f, blocks)
    k = np.arange(units)
    diff = ls[1:] - ls[:-1]  # log r_k <= 0, -inf at k = N-1
    branch = -np.expm1(diff)  # 1 - r_k, precise when tiny
    fail = (units - k) * lam
    up = fail * np.exp(diff)
    loss = fail * branch
    down = (k * mu if repair == "parallel" else np.where(k > 0, mu, 0.0)).astype(np.float64)
    return Chain(up=up, down=down, loss=loss, branch=branch, blocks=blocks)


def _mttdl(ch: Chain) -> float:
    a, b, c = ch.up, ch.down, ch.loss
    x = z = 0.0
    for k in range(len(a) - 1, -1, -1):  # a[N-1] = 0: x, z of state N never used
        e = b[k] + c[k] + a[k] * z
        x, z = (1.0 + a[k] * x) / e, (c[k] + a[k] * z) / e
    return x


def mttdl_hours(
    peers: int,
    copies: int,
    fail_rate_per_h: float,
    repair_rate_per_h: float,
    records: int = DEFAULT_RECORDS,
    blocksize: int = DEFAULT_BLOCKSIZE,
    repair: str = "parallel",
    domains: int = 0,
    aware: bool = True,
) -> float:
    """Mean time to data loss of a class xF file, starting with every peer up.

    The expected absorption time of the chain from state 0, solved on the
    transient states by positive-only tridiagonal elimination (module
    docstring, "Numerics").

    Parameters
    ----------
    peers, copies, fail_rate_per_h, repair_rate_per_h, records, blocksize, repair, domains, aware
        As in :func:`build_chain`: N, F, lambda (1/h), mu (1/h), R, records
        per block, ``"parallel"`` (rate per failed peer) or ``"serial"``,
        D racks failing whole (0: peers fail) and the placement.

    Returns
    -------
    float
        MTTDL in hours (> 0, finite).

    Raises
    ------
    ValueError
        For any argument out of range.
    """
    return _mttdl(
        build_chain(peers, copies, fail_rate_per_h, repair_rate_per_h, records, blocksize, repair, domains, aware)
    )


def _loss_probability(ch: Chain, t: float) -> float:
    if t == 0:
        return 0.0
    n = len(ch.up)
    rate = ch.up + ch.down + ch.loss
    lam = float(rate.max())
    s = max(0, math.ceil(math.log2(lam * t / _STEP)))
    h = t / 2.0**s
    p = np.diag(1.0 - rate / lam)  # uniformized chain on the transient states
    p[np.arange(n - 1), np.arange(1, n)] = ch.up[:-1] / lam
    p[np.arange(1, n), np.arange(n - 1)] = ch.down[1:] / lam
    pl = ch.loss / lam  # one-step absorption probabilities
    # exp(Q h) = exp(-lam h) sum_m (lam h)^m / m! P^m (E: transient block, L: DL column)
    e = np.eye(n)
    el = np.zeros(n)
    term, terml = np.eye(n), np.zeros(n)
    lh = lam * h
    for m in range(1, _SERIES_TERMS + 1):
        # DL column of (lam h)^m/m! P_aug^m, P_aug = [[P, pl], [0, 1]]: c_m sum_(j<m) P^j pl
        terml = (terml + term @ pl) * (lh / m)
        term = (term @ p) * (lh / m)
        e += term
        el += terml
    w = math.exp(-lh)  # the DL row of P stays e_DL: its corner is exactly 1
    e *= w
    el *= w
    for _ in range(s):
        el = el + e @ el
        e = e @ e
    return float(min(1.0, el[0]))


def loss_probability(
    peers: int,
    copies: int,
    fail_rate_per_h: float,
    repair_rate_per_h: float,
    mission_hours: float | Sequence[float] | np.ndarray,
    records: int = DEFAULT_RECORDS,
    blocksize: int = DEFAULT_BLOCKSIZE,
    repair: str = "parallel",
    domains: int = 0,
    aware: bool = True,
) -> float | np.ndarray:
    """Probability that a class xF file loses a record within the mission time.

    ``P(T_DL <= t)`` from state 0, the DL entry of ``exp(Q t)``, computed by
    uniformization and squaring (module docstring, "Numerics").

    Parameters
    ----------
    peers, copies, fail_rate_per_h, repair_rate_per_h, records, blocksize, repair, domains, aware
        As in :func:`build_chain`.
    mission_hours : float or array_like of float, shape (M,)
        t >= 0 in hours.

    Returns
    -------
    float or numpy.ndarray, shape (M,)
        Probabilities in [0, 1]; a float for a scalar ``mission_hours``.

    Raises
    ------
    ValueError
        For any argument out of range, a negative or non-finite mission time.
    """
    ch = build_chain(peers, copies, fail_rate_per_h, repair_rate_per_h, records, blocksize, repair, domains, aware)
    ts = np.asarray(mission_hours, dtype=np.float64) if not isinstance(mission_hours, bool) else None
    if ts is None or ts.ndim > 1 or not np.all(np.isfinite(ts)) or np.any(ts < 0):
        raise ValueError(f"mission_hours must be finite and >= 0, got {mission_hours!r}")
    out = np.array([_loss_probability(ch, float(t)) for t in ts.reshape(-1)])
    return float(out[0]) if ts.ndim == 0 else out


def model(
    peers: int,
    copies: int,
    fail_rate_per_h: float,
    repair_rate_per_h: float,
    mission_hours: float,
    records: int = DEFAULT_RECORDS,
    blocksize: int = DEFAULT_BLOCKSIZE,
    repair: str = "parallel",
    domains: int = 0,
    aware: bool = True,
) -> dict[str, Any]:
    """MTTDL and mission loss probability of one class, JSON-ready.

    Parameters
    ----------
    As :func:`loss_probability` (``mission_hours`` a scalar).

    Returns
    -------
    dict
        ``copies``, ``blocks`` (B), ``first_loss_branch`` (``1 - s(F)``, the
        probability that the F-th concurrent failure loses data; with D < F
        racks, the D-th), ``first_failure_branch`` (``1 - s(1)``: that the
        first one does; 0 but for x1 and blind placement under rack
        failures), ``mttdl_hours``,
        ``mttdl_years``, ``mission_hours``, ``p_loss``.

    Raises
    ------
    ValueError
        For any argument out of range.
    """
    ch = build_chain(peers, copies, fail_rate_per_h, repair_rate_per_h, records, blocksize, repair, domains, aware)
    m = _mttdl(ch)
    p = loss_probability(
        peers, copies, fail_rate_per_h, repair_rate_per_h, mission_hours, records, blocksize, repair, domains, aware
    )
    first = min(copies, len(ch.branch)) - 1  # the F-th unit down (with D < F racks: the last)
    return {
        "copies": copies,
        "blocks": ch.blocks,
        "first_loss_branch": float(ch.branch[first]),
        "first_failure_branch": float(ch.branch[0]),
        "mttdl_hours": m,
        "mttdl_years": m / HOURS_PER_YEAR,
        "mission_hours": float(mission_hours),
        "p_loss": p,
    }


@dataclass(frozen=True)
class ClassDurability:
    """The expected durability of a class xF on a running cluster (what
    ``storetorrent status`` states).

    Attributes
    ----------
    replication : str
        ``"x1"``, ``"x2"``, ...
    mttdl_years : float
        Mean time to data loss of the cluster's records stored in that class.
    p_loss_year : float
        Probability of losing a record of the class within a year.
    repair_hours : float
        Hours to restore the copies of one failed peer (1 / mu).
    repair_measured : bool
        True: from the repair service's last pass that moved copies; False:
        ``default_repair_hours`` was assumed.
    peer_mtbf_years : float
        The peers' mean time between failures used (1 / lambda).
    """

    replication: str
    mttdl_years: float
    p_loss_year: float
    repair_hours: float
    repair_measured: bool
    peer_mtbf_years: float


def cluster_durability(
    peers: int,
    copies_total: int,
    repair_copies_per_s: float | None,
    peer_mtbf_years: float = 5.0,
    default_repair_hours: float = 24.0,
    classes: Sequence[int] = (1, 2, 3),
    blocksize: int = DEFAULT_BLOCKSIZE,
) -> list[ClassDurability]:
    """The durability of each class on a cluster of ``peers`` live peers,
    from its own measured repair speed (CEFT section 6's model, with
    StoreTorrent's parallel repair): a failed peer's ``copies_per_peer``
    copies are restored at ``repair_copies_per_s`` (the repair service's
    last pass), so mu = 1 / (copies_per_peer / rate) per failed peer.

    Parameters
    ----------
    peers : int
        Live peers (N >= 1).
    copies_total : int
        Copies the live peers hold: a class xF holds R = copies_total / F
        records, and a peer copies_total / N copies.
    repair_copies_per_s : float or None
        Copies the repair service restored per second; None or 0: not
        measured, ``default_repair_hours`` is assumed.
    peer_mtbf_years : float
        Mean time between failures of one peer (lambda = 1 / it).

    Returns
    -------
    list of ClassDurability
        One per class of ``classes`` that fits on ``peers`` (F <= N).

    Raises
    ------
    ValueError
        For a bad argument (e.g. ``peer_mtbf_years <= 0``).
    """
    if peer_mtbf_years <= 0 or default_repair_hours <= 0:
        raise ValueError(
            f"peer_mtbf_years ({peer_mtbf_years}) and default_repair_hours ({default_repair_hours}) must be positive"
        )
    if peers < 1:
        raise ValueError(f"a cluster needs at least one live peer, got {peers}")
    measured = bool(repair_copies_per_s and repair_copies_per_s > 0)
    per_peer = max(copies_total / peers, 1.0)
    hours = per_peer / repair_copies_per_s / 3600.0 if measured else default_repair_hours  # type: ignore[operator]
    hours = max(hours, 1.0 / 3600.0)  # a second at least: the chain needs a finite rate
    lam = 1.0 / (peer_mtbf_years * HOURS_PER_YEAR)
    out = []
    for f in classes:
        if f > peers:
            continue
        m = model(peers, f, lam, 1.0 / hours, HOURS_PER_YEAR, max(1, copies_total // f), blocksize)
        out.append(
            ClassDurability(f"x{f}", float(m["mttdl_years"]), float(m["p_loss"]), hours, measured, peer_mtbf_years)
        )
    return out


def required_repair_rate(
    peers: int,
    copies: int,
    fail_rate_per_h: float,
    target_mttdl_hours: float,
    records: int = DEFAULT_RECORDS,
    blocksize: int = DEFAULT_BLOCKSIZE,
    repair: str = "parallel",
    rtol: float = 1e-6,
    domains: int = 0,
    aware: bool = True,
) -> float:
    """The repair rate mu a class xF needs for a target MTTDL.

    MTTDL grows with mu (tests check it), so mu is found by bisection on
    ``log mu`` after bracketing it by doubling.

    Parameters
    ----------
    peers, copies, fail_rate_per_h, records, blocksize, repair, domains, aware
        As in :func:`build_chain`.
    target_mttdl_hours : float
        The MTTDL wanted, hours, > 0.
    rtol : float
        Relative tolerance on mu (default 1e-6).

    Returns
    -------
    float
        The smallest mu (1/h; 1/mu is the mean repair time in hours) with
        ``mttdl_hours(...) >= target`` within ``rtol``; 0.0 if the target is
        met without any repair.

    Raises
    ------
    ValueError
        For arguments out of range, or if no repair rate reaches the target
        (the MTTDL is bounded by ``1 / (N lambda (1 - s(1)))`` as mu ->
        infinity when the first failure can already lose data, i.e. for
        F = 1; the message gives the bound).
    """
    n, f, lam, _, r, b = _check(peers, copies, fail_rate_per_h, 0.0, records, blocksize, repair, domains)
    units = domains or n
    target = _rate("target_mttdl_hours", target_mttdl_hours, positive=True)
    if not 0 < rtol < 1:
        raise ValueError(f"rtol must be in (0, 1), got {rtol}")

    def m(mu: float) -> float:
        return _mttdl(build_chain(n, f, lam, mu, r, b, repair, domains, aware))

    if m(0.0) >= target:
        return 0.0
    # with instant repair only a failure in state 0 matters: MTTDL -> 1 / (N lambda branch_0)
    branch0 = float(build_chain(n, f, lam, 0.0, r, b, repair, domains, aware).branch[0])
    if branch0 > 0 and target >= 1.0 / (units * lam * branch0) * (1 - 1e-9):
        raise ValueError(
            f"no repair rate gives class x{f} an MTTDL of {target:.4g} h: with instant "
            f"repair the first failure still loses data with probability {branch0:.3g}, "
            f"so the MTTDL stays below 1/(N lambda p) = {1.0 / (units * lam * branch0):.4g} h"
        )
    lo, hi = 0.0, lam
    while m(hi) < target:
        lo, hi = hi, hi * 2.0
        if hi > 1e300:  # pragma: no cover - excluded by the bound above
            raise ValueError(f"no repair rate gives class x{f} an MTTDL of {target:.4g} h")
    if lo == 0.0:
        lo = hi
        while m(lo) >= target:
            lo /= 2.0
            if lo < 1e-300:  # pragma: no cover - m(0) < target, so m(lo) < target for lo small
                return 0.0
    while hi / lo - 1 > rtol:
        mid = math.sqrt(lo * hi)
        if m(mid) >= target:
            hi = mid
        else:
            lo = mid
    return hi


# -- Monte-Carlo simulation with the real placement code ---------------------------


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
    peers: int,
    copies: int,
    lam: float,
    mu: float,
    records: int,
    blocksize: int,
    repair: str,
    sim_repair: str,
    prng: random.Random,
    rng: np.random.Generator,
    max_events: int,
    domains: int = 0,
    aware: bool = True,
) -> tuple[float, int]:
    # The units that fail: the peers, or (domains > 0) whole racks of them.
    if domains:
        peerlist = make_peerlist(peers, copies, records * RECORD_BYTES, domains)
        usable = list(range(len(peerlist)))
        doms = {k: p.failure_domain for k, p in enumerate(peerlist)} if aware else None
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
    n, f, lam, mu, r, b = _check(peers, copies, fail_rate_per_h, repair_rate_per_h, records, blocksize, repair, domains)
    runs = _int("runs", runs, 1)
    if domains and sim_repair != "rebuild":
        raise ValueError("with domains, sim_repair must be rebuild (a rack comes back with its copies)")
    max_events = _int("max_events", max_events, 1)
    if sim_repair not in SIM_REPAIRS:
        raise ValueError(f"sim_repair must be one of {', '.join(SIM_REPAIRS)}, got {sim_repair!r}")
    if seed is None:
        seed = secrets.randbits(32)
    rng = np.random.default_rng(list(str(seed).encode()))
    prng = random.Random(f"{seed}:placement")
    out = np.empty(runs)
    ev = np.empty(runs, dtype=np.int64)
    for i in range(runs):
        out[i], ev[i] = _one_run(n, f, lam, mu, r, b, repair, sim_repair, prng, rng, max_events, domains, aware)
    return SimResult(loss_hours=out, events=ev, seed=seed)


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion k/n.

    Parameters
    ----------
    k, n : int
        Successes and trials, 0 <= k <= n, n >= 1.
    z : float
        Normal quantile (default 1.96: 95%).

    Returns
    -------
    (float, float)
        Lower and upper bound, in [0, 1].

    Raises
    ------
    ValueError
        If n < 1 or k is outside [0, n].
    """
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n and n >= 1, got k={k}, n={n}")
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    lo = 0.0 if k == 0 else max(0.0, mid - half)  # exact ends: rounding would leave 1e-18 or 1 - 1e-16
    hi = 1.0 if k == n else min(1.0, mid + half)
    return lo, hi


def summarize(sim: SimResult, mission_hours: float) -> dict[str, Any]:
    """Mean time to data loss and P(loss within the mission) of a simulation,
    with 95% confidence intervals.

    Parameters
    ----------
    sim : SimResult
    mission_hours : float
        t >= 0.

    Returns
    -------
    dict
        ``runs``, ``mttdl_hours`` (mean loss time), ``mttdl_se`` (its
        standard error ``sd / sqrt(runs)``), ``mttdl_ci`` (normal interval
        ``mean +- 1.96 se``), ``p_loss`` (fraction of
        runs lost by t), ``p_loss_ci`` (Wilson), ``events_mean``.
    """
    x = sim.loss_hours
    n = len(x)
    mean = float(x.mean())
    half = Z95 * float(x.std(ddof=1)) / math.sqrt(n) if n > 1 else math.inf
    k = int(np.count_nonzero(x <= mission_hours))
    return {
        "runs": n,
        "mttdl_hours": mean,
        "mttdl_se": half / Z95,
        "mttdl_ci": [mean - half, mean + half],
        "p_loss": k / n,
        "p_loss_ci": list(wilson(k, n)),
        "events_mean": float(sim.events.mean()),
    }


def _z_binomial(p_sim: float, p_model: float, runs: int) -> float:
    """(simulated - model) fraction in standard errors of a binomial with the model's p."""
    sd = math.sqrt(p_model * (1 - p_model) / runs)
    if sd == 0:
        return 0.0 if p_sim == p_model else math.copysign(math.inf, p_sim - p_model)
    return (p_sim - p_model) / sd


# -- the whole analysis -------------------------------------------------------------


def analyse(
    peers: int,
    classes: Sequence[int],
    fail_rate_per_h: float,
    repair_rate_per_h: float,
    mission_hours: float,
    records: int = DEFAULT_RECORDS,
    blocksize: int = DEFAULT_BLOCKSIZE,
    repair: str = "parallel",
    simulate_runs: int = 0,
    sim_repair: str = "rebuild",
    seed: int | None = None,
    target_mttdl_hours: float | None = None,
    curve_points: int = 10,
    domains: int = 0,
) -> dict[str, Any]:
    """Model (and optionally simulate) every class; JSON-ready results.

    Parameters
    ----------
    peers, fail_rate_per_h, repair_rate_per_h, mission_hours, records, blocksize, repair
        As in :func:`loss_probability`.
    classes : sequence of int
        The F values.
    simulate_runs : int
        Monte-Carlo runs per class (0: none).
    sim_repair : {"rebuild", "respread"}
        See :func:`simulate`.
    seed : int, optional
        Master seed (random and returned if None); class F uses ``"{seed}:x{F}"``.
    target_mttdl_hours : float, optional
        Also compute :func:`required_repair_rate` for this MTTDL.
    curve_points : int
        Times (log-spaced, MTTDL/100 to 4 MTTDL) at which the simulated
        P(loss) is compared with the model, for the plot.
    domains : int
        D >= 1: whole racks fail at ``fail_rate_per_h`` each (module
        docstring, "Correlated failures"); each row is domain-aware
        placement and holds ``blind``, the same for blind placement (its
        model fields, and ``sim`` if simulated).

    Returns
    -------
    dict
        Parameters, ``seed``, ``rows`` (one per class: the :func:`model`
        fields; if simulated ``sim`` (:func:`summarize` with ``z_mttdl``
        and ``z_p_loss``, the differences from the model in standard errors),
        ``curve`` (model and simulated P(loss) at ``curve_points`` times, with
        Wilson intervals and z) and ``loss_hours`` (every run's loss time),
        ``required_repair_rate`` if asked), ``elapsed_s``.

    Raises
    ------
    ValueError
        For arguments out of range.
    """
    if not classes:
        raise ValueError("no replication class given")
    simulate_runs = _int("simulate_runs", simulate_runs, 0)
    if simulate_runs == 1:
        raise ValueError("simulate_runs must be 0 or >= 2 (a confidence interval needs two runs)")
    if seed is None:
        seed = secrets.randbits(32)
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for f in classes:
        row = model(peers, f, fail_rate_per_h, repair_rate_per_h, mission_hours, records, blocksize, repair, domains)
        if target_mttdl_hours is not None:
            try:
                mu = required_repair_rate(
                    peers, f, fail_rate_per_h, target_mttdl_hours, records, blocksize, repair, domains=domains
                )
                row["required_repair_rate"] = mu
                row["required_repair_hours"] = math.inf if mu == 0 else 1.0 / mu
            except ValueError as e:
                if "no repair rate" not in str(e):
                    raise
                row["required_repair_rate"] = None
                row["required_repair_note"] = str(e)
        if domains:
            blind = model(
                peers,
                f,
                fail_rate_per_h,
                repair_rate_per_h,
                mission_hours,
                records,
                blocksize,
                repair,
                domains,
                aware=False,
            )
            if simulate_runs:
                bs = summarize(
                    simulate(
                        peers,
                        f,
                        fail_rate_per_h,
                        repair_rate_per_h,
                        simulate_runs,
                        records,
                        blocksize,
                        repair,
                        sim_repair,
                        seed=f"{seed}:x{f}:blind",
                        domains=domains,
                        aware=False,
                    ),
                    mission_hours,
                )
                bs["z_mttdl"] = (bs["mttdl_hours"] - blind["mttdl_hours"]) / bs["mttdl_se"]
                bs["z_p_loss"] = _z_binomial(bs["p_loss"], blind["p_loss"], simulate_runs)
                blind["sim"] = bs
            row["blind"] = blind
        if simulate_runs:
            sim = simulate(
                peers,
                f,
                fail_rate_per_h,
                repair_rate_per_h,
                simulate_runs,
                records,
                blocksize,
                repair,
                sim_repair,
                seed=f"{seed}:x{f}",
                domains=domains,
            )
            s = summarize(sim, mission_hours)
            s["z_mttdl"] = (s["mttdl_hours"] - row["mttdl_hours"]) / s["mttdl_se"]
            s["z_p_loss"] = _z_binomial(s["p_loss"], row["p_loss"], simulate_runs)
            row["sim"] = s
            ts = np.geomspace(row["mttdl_hours"] / 100, 4 * row["mttdl_hours"], curve_points)
            pm = np.asarray(
                loss_probability(peers, f, fail_rate_per_h, repair_rate_per_h, ts, records, blocksize, repair, domains)
            )
            ks = [int(np.count_nonzero(sim.loss_hours <= t)) for t in ts]
            row["curve"] = {
                "hours": ts.tolist(),
                "model": pm.tolist(),
                "sim": [k / simulate_runs for k in ks],
                "sim_ci": [list(wilson(k, simulate_runs)) for k in ks],
                "z": [_z_binomial(k / simulate_runs, float(p), simulate_runs) for k, p in zip(ks, pm)],
            }
            row["loss_hours"] = sim.loss_hours.tolist()
        rows.append(row)
    return {
        "seed": seed,
        "peers": peers,
        "classes": list(classes),
        "fail_rate_per_h": fail_rate_per_h,
        "repair_rate_per_h": repair_rate_per_h,
        "repair": repair,
        "records": records,
        "blocksize": blocksize,
        "mission_hours": mission_hours,
        "simulate_runs": simulate_runs,
        "sim_repair": sim_repair,
        "target_mttdl_hours": target_mttdl_hours,
        "domains": domains,
        "rows": rows,
        "elapsed_s": time.perf_counter() - t0,
    }


# -- output -------------------------------------------------------------------------


def _g(x: float) -> str:
    return f"{x:.4g}"


def print_report(res: dict[str, Any], console: Any = None) -> None:
    """Print the results as a rich table (model, and simulation if run).

    Parameters
    ----------
    res : dict
        The result of :func:`analyse`.
    console : rich.console.Console, optional
        Where to print; default a console at least 160 columns wide when the
        output is not a terminal.
    """
    from rich import box
    from rich.console import Console
    from rich.table import Table

    if console is None:
        console = Console()
        if not console.is_terminal and console.width < 160:
            console = Console(width=160)
    lam, mu = res["fail_rate_per_h"], res["repair_rate_per_h"]
    dom = res.get("domains", 0)
    unit = "rack" if dom else "peer"
    console.print(
        f"N={res['peers']} peers"
        + (f" in D={dom} racks failing whole" if dom else "")
        + f", lambda={_g(lam)}/h per {unit} (MTTF {_g(1 / lam)} h), mu={_g(mu)}/h "
        f"(repair {_g(1 / mu) if mu else 'never'} h, {res['repair']}), R={res['records']} records, "
        f"blocksize {res['blocksize']}, mission {_g(res['mission_hours'])} h"
    )
    sim = res["simulate_runs"] > 0
    t = Table(
        title="Markov model (CEFT section 6)"
        + (f" vs {res['simulate_runs']} simulated files per class" if sim else ""),
        box=box.SIMPLE_HEAD,
    )
    cols = ["class", "1-s(F)", "MTTDL (h)", "MTTDL (years)", "P(loss in mission)"]
    if dom:
        cols = ["class", "1-s(1) blind", "MTTDL (y) aware", "MTTDL (y) blind", "P(loss) aware", "P(loss) blind"]
    if sim:
        cols += ["sim MTTDL (h), 95% CI", "z", "sim P(loss), 95% CI", "z", "events/run"]
    if res.get("target_mttdl_hours") is not None:
        cols += [f"repair for MTTDL {_g(res['target_mttdl_hours'] / HOURS_PER_YEAR)} y"]
    for c in cols:
        t.add_column(c, justify="right")
    for r in res["rows"]:
        cells = [
            f"x{r['copies']}",
            _g(r["first_loss_branch"]),
            _g(r["mttdl_hours"]),
            _g(r["mttdl_years"]),
            _g(r["p_loss"]),
        ]
        if dom:
            bl = r["blind"]
            cells = [
                f"x{r['copies']}",
                _g(bl["first_failure_branch"]),
                _g(r["mttdl_years"]),
                _g(bl["mttdl_years"]),
                _g(r["p_loss"]),
                _g(bl["p_loss"]),
            ]
        if sim:
            s = r["sim"]
            cells += [
                f"{_g(s['mttdl_hours'])} [{_g(s['mttdl_ci'][0])}, {_g(s['mttdl_ci'][1])}]",
                f"{s['z_mttdl']:+.2f}",
                f"{_g(s['p_loss'])} [{_g(s['p_loss_ci'][0])}, {_g(s['p_loss_ci'][1])}]",
                f"{s['z_p_loss']:+.2f}",
                f"{s['events_mean']:.0f}",
            ]
        if res.get("target_mttdl_hours") is not None:
            mu_r = r.get("required_repair_rate")
            cells.append(
                "unreachable"
                if mu_r is None
                else ("none needed" if mu_r == 0 else f"mu={_g(mu_r)}/h ({_g(1 / mu_r)} h)")
            )
        t.add_row(*cells)
    console.print(t)
    if sim:
        console.print(
            f"seed {res['seed']} (rerun with --seed {res['seed']}); simulated repair: "
            f"{res['sim_repair']}; z = (sim - model) / standard error"
        )
        for r in res["rows"]:
            zs = r["curve"]["z"]
            console.print(
                f"x{r['copies']}: P(loss by t) at {len(zs)} times from MTTDL/100 to 4 MTTDL: "
                f"max |z| = {max(abs(z) for z in zs):.2f}"
            )
    for r in res["rows"]:
        if r.get("required_repair_note"):
            console.print(f"x{r['copies']}: {r['required_repair_note']}")
        bs = r.get("blind", {}).get("sim")
        if bs:
            console.print(
                f"x{r['copies']} blind placement, simulated: MTTDL {_g(bs['mttdl_hours'])} h "
                f"(z {bs['z_mttdl']:+.2f}), P(loss) {_g(bs['p_loss'])} (z {bs['z_p_loss']:+.2f})"
            )
    console.print(f"elapsed {res['elapsed_s']:.1f} s")


def plot(res: dict[str, Any], path: str | Path) -> None:
    """Write the figure: model P(loss) vs mission time per class (lines),
    with the simulated fractions and their 95% Wilson intervals (points).

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

    fig, ax = plt.subplots(figsize=(7.5, 5))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    lo = min(r["mttdl_hours"] for r in res["rows"]) / 300
    hi = max(r["mttdl_hours"] for r in res["rows"]) * 6
    ts = np.geomspace(lo, hi, 120)
    for ci, r in enumerate(res["rows"]):
        c = colours[ci % len(colours)]
        dom = res.get("domains", 0)
        pm = loss_probability(
            res["peers"],
            r["copies"],
            res["fail_rate_per_h"],
            res["repair_rate_per_h"],
            ts,
            res["records"],
            res["blocksize"],
            res["repair"],
            dom,
        )
        ax.plot(
            ts,
            pm,
            "-",
            color=c,
            label=f"x{r['copies']} {'aware ' if dom else ''}model (MTTDL {_g(r['mttdl_hours'])} h)",
        )
        if dom:
            pb = loss_probability(
                res["peers"],
                r["copies"],
                res["fail_rate_per_h"],
                res["repair_rate_per_h"],
                ts,
                res["records"],
                res["blocksize"],
                res["repair"],
                dom,
                aware=False,
            )
            ax.plot(
                ts, pb, "--", color=c, label=f"x{r['copies']} blind model (MTTDL {_g(r['blind']['mttdl_hours'])} h)"
            )
        if "curve" in r:
            cv = r["curve"]
            h, p = np.array(cv["hours"]), np.array(cv["sim"])
            ci_ = np.array(cv["sim_ci"])
            m = p > 0
            yerr = np.clip([p[m] - ci_[m, 0], ci_[m, 1] - p[m]], 0.0, None)
            ax.errorbar(
                h[m], p[m], yerr=yerr, fmt="o", color=c, ms=4, capsize=3, label=f"x{r['copies']} simulated, 95% CI"
            )
    ax.axvline(res["mission_hours"], color="0.5", ls=":", lw=1, label=f"mission {_g(res['mission_hours'])} h")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(1e-3, 1.5)
    ax.set_xlabel("mission time t (hours)")
    ax.set_ylabel("P(data loss by t)")
    rep = res["repair_rate_per_h"]
    title = (
        f"N={res['peers']}"
        + (f" in {res['domains']} racks failing whole" if res.get("domains") else "")
        + f", \u03bb={_g(res['fail_rate_per_h'])}/h, \u03bc={_g(rep)}/h "
        f"({res['repair']} repair), R={res['records']}, blocksize {res['blocksize']}"
    )
    if res["simulate_runs"]:
        title += f"\n{res['simulate_runs']} simulated files per class ({res['sim_repair']}), seed {res['seed']}"
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit status (2 for bad arguments)."""
    ap = argparse.ArgumentParser(
        prog="python -m st_tools.reliability",
        description="Markov reliability model (CEFT section 6) of class xF files: MTTDL and P(loss) "
        "within a mission, optionally checked by simulation with the real placement code.",
    )
    ap.add_argument("--peers", type=int, default=100, help="N, storage peers (default 100)")
    ap.add_argument("--copies", default="1,2,3", help="comma-separated classes F (default 1,2,3)")
    ap.add_argument(
        "--fail-rate",
        type=float,
        default=1 / (5 * HOURS_PER_YEAR),
        help="lambda, failures per hour of one peer (default 1/(5 years))",
    )
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--repair-rate", type=float, default=None, help="mu, repairs per hour (default 1/24)")
    g.add_argument("--repair-hours", type=float, default=None, help="mean repair time 1/mu, hours")
    ap.add_argument(
        "--repair",
        choices=REPAIR_MODES,
        default="parallel",
        help="repair rate per failed peer (parallel, default, as CEFT) or one repair process",
    )
    ap.add_argument("--records", type=int, default=DEFAULT_RECORDS, help=f"R (default {DEFAULT_RECORDS})")
    ap.add_argument(
        "--blocksize", type=int, default=DEFAULT_BLOCKSIZE, help=f"records per holder set (default {DEFAULT_BLOCKSIZE})"
    )
    ap.add_argument(
        "--mission-hours",
        type=float,
        default=HOURS_PER_YEAR,
        help=f"mission time t, hours (default {HOURS_PER_YEAR:g}, one year)",
    )
    ap.add_argument(
        "--simulate",
        type=int,
        default=0,
        metavar="RUNS",
        help="Monte-Carlo runs (files simulated to their first loss) per class (default 0)",
    )
    ap.add_argument(
        "--sim-repair",
        choices=SIM_REPAIRS,
        default="rebuild",
        help="simulated repair: the peer returns with its copies (rebuild, default) or they "
        "move to spares (respread, StoreTorrent's rebalance)",
    )
    ap.add_argument(
        "--domains",
        type=int,
        default=0,
        metavar="D",
        help="correlated failures: the peers in D racks that fail whole (--fail-rate and the repair "
        "are a rack's), domain-aware vs blind placement (default 0: peers fail)",
    )
    ap.add_argument(
        "--target-mttdl-years",
        type=float,
        default=None,
        help="also print the repair rate each class needs for this MTTDL",
    )
    ap.add_argument("--seed", type=int, default=None, help="seed of the simulation (default: random, printed)")
    ap.add_argument("--plot", default=None, help="write the figure to this PNG")
    ap.add_argument("--json", default=None, help="write the results to this JSON file")
    a = ap.parse_args(argv)
    try:
        classes = [int(x) for x in a.copies.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--copies must be comma-separated integers, got {a.copies!r}")
    if a.repair_hours is not None:
        if not a.repair_hours > 0:
            ap.error(f"--repair-hours must be > 0, got {a.repair_hours}")
        mu = 1.0 / a.repair_hours
    else:
        mu = 1 / 24 if a.repair_rate is None else a.repair_rate
    target = None if a.target_mttdl_years is None else a.target_mttdl_years * HOURS_PER_YEAR
    try:
        res = analyse(
            a.peers,
            classes,
            a.fail_rate,
            mu,
            a.mission_hours,
            a.records,
            a.blocksize,
            a.repair,
            a.simulate,
            a.sim_repair,
            a.seed,
            target,
            domains=a.domains,
        )
    except (ValueError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print_report(res)
    if a.plot:
        plot(res, a.plot)
        print(f"wrote {a.plot}")
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(res, indent=1))
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

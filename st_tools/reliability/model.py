"""The Markov chain of a class xF file (CEFT section 6): its parameters
(:class:`ClusterParams`), its rates (:class:`Chain`), the mean time to data
loss and the probability of a loss within a mission time, the repair rate a
target needs, and a running cluster's durability. Pure numerics (numpy, no
scipy, no randomness); :mod:`st_tools.reliability` describes the model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from st_py.core.placement import DEFAULT_BLOCKSIZE
from st_tools.dataloss.model import block_weights, exact_domain_loss
from st_tools.reporting import DictView

HOURS_PER_YEAR = 365.25 * 24  # 8766 h, the Julian year
DEFAULT_RECORDS = 100_000  # as st_tools.dataloss
REPAIR_MODES = ("parallel", "serial")

_SERIES_TERMS = 30  # uniformization series terms for a step with Lambda h <= 1/2
_STEP = 0.5  # largest Lambda h of the series step


# -- validation -------------------------------------------------------------------


def check_int(name: str, value: Any, low: int) -> int:
    """``value`` as an int, checked to be an integer (not a bool) ``>= low``.
    Raises ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    return int(value)


def check_rate(name: str, value: Any, positive: bool) -> float:
    """``value`` as a float, checked to be a finite number ``>= 0`` (``> 0``
    with ``positive``). Raises ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or v < 0 or (positive and v == 0):
        raise ValueError(f"{name} must be a finite number {'> 0' if positive else '>= 0'}, got {value!r}")
    return v


@dataclass(frozen=True)
class ClusterParams:
    """The parameters of the chain, checked once: a file of class xF on N
    peers (or D racks of them) that fail and are repaired.

    Attributes
    ----------
    peers : int
        N >= 1, peers of the file's peerlist.
    copies : int
        F, the class xF, 1 <= F <= N.
    fail_rate_per_h : float
        lambda > 0, failures per hour of one up peer (1 / MTTF); of one rack
        with ``domains``.
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
        racks fail (D units of N/D peers; lambda and mu are a rack's),
        :mod:`st_tools.reliability`, "Correlated failures".
    aware : bool
        With ``domains``: domain-aware placement (True) or blind.

    Raises
    ------
    ValueError
        For any value out of range (F > N, lambda <= 0, mu < 0, R < 1,
        D > N, ...), with a message naming it. Numbers are stored as plain
        ``int`` and ``float``.
    """

    peers: int
    copies: int
    fail_rate_per_h: float
    repair_rate_per_h: float
    records: int = DEFAULT_RECORDS
    blocksize: int = DEFAULT_BLOCKSIZE
    repair: str = "parallel"
    domains: int = 0
    aware: bool = True

    def __post_init__(self) -> None:
        n = check_int("peers (N)", self.peers, 1)
        f = check_int("copies (F, class xF)", self.copies, 1)
        if f > n:
            raise ValueError(f"class x{f} needs {f} distinct peers, but only N={n} exist (F > N)")
        d = check_int("domains (D)", self.domains, 0)
        if d > n:
            raise ValueError(f"D={d} failure domains need at least as many peers, N={n} (D > N)")
        lam = check_rate("fail_rate_per_h (lambda)", self.fail_rate_per_h, positive=True)
        mu = check_rate("repair_rate_per_h (mu)", self.repair_rate_per_h, positive=False)
        r = check_int("records (R)", self.records, 1)
        b = check_int("blocksize", self.blocksize, 1)
        if self.repair not in REPAIR_MODES:
            raise ValueError(f"repair must be one of {', '.join(REPAIR_MODES)}, got {self.repair!r}")
        for name, value in (
            ("peers", n),
            ("copies", f),
            ("domains", d),
            ("fail_rate_per_h", lam),
            ("repair_rate_per_h", mu),
            ("records", r),
            ("blocksize", b),
        ):
            object.__setattr__(self, name, value)

    @property
    def units(self) -> int:
        """What fails: the D racks, or the N peers."""
        return self.domains or self.peers


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
    b = check_int("blocks (B)", blocks, 1)
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
    n = check_int("peers (N)", peers, 1)
    f = check_int("copies (F, class xF)", copies, 1)
    b = check_int("blocks (B)", blocks, 1)
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


def chain(p: ClusterParams) -> Chain:
    """The transition rates of the chain of ``p`` (:mod:`st_tools.reliability`)."""
    n, f, lam, mu, b = p.peers, p.copies, p.fail_rate_per_h, p.repair_rate_per_h, p.blocksize
    blocks = len(block_weights(p.records, b))
    units = p.units
    ls = log_safety_domains(n, p.domains, f, blocks, p.aware) if p.domains else log_safety(n, f, blocks)
    k = np.arange(units)
    diff = ls[1:] - ls[:-1]  # log r_k <= 0, -inf at k = N-1
    branch = -np.expm1(diff)  # 1 - r_k, precise when tiny
    fail = (units - k) * lam
    up = fail * np.exp(diff)
    loss = fail * branch
    down = (k * mu if p.repair == "parallel" else np.where(k > 0, mu, 0.0)).astype(np.float64)
    return Chain(up=up, down=down, loss=loss, branch=branch, blocks=blocks)


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
    return chain(
        ClusterParams(peers, copies, fail_rate_per_h, repair_rate_per_h, records, blocksize, repair, domains, aware)
    )


def _mttdl(ch: Chain) -> float:
    a, b, c = ch.up, ch.down, ch.loss
    x = z = 0.0
    for k in range(len(a) - 1, -1, -1):  # a[N-1] = 0: x, z of state N never used
        e = b[k] + c[k] + a[k] * z
        x, z = (1.0 + a[k] * x) / e, (c[k] + a[k] * z) / e
    return x


def mttdl(p: ClusterParams) -> float:
    """Mean time to data loss of ``p``'s file, hours (:func:`mttdl_hours`)."""
    return _mttdl(chain(p))


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
    return mttdl(
        ClusterParams(peers, copies, fail_rate_per_h, repair_rate_per_h, records, blocksize, repair, domains, aware)
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


def _loss_by(ch: Chain, mission_hours: float | Sequence[float] | np.ndarray) -> float | np.ndarray:
    ts = np.asarray(mission_hours, dtype=np.float64) if not isinstance(mission_hours, bool) else None
    if ts is None or ts.ndim > 1 or not np.all(np.isfinite(ts)) or np.any(ts < 0):
        raise ValueError(f"mission_hours must be finite and >= 0, got {mission_hours!r}")
    out = np.array([_loss_probability(ch, float(t)) for t in ts.reshape(-1)])
    return float(out[0]) if ts.ndim == 0 else out


def loss_by(p: ClusterParams, mission_hours: float | Sequence[float] | np.ndarray) -> float | np.ndarray:
    """``P(T_DL <= t)`` of ``p``'s file (:func:`loss_probability`)."""
    return _loss_by(chain(p), mission_hours)


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
    return loss_by(
        ClusterParams(peers, copies, fail_rate_per_h, repair_rate_per_h, records, blocksize, repair, domains, aware),
        mission_hours,
    )


@dataclass(frozen=True)
class ClassModel(DictView):
    """MTTDL and mission loss probability of one class (:func:`class_model`).

    Attributes
    ----------
    copies : int
        F.
    blocks : int
        B.
    first_loss_branch : float
        ``1 - s(F)``, the probability that the F-th concurrent failure loses
        data; with D < F racks, the D-th.
    first_failure_branch : float
        ``1 - s(1)``: that the first one does; 0 but for x1 and blind
        placement under rack failures.
    mttdl_hours, mttdl_years : float
        The MTTDL.
    mission_hours : float
        t.
    p_loss : float
        ``P(T_DL <= t)``.
    """

    copies: int
    blocks: int
    first_loss_branch: float
    first_failure_branch: float
    mttdl_hours: float
    mttdl_years: float
    mission_hours: float
    p_loss: float


def class_model(p: ClusterParams, mission_hours: float) -> ClassModel:
    """MTTDL and loss probability within ``mission_hours`` of ``p``'s file.

    Raises
    ------
    ValueError
        For a negative or non-finite mission time.
    """
    ch = chain(p)
    m = float(_mttdl(ch))
    loss = _loss_by(ch, mission_hours)
    first = min(p.copies, len(ch.branch)) - 1  # the F-th unit down (with D < F racks: the last)
    return ClassModel(
        copies=p.copies,
        blocks=ch.blocks,
        first_loss_branch=float(ch.branch[first]),
        first_failure_branch=float(ch.branch[0]),
        mttdl_hours=m,
        mttdl_years=m / HOURS_PER_YEAR,
        mission_hours=float(mission_hours),
        p_loss=float(loss),
    )


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
) -> ClassModel:
    """MTTDL and mission loss probability of one class (:class:`ClassModel`).

    Parameters
    ----------
    As :func:`loss_probability` (``mission_hours`` a scalar).

    Returns
    -------
    ClassModel
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
    return class_model(
        ClusterParams(peers, copies, fail_rate_per_h, repair_rate_per_h, records, blocksize, repair, domains, aware),
        mission_hours,
    )


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
        m = class_model(ClusterParams(peers, f, lam, 1.0 / hours, max(1, copies_total // f), blocksize), HOURS_PER_YEAR)
        out.append(ClassDurability(f"x{f}", m.mttdl_years, m.p_loss, hours, measured, peer_mtbf_years))
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
    p = ClusterParams(peers, copies, fail_rate_per_h, 0.0, records, blocksize, repair, domains, aware)
    return repair_rate_for(p, target_mttdl_hours, rtol)


def repair_rate_for(p: ClusterParams, target_mttdl_hours: float, rtol: float = 1e-6) -> float:
    """The smallest repair rate mu (1/h) that gives ``p``'s file (whatever
    its own ``repair_rate_per_h``) an MTTDL of ``target_mttdl_hours``
    (:func:`required_repair_rate`)."""
    f, lam, units = p.copies, p.fail_rate_per_h, p.units
    target = check_rate("target_mttdl_hours", target_mttdl_hours, positive=True)
    if not 0 < rtol < 1:
        raise ValueError(f"rtol must be in (0, 1), got {rtol}")

    def m(mu: float) -> float:
        return _mttdl(chain(replace(p, repair_rate_per_h=mu)))

    if m(0.0) >= target:
        return 0.0
    # with instant repair only a failure in state 0 matters: MTTDL -> 1 / (N lambda branch_0)
    branch0 = float(chain(replace(p, repair_rate_per_h=0.0)).branch[0])
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

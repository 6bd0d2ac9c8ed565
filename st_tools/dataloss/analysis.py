"""The whole data-loss analyses and their typed results: records lost with G
of N peers failed (:func:`analyse`) and with whole racks failed
(:func:`analyse_domains`), measured with the real placement code
(:mod:`.simulation`) against the formulas (:mod:`.model`). ``to_dict()``
of a result is the JSON the tool writes.
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from st_py.core.placement import DEFAULT_BLOCKSIZE
from st_tools.dataloss.model import (
    PAPER_EXAMPLE,
    check_args,
    check_domain_args,
    exact_domain_loss,
    exact_unavailable,
    paper_formula,
    paper_limit,
    rack_of,
    trial_std,
)
from st_tools.dataloss.simulation import simulate, simulate_domains
from st_tools.reporting import DictView


@dataclass(frozen=True)
class Measured(DictView):
    """The unavailable fraction measured over the trials of one class, G and
    blocksize.

    Attributes
    ----------
    mean, std : float
        Mean and standard deviation (ddof=1) over the trials.
    theory_std : float
        :func:`~st_tools.dataloss.model.trial_std`.
    z : float
        ``(mean - exact) / (theory_std / sqrt(trials))``; 0 when theory_std is 0.
    fractions : list of float
        Every trial's fraction.
    """

    mean: float
    std: float
    theory_std: float
    z: float
    fractions: list[float]

    def to_dict(self, suffix: str = "") -> dict[str, Any]:
        """The row's keys: ``measured_mean``, ``measured_std``,
        ``theory_std``, ``z``, ``fractions``, each ending in ``suffix``."""
        return {
            "measured_mean" + suffix: self.mean,
            "measured_std" + suffix: self.std,
            "theory_std" + suffix: self.theory_std,
            "z" + suffix: self.z,
            "fractions" + suffix: self.fractions,
        }


@dataclass(frozen=True)
class LossRow(DictView):
    """One class and number of failed peers G of :func:`analyse`.

    Attributes
    ----------
    copies, failed : int
        F and G.
    exact, paper, paper_limit : float
        :func:`exact_unavailable`, :func:`paper_formula`, :func:`paper_limit`.
    measured : Measured
        With the analysis' blocksize.
    compare : Measured or None
        With ``compare_blocksize`` (None: not measured).
    compare_blocksize : int
        The second blocksize (0: none).
    """

    copies: int
    failed: int
    exact: float
    paper: float
    paper_limit: float
    measured: Measured
    compare: Measured | None = None
    compare_blocksize: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The row's JSON keys: F, G, the formulas, the measured values and, with
        a second blocksize, its measured values with the suffix ``_b<blocksize>``."""
        d: dict[str, Any] = {
            "copies": self.copies,
            "failed": self.failed,
            "exact": self.exact,
            "paper": self.paper,
            "paper_limit": self.paper_limit,
        }
        d.update(self.measured.to_dict())
        if self.compare is not None:
            d.update(self.compare.to_dict(f"_b{self.compare_blocksize}"))
        return d


@dataclass(frozen=True)
class PaperExample(DictView):
    """The paper's worked example (:data:`PAPER_EXAMPLE`) with the exact
    value and the paper's general formula at its N, F, G."""

    peers: int
    copies: int
    failed: int
    value: float
    exact: float
    paper_formula: float


@dataclass(frozen=True)
class LossAnalysis(DictView):
    """The result of :func:`analyse`: its parameters, ``rows`` (one per class
    and G), the paper's example, and the seconds it took."""

    seed: int
    peers: int
    records: int
    trials: int
    blocksize: int
    compare_blocksize: int
    classes: list[int]
    failed: list[int]
    rows: list[LossRow]
    paper_example: PaperExample
    elapsed_s: float


@dataclass(frozen=True)
class DomainRow(DictView):
    """One class and number of failed racks g of :func:`analyse_domains`:
    the peers down (those of the g first racks: g N / D when D divides N),
    and for domain-aware and blind placement the measured mean and std over
    the trials and the exact fraction (:func:`exact_domain_loss`)."""

    copies: int
    failed_domains: int
    failed_peers: int
    aware_mean: float
    aware_std: float
    aware_exact: float
    blind_mean: float
    blind_std: float
    blind_exact: float


@dataclass(frozen=True)
class DomainAnalysis(DictView):
    """The result of :func:`analyse_domains` (``mode`` is ``"domains"``)."""

    mode: str
    seed: int
    peers: int
    domains: int
    records: int
    trials: int
    blocksize: int
    classes: list[int]
    rows: list[DomainRow]
    elapsed_s: float


def _measured(fr: np.ndarray, p: float, records: int, blocksize: int, trials: int) -> Measured:
    sd = trial_std(p, records, blocksize)
    mean = float(fr.mean())
    return Measured(
        mean=mean,
        std=float(fr.std(ddof=1)),
        theory_std=sd,
        z=(mean - p) / (sd / math.sqrt(trials)) if sd > 0 else 0.0,
        fractions=fr.tolist(),
    )


def analyse(
    peers: int = 100,
    records: int = 100_000,
    trials: int = 20,
    seed: int | None = None,
    blocksize: int = DEFAULT_BLOCKSIZE,
    classes: Sequence[int] = (1, 2, 3),
    max_failed: int | None = None,
    compare_blocksize: int = 1,
) -> LossAnalysis:
    """Run the whole analysis.

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
    LossAnalysis
        ``to_dict()``: ``seed``, parameters, ``rows`` (one per class and G
        with ``measured_mean``, ``measured_std`` (std over trials, ddof=1),
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
        check_args(peers, f, max_failed)
    if compare_blocksize < 0:
        raise ValueError(f"compare_blocksize must be >= 0, got {compare_blocksize}")
    if compare_blocksize == blocksize:
        compare_blocksize = 0
    gs = list(range(0, max_failed + 1))
    t0 = time.perf_counter()
    rows: list[LossRow] = []
    for f in classes:
        main = simulate(peers, f, records, gs, trials, blocksize, f"{seed}:x{f}:b{blocksize}")
        second = None
        if compare_blocksize:
            second = simulate(peers, f, records, gs, trials, compare_blocksize, f"{seed}:x{f}:b{compare_blocksize}")
        for k, g in enumerate(gs):
            p = exact_unavailable(peers, f, g)
            rows.append(
                LossRow(
                    copies=f,
                    failed=g,
                    exact=p,
                    paper=paper_formula(peers, f, g),
                    paper_limit=paper_limit(peers, f, g),
                    measured=_measured(main[k], p, records, blocksize, trials),
                    compare=None if second is None else _measured(second[k], p, records, compare_blocksize, trials),
                    compare_blocksize=compare_blocksize,
                )
            )
    ex = PAPER_EXAMPLE
    example = PaperExample(
        peers=int(ex["peers"]),
        copies=int(ex["copies"]),
        failed=int(ex["failed"]),
        value=ex["value"],
        exact=exact_unavailable(int(ex["peers"]), int(ex["copies"]), int(ex["failed"])),
        paper_formula=paper_formula(int(ex["peers"]), int(ex["copies"]), int(ex["failed"])),
    )
    return LossAnalysis(
        seed=seed,
        peers=peers,
        records=records,
        trials=trials,
        blocksize=blocksize,
        compare_blocksize=compare_blocksize,
        classes=list(classes),
        failed=gs,
        rows=rows,
        paper_example=example,
        elapsed_s=time.perf_counter() - t0,
    )


def analyse_domains(
    peers: int = 100,
    domains: int = 10,
    records: int = 100_000,
    trials: int = 20,
    seed: int | None = None,
    blocksize: int = DEFAULT_BLOCKSIZE,
    classes: Sequence[int] = (1, 2, 3),
) -> DomainAnalysis:
    """The correlated-failure analysis (``--domains D``).

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
    DomainAnalysis
        ``seed``, the parameters, ``rows`` (:class:`DomainRow`, one per
        class and number of failed domains g) and ``elapsed_s``.

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
        check_domain_args(peers, domains, f, 0)
    t0 = time.perf_counter()
    rows: list[DomainRow] = []
    for f in classes:
        fr = simulate_domains(peers, domains, f, records, trials, blocksize, f"{seed}:x{f}:domains")
        for g in range(domains + 1):
            rows.append(
                DomainRow(
                    copies=f,
                    failed_domains=g,
                    failed_peers=sum(1 for i in range(peers) if rack_of(i, domains) < g),
                    aware_mean=float(fr.aware[g].mean()),
                    aware_std=float(fr.aware[g].std(ddof=1)),
                    aware_exact=exact_domain_loss(peers, domains, f, g, True),
                    blind_mean=float(fr.blind[g].mean()),
                    blind_std=float(fr.blind[g].std(ddof=1)),
                    blind_exact=exact_domain_loss(peers, domains, f, g, False),
                )
            )
    return DomainAnalysis(
        mode="domains",
        seed=seed,
        peers=peers,
        domains=domains,
        records=records,
        trials=trials,
        blocksize=blocksize,
        classes=list(classes),
        rows=rows,
        elapsed_s=time.perf_counter() - t0,
    )

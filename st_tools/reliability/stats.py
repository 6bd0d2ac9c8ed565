"""Statistics of the Monte-Carlo check: Wilson intervals, the summary of a
simulation (MTTDL and P(loss) with 95% intervals), and z scores against the
model."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from st_tools.reliability.simulation import SimResult
from st_tools.reporting import DictView

Z95 = 1.959963984540054  # two-sided 95% normal quantile


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


@dataclass(frozen=True)
class SimSummary(DictView):
    """Mean time to data loss and P(loss within the mission) of a
    simulation, with 95% confidence intervals (:func:`summarize`).

    Attributes
    ----------
    runs : int
    mttdl_hours : float
        Mean loss time.
    mttdl_se : float
        Its standard error ``sd / sqrt(runs)``.
    mttdl_ci : list of float
        Normal interval ``mean +- 1.96 se``.
    p_loss : float
        Fraction of runs lost by the mission time.
    p_loss_ci : list of float
        Wilson interval.
    events_mean : float
        Events per run.
    z_mttdl, z_p_loss : float or None
        The differences from the model in standard errors, once compared
        with it (:func:`st_tools.reliability.analysis.analyse`); None (and
        left out of ``to_dict()``) before.
    """

    runs: int
    mttdl_hours: float
    mttdl_se: float
    mttdl_ci: list[float]
    p_loss: float
    p_loss_ci: list[float]
    events_mean: float
    z_mttdl: float | None = None
    z_p_loss: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict, the z scores left out while they are None."""
        d = super().to_dict()
        for k in ("z_mttdl", "z_p_loss"):
            if d[k] is None:
                del d[k]
        return d


def summarize(sim: SimResult, mission_hours: float) -> SimSummary:
    """Mean time to data loss and P(loss within the mission) of a simulation,
    with 95% confidence intervals.

    Parameters
    ----------
    sim : SimResult
    mission_hours : float
        t >= 0.

    Returns
    -------
    SimSummary
    """
    x = sim.loss_hours
    n = len(x)
    mean = float(x.mean())
    half = Z95 * float(x.std(ddof=1)) / math.sqrt(n) if n > 1 else math.inf
    k = int(np.count_nonzero(x <= mission_hours))
    return SimSummary(
        runs=n,
        mttdl_hours=mean,
        mttdl_se=half / Z95,
        mttdl_ci=[mean - half, mean + half],
        p_loss=k / n,
        p_loss_ci=list(wilson(k, n)),
        events_mean=float(sim.events.mean()),
    )


def z_binomial(p_sim: float, p_model: float, runs: int) -> float:
    """(simulated - model) fraction in standard errors of a binomial with the model's p."""
    sd = math.sqrt(p_model * (1 - p_model) / runs)
    if sd == 0:
        return 0.0 if p_sim == p_model else math.copysign(math.inf, p_sim - p_model)
    return (p_sim - p_model) / sd

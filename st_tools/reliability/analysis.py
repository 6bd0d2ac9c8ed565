"""The whole reliability analysis and its typed results: the model of every
class, optionally the repair rate a target MTTDL needs, the simulation and
its comparison with the model. ``to_dict()`` of a result is the JSON the
tool writes."""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from st_py.core.placement import DEFAULT_BLOCKSIZE
from st_tools.reliability.model import (
    DEFAULT_RECORDS,
    ClassModel,
    ClusterParams,
    check_int,
    class_model,
    loss_by,
    repair_rate_for,
)
from st_tools.reliability.simulation import run_simulation
from st_tools.reliability.stats import SimSummary, summarize, wilson, z_binomial
from st_tools.reporting import DictView


@dataclass(frozen=True)
class RepairNeed:
    """The repair rate a class needs for the target MTTDL: ``rate`` (1/h; 0:
    none needed), or None and the reason in ``note`` when no rate reaches it."""

    rate: float | None
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """``required_repair_rate`` (1/h) and ``required_repair_hours`` (its
        inverse; inf for rate 0), or a None rate and ``required_repair_note``."""
        if self.rate is None:
            return {"required_repair_rate": None, "required_repair_note": self.note}
        return {
            "required_repair_rate": self.rate,
            "required_repair_hours": math.inf if self.rate == 0 else 1 / self.rate,
        }


@dataclass(frozen=True)
class Curve(DictView):
    """Model and simulated P(loss by t) at log-spaced times (hours), with the
    simulated fractions' Wilson intervals and z scores."""

    hours: list[float]
    model: list[float]
    sim: list[float]
    sim_ci: list[list[float]]
    z: list[float]


@dataclass(frozen=True)
class ClassResult(DictView):
    """One class of :func:`analyse`.

    Attributes
    ----------
    model : ClassModel
        The chain's MTTDL and P(loss); domain-aware placement with ``domains``.
    required : RepairNeed or None
        With a target MTTDL.
    sim : SimSummary or None
        The simulation, with its z scores against the model.
    curve : Curve or None
        P(loss by t), model and simulation.
    loss_hours : list of float or None
        Every simulated run's loss time.
    blind : ClassResult or None
        With ``domains``: the same for blind placement (``model`` and ``sim``).
    """

    model: ClassModel
    required: RepairNeed | None = None
    blind: ClassResult | None = None
    sim: SimSummary | None = None
    curve: Curve | None = None
    loss_hours: list[float] | None = None

    @property
    def copies(self) -> int:
        """F, the copies of the class."""
        return self.model.copies

    def to_dict(self) -> dict[str, Any]:
        """The model's fields, then ``required_repair_*``, ``blind``,
        ``sim``, ``curve`` and ``loss_hours``, each if present."""
        d = self.model.to_dict()
        if self.required is not None:
            d.update(self.required.to_dict())
        if self.blind is not None:
            d["blind"] = self.blind.to_dict()
        if self.sim is not None:
            d["sim"] = self.sim.to_dict()
        if self.curve is not None:
            d["curve"] = self.curve.to_dict()
        if self.loss_hours is not None:
            d["loss_hours"] = self.loss_hours
        return d


@dataclass(frozen=True)
class Analysis(DictView):
    """The result of :func:`analyse`: its parameters, ``rows`` (one per
    class) and the seconds it took."""

    seed: int
    peers: int
    classes: list[int]
    fail_rate_per_h: float
    repair_rate_per_h: float
    repair: str
    records: int
    blocksize: int
    mission_hours: float
    simulate_runs: int
    sim_repair: str
    target_mttdl_hours: float | None
    domains: int
    rows: list[ClassResult]
    elapsed_s: float

    def params(self, copies: int, aware: bool = True) -> ClusterParams:
        """The chain's parameters of class ``copies``."""
        return ClusterParams(
            self.peers,
            copies,
            self.fail_rate_per_h,
            self.repair_rate_per_h,
            self.records,
            self.blocksize,
            self.repair,
            self.domains,
            aware,
        )


def _compared(sim: SimSummary, m: ClassModel, runs: int) -> SimSummary:
    return replace(
        sim,
        z_mttdl=(sim.mttdl_hours - m.mttdl_hours) / sim.mttdl_se,
        z_p_loss=z_binomial(sim.p_loss, m.p_loss, runs),
    )


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
) -> Analysis:
    """Model (and optionally simulate) every class.

    Parameters
    ----------
    peers, fail_rate_per_h, repair_rate_per_h, mission_hours, records, blocksize, repair
        As in :func:`~st_tools.reliability.model.loss_probability`.
    classes : sequence of int
        The F values.
    simulate_runs : int
        Monte-Carlo runs per class (0: none).
    sim_repair : {"rebuild", "respread"}
        See :func:`~st_tools.reliability.simulation.simulate`.
    seed : int, optional
        Master seed (random and returned if None); class F uses ``"{seed}:x{F}"``.
    target_mttdl_hours : float, optional
        Also compute :func:`~st_tools.reliability.model.required_repair_rate`
        for this MTTDL.
    curve_points : int
        Times (log-spaced, MTTDL/100 to 4 MTTDL) at which the simulated
        P(loss) is compared with the model, for the plot.
    domains : int
        D >= 1: whole racks fail at ``fail_rate_per_h`` each
        (:mod:`st_tools.reliability`, "Correlated failures"); each row is
        domain-aware placement and holds ``blind``, the same for blind
        placement (its model, and ``sim`` if simulated).

    Returns
    -------
    Analysis
        ``to_dict()``: the parameters, ``seed``, ``rows`` (one per class: the
        :class:`ClassModel` fields; if simulated ``sim`` (:class:`SimSummary`
        with ``z_mttdl`` and ``z_p_loss``), ``curve`` and ``loss_hours``;
        ``required_repair_rate`` if asked), ``elapsed_s``.

    Raises
    ------
    ValueError
        For arguments out of range.
    """
    if not classes:
        raise ValueError("no replication class given")
    simulate_runs = check_int("simulate_runs", simulate_runs, 0)
    if simulate_runs == 1:
        raise ValueError("simulate_runs must be 0 or >= 2 (a confidence interval needs two runs)")
    if seed is None:
        seed = secrets.randbits(32)
    t0 = time.perf_counter()
    rows: list[ClassResult] = []
    for f in classes:
        p = ClusterParams(peers, f, fail_rate_per_h, repair_rate_per_h, records, blocksize, repair, domains)
        m = class_model(p, mission_hours)
        required = None
        if target_mttdl_hours is not None:
            try:
                required = RepairNeed(repair_rate_for(p, target_mttdl_hours))
            except ValueError as e:
                if "no repair rate" not in str(e):
                    raise
                required = RepairNeed(None, str(e))
        blind = None
        if domains:
            pb = replace(p, aware=False)
            mb = class_model(pb, mission_hours)
            bs = None
            if simulate_runs:
                sb = run_simulation(pb, simulate_runs, sim_repair, seed=f"{seed}:x{f}:blind")
                bs = _compared(summarize(sb, mission_hours), mb, simulate_runs)
            blind = ClassResult(mb, sim=bs)
        row = ClassResult(m, required, blind)
        if simulate_runs:
            sim = run_simulation(p, simulate_runs, sim_repair, seed=f"{seed}:x{f}")
            s = _compared(summarize(sim, mission_hours), m, simulate_runs)
            ts = np.geomspace(m.mttdl_hours / 100, 4 * m.mttdl_hours, curve_points)
            pm = np.asarray(loss_by(p, ts))
            ks = [int(np.count_nonzero(sim.loss_hours <= t)) for t in ts]
            curve = Curve(
                hours=ts.tolist(),
                model=pm.tolist(),
                sim=[k / simulate_runs for k in ks],
                sim_ci=[list(wilson(k, simulate_runs)) for k in ks],
                z=[z_binomial(k / simulate_runs, float(q), simulate_runs) for k, q in zip(ks, pm)],
            )
            row = replace(row, sim=s, curve=curve, loss_hours=sim.loss_hours.tolist())
        rows.append(row)
    return Analysis(
        seed=seed,
        peers=peers,
        classes=list(classes),
        fail_rate_per_h=fail_rate_per_h,
        repair_rate_per_h=repair_rate_per_h,
        repair=repair,
        records=records,
        blocksize=blocksize,
        mission_hours=mission_hours,
        simulate_runs=simulate_runs,
        sim_repair=sim_repair,
        target_mttdl_hours=target_mttdl_hours,
        domains=domains,
        rows=rows,
        elapsed_s=time.perf_counter() - t0,
    )

"""The reliability analysis' table (rich) and figure (matplotlib), from the
typed result of :mod:`.analysis`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from st_tools.reliability.analysis import Analysis
from st_tools.reliability.model import HOURS_PER_YEAR, loss_by
from st_tools.reporting import console as _console
from st_tools.reporting import fmt_g as _g
from st_tools.reporting import pyplot, save_figure


def print_report(res: Analysis, console: Any = None) -> None:
    """Print the results as a rich table (model, and simulation if run).

    Parameters
    ----------
    res : Analysis
        The result of :func:`~st_tools.reliability.analysis.analyse`.
    console : rich.console.Console, optional
        Where to print; default a console at least 160 columns wide when the
        output is not a terminal.
    """
    from rich import box
    from rich.table import Table

    if console is None:
        console = _console(160)
    lam, mu = res.fail_rate_per_h, res.repair_rate_per_h
    dom = res.domains
    unit = "rack" if dom else "peer"
    console.print(
        f"N={res.peers} peers"
        + (f" in D={dom} racks failing whole" if dom else "")
        + f", lambda={_g(lam)}/h per {unit} (MTTF {_g(1 / lam)} h), mu={_g(mu)}/h "
        f"(repair {_g(1 / mu) if mu else 'never'} h, {res.repair}), R={res.records} records, "
        f"blocksize {res.blocksize}, mission {_g(res.mission_hours)} h"
    )
    sim = res.simulate_runs > 0
    t = Table(
        title="Markov model (CEFT section 6)" + (f" vs {res.simulate_runs} simulated files per class" if sim else ""),
        box=box.SIMPLE_HEAD,
    )
    cols = ["class", "1-s(F)", "MTTDL (h)", "MTTDL (years)", "P(loss in mission)"]
    if dom:
        cols = ["class", "1-s(1) blind", "MTTDL (y) aware", "MTTDL (y) blind", "P(loss) aware", "P(loss) blind"]
    if sim:
        cols += ["sim MTTDL (h), 95% CI", "z", "sim P(loss), 95% CI", "z", "events/run"]
    if res.target_mttdl_hours is not None:
        cols += [f"repair for MTTDL {_g(res.target_mttdl_hours / HOURS_PER_YEAR)} y"]
    for c in cols:
        t.add_column(c, justify="right")
    for r in res.rows:
        m = r.model
        cells = [f"x{m.copies}", _g(m.first_loss_branch), _g(m.mttdl_hours), _g(m.mttdl_years), _g(m.p_loss)]
        if dom:
            assert r.blind is not None
            bl = r.blind.model
            cells = [
                f"x{m.copies}",
                _g(bl.first_failure_branch),
                _g(m.mttdl_years),
                _g(bl.mttdl_years),
                _g(m.p_loss),
                _g(bl.p_loss),
            ]
        if sim:
            s = r.sim
            assert s is not None and s.z_mttdl is not None and s.z_p_loss is not None
            cells += [
                f"{_g(s.mttdl_hours)} [{_g(s.mttdl_ci[0])}, {_g(s.mttdl_ci[1])}]",
                f"{s.z_mttdl:+.2f}",
                f"{_g(s.p_loss)} [{_g(s.p_loss_ci[0])}, {_g(s.p_loss_ci[1])}]",
                f"{s.z_p_loss:+.2f}",
                f"{s.events_mean:.0f}",
            ]
        if res.target_mttdl_hours is not None:
            mu_r = r.required.rate if r.required is not None else None
            cells.append(
                "unreachable"
                if mu_r is None
                else ("none needed" if mu_r == 0 else f"mu={_g(mu_r)}/h ({_g(1 / mu_r)} h)")
            )
        t.add_row(*cells)
    console.print(t)
    if sim:
        console.print(
            f"seed {res.seed} (rerun with --seed {res.seed}); simulated repair: "
            f"{res.sim_repair}; z = (sim - model) / standard error"
        )
        for r in res.rows:
            assert r.curve is not None
            zs = r.curve.z
            console.print(
                f"x{r.copies}: P(loss by t) at {len(zs)} times from MTTDL/100 to 4 MTTDL: "
                f"max |z| = {max(abs(z) for z in zs):.2f}"
            )
    for r in res.rows:
        if r.required is not None and r.required.note:
            console.print(f"x{r.copies}: {r.required.note}")
        bs = r.blind.sim if r.blind is not None else None
        if bs:
            assert bs.z_mttdl is not None and bs.z_p_loss is not None
            console.print(
                f"x{r.copies} blind placement, simulated: MTTDL {_g(bs.mttdl_hours)} h "
                f"(z {bs.z_mttdl:+.2f}), P(loss) {_g(bs.p_loss)} (z {bs.z_p_loss:+.2f})"
            )
    console.print(f"elapsed {res.elapsed_s:.1f} s")


def plot(res: Analysis, path: str | Path) -> None:
    """Write the figure: model P(loss) vs mission time per class (lines),
    with the simulated fractions and their 95% Wilson intervals (points).

    Parameters
    ----------
    res : Analysis
        The result of :func:`~st_tools.reliability.analysis.analyse`.
    path : str or Path
        PNG to write (parent directories are created).

    Raises
    ------
    RuntimeError
        If matplotlib is not installed.
    """
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7.5, 5))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    lo = min(r.model.mttdl_hours for r in res.rows) / 300
    hi = max(r.model.mttdl_hours for r in res.rows) * 6
    ts = np.geomspace(lo, hi, 120)
    for ci, r in enumerate(res.rows):
        c = colours[ci % len(colours)]
        dom = res.domains
        pm = loss_by(res.params(r.copies), ts)
        ax.plot(
            ts,
            pm,
            "-",
            color=c,
            label=f"x{r.copies} {'aware ' if dom else ''}model (MTTDL {_g(r.model.mttdl_hours)} h)",
        )
        if dom:
            assert r.blind is not None
            pb = loss_by(res.params(r.copies, aware=False), ts)
            ax.plot(ts, pb, "--", color=c, label=f"x{r.copies} blind model (MTTDL {_g(r.blind.model.mttdl_hours)} h)")
        if r.curve is not None:
            cv = r.curve
            h, p = np.array(cv.hours), np.array(cv.sim)
            ci_ = np.array(cv.sim_ci)
            m = p > 0
            yerr = np.clip([p[m] - ci_[m, 0], ci_[m, 1] - p[m]], 0.0, None)
            ax.errorbar(
                h[m], p[m], yerr=yerr, fmt="o", color=c, ms=4, capsize=3, label=f"x{r.copies} simulated, 95% CI"
            )
    ax.axvline(res.mission_hours, color="0.5", ls=":", lw=1, label=f"mission {_g(res.mission_hours)} h")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(1e-3, 1.5)
    ax.set_xlabel("mission time t (hours)")
    ax.set_ylabel("P(data loss by t)")
    rep = res.repair_rate_per_h
    title = (
        f"N={res.peers}"
        + (f" in {res.domains} racks failing whole" if res.domains else "")
        + f", \u03bb={_g(res.fail_rate_per_h)}/h, \u03bc={_g(rep)}/h "
        f"({res.repair} repair), R={res.records}, blocksize {res.blocksize}"
    )
    if res.simulate_runs:
        title += f"\n{res.simulate_runs} simulated files per class ({res.sim_repair}), seed {res.seed}"
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    save_figure(fig, path)

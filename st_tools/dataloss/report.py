"""The data-loss analysis' tables (rich) and figures (matplotlib), from the
typed results of :mod:`.analysis`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from st_tools.dataloss.analysis import DomainAnalysis, LossAnalysis, LossRow, Measured
from st_tools.reporting import console as _console
from st_tools.reporting import fmt_pct as _pct
from st_tools.reporting import pyplot, save_figure


def print_domain_report(res: DomainAnalysis, console: Any = None) -> None:
    """Print :func:`analyse_domains`'s results as a rich table: per class and
    number of failed domains, the fraction lost with aware and blind
    placement, measured and exact.

    Parameters
    ----------
    res : DomainAnalysis
        The result of :func:`~st_tools.dataloss.analysis.analyse_domains`.
    console : rich.console.Console, optional
        Where to print (default: 120 columns at least when not a terminal).
    """
    from rich import box
    from rich.table import Table

    if console is None:
        console = _console(120)
    console.print(
        f"seed {res.seed}: N={res.peers} peers in D={res.domains} racks, R={res.records} "
        f"records per trial, {res.trials} trials, blocksize {res.blocksize} "
        f"(rerun with --seed {res.seed})"
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
    for r in res.rows:
        if r.failed_domains > max(r.copies + 2, 3) and r.failed_domains < res.domains:
            continue  # the table's point is the first racks lost
        if prev is not None and r.copies != prev:
            t.add_section()
        prev = r.copies
        t.add_row(
            f"x{r.copies}",
            str(r.failed_domains),
            str(r.failed_peers),
            _pct(r.aware_mean),
            _pct(r.aware_exact),
            _pct(r.blind_mean),
            _pct(r.blind_std),
            _pct(r.blind_exact),
        )
    console.print(t)
    console.print(f"elapsed {res.elapsed_s:.1f} s")


def plot_domains(res: DomainAnalysis, path: str | Path) -> None:
    """Write the figure of :func:`analyse_domains`: fraction unavailable vs
    racks failed (log y), aware (filled) and blind (open) placement, the
    exact values as lines.

    Raises
    ------
    RuntimeError
        If matplotlib is not installed.
    """
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7.5, 5))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ci, f in enumerate(res.classes):
        c = colours[ci % len(colours)]
        rows = [r for r in res.rows if r.copies == f and r.failed_domains >= 1]
        g = np.array([r.failed_domains for r in rows])
        for kind, mk, ls in (("aware", "o", "-"), ("blind", "s", "--")):
            exact = np.array([getattr(r, f"{kind}_exact") for r in rows])
            mean = np.array([getattr(r, f"{kind}_mean") for r in rows])
            pos, m = exact > 0, mean > 0
            ax.plot(g[pos], exact[pos], ls, color=c, alpha=0.8)
            ax.plot(g[m], mean[m], mk, color=c, mfc=c if kind == "aware" else "none", ms=5, label=f"x{f} {kind}")
    ax.set_yscale("log")
    ax.set_xlabel(f"racks failed (of D={res.domains}, {res.peers // res.domains} peers each)")
    ax.set_ylabel("fraction of records unavailable")
    ax.set_title(
        f"Whole racks failing: domain-aware vs blind placement\n"
        f"N={res.peers}, R={res.records}, {res.trials} trials (lines: exact)",
        fontsize=10,
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2, loc="lower right")
    save_figure(fig, path)


def print_report(res: LossAnalysis, console: Any = None) -> None:
    """Print the results as rich tables: measured vs formulas, the paper's
    worked example, then the blocksize effect (if it was measured).

    Parameters
    ----------
    res : LossAnalysis
        The result of :func:`~st_tools.dataloss.analysis.analyse`.
    console : rich.console.Console, optional
        Where to print; default a console at least 120 columns wide when
        the output is not a terminal.
    """
    from rich import box
    from rich.table import Table

    if console is None:
        console = _console(120)
    b, b2 = res.blocksize, res.compare_blocksize
    console.print(
        f"seed {res.seed}: N={res.peers} peers, R={res.records} records per trial, "
        f"{res.trials} trials, blocksize {b} (rerun with --seed {res.seed})"
    )
    t = Table(
        title=f"Fraction of records unavailable with G of N={res.peers} peers failed (blocksize {b})",
        box=box.SIMPLE_HEAD,
    )
    for name in ("class", "G", "measured", "std/trial", "exact", "z", "paper", "paper/exact", "(G/N)^F"):
        t.add_column(name, justify="right")
    prev = None
    for r in res.rows:
        if prev is not None and r.copies != prev:
            t.add_section()
        prev = r.copies
        ratio = f"{r.paper / r.exact:.3f}" if r.exact > 0 else "-"
        t.add_row(
            f"x{r.copies}",
            str(r.failed),
            _pct(r.measured.mean),
            _pct(r.measured.std),
            _pct(r.exact),
            f"{r.measured.z:+.2f}",
            _pct(r.paper),
            ratio,
            _pct(r.paper_limit),
        )
    console.print(t)
    ex = res.paper_example
    console.print(
        f"Paper's worked example (N={ex.peers}, x{ex.copies}, G={ex.failed}): "
        f"1/100*1/99 = {_pct(ex.value)}; exact = {_pct(ex.exact)} "
        f"(x{ex.exact / ex.value:.2f}); paper's formula = {_pct(ex.paper_formula)}."
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
        for r in res.rows:
            if r.exact == 0:
                continue
            if prev is not None and r.copies != prev:
                t2.add_section()
            prev = r.copies
            cmp = _compare(r)
            s1, s2 = r.measured.std, cmp.std
            t2.add_row(
                f"x{r.copies}",
                str(r.failed),
                _pct(r.exact),
                _pct(r.measured.mean),
                _pct(cmp.mean),
                _pct(s1),
                _pct(s2),
                f"{s1 / s2:.2f}" if s2 > 0 else "-",
                f"{r.measured.theory_std / cmp.theory_std:.2f}",
            )
        console.print(t2)
    console.print(f"elapsed {res.elapsed_s:.1f} s")


def plot(res: LossAnalysis, path: str | Path) -> None:
    """Write the figure: fraction unavailable vs G (log y) with the measured
    means +- std over trials, the exact and the paper curves per class; and
    the spread across trials for both blocksizes with its theory.

    Parameters
    ----------
    res : LossAnalysis
        The result of :func:`~st_tools.dataloss.analysis.analyse`.
    path : str or Path
        PNG to write (parent directories are created).

    Raises
    ------
    RuntimeError
        If matplotlib is not installed.
    """
    plt = pyplot()
    from matplotlib.lines import Line2D

    b, b2 = res.blocksize, res.compare_blocksize
    fig, axes = plt.subplots(1, 2 if b2 else 1, figsize=(12 if b2 else 7, 5), squeeze=False)
    ax = axes[0][0]
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    handles: list[Any] = []
    for ci, f in enumerate(res.classes):
        c = colours[ci % len(colours)]
        rows = [r for r in res.rows if r.copies == f and r.failed >= 1]
        g = np.array([r.failed for r in rows])
        exact = np.array([r.exact for r in rows])
        paper = np.array([r.paper for r in rows])
        mean = np.array([r.measured.mean for r in rows])
        std = np.array([r.measured.std for r in rows])
        pos = exact > 0
        ax.plot(g[pos], exact[pos], "-", color=c)
        ax.plot(g[pos], paper[pos], "--", color=c, alpha=0.8)
        m = mean > 0
        lower = np.minimum(std[m], mean[m] * (1 - 1e-9))  # mean - std <= 0 runs off the axis
        ax.errorbar(g[m], mean[m], yerr=[lower, std[m]], fmt="o", color=c, capsize=3, ms=4)
        handles.append(Line2D([], [], color=c, lw=6, label=f"x{f}"))
    ex = res.paper_example
    if ex.peers == res.peers and ex.copies in res.classes:
        ax.plot([ex.failed], [ex.value], "k*", ms=10)
        handles.append(Line2D([], [], color="k", marker="*", ls="", ms=10, label="paper's example 1/100\u00b71/99"))
    ax.set_yscale("log")
    floor = min([r.exact for r in res.rows if r.exact > 0], default=None)
    if floor is not None:
        ax.set_ylim(bottom=floor / 20)  # error bars reaching mean - std <= 0 run off the bottom
    ax.set_xlabel("G, failed peers")
    ax.set_ylabel("fraction of records unavailable")
    ax.set_title(f"N={res.peers} peers, R={res.records} records, {res.trials} trials, blocksize {b}")
    ax.grid(True, which="both", alpha=0.3)
    handles[len(res.classes) : len(res.classes)] = [
        Line2D([], [], color="k", marker="o", ms=4, ls="", label="measured, \u00b1 std over trials"),
        Line2D([], [], color="k", ls="-", label="exact C(G,F)/C(N,F)"),
        Line2D([], [], color="k", ls="--", label="paper \u220f G/(N-i), F factors"),
    ]
    ax.legend(handles=handles, fontsize=7, loc="lower right", ncol=2)
    if b2:
        ax = axes[0][1]
        for ci, f in enumerate(res.classes):
            c = colours[ci % len(colours)]
            rows = [r for r in res.rows if r.copies == f and r.exact > 0]
            g = np.array([r.failed for r in rows])
            for bb, mk, ls in ((b, "o", "-"), (b2, "s", ":")):
                ms = [r.measured if bb == b else _compare(r) for r in rows]
                sd = np.array([m.std for m in ms])
                th = np.array([m.theory_std for m in ms])
                ax.plot(g, th, ls, color=c, alpha=0.7)
                m = sd > 0
                ax.plot(g[m], sd[m], mk, color=c, mfc=c if bb == b else "none", ms=5, label=f"x{f} blocksize {bb}")
        ax.set_yscale("log")
        ax.set_xlabel("G, failed peers")
        ax.set_ylabel("std of the fraction across trials")
        ax.set_title(f"Spread across trials, blocksize {b} vs {b2} (lines: theory)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    save_figure(fig, path)


def _compare(r: LossRow) -> Measured:
    """The row's measurement with the second blocksize (the report asks for
    it only when the analysis made one)."""
    assert r.compare is not None, "no second blocksize measured"
    return r.compare

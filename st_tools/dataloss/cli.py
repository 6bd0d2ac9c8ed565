"""``python -m st_tools.dataloss``: the data-loss analysis' command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from st_py.core.placement import DEFAULT_BLOCKSIZE
from st_tools.dataloss.analysis import DomainAnalysis, LossAnalysis, analyse, analyse_domains
from st_tools.dataloss.report import plot, plot_domains, print_domain_report, print_report
from st_tools.reporting import comma_ints, write_json


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
    classes = comma_ints(ap, "--classes", a.classes)
    res: LossAnalysis | DomainAnalysis
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
    if isinstance(res, DomainAnalysis):
        print_domain_report(res)
        if a.plot:
            plot_domains(res, a.plot)
    else:
        print_report(res)
        if a.plot:
            plot(res, a.plot)
    if a.plot:
        print(f"wrote {a.plot}")
    if a.json:
        write_json(res.to_dict(), a.json)
        print(f"wrote {a.json}")
    return 0

"""``python -m st_tools.reliability``: the reliability model's command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from st_py.core.placement import DEFAULT_BLOCKSIZE
from st_tools.reliability.analysis import analyse
from st_tools.reliability.model import DEFAULT_RECORDS, HOURS_PER_YEAR, REPAIR_MODES
from st_tools.reliability.report import plot, print_report
from st_tools.reliability.simulation import SIM_REPAIRS
from st_tools.reporting import comma_ints, write_json


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
    classes = comma_ints(ap, "--copies", a.copies)
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
        write_json(res.to_dict(), a.json)
        print(f"wrote {a.json}")
    return 0

"""Tests of the data-loss analysis tool (paper 4.2, st_tools/dataloss.py).

The statistical tests use fixed seeds and tolerances derived from the
sampling distribution, not magic numbers: within a trial each block is lost
independently with probability p, so the mean over T trials of the
unavailable fraction has standard deviation ``trial_std(p, R, b) / sqrt(T)``
and we accept ``Z`` of those (Z = 4: two-sided false-alarm rate 6e-5 per
comparison, < 1e-3 over all comparisons of this file).
"""

from __future__ import annotations

import itertools
import json
import math
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from st_tools import dataloss as dl

Z = 4.0
ROOT = Path(__file__).resolve().parents[1]

N, R, T, B = 30, 32_000, 20, 16  # 2000 blocks per trial, 40k choose_holders calls per class


def _tolerance(p: float, records: int = R, trials: int = T, blocksize: int = B) -> float:
    return Z * dl.trial_std(p, records, blocksize) / math.sqrt(trials)


@pytest.fixture(scope="module")
def runs() -> dict[int, tuple[list[int], np.ndarray]]:
    gs = [0, 1, 2, 3, 4, 6, 10]
    return {f: (gs, dl.simulate(N, f, R, gs, T, B, seed=f"test:{f}")) for f in (1, 2, 3)}


# -- formulas ---------------------------------------------------------------------


def test_exact_formula_matches_enumeration():
    # brute force: fraction of F-subsets of N peers that lie inside a G-set
    for n, f, g in [(7, 2, 3), (8, 3, 5), (6, 1, 2), (6, 3, 3), (9, 2, 9)]:
        failed = set(range(g))
        subsets = list(itertools.combinations(range(n), f))
        brute = sum(set(s) <= failed for s in subsets) / len(subsets)
        assert dl.exact_unavailable(n, f, g) == pytest.approx(brute, rel=1e-12)


def test_paper_example_is_off_by_a_factor_two():
    # paper 4.2: N=100, x2, two failed peers: "1/100 * 1/99 = .0101%"
    assert dl.PAPER_EXAMPLE["value"] == pytest.approx(1 / 9900)
    assert dl.exact_unavailable(100, 2, 2) == pytest.approx(2 / 9900)
    # the general formula as printed (F factors) gives twice the exact value instead
    assert dl.paper_formula(100, 2, 2) == pytest.approx(4 / 9900)
    assert dl.paper_limit(100, 2, 2) == pytest.approx(4e-4)


def test_paper_formula_is_an_upper_bound():
    for n in (10, 100):
        for f in (1, 2, 3):
            for g in range(f, n + 1):
                exact = dl.exact_unavailable(n, f, g)
                assert exact <= dl.paper_limit(n, f, g) * (1 + 1e-12)
                assert dl.paper_limit(n, f, g) <= dl.paper_formula(n, f, g) * (1 + 1e-12)
                # ratio paper/exact = G^F / (G (G-1) ... (G-F+1))
                falling = math.prod(g - i for i in range(f))
                assert dl.paper_formula(n, f, g) / exact == pytest.approx(g**f / falling)


# -- measurements with the real placement code ------------------------------------


def test_uses_real_placement_code(placement_calls):
    dl.simulate(10, 2, 100, [2], trials=3, blocksize=16, seed=1)
    assert placement_calls == {"choose_holders": 3 * math.ceil(100 / 16), "schedule": 3}


def test_blocks_share_holders_and_holders_are_distinct():
    holders, weights = dl.place_records(list(range(20)), 3, 1000, 16, random.Random(5))
    assert holders.shape == (63, 3) and weights.sum() == 1000 and weights[-1] == 1000 - 62 * 16
    assert all(len(set(row)) == 3 for row in holders.tolist())


@pytest.mark.parametrize("f,g", [(2, 2), (2, 3), (2, 6), (2, 10), (3, 4), (3, 6), (3, 10)])
def test_measured_mean_matches_exact_formula(runs, f, g):
    gs, frac = runs[f]
    mean, p = frac[gs.index(g)].mean(), dl.exact_unavailable(N, f, g)
    assert abs(mean - p) <= _tolerance(p), (mean, p, _tolerance(p))


@pytest.mark.parametrize("f,g", [(2, 2), (3, 3)])
def test_measured_mean_rejects_paper_formula(runs, f, g):
    # at G = F the paper's formula is F^F/F! times the exact value (2x for x2, 4.5x for x3)
    gs, frac = runs[f]
    mean, paper = frac[gs.index(g)].mean(), dl.paper_formula(N, f, g)
    assert abs(mean - paper) > _tolerance(paper), (mean, paper)


@pytest.mark.parametrize("g", [1, 3, 6, 10])
def test_x1_loses_g_over_n(runs, g):
    gs, frac = runs[1]
    assert dl.exact_unavailable(N, 1, g) == g / N
    assert abs(frac[gs.index(g)].mean() - g / N) <= _tolerance(g / N)


@pytest.mark.parametrize("f", [1, 2, 3])
def test_no_loss_while_fewer_than_f_peers_failed(runs, f):
    gs, frac = runs[f]
    for g in gs:
        if g < f:
            assert dl.exact_unavailable(N, f, g) == 0.0
            assert np.all(frac[gs.index(g)] == 0.0), (f, g)


def test_correlated_failures_give_the_same_mean():
    # paper 4.2: "does not require the failures to be independent": fail the same
    # four adjacent peers (one "rack") in every trial
    rng, out = random.Random(11), []
    for _ in range(T):
        holders, w = dl.place_records(list(range(N)), 2, R, B, rng)
        out.append(dl.unavailable_fraction(holders, w, [0, 1, 2, 3], N))
    p = dl.exact_unavailable(N, 2, 4)
    assert abs(np.mean(out) - p) <= _tolerance(p)


def _chi2_quantile(k: int, z: float) -> float:
    """Wilson-Hilferty approximation of the chi-square(k) quantile at normal z."""
    return k * (1 - 2 / (9 * k) + z * math.sqrt(2 / (9 * k))) ** 3


def test_blocks_widen_the_spread_not_the_mean():
    # x2, G=10 of 30: p = 0.103. (T-1) s^2 / sigma^2 ~ chi2(T-1) for each blocksize.
    f, g, records, trials = 2, 10, 8000, 20
    p = dl.exact_unavailable(N, f, g)
    lo, hi = _chi2_quantile(trials - 1, -Z), _chi2_quantile(trials - 1, Z)
    stds = {}
    for b in (1, 16):
        frac = dl.simulate(N, f, records, [g], trials, b, seed=f"spread:{b}")[0]
        sigma = dl.trial_std(p, records, b)
        assert abs(frac.mean() - p) <= Z * sigma / math.sqrt(trials)
        ratio = (trials - 1) * frac.var(ddof=1) / sigma**2
        assert lo <= ratio <= hi, (b, frac.std(ddof=1), sigma)
        stds[b] = frac.std(ddof=1)
    assert dl.trial_std(p, records, 16) / dl.trial_std(p, records, 1) == pytest.approx(4.0)
    assert stds[16] > stds[1]


# -- argument checking and the CLI --------------------------------------------------


@pytest.mark.parametrize(
    "n,f,g,msg",
    [(10, 2, 11, "G > N"), (3, 4, 1, "F > N"), (10, 0, 1, "F"), (10, 2, -1, "G must be >= 0"), (0, 1, 0, "N must be")],
)
def test_formulas_refuse_bad_arguments(n, f, g, msg):
    with pytest.raises(ValueError, match=msg):
        dl.exact_unavailable(n, f, g)
    with pytest.raises(ValueError, match=msg):
        dl.paper_formula(n, f, g)


def test_simulate_and_analyse_refuse_bad_arguments():
    with pytest.raises(ValueError, match="G > N"):
        dl.simulate(10, 2, 100, [2, 11], 2, 16, seed=1)
    with pytest.raises(ValueError, match="F > N"):
        dl.simulate(3, 4, 100, [1], 2, 16, seed=1)
    with pytest.raises(ValueError, match="blocksize"):
        dl.simulate(10, 2, 100, [1], 2, 0, seed=1)
    with pytest.raises(ValueError, match="F > N"):
        dl.analyse(peers=5, records=100, trials=2, classes=(1, 6), max_failed=3)
    with pytest.raises(ValueError, match="trials"):
        dl.analyse(peers=5, records=100, trials=1)


@pytest.mark.parametrize(
    "argv,msg", [(["--peers", "5", "--max-failed", "6"], "G > N"), (["--peers", "5", "--classes", "1,6"], "F > N")]
)
def test_cli_refuses_bad_arguments(capsys, argv, msg):
    assert dl.main(argv + ["--records", "50", "--trials", "2"]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and msg in err


def test_same_seed_same_results():
    a = dl.analyse(peers=12, records=500, trials=3, seed=42, max_failed=4, compare_blocksize=0)
    b = dl.analyse(peers=12, records=500, trials=3, seed=42, max_failed=4, compare_blocksize=0)
    assert [r["fractions"] for r in a["rows"]] == [r["fractions"] for r in b["rows"]]


def test_cli_end_to_end(tmp_path):
    png, js = tmp_path / "plot" / "dl.png", tmp_path / "dl.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "st_tools.dataloss",
            "--peers",
            "12",
            "--records",
            "800",
            "--trials",
            "3",
            "--seed",
            "7",
            "--max-failed",
            "4",
            "--plot",
            str(png),
            "--json",
            str(js),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "seed 7" in proc.stdout and "x3" in proc.stdout and "blocksize 16 vs 1" in proc.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    res = json.loads(js.read_text())
    assert res["seed"] == 7 and res["blocksize"] == 16 and res["compare_blocksize"] == 1
    assert len(res["rows"]) == 3 * 5
    for r in res["rows"]:
        assert r["exact"] == pytest.approx(dl.exact_unavailable(12, r["copies"], r["failed"]))
        assert len(r["fractions"]) == 3 and len(r["fractions_b1"]) == 3
        if r["failed"] < r["copies"]:
            assert r["measured_mean"] == 0.0 and r["measured_mean_b1"] == 0.0

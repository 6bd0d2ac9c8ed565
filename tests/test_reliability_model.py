"""Tests of the Markov reliability model (CEFT section 6, st_tools/reliability.py).

Closed forms for tiny chains, cross-checks of the two numerical methods
against a dense solve and a brute-force enumeration, monotonicity, the
model against the Monte-Carlo simulation with the real placement code, and
argument errors.

The statistical comparisons use fixed seeds and accept Z = 4 standard errors
(two-sided false-alarm rate 6e-5 per comparison), as tests/test_dataloss.py
does; each one is paired with a check that the same simulated data reject a
wrong model, so the comparison can fail.
"""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from st_tools import reliability as rl

Z = 4.0


def _dense_mttdl(ch: rl.Chain) -> float:
    """MTTDL by a dense solve of -Q_T tau = 1 (the textbook method)."""
    q = np.diag(ch.up[:-1], 1) + np.diag(ch.down[1:], -1) - np.diag(ch.up + ch.down + ch.loss)
    return float(np.linalg.solve(-q, np.ones(len(ch.up)))[0])


def _dense_loss(ch: rl.Chain, t: float) -> float:
    """P(loss by t) = 1 - row 0 of exp(Q_T t) summed, by eigen-decomposition (small chains only)."""
    q = np.diag(ch.up[:-1], 1) + np.diag(ch.down[1:], -1) - np.diag(ch.up + ch.down + ch.loss)
    w, v = np.linalg.eig(q)
    surv = (v @ np.diag(np.exp(w * t)) @ np.linalg.solve(v, np.ones(len(w))))[0]
    return float(1.0 - surv.real)


# -- closed forms -----------------------------------------------------------------


@pytest.mark.parametrize("peers,lam,mu", [(1, 0.5, 0.0), (8, 0.01, 0.1), (100, 1 / 43830, 1 / 24)])
def test_x1_every_failure_loses_data(peers, lam, mu):
    """x1 with many records: every peer holds a block, so the first failure
    loses data: ``1 - s(1) = 1 - (1 - 1/N)^B = 1`` to double precision, the
    chain is one exponential step of rate N lambda, MTTDL = 1/(N lambda)
    whatever the repair rate, and P(loss by t) = 1 - exp(-N lambda t)."""
    records = 1_000_000  # B = 62,500 blocks: (1 - 1/N)^B underflows
    assert rl.build_chain(peers, 1, lam, mu, records).branch[0] == 1.0
    assert rl.mttdl_hours(peers, 1, lam, mu, records) == pytest.approx(1 / (peers * lam), rel=1e-12)
    t = np.array([0.0, 0.1, 1.0, 5.0]) / (peers * lam)
    p = rl.loss_probability(peers, 1, lam, mu, t, records)
    np.testing.assert_allclose(p, -np.expm1(-peers * lam * t), rtol=1e-10, atol=0)


@pytest.mark.parametrize("lam,mu", [(0.01, 0.5), (1e-4, 1.0), (1 / 43830, 1 / 24), (0.3, 0.0)])
@pytest.mark.parametrize("repair", rl.REPAIR_MODES)
def test_x2_on_two_peers_is_the_textbook_mirror(lam, mu, repair):
    """N = 2, x2: the classic RAID-1 chain, MTTDL = (3 lambda + mu) / (2 lambda^2).

    With two peers every block is on both, ``1 - s(2) = 1 - (1 - 1/C(2,2))^B
    = 1``, so the states are k = 0 (both up), k = 1 (one failed) and DL:

    * k = 0: a failure, rate 2 lambda, to k = 1 (``s(1) = 1``: no loss yet);
    * k = 1: the other peer fails, rate lambda, to DL; the repair, rate mu
      (``1 * mu`` per failed peer, or ``mu`` of the single repair process --
      the same with one peer down), back to k = 0.

    The expected absorption times satisfy ``tau_0 = 1/(2 lambda) + tau_1``
    and ``tau_1 = 1/(lambda + mu) + mu/(lambda + mu) tau_0``. Substituting,
    ``tau_0 lambda/(lambda + mu) = 1/(2 lambda) + 1/(lambda + mu)``, so
    ``tau_0 = (lambda + mu)/(2 lambda^2) + 1/lambda = (3 lambda + mu)/(2 lambda^2)``.

    The survival is ``A e^(r1 t) + B e^(r2 t)`` with r1, r2 the roots of
    ``det(sI - Q_T) = (s + 2 lambda)(s + lambda + mu) - 2 lambda mu
    = s^2 + (3 lambda + mu) s + 2 lambda^2``, ``A + B = 1`` and
    ``A r1 + B r2 = 0`` (no loss directly from k = 0).
    """
    assert rl.mttdl_hours(2, 2, lam, mu, records=10, repair=repair) == pytest.approx(
        (3 * lam + mu) / (2 * lam**2), rel=1e-12
    )
    b = 3 * lam + mu
    r2 = (-b - math.sqrt(b * b - 8 * lam * lam)) / 2
    r1 = 2 * lam * lam / r2  # r1 r2 = 2 lambda^2; (-b + disc)/2 would cancel
    a_, b_ = r2 / (r2 - r1), -r1 / (r2 - r1)
    for t in (0.01 / lam, 0.5 / lam, 3 / lam, 30 / lam):
        exact = 1 - (a_ * math.exp(r1 * t) + b_ * math.exp(r2 * t))
        assert rl.loss_probability(2, 2, lam, mu, t, records=10, repair=repair) == pytest.approx(exact, rel=1e-9)


def test_required_repair_rate_inverts_the_mirror_formula():
    """N = 2, x2: solving (3 lambda + mu)/(2 lambda^2) = T gives mu = 2 lambda^2 T - 3 lambda."""
    lam = 1 / (5 * rl.HOURS_PER_YEAR)
    for years in (10, 1e3, 1e6):
        target = years * rl.HOURS_PER_YEAR
        mu = rl.required_repair_rate(2, 2, lam, target, records=10)
        assert mu == pytest.approx(2 * lam**2 * target - 3 * lam, rel=1e-5)
    # 2.5 years is met without any repair: MTTDL(mu = 0) = 3/(2 lambda) = 7.5 years
    assert rl.required_repair_rate(2, 2, lam, 2.5 * rl.HOURS_PER_YEAR, records=10) == 0.0


def test_first_loss_branch_is_the_issue_formula():
    """The branch from F-1 failed peers to DL is ``1 - (1 - 1/C(N,F))^B``,
    B = ceil(R / blocksize); before it no state can lose data."""
    for n, f, r, b in [(8, 2, 1000, 16), (20, 3, 5000, 16), (100, 3, 100_000, 16), (12, 2, 17, 16)]:
        ch = rl.build_chain(n, f, 0.01, 0.1, r, b)
        blocks = math.ceil(r / b)
        assert ch.blocks == blocks
        assert ch.branch[f - 1] == pytest.approx(1 - (1 - 1 / math.comb(n, f)) ** blocks, rel=1e-12)
        assert np.all(ch.loss[: f - 1] == 0) and ch.branch[n - 1] == 1.0
        assert np.all(ch.up + ch.loss == pytest.approx((n - np.arange(n)) * 0.01))


def test_safety_probability_matches_enumeration():
    """s(k) = P(no block inside a k-set of failed peers), by enumerating every
    placement of B blocks on uniform F-subsets and every k-subset."""
    for n, f, blocks in [(5, 2, 3), (6, 3, 2), (5, 1, 2)]:
        subsets = list(itertools.combinations(range(n), f))
        logs = rl.log_safety(n, f, blocks)
        for k in range(n + 1):
            fails = list(itertools.combinations(range(n), k))
            safe = sum(
                all(not set(s) <= set(c) for s in placement)
                for placement in itertools.product(subsets, repeat=blocks)
                for c in fails
            )
            total = len(subsets) ** blocks * len(fails)
            assert math.exp(logs[k]) == pytest.approx(safe / total, rel=1e-12, abs=1e-300)


def test_without_repair_the_chain_is_a_pure_death_process():
    """mu = 0: MTTDL = sum_k (prod_(j<k) r_j) / ((N-k) lambda), the time spent
    in each state k weighted by the probability of reaching it safely."""
    n, f, lam, r = 10, 3, 0.02, 300
    ch = rl.build_chain(n, f, lam, 0.0, r)
    reach = np.concatenate([[1.0], np.cumprod(1 - ch.branch)[:-1]])
    assert rl.mttdl_hours(n, f, lam, 0.0, r) == pytest.approx(
        float(np.sum(reach / ((n - np.arange(n)) * lam))), rel=1e-12
    )


# -- the numerics against dense linear algebra ------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        (10, 2, 0.01, 0.1, 2000),
        (12, 3, 0.01, 1.0, 300),
        (20, 3, 0.001, 1.0, 500),
        (100, 3, 1 / 43830, 1 / 24, 100_000),
        (9, 4, 0.05, 0.2, 800),
    ],
)
@pytest.mark.parametrize("repair", rl.REPAIR_MODES)
def test_mttdl_elimination_matches_a_dense_solve(args, repair):
    ch = rl.build_chain(*args, repair=repair)
    assert rl.mttdl_hours(*args, repair=repair) == pytest.approx(_dense_mttdl(ch), rel=1e-8)


@pytest.mark.parametrize("args", [(10, 2, 0.01, 0.1, 2000), (12, 3, 0.01, 1.0, 300), (8, 2, 0.05, 0.0, 100)])
def test_loss_probability_matches_eigen_decomposition(args):
    n, f, lam, mu, r = args
    ch = rl.build_chain(*args)
    m = rl.mttdl_hours(*args)
    for t in (m / 100, m / 3, m, 3 * m):
        assert rl.loss_probability(n, f, lam, mu, t, r) == pytest.approx(_dense_loss(ch, t), rel=1e-7)


def test_loss_probability_keeps_relative_precision_when_tiny():
    """For t -> 0 a loss needs F failures in a row: P(t) ~ t^F/F! prod_(k<F) a_k...
    for x2, P(t) ~ N lambda (N-1) lambda (1 - s(2)) t^2 / 2; at P ~ 1e-14 the
    relative error must still be ~t, which 1 - survival cannot give."""
    n, lam, mu, r = 100, 1 / 43830, 1 / 24, 100_000
    ch = rl.build_chain(n, 2, lam, mu, r)
    for t in (1e-3, 1e-4):
        lead = n * lam * (n - 1) * lam * ch.branch[1] * t * t / 2
        p = rl.loss_probability(n, 2, lam, mu, t, r)
        assert lead < 1e-11 and p == pytest.approx(lead, rel=1e-3)


def test_loss_probability_approaches_the_exponential_law():
    """When repairs are much faster than failures the loss time is nearly
    exponential: P(t) ~ 1 - exp(-t / MTTDL) for t >> the repair time."""
    args = (100, 3, 1 / 43830, 1 / 24, 100_000)
    m = rl.mttdl_hours(*args)
    ts = np.array([0.01, 0.3, 1.0, 3.0]) * m
    np.testing.assert_allclose(rl.loss_probability(*args[:4], ts, args[4]), -np.expm1(-ts / m), rtol=1e-3)


# -- monotonicity -------------------------------------------------------------------


def test_more_repair_more_copies_fewer_failures_give_a_larger_mttdl():
    n, lam, r = 20, 0.01, 2000
    for repair in rl.REPAIR_MODES:
        for f in (2, 3, 4):
            ms = [rl.mttdl_hours(n, f, lam, mu, r, repair=repair) for mu in (0.0, 0.01, 0.1, 1.0, 10.0)]
            assert all(a < b for a, b in zip(ms, ms[1:])), (f, ms)
        for mu in (0.0, 0.1, 1.0):
            ms = [rl.mttdl_hours(n, f, lam, mu, r, repair=repair) for f in (1, 2, 3, 4)]
            assert all(a < b for a, b in zip(ms, ms[1:])), (mu, ms)
            ms = [rl.mttdl_hours(n, 3, la, mu, r, repair=repair) for la in (0.001, 0.01, 0.1)]
            assert all(a > b for a, b in zip(ms, ms[1:])), (mu, ms)
    # parallel repair (k mu) is at least as fast as one repair process (mu)
    assert rl.mttdl_hours(n, 3, lam, 1.0, r, repair="parallel") > rl.mttdl_hours(n, 3, lam, 1.0, r, repair="serial")


def test_loss_probability_grows_with_time_and_falls_with_repair():
    ts = np.geomspace(0.1, 1e5, 25)
    p = rl.loss_probability(12, 3, 0.01, 1.0, ts, 2000)
    assert np.all(np.diff(p) > 0) and 0 < p[0] < p[-1] <= 1
    assert rl.loss_probability(12, 3, 0.01, 2.0, 100.0, 2000) < rl.loss_probability(12, 3, 0.01, 1.0, 100.0, 2000)


def test_required_repair_rate_reaches_the_target():
    n, lam = 100, 1 / (5 * rl.HOURS_PER_YEAR)
    target = 1e6 * rl.HOURS_PER_YEAR
    for f, repair in [(2, "parallel"), (3, "parallel"), (3, "serial"), (4, "parallel")]:
        mu = rl.required_repair_rate(n, f, lam, target, repair=repair)
        assert rl.mttdl_hours(n, f, lam, mu, repair=repair) >= target
        assert rl.mttdl_hours(n, f, lam, mu * (1 - 1e-5), repair=repair) < target
    # x3 needs a faster repair when failed peers wait for one repair process
    assert rl.required_repair_rate(n, 3, lam, target, repair="serial") > rl.required_repair_rate(
        n, 3, lam, target, repair="parallel"
    )
    # x1 cannot reach it: with instant repair the first failure still loses data
    with pytest.raises(ValueError, match="no repair rate gives class x1"):
        rl.required_repair_rate(n, 1, lam, target)


# -- the model against the simulation with the real placement code ---------------------


def test_simulation_uses_the_real_placement_code(placement_calls):
    sim = rl.simulate(10, 2, 0.01, 0.1, runs=4, records=100, seed=3)
    assert placement_calls == {"choose_holders": 4 * math.ceil(100 / 16), "schedule": 4}
    assert sim.loss_hours.shape == (4,) and np.all(sim.loss_hours > 0) and np.all(sim.events >= 2)


def test_same_seed_same_simulation():
    a = rl.simulate(10, 2, 0.01, 0.5, runs=20, records=200, seed=11)
    b = rl.simulate(10, 2, 0.01, 0.5, runs=20, records=200, seed=11)
    c = rl.simulate(10, 2, 0.01, 0.5, runs=20, records=200, seed=12)
    assert np.array_equal(a.loss_hours, b.loss_hours) and not np.array_equal(a.loss_hours, c.loss_hours)


def _agree(sim: rl.SimResult, peers, copies, lam, mu, records, repair="parallel") -> tuple[float, float]:
    """z of the simulated MTTDL and of P(loss by MTTDL) against the model."""
    m = rl.mttdl_hours(peers, copies, lam, mu, records, repair=repair)
    s = rl.summarize(sim, m)
    p = rl.loss_probability(peers, copies, lam, mu, m, records, repair=repair)
    return (s["mttdl_hours"] - m) / s["mttdl_se"], (s["p_loss"] - p) / math.sqrt(p * (1 - p) / s["runs"])


@pytest.mark.parametrize(
    "peers,copies,mu,records,runs,repair",
    [
        (10, 2, 1.0, 200, 2000, "parallel"),  # 1 - s(2) = 0.25: most 2-failure states are safe
        (12, 3, 1.0, 2000, 700, "parallel"),  # 1 - s(3) = 0.43, ~900 events per run
        (12, 3, 1.0, 2000, 700, "serial"),
        (8, 2, 1.0, 16, 600, "parallel"),  # one block: the chain's memoryless safety is the roughest here
    ],
)
def test_model_agrees_with_simulation(peers, copies, mu, records, runs, repair):
    lam = 0.01
    sim = rl.simulate(peers, copies, lam, mu, runs, records, repair=repair, seed=f"test:{peers}:{copies}:{repair}")
    z_m, z_p = _agree(sim, peers, copies, lam, mu, records, repair)
    assert abs(z_m) < Z and abs(z_p) < Z, (z_m, z_p)
    # the same data reject the chain that ignores placement (every F-set of failed peers loses data)
    z_m, z_p = _agree(sim, peers, copies, lam, mu, 10**9, repair)
    assert abs(z_m) > Z, z_m


def test_rebalance_respreading_beats_the_model():
    """StoreTorrent's rebalance moves a failed peer's copies to random spares
    and the replacement peer starts empty, so data concentrates on older
    peers; fewer peers whose failure matters lengthen the time to loss, and
    the symmetric chain is conservative (docs/reliability.md)."""
    peers, copies, lam, mu, records = 10, 2, 0.01, 1.0, 200
    sim = rl.simulate(peers, copies, lam, mu, 2000, records, sim_repair="respread", seed="test:respread")
    z_m, _ = _agree(sim, peers, copies, lam, mu, records)
    assert z_m > Z, z_m


def test_simulation_refuses_a_run_without_loss():
    with pytest.raises(RuntimeError, match="no data loss within 50 events"):
        rl.simulate(10, 3, 0.01, 100.0, runs=1, records=200, seed=1, max_events=50)


# -- CLI and arguments ------------------------------------------------------------------


def test_cli_end_to_end(tmp_path, capsys):
    png, js = tmp_path / "plot" / "m.png", tmp_path / "m.json"
    assert (
        rl.main(
            [
                "--peers",
                "10",
                "--copies",
                "1,2",
                "--fail-rate",
                "0.01",
                "--repair-hours",
                "2",
                "--records",
                "400",
                "--mission-hours",
                "50",
                "--simulate",
                "60",
                "--seed",
                "7",
                "--target-mttdl-years",
                "0.01",
                "--plot",
                str(png),
                "--json",
                str(js),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "seed 7" in out and "x2" in out and "MTTDL (years)" in out and "unreachable" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    res = json.loads(js.read_text())
    assert res["seed"] == 7 and res["repair_rate_per_h"] == 0.5 and len(res["rows"]) == 2
    x2 = res["rows"][1]
    assert x2["mttdl_hours"] == pytest.approx(rl.mttdl_hours(10, 2, 0.01, 0.5, 400))
    assert x2["p_loss"] == pytest.approx(rl.loss_probability(10, 2, 0.01, 0.5, 50.0, 400))
    assert x2["sim"]["runs"] == 60 and len(x2["loss_hours"]) == 60 and len(x2["curve"]["sim_ci"]) == 10
    assert rl.mttdl_hours(10, 2, 0.01, x2["required_repair_rate"], 400) >= 0.01 * rl.HOURS_PER_YEAR


@pytest.mark.parametrize(
    "kwargs,msg",
    [
        ({"peers": 0}, "peers (N) must be >= 1"),
        ({"peers": 4.0}, "peers (N) must be an integer"),
        ({"peers": True}, "peers (N) must be an integer"),
        ({"copies": 0}, "copies (F, class xF) must be >= 1"),
        ({"copies": 6}, "class x6 needs 6 distinct peers"),
        ({"fail_rate_per_h": 0.0}, "fail_rate_per_h (lambda) must be a finite number > 0"),
        ({"fail_rate_per_h": math.nan}, "fail_rate_per_h (lambda) must be a finite number > 0"),
        ({"repair_rate_per_h": -1.0}, "repair_rate_per_h (mu) must be a finite number >= 0"),
        ({"repair_rate_per_h": math.inf}, "repair_rate_per_h (mu) must be a finite number >= 0"),
        ({"records": 0}, "records (R) must be >= 1"),
        ({"blocksize": 0}, "blocksize must be >= 1"),
        ({"repair": "fifo"}, "repair must be one of parallel, serial"),
    ],
)
def test_bad_arguments_raise_value_error(kwargs, msg):
    args = {
        "peers": 5,
        "copies": 2,
        "fail_rate_per_h": 0.01,
        "repair_rate_per_h": 0.1,
        "records": 100,
        "blocksize": 16,
        "repair": "parallel",
    } | kwargs
    for fn in (rl.mttdl_hours, rl.build_chain):
        with pytest.raises(ValueError, match=msg.replace("(", r"\(").replace(")", r"\)")):
            fn(**args)
    with pytest.raises(ValueError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        rl.loss_probability(mission_hours=10.0, **args)


def test_bad_mission_target_and_simulation_arguments():
    for t in (-1.0, math.nan, math.inf, [[1.0]]):
        with pytest.raises(ValueError, match="mission_hours must be finite and >= 0"):
            rl.loss_probability(5, 2, 0.01, 0.1, t, 100)
    with pytest.raises(ValueError, match="target_mttdl_hours must be a finite number > 0"):
        rl.required_repair_rate(5, 2, 0.01, 0.0, 100)
    with pytest.raises(ValueError, match="runs must be >= 1"):
        rl.simulate(5, 2, 0.01, 0.1, 0, 100)
    with pytest.raises(ValueError, match="sim_repair must be one of rebuild, respread"):
        rl.simulate(5, 2, 0.01, 0.1, 2, 100, sim_repair="magic")
    with pytest.raises(ValueError, match="simulate_runs must be 0 or >= 2"):
        rl.analyse(5, [2], 0.01, 0.1, 10.0, 100, simulate_runs=1)
    with pytest.raises(ValueError, match="no replication class given"):
        rl.analyse(5, [], 0.01, 0.1, 10.0, 100)


@pytest.mark.parametrize(
    "argv,msg",
    [
        (["--peers", "3", "--copies", "4"], "class x4 needs 4 distinct peers"),
        (["--fail-rate", "-1"], "fail_rate_per_h (lambda) must be a finite number > 0"),
        (["--records", "0"], "records (R) must be >= 1"),
    ],
)
def test_cli_refuses_bad_arguments(capsys, argv, msg):
    assert rl.main(argv) == 2
    err = capsys.readouterr().err
    assert "error:" in err and msg in err


def test_wilson_interval():
    lo, hi = rl.wilson(0, 100)
    assert lo == 0 and 0.03 < hi < 0.04  # the rule of three: ~3/n
    lo, hi = rl.wilson(50, 100)
    assert lo == pytest.approx(0.4038, abs=1e-4) and hi == pytest.approx(0.5962, abs=1e-4)
    with pytest.raises(ValueError):
        rl.wilson(5, 4)


def test_random_seed_is_reported():
    sim = rl.simulate(6, 2, 0.05, 0.1, runs=2, records=50)
    assert isinstance(sim.seed, int)
    again = rl.simulate(6, 2, 0.05, 0.1, runs=2, records=50, seed=sim.seed)
    assert np.array_equal(sim.loss_hours, again.loss_hours)


def test_cluster_durability_follows_the_measured_repair_speed():
    """What `storetorrent status` states: faster repair, longer MTTDL; the
    assumed repair time when nothing was measured; classes above N left out."""
    from st_tools.reliability import cluster_durability

    slow = {d.replication: d for d in cluster_durability(4, 40_000, 0.5)}  # 10,000 copies a peer at 0.5/s
    fast = {d.replication: d for d in cluster_durability(4, 40_000, 500.0)}
    assumed = cluster_durability(4, 40_000, None, default_repair_hours=24.0)
    assert slow["x2"].repair_hours == pytest.approx(10_000 / 0.5 / 3600)
    assert fast["x2"].repair_measured and not assumed[0].repair_measured and assumed[0].repair_hours == 24.0
    assert fast["x2"].mttdl_years > slow["x2"].mttdl_years > 0
    assert fast["x1"].mttdl_years == pytest.approx(slow["x1"].mttdl_years)  # x1: repair cannot help
    assert fast["x3"].p_loss_year < fast["x2"].p_loss_year < fast["x1"].p_loss_year <= 1
    assert [d.replication for d in cluster_durability(2, 100, 1.0)] == ["x1", "x2"]
    with pytest.raises(ValueError):
        cluster_durability(4, 100, 1.0, peer_mtbf_years=0)

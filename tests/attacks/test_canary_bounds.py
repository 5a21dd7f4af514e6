"""Certified canary bounds: soundness over many seeds of mechanisms with known epsilon, power, the ideal reference."""

import numpy as np
import pytest
from dpaudit.attacks.canary import (
    CanaryBound,
    dirac_scores,
    ideal_multi_run_epsilon,
    ideal_one_run_epsilon,
    ideal_roc,
    lira_scores,
    loss_scores,
    multi_run_certified,
    one_run_certified,
    one_run_k_grid,
    soundness_multi_run,
    soundness_one_run,
)
from dpaudit.errors import DataError, ParameterError
from dpaudit.serial import from_dict, to_dict


def test_one_run_soundness_200_seeds_randomized_response():
    # the single-k rule is the sharpest: W is then close to Binomial(m, e^eps / (1 + e^eps)) exactly
    eps = soundness_one_run(2.0, 1000, 200, k_grid=[500], seed=0)
    assert np.mean(eps > 2.0) <= 0.05
    # ... and the audit has power: it certifies most of the true epsilon
    assert np.median(eps) > 1.5


def test_multi_run_soundness_200_seeds_gaussian():
    """Gaussian mechanism mu = 3 on one bit, 400 models per audit: at most 5% of the bounds exceed the epsilon of
    the chosen threshold's exact rates (<= the mechanism's epsilon)."""
    fails, vals = soundness_multi_run(3.0, 400, 200, seed=1)
    assert fails / 200 <= 0.05
    assert np.median(vals) > 1.0


def test_bounds_are_certified_and_round_trip():
    rng = np.random.default_rng(0)
    inc = rng.random(200) < 0.5
    b = one_run_certified(inc + rng.standard_normal(200), inc, delta=1e-5)
    assert b.kind == "certified" and b.audit == "one-run" and b.trials == 200
    assert from_dict(CanaryBound, to_dict(b)) == b
    b2 = multi_run_certified(inc + rng.standard_normal(200), inc, delta=1e-5)
    assert b2.kind == "certified" and b2.audit == "multi-run" and b2.trials == 100
    assert b2.with_ideal(1.5).ideal_epsilon == 1.5


def test_no_signal_gives_small_bounds():
    rng = np.random.default_rng(3)
    inc = rng.random(1000) < 0.5
    assert one_run_certified(rng.standard_normal(1000), inc).epsilon < 0.3
    assert multi_run_certified(rng.standard_normal(1000), inc).epsilon < 0.3


def test_ideal_reference_matches_empirical_ideal_attack():
    """The empirical bound of the exact LR test on the Gaussian mechanism is close to the ideal reference (a median
    of simulated audits with the same rule)."""
    mu, n = 2.0, 1000
    g = {"kind": "gaussian", "mu": mu}
    ideal_m = ideal_multi_run_epsilon(g, n // 2, n // 2)
    ideal_o = ideal_one_run_epsilon(g, n)
    rng = np.random.default_rng(5)
    em, eo = [], []
    for s in range(20):
        inc = rng.random(n) < 0.5
        x = inc * mu + rng.standard_normal(n)
        em.append(multi_run_certified(x, inc, seed=s).epsilon)
        eo.append(one_run_certified(x, inc).epsilon)
    assert abs(np.median(em) - ideal_m) < 0.15 * ideal_m
    assert abs(np.median(eo) - ideal_o) < 0.15 * ideal_o
    # more trials, larger reference; a stronger mechanism, smaller
    assert ideal_multi_run_epsilon(g, 5000, 5000) > ideal_m
    assert ideal_multi_run_epsilon({"kind": "gaussian", "mu": 0.5}, n // 2, n // 2) < ideal_m


def test_ideal_laplace_and_subsampled_gaussian():
    e = ideal_multi_run_epsilon({"kind": "laplace", "epsilon": 1.0}, 20_000, 20_000, replicates=5)
    assert 0.7 < e <= 1.0 + 1e-9  # never above the mechanism's epsilon, and close with many trials
    sg = {"kind": "subsampled_gaussian", "sampling_rate": 1.0, "noise_multiplier": 1.0, "steps": 4}
    g = {"kind": "gaussian", "mu": 2.0}  # q = 1: T steps of mu = 1/sigma compose to mu sqrt(T)
    assert abs(ideal_multi_run_epsilon(sg, 500, 500) - ideal_multi_run_epsilon(g, 500, 500)) < 0.3
    fpr, tpr = ideal_roc(g)
    assert np.all(np.diff(fpr) >= 0) and np.all(tpr >= fpr - 1e-12)
    fpr2, tpr2 = ideal_roc(sg, samples=5000)
    auc = lambda f, t: float(np.sum(np.diff(f) * (t[1:] + t[:-1]) / 2))  # noqa: E731
    assert abs(auc(fpr2, tpr2) - auc(fpr, tpr)) < 0.02  # same AUC


def test_scores():
    p = np.array([[0.9, 0.1], [0.2, 0.8]])
    assert np.allclose(loss_scores(p, [0, 0]), np.log([0.9, 0.2]))
    rng = np.random.default_rng(0)
    ref_out, ref_in = rng.normal(0, 1, (8, 3)), rng.normal(3, 1, (8, 3))
    s = lira_scores(np.array([[3.0, 3.0, 3.0], [0.0, 0.0, 0.0]]), ref_out, ref_in)
    assert np.all(s[0] > s[1])
    assert np.all(np.diff(lira_scores(np.array([[-1.0] * 3, [1.0] * 3]), ref_out), axis=0) > 0)
    obs = rng.standard_normal((50, 4, 2))
    obs[:, :2, 0] += 1.0
    for method in ("lr", "sum"):
        sc = dirac_scores(obs, sampling_rate=1.0, noise_multiplier=1.0, method=method)
        assert sc.shape == (4, 2) and sc[:2, 0].min() > sc[2:, 0].max()


def test_bad_input():
    with pytest.raises(ParameterError, match="models"):
        multi_run_certified([1.0], [True])
    with pytest.raises(DataError, match="too few models"):
        multi_run_certified([1.0, 2.0, 3.0], [True, False, False])
    with pytest.raises(DataError):
        one_run_certified([1.0, np.nan], [True, False])
    with pytest.raises(ParameterError, match="k_grid"):
        one_run_certified([1.0, 2.0], [True, False], k_grid=[5])
    with pytest.raises(ParameterError, match="kind"):
        ideal_roc({"kind": "cauchy"})
    assert one_run_k_grid(1000) == (10, 25, 50, 125, 250, 500)

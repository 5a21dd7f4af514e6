"""The analysis of a recorded DP-SGD run (dpaudit.attacks.trainer_audit): the sampler identified from the batches,
the noise multiplier's upper confidence limit and the recorded mechanism's lower bound sound on exact mechanisms
(failure rate at most the stated one; 300 seeds under -m slow), the certified one-run white-box bound never above
the true epsilon, reused noise seen through the probes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dpaudit.attacks.trainer_audit import (
    certified_one_run,
    chi_mean_inverse,
    estimate_noise,
    identify_sampler,
    recorded_lower_bound,
    simulate_record,
    whitebox_scores,
)


def _sim(seed, **kw):
    args = dict(num_real=1000, canaries=500, probes=500, sampling_rate=0.05, noise_multiplier=1.5, steps=80, seed=seed)
    args.update(kw)
    return simulate_record(**args)


def test_samplers_are_identified():
    r = _sim(0)
    s = identify_sampler(r["membership"], r["num_records"])
    assert s.kind == "poisson" and s.steps == 80 and s.rate_low < s.rate and abs(s.rate - 0.05) < 0.005
    r = _sim(0, sampler="shuffle", batch_size=64)
    s = identify_sampler(r["membership"], r["num_records"])
    assert s.kind == "shuffle" and s.batch_size == 64 and s.epochs >= 4
    rng = np.random.default_rng(0)
    fixed = [np.sort(rng.choice(1000, 50, replace=False)) for _ in range(40)]
    assert identify_sampler(fixed, 1000).kind == "fixed"
    assert identify_sampler([np.arange(100)] * 5, 100).kind == "full-batch"
    assert identify_sampler([np.array([1, 1, 2])] * 3, 100).kind == "unknown"
    sizes = [np.arange(s) for s in (10, 90, 10, 90, 10, 90, 10, 90)]           # far from binomial
    assert identify_sampler(sizes, 1000).kind == "unknown"
    seq = [np.arange(i * 10, i * 10 + 10) % 100 for i in range(30)]            # one fixed order, three epochs
    assert identify_sampler(seq, 100).kind == "shuffle"
    part = identify_sampler([np.arange(i * 10, i * 10 + 10) for i in range(4)], 100)    # 40 of 100: no epoch yet
    assert part.kind == "shuffle" and part.epochs == pytest.approx(0.4) and "less than one epoch" in part.evidence


def test_chi_mean_inverse_matches_monte_carlo():
    rng = np.random.default_rng(0)
    for p in (8, 64):
        r = np.sqrt(rng.chisquare(p, 400_000) / p)
        assert chi_mean_inverse(p) == pytest.approx(np.mean(1 / r), rel=2e-3)


def _soundness(seeds, sigma=1.5, q=0.05, steps=80, contamination=0.0):
    from dpaudit.accountants.dpsgd import account_dpsgd

    miss_sigma = miss_eps = 0
    ratios = []
    for seed in seeds:
        r = _sim(seed, noise_multiplier=sigma, sampling_rate=q, steps=steps, contamination=contamination)
        s = identify_sampler(r["membership"], r["num_records"])
        nz = estimate_noise(r["canary_obs"], r["probe_obs"], r["membership"], r["canary_index"], confidence=0.95)
        miss_sigma += nz.sigma_eff_upper < sigma
        b = recorded_lower_bound(s, nz, 1e-5)
        true = account_dpsgd(dataset_size=1_000_000, batch_size=round(q * 1_000_000), noise_multiplier=sigma,
                             steps=steps, delta=1e-5, lower_bound=False).epsilon      # rate exactly q (memoised)
        miss_eps += b.epsilon > true
        ratios.append(b.epsilon / true)
    return miss_sigma, miss_eps, float(np.median(ratios))


def test_noise_upper_limit_and_recorded_bound_are_sound_on_exact_mechanisms():
    seeds = range(40)
    miss_sigma, miss_eps, ratio = _soundness(seeds)
    # stated failure rate 5%: over 40 seeds more than 6 misses has probability < 1.2% if the rate is 5%
    assert miss_sigma <= 6 and miss_eps <= 6
    assert ratio > 0.8           # and tight: the bound is most of the true epsilon


@pytest.mark.slow
@pytest.mark.parametrize("sigma,q,steps,contamination", [(1.5, 0.05, 80, 0.0), (0.8, 0.02, 200, 0.0),
                                                         (1.5, 0.05, 80, 0.5)])
def test_soundness_over_300_seeds(sigma, q, steps, contamination):
    miss_sigma, miss_eps, ratio = _soundness(range(1000, 1300), sigma, q, steps, contamination)
    # stated failure rate 5%: 24 or more in 300 has probability 3% at a true rate of 5% (Binomial(300, 0.05))
    assert miss_sigma <= 23 and miss_eps <= 23, (miss_sigma, miss_eps)
    print(f"sigma {sigma} q {q} T {steps} contamination {contamination}: sigma misses {miss_sigma}/300, "
          f"epsilon misses {miss_eps}/300, median bound / true {ratio:.3f}")


@pytest.mark.slow
@pytest.mark.parametrize("sigma,contamination", [(1.0, 0.0), (0.74, 0.0), (1.0, 0.5)])
def test_two_run_noise_limit_soundness_at_the_thorough_budget(sigma, contamination):
    """The thorough budget's shape: two runs pooled, 2,000 canaries and 300 probes each, q = 0.025, T = 160."""
    from dpaudit.attacks.trainer_audit import estimate_noise_runs

    misses = {0.95: 0, 0.975: 0}
    for seed in range(300):
        runs = []
        for k in range(2):
            r = simulate_record(num_real=1000, canaries=2000, probes=300, sampling_rate=0.025, noise_multiplier=sigma,
                                steps=160, seed=20_000 + 2 * seed + k, contamination=contamination)
            runs.append((r["canary_obs"], r["probe_obs"], r["membership"], r["canary_index"]))
        for conf in misses:
            misses[conf] += estimate_noise_runs(runs, confidence=conf).sigma_eff_upper < sigma
    # stated 5% / 2.5%: 24 or more in 300 has probability 1.7% at 5%; 14 or more has probability 2.0% at 2.5%
    assert misses[0.95] <= 23 and misses[0.975] <= 13, misses
    print(f"two runs, sigma {sigma}, contamination {contamination}: sigma misses {misses[0.95]}/300 at 0.95, "
          f"{misses[0.975]}/300 at 0.975")


def test_certified_one_run_catches_little_noise_and_not_the_correct_mechanism():
    r = _sim(1, noise_multiplier=0.05)
    b = certified_one_run(r["canary_obs"], r["probe_obs"], r["included"], delta=1e-5, confidence=0.95,
                          sampling_rate=0.05, noise_multiplier=1.5)
    assert b.kind == "certified" and b.epsilon > 2.5
    r = _sim(2)
    b = certified_one_run(r["canary_obs"], r["probe_obs"], r["included"], delta=1e-5, confidence=0.95,
                          sampling_rate=0.05, noise_multiplier=1.5)
    assert b.epsilon < 1.5


@pytest.mark.slow
def test_certified_one_run_soundness_over_300_seeds():
    from dpaudit.accountants.dpsgd import account_dpsgd

    fails = 0
    for seed in range(300):
        r = _sim(seed, canaries=500, noise_multiplier=0.9, steps=40)
        b = certified_one_run(r["canary_obs"], r["probe_obs"], r["included"], delta=1e-5, confidence=0.95,
                              sampling_rate=0.05, noise_multiplier=0.9)
        true = account_dpsgd(dataset_size=1_000_000, batch_size=50_000, noise_multiplier=0.9, steps=40, delta=1e-5,
                             lower_bound=False).epsilon
        fails += b.epsilon > true
    assert fails <= 23
    print(f"certified one-run: {fails}/300 above the true epsilon")


def test_reused_noise_is_seen_and_scored_by_differences():
    r = _sim(3)
    x, y = r["canary_obs"].copy(), r["probe_obs"].copy()
    # the same noise for 16 steps in a row (an epoch): only the signal and the epoch changes move the observations
    rng = np.random.default_rng(0)
    for e in range(0, 80, 16):
        x[e:e + 16] = rng.normal(0, 1.5, size=x.shape[1])
        y[e:e + 16] = rng.normal(0, 1.5, size=y.shape[1])
    lookup = {int(c): j for j, c in enumerate(r["canary_index"]) if c >= 0}
    for t, b in enumerate(r["membership"]):
        for i in b.tolist():
            if i in lookup:
                x[t, lookup[i]] += 1.0
    nz = estimate_noise(x, y, r["membership"], r["canary_index"])
    assert nz.difference_ratio < 0.2
    s, name = whitebox_scores(x, y, sampling_rate=0.05, noise_multiplier=1.5)
    assert name == "difference-max"
    b = certified_one_run(x, y, r["included"], delta=1e-5, confidence=0.95, sampling_rate=0.05, noise_multiplier=1.5)
    assert b.epsilon > 3.0


def test_non_finite_observations_mean_no_noise():
    r = _sim(4)
    x = r["canary_obs"].copy()
    x[3, 5] = np.inf
    nz = estimate_noise(x, r["probe_obs"], r["membership"], r["canary_index"])
    assert nz.sigma_eff_upper == 0.0


def test_an_update_the_hook_did_not_see_is_no_evidence():
    r = _sim(5)
    zeros = np.zeros_like(r["canary_obs"])
    nz = estimate_noise(zeros, np.zeros_like(r["probe_obs"]), r["membership"], r["canary_index"])
    assert nz.sigma_eff_upper == float("inf") and nz.steps_used == 0
    s = identify_sampler(r["membership"], r["num_records"])
    assert recorded_lower_bound(s, nz, 1e-5).epsilon == 0.0


# ------------------------------------------------------------------------------------------------------- input canaries


def test_input_canary_design_skips_constant_features_and_uses_the_real_data_only():
    from dpaudit.attacks.trainer_audit import input_canary_design

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 5)).astype(np.float32)
    X[:, 2] = 7.0                                                       # constant: no canary
    features, rows = input_canary_design(X, extreme=100.0)
    assert features.tolist() == [0, 1, 3, 4] and rows.shape == (4, 5) and rows.dtype == np.float32
    mu, sd = X.astype(np.float64).mean(0), X.astype(np.float64).std(0)
    for k, j in enumerate(features):
        expect = mu.copy()
        expect[j] += 100.0 * sd[j]
        np.testing.assert_allclose(rows[k], expect, rtol=1e-5, atol=1e-5)


def test_input_canary_scores_rank_quiet_slices_first():
    from dpaudit.attacks.trainer_audit import input_canary_scores

    watch = np.zeros((5, 3))
    watch[0] = 1.0
    watch[1] = 10.0
    watch[3] = np.nan                                                   # nothing finite moved: like a quiet slice
    watch[4] = np.inf                                                   # an exploding update: the loudest
    s = input_canary_scores(watch, [0, 1, 2, 3, 4])
    assert s[4] < s[1] < s[0] < s[2] and np.all(np.isfinite(s)) and s[3] == s[2]


def _rr_runs(seed, eps, runs=20, features=59):
    """An exactly eps-DP mechanism per canary (randomized response on its coin), shaped like the input-canary runs:
    an 'out' answer gives its slice a large energy, an 'in' answer a small one."""
    rng = np.random.default_rng(seed)
    out = []
    keep = math.exp(eps) / (1 + math.exp(eps))
    for _ in range(runs):
        inc = rng.random(features) < 0.5
        said_in = np.where(rng.random(features) < keep, inc, ~inc)
        norm = np.where(said_in, 1.0, 10.0) * (1 + 0.01 * rng.random(features))
        watch = norm[:, None] * np.ones((features, 4)) / 2.0
        out.append((watch, np.arange(features), inc))
    return out


def test_certified_input_canaries_catch_a_leak_and_stay_below_the_true_epsilon():
    from dpaudit.attacks.trainer_audit import INPUT_CANARY_RULE, certified_input_canaries

    b = certified_input_canaries(_rr_runs(0, 8.0), delta=1e-5, confidence=0.995)
    assert b.kind == "certified" and b.trials == 20 * 59 and b.epsilon > 3.0
    assert b.details["k_plus"] == 0 and b.details["k_minus"] == round(0.2 * 1180)     # the fixed rule: "out" only
    assert "0.2" in INPUT_CANARY_RULE.describe()
    for seed in range(10):       # coins the output does not depend on: nothing certified
        rng = np.random.default_rng(seed)
        null = [(rng.normal(size=(59, 8)), np.arange(59), rng.random(59) < 0.5) for _ in range(20)]
        assert certified_input_canaries(null, delta=1e-5, confidence=0.95).epsilon == 0.0


@pytest.mark.slow
def test_certified_input_canaries_soundness_over_300_seeds():
    from dpaudit.attacks.trainer_audit import certified_input_canaries

    for eps in (1.0, 2.0):
        fails = sum(certified_input_canaries(_rr_runs(seed, eps), delta=1e-5, confidence=0.95).epsilon > eps
                    for seed in range(300))
        assert fails <= 23, (eps, fails)
        print(f"input canaries, randomized response at epsilon {eps}: {fails}/300 above it")


def test_final_model_scores_are_the_label_log_likelihood_in_log_space():
    from dpaudit.attacks.trainer_audit import final_model_scores

    z = np.array([[0.0, 0.0], [800.0, -800.0], [np.nan, 1.0], [3.0, 1.0]])
    s = final_model_scores(z, [0, 1, 0, 1])
    assert s[0] == pytest.approx(math.log(0.5)) and s[1] == pytest.approx(-1600.0)     # no clipping at 1e-300
    assert s[2] == -1e300 and s[3] == pytest.approx(-2.0 - math.log1p(math.exp(-2.0)))
    from dpaudit.errors import DataError

    with pytest.raises(DataError, match="final_model_scores"):
        final_model_scores(z, [0, 1, 2, 0])


def _rr_final(seed, eps, runs=60, features=59):
    """An exactly eps-DP mechanism per canary (randomized response on its coin), shaped like the final-model runs:
    an 'in' answer gives the canary's label a high log likelihood, an 'out' answer a low one."""
    rng = np.random.default_rng(seed)
    keep = math.exp(eps) / (1 + math.exp(eps))
    out = []
    for _ in range(runs):
        inc = rng.random(features) < 0.5
        said_in = np.where(rng.random(features) < keep, inc, ~inc)
        labels = rng.integers(0, 10, size=features)
        z = rng.normal(size=(features, 10))
        z[np.arange(features), labels] += np.where(said_in, 20.0, -20.0)
        out.append((z, labels, inc))
    return out


def test_certified_final_model_catches_a_leak_and_not_independent_coins():
    from dpaudit.attacks.trainer_audit import FINAL_MODEL_RULE, certified_final_model

    b = certified_final_model(_rr_final(0, 8.0), delta=1e-5, confidence=0.95)
    assert b.kind == "certified" and b.trials == 60 * 59 and b.epsilon > 3.0
    assert b.details["k_plus"] == 0 and b.details["k_minus"] == round(0.05 * 3540)    # the fixed rule: "out" only
    assert "0.05" in FINAL_MODEL_RULE.describe()
    for seed in range(10):       # coins the models do not depend on: nothing certified
        rng = np.random.default_rng(seed)
        null = [(rng.normal(size=(59, 10)), rng.integers(0, 10, 59), rng.random(59) < 0.5) for _ in range(60)]
        assert certified_final_model(null, delta=1e-5, confidence=0.95).epsilon == 0.0


@pytest.mark.slow
def test_certified_final_model_soundness_over_300_seeds():
    from dpaudit.attacks.trainer_audit import certified_final_model

    for eps in (1.0, 2.0):
        fails = sum(certified_final_model(_rr_final(seed, eps), delta=1e-5, confidence=0.95).epsilon > eps
                    for seed in range(300))
        assert fails <= 23, (eps, fails)
        print(f"final-model canaries, randomized response at epsilon {eps}: {fails}/300 above it")

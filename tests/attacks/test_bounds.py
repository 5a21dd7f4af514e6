"""Empirical epsilon lower bounds, tested in both directions on mechanisms with known epsilon:
valid (<= true epsilon at the stated confidence, violations counted over many seeds) and tight (approaching the
true epsilon as samples grow)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from dpaudit.attacks.bounds import (clopper_pearson, clopper_pearson_upper, epsilon_bound_over_splits,
                                    epsilon_from_rates, epsilon_lower_bound, one_run_audit, one_run_epsilon, one_run_guesses, one_run_p_value)
from dpaudit.attacks.bounds import _bound_at  # the per-threshold bound, uncorrected
from dpaudit.attacks.results import EpsilonBound, OneRunBound
from dpaudit.errors import ParameterError
from dpaudit.serial import from_dict, to_dict


def rr_trials(eps, n, rng):
    """Randomized response on one bit (eps-DP, Warner 1965): output the true bit w.p. e^eps / (1 + e^eps)."""
    keep = math.exp(eps) / (1 + math.exp(eps))
    members = (rng.random(n) < keep).astype(float)          # true bit 1
    nonmembers = (rng.random(n) >= keep).astype(float)      # true bit 0
    return members, nonmembers


def laplace_trials(eps, n, rng):
    """Laplace mechanism on a counting query (sensitivity 1, scale 1/eps): counts 1 (member) vs 0."""
    return 1.0 + rng.laplace(0, 1 / eps, n), rng.laplace(0, 1 / eps, n)


def allowed_violations(seeds, confidence):
    # the number of violations is at most Binomial(seeds, 1 - confidence); allow its 99.9% quantile
    return stats.binom.ppf(0.999, seeds, 1 - confidence)


def test_clopper_pearson_closed_forms():
    # k = 0: upper limit solves (1 - p)^n = alpha  =>  p = 1 - alpha^(1/n)  (Clopper & Pearson 1934)
    assert clopper_pearson_upper(0, 50, 0.05) == pytest.approx(1 - 0.05 ** (1 / 50))
    # k = n: lower limit solves p^n = alpha / 2
    lo, hi = clopper_pearson(20, 20, 0.95)
    assert lo == pytest.approx(0.025 ** (1 / 20)) and hi == 1.0
    lo, hi = clopper_pearson(np.array([3, 7]), np.array([10, 10]), 0.9)
    assert np.all(lo < np.array([0.3, 0.7])) and np.all(hi > np.array([0.3, 0.7]))


def test_epsilon_from_rates_randomized_response_is_exact():
    eps = 1.3
    r = 1 / (1 + math.exp(eps))
    assert epsilon_from_rates(r, r) == pytest.approx(eps)
    assert epsilon_from_rates(0.5, 0.5) == 0.0
    # delta shrinks the bound: log((1 - delta - r) / r)
    assert epsilon_from_rates(r, r, 0.01) == pytest.approx(math.log((1 - 0.01 - r) / r))


@pytest.mark.parametrize("mechanism,eps,n", [(rr_trials, 1.0, 500), (laplace_trials, 1.0, 500),
                                             (rr_trials, 0.0, 500)])
def test_split_bound_is_valid_across_seeds(mechanism, eps, n):
    seeds, conf = 200, 0.95
    violations = 0
    for s in range(seeds):
        rng = np.random.default_rng(s)
        pos, neg = mechanism(eps, n, rng) if eps > 0 else (rng.random(n), rng.random(n))
        b = epsilon_lower_bound(pos, neg, confidence=conf, seed=s)
        violations += b.epsilon > eps + 1e-12
    assert violations <= allowed_violations(seeds, conf)


def test_bonferroni_bound_is_valid_across_seeds():
    seeds, conf, eps = 200, 0.9, 1.0
    grid = np.linspace(-2, 6, 17)
    violations = 0
    for s in range(seeds):
        pos, neg = laplace_trials(eps, 400, np.random.default_rng(s))
        violations += epsilon_lower_bound(pos, neg, confidence=conf, selection="bonferroni",
                                          thresholds=grid).epsilon > eps
    assert violations <= allowed_violations(seeds, conf)


def test_best_threshold_on_same_data_would_overclaim():
    # the dishonest rule (best threshold picked on the data the bound is reported on, no correction) claims
    # eps > 0 on a null mechanism (eps = 0) far more often than the allowed 1 - confidence; the split rule does not.
    # confidence 0.5: low enough that choosing the threshold on the reported data is caught (Clopper-Pearson is
    # conservative, so at 0.95 even the dishonest rule rarely exceeds the allowed count on a null mechanism)
    seeds, n, conf, naive, honest = 300, 400, 0.5, 0, 0
    for s in range(seeds):
        rng = np.random.default_rng(s)
        pos, neg = rng.random(n), rng.random(n)
        honest += epsilon_lower_bound(pos, neg, confidence=conf, seed=s).epsilon > 0
        grid = np.unique(np.r_[pos, neg])
        # naive: a "pre-chosen" single threshold that was in fact chosen on the data
        naive += _bound_at(pos, neg, grid, (1 - conf) / 2, 0.0)[0].max() > 0
    assert honest <= allowed_violations(seeds, conf)
    assert naive > allowed_violations(seeds, conf)


@pytest.mark.parametrize("mechanism,n,floor", [(rr_trials, 100_000, 0.93), (laplace_trials, 200_000, 0.75)])
def test_bound_approaches_true_epsilon(mechanism, n, floor):
    eps = 1.0
    small = epsilon_lower_bound(*mechanism(eps, 200, np.random.default_rng(0)), seed=0).epsilon
    big = epsilon_lower_bound(*mechanism(eps, n, np.random.default_rng(0)), seed=0).epsilon
    assert small < big <= eps
    assert big >= floor


def test_delta_lowers_the_bound():
    pos, neg = rr_trials(2.0, 5000, np.random.default_rng(0))
    a = epsilon_lower_bound(pos, neg, delta=0.0).epsilon
    b = epsilon_lower_bound(pos, neg, delta=0.05).epsilon
    assert b < a


def test_bound_json_and_errors():
    b = epsilon_lower_bound([1, 1, 1, 0], [0, 0, 0, 1])
    assert from_dict(EpsilonBound, json.loads(json.dumps(to_dict(b)))) == b
    with pytest.raises(ParameterError, match="'thresholds' parameter of epsilon_lower_bound"):
        epsilon_lower_bound([1.0, 2.0], [0.0, 1.0], selection="bonferroni")
    with pytest.raises(ParameterError, match="'confidence' parameter"):
        epsilon_lower_bound([1.0, 2.0], [0.0, 1.0], confidence=1.0)
    with pytest.raises(ParameterError, match="'delta' parameter"):
        epsilon_lower_bound([1.0, 2.0], [0.0, 1.0], delta=-0.1)


# ---- one-run auditing (Steinke, Nasr, Jagielski 2023) ----

def _p_value_oracle(m, r, v, eps, delta):
    """Theorem 3 of Steinke et al. 2023 written term by term with mpmath (independent of the vectorised code)."""
    import mpmath as mp
    mp.mp.dps = 40
    q = mp.e ** eps / (1 + mp.e ** eps)
    f = lambda u: mp.fsum(mp.binomial(r, j) * q ** j * (1 - q) ** (r - j) for j in range(max(u, 0), r + 1))  # noqa
    tail = f(v)
    if delta == 0 or v == 0:
        return float(min(1, tail)) if v > 0 else 1.0
    best = max((f(v - i) - tail) / i for i in range(1, v + 1))
    return float(min(1, tail + 2 * m * delta * best))


@pytest.mark.parametrize("m,r,v,eps,delta", [(100, 40, 30, 1.0, 0.0), (100, 40, 30, 1.0, 1e-3),
                                             (1000, 200, 150, 0.5, 1e-5), (50, 50, 50, 3.0, 1e-4)])
def test_one_run_p_value_matches_oracle(m, r, v, eps, delta):
    assert one_run_p_value(m, r, v, eps, delta) == pytest.approx(_p_value_oracle(m, r, v, eps, delta), rel=1e-8)


def test_one_run_guesses():
    g = one_run_guesses([0.1, 0.9, 0.5, 0.2, 0.8], k_plus=2, k_minus=1)
    assert list(g) == [-1, 1, 0, 0, 1]
    with pytest.raises(ParameterError):
        one_run_guesses([0.1, 0.2], k_plus=2, k_minus=1)


def _rr_canaries(eps, m, rng):
    included = rng.random(m) < 0.5
    keep = rng.random(m) < math.exp(eps) / (1 + math.exp(eps))
    scores = np.where(keep, included, ~included).astype(float) + 1e-3 * rng.random(m)   # tiny jitter: ranking
    return scores, included


def test_one_run_bound_is_valid_across_seeds():
    seeds, conf, eps = 200, 0.95, 1.0
    violations = 0
    for s in range(seeds):
        scores, inc = _rr_canaries(eps, 1000, np.random.default_rng(s))
        b = one_run_audit(scores, inc, k_plus=300, k_minus=300, confidence=conf)
        violations += b.epsilon > eps
    assert violations <= allowed_violations(seeds, conf)


def test_one_run_bound_approaches_true_epsilon_and_delta_costs():
    eps = 1.0
    small = one_run_audit(*_rr_canaries(eps, 200, np.random.default_rng(0)), k_plus=100, k_minus=100)
    scores, inc = _rr_canaries(eps, 100_000, np.random.default_rng(0))
    big = one_run_audit(scores, inc, k_plus=50_000, k_minus=50_000)
    assert small.epsilon < big.epsilon <= eps and big.epsilon > 0.9
    with_delta = one_run_audit(scores, inc, k_plus=50_000, k_minus=50_000, delta=1e-6)
    assert with_delta.epsilon < big.epsilon
    assert from_dict(OneRunBound, json.loads(json.dumps(to_dict(big)))) == big


def test_one_run_epsilon_zero_when_guessing_at_chance():
    assert one_run_epsilon(1000, 100, 50) == 0.0


# ---------------------------------------------------------------- certified vs estimate


def test_every_bound_says_what_it_is():
    rng = np.random.default_rng(3)
    pos, neg = laplace_trials(1.0, 400, rng)
    # the caller vouches for independence; the default is the honest "estimate"
    assert epsilon_lower_bound(pos, neg).kind == "estimate"
    assert epsilon_lower_bound(pos, neg, kind="certified").certified
    assert epsilon_lower_bound(pos, neg, selection="bonferroni", thresholds=[0.5], kind="certified").kind == "certified"
    assert one_run_audit(rng.normal(size=50), rng.random(50) < 0.5, k_plus=5, k_minus=5).kind == "certified"
    with pytest.raises(ParameterError, match="'kind' parameter of epsilon_lower_bound must be one of"):
        epsilon_lower_bound(pos, neg, kind="proven")
    # old JSON without the new fields still reads (as an estimate)
    old = {k: v for k, v in to_dict(epsilon_lower_bound(pos, neg)).items()
           if k not in ("kind", "split_low", "split_high", "num_splits")}
    b = from_dict(EpsilonBound, old)
    assert b.kind == "estimate" and b.split_range == (b.epsilon, b.epsilon) and b.num_splits == 1


def test_split_seed_spread_brackets_the_single_draws_and_round_trips():
    rng = np.random.default_rng(4)
    pos, neg = laplace_trials(1.5, 300, rng)
    spread = epsilon_bound_over_splits(pos, neg, seed=7, num_splits=5)
    draws = sorted(epsilon_lower_bound(pos, neg, seed=s).epsilon for s in range(7, 12))
    assert spread.split_low == draws[0] and spread.split_high == draws[-1] and spread.epsilon == draws[2]
    assert spread.num_splits == 5 and spread.kind == "estimate"
    assert spread.split_high > spread.split_low          # the figure depends on the split: that is the point
    assert from_dict(EpsilonBound, json.loads(json.dumps(to_dict(spread)))) == spread
    one = epsilon_bound_over_splits(pos, neg, seed=7, num_splits=1)
    assert one.epsilon == one.split_low == one.split_high == epsilon_lower_bound(pos, neg, seed=7).epsilon
    with pytest.raises(ParameterError, match="'num_splits' parameter"):
        epsilon_bound_over_splits(pos, neg, num_splits=0)

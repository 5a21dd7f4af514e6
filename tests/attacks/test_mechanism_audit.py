"""attacks/audit_mechanism.py: Clopper-Pearson bounds, the divergence bound, the testers, validation, results."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from dpaudit.attacks.mechanism_audit import (
    MechanismAuditResult,
    clopper_pearson_lower,
    clopper_pearson_upper,
    histogram_divergence_bound,
    audit_mechanism,
)
from dpaudit.errors import ParameterError
from dpaudit.serial import from_dict, to_dict


def laplace(scale):
    return lambda x, rng, size: x + rng.laplace(0.0, scale, size)


# ---------------------------------------------------------------- Clopper-Pearson


@pytest.mark.parametrize("k,n", [(0, 10), (3, 10), (10, 10), (517, 1000), (1, 100000)])
def test_clopper_pearson_matches_scipy_exact_interval(k, n):
    # reference: scipy.stats.binomtest(...).proportion_ci(method="exact") is the two-sided Clopper-Pearson
    # interval; a one-sided bound at level a is the matching end of the two-sided interval at confidence 1-2a.
    a = 0.01
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=1 - 2 * a, method="exact")
    assert clopper_pearson_lower(k, n, a) == pytest.approx(ci.low, abs=1e-12)
    assert clopper_pearson_upper(k, n, a) == pytest.approx(ci.high, abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(k=st.integers(0, 200), extra=st.integers(0, 200), a=st.floats(1e-6, 0.4))
def test_clopper_pearson_brackets_the_estimate(k, extra, a):
    n = k + extra + 1 if k == 0 and extra == 0 else max(k + extra, 1)
    lo, hi = float(clopper_pearson_lower(k, n, a)), float(clopper_pearson_upper(k, n, a))
    assert 0.0 <= lo <= k / n <= hi <= 1.0


def test_clopper_pearson_coverage_simulated():
    # the lower bound at level 0.05 must fall below the true p in >= 95% of repetitions
    rng = np.random.default_rng(0)
    p, n = 0.3, 200
    k = rng.binomial(n, p, 4000)
    assert np.mean(clopper_pearson_lower(k, n, 0.05) <= p) >= 0.95
    assert np.mean(clopper_pearson_upper(k, n, 0.05) >= p) >= 0.95


def test_histogram_divergence_bound_closed_form():
    # two bins, P = (0.9, 0.1), Q = (0.1, 0.9) exactly known: D_{e^eps} = 0.9 - e^eps * 0.1 (randomized response)
    p, q = np.array([0.9, 0.1]), np.array([0.1, 0.9])
    assert histogram_divergence_bound(p, q, 0.0) == pytest.approx(0.8)
    assert histogram_divergence_bound(p, q, math.log(9)) == pytest.approx(0.0, abs=1e-12)
    assert histogram_divergence_bound(p, q, 1.0) == pytest.approx(0.9 - math.e * 0.1)


# ---------------------------------------------------------------- testers


def test_laplace_correct_passes_and_lower_bound_below_truth():
    res = audit_mechanism(laplace(1.0), (0.0, 1.0), 1.0, samples=40_000, seed=0)
    assert res.passed and res.witness is None
    assert 0.5 < res.epsilon_lower_bound <= 1.0  # true epsilon of Laplace(1) on a sensitivity-1 shift is 1
    assert res.output_kind == "continuous" and res.samples == 80_000


def test_laplace_slightly_overclaimed_is_caught_with_enough_samples():
    # true epsilon 1, claim 0.8: the half-line {y >= 1} has ratio e^1 > e^0.8
    res = audit_mechanism(laplace(1.0), (0.0, 1.0), 0.8, samples=200_000, seed=0)
    assert not res.passed
    assert 0.8 < res.epsilon_lower_bound <= 1.0


def test_each_tester_alone_catches_a_gross_violation():
    hist = audit_mechanism(laplace(0.5), (0.0, 1.0), 1.0, samples=40_000, seed=0, testers=("histogram",))
    event = audit_mechanism(laplace(0.5), (0.0, 1.0), 1.0, samples=40_000, seed=0, testers=("event",))
    assert not hist.passed and not event.passed
    assert hist.witness.tester == "histogram" and event.witness.tester == "event"
    assert {o.tester for o in hist.outcomes} == {"histogram"}
    # the event tester tests one event per direction instead of every bin: a tighter divergence bound
    assert event.divergence_lower_bound > hist.divergence_lower_bound


def test_both_directions_are_tested():
    # asymmetric leak: input 1 is revealed with probability 0.02, input 0 never; with inputs (0, 1) the violation
    # only shows in the x'||x direction (P = outputs on the second input)
    def leak_one(x, rng, size):
        return np.where((x == 1) & (rng.random(size) < 0.02), 1, 2)

    res = audit_mechanism(leak_one, (0, 1), 1.0, 0.0, samples=20_000, seed=0)
    assert not res.passed and res.witness.direction == "x'||x" and res.witness.event == "{output = 1}"
    assert {o.direction for o in res.outcomes} == {"x||x'", "x'||x"}
    swapped = audit_mechanism(leak_one, (1, 0), 1.0, 0.0, samples=20_000, seed=0)
    assert not swapped.passed and swapped.witness.direction == "x||x'"


def test_delta_absorbs_a_small_violation():
    # a mechanism that leaks its input with probability 0.01: (0, 0.01)-DP, not (0, 0)-DP... but far from (eps, 0.05)
    def leaky(x, rng, size):
        leak = rng.random(size) < 0.01
        return np.where(leak, x, 2)

    strict = audit_mechanism(leaky, (0, 1), 1.0, 0.0, samples=50_000, seed=0)
    loose = audit_mechanism(leaky, (0, 1), 1.0, 0.05, samples=50_000, seed=0)
    assert not strict.passed and strict.output_kind == "discrete"
    assert strict.witness.event in ("{output = 0}", "{output = 1}")  # the leaked input itself
    assert loose.passed


def test_vector_outputs_are_projected():
    def gauss(x, rng, size):
        return np.asarray(x) + rng.normal(0.0, 0.3, (size, 3))

    res = audit_mechanism(gauss, (np.zeros(3), np.array([1.0, 0.0, 0.0])), 1.0, 1e-5, samples=20_000, seed=0)
    assert not res.passed and "w . output" in res.witness.event


def test_statistic_post_processing():
    def gauss(x, rng, size):
        return np.asarray(x) + rng.normal(0.0, 0.3, (size, 3))

    res = audit_mechanism(gauss, (np.zeros(3), np.array([1.0, 0.0, 0.0])), 1.0, 1e-5, samples=20_000, seed=0,
                         statistic=lambda out: out[:, 1])  # a coordinate that carries no signal
    assert res.passed


def test_determinism_and_round_trip():
    a = audit_mechanism(laplace(0.5), (0.0, 1.0), 1.0, samples=5_000, seed=3)
    b = audit_mechanism(laplace(0.5), (0.0, 1.0), 1.0, samples=5_000, seed=3)
    c = audit_mechanism(laplace(0.5), (0.0, 1.0), 1.0, samples=5_000, seed=4)
    assert a == b and to_dict(a) == to_dict(b)
    assert to_dict(a) != to_dict(c)
    assert from_dict(MechanismAuditResult, to_dict(a)) == a


def test_alpha_split_shows_in_outcomes():
    res = audit_mechanism(laplace(1.0), (0.0, 1.0), 1.0, samples=5_000, alpha=0.01, seed=0, bins=10)
    hist = [o for o in res.outcomes if o.tester == "histogram"]
    event = [o for o in res.outcomes if o.tester == "event"]
    assert hist[0].bounds == 40 and hist[0].level == pytest.approx(0.005 / 40)  # alpha/2 over 4 x 10 bins
    assert event[0].level == pytest.approx(0.005 / 4)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(epsilon=-1.0), "'epsilon'"),
        (dict(delta=1.0), "'delta'"),
        (dict(samples=10), "'samples'"),
        (dict(alpha=0.0), "'alpha'"),
        (dict(testers=("nope",)), "'testers'"),
        (dict(neighbouring_inputs=(0.0,)), "'neighbouring_inputs'"),
        (dict(mechanism=3), "'mechanism'"),
    ],
)
def test_validation(kwargs, match):
    args = dict(mechanism=laplace(1.0), neighbouring_inputs=(0.0, 1.0), epsilon=1.0, delta=0.0, samples=1000)
    args.update(kwargs)
    with pytest.raises(ParameterError, match=match):
        audit_mechanism(**args)


def test_wrong_output_count_and_non_finite_outputs_are_reported():
    with pytest.raises(ParameterError, match="must return 1000 outputs|must return 700 outputs|must return 300 outputs"):
        audit_mechanism(lambda x, rng, size: np.zeros(size + 1), (0, 1), 1.0, samples=1000)
    with pytest.raises(ParameterError, match="non-finite"):
        audit_mechanism(lambda x, rng, size: np.full(size, np.nan), (0, 1), 1.0, samples=1000)

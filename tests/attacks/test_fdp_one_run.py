"""The f-DP one-run test (Mahloujifar, Melis, Chaudhuri, ICML 2025) against an independent implementation written
here from the paper's recursion, closed forms, monotonicity, and Monte Carlo soundness on exact mechanisms."""

import math
from statistics import NormalDist

import numpy as np
import pytest

from dpaudit.attacks.fdp import (
    ApproxDpInverse,
    GdpInverse,
    approx_dp_blow_up_inverse,
    fdp_rejects,
    fdp_approx_dp_epsilon,
    fdp_gdp_mu,
    fdp_profile_p_value,
    fdp_statistic,
    gdp_blow_up_inverse,
    gdp_epsilon,
)
from dpaudit.errors import ParameterError

_N = NormalDist()


# --------------------------------------------------------------------------------------------------
# the reference: the recursion as the paper states it, one scalar step at a time (no vectorisation, no early stop)


def _ref_gdp_inv(y: float, mu: float) -> float:
    """Phi(Phi^-1(y) - mu), the blow-up inverse of G_mu (Dong, Roth, Su 2022), in pure Python."""
    if y <= 0.0:
        return 0.0
    if y >= 1.0:
        return 1.0
    return _N.cdf(_N.inv_cdf(y) - mu)


def _ref_dp_inv(y: float, eps: float, delta: float) -> float:
    """Inverse of B(x) = min(1, delta + e^eps x, 1 - e^-eps (1 - delta - x)) (Kairouz et al. 2015's curve)."""
    if y >= 1.0:
        return 1.0 - delta
    return max(0.0, (y - delta) * math.exp(-eps), 1.0 - delta - math.exp(eps) * (1.0 - y))


def _ref_stat(m: int, cp: int, c: int, alpha: float, inv) -> float:
    r = alpha * c / m
    h = alpha * (cp - c) / m
    for i in range(c - 1, -1, -1):
        h_new = max(h, inv(r))
        r = min(1.0, r + i / (cp - i) * (h_new - h))
        h = h_new
    return r + h - cp / m


def _ref_largest(m, cp, c, alpha, inv_of, hi):
    """Largest parameter rejected, by plain bisection on the reference statistic (monotone)."""
    if _ref_stat(m, cp, c, alpha, inv_of(0.0)) <= 0:
        return 0.0
    lo = 0.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if _ref_stat(m, cp, c, alpha, inv_of(mid)) > 0:
            lo = mid
        else:
            hi = mid
    return lo


CASES = [(1000, 40, 36, 0.05), (1000, 40, 30, 0.05), (1000, 200, 150, 0.01), (2000, 2000, 2000, 0.05),
         (500, 10, 10, 0.2), (10000, 400, 380, 0.05), (100, 100, 62, 0.05), (50, 20, 11, 0.5)]


@pytest.mark.parametrize("m,cp,c,alpha", CASES)
@pytest.mark.parametrize("mu", [0.0, 0.3, 1.0, 2.5])
def test_statistic_matches_reference_gaussian(m, cp, c, alpha, mu):
    got = float(fdp_statistic(m, cp, c, alpha, mu, gdp_blow_up_inverse))
    want = _ref_stat(m, cp, c, alpha, lambda y: _ref_gdp_inv(y, mu))
    assert got == pytest.approx(want, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("m,cp,c,alpha", CASES)
@pytest.mark.parametrize("eps,delta", [(0.0, 0.0), (1.0, 0.0), (3.0, 1e-5), (6.0, 1e-3)])
def test_statistic_matches_reference_approx_dp(m, cp, c, alpha, eps, delta):
    got = float(fdp_statistic(m, cp, c, alpha, eps, lambda y, e: approx_dp_blow_up_inverse(y, e, delta)))
    want = _ref_stat(m, cp, c, alpha, lambda y: _ref_dp_inv(y, eps, delta))
    assert got == pytest.approx(want, rel=1e-9, abs=1e-12)


def test_batched_statistic_equals_elementwise():
    """One call on a batch with different c (different loop lengths, different fixed points) = one call each."""
    m = 1000
    cp = np.array([40, 40, 200, 1000, 10, 0])
    c = np.array([36, 30, 150, 1000, 10, 0])
    mu = np.array([0.4, 0.1, 0.2, 2.0, 1.0, 0.5])
    batch = fdp_statistic(m, cp, c, 0.05, mu, gdp_blow_up_inverse)
    one = [float(fdp_statistic(m, a, b, 0.05, u, gdp_blow_up_inverse)) for a, b, u in zip(cp, c, mu)]
    np.testing.assert_allclose(batch, one, rtol=0, atol=0)


def test_early_stopping_rejection_and_cheap_forms_change_no_decision():
    """fdp_rejects stops an element once its partial sum is positive, and the families' ``inside`` forms skip the
    clip and NaN handling: on a random batch the decisions equal the full statistic's sign and the forms' values
    equal the general ones bit for bit."""
    rng = np.random.default_rng(7)
    m = 500
    cp = rng.integers(1, m + 1, 4000)
    c = (cp * rng.uniform(0.5, 1.0, cp.size)).astype(np.int64)
    alpha = rng.choice([0.05, 0.01, 0.001], cp.size)
    for fam, par in ((GdpInverse(), rng.uniform(0.0, 1.5, cp.size)),
                     (ApproxDpInverse(1e-5), rng.uniform(0.0, 2.0, cp.size)),
                     (ApproxDpInverse(0.0), rng.uniform(0.0, 2.0, cp.size))):
        full = fdp_statistic(m, cp, c, alpha, par, fam)
        assert np.array_equal(fdp_rejects(m, cp, c, alpha, par, fam), full > 0.0)
        assert 0.1 < float(np.mean(full > 0.0)) < 0.9
        state = fam.prepare(par) if hasattr(fam, "prepare") else par
        y = np.r_[0.0, 1.0, rng.uniform(0.0, 1.0, cp.size - 2)]
        assert np.array_equal(fam.inside(state)(y, state), fam(y, state))
    # an overflowing e^eps keeps the general form
    assert ApproxDpInverse(1e-5).inside(ApproxDpInverse(1e-5).prepare(np.array([1.0, 800.0]))) is None
    assert GdpInverse().inside(np.array([1.0, np.inf])) is None


@pytest.mark.parametrize("m,cp,c,alpha", [x for x in CASES if x[3] < 0.5])
def test_largest_rejected_matches_reference(m, cp, c, alpha):
    mu = float(fdp_gdp_mu(m, cp, c, confidence=1 - alpha)[0])
    ref = _ref_largest(m, cp, c, alpha, lambda u: (lambda y: _ref_gdp_inv(y, u)), 40.0)
    assert mu <= ref + 1e-9                     # never above the reference (the search errs low)
    assert mu == pytest.approx(ref, abs=1e-4)
    eps = float(fdp_approx_dp_epsilon(m, cp, c, delta=1e-5, confidence=1 - alpha)[0])
    ref_e = _ref_largest(m, cp, c, alpha, lambda e: (lambda y: _ref_dp_inv(y, e, 1e-5)), 200.0)
    assert eps <= ref_e + 1e-9
    assert eps == pytest.approx(ref_e, abs=1e-3)


def test_perfect_guesses_reach_theorem_3s_ceiling():
    """Perfect guesses on all m canaries, pure-DP curves: p^m <= alpha with p = e^eps / (1 + e^eps), i.e. the ceiling
    eps = logit(alpha^(1/m)) -- 6.50 with 2000 canaries, 5.81 with 1000 (not the 5.34 / 4.64 of equal guess counts
    over a Bonferroni grid)."""
    for m, pinned in ((1000, 5.81), (2000, 6.50)):
        p = 0.05 ** (1.0 / m)
        closed = math.log(p / (1 - p))
        got = float(fdp_approx_dp_epsilon(m, m, m, delta=0.0, confidence=0.95)[0])
        assert got == pytest.approx(closed, abs=1e-3)
        assert round(closed, 2) == pinned


def test_monotone_in_parameter_and_level():
    """A rejected curve stays rejected for every more private parameter and every larger level (the searches and
    the p-value bisection rely on it)."""
    rng = np.random.default_rng(0)
    for _ in range(60):
        m = int(rng.integers(20, 3000))
        cp = int(rng.integers(1, m + 1))
        c = int(rng.integers(cp // 2, cp + 1))
        mus = np.linspace(0, 4, 41)
        rej = fdp_statistic(m, cp, c, 0.05, mus, gdp_blow_up_inverse) > 0
        assert not np.any(np.diff(rej.astype(int)) > 0), (m, cp, c)      # True ... True False ... False
        alphas = np.geomspace(1e-6, 1, 30)
        rej_a = fdp_statistic(m, cp, c, alphas, 0.5, gdp_blow_up_inverse) > 0
        assert not np.any(np.diff(rej_a.astype(int)) < 0), (m, cp, c)    # False ... False True ... True


def test_profile_p_value_of_a_gaussian_curve():
    """The p-value of a GDP curve given as a privacy profile is at least the level at which the Gaussian family
    itself rejects it (the profile's finite grid gives a lower, harder-to-reject curve), and small for strong
    evidence."""
    from dpaudit.accountants.closed_form import log_gaussian_delta

    eps = np.linspace(0, 30, 301)
    deltas = np.array([math.exp(log_gaussian_delta(e, 0.5)) for e in eps])
    p = float(fdp_profile_p_value(1000, 40, 40, eps, deltas)[0])
    assert p < 1e-3
    assert float(fdp_statistic(1000, 40, 40, p * 1.01, 0.5, gdp_blow_up_inverse)) > 0
    assert float(fdp_profile_p_value(1000, 40, 22, eps, deltas)[0]) == 1.0


def test_gdp_epsilon_rounds_down_and_matches_closed_form():
    from dpaudit.accountants.closed_form import gaussian_mechanism_epsilon

    for mu in (0.1, 0.5, 1.0, 2.0, 5.0):
        e = gdp_epsilon(mu, 1e-5)
        assert e <= gaussian_mechanism_epsilon(mu, 1e-5)
        assert e == pytest.approx(gaussian_mechanism_epsilon(mu, 1e-5), rel=1e-8)
    assert gdp_epsilon(0.0, 1e-5) == 0.0 and gdp_epsilon(1.0, 0.0) == math.inf


def test_bad_input():
    with pytest.raises(ParameterError):
        fdp_statistic(10, 5, 6, 0.05, 0.1, gdp_blow_up_inverse)
    with pytest.raises(ParameterError):
        fdp_statistic(10, 5, 4, 0.0, 0.1, gdp_blow_up_inverse)
    with pytest.raises(ParameterError, match="delta"):
        fdp_approx_dp_epsilon(10, 5, 5, delta=1.0)


# --------------------------------------------------------------------------------------------------
# Monte Carlo soundness on exact mechanisms


def _gaussian_audits(mu: float, m: int, runs: int, k: int, seed: int) -> np.ndarray:
    """Certified mu of ``runs`` one-run audits of the Gaussian mechanism (canary in: +mu), k in and k out guesses."""
    rng = np.random.default_rng(seed)
    out = np.empty(runs)
    for r in range(runs):
        inc = rng.random(m) < 0.5
        x = inc * mu + rng.standard_normal(m)
        order = np.argsort(x)
        correct = int(inc[order[m - k:]].sum() + (~inc[order[:k]]).sum())
        out[r] = float(fdp_gdp_mu(m, 2 * k, correct)[0])
    return out


def _rr_audits(eps: float, m: int, runs: int, seed: int) -> np.ndarray:
    """Certified eps (pure-DP curves) of ``runs`` one-run audits of eps-DP randomized response, all guessed."""
    rng = np.random.default_rng(seed)
    p = math.exp(eps) / (1 + math.exp(eps))
    out = np.empty(runs)
    for r in range(runs):
        correct = int(rng.binomial(m, p))       # each canary's response equals its coin with probability p
        out[r] = float(fdp_approx_dp_epsilon(m, m, correct, delta=0.0)[0])
    return out


def test_soundness_gaussian_mechanism_cheap():
    """200 one-run audits of the exact Gaussian mechanism (mu = 1, 1000 canaries): the certified mu exceeds the true
    mu in at most 5% of them -- and the audit has power."""
    mus = _gaussian_audits(1.0, 1000, 200, 100, seed=1)
    assert np.mean(mus > 1.0) <= 0.05
    assert np.median(mus) > 0.5


@pytest.mark.parametrize("eps,m", [(0.5, 1000), (2.0, 1000), (2.0, 2000), (5.0, 2000)])
def test_soundness_randomized_response_exact(eps, m):
    """eps-DP randomized response on every canary's coin, every canary guessed by its response: the number of
    correct guesses is exactly Binomial(m, e^eps / (1 + e^eps)), so the failure probability of the certified bound is
    computed exactly (sum over every possible count), not sampled: at most 5%."""
    from scipy import stats

    p = math.exp(eps) / (1 + math.exp(eps))
    lo = max(0, int(m * p - 8 * math.sqrt(m)))
    counts = np.arange(lo, m + 1)
    bounds = fdp_approx_dp_epsilon(m, m, counts, delta=0.0)
    fail = float(stats.binom.pmf(counts, m, p)[bounds > eps].sum())
    assert fail <= 0.05
    assert fail > 0.02          # and not vacuous: the test is close to its level
    assert float(np.median(_rr_audits(eps, m, 21, seed=2))) > 0.7 * eps


@pytest.mark.slow
@pytest.mark.parametrize("mu,m,k", [(0.5, 1000, 100), (1.0, 1000, 50), (2.0, 2000, 200), (1.0, 10000, 500)])
def test_soundness_gaussian_mechanism_many_seeds(mu, m, k):
    mus = _gaussian_audits(mu, m, 2000, k, seed=3)
    assert np.mean(mus > mu) <= 0.05


@pytest.mark.slow
@pytest.mark.parametrize("eps,m", [(0.5, 1000), (2.0, 2000)])
def test_soundness_randomized_response_many_seeds(eps, m):
    """The same by Monte Carlo, 4000 audits (the exact computation above is the sharper check)."""
    vals = _rr_audits(eps, m, 4000, seed=4)
    assert np.mean(vals > eps) <= 0.05

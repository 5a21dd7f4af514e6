"""PATE 2018's data-dependent threshold analysis for Confident-GNMax, against an independent per-query reference.

tensorflow_privacy (which has ``compute_rdp_data_dependent_threshold``) needs TensorFlow and is not installed here;
the reference below is written per query from PATE 2018's formulas with scipy (q of the check = the probability of
its less likely outcome, Theorem 6 with the check's Gaussian RDP curve, sigma' = sqrt(2) sigma1).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dpaudit.accountants import account_gnmax, rdp_threshold_data_dependent, threshold_log_pr
from dpaudit.accountants.rdp import DEFAULT_ORDERS, rdp_to_epsilon


def theorem6_one(logq: float, sigma: float, orders: np.ndarray) -> np.ndarray:
    """PATE 2018 Theorem 6 with Proposition 10's orders, one query, scalar math; min with lambda / sigma^2."""
    var = sigma * sigma
    out = orders / var
    mu2 = sigma * math.sqrt(-logq) if logq < 0 else 0.0
    mu1 = mu2 + 1.0
    if not (mu2 > 1.0 and -logq > mu2 / var):
        return out
    e1, e2 = mu1 / var, mu2 / var
    if logq > (mu2 - 1.0) * e2 - mu2 * (math.log(mu1 / (mu1 - 1.0)) + math.log(mu2 / (mu2 - 1.0))):
        return out
    res = out.copy()
    for i, lam in enumerate(orders):
        if lam >= mu1:
            continue
        q = math.exp(logq)
        a = (1.0 - q) / (1.0 - (q * math.exp(e2)) ** ((mu2 - 1.0) / mu2))
        log_b = e1 - logq / (mu1 - 1.0)
        s = np.logaddexp(math.log1p(-q) + (lam - 1.0) * math.log(a), logq + (lam - 1.0) * log_b)
        res[i] = min(out[i], max(s / (lam - 1.0), 0.0))
    return res


def reference_threshold_rdp(votes: np.ndarray, t: float, sigma1: float, orders: np.ndarray) -> np.ndarray:
    total = np.zeros(orders.size)
    for row in votes:
        logpr = float(stats.norm.logsf(t - row.max(), scale=sigma1))
        logq = min(logpr, math.log(-math.expm1(logpr)))
        total += theorem6_one(logq, math.sqrt(2.0) * sigma1, orders)
    return total


@pytest.mark.parametrize("seed", range(6))
def test_threshold_rdp_matches_the_per_query_reference(seed):
    rng = np.random.default_rng(seed)
    teachers = int(rng.integers(50, 300))
    votes = np.array([rng.multinomial(teachers, rng.dirichlet(np.full(10, rng.uniform(0.1, 2.0)))) for _ in range(40)], float)
    t = float(rng.uniform(0.3, 0.9) * teachers)
    sigma1 = float(rng.uniform(5.0, 60.0))
    orders = np.array([1.5, 2.0, 3.0, 5.0, 8.0, 16.0, 32.0, 64.0])
    ours = rdp_threshold_data_dependent(threshold_log_pr(votes, t, sigma1), sigma1, orders).sum(axis=0)
    ref = reference_threshold_rdp(votes, t, sigma1, orders)
    np.testing.assert_allclose(ours, ref, rtol=1e-9, atol=1e-15)
    assert np.all(ours <= len(votes) * orders / (2 * sigma1**2) * (1 + 1e-12))


def test_confident_gnmax_headline_uses_the_data_dependent_threshold_cost():
    votes = np.tile([240.0, 5, 5] + [0] * 7, (100, 1))
    res = account_gnmax(votes, sigma=40.0, delta=1e-5, threshold=150.0, sigma1=20.0)
    grid = np.array(DEFAULT_ORDERS)
    data_independent_check = 100 * grid / (2 * 20.0**2)
    from dpaudit.accountants import gaussian_log_q, rdp_gnmax_data_dependent
    gn = rdp_gnmax_data_dependent(gaussian_log_q(votes, 40.0), 40.0, grid).sum(axis=0)
    old = rdp_to_epsilon(grid, gn + data_independent_check, 1e-5, warn=False)[0]
    thr = reference_threshold_rdp(votes, 150.0, 20.0, grid)
    new = rdp_to_epsilon(grid, gn + thr, 1e-5, warn=False)[0]
    assert new < old
    assert res.epsilon == pytest.approx(new, rel=1e-9)
    assert any("threshold analysis" in a for a in res.statement.assumptions)


def test_threshold_local_sensitivity_covers_every_one_step_neighbour():
    from dpaudit.accountants import local_sensitivity_bounds_threshold
    rng = np.random.default_rng(3)
    t, sigma1, order = 6.0, 2.0, 4.0
    for _ in range(20):
        v = rng.multinomial(10, rng.dirichlet(np.ones(3))).astype(float)
        a = local_sensitivity_bounds_threshold(v[None, :], threshold=t, sigma1=sigma1, order=order, max_distance=3)[0]
        assert np.all(np.diff(a) >= 0)
        cost = lambda h: rdp_threshold_data_dependent(threshold_log_pr(h[None, :], t, sigma1), sigma1, [order])[0, 0]  # noqa: E731
        worst = 0.0
        for i in range(3):
            for j in range(3):
                if i != j and v[i] >= 1:
                    w = v.copy()
                    w[i] -= 1
                    w[j] += 1
                    worst = max(worst, abs(cost(w) - cost(v)))
        assert worst <= a[0] * (1 + 1e-12) + 1e-15


def test_release_with_threshold_adds_the_check_and_its_sensitivity():
    from dpaudit.accountants import release_noisy_epsilon
    votes = np.tile([40.0, 5, 5], (20, 1))
    plain = release_noisy_epsilon(votes, sigma=8.0, order=8.0, beta=0.05, sigma_ss=2.0, delta=1e-5, seed=0)
    conf = release_noisy_epsilon(votes, sigma=8.0, order=8.0, beta=0.05, sigma_ss=2.0, delta=1e-5, seed=0,
                                 threshold=30.0, sigma1=10.0)
    assert conf.private_rdp > plain.private_rdp and conf.smooth_sensitivity >= plain.smooth_sensitivity

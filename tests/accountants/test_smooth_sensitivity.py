"""Smooth sensitivity of GNMax's data-dependent RDP and its release (dpaudit.accountants.smooth_sensitivity)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from dpaudit.accountants.gnmax import gaussian_log_q, rdp_gnmax_data_dependent
from dpaudit.accountants.smooth_sensitivity import (
    SmoothSensitivityRelease,
    gnmax_step_bounds,
    local_sensitivity_bounds_gnmax,
    release_noisy_epsilon,
    rdp_gnss,
    smooth_sensitivity_gnmax,
)
from dpaudit.errors import ParameterError
from dpaudit.serial import from_dict, to_dict


def _eps(h, sigma, order):
    return rdp_gnmax_data_dependent(gaussian_log_q(np.array([h], float), sigma), sigma, [order])[0, 0]


def _neighbours(h):
    for a, b in itertools.permutations(range(len(h)), 2):
        if h[a] > 0:
            g = list(h)
            g[a] -= 1
            g[b] += 1
            yield tuple(g)


def _brute_force_A(h, sigma, order, dmax):
    """Exact max local sensitivity at distance <= d, by enumerating every histogram reachable in d moves."""
    frontier, seen = {tuple(h)}, {tuple(h)}
    out = []
    for _ in range(dmax + 1):
        best = max(abs(_eps(n, sigma, order) - _eps(m, sigma, order)) for n in seen for m in _neighbours(n))
        out.append(best)
        frontier = {m for n in frontier for m in _neighbours(n)} - seen
        seen |= frontier
    return np.array(out)


@pytest.mark.parametrize("hist", [(14, 4, 2), (9, 8, 3), (20, 0, 0), (3, 17, 0)])
def test_local_sensitivity_bound_dominates_brute_force(hist):
    # small sigma so that the data-dependent bound applies and changes quickly with the votes
    sigma, order, dmax = 2.0, 4.0, 4
    exact = _brute_force_A(hist, sigma, order, dmax)
    bound = local_sensitivity_bounds_gnmax(np.array([hist], float), sigma=sigma, order=order, max_distance=dmax)[0]
    assert np.all(bound >= exact - 1e-12), (bound, exact)
    assert np.any(exact > 0)


def test_step_bounds_contain_every_neighbour():
    rng = np.random.default_rng(3)
    for _ in range(30):
        h = rng.multinomial(30, rng.dirichlet(np.ones(4)))
        lq = gaussian_log_q(np.array([h], float), 3.0)[0]
        lo, hi = gnmax_step_bounds(lq, 3.0, 4)
        for g in _neighbours(tuple(h)):
            lg = gaussian_log_q(np.array([g], float), 3.0)[0]
            assert lo - 1e-9 <= lg <= hi + 1e-9


def test_permuting_classes_does_not_change_anything():
    # a widely copied reference compares unsorted counts and returns 0 when the winner is not class 0
    votes = np.array([[200, 30, 20, 0], [10, 5, 230, 5], [0, 0, 0, 250]], float)
    perm = votes[:, [3, 1, 0, 2]]
    a = local_sensitivity_bounds_gnmax(votes, sigma=40.0, order=10.0)
    b = local_sensitivity_bounds_gnmax(perm, sigma=40.0, order=10.0)
    np.testing.assert_allclose(a, b)
    assert np.all(a[:, 0] > 0)  # winners in classes 0, 2 and 3: none is reported as insensitive


def test_smooth_sensitivity_properties():
    votes = np.tile([200.0, 40, 10, 0], (20, 1))
    s = [smooth_sensitivity_gnmax(votes, sigma=40.0, order=10.0, beta=b) for b in (0.001, 0.01, 0.1)]
    assert s[0] >= s[1] >= s[2] > 0
    ls = local_sensitivity_bounds_gnmax(votes, sigma=40.0, order=10.0)
    assert np.all(np.diff(ls, axis=1) >= 0)
    assert s[2] >= ls[:, 0].sum()  # d = 0 term


def test_rdp_gnss_closed_form_and_range():
    # PATE 2018, Theorem 23
    b, s, lam = 0.01, 10.0, 20.0
    want = lam * math.exp(2 * b) / s**2 + (b * lam - 0.5 * math.log(1 - 2 * lam * b)) / (lam - 1)
    assert rdp_gnss(b, s, lam) == pytest.approx(want)
    with pytest.raises(ParameterError, match="'order'"):
        rdp_gnss(0.01, 10.0, 50.0)


def test_release_is_reproducible_and_private_figure_is_separate():
    votes = np.tile([200.0, 40, 10] + [0] * 7, (50, 1))
    kw = dict(sigma=40.0, order=10.0, beta=0.01, sigma_ss=10.0, delta=1e-5)
    a = release_noisy_epsilon(votes, seed=7, **kw)
    b = release_noisy_epsilon(votes, seed=7, **kw)
    c = release_noisy_epsilon(votes, seed=8, **kw)
    assert a == b and a.noisy_rdp != c.noisy_rdp
    assert a.seed == 7 and a.release_rdp == pytest.approx(rdp_gnss(0.01, 10.0, 10.0))
    assert a.epsilon == pytest.approx(a.noisy_rdp + a.release_rdp + math.log(1e5) / 9, rel=1e-9) or a.epsilon < (
        a.noisy_rdp + a.release_rdp + math.log(1e5) / 9)
    assert from_dict(SmoothSensitivityRelease, to_dict(a)) == a
    assert a.private_rdp == pytest.approx(float(rdp_gnmax_data_dependent(gaussian_log_q(votes, 40.0), 40.0, [10.0]).sum()))

"""Smooth sensitivity of GNMax's data-dependent RDP and its release (dpaudit.accountants.smooth_sensitivity).

The references here are written from the papers' definitions, not from dpaudit's code: Proposition 7's q and Theorem 6
(PATE 2018) for one query's RDP, the local sensitivity by enumerating every histogram within distance d (Nissim,
Raskhodnikova, Smith 2007, Definition 2.1 / PATE 2018 Appendix), and beta-smoothness checked on explicit neighbours.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.special import log_ndtr

from dpaudit.accountants.gnmax import gaussian_log_q, gnmax_mu2, rdp_gnmax_mu2
from dpaudit.accountants.smooth_sensitivity import (
    SmoothSensitivityRelease,
    _Ell,
    gnmax_step_bounds,
    local_sensitivity_bounds_gnmax,
    local_sensitivity_bounds_threshold,
    rdp_gnss,
    release_gnmax_epsilon,
    release_noisy_epsilon,
    smooth_sensitivity_gnmax,
)
from dpaudit.errors import ParameterError
from dpaudit.serial import from_dict, to_dict


# ------------------------------------------------------------------------------------------ references from the paper


def paper_rdp(hist, sigma: float, lam: float) -> float:
    """One GNMax answer's data-dependent RDP at order lam, from PATE 2018's text: q of Proposition 7 (union bound over
    the other classes, capped at 1 - 1/C), Theorem 6 with Proposition 10's mu1, mu2 where its conditions hold, else
    lam / sigma^2 (Proposition 8); the minimum of the two."""
    h = sorted(hist, reverse=True)
    c = len(h)
    lt = [float(log_ndtr(-(h[0] - x) / (math.sqrt(2.0) * sigma))) for x in h[1:]]
    m = max(lt)
    logq = min(m + math.log(sum(math.exp(t - m) for t in lt)), math.log1p(-1.0 / c))
    di = lam / sigma**2
    mu2 = sigma * math.sqrt(-logq)
    mu1 = mu2 + 1.0
    if not (mu2 > 1.0 and lam < mu1):
        return di
    e1, e2 = mu1 / sigma**2, mu2 / sigma**2
    if not (logq + e2 < 0 and logq <= (mu2 - 1.0) * e2 - mu2 * math.log(mu1 / (mu1 - 1.0) * mu2 / (mu2 - 1.0))):
        return di
    q = math.exp(logq)
    log_a = math.log1p(-q) - math.log1p(-math.exp((logq + e2) * (mu2 - 1.0) / mu2))
    log_b = e1 - logq / (mu1 - 1.0)
    s = np.logaddexp(math.log1p(-q) + (lam - 1.0) * log_a, logq + (lam - 1.0) * log_b)
    return min(di, max(float(s) / (lam - 1.0), 0.0))


def neighbours(h):
    """Every histogram one teacher's moved vote away (one count -1, another +1)."""
    out = set()
    for a, b in itertools.permutations(range(len(h)), 2):
        if h[a] > 0:
            g = list(h)
            g[a] -= 1
            g[b] += 1
            out.add(tuple(g))
    return sorted(out)


def brute_force_a(h, sigma: float, lam: float, dmax: int) -> np.ndarray:
    """A^(d) = max over histograms n' within d moves of max over n'' ~ n' of |eps(n') - eps(n'')|, by enumeration."""
    eps: dict = {}

    def e(x):
        if x not in eps:
            eps[x] = paper_rdp(x, sigma, lam)
        return eps[x]

    seen, frontier, out = {tuple(h)}, {tuple(h)}, []
    best = 0.0
    for _ in range(dmax + 1):
        for n1 in frontier:
            best = max([best] + [abs(e(n1) - e(n2)) for n2 in neighbours(n1)])
        out.append(best)
        frontier = {m for n1 in frontier for m in neighbours(n1)} - seen
        seen |= frontier
    return np.array(out)


# ------------------------------------------------------------------------------------------ the construction's pieces


def test_dpaudit_rdp_matches_the_paper_reference():
    rng = np.random.default_rng(0)
    for _ in range(50):
        c = int(rng.integers(2, 8))
        h = rng.multinomial(int(rng.integers(2, 60)), rng.dirichlet(np.ones(c)))
        sigma, lam = float(rng.uniform(0.5, 30)), float(rng.uniform(1.2, 30))
        ours = rdp_gnmax_mu2(gnmax_mu2(np.array([h], float), sigma), sigma, [lam])[0, 0]
        assert ours == pytest.approx(paper_rdp(h, sigma, lam), rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("hist, sigma, lam", [((14, 4, 2), 2.0, 4.0), ((9, 8, 3), 2.0, 4.0), ((20, 0, 0), 2.0, 4.0),
                                              ((3, 17, 0), 2.0, 4.0), ((12, 1, 1, 0), 1.5, 3.0), ((7, 7), 1.0, 2.5),
                                              ((16, 2, 0), 4.0, 8.0), ((10, 3, 2, 1, 0), 3.0, 6.0), ((15, 5), 1.0, 3.0),
                                              ((18, 1, 1), 3.0, 5.0)])
def test_local_sensitivity_bound_dominates_and_agrees_with_brute_force(hist, sigma, lam):
    dmax = (sum(hist) + 1) // 2 + 1  # every distance up to where the construction stops growing
    exact = brute_force_a(hist, sigma, lam, dmax)
    bound = local_sensitivity_bounds_gnmax(np.array([hist], float), sigma=sigma, order=lam, max_distance=dmax)[0]
    assert np.all(bound >= exact * (1 - 1e-9) - 1e-15), (bound, exact)
    assert np.any(exact > 0)
    # agreement on what the release uses, the smooth sensitivity: within 2.2x of the brute-force one in these cases
    # (measured 1.00-2.12x; the looseness is the construction's: Proposition 13's equal-terms step, gaps moved by 2d)
    d = np.arange(dmax + 1)
    for beta in (0.01, 0.1, 0.3):
        w = np.exp(-beta * d)
        ratio = (bound * w).max() / (exact * w).max()
        assert 1 - 1e-9 <= ratio <= 2.2, (beta, ratio)


def test_step_bounds_contain_every_neighbour():
    rng = np.random.default_rng(3)
    for _ in range(30):
        h = rng.multinomial(30, rng.dirichlet(np.ones(4)))
        lq = gaussian_log_q(np.array([h], float), 3.0)[0]
        lo, hi = gnmax_step_bounds(lq, 3.0, 4)
        for g in neighbours(tuple(h)):
            lg = gaussian_log_q(np.array([g], float), 3.0)[0]
            assert lo - 1e-9 <= lg <= hi + 1e-9


@pytest.mark.parametrize("sigma, lam, c", [(40.0, 10.0, 10), (40.0, 30.0, 10), (2.0, 4.0, 3), (10.0, 2.0, 100),
                                           (0.5, 1.5, 3), (1000.0, 3.0, 2), (40.0, 80.0, 10), (0.05, 2.0, 3)])
def test_supremum_over_intervals_is_exact(sigma, lam, c):
    # the supremum of ell over an interval (end values + the located critical points) against a dense scan of ell;
    # small sigma gives ell an interior maximum below PATE 2018's q1 (its condition C6 fails there)
    ell = _Ell(sigma, lam, c)
    cap = math.log1p(-1.0 / c)
    x = np.linspace(math.sqrt(-cap), 60.0 / min(sigma, 1.0), 100_001)
    grid = np.sort(np.concatenate([-np.square(x), ell.K[ell.K > -x[-1] ** 2]]))
    vals = ell(grid)
    rng = np.random.default_rng(1)
    i, j = np.sort(rng.integers(0, grid.size, (2, 1500)), axis=0)
    sup = ell.sup(grid[i], grid[j])
    dense = np.array([vals[a:b + 1].max() for a, b in zip(i, j)])
    assert np.all(dense <= sup * (1 + 1e-12) + 1e-300)
    assert np.all(sup <= dense * (1 + 1e-9) + 1e-300) or np.all(sup >= dense)  # exact, not a loose bound
    assert ell.vmax >= vals.max() * (1 - 1e-12)


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


# ------------------------------------------------------------------------------------------ beta-smoothness


def sorted_neighbours(h):
    """Every neighbour of h up to a relabelling of the classes (moving a vote from a class with count a to one with
    count b; the GNMax cost depends on the sorted counts only)."""
    vals, counts = np.unique(np.asarray(h), return_counts=True)
    out = set()
    for a, ca in zip(vals, counts):
        if a == 0:
            continue
        for b, cb in zip(vals, counts):
            if a == b and ca < 2:
                continue
            g = list(sorted(h, reverse=True))
            g[g.index(a)] -= 1
            g[len(g) - 1 - g[::-1].index(b) if a != b else [i for i, x in enumerate(g) if x == b][-1]] += 1
            out.add(tuple(sorted(g, reverse=True)))
    return sorted(out)


def _check_smooth(h, sigma, lam, beta):
    """S(h) <= e^beta S(g) and S(g) <= e^beta S(h) for every neighbour g, in one vectorised call."""
    nbrs = sorted_neighbours(tuple(int(x) for x in h))
    rows = np.array([sorted(h, reverse=True)] + nbrs, float)
    a = local_sensitivity_bounds_gnmax(rows, sigma=sigma, order=lam)
    s = (a * np.exp(-beta * np.arange(a.shape[1]))).max(axis=1)
    # the saturated tail is flat: the max over the returned distances is the smooth sensitivity
    # smooth_sensitivity_gnmax rounds up by a relative 1e-9 (float slack between the function and the bound)
    assert s[0] * (1 + 1e-9) == pytest.approx(smooth_sensitivity_gnmax(np.array([h], float), sigma=sigma, order=lam,
                                                                       beta=beta), rel=1e-12, abs=1e-300)
    bound = math.exp(beta) * (1 + 1e-12)
    assert np.all(s[0] <= bound * s[1:] + 1e-300), (h, s[0], s[1:].min())
    assert np.all(s[1:] <= bound * s[0] + 1e-300), (h, s[0], s[1:].max())
    return len(nbrs)


#: (sigma, order, classes) combinations: each builds one ell once (cached) and is checked on many histograms.
_COMBOS = [(40.0, 10.0, 10), (2.0, 4.0, 3), (10.0, 8.0, 2), (100.0, 30.0, 5), (0.5, 1.5, 4), (5.0, 2.0, 20),
           (25.0, 20.0, 100), (300.0, 50.0, 7)]


def _smoothness_run(n_hist: int, seed: int, max_teachers: int, max_teachers_many_classes: int) -> int:
    """n_hist random histograms over the combinations (2-100 classes, 2-max_teachers teachers; the 100-class one up to
    max_teachers_many_classes, its neighbours being many), each against every neighbour. Returns the number checked."""
    rng = np.random.default_rng(seed)
    checked = 0
    for k in range(n_hist):
        sigma, lam, c = _COMBOS[k % len(_COMBOS)]
        top = max_teachers_many_classes if c >= 50 else max_teachers
        n = int(rng.integers(2, top + 1))
        h = rng.multinomial(n, rng.dirichlet(np.full(c, rng.uniform(0.05, 3.0))))
        beta = float(np.exp(rng.uniform(math.log(1e-3), math.log(0.49 / lam))))
        _check_smooth(h, sigma, lam, beta)
        checked += 1
    return checked


def test_beta_smooth_on_random_histograms():
    # S(x) <= e^beta S(y) for every neighbour y (one vote moved between any two classes), 2-100 classes, 2-1000 teachers
    assert _smoothness_run(160, seed=0, max_teachers=1000, max_teachers_many_classes=100) == 160


@pytest.mark.slow
def test_beta_smooth_on_thousands_of_random_histograms():
    assert _smoothness_run(4000, seed=1, max_teachers=1000, max_teachers_many_classes=1000) == 4000


def test_sorted_neighbours_cover_every_neighbour():
    for h in [(3, 3, 0, 1), (5, 0), (2, 2, 2), (4, 1, 1, 0, 0)]:
        assert sorted_neighbours(h) == sorted({tuple(sorted(g, reverse=True)) for g in neighbours(h)})


def test_beta_smooth_regression_examples():
    # the grid-sampled version broke smoothness by up to 7.9% (issue 29); near-ties and extreme consensus
    for h in [(24, 67, 12, 37, 16, 33, 43, 9), (0, 0, 128, 0, 0, 2, 0, 0, 3), (5, 5, 0), (1000, 0), (1, 1),
              (501, 499), (0, 3, 0, 0)]:
        _check_smooth(h, 10.2, 18.1, 0.0019)
        _check_smooth(h, 3.66, 17.6, 0.0035)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(st.lists(st.integers(0, 40), min_size=3, max_size=3), min_size=2, max_size=3),
       moves=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2)), min_size=3, max_size=3),
       beta=st.floats(0.002, 0.04))
def test_beta_smooth_for_a_sum_over_queries_with_threshold(rows, moves, beta):
    # one record moves one teacher's vote in every query: the neighbour moves a vote in each row
    x = np.array(rows, float)
    if np.any(x.sum(axis=1) == 0):
        return
    y = x.copy()
    for r, (a, b) in enumerate(moves[:len(rows)]):
        if a != b and y[r, a] > 0:
            y[r, a] -= 1
            y[r, b] += 1
    answered = np.arange(len(rows)) % 2 == 0
    kw = dict(sigma=4.0, order=6.0, beta=beta, threshold=20.0, sigma1=3.0, answered=answered)
    sx, sy = smooth_sensitivity_gnmax(x, **kw), smooth_sensitivity_gnmax(y, **kw)
    assert sx <= math.exp(beta) * sy * (1 + 1e-12) + 1e-300
    assert sy <= math.exp(beta) * sx * (1 + 1e-12) + 1e-300


def test_threshold_local_sensitivity_covers_every_neighbour_at_every_distance():
    t, sigma1, order = 6.0, 2.0, 4.0

    def cost(h):
        from dpaudit.accountants.gnmax import threshold_mu2
        return rdp_gnmax_mu2(threshold_mu2([max(h)], t, sigma1), math.sqrt(2) * sigma1, [order])[0, 0]

    for h in [(10, 0, 0), (4, 3, 3), (6, 4, 0), (2, 1, 7)]:
        seen, frontier, exact = {h}, {h}, []
        best = 0.0
        for _ in range(4):
            for n1 in frontier:
                best = max([best] + [abs(cost(n1) - cost(n2)) for n2 in neighbours(n1)])
            exact.append(best)
            frontier = {m for n1 in frontier for m in neighbours(n1)} - seen
            seen |= frontier
        a = local_sensitivity_bounds_threshold(np.array([h], float), threshold=t, sigma1=sigma1, order=order,
                                               max_distance=3)[0]
        assert np.all(a >= np.array(exact) * (1 - 1e-12)), (h, a, exact)
        np.testing.assert_allclose(a, exact, rtol=1e-9)  # exact for the threshold cost (a function of the max)


# ------------------------------------------------------------------------------------------ release


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
    assert a.epsilon <= a.noisy_rdp + a.release_rdp + math.log(1e5) / 9 + 1e-12
    assert from_dict(SmoothSensitivityRelease, to_dict(a)) == a
    ref = sum(paper_rdp([200, 40, 10] + [0] * 7, 40.0, 10.0) for _ in range(50))
    assert a.private_rdp == pytest.approx(ref, rel=1e-9)
    assert a.smooth_sensitivity == pytest.approx(smooth_sensitivity_gnmax(votes, sigma=40.0, order=10.0, beta=0.01))


def test_release_search_records_seed_and_keeps_private_values_out():
    rng = np.random.default_rng(0)
    votes = np.array([rng.multinomial(100, rng.dirichlet(np.full(5, 0.2))) for _ in range(200)], float)
    answered = votes.max(axis=1) >= 60
    kw = dict(sigma=10.0, delta=1e-5, threshold=60.0, sigma1=8.0, answered=answered)
    a = release_gnmax_epsilon(votes, seed=11, **kw)
    assert a == release_gnmax_epsilon(votes, seed=11, **kw) and a.facts["seed"] == 11
    released = a.statements[0]
    assert released.epsilon != release_gnmax_epsilon(votes, seed=12, **kw).statements[0].epsilon
    assert released.details["route"].startswith("smooth-sensitivity release")
    assert not released.data_dependent and "NOISY ESTIMATE" in " ".join(released.assumptions)
    # issue 27: the headline is the smallest valid upper bound; the released figures are noisy estimates (no route)
    assert a.headline == 2 and a.statement.route.startswith("data-independent") and a.headline_route == a.statement.route
    assert not released.route and not a.statements[1].route
    assert set(a.facts) >= {"order", "beta", "sigma_ss", "seed"}
    assert "smooth_sensitivity" not in a.facts and "private_rdp" not in a.facts
    lam, beta = a.facts["order"], a.facts["beta"]
    assert 0 < beta < 1 / (2 * lam)
    # the search's choice is the best of its objective over beta (closed-form sigma_ss per beta)
    same = release_noisy_epsilon(votes, sigma=10.0, order=lam, beta=beta, sigma_ss=a.facts["sigma_ss"], delta=1e-5,
                                 seed=11, threshold=60.0, sigma1=8.0, answered=answered)
    assert same.noisy_rdp == pytest.approx(a.facts["noisy_rdp"], rel=1e-12)

    def objective(b):
        ss = smooth_sensitivity_gnmax(votes, sigma=10.0, order=lam, beta=b, threshold=60.0, sigma1=8.0, answered=answered)
        s_ss = (lam * math.exp(2 * b) / ss) ** (1 / 3)
        return rdp_gnss(b, s_ss, lam) + 2 * ss * s_ss

    best = objective(beta)
    for f in (0.5, 0.8, 1.25):
        if beta * f < 1 / (2 * lam):
            assert best <= objective(beta * f) * (1 + 1e-9)
    # fixed parameters: nothing searched, no selection caveat
    fixed = release_gnmax_epsilon(votes, seed=11, order=lam, beta=beta, sigma_ss=2.0, **kw)
    assert fixed.facts["searched"].startswith("nothing") and not any("chosen by looking" in x for x in fixed.statements[0].assumptions)


def test_release_without_seed_draws_and_records_one():
    votes = np.tile([30.0, 2, 0], (5, 1))
    a = release_gnmax_epsilon(votes, sigma=5.0, delta=1e-5)
    assert isinstance(a.facts["seed"], int) and a.facts["seed"] >= 0
    assert any("keep it as private" in w for w in a.warnings)


def test_smooth_sensitivity_range_errors():
    with pytest.raises(ParameterError, match="'sigma'"):
        smooth_sensitivity_gnmax(np.ones((1, 3)), sigma=1e-160, order=2.0, beta=0.1)
    with pytest.raises(ParameterError, match="integer vote counts"):
        smooth_sensitivity_gnmax(np.array([[1.5, 2.0, 0.0]]), sigma=4.0, order=2.0, beta=0.1)
    with pytest.raises(ParameterError, match="'answered'"):
        smooth_sensitivity_gnmax(np.ones((2, 3)), sigma=4.0, order=2.0, beta=0.1, answered=[True])

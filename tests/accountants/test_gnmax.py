"""GNMax / Confident-GNMax accounting (PATE 2018) — dpaudit.accountants.gnmax."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from dpaudit.accountants.base import rdp_function_for
from dpaudit.accountants.events import GaussianNoisyMax
from dpaudit.accountants.closed_form import gaussian_mechanism_epsilon
from dpaudit.accountants.gnmax import (
    account_gnmax,
    gaussian_log_q,
    gnmax_dd_applies,
    gnmax_mu2,
    rdp_gnmax_data_dependent,
    rdp_gnmax_data_independent,
    rdp_gnmax_mu2,
    rdp_threshold,
)
from dpaudit.accountants.rdp import DEFAULT_ORDERS, rdp_to_epsilon
from dpaudit.errors import ParameterError
from dpaudit.serial import to_dict

mpmath.mp.dps = 50


def _mp_logq(row, sigma):
    """mpmath oracle of PATE 2018 Proposition 7: sum over i != i* of P[N(0, 2 sigma^2) > n_i* - n_i], capped at 1 - 1/C."""
    row = [mpmath.mpf(x) for x in row]
    w = max(range(len(row)), key=lambda i: row[i])
    s = sum(mpmath.erfc((row[w] - x) / (2 * mpmath.mpf(sigma))) / 2 for i, x in enumerate(row) if i != w)
    return float(min(mpmath.log(s), mpmath.log(1 - mpmath.mpf(1) / len(row))))


def _mp_rdp(logq, sigma, lam):
    """mpmath oracle of PATE 2018 Theorem 6 with Proposition 10's orders, min with lambda/sigma^2."""
    logq, sigma, lam = mpmath.mpf(logq), mpmath.mpf(sigma), mpmath.mpf(lam)
    q = mpmath.e**logq
    di = lam / sigma**2
    mu2 = sigma * mpmath.sqrt(-logq)
    mu1 = mu2 + 1
    e1, e2 = mu1 / sigma**2, mu2 / sigma**2
    if not (mu2 > 1 and lam < mu1 and -logq > e2
            and logq <= (mu2 - 1) * e2 - mu2 * mpmath.log(mu1 / (mu1 - 1) * mu2 / (mu2 - 1))):
        return float(di)
    a = (1 - q) / (1 - (q * mpmath.e**e2) ** ((mu2 - 1) / mu2))
    b = mpmath.e**e1 / q ** (1 / (mu1 - 1))
    dd = mpmath.log((1 - q) * a ** (lam - 1) + q * b ** (lam - 1)) / (lam - 1)
    return float(min(di, max(dd, 0)))


@pytest.mark.parametrize("row, sigma", [([200, 40, 10, 0], 40.0), ([100, 90, 60], 40.0), ([250, 0, 0, 0, 0], 10.0),
                                        ([5, 5, 0], 1.0), ([0, 0, 300], 20.0)])
def test_log_q_matches_mpmath(row, sigma):
    assert gaussian_log_q(np.array([row], float), sigma)[0] == pytest.approx(_mp_logq(row, sigma), rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("logq, sigma, lam", [(-5.0, 40.0, 2.0), (-5.0, 40.0, 20.0), (-20.0, 40.0, 50.0),
                                               (-50.0, 10.0, 30.0), (-200.0, 20.0, 256.0), (-3.0, 100.0, 1.5)])
def test_rdp_matches_mpmath(logq, sigma, lam):
    got = rdp_gnmax_data_dependent([logq], sigma, [lam])[0, 0]
    assert got == pytest.approx(_mp_rdp(logq, sigma, lam), rel=1e-8, abs=1e-300)


def test_data_dependent_applies_somewhere_in_oracle_cases():
    # guard against an oracle that always falls back (the cases above must exercise Theorem 6)
    assert gnmax_dd_applies([-20.0], 40.0, [50.0])[0, 0]
    assert rdp_gnmax_data_dependent([-20.0], 40.0, [50.0])[0, 0] < 50 / 40**2


def test_data_independent_and_threshold_closed_forms():
    np.testing.assert_allclose(rdp_gnmax_data_independent(40.0, [2, 10]), [2 / 1600, 10 / 1600])
    np.testing.assert_allclose(rdp_threshold(150.0, [2, 10]), [2 / (2 * 150**2), 10 / (2 * 150**2)])


@pytest.mark.parametrize("logq", [0.0, -1e-300, -0.5, -np.inf, -1e-3, -1e4, -1e8])
@pytest.mark.parametrize("sigma", [0.5, 5.0, 40.0, 500.0])
def test_no_nan_and_never_above_independent(logq, sigma):
    orders = np.array([1.01, 1.5, 2, 10, 64, 256])
    r = rdp_gnmax_data_dependent([logq], sigma, orders)[0]
    assert np.all(np.isfinite(r)) and np.all(r >= 0) and np.all(r <= orders / sigma**2 * (1 + 1e-12))


@pytest.mark.parametrize("sigma, lam", [(40.0, 10.0), (40.0, 30.0), (100.0, 50.0), (10.0, 5.0)])
def test_bound_non_decreasing_in_q(sigma, lam):
    # PATE 2018 condition C5: the data-dependent RDP is non-decreasing in q (used by smooth sensitivity)
    lq = np.linspace(-700, math.log(0.5), 20000)
    r = rdp_gnmax_data_dependent(lq, sigma, [lam])[:, 0]
    assert np.all(np.diff(r) >= -1e-12 * r[1:])


def test_account_gnmax_shapes_and_ordering():
    votes = np.tile([200.0, 40, 10] + [0] * 7, (1000, 1))
    res = account_gnmax(votes, sigma=40.0, delta=1e-5)
    assert res.statements[0].data_dependent and not res.statements[1].data_dependent
    assert 0 < res.epsilon < res.statements[1].epsilon
    # the data-independent figure is the smaller of the RDP closed form and the exact Gaussian-DP composition
    grid = np.array(res.parameters["orders"])
    rdp_di = rdp_to_epsilon(grid, 1000 * grid / 1600, 1e-5, warn=False)[0]
    exact = gaussian_mechanism_epsilon(math.sqrt(1000 * 2 / 1600), 1e-5)
    assert res.statements[1].epsilon == pytest.approx(min(rdp_di, exact))
    assert res.statements[1].details["routes"]["data-independent RDP"] == pytest.approx(rdp_di)
    assert res.statements[1].method == res.statements[1].details["route"] == "data-independent Gaussian DP"
    assert res.statement.method == res.statement.details["route"] == "data-dependent RDP"
    assert res.facts["data_dependent_queries"] == 1000
    # the same through the registered RDP of the event
    ev = GaussianNoisyMax(sigma=40.0, votes=votes)
    rdp = rdp_function_for(ev)(ev, grid)
    assert rdp_to_epsilon(grid, rdp, 1e-5, warn=False)[0] == pytest.approx(res.epsilon)
    # permuting classes changes nothing
    assert account_gnmax(votes[:, ::-1], sigma=40.0, delta=1e-5).epsilon == pytest.approx(res.epsilon)


def test_confident_gnmax():
    votes = np.tile([200.0, 40, 10] + [0] * 7, (100, 1))
    plain = account_gnmax(votes, sigma=40.0, delta=1e-5)
    allpay = account_gnmax(votes, sigma=40.0, delta=1e-5, threshold=150.0, sigma1=100.0)
    assert allpay.epsilon > plain.epsilon and allpay.warnings
    half = account_gnmax(votes, sigma=40.0, delta=1e-5, threshold=150.0, sigma1=100.0, answered=np.arange(100) % 2 == 0)
    assert half.epsilon < allpay.epsilon
    none = account_gnmax(votes, sigma=40.0, delta=1e-5, threshold=150.0, sigma1=100.0, answered=np.zeros(100, bool))
    grid = np.array(none.parameters["orders"])
    assert none.epsilon == pytest.approx(min(rdp_to_epsilon(grid, 100 * grid / (2 * 100.0**2), 1e-5, warn=False)[0],
                                             gaussian_mechanism_epsilon(math.sqrt(100 / 100.0**2), 1e-5)))
    di = account_gnmax(sigma=40.0, delta=1e-5, queries=100, threshold=150.0, sigma1=100.0, answered=30)
    assert di.epsilon == pytest.approx(min(rdp_to_epsilon(grid, 30 * grid / 1600 + 100 * grid / 20000, 1e-5, warn=False)[0],
                                           gaussian_mechanism_epsilon(math.sqrt(30 * 2 / 1600 + 100 / 100.0**2), 1e-5)))


@settings(max_examples=30, deadline=None)
@given(rows=st.lists(st.lists(st.integers(0, 300), min_size=3, max_size=3), min_size=1, max_size=15),
       sigma=st.floats(1.0, 200.0))
def test_property_dd_at_most_di(rows, sigma):
    res = account_gnmax(np.array(rows, float), sigma=sigma, delta=1e-5)
    assert 0 <= res.epsilon <= res.statements[1].epsilon + 1e-12


def test_errors():
    with pytest.raises(ParameterError, match="The 'sigma' parameter of account_gnmax must be a float > 0.0"):
        account_gnmax(np.ones((1, 3)), sigma=0.0, delta=1e-5)
    with pytest.raises(ParameterError, match="both 'threshold' and 'sigma1'"):
        account_gnmax(np.ones((1, 3)), sigma=1.0, delta=1e-5, threshold=3.0)
    with pytest.raises(ParameterError, match="'answered'"):
        account_gnmax(np.ones((2, 3)), sigma=1.0, delta=1e-5, threshold=3.0, sigma1=1.0, answered=np.ones(3, bool))


@pytest.mark.parametrize("sigma", [5.0, 40.0, 150.0])
def test_vectorised_total_equals_per_query_sum_and_never_below(sigma):
    # the fast path (linear-space q, arithmetic-only bound where Theorem 6's second term is negligible) against the
    # plain per-query log-space formulas on the same orders
    rng = np.random.default_rng(int(sigma))
    votes = np.array([rng.multinomial(250, rng.dirichlet(np.full(10, 0.3))) for _ in range(800)], float)
    votes = np.vstack([votes, [[250] + [0] * 9, [125, 125] + [0] * 8, [0] * 10, [1e300] + [0] * 9]])
    grid = np.array(DEFAULT_ORDERS)
    res = account_gnmax(votes, sigma=sigma, delta=1e-5)
    ref_rdp = rdp_gnmax_mu2(gnmax_mu2(votes, sigma), sigma, grid).sum(axis=0)
    ref = rdp_to_epsilon(grid, ref_rdp, 1e-5, warn=False)[0]
    ours = res.statements[0].epsilon
    assert res.statements[0].details["route"] == "data-dependent RDP"
    assert ref <= ours <= ref * (1 + 1e-10) + 1e-12


@pytest.mark.parametrize("sigma", [10.0, 40.0, 150.0])
def test_coarse_to_fine_order_search_finds_the_full_grid_minimum(sigma):
    # many queries: the data-dependent route searches the grid coarse-to-fine; it must land on the full grid's
    # minimum (and any order it reports gives a valid epsilon)
    rng = np.random.default_rng(7)
    votes = np.array([rng.multinomial(250, rng.dirichlet(np.full(10, 0.3))) for _ in range(3000)], float)
    res = account_gnmax(votes, sigma=sigma, delta=1e-5)
    grid = np.array(DEFAULT_ORDERS)
    dd = res.statements[0]
    assert dd.details["orders_evaluated"] < grid.size
    full = rdp_gnmax_data_dependent(gaussian_log_q(votes, sigma), sigma, grid).sum(axis=0)
    ref = rdp_to_epsilon(grid, np.minimum(full, votes.shape[0] * grid / sigma**2), 1e-5, warn=False)[0]
    assert ref <= dd.epsilon <= ref * (1 + 1e-10) + 1e-12


# ------------------------------------------------------------------------------------------ issue 29


def test_headline_names_its_route_and_ties_go_to_the_data_independent_figure():
    from dpaudit.accountants.gnmax import ROUTE_DATA_DEPENDENT, ROUTE_GDP, ROUTE_RDP
    strong = account_gnmax(np.tile([250.0, 0, 0], (50, 1)), sigma=40.0, delta=1e-5)
    assert strong.statement.method == strong.statement.details["route"] == ROUTE_DATA_DEPENDENT
    assert strong.facts["headline_route"] == ROUTE_DATA_DEPENDENT and strong.statement.data_dependent
    weak = account_gnmax(np.tile([5.0, 5, 5], (50, 1)), sigma=40.0, delta=1e-5)  # Theorem 6 never applies
    assert weak.statement.method in (ROUTE_GDP, ROUTE_RDP) and not weak.statement.data_dependent
    assert weak.statements[0].epsilon >= weak.epsilon
    js = to_dict(weak)
    assert js["statement"]["details"]["route"] == weak.statement.method


def test_adaptivity_caveat_whenever_a_data_dependent_figure_is_shown():
    from dpaudit.accountants.gnmax import ADAPTIVITY_CAVEAT
    res = account_gnmax(np.tile([250.0, 0, 0], (5, 1)), sigma=40.0, delta=1e-5)
    assert ADAPTIVITY_CAVEAT in res.statements[0].assumptions
    assert any("released privately" in w or "Release it privately" in w for w in res.warnings)
    di = account_gnmax(sigma=40.0, delta=1e-5, queries=5)
    assert not any(ADAPTIVITY_CAVEAT in s.assumptions for s in di.statements) and not di.warnings


def test_conditions_are_reported_per_order():
    rng = np.random.default_rng(2)
    votes = np.array([rng.multinomial(250, rng.dirichlet(np.full(10, 0.3))) for _ in range(300)], float)
    res = account_gnmax(votes, sigma=40.0, delta=1e-5, threshold=150.0, sigma1=50.0, answered=votes.max(axis=1) >= 150)
    cond = res.statements[0].details["conditions_by_order"]
    orders = np.array(cond["orders"])
    mask = votes.max(axis=1) >= 150
    # an independent count: Theorem 6's conditions per (answered query, order) from the public function
    want = gnmax_dd_applies(gaussian_log_q(votes[mask], 40.0), 40.0, orders).sum(axis=0)
    np.testing.assert_array_equal(cond["gnmax_passing"], want)
    assert cond["gnmax_charged"] == int(mask.sum()) and cond["threshold_charged"] == 300
    assert len(cond["threshold_passing"]) == orders.size
    text = res.facts["data_dependent_conditions"]
    assert text.startswith(f"at the best order {res.statements[0].order:g}:") and "pass at" in text


def test_confident_data_independent_figure_charges_every_query_and_the_answered_one_is_labelled():
    votes = np.tile([200.0, 40, 10] + [0] * 7, (100, 1))
    answered = np.arange(100) % 4 == 0
    res = account_gnmax(votes, sigma=40.0, delta=1e-5, threshold=150.0, sigma1=100.0, answered=answered)
    di = res.statements[1]
    assert di.epsilon == pytest.approx(gaussian_mechanism_epsilon(math.sqrt(100 * 2 / 1600 + 100 / 100.0**2), 1e-5))
    cond = res.statements[2]
    assert "conditioned on 25 answered" in cond.label and "conditioned on the answered count" in cond.method
    assert cond.epsilon == pytest.approx(gaussian_mechanism_epsilon(math.sqrt(25 * 2 / 1600 + 100 / 100.0**2), 1e-5))
    assert any("ex-post" in a for a in cond.assumptions)
    assert res.epsilon == min(s.epsilon for s in res.statements)


def test_interactive_gnmax_is_accounted_data_independently_or_refused():
    with pytest.raises(ParameterError, match="Interactive GNMax"):
        account_gnmax(np.ones((3, 3)), sigma=40.0, delta=1e-5, threshold=1.0, sigma1=1.0, interactive=True)
    with pytest.raises(ParameterError, match="'interactive'"):
        account_gnmax(sigma=40.0, delta=1e-5, queries=3, interactive=True)
    res = account_gnmax(sigma=40.0, delta=1e-5, queries=100, threshold=150.0, sigma1=100.0, answered=25, interactive=True)
    conf = account_gnmax(sigma=40.0, delta=1e-5, queries=100, threshold=150.0, sigma1=100.0, answered=25)
    assert [s.epsilon for s in res.statements] == [s.epsilon for s in conf.statements]
    assert any("Interactive GNMax" in a for a in res.statement.assumptions)


def test_order_grid_is_extended_past_its_edges():
    # a unanimous query with a huge margin: the data-dependent optimum is far above 4096
    v = np.array([[1e6, 0.0]])
    res = account_gnmax(v, sigma=1000.0, delta=1e-5)
    dd = res.statements[0]
    assert dd.order > 4096 and not res.warnings[:-1]
    fine = np.geomspace(1.01, 1e8, 3000)
    best_fine = rdp_to_epsilon(fine, rdp_gnmax_mu2(gnmax_mu2(v, 1000.0), 1000.0, fine)[0], 1e-5, warn=False)[0]
    at_4096 = rdp_to_epsilon(DEFAULT_ORDERS, rdp_gnmax_mu2(gnmax_mu2(v, 1000.0), 1000.0, DEFAULT_ORDERS)[0], 1e-5,
                             warn=False)[0]
    assert best_fine * (1 - 1e-9) <= dd.epsilon <= best_fine * 1.05 and dd.epsilon < 0.5 * at_4096
    assert any("extended" in a for a in dd.assumptions)
    # below the grid: 1e4 queries at a small sigma (the data-independent RDP route's optimum is near order 1)
    r = account_gnmax(sigma=0.3, delta=1e-5, queries=10_000)
    rdp_route = r.statement.details["routes"]["data-independent RDP"]
    grid_only = rdp_to_epsilon(DEFAULT_ORDERS, 10_000 * DEFAULT_ORDERS / 0.09, 1e-5, warn=False)[0]
    assert rdp_route < grid_only
    # a grid the caller gives is used as given, with the warning
    given_ = account_gnmax(v, sigma=1000.0, delta=1e-5, orders=[2.0, 8.0, 32.0])
    assert given_.statements[0].order == 32.0 and any("edge" in w for w in given_.warnings)


def test_load_answered_formats_and_errors(tmp_path):
    from dpaudit.accountants.gnmax import load_answered
    from dpaudit.errors import DataError
    mask = np.array([True, False, True, False])
    np.save(tmp_path / "m.npy", mask)
    np.save(tmp_path / "i.npy", np.array([0, 2]))
    (tmp_path / "m.txt").write_text("true,false\ntrue false")
    (tmp_path / "i.csv").write_text("0, 2\n")
    for name in ("m.npy", "i.npy", "m.txt", "i.csv"):
        np.testing.assert_array_equal(load_answered(tmp_path / name, 4), mask)
    (tmp_path / "bad1.txt").write_text("0,4")
    (tmp_path / "bad2.txt").write_text("1,1")
    (tmp_path / "bad3.txt").write_text("true,1")
    (tmp_path / "bad4.txt").write_text("true,false")
    np.save(tmp_path / "bad5.npy", np.zeros((2, 2), dtype=bool))
    for name, needle in (("bad1.txt", "outside"), ("bad2.txt", "repeats"), ("bad3.txt", "not a mix"),
                         ("bad4.txt", "one per query"), ("bad5.npy", "1-D"), ("missing.npy", "missing")):
        with pytest.raises(DataError, match=needle):
            load_answered(tmp_path / name, 4)
    with pytest.raises(DataError, match=".npy, .txt or .csv"):
        load_answered(tmp_path / "x.json", 4)


@pytest.mark.parametrize("sigma", [10.0, 40.0, 150.0])
def test_subsampled_order_search_lands_on_the_full_grid_minimum(sigma, monkeypatch):
    from dpaudit.accountants import gnmax as gnmax_mod
    monkeypatch.setattr(gnmax_mod, "_SUB_ROWS", 150)  # 3000 queries: the search starts on a subsample
    monkeypatch.setattr(gnmax_mod, "_SUB_MIN", 150)
    rng = np.random.default_rng(11)
    votes = np.array([rng.multinomial(250, rng.dirichlet(np.full(10, 0.3))) for _ in range(3000)], float)
    grid = np.array(DEFAULT_ORDERS)
    res = account_gnmax(votes, sigma=sigma, delta=1e-5, orders=grid)
    full = rdp_gnmax_mu2(gnmax_mu2(votes, sigma), sigma, grid).sum(axis=0)
    ref = rdp_to_epsilon(grid, full, 1e-5, warn=False)[0]
    dd = res.statements[0]
    assert dd.details["orders_evaluated"] < 20
    assert ref <= dd.epsilon <= ref * (1 + 1e-10) + 1e-12

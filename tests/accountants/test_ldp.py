import math

import numpy as np
import pytest
from dp_accounting import privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant as dpa_rdp
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy import stats

from dpaudit.accountants.events import RandomizedResponse, rr_epsilon_from_keep_probability, rr_keep_probability
from dpaudit.accountants.ldp import (account_ldp, debias, debias_reports, debias_variance, debias_variance_bound,
                                     rdp_randomized_response, shuffle_closed_form, shuffle_delta, shuffle_numerical,
                                     shuffle_pld)
from dpaudit.accountants.rdp import DEFAULT_ORDERS, RdpAccountant
from dpaudit.errors import ParameterError

REPLACE_ONE = privacy_accountant.NeighboringRelation.REPLACE_ONE
ORDERS_DPA_TEST = [1.5, 2.5, 5, 50, 100, np.inf]


# ------------------------------------------------------------------------------------------------ beta

def test_beta_privatekt_example():
    # PrivateKT Lemma 1: beta = (e^{eps/K} - 1) / (e^{eps/K} - 1 + C); eps=5, K=2, C=10 -> 0.528 (issue 2)
    assert rr_keep_probability(5.0, 2, 10) == pytest.approx(0.527912, abs=1e-6)
    assert account_ldp(5, 2, 10).facts["beta"] == pytest.approx(0.528, abs=5e-4)


@settings(max_examples=60, deadline=None)
@given(eps=st.floats(1e-3, 50), k=st.integers(1, 20), c=st.integers(2, 200))
def test_beta_eps_round_trip(eps, k, c):
    beta = rr_keep_probability(eps, k, c)
    assert 0 < beta < 1 or (beta == 1.0 and eps / k > 30)
    if 1 - beta > 1e-9:
        # 1 - beta ~ C e^{-eps/K} loses digits for large eps/K: the inverse is only as accurate as 1 - beta
        rel = 1e-9 if eps / k <= 10 else 1e-6
        assert rr_epsilon_from_keep_probability(beta, k, c) == pytest.approx(eps, rel=rel)


@settings(max_examples=60, deadline=None)
@given(beta=st.floats(1e-6, 1 - 1e-6), k=st.integers(1, 20), c=st.integers(2, 200))
def test_eps_beta_round_trip(beta, k, c):
    eps = rr_epsilon_from_keep_probability(beta, k, c)
    assert eps > 0
    assert rr_keep_probability(eps, k, c) == pytest.approx(beta, rel=1e-9, abs=1e-12)


# ------------------------------------------------------------------------------------------------ RDP

@pytest.mark.parametrize("p,k,expected", [
    # dp_accounting rdp_privacy_accountant_test.py, test_compute_rdp_randomized_response_replace_one
    (0.3, 10, [2.6946320226546314, 2.983865364028855, 3.11316970070507, 3.1854244842182466, 3.1886682560677593, 3.1918471524802814]),
    (0.05, 20, [5.850317703374384, 5.910360162307462, 5.930633082131939, 5.94180620835157, 5.942307807732949, 5.942799375126701]),
    (0.01, 3, [5.684126770932727, 5.692634596034571, 5.695421239467805, 5.696956976543137, 5.697025920968522, 5.697093486505405]),
])
def test_rr_rdp_dp_accounting_reference_values(p, k, expected):
    label_eps = math.log(k / p - k + 1)  # a/b for noise parameter p = 1 - beta
    np.testing.assert_allclose(rdp_randomized_response(label_eps, k, ORDERS_DPA_TEST), expected, rtol=1e-6)


@settings(max_examples=40, deadline=None)
@given(eps=st.floats(0.01, 20), c=st.integers(2, 100))
@example(eps=0.015625, c=75)  # once failed at rtol 1e-7 (both sides' rounding near order 1; see the mpmath test)
def test_rr_rdp_matches_dp_accounting_event(eps, c):
    beta = rr_keep_probability(eps, 1, c)
    ours = rdp_randomized_response(eps, c, DEFAULT_ORDERS)
    ref = dpa_rdp._compute_randomized_response_rdp(1 - beta, c, list(DEFAULT_ORDERS), REPLACE_ONE)
    # dp_accounting subtracts two logs: near order 1 it is off by up to ~1e-6 relative (eps = 0.015625, C = 75,
    # order 1.001: 2.3e-7 above the exact value; the mpmath test below pins ours to 1e-12)
    np.testing.assert_allclose(ours, ref, rtol=2e-6, atol=1e-12)
    # a pure eps-DP mechanism: RDP never above eps nor above alpha eps^2 / 2 (Bun & Steinke 2016, Prop. 3.3)
    assert np.all(ours <= eps * (1 + 1e-12))
    assert np.all(ours <= DEFAULT_ORDERS * eps**2 / 2 * (1 + 1e-12))
    assert np.all(np.diff(ours) >= -1e-12)  # nondecreasing in the order


def test_rr_event_rdp_is_k_times_label_rdp_and_accountant_uses_it():
    ev = RandomizedResponse(num_classes=10, num_samples=2, epsilon=5.0)
    acc = RdpAccountant().compose(ev, 3)
    np.testing.assert_allclose(acc.rdp, 3 * 2 * rdp_randomized_response(2.5, 10, DEFAULT_ORDERS))
    # pure-DP (basic) composition caps the RDP figure: 3 reports of 5-LDP
    assert acc.get_epsilon(1e-5) <= 3 * 5.0
    tight = RdpAccountant().compose(RandomizedResponse(num_classes=10, num_samples=2, epsilon=0.5), 100)
    st = tight.get_statement(1e-5)
    assert st.epsilon < 100 * 0.5 and st.method == "rdp"


def test_rdp_randomized_response_rejects_bad_input():
    with pytest.raises(ParameterError, match="'num_classes'"):
        rdp_randomized_response(1.0, 1, [2.0])
    with pytest.raises(ParameterError, match="'orders'"):
        rdp_randomized_response(1.0, 3, [1.0])


# ------------------------------------------------------------------------------------------------ estimator

def test_debias_is_unbiased_by_simulation():
    rng = np.random.default_rng(0)
    c, k, n, beta, trials = 5, 3, 40, 0.4, 4000
    truth = rng.integers(0, c, size=(n, k))                 # clients' true labels on K public samples
    ybar = np.eye(c)[truth].mean(axis=0)                     # (K, C) true frequencies
    keep = rng.random((trials, n, k)) < beta
    noise = rng.integers(0, c, size=(trials, n, k))
    reports = np.where(keep, truth[None], noise)             # PrivateKT's perturbation, Eq. (2)
    est = np.stack([debias_reports(r, beta, c) for r in reports])  # (trials, K, C)
    var = debias_variance(ybar, n, beta, c)
    se = np.sqrt(var / trials)
    assert np.all(np.abs(est.mean(axis=0) - ybar) < 4.5 * se)
    np.testing.assert_allclose(est.var(axis=0), var, rtol=0.12)
    assert np.all(var <= debias_variance_bound(n, beta, c) + 1e-15)


def test_debias_fixed_point_and_validation():
    beta, c = 0.3, 4
    y = np.array([0.5, 0.25, 0.25, 0.0])
    assert debias(beta * y + (1 - beta) / c, beta, c) == pytest.approx(y)
    with pytest.raises(ParameterError, match="'frequencies'"):
        debias([0.5, 0.5], beta, c)
    with pytest.raises(ParameterError, match="'reports'"):
        debias_reports(np.array([0, 4]), beta, c)
    with pytest.raises(ParameterError, match="'keep_probability'"):
        debias(y, 0.0, c)


# ------------------------------------------------------------------------------------------------ shuffling

def _exact_shuffled_binary_rr_epsilon(eps0, n, delta):
    """Exact epsilon of n shuffled binary RR reports for one neighbouring pair (user 1: 0 vs 1, others hold 0):
    a LOWER bound on the worst case, so every valid upper bound must be at least this."""
    p0 = 1 / (1 + math.exp(eps0))
    j = np.arange(n + 1)
    rest = stats.binom.pmf(np.arange(n), n - 1, p0)
    P = np.zeros(n + 1); Q = np.zeros(n + 1)
    P[:-1] += (1 - p0) * rest; P[1:] += p0 * rest           # user 1 holds 0
    Q[:-1] += p0 * rest; Q[1:] += (1 - p0) * rest           # user 1 holds 1

    def d(e):
        return max(np.maximum(P - math.exp(e) * Q, 0).sum(), np.maximum(Q - math.exp(e) * P, 0).sum())

    lo, hi = 0.0, eps0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if d(mid) <= delta else (mid, hi)
    return hi


@pytest.mark.parametrize("eps0,n", [(1.0, 50), (2.0, 500), (0.5, 5000), (4.0, 2000)])
def test_shuffle_numerical_is_an_upper_bound_on_an_exact_instance(eps0, n):
    delta = 1e-6
    exact = _exact_shuffled_binary_rr_epsilon(eps0, n, delta)
    num = shuffle_numerical(eps0, n, delta)
    assert num.epsilon >= exact - 1e-9
    assert num.epsilon <= eps0


@pytest.mark.parametrize("eps0,n,delta", [(1.0, 10_000, 1e-6), (0.5, 100_000, 1e-8), (2.0, 1_000_000, 1e-6)])
def test_shuffle_closed_form_applies_and_numerical_is_tighter(eps0, n, delta):
    cf = shuffle_closed_form(eps0, n, delta)
    assert cf.applies and eps0 <= math.log(n / (16 * math.log(2 / delta)))
    # Theorem 3.1 formula evaluated directly
    ee = math.exp(eps0)
    ref = math.log(1 + (ee - 1) / (ee + 1) * (8 * math.sqrt(ee * math.log(4 / delta)) / math.sqrt(n) + 8 * ee / n))
    assert cf.epsilon == pytest.approx(min(ref, eps0), rel=1e-12)
    num = shuffle_numerical(eps0, n, delta)
    assert num.applies and num.epsilon <= cf.epsilon
    assert shuffle_delta(eps0, n, num.epsilon) <= delta


def test_shuffle_closed_form_condition_violated_falls_back_to_eps0():
    cf = shuffle_closed_form(5.0, 40, 1e-5)   # PrivateKT: 80 clients x 0.5 per round
    assert not cf.applies and cf.epsilon == 5.0 and "violated" in cf.condition


def test_shuffle_delta_monotone_and_bounded():
    es = np.linspace(0, 1.0, 11)
    ds = [shuffle_delta(1.0, 1000, e) for e in es]
    assert all(a >= b for a, b in zip(ds, ds[1:]))
    assert ds[-1] == 0.0 and 0 < ds[0] <= 1


def test_shuffle_pld_agrees_with_hockey_stick():
    eps0, n = 1.0, 300
    pld = shuffle_pld(eps0, n, value_discretization_interval=1e-4)
    for e in (0.2, 0.4):
        assert pld.get_delta_for_epsilon(e) >= shuffle_delta(eps0, n, e) * (1 - 1e-6) - 1e-12
        assert pld.get_delta_for_epsilon(e) == pytest.approx(shuffle_delta(eps0, n, e), rel=0.05, abs=1e-9)


# ------------------------------------------------------------------------------------------------ account_ldp

def test_account_ldp_privatekt_example():
    r = account_ldp(5, 2, 10, rounds=500, participation=0.5, users=80, delta=1e-5)
    by = {s.label: s for s in r.statements}
    assert by["per sample (one label)"].epsilon == 2.5
    assert by["per report (one round)"].epsilon == 5.0
    assert r.facts["rounds_expected"] == 250 and r.facts["users_per_round"] == 40
    assert by["client, T = 250 rounds (basic)"].epsilon == 1250.0
    rdp = by["client, T = 250 rounds (RDP)"]
    assert 0 < rdp.epsilon < 1250 and rdp.delta == 1e-5
    # issue 47: the exact PLD of randomized response (795.0) is below RDP (813.5) and is now the headline
    pld = by["client, T = 250 rounds (PLD)"]
    assert r.statement is pld and pld.epsilon < rdp.epsilon and pld.epsilon >= r.lower_bound.epsilon
    shuffled = [s for s in r.statements if s.label.startswith("shuffled, T")]
    assert len(shuffled) == 1 and shuffled[0].epsilon <= rdp.epsilon
    # shuffling does not stop accumulation: the composed central figure is far above one round's
    per_round = [s for s in r.statements if s.label == "shuffled, per round (central)"]
    assert shuffled[0].epsilon > 50 * max(s.epsilon for s in per_round)
    assert any("does not hold" in w for w in r.warnings)
    assert all(s.assumptions for s in r.statements)
    assert any("CENTRAL" in a for a in shuffled[0].assumptions)


def test_account_ldp_amplification_visible_with_many_users():
    r = account_ldp(1.0, 1, 2, rounds=10, participation=1.0, users=100_000, delta=1e-6)
    per_round = {s.method: s for s in r.statements if s.label == "shuffled, per round (central)"}
    assert all(s.epsilon < 0.1 for s in per_round.values())
    composed = [s for s in r.statements if s.label.startswith("shuffled, T")][0]
    assert per_round["shuffling numerical (FMT 2021, Sec. 4)"].epsilon < composed.epsilon < 10 * 1.0


@pytest.mark.parametrize("kwargs,name", [
    (dict(epsilon=0, samples=2, classes=10), "epsilon"),
    (dict(epsilon=float("nan"), samples=2, classes=10), "epsilon"),
    (dict(epsilon=1, samples=0, classes=10), "samples"),
    (dict(epsilon=1, samples=2, classes=1), "classes"),
    (dict(epsilon=1, samples=2, classes=10, rounds=5, delta=1.0), "delta"),
    (dict(epsilon=1, samples=2, classes=10, rounds=5, participation=1.5), "participation"),
    (dict(epsilon=1, samples=2, classes=10, users=5), "rounds"),
    (dict(epsilon=1, samples=2, classes=10, rounds=5, users=5), "delta"),
])
def test_account_ldp_bad_input(kwargs, name):
    with pytest.raises(ParameterError, match=f"'{name}' parameter"):
        account_ldp(**kwargs)


@pytest.mark.parametrize("eps,c", [(0.015625, 75), (1e-4, 2), (0.5, 10), (5.0, 3), (80.0, 1000)])
def test_rr_rdp_against_mpmath_never_below(eps, c):
    """The closed form at 80 digits (mpmath): the float value is within 1e-12 relative and never below it by more
    (the former log-difference form fell 3.5e-7 below it at eps = 0.015625, C = 75, order 1.001: found by the
    dp_accounting property test above)."""
    import mpmath as mp

    mp.mp.dps = 80
    orders = np.array([o for o in DEFAULT_ORDERS if np.isfinite(o)])
    ours = rdp_randomized_response(eps, c, orders)
    L = mp.mpf(eps)
    for a, o in zip(orders, ours):
        A = mp.mpf(float(a))
        exact = min(mp.log((mp.e ** (A * L) + mp.e ** ((1 - A) * L) + c - 2) / (mp.e ** L + c - 1)) / (A - 1), L,
                    A * L * L / 2)
        assert float((mp.mpf(float(o)) - exact) / exact) > -1e-12, (a, o, exact)
        assert abs(float((mp.mpf(float(o)) - exact) / exact)) < 1e-12, (a, o, exact)


# ------------------------------------------------------------------------------------------ issue 29: exact composition


def exact_rr_epsilon(label_eps: float, classes: int, m: int, delta: float) -> float:
    """Exact epsilon at delta of m composed C-ary randomized-response labels (all of which may change), by enumerating
    the privacy loss in mpmath: per label the loss is +L (report = true class, prob a), -L (report = the other input's
    class, prob b) or 0 (prob (C-2) b), a = e^L / (e^L + C - 1), b = 1 / (e^L + C - 1); delta(eps) =
    E[(1 - e^(eps - loss))_+], solved by bisection (the root rounded down: a lower bound)."""
    import mpmath as mp

    mp.mp.dps = 50
    L = mp.mpf(label_eps)
    z = mp.e**L + classes - 1
    a, b = mp.e**L / z, 1 / z
    terms = []
    for i in range(m + 1):
        for j in range(m - i + 1):
            k = m - i - j
            pr = mp.factorial(m) / (mp.factorial(i) * mp.factorial(j) * mp.factorial(k)) * a**i * b**j * ((classes - 2) * b)**k
            if pr > 0:
                terms.append((pr, L * (i - j)))

    def d(eps):
        return sum(pr * (1 - mp.e**(eps - loss)) for pr, loss in terms if loss > eps)

    lo, hi = mp.mpf(0), L * m
    if d(lo) <= delta:
        return 0.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if d(mid) > delta:
            lo = mid
        else:
            hi = mid
    return float(lo)


def test_issue_29_exact_figures():
    # one user per round (no amplification), eps 1, one label of 2 classes: the shuffled composed figure composed
    # delta wrongly ((T eps, delta) from T rounds at (eps, delta)); exact values from the enumeration above
    assert exact_rr_epsilon(1.0, 2, 2, 1e-3) == pytest.approx(1.998127, abs=1e-6)
    assert exact_rr_epsilon(1.0, 2, 3, 1e-2) == pytest.approx(2.97407, abs=1e-5)
    for rounds, delta, exact in ((2, 1e-3, 1.998127), (3, 1e-2, 2.97407)):
        res = account_ldp(1.0, 1, 2, rounds=rounds, users=1, delta=delta)
        composed = [s for s in res.statements if s.label.startswith("shuffled, T =")][0]
        assert composed.epsilon >= exact_rr_epsilon(1.0, 2, rounds, delta)
        assert res.facts["shuffled_basic_composition_epsilon"] >= exact_rr_epsilon(1.0, 2, rounds, delta)


def _labels_composed(label: str, k: int, t: int, rounds: int) -> int | None:
    """How many labels a statement's figure covers (None: a shuffled figure with amplification, not comparable)."""
    if label.startswith("per sample"):
        return 1
    if label.startswith("per report") or label.startswith("shuffled, per round"):
        return k
    if label.startswith("client, T =") or label.startswith("shuffled, T ="):
        return t * k
    if label.startswith("client, all"):
        return rounds * k
    return None


@pytest.mark.parametrize("eps, k, c, rounds, part, delta", [
    (1.0, 1, 2, 2, None, 1e-3), (1.0, 1, 2, 3, None, 1e-2), (0.5, 2, 3, 4, None, 1e-5), (5.0, 2, 10, 2, 0.5, 1e-5),
    (2.0, 1, 4, 5, None, 1e-4), (0.1, 1, 2, 6, None, 1e-2), (3.0, 3, 2, 2, None, 1e-6)])
def test_every_ldp_figure_is_at_least_the_exact_composition(eps, k, c, rounds, part, delta):
    res = account_ldp(eps, k, c, rounds=rounds, participation=part, users=1, delta=delta)
    t, checked = res.facts["rounds_expected"], 0
    for st_ in res.statements:
        m = _labels_composed(st_.label, k, t, rounds)
        if m is None:
            continue
        exact = eps / k * m if st_.delta == 0 else exact_rr_epsilon(eps / k, c, m, st_.delta)
        assert st_.epsilon >= exact * (1 - 1e-12), (st_.label, st_.epsilon, exact)
        checked += 1
    assert checked >= 5

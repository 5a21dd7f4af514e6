"""PureDp: a pure epsilon-DP release and its RDP (Bun & Steinke 2016, Prop. 3.3; Mironov 2017, Prop. 3)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from dpaudit.accountants.base import rdp_function_for
from dpaudit.accountants.events import event_from_dict
from dpaudit.accountants.pure import PureDp, rdp_pure_dp
from dpaudit.errors import ParameterError
from dpaudit.serial import to_dict

ORDERS = np.array([1.01, 1.5, 2.0, 4.0, 16.0, 256.0])


def _renyi(p, q, a):
    # log-space: log sum exp(a log p + (1-a) log q) / (a - 1)
    return float(np.logaddexp.reduce(a * np.log(p) + (1 - a) * np.log(q))) / (a - 1)


def test_rdp_equals_binary_randomized_response_divergence():
    # closed form: D_a(RR_eps(0) || RR_eps(1)) with P = (e^eps, 1)/(1+e^eps)
    eps = 1.3
    p = np.array([math.exp(eps), 1.0]) / (1 + math.exp(eps))
    want = [min(_renyi(p, p[::-1], a), eps, a * eps**2 / 2) for a in ORDERS]
    assert np.allclose(rdp_pure_dp(eps, ORDERS), want, rtol=1e-10)


def test_rdp_below_the_simple_bounds_and_monotone_in_order():
    for eps in (0.1, 1.0, 5.0, 50.0):
        r = rdp_pure_dp(eps, ORDERS)
        assert np.all(r <= eps + 1e-12) and np.all(r <= ORDERS * eps**2 / 2 + 1e-12)
        assert np.all(np.diff(r) >= -1e-12)
        assert np.all(np.isfinite(r))


@settings(max_examples=60, deadline=None)
@given(eps=st.floats(0.05, 8.0), seed=st.integers(0, 10**6), a=st.sampled_from(list(ORDERS)))
def test_rdp_upper_bounds_every_pair_with_bounded_likelihood_ratio(eps, seed, a):
    # random distributions on 5 points with e^-eps <= P/Q <= e^eps: their Rényi divergence may not exceed the bound
    rng = np.random.default_rng(seed)
    q = rng.dirichlet(np.ones(5))
    ratio = np.exp(rng.uniform(-eps, eps, size=5))
    p = q * ratio
    p /= p.sum()
    lr = np.log(p / q)
    if np.max(np.abs(lr)) > eps:  # renormalising may push a ratio past eps: skip those
        return
    assert _renyi(p, q, a) <= rdp_pure_dp(eps, np.array([a]))[0] + 1e-9


def test_event_registered_and_round_trips():
    ev = PureDp(2.0, "Laplace(2C/eps) on an L1-clipped update")
    assert event_from_dict(to_dict(ev)) == ev
    assert np.allclose(rdp_function_for(ev)(ev, ORDERS), rdp_pure_dp(2.0, ORDERS))


def test_validation_message():
    with pytest.raises(ParameterError, match="The 'epsilon' parameter of PureDp must be a float > 0.0. Got -1.0 instead."):
        PureDp(-1.0)


def test_rdp_accountant_caps_pure_dp_by_basic_composition():
    # three 5-DP releases: basic composition gives exactly 15 (delta 0); the RDP conversion alone gives more
    from dpaudit.accountants.pure import PureDp
    from dpaudit.accountants.rdp import RdpAccountant

    st = RdpAccountant().compose(PureDp(5.0, "test"), 3).get_statement(1e-5)
    assert st.epsilon == pytest.approx(15.0, rel=1e-12)

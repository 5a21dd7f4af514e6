"""Issue 47: randomized response's exact PLD route, beside basic composition and RDP.

The worst case of C-ary randomized response is every pair of inputs, so its privacy-loss law is a three-point lattice
and the composed epsilon is known exactly: checked against a brute-force multinomial sum (an independent path), against
dp_accounting's own randomized-response PLD (pessimistic, never below), and against the certified lower bound of the
pair (the bracket closes to 1e-6).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from dp_accounting import privacy_accountant
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy import optimize, special

import dpaudit
from dpaudit.accountants.ldp import randomized_response_pld_epsilon
from dpaudit.accountants.pairs import randomized_response_lower_bound
from dpaudit.errors import ParameterError


def _exact(eps: float, c: int, n: int, delta: float) -> float:
    a = math.exp(eps) / (math.exp(eps) + c - 1)
    b = 1.0 / (math.exp(eps) + c - 1)
    losses, weights = [], []
    for jp, jm in itertools.product(range(n + 1), repeat=2):
        j0 = n - jp - jm
        if j0 < 0:
            continue
        logw = (special.gammaln(n + 1) - special.gammaln(jp + 1) - special.gammaln(jm + 1) - special.gammaln(j0 + 1)
                + jp * math.log(a) + jm * math.log(b) + special.xlogy(j0, max(0.0, 1 - a - b)))
        losses.append((jp - jm) * eps)
        weights.append(math.exp(logw))
    loss, w = np.array(losses), np.array(weights)

    def excess(e: float) -> float:
        return float(np.sum(w * np.clip(-np.expm1(e - loss), 0, None))) - delta

    return optimize.brentq(excess, 0.0, n * eps, xtol=1e-13) if excess(0.0) > 0 else 0.0


@pytest.mark.parametrize("eps,c,n,delta", [(1.0, 10, 30, 1e-5), (0.3, 2, 40, 1e-3), (3.0, 100, 12, 1e-6),
                                           (0.05, 5, 60, 1e-2)])
def test_exact_against_brute_force_and_dp_accounting(eps, c, n, delta):
    got = randomized_response_pld_epsilon(eps, c, n, delta)
    ref = _exact(eps, c, n, delta)
    assert ref * (1 - 1e-9) <= got <= ref * (1 + 1e-6) + 1e-9
    beta = math.expm1(eps) / (math.exp(eps) + c - 1)
    dpa = pld_lib.from_randomized_response(noise_parameter=1 - beta, num_buckets=c, value_discretization_interval=1e-4,
                                           neighboring_relation=privacy_accountant.NeighboringRelation.REPLACE_ONE)
    assert got <= dpa.self_compose(n).get_epsilon_for_delta(delta - 1e-12) + 1e-9   # both read at delta - 1e-12
    low = randomized_response_lower_bound(keep_probability=beta, classes=c, labels=1, reports=n, delta=delta).epsilon
    assert low <= got <= low * (1 + 1e-6) + 1e-9


def test_account_ldp_headline_is_the_pld_route():
    r = dpaudit.account("ldp", epsilon=1.0, samples=1, classes=10, rounds=100, delta=1e-5)
    routes = {s.route: s.epsilon for s in r.statements if s.route}
    # measured: basic 100, RDP 39.45, PLD 37.21 (the certified pair 37.21)
    assert r.headline_route == "pld" and routes["pld"] < routes["rdp"] < routes["basic"]
    assert r.lower_bound.epsilon <= r.epsilon <= r.lower_bound.epsilon * (1 + 1e-6)
    part = dpaudit.account("ldp", epsilon=2.0, samples=5, classes=10, rounds=50, participation=0.2, delta=1e-6)
    assert "exactly T = 10 reports" in part.lower_bound.pair
    assert any("exactly T = 10 reports" in a for s in part.statements if s.route == "pld" for a in s.assumptions)


def test_bad_input():
    with pytest.raises(ParameterError, match="compositions"):
        randomized_response_pld_epsilon(1.0, 2, 0, 1e-5)
    with pytest.raises(ParameterError, match="delta"):
        randomized_response_pld_epsilon(1.0, 2, 3, 1e-13)

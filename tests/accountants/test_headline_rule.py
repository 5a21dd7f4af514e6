"""Issue 27 item 4: one headline rule for every accounting result -- the smallest valid upper bound among the routes
computed (statements that name a ``route``), ties to the data-independent route, a forced route honoured and named."""

import math

import numpy as np
import pytest

from dpaudit.serial import from_dict, to_dict
from dpaudit.accountants import account_dpsgd, account_gnmax, account_ldp, account_pate, release_gnmax_epsilon
from dpaudit.accountants.statement import AccountingResult, PrivacyStatement, headline_facts, pick_headline
from dpaudit.errors import ParameterError


def rule(statements):
    """The rule written out independently: among the routed statements, the smallest epsilon; on equal epsilon a
    data-independent one, then the smaller delta, then the first."""
    routed = [(s.epsilon, s.data_dependent or s.route.startswith("data-dependent"), s.delta, i)
              for i, s in enumerate(statements) if s.route]
    return min(routed)[3] if routed else 0


def check_headline(r: AccountingResult) -> None:
    eligible = [s for s in r.statements if s.route]
    assert eligible, "every multi-route result names its routes"
    assert r.epsilon == min(s.epsilon for s in eligible)
    assert r.headline == rule(r.statements)
    d = to_dict(r)
    assert d["headline_route"] == r.headline_route == r.statement.route == d["statement"]["route"]
    assert from_dict(AccountingResult, d).headline == r.headline
    if "headline_route" in r.facts:
        assert r.facts["headline_route"] == r.headline_route


def st(eps, route="", dd=False, delta=1e-5):
    return PrivacyStatement(eps, delta, "m", route=route, data_dependent=dd)


def test_pick_headline_rule_and_forcing():
    a, b, c = st(2.0, "rdp"), st(1.5, "pld"), st(0.1)  # c: another scope (no route), never the headline
    assert pick_headline((a, b, c)) == 1 and AccountingResult("x", (a, b, c)).headline == 1
    assert pick_headline((a, b, c), "rdp") == 0
    assert headline_facts((a, b, c), 0) == {"headline_route": "rdp", "smallest_route": "pld"}
    with pytest.raises(ParameterError, match="'accountant'.*pld, rdp.*'prv'"):
        pick_headline((a, b, c), "prv", owner="f")
    with pytest.raises(ParameterError, match="'route' parameter of g"):
        pick_headline((a, b), "x", owner="g", parameter="route")
    # ties: the data-independent route, then the smaller delta, then the first
    dd, di = st(1.0, "data-dependent", dd=True), st(1.0, "data-independent")
    assert pick_headline((dd, di)) == 1 and pick_headline((di, dd)) == 0
    assert pick_headline((st(1.0, "rdp"), st(1.0, "basic", delta=0.0))) == 1
    assert pick_headline((st(1.0, "rdp"), st(1.0, "pld"))) == 0
    # a data-dependent analysis whose figure fell back to the data-independent bound still yields on a tie
    assert pick_headline((st(1.0, "data-dependent"), st(1.0, "data-independent"))) == 1
    # no route at all: the first statement (one figure, or only other scopes)
    assert pick_headline((st(3.0), st(1.0))) == 0 and AccountingResult("x", (st(3.0), st(1.0))).headline_route is None
    # a data-dependent route smaller than the data-independent one wins (its module says it is a valid bound)
    assert pick_headline((st(0.5, "data-dependent", dd=True), st(1.0, "data-independent"))) == 0


@pytest.mark.parametrize("forced", ["rdp", "pld", "prv"])
def test_dpsgd_forced_route_is_named(forced):
    kw = dict(dataset_size=60000, batch_size=256, noise_multiplier=1.1, epochs=3, delta=1e-5)
    best = account_dpsgd(**kw)
    check_headline(best)
    assert best.headline_route == best.facts["smallest_route"] == "pld"
    r = account_dpsgd(**kw, accountant=forced)
    assert r.headline_route == r.facts["headline_route"] == to_dict(r)["headline_route"] == forced
    assert r.facts["smallest_route"] == "pld" and r.epsilon >= best.epsilon
    assert {s.route for s in r.statements} == {"rdp", "pld", "prv"}


def test_pate_headline_is_the_smaller_and_ties_go_data_independent():
    strong = np.tile([250.0] + [0.0] * 9, (100, 1))               # unanimous: the data-dependent bound is far smaller
    r = account_pate(strong, gamma=0.05, delta=1e-5)
    check_headline(r)
    assert r.headline_route == "data-dependent" and r.statement.data_dependent
    assert r.epsilon < r.statements[1].epsilon
    assert any("data-dependent" in a.lower() for a in r.statement.assumptions)  # the caveat stays with the figure
    flat = np.array([[5.0, 5.0, 5.0]] * 10)                       # tied votes: the data-dependent bound gains nothing
    r2 = account_pate(flat, gamma=1.0, delta=1e-5)
    check_headline(r2)
    assert r2.statements[0].epsilon == r2.statements[1].epsilon
    assert r2.headline_route == "data-independent" and not r2.statement.data_dependent
    forced = account_pate(strong, gamma=0.05, delta=1e-5, data_independent=True)  # the API's forced route
    assert forced.headline_route == "data-independent" == to_dict(forced)["headline_route"]
    assert forced.epsilon == pytest.approx(r.statements[1].epsilon)


def test_fedkt_keeps_the_routes_of_the_worst_party():
    votes = [np.tile([30.0, 0.0, 0.0], (20, 1)), np.tile([20.0, 10.0, 0.0], (20, 1))]  # 2 parties, 20 queries each
    r = account_pate(votes, gamma=0.05, delta=1e-5, fedkt_level="L2", granularity="example", partitions=1)
    check_headline(r)
    assert {s.route for s in r.statements} == {"data-dependent", "data-independent"}


def test_gnmax_headline_routes_and_forcing():
    rng = np.random.default_rng(1)
    votes = np.array([rng.multinomial(200, rng.dirichlet(np.full(5, 0.1))) for _ in range(100)], float)
    r = account_gnmax(votes, sigma=40.0, delta=1e-5)
    check_headline(r)
    assert r.statements[0].route == "data-dependent RDP" and r.statements[0].data_dependent
    weak = account_gnmax(np.full((30, 4), 25.0), sigma=2.0, delta=1e-5)  # all ties: no data-dependent gain
    check_headline(weak)
    assert not weak.statement.data_dependent
    di = account_gnmax(votes, sigma=40.0, delta=1e-5, data_independent=True)
    check_headline(di)
    assert di.headline_route.startswith("data-independent") and not any(s.data_dependent for s in di.statements)
    # the conditioned (ex-post) figure is a rival route of the same total, as the module states it
    thr = account_gnmax(votes, sigma=40.0, delta=1e-5, threshold=150.0, sigma1=30.0, answered=votes.max(axis=1) >= 150)
    check_headline(thr)


def test_smooth_sensitivity_release_is_not_a_bound_so_not_the_headline():
    votes = np.tile([200.0, 40, 10] + [0] * 7, (50, 1))
    r = release_gnmax_epsilon(votes, sigma=40.0, delta=1e-5, seed=3)
    check_headline(r)
    assert not r.statements[0].route and not r.statements[1].route      # noisy estimates: no route
    assert r.headline == 2 and r.headline_route.startswith("data-independent")


def test_ldp_headline_scope_and_routes():
    one = account_ldp(5.0, 2, 10)
    check_headline(one)
    assert one.headline_route == "pure LDP" and one.epsilon == 5.0
    basic_only = account_ldp(1.0, 1, 10, rounds=20, participation=0.5)
    check_headline(basic_only)
    assert basic_only.headline_route == "basic" and basic_only.epsilon == pytest.approx(10 * 1.0)  # T = 10 rounds
    many = account_ldp(0.5, 1, 10, rounds=400, delta=1e-5)            # RDP and the exact PLD beat T * eps
    check_headline(many)
    routes = {s.route: s.epsilon for s in many.statements if s.route}
    assert many.headline_route == "pld" and many.epsilon < routes["rdp"] < 400 * 0.5   # issue 47: the exact PLD
    few = account_ldp(1.0, 1, 10, rounds=2, delta=1e-5)               # RR's RDP is tight: just under 2 * eps
    check_headline(few)
    assert few.headline_route == "pld" and few.epsilon <= 2.0 and [s.route for s in few.statements].count("basic") == 1
    # the worst case (all rounds) and the shuffled central figures are other quantities: never routes
    sh = account_ldp(1.0, 1, 10, rounds=10, participation=0.5, users=50, delta=1e-5)
    check_headline(sh)
    assert all(not s.route for s in sh.statements if "worst case" in s.label or s.label.startswith("shuffled"))
    assert math.isfinite(sh.epsilon) and sh.headline_route in ("basic", "rdp", "pld")

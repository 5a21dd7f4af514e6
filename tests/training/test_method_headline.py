"""Issue 27 item 4 for the methods' accounting: the headline is the smallest valid upper bound among the routes of the
release's quantity, named by route in the result, its JSON and the printed text."""

import numpy as np
import pytest

from dpaudit.serial import to_dict
from dpaudit.accountants.events import LaplaceNoisyMax, RandomizedResponse
from dpaudit.accountants.ledger import PrivacyLedger
from dpaudit.accountants.pure import PureDp
from dpaudit.accountants.statement import AccountingResult
from dpaudit.training.methods.baselines import LdpUpdateConfig, ldp_update_statement
from dpaudit.training.methods.common import accounting_result, central_ledger, data_independent_ledger
from dpaudit.training.methods.privatekt import privatekt_statement


def check(r: AccountingResult) -> None:
    routed = [(s.epsilon, s.data_dependent or s.route.startswith("data-dependent"), s.delta, i)
              for i, s in enumerate(r.statements) if s.route]
    assert routed and r.headline == min(routed)[3]           # the rule, written out here
    d = to_dict(r)
    assert d["headline_route"] == r.headline_route == r.statement.route == d["statement"]["route"]


@pytest.mark.parametrize("votes, want", [(np.tile([250.0] + [0.0] * 9, (100, 1)), "data-dependent"),
                                         (np.array([[5.0, 5.0, 5.0]] * 10), "data-independent")])
def test_pate_style_accounting_result(votes, want):
    gamma = 0.05 if votes.shape[1] == 10 else 1.0
    led = central_ledger(1e-5, LaplaceNoisyMax(gamma=gamma, sensitivity=2.0, votes=votes))
    paper = central_ledger(1e-5, LaplaceNoisyMax(gamma=gamma, sensitivity=2.0, votes=votes[:1]))  # smaller, no route
    r = accounting_result("pate", [("dd", led), ("di", data_independent_ledger(led)), ("paper", paper)])
    check(r)
    assert r.headline_route == want and r.statements[2].route == "" and r.statements[2].epsilon < r.epsilon


@pytest.mark.parametrize("eps, releases, want", [(5.0, 2, "basic"), (0.05, 400, "rdp")])
def test_ldp_update_headline_is_the_smaller_of_basic_and_the_ledger(eps, releases, want):
    # few large releases: T * eps is the smaller valid bound; many small ones: the ledger's RDP composition
    led = PrivacyLedger(delta=1e-5)
    for _ in range(releases):
        led.record("client0", PureDp(eps, "Laplace"))
    cfg = LdpUpdateConfig(epsilon=eps, rounds=3, mode="fedavg")
    r = ldp_update_statement(led, cfg, np.array([releases]))
    check(r)
    assert r.headline_route == want and not r.statements[0].route
    assert r.statements[1].epsilon == pytest.approx(releases * eps)   # basic composition, closed form


def test_privatekt_headline_scope_is_the_rounds_taken_part_in():
    led = PrivacyLedger(delta=1e-5)
    ev = RandomizedResponse(num_classes=10, num_samples=2, epsilon=5.0)
    for cid, n in ((0, 3), (1, 1)):
        for _ in range(n):
            led.record(f"client{cid}", ev)
    r = privatekt_statement(led, epsilon=5.0, samples=2, classes=10, rounds=4, clients_per_round=1, num_clients=2,
                            delta=1e-5, reports=np.array([3, 1]))
    check(r)
    routed = [s for s in r.statements if s.route]
    assert [s.route for s in routed] == ["basic", "rdp"]
    assert all(s.label.startswith("client, rounds actually taken part in") for s in routed)
    assert routed[0].epsilon == 15.0 and r.epsilon == min(15.0, routed[1].epsilon)

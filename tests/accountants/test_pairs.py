"""Issue 33: certified lower bounds from explicit pairs, beside every upper bound.

References: closed forms (the Laplace mechanism's exact epsilon(delta) = eps0 + 2 log(1 - delta) for one query; the
exact Gaussian-DP epsilon, Balle & Wang 2018), brute-force enumeration of a binomial, dp_accounting's pessimistic
PLD of the Poisson-subsampled Gaussian (an upper bound the lower bound must stay under, and close to: the pair is
the dominating pair), and the issue's Monte Carlo figure for the fixed-size zero-out pair (>= 3.9).
"""

from __future__ import annotations

import json
import math

import dp_accounting
import numpy as np
import pytest
from scipy.stats import binom

from dpaudit import serial
from dpaudit.accountants import AccountingResult, PrivacyStatement, account_dpsgd, account_ldp, account_pate
from dpaudit.accountants.closed_form import gaussian_mechanism_epsilon
from dpaudit.accountants.mechanisms import account_mechanism, gaussian_mechanism, laplace_mechanism
from dpaudit.accountants.pairs import (binary_pair_epsilon, dpsgd_lower_bound, gaussian_mechanism_lower_bound,
                                       gaussian_mixture_pair, laplace_mechanism_lower_bound, lattice_pair_epsilon,
                                       noisy_max_lower_bound, randomized_response_lower_bound)
from dpaudit.accountants.statement import BoundsCrossedError, LowerBound

MNIST = dict(dataset_size=60000, batch_size=256, noise_multiplier=1.1, steps=702, delta=1e-5)


def _brute_binary(p1, p0, n, d):
    j = np.arange(n + 1)
    w = binom.pmf(j, n, p1)
    loss = j * math.log(p1 / p0) + (n - j) * math.log((1 - p1) / (1 - p0))
    f = lambda e: float(np.sum(w * np.clip(-np.expm1(e - loss), 0, None)))  # noqa: E731
    if f(0.0) <= d:
        return 0.0
    lo, hi = 0.0, float(loss.max()) + 1
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) > d else (lo, mid)
    return lo


@pytest.mark.parametrize("p1,p0,n,d", [(0.3, 0.1, 10, 1e-5), (0.6, 0.4, 100, 1e-3), (0.01, 0.001, 1000, 1e-6),
                                       (0.9, 0.2, 1, 1e-5), (0.5, 0.49, 5, 0.1)])
def test_binary_pair_is_the_exact_binomial_rounded_down(p1, p0, n, d):
    exact = _brute_binary(p1, p0, n, d)
    ours = binary_pair_epsilon(p1, p0, n, d)
    assert ours <= exact + 1e-12 and ours == pytest.approx(exact, rel=1e-7, abs=1e-12)


def test_gaussian_pair_below_and_close_to_the_exact_gaussian():
    for sigma, count, delta in [(1.0, 1, 1e-5), (2.0, 10, 1e-5), (5.0, 100, 1e-8), (0.5, 3, 1e-3)]:
        exact = gaussian_mechanism_epsilon(math.sqrt(count) / sigma, delta)
        low = gaussian_mechanism_lower_bound(sigma=sigma, delta=delta, count=count).epsilon
        assert exact * 0.97 <= low <= exact


def test_laplace_pair_below_and_close_to_the_closed_form():
    # one Laplace query: delta(eps) = 1 - e^{(eps - eps0)/2}, so eps(delta) = eps0 + 2 log(1 - delta)
    for scale, delta in [(1.0, 1e-5), (0.5, 1e-3), (3.0, 0.05)]:
        exact = 1.0 / scale + 2 * math.log1p(-delta)
        low = laplace_mechanism_lower_bound(scale=scale, delta=delta).epsilon
        assert exact * 0.99 <= low <= exact
    assert laplace_mechanism_lower_bound(scale=2.0, count=5, delta=0.0).epsilon == 2.5


def test_laplace_mechanism_composes_by_pld_and_optimal_composition():
    # issue 33: basic composition only was 1.47x-7.04x the optimum; the PLD route is at most 1% above the lower bound
    for count in (10, 100, 1000):
        r = laplace_mechanism(scale=1.0, count=count, delta=1e-5)
        routes = {s.route: s.epsilon for s in r.statements}
        assert set(routes) == {"basic", "optimal composition", "pld"}
        assert r.headline_route == "pld" and r.epsilon <= routes["optimal composition"] <= count
        assert r.lower_bound.epsilon <= r.epsilon <= 1.01 * r.lower_bound.epsilon
    assert account_mechanism("laplace", {"scale": 1.0, "count": 100}, 1e-5).headline_route == "pld"
    pure = laplace_mechanism(scale=1.0, count=100)
    assert pure.epsilon == 100.0 and pure.delta == 0.0 and pure.lower_bound.epsilon == 100.0


def test_poisson_pair_meets_dp_accounting_pld():
    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(dp_accounting.PoissonSampledDpEvent(256 / 60000, dp_accounting.GaussianDpEvent(1.1)), 702)
    upper = acc.get_epsilon(1e-5)
    low = dpsgd_lower_bound(**MNIST).epsilon
    assert 0.97 * upper <= low <= upper


def test_fixed_size_zero_out_pair_of_issue_33():
    low = dpsgd_lower_bound(**MNIST, sampling="fixed-wor", neighbouring="zero-out")
    assert low.epsilon >= 3.9 and "neighbour +0C" in low.pair and "others" not in low.pair or low.epsilon >= 3.9
    r = account_dpsgd(**MNIST, sampling="fixed-wor", neighbouring="zero-out")
    assert r.lower_bound.epsilon >= 3.9 and r.epsilon >= r.lower_bound.epsilon
    assert r.interval_text().startswith("epsilon in [3.9")


_SLOW = pytest.mark.slow


@pytest.mark.parametrize("sampling,relation", [
    ("poisson", "add-remove"), pytest.param("poisson", "zero-out", marks=_SLOW),
    pytest.param("fixed-wor", "add-remove", marks=_SLOW), ("fixed-wor", "zero-out"),
    pytest.param("fixed-wor", "substitution", marks=_SLOW), ("shuffle", "zero-out"),
    pytest.param("shuffle", "substitution", marks=_SLOW)])
def test_every_dpsgd_route_has_its_interval(sampling, relation):
    kw = dict(dataset_size=400, batch_size=20, noise_multiplier=1.0, steps=40, delta=1e-5)
    r = account_dpsgd(**kw, sampling=sampling, neighbouring=relation)
    assert r.lower_bound is not None and 0 < r.lower_bound.epsilon <= r.epsilon
    assert r.interval_text() is not None
    quick = dpsgd_lower_bound(**kw, sampling=sampling, neighbouring=relation, quick=True)
    assert 0 < quick.epsilon <= r.lower_bound.epsilon * 1.0001 + 1e-9 or quick.epsilon <= r.epsilon
    assert account_dpsgd(**kw, sampling=sampling, neighbouring=relation, lower_bound=False).lower_bound is None


def test_full_batch_pairs_are_the_gaussian_mechanism():
    # B = n: every record in every step; zero-out's pair is N(2) vs N(1) -- the Gaussian of sensitivity 1, exactly
    exact = gaussian_mechanism_epsilon(math.sqrt(30) / 2.0, 1e-5)
    low = dpsgd_lower_bound(dataset_size=100, batch_size=100, noise_multiplier=2.0, steps=30, delta=1e-5,
                            sampling="fixed-wor", neighbouring="zero-out").epsilon
    assert 0.97 * exact <= low <= exact


def test_randomized_response_lattice_and_ldp_interval():
    r = account_ldp(2.0, 1, 10)
    assert r.lower_bound.epsilon == pytest.approx(2.0, rel=1e-12) and r.interval_text() is not None
    r = account_ldp(2.0, 3, 10, rounds=50, delta=1e-5)
    assert r.lower_bound.routes == ("basic", "rdp", "pld")
    # issue 47: the exact PLD route closes the bracket (it was 0.85 with RDP alone)
    assert r.epsilon * (1 - 1e-6) <= r.lower_bound.epsilon <= r.epsilon
    # C = 2: binary randomized response, the exact binomial
    beta = 0.5
    hi, lo = beta + (1 - beta) / 2, (1 - beta) / 2
    low = randomized_response_lower_bound(keep_probability=beta, classes=2, reports=40, delta=1e-6).epsilon
    assert low == pytest.approx(_brute_binary(hi, lo, 40, 1e-6), rel=1e-6) and low <= _brute_binary(hi, lo, 40, 1e-6) + 1e-9
    # loss +1 or -1 w.p. 1/2 under P: delta(eps) = (1 - e^{eps - 1}) / 2 = 0.1 at eps = 1 + log 0.8
    assert lattice_pair_epsilon(1.0, {1: 0.5, -1: 0.5}, 1, 0.1) == pytest.approx(1 + math.log(0.8), rel=1e-8)


def test_pate_data_independent_interval():
    r = account_pate(None, gamma=0.05, delta=1e-5, queries=1000)
    assert r.lower_bound.routes == ("data-independent",) and 0 < r.lower_bound.epsilon <= r.epsilon
    one = noisy_max_lower_bound(gamma=0.5, sensitivity=2.0, queries=1, delta=1e-6).epsilon
    assert 0.5 <= one <= 1.0   # a single query is at most eps_q = 1-DP


def test_crossed_interval_refuses_to_answer():
    st = PrivacyStatement(0.5, 1e-5, "rdp", route="rdp")
    low = LowerBound(3.9, 1e-5, "issue 33's pair", "test")
    with pytest.raises(BoundsCrossedError, match="refuses to answer"):
        AccountingResult("x", (st,), lower_bound=low)
    # a figure of another scope (no route) or a data-dependent route is not compared
    AccountingResult("x", (PrivacyStatement(0.5, 1e-5, "other"),), lower_bound=low)
    AccountingResult("x", (PrivacyStatement(0.5, 1e-5, "dd", route="data-dependent", data_dependent=True),),
                     lower_bound=low)


def test_cli_exits_70_on_a_crossed_interval(monkeypatch, capsys):
    import dpaudit.accountants.pairs as pairs_mod
    from dpaudit.cli import INTERNAL_ERROR, main

    real = pairs_mod.dpsgd_lower_bound
    monkeypatch.setattr("dpaudit.accountants.dpsgd.dpsgd_lower_bound",
                        lambda **kw: LowerBound(real(**kw).epsilon * 10, kw["delta"], "forced", "test"))
    with pytest.raises(SystemExit) as exc:
        main(["account", "--mechanism", "dpsgd", "--dataset-size", "1000", "--batch-size", "10",
              "--noise-multiplier", "1.0", "--steps", "10", "--delta", "1e-5"])
    assert exc.value.code == INTERNAL_ERROR == 70
    out = capsys.readouterr()
    assert "refuses to answer" in out.err and "ε" not in out.out


def test_json_round_trip_and_old_files():
    r = account_dpsgd(dataset_size=600, batch_size=25, noise_multiplier=1.1, steps=70, delta=1e-5)
    data = json.loads(json.dumps(serial.to_dict(r)))
    assert data["lower_bound"]["epsilon"] <= data["epsilon"] and "pair" in data["lower_bound"]
    back = serial.from_dict(AccountingResult, data, what="x.json")
    assert back.lower_bound == r.lower_bound
    data.pop("lower_bound")     # written before issue 33
    assert serial.from_dict(AccountingResult, data, what="x.json").lower_bound is None


def test_console_prints_the_interval():
    from click.testing import CliRunner

    from dpaudit.cli import cli

    res = CliRunner().invoke(cli, ["account", "--mechanism", "dpsgd", "--dataset-size", "60000", "--batch-size", "256",
                                    "--noise-multiplier", "1.1", "--steps", "702", "--delta", "1e-5",
                                    "--sampling", "fixed-wor", "--neighbouring", "zero-out"])
    assert res.exit_code == 0, res.output
    assert "certified interval: ε in [3.9" in res.output and "lower bound: the pair" in res.output


def test_gaussian_mixture_pair_masses_sum_to_one():
    lp, lq = gaussian_mixture_pair(2.0, 1.0, 1.1, 0.01, bins=2000)
    assert np.exp(lp).sum() == pytest.approx(1.0, abs=1e-12) and np.exp(lq).sum() == pytest.approx(1.0, abs=1e-12)
    gm = gaussian_mechanism(sigma=2.0, delta=1e-5, count=10)
    assert gm.lower_bound is not None and gm.lower_bound.epsilon <= gm.epsilon


def test_tuning_interval_is_one_runs_pair():
    # a constant score releases the first run whenever K >= 1: the tuned release is at least one run's pair
    from dpaudit.accountants import account_tuning

    kw = dict(dataset_size=400, batch_size=20, noise_multiplier=1.0, steps=40, delta=1e-5)
    for dist in ("geometric", "poisson"):
        r = account_tuning(runs_distribution=dist, mean_runs=10, **kw)
        one = dpsgd_lower_bound(**kw).epsilon
        assert r.lower_bound.routes == ("rdp",) and r.lower_bound.epsilon <= one + 1e-12
        assert one * 0.999 <= r.lower_bound.epsilon <= r.epsilon and r.interval_text() is not None

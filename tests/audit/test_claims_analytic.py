"""Claims refuted by their subject's own accounting (issue 42, item 6): a claim below the certified lower bound of an
explicit pair for the mechanism the subject describes is REFUTED (analytic), naming the pair; never when the pair is
at a smaller delta than the claim's, at another granularity, about another route, or above a figure of another
quantity (a Flower client's ex-post figure). Ledgers: parties whose events are all Poisson-subsampled Gaussians."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpaudit._io import write_json
from dpaudit.accountants.dpsgd import account_dpsgd
from dpaudit.accountants.statement import AccountingResult, LowerBound, PrivacyStatement
from dpaudit.auditing import evaluate_claims, parse_claims
from dpaudit.serial import to_dict

DPSGD = dict(dataset_size=1000, batch_size=50, noise_multiplier=1.0, steps=100)


def _claims(tmp_path: Path, *claims: dict):
    return {r.name: r for r in evaluate_claims(parse_claims({"claim": list(claims)}, base_dir=tmp_path)).results}


def _mech(name: str, epsilon: float, delta: float = 1e-5, **params) -> dict:
    return dict(name=name, epsilon=epsilon, delta=delta, granularity="example", mechanism="dpsgd",
                params={**DPSGD, **params})


def test_a_dpsgd_claim_below_the_pair_is_refuted_and_one_inside_the_interval_is_not(tmp_path):
    res = account_dpsgd(**DPSGD, delta=1e-5)
    lo, hi = res.lower_bound.epsilon, res.epsilon
    assert 0 < lo < hi
    r = _claims(tmp_path, _mech("below", 0.9 * lo), _mech("inside", (lo + hi) / 2), _mech("above", hi * 1.01))
    assert r["below"].verdict == "REFUTED" and r["below"].empirical is None
    (why,) = r["below"].refuted_by
    assert why.startswith("analytic: certified lower bound") and "explicit pair:" in why and res.lower_bound.pair in why
    assert r["inside"].verdict == "UNPROVEN" and r["inside"].refuted_by == ()
    assert r["above"].verdict == "HOLDS"
    # the claim's delta: the mechanism is accounted (and its pair taken) at the claim's own delta
    big = account_dpsgd(**DPSGD, delta=1e-2)
    r = _claims(tmp_path, _mech("larger-delta", 0.9 * lo, delta=1e-2))
    assert (r["larger-delta"].verdict == "REFUTED") == (0.9 * lo < big.lower_bound.epsilon)


def test_laplace_at_delta_zero_and_gaussian(tmp_path):
    r = _claims(tmp_path,
                dict(name="lap", epsilon=0.99, delta=0.0, granularity="example", mechanism="laplace", params={"scale": 1.0}),
                dict(name="lap-ok", epsilon=1.0, delta=0.0, granularity="example", mechanism="laplace", params={"scale": 1.0}),
                dict(name="gauss", epsilon=1.0, delta=1e-5, granularity="example", mechanism="gaussian", params={"sigma": 1.0}),
                dict(name="gauss-delta0", epsilon=1.0, delta=0.0, granularity="example", mechanism="gaussian",
                     params={"sigma": 1.0}))
    assert r["lap"].verdict == "REFUTED" and r["lap-ok"].verdict == "HOLDS"
    assert r["gauss"].verdict == "REFUTED" and "analytic" in r["gauss"].reason       # 4.38 for sigma 1 at 1e-5
    # at delta 0 the Gaussian mechanism has no finite epsilon and no pair is computed: UNPROVEN
    assert r["gauss-delta0"].verdict == "UNPROVEN"


def _release(path: Path, result: AccountingResult, *, granularity: str = "example", method: str = "centrain") -> Path:
    path.mkdir(parents=True, exist_ok=True)
    meta = {
        "schema": 1, "method": method, "dataset": {"name": "digits", "seed": 0, "num_samples": None},
        "params": {}, "seed": 0, "utility": {"test_accuracy": 0.9},
        "model": {"spec": {"name": "mlp", "input_shape": [64], "num_classes": 10, "kwargs": {}},
                  "file": "model.safetensors", "train_config": {}},
        "statement": to_dict(result),
        "claim": {"epsilon": result.epsilon, "delta": result.delta, "granularity": granularity, "text": "as published"},
        "assumptions": [], "created_by": "dpaudit test",
    }
    write_json(path / "release.json", meta)
    return path


def _rel(name: str, epsilon: float, delta: float = 1e-5, granularity: str = "example", release: str = "rel") -> dict:
    return dict(name=name, epsilon=epsilon, delta=delta, granularity=granularity, release=release)


def test_a_release_is_refuted_only_by_a_pair_about_its_figure(tmp_path):
    st = PrivacyStatement(8.0, 1e-5, "rdp", route="rdp")
    low = LowerBound(6.0, 1e-5, "P vs Q", "exact")
    _release(tmp_path / "rel", AccountingResult("dpsgd", (st,), lower_bound=low))
    _release(tmp_path / "party", AccountingResult("dpsgd", (st,), lower_bound=low), granularity="party")
    other = LowerBound(6.0, 1e-5, "P vs Q", "exact", routes=("pld",))      # a pair about another route only
    _release(tmp_path / "route", AccountingResult("dpsgd", (st,), lower_bound=other))
    r = _claims(tmp_path, _rel("below", 5.0), _rel("inside", 7.0),
                _rel("smaller-delta", 5.0, delta=1e-6),                 # (5, 1e-6)-DP would give (5, 1e-5)-DP: false
                _rel("larger-delta", 5.0, delta=1e-3),                  # a statement the pair at 1e-5 does not reach
                _rel("other-granularity", 5.0, granularity="example", release="party"),
                _rel("other-route", 5.0, release="route"))
    assert r["below"].verdict == "REFUTED" and "P vs Q" in r["below"].reason
    assert r["inside"].verdict == "UNPROVEN"
    assert r["smaller-delta"].verdict == "REFUTED"
    assert r["larger-delta"].verdict == "UNPROVEN" and r["larger-delta"].refuted_by == ()
    assert r["other-granularity"].verdict == "UNPROVEN" and "granularity mismatch" in r["other-granularity"].reason
    assert r["other-granularity"].refuted_by == ()
    assert r["other-route"].verdict == "UNPROVEN" and r["other-route"].refuted_by == ()


def _flower_result(epsilon: float, lower: float) -> AccountingResult:
    st = PrivacyStatement(epsilon, 1e-5, "rdp", label="client-level, max over 20 clients", route="rdp",
                          details={"lower_bound_epsilon": lower})
    return AccountingResult("flower run", (st,), facts={"lower_bound_epsilon": lower, "sampled_epsilon": 18.9})


def test_the_issues_flower_reproducer(tmp_path):
    """A claim of Flower's own 7.471 on a run whose ex-ante interval is [9.768, 18.9]: REFUTED (analytic)."""
    _release(tmp_path / "rel", _flower_result(18.9, 9.768), granularity="user", method="flower")
    # a run whose largest client figure is ex post (its own rounds) and below the ex-ante pair: that figure is
    # another quantity, the pair does not bound it, nothing is refuted
    _release(tmp_path / "expost", _flower_result(6.0, 9.768), granularity="user", method="flower")
    r = _claims(tmp_path, _rel("flower", 7.471, granularity="user"), _rel("ours", 19.0, granularity="user"),
                _rel("inside", 12.0, granularity="user"), _rel("expost", 7.0, granularity="user", release="expost"))
    assert r["flower"].verdict == "REFUTED"
    assert r["flower"].refuted_by[0].startswith("analytic: certified lower bound 9.768 at delta 1e-5")
    assert "every other client's -C" in r["flower"].refuted_by[0]
    assert r["ours"].verdict == "HOLDS" and r["inside"].verdict == "UNPROVEN"
    assert r["expost"].verdict == "HOLDS"


def test_a_ledgers_subsampled_gaussian_parties_have_a_pair(tmp_path):
    from dpaudit.accountants.closed_form import gaussian_mechanism_epsilon
    from dpaudit.accountants.events import FixedBatchGaussian, SubsampledGaussian
    from dpaudit.accountants.ledger import PrivacyLedger

    led = PrivacyLedger(delta=1e-5)
    led.record("a", SubsampledGaussian(sampling_rate=0.05, noise_multiplier=1.0, steps=100))
    led.record("g", SubsampledGaussian(sampling_rate=1.0, noise_multiplier=4.0, steps=30))     # the Gaussian mechanism
    led.record("f", FixedBatchGaussian(1000, 50, 1.0, steps=100))                            # no pair known here
    low_a, low_g = led.lower_bound("a"), led.lower_bound("g")
    exact_g = gaussian_mechanism_epsilon(30 ** 0.5 / 4.0, 1e-5)          # mu-GDP, exactly
    assert low_g.epsilon <= exact_g and low_g.epsilon == pytest.approx(exact_g, rel=0.01)
    assert 0 < low_a.epsilon <= led.statement("a").epsilon and led.lower_bound("f") is None
    assert led.lower_bound().epsilon == max(low_a.epsilon, low_g.epsilon)   # overall: the largest party's
    write_json(tmp_path / "ledger.json", to_dict(led))
    r = _claims(tmp_path,
                dict(name="a-below", epsilon=0.9 * low_a.epsilon, delta=1e-5, granularity="example",
                     ledger="ledger.json", party="a"),
                dict(name="a-inside", epsilon=(low_a.epsilon + led.statement("a").epsilon) / 2, delta=1e-5,
                     granularity="example", ledger="ledger.json", party="a"),
                dict(name="f", epsilon=0.01, delta=1e-5, granularity="example", ledger="ledger.json", party="f"),
                dict(name="overall", epsilon=0.9 * low_g.epsilon, delta=1e-5, granularity="example",
                     ledger="ledger.json"),
                dict(name="larger-delta", epsilon=0.9 * low_a.epsilon, delta=1e-3, granularity="example",
                     ledger="ledger.json", party="a"))
    assert r["a-below"].verdict == "REFUTED" and "party a" in r["a-below"].refuted_by[0]
    assert r["a-inside"].verdict == "UNPROVEN" and r["f"].verdict == "UNPROVEN" and r["f"].refuted_by == ()
    assert r["overall"].verdict == "REFUTED"
    assert r["larger-delta"].refuted_by == ()             # the pair is at the ledger's delta 1e-5


def test_a_ledger_pair_is_not_computed_past_its_size_caps():
    from dpaudit.accountants.events import SubsampledGaussian
    from dpaudit.accountants.ledger import LOWER_BOUND_MAX_STEPS, PrivacyLedger

    led = PrivacyLedger(delta=1e-5)
    led.record("many", SubsampledGaussian(sampling_rate=0.01, noise_multiplier=1.0, steps=LOWER_BOUND_MAX_STEPS + 1))
    led.record("tiny-noise", SubsampledGaussian(sampling_rate=0.01, noise_multiplier=0.01, steps=10))
    assert led.lower_bound("many") is None and led.lower_bound("tiny-noise") is None and led.lower_bound() is None


@pytest.mark.parametrize("tol", [0.0])
def test_a_claim_at_the_bound_is_not_refuted(tmp_path, tol):
    st = PrivacyStatement(8.0, 1e-5, "rdp", route="rdp")
    _release(tmp_path / "rel", AccountingResult("dpsgd", (st,), lower_bound=LowerBound(6.0, 1e-5, "P vs Q", "exact")))
    r = _claims(tmp_path, _rel("at", 6.0 + tol))
    assert r["at"].verdict == "UNPROVEN"

"""dpaudit.claims: parsing/validation of claims files and their evaluation (mechanism, ledger and release subjects)."""

from __future__ import annotations

import math
import types
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from dpaudit._io import write_json
from dpaudit.accountants.dpsgd import account_dpsgd
from dpaudit.accountants.events import SubsampledGaussian
from dpaudit.accountants.ledger import PrivacyLedger
from dpaudit.accountants.statement import AccountingResult, PrivacyStatement
from dpaudit.auditing import (
    AttackBudget,
    ClaimsReport,
    EmpiricalBound,
    MechanismSubject,
    ReleaseSubject,
    check_claims,
    evaluate_claims,
    gaussian_mechanism_epsilon,
    load_claims,
    parse_claims,
)
from dpaudit.errors import DataError, ParameterError
from dpaudit.serial import from_dict, to_dict

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "claims"


def claim(**kw):
    base = dict(name="c", epsilon=1.0, delta=0.0, granularity="example", mechanism="laplace", params={"scale": 1.0})
    base.update(kw)
    return {k: v for k, v in base.items() if v is not None}


def doc(*claims):
    return {"claim": list(claims)}


# ---------------------------------------------------------------- parsing


def test_examples_parse_into_typed_claims():
    cf = load_claims(EXAMPLES / "holds.toml")
    assert [c.name for c in cf.claims] == ["laplace-count", "gaussian-sum-10-queries", "dpsgd-digits", "privatekt-report"]
    c = cf.claims[2]
    assert isinstance(c.subject, MechanismSubject) and c.subject.kind == "dpsgd"
    assert c.epsilon == 6.0 and c.delta == 1e-5 and c.granularity == "example"
    assert to_dict(c)["subject"]["params"]["noise_multiplier"] == 1.1


def test_release_paths_are_relative_to_the_claims_file(tmp_path):
    cf = parse_claims(doc(claim(mechanism=None, params=None, release="runs/x", attack={"kind": "lira"})), base_dir=tmp_path)
    c = cf.claims[0]
    assert isinstance(c.subject, ReleaseSubject) and c.subject.path == tmp_path / "runs" / "x"
    assert c.attack == AttackBudget(kind="lira", shadows=8, confidence=0.95, seed=0)


@pytest.mark.parametrize(
    "claims,match",
    [
        ([claim(colour="red")], "Unknown key 'colour' in claim 'c'"),
        ([claim(epsilon=None)], "'epsilon' parameter of claim 'c' is required"),
        ([claim(epsilon=-1.0)], "'epsilon' parameter of claim 'c' must be a float >= 0.0"),
        ([claim(delta=1.0)], "'delta' parameter of claim 'c'"),
        ([claim(granularity="galaxy")], "'granularity' parameter of claim 'c' must be one of"),
        ([claim(release="x")], "exactly one subject"),
        ([claim(mechanism=None, params=None)], "exactly one subject"),
        ([claim(mechanism="magic")], "'mechanism' parameter of claim 'c' must be one of"),
        ([claim(mechanism=None, release="x")], "'params' parameter of claim 'c' applies to 'mechanism' subjects only"),
        ([claim(attack={"kind": "threshold"})], "'attack' parameter of claim 'c' applies to 'release' subjects only"),
        ([claim(party="a")], "'party' parameter of claim 'c' applies to 'release' and 'ledger'"),
        ([claim(mechanism=None, params=None, release="x", attack={"kind": "guess"})], "'kind' parameter of the attack"),
        ([claim(mechanism=None, params=None, release="x", attack={"kind": "lira", "budget": 3})], "Unknown key 'budget' in the attack"),
        ([claim(mechanism=None, params=None, release="x", attack={"kind": "lira", "confidence": 1.5})], "'confidence'"),
        ([claim(), claim()], "unique"),
        ([claim(mechanism="dpsgd", granularity="party")], "must be one of 'example' for a 'dpsgd' mechanism"),
        ([claim(mechanism="ldp", params={"epsilon": 5, "samples": 2, "classes": 10, "rounds": 10}, granularity="report")],
         "must be one of 'user'"),
        ([claim(params={"scale": 1.0, "delta": 0.1})], "must not set 'delta'"),
        ([claim(name="")], "'name' parameter of claim #1 must be a non-empty string"),
        ([], "at least one"),
    ],
)
def test_usage_errors_name_the_claim_and_key(claims, match):
    with pytest.raises(ParameterError, match=match):
        parse_claims(doc(*claims))


def test_top_level_errors(tmp_path):
    with pytest.raises(ParameterError, match="Unknown key 'claims'"):
        parse_claims({"claims": [claim()]})
    with pytest.raises(ParameterError, match="'schema'"):
        parse_claims({"schema": 2, "claim": [claim()]})
    bad = tmp_path / "bad.toml"
    bad.write_text("[[claim]]\nname = \n")
    with pytest.raises(DataError, match="not valid TOML"):
        load_claims(bad)
    with pytest.raises(DataError, match="does not exist"):
        load_claims(tmp_path / "missing.toml")


# ---------------------------------------------------------------- mechanism subjects


def test_laplace_claim_holds_exactly_at_its_epsilon_and_fails_above():
    from dpaudit.accountants.mechanisms import laplace_mechanism

    res = laplace_mechanism(scale=2.0, count=3, delta=1e-3)
    mid = (res.lower_bound.epsilon + res.epsilon) / 2      # inside the accounting's interval
    rep = evaluate_claims(parse_claims(doc(claim(name="ok", epsilon=0.5, params={"scale": 2.0}),
                                           claim(name="bad", epsilon=0.4, params={"scale": 2.0, "count": 1}),
                                           claim(name="composed", epsilon=mid, delta=1e-3,
                                                 params={"scale": 2.0, "count": 3}))))
    ok, bad, composed = rep.results
    assert ok.held and ok.verdict == "HOLDS" and ok.accounted.epsilon == 0.5
    # below the pair Lap(0, 2) vs Lap(1, 2), whose epsilon 0.5 is attained: false for this mechanism (analytic)
    assert bad.verdict == "REFUTED" and bad.unproven_because == ("accounted epsilon 0.5 > claimed 0.4",)
    assert len(bad.refuted_by) == 1 and bad.refuted_by[0].startswith("analytic: certified lower bound 0.5 at delta 0")
    assert "Lap(" in bad.refuted_by[0]                                   # the pair is named
    # three queries at delta 1e-3, a claim inside the accounting's interval: UNPROVEN, not refuted
    assert res.lower_bound.epsilon < mid < res.epsilon
    assert composed.verdict == "UNPROVEN" and composed.accounted.epsilon == pytest.approx(res.epsilon)
    assert composed.refuted_by == ()
    assert rep.verdict == "REFUTED" and rep.exit_code == 1 and not rep.passed
    assert [r.name for r in rep.failures] == ["bad", "composed"]
    assert rep.counts == {"HOLDS": 1, "UNPROVEN": 1, "REFUTED": 1}


def test_gaussian_mechanism_epsilon_against_dp_accounting_pld():
    # reference: dp_accounting's PLD accountant (pessimistic discretisation, so an upper bound close to exact)
    import dp_accounting

    for sigma, delta in [(1.0, 1e-5), (4.0, 1e-6), (0.7, 1e-3)]:
        acc = dp_accounting.pld.PLDAccountant()
        acc.compose(dp_accounting.GaussianDpEvent(noise_multiplier=sigma))
        ref = acc.get_epsilon(delta)
        ours = gaussian_mechanism_epsilon(1.0 / sigma, delta)
        assert ours <= ref * (1 + 1e-6) and ours == pytest.approx(ref, rel=1e-2)
    assert gaussian_mechanism_epsilon(1.0, 1e-5) == pytest.approx(4.3772, abs=1e-3)  # Balle & Wang 2018, Thm 8 solved
    assert gaussian_mechanism_epsilon(1.0, 0.0) == math.inf


def test_gaussian_composition_is_gdp_composition():
    rep = evaluate_claims(parse_claims(doc(claim(mechanism="gaussian", delta=1e-5, epsilon=10.0, params={"sigma": 6.0, "count": 36}))))
    # 36 compositions at sigma 6 = one at sigma 1 (Dong, Roth & Su 2019, Corollary 3.3)
    assert rep.results[0].accounted.epsilon == pytest.approx(gaussian_mechanism_epsilon(1.0, 1e-5))


def test_dpsgd_claim_uses_account_dpsgd_at_the_claimed_delta():
    params = dict(dataset_size=1437, batch_size=64, noise_multiplier=1.1, epochs=5)
    rep = evaluate_claims(parse_claims(doc(claim(mechanism="dpsgd", params=params, delta=1e-6, epsilon=100.0))))
    direct = account_dpsgd(**params, delta=1e-6)
    assert rep.results[0].accounted == direct.statement and rep.results[0].held


def test_unknown_mechanism_parameters_are_usage_errors():
    with pytest.raises(ParameterError, match="Bad parameters for the 'dpsgd' mechanism"):
        evaluate_claims(parse_claims(doc(claim(mechanism="dpsgd", params={"noise": 1.0}, delta=1e-5))))
    with pytest.raises(ParameterError, match="Unknown parameter 'sigma' of the laplace"):
        evaluate_claims(parse_claims(doc(claim(params={"sigma": 1.0}))))
    with pytest.raises(ParameterError, match="'scale' parameter of the laplace mechanism is required"):
        evaluate_claims(parse_claims(doc(claim(params={}))))


def test_examples_verdicts():
    holds = check_claims(EXAMPLES / "holds.toml")
    assert holds.verdict == "HOLDS" and holds.exit_code == 0
    # fails.toml: two claims below their mechanism's certified lower bound (REFUTED, analytic: exit 1) and one inside
    # the accounting's interval (UNPROVEN)
    rep = check_claims(EXAMPLES / "fails.toml")
    assert [r.verdict for r in rep.results] == ["HOLDS", "REFUTED", "REFUTED", "UNPROVEN"]
    assert rep.verdict == "REFUTED" and rep.exit_code == 1
    assert rep.results[1].accounted.epsilon > 100  # 250 rounds of 5-LDP reports
    assert all(r.refuted_by[0].startswith("analytic: ") and r.empirical is None for r in rep.results[1:3])


# ---------------------------------------------------------------- ledger and release subjects


def _ledger(delta=1e-5) -> PrivacyLedger:
    led = PrivacyLedger(delta=delta)
    led.record("alice", SubsampledGaussian(sampling_rate=0.01, noise_multiplier=1.0, steps=100))
    led.record("bob", SubsampledGaussian(sampling_rate=0.01, noise_multiplier=1.0, steps=2000))
    return led


def test_ledger_subject_overall_and_party(tmp_path):
    led = _ledger()
    write_json(tmp_path / "ledger.json", to_dict(led))
    eps_a, eps_b = led.statement("alice").epsilon, led.statement("bob").epsilon
    mid = (eps_a + eps_b) / 2
    cf = parse_claims(doc(
        claim(name="overall", mechanism=None, params=None, ledger="ledger.json", epsilon=mid, delta=1e-5),
        claim(name="alice", mechanism=None, params=None, ledger="ledger.json", party="alice", epsilon=mid, delta=1e-5),
        claim(name="tight-delta", mechanism=None, params=None, ledger="ledger.json", party="alice", epsilon=mid, delta=1e-6),
    ), base_dir=tmp_path)
    rep = evaluate_claims(cf)
    overall, alice, tight = rep.results
    # bob's 2000 steps have a certified lower bound (2.48) above the claim: false for bob's records (analytic)
    assert led.lower_bound("bob").epsilon > mid
    assert overall.verdict == "REFUTED" and overall.accounted.epsilon == pytest.approx(eps_b)
    assert alice.held and alice.accounted.epsilon == pytest.approx(eps_a)
    assert tight.verdict == "UNPROVEN" and "accounted delta 1e-5 > claimed 1e-6" in tight.reasons
    bad = parse_claims(doc(claim(mechanism=None, params=None, ledger="ledger.json", party="carol")), base_dir=tmp_path)
    with pytest.raises(DataError, match="'carol' is not in the ledger"):
        evaluate_claims(bad)


def _fake_release(path: Path, *, epsilon=2.0, delta=1e-5, granularity="example", data_dependent=False, ledger=None) -> Path:
    """A release directory with the release.json layout of training/CONTRACTS.md (model files are not needed
    to account a claim)."""
    st = PrivacyStatement(epsilon=epsilon, delta=delta, method="rdp", order=10.0, label="student",
                          assumptions=("replace-one record",), data_dependent=data_dependent)
    meta = {
        "schema": 1, "method": "fredy", "dataset": {"name": "digits", "seed": 0, "num_samples": None},
        "params": {"gamma": 0.05}, "seed": 0, "utility": {"test_accuracy": 0.9},
        "model": {"spec": {"name": "mlp", "input_shape": [64], "num_classes": 10, "kwargs": {}}, "file": "model.safetensors",
                  "train_config": {}},
        "ledger": (ledger or _ledger(delta)).to_dict(),
        "statement": to_dict(AccountingResult(mechanism="pate", statements=(st,))),
        "claim": {"epsilon": epsilon, "delta": delta, "granularity": granularity, "text": "as published"},
        "assumptions": [], "created_by": "dpaudit test",
    }
    write_json(path / "release.json", meta)
    return path


def _release_claim(**kw):
    return claim(mechanism=None, params=None, release="rel", **kw)


def test_release_subject_statement_granularity_delta_and_data_dependence(tmp_path):
    _fake_release(tmp_path / "rel", epsilon=2.0, granularity="party", data_dependent=True)
    cf = parse_claims(doc(
        _release_claim(name="holds", epsilon=2.0, delta=1e-5, granularity="party", allow_data_dependent=True),
        _release_claim(name="wrong-granularity", epsilon=2.0, delta=1e-5, granularity="example"),
        _release_claim(name="smaller-delta", epsilon=2.0, delta=1e-6, granularity="party"),
        _release_claim(name="strict", epsilon=2.0, delta=1e-5, granularity="party"),
        _release_claim(name="party-alice", epsilon=1e9, delta=1e-5, granularity="party", party="alice",
                       allow_data_dependent=True),
    ), base_dir=tmp_path)
    r = {x.name: x for x in evaluate_claims(cf).results}
    assert r["holds"].held and any("data-dependent" in w for w in r["holds"].warnings)
    # what the accounting cannot show is UNPROVEN, never REFUTED
    assert r["wrong-granularity"].verdict == "UNPROVEN" and "granularity mismatch" in r["wrong-granularity"].reason
    assert r["smaller-delta"].verdict == "UNPROVEN" and "accounted delta" in r["smaller-delta"].reason
    assert r["strict"].verdict == "UNPROVEN" and "allow_data_dependent = true" in r["strict"].reason
    assert r["party-alice"].held and r["party-alice"].accounted.label != "student"  # from the ledger, not the headline


def test_release_attack_budget_uses_the_runner_and_fails_only_on_a_high_certified_bound(tmp_path):
    _fake_release(tmp_path / "rel", epsilon=2.0)
    calls = []

    def runner(lb, kind="certified"):
        def run(path, budget, delta):
            calls.append((path, budget, delta))
            return EmpiricalBound(attack=budget.kind, epsilon_lower_bound=lb, confidence=budget.confidence, delta=delta,
                                  kind=kind)
        return run

    cf = parse_claims(doc(_release_claim(epsilon=3.0, delta=1e-5, attack={"kind": "threshold", "shadows": 4, "confidence": 0.9})),
                      base_dir=tmp_path)
    low = evaluate_claims(cf, attack_runner=runner(0.4)).results[0]
    assert low.held and low.empirical.epsilon_lower_bound == 0.4
    assert calls[0] == (tmp_path / "rel", AttackBudget("threshold", 4, 0.9, 0), 1e-5)
    mid = evaluate_claims(cf, attack_runner=runner(2.5)).results[0]  # above accounted 2.0, below claimed 3.0
    assert mid.held and any("above the accounted epsilon" in w for w in mid.warnings)
    high = evaluate_claims(cf, attack_runner=runner(3.5)).results[0]
    assert high.verdict == "REFUTED" and "certified empirical lower bound 3.5 (threshold, confidence 0.9) > claimed 3" in high.reason
    assert high.refuted_by == high.reasons and high.unproven_because == ()
    # the same figure as an estimate (one model's records) is a warning, never a failure
    est = evaluate_claims(cf, attack_runner=runner(3.5, "estimate")).results[0]
    assert est.held and est.empirical.kind == "estimate"
    assert any("above the claimed epsilon 3" in w and "not certified" in w for w in est.warnings)
    assert "≈ 3.5 (estimate)" in ClaimsReport("x", (est,)).table()
    root = ET.fromstring(ClaimsReport("x", (est, high)).junit_xml())
    cases = root.find("testsuite").findall("testcase")
    assert cases[0].find("failure") is None and cases[1].find("failure") is not None
    kinds = [{p.get("name"): p.get("value") for p in c.find("properties")}["empirical_kind"] for c in cases]
    assert kinds == ["estimate", "certified"]
    assert "estimate" in cases[0].find("system-out").text
    with pytest.raises(ParameterError, match="'kind' parameter of EmpiricalBound"):
        EmpiricalBound("threshold", 1.0, 0.95, 0.0, kind="proven")


def test_refuted_beats_unproven_in_a_claim_and_in_the_report(tmp_path):
    """A claim the accounting cannot show AND certified evidence refutes is REFUTED; the report's verdict and exit
    code are its worst claim's (REFUTED 1 over UNPROVEN 3 over HOLDS 0)."""
    _fake_release(tmp_path / "rel", epsilon=2.0)

    def certified(lb):
        return lambda path, budget, delta: EmpiricalBound(attack=budget.kind, epsilon_lower_bound=lb,
                                                          confidence=budget.confidence, delta=delta, kind="certified")

    att = {"kind": "canary"}
    both = parse_claims(doc(_release_claim(name="both", epsilon=1.0, delta=1e-5, attack=att)), base_dir=tmp_path)
    r = evaluate_claims(both, attack_runner=certified(1.5)).results[0]
    assert r.verdict == "REFUTED" and len(r.refuted_by) == 1 and r.unproven_because == ("accounted epsilon 2 > claimed 1",)
    assert r.reasons[0].startswith("certified empirical lower bound 1.5")  # the refutation first
    unproven = evaluate_claims(both, attack_runner=certified(0.5)).results[0]
    assert unproven.verdict == "UNPROVEN"
    holds = evaluate_claims(parse_claims(doc(_release_claim(name="ok", epsilon=2.0, delta=1e-5)), base_dir=tmp_path)).results[0]
    assert holds.verdict == "HOLDS"
    for results, verdict, code in (((holds,), "HOLDS", 0), ((holds, unproven), "UNPROVEN", 3),
                                   ((holds, unproven, r), "REFUTED", 1), ((r, unproven), "REFUTED", 1)):
        rep = ClaimsReport("x.toml", results)
        assert rep.verdict == verdict and rep.exit_code == code
        assert from_dict(ClaimsReport, to_dict(rep)) == rep
    rep = ClaimsReport("x.toml", (holds, unproven, r))
    cases = ET.fromstring(rep.junit_xml()).find("testsuite").findall("testcase")
    assert [c.find("failure").get("type") if c.find("failure") is not None else None for c in cases] == \
        [None, "PrivacyClaimUnproven", "PrivacyClaimRefuted"]
    assert cases[2].find("failure").get("message").startswith("REFUTED: certified empirical lower bound 1.5")
    assert "Verdict: REFUTED" in cases[2].find("failure").text


def test_release_errors(tmp_path):
    (tmp_path / "rel").mkdir()
    cf = parse_claims(doc(_release_claim()), base_dir=tmp_path)
    with pytest.raises(DataError, match="no release.json"):
        evaluate_claims(cf)
    (tmp_path / "rel" / "release.json").write_text("{not json")
    with pytest.raises(DataError, match="not valid JSON"):
        evaluate_claims(cf)
    write_json(tmp_path / "rel" / "release.json", {"schema": 7})
    with pytest.raises(DataError, match="schema version 7 is unknown"):
        evaluate_claims(cf)


class _Memoriser:
    """A 'model' that is confident on its training records only: the threshold attack must see it."""

    def __init__(self, X_members):
        self._seen = {x.tobytes() for x in X_members}

    def predict_proba(self, X):
        p = np.full((len(X), 2), 0.5)
        hit = np.array([x.tobytes() in self._seen for x in X])
        p[hit] = [0.001, 0.999]
        return p


def test_default_attack_runner_through_the_release_contract(tmp_path, monkeypatch):
    """A release (faked here: a memorising model on synthetic records) through attack_release and the real
    attacks layer behind it."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 4)).astype(np.float32)
    y = np.ones(600, dtype=np.int64)
    members, nonmembers, attacker = np.arange(0, 200), np.arange(200, 400), np.arange(400, 600)

    class Release:
        path = tmp_path / "rel"
        meta: dict = {}
        model = _Memoriser(X[members])
        votes = None
        spec = None
        membership = {"members": members, "nonmembers": nonmembers, "attacker": attacker}

        def dataset(self):
            return types.SimpleNamespace(X=X, y=y, num_classes=2)

    import dpaudit.auditing.attack_release as attack_release

    monkeypatch.setattr(attack_release, "load_release", lambda path, **kw: Release())
    _fake_release(tmp_path / "rel", epsilon=0.5)
    cf = parse_claims(doc(_release_claim(name="small", epsilon=0.5, delta=1e-5, attack={"kind": "threshold", "confidence": 0.95}),
                          _release_claim(name="huge", epsilon=50.0, delta=1e-5, attack={"kind": "threshold"})),
                      base_dir=tmp_path)
    small, huge = evaluate_claims(cf).results
    # one model's records are not independent trials: the figure is an estimate, a warning, never a failure
    assert small.empirical.attack == "threshold" and small.empirical.epsilon_lower_bound > 2.0
    assert small.empirical.kind == "estimate" and small.held
    lo, hi = small.empirical.details["split_range"]
    assert lo <= small.empirical.epsilon_lower_bound <= hi
    assert any("above the claimed epsilon" in w for w in small.warnings)
    assert any("Clopper-Pearson" in w for w in small.warnings)  # the attacks layer's caveat is shown
    assert huge.held


# ---------------------------------------------------------------- reports


def test_report_round_trip_table_and_junit():
    rep = check_claims(EXAMPLES / "fails.toml")
    assert from_dict(ClaimsReport, to_dict(rep)) == rep
    table = rep.table()
    assert "privatekt-whole-run" in table and "UNPROVEN" in table
    assert ("4 claims: 1 HOLDS, 1 UNPROVEN (dpsgd-digits-30-epochs), 2 REFUTED (privatekt-whole-run, "
            "dpsgd-digits-100-epochs).") in table
    d = to_dict(rep)
    assert d["verdict"] == "REFUTED" and d["exit_code"] == 1 and d["counts"] == {"HOLDS": 1, "UNPROVEN": 1, "REFUTED": 2}
    assert [r["verdict"] for r in d["results"]] == ["HOLDS", "REFUTED", "REFUTED", "UNPROVEN"]
    root = ET.fromstring(rep.junit_xml())
    suite = root.find("testsuite")
    assert suite.get("tests") == "4" and suite.get("failures") == "3"
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == ["laplace-count", "privatekt-whole-run", "dpsgd-digits-100-epochs",
                                              "dpsgd-digits-30-epochs"]
    assert [{p.get("name"): p.get("value") for p in c.find("properties")}["verdict"] for c in cases] == \
        ["HOLDS", "REFUTED", "REFUTED", "UNPROVEN"]
    fail = cases[2].find("failure")
    assert fail is not None and fail.get("type") == "PrivacyClaimRefuted"
    assert fail.get("message").startswith("REFUTED: analytic: certified lower bound 12.69") and "claimed 3" in fail.get("message")
    assert "q = 64/1437" in fail.text  # the accountant's assumptions travel with the failure
    fail = cases[3].find("failure")
    assert fail is not None and fail.get("type") == "PrivacyClaimUnproven"
    assert fail.get("message").startswith("UNPROVEN: accounted epsilon") and "claimed 6.45" in fail.get("message")
    assert cases[0].find("failure") is None


@pytest.mark.slow  # ~9 s on 2 shared cores (torch import, digits, tree, attack); the wiring is tested by default above
def test_end_to_end_real_release_and_threshold_attack(tmp_path):
    """A real release bundle (training layer's write_release: a decision tree on load_digits, non-private, with
    a false claim of epsilon 1) refuted by the threshold attack through `dpaudit check`'s library call."""
    from dpaudit.training.data import load_dataset, split_dataset
    from dpaudit.training.ensemble import fit_classifier
    from dpaudit.training.models import ModelSpec
    from dpaudit.training.release import write_release

    ds = load_dataset("digits", seed=0)
    sp = split_dataset(ds, seed=0)
    spec = ModelSpec(name="decision_tree", input_shape=ds.input_shape, num_classes=ds.num_classes, kwargs={})
    clf = fit_classifier(spec, ds.X[sp.train], ds.y[sp.train], None, seed=0)
    st = AccountingResult(mechanism="none", statements=(PrivacyStatement(epsilon=1.0, delta=1e-5, method="as claimed"),))
    write_release(tmp_path / "rel", method="baseline", dataset={"name": "digits", "seed": 0, "num_samples": None},
                  params={}, seed=0, utility={"test_accuracy": 0.5}, classifier=clf, train_config=None, ledger=None, statement=st,
                  claim={"epsilon": 1.0, "delta": 1e-5, "granularity": "example", "text": "false on purpose"},
                  membership={"members": sp.train, "nonmembers": sp.test, "attacker": sp.attacker})
    (tmp_path / "claims.toml").write_text(
        '[[claim]]\nname = "tree"\nrelease = "rel"\nepsilon = 1.0\ndelta = 1e-5\ngranularity = "example"\n'
        'attack = { kind = "threshold", confidence = 0.95 }\n'
    )
    res = check_claims(tmp_path / "claims.toml").results[0]
    # the accounted figure (1.0) is what the release states, so only the attack can refute the claim
    assert res.accounted.epsilon == 1.0
    # on one model the attack's figure is an estimate: reported as a warning, it cannot refute the claim
    assert res.empirical.kind == "estimate" and res.empirical.epsilon_lower_bound > 1.0
    assert res.held and any("above the claimed epsilon" in w for w in res.warnings)

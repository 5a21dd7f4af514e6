"""Claims checked against a certified audit of a method's whole training run (``attack.kind = "method-run"``).

A small registered audit (randomized response of one auditor-controlled user over ``rounds`` reports, certified by
the real multi-run rule) stands in for a method, as in ``test_method_audit.py``; the shipped FREDY example runs the
real audit (slow)."""

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from dpaudit.attacks.canary import multi_run_certified
from dpaudit.auditing import claims as claims_module
from dpaudit.auditing import method_audit
from dpaudit.auditing.claims import AttackBudget, parse_claims
from dpaudit.auditing.evaluate import ClaimsReport, check_claims, evaluate_claims
from dpaudit.auditing.method_audit import MethodRunAudit
from dpaudit.errors import ParameterError
from dpaudit.serial import from_dict, to_dict

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "claims"
CALLS = []


def _rr_run(*, trials: int = 2000, rounds: int = 5, epsilon: float = 1.0, delta: float = 0.0, seed: int = 0,
            confidence: float = 0.95, progress=False) -> MethodRunAudit:
    CALLS.append({"trials": trials, "rounds": rounds, "epsilon": epsilon, "delta": delta, "seed": seed,
                  "confidence": confidence})
    rng = np.random.default_rng(seed)
    inc = rng.random(trials) < 0.5
    keep = np.exp(epsilon) / (1 + np.exp(epsilon))
    reports = np.where(rng.random((trials, rounds)) < keep, inc[:, None], ~inc[:, None])
    b = multi_run_certified(reports.sum(axis=1).astype(float), inc, delta=delta, confidence=confidence, seed=seed,
                            score="count").with_ideal(rounds * epsilon)
    return MethodRunAudit("toy", "multi-run", b, epsilon, rounds * epsilon, trials, {"rounds": rounds}, 0.0,
                          notes=("toy audit",))


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(method_audit.METHOD_RUN_AUDITS, "toy", _rr_run)
    monkeypatch.setitem(claims_module.METHOD_RUN_GRANULARITIES, "toy", ("example", "user"))
    CALLS.clear()
    return "toy"


def claim(epsilon=1.0, delta=0.0, granularity="example", **attack):
    a = {"kind": "method-run", "method": "toy", "params": {"rounds": 5, "trials": 1000}, "confidence": 0.9, "seed": 3}
    a.update(attack)
    return {"name": "c", "mechanism": "laplace", "params": {"scale": 1.0 / epsilon}, "epsilon": epsilon,
            "delta": delta, "granularity": granularity, "attack": a}


def doc(*claims):
    return {"schema": 1, "claim": list(claims)}


def test_parses_into_a_method_run_budget(toy):
    (c,) = parse_claims(doc(claim())).claims
    assert c.attack == AttackBudget("method-run", confidence=0.9, seed=3, method="toy",
                                    params={"rounds": 5, "trials": 1000})
    a = to_dict(c)["attack"]
    assert {k: a[k] for k in ("kind", "method", "params", "confidence", "seed")} == {
        "kind": "method-run", "method": "toy", "params": {"rounds": 5, "trials": 1000}, "confidence": 0.9, "seed": 3}
    assert from_dict(AttackBudget, to_dict(c.attack)) == c.attack
    # also on ledger and release subjects (the audit does not read the subject)
    for subject in ({"ledger": "l.json"}, {"release": "r"}):
        raw = {k: v for k, v in claim().items() if k not in ("mechanism", "params")} | subject
        assert parse_claims(doc(raw)).claims[0].attack.kind == "method-run"


@pytest.mark.parametrize("attack,match", [
    ({"method": "nope"}, "'method' parameter of the attack of claim 'c' must be one of .*toy"),
    ({"method": None}, "'method' parameter"),
    ({"params": {"roundz": 3}}, "Unknown key 'roundz' in the 'params' table of the attack of claim 'c'.*rounds"),
    ({"params": {"seed": 1}}, "must not set 'seed': the attack's 'seed'"),
    ({"params": {"confidence": 0.9}}, "must not set 'confidence'"),
    ({"params": {"delta": 1e-5}}, "must not set 'delta': the claim's 'delta'"),
    ({"params": {"trials": "many"}}, "'params.trials' parameter of the attack of claim 'c' must be an integer.*'many'"),
    ({"params": {"trials": 10.5}}, "'params.trials'.*integer"),
    ({"params": {"epsilon": True}}, "'params.epsilon'.*a number"),
    ({"params": [1, 2]}, "'params' parameter of the attack of claim 'c' must be a table"),
    ({"shadows": 4}, "Unknown key 'shadows' in the attack of claim 'c'"),
    ({"confidence": 1.5}, "'confidence' parameter of the attack"),
    ({"seed": -1}, "'seed' parameter of the attack"),
])
def test_bad_method_run_attacks_are_usage_errors_naming_the_key(toy, attack, match):
    with pytest.raises(ParameterError, match=match):
        parse_claims(doc(claim(**attack)))
    assert CALLS == []  # nothing ran


def test_method_and_params_belong_to_method_run_only(toy):
    raw = {k: v for k, v in claim().items() if k not in ("mechanism", "params")} | {"release": "r"}
    raw["attack"] = {"kind": "threshold", "method": "toy"}
    with pytest.raises(ParameterError, match="'method' parameter of the attack of claim 'c' applies to kind"):
        parse_claims(doc(raw))
    raw = claim()
    raw["attack"] = {"kind": "threshold"}  # other kinds stay release-only
    with pytest.raises(ParameterError, match="applies to 'release' subjects only"):
        parse_claims(doc(raw))
    raw = claim()
    del raw["attack"]["method"]
    with pytest.raises(ParameterError, match="'method' parameter of the attack of claim 'c' is required"):
        parse_claims(doc(raw))


def test_granularity_must_be_one_the_audit_can_refute(toy):
    with pytest.raises(ParameterError, match="'granularity'.*'example', 'user' for a 'toy' method-run audit"):
        parse_claims(doc(claim(granularity="report")))
    assert claims_module.METHOD_RUN_GRANULARITIES["privatekt"] == ("user",)
    assert set(claims_module.METHOD_RUN_GRANULARITIES) == set(method_audit.METHOD_RUN_AUDITS)  # every method stated


def test_required_audit_parameter_and_real_registry_checks():
    base = claim()
    base["attack"] = {"kind": "method-run", "method": "privatekt", "params": {}}
    base["granularity"] = "user"
    with pytest.raises(ParameterError, match="'params.canary_clients'.*required"):
        parse_claims(doc(base))
    base["attack"] = {"kind": "method-run", "method": "fredy", "params": {"gamma": "high"}}
    base["granularity"] = "example"
    with pytest.raises(ParameterError, match="'params.gamma'.*a number"):
        parse_claims(doc(base))


def test_fails_only_when_the_certified_bound_exceeds_the_claims_epsilon(toy):
    # 5 reports at eps 1: certified bound well above 1 with 1000 trials, below the audit's accounting (5)
    low = evaluate_claims(parse_claims(doc(claim(epsilon=1.0)))).results[0]
    assert CALLS == [{"trials": 1000, "rounds": 5, "epsilon": 1.0, "delta": 0.0, "seed": 3, "confidence": 0.9}]
    e = low.empirical
    assert e.kind == "certified" and e.certified and 1.0 < e.epsilon_lower_bound <= 5.0 and e.confidence == 0.9
    assert e.details["trials"] == 1000 and e.details["ideal_epsilon"] == 5.0 and e.details["method"] == "toy"
    assert low.accounted.epsilon == pytest.approx(1.0)  # the mechanism's accounting holds; the audit fails it
    assert low.verdict == "REFUTED" and len(low.reasons) == 1
    assert low.reasons[0].startswith(f"certified empirical lower bound {e.epsilon_lower_bound:.4g} (method-run toy, "
                                     "1000 trials, confidence 0.9) > claimed 1")
    assert "toy audit" in low.warnings
    # the claim's epsilon decides, not the paper's figure inside the audit (1.0, refuted): claim 6 holds
    high = evaluate_claims(parse_claims(doc(claim(epsilon=6.0)))).results[0]
    assert high.held and high.empirical.epsilon_lower_bound == e.epsilon_lower_bound
    # same seed, same numbers
    again = evaluate_claims(parse_claims(doc(claim(epsilon=1.0)))).results[0]
    assert to_dict(again.empirical) == to_dict(e)


def test_a_bound_at_a_smaller_delta_cannot_refute_the_claim(toy):
    r = evaluate_claims(parse_claims(doc(claim(epsilon=1.0, delta=1e-3)))).results[0]
    # the toy audit takes a delta: it gets the claim's
    assert CALLS[-1]["delta"] == 1e-3 and r.empirical.delta == 1e-3 and r.verdict == "REFUTED"

    def no_delta(*, trials: int = 1000, seed: int = 0, confidence: float = 0.95, progress=False):
        return _rr_run(trials=trials, seed=seed, confidence=confidence)

    method_audit.METHOD_RUN_AUDITS["toy"] = no_delta
    raw = claim(epsilon=1.0, delta=1e-3, params={"trials": 1000})
    r = evaluate_claims(parse_claims(doc(raw))).results[0]
    assert r.empirical.delta == 0.0 and r.empirical.epsilon_lower_bound > 1.0
    assert r.held and any("does not refute the claim" in w for w in r.warnings)


def test_outputs_name_the_audit_trials_bound_ideal_and_kind(toy):
    r = evaluate_claims(parse_claims(doc(claim(epsilon=1.0)))).results[0]
    rep = ClaimsReport("x.toml", (r,))
    table = rep.table()
    assert ">= " in table and "(certified)" in table
    assert "audit (c): epsilon >= " in table and "method-run toy" in table and "1000 trials" in table
    assert "ideal attack 5" in table
    d = json.loads(json.dumps(to_dict(rep)))
    emp = d["results"][0]["empirical"]
    assert emp["kind"] == "certified" and emp["attack"] == "method-run toy" and emp["details"]["trials"] == 1000
    assert emp["details"]["ideal_epsilon"] == 5.0 and emp["details"]["paper_claimed_epsilon"] == 1.0
    assert from_dict(ClaimsReport, d).results[0].empirical == r.empirical
    case = ET.fromstring(rep.junit_xml()).find("testsuite").find("testcase")
    props = {p.get("name"): p.get("value") for p in case.find("properties")}
    assert props["empirical_kind"] == "certified" and props["empirical_attack"] == "method-run toy"
    assert props["empirical_trials"] == "1000" and props["empirical_ideal_epsilon"] == "5"
    assert "certified" in case.find("failure").text and "1000 trials" in case.find("failure").text


def test_cli_exit_codes(toy, cli, tmp_path):
    f = tmp_path / "c.toml"
    head = ('[[claim]]\nname = "rr"\nmechanism = "laplace"\nparams = {scale = 1.0}\ndelta = 0.0\n'
            'granularity = "example"\n')
    att = 'attack = {kind = "method-run", method = "toy", params = {rounds = 5, trials = 1000}, seed = 3}\n'
    f.write_text(head.replace("scale = 1.0", "scale = 0.2") + "epsilon = 6.0\n" + att)
    code, out, err = cli(["check", f, "--quiet"])
    assert code == 0, out + err
    f.write_text(head + "epsilon = 1.0\n" + att)
    code, out, err = cli(["check", f, "--quiet", "--junit", tmp_path / "j.xml"])
    assert code == 1 and "REFUTED" in out and "method-run toy" in out and (tmp_path / "j.xml").is_file()
    code, out, err = cli(["check", f, "--quiet", "--json"])
    d = json.loads(out)
    assert code == 1 and d["results"][0]["empirical"]["kind"] == "certified"
    assert d["verdict"] == "REFUTED" and d["exit_code"] == 1 and d["results"][0]["verdict"] == "REFUTED"
    for old, new, match in (('method = "toy"', 'method = "nope"', "'method'"), ("rounds = 5", "roundz = 5", "roundz"),
                            ("trials = 1000", "trials = 1000, seed = 1", "seed"),
                            ("trials = 1000", 'trials = "x"', "'params.trials'")):
        f.write_text(head + "epsilon = 1.0\n" + att.replace(old, new))
        n = len(CALLS)
        code, out, err = cli(["check", f, "--quiet"])
        assert code == 2 and match in err and "Traceback" not in err and out == "", (match, err)
        assert len(CALLS) == n  # rejected before anything ran


@pytest.mark.slow
def test_fredy_example_fails_on_its_certified_bound(cli):
    rep = check_claims(EXAMPLES / "method_run_fails.toml")
    (r,) = rep.results
    assert rep.exit_code == 1 and r.verdict == "REFUTED" and r.accounted.epsilon == pytest.approx(1.0)
    assert r.empirical.certified and r.empirical.details["trials"] == 60 and r.empirical.epsilon_lower_bound > 1.0
    assert len(r.reasons) == 1 and r.reasons[0].startswith("certified empirical lower bound")
    code, out, _ = cli(["check", EXAMPLES / "method_run_fails.toml", "--quiet"])
    assert code == 1 and "fredy-per-query" in out and "60 trials" in out


def test_fredy_example_parses_without_running():
    from dpaudit.auditing.claims import load_claims

    (c,) = load_claims(EXAMPLES / "method_run_fails.toml").claims
    assert c.attack == AttackBudget("method-run", confidence=0.95, seed=0, method="fredy",
                                    params={"gamma": 1.0, "trials": 60})
    assert c.epsilon == 1.0 and c.delta == 0.0 and c.granularity == "example"

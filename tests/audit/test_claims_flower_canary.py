"""A claims file citing a Flower canary audit (``canary_audit = "DIR/flower_canary_audit.json"``, user level) beside
a record-level ``canary_audit.json``: the file's kind is read from its content, its certified bound refutes a claim
below it, the audited run's accounting decides otherwise, and a granularity that does not fit the file is an error."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from dpaudit.attacks.canary import CanaryBound
from dpaudit.auditing import check_claims
from dpaudit.auditing.canary_audit import CanaryAuditResult
from dpaudit.auditing.flower_canary import FlowerCanaryAudit
from dpaudit.errors import ParameterError
from dpaudit.serial import to_dict


def _flower_audit(tmp_path, certified: float, accounted: float, neighbouring: str = "replace-one"):
    bound = CanaryBound(audit="one-run", epsilon=certified, delta=1e-5, confidence=0.95, trials=32, score="dirac-lr",
                        ideal_epsilon=certified + 0.2)
    res = FlowerCanaryAudit(bound, 32, 17, 5, 40, 4, 2.0, accounted, neighbouring=neighbouring,
                            settings={"clients": 8, "canaries": 32, "clipping_norm": 1.0, "delta": 1e-5,
                                      "confidence": 0.95, "seed": 0})
    d = tmp_path / "fl"
    d.mkdir(exist_ok=True)
    (d / "flower_canary_audit.json").write_text(json.dumps(to_dict(res)))
    return "fl/flower_canary_audit.json"


def _lm_audit(tmp_path, certified: float, accounted: float):
    bound = CanaryBound(audit="one-run", epsilon=certified, delta=1e-5, confidence=0.95, trials=100, score="loss")
    res = CanaryAuditResult(bound, accounted, {"kind": "dpsgd"}, {"delta": 1e-5, "canary": "text"}, 1.0)
    d = tmp_path / "lm"
    d.mkdir(exist_ok=True)
    (d / "canary_audit.json").write_text(json.dumps(to_dict(res)))
    return "lm/canary_audit.json"


def _claims(tmp_path, *claims):
    body = "".join(f'[[claim]]\nname = "{n}"\nepsilon = {e}\ndelta = 1e-5\ngranularity = "{g}"\ncanary_audit = "{p}"\n\n'
                   for n, e, g, p in claims)
    (tmp_path / "claims.toml").write_text(body)
    return tmp_path / "claims.toml"


def test_a_flower_canary_audit_refutes_a_user_claim_below_its_bound(cli, tmp_path):
    fl = _flower_audit(tmp_path, certified=1.2, accounted=9.5)
    path = _claims(tmp_path, ("below", 0.8, "user", fl), ("within", 12.0, "user", fl), ("tight", 5.0, "user", fl))
    r = {c.name: c for c in check_claims(path).results}
    assert r["below"].verdict == "REFUTED"
    assert r["below"].refuted_by[0].startswith("certified empirical lower bound 1.2 (one-run Flower canary audit")
    assert r["within"].verdict == "HOLDS" and r["within"].accounted.epsilon == 9.5
    # above the bound, below the run's accounting: the accounted figure decides, as for any subject
    assert r["tight"].verdict == "UNPROVEN" and not r["tight"].refuted_by
    assert "replace-one" in " ".join(r["within"].warnings)
    code, out, err = cli(["check", path, "--junit", tmp_path / "j.xml", "--quiet"])
    assert code == 1, (out, err)
    cases = {c.get("name"): c for c in ET.parse(tmp_path / "j.xml").getroot().iter("testcase")}
    assert cases["below"].find("failure") is not None and cases["within"].find("failure") is None


def test_a_flower_audit_at_another_relation_does_not_refute(tmp_path):
    fl = _flower_audit(tmp_path, certified=1.2, accounted=0.5, neighbouring="add-remove")
    (res,) = check_claims(_claims(tmp_path, ("c", 0.8, "user", fl))).results
    assert res.verdict == "UNPROVEN" and not res.refuted_by
    assert any("not client-level replace-one" in u for u in res.unproven_because)
    assert any("does not refute the claim" in w for w in res.warnings)


def test_a_record_level_canary_audit_still_works_beside_it(tmp_path):
    lm = _lm_audit(tmp_path, certified=0.6, accounted=3.0)
    fl = _flower_audit(tmp_path, certified=1.2, accounted=9.5)
    r = {c.name: c for c in check_claims(_claims(tmp_path, ("lm-holds", 4.0, "example", lm),
                                                 ("lm-refuted", 0.5, "example", lm),
                                                 ("fl-holds", 10.0, "user", fl))).results}
    assert [r[n].verdict for n in ("lm-holds", "lm-refuted", "fl-holds")] == ["HOLDS", "REFUTED", "HOLDS"]


@pytest.mark.parametrize("which,granularity,want", [("flower", "example", "'user'"), ("lm", "user", "'example'")])
def test_a_granularity_that_does_not_fit_the_file_is_a_clean_error(cli, tmp_path, which, granularity, want):
    p = _flower_audit(tmp_path, 1.2, 9.5) if which == "flower" else _lm_audit(tmp_path, 0.6, 3.0)
    path = _claims(tmp_path, ("mismatch", 5.0, granularity, p))
    with pytest.raises(ParameterError, match=rf"'granularity' parameter of claim 'mismatch' must be {want}"):
        check_claims(path)
    code, out, err = cli(["check", path, "--junit", tmp_path / "j.xml", "--quiet"])
    assert code == 2 and "dpaudit: error:" in err and "'granularity'" in err and "Traceback" not in err
    assert any(True for _ in ET.parse(tmp_path / "j.xml").getroot().iter("error"))


def test_other_granularities_are_refused_when_the_file_is_parsed(tmp_path):
    from dpaudit.auditing.claims import parse_claims

    doc = {"claim": [{"name": "c", "epsilon": 1.0, "delta": 1e-5, "granularity": "round",
                      "canary_audit": "fl/flower_canary_audit.json"}]}
    with pytest.raises(ParameterError, match="or 'user' for a Flower canary audit"):
        parse_claims(doc, base_dir=tmp_path)

"""A claim that cannot be evaluated does not stop the others: every claim is in the JUnit file (an <error> test
case for the one without a verdict), the console shows the verdicts of the others, and the command exits 2 with one
error line naming the claim."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

import dpaudit
from dpaudit.auditing.evaluate import ClaimError, ClaimsIncomplete, ClaimsReport
from dpaudit.cli import main
from dpaudit.serial import from_dict, to_dict

GOOD = ('[[claim]]\nname = "laplace-ok"\nmechanism = "laplace"\nparams = { scale = 2.0 }\nepsilon = 0.5\n'
        'delta = 0.0\ngranularity = "example"\n')
BAD = ('[[claim]]\nname = "lost-release"\nrelease = "nowhere"\nepsilon = 1.0\ndelta = 1e-5\n'
       'granularity = "example"\n')
TOO_LOW = GOOD.replace('"laplace-ok"', '"laplace-high"').replace("epsilon = 0.5", "epsilon = 0.25")


def _run(argv, capsys):
    try:
        main([str(a) for a in argv])
        code = 0
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def _cases(path):
    suite = ET.parse(path).getroot().find("testsuite")
    return suite, {c.get("name"): c for c in suite.findall("testcase")}


def test_a_claim_that_cannot_be_evaluated_is_a_junit_error_and_the_others_keep_their_verdicts(tmp_path, capsys):
    f = tmp_path / "claims.toml"
    f.write_text("schema = 1\n" + GOOD + BAD + TOO_LOW)
    junit = tmp_path / "j.xml"
    code, out, err = _run(["check", f, "--junit", junit, "--quiet"], capsys)
    assert code == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("dpaudit: error: claim 'lost-release' could not be evaluated")
    assert "laplace-ok" in out and "laplace-high" in out  # the others' verdicts are printed
    assert out.count("3 claims: 1 HOLDS, ") == 1 and "(laplace-high), " in out
    assert ", 1 not evaluated (lost-release)." in out
    suite, cases = _cases(junit)
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "1", "1")
    assert ET.parse(junit).getroot().get("errors") == "1"
    assert set(cases) == {"laplace-ok", "lost-release", "laplace-high"}
    error = cases["lost-release"].find("error")
    assert error is not None and error.get("type") == "ClaimNotEvaluated" and "nowhere" in error.get("message")
    assert cases["lost-release"].find("failure") is None
    assert cases["laplace-high"].find("failure").get("type") in ("PrivacyClaimUnproven", "PrivacyClaimRefuted")
    assert cases["laplace-ok"].find("failure") is None and cases["laplace-ok"].find("error") is None


def test_json_output_lists_the_error_and_exits_2(tmp_path, capsys):
    f = tmp_path / "claims.toml"
    f.write_text("schema = 1\n" + GOOD + BAD)
    code, out, err = _run(["check", f, "--json", "--quiet"], capsys)
    d = json.loads(out)
    assert code == 2 and d["exit_code"] == 2 and d["passed"] is False
    assert [r["name"] for r in d["results"]] == ["laplace-ok"]
    assert [e["name"] for e in d["errors"]] == ["lost-release"] and "nowhere" in d["errors"][0]["error"]


def test_the_api_raises_with_the_whole_report_after_writing_junit(tmp_path):
    f = tmp_path / "claims.toml"
    f.write_text("schema = 1\n" + BAD + GOOD)
    with pytest.raises(ClaimsIncomplete, match="'lost-release'") as info:
        dpaudit.check(f, junit=tmp_path / "j.xml")
    rep = info.value.report
    assert isinstance(info.value, dpaudit.errors.DataError)
    assert [r.name for r in rep.results] == ["laplace-ok"] and rep.exit_code == 2 and not rep.passed
    assert from_dict(ClaimsReport, to_dict(rep)) == rep
    _, cases = _cases(tmp_path / "j.xml")
    assert set(cases) == {"lost-release", "laplace-ok"}


def test_a_claims_file_that_cannot_be_read_still_gets_a_junit_file(tmp_path, capsys):
    f = tmp_path / "claims.toml"
    f.write_text("schema = 1\n[[claim]]\nname = 'x'\n")
    junit = tmp_path / "j.xml"
    code, _, err = _run(["check", f, "--junit", junit], capsys)
    assert code == 2 and err.startswith("dpaudit: error: ")
    suite, cases = _cases(junit)
    assert suite.get("errors") == "1" and list(cases) == ["claims file"]
    assert cases["claims file"].find("error").get("message") in err


def test_a_report_without_errors_is_unchanged():
    rep = ClaimsReport("x.toml", ())
    assert rep.exit_code == 0 and rep.errors == () and rep.passed
    suite = ET.fromstring(rep.junit_xml()).find("testsuite")
    assert suite.get("errors") == "0"
    bad = ClaimsReport("x.toml", (), (ClaimError("c", "mechanism laplace", "boom"),))
    assert bad.exit_code == 2 and not bad.passed and bad.summary() == "1 claim: 0 HOLDS, 0 UNPROVEN, 0 REFUTED, 1 not evaluated (c)."

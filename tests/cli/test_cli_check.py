"""`dpaudit check`: table on stdout, warnings on stderr, exit 0 HOLDS / 1 REFUTED / 3 UNPROVEN / 2 usage errors,
JUnit XML and JSON carrying the verdict, one-line usage errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from dpaudit.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "claims"

LAPLACE_OK = '[[claim]]\nname = "a"\nmechanism = "laplace"\nparams = { scale = 1.0 }\nepsilon = 1.0\ndelta = 0.0\ngranularity = "example"\n'
# 50 Laplace answers at delta 0.01: the accounting's interval is [30.22, 30.37] (an explicit pair below, the PLD above),
# so a claim of 30.3 is UNPROVEN; a claim of 0.5 for one answer is below the pair's 1 (REFUTED, analytic)
LAPLACE_BAD = ('[[claim]]\nname = "b"\nmechanism = "laplace"\nparams = { scale = 1.0, count = 50 }\nepsilon = 30.3\n'
               'delta = 0.01\ngranularity = "example"\n')
LAPLACE_FALSE = LAPLACE_OK.replace('name = "a"', 'name = "c"').replace("epsilon = 1.0", "epsilon = 0.5")


def run(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    out, err = capsys.readouterr()
    return info.value.code, out, err


def test_all_hold_exit_0(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")    # whole cells on one line (a pipe gets 100 columns: test_cli_console)
    f = tmp_path / "c.toml"
    f.write_text(LAPLACE_OK)
    code, out, err = run(["check", str(f)], capsys)
    assert code == 0 and err == ""
    assert "accounted ε" in out and "HOLDS" in out and "1 claim: 1 HOLDS, 0 UNPROVEN, 0 REFUTED." in out


def test_an_unproven_claim_exits_3_and_junit_is_written(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")    # whole cells on one line (a pipe gets 100 columns: test_cli_console)
    f = tmp_path / "c.toml"
    f.write_text(LAPLACE_OK + "\n" + LAPLACE_BAD)
    junit = tmp_path / "out" / "claims.xml"
    code, out, err = run(["check", str(f), "--junit", str(junit)], capsys)
    assert code == 3 and "UNPROVEN" in out and "accounted epsilon 30.37 > claimed 30.3" in out
    assert "REFUTED" in out  # the summary line counts every verdict
    assert "UNPROVEN: the accounting cannot show the claim" in out  # the legend of the verdicts that occurred
    assert "JUnit XML written" in err and "JUnit" not in out          # stdout: results only
    code, out, err = run(["check", str(f), "--junit", str(junit), "--quiet"], capsys)
    assert code == 3 and err == "" and "UNPROVEN" in out
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite.get("tests") == "2" and suite.get("failures") == "1"
    fail = suite.findall("testcase")[1].find("failure")
    assert fail.get("type") == "PrivacyClaimUnproven" and fail.get("message").startswith("UNPROVEN: ")
    assert [p.name for p in junit.parent.iterdir()] == ["claims.xml"]  # atomic write left no temp file


def test_json_is_pure_json_with_the_verdicts(tmp_path, capsys):
    f = tmp_path / "c.toml"
    f.write_text(LAPLACE_OK + "\n" + LAPLACE_BAD)
    code, out, err = run(["check", str(f), "--json"], capsys)
    d = json.loads(out)
    assert code == 3 and d["verdict"] == "UNPROVEN" and d["exit_code"] == 3
    assert d["counts"] == {"HOLDS": 1, "UNPROVEN": 1, "REFUTED": 0}
    assert [(r["name"], r["verdict"]) for r in d["results"]] == [("a", "HOLDS"), ("b", "UNPROVEN")]
    assert d["results"][1]["unproven_because"] == ["accounted epsilon 30.37 > claimed 30.3"]


def test_a_claim_below_the_mechanisms_lower_bound_exits_1(tmp_path, capsys):
    f = tmp_path / "c.toml"
    f.write_text(LAPLACE_OK + "\n" + LAPLACE_FALSE)
    code, out, err = run(["check", str(f), "--json"], capsys)
    d = json.loads(out)
    assert code == 1 and d["verdict"] == "REFUTED" and d["counts"] == {"HOLDS": 1, "UNPROVEN": 0, "REFUTED": 1}
    (why,) = d["results"][1]["refuted_by"]
    assert why.startswith("analytic: certified lower bound 1 at delta 0") and "Lap(0, 1)" in why


def test_warnings_go_to_stderr(tmp_path, capsys):
    votes = tmp_path / "votes.npy"
    np.save(votes, np.array([[9, 1, 0], [5, 4, 1]]))
    f = tmp_path / "c.toml"
    f.write_text('[[claim]]\nname = "p"\nmechanism = "pate"\nparams = { votes = "votes.npy", gamma = 0.1 }\n'
                 'epsilon = 100.0\ndelta = 1e-5\ngranularity = "example"\nallow_data_dependent = true\n')
    for extra in ([], ["--quiet"]):
        code, out, err = run(["check", str(f), *extra], capsys)
        assert code == 0 and "data-dependent" not in out, extra
        assert "dpaudit: warning (p): " in err and "data-dependent" in err
    code, out, err = run(["check", str(f), "--json"], capsys)
    d = json.loads(out)  # stdout is the JSON alone; the warning is in it as data, and on stderr for people
    assert any("data-dependent" in w for w in d["results"][0]["warnings"]) and "dpaudit: warning (p): " in err


def test_example_that_fails_on_purpose(capsys):
    # fails.toml: two claims below their mechanism's certified lower bound (REFUTED, analytic: exit 1), one inside
    # the accounting's interval (UNPROVEN)
    code, out, _ = run(["check", str(EXAMPLES / "fails.toml")], capsys)
    assert code == 1 and "privatekt-whole-run" in out and "UNPROVEN" in out and "analytic" in out
    assert "2 REFUTED" in out and "1 UNPROVEN" in out


def test_a_bug_exits_70_never_a_verdicts_code(tmp_path, capsys, monkeypatch):
    import dpaudit.api as api   # the command imports check from dpaudit.api when it runs

    def boom(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(api, "check", boom)
    f = tmp_path / "c.toml"
    f.write_text(LAPLACE_OK)
    code, out, err = run(["check", str(f)], capsys)
    assert code == 70 and out == "" and err.startswith("dpaudit: error: internal error (RuntimeError: boom)")


@pytest.mark.parametrize(
    "text,match",
    [
        ("[[claim]\n", "not valid TOML"),
        (LAPLACE_OK + "colour = 'red'\n", "Unknown key 'colour' in claim 'a'"),
        (LAPLACE_OK.replace("epsilon = 1.0", "epsilon = -2.0"), "'epsilon' parameter of claim 'a' must be a float >= 0.0"),
    ],
)
def test_usage_errors_exit_2_with_one_line(tmp_path, capsys, text, match):
    f = tmp_path / "c.toml"
    f.write_text(text)
    code, out, err = run(["check", str(f)], capsys)
    assert code == 2 and out == ""
    assert match in err and err.count("\n") == 1 and "Traceback" not in err


def test_missing_file_exit_2(tmp_path, capsys):
    code, _, err = run(["check", str(tmp_path / "none.toml")], capsys)
    assert code == 2 and "does not exist" in err


def test_real_process_has_no_traceback(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("[[claim]]\nname = 3\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-m", "dpaudit", "check", str(f)], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr and p.stderr.startswith("dpaudit: error: ")


def test_a_data_dependent_figure_is_unproven_unless_the_claim_allows_it(tmp_path, capsys):
    # issue 36: a claim HELD on a data-dependent PATE figure that dpaudit's own warning calls "not itself DP";
    # allow_data_dependent now defaults to false: UNPROVEN with the reason, HOLDS only when the claim allows it
    np.save(tmp_path / "votes.npy", np.array([[250, 0, 0]] * 200))    # consensus: data-dependent 0.10, else 15.2
    base = ('[[claim]]\nname = "{name}"\nmechanism = "pate"\nparams = {{ votes = "votes.npy", gamma = 0.1 }}\n'
            'epsilon = {eps}\ndelta = 1e-5\ngranularity = "example"\n')
    f = tmp_path / "c.toml"
    # (the data-independent route's interval is [6.52, 15.2]: a claim of 10 is inside it, one of 1 below its pair)
    f.write_text(base.format(name="default", eps=10.0) + "\n" + base.format(name="allowed", eps=1.0)
                 + "allow_data_dependent = true\n\n" + base.format(name="independent-enough", eps=20.0))
    code, out, _ = run(["check", str(f), "--json"], capsys)
    d = json.loads(out)
    assert code == 3 and [(r["name"], r["verdict"]) for r in d["results"]] == [
        ("default", "UNPROVEN"), ("allowed", "HOLDS"), ("independent-enough", "HOLDS")]
    why = " ".join(d["results"][0]["unproven_because"])
    assert "data-dependent" in why and "not itself DP" in why and "allow_data_dependent = true" in why
    assert d["results"][1]["accounted"]["data_dependent"] is True
    # a claim the data-independent route supports holds on that route, said so
    third = d["results"][2]
    assert third["accounted"]["data_dependent"] is False and third["accounted"]["epsilon"] > 15
    assert any("judged on the data-independent route" in w for w in third["warnings"])

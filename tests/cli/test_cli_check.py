"""`dpaudit check`: table on stdout, exit 0 / 1 / 2, JUnit XML, one-line usage errors."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from dpaudit.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "claims"

LAPLACE_OK = '[[claim]]\nname = "a"\nmechanism = "laplace"\nparams = { scale = 1.0 }\nepsilon = 1.0\ndelta = 0.0\ngranularity = "example"\n'
LAPLACE_BAD = LAPLACE_OK.replace('name = "a"', 'name = "b"').replace("epsilon = 1.0", "epsilon = 0.5")


def run(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    out, err = capsys.readouterr()
    return info.value.code, out, err


def test_all_hold_exit_0(tmp_path, capsys):
    f = tmp_path / "c.toml"
    f.write_text(LAPLACE_OK)
    code, out, err = run(["check", str(f)], capsys)
    assert code == 0 and err == ""
    assert "accounted eps" in out and "1 of 1 claims hold." in out


def test_a_failing_claim_exits_1_and_junit_is_written(tmp_path, capsys):
    f = tmp_path / "c.toml"
    f.write_text(LAPLACE_OK + "\n" + LAPLACE_BAD)
    junit = tmp_path / "out" / "claims.xml"
    code, out, err = run(["check", str(f), "--junit", str(junit)], capsys)
    assert code == 1 and "FAIL" in out and "accounted epsilon 1 > claimed 0.5" in out
    assert "JUnit XML written" in err and "JUnit" not in out          # stdout: results only
    code, out, err = run(["check", str(f), "--junit", str(junit), "--quiet"], capsys)
    assert code == 1 and err == "" and "FAIL" in out
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite.get("tests") == "2" and suite.get("failures") == "1"
    assert [p.name for p in junit.parent.iterdir()] == ["claims.xml"]  # atomic write left no temp file


def test_example_that_fails_on_purpose(capsys):
    code, out, _ = run(["check", str(EXAMPLES / "fails.toml")], capsys)
    assert code == 1 and "privatekt-whole-run" in out


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

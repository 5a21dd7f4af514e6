"""The Python entry points at the top level (``dpaudit.account`` ... ``dpaudit.release.make``): the same calls the
CLI makes, light to import, listed by ``help(dpaudit)`` with a runnable example; and the examples in
``examples/python/`` run (the Opacus one end to end under ``-m slow``)."""

from __future__ import annotations

import ast
import doctest
import json
import os
import pydoc
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

import dpaudit

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "python"


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def test_import_dpaudit_loads_no_heavy_layer():
    code = ("import sys, dpaudit; heavy = [m for m in ('torch', 'pydantic', 'sklearn', 'dpaudit.training', "
            "'dpaudit.auditing', 'dpaudit.accountants') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), check=True).stdout
    assert out.strip() == "[]"


def test_help_lists_the_entry_points_with_an_example():
    text = pydoc.render_doc(dpaudit, renderer=pydoc.plaintext)
    for name in ("dpaudit.account(", "dpaudit.attack(", "dpaudit.audit(", "dpaudit.check(", "dpaudit.release.make(",
                 "dpaudit.Release.load(", "dpaudit.to_dict(", ">>> import dpaudit"):
        assert name in text, name
    assert "account(mechanism: 'str', **params" in text      # the functions themselves, with their signatures


@pytest.mark.parametrize("module", ["dpaudit", "dpaudit.api", "dpaudit.release"])
def test_docstring_examples_run(module):
    import importlib

    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 1 and result.failed == 0


def test_top_level_names_are_the_library_functions():
    from dpaudit import api
    from dpaudit.training.release import Release, load_release

    assert (dpaudit.account, dpaudit.attack, dpaudit.check) == (api.account, api.attack, api.check)
    assert dpaudit.audit is api.audit
    assert dpaudit.Release is Release and dpaudit.release.make is api.make_release and dpaudit.release.Release is Release
    assert Release.load.__func__.__qualname__ == "Release.load" and load_release.__name__ == "load_release"
    with pytest.raises(AttributeError):
        dpaudit.no_such_thing  # noqa: B018
    assert {"account", "attack", "audit", "check", "release", "Release"} <= set(dir(dpaudit))


def test_each_cli_command_calls_the_api():
    """No logic in the CLI: account, attack, audit, check and release make call the functions of dpaudit.api."""
    calls = {"account.py": "account", "attack.py": "attack", "audit.py": "audit", "check.py": "check",
             "release.py": "make_release", "audit_trainer.py": "audit_trainer"}
    for fname, fn in calls.items():
        tree = ast.parse((ROOT / "dpaudit" / "cli" / fname).read_text())
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "dpaudit.api"
                    for a in n.names}
        assert fn in imported, fname


def test_account_takes_a_votes_file_and_names_a_bad_mechanism(tmp_path):
    import numpy as np

    votes = tmp_path / "votes.npy"
    np.save(votes, np.array([[150, 60, 40, 0, 0, 0, 0, 0, 0, 0]] * 100))
    r = dpaudit.account("pate", votes=votes, gamma=0.05, delta=1e-5)
    assert r.epsilon > 0 and r.parameters
    with pytest.raises(dpaudit.ParameterError, match="'mechanism' parameter of account must be one of"):
        dpaudit.account("laplacian", gamma=1.0)


def test_check_returns_the_verdicts():
    rep = dpaudit.check(ROOT / "examples" / "claims" / "holds.toml")
    assert rep.verdict == "HOLDS" and rep.exit_code == 0 and len(rep.results) == 4
    assert json.loads(json.dumps(dpaudit.to_dict(rep)))["verdict"] == "HOLDS"


def test_example_account_dpsgd(capsys):
    r = runpy.run_path(str(EXAMPLES / "account_dpsgd.py"))["main"]()
    assert round(r.epsilon, 4) == 0.6401 and "headline: epsilon = 0.6401" in capsys.readouterr().out


def test_example_claims_in_pytest(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                           str(EXAMPLES / "test_privacy_claims.py")], capture_output=True, text=True, env=_env(),
                          cwd=tmp_path, timeout=600)
    assert proc.returncode == 0 and "2 passed" in proc.stdout, proc.stdout + proc.stderr


def test_example_sklearn_scores(tmp_path):
    report = runpy.run_path(str(EXAMPLES / "audit_sklearn_scores.py"))["main"](tmp_path)
    assert report.attack.bound.kind == "estimate"
    assert (tmp_path / "attack" / "attack.json").is_file() and (tmp_path / "release" / "release.json").is_file()


@pytest.mark.slow
def test_example_opacus_end_to_end(tmp_path):
    res = runpy.run_path(str(EXAMPLES / "audit_opacus_run.py"))["main"](tmp_path)
    assert res["canary_audit"].bound.kind == "certified" and res["attack"].attack.bound.kind == "estimate"
    assert 0 <= res["canary_audit"].bound.epsilon <= res["accounted"] <= 4.0 + 1e-6
    for f in ("canary_audit.json", "release/release.json", "attack/attack.json", "report/report.html"):
        assert (tmp_path / f).is_file(), f


def test_dpaudit_audit_is_the_function_and_the_package_is_auditing():
    """Issue 36: ``dpaudit.audit`` was both a subpackage and a function (resolved by swapping the package module's
    class); the subpackage is ``dpaudit.auditing`` now, so importing it leaves ``dpaudit.audit`` the function."""
    import dpaudit.api
    import dpaudit.auditing.runner  # noqa: F401

    assert dpaudit.audit is dpaudit.api.audit and callable(dpaudit.audit)
    assert type(sys.modules["dpaudit.auditing"]) is type(sys)        # a plain module, no class swap
    assert "dpaudit.audit" not in sys.modules
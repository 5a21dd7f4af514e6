"""Typed attack specs (issue 36): small frozen dataclasses validated at construction, what dpaudit.attack and
`dpaudit attack` run; the old flat keywords map onto them with a DeprecationWarning."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dpaudit
from dpaudit import api
from dpaudit.errors import ParameterError
from dpaudit.specs import RMIA, CanaryAudit, Compare, Execution, LiRA, Shadow, Threshold

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("make,field", [
    (lambda: Threshold("entropy"), "kind"), (lambda: Threshold(blind="svm"), "blind"),
    (lambda: Shadow(shadows=1), "shadows"), (lambda: Shadow(classifier="xgb"), "classifier"),
    (lambda: Shadow(per_class="yes"), "per_class"), (lambda: LiRA(references=3), "references"),
    (lambda: LiRA(offline=1), "offline"), (lambda: RMIA(gamma=0.0), "gamma"), (lambda: RMIA(population=0), "population"),
    (lambda: RMIA(a=0.3), "a"), (lambda: RMIA(offline=True, a=1.5), "a"), (lambda: Compare(references=1), "references"),
    (lambda: CanaryAudit("three-run"), "kind"), (lambda: CanaryAudit(canaries=0), "canaries"),
    (lambda: CanaryAudit(canary="gaussian"), "canary"), (lambda: CanaryAudit(analysis="exact"), "analysis"),
    (lambda: Execution("dask"), "executor"), (lambda: Execution(ray_address="ray://x"), "ray_address"),
])
def test_specs_are_validated_at_construction(make, field):
    with pytest.raises(ParameterError, match=f"'{field}' parameter of"):
        make()


@pytest.mark.parametrize("make,field,value", [
    (lambda: RMIA(population=1e18), "population", "1e+18"), (lambda: RMIA(population=100.0), "population", "100.0"),
    (lambda: Compare(population=1e18), "population", "1e+18"), (lambda: LiRA(references=16.0), "references", "16.0"),
    (lambda: Shadow(shadows=8.0), "shadows", "8.0"), (lambda: Shadow(shadows=True), "shadows", "True"),
    (lambda: CanaryAudit(canaries=1e18), "canaries", "1e+18"), (lambda: CanaryAudit(models=200.0), "models", "200.0"),
    (lambda: RMIA(population=10**9), "population", "1000000000"), (lambda: CanaryAudit(canaries=10**7), "canaries", ""),
    (lambda: CanaryAudit(models=10**6), "models", "1000000"),
])
def test_spec_counts_given_as_floats_are_refused_at_construction(make, field, value):
    """Issue 44: RMIA(population=1e18) was accepted and refused only when dpaudit.attack ran; counts are ints within
    the range the attack runs, checked when the spec is made."""
    with pytest.raises(ParameterError, match=rf"'{field}' parameter of \w+ must be an int in the range \[\d+, \d+\].*{re.escape(value)}"):
        make()
    assert RMIA(population=np.int64(5)).population == 5 and type(RMIA(population=np.int64(5)).population) is int


def test_specs_are_frozen_and_read_as_written():
    r = dpaudit.RMIA(references=16, offline=True)
    assert (r.references, r.offline, r.a, r.name) == (16, True, None, "rmia")
    assert dpaudit.CanaryAudit("one-run", canaries=1000).name == "one-run"
    assert LiRA(references=2, offline=True).references == 2          # offline needs no IN models
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.references = 4  # type: ignore[misc]


def test_spec_choices_are_the_attack_layers():
    from dpaudit import specs
    from dpaudit.attacks.shadow import CLASSIFIERS
    from dpaudit.attacks.threshold import THRESHOLD_KINDS
    from dpaudit.auditing.canary_audit import ANALYSIS_CHOICES

    assert specs.CLASSIFIERS == CLASSIFIERS and specs.THRESHOLD_KINDS == THRESHOLD_KINDS
    assert specs.ANALYSES == ANALYSIS_CHOICES


def test_reaching_a_spec_imports_nothing_heavy():
    code = "import sys, dpaudit; dpaudit.RMIA(); print([m for m in ('torch', 'sklearn', 'dpaudit.attacks') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": ""}).stdout
    assert out.strip() == "[]"


@pytest.fixture
def calls(monkeypatch):
    seen = []
    monkeypatch.setattr(api, "_attack_one", lambda release, spec, execution, **kw: seen.append((spec, execution, kw))
                        or spec.name)
    return seen


def test_attack_takes_specs_one_or_several(calls, tmp_path):
    assert dpaudit.attack("rel", RMIA(references=16, offline=True), per_record=True) == "rmia"
    spec, execution, kw = calls[-1]
    assert spec == RMIA(16, offline=True) and execution == Execution() and kw["per_record"] is True
    assert dpaudit.attack("rel") == "shadow" and calls[-1][0] == Shadow()          # the default attack
    got = dpaudit.attack("rel", LiRA(), RMIA(), Execution("ray"), out=tmp_path / "o")
    assert got == ("lira", "rmia") and [c[1] for c in calls[-2:]] == [Execution("ray")] * 2
    assert [c[2]["out"] for c in calls[-2:]] == [tmp_path / "o" / "lira", tmp_path / "o" / "rmia"]
    with pytest.raises(ParameterError, match="each attack once"):
        dpaudit.attack("rel", LiRA(), LiRA(offline=True))
    with pytest.raises(ParameterError, match="at most one Execution"):
        dpaudit.attack("rel", Execution(), Execution())
    with pytest.raises(ParameterError, match="must be Threshold"):
        dpaudit.attack("rel", RMIA(), {"kind": "rmia"})


@pytest.mark.parametrize("old,new,execution", [
    (dict(attack="threshold", threshold_kind="confidence"), Threshold("confidence"), Execution()),
    (dict(attack="lira", shadows=8, lira_online=False), LiRA(8, offline=True), Execution()),
    (dict(attack="rmia", shadows=4, lira_online=False, rmia_a=0.3, gamma=2.0), RMIA(4, True, gamma=2.0, a=0.3),
     Execution()),
    (dict(attack="shadow", classifier="logreg", per_class=False), Shadow(16, "logreg", False, blind="logreg"),
     Execution()),
    (dict(compare=True, shadows=8, rmia_a=0.5), Compare(8, a=0.5), Execution()),
    (dict(audit="one-run", canaries=1000, executor="ray"), CanaryAudit("one-run", canaries=1000), Execution("ray")),
])
def test_old_flat_keywords_map_onto_the_specs_with_a_deprecation_warning(calls, old, new, execution):
    kind = old.pop("attack", None)
    args = () if kind is None else (kind,)
    with pytest.warns(DeprecationWarning, match="pass typed specs instead"):
        dpaudit.attack("rel", *args, **old)
    assert calls[-1][:2] == (new, execution)
    with pytest.warns(DeprecationWarning):                                    # attack= by keyword, as before
        dpaudit.attack("rel", **({} if kind is None else {"attack": kind}), **old)
    assert calls[-1][:2] == (new, execution)


def test_old_code_keywords_become_bundle_code(calls):
    from dpaudit.training.usercode import BundleCode

    with pytest.warns(DeprecationWarning, match="code=BundleCode"):
        dpaudit.attack("rel", "threshold", trust_bundle_code=True)
    assert calls[-1][2]["code"] == BundleCode(trust_bundle=True)
    with pytest.raises(ParameterError, match="unknown keyword"):
        dpaudit.attack("rel", shadowz=4)
    with pytest.raises(ParameterError, match="not both"):
        dpaudit.attack("rel", RMIA(), shadows=4)

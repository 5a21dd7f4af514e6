"""run_attack end to end on a leaky target (sklearn forest on digits): report contents, seeds, the blind
baseline (≈ 0.5 on a fair split, clearly above on a mismatched one), JSON round trip, input errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.datasets import load_digits

from dpaudit.attacks import AttackReport, run_attack
from dpaudit.errors import DataError, ParameterError
from attack_models import Forest, forest_fn
from dpaudit.serial import from_dict, to_dict


@pytest.fixture(scope="module")
def setting():
    X, y = load_digits(return_X_y=True)
    perm = np.random.default_rng(0).permutation(len(X))
    mem, non, pool = perm[:250], perm[250:550], perm[550:1100]
    return X, y, mem, non, pool, Forest(X[mem], y[mem], 0)


def _args(setting):
    X, y, mem, non, pool, target = setting
    return (target, X[mem], y[mem], X[non], y[non], X[pool], y[pool])


def test_threshold_report_and_reproducibility(setting):
    a = run_attack(*_args(setting), attack="threshold", classifier="logreg", n_bootstrap=100, seed=1)
    b = run_attack(*_args(setting), attack="threshold", classifier="logreg", n_bootstrap=100, seed=1)
    assert to_dict(a) == to_dict(b)
    m = a.attack.metrics
    assert m.num_members == m.num_nonmembers == 250          # balanced: 300 non-members subsampled to 250
    assert m.auc > 0.75 and a.attack.bound.epsilon > 0
    assert a.attack.bound.confidence == 0.95 and a.attack.bound.selection == "split"
    assert 0.35 < a.blind.metrics.auc < 0.65                  # fair split: the blind baseline learns nothing
    assert a.settings["attack"] == "threshold" and a.settings["seed"] == 1
    assert to_dict(from_dict(AttackReport, json.loads(json.dumps(to_dict(a))))) == to_dict(a)
    c = run_attack(*_args(setting), attack="threshold", classifier="logreg", n_bootstrap=100, seed=2)
    assert to_dict(c) != to_dict(a)


def test_shadow_and_lira_reports(setting):
    s = run_attack(*_args(setting), attack="shadow", train_fn=forest_fn, num_shadows=2, classifier="logreg",
                   n_bootstrap=50, blind=False)
    assert s.attack.metrics.threshold == 0.5 and s.attack.metrics.threshold_rule == "fixed a priori"
    assert s.attack.metrics.auc > 0.7 and s.blind is None
    assert any("smaller than 2 x train_size" in n for n in s.notes) is False
    lira = run_attack(*_args(setting), attack="lira", train_fn=forest_fn, num_shadows=4, n_bootstrap=50,
                      blind=False, delta=1e-5)
    assert lira.attack.metrics.auc > 0.65 and lira.attack.bound.delta == 1e-5
    assert lira.settings["fixed_variance"] is True


def test_blind_baseline_flags_a_distribution_mismatch(setting):
    X, y, mem, non, pool, target = setting
    # non-members only from classes 5-9 and members from all: the split itself is distinguishable
    odd = non[y[non] >= 5]
    r = run_attack(target, X[mem], y[mem], X[odd], y[odd], attack="threshold", classifier="logreg", n_bootstrap=100)
    assert r.blind.metrics.auc > 0.65
    assert any("distribution mismatch" in n for n in r.notes)


def test_errors(setting):
    X, y, mem, non, pool, target = setting
    with pytest.raises(ParameterError, match="'attack' parameter of run_attack"):
        run_attack(*_args(setting), attack="gan")
    with pytest.raises(DataError, match="attacker's pool"):
        run_attack(target, X[mem], y[mem], X[non], y[non], attack="shadow", train_fn=forest_fn)
    with pytest.raises(DataError):
        run_attack(target, X[mem], y[mem][:-1], X[non], y[non], attack="threshold")
    with pytest.raises(ParameterError, match="'target' parameter of run_attack"):
        run_attack(object(), X[mem], y[mem], X[non], y[non], attack="threshold")
    with pytest.raises(ParameterError, match="'confidence' parameter"):
        run_attack(*_args(setting), attack="threshold", confidence=2)

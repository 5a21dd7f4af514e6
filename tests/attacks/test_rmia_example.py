"""The runnable RMIA example (examples/rmia_scores/rmia_example.py) runs and returns typed results."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from dpaudit.attacks import AttackReport
from dpaudit.attacks.compare import COMPARED_ATTACKS, AttackComparison
from dpaudit.attacks.per_record import PerRecordSummary

ROOT = Path(__file__).resolve().parents[2]


def test_rmia_example_runs(capsys):
    spec = importlib.util.spec_from_file_location("rmia_example", ROOT / "examples/rmia_scores/rmia_example.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = mod.main(references=4, seed=0)
    assert isinstance(out["rmia"], AttackReport) and isinstance(out["comparison"], AttackComparison)
    assert isinstance(out["summary"], PerRecordSummary) and len(out["summary"].top) == 5
    assert set(out["comparison"].results) == set(COMPARED_ATTACKS)
    assert out["rmia"].attack.metrics.auc > 0.8 and out["rmia"].attack.bound.kind == "estimate"
    text = capsys.readouterr().out
    assert "rmia-offline" in text and "most exposed records" in text

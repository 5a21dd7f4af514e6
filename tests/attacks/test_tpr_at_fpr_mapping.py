"""tpr_at_fpr is a mapping fpr -> tpr (issue 36); attack.json / comparison.json of earlier releases (a list of
[fpr, tpr] pairs) still read."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dpaudit.attacks.compare import AttackComparison
from dpaudit.attacks.metrics import attack_metrics
from dpaudit.attacks.results import AttackMetrics
from dpaudit.serial import from_dict, to_dict

ROOT = Path(__file__).resolve().parents[2]


def test_tpr_at_fpr_is_a_mapping_and_old_json_still_reads():
    rng = np.random.default_rng(0)
    m = attack_metrics(rng.normal(1, 1, 500), rng.normal(0, 1, 500), threshold=0.5, fprs=(0.001, 0.01, 0.1),
                       n_bootstrap=0)
    assert set(m.tpr_at_fpr) == {0.001, 0.01, 0.1} and m.tpr_at_fpr[0.01] == m.tpr_at(0.01)
    d = to_dict(m)
    assert d["tpr_at_fpr"] == {"0.001": m.tpr_at_fpr[0.001], "0.01": m.tpr_at_fpr[0.01], "0.1": m.tpr_at_fpr[0.1]}
    assert from_dict(AttackMetrics, json.loads(json.dumps(d))).tpr_at_fpr == m.tpr_at_fpr
    old = {**d, "tpr_at_fpr": [[f, t] for f, t in m.tpr_at_fpr.items()]}      # an earlier release's file
    assert from_dict(AttackMetrics, old).tpr_at_fpr == m.tpr_at_fpr
    # a comparison written by an earlier release (committed under reports/) reads, with the mapping
    path = ROOT / "reports" / "attacks" / "digits_mlp" / "comparison.json"
    if not path.is_file():
        pytest.skip("no committed comparison")
    raw = json.loads(path.read_text())
    assert isinstance(next(iter(raw["results"].values()))["metrics"]["tpr_at_fpr"], list)
    comp = from_dict(AttackComparison, {k: v for k, v in raw.items() if k not in ("schema", "setting")})
    assert all(isinstance(r.metrics.tpr_at_fpr, dict) and 0.01 in r.metrics.tpr_at_fpr for r in comp.results.values())
    # the old positional form (pairs) still constructs
    assert AttackMetrics(**{**{f: getattr(m, f) for f in m.__dataclass_fields__},
                            "tpr_at_fpr": ((0.01, 0.5),)}).tpr_at_fpr == {0.01: 0.5}

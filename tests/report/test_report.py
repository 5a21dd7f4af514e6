"""Report layer: typed schema round trip, red-flag rules (each fires exactly when its condition holds),
rendering and atomic writing."""

from __future__ import annotations

import json
import math

import pytest

from dpaudit.report.flags import compute_flags
from dpaudit.report.render import to_markdown, write_report
from dpaudit.report.schema import AttackSummary, AuditReport, ModelAudit


def _attack(eps_lower=0.0, auc=0.52, blind_auc=0.5, blind_eps=0.0, name="threshold"):
    return AttackSummary(
        attack=name, auc=auc, tpr_at_fpr={"0.001": 0.0, "0.01": 0.012, "0.1": 0.11}, accuracy=0.51,
        precision=0.5, recall=0.6, f1=0.55, epsilon_lower=eps_lower, confidence=0.95, delta=1e-5,
        blind_auc=blind_auc, blind_epsilon_lower=blind_eps, auc_ci=(0.49, 0.55),
        roc_fpr=(0.0, 0.01, 0.5, 1.0), roc_tpr=(0.0, 0.02, 0.55, 1.0), num_members=200, num_nonmembers=200,
    )


def _theory(eps, delta=1e-5, data_dependent=False, assumptions=()):
    st = {"epsilon": eps, "delta": delta, "method": "rdp", "order": 8.0, "label": "release",
          "data_dependent": data_dependent, "assumptions": list(assumptions), "details": {}}
    return {"mechanism": "pate", "epsilon": eps, "delta": delta, "headline": st, "statements": [st]}


def _model(name="m", **kw):
    base = dict(name=name, method="pate", release="runs/x", utility={"test_accuracy": 0.9},
                theoretical=_theory(2.0), attacks=(_attack(),), noise=0.1, noise_label="gamma", num_train=1000)
    base.update(kw)
    return ModelAudit(**base)


def codes(models):
    return sorted(f.code for f in compute_flags(models))


def test_clean_model_raises_no_flag():
    assert codes([_model()]) == []


def test_empirical_above_theory_is_a_red_flag_and_equal_is_not():
    assert "empirical_exceeds_theory" in codes([_model(attacks=(_attack(eps_lower=2.5),))])
    assert "empirical_exceeds_theory" not in codes([_model(attacks=(_attack(eps_lower=2.0),))])


def test_data_dependent_headline_is_flagged():
    assert "data_dependent_epsilon" in codes([_model(theoretical=_theory(1.0, data_dependent=True))])


def test_release_flags_keep_their_code_and_severity():
    m = _model(release_flags=(("teachers_not_independent", "FedAvg mixed every teacher's data."),
                              ("distillation_not_accounted", "KL term on a non-private model."),
                              ("some_future_code", "?")))
    got = {f.code: f.severity for f in compute_flags([m])}
    assert got == {"teachers_not_independent": "red", "distillation_not_accounted": "warning", "some_future_code": "warning"}
    # prose alone never raises a flag: only the method's structured flags do
    assert codes([_model(assumptions=("Teachers are not independent.",))]) == []


def test_claim_below_accounting_is_flagged():
    m = _model(theoretical=_theory(30.0), claim={"epsilon": 5.0, "text": "eps = 5 per round"})
    assert "claim_below_accounting" in codes([m])
    assert "claim_below_accounting" not in codes([_model(claim={"epsilon": 5.0})])


def test_delta_above_one_over_n():
    assert "delta_above_one_over_n" in codes([_model(theoretical=_theory(1.0, delta=1e-2), num_train=1000)])
    assert "delta_above_one_over_n" not in codes([_model(theoretical=_theory(1.0, delta=1e-4), num_train=1000)])


def test_blind_baseline_and_no_guarantee():
    assert "blind_baseline_leaks" in codes([_model(attacks=(_attack(blind_auc=0.7),))])
    assert "no_guarantee" in codes([_model(theoretical=None)])


def test_report_round_trip_and_files(tmp_path):
    models = (
        _model("baseline", theoretical=None, noise=None, attacks=(_attack(1.2, 0.7), _attack(0.8, 0.65, name="shadow"))),
        _model("gamma=0.1", noise=0.1, per_party_epsilon={"a": 1.0, "b": 2.0}),
        _model("gamma=0.5", noise=0.5, theoretical=_theory(math.inf)),
    )
    rep = AuditReport(title="t", seed=3, dataset={"name": "digits"}, models=models, flags=tuple(compute_flags(models)))
    back = AuditReport.from_dict(json.loads(json.dumps(rep.to_dict())))
    assert back == rep
    out = write_report(rep, tmp_path / "r")
    names = sorted(p.name for p in out.iterdir())
    assert names == ["epsilon.png", "per_party_1.png", "privacy_utility.png", "report.html", "report.json", "report.md", "roc.png"]
    html = (out / "report.html").read_text()
    assert "data:image/png;base64," in html and "src='http" not in html
    md = to_markdown(rep)
    assert "| baseline | pate | 0.900 | ∞" in md
    assert json.loads((out / "report.json").read_text())["schema"] == "dpaudit.report/1"
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary leftovers

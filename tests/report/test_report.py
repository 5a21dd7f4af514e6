"""Report layer: typed schema round trip, red-flag rules (each fires exactly when its condition holds),
rendering and atomic writing."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from dpaudit.errors import ParameterError
from dpaudit.errors import DataError
from dpaudit.report.flags import compute_flags
from dpaudit.report.render import grouped_flags, summary_rows, to_html, to_markdown, write_report
from dpaudit.report.schema import AttackSummary, AuditReport, Flag, ModelAudit, read_report
from dpaudit.report.verdict import attack_power, compute_verdicts
from dpaudit.serial import from_dict, to_dict


def _attack(eps_lower=0.0, auc=0.52, blind_auc=0.5, blind_eps=0.0, name="threshold", kind="estimate", tpr01=0.012):
    return AttackSummary(
        attack=name, auc=auc, tpr_at_fpr={"0.001": 0.0, "0.01": tpr01, "0.1": 0.11}, accuracy=0.51,
        precision=0.5, recall=0.6, f1=0.55, epsilon_lower=eps_lower, confidence=0.95, delta=1e-5,
        blind_auc=blind_auc, blind_epsilon_lower=blind_eps, auc_ci=(0.49, 0.55),
        roc_fpr=(0.0, 0.01, 0.5, 1.0), roc_tpr=(0.0, 0.02, 0.55, 1.0), num_members=200, num_nonmembers=200,
        epsilon_kind=kind, epsilon_range=(eps_lower * 0.5, eps_lower * 1.5), num_splits=5,
        roc_band={"fpr": (0.005, 0.1, 1.0), "low": (0.0, 0.05, 1.0), "high": (0.02, 0.2, 1.0)},
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


def test_empirical_above_theory_is_a_red_flag_only_when_certified():
    assert "empirical_exceeds_theory" in codes([_model(attacks=(_attack(eps_lower=2.5, kind="certified"),))])
    assert "empirical_exceeds_theory" not in codes([_model(attacks=(_attack(eps_lower=2.0, kind="certified"),))])
    # the same figure as a single-model estimate is a warning, never a red flag
    got = compute_flags([_model(attacks=(_attack(eps_lower=2.5),))])
    assert [(f.severity, f.code) for f in got] == [("warning", "estimate_exceeds_theory")]
    with pytest.raises(ParameterError, match="'kind' parameter of AttackSummary"):
        _attack(kind="proven")


def test_utility_near_chance_is_flagged_and_in_the_verdict():
    near = _model(utility={"test_accuracy": 0.15}, num_classes=10)
    assert "utility_near_chance" in codes([near])
    assert "utility_near_chance" not in codes([_model(utility={"test_accuracy": 0.9}, num_classes=10)])
    assert "utility_near_chance" not in codes([_model(utility={"test_accuracy": 0.15})])  # classes unknown
    assert "utility near chance (test accuracy 0.150, chance 1/10 = 0.100)" in compute_verdicts([near])[0].text


def test_verdicts_from_structured_data():
    ref = _model("ref", theoretical=None, noise=None, attacks=(_attack(0.9, 0.8, tpr01=0.2), _attack(0.0, 0.6, name="lira")))
    private = _model("private", attacks=(_attack(), _attack(name="lira")))
    loose = _model("loose", theoretical=_theory(8.98e3))
    leaky = _model("leaky", attacks=(_attack(0.7, 0.6, kind="certified"),))
    v = {x.model: x for x in compute_verdicts([ref, private, loose, leaky])}
    assert v["private"].codes == ("no_leakage_demonstrated", "accounted")
    assert v["private"].text.startswith("no leakage demonstrated; the same attacks reach AUC 0.800 (threshold) "
                                        "on the non-private reference ref")
    assert v["loose"].codes[-1] == "guarantee_not_meaningful" and "(ε = 8980 > 10)" in v["loose"].text
    assert v["leaky"].codes[0] == "leakage_certified" and "leakage demonstrated (certified)" in v["leaky"].text
    assert v["ref"].codes == ("leakage_estimated", "no_guarantee")
    assert "estimate, not certified: records are coupled through one model" in v["ref"].text
    # without a reference, "no leakage" comes with the warning that the attacks' power is unknown
    alone = compute_verdicts([private])[0]
    assert "attacks' power is unknown" in alone.text
    power = attack_power([ref, private])
    assert power["threshold"].auc == 0.8 and power["threshold"].tpr == 0.2 and power["lira"].model == "ref"


def test_a_mechanism_without_an_established_guarantee_is_not_a_non_private_reference():
    # ProxyFL's distilling proxy: DP-SGD runs, but no finite bound covers the release (headline "not established")
    st = {"epsilon": "inf", "delta": 1e-5, "method": "not established", "label": "release guarantee: not established",
          "data_dependent": False, "assumptions": [], "details": {}}
    proxy = _model("proxy", theoretical={"mechanism": "proxyfl", "epsilon": "inf", "delta": 1e-5, "headline": st,
                                         "statements": [st]})
    assert not proxy.is_reference and math.isinf(proxy.theoretical_epsilon)
    v = compute_verdicts([proxy])[0]
    assert v.codes[-1] == "guarantee_not_established" and "no finite guarantee established" in v.text
    assert "no privacy mechanism" not in v.text and attack_power([proxy]) == {}
    assert "no_guarantee" not in codes([proxy])


def test_summary_names_no_best_attack_when_nothing_was_found_and_quotes_one_auc():
    nothing = _model("quiet", attacks=(_attack(0.0, 0.55), _attack(0.0, 0.61, name="lira")))
    found = _model("found", attacks=(_attack(0.3, 0.7), _attack(1.1, 0.65, name="lira")))
    rep = AuditReport(title="t", seed=0, dataset={"name": "digits"}, models=(nothing, found))
    rows = {r[0]: r for r in summary_rows(rep)}
    assert rows["quiet"][4] == "0 (none found)" and "lira" not in rows["quiet"][4]
    assert rows["found"][4] == "≈ 1.1 [0.55–1.65] (estimate), lira"
    # one AUC per model: the strongest attack's, the same figure in the Markdown, HTML and console rows
    assert rows["quiet"][5] == "0.610 (lira)" and rows["found"][5] == "0.700 (threshold)"
    md, html = to_markdown(rep), to_html(rep)
    assert "| quiet | pate | 0.900 | 2 (δ = 1e-5) | 0 (none found) | 0.610 (lira) |" in md
    assert "<td>0.610 (lira)</td>" in html


def test_flags_grouped_by_code_each_text_once():
    same = "The same paragraph."
    flags = (Flag("warning", "b", "m1", same), Flag("red", "a", "m1", "x"), Flag("warning", "b", "m2", same),
             Flag("warning", "b", "m3", "other"))
    assert grouped_flags(flags) == [("red", "a", [("x", ["m1"])]),
                                    ("warning", "b", [(same, ["m1", "m2"]), ("other", ["m3"])])]
    rep = AuditReport(title="t", seed=0, dataset={}, models=(_model(),), flags=flags)
    html = to_html(rep)
    assert html.count(same) == 1 and html.index("id='summary'") < html.index("id='flags'")


def test_data_dependent_headline_is_flagged():
    assert "data_dependent_epsilon" in codes([_model(theoretical=_theory(1.0, data_dependent=True))])


def test_release_flags_keep_their_code_and_severity():
    m = _model(release_flags=(("teachers_not_independent", "FedAvg mixed every teacher's data."),
                              ("distillation_not_accounted", "KL term on a non-private model."),
                              ("some_future_code", "?")))
    got = {f.code: f.severity for f in compute_flags([m])}
    assert got == {"teachers_not_independent": "red", "distillation_not_accounted": "red", "some_future_code": "warning"}
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
    rep = AuditReport(title="t", seed=3, dataset={"name": "digits"}, models=models, flags=tuple(compute_flags(models)),
                      verdicts=tuple(compute_verdicts(models)))
    back = from_dict(AuditReport, json.loads(json.dumps(to_dict(rep))))
    assert back == rep
    # a schema-1 report (before bounds had a kind) still reads, its figures as estimates
    old = to_dict(rep)
    old["schema"] = "dpaudit.report/1"
    for m in old["models"]:
        for a in m["attacks"]:
            del a["epsilon_kind"], a["epsilon_range"], a["num_splits"], a["roc_band"]
    assert from_dict(AuditReport, old).models[0].attacks[0].epsilon_kind == "estimate"
    out = write_report(rep, tmp_path / "r")
    names = sorted(p.name for p in out.iterdir())
    assert names == ["epsilon.png", "per_party_1.png", "privacy_utility.png", "report.html", "report.json", "report.md", "roc.png"]
    html = (out / "report.html").read_text()
    assert "data:image/png;base64," in html and "src='http" not in html
    md = to_markdown(rep)
    assert "| baseline | pate | 0.900 | ∞" in md
    assert json.loads((out / "report.json").read_text())["schema"] == "dpaudit.report/3"
    # summary, verdicts and figures come before the flags and the per-model details
    assert html.index("id='summary'") < html.index("id='figures'") < html.index("id='flags'") < html.index("<h2>baseline")
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary leftovers


# ---------------------------------------------------------------- figures a reader can trust


def _texts(fig):
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def test_epsilon_figure_marks_infinity_off_scale_and_zero_visibly():
    from dpaudit.report.figures import epsilon_figure

    models = (_model("ref", theoretical=None, attacks=(_attack(1.2, 0.7),)), _model("private"),
              _model("big", theoretical=_theory(500.0)), _model("leaky", attacks=(_attack(0.7, 0.6, kind="certified"),)),
              _model("proxy", theoretical=_theory(math.inf)))
    fig = epsilon_figure(models)
    ax = fig.axes[0]
    texts = _texts(fig)
    assert "∞ (no\nmechanism)" in texts and "0 (none found)" in texts and "500" in texts
    assert "≥ 0.7 (certified)" in texts and "≈ 1.2 (estimate)" in texts   # every empirical figure says its kind
    assert "∞ (not\nestablished)" in texts  # a mechanism whose bound does not cover the release
    # estimates are hatched bars with their split-seed range, certified bounds solid
    bars = {round(p.get_height(), 3): p for p in ax.patches}
    assert bars[1.2].get_hatch() == "///" and bars[0.7].get_hatch() is None
    top = ax.get_ylim()[1]
    # no bar reaches the top (infinity is a marker, not a bar about twice the next one)
    assert all(p.get_height() < top for p in ax.patches)
    inf_marker = [ln for ln in ax.lines if ln.get_marker() == "^"]
    zero_marker = [ln for ln in ax.lines if ln.get_marker() == "o"]
    assert zero_marker and all(m.get_markerfacecolor() == "white" for m in zero_marker)   # hollow: nothing certified
    assert len(inf_marker) == 2 and all(m.get_ydata()[0] == top and not m.get_clip_on() for m in inf_marker)
    assert len(zero_marker) == 3 and all(z.get_ydata()[0] == 0.0 for z in zero_marker)  # private, big, proxy
    assert ax.get_ylabel() and ax.get_legend() is not None
    # the legend sits below the axes, off the bars and labels
    fig.canvas.draw()
    assert ax.get_legend().get_window_extent().y1 <= ax.get_window_extent().y0


def test_privacy_utility_figure_has_separate_labelled_axes():
    from dpaudit.report.figures import privacy_utility_figure

    models = (_model("a", noise=0.1, attacks=(_attack(0, 0.55),)), _model("b", noise=1.0, attacks=(_attack(0, 0.6),)),
              _model("ref", theoretical=None, noise=None))
    fig = privacy_utility_figure(models)
    acc, auc = fig.axes
    assert acc.get_ylabel() == "test accuracy" and auc.get_ylabel().startswith("attack AUC")
    assert [round(y, 3) for y in auc.lines[0].get_ydata()] == [0.55, 0.6]


def test_report_roc_panels_use_the_one_roc_routine():
    from dpaudit.report.figures import roc_figure

    fig = roc_figure([_model("a"), _model("b", attacks=(_attack(name="lira"),))])
    assert [ax.get_title() for ax in fig.axes] == ["threshold attack", "lira attack"]
    ax = fig.axes[0]
    assert ax.get_xlim()[0] == 1 / 200 and len(ax.collections) == 1  # stopped at 1/n, band shaded


# ---------------------------------------------------------------- analyses side by side, controls, intervals


def test_certified_analyses_controls_and_intervals_are_rendered():
    """Each canary audit's analyses (headline marked, what each needs, ideal references), the accounted-curve test,
    what a method-run refutation rests on and its control, the Bayesian interval beside a single-model estimate and
    the TPR bootstrap intervals: in Markdown and HTML, from the structured results (round trip included)."""
    import numpy as np

    from dpaudit.attacks.canary import one_run_certified
    from dpaudit.attacks.results import CurveTest
    from dpaudit.auditing.canary_audit import CanaryAuditResult
    from dpaudit.auditing.method_runs.result import MethodRunAudit, RunControl

    rng = np.random.default_rng(0)
    inc = rng.random(400) < 0.5
    b = one_run_certified(inc * 2.0 + rng.standard_normal(400), inc, delta=1e-5)
    from dataclasses import replace

    b = replace(b, curve_test=CurveTest("accounted PLD", 0.5, 0.95, "rule-x"))
    canary = {**to_dict(CanaryAuditResult(b, 8.0, {}, {"name": "dp-x", "canary": "dirac", "canaries": 400}, 1.0))}
    run = MethodRunAudit("privatekt", "one-run", b, 5.0, 85.0, 400, {}, 1.0, rests_on=("composition over rounds",),
                         controls=(RunControl("one report per canary", "first upload only", b, 400),))
    att = replace(_attack(0.9), epsilon_credible=(1.0, 0.5, 1.6), tpr_ci={"0.01": (0.004, 0.03)})
    models = (_model("m", attacks=(att,)),)
    rep = AuditReport(title="t", seed=0, dataset={"name": "digits"}, models=models, certified=(canary,),
                      method_audits=({"name": "pkt", **to_dict(run)},))
    assert read_report(json.loads(json.dumps(to_dict(rep)))) == rep
    # the Markdown backslashes "[" (dpaudit._escape.md_text: no link can start): compare the rendered text
    for doc in (to_markdown(rep).replace("\\[", "["), to_html(rep)):
        assert "f-DP, Gaussian-DP curves (Mahloujifar et al. 2025)" in doc and "— headline" in doc
        assert "trade-off curve is Gaussian" in doc and "accounted PLD is consistent with the attack" in doc
        assert "composition over rounds" in doc and "one report per canary" in doc
        assert "≈ 1 [0.5, 1.6] (estimate)" in doc and "0.012 [0.004, 0.03]" in doc
def test_committed_schema_2_report_reads_as_schema_3():
    """A report written before the one serialiser (schema 2: roc objects, flag and clause objects,
    certified_audits) reads into the same objects; written again it is schema 3."""
    import gzip

    # the default report as committed before the serialiser (reports/default/report.json at schema 2), kept here
    data = Path(__file__).resolve().parent / "data" / "default_report_schema2.json.gz"
    old = json.loads(gzip.decompress(data.read_bytes()).decode("utf-8"))
    assert old["schema"] == "dpaudit.report/2"
    rep = read_report(old)
    assert rep.schema == "dpaudit.report/3" and len(rep.certified) == len(old.get("certified_audits", ()))
    m_old, m = old["models"][0], rep.models[0]
    assert list(m.attacks[0].roc_fpr) == m_old["attacks"][0]["roc"]["fpr"]
    assert [list(f) for f in m.release_flags] == [[f["code"], f["message"]] for f in m_old["release_flags"]]
    assert rep.verdicts[0].text == old["verdicts"][0]["text"]
    again = to_dict(rep)
    assert again["schema"] == "dpaudit.report/3" and again["models"][0]["theoretical_epsilon"] == m_old["theoretical_epsilon"]
    with pytest.raises(DataError, match="schema 'dpaudit.report/9'"):
        read_report({**old, "schema": "dpaudit.report/9"})


def test_epsilon_figure_draws_the_certified_audits_beside_the_models():
    """A method audit certifying 1.13 and a canary audit certifying 0.87 appear beside the per-model figures as
    solid (certified) bars with their accounted epsilon, ideal attack and the paper's claim (issue 27, item 6)."""
    from dpaudit.report.figures import epsilon_figure
    from dpaudit.report.render import figure_set

    method = {"name": "fredy-run", "method": "fredy", "audit": "multi-run", "kind": "certified", "claimed_epsilon": 0.3,
              "accounted_epsilon": 3.0, "bound": {"audit": "multi-run", "epsilon": 1.13, "ideal_epsilon": 1.03,
                                                  "kind": "certified", "confidence": 0.95, "delta": 0.0}}
    canary = {"kind": "certified", "accounted_epsilon": 8.0, "settings": {"name": "dpsgd-eps8", "canary": "dirac"},
              "bound": {"audit": "one-run", "epsilon": 0.874, "ideal_epsilon": 1.41, "kind": "certified"}}
    models = (_model("fredy-gamma0.3"),)
    fig = epsilon_figure(models, [canary], [method])
    ax, texts = fig.axes[0], _texts(fig)
    assert "≥ 1.13 (certified)" in texts and "≥ 0.874 (certified)" in texts and "claim 0.3" in texts
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == ["fredy-gamma0.3", "dpsgd-eps8\n(canary audit, one-run)", "fredy-run\n(method audit, whole run)"]
    solid = [p for p in ax.patches if round(p.get_height(), 3) in (1.13, 0.874)]
    assert len(solid) == 2 and all(p.get_hatch() is None for p in solid)
    assert [ln.get_ydata()[0] for ln in ax.lines if ln.get_marker() == "D"] == [1.41, 1.03]
    rep = AuditReport(title="t", seed=0, dataset={"name": "digits"}, models=models, certified=(canary,),
                      method_audits=(method,))
    assert "method audits beside them" in next(f.caption for f in figure_set(rep) if f.file == "epsilon.png")


def test_html_figures_are_full_width():
    rep = AuditReport(title="t", seed=0, dataset={"name": "digits"}, models=(_model("m"),))
    html = to_html(rep, [("epsilon.png", "caption", b"png"), ("roc.png", "c2", b"png")])
    assert ".figs img{width:100%" in html and "calc(50%" not in html

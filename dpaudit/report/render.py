"""Render an :class:`~dpaudit.report.schema.AuditReport` as Markdown and self-contained HTML, and write a
report directory (``report.json``, ``report.md``, ``report.html``, PNG figures), every file atomically.

Order of both documents: summary (one row per model, one AUC figure per model: the strongest attack's), the
verdicts, the attacks' power, the figures, then red flags grouped by code (each distinct text once), then the
per-model details. Every empirical epsilon says whether it is certified or an estimate.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from dpaudit._escape import (Md, html_text, md, md_bold, md_bullet, md_code, md_document, md_heading, md_image,
                             md_italic, md_table, md_text)
from dpaudit._format import fmt_number
from dpaudit.serial import to_dict
from dpaudit._io import dumps_json, write_bytes, write_text
from dpaudit.attacks.results import ESTIMATE_CAVEAT
from dpaudit.report import figures as F
from dpaudit.report.schema import AuditReport, Flag, ModelAudit, headline_statement
from dpaudit.report.verdict import POWER_FPR, attack_power, compute_verdicts, fmt_empirical, fmt_epsilon

__all__ = ["to_markdown", "to_html", "write_report", "figure_set", "summary_rows", "SUMMARY_HEAD",
           "power_rows", "POWER_HEAD", "grouped_flags", "verdict_lines", "INTRO", "method_audit_rows", "METHOD_AUDIT_HEAD",
           "analyses_rows", "ANALYSES_HEAD", "curve_test_lines", "control_rows", "CONTROL_HEAD", "rests_on_lines"]

_SEV = {"red": "RED FLAG", "warning": "WARNING", "info": "note"}
_SEV_ORDER = {"red": 0, "warning": 1, "info": 2}

INTRO = ("Theoretical ε is what the accountant proves: an upper bound on the privacy loss, under the stated "
         "assumptions. Empirical ε is what an attack shows, and each figure says which kind it is: certified "
         "(a lower bound holding with the stated confidence: independent trials or coin-flip canaries) or estimate "
         f"({ESTIMATE_CAVEAT}; shown as ≈ median [range over split seeds]). A sound release has certified "
         "empirical ≤ theoretical; \"no leakage demonstrated\" means only as much as the attacks' power on the "
         "non-private reference.")


@dataclass(frozen=True)
class _Figure:
    file: str
    caption: str
    make: Callable[[], object]


def figure_set(report: AuditReport) -> list[_Figure]:
    """The figures of a report (file name, caption, factory)."""
    ms = list(report.models)
    out = [
        _Figure("roc.png", "ROC of each attack (log-log; shaded: bootstrap band; curves stop at the smallest "
                "resolvable FPR, 1/n; chance dotted).", lambda: F.roc_figure(ms)),
        _Figure("epsilon.png", "Accounted epsilon (upper bound) vs the strongest empirical figure per model "
                "(hatched: estimate with its split-seed range; ▲: infinite, off scale; ○: no attack found anything)"
                + (", and the certified canary and whole-run method audits beside them (solid: certified lower bound; "
                   "◆: ideal attack; dashed: the paper's claim)" if report.certified or report.method_audits else "")
                + ".", lambda: F.epsilon_figure(ms, report.certified, report.method_audits)),
    ]
    if sum(m.noise is not None for m in ms) >= 2:
        out.append(_Figure("privacy_utility.png", "Test accuracy (left axis) and strongest attack AUC (right axis) "
                           "across noise levels.", lambda: F.privacy_utility_figure(ms)))
    for i, m in enumerate(ms):
        if len(m.per_party_epsilon) >= 2:
            out.append(_Figure(f"per_party_{i}.png", f"Epsilon per party: {m.name}.",
                               (lambda mm=m: F.per_party_figure(mm))))
    return out


SUMMARY_HEAD = ["model", "method", "test accuracy", "theoretical ε", "empirical ε (kind)", "AUC (strongest attack)"]


def summary_rows(report: AuditReport) -> list[list[str]]:
    """One row per model; the console (``dpaudit audit``) prints these same rows. No attack is named when
    none found anything."""
    rows = []
    for m in report.models:
        best, strongest = m.best_empirical, m.strongest_attack
        util = m.utility.get("test_accuracy")
        if best is not None:
            emp = f"{fmt_empirical(best)}, {best.attack}"
        else:
            emp = "0 (none found)" if m.attacks else "–"
        rows.append([
            m.name, m.method, f"{util:.3f}" if isinstance(util, (int, float)) else "–",
            fmt_epsilon(m.theoretical_epsilon) + (f" (δ = {fmt_number(m.theoretical_delta)})" if m.theoretical_delta else ""),
            emp, "–" if strongest is None else f"{strongest.auc:.3f} ({strongest.attack})",
        ])
    return rows


POWER_HEAD = ["attack", "reference model", "AUC", f"TPR @ FPR {POWER_FPR:g}"]


def power_rows(report: AuditReport) -> list[list[str]]:
    """Each attack's power: its AUC and TPR at low FPR on the non-private reference (empty without one)."""
    return [[p.attack, p.model, f"{p.auc:.3f}", "–" if p.tpr is None else f"{p.tpr:.3g}"]
            for p in attack_power(report.models).values()]


def verdict_lines(report: AuditReport) -> list[tuple[str, str]]:
    """(model, verdict text) for every model (the stored verdicts, else computed now)."""
    verdicts = report.verdicts or tuple(compute_verdicts(report.models))
    return [(v.model, v.text) for v in verdicts]


def grouped_flags(flags: tuple[Flag, ...]) -> list[tuple[str, str, list[tuple[str, list[str]]]]]:
    """Flags grouped by code, most severe first: (severity, code, [(distinct message, models)])."""
    groups: dict[str, tuple[str, dict[str, list[str]]]] = {}
    for f in flags:
        sev, msgs = groups.setdefault(f.code, (f.severity, {}))
        msgs.setdefault(f.message, []).append(f.model)
    order = sorted(groups.items(), key=lambda kv: _SEV_ORDER.get(kv[1][0], 3))
    return [(sev, code, [(msg, models) for msg, models in msgs.items()]) for code, (sev, msgs) in order]


def _tpr_cell(a) -> str:
    cells = []
    for k, v in a.tpr_at_fpr.items():
        ci = a.tpr_ci.get(k)
        cells.append(fmt_number(float(v), 3) + (f" [{fmt_number(float(ci[0]), 3)}, {fmt_number(float(ci[1]), 3)}]" if ci else ""))
    return " / ".join(cells)


def _credible_cell(a) -> str:
    if a.epsilon_credible is None:
        return "–"
    med, lo, hi = a.epsilon_credible
    return f"≈ {fmt_epsilon(med)} [{fmt_epsilon(lo)}, {fmt_epsilon(hi)}] (estimate)"


def _model_rows(m: ModelAudit) -> list[list[str]]:
    rows = []
    for a in m.attacks:
        rows.append([
            a.attack, f"{a.auc:.3f}" + (f" [{a.auc_ci[0]:.3f}, {a.auc_ci[1]:.3f}]" if a.auc_ci else ""),
            _tpr_cell(a),
            f"{a.accuracy:.3f}", f"{a.precision:.3f}", f"{a.recall:.3f}", f"{a.f1:.3f}",
            f"{fmt_empirical(a)} (conf. {fmt_number(a.confidence)}, δ = {fmt_number(a.delta)})",
            "–" if a.certified else _credible_cell(a),
            f"{a.blind_auc:.3f} / {fmt_epsilon(a.blind_epsilon_lower)}",
        ])
    return rows


_ATTACK_HEAD = ["attack", "AUC [95% CI]", "TPR @ FPR 0.1% / 1% / 10% [bootstrap CI]", "acc", "prec", "rec", "F1",
                "empirical ε (kind) [split-seed range]", "Bayesian ε [credible interval]", "blind AUC / ε"]


def _assumptions(m: ModelAudit) -> list[str]:
    stated = [a for s in (m.theoretical or {}).get("statements", []) for a in s.get("assumptions", [])]
    # the accounting's warnings (e.g. shuffled batches: the upper bound, the certified lower bound, the Poisson figure
    # that is not a guarantee) are things a reader must see
    warned = list((m.theoretical or {}).get("warnings", []))
    return list(dict.fromkeys(list(m.assumptions) + stated + warned))


def _statement_rows(m: ModelAudit) -> list[list[str]]:
    rows = []
    head = headline_statement(m.theoretical)
    for s in (m.theoretical or {}).get("statements", []):
        e = s["epsilon"]
        e = float(e) if isinstance(e, str) else e
        mark = (" — headline" + (f" (route {s['route']})" if s.get("route") else "")) if s == head else ""
        rows.append([(s.get("label") or "–") + mark, fmt_epsilon(e), fmt_number(float(s["delta"])), s["method"],
                     fmt_number(s.get("order"))])
    low = (m.theoretical or {}).get("lower_bound")
    if isinstance(low, dict) and "epsilon" in low:
        le = low["epsilon"]
        le = float(le) if isinstance(le, str) else le
        scope = f" (bounds {', '.join(low['routes'])})" if low.get("routes") else ""
        rows.append([f"certified lower bound: ε in [{fmt_epsilon(le)}, {fmt_epsilon(m.theoretical_epsilon)}]{scope}",
                     "≥ " + fmt_epsilon(le), fmt_number(float(low.get("delta", 0.0))),
                     f"explicit pair: {low.get('pair', '?')}", "–"])
    return rows


def _byline(report: AuditReport) -> str:
    ds = report.dataset
    threads = (report.settings or {}).get("threads") or {}
    ran = (f" Ran with {threads['threads']} intra-op thread{'s' if threads['threads'] != 1 else ''} ({threads.get('source', '?')})."
           if isinstance(threads.get("threads"), int) else "")
    return (f"Data set: {ds.get('name', '?')}, seed {report.seed}. {report.created_by}"
            + (f", {report.elapsed_seconds:.0f} s." if report.elapsed_seconds else ".") + ran)


CERTIFIED_HEAD = ["canary audit", "audit", "canaries / models", "score", "certified ε ≥", "ideal attack (median)",
                   "accounted ε", "kind", "analysis (rule)"]


def certified_rows(report: AuditReport) -> list[list[str]]:
    rows = []
    for c in report.certified:
        b, st = c.get("bound", {}), c.get("settings", {})
        num = lambda v: "–" if v is None else fmt_epsilon(float(v))  # noqa: E731
        size = f"m = {st.get('canaries')}" if b.get("audit") == "one-run" else f"N = {st.get('models')}"
        rows.append([str(st.get("name", "–")), f"{b.get('audit')} ({st.get('canary')})", f"{size}, {b.get('trials')} trials",
                     str(b.get("score")), f"{num(b.get('epsilon'))} ({b.get('confidence')}, δ = {fmt_number(float(b.get('delta', 0)))})",
                     num(b.get("ideal_epsilon")), num(c.get("accounted_epsilon")), str(c.get("kind", b.get("kind"))),
                     f"{b.get('analysis', 'eps')} ({b.get('rule') or '–'})"])
    return rows


ANALYSES_HEAD = ["audit", "analysis", "ε (kind)", "μ (Gaussian DP)", "ideal attack (median)", "rule", "needs"]

#: How every analysis is named in the report (:data:`dpaudit.attacks.canary.ANALYSIS_LABELS` in table words).
ANALYSIS_NAMES = {"eps": "(ε, δ) test (one run: Steinke et al. 2023 Thm 3; multi-run: Clopper-Pearson)",
                  "fdp": "f-DP, Gaussian-DP curves (Mahloujifar et al. 2025)",
                  "fdp-dp": "f-DP, (ε, δ) curves (Mahloujifar et al. 2025)",
                  "gdp": "Gaussian DP from Clopper-Pearson FPR/FNR (Nasr et al. 2023)",
                  "bayes": "Bayesian posterior (Zanella-Béguelin et al. 2023)"}


def _analysis_figure(e: dict, headline: bool) -> str:
    num = lambda v: "–" if v is None else fmt_epsilon(float(v))  # noqa: E731
    if e.get("kind") == "estimate":
        fig = f"≈ {num(e.get('epsilon'))} [{num(e.get('low'))}, {num(e.get('high'))}] (estimate)"
    else:
        fig = f"≥ {num(e.get('epsilon'))} (certified)"
    return fig + (" — headline" if headline else "")


def analyses_rows(entries: tuple, name_of: Callable[[dict], str]) -> list[list[str]]:
    """One row per analysis of each certified audit's evidence (dicts with ``bound``), the headline marked."""
    rows = []
    for c in entries:
        b = c.get("bound", {})
        marked = False
        for e in b.get("analyses", ()):
            mu = e.get("mu")
            ideal = e.get("ideal_epsilon")
            head = not marked and e.get("analysis") == b.get("analysis")
            marked = marked or head
            name = e.get("analysis")
            if name == "fdp" and (e.get("details") or {}).get("family") == "approx-dp":
                name = "fdp-dp"     # at delta = 0 the f-DP analysis tests the pure-DP curves
            rows.append([name_of(c), ANALYSIS_NAMES.get(name, str(name)), _analysis_figure(e, head),
                         "–" if mu is None else f"≥ {float(mu):.3g}", "–" if ideal is None else fmt_epsilon(float(ideal)),
                         str(e.get("rule", "–")), str(e.get("assumption") or "nothing beyond the coins / runs")])
    return rows


def curve_test_lines(entries: tuple, name_of: Callable[[dict], str]) -> list[str]:
    """The f-DP test of each audit's accounted trade-off curve, in words."""
    out = []
    for c in entries:
        ct = c.get("bound", {}).get("curve_test")
        if ct:
            p = float(ct.get("p_value", 1.0))
            verdict = "REJECTED" if p <= 1.0 - float(ct.get("confidence", 0.95)) else "consistent with the attack"
            out.append(f"{name_of(c)}: the {ct.get('curve')} is {verdict} (p = {p:.3g}; guesses: {ct.get('rule')}).")
    return out


ANALYSES_TEXT = ("Every analysis of the same evidence, side by side. The headline was fixed before the data was seen "
                 "(planned on the ideal attack of the accounted mechanism, among the analyses valid for it); the "
                 "others are shown for comparison, each at the stated confidence. \"needs\" says what a figure "
                 "assumes beyond the fair coins (one run) or independent runs (multi-run): a Gaussian-DP figure "
                 "certifies μ, and its ε holds only if the trade-off curve is Gaussian. Bayesian figures are "
                 "estimates (posterior median and credible interval), never bounds.")


CERTIFIED_TEXT = ("Certified canary audits of DP-SGD recipes: canaries are included by independent fair coins, so the "
                   "bound holds with the stated confidence (one-run: Steinke, Nasr, Jagielski 2023, Thm 3, or the f-DP "
                   "test of Mahloujifar, Melis, Chaudhuri 2025; multi-run: Clopper-Pearson over independently trained "
                   "models). The analysis and the guessing rule (how many canaries are guessed in / out) are fixed "
                   "before the run, or paid for by Bonferroni; the last column names them. The ideal-attack column is "
                   "the median bound the exact likelihood-ratio test of the accounted mechanism certifies in simulated "
                   "audits with the same trials, analysis and rule: far above the certified figure means a weak attack, "
                   "close to it means too few trials (or a tight accounting).")


METHOD_AUDIT_HEAD = ["method audit", "method", "audit", "trials", "certified ε ≥", "ideal attack (median)",
                     "paper's claim", "accounted ε", "claim", "analysis (rule)"]

CONTROL_HEAD = ["method audit", "control", "trials", "certified ε ≥", "ideal attack (median)", "what it removes"]

METHOD_AUDIT_TEXT = ("Certified audits of the methods' whole training runs (their real round loop, teacher training or "
                     "proxy training) with auditor-planted canaries, each included by an independent fair coin: the "
                     "bound holds with the stated confidence. A certified bound above the paper's claim refutes the "
                     "claim; one above dpaudit's accounting would be a bug in the method or the accountant.")


def method_audit_rows(report: AuditReport) -> list[list[str]]:
    rows = []
    for c in report.method_audits:
        b = c.get("bound", {})
        num = lambda v: "–" if v is None else fmt_epsilon(float(v))  # noqa: E731
        claim = c.get("claimed_epsilon")
        verdict = "none made" if claim is None else ("refuted" if c.get("refutes_claim") else "not refuted")
        rows.append([str(c.get("name", c.get("method"))), str(c.get("method")), str(c.get("audit")), str(c.get("trials")),
                     f"{num(b.get('epsilon'))} ({b.get('confidence')}, δ = {fmt_number(float(b.get('delta', 0)))})",
                     num(b.get("ideal_epsilon")), num(claim), num(c.get("accounted_epsilon")), verdict,
                     f"{b.get('analysis', 'eps')} ({b.get('rule') or '–'})"])
    return rows


def control_rows(report: AuditReport) -> list[list[str]]:
    num = lambda v: "–" if v is None else fmt_epsilon(float(v))  # noqa: E731
    return [[str(c.get("name", c.get("method"))), str(k.get("name")), str(k.get("trials")),
             f"{num(k.get('bound', {}).get('epsilon'))} ({k.get('bound', {}).get('confidence')})",
             num(k.get("bound", {}).get("ideal_epsilon")), str(k.get("description"))]
            for c in report.method_audits for k in c.get("controls", ())]


def rests_on_lines(report: AuditReport) -> list[tuple[str, str]]:
    """(audit name, what its refutation rests on) for every method audit that says."""
    return [(str(c.get("name", c.get("method"))), r) for c in report.method_audits for r in c.get("rests_on", ())]


def _canary_name(c: dict) -> str:
    return str(c.get("settings", {}).get("name", "–"))


def _method_name(c: dict) -> str:
    return str(c.get("name", c.get("method")))


def to_markdown(report: AuditReport, figure_files: list[tuple[str, str]] | None = None) -> str:
    """The report as Markdown. Every line is an :class:`~dpaudit._escape.Md` fragment: the bundle's strings (method,
    names, assumptions, flag texts, table cells) are literal text, never Markdown or HTML (:mod:`dpaudit._escape`)."""
    parts: list[Md] = [md_heading(1, report.title), Md(""), md_text(_byline(report)), Md(""), md_text(INTRO), Md("")]
    blank = Md("")
    parts += [md_heading(2, "Summary"), blank, md_table(SUMMARY_HEAD, summary_rows(report)), blank]
    parts += [md_text("Verdicts:"), blank] + [md_bullet(md_bold(name), ": ", text) for name, text in verdict_lines(report)]
    parts.append(blank)
    if report.certified:
        parts += [md_heading(2, "Certified canary audits"), blank, md_text(CERTIFIED_TEXT), blank,
                  md_table(CERTIFIED_HEAD, certified_rows(report)), blank]
        rows = analyses_rows(report.certified, _canary_name)
        if rows:
            parts += [md_text(ANALYSES_TEXT), blank, md_table(ANALYSES_HEAD, rows), blank]
        parts += [md_bullet(line) for line in curve_test_lines(report.certified, _canary_name)] + [blank]
    if report.method_audits:
        parts += [md_heading(2, "Certified audits of the methods' training runs"), blank, md_text(METHOD_AUDIT_TEXT),
                  blank, md_table(METHOD_AUDIT_HEAD, method_audit_rows(report)), blank]
        rests = rests_on_lines(report)
        if rests:
            parts += [md_text("What each refutation rests on:"), blank] + [md_bullet(md_bold(n), ": ", r) for n, r in rests]
            parts.append(blank)
        if control_rows(report):
            parts += [md_text("Controls (the same audit with that ingredient removed):"), blank,
                      md_table(CONTROL_HEAD, control_rows(report)), blank]
        rows = analyses_rows(report.method_audits, _method_name)
        if rows:
            parts += [md_text(ANALYSES_TEXT), blank, md_table(ANALYSES_HEAD, rows), blank]
    power = power_rows(report)
    parts += [md_heading(2, "Attack power"), blank]
    parts += ([md_table(POWER_HEAD, power), blank] if power else
              [md_text("No non-private reference in this audit: the attacks' power is unknown."), blank])
    if figure_files:
        parts += [md_heading(2, "Figures"), blank]
        for file, caption in figure_files:
            parts += [md_image(caption, file), blank, md_italic(caption), blank]
    if report.flags:
        parts += [md_heading(2, "Red flags and warnings"), blank]
        for sev, code, msgs in grouped_flags(report.flags):
            parts += [md_heading(3, _SEV.get(sev, sev), ": ", md_code(code)), blank]
            parts += [md_bullet("(", ", ".join(models), ") ", msg) for msg, models in msgs]
            parts.append(blank)
    for m in report.models:
        parts += [md_heading(2, m.name), blank]
        parts.append(md("Method ", md_code(m.method), ", release ", md_code(m.release), "; utility: ",
                        ", ".join(f"{k} = {fmt_number(v)}" for k, v in m.utility.items())))
        parts.append(blank)
        if m.theoretical is not None:
            parts += [md_table(["figure", "ε", "δ", "method", "order"], _statement_rows(m)), blank]
        else:
            parts += [md_text("No privacy mechanism: theoretical ε = ∞."), blank]
        if _assumptions(m):
            parts.append(md_text("Assumptions:"))
            parts += [md_bullet(a) for a in _assumptions(m)]
            parts.append(blank)
        if m.attacks:
            parts += [md_table(_ATTACK_HEAD, _model_rows(m)), blank]
    return md_document(parts)


_CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.6em 0;font-size:.9em}th,td{border:1px solid #ccc;padding:.25em .5em;text-align:left}
th{background:#f2f2f2}.red{background:#fde2e1;border-left:5px solid #c0392b;padding:.4em .8em;margin:.4em 0}
.warning{background:#fff4d6;border-left:5px solid #e0a100;padding:.4em .8em;margin:.4em 0}
.info{background:#eef3fb;border-left:5px solid #4c72b0;padding:.4em .8em;margin:.4em 0}figure{margin:1em 0}
img{max-width:100%}figcaption{font-size:.85em;color:#555}.verdicts li{margin:.2em 0}
.figs figure{margin:1em 0}.figs img{width:100%;height:auto}details{margin:.4em 0}"""


def _html_table(head: list[str], rows: list[list[str]]) -> str:
    e = html_text
    h = "".join(f"<th>{e(c)}</th>" for c in head)
    b = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{h}</tr></thead><tbody>{b}</tbody></table>"


def to_html(report: AuditReport, figures_png: list[tuple[str, str, bytes]] | None = None) -> str:
    """Self-contained HTML (figures embedded as base64 PNG, no script, no external resource)."""
    e = html_text       # every string, ours and the bundle's, is text (dpaudit._escape)
    out = [f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{e(report.title)}</title>"
           f"<style>{_CSS}</style></head><body>",
           f"<h1>{e(report.title)}</h1>", f"<p>{e(_byline(report))}</p>", f"<p>{e(INTRO)}</p>",
           "<h2 id='summary'>Summary</h2>", _html_table(SUMMARY_HEAD, summary_rows(report)),
           "<ul class='verdicts'>" + "".join(f"<li><b>{e(n)}</b>: {e(t)}</li>" for n, t in verdict_lines(report)) + "</ul>"]
    if report.certified:
        out += ["<h2 id='certified'>Certified canary audits</h2>", f"<p>{e(CERTIFIED_TEXT)}</p>",
                _html_table(CERTIFIED_HEAD, certified_rows(report))]
        rows = analyses_rows(report.certified, _canary_name)
        if rows:
            out += [f"<p>{e(ANALYSES_TEXT)}</p>", _html_table(ANALYSES_HEAD, rows)]
        lines = curve_test_lines(report.certified, _canary_name)
        if lines:
            out.append("<ul>" + "".join(f"<li>{e(x)}</li>" for x in lines) + "</ul>")
    if report.method_audits:
        out += ["<h2 id='method-audits'>Certified audits of the methods' training runs</h2>",
                f"<p>{e(METHOD_AUDIT_TEXT)}</p>", _html_table(METHOD_AUDIT_HEAD, method_audit_rows(report))]
        rests = rests_on_lines(report)
        if rests:
            out.append("<p>What each refutation rests on:</p><ul>"
                       + "".join(f"<li><b>{e(n)}</b>: {e(r)}</li>" for n, r in rests) + "</ul>")
        if control_rows(report):
            out += ["<p>Controls (the same audit with that ingredient removed):</p>",
                    _html_table(CONTROL_HEAD, control_rows(report))]
        rows = analyses_rows(report.method_audits, _method_name)
        if rows:
            out += [f"<p>{e(ANALYSES_TEXT)}</p>", _html_table(ANALYSES_HEAD, rows)]
    power = power_rows(report)
    out.append("<h2 id='power'>Attack power</h2>")
    out.append(_html_table(POWER_HEAD, power) if power else
               "<p>No non-private reference in this audit: the attacks' power is unknown.</p>")
    if figures_png:
        out.append("<h2 id='figures'>Figures</h2><div class='figs'>")
        for _, caption, data in figures_png:
            b64 = base64.b64encode(data).decode("ascii")
            out.append(f"<figure><img alt='{e(caption)}' src='data:image/png;base64,{b64}'>"
                       f"<figcaption>{e(caption)}</figcaption></figure>")
        out.append("</div>")
    if report.flags:
        out.append("<h2 id='flags'>Red flags and warnings</h2>")
        for sev, code, msgs in grouped_flags(report.flags):
            items = "".join(f"<li>{e(msg)} <i>({e(', '.join(models))})</i></li>" for msg, models in msgs)
            out.append(f"<div class='{e(sev)}'><b>{e(_SEV.get(sev, sev))}</b> <code>{e(code)}</code><ul>{items}</ul></div>")
    for m in report.models:
        out.append(f"<h2>{e(m.name)}</h2><p>Method <code>{e(m.method)}</code>, release <code>{e(m.release)}</code></p>")
        if m.theoretical is not None:
            out.append(_html_table(["figure", "ε", "δ", "method", "order"], _statement_rows(m)))
        else:
            out.append("<p>No privacy mechanism: theoretical ε = ∞.</p>")
        if _assumptions(m):
            out.append("<details><summary>Assumptions</summary><ul>"
                       + "".join(f"<li>{e(a)}</li>" for a in _assumptions(m)) + "</ul></details>")
        if m.attacks:
            out.append(_html_table(_ATTACK_HEAD, _model_rows(m)))
    out.append("</body></html>")
    return "\n".join(out)


def write_report(report: AuditReport, out_dir: str | Path) -> Path:
    """Write report.json, report.md, report.html and the PNG figures into ``out_dir`` (each atomically)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pngs: list[tuple[str, str, bytes]] = []
    for fig in figure_set(report):
        data = F.png_bytes(fig.make())  # type: ignore[arg-type]
        write_bytes(out / fig.file, data)
        pngs.append((fig.file, fig.caption, data))
    write_text(out / "report.md", to_markdown(report, [(f, c) for f, c, _ in pngs]))
    write_text(out / "report.html", to_html(report, pngs))
    payload = to_dict(report)
    payload["figures"] = [f for f, _, _ in pngs]
    write_text(out / "report.json", dumps_json(payload))
    return out

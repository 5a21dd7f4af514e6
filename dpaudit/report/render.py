"""Render an :class:`~dpaudit.report.schema.AuditReport` as Markdown and self-contained HTML, and write a
report directory (``report.json``, ``report.md``, ``report.html``, PNG figures), every file atomically."""

from __future__ import annotations

import base64
import html
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from dpaudit._io import dumps_json, write_bytes, write_text
from dpaudit.report import figures as F
from dpaudit.report.schema import AuditReport, ModelAudit

__all__ = ["to_markdown", "to_html", "write_report", "figure_set"]

_SEV = {"red": "RED FLAG", "warning": "WARNING", "info": "note"}


def _eps(x: float) -> str:
    return "∞" if not math.isfinite(x) else f"{x:.3g}"


@dataclass(frozen=True)
class _Figure:
    file: str
    caption: str
    make: Callable[[], object]


def figure_set(report: AuditReport) -> list[_Figure]:
    """The figures of a report (file name, caption, factory)."""
    ms = list(report.models)
    out = [
        _Figure("roc.png", "ROC of each attack (log-log; chance dotted).", lambda: F.roc_figure(ms)),
        _Figure("epsilon.png", "Theoretical epsilon (upper bound) vs best empirical lower bound per model.",
                lambda: F.epsilon_figure(ms)),
    ]
    if sum(m.noise is not None for m in ms) >= 2:
        out.append(_Figure("privacy_utility.png", "Utility and attack AUC across noise levels.",
                           lambda: F.privacy_utility_figure(ms)))
    for i, m in enumerate(ms):
        if len(m.per_party_epsilon) >= 2:
            out.append(_Figure(f"per_party_{i}.png", f"Epsilon per party: {m.name}.",
                               (lambda mm=m: F.per_party_figure(mm))))
    return out


def _model_rows(m: ModelAudit) -> list[list[str]]:
    rows = []
    for a in m.attacks:
        rows.append([
            a.attack, f"{a.auc:.3f}" + (f" [{a.auc_ci[0]:.3f}, {a.auc_ci[1]:.3f}]" if a.auc_ci else ""),
            " / ".join(f"{float(v):.3g}" for v in a.tpr_at_fpr.values()),
            f"{a.accuracy:.3f}", f"{a.precision:.3f}", f"{a.recall:.3f}", f"{a.f1:.3f}",
            f"{_eps(a.epsilon_lower)} ({a.confidence:g}, δ={a.delta:.0e})",
            f"{a.blind_auc:.3f} / {_eps(a.blind_epsilon_lower)}",
        ])
    return rows


_ATTACK_HEAD = ["attack", "AUC [95% CI]", "TPR @ FPR 0.1% / 1% / 10%", "acc", "prec", "rec", "F1",
                "empirical ε ≥ (conf., δ)", "blind AUC / ε ≥"]


def _md_table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _summary_rows(report: AuditReport) -> list[list[str]]:
    rows = []
    for m in report.models:
        best = m.best_empirical
        util = m.utility.get("test_accuracy")
        rows.append([
            m.name, m.method, f"{util:.3f}" if isinstance(util, (int, float)) else "–",
            _eps(m.theoretical_epsilon) + (f" (δ={m.theoretical_delta:.0e})" if m.theoretical_delta else ""),
            "–" if best is None else f"{_eps(best.epsilon_lower)} ({best.attack})",
            "–" if best is None else f"{max(a.auc for a in m.attacks):.3f}",
        ])
    return rows


_SUMMARY_HEAD = ["model", "method", "test accuracy", "theoretical ε", "empirical ε ≥ (best attack)", "best AUC"]


_CERTIFIED_HEAD = ["canary audit", "audit", "canaries / models", "score", "certified ε ≥", "ideal attack ε ≥",
                   "accounted ε", "kind"]


def _certified_rows(report: AuditReport) -> list[list[str]]:
    rows = []
    for c in report.certified:
        b, st = c.get("bound", {}), c.get("settings", {})
        num = lambda v: "–" if v is None else _eps(float(v))  # noqa: E731
        size = f"m = {st.get('canaries')}" if b.get("audit") == "one-run" else f"N = {st.get('models')}"
        rows.append([str(st.get("name", "–")), f"{b.get('audit')} ({st.get('canary')})", f"{size}, {b.get('trials')} trials",
                     str(b.get("score")), f"{num(b.get('epsilon'))} ({b.get('confidence')}, δ={float(b.get('delta', 0)):.0e})",
                     num(b.get("ideal_epsilon")), num(c.get("accounted_epsilon")), str(c.get("kind", b.get("kind")))])
    return rows


_CERTIFIED_TEXT = ("Certified canary audits of DP-SGD recipes: canaries are included by independent fair coins, so the "
                   "bound holds with the stated confidence (one-run: Steinke, Nasr, Jagielski 2023, Thm 3; multi-run: "
                   "Clopper-Pearson over independently trained models). The ideal-attack column is what the exact "
                   "likelihood-ratio test would certify with the same trials and rule.")


def to_markdown(report: AuditReport, figure_files: list[tuple[str, str]] | None = None) -> str:
    parts = [f"# {report.title}", ""]
    ds = report.dataset
    parts.append(f"Data set: **{ds.get('name', '?')}**, seed {report.seed}. {report.created_by}"
                 + (f", {report.elapsed_seconds:.0f} s." if report.elapsed_seconds else "."))
    parts += ["", "Theoretical ε is what the accountant proves (an upper bound on the privacy loss, under the stated "
              "assumptions). Empirical ε is what an attack demonstrates (a lower bound holding with the stated "
              "confidence). A sound release has empirical ≤ theoretical; the gap is what the attacks could not show.", ""]
    parts += ["## Summary", "", _md_table(_SUMMARY_HEAD, _summary_rows(report)), ""]
    if report.certified:
        parts += ["## Certified canary audits", "", _CERTIFIED_TEXT, "", _md_table(_CERTIFIED_HEAD, _certified_rows(report)), ""]
    if report.flags:
        parts += ["## Red flags and warnings", ""]
        for f in report.flags:
            parts.append(f"- **{_SEV.get(f.severity, f.severity)}** ({f.model}, `{f.code}`): {f.message}")
        parts.append("")
    for m in report.models:
        parts += [f"## {m.name}", ""]
        parts.append(f"Method `{m.method}`, release `{m.release}`; utility: "
                     + ", ".join(f"{k} = {v:.4g}" if isinstance(v, (int, float)) else f"{k} = {v}" for k, v in m.utility.items()))
        parts.append("")
        if m.theoretical is not None:
            parts.append("| figure | ε | δ | method | order |")
            parts.append("|---|---|---|---|---|")
            for s in m.theoretical.get("statements", []):
                e = s["epsilon"]
                e = float(e) if isinstance(e, str) else e
                parts.append(f"| {s.get('label') or '–'} | {_eps(e)} | {s['delta']:.0e} | {s['method']} | {s.get('order') or '–'} |")
            parts.append("")
        else:
            parts += ["No privacy mechanism: theoretical ε = ∞.", ""]
        assumptions = list(dict.fromkeys(list(m.assumptions) + [a for s in (m.theoretical or {}).get("statements", []) for a in s.get("assumptions", [])]))
        if assumptions:
            parts.append("Assumptions:")
            parts += [f"- {a}" for a in assumptions]
            parts.append("")
        if m.attacks:
            parts += [_md_table(_ATTACK_HEAD, _model_rows(m)), ""]
    if figure_files:
        parts += ["## Figures", ""]
        for file, caption in figure_files:
            parts += [f"![{caption}]({file})", "", f"*{caption}*", ""]
    return "\n".join(parts).rstrip() + "\n"


_CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.6em 0;font-size:.9em}th,td{border:1px solid #ccc;padding:.25em .5em;text-align:left}
th{background:#f2f2f2}.red{background:#fde2e1;border-left:5px solid #c0392b;padding:.4em .8em;margin:.4em 0}
.warning{background:#fff4d6;border-left:5px solid #e0a100;padding:.4em .8em;margin:.4em 0}
.info{background:#eef3fb;border-left:5px solid #4c72b0;padding:.4em .8em;margin:.4em 0}figure{margin:1em 0}
img{max-width:100%}figcaption{font-size:.85em;color:#555}"""


def _html_table(head: list[str], rows: list[list[str]]) -> str:
    h = "".join(f"<th>{html.escape(c)}</th>" for c in head)
    b = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{h}</tr></thead><tbody>{b}</tbody></table>"


def to_html(report: AuditReport, figures_png: list[tuple[str, str, bytes]] | None = None) -> str:
    """Self-contained HTML: figures embedded as base64 PNG."""
    e = html.escape
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{e(report.title)}</title><style>{_CSS}</style></head><body>",
           f"<h1>{e(report.title)}</h1>",
           f"<p>Data set <b>{e(str(report.dataset.get('name', '?')))}</b>, seed {report.seed}. {e(report.created_by)}</p>",
           "<p>Theoretical ε: what the accountant proves (upper bound, under the stated assumptions). Empirical ε: what an "
           "attack demonstrates (lower bound at the stated confidence). Sound: empirical ≤ theoretical.</p>",
           "<h2>Summary</h2>", _html_table(_SUMMARY_HEAD, _summary_rows(report))]
    if report.certified:
        out += ["<h2>Certified canary audits</h2>", f"<p>{e(_CERTIFIED_TEXT)}</p>",
                _html_table(_CERTIFIED_HEAD, _certified_rows(report))]
    if report.flags:
        out.append("<h2>Red flags and warnings</h2>")
        for f in report.flags:
            out.append(f"<div class='{e(f.severity)}'><b>{e(_SEV.get(f.severity, f.severity))}</b> "
                       f"({e(f.model)}, <code>{e(f.code)}</code>): {e(f.message)}</div>")
    for m in report.models:
        out.append(f"<h2>{e(m.name)}</h2><p>Method <code>{e(m.method)}</code>, release <code>{e(m.release)}</code></p>")
        if m.theoretical is not None:
            rows = []
            for s in m.theoretical.get("statements", []):
                ev = s["epsilon"]
                ev = float(ev) if isinstance(ev, str) else ev
                rows.append([s.get("label") or "–", _eps(ev), f"{s['delta']:.0e}", s["method"], str(s.get("order") or "–")])
            out.append(_html_table(["figure", "ε", "δ", "method", "order"], rows))
            assumptions = list(dict.fromkeys(list(m.assumptions) + [a for s in m.theoretical.get("statements", []) for a in s.get("assumptions", [])]))
        else:
            out.append("<p>No privacy mechanism: theoretical ε = ∞.</p>")
            assumptions = list(m.assumptions)
        if assumptions:
            out.append("<ul>" + "".join(f"<li>{e(a)}</li>" for a in assumptions) + "</ul>")
        if m.attacks:
            out.append(_html_table(_ATTACK_HEAD, _model_rows(m)))
    if figures_png:
        out.append("<h2>Figures</h2>")
        for _, caption, data in figures_png:
            b64 = base64.b64encode(data).decode("ascii")
            out.append(f"<figure><img alt='{e(caption)}' src='data:image/png;base64,{b64}'><figcaption>{e(caption)}</figcaption></figure>")
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
    payload = report.to_dict()
    payload["figures"] = [f for f, _, _ in pngs]
    write_text(out / "report.json", dumps_json(payload))
    return out

"""The files of an attack run beyond ``attack.json``: the comparison of the reference-model attacks
(``comparison.json`` / ``.md``, ``roc_compare.png``) and the per-record risk report (``per_record.csv`` / ``.json`` /
``.md``, ``per_record_hist.png`` and, for image data sets, ``per_record_grid.png``).

Every figure here is an **estimate** on one target model (records are coupled through the model): the tables say
so, and the per-record ranks are exposures under one draw of the training randomness, not per-record guarantees.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from dpaudit._escape import Md, csv_row, md, md_bold, md_bullet, md_document, md_heading, md_image, md_table, md_text
from dpaudit._io import atomic_path, dumps_json, write_text
from dpaudit.attacks.compare import AttackComparison
from dpaudit.attacks.per_record import PerRecordSummary, RecordScores, per_record_columns, summarise_records
from dpaudit.attacks.plots import record_grid, roc_figure, score_histogram
from dpaudit.attacks.results import ESTIMATE_CAVEAT, AttackResult
from dpaudit.serial import to_dict

__all__ = ["comparison_rows", "comparison_markdown", "comparison_text", "per_record_markdown", "write_per_record",
           "write_comparison"]

_FPRS = (0.001, 0.01)


def _iv(value: float, r: AttackResult, key: str) -> str:
    iv = r.metrics.intervals.get(key)
    return f"{value:.3f}" + (f" [{iv.low:.3f}, {iv.high:.3f}]" if iv is not None else "")


def comparison_rows(comp: AttackComparison) -> tuple[list[str], list[list[str]]]:
    """Head and rows of the comparison table: attack, AUC, TPR at 0.1% and 1% FPR (each with its bootstrap interval
    when computed) and the empirical epsilon (an estimate, median over split seeds)."""
    conf = comp.settings.get("confidence", 0.95)
    head = ["attack", f"AUC [{conf:.0%} CI]", "TPR @ 0.1% FPR [CI]", "TPR @ 1% FPR [CI]", "empirical ε (estimate)"]
    rows = []
    for name, r in comp.results.items():
        m = r.metrics
        rows.append([name, _iv(m.auc, r, "auc"), _iv(m.tpr_at(0.001), r, "tpr@0.001"), _iv(m.tpr_at(0.01), r, "tpr@0.01"),
                     f"≈ {r.bound.epsilon:.3g} [{r.bound.split_low:.3g}, {r.bound.split_high:.3g}]"])
    for name, why in comp.skipped.items():
        rows.append([name, "—", "—", "—", f"not run: {why}"])
    return head, rows


def _setting_line(comp: AttackComparison) -> str:
    s = comp.settings
    parts = [f"{s.get('num_references')} reference models ({s.get('layout')} layout)",
             f"{s.get('num_members')} members and {s.get('num_nonmembers')} non-members evaluated",
             f"population {s.get('population')} records", f"gamma {s.get('gamma')}"]
    if "reference_train_size" in s:
        parts.append(f"reference training sets ~{s['reference_train_size']} records (target {s.get('target_train_size')})")
    parts.append(f"seed {s.get('seed')}")
    return "; ".join(parts) + "."


def comparison_markdown(comp: AttackComparison, *, title: str = "Reference-model attacks side by side",
                        roc_png: str | None = "roc_compare.png") -> str:
    """The comparison as Markdown: the table, the settings, the offline ``a`` fit, the notes and the ROC figure
    (every line an :class:`~dpaudit._escape.Md` fragment: names and notes are literal text)."""
    head, rows = comparison_rows(comp)
    out = [md_heading(1, title), Md(""), md_text(_setting_line(comp)), Md(""),
           md_text(f"Every figure is an {ESTIMATE_CAVEAT}; intervals are stratified bootstrap percentiles "
                   f"({comp.settings.get('n_bootstrap')} replicates). TPR at FPR is read conservatively (the best "
                   "threshold whose empirical FPR does not exceed the level); with n non-members, an FPR below 1/n is "
                   "not resolvable."),
           Md(""), md_table(head, rows), Md("")]
    if comp.offline_a is not None:
        f = comp.offline_a
        curve = ", ".join(f"{g:g}: {v:.3f}" for g, v in zip(f.grid, f.auc))
        out += [md_text(f"Offline RMIA's a = {f.a:g}, fitted on the reference models alone ({f.pseudo_targets} "
                        f"reference model(s) attacked in turn with the others as OUT references, {f.num_records} "
                        f"records; mean AUC by a: {curve})."), Md("")]
    out += [md_bullet(n) for n in comp.notes]
    if roc_png:
        out += [Md(""), md_image("ROC of every attack (log-log; shaded: bootstrap band; curves stop at FPR = 1/n).", roc_png)]
    return md_document(out)


def comparison_text(comp: AttackComparison) -> str:
    """The comparison table for a terminal (aligned columns) with the settings line."""
    head, rows = comparison_rows(comp)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    out = [line(head), line(["-" * w for w in widths])] + [line(r) for r in rows]
    out += [_setting_line(comp), f"empirical figures: {ESTIMATE_CAVEAT}."]
    if comp.offline_a is not None:
        out.append(f"offline RMIA a = {comp.offline_a.a:g} (fitted on the reference models).")
    return "\n".join(out)


def _pct(x: float) -> str:
    return "—" if math.isnan(x) else f"{100 * x:.0f}%"


_WHY_PRIMARY = (", the strongest attack run on these records (the largest TPR at the lowest FPR, then at the next "
                "FPR, then the largest AUC)")


def per_record_markdown(summary: PerRecordSummary, *, hist_png: str | None = "per_record_hist.png",
                        grid_png: str | None = None, attacks: int = 1) -> str:
    """The per-record section: who is most exposed, how concentrated the true positives are, the figures (every
    line an :class:`~dpaudit._escape.Md` fragment). ``attacks``: how many attacks scored the records (more than one:
    the ranking attack is the strongest, :func:`dpaudit.attacks.compare.strongest_attack`)."""
    out = [md_heading(1, "Per-record membership risk"), Md(""),
           md("Records ranked by the score of ", md_bold(summary.primary), _WHY_PRIMARY if attacks > 1 else "",
              f" (rank 1 = most exposed; equal scores share a rank) over {summary.num_records} evaluated records "
              f"({summary.num_members} members). Each figure is one record under one target model -- an estimate "
              f"({ESTIMATE_CAVEAT.split(': ', 1)[-1]}), not a per-record guarantee. Every record's scores, "
              "p-values / likelihood ratios and ranks are in per_record.csv."), Md("")]
    if summary.shares:
        out += [md_heading(2, "How concentrated the leakage is"), Md("")]
        for s in summary.shares:
            out.append(md_bullet(f"At FPR {s.fpr:g}: TPR {s.tpr:.3f} ({s.true_positives} members flagged); the top "
                                 f"{s.top_fraction:.0%} of records ({s.num_top}) hold {s.top_true_positives} of them "
                                 f"(TPR {s.tpr_top:.3f}, {_pct(s.share)} of the true positives)."))
        out.append(Md(""))
    stat = next((t.statistic_name for t in summary.top if t.statistic_name), "")
    out += [md_heading(2, f"Top {len(summary.top)} most exposed records"), Md("")]
    head = ["rank", "record", "label", "member", "score"] + ([stat] if stat else [])
    rows = [[str(t.rank), str(t.record), str(t.label), "yes" if t.member else "no", f"{t.score:.4g}"]
            + ([f"{t.statistic:.3g}"] if stat else []) for t in summary.top]
    out += [md_table(head, rows), Md("")]
    if hist_png:
        out += [md_image(f"Histogram of the per-record scores of {summary.primary}, members vs non-members.", hist_png), Md("")]
    if grid_png:
        out += [md_image("The most exposed records (rank, label, member or not).", grid_png), Md("")]
    return md_document(out)


def _csv_text(rs: RecordScores) -> str:
    names, cols = per_record_columns(rs)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(csv_row(names))          # column names carry attack names: no formula, no control character
    conv = [(lambda v: repr(float(v))) if np.issubdtype(c.dtype, np.floating) else (lambda v: str(int(v))) for c in cols]
    for i in range(len(rs)):
        w.writerow([f(c[i]) for f, c in zip(conv, cols)])   # numbers only
    return buf.getvalue()


def _save(fig, path: Path) -> Path:
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    return path


def write_per_record(out: str | Path, records: RecordScores, *,
                     images_of: Callable[[np.ndarray], np.ndarray | None] | None = None, top: int = 20) -> list[Path]:
    """Write ``per_record.csv`` (every record), ``per_record.json`` (the summary), ``per_record.md``,
    ``per_record_hist.png`` and, when ``images_of(record indices)`` returns images, ``per_record_grid.png``."""
    out = Path(out)
    summary = summarise_records(records, top=top)
    paths = [write_text(out / "per_record.csv", _csv_text(records)),
             write_text(out / "per_record.json", dumps_json({"schema": 1, **to_dict(summary)}))]
    s = records.scores[records.primary]
    paths.append(_save(score_histogram(s[records.member], s[~records.member],
                                       title=f"Per-record scores: {records.primary}"), out / "per_record_hist.png"))
    grid = None
    imgs = images_of(np.array([t.record for t in summary.top])) if images_of is not None else None
    if imgs is not None and len(imgs):
        caps = [f"#{t.rank} y={t.label} {'IN' if t.member else 'out'}" for t in summary.top]
        paths.append(_save(record_grid(imgs, caps, title=f"Most exposed records ({records.primary})"),
                           out / "per_record_grid.png"))
        grid = "per_record_grid.png"
    paths.append(write_text(out / "per_record.md", per_record_markdown(summary, grid_png=grid, attacks=len(records.scores))))
    return paths


def write_comparison(out: str | Path, comp: AttackComparison, *, title: str = "Reference-model attacks side by side",
                     images_of: Callable[[np.ndarray], np.ndarray | None] | None = None,
                     extra: dict | None = None) -> list[Path]:
    """Write ``comparison.json`` (``extra`` fields first, then :func:`dpaudit.serial.to_dict` of the comparison without
    the per-record scores), ``comparison.md``, ``roc_compare.png`` and, when the comparison kept every record's scores,
    the per-record files (the scores go to ``per_record.csv``, not into ``comparison.json`` a second time)."""
    out = Path(out)
    paths = [write_text(out / "comparison.json", dumps_json({**(extra or {}), **to_dict(replace(comp, records=None))})),
             _save(roc_figure(list(comp.results.values()), title="Reference-model attacks (same references)"),
                   out / "roc_compare.png"),
             write_text(out / "comparison.md", comparison_markdown(comp, title=title))]
    if comp.records is not None:
        paths += write_per_record(out, comp.records, images_of=images_of)
    return paths

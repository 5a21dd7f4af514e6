"""Report figures. Each function returns a matplotlib ``Figure`` (no pyplot state); saving is separate
(:func:`save_png`, :func:`png_bytes`).

What a reader must be able to trust: infinite epsilons are drawn as an off-scale marker with their label (never
as a finite bar), a zero bound is a visible marker with its value, every axis is labelled (accuracy and AUC on
separate axes), legends sit outside the plotted data, and ROC curves come from the one ROC routine
(:func:`dpaudit.attacks.plots.draw_roc`: stopped at FPR = 1/n, with the bootstrap band).
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")  # headless: reports are written to files
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from dpaudit._io import write_bytes  # noqa: E402
from dpaudit.attacks.plots import roc_panels  # noqa: E402
from dpaudit.report.schema import ModelAudit  # noqa: E402

__all__ = ["roc_figure", "epsilon_figure", "privacy_utility_figure", "per_party_figure", "save_png", "png_bytes"]

_BLUE, _RED, _ORANGE, _GREY = "#4c72b0", "#c44e52", "#dd8452", "#555555"


def _attack_names(models: Sequence[ModelAudit]) -> list[str]:
    names: list[str] = []
    for m in models:
        for a in m.attacks:
            if a.attack not in names:
                names.append(a.attack)
    return names


def roc_figure(models: Sequence[ModelAudit]) -> Figure:
    """Log-log ROC curves: one panel per attack, one curve per model (bootstrap band shaded), each stopped at
    its smallest resolvable FPR; chance dotted. Log scales show the low-FPR regime that matters for
    membership inference (Carlini et al. 2022)."""
    panels = []
    for attack in _attack_names(models):
        curves = []
        for m in models:
            for a in m.attacks:
                if a.attack == attack and a.roc_fpr:
                    curves.append({"fpr": a.roc_fpr, "tpr": a.roc_tpr, "num_nonmembers": a.num_nonmembers or 1,
                                   "label": f"{m.name} (AUC {a.auc:.3f})", "band": a.roc_band})
        panels.append((f"{attack} attack", curves))
    return roc_panels(panels)


def _offscale(ax: Any, x: float, top: float, label: str, color: str) -> None:
    """An upward marker at the top edge of the axis with its label: a value off the scale (infinity)."""
    ax.plot([x], [top], marker="^", ms=10, color=color, clip_on=False, zorder=5)
    ax.annotate(label, (x, top), xytext=(8, -4), textcoords="offset points", ha="left", va="top",
                fontsize=7, color=color, annotation_clip=False)


def _number(v: Any) -> float | None:
    """A figure from a written audit (``"inf"`` strings included) as a float; None for none."""
    if v is None:
        return None
    return float(v) if not isinstance(v, str) else float(v.replace("∞", "inf"))


def _audit_groups(certified: Sequence[Mapping[str, Any]], method_audits: Sequence[Mapping[str, Any]]) -> list[dict]:
    """One group per certified audit of the report: its name, the accounted epsilon it is compared with, the
    certified bound, the ideal attack's figure and (method audits) the paper's claim."""
    groups = []
    for c in certified:
        b, st = c.get("bound", {}), c.get("settings", {})
        groups.append({"name": f"{st.get('name') or st.get('target') or 'recipe'}\n(canary audit, {b.get('audit')})",
                       "accounted": _number(c.get("accounted_epsilon")), "bound": _number(b.get("epsilon")),
                       "kind": c.get("kind", b.get("kind", "certified")), "ideal": _number(b.get("ideal_epsilon")),
                       "claim": None})
    for c in method_audits:
        b = c.get("bound", {})
        groups.append({"name": f"{c.get('name') or c.get('method')}\n(method audit, whole run)",
                       "accounted": _number(c.get("accounted_epsilon")), "bound": _number(b.get("epsilon")),
                       "kind": c.get("kind", b.get("kind", "certified")), "ideal": _number(b.get("ideal_epsilon")),
                       "claim": _number(c.get("claimed_epsilon"))})
    return groups


def epsilon_figure(models: Sequence[ModelAudit], certified: Sequence[Mapping[str, Any]] = (),
                   method_audits: Sequence[Mapping[str, Any]] = ()) -> Figure:
    """Accounted epsilon (upper bound) beside the strongest empirical figure, per model, and beside them the
    certified audits of the report (``certified``: canary audits of DP-SGD recipes; ``method_audits``: audits of
    methods' whole training runs; as written in ``report.json``), each with the accounted epsilon it is compared
    with, the ideal attack's figure and the paper's claim (symlog scale).

    Every empirical figure says its kind, in its label and its look: certified bounds are solid bars labelled
    "≥ x (certified)", estimates hatched with their split-seed range as an error bar and labelled "≈ x (estimate)";
    a model on which no attack found anything is a hollow marker "0 (none found)", never a certified 0. Infinite
    accounted epsilons are an off-scale marker labelled "∞ (no mechanism)" or, for a mechanism whose bound does not
    cover the release, "∞ (not established)"; a claim without an accounting of its own is a dashed red tick.
    """
    groups = _audit_groups(certified, method_audits)
    n = len(models) + len(groups)
    fig = Figure(figsize=(max(7.5, 1.5 * n + 2.5), 4.8), layout="constrained")  # room for the legend
    ax = fig.add_subplot()
    x = np.arange(len(models))
    theo = np.array([m.theoretical_epsilon for m in models], dtype=float)
    best = [m.best_empirical for m in models]
    emp = np.array([b.epsilon_lower if b else 0.0 for b in best], dtype=float)
    finite = [float(t) for t in theo if math.isfinite(t)]
    finite += [float(v) for g in groups for v in (g["accounted"], g["bound"], g["ideal"], g["claim"])
               if v is not None and math.isfinite(v)]
    highs = [b.epsilon_range[1] for b in best if b is not None and b.epsilon_range is not None]
    top = max([2.0, *(f * 3.0 for f in finite), *(e * 3.0 for e in emp), *(h * 3.0 for h in highs)])
    w = 0.38
    for i, t in enumerate(theo):
        if math.isfinite(t):
            ax.bar(x[i] - w / 2, t, w, color=_BLUE)
            ax.annotate(f"{t:.3g}", (x[i] - w / 2, t), xytext=(0, 2), textcoords="offset points", ha="center",
                        va="bottom", fontsize=7)
        else:
            why = "no\nmechanism" if models[i].is_reference else "not\nestablished"
            _offscale(ax, x[i] - w / 2, top, f"∞ ({why})", _RED)
    for i, b in enumerate(best):
        xe = x[i] + w / 2
        if b is None:   # no attack found anything: the attacks on one model are estimates, so no certified 0
            ax.plot([xe], [0.0], marker="o", ms=6, mfc="white", mec=_ORANGE, clip_on=False, zorder=5)
            ax.annotate("0 (none found)", (xe, 0.0), xytext=(0, 5), textcoords="offset points", ha="center",
                        va="bottom", fontsize=7)
            continue
        _empirical_bar(ax, xe, b.epsilon_lower, w, b.certified)
        if not b.certified and b.epsilon_range is not None:
            lo, hi = b.epsilon_range
            ax.errorbar([xe], [b.epsilon_lower], yerr=[[b.epsilon_lower - lo], [hi - b.epsilon_lower]], fmt="none",
                        ecolor=_GREY, capsize=3, lw=1)
    for j, g in enumerate(groups):
        xg = len(models) + j
        acc = g["accounted"]
        if acc is None or not math.isfinite(acc):
            _offscale(ax, xg - w / 2, top, "∞ (not\nestablished)" if acc is not None else "no\naccounting", _RED)
        else:
            ax.bar(xg - w / 2, acc, w, color=_BLUE)
            ax.annotate(f"{acc:.3g}", (xg - w / 2, acc), xytext=(0, 2), textcoords="offset points", ha="center",
                        va="bottom", fontsize=7)
        if g["bound"] is not None:
            _empirical_bar(ax, xg + w / 2, g["bound"], w, g["kind"] == "certified")
        if g["ideal"] is not None and math.isfinite(g["ideal"]):
            ax.plot([xg + w / 2], [g["ideal"]], marker="D", ms=5, color=_GREY, zorder=6)
        if g["claim"] is not None and math.isfinite(g["claim"]):
            ax.hlines(g["claim"], xg - w, xg + w, colors=_RED, linestyles="--", lw=1.4, zorder=6)
            ax.annotate(f"claim {g['claim']:.3g}", (xg - w, g["claim"]), xytext=(-2, 0), textcoords="offset points",
                        ha="right", va="center", fontsize=7, color=_RED)
    if groups:
        ax.axvline(len(models) - 0.5, color=_GREY, lw=0.8, ls=":")
    ax.set_xticks(np.arange(n))
    ax.set_xticklabels([m.name for m in models] + [g["name"] for g in groups], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("epsilon (symlog scale)")
    ax.set_yscale("symlog", linthresh=1.0)
    ax.set_ylim(0, top)
    ax.set_title("accounted vs measured privacy loss" + (" (right of the dotted line: certified audits)" if groups else ""))
    handles = [Patch(color=_BLUE, label="accounted epsilon (upper bound)"),
               Patch(facecolor="white", edgecolor=_ORANGE, hatch="///",
                     label="empirical estimate (not certified; bar: range over split seeds)"),
               Patch(color=_ORANGE, label="empirical certified lower bound (canary / method audits, independent trials)"),
               Patch(color=_RED, label="▲ off scale: epsilon = ∞ (no mechanism, or no guarantee established)")]
    if groups:
        from matplotlib.lines import Line2D

        handles += [Line2D([], [], marker="D", ls="", color=_GREY, label="ideal attack at the same trials (reference)"),
                    Line2D([], [], ls="--", color=_RED, label="the paper's claimed epsilon")]
    ax.legend(handles=handles, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2, frameon=False)
    return fig


def _empirical_bar(ax: Any, x: float, value: float, width: float, certified: bool) -> None:
    """An empirical figure: a solid bar "≥ x (certified)" or a hatched one "≈ x (estimate)"."""
    ax.bar(x, value, width, color=_ORANGE if certified else "white", edgecolor=_ORANGE,
           hatch=None if certified else "///")
    label = f"≥ {value:.3g} (certified)" if certified else f"≈ {value:.3g} (estimate)"
    ax.annotate(label, (x, value), xytext=(6, 2), textcoords="offset points", ha="left", va="bottom", fontsize=7)


def privacy_utility_figure(models: Sequence[ModelAudit], utility_key: str = "test_accuracy") -> Figure:
    """Test accuracy (left axis) and the strongest attack's AUC (right axis) against the privacy knob
    (``ModelAudit.noise``); the non-private reference's accuracy as a dotted line."""
    pts = sorted((m for m in models if m.noise is not None and utility_key in m.utility),
                 key=lambda m: m.noise)  # type: ignore[arg-type,return-value]
    fig = Figure(figsize=(6.0, 4.6), layout="constrained")
    ax = fig.add_subplot()
    ax2 = ax.twinx()
    handles = []
    if pts:
        xs = [m.noise for m in pts]
        handles += ax.plot(xs, [m.utility[utility_key] for m in pts], "o-", color=_BLUE,
                           label=utility_key.replace("_", " ") + " (left axis)")
        strongest = [m.strongest_attack for m in pts]
        if all(s is not None for s in strongest):
            handles += ax2.plot(xs, [s.auc for s in strongest], "s--", color=_ORANGE,  # type: ignore[union-attr]
                                label="strongest attack AUC (right axis)")
        for i, m in enumerate(pts):
            e = m.theoretical_epsilon
            last = i == len(pts) - 1          # the rightmost label goes left of its point, inside the axes
            ax.annotate("ε=∞" if not math.isfinite(e) else f"ε={e:.3g}", (m.noise, m.utility[utility_key]),
                        textcoords="offset points", xytext=(-4 if last else 4, 6), ha="right" if last else "left",
                        fontsize=7)
        ax.set_xscale("log")
        ax.set_xlabel(pts[0].noise_label or "privacy parameter")
    else:
        ax.set_xlabel("privacy parameter")
    ax.set_ylim(0, 1.02)
    ax.set_ylabel(utility_key.replace("_", " "), color=_BLUE)
    ax2.set_ylim(0.4, 1.02)
    ax2.set_ylabel("attack AUC (0.5 = chance)", color=_ORANGE)
    ax2.axhline(0.5, color=_ORANGE, ls=":", lw=0.8)
    ax.set_title("privacy-utility trade-off")
    for ref in [m for m in models if m.is_reference and utility_key in m.utility]:
        handles.append(ax.axhline(ref.utility[utility_key], color="grey", ls=":", lw=1,
                                  label=f"{ref.name}: {utility_key.replace('_', ' ')} (no mechanism)"))
    if handles:
        ax.legend(handles=handles, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1, frameon=False)
    return fig


def per_party_figure(model: ModelAudit) -> Figure:
    """Epsilon per client/party of one model's ledger (infinite ones as off-scale markers)."""
    items = sorted(model.per_party_epsilon.items(), key=lambda kv: kv[0])
    fig = Figure(figsize=(max(4.5, 0.35 * len(items) + 2), 3.8), layout="constrained")
    ax = fig.add_subplot()
    vals = np.array([v for _, v in items], dtype=float)
    fin = vals[np.isfinite(vals)]
    ax.bar(range(len(items)), np.where(np.isfinite(vals), vals, 0.0), color=_BLUE)
    top = float(fin.max()) * 1.3 if fin.size and fin.max() > 0 else 1.0
    claimed = (model.claim or {}).get("epsilon")
    if isinstance(claimed, (int, float)) and math.isfinite(claimed):
        top = max(top, float(claimed) * 1.3)
        ax.axhline(float(claimed), color=_RED, ls="--", lw=1.2, label=f"claimed epsilon = {float(claimed):.3g}")
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.3), frameon=False)
    ax.set_ylim(0, top)
    for i, v in enumerate(vals):
        if not math.isfinite(v):
            _offscale(ax, i, top, "∞", _RED)
    ax.set_xticks(range(len(items)))
    ax.set_xticklabels([k for k, _ in items], rotation=60, fontsize=6)
    ax.set_xlabel("party")
    ax.set_ylabel("epsilon")
    ax.set_title(f"{model.name}: epsilon per party")
    return fig


def png_bytes(fig: Figure, dpi: int = 110) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def save_png(fig: Figure, path: str | Path, dpi: int = 110) -> Path:
    """Write ``fig`` as PNG atomically."""
    return write_bytes(path, png_bytes(fig, dpi))

"""Report figures. Each function returns a matplotlib Figure; saving is separate (:func:`save_png`)."""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")  # headless: reports are written to files
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from dpaudit._io import write_bytes  # noqa: E402
from dpaudit.report.schema import ModelAudit  # noqa: E402

__all__ = ["roc_figure", "epsilon_figure", "privacy_utility_figure", "per_party_figure", "save_png", "png_bytes"]


def _attack_names(models: Sequence[ModelAudit]) -> list[str]:
    names: list[str] = []
    for m in models:
        for a in m.attacks:
            if a.attack not in names:
                names.append(a.attack)
    return names


def roc_figure(models: Sequence[ModelAudit]) -> Figure:
    """Log-log ROC curves: one panel per attack, one curve per model, the chance diagonal dotted.

    Log scales show the low-FPR regime that matters for membership inference (Carlini et al. 2022).
    """
    names = _attack_names(models)
    n = max(1, len(names))
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.8), squeeze=False)
    floor = 1e-4
    for ax, attack in zip(axes[0], names or ["(no attack)"]):
        for m in models:
            for a in m.attacks:
                if a.attack != attack or not a.roc_fpr:
                    continue
                fpr = np.clip(np.asarray(a.roc_fpr, dtype=float), floor, 1.0)
                tpr = np.clip(np.asarray(a.roc_tpr, dtype=float), floor, 1.0)
                ax.plot(fpr, tpr, label=f"{m.name} (AUC {a.auc:.2f})", lw=1.4)
        grid = np.logspace(math.log10(floor), 0, 50)
        ax.plot(grid, grid, ls=":", color="grey", lw=1, label="chance")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(floor, 1)
        ax.set_ylim(floor, 1)
        ax.set_xlabel("false positive rate")
        ax.set_ylabel("true positive rate")
        ax.set_title(f"{attack} attack")
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def epsilon_figure(models: Sequence[ModelAudit]) -> Figure:
    """Theoretical epsilon (accounted upper bound) beside the best empirical lower bound, per model.

    Infinite theoretical epsilons (no mechanism) are drawn as an arrow at the top of the axis.
    """
    from matplotlib.patches import Patch

    fig, ax = plt.subplots(figsize=(max(5.0, 1.3 * len(models) + 2), 3.8))
    x = np.arange(len(models))
    theo = np.array([m.theoretical_epsilon for m in models], dtype=float)
    emp = np.array([(m.best_empirical.epsilon_lower if m.best_empirical else 0.0) for m in models], dtype=float)
    finite = theo[np.isfinite(theo)]
    top = max([1.0, *(finite * 2.0), *(emp * 2.0)])
    w = 0.38
    colours = {"theory": "#4c72b0", "inf": "#c44e52", "emp": "#dd8452"}
    ax.bar(x - w / 2, np.where(np.isfinite(theo), theo, top), w,
           color=[colours["theory"] if np.isfinite(t) else colours["inf"] for t in theo])
    ax.bar(x + w / 2, emp, w, color=colours["emp"])
    for i, t in enumerate(theo):
        ax.text(x[i] - w / 2, t if np.isfinite(t) else top, "∞" if not np.isfinite(t) else f"{t:.3g}",
                ha="center", va="bottom", fontsize=7)
        ax.text(x[i] + w / 2, emp[i], f"{emp[i]:.2g}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x)
    ax.set_xticklabels([m.name for m in models], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("epsilon (symlog scale)")
    ax.set_yscale("symlog", linthresh=1.0)
    ax.set_ylim(0, top * 1.5)
    ax.set_title("accounted vs measured privacy loss")
    ax.legend(handles=[Patch(color=colours["theory"], label="theoretical epsilon (upper bound)"),
                       Patch(color=colours["inf"], label="no guarantee (epsilon = ∞)"),
                       Patch(color=colours["emp"], label="empirical epsilon (lower bound)")], fontsize=7)
    fig.tight_layout()
    return fig


def privacy_utility_figure(models: Sequence[ModelAudit], utility_key: str = "test_accuracy") -> Figure:
    """Utility and attack AUC against the privacy knob (``ModelAudit.noise``) across noise levels."""
    pts = [m for m in models if m.noise is not None and utility_key in m.utility]
    fig, ax = plt.subplots(figsize=(5.2, 3.8))
    if pts:
        pts = sorted(pts, key=lambda m: m.noise)  # type: ignore[arg-type,return-value]
        xs = [m.noise for m in pts]
        ax.plot(xs, [m.utility[utility_key] for m in pts], "o-", label=utility_key.replace("_", " "))
        best = [m.best_empirical for m in pts]
        if all(b is not None for b in best):
            ax.plot(xs, [b.auc for b in best], "s--", label="best attack AUC")  # type: ignore[union-attr]
        for m in pts:
            e = m.theoretical_epsilon
            ax.annotate("eps=inf" if not math.isfinite(e) else f"eps={e:.3g}", (m.noise, m.utility[utility_key]),
                        textcoords="offset points", xytext=(4, 6), fontsize=7)
        ax.set_xscale("log")
        ax.set_xlabel(pts[0].noise_label or "privacy parameter")
        ax.legend(fontsize=8)
    ax.set_ylim(0, 1.02)
    ax.set_title("privacy-utility trade-off")
    for nonpriv in [m for m in models if m.theoretical is None and utility_key in m.utility]:
        ax.axhline(nonpriv.utility[utility_key], color="grey", ls=":", lw=1)
        ax.text(ax.get_xlim()[0], nonpriv.utility[utility_key], f" {nonpriv.name}", fontsize=7, va="bottom", color="grey")
    fig.tight_layout()
    return fig


def per_party_figure(model: ModelAudit) -> Figure:
    """Epsilon per client/party of one model's ledger."""
    items = sorted(model.per_party_epsilon.items(), key=lambda kv: kv[0])
    fig, ax = plt.subplots(figsize=(max(4.5, 0.35 * len(items) + 2), 3.4))
    vals = [v if math.isfinite(v) else np.nan for _, v in items]
    ax.bar(range(len(items)), vals, color="#4c72b0")
    ax.set_xticks(range(len(items)))
    ax.set_xticklabels([k for k, _ in items], rotation=60, fontsize=6)
    claimed = (model.claim or {}).get("epsilon")
    if isinstance(claimed, (int, float)) and math.isfinite(claimed):
        ax.axhline(float(claimed), color="#c44e52", ls="--", lw=1.2, label=f"claimed epsilon = {float(claimed):.3g}")
        ax.legend(fontsize=7)
    ax.set_ylabel("epsilon")
    ax.set_title(f"{model.name}: epsilon per party")
    fig.tight_layout()
    return fig


def png_bytes(fig: Figure, dpi: int = 110) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    plt.close(fig)
    return buf.getvalue()


def save_png(fig: Figure, path: str | Path, dpi: int = 110) -> Path:
    """Write ``fig`` as PNG atomically and close it."""
    return write_bytes(path, png_bytes(fig, dpi))

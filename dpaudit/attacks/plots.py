"""Figures of attack results. Every function returns a matplotlib ``Figure``; saving is the caller's business
(``fig.savefig(path)``). The Agg backend is used through ``matplotlib.figure.Figure`` directly, so no display
is needed and no global pyplot state is touched."""

from __future__ import annotations

from typing import Sequence

import numpy as np
from matplotlib.figure import Figure

from dpaudit.attacks.results import AttackResult, RocCurve

__all__ = ["roc_figure", "score_histogram"]


def roc_figure(results: Sequence[AttackResult] | AttackResult, *, log: bool = True, title: str = "") -> Figure:
    """ROC curves of one or several attacks (e.g. the attack and its blind baseline), log-log by default as
    Carlini et al. 2022 recommend (the low-FPR region is where membership inference matters); the chance line
    TPR = FPR is drawn dashed. Zero rates are drawn at half the smallest non-zero rate on log axes."""
    if isinstance(results, AttackResult):
        results = [results]
    fig = Figure(figsize=(4.5, 4.2), layout="constrained")
    ax = fig.add_subplot()
    floor = 1.0
    for r in results:
        roc: RocCurve = r.roc
        label = f"{r.name} (AUC {r.metrics.auc:.3f})"
        ax.step(roc.fpr, roc.tpr, where="post", label=label)
        nz = np.concatenate([roc.fpr[roc.fpr > 0], roc.tpr[roc.tpr > 0]])
        if nz.size:
            floor = min(floor, float(nz.min()) / 2)
    ax.plot([floor, 1], [floor, 1], "k--", lw=0.8, label="chance")
    if log:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(floor, 1)
        ax.set_ylim(floor, 1)
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    ax.set_title(title or "Membership inference ROC")
    ax.legend(loc="lower right", fontsize="small")
    return fig


def score_histogram(member_scores, nonmember_scores, *, bins: int = 40, title: str = "") -> Figure:
    """Overlaid histograms of member and non-member scores (density), same bins."""
    pos = np.asarray(member_scores, dtype=float).ravel()
    neg = np.asarray(nonmember_scores, dtype=float).ravel()
    edges = np.histogram_bin_edges(np.concatenate([pos, neg]), bins=bins)
    fig = Figure(figsize=(4.5, 3.2), layout="constrained")
    ax = fig.add_subplot()
    ax.hist(neg, bins=edges, density=True, alpha=0.55, label=f"non-members (n={neg.size})")
    ax.hist(pos, bins=edges, density=True, alpha=0.55, label=f"members (n={pos.size})")
    ax.set_xlabel("attack score (larger = more likely member)")
    ax.set_ylabel("density")
    ax.set_title(title or "Attack scores")
    ax.legend(fontsize="small")
    return fig

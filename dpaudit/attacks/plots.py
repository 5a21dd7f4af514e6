"""Figures of attack results. Every function returns a matplotlib ``Figure``; saving is the caller's business
(``fig.savefig(path)``). The Agg backend is used through ``matplotlib.figure.Figure`` directly, so no display
is needed and no global pyplot state is touched.

:func:`draw_roc` is the one ROC drawing routine of dpaudit: ``dpaudit attack``'s ``roc.png`` and the audit
report's ROC panels both use it, so both show the same thing: the empirical curve only down to the smallest
resolvable FPR (1 / number of non-members; below it the data say nothing, and a log-log plot would otherwise
extrapolate a straight line), a vertical mark there, and the bootstrap band when one was computed.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from matplotlib.figure import Figure

from dpaudit.attacks.results import AttackResult

__all__ = ["draw_roc", "roc_figure", "roc_panels", "score_histogram", "record_grid"]


def draw_roc(ax: Any, fpr, tpr, *, num_nonmembers: int, label: str, band: Any = None, log: bool = True,
             color: Any = None) -> float:
    """Draw one ROC curve on ``ax`` and return its smallest resolvable FPR, ``1 / num_nonmembers``.

    ``fpr``/``tpr``: the empirical ROC vertices (from (0, 0) to (1, 1)). On log axes the curve is drawn as a
    step function from FPR = 1/n on (the vertices below it are not resolvable); ``band`` (anything with
    ``fpr``/``low``/``high``, e.g. :class:`~dpaudit.attacks.results.RocBand` or the report's dict) is shaded.
    """
    fpr = np.asarray(fpr, dtype=float)
    tpr = np.asarray(tpr, dtype=float)
    floor = 1.0 / max(int(num_nonmembers), 1)
    if log and fpr.size:
        keep = fpr >= floor
        # the TPR reachable at FPR = floor: the last vertex at or below it (conservative step)
        at_floor = float(tpr[fpr <= floor + 1e-15].max()) if np.any(fpr <= floor + 1e-15) else 0.0
        fpr = np.concatenate([[floor], fpr[keep]])
        tpr = np.concatenate([[at_floor], tpr[keep]])
    (line,) = ax.step(fpr, tpr, where="post", label=label, lw=1.4, color=color)
    if band is not None:
        bf = np.asarray(band["fpr"] if isinstance(band, dict) else band.fpr, dtype=float)
        lo = np.asarray(band["low"] if isinstance(band, dict) else band.low, dtype=float)
        hi = np.asarray(band["high"] if isinstance(band, dict) else band.high, dtype=float)
        if bf.size:
            ax.fill_between(bf, lo, hi, step="post", alpha=0.12, color=line.get_color(), lw=0)
    return floor


def _finish_roc_axes(ax: Any, floor: float, log: bool, title: str) -> None:
    grid = np.logspace(np.log10(floor), 0, 50) if log else np.linspace(0, 1, 2)
    ax.plot(grid, grid, ls=":", color="grey", lw=1, label="chance (TPR = FPR)")
    if log:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(floor, 1)
        ax.set_ylim(min(floor, 0.01), 1.02)
        ax.axvline(floor, color="grey", lw=0.6, ls="--")
        ax.annotate(f"FPR = 1/n = {floor:.2g}\n(smallest resolvable)", (floor, 1.0), xytext=(4, -4),
                    textcoords="offset points", fontsize=6, color="grey", va="top")
    ax.set_xlabel("false positive rate" + (" (log)" if log else ""))
    ax.set_ylabel("true positive rate" + (" (log)" if log else ""))
    ax.set_title(title)


def roc_figure(results: Sequence[AttackResult] | AttackResult, *, log: bool = True, title: str = "") -> Figure:
    """ROC curves of one or several attacks (e.g. the attack and its blind baseline), log-log by default as
    Carlini et al. 2022 recommend (the low-FPR region is where membership inference matters), each stopped at
    FPR = 1/n with its bootstrap band when the result has one (see :func:`draw_roc`); chance dotted."""
    if isinstance(results, AttackResult):
        results = [results]
    fig = Figure(figsize=(4.8, 4.4), layout="constrained")
    ax = fig.add_subplot()
    floor = 1.0
    for r in results:
        floor = min(floor, draw_roc(ax, r.roc.fpr, r.roc.tpr, num_nonmembers=r.metrics.num_nonmembers,
                                    label=f"{r.name} (AUC {r.metrics.auc:.3f})", band=r.roc_band, log=log))
    _finish_roc_axes(ax, floor, log, title or "Membership inference ROC")
    ax.legend(loc="lower right", fontsize="small")
    return fig


def roc_panels(panels: Sequence[tuple[str, Sequence[dict[str, Any]]]], *, log: bool = True) -> Figure:
    """One ROC panel per ``(title, curves)``; each curve a dict with ``fpr``, ``tpr``, ``num_nonmembers``,
    ``label`` and optionally ``band`` (see :func:`draw_roc`). Legends sit below each panel, off the curves."""
    n = max(1, len(panels))
    fig = Figure(figsize=(4.4 * n, 4.9), layout="constrained")
    axes = fig.subplots(1, n, squeeze=False)[0]
    for ax, (title, curves) in zip(axes, panels or [("(no attack)", [])]):
        floor = 1.0
        for c in curves:
            floor = min(floor, draw_roc(ax, c["fpr"], c["tpr"], num_nonmembers=c["num_nonmembers"],
                                        label=c["label"], band=c.get("band"), log=log))
        _finish_roc_axes(ax, floor if curves else 1e-3, log, title)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1, frameon=False)
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


def record_grid(images, captions: Sequence[str], *, columns: int = 10, title: str = "") -> Figure:
    """A grid of record images (n, H, W) or (n, C, H, W) (C = 1 or 3, channels first, any value range: each image is
    scaled to its own min..max), one caption under each (e.g. the exposure rank, label and membership)."""
    imgs = np.asarray(images, dtype=float)
    if imgs.ndim == 4:
        imgs = imgs[:, 0] if imgs.shape[1] == 1 else np.moveaxis(imgs[:, :3], 1, -1)
    n = len(imgs)
    cols = max(1, min(int(columns), n))
    rows = max(1, -(-n // cols))
    fig = Figure(figsize=(1.25 * cols, 1.45 * rows + (0.35 if title else 0.0)), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    for i, ax in enumerate(axes.ravel()):
        ax.set_axis_off()
        if i >= n:
            continue
        im = imgs[i]
        lo, hi = float(np.min(im)), float(np.max(im))
        im = (im - lo) / (hi - lo) if hi > lo else np.zeros_like(im)
        ax.imshow(im, cmap="gray_r" if im.ndim == 2 else None, interpolation="nearest")
        ax.set_title(captions[i] if i < len(captions) else "", fontsize=6)
    if title:
        fig.suptitle(title, fontsize=9)
    return fig

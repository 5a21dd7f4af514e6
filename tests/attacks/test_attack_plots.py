"""Plot functions return Figures (no pyplot state, no files) with the curves they claim to draw."""

from __future__ import annotations

import dataclasses

import numpy as np
from matplotlib.figure import Figure

from dpaudit.attacks.bounds import epsilon_lower_bound
from dpaudit.attacks.metrics import attack_metrics, roc_band, roc_curve
from dpaudit.attacks.plots import roc_figure, score_histogram
from dpaudit.attacks.results import AttackResult


def test_roc_and_histogram_figures():
    rng = np.random.default_rng(0)
    pos, neg = rng.normal(1, 1, 200), rng.normal(0, 1, 200)
    r = AttackResult("loss", attack_metrics(pos, neg, n_bootstrap=0), epsilon_lower_bound(pos, neg),
                     roc_curve(pos, neg))
    fig = roc_figure([r, r], log=True)
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and len(ax.lines) == 4           # two curves + chance + the FPR = 1/n mark
    # the curve stops at the smallest resolvable FPR, 1/n, instead of extrapolating below it
    assert ax.get_xlim()[0] == 1 / 200 and min(ax.lines[0].get_xdata()) == 1 / 200
    assert "AUC" in ax.get_legend().get_texts()[0].get_text()
    assert roc_figure(r, log=False).axes[0].get_xscale() == "linear"
    # with a bootstrap band, it is shaded
    band = roc_band(pos, neg, n_bootstrap=50, seed=0)
    assert band.fpr[0] == 1 / 200 and np.all(band.low <= band.tpr + 1e-12) and np.all(band.tpr <= band.high + 1e-12)
    banded = roc_figure(dataclasses.replace(r, roc_band=band))
    assert len(banded.axes[0].collections) == 1
    h = score_histogram(pos, neg)
    assert isinstance(h, Figure) and len(h.axes[0].patches) == 80

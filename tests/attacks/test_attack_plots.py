"""Plot functions return Figures (no pyplot state, no files) with the curves they claim to draw."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from dpaudit.attacks.bounds import epsilon_lower_bound
from dpaudit.attacks.metrics import attack_metrics, roc_curve
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
    assert ax.get_xscale() == "log" and len(ax.lines) == 3           # two curves + chance
    assert "AUC" in ax.get_legend().get_texts()[0].get_text()
    assert roc_figure(r, log=False).axes[0].get_xscale() == "linear"
    h = score_histogram(pos, neg)
    assert isinstance(h, Figure) and len(h.axes[0].patches) == 80

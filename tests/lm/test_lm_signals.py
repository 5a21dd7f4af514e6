"""The sequence-level signals against the papers' formulas written out here, on random token statistics."""

from __future__ import annotations

import numpy as np
import pytest

from dpaudit.attacks.lm_signals import compare_lm, lm_scores, reference_ratio_score
from dpaudit.attacks.metrics import auc
from dpaudit.errors import DataError


def _rows(rng, n):
    lens = rng.integers(3, 12, size=n)
    offsets = np.r_[0, np.cumsum(lens)]
    T = offsets[-1]
    return offsets, -rng.gamma(2.0, 1.0, size=T), -rng.gamma(2.0, 1.0, size=T) - 1, rng.uniform(0.5, 2.0, size=T)


def test_scores_match_the_formulas():
    rng = np.random.default_rng(0)
    offsets, logp, mu, sigma = _rows(rng, 30)
    zl = rng.integers(20, 60, size=30)
    R = rng.normal(-30, 5, size=(30, 3))
    inc = rng.random((30, 3)) < 0.5
    got = lm_scores(logp, offsets, mu=mu, sigma=sigma, zlib_bytes=zl, reference_totals=R, reference_in=inc, k=0.3)
    for i in range(30):
        x = logp[offsets[i]:offsets[i + 1]]
        z = (x - mu[offsets[i]:offsets[i + 1]]) / sigma[offsets[i]:offsets[i + 1]]
        k = max(1, int(np.ceil(0.3 * x.size)))
        assert got["loss"][i] == pytest.approx(x.mean())                        # minus the mean token loss
        assert got["zlib"][i] == pytest.approx(x.mean() / zl[i])                # Carlini et al. 2021
        assert got["min-k"][i] == pytest.approx(np.sort(x)[:k].mean())          # Shi et al. 2024
        assert got["min-k++"][i] == pytest.approx(np.sort(z)[:k].mean())        # Zhang et al. 2024, eq. 3
        out = ~inc[i]
        want = x.sum() - R[i, out].mean() if out.any() else np.nan
        np.testing.assert_allclose(got["reference"][i], want)
    assert np.isnan(reference_ratio_score([1.0], [[2.0]], [[True]]))[0]


def test_compare_lm_metrics_and_refusals():
    rng = np.random.default_rng(1)
    offsets, logp, mu, sigma = _rows(rng, 80)
    member = np.r_[np.ones(40, bool), np.zeros(40, bool)]
    logp = logp.copy()
    for i in range(40):                                  # members more likely
        logp[offsets[i]:offsets[i + 1]] += 0.5
    R = rng.normal(-30, 5, size=(80, 4))
    comp = compare_lm(logp, offsets, member, mu=mu, sigma=sigma, reference_totals=R,
                      reference_in=rng.random((80, 4)) < 0.5, population_total=rng.normal(-30, 5, 50),
                      population_reference_totals=rng.normal(-30, 5, (50, 4)), n_bootstrap=0)
    s = lm_scores(logp, offsets)["loss"]
    assert comp.results["loss"].metrics.auc == pytest.approx(auc(s[member], s[~member]))
    assert {"seq-lira-online", "seq-rmia-online", "min-k++"} <= set(comp.results)
    assert "zlib" in comp.skipped and comp.records is not None and len(comp.records) == 80
    with pytest.raises(DataError, match="at least 2 members"):
        compare_lm(logp, offsets, np.r_[True, np.zeros(79, bool)])
    with pytest.raises(DataError, match="'logp' must hold"):
        compare_lm(logp[:-1], offsets, member)

"""RMIA (Zarifzadeh et al. 2024) against an implementation written here from the paper's formulas, in linear space
with explicit loops over target and population records; the offline ``a`` fit on a synthetic setting whose
optimum is known; the sort-based count against the direct pairwise count; errors."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from dpaudit.attacks.references import paired_inclusion
from dpaudit.attacks.rmia import A_GRID, fit_offline_a, log_marginal, rmia_scores
from dpaudit.errors import DataError, ParameterError


def _paper_rmia(px, ref_x, pz, ref_z, *, online, a=None, gamma=1.0, in_x=None, in_z=None):
    """Score(x) = Pr_z[ (Pr(x|theta)/Pr(x)) / (Pr(z|theta)/Pr(z)) >= gamma ], Pr(.) the mean over reference models
    (online) or ((1 + a) mean over OUT models + 1 - a) / 2 (offline); loops, probabilities, no logs."""
    def marginal(p_ref, inc):
        out = []
        for i in range(len(p_ref)):
            if online:
                out.append(sum(p_ref[i]) / len(p_ref[i]))
            else:
                outs = [p_ref[i][k] for k in range(len(p_ref[i])) if not inc[i][k]]
                out.append(((1 + a) * (sum(outs) / len(outs)) + (1 - a)) / 2)
        return out

    Px, Pz = marginal(ref_x, in_x), marginal(ref_z, in_z)
    scores, pvals = [], []
    for i in range(len(px)):
        lr_x = px[i] / Px[i]
        dominated = [(lr_x / (pz[j] / Pz[j])) >= gamma for j in range(len(pz))]
        scores.append(sum(dominated) / len(pz))
        pvals.append((1 + sum((pz[j] / Pz[j]) >= lr_x for j in range(len(pz)))) / (len(pz) + 1))
    return np.array(scores), np.array(pvals)


def _arrays(n=40, m=30, K=6, seed=0):
    rng = np.random.default_rng(seed)
    px, pz = rng.uniform(0.05, 1.0, n), rng.uniform(0.05, 1.0, m)
    ref_x, ref_z = rng.uniform(0.05, 1.0, (n, K)), rng.uniform(0.05, 1.0, (m, K))
    in_x = paired_inclusion(n, K, seed=seed + 1)
    in_z = rng.random((m, K)) < 0.3
    in_z[:, 0] = False                        # every population record has an OUT model
    return px, ref_x, pz, ref_z, in_x, in_z


@pytest.mark.parametrize("gamma", [1.0, 2.0, 0.5])
def test_online_rmia_equals_the_papers_formula_exactly(gamma):
    px, ref_x, pz, ref_z, in_x, in_z = _arrays()
    r = rmia_scores(np.log(px), np.log(ref_x), np.log(pz), np.log(ref_z), online=True, gamma=gamma)
    want, want_p = _paper_rmia(px, ref_x, pz, ref_z, online=True, gamma=gamma)
    assert np.array_equal(r.score, want)                      # counts k/m: exact
    assert np.array_equal(r.p_value, want_p)
    assert np.allclose(r.log_ratio, np.log(px / ref_x.mean(axis=1)), rtol=1e-12)
    assert r.online and np.isnan(r.a) and r.num_population == 30 and r.num_references == 6


@pytest.mark.parametrize("a", [0.0, 0.3, 1.0])
def test_offline_rmia_equals_the_papers_formula_exactly(a):
    px, ref_x, pz, ref_z, in_x, in_z = _arrays(seed=3)
    r = rmia_scores(np.log(px), np.log(ref_x), np.log(pz), np.log(ref_z), reference_in=in_x, population_in=in_z,
                    online=False, a=a)
    want, want_p = _paper_rmia(px, ref_x, pz, ref_z, online=False, a=a, in_x=in_x, in_z=in_z)
    assert np.array_equal(r.score, want) and np.array_equal(r.p_value, want_p)
    assert r.a == a and r.a_fit is None


def test_offline_rmia_with_fitted_a_uses_the_fit():
    px, ref_x, pz, ref_z, in_x, in_z = _arrays(n=60, seed=5)
    r = rmia_scores(np.log(px), np.log(ref_x), np.log(pz), np.log(ref_z), reference_in=in_x, population_in=in_z,
                    online=False)
    assert r.a_fit is not None and r.a == r.a_fit.a and r.a in A_GRID
    want, _ = _paper_rmia(px, ref_x, pz, ref_z, online=False, a=r.a, in_x=in_x, in_z=in_z)
    assert np.array_equal(r.score, want)


def test_sort_based_count_equals_direct_pairwise_count_on_larger_arrays():
    rng = np.random.default_rng(7)
    n, m, K = 3000, 700, 8
    lx, lz = np.log(rng.uniform(0.01, 1, n)), np.log(rng.uniform(0.01, 1, m))
    rx, rz = np.log(rng.uniform(0.01, 1, (n, K))), np.log(rng.uniform(0.01, 1, (m, K)))
    r = rmia_scores(lx, rx, lz, rz, gamma=1.5)
    ratio_x = np.exp(lx) / np.exp(rx).mean(axis=1)
    ratio_z = np.exp(lz) / np.exp(rz).mean(axis=1)
    direct = ((ratio_x[:, None] / ratio_z[None, :]) >= 1.5).mean(axis=1)   # the n x m matrix, only in the test
    assert np.array_equal(r.score, direct)


def test_log_space_keeps_tiny_probabilities():
    # p = 1e-300 underflows nothing in log space: the marginal of two models at log p = -690 and -700
    lm = log_marginal(np.array([[-690.0, -700.0]]), online=True)
    assert lm[0] == pytest.approx(np.logaddexp(-690.0, -700.0) - np.log(2), rel=1e-14)
    r = rmia_scores([-700.0, -1.0], [[-690.0, -700.0], [-1.0, -2.0]], [-3.0], [[-3.0, -3.0]])
    assert np.all(np.isfinite(r.log_ratio)) and r.score.tolist() == [0.0, 1.0]


def _synthetic_offline(astar, *, N=20000, K=8, sigma=0.05, seed=0):
    """Records with OUT confidence q ~ U(0.05, 0.95); a model that trained on the record gives
    a* q + 1 - a* (the paper's linear model of Pr_IN), every output times a log-normal noise exp(N(0, sigma^2))."""
    rng = np.random.default_rng(seed)
    q = rng.uniform(0.05, 0.95, N)
    inc = rng.random((N, K)) < 0.5
    p = np.where(inc, (astar * q + 1 - astar)[:, None], q[:, None]) * np.exp(rng.normal(0, sigma, (N, K)))
    return np.log(np.clip(p, 1e-12, 1.0)), inc


@pytest.mark.parametrize("astar", [0.5, 0.8])
def test_offline_a_fit_recovers_the_known_optimum(astar):
    # At a = a*, Pr_a(x) is exactly the average of the IN and OUT confidences of the record (the paper's Pr(x)), and
    # the simulated attack separates IN from OUT best there: the fit lands on a* (a grid point).
    lp, inc = _synthetic_offline(astar)
    fit = fit_offline_a(lp, inc)
    assert fit.a == pytest.approx(astar)
    assert fit.pseudo_targets == 4 and fit.num_records > 15000
    # and the AUC curve is unimodal around it: lower at both ends of the grid
    assert fit.auc[0] < max(fit.auc) and fit.auc[-1] < max(fit.auc)


def test_offline_a_fit_auc_curve_matches_sklearn():
    lp, inc = _synthetic_offline(0.5, N=3000, seed=2)
    fit = fit_offline_a(lp, inc, pseudo_targets=1)
    others = ~inc[:, 1:]
    keep = others.any(axis=1)
    p_out = np.array([np.exp(lp[i, 1:][others[i]]).mean() for i in np.flatnonzero(keep)])
    for g, got in zip(fit.grid, fit.auc):
        stat = np.exp(lp[keep, 0]) / (((1 + g) * p_out + 1 - g) / 2)
        assert got == pytest.approx(roc_auc_score(inc[keep, 0], stat), abs=1e-12)


def test_rmia_errors():
    px, ref_x, pz, ref_z, in_x, in_z = _arrays()
    lx, rx, lz, rz = np.log(px), np.log(ref_x), np.log(pz), np.log(ref_z)
    with pytest.raises(ParameterError, match="'gamma' parameter of rmia_scores"):
        rmia_scores(lx, rx, lz, rz, gamma=0.0)
    with pytest.raises(ParameterError, match="'a' parameter of rmia_scores"):
        rmia_scores(lx, rx, lz, rz, online=False, a=1.5, reference_in=in_x)
    with pytest.raises(ParameterError, match="offline attack only"):
        rmia_scores(lx, rx, lz, rz, online=True, a=0.3)
    with pytest.raises(DataError, match="shapes"):
        rmia_scores(lx[:-1], rx, lz, rz)
    with pytest.raises(DataError, match="NaN or infinite"):
        rmia_scores(np.r_[lx[:-1], -np.inf], rx, lz, rz)
    all_in = np.ones_like(in_x)
    with pytest.raises(DataError, match="no OUT reference model"):
        rmia_scores(lx, rx, lz, rz, online=False, a=0.3, reference_in=all_in)
    with pytest.raises(DataError, match="at least 2 reference models"):
        fit_offline_a(rx[:, :1], in_x[:, :1])
    with pytest.raises(DataError, match="boolean array"):
        rmia_scores(lx, rx, lz, rz, online=False, a=0.3, reference_in=in_x.astype(int))


def test_ties_count_as_dominated_as_the_paper_writes_it():
    # LR(x, z) >= gamma with equality counts: x identical to z0 gives LR = 1 exactly
    lp, ref = np.log(0.5), np.log([0.5, 0.25])
    r = rmia_scores([lp], [ref], [lp, np.log(0.9)], [ref, ref])
    assert r.score.tolist() == [0.5] and r.p_value.tolist() == [1.0]    # z1 has the larger ratio

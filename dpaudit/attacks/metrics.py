"""Membership-inference metrics: ROC, AUC, TPR at low FPR, accuracy / precision / recall / F1, bootstrap CIs.

Conventions used throughout
---------------------------
* A score is oriented "larger = more likely member"; the decision rule is "member iff score >= t".
* Positives are members. ``FPR(t) = #{non-members with score >= t} / n_0``, ``TPR(t) = #{members >= t} / n_1``.
* **TPR at FPR alpha** is read off the empirical ROC *conservatively*: the largest TPR among the ROC's
  vertices with ``FPR <= alpha`` (a step function, never the linear interpolation between vertices, which
  would credit the attack with operating points that no single threshold achieves). With ``n_0`` non-members
  an FPR below ``1/n_0`` is achievable only by flagging nothing, so ``TPR@0.1%`` on fewer than 1000
  non-members is usually 0 — a property of the sample size, not of the attack.
* Precision / recall / F1 (FREDY 2024, Table 2 columns) are computed at a threshold chosen either
  a priori (0.5 on an attack classifier's member probability) or on a held-out half of the evaluation
  set (:func:`attack_metrics` with ``threshold="held_out"``) — never on the records they are reported on.
  Both member-class and macro averages (member / non-member) are reported; FREDY's Table 2 has
  Recall == Accuracy in every row, which is what macro recall gives on balanced data.
* Bootstrap intervals resample members and non-members separately (stratified), seeded, vectorised over
  the bootstrap replicates; percentile intervals.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from scipy import stats

from dpaudit.attacks.results import AttackMetrics, Interval, RocBand, RocCurve
from dpaudit.errors import DataError, check_choice, check_float, check_int, check_probability

__all__ = [
    "DEFAULT_FPRS",
    "roc_curve",
    "auc",
    "tpr_at_fpr",
    "rates_at_threshold",
    "choose_threshold",
    "balanced_subsample",
    "attack_metrics",
    "bootstrap_auc",
    "roc_band",
]

DEFAULT_FPRS: tuple[float, ...] = (0.001, 0.01, 0.1)


def _scores(a, name: str, owner: str) -> np.ndarray:
    arr = np.asarray(a, dtype=float).ravel()
    if arr.size == 0:
        raise DataError(f"The '{name}' array of {owner} is empty; at least one score is needed.")
    if not np.all(np.isfinite(arr)):
        raise DataError(f"The '{name}' array of {owner} contains NaN or infinite scores.")
    return arr


def roc_curve(member_scores, nonmember_scores) -> RocCurve:
    """Empirical ROC curve of "member iff score >= t" over every distinct score t (ties handled exactly).

    Parameters
    ----------
    member_scores, nonmember_scores : array_like, shape (n_1,), (n_0,)
        Attack scores of members and non-members (larger = more likely member).
    """
    pos = np.sort(_scores(member_scores, "member_scores", "roc_curve"))
    neg = np.sort(_scores(nonmember_scores, "nonmember_scores", "roc_curve"))
    thr = np.unique(np.concatenate([pos, neg]))[::-1]
    tpr = (pos.size - np.searchsorted(pos, thr, side="left")) / pos.size
    fpr = (neg.size - np.searchsorted(neg, thr, side="left")) / neg.size
    return RocCurve(np.concatenate([[0.0], fpr]), np.concatenate([[0.0], tpr]), np.concatenate([[np.inf], thr]))


def auc(member_scores, nonmember_scores) -> float:
    """Area under the ROC curve = P[S_member > S_nonmember] + P[tie] / 2 (Mann-Whitney U / (n_1 n_0))."""
    pos = _scores(member_scores, "member_scores", "auc")
    neg = _scores(nonmember_scores, "nonmember_scores", "auc")
    return float(_auc_rows(pos[None, :], neg[None, :])[0])


def _auc_rows(pos: np.ndarray, neg: np.ndarray) -> np.ndarray:
    """AUC of each row: pos (B, n_1), neg (B, n_0) -> (B,), from average ranks (ties count 1/2)."""
    n1, n0 = pos.shape[1], neg.shape[1]
    ranks = stats.rankdata(np.concatenate([pos, neg], axis=1), axis=1)
    u = ranks[:, :n1].sum(axis=1) - n1 * (n1 + 1) / 2.0
    return u / (n1 * n0)


def _tpr_at_fpr_rows(pos: np.ndarray, neg: np.ndarray, alpha: float) -> np.ndarray:
    """Conservative TPR at FPR <= alpha for each row (see module docstring).

    With non-member scores sorted decreasingly ``s_(1) >= s_(2) >= ...`` and ``k = floor(alpha n_0)``, the
    best rule with at most ``k`` false positives is "member iff score > s_(k+1)" (ties at s_(k+1) would push
    FPR above alpha); its TPR is ``#{pos > s_(k+1)} / n_1``. This is exactly the best ROC vertex with FPR <= alpha.
    """
    n0 = neg.shape[1]
    k = int(np.floor(alpha * n0 + 1e-9))
    if k >= n0:
        return np.ones(pos.shape[0])
    cut = -np.partition(-neg, k, axis=1)[:, k]          # (k+1)-th largest non-member score per row
    return (pos > cut[:, None]).mean(axis=1)


def tpr_at_fpr(member_scores, nonmember_scores, fpr: float) -> float:
    """Largest TPR among thresholds whose empirical FPR is <= ``fpr`` (conservative step interpolation)."""
    alpha = check_probability(fpr, "fpr", "tpr_at_fpr", allow_zero=True, allow_one=True)
    pos = _scores(member_scores, "member_scores", "tpr_at_fpr")
    neg = _scores(nonmember_scores, "nonmember_scores", "tpr_at_fpr")
    return float(_tpr_at_fpr_rows(pos[None, :], neg[None, :], alpha)[0])


def _threshold_rows(pos: np.ndarray, neg: np.ndarray, t: float) -> dict[str, np.ndarray]:
    """Confusion-matrix metrics of "member iff score >= t" for each row of pos (B, n_1), neg (B, n_0)."""
    tp = (pos >= t).sum(axis=1).astype(float)
    fp = (neg >= t).sum(axis=1).astype(float)
    n1, n0 = pos.shape[1], neg.shape[1]
    fn, tn = n1 - tp, n0 - fp
    with np.errstate(invalid="ignore", divide="ignore"):
        prec = np.where(tp + fp > 0, tp / np.maximum(tp + fp, 1), 0.0)
        prec_n = np.where(tn + fn > 0, tn / np.maximum(tn + fn, 1), 0.0)
    rec, rec_n = tp / n1, tn / n0
    f1 = np.where(prec + rec > 0, 2 * prec * rec / np.maximum(prec + rec, 1e-300), 0.0)
    f1_n = np.where(prec_n + rec_n > 0, 2 * prec_n * rec_n / np.maximum(prec_n + rec_n, 1e-300), 0.0)
    return {
        "accuracy": (tp + tn) / (n1 + n0),
        "balanced_accuracy": (rec + rec_n) / 2,
        "precision": prec, "recall": rec, "f1": f1,
        "macro_precision": (prec + prec_n) / 2, "macro_recall": (rec + rec_n) / 2, "macro_f1": (f1 + f1_n) / 2,
    }


def rates_at_threshold(member_scores, nonmember_scores, threshold: float) -> dict[str, float]:
    """Accuracy, balanced accuracy, precision, recall, F1 (member class and macro) at "score >= threshold"."""
    t = check_float(threshold, "threshold", "rates_at_threshold", allow_inf=True)
    pos = _scores(member_scores, "member_scores", "rates_at_threshold")
    neg = _scores(nonmember_scores, "nonmember_scores", "rates_at_threshold")
    return {k: float(v[0]) for k, v in _threshold_rows(pos[None, :], neg[None, :], t).items()}


def choose_threshold(member_scores, nonmember_scores) -> float:
    """The threshold maximising balanced accuracy on the given (selection) data; ties -> the larger threshold.

    Returned as the midpoint between the chosen ROC threshold and the next lower distinct score, so that
    applying it to fresh data does not depend on exact ties with the selection scores.
    """
    roc = roc_curve(member_scores, nonmember_scores)
    bal = (roc.tpr + 1.0 - roc.fpr) / 2.0
    i = int(np.argmax(bal))
    if i == 0:
        return float(roc.thresholds[1] + 1.0) if roc.thresholds.size > 1 else 0.0
    hi = roc.thresholds[i]
    lo = roc.thresholds[i + 1] if i + 1 < roc.thresholds.size else hi - 1.0
    return float((hi + lo) / 2.0)


def balanced_subsample(num_members: int, num_nonmembers: int, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices that balance a member / non-member evaluation set: the larger side is subsampled (seeded,
    without replacement) to the size of the smaller; both index arrays are sorted."""
    n1 = check_int(num_members, "num_members", "balanced_subsample", low=1)
    n0 = check_int(num_nonmembers, "num_nonmembers", "balanced_subsample", low=1)
    rng = np.random.default_rng(check_int(seed, "seed", "balanced_subsample", low=0))
    n = min(n1, n0)
    i1 = np.sort(rng.choice(n1, size=n, replace=False)) if n1 > n else np.arange(n1)
    i0 = np.sort(rng.choice(n0, size=n, replace=False)) if n0 > n else np.arange(n0)
    return i1, i0


def _split_halves(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    perm = rng.permutation(n)
    return np.sort(perm[: n // 2]), np.sort(perm[n // 2:])


def _percentile_interval(estimate: float, reps: np.ndarray, confidence: float) -> Interval:
    a = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(reps, [a, 1.0 - a])
    return Interval(float(estimate), float(lo), float(hi), confidence)


def bootstrap_auc(member_scores, nonmember_scores, *, n_bootstrap: int = 1000, confidence: float = 0.95,
                  seed: int = 0) -> Interval:
    """Stratified percentile bootstrap interval of the AUC (vectorised over replicates)."""
    owner = "bootstrap_auc"
    B = check_int(n_bootstrap, "n_bootstrap", owner, low=1)
    conf = check_probability(confidence, "confidence", owner)
    rng = np.random.default_rng(check_int(seed, "seed", owner, low=0))
    pos = _scores(member_scores, "member_scores", owner)
    neg = _scores(nonmember_scores, "nonmember_scores", owner)
    reps = _auc_rows(pos[rng.integers(0, pos.size, (B, pos.size))], neg[rng.integers(0, neg.size, (B, neg.size))])
    return _percentile_interval(auc(pos, neg), reps, conf)


def roc_band(member_scores, nonmember_scores, *, n_bootstrap: int = 200, confidence: float = 0.95,
             num_points: int = 40, seed: int = 0) -> RocBand:
    """Pointwise stratified-bootstrap band of the conservative ROC (TPR at FPR, see the module docstring) on a
    log grid of ``num_points`` FPRs from the smallest resolvable FPR, ``1 / n_0``, up to 1.

    Below ``1 / n_0`` the only rule with fewer false positives flags nothing: the data say nothing there, so
    the band (and a plot of it) stops at ``1 / n_0`` instead of extrapolating.
    """
    owner = "roc_band"
    pos = _scores(member_scores, "member_scores", owner)
    neg = _scores(nonmember_scores, "nonmember_scores", owner)
    B = check_int(n_bootstrap, "n_bootstrap", owner, low=1)
    conf = check_probability(confidence, "confidence", owner)
    k = check_int(num_points, "num_points", owner, low=2, high=10_000)
    rng = np.random.default_rng(check_int(seed, "seed", owner, low=0))
    grid = np.logspace(np.log10(1.0 / neg.size), 0.0, k)
    grid[0], grid[-1] = 1.0 / neg.size, 1.0          # exact ends (logspace rounds)
    grid = np.unique(grid)
    bp = pos[rng.integers(0, pos.size, (B, pos.size))]
    bn = neg[rng.integers(0, neg.size, (B, neg.size))]
    a = (1.0 - conf) / 2.0
    tpr, low, high = (np.empty(grid.size) for _ in range(3))
    for i, f in enumerate(grid):
        tpr[i] = _tpr_at_fpr_rows(pos[None, :], neg[None, :], float(f))[0]
        low[i], high[i] = np.quantile(_tpr_at_fpr_rows(bp, bn, float(f)), [a, 1.0 - a])
    return RocBand(grid, tpr, low, high, conf)


def attack_metrics(member_scores, nonmember_scores, *, threshold: float | str = "held_out",
                   fprs: Sequence[float] = DEFAULT_FPRS, n_bootstrap: int = 1000, confidence: float = 0.95,
                   seed: int = 0) -> AttackMetrics:
    """All metrics of one attack on one evaluation set, with bootstrap intervals.

    Parameters
    ----------
    member_scores, nonmember_scores : array_like
        Scores of the evaluation members / non-members (larger = more likely member); balance them first
        (:func:`balanced_subsample`) for accuracy to mean what FREDY's Table 2 means.
    threshold : float or "held_out"
        A float: the rule "member iff score >= threshold" fixed a priori (e.g. 0.5 on an attack classifier's
        member probability); every threshold metric uses all the records. ``"held_out"``: members and
        non-members are each split in halves (seeded); the threshold maximising balanced accuracy on the first
        halves is applied to the second halves, and accuracy / precision / recall / F1 (and their intervals)
        are reported on the second halves only. AUC and TPR@FPR are threshold-free and use all records.
    fprs : sequence of float in (0, 1]
        FPR levels for the TPR@FPR columns.
    n_bootstrap : int >= 0
        Bootstrap replicates for the intervals (0: no intervals).
    confidence : float in (0, 1)
        Level of the two-sided percentile intervals.
    seed : int >= 0
        Seeds the held-out split and the bootstrap.
    """
    owner = "attack_metrics"
    pos = _scores(member_scores, "member_scores", owner)
    neg = _scores(nonmember_scores, "nonmember_scores", owner)
    fprs = tuple(check_probability(f, "fprs", owner, allow_zero=True, allow_one=True) for f in fprs)
    B = check_int(n_bootstrap, "n_bootstrap", owner, low=0)
    conf = check_probability(confidence, "confidence", owner)
    rng = np.random.default_rng(check_int(seed, "seed", owner, low=0))

    if isinstance(threshold, str):
        check_choice(threshold, "threshold", owner, ("held_out",))
        if pos.size < 2 or neg.size < 2:
            raise DataError("attack_metrics with threshold='held_out' needs at least 2 members and 2 non-members.")
        s1, r1 = _split_halves(pos.size, rng)
        s0, r0 = _split_halves(neg.size, rng)
        t = choose_threshold(pos[s1], neg[s0])
        tpos, tneg, rule = pos[r1], neg[r0], "held_out: max balanced accuracy on a disjoint half"
    else:
        t = check_float(threshold, "threshold", owner, allow_inf=True)
        tpos, tneg, rule = pos, neg, "fixed a priori"

    point = {k: float(v[0]) for k, v in _threshold_rows(tpos[None, :], tneg[None, :], t).items()}
    auc_hat = float(_auc_rows(pos[None, :], neg[None, :])[0])
    tprs = {f: float(_tpr_at_fpr_rows(pos[None, :], neg[None, :], f)[0]) for f in fprs}

    intervals: dict[str, Interval] = {}
    if B > 0:
        bp = pos[rng.integers(0, pos.size, (B, pos.size))]
        bn = neg[rng.integers(0, neg.size, (B, neg.size))]
        intervals["auc"] = _percentile_interval(auc_hat, _auc_rows(bp, bn), conf)
        for f in fprs:
            intervals[f"tpr@{f:g}"] = _percentile_interval(tprs[f], _tpr_at_fpr_rows(bp, bn, f), conf)
        tbp = tpos[rng.integers(0, tpos.size, (B, tpos.size))]
        tbn = tneg[rng.integers(0, tneg.size, (B, tneg.size))]
        for k, reps in _threshold_rows(tbp, tbn, t).items():
            intervals[k] = _percentile_interval(point[k], reps, conf)

    return AttackMetrics(
        auc=auc_hat, tpr_at_fpr={float(f): tprs[f] for f in fprs}, threshold=t, threshold_rule=rule,
        num_members=int(pos.size), num_nonmembers=int(neg.size), intervals=intervals, **point,
    )

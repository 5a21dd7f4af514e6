"""Scores-only membership audits: no model, only what a model said about its members and non-members.

For models trained anywhere (JAX, TensorFlow, a hosted API), the auditor holds the target's outputs on the members
(its training records) and on non-members, as **logits** (n, C), **probabilities** (n, C) or per-record **losses**
(n,) -- the inputs of TensorFlow Privacy's ``AttackInputData`` -- plus the labels (needed for logits and
probabilities). Optionally, the outputs of K *reference* models on the same records with their inclusion masks
(``reference_in[i, k]``: record i was in reference model k's training set) make LiRA possible: offline with OUT
references only, online when records have IN and OUT references. With the outputs of the target and of the same
reference models on **population** records as well (non-members of the target, e.g. the auditor's own records;
``population_scores`` / ``population_reference_scores``), RMIA is possible too (:mod:`dpaudit.attacks.rmia`), and
:func:`compare_scores` puts every reference-model attack side by side.

Everything downstream is the attack layer's own code: the threshold attack's score is the negative loss
(:func:`~dpaudit.attacks.threshold.loss_scores`), LiRA's statistic the logit-scaled confidence
(:func:`~dpaudit.attacks.lira.logit_confidence`) and its test :func:`~dpaudit.attacks.lira.lira_scores`; metrics
and the Clopper-Pearson bound come from :func:`~dpaudit.attacks.run.attack_result`. Logits and losses are turned
into the same two per-record numbers, ``log p_y`` and ``log sum_{j != y} p_j`` (probabilities floored at 1e-12 as
in LiRA), computed stably in log space (no softmax is formed and no ``1 - p_y`` cancels).

The shadow-model attack and the blind baseline are not possible without a model and record features: a
:class:`ScoresAudit` says which attacks ran and why the others did not. Every epsilon bound here is an
**estimate** (one model's records are coupled through the model; see :data:`~dpaudit.attacks.run.SINGLE_MODEL_CAVEAT`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
from scipy.special import logsumexp

from dpaudit.attacks.lira import lira_scores, logit_confidence
from dpaudit.attacks.compare import AttackComparison, compare_signals
from dpaudit.attacks.metrics import balanced_subsample
from dpaudit.attacks.per_record import RecordScores
from dpaudit.attacks.references import ReferenceSignals, signals_from_scores
from dpaudit.attacks.rmia import rmia_from_signals
from dpaudit.attacks.results import AttackReport
from dpaudit.attacks.run import SINGLE_MODEL_CAVEAT, attack_result
from dpaudit.attacks.threshold import loss_scores
from dpaudit.errors import DataError, ParameterError, check_bool, check_choice, check_float, check_int, check_probability, worded

__all__ = ["ATTACK_INPUT_DATA_NAMES", "SCORE_KINDS", "SCORE_PREFIXES", "SCORES_ATTACKS", "synthetic_scores", "PROBABILITY_TOLERANCE", "check_model_scores", "true_label_log_odds",
           "scores_attack", "ScoresAudit", "scores_audit", "compare_scores"]

SCORE_KINDS = ("logits", "probabilities", "losses")
SCORES_ATTACKS = ("threshold", "lira", "rmia")
#: Array-name prefixes of a scores file, TensorFlow Privacy ``AttackInputData``'s: ``<prefix>_train`` (members) and
#: ``<prefix>_test`` (non-members), ``labels_train`` / ``labels_test``; reference models ``reference_<prefix>_train``
#: / ``_test`` (n, K[, C]) with ``reference_in_train`` / ``_test`` (n, K).
SCORE_PREFIXES = {"logits": "logits", "probabilities": "probs", "losses": "loss"}
#: Rows of a probability matrix must sum to 1 within this tolerance (float32 softmax outputs are within ~1e-6).
PROBABILITY_TOLERANCE = 1e-3


#: TensorFlow Privacy ``AttackInputData``'s keyword names that the scores functions take as well.
ATTACK_INPUT_DATA_NAMES = ("loss_train", "loss_test", "logits_train", "logits_test", "probs_train", "probs_test",
                           "labels_train", "labels_test")


def _attack_input_data(owner: str, member_scores, nonmember_scores, kind, member_labels, nonmember_labels,
                       aid: dict) -> tuple:
    """``(member_scores, nonmember_scores, kind, member_labels, nonmember_labels)`` from either dpaudit's names or
    TF Privacy ``AttackInputData``'s (``logits_train`` / ``logits_test``, ``probs_*`` or ``loss_*``, with
    ``labels_train`` / ``labels_test``: train = members, test = non-members); the kind follows from the prefix."""
    given = {k: v for k, v in aid.items() if v is not None}
    if not given:
        if member_scores is None or nonmember_scores is None or kind is None:
            raise ParameterError(f"{owner} needs member_scores, nonmember_scores and kind, or TF Privacy "
                                 "AttackInputData's names (logits_train / logits_test, probs_* or loss_*, with "
                                 "labels_train / labels_test). Got neither instead.")
        return member_scores, nonmember_scores, kind, member_labels, nonmember_labels
    if member_scores is not None or nonmember_scores is not None or member_labels is not None \
            or nonmember_labels is not None:
        raise ParameterError(f"{owner} takes member_scores / nonmember_scores (and labels) or AttackInputData's names "
                             f"({', '.join(sorted(given))}), not both.")
    kinds = {k2 for k2, pre in SCORE_PREFIXES.items() if f"{pre}_train" in given or f"{pre}_test" in given}
    if len(kinds) != 1:
        raise ParameterError(f"{owner} needs one kind of AttackInputData scores: logits_train / logits_test, "
                             f"probs_train / probs_test or loss_train / loss_test. Got {', '.join(sorted(given))} "
                             "instead.")
    k2 = kinds.pop()
    pre = SCORE_PREFIXES[k2]
    missing = [n for n in (f"{pre}_train", f"{pre}_test") if n not in given]
    if missing:
        raise ParameterError(f"{owner} needs both {pre}_train (members) and {pre}_test (non-members). Got no "
                             f"{missing[0]} instead.")
    if kind is not None and kind != k2:
        raise ParameterError(f"The 'kind' parameter of {owner} is {kind!r}, but {pre}_train / {pre}_test are {k2}.")
    return given[f"{pre}_train"], given[f"{pre}_test"], k2, given.get("labels_train"), given.get("labels_test")
_FLOOR = np.log(1e-12)   # as lira._FLOOR: probabilities below 1e-12 count as 1e-12


def check_model_scores(values, labels, kind: str, name: str, *, num_records: int | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Validate one model's outputs on ``n`` records; returns ``(values float64, labels int64 or None)``.

    ``values``: (n, C) for ``logits`` / ``probabilities`` (C >= 2), (n,) for ``losses`` (cross-entropy, >= 0).
    ``labels``: (n,) ints in [0, C); required unless ``kind == "losses"``. ``name`` is the array's name as the
    caller spelled it (it is in every message). Leading axes beyond the record axis (reference models: (n, K, C))
    are allowed with ``num_records``.
    """
    owner = "check_model_scores"
    check_choice(kind, "kind", owner, SCORE_KINDS)
    v = np.asarray(values)
    if not np.issubdtype(v.dtype, np.number) or np.issubdtype(v.dtype, np.complexfloating):
        raise DataError(f"'{name}' must be a real numeric array; got dtype {v.dtype}.")
    if not np.issubdtype(v.dtype, np.floating):
        v = v.astype(np.float64)
    rec_ndim = 1 if kind == "losses" else 2
    extra = 0 if num_records is None else 1
    if v.ndim != rec_ndim + extra:
        want = "(n,)" if kind == "losses" else "(n, C)"
        if extra:
            want = want.replace("(n", "(n, K")
        raise DataError(f"'{name}' ({kind}) must have shape {want}; got {v.shape}.")
    if num_records is not None and v.shape[0] != num_records:
        raise DataError(f"'{name}' has {v.shape[0]} rows but there are {num_records} records (members then non-members).")
    if v.shape[0] == 0:
        raise DataError(f"'{name}' is empty.")
    if extra and v.shape[1] == 0:
        raise DataError(f"'{name}' has shape {v.shape}: it holds no reference model (K = 0). Give at least one "
                        "reference model's scores, or leave the reference arrays out.")
    if v.size == 0:
        raise DataError(f"'{name}' has shape {v.shape}: an axis is empty (no class column).")
    lo, hi = (float(v.min()), float(v.max())) if v.size else (0.0, 0.0)   # min / max propagate NaN
    if not (np.isfinite(lo) and np.isfinite(hi)):
        bad = ~np.isfinite(v)
        first = np.argwhere(bad)[0]
        raise DataError(f"'{name}' contains NaN or infinite values ({int(bad.sum())} of them; first at index {tuple(int(i) for i in first)}).")
    if kind != "losses" and v.shape[-1] < 2:
        raise DataError(f"'{name}' must have at least 2 class columns; got {v.shape[-1]}.")
    if kind == "probabilities":
        if lo < -1e-9 or hi > 1 + 1e-9:
            raise DataError(f"'{name}' holds probabilities outside [0, 1] (range [{lo:.4g}, {hi:.4g}]); "
                            f"pass {worded('--score-kind logits', 'kind=' + repr('logits'))} for raw scores.")
        dev = np.abs(v.sum(axis=-1) - 1.0)
        if dev.max() > PROBABILITY_TOLERANCE:
            worst = np.unravel_index(int(np.argmax(dev)), dev.shape)
            raise DataError(f"'{name}' rows must sum to 1 (tolerance {PROBABILITY_TOLERANCE:g}); row {tuple(int(i) for i in worst)} "
                            f"sums to {v.sum(axis=-1)[worst]:.6g}. Logits? Use the logits kind.")
        if lo < 0 or hi > 1:
            v = np.clip(v, 0.0, 1.0)
    if kind == "losses":
        if lo < -1e-6:
            raise DataError(f"'{name}' holds negative losses (min {lo:.4g}); cross-entropy losses are >= 0.")
        if lo < 0:
            v = np.maximum(v, 0.0)
    if labels is None:
        if kind != "losses":
            raise DataError(f"'{name}' ({kind}) needs the records' labels.")
        return v, None
    y = np.asarray(labels)
    n = v.shape[0]
    if y.ndim != 1 or y.shape[0] != n:
        raise DataError(f"The labels of '{name}' must be a 1-D array of {n} entries (one per record); got shape {y.shape}.")
    if y.size and not np.issubdtype(y.dtype, np.integer):
        if np.issubdtype(y.dtype, np.floating) and np.all(np.isfinite(y)) and np.all(y == np.round(y)):
            y = y.astype(np.int64)
        else:
            raise DataError(f"The labels of '{name}' must be integers; got dtype {y.dtype}.")
    y = y.astype(np.int64)
    if kind != "losses" and y.size and (y.min() < 0 or y.max() >= v.shape[-1]):
        raise DataError(f"The labels of '{name}' must lie in [0, {v.shape[-1]}); got range [{y.min()}, {y.max()}].")
    return v, y


_CHUNK = 1 << 18   # rows per chunk: keeps temporaries of (n * K, C) reference outputs small


def _lse_rest(z: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(z_y, log sum_{j != y} exp z_j) per row of logits z (rows, C), in z's float precision."""
    rows = np.arange(len(y))
    zy = z[rows, y]
    zr = np.array(z, dtype=np.result_type(z.dtype, np.float32))      # one working copy, updated in place
    zr[rows, y] = -np.inf
    m = zr.max(axis=1)
    zr -= m[:, None]
    np.exp(zr, out=zr)
    return zy, m + np.log(zr.sum(axis=1))


def _chunk_stats(v: np.ndarray, y: np.ndarray | None, kind: str, want_loss: bool) -> tuple[np.ndarray | None, np.ndarray]:
    """(floored log p_y or None, phi) of one chunk of rows, float64."""
    if kind == "losses":
        loss = v.astype(np.float64)
        log_py = np.maximum(-loss, _FLOOR)
        with np.errstate(divide="ignore"):
            log_rest = np.maximum(np.log(-np.expm1(-loss)), _FLOOR)     # log(1 - p_y), exact for small losses too
        return log_py, log_py - log_rest
    if kind == "probabilities":   # the attack layer's own computations
        return (loss_scores(v, y) if want_loss else None), logit_confidence(v, y)
    zy, lse_rest = _lse_rest(v, y)
    phi = zy.astype(np.float64) - lse_rest
    # p_y = sigmoid(phi), sum_{j != y} p_j = sigmoid(-phi); flooring both at 1e-12 clips phi to [log 1e-12, -log 1e-12]
    log_py = np.maximum(-np.logaddexp(0.0, -phi), _FLOOR) if want_loss else None
    return log_py, np.clip(phi, _FLOOR, -_FLOOR)


def true_label_log_odds(values, labels, kind: str, *, repeat: int = 1,
                        phi_only: bool = False) -> tuple[np.ndarray | None, np.ndarray]:
    """``(loss score, phi)`` per row: the threshold attack's score ``log p_y`` and LiRA's
    ``phi = log p_y - log sum_{j != y} p_j`` (probabilities floored at 1e-12 as in :mod:`dpaudit.attacks.lira`),
    from checked (rows, C) logits / probabilities or (rows,) losses. ``repeat``: row ``i`` has label
    ``labels[i // repeat]`` (flattened reference outputs, K per record). ``phi_only``: skip the loss score (None).
    Chunked over rows; float32 inputs are processed in float32 up to the final difference."""
    check_choice(kind, "kind", "true_label_log_odds", SCORE_KINDS)
    v = np.asarray(values)
    y = None if labels is None else np.asarray(labels, dtype=np.int64)
    n = v.shape[0]
    repeat = check_int(repeat, "repeat", "true_label_log_odds", low=1)
    if y is not None and y.shape[0] * repeat != n:
        raise DataError(f"true_label_log_odds: {n} rows need {n // repeat} labels (repeat {repeat}); got {y.shape[0]}.")
    log_py = None if phi_only else np.empty(n)
    phi = np.empty(n)
    step = max(repeat, _CHUNK - _CHUNK % repeat)          # chunks hold whole records
    for s in range(0, n, step):
        e = min(n, s + step)
        ys = None if y is None else (y[s:e] if repeat == 1 else np.repeat(y[s // repeat:e // repeat], repeat))
        lp, phi[s:e] = _chunk_stats(v[s:e], ys, kind, not phi_only)
        if log_py is not None:
            log_py[s:e] = lp
    return log_py, phi


def _reference_stats(ref: np.ndarray, labels: np.ndarray | None, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(log p_y, phi) of checked reference outputs ``ref`` (r, K[, C]) on r records: each (r, K)."""
    r, K = ref.shape[:2]
    lp, phi = true_label_log_odds(ref.reshape((r * K,) + ref.shape[2:]), labels, kind, repeat=K)
    return lp.reshape(r, K), phi.reshape(r, K)


def _checked_references(reference_scores, reference_in, labels_all, kind: str, num_records: int,
                        what: str) -> tuple[np.ndarray, np.ndarray]:
    if reference_scores is None or reference_in is None:
        raise DataError(f"{what} on scores needs the reference models' scores and their inclusion masks "
                        "(reference_scores, reference_in); without them only the threshold attack is possible.")
    ref, _ = check_model_scores(reference_scores, labels_all, kind, "reference_scores", num_records=num_records)
    inc = np.asarray(reference_in)
    K = ref.shape[1]
    if inc.shape != (num_records, K) or inc.dtype != bool:
        raise DataError(f"'reference_in' must be a boolean array of shape ({num_records}, {K}) (records x reference "
                        f"models); got {inc.dtype} {inc.shape}.")
    return ref, inc


def _population_stats(kind: str, K: int, population_scores, population_labels, population_reference_scores,
                      population_reference_in, population: int | None, seed: int,
                      owner: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(target log p_y (m,), references' log p_y (m, K), their inclusion (m, K) or None) of the population records,
    subsampled (seeded) to ``population`` records when given."""
    if population_scores is None or population_reference_scores is None:
        raise DataError("RMIA on scores needs population records (non-members of the target, e.g. the auditor's own "
                        "records): the target's outputs on them ('population_scores', with 'population_labels') and "
                        "the same reference models' ('population_reference_scores').")
    zv, zy = check_model_scores(population_scores, population_labels, kind, "population_scores")
    zref, _ = check_model_scores(population_reference_scores, zy, kind, "population_reference_scores",
                                 num_records=len(zv))
    if zref.shape[1] != K or zref.shape[2:] != zv.shape[1:]:
        raise DataError(f"'population_reference_scores' must hold the same {K} reference models as 'reference_scores' "
                        f"(shape ({len(zv)}, {K}{', C' if kind != 'losses' else ''})); got {zref.shape}.")
    zin = None
    if population_reference_in is not None:
        zin = np.asarray(population_reference_in)
        if zin.shape != zref.shape[:2] or zin.dtype != bool:
            raise DataError(f"'population_reference_in' must be a boolean array of shape {zref.shape[:2]}; got "
                            f"{zin.dtype} {zin.shape}.")
    m = len(zv)
    if population is None:
        sel = np.arange(m)
    else:
        N = check_int(population, "population", owner, low=1, high=m)
        sel = np.sort(np.random.default_rng(seed).choice(m, size=N, replace=False))
    zl, _ = true_label_log_odds(zv[sel], None if zy is None else zy[sel], kind)
    rl, _ = _reference_stats(zref[sel], None if zy is None else zy[sel], kind)
    return zl, rl, None if zin is None else zin[sel]


def _scores_signals(vm, ym, vn, yn, i1, i0, kind: str, reference_scores, reference_in, population_kw: dict,
                    seed: int, owner: str, *, need_population: bool) -> ReferenceSignals:
    n1, n0 = len(vm), len(vn)
    labels_all = None if ym is None else np.concatenate([ym, yn])
    ref, inc = _checked_references(reference_scores, reference_in, labels_all, kind, n1 + n0,
                                   "RMIA" if need_population else "The comparison")
    rows = np.concatenate([i1, n1 + i0])
    lab = None if labels_all is None else labels_all[rows]
    t_lp, t_phi = true_label_log_odds(np.concatenate([vm[i1], vn[i0]]), lab, kind)
    r_lp, r_phi = _reference_stats(ref[rows], lab, kind)
    zl = zr = zin = None
    if need_population or population_kw.get("population_scores") is not None:
        zl, zr, zin = _population_stats(kind, ref.shape[1], seed=seed, owner=owner, **population_kw)
    return signals_from_scores(t_lp, t_phi, r_lp, r_phi, inc[rows], population_logp=zl, population_reference_logp=zr,
                               population_in=zin)



def _checked_members(member_scores: Any, member_labels: Any, nonmember_scores: Any, nonmember_labels: Any, kind: str,
                     owner: str, seed: int) -> tuple[np.ndarray, Any, np.ndarray, Any, np.ndarray, np.ndarray]:
    """Members' and non-members' released scores checked (same class count, at least 2 of each) and a balanced
    subsample of their indices (``seed``)."""
    vm, ym = check_model_scores(member_scores, member_labels, kind, "member_scores")
    vn, yn = check_model_scores(nonmember_scores, nonmember_labels, kind, "nonmember_scores")
    if vm.shape[1:] != vn.shape[1:]:
        raise DataError(f"'member_scores' and 'nonmember_scores' must have the same number of classes; got {vm.shape} and {vn.shape}.")
    n1, n0 = len(vm), len(vn)
    if n1 < 2 or n0 < 2:
        raise DataError(f"{owner} needs at least 2 members and 2 non-members; got {n1} and {n0}.")
    i1, i0 = balanced_subsample(n1, n0, seed=seed)
    return vm, ym, vn, yn, i1, i0


def scores_attack(member_scores=None, nonmember_scores=None, *, kind: str | None = None, member_labels=None,
                  nonmember_labels=None, loss_train=None, loss_test=None, logits_train=None, logits_test=None,
                  probs_train=None, probs_test=None, labels_train=None, labels_test=None,
                  attack: str = "threshold", reference_scores=None, reference_in=None, lira_online: bool | None = None,
                  population_scores=None, population_labels=None, population_reference_scores=None,
                  population_reference_in=None, population: int | None = None, rmia_online: bool | None = None,
                  gamma: float = 1.0, rmia_a: float | None = None, confidence: float = 0.95, delta: float = 0.0,
                  n_bootstrap: int = 0, seed: int = 0, per_record: bool = False) -> AttackReport:
    """One attack on scores alone; the same :class:`AttackReport` as :func:`~dpaudit.attacks.run.run_attack`.

    Parameters
    ----------
    member_scores, nonmember_scores : array_like
        The target model's outputs on its members / on non-members: (n, C) logits or probabilities, or (n,) losses.
    kind : "logits", "probabilities" or "losses"
    loss_train, loss_test, logits_train, logits_test, probs_train, probs_test, labels_train, labels_test : optional
        TensorFlow Privacy ``AttackInputData``'s names instead of the above (train = members, test = non-members; the
        kind follows from the prefix): ``scores_attack(logits_train=..., logits_test=..., labels_train=...,
        labels_test=...)``.
    member_labels, nonmember_labels : array_like of int, optional
        Labels (required for logits and probabilities).
    attack : "threshold", "lira" or "rmia"
    reference_scores : array_like, shape (n_1 + n_0, K[, C]), optional
        Outputs of K reference models on the same records, members first (LiRA only), same ``kind``.
    reference_in : array_like of bool, shape (n_1 + n_0, K), optional
        ``reference_in[i, k]``: record i was in reference model k's training set.
    lira_online : bool, optional
        Online LiRA (IN and OUT references) or offline (OUT only); default: online when some record has IN
        references, else offline. Fixed variance below 64 references, as :func:`run_attack`.
    population_scores, population_labels : array_like, shape (m[, C]) / (m,), optional
        RMIA: the target's outputs on m population records (non-members of the target) and their labels.
    population_reference_scores : array_like, shape (m, K[, C]), optional
        RMIA: the same K reference models' outputs on the population records.
    population_reference_in : array_like of bool, shape (m, K), optional
        Which reference models trained on which population record (default: none).
    population : int, optional
        RMIA: use this many population records (a seeded subsample; default all).
    rmia_online, gamma, rmia_a :
        RMIA (:func:`~dpaudit.attacks.rmia.rmia_scores`): online (default when some record has IN references) or
        offline; the pairwise threshold; offline's ``a`` (default: fitted on the reference models).
    per_record : bool
        Keep every evaluated record's score in ``report.per_record`` (``record``: member i -> i, non-member j ->
        len(members) + j, as the rows of a scores file's ``_train`` then ``_test`` arrays).
    confidence, delta, n_bootstrap, seed : as :func:`~dpaudit.attacks.run.run_attack`, but bootstrap intervals are
        opt-in here (``n_bootstrap=0`` by default): with 1e5 records per side each replicate costs about as much as
        the whole LiRA test, and the intervals are then narrow anyway (AUC +- ~0.003).
    """
    owner = "scores_attack"
    member_scores, nonmember_scores, kind, member_labels, nonmember_labels = _attack_input_data(
        owner, member_scores, nonmember_scores, kind, member_labels, nonmember_labels,
        dict(loss_train=loss_train, loss_test=loss_test, logits_train=logits_train, logits_test=logits_test,
                              probs_train=probs_train, probs_test=probs_test, labels_train=labels_train,
                              labels_test=labels_test))
    check_choice(kind, "kind", owner, SCORE_KINDS)
    check_choice(attack, "attack", owner, SCORES_ATTACKS)
    seed = check_int(seed, "seed", owner, low=0)
    conf = check_probability(confidence, "confidence", owner)
    d = check_float(delta, "delta", owner, low=0.0, high=1.0, high_open=True)
    n_boot = check_int(n_bootstrap, "n_bootstrap", owner, low=0)
    vm, ym, vn, yn, i1, i0 = _checked_members(member_scores, member_labels, nonmember_scores, nonmember_labels, kind,
                                              owner, seed)
    n1, n0 = len(vm), len(vn)
    n = len(i1)
    settings: dict[str, Any] = {"attack": attack, "inputs": f"scores only ({kind})", "seed": seed, "confidence": conf,
                                "delta": d, "n_bootstrap": n_boot, "num_members_total": n1, "num_nonmembers_total": n0,
                                "num_evaluated_per_side": n, "bound": "estimate"}
    notes = [SINGLE_MODEL_CAVEAT,
             "Scores-only audit: no record features, so the blind baseline (does the membership split itself "
             "separate?) could not run; a distribution mismatch between members and non-members would inflate every "
             "figure here."]
    loss_m, phi_m = true_label_log_odds(vm[i1], None if ym is None else ym[i1], kind)
    loss_n, phi_n = true_label_log_odds(vn[i0], None if yn is None else yn[i0], kind)
    stats: dict[str, np.ndarray] = {}
    if attack == "threshold":
        pos, neg = loss_m, loss_n
        desc = "Threshold on the loss (Yeom et al. 2018), from the released scores."
    elif attack == "rmia":
        pop_kw = dict(population_scores=population_scores, population_labels=population_labels,
                      population_reference_scores=population_reference_scores,
                      population_reference_in=population_reference_in, population=population)
        sig = _scores_signals(vm, ym, vn, yn, i1, i0, kind, reference_scores, reference_in, pop_kw, seed, owner,
                              need_population=True)
        online = bool(sig.inclusion.any()) if rmia_online is None else check_bool(rmia_online, "rmia_online", owner)
        r = rmia_from_signals(sig, online=online, a=rmia_a, gamma=gamma)
        pos, neg = r.score[:n], r.score[n:]
        stats = {"rmia_p_value": r.p_value, "rmia_log_ratio": r.log_ratio}
        settings.update(online=online, num_references=r.num_references, population=r.num_population, gamma=r.gamma,
                        offline_a=None if online else r.a, offline_a_fitted=r.a_fit is not None)
        desc = (f"RMIA (Zarifzadeh et al. 2024) on released scores, {'online' if online else 'offline'}, "
                f"{r.num_references} reference models, {r.num_population} population records, gamma {r.gamma:g}"
                + ("." if online else f", a = {r.a:g} ({'fitted on the reference models' if r.a_fit else 'given'})."))
    else:
        labels_all = None if ym is None else np.concatenate([ym, yn])
        ref, inc = _checked_references(reference_scores, reference_in, labels_all, kind, n1 + n0, "LiRA")
        K = ref.shape[1]
        K_shape = (len(ref) * K,) + ref.shape[2:]
        _, ref_phi = true_label_log_odds(ref.reshape(K_shape), labels_all, kind, repeat=K, phi_only=True)
        rows = np.concatenate([i1, n1 + i0])
        ref_phi, mask = ref_phi.reshape(len(ref), K)[rows], inc[rows]
        online = bool(mask.any()) if lira_online is None else check_bool(lira_online, "lira_online", owner)
        fixed = K < 64
        # offline, lira_scores fits the OUT Gaussian on ~mask only, so IN references are left out as they must be
        scores = lira_scores(np.concatenate([phi_m, phi_n]), ref_phi, mask, online=online, fixed_variance=fixed)
        pos, neg = scores[:n], scores[n:]
        settings.update(online=online, fixed_variance=fixed, num_references=int(K))
        desc = (f"LiRA (Carlini et al. 2022) on released scores, {'online' if online else 'offline'}, {K} reference "
                f"models, {'fixed' if fixed else 'per-record'} variance.")
        stats = {"lira_log_lr": scores} if online else {"lira_p_value": -np.expm1(scores)}
    result = attack_result(attack, desc, pos, neg, threshold="held_out", confidence=conf, delta=d,
                           n_bootstrap=n_boot, seed=seed)
    records = None
    if check_bool(per_record, "per_record", owner):
        lab = np.full(2 * n, -1) if ym is None else np.concatenate([ym[i1], yn[i0]])
        records = RecordScores(np.r_[i1, n1 + i0], lab, np.r_[np.ones(n, bool), np.zeros(n, bool)],
                               {attack: np.concatenate([pos, neg])}, stats, attack)
    return AttackReport(result, None, settings, tuple(notes), records)


def compare_scores(member_scores=None, nonmember_scores=None, *, kind: str | None = None, member_labels=None,
                   nonmember_labels=None, loss_train=None, loss_test=None, logits_train=None, logits_test=None,
                   probs_train=None, probs_test=None, labels_train=None, labels_test=None,
                   reference_scores=None, reference_in=None, population_scores=None, population_labels=None,
                   population_reference_scores=None, population_reference_in=None, population: int | None = None,
                   gamma: float = 1.0, rmia_a: float | None = None, confidence: float = 0.95, delta: float = 0.0,
                   n_bootstrap: int = 0, seed: int = 0, per_record: bool = True) -> AttackComparison:
    """Every reference-model attack (:data:`~dpaudit.attacks.compare.COMPARED_ATTACKS`) on released scores, with the
    same reference models and targets (:func:`~dpaudit.attacks.compare.compare_signals`). RMIA needs the population
    arrays (see :func:`scores_attack`); without them it is listed as skipped. Arguments as :func:`scores_attack`."""
    owner = "compare_scores"
    member_scores, nonmember_scores, kind, member_labels, nonmember_labels = _attack_input_data(
        owner, member_scores, nonmember_scores, kind, member_labels, nonmember_labels,
        dict(loss_train=loss_train, loss_test=loss_test, logits_train=logits_train, logits_test=logits_test,
                              probs_train=probs_train, probs_test=probs_test, labels_train=labels_train,
                              labels_test=labels_test))
    check_choice(kind, "kind", owner, SCORE_KINDS)
    seed = check_int(seed, "seed", owner, low=0)
    vm, ym, vn, yn, i1, i0 = _checked_members(member_scores, member_labels, nonmember_scores, nonmember_labels, kind,
                                              owner, seed)
    n1, n0 = len(vm), len(vn)
    pop_kw = dict(population_scores=population_scores, population_labels=population_labels,
                  population_reference_scores=population_reference_scores,
                  population_reference_in=population_reference_in, population=population)
    sig = _scores_signals(vm, ym, vn, yn, i1, i0, kind, reference_scores, reference_in, pop_kw, seed, owner,
                          need_population=False)
    n = len(i1)
    labels = None if ym is None else np.concatenate([ym[i1], yn[i0]])
    comp = compare_signals(sig, np.r_[np.ones(n, bool), np.zeros(n, bool)], record=np.r_[i1, n1 + i0], labels=labels,
                           gamma=gamma, a=rmia_a, confidence=confidence, delta=delta, n_bootstrap=n_bootstrap,
                           seed=seed, per_record=per_record)
    skipped = dict(comp.skipped)
    if sig.num_population == 0:
        for name in ("rmia-online", "rmia-offline"):
            skipped[name] = ("needs population records: the target's and the reference models' outputs on "
                             "non-members of the target (population_scores, population_reference_scores).")
    settings = {**comp.settings, "inputs": f"scores only ({kind})", "num_members_total": n1, "num_nonmembers_total": n0}
    return AttackComparison(comp.results, skipped, settings, comp.notes, comp.offline_a, comp.records)


@dataclass(frozen=True)
class ScoresAudit:
    """Every attack a scores-only audit could run (``reports``, by name) and why the others could not (``skipped``)."""

    reports: Mapping[str, AttackReport]
    skipped: Mapping[str, str] = field(default_factory=dict)
    schema: int = 1

    __json_computed__ = ("possible",)

    @property
    def possible(self) -> tuple[str, ...]:
        return tuple(self.reports)


def scores_audit(member_scores=None, nonmember_scores=None, *, kind: str | None = None, member_labels=None,
                 nonmember_labels=None, loss_train=None, loss_test=None, logits_train=None, logits_test=None,
                 probs_train=None, probs_test=None, labels_train=None, labels_test=None,
                 reference_scores=None, reference_in=None, population_scores=None, population_labels=None,
                 population_reference_scores=None, population_reference_in=None, confidence: float = 0.95,
                 delta: float = 0.0, n_bootstrap: int = 0, seed: int = 0) -> ScoresAudit:
    """Run every attack the inputs allow (threshold always; LiRA with reference models; RMIA with reference models
    and population records) -- see :func:`scores_attack`."""
    member_scores, nonmember_scores, kind, member_labels, nonmember_labels = _attack_input_data(
        "scores_audit", member_scores, nonmember_scores, kind, member_labels, nonmember_labels,
        dict(loss_train=loss_train, loss_test=loss_test, logits_train=logits_train, logits_test=logits_test,
                              probs_train=probs_train, probs_test=probs_test, labels_train=labels_train,
                              labels_test=labels_test))
    kw = dict(kind=kind, member_labels=member_labels, nonmember_labels=nonmember_labels, confidence=confidence,
              delta=delta, n_bootstrap=n_bootstrap, seed=seed)
    reports = {"threshold": scores_attack(member_scores, nonmember_scores, attack="threshold", **kw)}
    skipped = {"shadow": "needs a model to query and a recipe to train shadow models; scores-only inputs have neither.",
               "blind": "needs the records' features; scores-only inputs have none."}
    if reference_scores is None or reference_in is None:
        skipped["lira"] = "needs reference models' scores with their inclusion masks (none given)."
    else:
        reports["lira"] = scores_attack(member_scores, nonmember_scores, attack="lira", reference_scores=reference_scores,
                                        reference_in=reference_in, **kw)
    if reference_scores is None or reference_in is None or population_scores is None:
        skipped["rmia"] = "needs reference models' scores and population records' scores (none given)."
    else:
        reports["rmia"] = scores_attack(member_scores, nonmember_scores, attack="rmia", reference_scores=reference_scores,
                                        reference_in=reference_in, population_scores=population_scores,
                                        population_labels=population_labels,
                                        population_reference_scores=population_reference_scores,
                                        population_reference_in=population_reference_in, **kw)
    return ScoresAudit(reports, skipped)


def synthetic_scores(n: int, *, num_classes: int = 10, num_references: int = 0, kind: str = "logits",
                     leak: float = 1.5, seed: int = 0, num_population: int = 0) -> dict[str, np.ndarray]:
    """A leaky model's outputs on ``n`` members and ``n`` non-members, for examples, tests and benchmarks, in the
    scores-file layout (:data:`SCORE_PREFIXES`): float32 logits (or probabilities) whose true-label margin is
    ``1.5 + d_i + leak * [record in the model's training set]`` with a per-record difficulty ``d_i ~ N(0, 1)``, plus
    ``num_references`` reference models' outputs (each record in each with probability 1/2) and their masks, and
    ``num_population`` population records (non-members of the target and of every reference model: ``population_*``,
    ``reference_population_*``)."""
    owner = "synthetic_scores"
    n = check_int(n, "n", owner, low=1)
    C = check_int(num_classes, "num_classes", owner, low=2)
    K = check_int(num_references, "num_references", owner, low=0)
    check_choice(kind, "kind", owner, ("logits", "probabilities"))
    rng = np.random.default_rng(check_int(seed, "seed", owner, low=0))
    y = rng.integers(0, C, 2 * n)
    member = np.r_[np.ones(n, bool), np.zeros(n, bool)]
    inc = rng.random((2 * n, K)) < 0.5
    base = rng.normal(0.0, 1.0, 2 * n)

    def outputs(in_mask: np.ndarray) -> np.ndarray:
        z = rng.normal(0.0, 1.0, (2 * n, C)).astype(np.float32)
        z[np.arange(2 * n), y] += (1.5 + base + leak * in_mask).astype(np.float32)
        if kind == "probabilities":
            z = np.exp(z - z.max(axis=1, keepdims=True))
            z /= z.sum(axis=1, keepdims=True)
        return z

    pre = SCORE_PREFIXES[kind]
    out = outputs(member)
    arrays = {f"{pre}_train": out[:n], f"{pre}_test": out[n:], "labels_train": y[:n], "labels_test": y[n:]}
    if K:
        ref = np.stack([outputs(inc[:, k]) for k in range(K)], axis=1)
        arrays.update({f"reference_{pre}_train": ref[:n], f"reference_{pre}_test": ref[n:],
                       "reference_in_train": inc[:n], "reference_in_test": inc[n:]})
    M = check_int(num_population, "num_population", owner, low=0)
    if M:
        prng = np.random.default_rng(check_int(seed, "seed", owner, low=0) + 1)
        zy = prng.integers(0, C, M)
        zbase = prng.normal(0.0, 1.0, M)

        def zout() -> np.ndarray:
            z = prng.normal(0.0, 1.0, (M, C)).astype(np.float32)
            z[np.arange(M), zy] += (1.5 + zbase).astype(np.float32)
            if kind == "probabilities":
                z = np.exp(z - z.max(axis=1, keepdims=True))
                z /= z.sum(axis=1, keepdims=True)
            return z

        arrays.update({f"population_{pre}": zout(), "population_labels": zy})
        if K:
            arrays[f"reference_population_{pre}"] = np.stack([zout() for _ in range(K)], axis=1)
    return arrays

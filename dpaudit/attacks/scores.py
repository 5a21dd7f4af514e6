"""Scores-only membership audits: no model, only what a model said about its members and non-members.

For models trained anywhere (JAX, TensorFlow, a hosted API), the auditor holds the target's outputs on the members
(its training records) and on non-members, as **logits** (n, C), **probabilities** (n, C) or per-record **losses**
(n,) -- the inputs of TensorFlow Privacy's ``AttackInputData`` -- plus the labels (needed for logits and
probabilities). Optionally, the outputs of K *reference* models on the same records with their inclusion masks
(``reference_in[i, k]``: record i was in reference model k's training set) make LiRA possible: offline with OUT
references only, online when records have IN and OUT references.

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
from dpaudit.attacks.metrics import balanced_subsample
from dpaudit.attacks.results import AttackReport
from dpaudit.attacks.run import SINGLE_MODEL_CAVEAT, attack_result
from dpaudit.attacks.threshold import loss_scores
from dpaudit.errors import DataError, check_bool, check_choice, check_float, check_int, check_probability

__all__ = ["SCORE_KINDS", "SCORE_PREFIXES", "SCORES_ATTACKS", "synthetic_scores", "PROBABILITY_TOLERANCE", "check_model_scores", "true_label_log_odds",
           "scores_attack", "ScoresAudit", "scores_audit"]

SCORE_KINDS = ("logits", "probabilities", "losses")
SCORES_ATTACKS = ("threshold", "lira")
#: Array-name prefixes of a scores file, TensorFlow Privacy ``AttackInputData``'s: ``<prefix>_train`` (members) and
#: ``<prefix>_test`` (non-members), ``labels_train`` / ``labels_test``; reference models ``reference_<prefix>_train``
#: / ``_test`` (n, K[, C]) with ``reference_in_train`` / ``_test`` (n, K).
SCORE_PREFIXES = {"logits": "logits", "probabilities": "probs", "losses": "loss"}
#: Rows of a probability matrix must sum to 1 within this tolerance (float32 softmax outputs are within ~1e-6).
PROBABILITY_TOLERANCE = 1e-3
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
                            "pass --score-kind logits for raw scores.")
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


def scores_attack(member_scores, nonmember_scores, *, kind: str, member_labels=None, nonmember_labels=None,
                  attack: str = "threshold", reference_scores=None, reference_in=None, lira_online: bool | None = None,
                  confidence: float = 0.95, delta: float = 0.0, n_bootstrap: int = 0, seed: int = 0) -> AttackReport:
    """One attack on scores alone; the same :class:`AttackReport` as :func:`~dpaudit.attacks.run.run_attack`.

    Parameters
    ----------
    member_scores, nonmember_scores : array_like
        The target model's outputs on its members / on non-members: (n, C) logits or probabilities, or (n,) losses.
    kind : "logits", "probabilities" or "losses"
    member_labels, nonmember_labels : array_like of int, optional
        Labels (required for logits and probabilities).
    attack : "threshold" or "lira"
    reference_scores : array_like, shape (n_1 + n_0, K[, C]), optional
        Outputs of K reference models on the same records, members first (LiRA only), same ``kind``.
    reference_in : array_like of bool, shape (n_1 + n_0, K), optional
        ``reference_in[i, k]``: record i was in reference model k's training set.
    lira_online : bool, optional
        Online LiRA (IN and OUT references) or offline (OUT only); default: online when some record has IN
        references, else offline. Fixed variance below 64 references, as :func:`run_attack`.
    confidence, delta, n_bootstrap, seed : as :func:`~dpaudit.attacks.run.run_attack`, but bootstrap intervals are
        opt-in here (``n_bootstrap=0`` by default): with 1e5 records per side each replicate costs about as much as
        the whole LiRA test, and the intervals are then narrow anyway (AUC +- ~0.003).
    """
    owner = "scores_attack"
    check_choice(kind, "kind", owner, SCORE_KINDS)
    check_choice(attack, "attack", owner, SCORES_ATTACKS)
    seed = check_int(seed, "seed", owner, low=0)
    conf = check_probability(confidence, "confidence", owner)
    d = check_float(delta, "delta", owner, low=0.0, high=1.0, high_open=True)
    n_boot = check_int(n_bootstrap, "n_bootstrap", owner, low=0)
    vm, ym = check_model_scores(member_scores, member_labels, kind, "member_scores")
    vn, yn = check_model_scores(nonmember_scores, nonmember_labels, kind, "nonmember_scores")
    if vm.shape[1:] != vn.shape[1:]:
        raise DataError(f"'member_scores' and 'nonmember_scores' must have the same number of classes; got {vm.shape} and {vn.shape}.")
    n1, n0 = len(vm), len(vn)
    if n1 < 2 or n0 < 2:
        raise DataError(f"{owner} needs at least 2 members and 2 non-members; got {n1} and {n0}.")
    i1, i0 = balanced_subsample(n1, n0, seed=seed)
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
    if attack == "threshold":
        pos, neg = loss_m, loss_n
        desc = "Threshold on the loss (Yeom et al. 2018), from the released scores."
    else:
        if reference_scores is None or reference_in is None:
            raise DataError("LiRA on scores needs the reference models' scores and their inclusion masks "
                            "(reference_scores, reference_in); without them only the threshold attack is possible.")
        labels_all = None if ym is None else np.concatenate([ym, yn])
        ref, _ = check_model_scores(reference_scores, labels_all, kind, "reference_scores", num_records=n1 + n0)
        inc = np.asarray(reference_in)
        K = ref.shape[1]
        if inc.shape != (n1 + n0, K) or inc.dtype != bool:
            raise DataError(f"'reference_in' must be a boolean array of shape ({n1 + n0}, {K}) (records x reference "
                            f"models); got {inc.dtype} {inc.shape}.")
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
    result = attack_result(attack, desc, pos, neg, threshold="held_out", confidence=conf, delta=d,
                           n_bootstrap=n_boot, seed=seed)
    return AttackReport(result, None, settings, tuple(notes))


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


def scores_audit(member_scores, nonmember_scores, *, kind: str, member_labels=None, nonmember_labels=None,
                 reference_scores=None, reference_in=None, confidence: float = 0.95, delta: float = 0.0,
                 n_bootstrap: int = 0, seed: int = 0) -> ScoresAudit:
    """Run every attack the inputs allow (threshold always; LiRA with reference models) -- see :func:`scores_attack`."""
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
    return ScoresAudit(reports, skipped)


def synthetic_scores(n: int, *, num_classes: int = 10, num_references: int = 0, kind: str = "logits",
                     leak: float = 1.5, seed: int = 0) -> dict[str, np.ndarray]:
    """A leaky model's outputs on ``n`` members and ``n`` non-members, for examples, tests and benchmarks, in the
    scores-file layout (:data:`SCORE_PREFIXES`): float32 logits (or probabilities) whose true-label margin is
    ``1.5 + d_i + leak * [record in the model's training set]`` with a per-record difficulty ``d_i ~ N(0, 1)``, plus
    ``num_references`` reference models' outputs (each record in each with probability 1/2) and their masks."""
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
    return arrays

"""RMIA, the relative membership inference attack (Zarifzadeh, Liu, Manoj, Shokri, ICML 2024, "Low-cost high-power
membership inference attacks", Sec. 3), on score arrays.

For a target record x, a population record z (drawn from the same distribution, not a member) and the target
model theta, the pairwise likelihood ratio is

    LR_theta(x, z) = [Pr(x | theta) / Pr(x)] / [Pr(z | theta) / Pr(z)]

with ``Pr(x | theta)`` the model's probability of x's true label (``p_y``) and ``Pr(x)`` its average over reference
models (the marginal over the randomness of training). The score (larger = more likely member) is the fraction of
population records that x dominates:

    Score(x) = Pr_z[ LR_theta(x, z) >= gamma ]                                           (their Eq. 4)

* **online**: ``Pr(x)`` is the mean of ``Pr(x | theta_k)`` over all K reference models, IN and OUT for x.
* **offline**: only OUT reference models are averaged, ``Pr(x)_OUT``, and the missing IN half is approximated
  linearly: ``Pr(x) = ((1 + a) Pr(x)_OUT + (1 - a)) / 2``, i.e. ``Pr(x)_IN ~ a Pr(x)_OUT + 1 - a`` (their Sec. 3,
  "offline"). ``a`` is fitted on the reference models alone, as the authors' implementation (ML Privacy Meter,
  ``tune_offline_a``) does: one reference model plays the target, the others are its OUT references, and the
  ``a`` on a grid (0, 0.1, ..., 1) giving that simulated attack the largest AUC is kept (:func:`fit_offline_a`).
  The same formula gives ``Pr(z)``.

Everything is computed in log space: ``r(x) = log Pr(x | theta) - log Pr(x)`` (``log_ratio``), so
``LR(x, z) >= gamma  <=>  r(z) <= r(x) - log gamma``. The pairwise count is therefore one sort of the m
population statistics and one binary search per target: O((n + m) log m), never the n x m matrix of ratios.
(Consequence worth knowing: the score is the population's empirical CDF at ``r(x) - log gamma``, so it orders
targets as ``r(x)`` does, except that targets beyond the population's range tie at 0 or 1; a larger population
resolves lower false-positive rates.)

Per-record p-value: ``(1 + #{z : r(z) >= r(x)}) / (m + 1)``, the rank of x among the population under the null
hypothesis that x is one more population record (a non-member). Offline, where x and z are both OUT of every
reference model, a non-member's p-value is exactly uniform when x and the population are drawn alike; online,
a non-member x is IN for some references, which raises ``Pr(x)`` and makes its p-value conservative (larger).

Probabilities are floored at 1e-12 (``log p_y >= log 1e-12``), as in :mod:`dpaudit.attacks.lira`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from scipy.special import logsumexp
from scipy.stats import rankdata

from dpaudit.attacks.protocols import BatchTrainFn, Model, TrainFn
from dpaudit.attacks.references import ReferenceSignals, train_reference_signals
from dpaudit.errors import DataError, ParameterError, check_bool, check_float, check_int
from dpaudit.executors import Executor

__all__ = ["A_GRID", "OfflineAFit", "RmiaScores", "log_marginal", "fit_offline_a", "rmia_scores", "rmia_from_signals",
           "rmia_attack", "saturation_note"]

#: The grid of the offline parameter ``a`` (ML Privacy Meter's ``np.arange(0, 1.1, 0.1)``).
A_GRID: tuple[float, ...] = tuple(round(0.1 * i, 10) for i in range(11))
#: Reference models that play the target in turn when ``a`` is fitted (their AUCs are averaged); the paper uses one.
PSEUDO_TARGETS = 4


@dataclass(frozen=True, slots=True)
class OfflineAFit:
    """How the offline ``a`` was chosen: the mean AUC (over ``pseudo_targets`` reference models attacked with the
    others as OUT references, on ``num_records`` records each) at each grid value; ``a`` maximises it (the smallest
    such value on ties)."""

    a: float
    grid: tuple[float, ...]
    auc: tuple[float, ...]
    pseudo_targets: int
    num_records: int


@dataclass(frozen=True, eq=False)
class RmiaScores:
    """RMIA on n target records against m population records.

    ``score``: ``Pr_z[LR(x, z) >= gamma]`` in [0, 1] (larger = more likely member); ``p_value``: the per-record
    p-value against the population (see the module docstring); ``log_ratio``: ``r(x) = log Pr(x | theta) - log Pr(x)``.
    ``a`` is the offline parameter (NaN online), ``a_fit`` how it was fitted (None when given or online).
    """

    score: np.ndarray
    p_value: np.ndarray
    log_ratio: np.ndarray
    online: bool
    a: float
    gamma: float
    num_references: int
    num_population: int
    a_fit: OfflineAFit | None = None


def _logp(a, name: str, owner: str, ndim: int) -> np.ndarray:
    arr = np.asarray(a, dtype=np.float64)
    if arr.ndim != ndim:
        raise DataError(f"The '{name}' array of {owner} must be {ndim}-D (log Pr(x | model) per record"
                        f"{' and reference model' if ndim == 2 else ''}); got shape {arr.shape}.")
    if not np.all(np.isfinite(arr)):
        raise DataError(f"The '{name}' array of {owner} contains NaN or infinite values (floor probabilities first, "
                        "e.g. at 1e-12).")
    return arr


def _mask(m, shape: tuple[int, ...], name: str, owner: str) -> np.ndarray:
    if m is None:
        return np.zeros(shape, dtype=bool)
    arr = np.asarray(m)
    if arr.shape != shape or arr.dtype != bool:
        raise DataError(f"The '{name}' array of {owner} must be a boolean array of shape {shape} (records x reference "
                        f"models); got {arr.dtype} {arr.shape}.")
    return arr


def _check_a(a: Any, owner: str) -> float:
    return check_float(a, "a", owner, low=0.0, high=1.0)


def _log_mean_out(logp: np.ndarray, out: np.ndarray) -> np.ndarray:
    """log of the mean of exp(logp) over the True entries of ``out`` per row (rows without any: -inf)."""
    cnt = out.sum(axis=1)
    with np.errstate(divide="ignore"):
        return logsumexp(np.where(out, logp, -np.inf), axis=1) - np.log(cnt)


def _offline_from_out(log_out: np.ndarray, a: float) -> np.ndarray:
    """log Pr(x) = log(((1 + a) Pr_OUT + 1 - a) / 2) from log Pr_OUT (log space; a = 1 gives Pr_OUT itself)."""
    with np.errstate(divide="ignore"):
        return np.logaddexp(math.log1p(a) + log_out, math.log(1.0 - a) if a < 1.0 else -np.inf) - math.log(2.0)


def log_marginal(reference_logp, reference_in=None, *, online: bool, a: float | None = None) -> np.ndarray:
    """``log Pr(x)`` per record from its reference models' ``log Pr(x | theta_k)`` (n, K).

    Online: the mean over all K models. Offline: the mean over the OUT models (``~reference_in``; every model when
    ``reference_in`` is None) mapped through ``((1 + a) Pr_OUT + 1 - a) / 2``. A record with no OUT model offline is
    an error."""
    owner = "log_marginal"
    lp = _logp(reference_logp, "reference_logp", owner, 2)
    if lp.shape[1] < 1:
        raise DataError(f"{owner} needs at least one reference model; got shape {lp.shape}.")
    if check_bool(online, "online", owner):
        return logsumexp(lp, axis=1) - math.log(lp.shape[1])
    if a is None:
        raise ParameterError(f"The 'a' parameter of {owner} must be a float in the range [0, 1] offline. Got None instead.")
    a = _check_a(a, owner)
    out = ~_mask(reference_in, lp.shape, "reference_in", owner)
    none = ~out.any(axis=1)
    if none.any():
        raise DataError(f"{owner} (offline): {int(none.sum())} record(s) have no OUT reference model (e.g. record "
                        f"{int(np.flatnonzero(none)[0])}); offline RMIA averages OUT models only.")
    return _offline_from_out(_log_mean_out(lp, out), a)


def _auc_rows(s: np.ndarray, member: np.ndarray) -> np.ndarray:
    """AUC of each row of scores s (G, N) for the labels ``member`` (N,) (average ranks: ties count 1/2)."""
    n1, n0 = int(member.sum()), int((~member).sum())
    r = rankdata(s, axis=1)
    return (r[:, member].sum(axis=1) - n1 * (n1 + 1) / 2.0) / (n1 * n0)


def fit_offline_a(reference_logp, reference_in, *, grid: Sequence[float] = A_GRID,
                  pseudo_targets: int = PSEUDO_TARGETS) -> OfflineAFit:
    """Fit offline RMIA's ``a`` on reference models alone (no target model, no target membership).

    Reference model j (j < ``pseudo_targets``) plays the target: its members are the records with
    ``reference_in[:, j]``, its non-members the others; the remaining models are its references, OUT ones only
    (records with none are left out). For each ``a`` on ``grid`` the simulated attack's statistic
    ``log Pr(x | theta_j) - log Pr_a(x)`` is ranked and its AUC computed (RMIA's score is a monotone function of
    this statistic, so the AUC is RMIA's up to the ties a finite population adds); the AUCs are averaged over the
    pseudo-targets and the ``a`` with the largest mean is returned (the smallest on ties).

    Parameters
    ----------
    reference_logp : array_like, shape (N, K)
        ``log Pr(x | theta_k)`` of K >= 2 reference models on N records whose inclusion is known.
    reference_in : array_like of bool, shape (N, K)
        ``reference_in[i, k]``: record i was in reference model k's training set.
    grid : sequence of float in [0, 1]
    pseudo_targets : int >= 1
        How many reference models play the target in turn (the paper uses one; averaging a few steadies the choice
        at no extra training).
    """
    owner = "fit_offline_a"
    lp = _logp(reference_logp, "reference_logp", owner, 2)
    inc = _mask(reference_in, lp.shape, "reference_in", owner)
    grid_t = tuple(_check_a(g, owner) for g in grid)
    if not grid_t:
        raise ParameterError(f"The 'grid' parameter of {owner} must hold at least one value in [0, 1]. Got () instead.")
    J = min(check_int(pseudo_targets, "pseudo_targets", owner, low=1), lp.shape[1])
    if lp.shape[1] < 2:
        raise DataError(f"{owner} needs at least 2 reference models (one plays the target, the others are its "
                        f"references); got {lp.shape[1]}. Give 'a' explicitly instead.")
    total = np.zeros(len(grid_t))
    used, records = 0, 0
    for j in range(J):
        others = np.delete(np.arange(lp.shape[1]), j)
        out = ~inc[:, others]
        keep = out.any(axis=1)
        member = inc[keep, j]
        if member.all() or not member.any():
            continue
        log_out = _log_mean_out(lp[keep][:, others], out[keep])
        stat = np.stack([lp[keep, j] - _offline_from_out(log_out, g) for g in grid_t])
        total += _auc_rows(stat, member)
        used += 1
        records = max(records, int(keep.sum()))
    if used == 0:
        raise DataError(f"{owner}: no reference model could play the target (it needs member and non-member records "
                        "that are OUT of some other reference model). With one or two reference models give 'a' "
                        "explicitly.")
    auc = total / used
    best = int(np.argmax(auc))
    return OfflineAFit(grid_t[best], grid_t, tuple(float(v) for v in auc), used, records)


def rmia_scores(target_logp, reference_logp, population_logp, population_reference_logp, *, reference_in=None,
                population_in=None, online: bool = True, a: float | None = None, gamma: float = 1.0,
                calibration_logp=None, calibration_in=None) -> RmiaScores:
    """RMIA scores of n target records against m population records (see the module docstring).

    Parameters
    ----------
    target_logp : array_like, shape (n,)
        ``log Pr(x | theta)``: the target model's log-probability of each target record's true label.
    reference_logp : array_like, shape (n, K)
        The same under each of K reference models.
    population_logp : array_like, shape (m,)
        ``log Pr(z | theta)`` of the target model on m population records (non-members).
    population_reference_logp : array_like, shape (m, K)
        The same under the K reference models.
    reference_in, population_in : array_like of bool, shape (n, K) / (m, K), optional
        Which reference models trained on which record (default: none). Offline RMIA averages OUT models only.
    online : bool
        Online (``Pr(x)`` over all reference models) or offline (OUT models and ``a``).
    a : float in [0, 1], optional
        Offline only. Default: fitted with :func:`fit_offline_a` on ``calibration_logp`` / ``calibration_in``
        (records whose inclusion in the reference models is known), else on the target and population records'
        own reference outputs and masks.
    gamma : float > 0
        The likelihood-ratio threshold of the pairwise test (1 as in ML Privacy Meter).
    """
    owner = "rmia_scores"
    t = _logp(target_logp, "target_logp", owner, 1)
    ref = _logp(reference_logp, "reference_logp", owner, 2)
    zt = _logp(population_logp, "population_logp", owner, 1)
    zref = _logp(population_reference_logp, "population_reference_logp", owner, 2)
    n, K = ref.shape
    m = zt.size
    if t.size != n or zref.shape != (m, K):
        raise DataError(f"{owner}: shapes must be target (n,), references (n, K), population (m,), population "
                        f"references (m, K); got {t.shape}, {ref.shape}, {zt.shape}, {zref.shape}.")
    if n < 1 or m < 1 or K < 1:
        raise DataError(f"{owner} needs at least one target record, one population record and one reference model; "
                        f"got n={n}, m={m}, K={K}.")
    online = check_bool(online, "online", owner)
    g = check_float(gamma, "gamma", owner, low=0.0, low_open=True)
    inc = _mask(reference_in, ref.shape, "reference_in", owner)
    zinc = _mask(population_in, zref.shape, "population_in", owner)
    fit = None
    if online:
        if a is not None:
            raise ParameterError(f"The 'a' parameter of {owner} applies to the offline attack only. Got {a!r} with "
                                 "online=True instead.")
        a_val = math.nan
    elif a is None:
        if calibration_logp is not None:
            fit = fit_offline_a(calibration_logp, calibration_in)
        else:
            fit = fit_offline_a(np.concatenate([ref, zref]), np.concatenate([inc, zinc]))
        a_val = fit.a
    else:
        a_val = _check_a(a, owner)
    a_arg = None if online else a_val
    r_x = t - log_marginal(ref, inc, online=online, a=a_arg)
    r_z = np.sort(zt - log_marginal(zref, zinc, online=online, a=a_arg))
    # LR(x, z) >= gamma  <=>  r(z) <= r(x) - log gamma: one binary search per target
    score = np.searchsorted(r_z, r_x - math.log(g), side="right") / m
    p_value = (1.0 + m - np.searchsorted(r_z, r_x, side="left")) / (m + 1.0)
    return RmiaScores(score, p_value, r_x, online, a_val, g, K, m, fit)


def saturation_note(score, member, num_population: int) -> str | None:
    """A note when targets tie at score 1 (beyond every population record): the ROC's low-FPR end is then tied, and
    only a larger population resolves it. ``member`` is used for the counts in the note only."""
    s = np.asarray(score)
    top = s >= 1.0
    if not top.any():
        return None
    non = int((top & ~np.asarray(member, dtype=bool)).sum())
    return (f"RMIA: {int(top.sum())} target records ({non} of them non-members) score 1, beyond every one of the "
            f"{num_population} population records, so they tie at the top of the ROC; the score resolves FPRs down to "
            f"about 1/{num_population} only (a larger --population resolves lower ones).")


def rmia_from_signals(signals: ReferenceSignals, *, online: bool = True, a: float | None = None,
                      gamma: float = 1.0) -> RmiaScores:
    """:func:`rmia_scores` on :class:`~dpaudit.attacks.references.ReferenceSignals` (offline ``a`` fitted on its
    calibration records unless given)."""
    cal = len(signals.calibration_logp) > 0
    return rmia_scores(signals.target_logp, signals.logp, signals.population_target_logp, signals.population_logp,
                       reference_in=signals.inclusion, population_in=signals.population_inclusion, online=online, a=a,
                       gamma=gamma, calibration_logp=signals.calibration_logp if cal else None,
                       calibration_in=signals.calibration_inclusion if cal else None)


def rmia_attack(target: Model, X_eval, y_eval, X_pool, y_pool, *, num_references: int = 16, online: bool = True,
                population: int | None = None, train_size: int | None = None, gamma: float = 1.0,
                a: float | None = None, train_fn: TrainFn | None = None, batch_train_fn: BatchTrainFn | None = None,
                seed: int = 0, executor: Executor | None = None) -> RmiaScores:
    """RMIA against ``target`` on the evaluation records, with reference models trained by the target's recipe.

    The reference models, their layout (online: the evaluation records are IN for half of them; offline: they are
    trained on the attacker's pool only) and the ``population`` records held out of the pool are those of
    :func:`~dpaudit.attacks.references.train_reference_signals`; then :func:`rmia_from_signals`.
    """
    sig, _ = train_reference_signals(target, X_eval, y_eval, X_pool, y_pool, num_references=num_references,
                                     online=online, population=population, train_size=train_size, train_fn=train_fn,
                                     batch_train_fn=batch_train_fn, seed=seed, executor=executor)
    return rmia_from_signals(sig, online=online, a=a, gamma=gamma)

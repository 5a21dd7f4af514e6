"""Likelihood-ratio attack, LiRA (Carlini, Chien, Nasr, Song, Terzis, Tramer 2022, "Membership inference attacks
from first principles", Sec. IV).

For each record (x, y) the attacker models the target's logit-scaled confidence

    phi(x, y) = log(p_y / (1 - p_y)) = log p_y - log sum_{j != y} p_j

as Gaussian over the randomness of training, once with (x, y) IN the training set and once OUT, fitted on shadow
models that did / did not train on it. The score (larger = more likely member) is

* online:  log N(phi_target; mu_in, sigma_in^2) - log N(phi_target; mu_out, sigma_out^2)  (their Eq. 4 in log form),
* offline: log P[Z <= phi_target] with Z ~ N(mu_out, sigma_out^2)  (one-sided test against OUT only, Sec. IV-C).

Fixed variance (their "global variance", recommended below ~64 shadow models): sigma_in and sigma_out are pooled
over all records instead of estimated per record. Means are always per record. With one or two reference models
no record has two IN (or two OUT) values and the pooled variance is undefined; the variance over every value of that
side is used instead, as the fixed variance of Carlini et al.'s reference code (``np.std(dat_out)`` over all records
and models), which also counts the spread between records. A record with no IN (or no OUT)
shadow gets mu_in = mu_out + the average per-record gap (or the reverse), so that its score stays on the same scale.

phi is computed from the probabilities without forming ``1 - p_y`` (the sum of the other classes is summed
directly), so confident models (p_y -> 1) do not lose every digit to cancellation. Both p_y and the rest are
floored at 1e-12 (phi in about [-27.6, 27.6]): models that output exact 0 / 1 probabilities (trees) would otherwise
give phi = +-708 and one such value would swamp the Gaussian fits.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from scipy.special import log_ndtr

from dpaudit.attacks.protocols import BatchTrainFn, Model, TrainFn
from dpaudit.attacks.shadow import shadow_probabilities
from dpaudit.attacks.threshold import check_proba
from dpaudit.errors import DataError, ParameterError, check_bool, check_int, check_probability
from dpaudit.executors import Executor

__all__ = ["logit_confidence", "lira_scores", "lira_inclusion", "lira_attack"]

_FLOOR = 1e-12   # probabilities below this are treated as 1e-12: phi stays within about +-27.6
_LOG_2PI = np.log(2.0 * np.pi)


def logit_confidence(proba, labels) -> np.ndarray:
    """phi = log p_y - log sum_{j != y} p_j for each row of ``proba`` (n, C); (n,) float64."""
    p, y = check_proba(proba, labels, "logit_confidence")
    # (n, C) -> (n,); see the module docstring for the floor
    onehot = np.zeros(p.shape, dtype=bool)
    onehot[np.arange(y.size), y] = True
    py = p[onehot]
    rest = np.where(onehot, 0.0, p).sum(axis=1)
    return np.log(np.maximum(py, _FLOOR)) - np.log(np.maximum(rest, _FLOOR))


def _masked_mean_var(phi: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Per-row mean and variance of phi over mask, counts, and the pooled variance (NaN where undefined)."""
    cnt = mask.sum(axis=1)
    s = np.where(mask, phi, 0.0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mu = s / cnt
        dev2 = np.where(mask, (phi - mu[:, None]) ** 2, 0.0).sum(axis=1)
        var = dev2 / (cnt - 1)
    dof = float(np.sum(np.maximum(cnt - 1, 0)))
    if dof > 0:
        pooled = float(np.nansum(np.where(cnt > 1, dev2, 0.0)) / dof)
    else:   # no record has two values: the variance over every value (Carlini et al.'s code), see the module docstring
        vals = phi[mask]
        pooled = float(np.var(vals, ddof=1)) if vals.size > 1 else np.nan
    return mu, np.where(cnt > 1, var, np.nan), cnt, pooled


def lira_scores(target_phi, shadow_phi, in_mask, *, online: bool = True, fixed_variance: bool = True,
                min_std: float = 1e-3) -> np.ndarray:
    """LiRA scores, vectorised over records x shadow models (no Python loop over records).

    Parameters
    ----------
    target_phi : array_like, shape (n,)
        phi of the target model on the n evaluation records.
    shadow_phi : array_like, shape (n, K)
        phi of each of K shadow models on the same records.
    in_mask : array_like of bool, shape (n, K)
        ``in_mask[i, k]``: record i was in shadow k's training set. Offline needs OUT shadows only.
    online : bool
        Online (IN and OUT Gaussians) or offline (OUT only) test.
    fixed_variance : bool
        Pool the variances over records (recommended with few shadows) instead of per-record variances
        (records with fewer than 2 IN / OUT shadows fall back to the pooled one either way).
    min_std : float
        Floor on every standard deviation (phi units), so that identical shadows do not give infinite scores.
    """
    t = np.asarray(target_phi, dtype=np.float64).ravel()
    phi = np.asarray(shadow_phi, dtype=np.float64)
    mask = np.asarray(in_mask, dtype=bool)
    if phi.ndim != 2 or phi.shape[0] != t.size or mask.shape != phi.shape:
        raise DataError(f"lira_scores: shapes must be target (n,), shadows (n, K), mask (n, K); got {t.shape}, "
                        f"{phi.shape}, {mask.shape}.")
    if not (np.all(np.isfinite(t)) and np.all(np.isfinite(phi))):
        raise DataError("lira_scores: phi values must be finite.")
    online = check_bool(online, "online", "lira_scores")
    fixed_variance = check_bool(fixed_variance, "fixed_variance", "lira_scores")

    mu_out, var_out, n_out, pooled_out = _masked_mean_var(phi, ~mask)
    if np.isnan(pooled_out):
        raise DataError("lira_scores needs at least two OUT shadow-model values (over all records).")
    if online:
        mu_in, var_in, n_in, pooled_in = _masked_mean_var(phi, mask)
        both = (n_in > 0) & (n_out > 0)
        if not both.any() or np.isnan(pooled_in):
            raise DataError("lira_scores (online) needs records seen both IN and OUT by shadow models "
                            "(and at least two IN values over all records).")
        gap = float(np.mean(mu_in[both] - mu_out[both]))
        mu_in = np.where(n_in > 0, mu_in, mu_out + gap)
        mu_out = np.where(n_out > 0, mu_out, mu_in - gap)
    if fixed_variance:
        sd_out = np.full(t.size, np.sqrt(pooled_out))
    else:
        sd_out = np.sqrt(np.where(np.isnan(var_out), pooled_out, var_out))
    sd_out = np.maximum(sd_out, min_std)
    if not online:
        return log_ndtr((t - mu_out) / sd_out)
    sd_in = np.full(t.size, np.sqrt(pooled_in)) if fixed_variance else \
        np.sqrt(np.where(np.isnan(var_in), pooled_in, var_in))
    sd_in = np.maximum(sd_in, min_std)
    z_in, z_out = (t - mu_in) / sd_in, (t - mu_out) / sd_out
    return (-0.5 * z_in ** 2 - np.log(sd_in)) - (-0.5 * z_out ** 2 - np.log(sd_out))


def lira_inclusion(num_records: int, num_shadows: int, *, seed: int, fraction: float = 0.5) -> np.ndarray:
    """(num_records, num_shadows) bool: each record is IN for exactly ``k = round(fraction K)`` of the K shadows
    (clipped to [1, K - 1]), chosen uniformly at random per record — so each record is in each shadow with
    probability k / K (1/2 by default, as in Carlini et al. 2022), and every record has IN and OUT shadows.
    Shadow j's training set then has about ``fraction * num_records`` records."""
    owner = "lira_inclusion"
    n = check_int(num_records, "num_records", owner, low=1)
    K = check_int(num_shadows, "num_shadows", owner, low=2)
    frac = check_probability(fraction, "fraction", owner)
    rng = np.random.default_rng(check_int(seed, "seed", owner, low=0))
    k = int(min(max(round(frac * K), 1), K - 1))
    order = np.argsort(rng.random((n, K)), axis=1)
    return order < k


def lira_attack(target: Model, X_eval, y_eval, X_pool, y_pool, *, num_shadows: int = 16,
                train_fn: TrainFn | None = None, batch_train_fn: BatchTrainFn | None = None, online: bool = True,
                fixed_variance: bool = True, train_size: int | None = None, seed: int = 0,
                executor: Executor | None = None) -> np.ndarray:
    """LiRA scores (larger = more likely member) of the evaluation records against ``target``.

    Shadow models are trained with the target's recipe (``batch_train_fn`` for all at once, else ``train_fn`` one
    at a time). Online: the shadows draw from the attacker's pool *and* the evaluation records (each IN for half the
    shadows), so every evaluation record has IN and OUT shadows. Offline: the shadows draw only from the pool (each
    pool record IN for half the shadows) and the evaluation records are OUT for all of them.
    Each shadow's training set has about half the records it draws from, or about ``train_size`` records when
    given (each record is then IN for a fraction ``train_size / records drawn from`` of the shadows; online, at
    least 2 and at most K - 2 of them, so IN and OUT variances exist): shadows should match the target's
    training-set size, since the size changes how much a model memorises.
    The shadow models are trained in units on ``executor`` (see :func:`~dpaudit.attacks.shadow.shadow_probabilities`).
    """
    owner = "lira_attack"
    K = check_int(num_shadows, "num_shadows", owner, low=2)
    seed = check_int(seed, "seed", owner, low=0)
    X_eval, y_eval = np.asarray(X_eval), np.asarray(y_eval)
    X_pool, y_pool = np.asarray(X_pool), np.asarray(y_pool)
    if online:
        X_all, y_all = np.concatenate([X_pool, X_eval]), np.concatenate([y_pool, y_eval])
    else:
        X_all, y_all = X_pool, y_pool
    frac = 0.5 if train_size is None else \
        min(check_int(train_size, "train_size", owner, low=1) / len(X_all), 1.0 - 1e-9)
    if online:
        if K < 4:
            raise ParameterError(f"The 'num_shadows' parameter of {owner} must be an int >= 4 for the online attack "
                                 f"(two IN and two OUT shadows per record). Got {K} instead.")
        frac = min(max(frac, 2.0 / K), 1.0 - 2.0 / K)      # >= 2 IN and >= 2 OUT shadows per record
    inc = lira_inclusion(len(X_all), K, seed=seed, fraction=frac)
    datasets = [(X_all[inc[:, k]], y_all[inc[:, k]]) for k in range(K)]
    probs = shadow_probabilities(datasets, [X_eval] * K, train_fn=train_fn, batch_train_fn=batch_train_fn,
                                 seed=seed + 1, executor=executor, label="LiRA reference models")
    shadow_phi = np.stack([logit_confidence(p, y_eval) for p in probs], axis=1)
    in_eval = inc[len(X_pool):] if online else np.zeros((len(X_eval), K), dtype=bool)
    target_phi = logit_confidence(target.predict_proba(X_eval), y_eval)
    return lira_scores(target_phi, shadow_phi, in_eval, online=online, fixed_variance=fixed_variance)

"""Canary scoring and certified epsilon lower bounds from canary audits, beside the ideal-attack reference.

Scores (larger = more likely included)
--------------------------------------
- :func:`loss_scores`: minus the cross-entropy of the canary's (input, label) under the model (black-box).
- :func:`lira_scores`: LiRA-style log likelihood ratio (Carlini et al. 2022) of the logit-scaled confidence
  ``log(p / (1 - p))`` under Gaussians fitted per canary on reference models that did / did not include it
  (offline: only the "out" Gaussian; the score is then its upper-tail log-likelihood, larger = more likely in).
- :func:`dirac_scores`: white-box. The observation of canary ``k`` in step ``t`` is the noised gradient sum at its
  coordinate in units of ``sigma C`` (``x_t``); an included canary adds ``mu = 1/sigma`` with probability q.
  ``method="lr"`` sums the exact per-step log likelihood ratio of that mixture, ``log(1 - q + q exp(mu x_t -
  mu^2 / 2))``, over all observed steps (the Neyman-Pearson test for a dead coordinate); ``"sum"`` is the
  plain alignment ``sum_t x_t``.

Certified bounds
----------------
- **One-run** (Steinke, Nasr, Jagielski 2023, Theorem 3 via :func:`dpaudit.attacks.bounds.one_run_audit`):
  canaries included by independent fair coins; ``k`` "in" guesses for the highest scores and ``k`` "out" guesses
  for the lowest, for each ``k`` of a grid fixed in advance; the failure probability is split over the grid
  (Bonferroni), and the largest bound is reported. Valid at confidence ``confidence`` with no further assumption
  than the coins being fair and independent of everything else.
- **Multi-run** (Jagielski et al. 2020; Nasr et al. 2021): one trial per independently trained model; the
  threshold is chosen on one half of the models and the Clopper-Pearson bound computed on the other half
  (:func:`dpaudit.attacks.bounds.epsilon_lower_bound` with ``selection="split"``), or over a fixed threshold
  list with Bonferroni.

Both are ``kind = "certified"``: with probability >= ``confidence`` over the audit's own randomness (coins,
training noise), a correct (epsilon, delta)-DP training pipeline gives a bound <= epsilon.

Ideal-attack reference
----------------------
:func:`ideal_scores` draws the exact likelihood-ratio statistic of the mechanism at its accounted parameters
(Gaussian: the output itself; Laplace with epsilon = sensitivity / scale: the output; Poisson-subsampled Gaussian over
T steps: the sum of per-step mixture log likelihood ratios of a dead-coordinate Dirac canary).
:func:`ideal_one_run_epsilon` / :func:`ideal_multi_run_epsilon` simulate the *same* audit (same trials, same
confidence rule, same threshold / guess-count selection) with those scores and report the median bound over
replicates, so a reader sees whether a small empirical bound means "private" or "too few trials". The reference is
a figure of merit (a median; a single audit may land above it), not a bound. :func:`ideal_roc` gives the test's ROC.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
from scipy import special, stats

from dpaudit.attacks.bounds import epsilon_from_rates, epsilon_lower_bound, one_run_audit
from dpaudit.attacks.results import CERTIFIED, HasBoundKind
from dpaudit.errors import DataError, ParameterError, check_choice, check_float, check_int, check_probability
from dpaudit.serial import JsonValue

__all__ = [
    "SCORE_KINDS",
    "CanaryBound",
    "loss_scores",
    "logit_confidence",
    "lira_scores",
    "dirac_scores",
    "one_run_k_grid",
    "one_run_certified",
    "multi_run_certified",
    "ideal_roc",
    "ideal_scores",
    "ideal_one_run_epsilon",
    "ideal_multi_run_epsilon",
    "soundness_one_run",
    "soundness_multi_run",
]

SCORE_KINDS = ("loss", "lira", "dirac-lr", "dirac-sum")


@dataclass(frozen=True)
class CanaryBound(HasBoundKind):
    """A certified epsilon lower bound from a canary audit.

    Attributes
    ----------
    audit : ``"one-run"`` or ``"multi-run"``
    epsilon : the lower bound (holds with probability >= ``confidence``)
    delta, confidence
    trials : canaries (one-run) or evaluation models (multi-run) the bound is computed on
    score : the score used (:data:`SCORE_KINDS`)
    ideal_epsilon : the ideal attack's bound at the same trials and rule (None when no mechanism was given)
    kind : ``"certified"`` (always, for this type)
    details : the rule's numbers (one-run: k_plus, k_minus, correct, grid; multi-run: threshold, FPR, FNR, ...)
    """

    audit: str
    epsilon: float
    delta: float
    confidence: float
    trials: int
    score: str
    ideal_epsilon: float | None = None
    kind: str = CERTIFIED
    details: Mapping[str, JsonValue] = field(default_factory=dict)

    def with_ideal(self, ideal: float | None) -> "CanaryBound":
        return CanaryBound(self.audit, self.epsilon, self.delta, self.confidence, self.trials, self.score, ideal,
                           self.kind, dict(self.details))


# --------------------------------------------------------------------------------------------------
# scores


def _probs_labels(probs, labels, owner: str) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(probs, dtype=np.float64)
    y = np.asarray(labels).astype(np.int64).ravel()
    if p.ndim < 2 or p.shape[-2] != y.size or np.any(y < 0) or np.any(y >= p.shape[-1]):
        raise DataError(f"{owner}: 'probs' must have shape (..., m, C) with m = len(labels) = {y.size} and labels in "
                        f"[0, C). Got probs of shape {p.shape}.")
    return p, y


def loss_scores(probs, labels) -> np.ndarray:
    """``log p(label | x)`` (minus the cross-entropy), shape ``probs.shape[:-1]``; larger = more likely in."""
    p, y = _probs_labels(probs, labels, "loss_scores")
    py = np.take_along_axis(p, np.broadcast_to(y[:, None], p.shape[:-1] + (1,)), axis=-1)[..., 0]
    return np.log(np.clip(py, 1e-300, 1.0))


def logit_confidence(probs, labels) -> np.ndarray:
    """``log p_y - log(1 - p_y)`` (Carlini et al. 2022's logit scaling), shape ``probs.shape[:-1]``."""
    p, y = _probs_labels(probs, labels, "logit_confidence")
    py = np.take_along_axis(p, np.broadcast_to(y[:, None], p.shape[:-1] + (1,)), axis=-1)[..., 0]
    rest = 1.0 - py
    return np.log(np.clip(py, 1e-300, 1.0)) - np.log(np.clip(rest, 1e-300, 1.0))


def lira_scores(target, ref_out, ref_in=None, *, min_std: float = 1e-3) -> np.ndarray:
    """LiRA log likelihood ratio per canary.

    ``target``: ``(..., m)`` logit confidences of the audited model(s); ``ref_out`` / ``ref_in``: ``(R, m)`` of
    reference models without / with each canary. Online (``ref_in`` given): ``log N(s; mu_in, sd_in) -
    log N(s; mu_out, sd_out)``. Offline: ``log Phi((s - mu_out) / sd_out)`` (one-sided, larger = more likely in).
    """
    s = np.asarray(target, dtype=np.float64)
    ro = np.asarray(ref_out, dtype=np.float64)
    if ro.ndim != 2 or ro.shape[1] != s.shape[-1] or ro.shape[0] < 2:
        raise DataError(f"lira_scores: 'ref_out' must have shape (R >= 2, {s.shape[-1]}). Got {ro.shape}.")
    mo, so = ro.mean(0), np.maximum(ro.std(0, ddof=1), min_std)
    if ref_in is None:
        return special.log_ndtr((s - mo) / so)
    ri = np.asarray(ref_in, dtype=np.float64)
    if ri.ndim != 2 or ri.shape[1] != s.shape[-1] or ri.shape[0] < 2:
        raise DataError(f"lira_scores: 'ref_in' must have shape (R >= 2, {s.shape[-1]}). Got {ri.shape}.")
    mi, si = ri.mean(0), np.maximum(ri.std(0, ddof=1), min_std)
    return stats.norm.logpdf(s, mi, si) - stats.norm.logpdf(s, mo, so)


def dirac_scores(observations, *, sampling_rate: float, noise_multiplier: float, method: str = "lr") -> np.ndarray:
    """White-box scores ``(M, m)`` from per-step observations ``(T, M, m)`` in units of ``sigma C`` (NaN = model
    did not step); see the module docstring."""
    owner = "dirac_scores"
    q = check_float(sampling_rate, "sampling_rate", owner, low=0.0, high=1.0, low_open=True)
    sigma = check_float(noise_multiplier, "noise_multiplier", owner, low=0.0, low_open=True)
    check_choice(method, "method", owner, ("lr", "sum"))
    x = np.asarray(observations, dtype=np.float64)
    if x.ndim != 3:
        raise DataError(f"{owner}: 'observations' must have shape (T, M, m). Got {x.shape}.")
    seen = ~np.isnan(x)
    x = np.where(seen, x, 0.0)
    if method == "sum":
        return x.sum(axis=0)
    mu = 1.0 / sigma
    # log(1 - q + q e^{mu x - mu^2/2}) = logaddexp(log(1-q), log q + mu x - mu^2/2)
    a = math.log1p(-q) if q < 1.0 else -np.inf
    ll = np.logaddexp(a, math.log(q) + mu * x - mu * mu / 2.0)
    return np.where(seen, ll, 0.0).sum(axis=0)


# --------------------------------------------------------------------------------------------------
# certified bounds


def one_run_k_grid(num_canaries: int) -> tuple[int, ...]:
    """The fixed grid of guess counts k (k "in" and k "out" guesses): m/2 times 1/50, 1/20, 1/10, 1/4, 1/2, 1,
    at least 1, distinct."""
    m = check_int(num_canaries, "canaries", "one_run_k_grid", low=1)
    ks = sorted({max(1, int(round(f * m / 2))) for f in (0.02, 0.05, 0.1, 0.25, 0.5, 1.0)})
    return tuple(k for k in ks if 2 * k <= m) or (0,)


def _one_run_grid(num_canaries: int, k_grid: Sequence[int] | None) -> tuple[int, ...]:
    grid = one_run_k_grid(num_canaries) if k_grid is None else tuple(int(k) for k in k_grid)
    if not grid or any(k < 0 or 2 * k > num_canaries for k in grid):
        raise ParameterError(f"The 'k_grid' parameter of one_run_certified must be non-empty ints k with 0 <= 2k <= "
                             f"{num_canaries}. Got {grid} instead.")
    return grid


def one_run_certified(scores, included, *, delta: float = 0.0, confidence: float = 0.95,
                      k_grid: Sequence[int] | None = None, score: str = "loss") -> CanaryBound:
    """One-run certified bound (see the module docstring) from ``m`` canary scores and their coin flips."""
    owner = "one_run_certified"
    s = np.asarray(scores, dtype=np.float64).ravel()
    inc = np.asarray(included, dtype=bool).ravel()
    if s.size != inc.size or s.size < 2 or not np.all(np.isfinite(s)):
        raise DataError(f"{owner}: 'scores' and 'included' must be finite, of equal length >= 2. Got {s.size} and {inc.size}.")
    conf = check_probability(confidence, "confidence", owner)
    d = check_float(delta, "delta", owner, low=0.0, high=1.0, high_open=True)
    grid = _one_run_grid(s.size, k_grid)
    each = 1.0 - (1.0 - conf) / len(grid)
    best = None
    for k in grid:
        b = one_run_audit(s, inc, k_plus=k, k_minus=k, delta=d, confidence=each)
        if best is None or b.epsilon > best.epsilon:
            best = b
    return CanaryBound("one-run", float(best.epsilon), d, conf, int(s.size), score,
                       details={"k_plus": best.k_plus, "k_minus": best.k_minus, "correct": best.correct,
                                "k_grid": list(grid), "rule": "Steinke et al. 2023 Thm 3, Bonferroni over k_grid"})


def multi_run_certified(scores, included, *, delta: float = 0.0, confidence: float = 0.95, seed: int = 0,
                        selection: str = "split", thresholds: Sequence[float] | None = None,
                        score: str = "loss") -> CanaryBound:
    """Multi-run certified bound from one score per independently trained model and its coin flip."""
    owner = "multi_run_certified"
    s = np.asarray(scores, dtype=np.float64).ravel()
    inc = np.asarray(included, dtype=bool).ravel()
    if s.size != inc.size or not np.all(np.isfinite(s)):
        raise DataError(f"{owner}: 'scores' and 'included' must be finite and of equal length. Got {s.size} and {inc.size}.")
    if s.size < 2:
        raise ParameterError(f"The 'models' parameter of {owner} must be an int >= 2. Got {s.size} instead.")
    if inc.sum() < 2 or (~inc).sum() < 2:
        raise DataError(f"{owner} needs at least 2 models with and 2 without the canary; got {int(inc.sum())} and "
                        f"{int((~inc).sum())} (too few models).")
    b = epsilon_lower_bound(s[inc], s[~inc], delta=delta, confidence=confidence, selection=selection,
                            thresholds=thresholds, seed=seed)
    return CanaryBound("multi-run", float(b.epsilon), float(b.delta), float(b.confidence),
                       int(b.num_members + b.num_nonmembers), score,
                       details={"threshold": b.threshold, "fpr": b.fpr, "fnr": b.fnr, "fpr_high": b.fpr_high,
                                "fnr_high": b.fnr_high, "selection": b.selection, "num_in": b.num_members,
                                "num_out": b.num_nonmembers})


# --------------------------------------------------------------------------------------------------
# the ideal attack


def ideal_roc(mechanism: Mapping[str, Any], *, grid: int = 4001, samples: int = 200_000, seed: int = 0
              ) -> tuple[np.ndarray, np.ndarray]:
    """``(fpr, tpr)`` of the exact likelihood-ratio test "in vs out" of one record, FPR increasing.

    ``mechanism``: ``{"kind": "gaussian", "mu": sensitivity / sigma}``, ``{"kind": "laplace", "epsilon":
    sensitivity / scale}``, or ``{"kind": "subsampled_gaussian", "sampling_rate": q, "noise_multiplier": sigma,
    "steps": T}`` (Monte Carlo with ``samples`` draws per hypothesis, seeded).
    """
    owner = "ideal_roc"
    kind = check_choice(mechanism.get("kind"), "kind", owner, ("gaussian", "laplace", "subsampled_gaussian"))
    if kind == "gaussian":
        mu = check_float(mechanism.get("mu"), "mu", owner, low=0.0)
        t = np.linspace(-8.0, mu + 8.0, grid)[::-1]
        return special.ndtr(-t), special.ndtr(mu - t)
    if kind == "laplace":
        eps = check_float(mechanism.get("epsilon"), "epsilon", owner, low=0.0)
        # out ~ Lap(0, 1), in ~ Lap(eps, 1); the LR is monotone in x, so tests are x >= t
        t = np.linspace(-30.0, eps + 30.0, grid)[::-1]
        return stats.laplace.sf(t), stats.laplace.sf(t - eps)
    q = check_float(mechanism.get("sampling_rate"), "sampling_rate", owner, low=0.0, high=1.0, low_open=True)
    sigma = check_float(mechanism.get("noise_multiplier"), "noise_multiplier", owner, low=0.0, low_open=True)
    T = check_int(mechanism.get("steps"), "steps", owner, low=1)
    n = check_int(samples, "samples", owner, low=100)
    rng = np.random.default_rng(np.random.SeedSequence([check_int(seed, "seed", owner, low=0), 0x1DEA]))
    mu = 1.0 / sigma
    a = math.log1p(-q) if q < 1.0 else -np.inf
    out = np.zeros(n)
    inn = np.zeros(n)
    chunk = max(1, 4_000_000 // n)
    for s in range(0, T, chunk):
        w = min(chunk, T - s)
        x0 = rng.standard_normal((w, n))
        x1 = rng.standard_normal((w, n)) + mu * (rng.random((w, n)) < q)
        out += np.logaddexp(a, math.log(q) + mu * x0 - mu * mu / 2).sum(0)
        inn += np.logaddexp(a, math.log(q) + mu * x1 - mu * mu / 2).sum(0)
    thr = np.unique(np.concatenate([out, inn]))[::-1]
    out.sort()
    inn.sort()
    fpr = 1.0 - np.searchsorted(out, thr, side="left") / n
    tpr = 1.0 - np.searchsorted(inn, thr, side="left") / n
    return fpr, tpr


def ideal_scores(mechanism: Mapping[str, Any], num_out: int, num_in: int, rng: np.random.Generator
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Scores of the exact likelihood-ratio test (any increasing transform of it) for ``num_out`` trials without
    and ``num_in`` trials with the record, drawn from the mechanism (see :func:`ideal_roc` for ``mechanism``)."""
    owner = "ideal_scores"
    kind = check_choice(mechanism.get("kind"), "kind", owner, ("gaussian", "laplace", "subsampled_gaussian"))
    if kind == "gaussian":
        mu = check_float(mechanism.get("mu"), "mu", owner, low=0.0)
        return rng.standard_normal(num_out), rng.standard_normal(num_in) + mu
    if kind == "laplace":
        eps = check_float(mechanism.get("epsilon"), "epsilon", owner, low=0.0)
        return rng.laplace(size=num_out), rng.laplace(size=num_in) + eps
    q = check_float(mechanism.get("sampling_rate"), "sampling_rate", owner, low=0.0, high=1.0, low_open=True)
    sigma = check_float(mechanism.get("noise_multiplier"), "noise_multiplier", owner, low=0.0, low_open=True)
    T = check_int(mechanism.get("steps"), "steps", owner, low=1)
    x0 = rng.standard_normal((T, 1, num_out))
    x1 = rng.standard_normal((T, 1, num_in)) + (rng.random((T, 1, num_in)) < q) / sigma
    f = lambda x: dirac_scores(x, sampling_rate=q, noise_multiplier=sigma)[0]  # noqa: E731
    return f(x0), f(x1)


def _replicate(fn, replicates: int, seed: int) -> float:
    r = check_int(replicates, "replicates", "ideal reference", low=1)
    rng = np.random.default_rng(np.random.SeedSequence([check_int(seed, "seed", "ideal reference", low=0), 0x1DEB]))
    return float(np.median([fn(rng) for _ in range(r)]))


def ideal_multi_run_epsilon(mechanism: Mapping[str, Any], num_in: int, num_out: int, *, delta: float = 0.0,
                            confidence: float = 0.95, replicates: int = 21, seed: int = 0) -> float:
    """Median, over ``replicates`` simulated audits, of the multi-run bound (split rule) that the exact
    likelihood-ratio test of ``mechanism`` certifies with ``num_in`` / ``num_out`` trials."""
    n1 = check_int(num_in, "num_in", "ideal_multi_run_epsilon", low=2)
    n0 = check_int(num_out, "num_out", "ideal_multi_run_epsilon", low=2)

    def one(rng):
        s0, s1 = ideal_scores(mechanism, n0, n1, rng)
        return epsilon_lower_bound(s1, s0, delta=delta, confidence=confidence, seed=int(rng.integers(2**31))).epsilon

    return _replicate(one, replicates, seed)


def ideal_one_run_epsilon(mechanism: Mapping[str, Any], num_canaries: int, *, delta: float = 0.0,
                          confidence: float = 0.95, k_grid: Sequence[int] | None = None, replicates: int = 21,
                          seed: int = 0) -> float:
    """Median, over ``replicates`` simulated one-run audits with ``num_canaries`` fair-coin canaries, of the bound
    that the exact likelihood-ratio test of ``mechanism`` certifies with the rule of :func:`one_run_certified`."""
    m = check_int(num_canaries, "canaries", "ideal_one_run_epsilon", low=2)

    def one(rng):
        inc = rng.random(m) < 0.5
        s0, s1 = ideal_scores(mechanism, int((~inc).sum()), int(inc.sum()), rng)
        s = np.empty(m)
        s[~inc], s[inc] = s0, s1
        return one_run_certified(s, inc, delta=delta, confidence=confidence, k_grid=k_grid).epsilon

    return _replicate(one, replicates, seed)


# --------------------------------------------------------------------------------------------------
# soundness checks on mechanisms with known epsilon (used by the tests and bench/bench_canary.py)


def soundness_one_run(epsilon: float, num_canaries: int, runs: int, *, k_grid: Sequence[int] | None = None,
                      seed: int = 0) -> np.ndarray:
    """One-run bounds of ``runs`` audits of epsilon-DP randomized response on each canary's coin (pure DP, exact
    epsilon): a correct certified bound exceeds ``epsilon`` in at most 1 - confidence of the runs."""
    eps = check_float(epsilon, "epsilon", "soundness_one_run", low=0.0)
    m = check_int(num_canaries, "canaries", "soundness_one_run", low=2)
    rng = np.random.default_rng(np.random.SeedSequence([check_int(seed, "seed", "soundness_one_run", low=0), 0x5011]))
    p = math.exp(eps) / (1.0 + math.exp(eps))
    out = np.empty(check_int(runs, "runs", "soundness_one_run", low=1))
    for r in range(out.size):
        inc = rng.random(m) < 0.5
        o = np.where(rng.random(m) < p, inc, ~inc) + 1e-6 * rng.random(m)
        out[r] = one_run_certified(o, inc, k_grid=k_grid).epsilon
    return out


def soundness_multi_run(mu: float, num_models: int, runs: int, *, seed: int = 0) -> tuple[int, np.ndarray]:
    """``(failures, bounds)`` of ``runs`` multi-run audits of the Gaussian mechanism (``mu`` = sensitivity / sigma)
    on one bit; a failure is a bound above the epsilon of the chosen threshold's exact (FPR, FNR), which is <= the
    mechanism's epsilon: a correct certified bound fails in at most 1 - confidence of the runs."""
    n = check_int(num_models, "models", "soundness_multi_run", low=4)
    rng = np.random.default_rng(np.random.SeedSequence([check_int(seed, "seed", "soundness_multi_run", low=0), 0x5012]))
    fails, vals = 0, np.empty(check_int(runs, "runs", "soundness_multi_run", low=1))
    for r in range(vals.size):
        inc = rng.random(n) < 0.5
        x = inc * mu + rng.standard_normal(n)
        b = multi_run_certified(x, inc, seed=r)
        t = b.details["threshold"]
        fails += int(b.epsilon > float(epsilon_from_rates(special.ndtr(-t), special.ndtr(t - mu))))
        vals[r] = b.epsilon
    return fails, vals

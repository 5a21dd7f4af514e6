"""Empirical lower bounds on epsilon from membership tests.

Hypothesis-testing bound (Kairouz, Oh, Viswanath 2015, Thm 2.1; used for auditing by Jagielski, Ullman,
Oprea 2020 and Nasr et al. 2021): if a mechanism is (eps, delta)-DP, every test of "record in" vs "record
out" with false-positive rate FPR and false-negative rate FNR satisfies

    FPR + e^eps FNR >= 1 - delta   and   FNR + e^eps FPR >= 1 - delta,

hence eps >= max(log((1 - delta - FNR) / FPR), log((1 - delta - FPR) / FNR)). With upper confidence limits
FPR_hi, FNR_hi that hold jointly with probability >= 1 - alpha, the same expression with the limits in place of
the rates is a lower bound on eps with confidence 1 - alpha. Limits are one-sided Clopper-Pearson (exact
binomial), each at level alpha / 2 (union bound over the two rates), and with Bonferroni also over thresholds.

Honest threshold choice: ``selection="split"`` picks the threshold on one half of the members and one half of
the non-members and evaluates it on the other halves; ``selection="bonferroni"`` takes a fixed list of
thresholds given in advance and splits alpha over them. The best threshold is never chosen on the data the bound
is reported on.

What the Clopper-Pearson bound assumes: each member / non-member trial is an independent Bernoulli outcome —
true when every trial comes from its own run of the mechanism (mechanism tests, one model per trial). On a single
trained model the records' outcomes are coupled through the model; then the bound is an estimate, and the
one-run audit below (which needs independent inclusion of each canary with probability 1/2) is the rigorous one.
Every bound therefore carries ``kind`` (:data:`~dpaudit.attacks.results.BOUND_KINDS`): callers say
``kind="certified"`` only when each trial is an independent run; the default is ``"estimate"``. For estimates,
:func:`epsilon_bound_over_splits` reports the spread over several split seeds of the same scores, so a reader
sees how much of the figure is the draw of the split.

One-run audit (Steinke, Nasr, Jagielski 2023, "Privacy auditing with one (1) training run", Theorem 3):
m canaries, canary i included iff S_i = +1 with S uniform on {-1, +1}^m; the auditor guesses T_i in {-1, 0, +1}
with at most r non-zero guesses. If the mechanism is (eps, delta)-DP, the number W of correct guesses satisfies,
for every v,

    P[W >= v] <= f(v) + 2 m delta * max_{i = 1..v} (f(v - i) - f(v)) / i,
    f(u) := P[Binomial(r, e^eps / (1 + e^eps)) >= u].

The bound at confidence 1 - beta is the largest eps this inequality rejects at level beta for the observed v.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Sequence

import numpy as np
from scipy import special, stats

from dpaudit.attacks.results import ESTIMATE, EpsilonBound, OneRunBound, check_bound_kind
from dpaudit.errors import DataError, ParameterError, check_choice, check_float, check_int, check_probability

__all__ = [
    "clopper_pearson",
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "epsilon_from_rates",
    "epsilon_lower_bound",
    "epsilon_bound_over_splits",
    "bayes_epsilon",
    "bayes_gdp_mu",
    "one_run_p_value",
    "one_run_epsilon",
    "one_run_epsilon_batch",
    "one_run_guesses",
    "one_run_audit",
]


def clopper_pearson_lower(k, n, alpha):
    """One-sided lower limit p_lo with P[p >= p_lo] >= 1 - alpha for k successes in n trials (vectorised).

    p_lo = Beta.ppf(alpha; k, n - k + 1), and 0 when k == 0 (Clopper & Pearson 1934).
    """
    k = np.asarray(k, dtype=float)
    n = np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore"):
        lo = stats.beta.ppf(alpha, np.maximum(k, 1e-300), n - k + 1.0)
    return np.where(k <= 0, 0.0, lo)


def clopper_pearson_upper(k, n, alpha):
    """One-sided upper limit p_hi with P[p <= p_hi] >= 1 - alpha for k successes in n trials (vectorised).

    p_hi = Beta.ppf(1 - alpha; k + 1, n - k), and 1 when k == n (Clopper & Pearson 1934).
    """
    k = np.asarray(k, dtype=float)
    n = np.asarray(n, dtype=float)
    alpha = np.asarray(alpha, dtype=float)
    with np.errstate(invalid="ignore"):
        hi = stats.beta.ppf(1.0 - alpha, k + 1.0, np.maximum(n - k, 1e-300))
    return np.where(k >= n, 1.0, hi)


def clopper_pearson(k, n, confidence: float = 0.95):
    """Two-sided exact binomial interval (low, high) at level ``confidence`` (vectorised over k, n)."""
    conf = check_probability(confidence, "confidence", "clopper_pearson")
    a = (1.0 - conf) / 2.0
    return clopper_pearson_lower(k, n, a), clopper_pearson_upper(k, n, a)


def epsilon_from_rates(fpr, fnr, delta: float = 0.0):
    """max(0, log((1 - delta - fnr) / fpr), log((1 - delta - fpr) / fnr)), vectorised; 0 where neither applies."""
    fpr = np.asarray(fpr, dtype=float)
    fnr = np.asarray(fnr, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.log(np.maximum(1.0 - delta - fnr, 0.0)) - np.log(fpr)
        b = np.log(np.maximum(1.0 - delta - fpr, 0.0)) - np.log(fnr)
    out = np.maximum(np.nan_to_num(a, nan=-np.inf), np.nan_to_num(b, nan=-np.inf))
    return np.maximum(out, 0.0)


def _counts(pos_sorted: np.ndarray, neg_sorted: np.ndarray, thr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(false negatives, false positives) of "member iff score >= t" for each t."""
    fn = np.searchsorted(pos_sorted, thr, side="left")               # members below t
    fp = neg_sorted.size - np.searchsorted(neg_sorted, thr, side="left")
    return fn, fp


@functools.lru_cache(maxsize=16)
def _cp_upper_table(n: int, alpha: float) -> np.ndarray:
    """clopper_pearson_upper(k, n, alpha) for k = 0..n (read-only): the same numbers, computed once per (n, alpha)
    -- the split bound evaluates up to n thresholds per draw and draws several splits of equal sizes."""
    table = clopper_pearson_upper(np.arange(n + 1), n, alpha)
    table.setflags(write=False)
    return table


def _cp_upper_counts(k: np.ndarray, n: int, alpha: float) -> np.ndarray:
    if 4 * k.size >= n:                        # many thresholds: look the limits up by count
        return _cp_upper_table(int(n), float(alpha))[k]
    return clopper_pearson_upper(k, n, alpha)


def _bound_at(pos: np.ndarray, neg: np.ndarray, thr: np.ndarray, alpha_each: float, delta: float):
    pos, neg = np.sort(pos), np.sort(neg)
    fn, fp = _counts(pos, neg, thr)
    fnr_hi = _cp_upper_counts(fn, pos.size, alpha_each)
    fpr_hi = _cp_upper_counts(fp, neg.size, alpha_each)
    return epsilon_from_rates(fpr_hi, fnr_hi, delta), fn / pos.size, fp / neg.size, fnr_hi, fpr_hi


def epsilon_lower_bound(member_scores, nonmember_scores, *, delta: float = 0.0, confidence: float = 0.95,
                        selection: str = "split", thresholds: Sequence[float] | None = None,
                        seed: int = 0, kind: str = ESTIMATE, fraction: float = 0.5) -> EpsilonBound:
    """Lower bound on epsilon, valid with probability >= ``confidence``, from member / non-member scores.

    Parameters
    ----------
    member_scores, nonmember_scores : array_like, shape (n_1,), (n_0,)
        Scores (larger = more likely member) of independent "in" and "out" trials.
    delta : float in [0, 1)
        The delta of the (eps, delta) guarantee being tested.
    confidence : float in (0, 1)
        Probability (over the trials) that the returned bound is <= the true epsilon.
    selection : "split" or "bonferroni"
        ``"split"``: members and non-members are halved (seeded); the threshold maximising the bound on the
        first halves (candidates: every distinct score there, or ``thresholds`` when given) is evaluated on the
        second halves with limits at level (1 - confidence) / 2 each. ``"bonferroni"``: ``thresholds`` (fixed
        before seeing the data) are all evaluated on all the data with limits at level
        (1 - confidence) / (2 len(thresholds)) each, and the largest bound is returned.
    thresholds : sequence of float, optional
        Candidate thresholds; required for ``"bonferroni"``.
    seed : int >= 0
        Seeds the split.
    fraction : float in (0, 1)
        ``"split"``: the share of the members and of the non-members the threshold is chosen on (default: halves).
    kind : "estimate" or "certified"
        What the caller vouches for: ``"certified"`` only when every member / non-member trial is an
        independent run of the mechanism (then the result is a lower bound at ``confidence``); ``"estimate"``
        (default) otherwise, e.g. the records of one trained model.
    """
    owner = "epsilon_lower_bound"
    kind = check_bound_kind(kind, owner)
    d = check_float(delta, "delta", owner, low=0.0, high=1.0, high_open=True)
    conf = check_probability(confidence, "confidence", owner)
    check_choice(selection, "selection", owner, ("split", "bonferroni"))
    frac = check_float(fraction, "fraction", owner, low=0.0, high=1.0, low_open=True, high_open=True)
    rng = np.random.default_rng(check_int(seed, "seed", owner, low=0))
    pos = np.asarray(member_scores, dtype=float).ravel()
    neg = np.asarray(nonmember_scores, dtype=float).ravel()
    if pos.size == 0 or neg.size == 0 or not (np.all(np.isfinite(pos)) and np.all(np.isfinite(neg))):
        raise DataError(f"{owner} needs non-empty, finite member and non-member scores.")
    alpha = 1.0 - conf
    if thresholds is not None:
        thr = np.asarray(thresholds, dtype=float).ravel()
        if thr.size == 0 or np.any(np.isnan(thr)):
            raise ParameterError(f"The 'thresholds' parameter of {owner} must be a non-empty list of numbers. "
                                 f"Got {list(thr)} instead.")
    else:
        thr = None

    if selection == "bonferroni":
        if thr is None:
            raise ParameterError(f"The 'thresholds' parameter of {owner} must be given (fixed in advance) "
                                 "when selection='bonferroni'. Got None instead.")
        eps, fnr, fpr, fnr_hi, fpr_hi = _bound_at(pos, neg, thr, alpha / (2 * thr.size), d)
        i = int(np.argmax(eps))
        return EpsilonBound(float(eps[i]), d, conf, float(thr[i]), float(fpr[i]), float(fnr[i]), float(fpr_hi[i]),
                            float(fnr_hi[i]), "bonferroni", int(thr.size), int(pos.size), int(neg.size), kind)

    if pos.size < 2 or neg.size < 2:
        raise DataError(f"{owner} with selection='split' needs at least 2 members and 2 non-members.")
    p_perm, n_perm = rng.permutation(pos.size), rng.permutation(neg.size)
    kp = min(max(int(pos.size * frac), 1), pos.size - 1)      # fraction 0.5: pos.size // 2, as always
    kn = min(max(int(neg.size * frac), 1), neg.size - 1)
    ps, pe = pos[p_perm[:kp]], pos[p_perm[kp:]]
    ns, ne = neg[n_perm[:kn]], neg[n_perm[kn:]]
    cand = np.unique(np.concatenate([ps, ns])) if thr is None else thr
    sel_eps = _bound_at(ps, ns, cand, alpha / 2, d)[0]
    t = float(cand[int(np.argmax(sel_eps))])
    eps, fnr, fpr, fnr_hi, fpr_hi = _bound_at(pe, ne, np.array([t]), alpha / 2, d)
    return EpsilonBound(float(eps[0]), d, conf, t, float(fpr[0]), float(fnr[0]), float(fpr_hi[0]), float(fnr_hi[0]),
                        "split", int(cand.size), int(pe.size), int(ne.size), kind)


def epsilon_bound_over_splits(member_scores, nonmember_scores, *, delta: float = 0.0, confidence: float = 0.95,
                              seed: int = 0, num_splits: int = 5, kind: str = ESTIMATE) -> EpsilonBound:
    """:func:`epsilon_lower_bound` (``selection="split"``) at split seeds ``seed .. seed + num_splits - 1`` of the
    same scores: the draw with the median epsilon (the lower median for an even count), with the smallest and
    largest figure as ``split_low`` / ``split_high``.

    Cheap (the scores are reused; only the halving changes). The median is no more a certified bound than
    one draw is (choosing among draws is itself a selection); the point is the range, which shows how much of
    a single figure is the luck of the split. ``kind`` as in :func:`epsilon_lower_bound`. The result also carries
    the Bayesian posterior median and credible interval of epsilon at the median draw's threshold and evaluation
    counts (:func:`bayes_epsilon`, seeded by ``seed``; an estimate).
    """
    owner = "epsilon_bound_over_splits"
    k = check_int(num_splits, "num_splits", owner, low=1, high=1000)
    s0 = check_int(seed, "seed", owner, low=0)
    draws = [epsilon_lower_bound(member_scores, nonmember_scores, delta=delta, confidence=confidence,
                                 selection="split", seed=s0 + i, kind=kind) for i in range(k)]
    eps = np.array([b.epsilon for b in draws])
    mid = draws[int(np.argsort(eps, kind="stable")[(k - 1) // 2])]
    n1, n0 = mid.num_members, mid.num_nonmembers
    med, lo, hi = bayes_epsilon(int(round(mid.fpr * n0)), n0, int(round(mid.fnr * n1)), n1, delta=mid.delta,
                                confidence=mid.confidence, seed=s0)
    return dataclasses.replace(mid, split_low=float(eps.min()), split_high=float(eps.max()), num_splits=k,
                               bayes_median=med, bayes_low=lo, bayes_high=hi)


def bayes_epsilon(fp: int, num_out: int, fn: int, num_in: int, *, delta: float = 0.0, confidence: float = 0.95,
                  samples: int = 20_000, prior: float = 0.5, seed: int = 0) -> tuple[float, float, float]:
    """Posterior ``(median, low, high)`` of epsilon from ``fp`` false positives among ``num_out`` trials without and
    ``fn`` false negatives among ``num_in`` trials with the record, at one threshold (Zanella-Beguelin et al.,
    "Bayesian estimation of differential privacy", ICML 2023): independent Beta(``prior`` + k, ``prior`` + n - k)
    posteriors of FPR and FNR (``prior = 0.5``: Jeffreys), ``samples`` seeded draws pushed through
    :func:`epsilon_from_rates` at ``delta``; ``[low, high]`` is the equal-tailed credible interval at ``confidence``.
    An *estimate*: a statement about the posterior under the prior, not a confidence bound."""
    owner = "bayes_epsilon"
    n0 = check_int(num_out, "num_out", owner, low=1)
    n1 = check_int(num_in, "num_in", owner, low=1)
    k0 = check_int(fp, "fp", owner, low=0, high=n0)
    k1 = check_int(fn, "fn", owner, low=0, high=n1)
    d = check_float(delta, "delta", owner, low=0.0, high=1.0, high_open=True)
    conf = check_probability(confidence, "confidence", owner)
    S = check_int(samples, "samples", owner, low=100, high=10_000_000)
    a = check_float(prior, "prior", owner, low=0.0, low_open=True)
    rng = np.random.default_rng(np.random.SeedSequence([check_int(seed, "seed", owner, low=0), 0xBA7E5]))
    fpr = rng.beta(a + k0, a + n0 - k0, size=S)
    fnr = rng.beta(a + k1, a + n1 - k1, size=S)
    eps = epsilon_from_rates(fpr, fnr, d)
    tail = (1.0 - conf) / 2.0
    lo, med, hi = np.quantile(eps, [tail, 0.5, 1.0 - tail])
    return float(med), float(lo), float(hi)


def bayes_gdp_mu(fp: int, num_out: int, fn: int, num_in: int, *, confidence: float = 0.95, samples: int = 20_000,
                 prior: float = 0.5, seed: int = 0) -> tuple[float, float, float]:
    """Posterior ``(median, low, high)`` of the Gaussian-DP ``mu = Phi^{-1}(1 - FPR) - Phi^{-1}(FNR)`` from the same
    Beta posteriors as :func:`bayes_epsilon` (Zanella-Beguelin et al. 2023's model of the error rates, read through
    Dong, Roth, Su 2022's trade-off curve): an estimate of the mechanism's mu if its curve is Gaussian."""
    owner = "bayes_gdp_mu"
    n0 = check_int(num_out, "num_out", owner, low=1)
    n1 = check_int(num_in, "num_in", owner, low=1)
    k0 = check_int(fp, "fp", owner, low=0, high=n0)
    k1 = check_int(fn, "fn", owner, low=0, high=n1)
    conf = check_probability(confidence, "confidence", owner)
    S = check_int(samples, "samples", owner, low=100, high=10_000_000)
    a = check_float(prior, "prior", owner, low=0.0, low_open=True)
    rng = np.random.default_rng(np.random.SeedSequence([check_int(seed, "seed", owner, low=0), 0xBA7E6]))
    fpr = rng.beta(a + k0, a + n0 - k0, size=S)
    fnr = rng.beta(a + k1, a + n1 - k1, size=S)
    mu = special.ndtri(1.0 - fpr) - special.ndtri(fnr)
    tail = (1.0 - conf) / 2.0
    lo, med, hi = np.quantile(mu, [tail, 0.5, 1.0 - tail])
    return float(med), float(lo), float(hi)


def one_run_p_value(num_canaries: int, guesses: int, correct: int, epsilon: float, delta: float) -> float:
    """Upper bound on P[W >= correct] for an (epsilon, delta)-DP mechanism (Steinke et al. 2023, Theorem 3).

    ``f(v) + 2 m delta max_{i=1..v} (f(v-i) - f(v)) / i`` with ``f(u) = P[Binomial(r, e^eps/(1+e^eps)) >= u]``,
    capped at 1. Vectorised over i.
    """
    owner = "one_run_p_value"
    m = check_int(num_canaries, "num_canaries", owner, low=1)
    r = check_int(guesses, "guesses", owner, low=0, high=m)
    v = check_int(correct, "correct", owner, low=0, high=r)
    eps = check_float(epsilon, "epsilon", owner, low=0.0)
    d = check_float(delta, "delta", owner, low=0.0, high=1.0)
    if v == 0:
        return 1.0
    q = 1.0 / (1.0 + np.exp(-eps))
    fv = float(stats.binom.sf(v - 1, r, q))
    if d == 0.0:
        return min(1.0, fv)
    # f(v - i) - f(v) = P[v - i <= B <= v - 1] for i = 1..v: cumulative sums of the pmf from v-1 downwards
    pmf = stats.binom.pmf(np.arange(v - 1, -1, -1), r, q)          # P[B = v-1], P[B = v-2], ..., P[B = 0]
    diffs = np.cumsum(pmf) / np.arange(1, v + 1)
    return float(min(1.0, fv + 2.0 * m * d * diffs.max()))


def one_run_epsilon(num_canaries: int, guesses: int, correct: int, *, delta: float = 0.0,
                    confidence: float = 0.95, tol: float = 1e-6) -> float:
    """Largest epsilon rejected at level 1 - confidence by :func:`one_run_p_value` (bisection; the p-value is
    non-decreasing in epsilon). Returns 0 when even epsilon = 0 is not rejected."""
    owner = "one_run_epsilon"
    conf = check_probability(confidence, "confidence", owner)
    beta = 1.0 - conf
    p = lambda e: one_run_p_value(num_canaries, guesses, correct, e, delta)  # noqa: E731
    if p(0.0) > beta:
        return 0.0
    lo, hi = 0.0, 1.0
    while p(hi) <= beta and hi < 200.0:
        lo, hi = hi, hi * 2.0
    while hi - lo > tol:
        mid = (lo + hi) / 2.0
        if p(mid) <= beta:
            lo = mid
        else:
            hi = mid
    return lo


class _PValues:
    """:func:`one_run_p_value` for fixed arrays ``r``, ``v`` of shape (J,) and any epsilons (vectorised). The delta
    term needs P[B = b] for b = v-1, v-2, ..., 0: from P[B = v-1] by the ratio P[B = b-1] / P[B = b] =
    b / (r - b + 1) * (1 - q) / q, whose q-free part is summed once here (log space, padded to the largest v)."""

    def __init__(self, m: int, r: np.ndarray, v: np.ndarray, delta: float) -> None:
        self.m, self.r, self.v, self.delta = m, r, v, delta
        self.vmax = int(v.max(initial=0))
        if delta > 0 and self.vmax > 0:
            t = np.arange(1, self.vmax)                                  # steps v-1 -> v-1-j
            with np.errstate(divide="ignore", invalid="ignore"):
                steps = np.log(np.maximum(v[:, None] - t[None, :], 0)) - np.log(r[:, None] - v[:, None] + t[None, :] + 1)
            steps = np.where(v[:, None] - t[None, :] >= 1, steps, -np.inf)
            self.base = np.concatenate([np.zeros((v.size, 1)), np.cumsum(steps, axis=1)], axis=1)
            self.j = np.arange(self.vmax)

    def __call__(self, eps: np.ndarray) -> np.ndarray:
        r, v = self.r, self.v
        q = special.expit(eps)
        fv = np.where(v > 0, stats.binom.sf(v - 1, r, q), 1.0)
        if self.delta == 0.0 or self.vmax == 0:
            return np.minimum(1.0, fv)
        top = stats.binom.logpmf(np.maximum(v - 1, 0), r, q)               # log P[B = v-1]
        with np.errstate(divide="ignore"):
            lr = np.log1p(-q) - np.log(q)                                 # log((1 - q) / q)
        logp = top[:, None] + self.base + self.j[None, :] * lr[:, None]
        with np.errstate(under="ignore"):
            pmf = np.exp(logp)
        diffs = np.cumsum(pmf, axis=1) / (self.j + 1)[None, :]
        term = diffs.max(axis=1)
        return np.minimum(1.0, np.where(v > 0, fv + 2.0 * self.m * self.delta * term, 1.0))


def one_run_epsilon_batch(num_canaries: int, guesses, correct, *, delta: float = 0.0, alpha=0.05,
                          tol: float = 1e-6) -> np.ndarray:
    """:func:`one_run_epsilon` for many ``(guesses, correct)`` pairs at once (levels ``alpha``, broadcast):
    the largest epsilon each rejects at its level by Theorem 3 of Steinke et al. 2023 (vectorised bisection; 0 where
    even epsilon = 0 is not rejected; the value returned is always a rejected one)."""
    owner = "one_run_epsilon_batch"
    m = check_int(num_canaries, "num_canaries", owner, low=1)
    d = check_float(delta, "delta", owner, low=0.0, high=1.0)
    r, v, a = np.broadcast_arrays(np.atleast_1d(np.asarray(guesses, dtype=np.int64)),
                                  np.atleast_1d(np.asarray(correct, dtype=np.int64)),
                                  np.atleast_1d(np.asarray(alpha, dtype=np.float64)))
    r, v, a = r.ravel(), v.ravel(), a.ravel()
    if np.any((v < 0) | (v > r) | (r > m)) or np.any((a <= 0) | (a >= 1)):
        raise ParameterError(f"{owner} needs 0 <= correct <= guesses <= {m} and levels in (0, 1).")
    out = np.zeros(r.size)
    live = (v > 0) & (_PValues(m, r, v, d)(np.zeros(r.size)) <= a)
    if not live.any():
        return out
    rr, vv, aa = r[live], v[live], a[live]
    pv = _PValues(m, rr, vv, d)
    lo = np.zeros(rr.size)
    hi = np.ones(rr.size)
    for _ in range(12):                                  # bracket: double hi while still rejected (up to 2^12)
        rej = pv(hi) <= aa
        if not rej.any():
            break
        lo = np.where(rej, hi, lo)
        hi = np.where(rej, hi * 2.0, hi)
    while np.max(hi - lo) > tol:
        mid = (lo + hi) / 2.0
        rej = pv(mid) <= aa
        lo = np.where(rej, mid, lo)
        hi = np.where(rej, hi, mid)
    out[live] = lo
    return out


def one_run_guesses(scores, *, k_plus: int, k_minus: int) -> np.ndarray:
    """Guesses in {-1, 0, +1}: +1 for the ``k_plus`` highest scores, -1 for the ``k_minus`` lowest, 0 (abstain)
    elsewhere. Ties are broken by a stable sort (index order)."""
    owner = "one_run_guesses"
    s = np.asarray(scores, dtype=float).ravel()
    m = s.size
    kp = check_int(k_plus, "k_plus", owner, low=0, high=m)
    km = check_int(k_minus, "k_minus", owner, low=0, high=m - kp)
    order = np.argsort(s, kind="stable")
    g = np.zeros(m, dtype=np.int64)
    if km:
        g[order[:km]] = -1
    if kp:
        g[order[m - kp:]] = 1
    return g


def one_run_audit(scores, included, *, k_plus: int, k_minus: int, delta: float = 0.0,
                  confidence: float = 0.95) -> OneRunBound:
    """One-run audit (Steinke, Nasr, Jagielski 2023) of ``m`` canaries.

    Parameters
    ----------
    scores : array_like, shape (m,)
        Membership scores of the canaries (larger = more likely included).
    included : array_like of bool, shape (m,)
        Ground truth; must come from independent fair coin flips for the theorem to apply.
    k_plus, k_minus : int
        Number of "included" / "excluded" guesses, fixed before looking at the scores' labels.
    """
    owner = "one_run_audit"
    inc = np.asarray(included).ravel()
    s = np.asarray(scores, dtype=float).ravel()
    if inc.shape != s.shape or s.size == 0:
        raise DataError(f"{owner}: 'scores' and 'included' must be non-empty and of the same length "
                        f"(got {s.size} and {inc.size}).")
    g = one_run_guesses(s, k_plus=k_plus, k_minus=k_minus)
    truth = np.where(inc.astype(bool), 1, -1)
    correct = int(np.sum(g * truth > 0))
    d = check_float(delta, "delta", owner, low=0.0, high=1.0)
    conf = check_probability(confidence, "confidence", owner)
    eps = one_run_epsilon(s.size, int(k_plus) + int(k_minus), correct, delta=d, confidence=conf)
    return OneRunBound(eps, d, conf, int(s.size), int(k_plus), int(k_minus), correct)

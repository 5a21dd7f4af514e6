r"""Certified lower bounds from explicit pairs of neighbouring datasets: the other side of every accounted epsilon.

An accountant's epsilon is an upper bound valid for *every* pair of neighbouring datasets. One explicit pair
:math:`(D, D')` whose mechanism outputs :math:`P = M(D)`, :math:`Q = M(D')` are known in closed form gives the other
side: no valid analysis of the mechanism can report less than that pair's own epsilon at the same delta. If an upper
bound falls below it, the upper bound is wrong (issue 33: fixed-size batches under zero-out).

The path is independent of every accountant's: the two output distributions are written down (Gaussian mixtures,
Laplace densities, categorical probabilities), cut into finitely many outcome bins, and the pair's privacy-loss
distribution is composed by FFT (dp_accounting's ``DensePLDPmf`` arithmetic only). Every approximation goes down:

- binning the output is a post-processing (data processing inequality);
- outcomes in the extreme tails of the loss (P-mass at most ``1e-3 * delta / compositions`` in each tail) are left
  out: the hockey-stick divergence :math:`\sum_o (P(o) - e^\epsilon Q(o))_+` only loses non-negative terms;
- each loss is rounded *down* to the grid (dp_accounting's optimistic estimate), after subtracting ``1e-9``
  against float error in the loss itself;
- the FFT round-off (and dp_accounting's ``1e-15`` truncation mass, which it adds to delta) is covered by reading
  the epsilon at ``delta + 1e-12`` (:data:`~dpaudit.accountants._common.FFT_DELTA_ALLOWANCE`); the epsilon is the
  exact root of the discrete PMF's delta(eps), lowered by a relative ``1e-9``.

So each figure here is a certified lower bound, not an estimate. The constructions per mechanism are in the
functions' docstrings; :func:`dpsgd_lower_bound` is the public entry point for DP-SGD-style subsampled Gaussian
mechanisms under each batch sampler and neighbouring relation.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from dp_accounting.pld import pld_pmf
from scipy import optimize, special
from scipy.stats import binom

binom_logpmf = binom.logpmf

from dpaudit.accountants._common import FFT_DELTA_ALLOWANCE, log1mexp
from dpaudit.accountants.closed_form import gaussian_epsilon_root
from dpaudit.accountants.events import ShuffledBatchGaussian
from dpaudit.accountants.sampling import max_statistic_log_cdf, shuffle_lower_bound
from dpaudit.accountants.statement import LowerBound
from dpaudit.errors import ParameterError, check_choice, check_float, check_int, check_probability

__all__ = ["LowerBound", "composed_pair_epsilon", "binary_pair_epsilon", "lattice_pair_epsilon", "gaussian_mixture_pair", "laplace_pair", "dpsgd_lower_bound",
           "gaussian_mechanism_lower_bound", "laplace_mechanism_lower_bound", "randomized_response_lower_bound",
           "noisy_max_lower_bound", "gnmax_lower_bound", "categorical_pair_epsilon", "laplace_argmax_log_probs",
           "PAIR_METHOD", "DPSGD_PAIRS"]

#: How every figure of this module is computed (written into each :class:`LowerBound`).
PAIR_METHOD = ("explicit pair's privacy-loss distribution (binned outputs, losses rounded down, extreme tails "
               "dropped), composed by FFT; epsilon read at delta + 1e-12")
#: How the Gaussian mechanism's pair is evaluated (the sum of its answers is sufficient: no grid).
GAUSSIAN_PAIR_METHOD = ("the pair's composed output law exactly: the sum of the answers, N(mu, 1) vs N(0, 1) in units of "
                        "its noise; delta(eps) in closed form, solved by bisection and lowered by a relative 1e-9")
#: Most outcome bins of a continuous pair (more bins: tighter, slower; fewer is still a lower bound).
MAX_BINS = 60_000
#: Most points of one composition's loss grid, and of the composed grid (the interval coarsens past them).
MAX_STEP_POINTS = 400_000
MAX_COMPOSED_POINTS = 500_000
#: Most compositions a pair composes (past it, the first ones only: observing fewer outputs still bounds below).
MAX_PAIR_STEPS = 10_000_000
_LOSS_MARGIN = 1e-9
#: The smallest composed epsilon the loss grid is sized for (a smaller floor: a finer grid at tiny epsilons).
SCALE_FLOOR = 1e-5
_TAIL_SIGMAS = 9.3  # Phi(-9.3) ~ 7e-21: the two outer bins hold the rest


# ------------------------------------------------------------------------------------------------ the engine


def _loss_pmf(log_p: np.ndarray, log_q: np.ndarray, interval: float, drop_mass: float) -> pld_pmf.DensePLDPmf:
    """The optimistic privacy-loss PMF (under P) of one pair of discrete distributions (log masses per outcome)."""
    log_p = np.asarray(log_p, dtype=np.float64)
    log_q = np.asarray(log_q, dtype=np.float64)
    has_p = np.isfinite(log_p)
    inf_mass = float(np.exp(log_p[has_p & ~np.isfinite(log_q)]).sum())   # P > 0 = Q: infinite loss, exact
    keep = has_p & np.isfinite(log_q)
    loss = log_p[keep] - log_q[keep]
    mass = np.exp(log_p[keep])
    order = np.argsort(loss, kind="stable")
    loss, mass = loss[order], mass[order]
    if drop_mass > 0.0 and loss.size > 2:
        cum = np.cumsum(mass)
        first = int(np.searchsorted(cum, drop_mass, side="right"))        # leading outcomes with mass <= drop_mass
        rcum = np.cumsum(mass[::-1])
        last = loss.size - int(np.searchsorted(rcum, drop_mass, side="right"))
        if first < last:
            loss, mass = loss[first:last], mass[first:last]
    if loss.size == 0:
        return pld_pmf.DensePLDPmf(interval, 0, np.zeros(1), inf_mass, False)
    idx = np.floor((loss - _LOSS_MARGIN) / interval).astype(np.int64)
    low = int(idx[0]) if idx.size else 0
    probs = np.bincount(idx - low, weights=mass).astype(np.float64)
    return pld_pmf.DensePLDPmf(interval, low, probs, inf_mass, False)


def _moments(log_p: np.ndarray, log_q: np.ndarray, drop_mass: float = 0.0) -> tuple[float, float, float]:
    """(mean, std, range) of the finite privacy loss under P (used only to size the grid); the range without the
    outcomes :func:`_loss_pmf` drops (P-mass at most ``drop_mass`` at either end of the loss order)."""
    keep = np.isfinite(log_p) & np.isfinite(log_q)
    loss = log_p[keep] - log_q[keep]
    w = np.exp(log_p[keep])
    tot = float(w.sum()) or 1.0
    mean = float((w * loss).sum() / tot)
    var = float((w * (loss - mean) ** 2).sum() / tot)
    if loss.size == 0:
        return mean, math.sqrt(max(var, 0.0)), 0.0
    order = np.argsort(loss, kind="stable")
    ls, ws = loss[order], w[order]
    first, last = 0, ls.size
    if drop_mass > 0.0 and ls.size > 2:   # the same cut as _loss_pmf
        first = int(np.searchsorted(np.cumsum(ws), drop_mass, side="right"))
        last = ls.size - int(np.searchsorted(np.cumsum(ws[::-1]), drop_mass, side="right"))
        if first >= last:
            first, last = 0, ls.size
    return mean, math.sqrt(max(var, 0.0)), float(ls[last - 1] - ls[first])


def _grid_epsilon(pmf: pld_pmf.DensePLDPmf, delta: float) -> float:
    """The epsilon at ``delta`` of the (sub-probability) loss PMF, vectorised: the largest grid loss l_k with
    delta(l_k) > ``delta`` (delta(l_k) = inf_mass + sum_{l_i > l_k} p_i (1 - e^{l_k - l_i}), summed from the top in log
    space), then on [l_k, l_{k-1}), where delta(eps) = inf_mass + A - e^eps B exactly, the closed-form root; 0 if
    none. Callers lower it by a relative 1e-9 against float error."""
    probs = np.asarray(pmf._probs, dtype=np.float64)  # noqa: SLF001 - dp_accounting's dense PMF has no public getter
    low = int(pmf._lower_loss)                          # noqa: SLF001
    inf_mass = float(pmf._infinity_mass)                # noqa: SLF001
    losses = (np.arange(probs.size) + low) * float(pmf._discretization)  # noqa: SLF001
    keep = probs > 0
    losses, probs = losses[keep][::-1], probs[keep][::-1]            # descending
    if losses.size == 0:
        return 0.0
    with np.errstate(divide="ignore"):
        mass_above = np.concatenate([[0.0], np.cumsum(probs)[:-1]])                     # sum over l_i > l_k
        log_e = np.concatenate([[-np.inf], np.logaddexp.accumulate(np.log(probs) - losses)[:-1]])
    d = inf_mass + mass_above - np.exp(np.minimum(losses + log_e, 0.0))
    over = np.flatnonzero(d > delta)
    if over.size == 0:
        return 0.0
    k = int(over[0])
    eps = float(losses[k])
    if k > 0 and math.isfinite(float(log_e[k])):
        # on [l_k, l_{k-1}) delta(eps) = inf_mass + A - e^eps B exactly (the PMF is discrete): solve it there
        room = inf_mass + float(mass_above[k]) - delta
        if room > 0.0:
            eps = min(max(eps, math.log(room) - float(log_e[k])), float(losses[k - 1]))
    return max(eps, 0.0)


def composed_pair_epsilon(parts: Sequence[tuple[np.ndarray, np.ndarray, int]], delta: float, *,
                          resolution: float = 0.02) -> float:
    """A certified lower bound on the epsilon at ``delta`` of the composition of the pairs ``parts``:
    ``(log P per outcome, log Q per outcome, count)`` each (P the first dataset's output law). Only the direction
    given is evaluated (call it twice for both).

    ``resolution`` sets the loss grid: the interval is ``resolution * max(scale, 0.05) / compositions`` where scale
    estimates the composed epsilon (mean loss times the compositions plus 4.5 standard deviations), so that rounding
    every loss down costs at most about ``resolution`` times it; it is coarsened so that one composition holds at most
    :data:`MAX_STEP_POINTS` points and the composed grid about :data:`MAX_COMPOSED_POINTS`. Any interval gives a
    lower bound; a finer one a tighter bound.
    """
    delta = check_probability(delta, "delta", "composed_pair_epsilon")
    parts = [(lp, lq, min(int(c), MAX_PAIR_STEPS)) for lp, lq, c in parts]   # fewer observed: still a lower bound
    total = sum(int(c) for _, _, c in parts)
    if total <= 0:
        return 0.0
    drop = 1e-3 * delta / total
    # each loss range is taken after the tails _loss_pmf drops (outcomes of P-mass <= drop at either end): the grid
    # need not reach losses it never holds (issue 47: the full range sized the grid of a tiny-epsilon pair 400x
    # coarser than its bulk, and the rounding of 438 steps lost 10% of the epsilon)
    stats = [_moments(np.asarray(lp, float), np.asarray(lq, float), drop) for lp, lq, _ in parts]
    rng = max(s[2] for s in stats)
    span = sum(c * abs(m) + 14.0 * math.sqrt(c) * sd + r for (m, sd, r), (_, _, c) in zip(stats, parts))
    scale = sum(c * abs(m) for (m, _, _), (_, _, c) in zip(stats, parts)) + 4.5 * math.sqrt(
        sum(c * sd * sd for (_, sd, _), (_, _, c) in zip(stats, parts)))   # about the composed epsilon
    interval = max(min(resolution * max(scale, SCALE_FLOOR) / total, span / 20_000), rng / MAX_STEP_POINTS,
                   span / MAX_COMPOSED_POINTS, 1e-9)
    pmf = None
    with np.errstate(all="ignore"):
        log_keep = 0.0   # log P(no composition lands on an outcome Q cannot produce)
        for lp, lq, c in parts:
            lp_, lq_ = np.asarray(lp, float), np.asarray(lq, float)
            inf_mass = float(np.exp(lp_[np.isfinite(lp_) & ~np.isfinite(lq_)]).sum())
            log_keep += c * math.log1p(-inf_mass) if inf_mass < 1.0 else -math.inf
        if -math.expm1(log_keep) > min(delta + FFT_DELTA_ALLOWANCE, 1.0) * (1.0 + 1e-9):
            return math.inf   # with probability above delta the output is impossible under Q: no finite epsilon
        for lp, lq, c in parts:
            one = _loss_pmf(np.asarray(lp, float), np.asarray(lq, float), interval, drop)
            if int(c) > 1:
                one = one.self_compose(int(c))
            pmf = one if pmf is None else pmf.compose(one)
        eps = _grid_epsilon(pmf, min(delta + FFT_DELTA_ALLOWANCE, 1.0))  # type: ignore[arg-type]
    if not math.isfinite(eps) or math.isnan(eps):
        return 0.0
    return max(0.0, eps * (1.0 - 1e-9) - 1e-12)


def binary_pair_epsilon(p1: float, p0: float, count: int, delta: float) -> float:
    """A certified lower bound on the epsilon at ``delta`` of ``count`` compositions of the two-outcome pair
    (p1, 1 - p1) vs (p0, 1 - p0), exactly: with j ~ Bin(count, p1) outcomes of the first kind the loss is
    L_j = j a + (count - j) b and delta(eps) = sum_j P(j) (1 - e^{eps - L_j})_+ (over the binomial window holding all
    but 2e-152 of the mass; leaving outcomes out only lowers delta). delta is evaluated at every L_j at once (sums from
    the top in log space); between two consecutive losses delta(eps) = A - e^eps B is solved in closed form. The
    result is lowered by a relative 1e-9 against float error; no grid, no FFT."""
    if not (0.0 < p0 < 1.0 and 0.0 < p1 < 1.0) or p0 == p1:
        return 0.0
    count = min(int(count), MAX_PAIR_STEPS)   # fewer observed compositions: still a lower bound
    a = math.log(p1) - math.log(p0)
    b = math.log1p(-p1) - math.log1p(-p0)
    half = math.sqrt(350.0 * count) + 2.0   # Hoeffding: outside, less than 2e-152 of the mass
    lo_j = int(max(0, math.floor(count * p1 - half)))
    hi_j = int(min(count, math.ceil(count * p1 + half)))
    j = np.arange(lo_j, hi_j + 1, dtype=np.float64)
    logw = binom_logpmf(j, count, p1)
    loss = j * a + (count - j) * b
    return _atoms_epsilon(loss, logw, delta)


def _atoms_epsilon(loss: np.ndarray, logw: np.ndarray, delta: float) -> float:
    """The epsilon at ``delta`` of a discrete privacy-loss law given as atoms (loss ``loss[i]`` with P-mass
    ``exp(logw[i])``; atoms left out only lower delta): delta(eps) = sum_i w_i (1 - e^{eps - L_i})_+ is evaluated at
    every atom at once (sums from the top in log space) and solved in closed form between two consecutive losses.
    Lowered by a relative 1e-9 against float error."""
    order = np.argsort(-loss, kind="stable")                  # descending losses
    loss, logw = loss[order], logw[order]
    ok = np.isfinite(logw) & ~np.isnan(loss)
    loss, logw = loss[ok], logw[ok]
    if loss.size == 0:
        return 0.0
    target = delta * (1.0 + 1e-9)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        mass = np.cumsum(np.exp(logw))                                    # A_k: mass of the k+1 largest losses
        log_b = np.logaddexp.accumulate(logw - loss)                      # log B_k = log sum w_j e^{-L_j}
        # delta just above L_{k+1}, i.e. on (L_{k+1}, L_k]: A_k - e^eps B_k; at eps = L_{k+1} it is d_next
        nxt = np.concatenate([loss[1:], [-np.inf]])
        d_next = mass - np.exp(np.minimum(nxt + log_b, 700.0))
    over = np.flatnonzero(d_next > target)           # intervals whose lower end still has delta > target
    if over.size == 0:
        return 0.0
    k = int(over[0])                                 # the top-most such interval: eps* lies in [L_{k+1}, L_k]
    if mass[k] <= target:
        eps = float(nxt[k])
    else:
        eps = min(float(loss[k]), math.log(mass[k] - target) - float(log_b[k]))
        eps = max(eps, float(nxt[k]))
    if not math.isfinite(eps):
        return 0.0
    return max(0.0, eps * (1.0 - 1e-9) - 1e-12)


def lattice_pair_epsilon(step: float, masses: dict[int, float], count: int, delta: float) -> float:
    """A certified lower bound on the epsilon at ``delta`` of ``count`` compositions of a pair whose privacy loss
    under P takes the values ``k * step`` with the P-masses ``masses[k]``: the lattice is kept exactly (the grid
    interval is ``step`` lowered by a relative 1e-12, so every loss rounds down by at most that) and composed by FFT."""
    interval = step * (1.0 - 1e-12)
    count = min(int(count), MAX_PAIR_STEPS)   # fewer observed compositions: still a lower bound
    ks = sorted(masses)
    probs = np.zeros(ks[-1] - ks[0] + 1)
    for k in ks:
        probs[k - ks[0]] += masses[k]
    pmf = pld_pmf.DensePLDPmf(interval, ks[0], probs, 0.0, False)
    with np.errstate(all="ignore"):
        if count > 1:
            pmf = pmf.self_compose(int(count))
        eps = _grid_epsilon(pmf, min(delta + FFT_DELTA_ALLOWANCE, 1.0))
    return max(0.0, eps * (1.0 - 1e-9) - 1e-12)


def _log_interval_mass(edges: np.ndarray, mean: float, sigma: float) -> np.ndarray:
    """log N(mean, sigma^2)-mass of (-inf, e0], (e0, e1], ..., (e_last, inf), stable in both tails."""
    x = (edges - mean) / sigma
    lc = special.log_ndtr(x)            # log Phi(x)
    ls = special.log_ndtr(-x)           # log (1 - Phi(x))
    with np.errstate(divide="ignore", invalid="ignore"):
        below = lc[1:] + log1mexp(np.minimum(lc[:-1] - lc[1:], 0.0))     # Phi(x1) - Phi(x0), cdf side
        above = ls[:-1] + log1mexp(np.minimum(ls[1:] - ls[:-1], 0.0))    # sf side
        mid = np.where(x[1:] <= 0.0, below, above)
    mid = np.where(np.isnan(mid), -np.inf, mid)
    return np.concatenate([[lc[0]], mid, [ls[-1]]])


def gaussian_mixture_pair(mean_p: float, mean_q: float, sigma: float, weight: float, *,
                          bins: int = MAX_BINS) -> tuple[np.ndarray, np.ndarray]:
    r"""log masses of :math:`P = (1-w)N(0, \sigma^2) + wN(m_P, \sigma^2)` and :math:`Q = (1-w)N(0, \sigma^2) +
    wN(m_Q, \sigma^2)` on ``bins`` equal bins covering every component to 9.3 sigma, plus the two outer tails
    (``weight`` = 1: the plain Gaussian pair). Binning is a post-processing: the binned pair's epsilon is at most the
    continuous one's."""
    lo = min(0.0, mean_p, mean_q) - _TAIL_SIGMAS * sigma
    hi = max(0.0, mean_p, mean_q) + _TAIL_SIGMAS * sigma
    edges = np.linspace(lo, hi, int(bins) + 1)

    def mix(m: float) -> np.ndarray:
        comp = _log_interval_mass(edges, m, sigma)
        if weight >= 1.0:
            return comp
        return np.logaddexp(math.log1p(-weight) + _log_interval_mass(edges, 0.0, sigma), math.log(weight) + comp)

    return mix(mean_p), mix(mean_q)


def laplace_pair(shift: float, scale: float, *, bins: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    r"""log masses of :math:`P = \mathrm{Lap}(0, b)` and :math:`Q = \mathrm{Lap}(\Delta, b)` (``shift`` = Delta > 0,
    ``scale`` = b) on (-inf, 0], ``bins`` equal bins of (0, Delta], (Delta, inf): exact masses (the loss is constant
    on the two tails, linear between)."""
    d, b = float(shift), float(scale)
    e = np.linspace(0.0, d, int(bins) + 1)
    # P: mass of (u, v] in [0, d] is (e^{-u/b} - e^{-v/b})/2; Q = Lap(d): (e^{(v-d)/b} - e^{(u-d)/b})/2
    lp_mid = math.log(0.5) - e[:-1] / b + log1mexp(-(e[1:] - e[:-1]) / b)
    lq_mid = math.log(0.5) + (e[1:] - d) / b + log1mexp(-(e[1:] - e[:-1]) / b)
    lp = np.concatenate([[math.log(0.5)], lp_mid, [math.log(0.5) - d / b]])
    lq = np.concatenate([[math.log(0.5) - d / b], lq_mid, [math.log(0.5)]])
    return lp, lq


def _best(cands: Sequence[tuple[str, Sequence[tuple[np.ndarray, np.ndarray, int]]]], delta: float,
          resolution: float) -> tuple[float, str]:
    """The largest lower bound over candidate constructions, each in both directions. With several, each is first
    evaluated on a grid 8x coarser (every such figure is a lower bound too) and only the best is refined."""
    options = []
    for name, parts in cands:
        options.append((f"{name} [P vs Q]", list(parts)))
        options.append((f"{name} [Q vs P]", [(lq, lp, c) for lp, lq, c in parts]))
    scored = []
    for name, parts in options:
        try:
            eps = composed_pair_epsilon(parts, delta, resolution=min(1.0, 8.0 * resolution)) if len(options) > 1 else 0.0
        except (OverflowError, FloatingPointError, MemoryError, ZeroDivisionError, ValueError):  # pragma: no cover
            continue   # this construction could not be evaluated: the others (or 0) still bound below
        scored.append((eps, name, parts))
    if not scored:
        return 0.0, "none"
    coarse, name, parts = max(scored, key=lambda x: x[0])
    try:
        fine = composed_pair_epsilon(parts, delta, resolution=resolution)
    except (OverflowError, FloatingPointError, MemoryError, ZeroDivisionError, ValueError):  # pragma: no cover
        fine = 0.0
    eps = max(coarse, fine)
    return (eps, name) if eps > 0.0 else (0.0, name)


# ------------------------------------------------------------------------------------------------ DP-SGD

#: The pairs per (sampler, relation) for the subsampled Gaussian: (gradient of the target, of every other record, of
#: the target's neighbour or None when it is removed), with the rate they imply (``dpsgd_lower_bound``).
DPSGD_PAIRS: dict[tuple[str, str], tuple[tuple[float, float, float | None], ...]] = {
    ("poisson", "add-remove"): ((1.0, 0.0, None),),
    ("poisson", "zero-out"): ((1.0, 0.0, 0.0),),
    ("fixed-wor", "add-remove"): ((1.0, -1.0, None), (1.0, 0.0, None)),
    ("fixed-wor", "zero-out"): ((1.0, -1.0, 0.0), (1.0, 0.0, 0.0)),
    ("fixed-wor", "substitution"): ((1.0, -1.0, -1.0), (1.0, 0.0, -1.0)),
}


def _threshold_candidates(cands_spec: Sequence[tuple[str, float, float, float]], sigma: float, count: int, delta: float,
                          log_cdf=None) -> tuple[float, str]:
    """The best binary post-processing "output > c" of mixture pairs, composed ``count`` times exactly
    (:func:`binary_pair_epsilon`), over thresholds c. ``cands_spec``: (name, m_P, m_Q, w); ``log_cdf(c, m, w)``
    gives log P(output <= c) (default: the one-batch mixture)."""
    if log_cdf is None:
        def log_cdf(c: float, m: float, w: float) -> float:
            a = float(special.log_ndtr(c / sigma))
            if w >= 1.0:
                return float(special.log_ndtr((c - m) / sigma))
            return float(np.logaddexp(math.log1p(-w) + a, math.log(w) + float(special.log_ndtr((c - m) / sigma))))
    best, how = 0.0, "none"
    for name, m_p, m_q, w in cands_spec:
        top, bottom = max(m_p, m_q), min(m_p, m_q)
        for z in (-1.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.5, 7.0):
            c = (bottom if z < 0 else top) + z * sigma
            lp, lq = log_cdf(c, m_p, w), log_cdf(c, m_q, w)
            # P(output > c) = 1 - exp(log cdf), computed as -expm1
            p1, p0 = -math.expm1(lp), -math.expm1(lq)
            for x, y, direction in ((p1, p0, "P vs Q"), (p0, p1, "Q vs P")):
                eps = binary_pair_epsilon(x, y, count, delta)
                if eps > best:
                    best, how = eps, f"{name}; output > {c:.4g} counted over {count} compositions [{direction}]"
    return best, how


def dpsgd_lower_bound(*, dataset_size: int, batch_size: int, noise_multiplier: float, steps: int, delta: float,
                      sampling: str = "poisson", neighbouring: str | None = None, drop_last: bool = False,
                      resolution: float = 0.02, quick: bool = False) -> LowerBound:
    r"""A certified lower bound on the epsilon at ``delta`` of DP-SGD-style subsampled Gaussian training: every
    analysis of ``steps`` steps with clipping C, noise :math:`N(0, \sigma^2C^2)` on the sum, batch sampler ``sampling``
    (``"poisson"`` rate B/n, ``"fixed-wor"`` exactly B of n without replacement per step, ``"shuffle"``) and
    relation ``neighbouring`` (``"add-remove"``, ``"zero-out"``, ``"substitution"``) must report at least this.

    The pair is one-dimensional (any model whose clipped gradient is a fixed scalar per record, e.g. a linear loss):
    the target's gradient +C, every other record's ``b``, the target's neighbour ``c`` (or removed). Shifting by the
    others' known sum, one step outputs :math:`(1-w)N(0, \sigma^2) + wN(m_P, \sigma^2)` against the same with
    :math:`m_Q` (in units of C), :math:`m = g - b` for the record in the batch, w its inclusion probability:

    - Poisson (add/remove; zero-out is the same pair): b = 0, w = B/n, :math:`m_P = 1`, :math:`m_Q = 0` -- the
      dominating pair (Mironov et al. 2019), so the bound meets the PLD/PRV upper bounds up to discretisation.
    - fixed-wor, add/remove: D' has n records of gradient -C, D adds the target; B/(n+1) of D's batches hold it and
      displace a -C record: :math:`m_P = 2`, :math:`m_Q = 0` (also b = 0, :math:`m_P = 1`).
    - fixed-wor, zero-out: the target +C or a null record 0 among -C records: :math:`m_P = 2`, :math:`m_Q = 1`
      (issue 33's pair), w = B/n (also b = 0: 1 vs 0).
    - fixed-wor, substitution: the target +C or -C among -C records: 2 vs 0 (also b = 0: 1 vs -1).
    - shuffle: Chua et al.'s construction (:func:`~dpaudit.accountants.sampling.shuffle_lower_bound`).

    Each candidate is evaluated in both directions; the largest epsilon is returned. With B = n every step holds
    every record: w = 1 and the pair is the Gaussian mechanism. ``resolution``: the loss grid (coarser: faster, still
    a lower bound). ``quick``: instead of each pair's whole privacy-loss distribution, the adversary only counts the
    steps whose output exceeds a threshold (a post-processing: still certified, looser, and cheap -- an exact binomial,
    a few milliseconds; used by the property sweep); for shuffled batches, whether an epoch's largest batch sum
    exceeds it, over the complete epochs.
    """
    owner = "dpsgd_lower_bound"
    sampling = check_choice(sampling, "sampling", owner, ("poisson", "fixed-wor", "shuffle"))
    n = check_int(dataset_size, "dataset_size", owner, low=1)
    b = check_int(batch_size, "batch_size", owner, low=1, high=n)
    sigma = check_float(noise_multiplier, "noise_multiplier", owner, low=0.0, low_open=True)
    t = check_int(steps, "steps", owner, low=1)
    delta = check_probability(delta, "delta", owner)
    resolution = check_float(resolution, "resolution", owner, low=1e-4, high=1.0)
    default = "zero-out" if sampling == "shuffle" else "add-remove"
    allowed = {"poisson": ("add-remove", "zero-out"), "fixed-wor": ("add-remove", "zero-out", "substitution"),
               "shuffle": ("zero-out", "substitution")}[sampling]
    relation = check_choice(default if neighbouring is None else neighbouring, "neighbouring", owner, allowed)
    if sampling == "shuffle" and quick:
        nb = n // b if drop_last else -(-n // b)
        epochs = t // nb
        k, w = (nb, min(1.0, nb * b / n)) if epochs else (t, min(1.0, t * b / n))
        pairs_ = [("target +1C, others -1C, neighbour 0", 2.0, 1.0), ("target +1C, others 0, neighbour 0", 1.0, 0.0)]
        if relation == "substitution":
            pairs_.append(("target +1C, others -1C, neighbour -1C", 2.0, 0.0))

        def max_cdf(c: float, m: float, ww: float) -> float:
            return float(max_statistic_log_cdf(np.array([c]), m, sigma, k, ww)[0]) if m else float(k * special.log_ndtr(c / sigma))

        eps, how = _threshold_candidates([(f"shuffled batches, {nm}, largest of {k} batch sums", a, c_, w)
                                          for nm, a, c_ in pairs_], sigma, max(epochs, 1), delta, log_cdf=max_cdf)
        return LowerBound(eps, delta, how, "threshold on the pair's output, exact binomial (quick)",
                          details={"steps": t, "sampling": sampling, "neighbouring": relation})
    if sampling == "shuffle":
        low = shuffle_lower_bound(ShuffledBatchGaussian(n, b, sigma, t, drop_last=bool(drop_last),
                                                        neighbouring=relation), delta)
        return LowerBound(low.epsilon, delta, f"shuffled batches: {low.construction}",
                          "Chua et al. 2024's maximum statistic of each epoch's batch sums, binned; its "
                          "privacy-loss distribution rounded down and composed over the epochs",
                          details={"epochs": low.epochs})
    observed = min(t, MAX_PAIR_STEPS)   # an adversary may ignore later steps: fewer steps still bound below
    specs = []
    for target, other, neighbour in DPSGD_PAIRS[(sampling, relation)]:
        if sampling == "poisson":
            w = b / n
        elif neighbour is None:
            w = b / (n + 1)            # D' has the n records, D = D' + the target
        else:
            w = b / n
        m_p = target - other
        m_q = 0.0 if neighbour is None else neighbour - other
        if w >= 1.0 and m_p == m_q:
            continue
        name = (f"target {target:+g}C, other records {other:+g}C, "
                + ("target removed" if neighbour is None else f"neighbour {neighbour:+g}C")
                + f": (1-w)N(0,s^2)+wN({m_p:g},s^2) vs (1-w)N(0,s^2)+wN({m_q:g},s^2), w = {w:.6g}, s = {sigma:g}, "
                  f"{observed} steps" + ("" if observed == t else f" (the first {observed} of {t})"))
        specs.append((name, m_p, m_q, w))
    if quick:
        eps, pair = _threshold_candidates(specs, sigma, observed, delta)
        return LowerBound(eps, delta, pair, "threshold on the pair's output, exact binomial (quick)",
                          details={"steps": t, "sampling": sampling, "neighbouring": relation})
    cands = [(name, [(*gaussian_mixture_pair(m_p, m_q, sigma, w), observed)]) for name, m_p, m_q, w in specs]
    eps, pair = _best(cands, delta, resolution)
    return LowerBound(eps, delta, pair, PAIR_METHOD, details={"steps": t, "sampling": sampling, "neighbouring": relation})


# ------------------------------------------------------------------------------------------------ other mechanisms


def gaussian_mechanism_lower_bound(*, sigma: float, delta: float, sensitivity: float = 1.0, count: int = 1,
                                   resolution: float = 0.02) -> LowerBound:
    """``count`` Gaussian(``sigma``) answers to a query whose value moves by ``sensitivity`` between the pair:
    :math:`N(0, \\sigma^2)` vs :math:`N(\\Delta, \\sigma^2)`. The sum of the answers is a sufficient statistic, so
    the composed pair is exactly :math:`N(\\mu, 1)` vs :math:`N(0, 1)`, :math:`\\mu = \\sqrt{count}\\Delta/\\sigma`,
    evaluated in closed form (issue 47: the binned, gridded composition lost up to 20% at 7e4 compositions); binned
    and composed only if that fails."""
    owner = "gaussian_mechanism_lower_bound"
    sigma = check_float(sigma, "sigma", owner, low=0.0, low_open=True)
    sens = check_float(sensitivity, "sensitivity", owner, low=0.0, low_open=True)
    count = check_int(count, "count", owner, low=1)
    delta = check_probability(delta, "delta", owner)
    pair = f"query value {sens:g} vs 0: N({sens:g}, {sigma:g}^2) vs N(0, {sigma:g}^2), {count} composition(s)"
    mu = math.sqrt(count) * sens / sigma
    if math.isfinite(mu) and mu > 0.0:
        # the sum of the answers is a sufficient statistic: the composed pair IS N(mu, 1) vs N(0, 1) (no binning, no
        # grid); closed_form.gaussian_epsilon_root solves its delta(eps) in log space without cancellation, to 1e-12
        root = gaussian_epsilon_root(mu, delta)
        if root == 0.0:
            return LowerBound(0.0, delta, pair, GAUSSIAN_PAIR_METHOD)
        if math.isfinite(root):  # rounded down past the root finder's tolerance: a lower bound
            return LowerBound(max(0.0, root * (1.0 - 1e-9) - 2e-12), delta, pair, GAUSSIAN_PAIR_METHOD)
    lp, lq = gaussian_mixture_pair(sens, 0.0, sigma, 1.0)
    eps, pair = _best([(pair, [(lp, lq, count)])], delta, resolution)
    return LowerBound(eps, delta, pair, PAIR_METHOD)


def laplace_mechanism_lower_bound(*, scale: float, delta: float, sensitivity: float = 1.0, count: int = 1,
                                  resolution: float = 0.02) -> LowerBound:
    """``count`` Laplace(``scale``) answers to a query whose value moves by ``sensitivity``: Lap(0, b) vs
    Lap(Delta, b) (exact masses on the tails and on bins of [0, Delta]), composed."""
    owner = "laplace_mechanism_lower_bound"
    scale = check_float(scale, "scale", owner, low=0.0, low_open=True)
    sens = check_float(sensitivity, "sensitivity", owner, low=0.0, low_open=True)
    count = check_int(count, "count", owner, low=1)
    delta = check_probability(delta, "delta", owner, allow_zero=True)
    if delta == 0.0 or sens / scale > 700:
        # at delta = 0 the pair's epsilon is its largest loss, attained with positive probability (x <= 0)
        return LowerBound(count * sens / scale, delta, f"query value 0 vs {sens:g}: Lap(0, {scale:g}) vs "
                          f"Lap({sens:g}, {scale:g}); every answer <= 0 has loss {sens / scale:g}",
                          "closed form: the largest privacy loss, attained with positive probability")
    lp, lq = laplace_pair(sens, scale)
    eps, pair = _best([(f"query value 0 vs {sens:g}: Lap(0, {scale:g}) vs Lap({sens:g}, {scale:g}), {count} "
                        "composition(s)", [(lp, lq, count)])], delta, resolution)
    return LowerBound(eps, delta, pair, PAIR_METHOD)


def randomized_response_lower_bound(*, keep_probability: float, classes: int, labels: int = 1, reports: int = 1,
                                    delta: float = 0.0, resolution: float = 0.02) -> LowerBound:
    """C-ary randomized response with keep probability beta on each of ``labels`` labels per report, ``reports``
    reports of one client: every label of the client changes from class 0 to class 1 (replace-one at the client
    level). Output law of one label: class 0 w.p. beta + (1-beta)/C, every other class (1-beta)/C -- exact, no
    binning. At delta = 0 the epsilon is the largest loss (attained)."""
    owner = "randomized_response_lower_bound"
    beta = check_probability(keep_probability, "keep_probability", owner)
    c = check_int(classes, "classes", owner, low=2)
    k = check_int(labels, "labels", owner, low=1)
    r = check_int(reports, "reports", owner, low=1)
    delta = check_probability(delta, "delta", owner, allow_zero=True)
    hi = beta + (1.0 - beta) / c
    lo = (1.0 - beta) / c
    pair = (f"every label of the client class 0 vs class 1 ({k} label(s) x {r} report(s)); one label reports its own "
            f"class w.p. {hi:.6g}, each other class w.p. {lo:.6g}")
    if lo == 0.0:
        return LowerBound(math.inf, delta, pair, "the output class is certain: infinite loss")
    big = math.log1p(beta / lo)   # log(hi / lo), hi - lo = beta: stable for tiny beta
    # a keep probability near 1 carries the float error of 1 - beta (up to half an ulp of 1, relative to 1 - beta):
    # the loss is lowered by that bound, so the pair never claims more than the mechanism the caller meant (eps = 25
    # per label gives beta with 1 - beta ~ 4e-11, whose float loss reads 25.0000012)
    big = max(0.0, big - 4.0 * 2.0 ** -53 / max(1.0 - beta, 2.0 ** -53))
    if delta == 0.0:
        return LowerBound(k * r * big, delta, pair, "closed form: the largest privacy loss, attained")
    # outcomes of one label: "0" (loss +L), "1" (loss -L), another class (loss 0): an exact lattice
    eps = lattice_pair_epsilon(big, {1: hi, -1: lo, 0: max(1.0 - hi - lo, 0.0)}, k * r, delta)
    return LowerBound(eps, delta, pair, "explicit pair's privacy-loss distribution on its exact lattice, composed by "
                      "FFT; epsilon read at delta + 1e-12")


#: Most atoms the exact multinomial sum of a three-outcome pair enumerates (past it: the FFT route, still a bound).
MAX_MULTINOMIAL_ATOMS = 2_000_000
#: The three-class search of the noisy-max pair runs only while one candidate's multinomial window is at most this
#: (about 500 queries; past it the two-class pairs only: still a lower bound, and it keeps the accounting fast).
MAX_THREE_CLASS_ATOMS = 250_000


def categorical_pair_epsilon(log_p: Sequence[float] | np.ndarray, log_q: Sequence[float] | np.ndarray, count: int,
                             delta: float) -> float:
    """A certified lower bound on the epsilon at ``delta`` of ``count`` compositions of a pair of laws on two or three
    outcomes (log masses ``log_p`` under the first dataset, ``log_q`` under the second), exactly where affordable:
    with counts (j_0, j_1, j_2) ~ Multinomial(count, P) the loss is sum_i j_i (log P_i - log Q_i), and delta(eps) is
    summed over every count vector in the window of +-sqrt(175 count) + 2 around the mean of each coordinate (outside,
    less than 2e-152 of the mass per coordinate by Hoeffding: leaving atoms out only lowers delta), solved in closed
    form between consecutive losses (:func:`binary_pair_epsilon` for two outcomes). Past
    :data:`MAX_MULTINOMIAL_ATOMS` atoms, or with an outcome impossible under Q, the pair's PLD composed by FFT
    (:func:`composed_pair_epsilon` at resolution 0.002)."""
    lp = np.asarray(log_p, dtype=np.float64)
    lq = np.asarray(log_q, dtype=np.float64)
    count = min(int(count), MAX_PAIR_STEPS)
    keep = np.isfinite(lp)
    if np.any(keep & ~np.isfinite(lq)) or lp.size > 3:
        return composed_pair_epsilon([(lp, lq, count)], delta, resolution=0.002)
    lp, lq = lp[keep], lq[keep]
    if lp.size <= 1:
        return 0.0
    if lp.size == 2:
        return binary_pair_epsilon(math.exp(lp[0]), math.exp(lq[0]), count, delta) if (
            0.0 < math.exp(lq[0]) < 1.0 and 0.0 < math.exp(lp[0]) < 1.0) else composed_pair_epsilon(
            [(lp, lq, count)], delta, resolution=0.002)
    p = np.exp(lp)
    half = math.sqrt(175.0 * count) + 2.0
    wins = [np.arange(int(max(0, math.floor(count * pi - half))), int(min(count, math.ceil(count * pi + half))) + 1)
            for pi in p[:2]]
    if wins[0].size * wins[1].size > MAX_MULTINOMIAL_ATOMS:
        return composed_pair_epsilon([(lp, lq, count)], delta, resolution=0.002)
    g0, g1 = np.meshgrid(wins[0].astype(np.float64), wins[1].astype(np.float64), indexing="ij")
    j0, j1 = g0.ravel(), g1.ravel()
    j2 = count - j0 - j1
    ok = j2 >= 0
    j0, j1, j2 = j0[ok], j1[ok], j2[ok]
    a = lp - lq
    with np.errstate(invalid="ignore", divide="ignore"):
        logw = (special.gammaln(count + 1.0) - special.gammaln(j0 + 1.0) - special.gammaln(j1 + 1.0)
                - special.gammaln(j2 + 1.0) + special.xlogy(j0, p[0]) + special.xlogy(j1, p[1]) + special.xlogy(j2, p[2]))
    loss = j0 * a[0] + j1 * a[1] + j2 * a[2]
    return _atoms_epsilon(loss, logw, delta)


def _diff_laplace_cdf(x: np.ndarray, b: float) -> np.ndarray:
    """P(L1 - L2 <= x) for independent Laplace(0, b): 1 - e^{-x/b}(1 + x/(2b))/2 for x >= 0, symmetric."""
    a = np.abs(x) / b
    tail = 0.5 * np.exp(-a) * (1.0 + 0.5 * a)
    return np.where(x >= 0, 1.0 - tail, tail)


def _log_diff_laplace_cdf(x: float, b: float) -> tuple[float, float]:
    """(log P(L2 - L1 < x), log P(L2 - L1 > x)) for independent Laplace(0, b), each side computed directly."""
    a = abs(x) / b
    log_tail = math.log(0.5) - a + math.log1p(0.5 * a)
    log_big = math.log1p(-math.exp(log_tail))
    return (log_big, log_tail) if x >= 0 else (log_tail, log_big)


_GL_X, _GL_W = np.polynomial.legendre.leggauss(20)


def laplace_argmax_log_probs(counts: Sequence[float] | np.ndarray, scale: float) -> np.ndarray:
    r"""log P(class j is the noisy argmax) of the counts ``counts`` plus i.i.d. Laplace(0, ``scale``) noise, each
    class: :math:`\int f(z)\prod_{i\ne j}F(z + n_j - n_i)\,dz` (f, F the Laplace density and distribution), a
    positive integrand integrated in log space by 20-point Gauss-Legendre on pieces no longer than half the scale
    between its kinks (relative error near machine precision: the integrand is a sum of exponentials on each piece),
    over the kinks +-45 scales (the rest holds below e^-44 of each probability). Ties have probability 0."""
    n = np.asarray(counts, dtype=np.float64)
    b = float(scale)
    out = np.empty(n.size)
    for j in range(n.size):
        c = n[j] - np.delete(n, j)
        kinks = np.unique(np.concatenate([[0.0], -c]))
        edges = [kinks[0] - 45.0 * b]
        pts = list(kinks) + [kinks[-1] + 45.0 * b]
        for lo, hi in zip([edges[0]] + pts[:-1], pts):
            if hi <= lo:
                continue
            k = max(1, int(math.ceil((hi - lo) / (0.5 * b))))
            edges.extend(np.linspace(lo, hi, k + 1)[1:].tolist())
        e = np.asarray(edges)
        lo, hi = e[:-1, None], e[1:, None]
        z = 0.5 * (hi - lo) * _GL_X[None, :] + 0.5 * (hi + lo)
        logw = np.log(0.5 * (hi - lo) * _GL_W[None, :])
        x = z[..., None] + c[None, None, :]
        with np.errstate(divide="ignore"):
            log_f = np.log(0.5 / b) - np.abs(z) / b
            log_cdf = np.where(x < 0, math.log(0.5) + np.minimum(x, 0.0) / b, np.log1p(-0.5 * np.exp(-np.maximum(x, 0.0) / b)))
        terms = logw + log_f + log_cdf.sum(axis=-1)
        out[j] = float(special.logsumexp(terms))
    return out


def _integer_offsets(scale: float, most: int, low: int = 0) -> list[int]:
    """About ``most`` integers from ``low`` to about 60 scales, geometrically spaced, and the first few."""
    big = max(4.0, 60.0 * scale)
    pts = np.unique(np.round(np.concatenate([np.arange(low, low + 4), low + np.geomspace(0.5, big, most)])).astype(int))
    return [int(x) for x in pts]


def noisy_max_lower_bound(*, gamma: float, sensitivity: float, queries: int, delta: float,
                          resolution: float = 0.02, three_classes: bool = True) -> LowerBound:
    r"""Report-noisy-max with Laplace(1/gamma) noise (PATE's data-independent route): an explicit pair of integer vote
    histograms that one record (one teacher, or the record whose votes move the histogram by L1 ``sensitivity`` S)
    turns into each other, the same pair at every query.

    Vote counts are integers, so a histogram moves by an integer vector of L1 norm at most S. Under "one teacher's
    vote changes" (S >= 2) the largest realisable move of one class's lead over another is
    :math:`k = 2\lfloor S/2\rfloor` (:math:`\lfloor S/2\rfloor` teachers switch between the two classes; totals kept);
    with 1 <= S < 2 only one vote is added or removed: k = 1; below 1 no vote moves and the bound is 0.

    - Two classes (counts n1, n2 with lead g = n1 - n2 an integer, moved to g + k): the released class is 1 with
      probability :math:`P(L_2 - L_1 < g)` (closed form for the difference of two Laplace noises); every integer lead
      up to about 60 scales is a candidate (about 30 spaced geometrically, then the neighbours of the best), both
      directions, composed over the queries exactly (:func:`binary_pair_epsilon`).
    - Three classes (``three_classes``, up to about 500 queries: :data:`MAX_THREE_CLASS_ATOMS`): the best two-class
      pairs with a third class placed at integer levels within about 6 scales of them (its count fixed); the three win probabilities by quadrature (:func:`laplace_argmax_log_probs`) and the
      composition by an exact multinomial sum (:func:`categorical_pair_epsilon`).

    The histograms of the reported pair are in ``details["histograms"]`` (relative counts: add any integer to every
    class to make them teacher counts; the argmax does not change), so the pair can be checked to be realisable.
    ``resolution`` is unused (every evaluation is exact); it is kept for the callers' signature."""
    owner = "noisy_max_lower_bound"
    gamma = check_float(gamma, "gamma", owner, low=0.0, low_open=True)
    s = check_float(sensitivity, "sensitivity", owner, low=0.0, low_open=True)
    q = min(check_int(queries, "queries", owner, low=1), MAX_PAIR_STEPS)  # fewer observed queries still bound below
    delta = check_probability(delta, "delta", owner)
    b = 1.0 / gamma
    k = 2 * int(math.floor(s / 2.0)) if s >= 2.0 else (1 if s >= 1.0 else 0)
    method = "the pair's privacy-loss law over the queries, exactly (binomial or multinomial sum)"
    if k == 0:
        return LowerBound(0.0, delta, f"no integer vote histogram moves by L1 sensitivity {s:g} < 1: no pair", method,
                          details={"move": 0})
    up, down = (k + 1) // 2, k // 2            # class 1 gains `up` votes, class 2 loses `down`

    def two(g: int) -> tuple[float, float]:
        lp = _log_diff_laplace_cdf(float(g + k), b)    # P(class 1 | lead g + k), P(class 2 | ...)
        lq = _log_diff_laplace_cdf(float(g), b)
        return lp[0], lq[0]

    scored: dict[tuple[int, bool], float] = {}

    def score(g: int) -> None:
        lp1, lq1 = two(g)
        p1, q1 = math.exp(lp1), math.exp(lq1)
        for flip in (False, True):
            if (g, flip) not in scored:
                scored[(g, flip)] = binary_pair_epsilon(q1, p1, q, delta) if flip else binary_pair_epsilon(p1, q1, q, delta)

    centre = -(k // 2)
    for off in _integer_offsets(b, 28):
        score(centre - off)
    for _ in range(3):   # refine around the best: the neighbours one, two, four votes away
        (g0, _f), _e = max(scored.items(), key=lambda kv: kv[1])
        for dg in (-4, -2, -1, 1, 2, 4):
            score(g0 + dg)
    (g_best, flip_best), best = max(scored.items(), key=lambda kv: kv[1])
    first, second = ([up, -g_best - down], [0, -g_best])     # lead g + k (the first law), lead g
    hist = (first, second) if not flip_best else (second, first)
    name = (f"two classes, lead {g_best + k} vs {g_best} (histograms {hist[0]} vs {hist[1]}, relative counts), Laplace "
            f"scale {b:.4g}, {q} queries")
    if three_classes and (2.0 * math.sqrt(175.0 * q) + 5.0) ** 2 <= MAX_THREE_CLASS_ATOMS:
        tops = sorted(scored.items(), key=lambda kv: -kv[1])[:2]
        cands = []
        for (g, flip), _e in tops:
            n_p, n_q = np.array([up, -g - down], float), np.array([0.0, -g], float)
            hi_level = max(n_p.max(), n_q.max())
            for off in _integer_offsets(b / 10.0, 6, low=-3):   # a third class within about 6 scales of the two
                cands.append((g, flip, float(hi_level - off)))
                cands.append((g, flip, float(hi_level + 1 + off)))
        seen = set()
        for g, flip, level in cands:
            if (g, flip, level) in seen:
                continue
            seen.add((g, flip, level))
            n_p = np.array([up, -g - down, level])
            n_q = np.array([0.0, -g, level])
            lp, lq = laplace_argmax_log_probs(n_p, b), laplace_argmax_log_probs(n_q, b)
            if flip:
                lp, lq, n_p, n_q = lq, lp, n_q, n_p
            eps = categorical_pair_epsilon(lp, lq, q, delta)
            if eps > best:
                best = eps
                hist = ([int(x) for x in n_p], [int(x) for x in n_q])
                name = (f"three classes, histograms {hist[0]} vs {hist[1]} (relative counts), Laplace scale {b:.4g}, "
                        f"{q} queries")
    return LowerBound(best, delta, name, method, details={"histograms": [list(map(int, h)) for h in hist], "move": k})


def gnmax_lower_bound(*, sigma: float, queries: int, delta: float, threshold: float | None = None,
                      sigma1: float | None = None) -> LowerBound:
    r"""GNMax (PATE 2018) answers with :math:`N(0, \sigma^2)` noise on each vote count, optionally Confident-GNMax's
    check :math:`\max_j n_j + N(0, \sigma_1^2) \ge T` first: an explicit pair of integer two-class vote histograms
    under "one teacher's vote changes" (the teacher moves from class 2 to class 1: the lead g of class 1 becomes
    g + 2, the largest count moves by one), the same at every query.

    Without the check the released class is 1 with probability :math:`\Phi(g / (\sqrt2\sigma))` (the difference of
    two noises), composed exactly over the queries (:func:`binary_pair_epsilon`), every integer lead up to about 9
    standard deviations a candidate. With the check each query outputs "not answered" with probability
    :math:`1 - \Phi((\max_j n_j - T)/\sigma_1)`, else the class: three outcomes, composed by an exact multinomial sum
    (:func:`categorical_pair_epsilon`); the absolute counts (integers >= 0) are searched around T. The histograms of
    the reported pair are in ``details["histograms"]``."""
    owner = "gnmax_lower_bound"
    sigma = check_float(sigma, "sigma", owner, low=0.0, low_open=True)
    q = min(check_int(queries, "queries", owner, low=1), MAX_PAIR_STEPS)
    delta = check_probability(delta, "delta", owner)
    if (threshold is None) != (sigma1 is None):
        raise ParameterError(f"{owner} needs both 'threshold' and 'sigma1', or neither. Got threshold={threshold!r}, "
                             f"sigma1={sigma1!r} instead.")
    s2 = math.sqrt(2.0) * sigma
    method = "the pair's privacy-loss law over the queries, exactly (binomial or multinomial sum)"

    def cls(g: float) -> tuple[float, float]:       # log P(class 1), log P(class 2) at lead g
        return float(special.log_ndtr(g / s2)), float(special.log_ndtr(-g / s2))

    scored: dict[tuple[int, bool], float] = {}
    for off in _integer_offsets(sigma / 6.0, 24):
        g = -1 - off
        a, c = cls(g + 2.0), cls(float(g))
        for flip in (False, True):
            p1, q1 = math.exp(a[0]), math.exp(c[0])
            scored[(g, flip)] = binary_pair_epsilon(q1, p1, q, delta) if flip else binary_pair_epsilon(p1, q1, q, delta)
    (g_best, flip_best), best = max(scored.items(), key=lambda kv: kv[1])
    if threshold is None:
        h_p, h_q = [1, -g_best - 1], [0, -g_best]     # relative counts: the lead g_best + 2 vs g_best
        hist = (h_p, h_q) if not flip_best else (h_q, h_p)
        return LowerBound(best, delta, f"two classes, lead {g_best + 2} vs {g_best} (histograms {hist[0]} vs {hist[1]}, "
                          f"relative counts), GNMax noise {sigma:g}, {q} queries", method,
                          details={"histograms": [list(h) for h in hist]})
    sigma1 = check_float(sigma1, "sigma1", owner, low=0.0, low_open=True)
    threshold = check_float(threshold, "threshold", owner)
    best, hist, name = 0.0, ([0, 0], [0, 0]), "none"
    tops = sorted(scored.items(), key=lambda kv: -kv[1])[:1]
    level_offsets = sorted({int(round(x * sigma1)) for x in (-2, -1, 0, 1, 2, 3)})
    for (g, flip), _e in tops:
        for off in level_offsets:
            top = int(math.ceil(threshold)) + off          # the larger count of the histogram with the larger maximum
            # D: (c1 + 1, c2 - 1), D': (c1, c2) with c1 - c2 = g; the counts kept >= 0
            c1 = top - 1 if g + 2 >= 0 else top + g + 1
            c2 = c1 - g
            lift = max(0, -c1, 1 - c2)                     # teacher counts are >= 0: raise both classes
            c1, c2 = c1 + lift, c2 + lift
            h_p, h_q = [c1 + 1, c2 - 1], [c1, c2]
            if flip:
                h_p, h_q = h_q, h_p
            laws = []
            for h in (h_p, h_q):
                log_ans = float(special.log_ndtr((max(h) - threshold) / sigma1))
                log_no = float(special.log_ndtr(-(max(h) - threshold) / sigma1))
                c_1, c_2 = cls(float(h[0] - h[1]))
                laws.append(np.array([log_no, log_ans + c_1, log_ans + c_2]))
            eps = categorical_pair_epsilon(laws[0], laws[1], q, delta)
            if eps > best:
                best, hist = eps, (h_p, h_q)
                name = (f"two classes, histograms {h_p} vs {h_q} (teacher counts), Confident-GNMax check T = "
                        f"{threshold:g}, sigma1 = {sigma1:g}, GNMax noise {sigma:g}, {q} queries (outputs: not "
                        "answered, class 1, class 2)")
    return LowerBound(best, delta, name, method, details={"histograms": [list(h) for h in hist]})

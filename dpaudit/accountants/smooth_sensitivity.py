"""Smooth sensitivity of GNMax's data-dependent RDP, and its private release (PATE 2018, Section 4 and Appendix).

A data-dependent epsilon is a function of the private votes. To publish it, PATE 2018 adds Gaussian noise scaled
by its smooth sensitivity (Nissim, Raskhodnikova, Smith, STOC 2007):

.. math:: SS_\\beta(n) = \\max_{d \\ge 0} e^{-\\beta d} A^{(d)}(n),\\qquad
          A^{(d)}(n) = \\max_{n' : \\mathrm{dist}(n, n') \\le d}\\ \\max_{n'' \\sim n'} |\\epsilon(n') - \\epsilon(n'')|,

where one step moves one teacher's vote. How dpaudit bounds :math:`A^{(d)}` (own derivation, conservative):

1. :math:`\\epsilon` at a fixed order :math:`\\lambda` depends on the histogram only through :math:`\\tilde q`, via
   :math:`g(\\tilde q)` = :func:`~dpaudit.accountants.gnmax.rdp_gnmax_data_dependent`; :math:`g` is non-decreasing
   in :math:`\\tilde q` (PATE 2018, condition C5; checked by the tests on a grid).
2. :math:`\\tilde q` is a decreasing function of the **sorted** gaps :math:`n_{(1)} - n_{(i)}`. Sorting is 1-Lipschitz in
   :math:`\\ell_\\infty` and one step moves each count by at most 1, so after :math:`d` steps every sorted gap moved by
   at most :math:`2d`: :math:`\\tilde q(n') \\in [Q_{lo}(d), Q_{hi}(d)]` with the gaps shifted by :math:`\\pm 2d`.
   Working on sorted counts makes the result invariant to relabelling the classes (a widely copied reference
   compares unsorted counts and returns 0 whenever the winner is not class 0).
3. One step from a histogram with bound :math:`q` lands in :math:`[B_L(q), B_U(q)]` with
   :math:`B_{U/L}(q) = (C-1)\\,\\bar\\Phi(x \\mp \\sqrt2/\\sigma)`, :math:`x = \\bar\\Phi^{-1}(q/(C-1))` (PATE 2018,
   Proposition 13: the union-bound terms, each with its gap moved by 2, are extremal when equal).
   So :math:`LS(n') \\le \\ell(q') = \\max(g(B_U(q')) - g(q'),\\ g(q') - g(B_L(q')))`.
4. :math:`A^{(d)} \\le \\max_{q \\in [Q_{lo}(d), Q_{hi}(d)]} \\ell(q)`, taken over a dense grid in :math:`\\log q`
   (4096 points) plus both ends of the interval; beyond ``max_distance`` (the number of teachers, after which every
   histogram is reachable) the bound is constant.

For a sum over queries the local sensitivities add (one record moves one vote in every query), so
:math:`SS_\\beta` of the total is :math:`\\max_d e^{-\\beta d}\\sum_i A_i^{(d)}`.

The release (PATE 2018, Theorem 23, "GNSS"): publish :math:`\\epsilon_\\lambda(n) + SS_\\beta(n)\\, \\mathcal N(0, \\sigma_s^2)`;
the release itself is :math:`(\\lambda, \\lambda e^{2\\beta}/\\sigma_s^2 + (\\beta\\lambda - \\tfrac12\\log(1-2\\lambda\\beta))/(\\lambda-1))`-RDP
for :math:`1 < \\lambda < 1/(2\\beta)`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
from scipy.special import log_ndtr, ndtri_exp

from dpaudit.accountants.gnmax import gaussian_log_q, rdp_gnmax_data_dependent, rdp_threshold_data_dependent, threshold_log_pr
from dpaudit.accountants._common import validated_votes
from dpaudit.accountants.rdp import rdp_to_epsilon
from dpaudit.errors import ParameterError, check_float, check_int, check_probability

__all__ = [
    "gnmax_step_bounds",
    "local_sensitivity_bounds_gnmax",
    "smooth_sensitivity_gnmax",
    "local_sensitivity_bounds_threshold",
    "rdp_gnss",
    "SmoothSensitivityRelease",
    "release_noisy_epsilon",
]

_GRID = 4096
_LOG_Q_FLOOR = -700.0


def gnmax_step_bounds(log_q: Any, sigma: float, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """``(log B_L(q), log B_U(q))``: bounds on :math:`\\tilde q` one step away (PATE 2018, Proposition 13)."""
    sigma = check_float(sigma, "sigma", "gnmax_step_bounds", low=0.0, low_open=True)
    c = check_int(num_classes, "num_classes", "gnmax_step_bounds", low=2)
    lq = np.asarray(log_q, dtype=np.float64)
    lm = math.log(c - 1)
    cap = math.log1p(-1.0 / c)
    x = -ndtri_exp(np.minimum(lq - lm, math.log(0.5)))  # per-term standardised gap >= 0
    shift = math.sqrt(2.0) / sigma
    lo = lm + log_ndtr(-(x + shift))
    hi = np.minimum(lm + log_ndtr(-(x - shift)), cap)
    return np.minimum(lo, lq), np.maximum(hi, lq)


def _g(log_q: np.ndarray, sigma: float, order: float) -> np.ndarray:
    return rdp_gnmax_data_dependent(np.asarray(log_q).ravel(), sigma, [order])[:, 0].reshape(np.shape(log_q))


def _ell(log_q: np.ndarray, sigma: float, order: float, num_classes: int) -> np.ndarray:
    lo, hi = gnmax_step_bounds(log_q, sigma, num_classes)
    g0 = _g(log_q, sigma, order)
    return np.maximum(np.maximum(_g(hi, sigma, order) - g0, g0 - _g(lo, sigma, order)), 0.0)


def _sorted_gaps(v: np.ndarray) -> np.ndarray:
    s = -np.sort(-v, axis=1)
    return s[:, :1] - s[:, 1:]


def _log_q_of_gaps(gaps: np.ndarray, sigma: float) -> np.ndarray:
    lt = log_ndtr(-np.maximum(gaps, 0.0) / (math.sqrt(2.0) * sigma))
    m = lt.max(axis=-1)
    out = m + np.log(np.exp(lt - m[..., None]).sum(axis=-1))
    return np.minimum(out, math.log1p(-1.0 / (gaps.shape[-1] + 1)))


def local_sensitivity_bounds_gnmax(votes: Any, *, sigma: float, order: float, max_distance: int | None = None) -> np.ndarray:
    """Upper bounds on :math:`A^{(d)}` for d = 0..``max_distance``, per query: shape (queries, max_distance + 1).

    ``max_distance`` defaults to the largest row total (the number of teachers). See the module docstring.
    """
    owner = "local_sensitivity_bounds_gnmax"
    sigma = check_float(sigma, "sigma", owner, low=0.0, low_open=True)
    order = check_float(order, "order", owner, low=1.0, low_open=True)
    v = validated_votes(votes, owner)
    nc = v.shape[1]
    if max_distance is None:
        max_distance = int(math.ceil(v.sum(axis=1).max()))
    dmax = check_int(max_distance, "max_distance", owner, low=0)
    # ell on a dense grid of log q, with a sparse table for O(1) range maxima
    cap = math.log1p(-1.0 / nc)
    grid = np.linspace(_LOG_Q_FLOOR, cap, _GRID)
    ell = _ell(grid, sigma, order, nc)
    levels = [ell]
    while 2 ** len(levels) <= _GRID:
        prev, w = levels[-1], 2 ** (len(levels) - 1)
        levels.append(np.maximum(prev[:-w], prev[w:]))
    gaps = _sorted_gaps(v)  # (Q, C-1)
    d = np.arange(dmax + 1, dtype=np.float64)
    lq_hi = _log_q_of_gaps(gaps[:, None, :] - 2.0 * d[None, :, None], sigma)  # (Q, D+1)
    lq_lo = np.maximum(_log_q_of_gaps(gaps[:, None, :] + 2.0 * d[None, :, None], sigma), _LOG_Q_FLOOR)
    out = np.maximum(_ell(lq_hi, sigma, order, nc), _ell(lq_lo, sigma, order, nc))
    i = np.searchsorted(grid, lq_lo, side="left")
    j = np.searchsorted(grid, lq_hi, side="right") - 1
    has = j >= i
    if np.any(has):
        ii, jj = i[has], j[has]
        k = np.floor(np.log2(jj - ii + 1)).astype(int)
        rng = np.empty(ii.size)
        for level in np.unique(k):
            sel = k == level
            tab = levels[level]
            rng[sel] = np.maximum(tab[ii[sel]], tab[jj[sel] - 2**level + 1])
        out[has] = np.maximum(out[has], rng)
    # A^(d) is non-decreasing in d by definition (the set of reachable histograms grows)
    return np.maximum.accumulate(out, axis=1)


def local_sensitivity_bounds_threshold(votes: Any, *, threshold: float, sigma1: float, order: float,
                                       max_distance: int | None = None) -> np.ndarray:
    """Upper bounds on :math:`A^{(d)}` of Confident-GNMax's data-dependent threshold cost at ``order``
    (:func:`~dpaudit.accountants.gnmax.rdp_threshold_data_dependent`), d = 0..``max_distance``, per query.

    The cost is a function g(m) of the largest count m only, and one step moves m by at most 1, so (exactly)
    :math:`LS(m') = \\max(|g(m'+1) - g(m')|, |g(m') - g(m'-1)|)` and :math:`A^{(d)}(m) = \\max_{|m'-m| \\le d} LS(m')`
    (no clipping of m' to the feasible range: only more candidates, so an upper bound)."""
    owner = "local_sensitivity_bounds_threshold"
    threshold = check_float(threshold, "threshold", owner)
    sigma1 = check_float(sigma1, "sigma1", owner, low=0.0, low_open=True)
    order = check_float(order, "order", owner, low=1.0, low_open=True)
    v = validated_votes(votes, owner)
    if max_distance is None:
        max_distance = int(math.ceil(v.sum(axis=1).max()))
    dmax = check_int(max_distance, "max_distance", owner, low=0)
    m = v.max(axis=1)
    uniq, inv = np.unique(m, return_inverse=True)
    k = np.arange(-(dmax + 1), dmax + 2, dtype=np.float64)
    pts = (uniq[:, None] + k[None, :]).ravel()
    with np.errstate(over="ignore"):
        lpr = log_ndtr((pts - threshold) / sigma1)
    g = rdp_threshold_data_dependent(lpr, sigma1, [order])[:, 0].reshape(uniq.size, k.size)
    step = np.abs(np.diff(g, axis=1))  # |g(m+k+1) - g(m+k)|, k = -(D+1)..D
    ls = np.maximum(step[:, :-1], step[:, 1:])  # LS at offsets k = -D..D
    centre = dmax
    ring = np.maximum(ls[:, centre - np.arange(dmax + 1)], ls[:, centre + np.arange(dmax + 1)])
    return np.maximum.accumulate(ring, axis=1)[inv]


def smooth_sensitivity_gnmax(votes: Any, *, sigma: float, order: float, beta: float, max_distance: int | None = None,
                             threshold: float | None = None, sigma1: float | None = None,
                             answered: Any = None) -> float:
    """:math:`\\max_d e^{-\\beta d} \\sum_i A_i^{(d)}` for the total data-dependent RDP at ``order`` over all queries.

    With ``threshold`` and ``sigma1`` (Confident-GNMax) the total also holds every query's data-dependent threshold
    cost, and only the ``answered`` rows (a bool mask; default all) pay the GNMax cost."""
    beta = check_float(beta, "beta", "smooth_sensitivity_gnmax", low=0.0, low_open=True)
    per = local_sensitivity_bounds_gnmax(votes, sigma=sigma, order=order, max_distance=max_distance)
    if answered is not None:
        per = per[np.asarray(answered, dtype=bool)]
    a = per.sum(axis=0)
    if (threshold is None) != (sigma1 is None):
        raise ParameterError("smooth_sensitivity_gnmax needs both 'threshold' and 'sigma1', or neither. "
                             f"Got threshold={threshold!r}, sigma1={sigma1!r} instead.")
    if threshold is not None and sigma1 is not None:
        a = a + local_sensitivity_bounds_threshold(votes, threshold=threshold, sigma1=sigma1, order=order,
                                                   max_distance=a.size - 1).sum(axis=0)
    return float(np.max(a * np.exp(-beta * np.arange(a.size))))


def rdp_gnss(beta: float, sigma_ss: float, order: float) -> float:
    """RDP at ``order`` of releasing :math:`f + SS_\\beta \\mathcal N(0, \\sigma_s^2)` (PATE 2018, Theorem 23)."""
    owner = "rdp_gnss"
    beta = check_float(beta, "beta", owner, low=0.0, low_open=True)
    sigma_ss = check_float(sigma_ss, "sigma_ss", owner, low=0.0, low_open=True)
    order = check_float(order, "order", owner, low=1.0, high=1.0 / (2.0 * beta), low_open=True, high_open=True)
    return order * math.exp(2.0 * beta) / sigma_ss**2 + (beta * order - 0.5 * math.log1p(-2.0 * order * beta)) / (order - 1.0)


@dataclass(frozen=True, slots=True)
class SmoothSensitivityRelease:
    """A privately released data-dependent GNMax figure.

    ``noisy_rdp`` (the data-dependent RDP at ``order`` plus :math:`SS_\\beta \\mathcal N(0,\\sigma_s^2)`) and ``epsilon``
    (from ``noisy_rdp + release_rdp`` at that order) may be published; ``smooth_sensitivity`` and ``private_rdp`` are
    functions of the private votes: keep them private (they are returned for audits and tests).
    The noisy figure is an unbiased estimate of the private one; it is below it about half of the time.
    """

    noisy_rdp: float
    release_rdp: float
    epsilon: float
    delta: float
    order: float
    beta: float
    sigma_ss: float
    seed: int
    smooth_sensitivity: float
    private_rdp: float


def release_noisy_epsilon(votes: Any, *, sigma: float, order: float, beta: float, sigma_ss: float, delta: float, seed: int,
                          max_distance: int | None = None, threshold: float | None = None, sigma1: float | None = None,
                          answered: Any = None) -> SmoothSensitivityRelease:
    """Release GNMax's data-dependent RDP at ``order`` with smooth-sensitivity Gaussian noise (PATE 2018, Section 4.2).

    Parameters
    ----------
    votes:
        Vote histograms (queries x classes) of the answered queries.
    sigma:
        GNMax noise standard deviation.
    order:
        Rényi order :math:`\\lambda`, with :math:`1 < \\lambda < 1/(2\\beta)`.
    beta:
        Smoothness :math:`\\beta > 0` of the smooth sensitivity.
    sigma_ss:
        Noise multiplier :math:`\\sigma_s` of the release.
    delta:
        Target delta for the final epsilon (single-order conversion at ``order``).
    seed:
        Seed of the release noise (recorded; same seed, same figure).
    threshold, sigma1, answered:
        Confident-GNMax (PATE 2018, Algorithm 1): every row's check is charged its data-dependent cost
        (:func:`~dpaudit.accountants.gnmax.rdp_threshold_data_dependent`), only the ``answered`` rows (bool mask,
        default all) the GNMax cost; the smooth sensitivity covers both.
    """
    owner = "release_noisy_epsilon"
    sigma = check_float(sigma, "sigma", owner, low=0.0, low_open=True)
    beta = check_float(beta, "beta", owner, low=0.0, low_open=True)
    order = check_float(order, "order", owner, low=1.0, high=1.0 / (2.0 * beta), low_open=True, high_open=True)
    sigma_ss = check_float(sigma_ss, "sigma_ss", owner, low=0.0, low_open=True)
    delta = check_probability(delta, "delta", owner)
    seed = check_int(seed, "seed", owner, low=0)
    v = validated_votes(votes, owner)
    gn = rdp_gnmax_data_dependent(gaussian_log_q(v, sigma), sigma, [order])[:, 0]
    if answered is not None:
        gn = gn[np.asarray(answered, dtype=bool)]
    private = float(gn.sum())
    if threshold is not None and sigma1 is not None:  # Confident-GNMax: every query's data-dependent check cost
        private += float(rdp_threshold_data_dependent(threshold_log_pr(v, threshold, sigma1), sigma1, [order]).sum())
    ss = smooth_sensitivity_gnmax(v, sigma=sigma, order=order, beta=beta, max_distance=max_distance, threshold=threshold,
                                  sigma1=sigma1, answered=answered)
    z = float(np.random.default_rng(seed).standard_normal())
    noisy = max(private + ss * sigma_ss * z, 0.0)
    cost = rdp_gnss(beta, sigma_ss, order)
    eps, _ = rdp_to_epsilon([order], [noisy + cost], delta, warn=False)
    return SmoothSensitivityRelease(noisy, cost, eps, delta, order, beta, sigma_ss, seed, ss, private)

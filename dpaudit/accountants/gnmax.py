"""PATE with Gaussian noisy max (GNMax) and Confident-GNMax: data-independent and data-dependent Rényi DP.

Papernot, Song, Mironov, Raghunathan, Talwar, Erlingsson, "Scalable private learning with PATE", ICLR 2018
(arXiv:1802.08908) — "PATE 2018" below.

One GNMax answer is :math:`\\arg\\max_j (n_j + \\mathcal N(0, \\sigma^2))`. One record moves one teacher's vote:
the histogram changes by 1 in two coordinates (L2 sensitivity :math:`\\sqrt2`), so one answer is
:math:`(\\lambda, \\lambda/\\sigma^2)`-RDP for every :math:`\\lambda > 1` (PATE 2018, Proposition 8) and, as a
post-processing of the Gaussian mechanism on the histogram, :math:`\\sqrt2/\\sigma`-GDP (Dong, Roth & Su 2019).

Data-dependent RDP (PATE 2018, Theorem 6 with the orders of Proposition 10). With
:math:`\\tilde q \\ge \\Pr[M(D) \\ne i^*]` and two higher orders :math:`\\mu_2 = \\sigma\\sqrt{\\log(1/\\tilde q)}`,
:math:`\\mu_1 = \\mu_2 + 1` at which the mechanism is :math:`(\\mu_i, \\epsilon_i = \\mu_i/\\sigma^2)`-RDP,

.. math::
   D_\\lambda \\le \\frac{1}{\\lambda-1}\\log\\big((1-\\tilde q) A^{\\lambda-1} + \\tilde q B^{\\lambda-1}\\big),\\quad
   A = \\frac{1-\\tilde q}{1 - (\\tilde q e^{\\epsilon_2})^{(\\mu_2-1)/\\mu_2}},\\quad B = \\frac{e^{\\epsilon_1}}{\\tilde q^{1/(\\mu_1-1)}},

which applies when :math:`\\mu_2 > 1` (equivalently :math:`\\tilde q e^{\\epsilon_2} < 1`), :math:`\\lambda < \\mu_1` and
:math:`\\log\\tilde q \\le (\\mu_2-1)\\epsilon_2 - \\mu_2\\log\\big(\\frac{\\mu_1}{\\mu_1-1}\\cdot\\frac{\\mu_2}{\\mu_2-1}\\big)`.
Elsewhere the data-independent :math:`\\lambda/\\sigma^2` is used; the data-dependent figure is always the minimum of
the two.

**Magnitudes, not underflows.** Everything is evaluated from :math:`\\mu_2` (a scale-free number) rather than from
:math:`\\tilde q`: with :math:`\\log\\tilde q = -\\mu_2^2/\\sigma^2` the bound's pieces are
:math:`\\log A = \\log(1-\\tilde q) - \\log(1 - e^{-(\\mu_2-1)^2/\\sigma^2})`,
:math:`\\log\\tilde q + (\\lambda-1)\\log B = ((\\lambda-1)(2\\mu_2+1) - \\mu_2^2)/\\sigma^2`, and the third condition reads
:math:`\\sigma^2\\log((\\mu_2+1)/(\\mu_2-1)) \\le 2\\mu_2 - 1`. Where :math:`\\log\\tilde q` itself underflows to
:math:`-\\infty` (gaps beyond about :math:`10^{154}\\sigma`), :math:`\\mu_2` comes from the Mills bound
:math:`\\Phi(-x) \\le \\varphi(x)/x`, i.e. :math:`\\mu_2^2 = g^2/4 + \\sigma^2(\\log x + \\tfrac12\\log 2\\pi - \\log(C-1))`
for the smallest gap :math:`g` and :math:`x = g/(\\sqrt2\\sigma)` (an upper bound on q, so valid). :math:`\\mu_2` is
rounded down by a relative 1e-12 (a larger :math:`\\tilde q` is always allowed), so a figure never rests on the last
bits of a rounding: ``[3, 1, 0]`` at :math:`\\sigma = 10^{-160}` has :math:`\\mu_2 = 1` to 300 digits, the conditions
fail and the data-independent cost is charged. A ``log_q`` of ``-inf`` handed to the public functions (magnitude lost)
is charged the data-independent cost, never 0.

The q bound (PATE 2018, Proposition 7): the difference of two independent :math:`\\mathcal N(0,\\sigma^2)` is
:math:`\\mathcal N(0, 2\\sigma^2)`, so :math:`\\tilde q = \\sum_{i \\ne i^*} \\Phi(-(n_{i^*} - n_i)/(\\sqrt2\\sigma))`,
capped at :math:`1 - 1/C`.

Confident-GNMax (PATE 2018, Algorithm 1): each query first checks :math:`\\max_j n_j + \\mathcal N(0, \\sigma_1^2) \\ge T`.
The max count has sensitivity 1, so the check is :math:`\\lambda/(2\\sigma_1^2)`-RDP data-independently. Its
data-dependent cost (PATE 2018, Section 4 and Appendix) is Theorem 6 again, for a binary outcome with
:math:`\\tilde q = \\min(p, 1-p)`, :math:`p = \\Phi((\\max_j n_j - T)/\\sigma_1)`, computed as
``log_ndtr(-|max - T| / sigma1)`` (never as :math:`\\log(1 - p)` from a rounded p), and the check's Gaussian RDP curve
(GNMax's with :math:`\\sigma = \\sqrt2\\sigma_1`). Every query pays its check; only answered queries pay GNMax.

Which queries were answered is itself an output of the mechanism: figures that charge GNMax only to the answered
queries are conditioned on that output (ex post). The data-independent figure charges every query GNMax as well,
which holds whatever the answers. Interactive GNMax (PATE 2018, Algorithm 2) is refused (see :func:`account_gnmax`).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Callable

import numpy as np
from scipy.special import log_ndtr, ndtr

from dpaudit._io import check_input_file, load_npy_file, read_input_text
from dpaudit.accountants.base import register_rdp
from dpaudit.accountants.closed_form import gaussian_mechanism_epsilon
from dpaudit.accountants._common import (as_votes, check_orders, inv_square, log1mexp, logsumexp_rows, quiet_overflow,
                                         validated_votes)
from dpaudit.accountants.events import DpEvent, GaussianNoisyMax
from dpaudit.accountants.order_search import OrderSearch, search_rdp_orders
from dpaudit.accountants.pairs import gnmax_lower_bound
from dpaudit.accountants.rdp import DEFAULT_ORDERS, rdp_to_epsilon
from dpaudit.accountants.statement import AccountingResult, PrivacyStatement, headline_facts
from dpaudit.errors import DataError, ParameterError, check_bool, check_float, check_int, check_probability

__all__ = [
    "gaussian_log_q",
    "mu2_from_log_q",
    "gnmax_mu2",
    "rdp_gnmax_mu2",
    "rdp_gnmax_data_independent",
    "rdp_gnmax_data_dependent",
    "rdp_gnmax_votes_total",
    "gnmax_dd_applies",
    "rdp_threshold",
    "threshold_log_pr",
    "threshold_log_q",
    "threshold_mu2",
    "rdp_threshold_data_dependent",
    "account_gnmax",
    "load_answered",
    "ROUTE_DATA_DEPENDENT",
    "ROUTE_RDP",
    "ROUTE_GDP",
    "ADAPTIVITY_CAVEAT",
]

_CHUNK = 1 << 15
_SQRT2 = math.sqrt(2.0)
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
#: log q is raised by this relative amount (and the same absolute amount) before mu2 is formed: log_ndtr is accurate to
#: a few 1e-16 and a linear-space sum of C terms to C * 1e-16, so the q the bound is evaluated at is a valid upper bound.
_LQ_SLACK = 1e-12
#: mu2 is rounded down by this relative amount (covers the float error of sigma * sqrt(-log q)).
_MU2_SLACK = 1e-15
#: Relative error allowance on the exponent ((l-1)(2 mu2 + 1) - mu2^2) / sigma^2 (rounded up by it).
_E2_SLACK = 4e-16

ROUTE_DATA_DEPENDENT = "data-dependent RDP"
ROUTE_RDP = "data-independent RDP"
ROUTE_GDP = "data-independent Gaussian DP"
#: Said wherever a data-dependent figure is shown without a private release.
ADAPTIVITY_CAVEAT = ("Adaptivity caveat: a data-dependent epsilon is itself a function of the private votes; publishing it "
                     "leaks information and it is not a differential-privacy guarantee fixed in advance. Release it "
                     "privately (smooth-sensitivity release, PATE 2018 Section 4: `dpaudit account --mechanism gnmax ... "
                     "--release-epsilon`) or publish a data-independent figure.")


# --------------------------------------------------------------------------------------------------
# q, mu2 (magnitude-keeping)
# --------------------------------------------------------------------------------------------------


def gaussian_log_q(votes: Any, sigma: float) -> np.ndarray:
    """:math:`\\log\\tilde q` per query (PATE 2018, Proposition 7), shape (queries,).

    :math:`\\tilde q = \\min(1 - 1/C, \\sum_{i \\ne i^*} \\Phi(-(n_{i^*} - n_i)/(\\sqrt2\\sigma)))` for the plurality
    class :math:`i^*` (ties: every other class counts). ``-inf`` where every term underflows (gaps beyond about
    1e154 sigma): use :func:`gnmax_mu2` for a magnitude that survives.
    """
    sigma = check_float(sigma, "sigma", "gaussian_log_q", low=0.0, low_open=True)
    v = validated_votes(votes, "gaussian_log_q")
    nq, nc = v.shape
    out = np.empty(nq)
    for start in range(0, nq, _CHUNK):
        s = -np.sort(-v[start:start + _CHUNK], axis=1)  # descending
        gaps = s[:, :1] - s[:, 1:]  # (rows, C-1) >= 0
        with np.errstate(over="ignore"):
            lt = log_ndtr(-gaps / (_SQRT2 * sigma))
        out[start:start + s.shape[0]] = logsumexp_rows(lt)
    return np.minimum(out, math.log1p(-1.0 / nc))


def mu2_from_log_q(log_q: Any, sigma: float) -> np.ndarray:
    """:math:`\\mu_2 = \\sigma\\sqrt{\\log(1/\\tilde q)}` (PATE 2018, Proposition 10) for each ``log_q``, evaluated at a
    :math:`\\tilde q` raised by a relative 1e-12 (so float error in ``log_q`` never lowers q) and rounded down.
    ``inf`` where ``log_q`` is ``-inf`` (the magnitude is lost: callers charge the data-independent cost there)."""
    sigma = check_float(sigma, "sigma", "mu2_from_log_q", low=0.0, low_open=True)
    lq = np.asarray(log_q, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        up = np.minimum(lq + _LQ_SLACK * (np.abs(lq) + 1.0), 0.0)
        up = np.where(np.isneginf(lq), -np.inf, up)
        return sigma * np.sqrt(-up) * (1.0 - _MU2_SLACK)


def _mu2_tail(half_gap: np.ndarray, log_x: np.ndarray, log_terms: float, sigma: float) -> np.ndarray:
    """mu2 where log q underflows: n terms Phi(-x_i) <= n phi(x)/x (Mills) with x the smallest standardised gap, so
    mu2^2 >= half_gap^2 + sigma^2 (log x + log(2 pi)/2 - log n), half_gap = sigma x / sqrt 2 (rounded down)."""
    extra = log_x + _HALF_LOG_2PI - log_terms  # > 0 here: x > 1e154
    with np.errstate(over="ignore", under="ignore"):
        s_part = np.square(sigma * np.sqrt(np.maximum(extra, 0.0)))
        return np.sqrt(np.square(half_gap) + s_part) * (1.0 - 1e-12)


def gnmax_mu2(votes: Any, sigma: float, log_q: Any = None) -> np.ndarray:
    """:math:`\\mu_2` of every query's :math:`\\tilde q` (:func:`mu2_from_log_q`), finite for every finite histogram:
    where ``log_q`` (default :func:`gaussian_log_q`) underflowed, from the Mills bound on the smallest gap."""
    sigma = check_float(sigma, "sigma", "gnmax_mu2", low=0.0, low_open=True)
    v = validated_votes(votes, "gnmax_mu2")
    lq = gaussian_log_q(v, sigma) if log_q is None else np.asarray(log_q, dtype=np.float64).ravel()
    mu2 = mu2_from_log_q(lq, sigma)
    tail = np.flatnonzero(np.isneginf(lq))
    if tail.size:
        rows = v[tail]
        top = rows.max(axis=1, keepdims=True)
        gaps = top - rows
        g_min = np.where(gaps > 0, gaps, np.inf).min(axis=1)  # every other class is strictly behind here
        log_x = np.log(g_min) - math.log(_SQRT2) - math.log(sigma)
        mu2[tail] = _mu2_tail(0.5 * g_min, log_x, math.log(v.shape[1] - 1), sigma)
    return mu2


# --------------------------------------------------------------------------------------------------
# Theorem 6 from mu2
# --------------------------------------------------------------------------------------------------


def _log1mexp_upper(x: np.ndarray) -> np.ndarray:
    """log(1 - e^x), rounded up to 0 below x = -700 (|true value| < 1e-304; keeps exp away from slow subnormals)."""
    return np.where(x < -700.0, 0.0, log1mexp(np.maximum(x, -700.0)))


def _log1mexp_lower(x: np.ndarray) -> np.ndarray:
    """log(1 - e^x), rounded down to log(1 - e^-700) below x = -700."""
    return log1mexp(np.maximum(x, -700.0))


def _parts(mu2: np.ndarray, sigma: float):
    """Per row: validity (mu2 > 1, finite, the monotonicity condition), log(1 - q), log A, mu1 = mu2 + 1. Both logs
    are rounded up (the bound grows with each), by less than 1e-304."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore", under="ignore"):
        m = mu2 - 1.0  # exact near mu2 = 1 (Sterbenz)
        r = mu2 / sigma  # sqrt(log 1/q)
        log1q = _log1mexp_upper(-np.square(r))
        log_a = log1q - _log1mexp_lower(-np.square(m / sigma))
        mono = (sigma * sigma) * np.log((mu2 + 1.0) / m) <= 2.0 * mu2 - 1.0
        ok = np.isfinite(mu2) & (m > 0.0) & mono & np.isfinite(log_a)
    return ok, log1q, log_a, mu2 + 1.0


def _exponent2(mu2: np.ndarray, lm1: np.ndarray, inv: float) -> np.ndarray:
    """log q + (l-1) log B = ((l-1)(2 mu2 + 1) - mu2^2) / sigma^2, rounded up; broadcasts; NaN (0 * inf) -> +inf."""
    with np.errstate(invalid="ignore", over="ignore"):
        c1 = 2.0 * mu2 + 1.0
        c0 = np.square(mu2)
        e = (lm1 * c1 * (1.0 + _E2_SLACK) - c0 * (1.0 - _E2_SLACK)) * inv
    return np.where(np.isnan(e), np.inf, e)


def _theorem6(mu2: np.ndarray, sigma: float, lam: np.ndarray, parts=None) -> tuple[np.ndarray, np.ndarray]:
    """(rows, orders): Theorem 6's bound where it applies (+inf elsewhere) and the applicability mask."""
    ok, log1q, log_a, mu1 = _parts(mu2, sigma) if parts is None else parts
    lm1 = lam[None, :] - 1.0
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        e2 = _exponent2(mu2[:, None], lm1, inv_square(sigma))
        first = log1q[:, None] + lm1 * log_a[:, None]
        bound = np.maximum(np.logaddexp(first, e2) / lm1, 0.0)
    applies = ok[:, None] & (lam[None, :] < mu1[:, None])
    return np.where(applies & np.isfinite(bound), bound, np.inf), applies


def rdp_gnmax_mu2(mu2: Any, sigma: float, orders: Any) -> np.ndarray:
    """Data-dependent RDP of one GNMax answer per row of ``mu2`` (:func:`gnmax_mu2`), shape (rows, orders):
    min(Theorem 6 where it applies, :math:`\\lambda/\\sigma^2`). Never NaN, never below 0."""
    owner = "rdp_gnmax_mu2"
    sigma = check_float(sigma, "sigma", owner, low=0.0, low_open=True)
    lam = check_orders(orders, "orders", owner, low=1.0)
    m = np.atleast_1d(np.asarray(mu2, dtype=np.float64)).ravel()
    if np.any(np.isnan(m)) or np.any(m < 0):
        raise ParameterError(f"The 'mu2' parameter of {owner} must hold values >= 0. Got a NaN or negative value instead.")
    bound, _ = _theorem6(m, sigma, lam)
    return np.minimum(bound, (lam * inv_square(sigma))[None, :])


def rdp_gnmax_data_independent(sigma: float, orders: Any) -> np.ndarray:
    """:math:`\\lambda/\\sigma^2` per GNMax answer (PATE 2018, Proposition 8)."""
    sigma = check_float(sigma, "sigma", "rdp_gnmax_data_independent", low=0.0, low_open=True)
    lam = check_orders(orders, "orders", "rdp_gnmax_data_independent", low=1.0)
    return lam * inv_square(sigma)


def _checked_log_q(log_q: Any, owner: str) -> np.ndarray:
    lq = np.atleast_1d(np.asarray(log_q, dtype=np.float64)).ravel()
    if np.any(np.isnan(lq)) or np.any(lq > 0):
        raise ParameterError(f"The 'log_q' parameter of {owner} must hold values <= 0. Got a NaN or positive value instead.")
    return lq


def gnmax_dd_applies(log_q: Any, sigma: float, orders: Any) -> np.ndarray:
    """Boolean (queries, orders): where PATE 2018 Theorem 6 (orders of Proposition 10) applies (never where
    ``log_q`` is ``-inf``: its magnitude is unknown)."""
    lq = _checked_log_q(log_q, "gnmax_dd_applies")
    lam = check_orders(orders, "orders", "gnmax_dd_applies", low=1.0)
    sigma = check_float(sigma, "sigma", "gnmax_dd_applies", low=0.0, low_open=True)
    ok, _, _, mu1 = _parts(mu2_from_log_q(lq, sigma), sigma)
    return ok[:, None] & (lam[None, :] < mu1[:, None])


def rdp_gnmax_data_dependent(log_q: Any, sigma: float, orders: Any) -> np.ndarray:
    """Data-dependent RDP of one GNMax answer per query, shape (queries, orders) (PATE 2018, Theorem 6).

    The minimum of the Theorem 6 bound (where it applies, see :func:`gnmax_dd_applies`) and the data-independent
    :math:`\\lambda/\\sigma^2`; never below 0, never NaN. ``log_q = -inf`` (an underflowed q whose magnitude is lost) is
    charged :math:`\\lambda/\\sigma^2` — pass :func:`gnmax_mu2` to :func:`rdp_gnmax_mu2` to keep it.
    """
    owner = "rdp_gnmax_data_dependent"
    sigma = check_float(sigma, "sigma", owner, low=0.0, low_open=True)
    lq = _checked_log_q(log_q, owner)
    lam = check_orders(orders, "orders", owner, low=1.0)
    bound, _ = _theorem6(mu2_from_log_q(lq, sigma), sigma, lam)
    return np.minimum(bound, (lam * inv_square(sigma))[None, :])


# --------------------------------------------------------------------------------------------------
# Confident-GNMax's threshold check
# --------------------------------------------------------------------------------------------------


def rdp_threshold(sigma1: float, orders: Any) -> np.ndarray:
    """:math:`\\lambda/(2\\sigma_1^2)`: the Gaussian mechanism on the max vote count (sensitivity 1)."""
    sigma1 = check_float(sigma1, "sigma1", "rdp_threshold", low=0.0, low_open=True)
    lam = check_orders(orders, "orders", "rdp_threshold", low=1.0)
    return lam * (0.5 * inv_square(sigma1))


def threshold_log_pr(votes: Any, threshold: float, sigma1: float) -> np.ndarray:
    r""":math:`\log\Pr[\max_j n_j + \mathcal N(0,\sigma_1^2) \ge T]` per query (Confident-GNMax's check passes),
    shape (queries,): ``log_ndtr((max_j n_j - T) / sigma1)``. Rounds to ``-0.0`` once the check passes almost surely:
    use :func:`threshold_log_q` for the less likely outcome."""
    owner = "threshold_log_pr"
    threshold = check_float(threshold, "threshold", owner)
    sigma1 = check_float(sigma1, "sigma1", owner, low=0.0, low_open=True)
    v = validated_votes(votes, owner)
    with np.errstate(over="ignore"):
        return log_ndtr((v.max(axis=1) - threshold) / sigma1)


def _threshold_z(max_counts: np.ndarray, threshold: float, sigma1: float) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.abs(max_counts - threshold) / sigma1


def threshold_log_q(votes: Any, threshold: float, sigma1: float) -> np.ndarray:
    """log of the probability of the check's less likely outcome, :math:`\\log\\Phi(-|\\max_j n_j - T|/\\sigma_1)`, per
    query, computed directly (keeps its magnitude where :math:`\\log(1-p)` from a rounded p would be ``-inf``)."""
    owner = "threshold_log_q"
    threshold = check_float(threshold, "threshold", owner)
    sigma1 = check_float(sigma1, "sigma1", owner, low=0.0, low_open=True)
    v = validated_votes(votes, owner)
    return log_ndtr(-_threshold_z(v.max(axis=1), threshold, sigma1))


def threshold_mu2(max_counts: Any, threshold: float, sigma1: float) -> np.ndarray:
    """:math:`\\mu_2` of the check's :math:`\\tilde q = \\Phi(-|m - T|/\\sigma_1)` for each largest count m, on the
    check's own scale :math:`\\sqrt2\\sigma_1` (finite for every finite m: the Mills bound where log q underflows)."""
    owner = "threshold_mu2"
    threshold = check_float(threshold, "threshold", owner)
    sigma1 = check_float(sigma1, "sigma1", owner, low=0.0, low_open=True)
    m = np.atleast_1d(np.asarray(max_counts, dtype=np.float64)).ravel()
    z = _threshold_z(m, threshold, sigma1)
    lq = log_ndtr(-z)
    s = _SQRT2 * sigma1
    mu2 = mu2_from_log_q(lq, s)
    tail = np.flatnonzero(np.isneginf(lq))
    if tail.size:
        d = np.abs(m[tail] - threshold)
        mu2[tail] = _mu2_tail(d, np.log(d) - math.log(sigma1), 0.0, s)
    return mu2


def rdp_threshold_data_dependent(log_pr: Any, sigma1: float, orders: Any) -> np.ndarray:
    r"""Data-dependent RDP of Confident-GNMax's threshold check per query, shape (queries, orders) (PATE 2018, Section 4
    and Appendix: the check's outcome is binary, so Theorem 6 applies with :math:`\tilde q` the probability of the
    less likely outcome, :math:`\min(p, 1-p)`, and the check's own RDP curve: a Gaussian mechanism of sensitivity 1,
    i.e. GNMax's with :math:`\sigma = \sqrt2\sigma_1`). Never above the data-independent :math:`\lambda/(2\sigma_1^2)`.

    Where ``log_pr`` rounded to 0 or underflowed to ``-inf`` the less likely outcome's magnitude is lost and the
    data-independent cost is charged; :func:`threshold_mu2` with :func:`rdp_gnmax_mu2` keeps it."""
    owner = "rdp_threshold_data_dependent"
    sigma1 = check_float(sigma1, "sigma1", owner, low=0.0, low_open=True)
    lp = np.atleast_1d(np.asarray(log_pr, dtype=np.float64)).ravel()
    if np.any(np.isnan(lp)) or np.any(lp > 0):
        raise ParameterError(f"The 'log_pr' parameter of {owner} must hold values <= 0. Got a NaN or positive value instead.")
    log_q = np.minimum(lp, log1mexp(lp))  # -inf where lp is 0 or -inf: no magnitude, data-independent cost below
    return rdp_gnmax_data_dependent(log_q, _SQRT2 * sigma1, orders)


# --------------------------------------------------------------------------------------------------
# Sums over queries (vectorised)
# --------------------------------------------------------------------------------------------------

_FAST_ROWS = 1 << 13
#: Up to this many (query, order) pairs the data-dependent figure evaluates every order of the grid; beyond it a
#: coarse-to-fine search over about 20 orders (:func:`_search_grid`).
_FULL_GRID_WORK = 400_000
_COARSE_ORDERS = 8
#: From 4x _SUB_MIN charged queries on, the order search first runs on every 4th (or, beyond 4 x _SUB_ROWS, on about
#: _SUB_ROWS evenly spaced) charged queries.
_SUB_ROWS = 20_000
_SUB_MIN = 2_000
_TINY_Q = 1e-280


class _RowSum:
    """Sum over rows (with weights) of min(Theorem 6, l/sigma^2) at any orders, and per order the weight of rows whose
    conditions hold there. Per-row constants are computed once.

    Theorem 6's bound is log(e^F + e^E)/(l-1) with F = log(1-q) + (l-1) log A and E - F = A0 + (l-1) A1 linear in l,
    i.e. log A + (log(1-q) + log(1 + e^(E-F)))/(l-1): one exp and one log1p per (row, order)."""

    def __init__(self, mu2: np.ndarray, sigma: float, weights: np.ndarray | None = None) -> None:
        self.sigma = sigma
        w_all = np.ones(mu2.size) if weights is None else weights
        ok, log1q, log_a, mu1 = _parts(mu2, sigma)
        self.plain_w = float(w_all[~ok].sum())
        idx = np.flatnonzero(ok)
        # rows sorted by mu1, largest first: in a block of rows, the orders where every row's bound applies, where
        # some do and where none does are three runs of columns (no mask for the first and last)
        idx = idx[np.argsort(-mu1[idx], kind="stable")]
        self.mu2, self.w = mu2[idx], w_all[idx]
        self.log1q, self.log_a, self.mu1 = log1q[idx], log_a[idx], mu1[idx]
        inv = inv_square(sigma)
        self.linear = math.isfinite(inv)
        if self.linear:
            with np.errstate(over="ignore", invalid="ignore"):
                self.a1 = (2.0 * self.mu2 + 1.0) * (1.0 + _E2_SLACK) * inv - self.log_a
                self.a0 = -np.square(self.mu2) * (1.0 - _E2_SLACK) * inv - self.log1q
            self.linear = bool(np.all(np.isfinite(self.a1)) and np.all(np.isfinite(self.a0)))
        self._unit = weights is None

    def passing(self, orders: np.ndarray) -> np.ndarray:
        """Weight of rows where Theorem 6's conditions hold at each order (lambda < mu1 and the order-free ones)."""
        o = np.asarray(orders, dtype=np.float64)
        srt = np.argsort(o, kind="stable")
        # rows with mu1 in (o_(j), o_(j+1)] pass at the j + 1 smallest orders: bin mu1 among the few orders
        bins = np.searchsorted(o[srt], self.mu1, side="left")
        w = np.bincount(bins, weights=None if self._unit else self.w, minlength=o.size + 1)
        passing_sorted = np.cumsum(w[::-1])[::-1][1:]  # rows with mu1 > o_(j)
        out = np.empty(o.size)
        out[srt] = passing_sorted
        return out

    def total(self, orders: np.ndarray) -> np.ndarray:
        orders = np.asarray(orders, dtype=np.float64)
        srt = np.argsort(orders, kind="stable")
        o = orders[srt]
        base = o * inv_square(self.sigma)
        total = np.zeros(o.size)
        if self.plain_w:  # (0 * an infinite base would be NaN)
            total += self.plain_w * base
        lm1 = o - 1.0
        inv_l = 1.0 / lm1
        for s0 in range(0, self.mu1.size, _FAST_ROWS):
            sl = slice(s0, s0 + _FAST_ROWS)
            w = self.w[sl]
            mu1 = self.mu1[sl]
            j_lo = int(np.searchsorted(o, mu1[-1], side="left"))  # orders below every row's mu1
            j_hi = int(np.searchsorted(o, mu1[0], side="left"))  # orders from here on: no row's bound applies
            if j_hi < o.size:
                total[j_hi:] += w.sum() * base[j_hi:]
            if j_hi == 0:
                continue
            cols = slice(0, j_hi)
            if self.linear:
                with np.errstate(over="ignore", invalid="ignore"):
                    f = np.multiply.outer(self.a1[sl], lm1[cols])
                    f += self.a0[sl, None]
                    # log(1 + e^f) = max(f, 0) + log1p(e^-|f|), |f| capped at 700 (adds at most e^-700): exp and log1p
                    # vectorise where logaddexp does not, and never see a subnormal
                    pos = np.maximum(f, 0.0)
                    np.abs(f, out=f)
                    np.minimum(f, 700.0, out=f)
                    np.negative(f, out=f)
                    np.exp(f, out=f)
                    np.log1p(f, out=f)
                    f += pos
                    f += self.log1q[sl, None]
                    f *= inv_l[cols]
                    f += self.log_a[sl, None]
                    np.maximum(f, 0.0, out=f)
                    np.minimum(f, base[cols], out=f)
            else:  # sigma so small that 1/sigma^2 overflows: the general form
                parts = (np.ones(mu1.size, dtype=bool), self.log1q[sl], self.log_a[sl], mu1)
                f = np.minimum(_theorem6(self.mu2[sl], self.sigma, o[cols], parts)[0], base[None, cols])
            if j_lo < j_hi:  # the orders where only some rows' bounds apply
                mixed = f[:, j_lo:j_hi]
                f[:, j_lo:j_hi] = np.where(o[None, j_lo:j_hi] < mu1[:, None], mixed, base[None, j_lo:j_hi])
            total[cols] += w @ f
        out = np.empty(o.size)
        out[srt] = total
        return out


#: Integer votes up to this count take q's terms from a table (one ndtr per possible gap, not per (query, class)).
_TABLE_MAX = 1_000_000


def _log_q_fast(votes: np.ndarray, sigma: float) -> np.ndarray:
    """:func:`gaussian_log_q` computed in linear space on transposed blocks (a sum of positive terms loses no precision);
    for integer counts the terms come from a table of ``ndtr`` over the possible gaps (the same values, computed once);
    rows with q < 1e-280 are redone in log space."""
    nq, nc = votes.shape
    out = np.empty(nq)
    scale = 1.0 / (_SQRT2 * sigma) if sigma > 0 else math.inf
    cap = math.log1p(-1.0 / nc)
    table = None
    vmax = float(votes.max())
    if vmax <= _TABLE_MAX and np.array_equal(votes, np.floor(votes)):
        with np.errstate(over="ignore", invalid="ignore"):
            z = np.arange(int(vmax) + 1, dtype=np.float64) * -scale
            np.nan_to_num(z, copy=False, nan=0.0, neginf=-np.inf)
        table = ndtr(z)
        table[0] = 0.0  # ties with the winner are counted below (Phi(0) = 1/2 each)
    for start in range(0, nq, _FAST_ROWS):
        block = votes[start:start + _FAST_ROWS]
        bt = np.ascontiguousarray(block.T)  # classes x rows: every reduction runs over the long axis
        top = bt.max(axis=0)
        if table is not None:
            gaps = np.subtract(top, bt).astype(np.int64)
            ties = np.count_nonzero(gaps == 0, axis=0)
            q = table[gaps].sum(axis=0)
        else:
            with np.errstate(over="ignore", invalid="ignore"):
                z = np.subtract(top, bt)
                pos = z > 0.0
                z *= -scale
                np.nan_to_num(z, copy=False, nan=0.0, neginf=-np.inf)
            t = ndtr(z)
            t *= pos
            q = t.sum(axis=0)
            ties = nc - np.count_nonzero(pos, axis=0)
        q += 0.5 * (ties - 1)  # classes tied with the winner: Phi(0) = 1/2 each
        with np.errstate(divide="ignore"):
            lq = np.log(q)
        tiny = q < _TINY_Q
        if np.any(tiny):
            lq[tiny] = gaussian_log_q(block[tiny], sigma)
        out[start:start + block.shape[0]] = np.minimum(lq, cap)
    return out


def rdp_gnmax_votes_total(votes: Any, sigma: float, orders: Any) -> np.ndarray:
    r"""Data-dependent RDP of the GNMax answers to every row of ``votes``, summed over the queries, at every order:
    shape (orders,) (PATE 2018, Theorem 6 with Proposition 10's orders; :math:`\lambda/\sigma^2` where it does not
    apply).

    The bound of ``rdp_gnmax_mu2(gnmax_mu2(votes, sigma), sigma, orders).sum(axis=0)`` (so where q underflows, the
    Mills tail of :func:`gnmax_mu2`), organised for speed: q's terms from a table of the possible gaps, the per-row
    constants computed once, then blocks of 8,192 rows whose (rows, orders) work stays in the CPU cache and is summed
    by one matrix-vector product, instead of one (queries, orders) matrix in memory. The summation order differs from
    the matrix's, so the total is raised by a relative 1e-12 (far above the rounding of the sums): never below it.
    """
    owner = "rdp_gnmax_votes_total"
    sigma = check_float(sigma, "sigma", owner, low=0.0, low_open=True)
    lam = check_orders(orders, "orders", owner, low=1.0)
    v = validated_votes(votes, owner)
    mu2 = gnmax_mu2(v, sigma, _log_q_fast(v, sigma))
    return _RowSum(mu2, sigma).total(lam) * (1.0 + 1e-12)


@register_rdp(GaussianNoisyMax)
def _rdp_gnmax_event(event: DpEvent, orders: np.ndarray) -> np.ndarray:
    """RDP of one :class:`GaussianNoisyMax` event. With a threshold and votes, every row pays the threshold
    check (data-independently) and (not knowing which were answered) the GNMax cost as well — conservative."""
    lam = check_orders(orders, "orders", "GaussianNoisyMax RDP", low=1.0)
    n = int(event.num_queries)  # type: ignore[attr-defined]
    if event.votes is None:  # type: ignore[attr-defined]
        total = n * rdp_gnmax_data_independent(event.sigma, lam)  # type: ignore[attr-defined]
    else:
        total = rdp_gnmax_votes_total(event.votes, event.sigma, lam)  # type: ignore[attr-defined]
    if event.threshold is not None:  # type: ignore[attr-defined]
        total = total + n * rdp_threshold(event.sigma_threshold, lam)  # type: ignore[attr-defined]
    return total


# --------------------------------------------------------------------------------------------------
# Answered-query files
# --------------------------------------------------------------------------------------------------


def load_answered(path: str | Path, queries: int) -> np.ndarray:
    """Which of ``queries`` queries Confident-GNMax answered, as a bool mask of shape (queries,), from a file:

    - ``.npy`` (no pickles): a bool array of shape (queries,) (a mask), or an integer array (0-based indices);
    - ``.txt`` / ``.csv``: ``true``/``false`` tokens (a mask, one per query) or integers (0-based indices), separated
      by commas, spaces or newlines. (A 0/1 mask must be stored as bool ``.npy`` or as ``true``/``false`` text.)

    Raises :class:`~dpaudit.errors.DataError` naming the file for anything else (wrong length, an index out of range
    or repeated, mixed tokens).
    """
    queries = check_int(queries, "queries", "load_answered", low=1)
    p = Path(path)
    suffix = p.suffix.lower()
    name = f"The answered-queries file {str(p)!r}"
    if suffix not in (".npy", ".txt", ".csv"):
        raise DataError(f"{name} must end in .npy, .txt or .csv. Got {suffix or 'no suffix'!r} instead.")
    check_input_file(p, "the answered-queries file")
    if suffix == ".npy":
        arr = load_npy_file(p, "the answered-queries file", kinds="biu")
        if arr.ndim != 1:
            raise DataError(f"{name} must hold a 1-D array (a bool mask or indices). Got shape {arr.shape} instead.")
        if arr.dtype == bool:
            mask = arr.astype(bool)
            if mask.shape != (queries,):
                raise DataError(f"{name} holds a bool mask of length {mask.size}; it must have one entry per query ({queries}).")
            return mask
        idx = arr.astype(np.int64)
    else:
        tokens = [t for t in read_input_text(p, "the answered-queries file").replace(",", " ").split() if t]
        low = [t.lower() for t in tokens]
        if tokens and all(t in ("true", "false") for t in low):
            if len(low) != queries:
                raise DataError(f"{name} holds {len(low)} true/false entries; it must have one per query ({queries}).")
            return np.array([t == "true" for t in low], dtype=bool)
        try:
            idx = np.array([int(t) for t in tokens], dtype=np.int64)
        except ValueError:
            raise DataError(f"{name} must hold true/false tokens (a mask) or integer indices, not a mix.") from None
    if idx.size and (idx.min() < 0 or idx.max() >= queries):
        raise DataError(f"{name} holds indices outside [0, {queries - 1}]. Got {int(idx.min())}..{int(idx.max())} instead.")
    if np.unique(idx).size != idx.size:
        raise DataError(f"{name} repeats an index; each answered query must be listed once.")
    mask = np.zeros(queries, dtype=bool)
    mask[idx] = True
    return mask


# --------------------------------------------------------------------------------------------------
# One-call accounting
# --------------------------------------------------------------------------------------------------


def _ranges(orders: np.ndarray, flags: np.ndarray) -> str:
    """'1.001..24, 32' style runs of consecutive evaluated orders where ``flags`` holds; '' if none."""
    runs, start = [], None
    for i, f in enumerate(flags):
        if f and start is None:
            start = i
        if (not f or i == flags.size - 1) and start is not None:
            end = i if f else i - 1
            runs.append(f"{orders[start]:g}" if end == start else f"{orders[start]:g}..{orders[end]:g}")
            start = None
    return ", ".join(runs)


def _conditions(orders: np.ndarray, gn_pass: np.ndarray, n_gn: int, thr_pass: np.ndarray | None, n_thr: int,
                best: float | None) -> tuple[str, dict[str, Any]]:
    """The per-order report of where Theorem 6's conditions hold (text for the facts, lists for the details)."""
    all_pass = gn_pass >= n_gn
    if thr_pass is not None:
        all_pass &= thr_pass >= n_thr
    none_pass = (gn_pass == 0) & (True if thr_pass is None else thr_pass == 0)
    parts = []
    a, n_ = _ranges(orders, all_pass), _ranges(orders, none_pass)
    parts.append(f"every charged query passes at orders {a}" if a else "no evaluated order where every charged query passes")
    partial = _ranges(orders, ~all_pass & ~none_pass)
    if partial:
        parts.append(f"some pass at {partial}")
    if n_:
        parts.append(f"none pass at {n_}")
    if best is not None:
        i = int(np.flatnonzero(orders == best)[0]) if np.any(orders == best) else None
        if i is not None:
            at = f"at the best order {best:g}: {int(gn_pass[i])} of {n_gn} GNMax answers"
            if thr_pass is not None:
                at += f", {int(thr_pass[i])} of {n_thr} threshold checks"
            parts.insert(0, at)
    details = {"orders": orders.tolist(), "gnmax_passing": [int(x) for x in gn_pass], "gnmax_charged": n_gn}
    if thr_pass is not None:
        details.update({"threshold_passing": [int(x) for x in thr_pass], "threshold_charged": n_thr})
    return "; ".join(parts) + ".", details


def _edge_warnings(statements: list[PrivacyStatement], searches: list[OrderSearch]) -> list[str]:
    """One warning per RDP figure whose best order is still at the edge of the orders searched (a grid the caller gave,
    or the search limit)."""
    return [f"{s.label}: {w}" for s, f in zip(statements, searches) if s.order is not None for w in f.warning()]


class _GridEval:
    """epsilon at delta of a route's RDP at grid indices, cached; ``best(ix)`` is rdp_to_epsilon's choice among ix."""

    def __init__(self, rdp_at: Callable[[np.ndarray], np.ndarray], orders: np.ndarray, delta: float) -> None:
        self.rdp_at, self.orders, self.delta = rdp_at, orders, delta
        self.cache: dict[int, float] = {}

    def best(self, ix: list[int]) -> int:
        todo = sorted({i for i in ix if i not in self.cache})
        if todo:
            for i, r in zip(todo, self.rdp_at(self.orders[todo])):
                self.cache[i] = float(r)
        ix = sorted(set(ix))
        _, o = rdp_to_epsilon(self.orders[ix], [self.cache[i] for i in ix], self.delta, warn=False)
        return ix[0] if o is None else ix[int(np.flatnonzero(self.orders[ix] == o)[0])]


def _search_grid(rdp_at: Callable[[np.ndarray], np.ndarray], orders: np.ndarray, delta: float) -> tuple[np.ndarray, int]:
    """(indices evaluated, best index) for the smallest epsilon over a grid when evaluating all of it is costly: every
    k-th order (about 9), then a bisection on the sign of epsilon's slope between the best coarse order's neighbours,
    then the final order's neighbours. Any evaluated order gives a valid epsilon; where epsilon(order) is unimodal on
    the grid (the usual case) this finds the full grid's minimum with about 20 orders evaluated."""
    n = orders.size
    ev = _GridEval(rdp_at, orders, delta)
    step = max(1, n // _COARSE_ORDERS)
    coarse = sorted(set(range(0, n, step)) | {n - 1})
    b = coarse.index(ev.best(coarse))
    lo = coarse[b - 1] if b > 0 else 0
    hi = coarse[b + 1] if b + 1 < len(coarse) else n - 1
    while hi - lo > 2:
        mid = (lo + hi) // 2
        if ev.best([mid, mid + 1]) == mid + 1:
            lo = mid + 1
        else:
            hi = mid
    best = ev.best(list(range(lo, hi + 1)))
    best = ev.best([max(best - 1, 0), best, min(best + 1, n - 1)])
    return np.array(sorted(ev.cache)), best


def _descend(rdp_at: Callable[[np.ndarray], np.ndarray], orders: np.ndarray, delta: float, start: int) -> np.ndarray:
    """Indices evaluated walking from ``start`` to a local minimum of epsilon over the grid (the neighbours of the
    returned best are evaluated and larger)."""
    n = orders.size
    ev = _GridEval(rdp_at, orders, delta)
    best = ev.best([max(start - 1, 0), start, min(start + 1, n - 1)])
    while True:
        nxt = ev.best([max(best - 1, 0), best, min(best + 1, n - 1)])
        if nxt == best:
            return np.array(sorted(ev.cache))
        best = nxt


def _di_statement(n_gn: int, n_thr: int, *, sigma: float, sigma1: float | None, delta: float, grid: np.ndarray,
                  extend: bool, label: str, assumptions: list[str], conditioned: bool) -> tuple[PrivacyStatement, OrderSearch]:
    """The data-independent routes (RDP over the orders, extended at an edge; exact Gaussian-DP composition) for n_gn
    GNMax answers and n_thr threshold checks; the smaller is reported, named."""
    rate = (n_gn * inv_square(sigma) if n_gn else 0.0) + (n_thr * 0.5 * inv_square(sigma1) if n_thr and sigma1 else 0.0)

    def rdp_of(a: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):
            return np.where(rate > 0, a * rate, 0.0)

    search = search_rdp_orders(rdp_of, grid, delta, extend=extend)
    # a composition of Gaussian mechanisms (GNMax post-processes one of L2 sensitivity sqrt 2; the check one of
    # sensitivity 1): mu-GDP with mu^2 = sum of the squares (Dong, Roth & Su 2019)
    mu_sq = 2.0 * rate if n_thr == 0 or sigma1 is None else (n_gn * 2.0 * inv_square(sigma) if n_gn else 0.0) + n_thr * inv_square(sigma1)
    gdp = gaussian_mechanism_epsilon(math.sqrt(mu_sq), delta) if math.isfinite(mu_sq) and mu_sq > 0 else (
        0.0 if mu_sq == 0 else math.inf)
    suffix = ", conditioned on the answered count" if conditioned else ""
    routes = {ROUTE_RDP + suffix: search.epsilon, ROUTE_GDP + suffix: gdp}
    if search.epsilon <= gdp:
        eps, order, route = search.epsilon, search.order, ROUTE_RDP
    else:
        eps, order, route = gdp, None, ROUTE_GDP
    why = (f"Smallest of the data-independent routes (RDP over orders: {search.epsilon:.6g}; exact Gaussian-DP composition, "
           f"mu = {math.sqrt(mu_sq):.6g}: {gdp:.6g}): {route} reported.")
    extra = [why] + ([search.note()] if route == ROUTE_RDP and search.note() else [])
    if math.isinf(eps):
        extra.append("epsilon is infinite: the noise is too small for any finite epsilon at this delta.")
    st = PrivacyStatement(eps, delta, route + suffix, order, tuple(assumptions) + tuple(extra), label,
                          details={"route": route + suffix, "routes": routes}, route=route + suffix)
    return st, search


@quiet_overflow
def account_gnmax(votes: Any = None, *, sigma: float, delta: float, queries: int | None = None, threshold: float | None = None,
                  sigma1: float | None = None, data_independent: bool = False, orders: Any = None,
                  answered: Any = None, interactive: bool = False) -> AccountingResult:
    """Epsilon of GNMax / Confident-GNMax answers (PATE 2018): every valid route side by side, the smallest the
    headline, named (``statement.method`` and ``details["route"]``: data-dependent RDP, data-independent RDP or
    data-independent Gaussian DP).

    Parameters
    ----------
    votes:
        Teacher vote histograms (queries x classes), counts >= 0. Gives the data-dependent figure.
    sigma:
        Standard deviation :math:`\\sigma` of the GNMax noise on every count.
    delta:
        Target :math:`\\delta \\in (0,1)`.
    queries:
        Number of queries for the data-independent figure (default: vote rows).
    threshold, sigma1:
        Confident-GNMax: threshold T and noise :math:`\\sigma_1` of the check. Every query pays the check (its
        data-dependent cost where votes are given).
    answered:
        With a threshold: which queries passed the check (bool mask over the vote rows; without votes also their
        number). Only those pay GNMax in the data-dependent figure and in the data-independent figure *conditioned on
        the answered count* (the answered set is an output of the mechanism: an ex-post figure). The data-independent
        figure proper charges every query GNMax. Default: every query answered (conservative).
    data_independent:
        Only the data-independent figures.
    orders:
        Rényi orders :math:`\\lambda > 1` (default :data:`DEFAULT_ORDERS`, extended past an edge where the best order
        sits; a grid given here is used as it is).
    interactive:
        Interactive GNMax (PATE 2018, Algorithm 2: the check on the votes minus the student's scaled prediction, a
        fresh selection per query). Its check also has sensitivity 1, so the data-independent figures are those of
        Confident-GNMax and are given; its data-dependent analysis needs the per-query check statistic and is refused
        with a :class:`ParameterError`.

    The data-dependent figure reports, per evaluated order, how many charged queries satisfy Theorem 6's conditions
    (``facts["data_dependent_conditions"]``, ``details["conditions_by_order"]``) and carries the adaptivity caveat.
    """
    owner = "account_gnmax"
    sigma = check_float(sigma, "sigma", owner, low=0.0, low_open=True)
    delta = check_probability(delta, "delta", owner)
    data_independent = check_bool(data_independent, "data_independent", owner)
    interactive = check_bool(interactive, "interactive", owner)
    extend = orders is None
    grid = np.array(DEFAULT_ORDERS) if orders is None else check_orders(orders, "orders", owner, low=1.0)
    if (threshold is None) != (sigma1 is None):
        raise ParameterError(f"{owner} needs both 'threshold' and 'sigma1' for Confident-GNMax, or neither. "
                             f"Got threshold={threshold!r}, sigma1={sigma1!r} instead.")
    if threshold is not None:
        threshold = check_float(threshold, "threshold", owner)
        sigma1 = check_float(sigma1, "sigma1", owner, low=0.0, low_open=True)
    if interactive and threshold is None:
        raise ParameterError(f"The 'interactive' parameter of {owner} needs the check's 'threshold' and 'sigma1' (Interactive "
                             "GNMax, PATE 2018 Algorithm 2). Got threshold=None instead.")
    if interactive and votes is not None and not data_independent:
        raise ParameterError(
            f"{owner} does not support the data-dependent analysis of Interactive GNMax (PATE 2018, Algorithm 2): its check "
            "thresholds the teachers' votes minus the student's scaled prediction, a statistic the vote histograms do not "
            "hold. Use data_independent=True (CLI: --data-independent) for its data-independent figures, or account "
            "Confident-GNMax (a check on the largest vote count).")
    v = None if votes is None else as_votes(votes, owner)
    if queries is None:
        if v is None:
            raise ParameterError(f"{owner} needs 'votes' or 'queries'. Got neither.")
        queries = v.shape[0]
    queries = check_int(queries, "queries", owner, low=1)
    if v is not None and v.shape[0] != queries:
        raise ParameterError(f"The 'queries' parameter of {owner} must equal the number of vote rows ({v.shape[0]}). Got {queries} instead.")
    mask = None
    n_answered = queries
    warnings_: list[str] = []
    if answered is not None:
        if threshold is None:
            raise ParameterError(f"The 'answered' parameter of {owner} needs a threshold (Confident-GNMax). Got threshold=None instead.")
        if np.ndim(answered) == 0:
            n_answered = check_int(answered, "answered", owner, low=0, high=queries)
            if v is not None:
                raise ParameterError(f"The 'answered' parameter of {owner} must be a bool mask over the {queries} vote rows when votes are given. Got an int instead.")
        else:
            mask = np.asarray(answered)
            if mask.dtype != bool or mask.shape != (queries,):
                raise ParameterError(f"The 'answered' parameter of {owner} must be a bool array of shape ({queries},). Got {mask.dtype} {mask.shape} instead.")
            n_answered = int(mask.sum())
    elif threshold is not None:
        warnings_.append("No 'answered' mask given: every query is charged the GNMax cost as if it had passed the threshold (conservative).")
    n_thr = queries if threshold is not None else 0

    relation = "replace-one record (one teacher's vote changes)"
    base = [f"Neighbouring datasets: {relation}.",
            f"GNMax answers with N(0, {sigma:g}^2) noise on each vote count (PATE 2018), composed adaptively."]
    if threshold is not None:
        what = "Interactive GNMax (PATE 2018, Algorithm 2; the check's statistic has sensitivity 1)" if interactive else "Confident-GNMax"
        base.append(f"{what}: every one of the {queries} queries pays the threshold check (T = {threshold:g}, sigma1 = {sigma1:g}).")
    di_assumptions = base + (["Every query is charged GNMax as well, answered or not: a guarantee fixed before any answer."]
                             if threshold is not None else [])
    di_label = f"data-independent, {queries} queries" + (" (every query charged check + GNMax)" if threshold is not None else "")
    di_stmt, di_search = _di_statement(queries, n_thr, sigma=sigma, sigma1=sigma1, delta=delta, grid=grid, extend=extend,
                                       label=di_label, assumptions=di_assumptions, conditioned=False)
    statements = [di_stmt]
    searches = [di_search]
    if threshold is not None and n_answered < queries:
        cond_assumptions = base + [
            f"Conditioned on the answered count: only the {n_answered} answered queries are charged GNMax. Which queries "
            "were answered is an output of the mechanism (itself random and data-dependent), so this is an ex-post figure: "
            "a guarantee fixed in advance needs the figure that charges every query, or a Renyi/GDP privacy filter with "
            "the budget set beforehand (Feldman & Zrnic 2021; Smith & Thakurta 2022)."]
        cond_stmt, cond_search = _di_statement(n_answered, n_thr, sigma=sigma, sigma1=sigma1, delta=delta, grid=grid,
                                               extend=extend, label=f"conditioned on {n_answered} answered of {queries} queries",
                                               assumptions=cond_assumptions, conditioned=True)
        statements.append(cond_stmt)
        searches.append(cond_search)
    params = {"sigma": sigma, "delta": delta, "queries": queries, "threshold": threshold, "sigma1": sigma1,
              "answered": n_answered, "orders": grid.tolist(), "data_independent": v is None or data_independent,
              "interactive": interactive}
    facts: dict[str, Any] = {"num_queries": queries, "answered": n_answered}
    # the certified lower bound of an explicit pair of integer vote histograms, beside the data-independent routes
    # (not the conditioned or data-dependent figures: they are about the realised answers and votes); Interactive
    # GNMax's check looks at the student's prediction too: no pair is given for it
    lower = None if interactive else dataclasses.replace(
        gnmax_lower_bound(sigma=sigma, queries=queries, delta=delta, threshold=threshold, sigma1=sigma1),
        routes=(ROUTE_RDP, ROUTE_GDP))
    if v is None or data_independent:
        warnings_ += _edge_warnings(statements, searches)  # the headline: pick_headline (ties: the a-priori figure)
        facts.update(headline_facts(statements))
        return AccountingResult("gnmax", tuple(statements), None, params, facts, tuple(warnings_), lower_bound=lower)

    # ---- data-dependent RDP
    lq = _log_q_fast(v, sigma)
    mu2 = gnmax_mu2(v, sigma, lq)
    gn = _RowSum(mu2 if mask is None else mu2[mask], sigma)
    thr = None
    if threshold is not None and sigma1 is not None:
        uniq, counts = np.unique(v.max(axis=1), return_counts=True)
        thr = _RowSum(threshold_mu2(uniq, threshold, sigma1), _SQRT2 * sigma1, counts.astype(np.float64))
    cache: dict[float, float] = {}

    def dd_at(a: np.ndarray) -> np.ndarray:
        a = np.asarray(a, dtype=np.float64)
        todo = np.array(sorted({float(x) for x in a} - cache.keys()))
        if todo.size:
            t = gn.total(todo) + (thr.total(todo) if thr is not None else 0.0)
            for o, val in zip(todo, t * (1.0 + 1e-12)):  # float summation order differs in the last bits
                cache[float(o)] = float(val)
        return np.array([cache[float(x)] for x in a])

    n_orders = grid.size
    charged = gn.mu1.size + int(round(gn.plain_w))
    if v.shape[0] * n_orders <= _FULL_GRID_WORK:
        evaluated = np.arange(n_orders)
    elif charged >= 4 * _SUB_MIN:
        # locate the best order on an evenly spaced subsample of the charged queries (their RDP scaled up), then walk
        # to a local minimum on all of them: the figure only ever comes from orders evaluated on every query
        step = max(4, charged // _SUB_ROWS)
        sub = _RowSum((mu2 if mask is None else mu2[mask])[::step], sigma)
        scale = charged / (sub.mu1.size + round(sub.plain_w))

        def approx(a: np.ndarray) -> np.ndarray:
            return sub.total(a) * scale + (thr.total(a) if thr is not None else 0.0)

        _, guess = _search_grid(approx, grid, delta)
        evaluated = _descend(dd_at, grid, delta, guess)
    else:
        evaluated = _search_grid(dd_at, grid, delta)[0]
    dd_search = search_rdp_orders(dd_at, grid[evaluated], delta, rdp=dd_at(grid[evaluated]), extend=extend)
    dd_eps, dd_order = dd_search.epsilon, dd_search.order

    n_gn = n_answered
    gn_pass = gn.passing(dd_search.orders)
    thr_pass = thr.passing(dd_search.orders) if thr is not None else None
    cond_text, cond_details = _conditions(dd_search.orders, gn_pass, n_gn, thr_pass, n_thr, dd_order)
    dd_assumptions = list(base)
    if mask is not None:
        dd_assumptions.append(f"Only the {n_answered} answered queries are charged GNMax (PATE 2018): conditioned on the "
                              "answered set, an output of the mechanism.")
    dd_assumptions.append("Data-dependent bound (PATE 2018, Theorem 6 with Proposition 10's orders) per GNMax answer, "
                          "evaluated from mu2 so that no underflow or rounding of q is read as 'no cost'; where its conditions "
                          "fail, the data-independent lambda/sigma^2 is charged.")
    if thr is not None:
        dd_assumptions.append("Data-dependent threshold analysis (PATE 2018): each check is charged Theorem 6's bound with "
                              "q = the probability of its less likely outcome (computed directly), capped by its "
                              "data-independent cost.")
    dd_assumptions.append(ADAPTIVITY_CAVEAT)
    n_dd = int(gn_pass.max()) if gn_pass.size else 0
    if n_dd < n_gn:
        dd_assumptions.append(f"The data-dependent bound's conditions fail at every evaluated order for {n_gn - n_dd} of "
                              f"{n_gn} charged GNMax answers; those are charged their data-independent cost.")
    if dd_search.note():
        dd_assumptions.append(dd_search.note())
    dd_label = f"data-dependent, {queries} queries" + (f" ({n_answered} answered)" if threshold is not None else "")
    routes = {ROUTE_DATA_DEPENDENT: float(dd_eps)}
    for s in statements:
        routes.update(s.details["routes"])
    dd_stmt = PrivacyStatement(dd_eps, delta, ROUTE_DATA_DEPENDENT, dd_order, tuple(dd_assumptions), dd_label, True,
                               details={"route": ROUTE_DATA_DEPENDENT, "routes": routes,
                                        "orders_evaluated": int(dd_search.orders.size),
                                        "conditions_by_order": cond_details}, route=ROUTE_DATA_DEPENDENT)
    statements.insert(0, dd_stmt)
    searches.insert(0, dd_search)
    # the headline (pick_headline): the smallest valid figure; on a tie a data-independent one (it does not look at
    # the votes)
    warnings_ += _edge_warnings(statements, searches)
    warnings_.append("A data-dependent figure is shown unreleased: " + ADAPTIVITY_CAVEAT.split(": ", 1)[1])
    q = np.exp(lq)
    facts.update({"q_min": float(q.min()), "q_median": float(np.median(q)), "q_mean": float(q.mean()),
                  "q_max": float(q.max()), "data_dependent_queries": n_dd, "data_dependent_conditions": cond_text,
                  **headline_facts(statements)})
    return AccountingResult("gnmax", tuple(statements), None, params, facts, tuple(warnings_), lower_bound=lower)

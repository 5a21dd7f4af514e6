"""PATE with Gaussian noisy max (GNMax) and Confident-GNMax: data-dependent Rényi DP.

Papernot, Song, Mironov, Raghunathan, Talwar, Erlingsson, "Scalable private learning with PATE", ICLR 2018
(arXiv:1802.08908) — "PATE 2018" below.

One GNMax answer is :math:`\\arg\\max_j (n_j + \\mathcal N(0, \\sigma^2))`. One record moves one teacher's vote:
the histogram changes by 1 in two coordinates (L2 sensitivity :math:`\\sqrt2`), so one answer is
:math:`(\\lambda, \\lambda/\\sigma^2)`-RDP for every :math:`\\lambda > 1` (PATE 2018, Proposition 8).

Data-dependent RDP (PATE 2018, Theorem 6 with the orders of Proposition 10). With
:math:`\\tilde q \\ge \\Pr[M(D) \\ne i^*]` and two higher orders :math:`\\mu_2 = \\sigma\\sqrt{\\log(1/\\tilde q)}`,
:math:`\\mu_1 = \\mu_2 + 1` at which the mechanism is :math:`(\\mu_i, \\epsilon_i = \\mu_i/\\sigma^2)`-RDP,

.. math::
   D_\\lambda \\le \\frac{1}{\\lambda-1}\\log\\big((1-\\tilde q) A^{\\lambda-1} + \\tilde q B^{\\lambda-1}\\big),\\quad
   A = \\frac{1-\\tilde q}{1 - (\\tilde q e^{\\epsilon_2})^{(\\mu_2-1)/\\mu_2}},\\quad B = \\frac{e^{\\epsilon_1}}{\\tilde q^{1/(\\mu_1-1)}},

which applies when :math:`\\mu_2 > 1`, :math:`\\lambda < \\mu_1`, :math:`\\tilde q e^{\\epsilon_2} < 1` and
:math:`\\log\\tilde q \\le (\\mu_2-1)\\epsilon_2 - \\mu_2\\log\\big(\\frac{\\mu_1}{\\mu_1-1}\\cdot\\frac{\\mu_2}{\\mu_2-1}\\big)`
(the range where the bound increases with :math:`\\tilde q`). Elsewhere the data-independent
:math:`\\lambda/\\sigma^2` is used; the data-dependent figure is always the minimum of the two.

The q bound (PATE 2018, Proposition 7): the difference of two independent :math:`\\mathcal N(0,\\sigma^2)` is
:math:`\\mathcal N(0, 2\\sigma^2)`, so :math:`\\tilde q = \\sum_{i \\ne i^*} \\Phi(-(n_{i^*} - n_i)/(\\sqrt2\\sigma))`,
capped at :math:`1 - 1/C`; computed with ``scipy.special.log_ndtr`` (no underflow).

Confident-GNMax (PATE 2018, Algorithm 1): each query first checks :math:`\\max_j n_j + \\mathcal N(0, \\sigma_1^2) \\ge T`.
The max count has sensitivity 1, so every query pays :math:`\\lambda/(2\\sigma_1^2)`; only answered queries pay
the GNMax cost. (The data-dependent analysis of the threshold step in PATE 2018 is not used here: the
threshold cost is data-independent, which is conservative.)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.special import log_ndtr, ndtr

from dpaudit.accountants.base import register_rdp
from dpaudit.accountants.closed_form import gaussian_mechanism_epsilon
from dpaudit.accountants._common import (as_votes, check_orders, edge_warning, inv_square, log1mexp, logsumexp_rows,
                                         quiet_overflow, validated_votes)
from dpaudit.accountants.events import DpEvent, GaussianNoisyMax
from dpaudit.accountants.rdp import DEFAULT_ORDERS, rdp_to_epsilon
from dpaudit.accountants.statement import AccountingResult, PrivacyStatement
from dpaudit.errors import ParameterError, check_bool, check_float, check_int, check_probability

__all__ = [
    "gaussian_log_q",
    "rdp_gnmax_data_independent",
    "rdp_gnmax_data_dependent",
    "gnmax_dd_applies",
    "rdp_threshold",
    "threshold_log_pr",
    "rdp_threshold_data_dependent",
    "account_gnmax",
]

_CHUNK = 1 << 15


def gaussian_log_q(votes: Any, sigma: float) -> np.ndarray:
    """:math:`\\log\\tilde q` per query (PATE 2018, Proposition 7), shape (queries,).

    :math:`\\tilde q = \\min(1 - 1/C, \\sum_{i \\ne i^*} \\Phi(-(n_{i^*} - n_i)/(\\sqrt2\\sigma)))` for the plurality
    class :math:`i^*` (ties: every other class counts). Always finite.
    """
    sigma = check_float(sigma, "sigma", "gaussian_log_q", low=0.0, low_open=True)
    v = validated_votes(votes, "gaussian_log_q")
    nq, nc = v.shape
    out = np.empty(nq)
    for start in range(0, nq, _CHUNK):
        s = -np.sort(-v[start:start + _CHUNK], axis=1)  # descending
        gaps = s[:, :1] - s[:, 1:]  # (rows, C-1) >= 0
        with np.errstate(over="ignore"):
            lt = log_ndtr(-gaps / (math.sqrt(2.0) * sigma))
        # every term may underflow to -inf (huge gaps / tiny sigma): then q = 0 exactly in floating point
        out[start:start + s.shape[0]] = logsumexp_rows(lt)
    return np.minimum(out, math.log1p(-1.0 / nc))


def rdp_gnmax_data_independent(sigma: float, orders: Any) -> np.ndarray:
    """:math:`\\lambda/\\sigma^2` per GNMax answer (PATE 2018, Proposition 8)."""
    sigma = check_float(sigma, "sigma", "rdp_gnmax_data_independent", low=0.0, low_open=True)
    lam = check_orders(orders, "orders", "rdp_gnmax_data_independent", low=1.0)
    return lam * inv_square(sigma)


def rdp_threshold(sigma1: float, orders: Any) -> np.ndarray:
    """:math:`\\lambda/(2\\sigma_1^2)`: the Gaussian mechanism on the max vote count (sensitivity 1)."""
    sigma1 = check_float(sigma1, "sigma1", "rdp_threshold", low=0.0, low_open=True)
    lam = check_orders(orders, "orders", "rdp_threshold", low=1.0)
    return lam * (0.5 * inv_square(sigma1))


def threshold_log_pr(votes: Any, threshold: float, sigma1: float) -> np.ndarray:
    r""":math:`\log\Pr[\max_j n_j + \mathcal N(0,\sigma_1^2) \ge T]` per query (Confident-GNMax's check passes),
    shape (queries,): ``log_ndtr((max_j n_j - T) / sigma1)``."""
    owner = "threshold_log_pr"
    threshold = check_float(threshold, "threshold", owner)
    sigma1 = check_float(sigma1, "sigma1", owner, low=0.0, low_open=True)
    v = validated_votes(votes, owner)
    with np.errstate(over="ignore"):
        return log_ndtr((v.max(axis=1) - threshold) / sigma1)


def rdp_threshold_data_dependent(log_pr: Any, sigma1: float, orders: Any) -> np.ndarray:
    r"""Data-dependent RDP of Confident-GNMax's threshold check per query, shape (queries, orders) (PATE 2018, Section 4
    and Appendix: the check's outcome is binary, so Theorem 6 applies with :math:`\tilde q` the probability of the
    less likely outcome, :math:`\min(p, 1-p)`, and the check's own RDP curve: a Gaussian mechanism of sensitivity 1,
    i.e. GNMax's with :math:`\sigma = \sqrt2\sigma_1`). Never above the data-independent :math:`\lambda/(2\sigma_1^2)`."""
    owner = "rdp_threshold_data_dependent"
    sigma1 = check_float(sigma1, "sigma1", owner, low=0.0, low_open=True)
    lp = np.atleast_1d(np.asarray(log_pr, dtype=np.float64)).ravel()
    if np.any(np.isnan(lp)) or np.any(lp > 0):
        raise ParameterError(f"The 'log_pr' parameter of {owner} must hold values <= 0. Got a NaN or positive value instead.")
    log_q = np.minimum(lp, log1mexp(lp))
    return rdp_gnmax_data_dependent(log_q, math.sqrt(2.0) * sigma1, orders)


def _dd_parts(log_q: np.ndarray, sigma: float):
    """mu1, mu2, eps1, eps2 and the order-free validity mask (per query)."""
    var = sigma * sigma
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        mu2 = sigma * np.sqrt(np.maximum(-log_q, 0.0))
        mu1 = mu2 + 1.0
        eps1 = mu1 / var
        eps2 = mu2 / var
        ok = (mu2 > 1.0) & np.isfinite(mu2)
        cond_mono = log_q <= (mu2 - 1.0) * eps2 - mu2 * (np.log(mu1 / (mu1 - 1.0)) + np.log(mu2 / (mu2 - 1.0)))
        cond_a = -log_q > eps2  # q e^{eps2} < 1
    return mu1, mu2, eps1, eps2, ok & cond_mono & cond_a


def gnmax_dd_applies(log_q: Any, sigma: float, orders: Any) -> np.ndarray:
    """Boolean (queries, orders): where PATE 2018 Theorem 6 (orders of Proposition 10) applies."""
    lq = np.atleast_1d(np.asarray(log_q, dtype=np.float64)).ravel()
    lam = check_orders(orders, "orders", "gnmax_dd_applies", low=1.0)
    mu1, _, _, _, ok = _dd_parts(lq, check_float(sigma, "sigma", "gnmax_dd_applies", low=0.0, low_open=True))
    return ok[:, None] & (lam[None, :] < mu1[:, None])


def rdp_gnmax_data_dependent(log_q: Any, sigma: float, orders: Any) -> np.ndarray:
    """Data-dependent RDP of one GNMax answer per query, shape (queries, orders) (PATE 2018, Theorem 6).

    The minimum of the Theorem 6 bound (where it applies, see :func:`gnmax_dd_applies`) and the
    data-independent :math:`\\lambda/\\sigma^2`; never below 0, never NaN. ``log_q = -inf`` (q = 0) gives the
    limit of the bound. Vectorised over queries and orders, in log space.
    """
    owner = "rdp_gnmax_data_dependent"
    sigma = check_float(sigma, "sigma", owner, low=0.0, low_open=True)
    lq = np.atleast_1d(np.asarray(log_q, dtype=np.float64)).ravel()
    if np.any(np.isnan(lq)) or np.any(lq > 0):
        raise ParameterError(f"The 'log_q' parameter of {owner} must hold values <= 0. Got a NaN or positive value instead.")
    lam = check_orders(orders, "orders", owner, low=1.0)
    base = lam * inv_square(sigma)
    out = np.broadcast_to(base, (lq.size, lam.size)).copy()
    finite = np.isfinite(lq)
    # q = 0: the answer is i* with certainty under D; the bound's limit as q -> 0 is 0 (A -> 1, q B^{l-1} -> 0).
    out[~finite] = 0.0
    idx = np.flatnonzero(finite)
    if idx.size == 0:
        return out
    q = lq[idx]
    mu1, mu2, eps1, eps2, ok = _dd_parts(q, sigma)
    if not np.any(ok):
        return out
    sel = idx[ok]
    q, mu1, mu2, eps1, eps2 = q[ok], mu1[ok], mu2[ok], eps1[ok], eps2[ok]
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        log1q = log1mexp(q)
        log_a = log1q - log1mexp((q + eps2) * (1.0 - 1.0 / mu2))
        log_b = eps1 - q / (mu1 - 1.0)
        lm1 = lam[None, :] - 1.0
        log_s = np.logaddexp(log1q[:, None] + lm1 * log_a[:, None], q[:, None] + lm1 * log_b[:, None])
        bound = np.maximum(log_s / lm1, 0.0)
    applies = lam[None, :] < mu1[:, None]
    bound = np.where(applies & np.isfinite(bound), bound, np.inf)
    out[sel] = np.minimum(out[sel], bound)
    return out


_FAST_ROWS = 1 << 13
#: Up to this many (query, order) pairs the data-dependent figure evaluates every order of the grid; beyond it a
#: coarse-to-fine search over about 16 + 2 * (grid size / 16) orders.
_FULL_GRID_WORK = 400_000
_COARSE_ORDERS = 16
_TINY_Q = 1e-280
#: Where the second term of Theorem 6's log-sum is below e^-50 of the first at every order, the sum is the first term
#: plus at most e^-50 (added, so the figure stays an upper bound): no exp/log per (query, order).
_DOMINANCE = -50.0


def _log_q_fast(votes: np.ndarray, sigma: float) -> np.ndarray:
    """:func:`gaussian_log_q` computed in linear space on transposed blocks (``ndtr`` is 4x cheaper than ``log_ndtr``;
    a sum of positive terms loses no precision); rows with q < 1e-280 are redone in log space."""
    nq, nc = votes.shape
    out = np.empty(nq)
    scale = 1.0 / (math.sqrt(2.0) * sigma) if sigma > 0 else math.inf
    cap = math.log1p(-1.0 / nc)
    for start in range(0, nq, _FAST_ROWS):
        block = votes[start:start + _FAST_ROWS]
        bt = np.ascontiguousarray(block.T)
        top = bt.max(axis=0)
        with np.errstate(over="ignore", invalid="ignore"):
            z = np.subtract(top, bt)
            pos = z > 0.0
            z *= -scale
            np.nan_to_num(z, copy=False, nan=0.0, neginf=-np.inf)
        t = ndtr(z)
        t *= pos
        q = t.sum(axis=0)
        q += 0.5 * (nc - np.count_nonzero(pos, axis=0) - 1)  # classes tied with the winner: Phi(0) = 1/2 each
        with np.errstate(divide="ignore"):
            lq = np.log(q)
        tiny = q < _TINY_Q
        if np.any(tiny):
            lq[tiny] = gaussian_log_q(block[tiny], sigma)
        out[start:start + block.shape[0]] = np.minimum(lq, cap)
    return out


def _dd_total(votes: np.ndarray, sigma: float, orders: np.ndarray, answered: np.ndarray | None,
              lq: np.ndarray | None = None, prep: dict | None = None):
    """Sum over (answered) queries of the data-dependent GNMax RDP; also log q and per-query applicability.

    Vectorised over queries and orders. Per query, Theorem 6's bound is log(e^{x + (l-1)a} + e^{y + (l-1)b})/(l-1);
    for most queries the second exponent is below the first by more than 50 at every order (the difference is
    linear in l, so its two ends decide), and the bound is a + (x + e^-50)/(l-1) — arithmetic only. The other
    queries take :func:`rdp_gnmax_data_dependent`. Both then take the minimum with the data-independent l/sigma^2."""
    if lq is None:
        lq = _log_q_fast(votes, sigma)
    nq = lq.size
    use = np.ones(nq, dtype=bool) if answered is None else answered
    base = orders * inv_square(sigma)
    total = np.zeros(orders.size)
    applied = np.zeros(nq, dtype=bool)
    prep = {} if prep is None else prep
    if "parts" not in prep:
        finite_ = np.isfinite(lq)
        parts = _dd_parts(np.where(finite_, lq, -1.0), sigma)
        prep["parts"] = (finite_,) + tuple(parts[:4]) + (parts[4] & finite_,)
    finite, mu1, mu2, eps1, eps2, ok = prep["parts"]
    zero = ~finite  # q = 0: the bound's limit is 0 at every order
    applied |= zero
    # queries where the bound never applies pay the data-independent cost
    plain = ~ok & ~zero
    n_plain = np.count_nonzero(plain & use)
    if n_plain:  # (0 * an infinite base would be NaN)
        total += n_plain * base
    idx = np.flatnonzero(ok)
    if idx.size:
        q = lq[idx]
        if "ab" not in prep:
            with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
                l1q = log1mexp(q)
                prep["ab"] = (l1q, l1q - log1mexp((q + eps2[idx]) * (1.0 - 1.0 / mu2[idx])), eps1[idx] - q / (mu1[idx] - 1.0))
        log1q, log_a, log_b = prep["ab"]
        lo = float(orders.min())
        hi = np.minimum(float(orders.max()), mu1[idx])
        diff0 = q - log1q
        slope = log_b - log_a
        dom = (diff0 + (lo - 1.0) * slope < _DOMINANCE) & (diff0 + (hi - 1.0) * slope < _DOMINANCE)
        dom &= np.isfinite(log_a) & np.isfinite(log1q)
        inv = 1.0 / (orders - 1.0)
        tiny = math.exp(_DOMINANCE)
        d_idx = np.flatnonzero(dom)
        for s0 in range(0, d_idx.size, _FAST_ROWS):
            sel = d_idx[s0:s0 + _FAST_ROWS]
            f = np.multiply.outer(log1q[sel] + tiny, inv)
            f += log_a[sel, None]
            np.maximum(f, 0.0, out=f)
            np.minimum(f, base, out=f)
            f = np.where(orders[None, :] < mu1[idx[sel], None], f, base[None, :])
            applied[idx[sel]] = np.any(f < base[None, :], axis=1)
            total += f[use[idx[sel]]].sum(axis=0)
        rest = idx[~dom]
        for s0 in range(0, rest.size, _CHUNK):
            sel = rest[s0:s0 + _CHUNK]
            r = rdp_gnmax_data_dependent(lq[sel], sigma, orders)
            applied[sel] = np.any(r < base[None, :], axis=1)
            total += r[use[sel]].sum(axis=0)
    # rounded up by a relative 1e-12: linear- and log-space q and the summation order differ in the last bits
    return total * (1.0 + 1e-12), lq, applied


@register_rdp(GaussianNoisyMax)
def _rdp_gnmax_event(event: DpEvent, orders: np.ndarray) -> np.ndarray:
    """RDP of one :class:`GaussianNoisyMax` event. With a threshold and votes, every row pays the threshold
    check and (not knowing which were answered) the GNMax cost as well — conservative."""
    lam = check_orders(orders, "orders", "GaussianNoisyMax RDP", low=1.0)
    n = int(event.num_queries)  # type: ignore[attr-defined]
    if event.votes is None:  # type: ignore[attr-defined]
        total = n * rdp_gnmax_data_independent(event.sigma, lam)  # type: ignore[attr-defined]
    else:
        total = _dd_total(event.votes, event.sigma, lam, None)[0]  # type: ignore[attr-defined]
    if event.threshold is not None:  # type: ignore[attr-defined]
        total = total + n * rdp_threshold(event.sigma_threshold, lam)  # type: ignore[attr-defined]
    return total


@quiet_overflow
def account_gnmax(votes: Any = None, *, sigma: float, delta: float, queries: int | None = None, threshold: float | None = None,
                  sigma1: float | None = None, data_independent: bool = False, orders: Any = None,
                  answered: Any = None) -> AccountingResult:
    """Epsilon of GNMax / Confident-GNMax answers (PATE 2018), RDP route.

    Parameters
    ----------
    votes:
        Teacher vote histograms (queries x classes), counts >= 0. Gives the data-dependent figure (headline).
    sigma:
        Standard deviation :math:`\\sigma` of the GNMax noise on every count.
    delta:
        Target :math:`\\delta \\in (0,1)`.
    queries:
        Number of queries for the data-independent figure (default: vote rows).
    threshold, sigma1:
        Confident-GNMax: threshold T and noise :math:`\\sigma_1` of the check; every query pays the check.
    answered:
        With a threshold: which queries passed the check (bool mask over vote rows), or their number without
        votes. Default: all (conservative).
    data_independent:
        Only the data-independent figure.
    orders:
        Rényi orders :math:`\\lambda > 1` (default :data:`DEFAULT_ORDERS`).
    """
    owner = "account_gnmax"
    sigma = check_float(sigma, "sigma", owner, low=0.0, low_open=True)
    delta = check_probability(delta, "delta", owner)
    data_independent = check_bool(data_independent, "data_independent", owner)
    grid = np.array(DEFAULT_ORDERS) if orders is None else check_orders(orders, "orders", owner, low=1.0)
    if (threshold is None) != (sigma1 is None):
        raise ParameterError(f"{owner} needs both 'threshold' and 'sigma1' for Confident-GNMax, or neither. "
                             f"Got threshold={threshold!r}, sigma1={sigma1!r} instead.")
    if threshold is not None:
        threshold = check_float(threshold, "threshold", owner)
        sigma1 = check_float(sigma1, "sigma1", owner, low=0.0, low_open=True)
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

    thr = queries * rdp_threshold(sigma1, grid) if sigma1 is not None else np.zeros(grid.size)
    di_rdp = n_answered * rdp_gnmax_data_independent(sigma, grid) + thr
    relation = "replace-one record (one teacher's vote changes)"
    base_assumptions = [f"Neighbouring datasets: {relation}.",
                        f"GNMax answers with N(0, {sigma:g}^2) noise on each vote count (PATE 2018), composed adaptively."]
    if threshold is not None:
        base_assumptions.append(f"Confident-GNMax: every one of the {queries} queries pays the threshold check "
                                f"(T = {threshold:g}, sigma1 = {sigma1:g}, RDP lambda/(2 sigma1^2)); {n_answered} answered queries pay GNMax.")
    di_rdp_eps, di_rdp_order = rdp_to_epsilon(grid, di_rdp, delta, warn=False)
    # the data-independent mechanism is a composition of Gaussian mechanisms: exactly mu-GDP (Dong, Roth & Su 2019)
    mu2 = n_answered * 2.0 * inv_square(sigma) + (queries * inv_square(sigma1) if sigma1 is not None else 0.0)
    gdp_eps = gaussian_mechanism_epsilon(math.sqrt(mu2), delta) if math.isfinite(mu2) and mu2 > 0 else (
        0.0 if mu2 == 0 else math.inf)
    routes = {"rdp": di_rdp_eps, "gaussian-dp exact": gdp_eps}
    di_method = "rdp" if di_rdp_eps <= gdp_eps else "gaussian-dp exact"
    di_eps, di_order = (di_rdp_eps, di_rdp_order) if di_method == "rdp" else (gdp_eps, None)
    route_note = (f"Smallest of the valid routes (RDP: {di_rdp_eps:.6g}; exact Gaussian-DP composition, mu = "
                  f"{math.sqrt(mu2):.6g}: {gdp_eps:.6g}): {di_method} reported.")
    inf_note = ("epsilon is infinite: the noise is too small for any finite epsilon at this delta.",) if math.isinf(di_eps) else ()
    di_stmt = PrivacyStatement(di_eps, delta, di_method, di_order, tuple(base_assumptions) + (route_note,) + inf_note,
                               f"data-independent, {queries} queries", details={"routes": routes})
    params = {"sigma": sigma, "delta": delta, "queries": queries, "threshold": threshold, "sigma1": sigma1,
              "answered": n_answered, "orders": grid.tolist(), "data_independent": v is None or data_independent}
    if v is None or data_independent:
        warnings_ += edge_warning(grid, di_order, "Rényi order")
        return AccountingResult("gnmax", (di_stmt,), 0, params, {"num_queries": queries, "answered": n_answered}, tuple(warnings_))
    lpr = threshold_log_pr(v, threshold, sigma1) if (sigma1 is not None and threshold is not None) else None
    if lpr is not None:
        base_assumptions.append("Data-dependent threshold analysis (PATE 2018): each check is charged Theorem 6's bound with "
                                "q = the probability of its less likely outcome, capped by its data-independent cost.")
    cache: dict[int, float] = {}
    state: dict[str, Any] = {}

    def dd_at(ix: np.ndarray) -> np.ndarray:
        """The data-dependent RDP total at grid[ix] (cached per order index)."""
        todo = np.array([i for i in ix if int(i) not in cache], dtype=np.int64)
        if todo.size:
            total_, lq_, applied_ = _dd_total(v, sigma, grid[todo], mask, lq=state.get("lq"), prep=state.setdefault("prep", {}))
            if "lq" not in state:
                state["lq"], state["applied"] = lq_, applied_
            else:
                state["applied"] = state["applied"] | applied_
            thr_dd = thr[todo]
            if lpr is not None and sigma1 is not None:
                t_dd = np.zeros(todo.size)
                for s0 in range(0, lpr.size, _CHUNK):
                    t_dd += rdp_threshold_data_dependent(lpr[s0:s0 + _CHUNK], sigma1, grid[todo]).sum(axis=0)
                thr_dd = np.minimum(t_dd * (1.0 + 1e-12), thr_dd)
            for i, val in zip(todo, np.minimum(total_ + thr_dd, di_rdp[todo])):
                cache[int(i)] = float(val)
        return np.array([cache[int(i)] for i in ix])

    n_orders = grid.size
    if v.shape[0] * n_orders <= _FULL_GRID_WORK:
        search = np.arange(n_orders)
    else:
        # coarse-to-fine over the order grid: every k-th order, then every order between the best one's coarse
        # neighbours. Any evaluated order gives a valid epsilon; where epsilon(order) is unimodal on the grid (the
        # usual case) this finds the full grid's minimum, at a fraction of the cost for many queries.
        step = max(1, n_orders // _COARSE_ORDERS)
        search = np.unique(np.r_[np.arange(0, n_orders, step), n_orders - 1])
    _, best_order = rdp_to_epsilon(grid[search], dd_at(search), delta, warn=False)
    best = 0 if best_order is None else int(np.flatnonzero(grid[search] == best_order)[0])
    lo_i = int(search[best - 1]) if best > 0 else 0
    hi_i = int(search[best + 1]) if best + 1 < search.size else n_orders - 1
    evaluated = np.unique(np.r_[search, np.arange(lo_i, hi_i + 1)])
    dd_rdp_eval = dd_at(evaluated)
    lq, applied = state["lq"], state["applied"]
    dd_eps, dd_order = rdp_to_epsilon(grid[evaluated], dd_rdp_eval, delta, warn=False)
    dd_route_eps = dd_eps
    dd_method = "rdp"
    if di_eps < dd_eps:
        dd_eps, dd_order, dd_method = di_eps, di_order, di_method
    n_dd = int(applied.sum())
    coverage = () if n_dd == lq.size else (
        f"The data-dependent bound (PATE 2018, Theorem 6) could not be used for {lq.size - n_dd} of {lq.size} queries "
        "(its conditions on q fail there); those queries are charged their data-independent cost.",)
    dd_stmt = PrivacyStatement(
        dd_eps, delta, dd_method, dd_order,
        tuple(base_assumptions) + ("Data-dependent bound (PATE 2018, Theorem 6): the figure is a function of the private votes "
                                   "and is not itself differentially private (see dpaudit.accountants.smooth_sensitivity).",
                                   f"Smallest of the valid routes (data-dependent RDP and the data-independent routes): {dd_method} reported.")
        + coverage,
        f"data-dependent, {queries} queries", True, details={"routes": {"data-dependent rdp": float(dd_route_eps), **routes},
                                                       "orders_evaluated": int(evaluated.size)})
    warnings_ += edge_warning(grid, dd_order, "Rényi order")
    q = np.exp(lq)
    facts = {"num_queries": queries, "answered": n_answered, "q_min": float(q.min()), "q_median": float(np.median(q)),
             "q_mean": float(q.mean()), "q_max": float(q.max()), "data_dependent_queries": int(applied.sum())}
    return AccountingResult("gnmax", (dd_stmt, di_stmt), 0, params, facts, tuple(warnings_))

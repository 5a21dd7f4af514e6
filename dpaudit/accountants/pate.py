"""PATE with Laplace noisy max: data-dependent moments (PATE 2017) and RDP, FedKT's variants.

The mechanism answers each query with :math:`\\arg\\max_j (n_j + \\mathrm{Lap}(1/\\gamma))` on a vote
histogram :math:`n \\in \\mathbb{R}_{\\ge 0}^C`. If one record (or one party) moves the histogram by at most
``sensitivity`` :math:`S` in L1 norm, each answer is :math:`\\epsilon_q`-DP with :math:`\\epsilon_q = S\\gamma`
(Laplace mechanism / report-noisy-max; PATE uses :math:`S = 2`).

Per query and per moment order :math:`l > 0`, the log moment :math:`\\alpha(l)` of the privacy loss
(Abadi et al. 2016) is bounded by the smallest of

* the data-independent bound :math:`\\epsilon_q^2 l(l+1)/2` (Bun & Steinke 2016, Proposition 3.3: an
  :math:`\\epsilon`-DP mechanism is :math:`\\epsilon^2/2`-zCDP; PATE 2017 Theorem 2 with :math:`\\epsilon_q = 2\\gamma`
  gives :math:`2\\gamma^2 l(l+1)`),
* the pure-DP bound :math:`\\epsilon_q l` (the privacy loss never exceeds :math:`\\epsilon_q`),
* the data-dependent bound (PATE 2017, Theorem 3)

  .. math:: \\log\\Big((1-q)\\Big(\\frac{1-q}{1-e^{\\epsilon_q} q}\\Big)^l + q e^{\\epsilon_q l}\\Big),

  valid only when :math:`q < (e^{\\epsilon_q}-1)/(e^{2\\epsilon_q}-1) = 1/(e^{\\epsilon_q}+1)`, where :math:`q` is an
  upper bound on :math:`\\Pr[M(d) \\ne j^*]` for the plurality class :math:`j^*`. (The 2017 reference script uses
  :math:`q < 0.5` instead, which is wrong: between :math:`1/(e^{\\epsilon_q}+1)` and 0.5 the bound is not
  monotone in :math:`q` and may be below the true moment.)

The bound on :math:`q` comes from PATE 2017 Lemma 4: for two independent :math:`\\mathrm{Lap}(1/\\gamma)` noises,
:math:`\\Pr[n_j + Z_j \\ge n_{j^*} + Z_{j^*}] = (2 + \\gamma\\Delta_j)/(4 e^{\\gamma\\Delta_j})` with
:math:`\\Delta_j = n_{j^*} - n_j \\ge 0`, and a union bound over :math:`j \\ne j^*`.
**The sensitivity factor does not enter q**: q is a property of the noise scale :math:`1/\\gamma` and of the
histogram at hand, not of the neighbouring relation. Only :math:`\\epsilon_q` (in the moment bound and in its
validity threshold) scales with :math:`S` — this is how FedKT's Theorems 2, 8 and 10 (paper 001) read: the q of
Lemma 6 with :math:`\\gamma` and the moment bound with :math:`2s\\gamma`, :math:`2z\\gamma`, :math:`2t\\gamma`.
q is also capped at :math:`1 - 1/C` (the plurality class wins with probability at least :math:`1/C` under i.i.d.
noise), which never changes a figure since that cap lies above every validity threshold.

Moments and Rényi DP are the same object: :math:`\\alpha(l) = l\\,D_{l+1}(M(d)\\|M(d'))`, so the RDP at order
:math:`\\lambda = l+1` is :math:`\\alpha(\\lambda-1)/(\\lambda-1)`. The data-dependent bound holds for real
:math:`l > 0` (it is PATE 2018 Theorem 6 with :math:`\\mu_1, \\mu_2 \\to \\infty`, i.e. pure DP), so the RDP route
may use any grid :math:`\\lambda > 1`.

Two conversions to :math:`(\\epsilon, \\delta)`:

* ``"moments"`` (PATE 2017 / Abadi et al. 2016, Theorem 2.2): :math:`\\epsilon = \\min_l (\\sum\\alpha(l) + \\log(1/\\delta))/l`
  over moment orders :math:`l` (default 1..8, as in the paper). Use this to reproduce published numbers.
* ``"rdp"``: :func:`~dpaudit.accountants.rdp.rdp_to_epsilon` over Rényi orders :math:`\\lambda` (default
  :data:`~dpaudit.accountants.rdp.DEFAULT_ORDERS`). With :math:`\\lambda = l + 1` the Mironov term equals the
  moments formula, and the Canonne-Kamath-Steinke term is never worse, so this route is never looser on the same grid.
"""

from __future__ import annotations

import dataclasses
import math
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from dpaudit._io import check_input_file, load_npy_file, read_input_text
from dpaudit.accountants.base import Accountant, register_rdp
from dpaudit.accountants.closed_form import pure_composition_epsilon
from dpaudit.accountants._common import as_votes, check_orders, edge_warning, log1mexp, quiet_overflow, validated_votes
from dpaudit.accountants.events import DpEvent, LaplaceNoisyMax, flatten
from dpaudit.accountants.order_search import search_rdp_orders
from dpaudit.accountants.pairs import noisy_max_lower_bound
from dpaudit.accountants.rdp import DEFAULT_ORDERS, rdp_to_epsilon
from dpaudit.accountants.statement import (ROUTE_DATA_DEPENDENT, ROUTE_DATA_INDEPENDENT, AccountingResult,
                                          PrivacyStatement)
from dpaudit.errors import DataError, ParameterError, check_bool, check_choice, check_float, check_int, check_probability

__all__ = [
    "MOMENT_ORDERS",
    "laplace_log_q",
    "laplace_log_moments",
    "laplace_total_log_moments",
    "data_independent_log_moments",
    "moments_to_epsilon",
    "rdp_laplace_noisy_max",
    "MomentsAccountant",
    "account_pate",
    "fedkt_privacy",
    "fedkt_z",
    "one_switch_flips",
    "load_votes",
]

#: Moment orders l = 1..8 used by PATE 2017 (and FedKT) for the moments conversion.
MOMENT_ORDERS: np.ndarray = np.arange(1.0, 9.0)
MOMENT_ORDERS.setflags(write=False)

#: Rényi orders of the RDP route under ``conversion="best"``: the moment orders l = 1..8 as lambda = l + 1 (so the RDP
#: route is never looser than the moments one) and a compact spread around them (28 orders: the vote analysis costs
#: one pass per order).
PATE_RDP_ORDERS: np.ndarray = np.array([1.02, 1.05, 1.1, 1.2, 1.35, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0,
                                        9.0, 10.0, 12.0, 14.0, 16.0, 20.0, 24.0, 32.0, 48.0, 64.0, 128.0])
PATE_RDP_ORDERS.setflags(write=False)

_LOG4 = math.log(4.0)
_X_CAP = 1e300
_CHUNK = 1 << 16  # rows per block: keeps temporaries in cache and memory flat for 1e6+ queries


# --------------------------------------------------------------------------------------------------
# Pure math
# --------------------------------------------------------------------------------------------------



def laplace_log_q(votes: Any, gamma: float) -> np.ndarray:
    """Log of the PATE 2017 Lemma 4 bound on :math:`\\Pr[M(d) \\ne j^*]`, one value per query.

    .. math:: q = \\min\\Big(1 - \\tfrac1C,\\ \\sum_{j \\ne j^*} \\frac{2 + \\gamma (n_{j^*} - n_j)}{4\\exp(\\gamma (n_{j^*} - n_j))}\\Big)

    Parameters
    ----------
    votes:
        Vote counts, shape (queries, classes) (a single histogram of shape (classes,) is accepted); counts >= 0,
        rows may have different totals.
    gamma:
        Inverse Laplace scale :math:`\\gamma > 0` (noise :math:`\\mathrm{Lap}(1/\\gamma)` on every count).

    Returns
    -------
    np.ndarray of shape (queries,): :math:`\\log q` (always finite; computed in log space, never underflows to 0).
    """
    gamma = check_float(gamma, "gamma", "laplace_log_q", low=0.0, low_open=True)
    v = validated_votes(votes, "laplace_log_q")
    nq, nc = v.shape
    out = np.empty(nq)
    cap = math.log1p(-1.0 / nc)
    for start in range(0, nq, _CHUNK):
        block = v[start:start + _CHUNK]
        rows = np.arange(block.shape[0])
        win = np.argmax(block, axis=1)
        with np.errstate(over="ignore"):
            x = gamma * (block[rows, win][:, None] - block)  # >= 0
        # gamma * gap may overflow: cap at 1e300 (the term only grows, so this is conservative, and never NaN)
        np.minimum(x, _X_CAP, out=x)
        logt = np.log(2.0 + x) - x - _LOG4
        logt[rows, win] = -np.inf  # every other class counts, ties included
        m = logt.max(axis=1)
        out[start:start + block.shape[0]] = m + np.log(np.exp(logt - m[:, None]).sum(axis=1))
    return np.minimum(out, cap)



def _data_independent(eps: float, l: np.ndarray) -> np.ndarray:
    """min(eps^2 l(l+1)/2, eps l) per order, without overflow warnings (an overflowed product is inf, and the
    minimum then takes eps l)."""
    with np.errstate(over="ignore"):
        return np.minimum(0.5 * eps * eps * l * (l + 1.0), eps * l)


def laplace_log_moments(log_q: Any, eps_query: float, orders: Any = MOMENT_ORDERS) -> np.ndarray:
    """Per-query bound on the log moment :math:`\\alpha(l)` of an :math:`\\epsilon_q`-DP noisy-max answer.

    :math:`\\alpha(l) = \\min(\\epsilon_q^2 l(l+1)/2,\\ \\epsilon_q l,\\ \\text{data-dependent})`, the data-dependent term
    (PATE 2017 Theorem 3) used only where :math:`q < 1/(e^{\\epsilon_q}+1)`; elsewhere the data-independent
    minimum is returned (never 0). Everything is in log space: no overflow for :math:`\\epsilon_q l` up to ~1e300,
    :math:`q = 0` (``log_q = -inf``) gives 0, :math:`e^{\\epsilon_q} q = 1` falls back.

    Parameters
    ----------
    log_q:
        :math:`\\log q` per query, shape (queries,), values <= 0 (``-inf`` allowed).
    eps_query:
        Pure-DP epsilon of one answer, :math:`\\epsilon_q = S\\gamma > 0`.
    orders:
        Moment orders :math:`l > 0` (real), shape (L,).

    Returns
    -------
    np.ndarray of shape (queries, L).
    """
    owner = "laplace_log_moments"
    eps = check_float(eps_query, "eps_query", owner, low=0.0, low_open=True)
    lq = np.atleast_1d(np.asarray(log_q, dtype=np.float64)).ravel()
    if np.any(np.isnan(lq)) or np.any(lq > 0):
        raise ParameterError(f"The 'log_q' parameter of {owner} must hold values <= 0 (log of a probability). Got {lq.max()} instead.")
    l = check_orders(orders, "orders", owner, low=0.0)
    data_ind = _data_independent(eps, l)  # (L,)
    out = np.broadcast_to(data_ind, (lq.size, l.size)).copy()
    valid = lq < -np.logaddexp(0.0, eps)  # q < 1/(e^eps + 1), strict
    if np.any(valid):
        lqv = lq[valid][:, None]
        with np.errstate(invalid="ignore", over="ignore"):
            t1 = (l + 1.0) * log1mexp(lqv) - l * log1mexp(lqv + eps)
            t2 = lqv + eps * l
            dd = np.maximum(np.logaddexp(t1, t2), 0.0)
        dd = np.where(np.isfinite(dd), dd, np.inf)
        out[valid] = np.minimum(out[valid], dd)
    return out


_FAST_BLOCK = 1 << 13
_TINY_Q = 1e-280  # below this the linear q may lose digits to underflow: those rows take the log-space path


def _q_linear(block: np.ndarray, gamma: float) -> np.ndarray:
    """Lemma 4's q (uncapped) in linear space for one block of rows.

    Works on the transposed block (classes x rows, small enough to stay in cache) so every reduction runs over
    the long axis. The winner's own term is removed exactly: terms with gap 0 (the winner and any class tied
    with it) are each exactly (2 + 0)/4 = 0.5, so they are dropped from the sum and 0.5 * (ties - 1) is added back.
    """
    bt = np.ascontiguousarray(block.T)
    top = bt.max(axis=0)
    x = np.subtract(top, bt)
    with np.errstate(over="ignore"):
        x *= gamma
    np.minimum(x, _X_CAP, out=x)  # overflowed gaps: the term e^-x (2 + x) / 4 is 0 either way, but inf * 0 is NaN
    pos = x > 0.0
    e = np.multiply(x, -1.0)
    np.exp(e, out=e)
    e *= pos
    x += 2.0
    x *= e
    q = x.sum(axis=0)
    q *= 0.25
    q += 0.5 * (bt.shape[0] - np.count_nonzero(pos, axis=0) - 1)
    return q


def _moments_sum_linear(q: np.ndarray, eps: float, l: np.ndarray, di: np.ndarray) -> tuple[np.ndarray, int]:
    """Sum over queries of min(di, data-dependent) for q >= 1e-280 and eps*max(l) < 700 (no overflow possible).

    Theorem 3's bound written as log1p((1-q)(r^l - 1) + q expm1(eps l)), r = (1-q)/(1-e^eps q), so that small q
    keep full relative precision. For integer orders up to 512, r^l - 1 comes from the recurrence
    r^{m+1} - 1 = (r^m - 1) r + (r - 1) (all terms positive: no cancellation); otherwise from expm1(l log r).
    Returns (sum, number of queries where the bound applied)."""
    thr = math.exp(-float(np.logaddexp(0.0, eps)))
    valid = q < thr
    qv = q[valid]
    total = (q.size - qv.size) * di
    if not qv.size:
        return total, 0
    log_r = np.log1p(-qv)
    log_r -= np.log1p(-math.exp(eps) * qv)
    omq = 1.0 - qv
    em = np.expm1(eps * l)
    out = np.empty(l.size)
    integer = bool(np.all(l == np.round(l))) and float(l.max()) <= 512
    tmp = np.empty_like(qv)
    if integer:
        d1 = np.expm1(log_r)  # r - 1 >= 0
        r = d1 + 1.0
        d = d1.copy()
        cur = 1
        for k in np.argsort(l, kind="stable"):
            target = int(l[k])
            while cur < target:
                d *= r
                d += d1
                cur += 1
            np.multiply(omq, d, out=tmp)
            tmp += qv * em[k]
            np.log1p(tmp, out=tmp)
            np.minimum(tmp, di[k], out=tmp)
            out[k] = tmp.sum()
    else:
        for k in range(l.size):
            np.multiply(log_r, l[k], out=tmp)
            np.expm1(tmp, out=tmp)
            tmp *= omq
            tmp += qv * em[k]
            np.log1p(tmp, out=tmp)
            np.minimum(tmp, di[k], out=tmp)
            out[k] = tmp.sum()
    return total + out, int(qv.size)


def _block_total(block: np.ndarray, gamma: float, eps: float, l: np.ndarray, di: np.ndarray, cap: float,
                 linear_ok: bool) -> tuple[np.ndarray, np.ndarray]:
    q = np.minimum(_q_linear(block, gamma), cap)
    tiny = q < _TINY_Q
    if linear_ok:
        if np.any(tiny):
            total = laplace_log_moments(laplace_log_q(block[tiny], gamma), eps, l).sum(axis=0)
            total = total + _moments_sum_linear(q[~tiny], eps, l, di)[0]
        else:
            total = _moments_sum_linear(q, eps, l, di)[0]
    else:
        lq = laplace_log_q(block, gamma) if np.any(tiny) else np.log(q)
        total = laplace_log_moments(lq, eps, l).sum(axis=0)
    return total, q


@quiet_overflow
def laplace_total_log_moments(votes: Any, gamma: float, orders: Any = MOMENT_ORDERS, *, sensitivity: float = 2.0,
                              return_details: bool = False, workers: int = 1):
    """Sum over queries of :func:`laplace_log_moments` (shape (L,)), processed in blocks: memory stays flat for
    1e6+ queries and the common case runs in linear space with ``expm1``/``log1p`` (rows with q < 1e-280 or
    orders with eps*l >= 700 take the log-space path, so nothing underflows or overflows).

    ``workers`` > 1 processes blocks in that many threads (numpy releases the GIL; the result is identical up to
    the order of floating-point summation). With ``return_details`` also returns ``(log_q, valid)`` per query,
    ``valid`` saying where the data-dependent bound applied (q below its threshold).
    """
    owner = "laplace_total_log_moments"
    gamma = check_float(gamma, "gamma", owner, low=0.0, low_open=True)
    sens = check_float(sensitivity, "sensitivity", owner, low=0.0, low_open=True)
    workers = check_int(workers, "workers", owner, low=1, high=64)
    l = check_orders(orders, "orders", owner, low=0.0)
    v = validated_votes(votes, owner)
    eps = sens * gamma
    di = _data_independent(eps, l)
    cap = 1.0 - 1.0 / v.shape[1]
    linear_ok = eps * float(l.max()) < 700.0
    starts = range(0, v.shape[0], _FAST_BLOCK)
    work = lambda s0: _block_total(v[s0:s0 + _FAST_BLOCK], gamma, eps, l, di, cap, linear_ok)  # noqa: E731
    if workers > 1 and len(starts) > 1:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            parts = list(pool.map(work, starts))
    else:
        parts = [work(s0) for s0 in starts]
    total = np.sum([p[0] for p in parts], axis=0) if parts else np.zeros(l.size)
    if return_details:
        qs = np.concatenate([p[1] for p in parts])
        log_q = laplace_log_q(v, gamma) if np.any(qs < _TINY_Q) else np.log(qs)
        return total, log_q, log_q < -np.logaddexp(0.0, eps)
    return total


def data_independent_log_moments(eps_query: float, num_queries: int, orders: Any = MOMENT_ORDERS) -> np.ndarray:
    """:math:`N \\min(\\epsilon_q^2 l(l+1)/2, \\epsilon_q l)` — the figure without votes."""
    eps = check_float(eps_query, "eps_query", "data_independent_log_moments", low=0.0, low_open=True)
    n = check_int(num_queries, "num_queries", "data_independent_log_moments", low=0)
    l = check_orders(orders, "orders", "data_independent_log_moments", low=0.0)
    with np.errstate(over="ignore"):
        return n * _data_independent(eps, l)


def moments_to_epsilon(log_moments: Any, orders: Any, delta: float) -> tuple[float, float | None]:
    """Abadi et al. 2016 Theorem 2.2 (tail bound): :math:`\\epsilon = \\min_l (\\alpha(l) + \\log(1/\\delta))/l`.

    Returns ``(epsilon, best_order)``; ``(inf, None)`` when no order is finite.
    """
    delta = check_probability(delta, "delta", "moments_to_epsilon")
    l = check_orders(orders, "orders", "moments_to_epsilon", low=0.0)
    a = np.asarray(log_moments, dtype=np.float64).ravel()
    if a.shape != l.shape:
        raise ParameterError(f"The 'log_moments' parameter of moments_to_epsilon must have one value per order ({l.size}). Got {a.size} instead.")
    with np.errstate(invalid="ignore"):
        eps = (a - math.log(delta)) / l
    eps = np.where(np.isnan(eps), np.inf, eps)
    i = int(np.argmin(eps))
    if not math.isfinite(eps[i]):
        return math.inf, None
    return float(eps[i]), float(l[i])


def rdp_laplace_noisy_max(log_q: Any, eps_query: float, orders: Any) -> np.ndarray:
    """RDP at Rényi orders :math:`\\lambda > 1` summed over queries: :math:`\\sum_i \\alpha_i(\\lambda-1)/(\\lambda-1)`."""
    lam = check_orders(orders, "orders", "rdp_laplace_noisy_max", low=1.0)
    return laplace_log_moments(log_q, eps_query, lam - 1.0).sum(axis=0) / (lam - 1.0)


@register_rdp(LaplaceNoisyMax)
def _rdp_laplace_event(event: DpEvent, orders: np.ndarray) -> np.ndarray:
    """RDP of one :class:`LaplaceNoisyMax` event (all its queries) at Rényi orders ``orders``."""
    lam = check_orders(orders, "orders", "LaplaceNoisyMax RDP", low=1.0)
    eps = event.query_epsilon  # type: ignore[attr-defined]
    if event.votes is None:  # type: ignore[attr-defined]
        return data_independent_log_moments(eps, event.num_queries, lam - 1.0) / (lam - 1.0)  # type: ignore[attr-defined]
    total = laplace_total_log_moments(event.votes, event.gamma, lam - 1.0, sensitivity=event.sensitivity)  # type: ignore[attr-defined]
    return total / (lam - 1.0)


def _event_log_moments(event: LaplaceNoisyMax, l: np.ndarray) -> np.ndarray:
    if event.votes is None:
        return data_independent_log_moments(event.query_epsilon, event.num_queries, l)  # type: ignore[arg-type]
    return laplace_total_log_moments(event.votes, event.gamma, l, sensitivity=event.sensitivity)


# --------------------------------------------------------------------------------------------------
# Stateful accountant (PATE 2017 moments conversion)
# --------------------------------------------------------------------------------------------------


class MomentsAccountant(Accountant):
    """The PATE 2017 moments accountant for :class:`LaplaceNoisyMax` events.

    Sums per-query log-moment bounds (data-dependent where votes are given) over every composed event and
    converts with :func:`moments_to_epsilon` over moment orders ``orders`` (default :data:`MOMENT_ORDERS`, l = 1..8).
    For a tighter figure on the same events, use the RDP accountant (the RDP of LaplaceNoisyMax is registered).
    """

    name = "moments"

    def __init__(self, orders: Any = MOMENT_ORDERS) -> None:
        super().__init__()
        self.orders = check_orders(orders, "orders", "MomentsAccountant", low=0.0)

    def supports(self, event: DpEvent) -> bool:
        return isinstance(event, LaplaceNoisyMax)

    def log_moments(self) -> np.ndarray:
        total = np.zeros(self.orders.size)
        for event, count in self._events:
            for leaf, mult in flatten(event):
                total += (count * mult) * _event_log_moments(leaf, self.orders)  # type: ignore[arg-type]
        return total

    def _statement(self, target_delta: float) -> PrivacyStatement:
        leaves = [leaf for ev, _ in self._events for leaf, _ in flatten(ev)]
        data_dep = any(getattr(leaf, "votes", None) is not None for leaf in leaves)
        total = self.log_moments()
        if not leaves or not np.any(total > 0):
            return PrivacyStatement(0.0, target_delta, "moments (PATE 2017)", label="no queries")
        if target_delta == 0.0:
            eps, order = math.inf, None
        else:
            eps, order = moments_to_epsilon(total, self.orders, target_delta)
        return PrivacyStatement(
            eps, target_delta, "moments (PATE 2017)", order=order,
            assumptions=_assumptions(data_dep), data_dependent=data_dep,
            label=f"{sum(int(getattr(x, 'num_queries', 1)) for x in leaves)} noisy-max answers",
        )


# --------------------------------------------------------------------------------------------------
# One-call accounting
# --------------------------------------------------------------------------------------------------


def _assumptions(data_dependent: bool, relation: str = "replace-one record (one teacher's vote changes)") -> tuple[str, ...]:
    out = [f"Neighbouring datasets: {relation}.",
           "Every query is one report-noisy-max answer with Lap(1/gamma) noise on each vote count; answers compose adaptively."]
    if data_dependent:
        out.append("Data-dependent bound (PATE 2017, Theorem 3): the figure is a function of the private votes and is "
                   "not itself differentially private (release it through smooth sensitivity to make it so).")
    out.append("The student's training on the answers is post-processing; the public query data is not protected.")
    return tuple(out)


def _resolve_orders(orders: Any, conversion: str, owner: str) -> np.ndarray:
    """The order grid of the requested conversion (``"best"``: the moments grid, default 1..8)."""
    if conversion in ("moments", "best"):
        return MOMENT_ORDERS.copy() if orders is None else check_orders(orders, "orders", owner, low=0.0)
    return np.array(DEFAULT_ORDERS) if orders is None else check_orders(orders, "orders", owner, low=1.0)


def _routes(grid: np.ndarray, conversion: str) -> list[tuple[str, np.ndarray]]:
    """[(conversion, grid)] to compute: the requested one, or for ``"best"`` moments on ``grid`` and RDP on the
    default Rényi grid (or on ``grid`` when all its orders are > 1)."""
    if conversion != "best":
        return [(conversion, grid)]
    rdp_grid = grid if np.all(grid > 1.0) and not np.array_equal(grid, MOMENT_ORDERS) else PATE_RDP_ORDERS
    return [("moments", grid), ("rdp", rdp_grid)]


def _convert(total_moments: np.ndarray, orders: np.ndarray, delta: float, conversion: str) -> tuple[float, float | None, str]:
    """total_moments are log moments at l = orders (moments) or l = orders - 1 (rdp)."""
    if conversion == "moments":
        eps, best = moments_to_epsilon(total_moments, orders, delta)
        return eps, best, "moments (PATE 2017)"
    eps, best = rdp_to_epsilon(orders, total_moments / (orders - 1.0), delta, warn=False)
    return eps, best, "rdp"


Figure = tuple[float, "float | None", str]


def _laplace_figures(votes: np.ndarray | Sequence[np.ndarray] | None, *, gamma: float, delta: float, eps_query: float,
                     queries: int, routes: list[tuple[str, np.ndarray]], workers: int = 1):
    """(data-dependent ([(eps, order, method)] per route, facts) or None, data-independent [(eps, order, method)]).
    ``votes`` may be a list of arrays composed sequentially. All routes' orders are analysed in one pass."""
    ls = [grid if conv == "moments" else grid - 1.0 for conv, grid in routes]
    l = np.concatenate(ls)
    cuts = np.cumsum([x.size for x in ls])[:-1]
    di_total = data_independent_log_moments(eps_query, queries, l)
    di = [_convert(t, grid, delta, conv) for t, (conv, grid) in zip(np.split(di_total, cuts), routes)]
    if votes is None:
        return None, di
    blocks = [votes] if isinstance(votes, np.ndarray) else list(votes)
    total = np.zeros(l.size)
    log_qs, valids = [], []
    for b in blocks:
        sens = eps_query / gamma
        t, lq, valid = laplace_total_log_moments(b, gamma, l, sensitivity=sens, return_details=True, workers=workers)
        total += t
        log_qs.append(lq)
        valids.append(valid)
    lq = np.concatenate(log_qs)
    valid = np.concatenate(valids)
    dd = [_convert(t, grid, delta, conv) for t, (conv, grid) in zip(np.split(total, cuts), routes)]
    q = np.exp(lq)
    facts = {
        "num_queries": int(lq.size),
        "eps_query": eps_query,
        "q_min": float(q.min()), "q_median": float(np.median(q)), "q_mean": float(q.mean()), "q_max": float(q.max()),
        "q_threshold": float(1.0 / (math.exp(eps_query) + 1.0)) if eps_query < 700 else 0.0,
        "data_dependent_queries": int(valid.sum()),
    }
    return (dd, facts), di


def _pure_routes(eps_q: float, queries: int, delta: float) -> list[Figure]:
    """Routes that use only that each answer is eps_q-DP: basic composition and the optimal composition."""
    out: list[Figure] = []
    basic = eps_q * queries
    if math.isfinite(basic):
        out.append((basic, None, "basic composition (pure DP)"))
    try:
        out.append((pure_composition_epsilon(eps_q, queries, delta), None, "optimal composition of pure DP (Kairouz et al. 2015)"))
    except ParameterError:
        pass
    return out


def _best(figures: list[Figure]) -> tuple[Figure, dict[str, float]]:
    best = min(figures, key=lambda f: f[0])
    return best, {f[2]: f[0] for f in figures}


@quiet_overflow
def account_pate(votes: Any = None, *, gamma: float, delta: float, sensitivity: float = 2.0, queries: int | None = None,
                 data_independent: bool = False, fedkt_level: str | None = None, granularity: str | None = None,
                 partitions: int | None = None, teachers: int | None = None, z: int | None = None,
                 orders: Any = None, conversion: str = "best", num_parties: int | None = None,
                 consistent_voting: bool = True, workers: int = 1) -> AccountingResult:
    """Epsilon of PATE's Laplace noisy max over a set of queries.

    Parameters
    ----------
    votes:
        Vote histograms, shape (queries, classes), counts >= 0 (rows may have different totals). Gives the
        data-dependent figure beside the data-independent one (the smaller is the headline).
    gamma:
        Inverse Laplace scale: noise :math:`\\mathrm{Lap}(1/\\gamma)` on every count.
    delta:
        Target :math:`\\delta \\in (0, 1)`.
    sensitivity:
        L1 sensitivity :math:`S` of one histogram to one record; :math:`\\epsilon_q = S\\gamma` (PATE: 2).
    queries:
        Number of queries for the data-independent figure (default: number of vote rows).
    data_independent:
        Only the data-independent figure (needs ``queries`` or ``votes``); votes are then not read.
    fedkt_level, granularity, partitions, teachers, z, num_parties, consistent_voting:
        FedKT's variants: delegates to :func:`fedkt_privacy`.
    orders:
        Moment orders l (``conversion="moments"``, default 1..8) or Rényi orders :math:`\\lambda` (``"rdp"``,
        default :data:`DEFAULT_ORDERS`); a sequence or a string like ``"1-8"``.
    conversion:
        ``"best"`` (default): every figure is the smallest over the valid routes — moments (on ``orders``, default
        1..8), RDP (default Rényi grid), and, since every answer is ``eps_query``-DP whatever the votes, basic and
        optimal (Kairouz et al. 2015) composition of pure DP — labelled with the route that won.
        ``"moments"`` (PATE 2017) or ``"rdp"`` force that route alone (to reproduce published numbers).
    workers:
        Threads for the sum over queries (default 1; see :func:`laplace_total_log_moments`).

    Returns
    -------
    AccountingResult with statements ``[data-dependent, data-independent]`` when votes are given, else
    ``[data-independent]``; their routes are ``"data-dependent"`` and ``"data-independent"`` and the headline is the
    smaller (:func:`~dpaudit.accountants.statement.pick_headline`; on a tie the data-independent one). The
    data-dependent figure is a valid upper bound for the realised votes but is not itself private (its assumptions
    say so); ``data_independent=True`` forces the data-independent route (votes not read). ``facts`` hold q statistics and how many queries the data-dependent bound applied to.
    """
    owner = "account_pate"
    data_independent = check_bool(data_independent, "data_independent", owner)
    if fedkt_level is not None:
        return fedkt_privacy(fedkt_level, granularity if granularity is not None else "party", gamma=gamma, delta=delta,
                             votes=None if data_independent else votes, queries=queries, partitions=partitions,
                             teachers=teachers, num_parties=num_parties, z=z, orders=orders, conversion=conversion,
                             consistent_voting=consistent_voting)
    gamma = check_float(gamma, "gamma", owner, low=0.0, low_open=True)
    delta = check_probability(delta, "delta", owner)
    sensitivity = check_float(sensitivity, "sensitivity", owner, low=0.0, low_open=True)
    data_independent = check_bool(data_independent, "data_independent", owner)
    conversion = check_choice(conversion, "conversion", owner, ("best", "moments", "rdp"))
    grid = _resolve_orders(orders, conversion, owner)
    v = None
    if votes is not None and not data_independent:
        v = as_votes(votes, owner)
    if queries is None:
        if votes is None:
            raise ParameterError(f"{owner} needs 'votes' or 'queries' (the number of queries). Got neither.")
        queries = (v if v is not None else as_votes(votes, owner)).shape[0]
    queries = check_int(queries, "queries", owner, low=1)
    if v is not None and queries != v.shape[0]:
        raise ParameterError(f"The 'queries' parameter of {owner} must equal the number of vote rows ({v.shape[0]}). Got {queries} instead.")
    eps_q = _query_epsilon(sensitivity, gamma, owner)
    return _result(v, gamma=gamma, delta=delta, eps_q=eps_q, queries=queries, grid=grid, conversion=conversion,
                   workers=check_int(workers, "workers", owner, low=1, high=64), mechanism="pate", relation="replace-one record (one teacher's vote changes)",
                   parameters={"gamma": gamma, "delta": delta, "sensitivity": sensitivity, "queries": queries,
                               "conversion": conversion, "orders": grid.tolist(), "data_independent": v is None},
                   extra_assumptions=(), details={"eps_query": eps_q}, extend=orders is None)


def _query_epsilon(factor: float, gamma: float, owner: str) -> float:
    """eps_query = factor * gamma, or a range error naming 'gamma' when it overflows."""
    eps_q = factor * gamma
    if not math.isfinite(eps_q):
        raise ParameterError(f"The 'gamma' parameter of {owner} is out of the supported range: the per-query epsilon "
                             f"{factor:g} * gamma must be finite. Got gamma={gamma!r} instead.")
    return eps_q


def _rdp_of(v, gamma: float, eps_q: float, queries: int):
    """The RDP route's curve at any Rényi orders: data-independent (v None) or summed over the vote blocks."""
    def rdp_of(a: np.ndarray) -> np.ndarray:
        a = np.asarray(a, dtype=np.float64)
        if v is None:
            return data_independent_log_moments(eps_q, queries, a - 1.0) / (a - 1.0)
        blocks = [v] if isinstance(v, np.ndarray) else list(v)
        total = sum(laplace_total_log_moments(b, gamma, a - 1.0, sensitivity=eps_q / gamma) for b in blocks)
        return np.asarray(total) / (a - 1.0)
    return rdp_of


def _extend_rdp_routes(figs: list, routes: list, rdp_of, delta: float, notes: list[str]) -> list:
    """Where an RDP route's best order sits at its grid's edge, extend the grid past it (search_rdp_orders)."""
    out = list(figs)
    for k, (conv, g) in enumerate(routes):
        eps, order, method = out[k]
        if conv != "rdp" or order is None or order not in (float(g.min()), float(g.max())):
            continue
        found = search_rdp_orders(rdp_of, g, delta)
        if found.epsilon <= eps:
            out[k] = (found.epsilon, found.order, method)
            if found.note():
                notes.append(found.note())
    return out


def _result(v, *, gamma, delta, eps_q, queries, grid, conversion, mechanism, relation, parameters, extra_assumptions,
            details, label_prefix: str = "", data_dependent_forced: bool = False, workers: int = 1,
            extend: bool = True) -> AccountingResult:
    routes = _routes(grid, conversion)
    dd, di = _laplace_figures(v, gamma=gamma, delta=delta, eps_query=eps_q, queries=queries, routes=routes, workers=workers)
    notes: list[str] = []
    if extend:  # default grids only: a grid the caller chose is used as it is
        di = _extend_rdp_routes(di, routes, _rdp_of(None, gamma, eps_q, queries), delta, notes)
        if dd is not None:
            dd = (_extend_rdp_routes(dd[0], routes, _rdp_of(v, gamma, eps_q, queries), delta, notes), dd[1])
    extra_assumptions = tuple(extra_assumptions) + tuple(dict.fromkeys(notes))
    grids = {("moments (PATE 2017)" if conv == "moments" else "rdp"): g for conv, g in routes}
    what = {"moments (PATE 2017)": "moment order", "rdp": "Rényi order"}
    di_all = list(di) + (_pure_routes(eps_q, queries, delta) if conversion == "best" else [])
    (di_eps, di_order, di_method), di_table = _best(di_all)
    why = (f" Smallest of the valid routes ({', '.join(f'{k}: {e:.6g}' for k, e in di_table.items())}): {di_method} reported."
           if len(di_table) > 1 else "")
    di_stmt = PrivacyStatement(di_eps, delta, di_method, order=di_order,
                               assumptions=_assumptions(data_dependent_forced, relation) + tuple(extra_assumptions) + ((why.strip(),) if why else ()),
                               label=f"{label_prefix}data-independent, {queries} queries",
                               data_dependent=data_dependent_forced, details={**details, "routes": di_table},
                               route=ROUTE_DATA_INDEPENDENT)
    warnings_: list[str] = []
    # PATE's own noisy max: the certified lower bound of an explicit pair of vote histograms, beside the
    # data-independent route (the data-dependent figure is about the realised votes: the pair does not bound it)
    lower = None
    if mechanism == "pate" and not data_dependent_forced:
        lower = noisy_max_lower_bound(gamma=gamma, sensitivity=eps_q / gamma, queries=queries, delta=delta)
        lower = dataclasses.replace(lower, routes=(ROUTE_DATA_INDEPENDENT,))
    if dd is None:
        if di_method in grids:
            warnings_ += edge_warning(grids[di_method], di_order, what[di_method])
        return AccountingResult(mechanism, (di_stmt,), None, parameters, {"eps_query": eps_q, "num_queries": queries},
                                tuple(warnings_), lower_bound=lower)
    dd_figs, facts = dd
    (dd_eps, dd_order, dd_method), dd_table = _best(list(dd_figs) + di_all)
    if dd_eps >= di_eps:  # on a tie the data-independent figure (it does not look at the votes)
        dd_eps, dd_order, dd_method = di_eps, di_order, di_method
    why = (f"Smallest of the valid routes ({', '.join(f'{k}: {e:.6g}' for k, e in dd_table.items())}; data-dependent "
           f"and data-independent): {dd_method} reported." if len(dd_table) > 1 else "")
    n_dd, n_q = facts["data_dependent_queries"], facts["num_queries"]
    coverage = () if n_dd == n_q else (
        f"The data-dependent bound could not be used for {n_q - n_dd} of {n_q} queries (q >= 1/(exp(eps_query)+1)); "
        "those queries are charged their data-independent cost." if n_dd else
        "The data-dependent bound could not be used for any query (q >= 1/(exp(eps_query)+1) everywhere): this figure "
        "is the data-independent one.",)
    dd_stmt = PrivacyStatement(dd_eps, delta, dd_method, order=dd_order,
                               assumptions=_assumptions(True, relation) + tuple(extra_assumptions) + ((why,) if why else ()) + coverage,
                               label=f"{label_prefix}data-dependent, {facts['num_queries']} queries",
                               data_dependent=True, details={**details, "q_max": facts["q_max"],
                                                             "routes": {f"data-dependent {k}": e for k, e in
                                                                        ((f[2], f[0]) for f in dd_figs)}},
                               route=ROUTE_DATA_DEPENDENT)
    if dd_method in grids:
        warnings_ += edge_warning(grids[dd_method], dd_order, what[dd_method])
    if facts["data_dependent_queries"] < facts["num_queries"]:
        warnings_.append(f"The data-dependent bound did not apply to {facts['num_queries'] - facts['data_dependent_queries']} "
                         f"of {facts['num_queries']} queries (q >= 1/(exp(eps_query)+1)); the data-independent bound was used for them.")
    # the headline rule (pick_headline): the smaller; on a tie (the data-dependent analysis gained nothing) the
    # data-independent statement, which does not look at the votes
    return AccountingResult(mechanism, (dd_stmt, di_stmt), None, parameters, facts, tuple(warnings_), lower_bound=lower)


# --------------------------------------------------------------------------------------------------
# FedKT (Li, He, Song; paper 001)
# --------------------------------------------------------------------------------------------------


def one_switch_flips(votes: Any) -> np.ndarray:
    """Per query: whether ONE teacher changing its vote can change the plurality answer ``argmax`` (ties go to the
    lowest class index, as ``np.argmax`` and the student's aggregation do). Shape (queries,), bool.

    Exact rule. Let w be the winner and g_c = n_w - n_c. The best switch for a class c to take over moves a vote
    from w to c (both counts move by 1): c then wins iff g_c < 2, or g_c = 2 and c < w (the tie goes to c). Moving
    a vote from a third class to c only changes n_c by 1, which never does better. No teacher votes for w when
    n_w = 0 (an empty histogram), and then nothing can flip. Checked by brute force over small vote tables in
    the tests.
    """
    v = validated_votes(votes, "one_switch_flips")
    w = np.argmax(v, axis=1)
    rows = np.arange(v.shape[0])
    top = v[rows, w]
    gap = top[:, None] - v
    cls = np.arange(v.shape[1])[None, :]
    other = cls != w[:, None]
    flips = other & ((gap < 2) | ((gap == 2) & (cls < w[:, None])))
    return np.any(flips, axis=1) & (top >= 1)


def fedkt_z(teacher_votes: Sequence[Sequence[Any]]) -> int:
    """FedKT's z (paper 001, Appendix A.3, Theorem 8): max over parties of the number of partitions in which ONE
    teacher's changed vote (one example of the party's data changes one teacher) can change the student's label on
    some query, under the aggregation's tie-breaking (lowest class index; :func:`one_switch_flips`).

    ``teacher_votes[i][p]`` is the (queries x classes) teacher-vote array of party i, partition p.
    z is computed from private data: a figure that uses it is not itself differentially private.
    (Counting only partitions with a top-two gap <= 1 undercounts: [1, 3, 1] has gap 2 but one switch gives
    [2, 2, 1], which the tie sends to class 0.)
    """
    if not isinstance(teacher_votes, (list, tuple)) or not teacher_votes:
        raise ParameterError("The 'teacher_votes' parameter of fedkt_z must be a non-empty list (parties) of lists (partitions) of vote arrays.")
    z = 0
    for party in teacher_votes:
        parts = [party] if isinstance(party, np.ndarray) else list(party)
        zi = sum(int(np.any(one_switch_flips(as_votes(p, "fedkt_z", "teacher_votes")))) for p in parts)
        z = max(z, zi)
    return z


_FEDKT_CASES = {
    ("L1", "party"): ("Theorems 1-2", "replace one party's whole dataset (party-level)"),
    ("L1", "example"): ("Theorem 8", "replace-one example of the union of the parties' data (example-level)"),
    ("L2", "party"): ("Theorems 9-10", "replace one party's whole dataset (party-level)"),
    ("L2", "example"): ("Theorem 3 (with Theorem 4: parallel composition)", "replace-one example of one party's data (example-level)"),
}


def _split_parties(votes: Any, owner: str) -> list[list[np.ndarray]]:
    """votes for L2 -> [[partition arrays] per party]."""
    if isinstance(votes, np.ndarray) and votes.ndim == 2:
        return [[as_votes(votes, owner)]]
    if not isinstance(votes, (list, tuple)) or not votes:
        raise ParameterError(f"The 'votes' parameter of {owner} must be an array (queries x classes) or a list over parties "
                             "of arrays or of lists of arrays (one per partition).")
    out = []
    for party in votes:
        if isinstance(party, (list, tuple)) and party and not np.isscalar(party[0]) and np.ndim(party[0]) == 2:
            out.append([as_votes(p, owner) for p in party])
        else:
            out.append([as_votes(party, owner)])
    return out


@quiet_overflow
def fedkt_privacy(level: str, granularity: str = "party", *, gamma: float, delta: float, votes: Any = None,
                  queries: int | None = None, partitions: int | None = None, teachers: int | None = None,
                  num_parties: int | None = None, z: int | None = None, orders: Any = None, conversion: str = "best",
                  consistent_voting: bool = True) -> AccountingResult:
    """FedKT's privacy (Li, He, Song, "Practical one-shot federated learning for cross-silo setting", IJCAI 2021;
    paper 001, Section 4 and Appendix A): PATE's Laplace noisy max with eps_query = 2*k*gamma.

    ========  ===========  ================================  =========================================
    level     granularity  k                                 where
    ========  ===========  ================================  =========================================
    L1        party        s (partitions)                    Theorems 1-2: one party moves s student votes
    L1        example      z (Theorem 8) — or s under        Theorem 8 (no consistent voting); with consistent
                           consistent voting                 voting a flipped student can move s votes (A.3)
    L2        party        t (teachers per partition),       Theorems 9-10 per partition; the party's s partitions
                           composed over the s partitions    all hold its data, so their answers compose
    L2        example      1, composed over the s partitions Theorem 3 per partition; every partition divides
                                                             the party's whole data (paper 001, Section 3.1), so
                                                             one example is in one teacher of each partition and
                                                             the s partitions' answers compose
    ========  ===========  ================================  =========================================

    L1 noise is added at the server on the students' votes (``votes``: queries x classes). L2 noise is added in
    every partition of every party on its teachers' votes; ``votes`` is then a list over parties, each an array
    (one partition) or a list of arrays (one per partition). For L2 the final model's epsilon is the max over
    parties (parallel composition over disjoint data).

    Without votes, ``queries`` (per partition for L2, at the server for L1) gives the data-independent figure;
    L2 party-level then needs ``partitions``.
    """
    owner = "fedkt_privacy"
    level = check_choice(level, "level", owner, ("L1", "L2"))
    granularity = check_choice(granularity, "granularity", owner, ("party", "example"))
    gamma = check_float(gamma, "gamma", owner, low=0.0, low_open=True)
    delta = check_probability(delta, "delta", owner)
    conversion = check_choice(conversion, "conversion", owner, ("best", "moments", "rdp"))
    consistent_voting = check_bool(consistent_voting, "consistent_voting", owner)
    grid = _resolve_orders(orders, conversion, owner)
    theorem, relation = _FEDKT_CASES[(level, granularity)]
    extra: list[str] = [f"FedKT-{level}, {granularity}-level (paper 001, {theorem})."]
    data_dep_forced = False
    s = None if partitions is None else check_int(partitions, "partitions", owner, low=1)
    t = None if teachers is None else check_int(teachers, "teachers", owner, low=1)
    if num_parties is not None:
        num_parties = check_int(num_parties, "num_parties", owner, low=1)

    if level == "L1":
        if granularity == "party" or consistent_voting:
            if s is None:
                raise ParameterError(f"The 'partitions' parameter of {owner} must be an int >= 1 for FedKT-L1 ({granularity}-level). Got None instead.")
            k = s
            if granularity == "example":
                theorem = "Theorem 8 does not apply under consistent voting (Appendix A.3): party-level k = s used"
                extra = [f"FedKT-L1, example-level under consistent voting: a flipped student can move s votes, so the party-level bound (Theorems 1-2) is used."]
        else:
            if z is None:
                raise ParameterError(f"The 'z' parameter of {owner} must be an int >= 0 for FedKT-L1 example-level without consistent voting "
                                     "(compute it with fedkt_z). Got None instead.")
            z = check_int(z, "z", owner, low=0)
            k = max(z, 1)
            data_dep_forced = True
            extra.append(f"z = {z} is computed from the parties' private teacher votes (Theorem 8): this figure is data-dependent "
                         "and not itself differentially private." + (" z = 0 was raised to 1 (conservative)." if z == 0 else ""))
        v = None if votes is None else as_votes(votes, owner)
        nq = v.shape[0] if v is not None else (None if queries is None else check_int(queries, "queries", owner, low=1))
        if nq is None:
            raise ParameterError(f"{owner} needs 'votes' or 'queries'. Got neither.")
        eps_q = _query_epsilon(2.0 * k, gamma, owner)
        details = {"k": k, "eps_query": eps_q, "theorem": theorem}
        res = _result(v, gamma=gamma, delta=delta, eps_q=eps_q, queries=nq, grid=grid, conversion=conversion,
                      mechanism="fedkt", relation=relation,
                      parameters={"level": level, "granularity": granularity, "gamma": gamma, "delta": delta, "partitions": s,
                                  "z": z, "queries": nq, "conversion": conversion, "orders": grid.tolist(),
                                  "consistent_voting": consistent_voting},
                      extra_assumptions=extra, details=details, label_prefix=f"FedKT-{level} {granularity}-level, ", extend=orders is None,
                      data_dependent_forced=data_dep_forced)
        return res

    # ---- L2: noise per partition at each party; parallel composition over parties
    if granularity == "party":
        if t is None:
            raise ParameterError(f"The 'teachers' parameter of {owner} must be an int >= 1 for FedKT-L2 party-level. Got None instead.")
        k = t
    else:
        k = 1
    eps_q = _query_epsilon(2.0 * k, gamma, owner)
    details = {"k": k, "eps_query": eps_q, "theorem": theorem}
    params = {"level": level, "granularity": granularity, "gamma": gamma, "delta": delta, "partitions": s, "teachers": t,
              "num_parties": num_parties, "conversion": conversion, "orders": grid.tolist()}
    prefix = f"FedKT-{level} {granularity}-level, "
    if votes is None:
        if queries is None:
            raise ParameterError(f"{owner} needs 'votes' or 'queries' (per partition). Got neither.")
        nq = check_int(queries, "queries", owner, low=1)
        if s is None:
            raise ParameterError(f"The 'partitions' parameter of {owner} must be an int >= 1 for FedKT-L2. Got None instead.")
        # every partition divides the party's whole data: one party (party-level) or one example (example-level)
        # touches all s partitions, so their answers compose
        nq_total = nq * s
        extra.append("Parallel composition over parties (disjoint data): the final model's epsilon is the max over parties.")
        return _result(None, gamma=gamma, delta=delta, eps_q=eps_q, queries=nq_total, grid=grid, conversion=conversion,
                       mechanism="fedkt", relation=relation, parameters={**params, "queries": nq}, extra_assumptions=extra,
                       extend=orders is None,
                       details=details, label_prefix=prefix)
    parties = _split_parties(votes, owner)
    per_party: list[AccountingResult] = []
    for blocks in parties:
        # party- and example-level alike: every partition holds the party's whole data, so all its partitions'
        # answers compose (an example is in one teacher of each partition)
        nq_total = sum(b.shape[0] for b in blocks)
        per_party.append(_result(blocks, gamma=gamma, delta=delta, eps_q=eps_q, queries=nq_total, grid=grid,
                                 conversion=conversion, mechanism="fedkt", relation=relation, parameters=params,
                                 extra_assumptions=extra, details=details, label_prefix=prefix, extend=orders is None))
    worst_i = int(np.argmax([r.epsilon for r in per_party]))
    worst = per_party[worst_i]
    note = ("Parallel composition over parties (disjoint data): the final model's epsilon is the max over "
            f"{len(per_party)} parties (party {worst_i} attains it)."
            + " Within a party, the answers of all its partitions compose (every partition divides the party's whole data).")
    stmts = tuple(dataclasses.replace(s_, assumptions=s_.assumptions + (note,)) for s_ in worst.statements)
    facts = dict(worst.facts)
    facts["epsilon_per_party"] = [r.epsilon for r in per_party]
    facts["worst_party"] = worst_i
    return AccountingResult("fedkt", stmts, None, params, facts, worst.warnings)


# --------------------------------------------------------------------------------------------------
# Votes files
# --------------------------------------------------------------------------------------------------


def load_votes(path: str | os.PathLike) -> np.ndarray:
    """Read a vote matrix (queries x classes) from ``.npy`` (no pickles) or ``.csv`` (comma-separated numbers,
    an optional non-numeric header line is skipped).

    Raises :class:`~dpaudit.errors.DataError` for a missing or empty file, a wrong shape, fewer than 2 classes,
    or negative / non-finite counts. Rows may have different totals (consistent voting drops parties).
    """
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".npy", ".csv"):
        raise DataError(f"The votes file {str(p)!r} must end in .npy or .csv. Got {suffix or 'no suffix'!r} instead.")
    what = "the votes file"
    check_input_file(p, what)  # stat first: missing, empty, FIFO or device files never get opened
    if suffix == ".npy":
        arr = load_npy_file(p, what, kinds="biuf")
    else:
        text = read_input_text(p, what).strip().splitlines()
        rows = [r for r in (line.strip() for line in text) if r]
        if rows:
            try:
                [float(x) for x in rows[0].split(",")]
            except ValueError:
                rows = rows[1:]  # header
        if not rows:
            raise DataError(f"The votes file {str(p)!r} has no data rows.")
        try:
            parsed = [[float(x) for x in r.split(",")] for r in rows]
        except ValueError:
            raise DataError(f"The votes file {str(p)!r} must hold comma-separated numbers only.") from None
        widths = {len(r) for r in parsed}
        if len(widths) != 1:
            raise DataError(f"The votes file {str(p)!r} has rows of different lengths {sorted(widths)}; every row needs one count per class.")
        arr = np.array(parsed, dtype=np.float64)
    if arr.dtype.kind not in "biuf":
        raise DataError(f"The votes file {str(p)!r} must hold numbers. Got dtype {arr.dtype} instead.")
    if arr.ndim != 2 or arr.shape[0] < 1:
        raise DataError(f"The votes in {str(p)!r} must be a 2-D array (queries x classes). Got shape {arr.shape} instead.")
    try:
        return as_votes(arr, f"votes file {str(p)!r}")
    except ParameterError as exc:
        raise DataError(str(exc).replace("The 'votes' parameter of ", "The ")) from None

"""Local DP of PrivateKT's K-label C-ary randomized response, its debiasing estimator, composition over
rounds, and amplification by shuffling (a *central* guarantee).

Notation. A client reports ``K`` labels, each through C-ary randomized response with keep probability
:math:`\\beta`: the true class is reported with probability :math:`a = \\beta + (1-\\beta)/C`, every
other class with :math:`b = (1-\\beta)/C`. One label is :math:`L`-LDP with
:math:`L = \\log(a/b) = \\log(1 + C\\beta/(1-\\beta))`; PrivateKT (Qi et al., Nature Communications 2023,
Lemma 1) sets :math:`L = \\epsilon/K` so the report of K labels is :math:`\\epsilon`-LDP.

References
----------
- Qi et al., "Differentially private knowledge transfer for federated learning", Nature Communications 14
  (2023): Lemma 1 (beta), Eq. (3) (unbiased aggregation).
- Mironov, "Rényi differential privacy", CSF 2017 (composition, conversion).
- Bun, Steinke, "Concentrated differential privacy", TCC 2016, Prop. 3.3 (pure eps-DP implies
  (alpha, alpha eps^2/2)-RDP).
- Feldman, McMillan, Talwar, "Hiding among the clones: a simple and nearly optimal analysis of privacy
  amplification by shuffling", FOCS 2021 (arXiv:2012.12803): Theorem 3.1 (closed form) and the numerical
  bound from the dominating pair of Theorem 3.2 / Section 4.
"""

from __future__ import annotations

import math
import warnings
import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy import special, stats

from dpaudit._format import fmt_number
from dpaudit.accountants.base import register_rdp
from dpaudit.accountants._common import FFT_DELTA_ALLOWANCE, MAX_FFT_COMPOSITIONS, quiet_overflow
from dpaudit.accountants.events import RandomizedResponse, rr_epsilon_from_keep_probability, rr_keep_probability
from dpaudit.accountants.order_search import search_rdp_orders
from dpaudit.accountants.pairs import randomized_response_lower_bound
from dpaudit.accountants.rdp import DEFAULT_ORDERS
from dpaudit.accountants.statement import AccountingResult, PrivacyStatement
from dpaudit.errors import ParameterError, check_float, check_int, check_probability

__all__ = [
    "rdp_randomized_response",
    "randomized_response_pld_epsilon",
    "debias",
    "debias_reports",
    "debias_variance",
    "debias_variance_bound",
    "ShuffleBound",
    "shuffle_closed_form",
    "shuffle_delta",
    "shuffle_numerical",
    "shuffle_pld",
    "account_ldp",
]

#: Largest number of users the shuffled figures support (their numerical bound enumerates clone counts).
MAX_SHUFFLE_USERS = 10_000_000
#: Largest local epsilon the shuffled figures support (e^eps0 must be a finite float).
MAX_SHUFFLE_EPSILON = 700.0

LDP_ASSUMPTION = (
    "Local DP: each report is protected against the server and anyone who sees it; neighbouring inputs are any "
    "two values of one client's data (all K labels may change)."
)


# --------------------------------------------------------------------------------------------------
# RDP of C-ary randomized response
# --------------------------------------------------------------------------------------------------


@quiet_overflow
def _log_expm1(z: np.ndarray) -> np.ndarray:
    """log(e^z - 1) for z > 0, accurate for small z and without overflow for large z."""
    z = np.asarray(z, dtype=np.float64)
    big = z > 1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(big, z + np.log(-np.expm1(-np.where(big, z, 1.0))), np.log(np.expm1(np.where(big, 1.0, z))))


def rdp_randomized_response(label_epsilon: float, num_classes: int, orders: Any) -> np.ndarray:
    """RDP of ONE label of C-ary randomized response with per-label epsilon :math:`L`, at each order.

    For inputs x != x' the output distributions are :math:`P = (a, b, \\dots, b)` and :math:`Q = (b, a, b, \\dots)`
    with :math:`a/b = e^L` and :math:`a + (C-1)b = 1`, so (closed form, in log space)

    .. math:: D_\\alpha(P\\|Q) = \\frac{1}{\\alpha-1}\\Big[\\log\\big(e^{\\alpha L} + e^{(1-\\alpha)L} + C - 2\\big)
              - \\log\\big(e^{L} + C - 1\\big)\\Big].

    This equals dp_accounting's REPLACE_ONE randomized-response RDP with noise parameter
    :math:`p = 1 - \\beta`. As a pure L-DP mechanism the value never exceeds
    :math:`\\min(L, \\alpha L^2/2)` (Bun & Steinke 2016, Prop. 3.3); the result is clipped there against
    rounding. ``orders`` may contain ``inf`` (then the value is ``L``).
    """
    owner = "rdp_randomized_response"
    eps = check_float(label_epsilon, "label_epsilon", owner, low=0.0, low_open=True, allow_inf=True)
    c = check_int(num_classes, "num_classes", owner, low=2)
    a = np.asarray(orders, dtype=np.float64)
    if np.any(~(a > 1.0)):
        raise ParameterError(f"The 'orders' parameter of {owner} must hold floats > 1. Got {a.min()} instead.")
    if math.isinf(eps):
        return np.full(a.shape, np.inf)
    if eps > 700.0:  # e^{alpha L} overflows; a pure L-DP label has RDP <= L at every order (Mironov 2017, Prop. 3)
        return np.full(a.shape, eps)
    finite = np.isfinite(a)
    af = np.where(finite, a, 2.0)
    # The bracket is log(1 + D / (e^L + C - 1)) with D = e^{aL} + e^{(1-a)L} - e^L - 1 = expm1(x) e^{-x} expm1(L + x),
    # x = (a - 1) L > 0: a product of positive factors, so no cancellation near a = 1 (subtracting the two logs
    # lost ~1e-12 there and could fall below the exact value); log D is formed in log space against overflow.
    x = (af - 1.0) * eps
    log_d = _log_expm1(x) - x + _log_expm1(eps + x)
    log_ratio = log_d - np.logaddexp(eps, math.log(c - 1))
    rdp = np.logaddexp(0.0, log_ratio) / (af - 1.0)
    rdp = np.where(finite, rdp, eps)
    cap = np.minimum(eps, np.where(finite, af, np.inf) * eps * eps / 2.0)
    return np.clip(rdp, 0.0, cap)


def randomized_response_pld_epsilon(label_epsilon: float, num_classes: int, compositions: int, delta: float) -> float:
    r"""The epsilon at ``delta`` of ``compositions`` labels of C-ary randomized response with per-label epsilon L, each
    of which may change (replace-one), from the mechanism's own privacy-loss distribution: exact up to float error.

    Two inputs x != x' give :math:`P = (a, b, \dots, b)` and :math:`Q = (b, a, b, \dots)`, :math:`a/b = e^L`,
    :math:`a + (C-1)b = 1`, for *every* pair (the worst case is every pair), so the loss under P is +L with
    probability a, -L with probability b and 0 otherwise: a three-point lattice, and the composition of n labels is the
    lattice's n-fold convolution. It is composed by FFT (dp_accounting's ``DensePLDPmf``, pessimistic tail truncation
    into the infinite-loss mass) on the grid :math:`L(1 + 10^{-12})`, so every loss is rounded *up*; the epsilon is read
    at ``delta - 1e-12`` (FFT round-off). The certified lower bound of the same pair
    (:func:`~dpaudit.accountants.pairs.randomized_response_lower_bound`) rounds the other way: the two agree to about
    1e-9 relative."""
    owner = "randomized_response_pld_epsilon"
    eps = check_float(label_epsilon, "label_epsilon", owner, low=0.0, low_open=True)
    c = check_int(num_classes, "num_classes", owner, low=2)
    n = check_int(compositions, "compositions", owner, low=1, high=MAX_FFT_COMPOSITIONS)
    delta = check_probability(delta, "delta", owner)
    if delta <= 2.0 * FFT_DELTA_ALLOWANCE:
        raise ParameterError(f"The 'delta' parameter of {owner} must be above {2.0 * FFT_DELTA_ALLOWANCE:g} (the FFT "
                             f"round-off allowance). Got {delta!r} instead.")
    if eps > 700.0:
        return n * eps
    log_den = float(np.logaddexp(eps, math.log(c - 1)))
    a, b = math.exp(eps - log_den), math.exp(-log_den)
    probs = np.array([b, max(0.0, 1.0 - a - b), a])
    pmf = pld_pmf.DensePLDPmf(eps * (1.0 + 1e-12), -1, probs, 0.0, True)
    with np.errstate(all="ignore"):
        if n > 1:
            pmf = pmf.self_compose(n)
        out = float(pmf.get_epsilon_for_delta(delta - FFT_DELTA_ALLOWANCE))
    if math.isnan(out):
        raise ParameterError(f"{owner}: dp_accounting returned NaN (label_epsilon={eps!r}, compositions={n}).")
    return min(max(out, 0.0), n * eps)


@register_rdp(RandomizedResponse)
def _rdp_rr_event(event: RandomizedResponse, orders: np.ndarray) -> np.ndarray:
    # K independent labels, each L-LDP with L = eps/K, all of which may change: RDP adds over the K labels.
    return event.num_samples * rdp_randomized_response(event.sample_epsilon, event.num_classes, orders)


# --------------------------------------------------------------------------------------------------
# Unbiased aggregation (PrivateKT Eq. 3)
# --------------------------------------------------------------------------------------------------


def _check_beta_c(keep_probability: float, num_classes: int, owner: str) -> tuple[float, int]:
    return (check_probability(keep_probability, "keep_probability", owner, allow_one=True),
            check_int(num_classes, "num_classes", owner, low=2))


def debias(frequencies: Any, keep_probability: float, num_classes: int) -> np.ndarray:
    """PrivateKT's unbiased estimator (Eq. 3): :math:`\\hat y = (\\bar r - (1-\\beta)/C)/\\beta`.

    ``frequencies`` is the mean of the one-hot randomized reports, shape ``(..., C)`` (e.g. ``(K, C)`` for the
    K public samples of a round). Its expectation is :math:`\\beta \\bar y + (1-\\beta)/C`, where :math:`\\bar y`
    is the mean of the clients' true one-hot labels, so the estimate is unbiased for :math:`\\bar y`. Values
    can fall outside [0, 1]; no clipping is done (clipping would bias it).
    """
    owner = "debias"
    beta, c = _check_beta_c(keep_probability, num_classes, owner)
    f = np.asarray(frequencies, dtype=np.float64)
    if f.ndim == 0 or f.shape[-1] != c:
        raise ParameterError(f"The 'frequencies' parameter of {owner} must have a last axis of length num_classes={c}. Got shape {f.shape} instead.")
    if not np.all(np.isfinite(f)):
        raise ParameterError(f"The 'frequencies' parameter of {owner} must be finite. Got a NaN or infinite value instead.")
    return (f - (1.0 - beta) / c) / beta


def debias_reports(reports: Any, keep_probability: float, num_classes: int) -> np.ndarray:
    """Eq. (3) from raw reports: ``reports`` holds class indices of shape ``(clients, ...)`` (or one-hot
    ``(clients, ..., C)`` arrays); they are averaged over the client axis 0 and debiased."""
    owner = "debias_reports"
    beta, c = _check_beta_c(keep_probability, num_classes, owner)
    r = np.asarray(reports)
    if r.ndim == 0 or r.shape[0] < 1:
        raise ParameterError(f"The 'reports' parameter of {owner} must have at least one client (axis 0). Got shape {r.shape} instead.")
    if np.issubdtype(r.dtype, np.integer):
        if r.min() < 0 or r.max() >= c:
            raise ParameterError(f"The 'reports' parameter of {owner} must hold class indices in [0, {c - 1}]. Got {r.min()}..{r.max()} instead.")
        onehot = np.eye(c)[r]
    else:
        onehot = r.astype(np.float64)
    return debias(onehot.mean(axis=0), beta, c)


def _bernoulli_vars(beta: float, c: int) -> tuple[float, float]:
    p_true = beta + (1.0 - beta) / c
    p_other = (1.0 - beta) / c
    return p_true * (1.0 - p_true), p_other * (1.0 - p_other)


def debias_variance(true_frequencies: Any, num_reports: int, keep_probability: float, num_classes: int) -> np.ndarray:
    """Exact variance of each coordinate of :func:`debias` over ``num_reports`` independent reports.

    Coordinate j of one report is Bernoulli(:math:`\\beta y_j + (1-\\beta)/C`); with :math:`f_j` the fraction of
    the n clients whose true class is j,

    .. math:: \\operatorname{Var}\\hat y_j = \\frac{f_j\\, a(1-a) + (1-f_j)\\, b(1-b)}{n\\beta^2},
              \\quad a = \\beta + \\tfrac{1-\\beta}{C},\\; b = \\tfrac{1-\\beta}{C}.
    """
    owner = "debias_variance"
    beta, c = _check_beta_c(keep_probability, num_classes, owner)
    n = check_int(num_reports, "num_reports", owner, low=1)
    f = np.asarray(true_frequencies, dtype=np.float64)
    if np.any(~np.isfinite(f)) or np.any(f < 0) or np.any(f > 1):
        raise ParameterError(f"The 'true_frequencies' parameter of {owner} must hold values in [0, 1]. Got {f!r:.60} instead.")
    vt, vo = _bernoulli_vars(beta, c)
    den = n * beta * beta
    if den == 0:
        return np.full(np.shape(f), np.inf)
    return (f * vt + (1.0 - f) * vo) / den


def debias_variance_bound(num_reports: int, keep_probability: float, num_classes: int) -> float:
    """Largest variance of one coordinate of :func:`debias` over all true labels (the max of the two
    Bernoulli variances divided by :math:`n\\beta^2`)."""
    owner = "debias_variance_bound"
    beta, c = _check_beta_c(keep_probability, num_classes, owner)
    n = check_int(num_reports, "num_reports", owner, low=1)
    return _ratio(max(_bernoulli_vars(beta, c)), n * beta * beta)


def _ratio(num: float, den: float) -> float:
    """num / den, inf when den underflowed to 0 (a keep probability of ~1e-320 has an unbounded variance)."""
    return num / den if den > 0 else math.inf


# --------------------------------------------------------------------------------------------------
# Amplification by shuffling (Feldman, McMillan, Talwar 2021)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ShuffleBound:
    """A central (epsilon, delta) for n shuffled eps0-LDP reports, and whether the bound's conditions held.

    When ``applies`` is False, ``epsilon`` is the fallback ``eps0`` (the shuffled output is a post-processing
    of the eps0-LDP reports) and ``condition`` says what failed.
    """

    epsilon: float
    delta: float
    local_epsilon: float
    num_users: int
    method: str
    applies: bool
    condition: str


def _check_shuffle(epsilon0: float, num_users: int, delta: float, owner: str) -> tuple[float, int, float]:
    # e^eps0 must be representable (beyond 700 no amplification is possible anyway)
    return (check_float(epsilon0, "epsilon0", owner, low=0.0, high=MAX_SHUFFLE_EPSILON, low_open=True),
            check_int(num_users, "num_users", owner, low=1),
            check_probability(delta, "delta", owner))


def shuffle_closed_form(epsilon0: float, num_users: int, delta: float) -> ShuffleBound:
    """Feldman, McMillan, Talwar 2021, Theorem 3.1. For :math:`\\epsilon_0 \\le \\log(n / (16\\log(2/\\delta)))`,

    .. math:: \\epsilon = \\log\\Big(1 + \\frac{e^{\\epsilon_0}-1}{e^{\\epsilon_0}+1}
              \\Big(\\frac{8\\sqrt{e^{\\epsilon_0}\\log(4/\\delta)}}{\\sqrt n} + \\frac{8e^{\\epsilon_0}}{n}\\Big)\\Big).

    Outside that condition the bound does not apply and ``epsilon0`` is returned with ``applies=False``.
    The result is never above ``epsilon0``.
    """
    e0, n, delta = _check_shuffle(epsilon0, num_users, delta, "shuffle_closed_form")
    limit = math.log(n) - math.log(16.0) - math.log(math.log(2.0) - math.log(delta))  # no overflow for tiny delta
    cond = f"eps0 = {e0:.4g} <= log(n / (16 log(2/delta))) = {limit:.4g} (n = {n}, delta = {fmt_number(delta)})"
    if e0 > limit:
        return ShuffleBound(e0, delta, e0, n, "shuffling closed form (FMT 2021, Thm 3.1)", False, "violated: " + cond)
    ee = math.exp(e0)  # e0 <= limit < log(n): no overflow
    inner = math.tanh(e0 / 2.0) * (8.0 * math.sqrt(ee * (math.log(4.0) - math.log(delta)) / n) + 8.0 * ee / n)
    return ShuffleBound(min(e0, math.log1p(inner)), delta, e0, n, "shuffling closed form (FMT 2021, Thm 3.1)", True, cond)


def _binom_window(tail: float, n: Any, p: float) -> tuple[Any, Any]:
    """Quantiles (ppf, isf) of Bin(n, p) at ``tail``; where scipy's quantile search gives up (it warns and returns
    nan or inf), the whole support [0, n] is used instead (only wider, so the callers stay conservative)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        lo = stats.binom.ppf(tail, n, p)
        hi = stats.binom.isf(tail, n, p)
    lo = np.where(np.isfinite(lo), lo, 0.0)
    hi = np.where(np.isfinite(hi), hi, n)
    return (float(lo), float(hi)) if np.ndim(lo) == 0 else (lo, hi)


def _clone_window(epsilon0: float, n: int, tail_mass: float = 1e-15) -> tuple[np.ndarray, np.ndarray, float]:
    """Clone counts c within the central ``1 - tail_mass`` of C ~ Bin(n-1, e^{-eps0}), their pmf, and the mass
    left out (which callers count as worst case)."""
    p_clone = math.exp(-epsilon0)
    if n == 1:
        return np.zeros(1), np.ones(1), 0.0
    lo_f, hi_f = _binom_window(tail_mass / 4, n - 1, p_clone)
    lo, hi = int(lo_f), int(hi_f)
    cs = np.arange(max(lo - 1, 0), min(hi + 1, n - 1) + 1, dtype=np.float64)
    w = stats.binom.pmf(cs, n - 1, p_clone)
    return cs, w, max(0.0, 1.0 - float(w.sum()))


def shuffle_delta(epsilon0: float, num_users: int, epsilon: float) -> float:
    """Hockey-stick divergence :math:`\\sup(P - e^\\epsilon Q)` of FMT 2021's dominating pair (Theorem 3.2):
    :math:`C \\sim \\mathrm{Bin}(n-1, e^{-\\epsilon_0})`, :math:`A \\sim \\mathrm{Bin}(C, 1/2)`,
    :math:`\\Delta \\sim \\mathrm{Bern}(e^{\\epsilon_0}/(e^{\\epsilon_0}+1))`,
    :math:`P = (A+\\Delta, C-A+1-\\Delta)`, :math:`Q = (A+1-\\Delta, C-A+\\Delta)`.

    Given C = c the first coordinate :math:`t` has :math:`P(t)/Q(t)` increasing in t, so the positive part of
    :math:`P - e^\\epsilon Q` is a tail :math:`t \\ge t^*(c)`; each tail is written with binomial survival
    functions, and the best of three thresholds around the computed :math:`t^*` is taken (a threshold off by
    rounding can only lower the sum, so taking the max keeps the value an upper bound). Vectorised over c.
    By symmetry of P and Q (swap coordinates) this is also :math:`\\sup(Q - e^\\epsilon P)`.
    """
    owner = "shuffle_delta"
    e0 = check_float(epsilon0, "epsilon0", owner, low=0.0, low_open=True)
    n = check_int(num_users, "num_users", owner, low=1)
    eps = check_float(epsilon, "epsilon", owner, low=0.0)
    if eps >= e0:
        return 0.0
    if e0 < 1e-6:
        # the pair below degenerates in floating point; the shuffled output is a post-processing of one user's
        # eps0-LDP report, so delta(eps) <= (e^eps0 - e^eps) / (1 + e^eps0) <= tanh(eps0 / 2)
        return float(min(1.0, math.tanh(e0 / 2.0) * (1.0 + 1e-12)))
    c, w, dropped = _clone_window(e0, n)
    pd = 1.0 / (1.0 + math.exp(-e0))  # P(Delta = 1)
    ee = math.exp(eps)
    r_star = (ee * pd - (1.0 - pd)) / (pd - ee * (1.0 - pd))  # ratio b(t-1)/b(t) at which P/Q = e^eps
    t0 = np.ceil(r_star * (c + 1.0) / (1.0 + r_star))

    def tail(t: np.ndarray) -> np.ndarray:
        s_prev = stats.binom.sf(t - 2.0, c, 0.5)  # P(A >= t-1)
        s_here = stats.binom.sf(t - 1.0, c, 0.5)  # P(A >= t)
        p_mass = pd * s_prev + (1.0 - pd) * s_here
        q_mass = (1.0 - pd) * s_prev + pd * s_here
        return p_mass - ee * q_mass

    h = np.maximum.reduce([tail(np.clip(t0 + k, 0.0, c + 1.0)) for k in (-1.0, 0.0, 1.0)])
    h = np.maximum(h, 0.0)
    # round up: a relative 1e-12 and the float error of summing n terms
    # clone counts not enumerated contribute at most their mass; round up by a relative 1e-12 and the float error
    return float(min(1.0, np.dot(w, h) * (1.0 + 1e-12) + dropped + c.size * 1e-17))


def shuffle_numerical(epsilon0: float, num_users: int, delta: float, *, tol: float = 1e-4) -> ShuffleBound:
    """Smallest epsilon (to within ``tol``, rounded up) with :func:`shuffle_delta` <= ``delta``, by bisection on
    [0, eps0] (FMT 2021, Section 4: the numerical bound). Applies to any n >= 1 and any eps0-LDP randomizer;
    never above eps0 (``applies`` is False when no amplification is found)."""
    e0, n, delta = _check_shuffle(epsilon0, num_users, delta, "shuffle_numerical")
    tol = check_float(tol, "tol", "shuffle_numerical", low=0.0, low_open=True)
    lo, hi = 0.0, e0
    if shuffle_delta(e0, n, 0.0) <= delta:
        hi = 0.0
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if shuffle_delta(e0, n, mid) <= delta:
            hi = mid
        else:
            lo = mid
    method = "shuffling numerical (FMT 2021, Sec. 4)"
    cond = f"any eps0-LDP randomizer, n = {n} users each sending one report, eps0 = {e0:.4g}"
    return ShuffleBound(hi, delta, e0, n, method, hi < e0, cond)


def shuffle_pld(epsilon0: float, num_users: int, *, value_discretization_interval: float = 1e-4,
                tail_mass: float = 1e-15):
    """dp_accounting ``PrivacyLossDistribution`` of FMT 2021's dominating pair (P, Q), pessimistic.

    Outcomes are (c, t): c clones and first coordinate t. The privacy loss :math:`\\log P/Q` of every outcome is
    computed vectorised, rounded UP to the grid, and its P-mass accumulated. Clone counts outside the central
    ``1 - tail_mass`` of Bin(n-1, e^{-eps0}), and first coordinates outside the central ``1 - tail_mass`` of
    Bin(c, 1/2) (widened by one), are not enumerated; their P-mass goes to the infinite privacy loss, so
    divergences are over-estimated, never under-. Compose with ``.self_compose(T)`` for T shuffled rounds (each
    round, adaptively, is a post-processing of the same pair).
    """
    owner = "shuffle_pld"
    e0 = check_float(epsilon0, "epsilon0", owner, low=0.0, low_open=True)
    n = check_int(num_users, "num_users", owner, low=1)
    vdi = check_float(value_discretization_interval, "value_discretization_interval", owner, low=0.0, high=1.0, low_open=True)
    tail_mass = check_float(tail_mass, "tail_mass", owner, low=0.0, high=1e-3, low_open=True)
    cs, w, _ = _clone_window(e0, n, tail_mass)
    pd = 1.0 / (1.0 + math.exp(-e0))
    span = int(math.ceil(e0 / vdi)) + 1
    mass = np.zeros(2 * span + 1)
    enumerated = 0.0
    # first coordinate window per c: central part of Bin(c, 1/2), widened by one on each side
    b_lo, b_hi = _binom_window(tail_mass / 4, cs, 0.5)
    t_lo = np.maximum(b_lo - 1, 0).astype(np.int64)
    t_hi = np.minimum(b_hi + 2, cs + 1).astype(np.int64)
    width = int((t_hi - t_lo).max()) + 1
    rows = max(1, 2_000_000 // width)
    for s0 in range(0, cs.size, rows):
        c = cs[s0:s0 + rows, None].astype(np.float64)
        t = t_lo[s0:s0 + rows, None] + np.arange(width)[None, :]
        valid = t <= t_hi[s0:s0 + rows, None]
        t = np.where(valid, t, 0).astype(np.float64)
        # P(c, t) = w_c [pd b(t-1) + (1-pd) b(t)] with b = Bin(c, 1/2) pmf; written through b(t) (or b(t-1) at
        # t = c+1) and the ratio r = b(t-1)/b(t) = t/(c-t+1), in log space
        top = t > c
        tt = np.where(top, c, t)  # pmf index used: t, or t-1 = c at the top end
        log_b = special.gammaln(c + 1) - special.gammaln(tt + 1) - special.gammaln(c - tt + 1) - c * math.log(2.0)
        with np.errstate(divide="ignore"):
            r = np.where(top, np.inf, t / (c - t + 1.0))
            # weights of b(t) (or b(t-1) at the top end) in P and Q
            p_w = np.where(top, pd, pd * r + (1.0 - pd))
            q_w = np.where(top, 1.0 - pd, (1.0 - pd) * r + pd)
        log_w = np.log(w[s0:s0 + rows, None])
        p = np.exp(log_w + log_b + np.log(p_w)) * valid
        loss = np.log(p_w) - np.log(q_w)
        ok = valid & (p > 0)
        loss = loss[ok]
        idx = np.clip(np.ceil(loss / vdi).astype(np.int64), -span, span) + span
        mass += np.bincount(idx, weights=p[ok], minlength=mass.size)
        enumerated += float(p[ok].sum())
    infinity_mass = min(1.0, max(0.0, 1.0 - enumerated) + 1e-15)
    nz = np.flatnonzero(mass)
    rounded = {int(i - span): float(mass[i]) for i in nz}
    return pld_lib.PrivacyLossDistribution.create_from_rounded_probability(
        rounded, infinity_mass, vdi, pessimistic_estimate=True)


def _shuffled_pld_epsilon(epsilon0: float, n: int, rounds: int, delta: float) -> tuple[float, tuple[str, ...]]:
    """T rounds of FMT 2021's pair composed by dp_accounting's FFT (round-off allowance as in the PLD accountant);
    ``(inf, (reason,))`` when that route cannot be computed here."""
    if rounds > MAX_FFT_COMPOSITIONS or delta <= 2.0 * FFT_DELTA_ALLOWANCE:
        why = (f"{rounds} rounds exceed the PLD route's supported range (<= {MAX_FFT_COMPOSITIONS})" if rounds > MAX_FFT_COMPOSITIONS
               else f"delta = {fmt_number(delta)} is within the FFT round-off allowance ({fmt_number(FFT_DELTA_ALLOWANCE)})")
        return math.inf, (f"The shuffled PLD composition was not computed: {why}.",)
    try:
        with np.errstate(all="ignore"):
            pld = shuffle_pld(epsilon0, n, value_discretization_interval=1e-3).self_compose(rounds)
            return max(float(pld.get_epsilon_for_delta(delta - FFT_DELTA_ALLOWANCE)), 0.0), ()
    except (OverflowError, ValueError, ZeroDivisionError, FloatingPointError, MemoryError) as exc:
        return math.inf, (f"The shuffled PLD composition could not be computed ({type(exc).__name__}); the other bounds are used.",)


# --------------------------------------------------------------------------------------------------
# The PrivateKT summary
# --------------------------------------------------------------------------------------------------


@quiet_overflow
def account_ldp(epsilon: float, samples: int, classes: int, *, rounds: int | None = None,
                participation: float | None = None, users: int | None = None,
                delta: float | None = None) -> AccountingResult:
    """Every honest figure for PrivateKT's randomized-response reports, side by side.

    Parameters
    ----------
    epsilon:
        LDP budget of one report of ``samples`` labels (PrivateKT's :math:`\\epsilon`), > 0.
    samples:
        K, labels per report (>= 1). ``classes``: C (>= 2).
    rounds, participation:
        Number of rounds and the fraction of clients sampled per round; a client is in
        :math:`T = \\lceil \\text{rounds} \\cdot \\text{participation} \\rceil` rounds in expectation. Worst case
        (a client picked every round) is ``rounds`` and is reported too.
    users:
        Total number of clients; ``users * participation`` (rounded down) reports are shuffled per round.
    delta:
        Target delta for RDP composition and the shuffled (central) figures.

    Returns an :class:`AccountingResult` whose headline is the per-report LDP epsilon (route ``"pure LDP"``), or with
    ``rounds`` the smaller of the two routes for the client's T rounds: basic composition (``"basic"``, delta = 0) and,
    with ``delta``, RDP (``"rdp"``); on a tie the basic figure (the same epsilon at delta = 0). The per-sample, the
    worst-case (all rounds) and the shuffled (central model) figures are other quantities, shown beside it.
    """
    owner = "account_ldp"
    epsilon = check_float(epsilon, "epsilon", owner, low=0.0, low_open=True)
    k = check_int(samples, "samples", owner, low=1)
    c = check_int(classes, "classes", owner, low=2)
    if rounds is not None:
        rounds = check_int(rounds, "rounds", owner, low=1)
    if participation is not None:
        participation = check_float(participation, "participation", owner, low=0.0, high=1.0, low_open=True)
    if users is not None and epsilon > MAX_SHUFFLE_EPSILON:
        raise ParameterError(f"The 'epsilon' parameter of {owner} is out of the supported range for the shuffled figures "
                             f"('users' given): it must be <= {MAX_SHUFFLE_EPSILON:g}. Got {epsilon!r} instead.")
    if users is not None:
        # the shuffled figures enumerate the clone counts of Bin(n-1, e^-eps0): time and memory grow with n
        users = check_int(users, "users", owner, low=1, high=MAX_SHUFFLE_USERS)
    if delta is not None:
        delta = check_probability(delta, "delta", owner)
    if rounds is None and (participation is not None or users is not None):
        raise ParameterError(f"The 'rounds' parameter of {owner} is needed when 'participation' or 'users' is given. Got None instead.")

    event = RandomizedResponse(num_classes=c, num_samples=k, epsilon=epsilon)
    beta = rr_keep_probability(epsilon, k, c)
    if beta == 0.0:
        raise ParameterError(f"The 'epsilon' parameter of {owner} is out of the supported range: epsilon / samples must be "
                             f"at least about 1e-300 (the keep probability underflows to 0). Got epsilon={epsilon!r}, samples={k}.")
    facts: dict[str, Any] = {
        "beta": beta,
        "sample_epsilon": epsilon / k,
        "report_epsilon": epsilon,
        "p_report_true_class": beta + (1 - beta) / c,
        "p_report_other_class": (1 - beta) / c,
        "estimator_variance_one_report_max": debias_variance_bound(1, beta, c),
    }
    rr = f"C-ary randomized response with keep probability beta = {beta:.4g} on each of K = {k} labels (C = {c})."
    statements = [
        PrivacyStatement(epsilon / k, 0.0, "pure LDP (Lemma 1)", label="per sample (one label)",
                         assumptions=(LDP_ASSUMPTION, rr, "One label changes; the other K-1 labels are fixed.")),
        # the headline scope: one report without rounds, else the client's T rounds (routes "basic" and "rdp");
        # the other figures (per sample, worst case over all rounds, the shuffled central ones) name no route
        PrivacyStatement(epsilon, 0.0, "pure LDP (Lemma 1)", label="per report (one round)",
                         assumptions=(LDP_ASSUMPTION, rr, "One round: the K labels compose (K * eps/K)."),
                         route="pure LDP" if rounds is None else ""),
    ]
    warnings_: list[str] = []
    params = {"epsilon": epsilon, "samples": k, "classes": c, "rounds": rounds, "participation": participation,
              "users": users, "delta": delta}
    if rounds is not None:
        part = 1.0 if participation is None else participation
        t = max(1, math.ceil(rounds * part - 1e-9))
        facts["rounds_expected"] = t
        facts["rounds_worst_case"] = rounds
        tdesc = (f"A client takes part in T = ceil(rounds * participation) = ceil({rounds} * {part:g}) = {t} rounds "
                 "(the expected number under uniform sampling; a given client may be picked more often)."
                 + (f" Assumed: the client sends exactly T = {t} reports; this figure and its certified lower bound "
                    f"hold for such a client, not for one picked more often (the worst case, all {rounds} rounds, is "
                    "shown beside it)." if t != rounds else ""))
        comp = "Reports of different rounds are computed from the same client data and compose adaptively."
        statements.append(PrivacyStatement(t * epsilon, 0.0, "basic composition", label=f"client, T = {t} rounds (basic)",
                                           assumptions=(LDP_ASSUMPTION, rr, tdesc, comp), route="basic"))
        if t != rounds:
            statements.append(PrivacyStatement(rounds * epsilon, 0.0, "basic composition",
                                               label=f"client, all {rounds} rounds (basic, worst case)",
                                               assumptions=(LDP_ASSUMPTION, rr, comp, "Worst case: the client is picked in every round.")))
        local_rdp_t = None
        if delta is not None:
            rdp1 = _rdp_rr_event(event, DEFAULT_ORDERS)
            cases = [(t, f"T = {t} rounds", tdesc)]
            if rounds != t:
                cases.append((rounds, f"all {rounds} rounds, worst case", "Worst case: the client is picked in every round."))
            for tt, lab, why in cases:
                # the order grid is extended past an edge where the optimum sits (search_rdp_orders)
                def rdp_t(a: np.ndarray, tt: int = tt) -> np.ndarray:
                    return tt * _rdp_rr_event(event, a)

                found = search_rdp_orders(rdp_t, DEFAULT_ORDERS, delta, rdp=tt * rdp1)
                eps_r, order = found.epsilon, found.order
                eps_r = min(eps_r, tt * epsilon)  # never worse than basic composition (a valid bound too)
                statements.append(PrivacyStatement(
                    eps_r, delta, "rdp", order=order, label=f"client, {lab} (RDP)",
                    assumptions=(LDP_ASSUMPTION, rr, why, comp,
                                 "RDP of the report summed over rounds, converted to (eps, delta) (Canonne-Kamath-Steinke 2020)."
                                 + (" " + found.note() if found.note() else "")),
                    route="rdp" if tt == t else ""))
                if tt == t:
                    local_rdp_t = eps_r
                if tt * k <= MAX_FFT_COMPOSITIONS and delta > 2.0 * FFT_DELTA_ALLOWANCE:
                    eps_p = randomized_response_pld_epsilon(epsilon / k, c, tt * k, delta)
                    statements.append(PrivacyStatement(
                        eps_p, delta, "pld", label=f"client, {lab} (PLD)",
                        assumptions=(LDP_ASSUMPTION, rr, why, comp,
                                     "The mechanism's own privacy-loss distribution (every label of the client changes: "
                                     "the worst case of C-ary randomized response is every pair), composed over the "
                                     f"{tt * k} labels by FFT with every loss rounded up; read at delta - 1e-12."),
                        route="pld" if tt == t else ""))
                    if tt == t:
                        local_rdp_t = min(eps_p, eps_r)
        if users is not None:
            if delta is None:
                raise ParameterError(f"The 'delta' parameter of {owner} is needed for the shuffled figures (users given). Got None instead.")
            n = max(1, int(math.floor(users * part + 1e-9)))
            facts["users_per_round"] = n
            facts["estimator_variance_per_round_max"] = debias_variance_bound(n, beta, c)
            central = (
                f"CENTRAL model, not local DP: a trusted shuffler receives the n = {n} reports of a round and releases "
                "them in random order without who sent which; the server sees only the shuffled multiset. "
                "Neighbouring datasets differ in one client's data. Protects against the server, not against the shuffler.")
            closed = shuffle_closed_form(epsilon, n, delta)
            numer = shuffle_numerical(epsilon, n, delta)
            for b in (closed, numer):
                statements.append(PrivacyStatement(
                    b.epsilon, delta, b.method, label="shuffled, per round (central)",
                    assumptions=(central, ("Applies: " if b.applies else "Does not apply, fallback eps0: ") + b.condition),
                    details={"applies": b.applies}))
                if not b.applies:
                    warnings_.append(f"{b.method}: {b.condition}; the shuffled figure falls back to eps0 = {epsilon:g}.")
            eps_pld, pld_note = _shuffled_pld_epsilon(epsilon, n, t, delta)
            facts["shuffled_composed_pld_epsilon"] = eps_pld
            # basic composition of T rounds at (eps_r, delta_r) gives (T eps_r, T delta_r): each round's numerical
            # bound is taken at delta / T so that the T rounds together stay within delta
            numer_t = numer if t == 1 else shuffle_numerical(epsilon, n, delta / t)
            facts["shuffled_basic_composition_epsilon"] = t * numer_t.epsilon
            # the shuffled output is a post-processing of the local reports, so the local RDP figure bounds it too
            eps_sh = min(eps_pld, local_rdp_t if local_rdp_t is not None else math.inf, t * numer_t.epsilon)
            statements.append(PrivacyStatement(
                eps_sh, delta, "shuffling numerical + PLD composition", label=f"shuffled, T = {t} rounds (central)",
                assumptions=(central, tdesc, comp,
                             "Each round is dominated by FMT 2021's pair (P, Q) for n users; the T pairs are composed with "
                             "dp_accounting's pessimistic PLD; the smallest of that, basic composition of the per-round bound "
                             "taken at delta / T (T rounds at (eps, delta / T) give (T eps, delta)) and the local RDP figure is "
                             "reported (the shuffled output is a post-processing of the reports). Shuffling does NOT stop accumulation: the central epsilon still "
                             "grows with the number of rounds.") + pld_note))
            warnings_.append(
                "PrivateKT's claim that shuffling stops the accumulation over rounds does not hold: shuffling gives a "
                f"central (eps, delta) per round ({fmt_number(numer.epsilon)}, {fmt_number(delta)}) that still composes, to {eps_sh:.4g} over "
                f"T = {t} rounds.")
    # the certified lower bound: one client's labels all changed (replace-one at the client level), its reports of the
    # headline scope (one report, or the T rounds) composed
    reports = 1 if rounds is None else facts["rounds_expected"]
    lower = randomized_response_lower_bound(keep_probability=beta, classes=c, labels=k, reports=reports,
                                            delta=0.0 if (delta is None or rounds is None) else delta)
    lower = dataclasses.replace(lower, routes=("pure LDP",) if rounds is None else ("basic", "rdp", "pld"))
    if rounds is not None and facts["rounds_expected"] != rounds:
        lower = dataclasses.replace(lower, pair=lower.pair + f" (a client sending exactly T = {facts['rounds_expected']} "
                                    "reports, the assumption of the routes it bounds)")
    return AccountingResult("ldp (PrivateKT randomized response)", tuple(statements),  # headline: pick_headline
                            parameters=params, facts=facts, warnings=tuple(warnings_), lower_bound=lower)


"""Exact (epsilon, delta) of mechanisms that have a closed form: the Gaussian mechanism under composition, and the
optimal composition of pure epsilon-DP mechanisms.

These are the reference every numerical accountant must stay above, and the routes the PLD accountant takes
where an event has one (no discretisation, no FFT round-off).

References
----------
- Balle, Wang, "Improving the Gaussian mechanism for differential privacy", ICML 2018, Theorem 8 (exact delta(eps)).
- Dong, Roth, Su, "Gaussian differential privacy", JRSS-B 2022 (arXiv:1905.02383), Corollary 3.3: k-fold
  composition of mu_i-GDP mechanisms is sqrt(sum mu_i^2)-GDP (exact).
- Kairouz, Oh, Viswanath, "The composition theorem for differential privacy", ICML 2015, Theorem 3.3: the k-fold
  composition of eps0-DP mechanisms is dominated by k-fold binary randomized response (exact).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, special, stats

from dpaudit.errors import ParameterError, check_float, check_int, check_probability

__all__ = ["log_gaussian_delta", "gaussian_mechanism_epsilon", "gaussian_epsilon_root", "pure_composition_delta", "pure_composition_epsilon"]

#: Relative and absolute slack added to every root so that the reported epsilon sits on the conservative side.
_ROUND_UP_REL = 1e-10
_ROUND_UP_ABS = 1e-10


def log_gaussian_delta(eps: float, mu: float) -> float:
    """log delta(eps) of the mu-GDP pair N(0,1) vs N(mu,1) (Balle & Wang 2018, Theorem 8):
    delta = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu), in log space (no overflow for any finite eps, mu > 0).

    With t = eps/mu - mu/2 the second term is exactly exp(-t^2/2) erfcx((t + mu)/sqrt 2)/2 (erfcx the scaled
    complementary error function): ``eps + log_ndtr(-mu/2 - eps/mu)`` would cancel two numbers of size mu^2/2 (at
    mu = 1.4e9 it lost ~100 in absolute terms and put the root below the exact epsilon)."""
    t = eps / mu - mu / 2
    a = float(special.log_ndtr(-t))
    with np.errstate(divide="ignore"):
        b = -0.5 * t * t + math.log(0.5 * float(special.erfcx((t + mu) / math.sqrt(2.0))))
    if b >= a:
        return -math.inf
    return a + math.log1p(-math.exp(b - a))


def gaussian_mechanism_epsilon(mu: float, delta: float) -> float:
    """Smallest epsilon at which the Gaussian mechanism with ``mu`` = sensitivity / sigma is (epsilon, delta)-DP.

    Exact (Balle & Wang 2018, Theorem 8); k-fold composition is the Gaussian mechanism with ``mu * sqrt(k)``
    (Dong, Roth & Su, Corollary 3.3). Rounded up past the root finder's tolerance; ``delta = 0`` gives inf.
    Finite for every finite ``mu`` (for huge mu, epsilon ~ mu^2/2).
    """
    mu = check_float(mu, "mu", "gaussian_mechanism_epsilon", low=0.0, low_open=True)
    delta = check_float(delta, "delta", "gaussian_mechanism_epsilon", low=0.0, high=1.0, high_open=True)
    if delta == 0.0:
        return math.inf
    root = gaussian_epsilon_root(mu, delta)
    return root if root in (0.0, math.inf) else root * (1 + _ROUND_UP_REL) + _ROUND_UP_ABS


def gaussian_epsilon_root(mu: float, delta: float) -> float:
    """The epsilon at which the mu-Gaussian trade-off curve has ``delta`` (0 < delta < 1; mu > 0), to the root
    finder's tolerance (1e-12): 0 when delta(0) <= delta already, inf when no epsilon below 1e300 reaches it. Callers
    round it up (an upper bound) or down (a lower bound) past the tolerance."""
    log_d = math.log(delta)
    if log_gaussian_delta(0.0, mu) <= log_d:
        return 0.0
    hi = 1.0
    while log_gaussian_delta(hi, mu) > log_d:
        hi *= 2.0
        if hi > 1e300:
            return math.inf
    return float(optimize.brentq(lambda e: log_gaussian_delta(e, mu) - log_d, 0.0, hi, xtol=1e-12, rtol=1e-12))


def _rr_window(k: int, p: float, tail: float = 1e-300) -> tuple[np.ndarray, float]:
    """j values of Bin(k, p) outside of which the mass is below ``tail`` (on each side), and that mass bound."""
    if k > 10**15:
        raise ParameterError(f"Exact pure-DP composition of {k} mechanisms is out of the supported range (<= 1e15).")
    lo = int(stats.binom.ppf(tail, k, p))
    hi = int(stats.binom.isf(tail, k, p))
    lo, hi = max(lo - 2, 0), min(hi + 2, k)
    if hi - lo > 5_000_000:
        raise ParameterError(f"Exact pure-DP composition of {k} mechanisms is out of the supported range "
                             "(more than 5e6 terms); use the RDP route.")
    return np.arange(lo, hi + 1, dtype=np.float64), 2.0 * tail


def pure_composition_delta(eps0: float, k: int, eps: float) -> float:
    """delta(eps) of the k-fold adaptive composition of eps0-DP mechanisms (exact; Kairouz, Oh, Viswanath 2015).

    The dominating pair is k-fold binary randomized response: with j ~ Bin(k, 1/(1+e^{eps0})) "flips", the privacy
    loss is eps0 (k - 2j), and delta(eps) = E[(1 - e^{eps - loss})_+]. Summed in log space over the central window
    of j (the mass left out, < 1e-299, is added), rounded up by a relative 1e-12.
    """
    owner = "pure_composition_delta"
    eps0 = check_float(eps0, "eps0", owner, low=0.0, low_open=True)
    k = check_int(k, "k", owner, low=1)
    eps = check_float(eps, "eps", owner, low=0.0)
    if eps >= k * eps0:
        return 0.0
    p = 1.0 / (1.0 + math.exp(eps0)) if eps0 < 700 else 0.0
    if p == 0.0:
        return float(-math.expm1(eps - k * eps0))  # j = 0 with certainty
    j, dropped = _rr_window(k, p)
    loss = eps0 * (k - 2.0 * j)
    use = loss > eps
    if not np.any(use):
        return 0.0
    lp = stats.binom.logpmf(j[use], k, p)
    with np.errstate(divide="ignore"):
        terms = lp + np.log(-np.expm1(eps - loss[use]))
    m = float(np.max(terms))
    if not math.isfinite(m):
        return min(1.0, dropped)
    total = math.exp(m) * float(np.exp(terms - m).sum())
    return float(min(1.0, total * (1.0 + 1e-12) + dropped))


def pure_composition_epsilon(eps0: float, k: int, delta: float) -> float:
    """Smallest epsilon with :func:`pure_composition_delta` <= ``delta`` (bisection, rounded up); never above
    ``k * eps0`` (basic composition), which it returns for ``delta = 0``."""
    owner = "pure_composition_epsilon"
    eps0 = check_float(eps0, "eps0", owner, low=0.0, low_open=True)
    k = check_int(k, "k", owner, low=1)
    delta = check_probability(delta, "delta", owner, allow_zero=True)
    top = k * eps0
    if delta == 0.0 or not math.isfinite(top):
        return top
    lo, hi = 0.0, top
    if pure_composition_delta(eps0, k, 0.0) <= delta:
        return 0.0
    for _ in range(200):
        if hi - lo <= 1e-12 * max(1.0, hi):
            break
        mid = lo + 0.5 * (hi - lo)  # (lo + hi) / 2 overflows near the float maximum
        if pure_composition_delta(eps0, k, mid) <= delta:
            hi = mid
        else:
            lo = mid
    return min(top, hi * (1 + _ROUND_UP_REL) + _ROUND_UP_ABS)

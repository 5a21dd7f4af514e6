"""The one RDP -> (epsilon, delta) conversion every RDP figure in dpaudit goes through (re-exported by
:mod:`dpaudit.accountants.rdp`), kept apart so that the order search (:mod:`dpaudit.accountants.order_search`) and the
RDP accountant can both use it without an import cycle."""

from __future__ import annotations

import math
import warnings
from typing import Sequence

import numpy as np

from dpaudit.errors import ParameterError, check_probability

__all__ = ["EdgeOrderWarning", "rdp_to_epsilon"]


class EdgeOrderWarning(UserWarning):
    """The order that gave the best epsilon is at the edge of the grid: a wider grid may do better."""


def rdp_to_epsilon(orders: Sequence[float] | np.ndarray, rdp: Sequence[float] | np.ndarray, delta: float,
                   *, warn: bool = True) -> tuple[float, float | None]:
    """Smallest epsilon over ``orders`` such that RDP ``rdp`` implies (epsilon, delta)-DP.

    At each order :math:`\\alpha > 1` with RDP :math:`\\rho`, two valid conversions are taken and the smaller kept:

    - Mironov 2017 (Proposition 3): :math:`\\epsilon = \\rho + \\log(1/\\delta)/(\\alpha-1)`;
    - Canonne, Kamath, Steinke 2020 ("The discrete Gaussian for DP", Proposition 12 in arXiv:2004.00010v5):
      :math:`\\epsilon = \\rho + \\log((\\alpha-1)/\\alpha) - (\\log\\delta + \\log\\alpha)/(\\alpha-1)`.

    Returns ``(epsilon, order)``; ``(inf, None)`` when no order gives a finite value. ``delta = 0`` gives a
    finite epsilon only when some order has RDP 0 (then epsilon 0). Warns with :class:`EdgeOrderWarning`
    when the optimum sits at the first or last order of a grid of at least 2 orders.
    """
    delta = check_probability(delta, "delta", "rdp_to_epsilon", allow_zero=True)
    a = np.asarray(orders, dtype=np.float64).ravel()
    r = np.asarray(rdp, dtype=np.float64).ravel()
    if a.shape != r.shape or a.size == 0:
        raise ParameterError(f"The 'rdp' parameter of rdp_to_epsilon must have one value per order ({a.size}). Got {r.size} instead.")
    if np.any(~(a > 1.0)) or np.any(~np.isfinite(a)):
        raise ParameterError(f"The 'orders' parameter of rdp_to_epsilon must hold finite floats > 1. Got {a.min()} instead.")
    if np.any(np.isnan(r)) or np.any(r < 0):
        raise ParameterError("The 'rdp' parameter of rdp_to_epsilon must hold values >= 0 (inf allowed). Got a negative or NaN value instead.")
    if delta == 0.0:
        zero = np.flatnonzero(r == 0.0)
        return (0.0, float(a[zero[0]])) if zero.size else (math.inf, None)
    log_delta = math.log(delta)
    with np.errstate(over="ignore", invalid="ignore"):
        eps_mironov = r - log_delta / (a - 1.0)
        eps_cks = r + np.log1p(-1.0 / a) - (log_delta + np.log(a)) / (a - 1.0)
        eps = np.maximum(np.minimum(eps_mironov, eps_cks), 0.0)
    eps[~np.isfinite(r)] = np.inf
    i = int(np.argmin(eps))
    best = float(eps[i])
    if not math.isfinite(best):
        return math.inf, None
    if warn and a.size >= 2 and best > 0.0 and (i == 0 or i == a.size - 1):
        where = "smallest" if i == 0 else "largest"
        warnings.warn(
            f"The best RDP order ({a[i]:g}) is the {where} order of the grid [{a.min():g}, {a.max():g}]; "
            "a wider grid may give a smaller epsilon.",
            EdgeOrderWarning,
            stacklevel=2,
        )
    return best, float(a[i])

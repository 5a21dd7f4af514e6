"""Rényi DP: the order grid, the RDP -> (epsilon, delta) conversion, and order parsing.

The conversion is the one every RDP figure in dpaudit goes through (one implementation, no drift).
"""

from __future__ import annotations

import math
import re
import warnings
from typing import Sequence

import numpy as np

from dpaudit.errors import ParameterError, check_probability

__all__ = ["DEFAULT_ORDERS", "rdp_to_epsilon", "parse_orders", "EdgeOrderWarning"]

#: Rényi orders alpha > 1 (dense near 1, where small epsilons are achieved; sparse up to 1024).
DEFAULT_ORDERS: np.ndarray = np.concatenate(
    [1.0 + np.arange(1, 100) / 10.0, np.arange(11.0, 64.0), np.array([64.0, 80.0, 96.0, 128.0, 192.0, 256.0, 512.0, 1024.0])]
)
DEFAULT_ORDERS.setflags(write=False)


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


_RANGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*-\s*(\d+(?:\.\d+)?)\s*$")


def parse_orders(text: str) -> tuple[float, ...]:
    """Parse an order list: ``"1-8"`` (integers from 1 to 8), ``"2,4,8.5,16"`` or a mix ``"2-4,32"``.

    Returns the sorted distinct orders. Raises :class:`ParameterError` on anything else or on orders <= 0.
    """
    if not isinstance(text, str) or not text.strip():
        raise ParameterError(f"The 'orders' parameter must be a list like '1-8' or '2,4,8,16'. Got {text!r} instead.")
    out: set[float] = set()
    for part in text.split(","):
        m = _RANGE.match(part)
        try:
            if m:
                lo, hi = float(m.group(1)), float(m.group(2))
                if not (lo.is_integer() and hi.is_integer()) or hi < lo:
                    raise ValueError
                out.update(float(v) for v in range(int(lo), int(hi) + 1))
            else:
                v = float(part)
                if not math.isfinite(v):
                    raise ValueError
                out.add(v)
        except ValueError:
            raise ParameterError(
                f"The 'orders' parameter must be a list like '1-8' or '2,4,8,16' of positive numbers. Got {text!r} instead."
            ) from None
    if min(out) <= 0:
        raise ParameterError(f"The 'orders' parameter must hold orders > 0. Got {min(out):g} instead.")
    return tuple(sorted(out))

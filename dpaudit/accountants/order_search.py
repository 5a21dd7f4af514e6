"""Order search for RDP routes: extend the grid past its edge instead of warning.

Every RDP -> (epsilon, delta) conversion is a minimum over Rényi orders, and any order gives a valid epsilon. When the
minimum over a grid sits at the grid's largest order (tiny epsilons, near-deterministic answers) or its smallest
(large epsilons), a wider grid gives a smaller, equally valid figure. :func:`search_rdp_orders` keeps adding orders
beyond the edge where the optimum sat (geometrically above, towards 1 below) until the optimum is interior or a hard
limit is reached; only then is the edge reported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from dpaudit.accountants.rdp_conversion import rdp_to_epsilon

__all__ = ["OrderSearch", "search_rdp_orders", "HIGHEST_ORDER", "LOWEST_EXCESS"]

#: Orders above this are never tried (RDP of every mechanism in dpaudit is finite there or the route is moot).
HIGHEST_ORDER = 1e12
#: Orders are never closer to 1 than this.
LOWEST_EXCESS = 1e-10
_UP = np.array([1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0])
_DOWN = np.array([0.5, 0.2, 0.1, 0.05, 0.02, 0.01])
_MAX_ROUNDS = 40


@dataclass(frozen=True, slots=True)
class OrderSearch:
    """The best epsilon over every evaluated order. ``orders``/``rdp`` hold all of them (sorted); ``extended`` says
    whether orders beyond the starting grid were needed; ``at_edge`` that the optimum still sits at the edge of the
    evaluated orders (a hard limit was reached)."""

    epsilon: float
    order: float | None
    orders: np.ndarray
    rdp: np.ndarray
    extended: bool
    at_edge: bool

    def note(self) -> str:
        """A sentence for the statement's assumptions, or ''."""
        if not self.extended or self.order is None:
            return ""
        return (f"The best order sat at the edge of the starting grid; the grid was extended (orders "
                f"{self.orders.min():g}..{self.orders.max():g}) and order {self.order:g} won.")

    def warning(self, what: str = "Rényi order") -> list[str]:
        """The warning when the optimum is still at an edge (else [])."""
        if not self.at_edge or self.order is None:
            return []
        return [f"The best {what} ({self.order:g}) is at the edge of the searched orders [{self.orders.min():g}, "
                f"{self.orders.max():g}] (the search limit); a wider range might give a smaller epsilon."]


def _next_orders(best: float, lo: float, hi: float, highest: float = HIGHEST_ORDER) -> np.ndarray:
    if best >= hi and best < highest:
        new = best * _UP
        return np.unique(np.minimum(new, highest))
    if best <= lo and best - 1.0 > LOWEST_EXCESS:
        new = 1.0 + (best - 1.0) * _DOWN
        return new[new - 1.0 >= LOWEST_EXCESS]
    return np.empty(0)


def search_rdp_orders(rdp_of: Callable[[np.ndarray], np.ndarray], orders: np.ndarray, delta: float, *,
                      rdp: np.ndarray | None = None, extend: bool = True,
                      highest: float = HIGHEST_ORDER) -> OrderSearch:
    """Smallest epsilon at ``delta`` over ``orders``, extended past an edge while the optimum sits there.

    ``rdp_of(orders) -> rdp`` evaluates the route's RDP at any orders > 1 (values >= 0, inf allowed); ``rdp`` may
    carry its values at ``orders`` when already computed. ``extend=False`` only evaluates ``orders`` (a grid the
    caller chose) and reports ``at_edge`` for the warning. ``highest``: no order above it is tried (for routes whose
    RDP costs time in proportion to the order).
    """
    a = np.asarray(orders, dtype=np.float64).ravel()
    r = np.asarray(rdp_of(a) if rdp is None else rdp, dtype=np.float64).ravel()
    order_ix = np.argsort(a, kind="stable")
    a, r = a[order_ix], r[order_ix]
    eps, best = rdp_to_epsilon(a, r, delta, warn=False)
    rounds = 0
    while extend and best is not None and a.size >= 2 and eps > 0.0 and rounds < _MAX_ROUNDS:
        new = _next_orders(best, float(a[0]), float(a[-1]), highest)
        new = new[~np.isin(new, a)]
        if new.size == 0:
            break
        r_new = np.asarray(rdp_of(new), dtype=np.float64).ravel()
        a = np.concatenate([a, new])
        r = np.concatenate([r, r_new])
        ix = np.argsort(a, kind="stable")
        a, r = a[ix], r[ix]
        eps, best = rdp_to_epsilon(a, r, delta, warn=False)
        rounds += 1
    at_edge = bool(best is not None and a.size >= 2 and 0.0 < eps < math.inf and best in (float(a[0]), float(a[-1])))
    return OrderSearch(eps, best, a, r, rounds > 0, at_edge)

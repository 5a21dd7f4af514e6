"""Rényi DP: the order grid, the RDP -> (epsilon, delta) conversion, and order parsing.

The conversion is the one every RDP figure in dpaudit goes through (one implementation, no drift).
"""

from __future__ import annotations

import math
import warnings
from typing import Sequence

import numpy as np

from dpaudit.accountants import events as ev
from dpaudit.accountants._common import append_event, parse_orders, quiet_overflow
from dpaudit.accountants.base import Accountant, rdp_function_for
from dpaudit.accountants.events import DpEvent, Repeated, flatten
from dpaudit.accountants.pure import PureDp
from dpaudit.accountants.statement import PrivacyStatement, join_assumptions
from dpaudit.errors import ParameterError, check_int, check_probability

__all__ = ["DEFAULT_ORDERS", "rdp_to_epsilon", "parse_orders", "EdgeOrderWarning", "RdpAccountant", "event_assumptions",
           "data_dependence_note"]

#: Rényi orders alpha > 1: from 1.001 (large epsilons, e.g. full-batch DP-SGD over 1e5 steps, are won just above 1)
#: to 4096 (tiny epsilons), dense between 1.1 and 64. :class:`RdpAccountant` extends it when the best order is at an edge.
DEFAULT_ORDERS: np.ndarray = np.concatenate(
    [np.array([1.001, 1.002, 1.005, 1.01, 1.02, 1.03, 1.05, 1.075]), 1.0 + np.arange(1, 100) / 10.0, np.arange(11.0, 64.0),
     np.array([64.0, 80.0, 96.0, 128.0, 192.0, 256.0, 384.0, 512.0, 768.0, 1024.0, 1536.0, 2048.0, 4096.0])]
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



# --------------------------------------------------------------------------------------------------
# The RDP accountant
# --------------------------------------------------------------------------------------------------


_RELATION_TEXT = {
    "add-remove": "one example added or removed (a fixed batch size makes the added example displace another, "
                  "so the sum moves by up to 2C).",
    "zero-out": "one example replaced by a null example whose clipped gradient is zero (Kairouz et al. 2021); the "
                "dataset size is public.",
    "substitution": "one example replaced by another (the clipped-gradient sum moves by up to 2C); the dataset size "
                    "is public.",
}


def event_assumptions(event) -> tuple[str, ...]:
    """Sentences stating the neighbouring relation and data dependence of a leaf event (for statements)."""
    name = type(event).__name__
    if isinstance(event, ev.RandomizedResponse):
        return ("RandomizedResponse: local DP; neighbouring inputs are any two values of one client's data "
                "(all K labels may change).",)
    if isinstance(event, ev.SubsampledGaussian):
        return ("SubsampledGaussian: neighbouring datasets differ by adding or removing one example; Poisson "
                "sampling with rate q at every step.",)
    if isinstance(event, ev.Shuffled):
        return ("Shuffled: central model with a trusted shuffler; neighbouring datasets differ in one user's input.",)
    if isinstance(event, ev.FixedBatchGaussian):
        return (f"FixedBatchGaussian: every step draws exactly B = {event.batch_size} of the n = {event.dataset_size} "
                "examples uniformly without replacement, independently of the other steps; neighbouring datasets: "
                + _RELATION_TEXT[event.neighbouring],)
    if isinstance(event, ev.ShuffledBatchGaussian):
        return (f"ShuffledBatchGaussian: every epoch permutes the n = {event.dataset_size} examples and cuts them into "
                f"{event.batches_per_epoch} batches of B = {event.batch_size}"
                + ("" if event.dataset_size % event.batch_size == 0 else
                   " (the left-over examples are dropped)" if event.drop_last else " (the last one shorter)")
                + f"; an example is in at most one batch per epoch, {event.participations} in all. No amplification by "
                "shuffling is counted (valid for any batch order). Neighbouring datasets: "
                + _RELATION_TEXT[event.neighbouring],)
    if isinstance(event, ev.RandomStoppingTuning):
        inner = tuple(a for leaf, _ in ev.flatten(event.event) for a in event_assumptions(leaf))
        return (f"RandomStoppingTuning: the run is repeated K times, K ~ {event.distribution} (E[K] = "
                f"{event.expected_runs:.4g}) drawn independently of the data, candidate hyperparameters drawn "
                "independently of the data, and only the best run by a score the run itself outputs is released "
                "(Papernot & Steinke 2022).",) + inner
    if isinstance(event, (ev.LaplaceNoisyMax, ev.GaussianNoisyMax)):
        out = [f"{name}: replace-one neighbours at the granularity its sensitivity was derived for "
               "(one record, or one party's data for party-level DP)."]
        note = data_dependence_note(event)
        if note is not None:
            out.append(note)
        return tuple(out)
    return (f"{name}: neighbouring relation as documented for this event.",)


def data_dependence_note(event) -> str | None:
    """The sentence saying that an event's analysis uses private data (vote histograms), or None."""
    if getattr(event, "votes", None) is None:
        return None
    return (f"{type(event).__name__}: DATA-DEPENDENT analysis from the private vote histograms; the epsilon itself "
            "is not differentially private unless released with noise (smooth sensitivity).")


def _pure_epsilon(event: DpEvent) -> float:
    """Pure-DP epsilon of one leaf event, inf when it is not a pure-DP mechanism (or not known to be)."""
    if isinstance(event, ev.RandomizedResponse):
        return event.report_epsilon
    if isinstance(event, ev.LaplaceNoisyMax):  # each query is (sensitivity * gamma)-DP whatever the votes
        return event.query_epsilon * event.n_queries
    if isinstance(event, PureDp):
        return event.epsilon
    return math.inf



#: RDP of data-independent leaf events, keyed by (event, orders); events are immutable and hashable.
_LEAF_CACHE: dict = {}


class RdpAccountant(Accountant):
    """Rényi-DP accountant: sums each event's RDP (dispatched through
    :func:`~dpaudit.accountants.base.rdp_function_for`) over a grid of orders, then converts with
    :func:`rdp_to_epsilon` (Mironov 2017 / Canonne-Kamath-Steinke 2020, the smaller at each order).

    RDP is computed when an event is composed (validation and computation happen before the state
    changes), so :meth:`get_statement` is cheap. Data-dependent events are accepted when their module
    registered an RDP function for them; the statement is then flagged ``data_dependent``.
    """

    name = "rdp"

    def __init__(self, orders=None) -> None:
        super().__init__()
        a = DEFAULT_ORDERS if orders is None else np.asarray(orders, dtype=np.float64).ravel()
        if a.size == 0 or np.any(~(a > 1.0)) or np.any(~np.isfinite(a)):
            raise ParameterError(
                f"The 'orders' parameter of RdpAccountant must hold finite floats > 1. Got {np.asarray(orders)!r:.60} instead.")
        self.orders = np.array(a)
        self.orders.setflags(write=False)
        self._rdp = np.zeros_like(self.orders)
        self._assumptions: dict[str, None] = {}
        self._data_dependent = False
        self._data_dependence_notes: set[str] = set()
        self._pure = 0.0  # sum of pure-DP epsilons (inf once an event is not pure DP)
        self.warnings: tuple[str, ...] = ()
        self._ext_orders: np.ndarray = self.orders

    def supports(self, event: DpEvent) -> bool:
        try:
            rdp_function_for(event)
        except ParameterError:
            return False
        return True

    @quiet_overflow
    def rdp_of(self, event: DpEvent, count: int = 1) -> np.ndarray:
        """RDP at each order of ``count`` compositions of ``event`` (no state change)."""
        total = np.zeros_like(self.orders)
        for leaf, mult in flatten(Repeated(event, count) if count != 1 else event):
            total = total + mult * self._leaf_rdp(leaf)
        return total

    def _leaf_rdp(self, leaf: DpEvent) -> np.ndarray:
        cacheable = getattr(leaf, "votes", None) is None
        key = (leaf, self.orders.tobytes()) if cacheable else None
        hit = _LEAF_CACHE.get(key) if cacheable else None
        if hit is not None:
            return hit
        r = np.asarray(rdp_function_for(leaf)(leaf, self.orders), dtype=np.float64)
        if r.shape != self.orders.shape or np.any(np.isnan(r)) or np.any(r < 0):
            raise ParameterError(f"The RDP function registered for {type(leaf).__name__} returned an invalid value.")
        if cacheable:
            if len(_LEAF_CACHE) >= 1024:
                _LEAF_CACHE.pop(next(iter(_LEAF_CACHE)))
            r.setflags(write=False)
            _LEAF_CACHE[key] = r
        return r

    def compose(self, event: DpEvent, count: int = 1) -> "RdpAccountant":
        count = check_int(count, "count", "RdpAccountant", low=0)
        if not isinstance(event, DpEvent):
            raise ParameterError(f"The 'event' parameter of RdpAccountant.compose must be a DpEvent. Got {event!r:.80} instead.")
        leaves = flatten(event)
        for leaf, _ in leaves:
            rdp_function_for(leaf)  # raises UnsupportedEventError naming the type
        if count == 0:
            return self
        add = self.rdp_of(event, count)
        new_assumptions = join_assumptions(*(event_assumptions(l) for l, _ in leaves))
        # all computed: now mutate
        pure = sum(_pure_epsilon(leaf) * mult for leaf, mult in leaves) * count
        with np.errstate(over="ignore"):  # a sum beyond the float range is +inf: a valid (infinite) bound
            self._rdp = self._rdp + add
        self._pure = self._pure + pure
        append_event(self._events, event, count)
        for a in new_assumptions:
            self._assumptions.setdefault(a, None)
        self._data_dependent |= any(getattr(l, "data_dependent", False) for l, _ in leaves)
        self._data_dependence_notes.update(n for n in (data_dependence_note(l) for l, _ in leaves) if n is not None)
        return self

    def epsilon_quiet(self, target_delta: float) -> float:
        """The headline epsilon of :meth:`get_statement` without building a statement or warning (cheap; used by
        the ledger on every record)."""
        if not self._rdp.any():
            return 0.0
        return min(rdp_to_epsilon(self.orders, self._rdp, target_delta, warn=False)[0], self._pure)

    @property
    def rdp(self) -> np.ndarray:
        out = self._rdp.copy()
        out.setflags(write=False)
        return out

    @quiet_overflow
    def _statement(self, target_delta: float) -> PrivacyStatement:
        if not np.any(self._rdp > 0):  # nothing composed (or only zero-cost events): identical output distributions
            return PrivacyStatement(0.0, target_delta, "rdp", assumptions=("No privacy-relevant events were composed.",))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", EdgeOrderWarning)
            eps, order = rdp_to_epsilon(self.orders, self._rdp, target_delta)
        extended = ""
        if caught and order is not None and order == self.orders.min():
            eps2, order2, grid = self._extend(target_delta)
            if eps2 < eps:
                eps, order = eps2, order2
                extended = f" The best order was at the grid's edge; the grid was extended ({grid}) and order {order2:g} won."
                caught = [] if order2 not in (min(self._ext_orders), max(self._ext_orders)) else caught
        method = "rdp"
        base: tuple[str, ...] = ("RDP summed over all composed events (adaptive composition), converted to (epsilon, delta) with "
                "the Canonne-Kamath-Steinke 2020 bound; the smallest epsilon over the order grid is reported"
                + (f" (order {order:g} won)." if order is not None else ".") + extended,)
        data_dependent = self._data_dependent
        assumptions = tuple(self._assumptions)
        if self._pure <= eps and math.isfinite(self._pure):  # every event is pure DP and basic composition is tighter
            eps, order, method, caught = self._pure, None, "basic composition (pure DP)", []
            base = ("Every composed event is pure DP; basic composition (sum of epsilons, delta 0) is smaller than "
                    "the RDP figure and is reported.",)
            # the sum of the events' pure epsilons does not look at the data, whatever the events carry
            data_dependent = False
            assumptions = tuple(a for a in assumptions if a not in self._data_dependence_notes)
        if math.isinf(eps):
            base = base + ("epsilon is infinite: the RDP is infinite at every order of the grid (the noise is too small "
                           "for any finite bound at this delta by this route).",)
        self.warnings = tuple(str(c.message) for c in caught if issubclass(c.category, EdgeOrderWarning))
        for msg in self.warnings:
            warnings.warn(msg, EdgeOrderWarning, stacklevel=3)
        return PrivacyStatement(eps, target_delta, method, order=order,
                                assumptions=join_assumptions(base, assumptions),
                                data_dependent=data_dependent,
                                details={"orders": f"{self.orders.min():g}..{self.orders.max():g} ({self.orders.size})",
                                         "winning_order": order, **({"grid_extended": extended.strip()} if extended else {})})

    def _extend(self, target_delta: float) -> tuple[float, float | None, str]:
        """Retry with orders between 1 and the grid's smallest order, where the optimum sat (large epsilons). At the
        upper edge (tiny epsilons, near-pure mechanisms) only the warning is given: basic composition bounds those."""
        lo = float(self.orders.min())
        ext = 1.0 + (lo - 1.0) * np.array([0.5, 0.2, 0.1, 0.05, 0.02, 0.01, 0.001])
        self._ext_orders = ext
        probe = RdpAccountant(ext)
        total = np.zeros(ext.size)
        for event, count in self._events:
            total = total + probe.rdp_of(event, count)
        eps, order = rdp_to_epsilon(ext, np.where(np.isnan(total), np.inf, np.maximum(total, 0.0)), target_delta, warn=False)
        return eps, order, f"{ext.min():g}..{ext.max():g}"


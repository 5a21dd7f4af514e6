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
from dpaudit.accountants.order_search import search_rdp_orders
from dpaudit.accountants.pure import PureDp
from dpaudit.accountants.rdp_conversion import EdgeOrderWarning, rdp_to_epsilon
from dpaudit.accountants.statement import PrivacyStatement, join_assumptions
from dpaudit.errors import ParameterError, check_int, check_probability

__all__ = ["DEFAULT_ORDERS", "rdp_to_epsilon", "parse_orders", "EdgeOrderWarning", "RdpAccountant", "event_assumptions",
           "data_dependence_note", "pure_epsilon"]

#: The largest order :class:`RdpAccountant` tries when the optimum sits at its grid's upper edge (tiny epsilons):
#: the subsampled Gaussian's exact RDP at an integer order costs time in proportion to the order (0.3 s at 65536).
EXTENSION_HIGHEST_ORDER = 65536.0

#: Basic composition (pure DP, delta 0, data-independent) is reported when the RDP figure is not smaller by more than
#: this margin (absolute below epsilon 1, relative above): far above the default grid, the RDP conversion undercuts
#: a pure-DP sum by about (log(1/delta) - log(order)) / order, 1e-5 at order 65536 -- a gain not worth a delta or a
#: dependence on the data.
PURE_TIE = 1e-4

#: Rényi orders alpha > 1: from 1.001 (large epsilons, e.g. full-batch DP-SGD over 1e5 steps, are won just above 1)
#: to 4096 (tiny epsilons), dense between 1.1 and 64. :class:`RdpAccountant` extends it when the best order is at an edge.
DEFAULT_ORDERS: np.ndarray = np.concatenate(
    [np.array([1.001, 1.002, 1.005, 1.01, 1.02, 1.03, 1.05, 1.075]), 1.0 + np.arange(1, 100) / 10.0, np.arange(11.0, 64.0),
     np.array([64.0, 80.0, 96.0, 128.0, 192.0, 256.0, 384.0, 512.0, 768.0, 1024.0, 1536.0, 2048.0, 4096.0])]
)
DEFAULT_ORDERS.setflags(write=False)





# --------------------------------------------------------------------------------------------------
# The RDP accountant
# --------------------------------------------------------------------------------------------------


_RELATION_TEXT = {
    "add-remove": "one example added or removed (a fixed batch size makes the added example displace another, "
                  "so the sum moves by up to 2C).",
    "zero-out": "one example replaced by a null example whose clipped gradient is zero (Kairouz et al. 2021); the "
                "dataset size is public. With fixed-size batches it is accounted as a substitution (the target's "
                "presence displaces another example, so the sum moves by up to 2C).",
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


def pure_epsilon(event: DpEvent) -> float:
    """Pure-DP epsilon of ``event`` by basic composition over its leaves (inf when a leaf is not, or not known to be,
    a pure-DP mechanism)."""
    return float(sum(_pure_epsilon(leaf) * mult for leaf, mult in ev.flatten(event)))


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

    When the best order sits at an edge of the grid, :meth:`get_statement` searches past it (any order gives a
    valid epsilon; up to order :data:`EXTENSION_HIGHEST_ORDER`) and says so; ``extend=False`` keeps to the given
    orders (a like-for-like comparison with another accountant on the same grid) and warns at an edge instead.
    """

    name = "rdp"

    def __init__(self, orders=None, *, extend: bool = True) -> None:
        super().__init__()
        self.extend = bool(extend)
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
        """The epsilon of :meth:`get_statement` on the grid alone, without building a statement, warning or searching
        past the grid's edge (cheap; used by the ledger on every record): never below the statement's figure."""
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
        eps, order = rdp_to_epsilon(self.orders, self._rdp, target_delta, warn=False)
        extended, caught = "", []
        at_edge = order is not None and 0.0 < eps < math.inf and self.orders.size >= 2 \
            and order in (float(self.orders.min()), float(self.orders.max()))
        if at_edge and not self.extend:
            caught = [f"The best RDP order ({order:g}) is at the edge of the grid [{self.orders.min():g}, "
                      f"{self.orders.max():g}] (not extended: extend=False); a wider grid may give a smaller epsilon."]
        elif at_edge:
            # the optimum sits at the grid's edge: any order gives a valid epsilon, so search past it
            found = search_rdp_orders(self._rdp_at, self.orders, target_delta, rdp=self._rdp,
                                      highest=EXTENSION_HIGHEST_ORDER)
            eps, order = found.epsilon, found.order
            self._ext_orders = found.orders
            extended = (f" The best order was at the grid's edge; the grid was extended ({found.orders.min():g}.."
                        f"{found.orders.max():g}) and order {order:g} won.") if found.extended and order is not None else ""
            caught = found.warning()
        method = "rdp"
        base: tuple[str, ...] = ("RDP summed over all composed events (adaptive composition), converted to (epsilon, delta) with "
                "the Canonne-Kamath-Steinke 2020 bound; the smallest epsilon over the order grid is reported"
                + (f" (order {order:g} won)." if order is not None else ".") + extended,)
        data_dependent = self._data_dependent
        assumptions = tuple(self._assumptions)
        # every event is pure DP and basic composition is as tight: (eps, 0)-DP without looking at the data (within
        # PURE_TIE it counts as a tie, see there)
        if math.isfinite(self._pure) and self._pure <= eps + PURE_TIE * max(1.0, eps):
            eps, order, method, caught = self._pure, None, "basic composition (pure DP)", []
            base = ("Every composed event is pure DP; basic composition (sum of epsilons, delta 0) is smaller than "
                    "the RDP figure and is reported.",)
            # the sum of the events' pure epsilons does not look at the data, whatever the events carry
            data_dependent = False
            assumptions = tuple(a for a in assumptions if a not in self._data_dependence_notes)
        if math.isinf(eps):
            base = base + ("epsilon is infinite: the RDP is infinite at every order of the grid (the noise is too small "
                           "for any finite bound at this delta by this route).",)
        self.warnings = tuple(caught)
        for msg in self.warnings:
            warnings.warn(msg, EdgeOrderWarning, stacklevel=3)
        return PrivacyStatement(eps, target_delta, method, order=order,
                                assumptions=join_assumptions(base, assumptions),
                                data_dependent=data_dependent,
                                details={"orders": f"{self.orders.min():g}..{self.orders.max():g} ({self.orders.size})",
                                         "winning_order": order, **({"grid_extended": extended.strip()} if extended else {})})

    def _rdp_at(self, orders: np.ndarray) -> np.ndarray:
        """The composed RDP at other ``orders`` (every event again, at those orders)."""
        probe = RdpAccountant(np.asarray(orders, dtype=np.float64))
        total = np.zeros(probe.orders.size)
        for event, count in self._events:
            total = total + probe.rdp_of(event, count)
        return np.where(np.isnan(total), np.inf, np.maximum(total, 0.0))


"""Helpers shared by the accountant modules (package-internal; public names, no dpaudit imports but errors).

Everything here is used by more than one mechanism module: numerically stable log-space primitives, the one
validation of vote arrays and of order grids, the edge-of-grid warning text and the event-list merge used by
the stateful accountants. Nothing here imports another accountants module, so every module may import it.
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any, Callable, TypeVar, cast

import numpy as np

from dpaudit.errors import ParameterError

__all__ = [
    "LOG2",
    "FFT_DELTA_ALLOWANCE",
    "MAX_FFT_COMPOSITIONS",
    "inv_square",
    "quiet_overflow",
    "log1mexp",
    "logsumexp_rows",
    "as_votes",
    "validated_votes",
    "parse_orders",
    "check_orders",
    "edge_warning",
    "append_event",
]

LOG2 = math.log(2.0)
#: Absolute delta set aside for the FFT round-off of dp_accounting's PLD convolution: the computed delta(eps) was
#: measured off by up to ~6e-14 (it even goes negative) against exact Gaussian-DP; every FFT-PLD epsilon is taken
#: at ``delta - FFT_DELTA_ALLOWANCE`` and the FFT route is not used for delta <= 2 * FFT_DELTA_ALLOWANCE.
FFT_DELTA_ALLOWANCE = 1e-12
#: Most compositions (steps, queries, reports, rounds) an FFT-PLD route builds; memory and time grow beyond it.
MAX_FFT_COMPOSITIONS = 10_000_000


F = TypeVar("F", bound=Callable[..., Any])


def quiet_overflow(fn: F) -> F:
    """Run ``fn`` with numpy overflow warnings off: an overflowed product is +inf, which every caller treats
    conservatively (a minimum with a finite bound, or an infinite epsilon with its reason); NaN-producing
    operations (invalid, divide) still warn."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with np.errstate(over="ignore", under="ignore"):
            return fn(*args, **kwargs)

    return cast(F, wrapper)


def inv_square(x: float) -> float:
    """1 / x^2 as a float, inf where it overflows (no warning, no ZeroDivisionError)."""
    with np.errstate(over="ignore", divide="ignore"):
        return float(np.float64(1.0) / np.square(np.float64(x)))


def log1mexp(x: Any) -> np.ndarray:
    """log(1 - exp(x)) for x <= 0, accurate at both ends (Maechler 2012); -inf at x = 0."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x < -LOG2, np.log1p(-np.exp(x)), np.log(-np.expm1(x)))


def logsumexp_rows(logt: np.ndarray) -> np.ndarray:
    """log(sum(exp(logt), axis=-1)), finite whenever one entry of a row is finite; -inf for all--inf rows
    (no NaN, no warning)."""
    m = logt.max(axis=-1)
    safe = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        return safe + np.log(np.exp(logt - safe[..., None]).sum(axis=-1))


def as_votes(votes: Any, owner: str, name: str = "votes") -> np.ndarray:
    """A read-only float64 (queries, classes) copy of ``votes`` (a 1-D histogram is one query), or
    :class:`ParameterError` naming ``name`` of ``owner``: >= 1 query, >= 2 classes, finite counts >= 0."""
    if isinstance(votes, (str, bytes)):
        raise ParameterError(f"The '{name}' parameter of {owner} must be a numeric array of shape (queries, classes). Got a string instead.")
    try:
        arr = np.array(votes, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        raise ParameterError(f"The '{name}' parameter of {owner} must be a numeric array of shape (queries, classes).") from None
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[0] < 1:
        raise ParameterError(
            f"The '{name}' parameter of {owner} must be an array of shape (queries >= 1, classes >= 2). Got shape {arr.shape} instead."
        )
    if arr.shape[1] < 2:
        raise ParameterError(
            f"The '{name}' parameter of {owner} must have at least 2 classes (columns). Got {arr.shape[1]} instead."
        )
    if not np.all(np.isfinite(arr)):
        raise ParameterError(f"The '{name}' parameter of {owner} must hold finite counts. Got a NaN or infinite count instead.")
    if np.any(arr < 0):
        raise ParameterError(f"The '{name}' parameter of {owner} must hold counts >= 0. Got {arr.min()} instead.")
    arr.setflags(write=False)
    return arr


def validated_votes(votes: Any, owner: str) -> np.ndarray:
    """:func:`as_votes`, skipping the copy for an array that an event already validated (read-only float64 2-D)."""
    if isinstance(votes, np.ndarray) and votes.dtype == np.float64 and votes.ndim == 2 and not votes.flags.writeable:
        return votes
    return as_votes(votes, owner)


_RANGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*-\s*(\d+(?:\.\d+)?)\s*$")
#: Largest number of orders a range like ``"1-8"`` may expand to (each order costs a column of work).
MAX_ORDERS = 100_000


def parse_orders(text: str) -> tuple[float, ...]:
    """Parse an order list: ``"1-8"`` (integers from 1 to 8), ``"2,4,8.5,16"`` or a mix ``"2-4,32"``.

    Returns the sorted distinct orders. Raises :class:`ParameterError` on anything else, on orders <= 0, on
    orders above 1e6 and on more than :data:`MAX_ORDERS` orders.
    """
    if not isinstance(text, str) or not text.strip():
        raise ParameterError(f"The 'orders' parameter must be a list like '1-8' or '2,4,8,16'. Got {text!r} instead.")
    out: set[float] = set()
    too_many = False
    for part in text.split(","):
        m = _RANGE.match(part)
        try:
            if m:
                lo, hi = float(m.group(1)), float(m.group(2))
                if not (lo.is_integer() and hi.is_integer()) or hi < lo:
                    raise ValueError
                if hi - lo + 1 + len(out) > MAX_ORDERS or hi > 1e6:
                    too_many = True
                    break
                out.update(float(v) for v in range(int(lo), int(hi) + 1))
            else:
                v = float(part)
                if not math.isfinite(v):
                    raise ValueError
                out.add(v)
        except ValueError:
            raise ParameterError(
                f"The 'orders' parameter must be a list like '1-8' or '2,4,8,16' of positive numbers. Got {text!r:.80} instead."
            ) from None
    if too_many or (out and (max(out) > 1e6 or len(out) > MAX_ORDERS)):
        raise ParameterError(f"The 'orders' parameter is out of the supported range: at most {MAX_ORDERS} orders, each "
                             f"<= 1e6. Got {text.strip()[:60]!r} instead.")
    if min(out) <= 0:
        raise ParameterError(f"The 'orders' parameter must hold orders > 0. Got {min(out):g} instead.")
    return tuple(sorted(out))


def check_orders(orders: Any, name: str, owner: str, *, low: float) -> np.ndarray:
    """A 1-D float64 array of finite orders > ``low`` (a string is parsed with :func:`parse_orders`)."""
    if isinstance(orders, str):
        orders = parse_orders(orders)
    try:
        arr = np.atleast_1d(np.asarray(orders, dtype=np.float64)).ravel()
    except (TypeError, ValueError, OverflowError):
        raise ParameterError(f"The '{name}' parameter of {owner} must be a sequence of floats > {low:g}. Got {orders!r:.80} instead.") from None
    if arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr <= low):
        raise ParameterError(f"The '{name}' parameter of {owner} must be a non-empty sequence of finite floats > {low:g}. Got {orders!r:.80} instead.")
    if arr.size > MAX_ORDERS:
        raise ParameterError(f"The '{name}' parameter of {owner} must hold at most {MAX_ORDERS} orders. Got {arr.size} instead.")
    return arr


def edge_warning(orders: np.ndarray, best: float | None, what: str) -> list[str]:
    """The warning text when the best order ``best`` is the smallest or largest of ``orders`` (else [])."""
    if best is None or orders.size < 2:
        return []
    if best == orders.min() or best == orders.max():
        where = "smallest" if best == orders.min() else "largest"
        return [f"The best {what} ({best:g}) is the {where} of the grid [{orders.min():g}, {orders.max():g}]; "
                "a wider grid may give a smaller epsilon."]
    return []


def append_event(events: list, event: Any, count: int) -> None:
    """Append ``(event, count)``, merging with the last entry when it is the same data-independent event."""
    if events and getattr(event, "votes", None) is None and type(events[-1][0]) is type(event) and events[-1][0] == event:
        events[-1] = (event, events[-1][1] + count)
    else:
        events.append((event, count))

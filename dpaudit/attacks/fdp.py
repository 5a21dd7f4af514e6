"""f-DP one-run auditing (Mahloujifar, Melis, Chaudhuri, "Auditing f-Differential Privacy in One Run", ICML 2025,
arXiv:2410.22235): test a hypothesised trade-off curve f against the canary guesses of one training run.

Setting. ``m`` canaries, each included by an independent fair coin; from the released output the auditor makes
``c'`` guesses (in / out; it abstains on the other ``m - c'``) and ``c`` of them are right. If the mechanism is f-DP
with respect to each canary's coin (f symmetric), the paper's recursion bounds how likely ``c`` or more correct
guesses are. With the *blow-up inverse* of f,

    B^{-1}(y) = inf {x : 1 - f(x) >= y}

(if an event has probability x with the canary in, it has probability at least B^{-1}... of the flipped event with
the canary out), start from ``r_c = alpha c / m`` and ``h_c = alpha (c' - c) / m`` and for ``i = c - 1, ..., 0``

    h_i = max(h_{i+1}, B^{-1}(r_{i+1})),      r_i = r_{i+1} + i / (c' - i) * (h_i - h_{i+1}).

Read ``r_i`` / ``h_i`` as (lower bounds on) the expected numbers of correct / wrong guesses, divided by ``m``, on
the event "at least i correct": a wrong guess with the canary's coin flipped is a right one, which is what f
limits. If ``r_0 + h_0 > c' / m`` (more guesses than were made), "P[c or more correct] >= alpha" is impossible
under f: f is rejected at level ``alpha``. Abstentions are allowed (``c' < m``); a rule that sometimes makes fewer
than ``c'`` guesses is covered too (add random guesses up to ``c'``: the count of correct guesses can only grow).
The number of guesses ``c'`` must be fixed before the run (or paid for: see the guessing rules of
:mod:`dpaudit.attacks.auditor`); *which* canaries are guessed, and in which direction, may depend on the output.

Curve families (each a blow-up inverse, vectorised over its parameter):

- Gaussian DP, ``G_mu(x) = Phi(Phi^{-1}(1 - x) - mu)`` (Dong, Roth, Su 2022): ``B^{-1}(y) = Phi(Phi^{-1}(y) - mu)``.
  Rejecting mu-GDP is a statement about the whole curve and holds for any mechanism; the epsilon "it implies" at
  delta (:func:`gdp_epsilon`) is a lower bound on the mechanism's epsilon only if its trade-off curve is Gaussian
  (exactly so for the Gaussian mechanism; approximately, by the central limit theorem, for DP-SGD with many steps).
- (epsilon, delta)-DP, ``f(x) = max(0, 1 - delta - e^eps x, e^-eps (1 - delta - x))`` (Kairouz, Oh, Viswanath 2015):
  ``B^{-1}(y) = max(0, (y - delta) e^-eps, 1 - delta - e^eps (1 - y))``. Valid for every (eps, delta)-DP mechanism.
- A privacy profile ``{(eps_j, delta_j)}`` (e.g. an accountant's PLD): the mechanism is (eps_j, delta_j)-DP for
  every j, hence f-DP with the pointwise largest of those curves; its blow-up inverse is the largest of theirs.
  A finite grid gives a lower curve than the profile's own, so a rejection of it also rejects the profile.

:func:`fdp_statistic` runs the recursion on a whole batch of (guesses, correct, alpha, curve parameter) at once;
:func:`largest_rejected` finds, per batch element, the largest parameter of a family the recursion rejects
(searching from the private end: the first non-rejected grid point bounds the answer).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
from scipy import special

from dpaudit.accountants.closed_form import gaussian_epsilon_root
from dpaudit.errors import ParameterError, check_float

__all__ = [
    "gdp_blow_up_inverse",
    "approx_dp_blow_up_inverse",
    "ApproxDpInverse",
    "profile_blow_up_inverse",
    "fdp_statistic",
    "fdp_rejects",
    "largest_rejected",
    "fdp_gdp_mu",
    "fdp_approx_dp_epsilon",
    "fdp_profile_p_value",
    "gdp_epsilon",
    "MU_MAX",
    "EPS_MAX",
]

#: The largest mu (Gaussian DP) the search certifies; beyond it the bound is reported as MU_MAX.
MU_MAX = 40.0
#: The largest epsilon ((eps, delta) curves) the search certifies.
EPS_MAX = 200.0

BlowUpInverse = Callable[[np.ndarray, np.ndarray], np.ndarray]


def gdp_blow_up_inverse(y: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """``Phi(Phi^{-1}(y) - mu)``, elementwise (broadcast): the blow-up inverse of the mu-GDP curve."""
    with np.errstate(invalid="ignore"):
        return special.ndtr(special.ndtri(np.clip(y, 0.0, 1.0)) - mu)


class GdpInverse:
    """:func:`gdp_blow_up_inverse` as a family object, with the cheaper form the recursion uses for y in [0, 1]."""

    def __call__(self, y: np.ndarray, mu: np.ndarray) -> np.ndarray:
        return gdp_blow_up_inverse(y, mu)

    def inside(self, mu: np.ndarray) -> Callable[[np.ndarray, Any], np.ndarray] | None:
        """For y in [0, 1] and every mu finite: the same values without the clip and the error-state switch
        (``ndtri(y) - mu`` is never inf - inf)."""
        if not np.all(np.isfinite(mu)):
            return None
        return lambda y, m: special.ndtr(special.ndtri(y) - m)


def approx_dp_blow_up_inverse(y: np.ndarray, eps: np.ndarray, delta: float | np.ndarray) -> np.ndarray:
    """``max(0, (y - delta) e^-eps, 1 - delta - e^eps (1 - y))``, elementwise: the blow-up inverse of the
    (eps, delta)-DP curve (at ``y = 1`` the value is ``1 - delta``)."""
    with np.errstate(over="ignore"):
        return _approx_dp_inv(y, np.exp(-eps), np.exp(eps), delta)


def _approx_dp_inv(y: np.ndarray, e_minus: np.ndarray, e_plus: np.ndarray, delta: float | np.ndarray) -> np.ndarray:
    y = np.clip(y, 0.0, 1.0)
    with np.errstate(over="ignore", invalid="ignore"):
        a = (y - delta) * e_minus
        b = 1.0 - delta - e_plus * (1.0 - y)
    b = np.where(y >= 1.0, 1.0 - delta, np.nan_to_num(b, nan=-np.inf, neginf=-np.inf))
    return np.maximum(0.0, np.maximum(a, b))


class ApproxDpInverse:
    """The blow-up inverse of the (eps, ``delta``)-DP curves as a function of (y, eps), with e^eps prepared once."""

    def __init__(self, delta: float) -> None:
        self.delta = float(delta)

    def prepare(self, eps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with np.errstate(over="ignore"):
            return np.exp(-eps), np.exp(eps)

    def __call__(self, y: np.ndarray, state: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        return _approx_dp_inv(y, state[0], state[1], self.delta)

    def inside(self, state: tuple[np.ndarray, np.ndarray]) -> Callable[[np.ndarray, Any], np.ndarray] | None:
        """For y in [0, 1] and every e^eps finite (eps below ~709): the same values as ``__call__`` with fewer
        operations (no clip; ``1 - delta - e^eps (1 - y)`` is already ``1 - delta`` at y = 1 and never NaN).
        None when some e^eps overflowed (then ``__call__`` handles inf * 0)."""
        if not np.all(np.isfinite(state[1])):
            return None
        keep = 1.0 - self.delta
        delta = self.delta

        def inv(y: np.ndarray, st: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
            a = (y - delta) * st[0]
            b = keep - st[1] * (1.0 - y)
            np.maximum(a, b, out=a)
            return np.maximum(a, 0.0, out=a)

        return inv


def profile_blow_up_inverse(epsilons, deltas) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """The blow-up inverse of the curve of a privacy profile ``(eps_j, delta_j)`` (every pair holds): the largest
    of the pairs' (eps, delta) blow-up inverses. Returns ``inv(y, scale)`` where the profile is used as given for
    ``scale == 0`` (the parameter slot of the other families; only 0 is meaningful here)."""
    e = np.asarray(epsilons, dtype=np.float64).ravel()
    d = np.asarray(deltas, dtype=np.float64).ravel()
    if e.size == 0 or e.size != d.size or np.any(~np.isfinite(e)) or np.any((d < 0) | (d > 1) | np.isnan(d)):
        raise ParameterError(f"A privacy profile needs equally many finite epsilons and deltas in [0, 1]. Got "
                             f"{e.size} epsilons and {d.size} deltas.")

    def inv(y: np.ndarray, _unused: np.ndarray) -> np.ndarray:
        yy = np.asarray(y, dtype=np.float64)[..., None]
        return approx_dp_blow_up_inverse(yy, e, d).max(axis=-1)

    return inv


def fdp_statistic(num_canaries, guesses, correct, alpha, param, blow_up_inverse: BlowUpInverse) -> np.ndarray:
    """``r_0 + h_0 - c'/m`` of the recursion (module docstring), broadcast over all arguments (arrays of any
    compatible shapes); positive = the curve with parameter ``param`` is rejected at level ``alpha``.

    ``num_canaries`` m, ``guesses`` c' and ``correct`` c are integers with ``0 <= c <= c' <= m``; ``alpha`` in
    (0, 1]; ``blow_up_inverse(y, param)`` is elementwise (if it has a ``prepare(param)`` method, the prepared
    parameter is passed instead, once). Vectorised over the batch; the loop over i runs from the largest c down,
    on the elements still moving only: an element whose h did not change has reached its fixed point (r and h never
    change again)."""
    return _recursion(num_canaries, guesses, correct, alpha, param, blow_up_inverse, stop_when_rejected=False)


def _recursion(num_canaries, guesses, correct, alpha, param, blow_up_inverse: BlowUpInverse, *,
               stop_when_rejected: bool) -> np.ndarray:
    """The statistic of :func:`fdp_statistic`. With ``stop_when_rejected`` an element leaves the loop as soon as it
    is rejected (its statistic is then positive but not final): r and h only grow as i falls (h by a max, r by a
    non-negative step capped at 1), and floating-point addition is monotone, so a positive partial sum stays
    positive and the sign -- all :func:`fdp_rejects` reads -- is the same as the full recursion's."""
    m, cp, c, a, p = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in
                                           (num_canaries, guesses, correct, alpha, param)))
    if np.any((c < 0) | (c > cp) | (cp > m) | (m < 1)) or np.any((a <= 0) | (a > 1)):
        raise ParameterError("fdp_statistic needs 0 <= correct <= guesses <= num_canaries, num_canaries >= 1 and alpha "
                             "in (0, 1].")
    shape = c.shape
    m, cp, c, a, p = (v.ravel() for v in (m, cp, c, a, p))
    r = a * c / m
    h = a * (cp - c) / m
    bound = cp / m
    prep = getattr(blow_up_inverse, "prepare", None)
    state = prep(p) if prep is not None else p
    # inside the loop y = r lies in [0, 1] (it starts at alpha c / m and is capped at 1): a family may offer a
    # cheaper form for that domain (same values bit for bit)
    inv = getattr(blow_up_inverse, "inside", None)
    inv = inv(state) if inv is not None else None
    if inv is None:
        inv = blow_up_inverse
    ci = c.astype(np.int64)
    idx = np.flatnonzero(ci > 0)                  # elements still moving (frozen ones are written back)
    if stop_when_rejected:
        idx = idx[(r[idx] + h[idx] - bound[idx]) <= 0.0]
    order = np.argsort(-ci[idx], kind="stable")
    idx = idx[order]
    neg_c = -ci[idx]
    started = 0                                   # idx[:started] have c > i
    i = int(ci[idx[0]]) - 1 if idx.size else -1
    enter = i                                     # the next i at which elements join (c - 1 of idx[started])
    act = np.empty(0, dtype=np.int64)
    rr = hh = cc = bb = np.empty(0)
    st: object = _take(state, act)
    while i >= 0:
        if i == enter:
            n_new = started + int(np.searchsorted(neg_c[started:], -i, side="left"))  # c > i  <=>  -c < -i
            new = idx[started:n_new]
            act = np.concatenate([act, new])
            rr, hh, cc = np.concatenate([rr, r[new]]), np.concatenate([hh, h[new]]), np.concatenate([cc, cp[new]])
            if stop_when_rejected:
                bb = np.concatenate([bb, bound[new]])
            st = _join(st, _take(state, new))
            started = n_new
            enter = int(ci[idx[started]]) - 1 if started < idx.size else -1
        if act.size == 0:
            if enter < 0:
                break
            i = enter
            continue
        hn = np.maximum(hh, inv(rr, st))
        moving = hn != hh
        rr = np.minimum(rr + (i / (cc - i)) * (hn - hh), 1.0)
        hh = hn
        if stop_when_rejected:
            moving &= (rr + hh - bb) <= 0.0
        if np.count_nonzero(moving) < moving.size:
            done = ~moving
            r[act[done]], h[act[done]] = rr[done], hh[done]
            act, rr, hh, cc, st = act[moving], rr[moving], hh[moving], cc[moving], _take(st, moving)
            if stop_when_rejected:
                bb = bb[moving]
        i -= 1
    if act.size:
        r[act], h[act] = rr, hh
    return (r + h - bound).reshape(shape)


def _join(a: object, b: object) -> object:
    if isinstance(a, tuple):
        return tuple(np.concatenate([x, y]) for x, y in zip(a, b))  # type: ignore[arg-type]
    return np.concatenate([a, b])  # type: ignore[list-item]


def _take(state: object, idx: np.ndarray) -> object:
    if isinstance(state, tuple):
        return tuple(x[idx] for x in state)
    return state[idx]  # type: ignore[index]


def fdp_rejects(num_canaries, guesses, correct, alpha, param, blow_up_inverse: BlowUpInverse) -> np.ndarray:
    """Boolean: the recursion rejects the curve (statistic > 0)."""
    return _recursion(num_canaries, guesses, correct, alpha, param, blow_up_inverse, stop_when_rejected=True) > 0.0


def largest_rejected(num_canaries, guesses, correct, alpha, blow_up_inverse: BlowUpInverse, *, low: float = 0.0,
                     high: float, points: int = 15, rounds: int = 6) -> np.ndarray:
    """Per batch element (1-d arrays ``guesses`` / ``correct`` / ``alpha``, broadcast), the largest parameter in
    ``[low, high]`` of a family (larger parameter = weaker privacy) that the recursion rejects; ``low`` when not even
    ``low`` is rejected, ``high`` when ``high`` is.

    Grid refinement from the private end: each round evaluates ``points`` interior points of the current bracket
    and keeps [last rejected before the first non-rejected, first non-rejected]; the returned value is always a
    parameter that was rejected (or ``low``), so it errs low (resolution ``(high - low) / (points + 1) ** rounds``)."""
    m, cp, c, a = np.broadcast_arrays(*(np.atleast_1d(np.asarray(v, dtype=np.float64))
                                       for v in (num_canaries, guesses, correct, alpha)))
    shape = c.shape
    lo = np.full(shape, float(low))
    hi = np.full(shape, float(high))
    ok = fdp_rejects(m, cp, c, a, lo, blow_up_inverse)
    top = fdp_rejects(m, cp, c, a, hi, blow_up_inverse)
    todo = ok & ~top
    out = np.where(top, hi, lo)
    if not todo.any():
        return out
    idx = np.flatnonzero(todo.ravel())
    mm, cc, kk, aa = (v.ravel()[idx][:, None] for v in (m, cp, c, a))
    blo, bhi = lo.ravel()[idx], hi.ravel()[idx]
    frac = np.linspace(0.0, 1.0, points + 2)[1:-1]
    for _ in range(rounds):
        grid = blo[:, None] + (bhi - blo)[:, None] * frac[None, :]
        rej = fdp_rejects(mm, cc, kk, aa, grid, blow_up_inverse)
        first = np.where((~rej).any(axis=1), np.argmax(~rej, axis=1), points)
        rows = np.arange(grid.shape[0])
        new_lo = np.where(first > 0, grid[rows, np.maximum(first - 1, 0)], blo)
        new_hi = np.where(first < points, grid[rows, np.minimum(first, points - 1)], bhi)
        blo, bhi = new_lo, new_hi
    flat = out.ravel().copy()
    flat[idx] = blo
    return flat.reshape(shape)


def fdp_gdp_mu(num_canaries, guesses, correct, *, confidence: float = 0.95) -> np.ndarray:
    """The largest mu whose mu-GDP curve the recursion rejects at level ``1 - confidence`` (0 when even mu = 0,
    perfect privacy, is not rejected), vectorised over ``guesses`` / ``correct`` (and a per-element ``confidence``
    array, e.g. Bonferroni-split levels)."""
    conf = np.asarray(confidence, dtype=np.float64)
    return largest_rejected(num_canaries, guesses, correct, 1.0 - conf, GdpInverse(), high=MU_MAX)


def fdp_approx_dp_epsilon(num_canaries, guesses, correct, *, delta: float = 0.0,
                          confidence: float = 0.95) -> np.ndarray:
    """The largest epsilon whose (epsilon, ``delta``)-DP curve the recursion rejects at level ``1 - confidence``
    (vectorised like :func:`fdp_gdp_mu`). Valid for every (epsilon, delta)-DP mechanism."""
    d = check_float(delta, "delta", "fdp_approx_dp_epsilon", low=0.0, high=1.0, high_open=True)
    conf = np.asarray(confidence, dtype=np.float64)
    return largest_rejected(num_canaries, guesses, correct, 1.0 - conf, ApproxDpInverse(d), high=EPS_MAX)


def fdp_profile_p_value(num_canaries: int, guesses, correct, epsilons, deltas, *, tol: float = 1e-3) -> np.ndarray:
    """Smallest level alpha at which the recursion rejects the curve of the privacy profile ``(epsilons, deltas)``
    (1 when it is not rejected even at alpha = 1), rounded up to a relative ``tol`` (bisection in log alpha; the
    value returned is a level at which the curve *is* rejected, so it errs high); vectorised over ``guesses`` /
    ``correct``. A small value says the attack's guesses are inconsistent with the profile (a release's accounted
    curve); floored at ``e^-700``."""
    inv = profile_blow_up_inverse(epsilons, deltas)
    cp, c = np.broadcast_arrays(np.atleast_1d(np.asarray(guesses, dtype=np.float64)),
                                np.atleast_1d(np.asarray(correct, dtype=np.float64)))
    zero = np.zeros(c.shape)
    floor = -700.0
    lo = np.full(c.shape, floor)        # log alpha: not rejected at lo (where todo)
    hi = np.zeros(c.shape)              # log alpha: rejected at hi (where todo)
    at_one = fdp_rejects(num_canaries, cp, c, 1.0, zero, inv)
    at_floor = fdp_rejects(num_canaries, cp, c, math.exp(floor), zero, inv)
    todo = at_one & ~at_floor
    while todo.any() and np.max((hi - lo)[todo]) > tol:
        mid = (lo + hi) / 2.0
        r = fdp_rejects(num_canaries, cp, c, np.exp(mid), zero, inv)
        hi = np.where(todo & r, mid, hi)
        lo = np.where(todo & ~r, mid, lo)
    return np.where(at_floor, math.exp(floor), np.where(todo, np.exp(hi), 1.0))


def gdp_epsilon(mu: float, delta: float) -> float:
    """Epsilon of mu-GDP at ``delta`` (Balle & Wang 2018, Theorem 8; Dong, Roth, Su 2022, Cor. 2.13), rounded
    *down* past the root finder's tolerance (for a lower bound). 0 for mu = 0; inf for delta = 0 and mu > 0."""
    m = check_float(mu, "mu", "gdp_epsilon", low=0.0)
    d = check_float(delta, "delta", "gdp_epsilon", low=0.0, high=1.0, high_open=True)
    if m == 0.0:
        return 0.0
    if d == 0.0 or not math.isfinite(m):
        return math.inf
    root = gaussian_epsilon_root(m, d)
    return root if root in (0.0, math.inf) else max(0.0, root * (1.0 - 1e-10) - 1e-10)

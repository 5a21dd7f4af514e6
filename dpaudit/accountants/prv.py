"""The privacy-random-variable (PRV) accountant: a third route for Poisson-subsampled Gaussian DP-SGD.

Gopi, Lee, Wutschitz, "Numerical composition of differential privacy", NeurIPS 2021 (arXiv:2106.02848), through
Microsoft's ``prv_accountant`` package (its authors' implementation; numpy and scipy only). Opacus ships a port of
the same code as ``opacus.accountants.PRVAccountant``, but importing any Opacus module imports torch
(``opacus/__init__`` loads the privacy engine), and the accountants layer imports no torch; the ``prv_accountant``
package gives the same algorithm without it.

The route reports the package's **certified upper bound** ``eps_upper`` (the estimate plus the error bound of
Theorem 5.5: it computes epsilon at ``delta - delta_error`` on a grid fine enough for ``eps_error``, then adds
``eps_error``), never the estimate, so the never-below-exact guarantee holds. The package models the "remove"
direction of the add/remove pair (the dataset with the record is the first distribution); the "add" direction is a
second privacy random variable written here from its closed-form CDF (:class:`_AddDirectionSubsampledGaussian`),
and the route takes the larger epsilon of the two.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any, cast

import numpy as np
from prv_accountant import PRVAccountant as _Prv
from prv_accountant.accountant import compute_safe_domain_size
from prv_accountant.privacy_random_variables import PoissonSubsampledGaussianMechanism, PrivacyRandomVariable
from scipy import special

from dpaudit.accountants._common import append_event
from dpaudit.accountants.base import Accountant, UnsupportedEventError, rdp_function_for
from dpaudit.accountants.events import DpEvent, FixedBatchGaussian, SubsampledGaussian, flatten
from dpaudit.accountants.rdp import event_assumptions
from dpaudit.accountants.sampling import poisson_equivalent
from dpaudit.accountants.statement import PrivacyStatement, join_assumptions
from dpaudit.errors import ParameterError, check_float, check_int

__all__ = ["PrvAccountant", "PRV_EPS_ERROR", "MAX_PRV_POINTS"]

#: The PRV accountant's epsilon error (Opacus's default); the certified figure is the estimate plus at most this.
PRV_EPS_ERROR = 0.01
#: Most grid points of the discretised PRV; the route is skipped (with the reason) beyond it.
MAX_PRV_POINTS = 2_000_000
#: Most compositions the route accepts.
MAX_PRV_COMPOSITIONS = 10_000_000


#: The orders at which prv_accountant sizes its grid (its RDP accountant's default grid).
_DOMAIN_ORDERS = tuple([1 + x / 10.0 for x in range(1, 100)] + [float(a) for a in range(12, 64)])


class _RdpTable:
    """RDP of the Poisson-subsampled Gaussian at :data:`_DOMAIN_ORDERS` from dpaudit's exact, vectorised RDP (an upper
    bound, rounded up), so that sizing the grid does not run prv_accountant's per-order series (seconds at large q)."""

    def __init__(self, q: float, sigma: float) -> None:
        ev = SubsampledGaussian(q, sigma, 1)
        values = rdp_function_for(ev)(ev, np.asarray(_DOMAIN_ORDERS))
        self.table = dict(zip(_DOMAIN_ORDERS, (float(v) for v in values)))
        self.q, self.sigma = q, sigma

    def __call__(self, alpha: float) -> float:
        hit = self.table.get(float(alpha))
        if hit is not None:
            return hit
        ev = SubsampledGaussian(self.q, self.sigma, 1)
        return float(rdp_function_for(ev)(ev, np.asarray([float(alpha)]))[0])


class _RemoveDirectionSubsampledGaussian(PoissonSubsampledGaussianMechanism):
    """prv_accountant's privacy random variable of the Poisson-subsampled Gaussian (the "remove" direction), with
    dpaudit's RDP for sizing the grid."""

    def __init__(self, sampling_probability: float, noise_multiplier: float, rdp: _RdpTable) -> None:
        super().__init__(sampling_probability=sampling_probability, noise_multiplier=noise_multiplier)
        self._rdp = rdp

    def rdp(self, alpha: float) -> float:
        return self._rdp(alpha)


class _AddDirectionSubsampledGaussian(PrivacyRandomVariable):
    """Privacy loss of the "add" direction of the Poisson-subsampled Gaussian (noise multiplier sigma, rate q):
    :math:`Y = \\log\\frac{N(0,\\sigma^2)}{(1-q)N(0,\\sigma^2) + qN(1,\\sigma^2)}(X)`, :math:`X \\sim N(0, \\sigma^2)`.

    :math:`Y \\le t` iff :math:`q e^{(2X-1)/(2\\sigma^2)} \\ge e^{-t} - (1-q)`: probability 1 for
    :math:`t \\ge -\\log(1-q)`, else :math:`\\bar\\Phi((\\sigma^2 \\log r + 1/2)/\\sigma)` with
    :math:`r = (e^{-t} - (1-q))/q`. Its RDP (used only to size the grid) is bounded by the remove direction's
    (Mironov, Talwar, Zhang 2019, Theorem 5)."""

    def __init__(self, sampling_probability: float, noise_multiplier: float, rdp: _RdpTable) -> None:
        self.q = float(sampling_probability)
        self.sigma = float(noise_multiplier)
        self._rdp = rdp

    def cdf(self, t: Any) -> np.ndarray:
        t = np.asarray(t, dtype=np.float64)
        q, s = self.q, self.sigma
        log_1mq = math.log1p(-q)
        u = -t - log_1mq                       # e^{-t} = (1-q) e^u; r = (1-q)(e^u - 1)/q
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            log_em1 = np.where(u > 30.0, u + np.log1p(-np.exp(-np.minimum(u, 700.0))), np.log(np.expm1(np.minimum(u, 30.0))))
            log_r = log_1mq + log_em1 - math.log(q)
            z = (s * s * log_r + 0.5) / s
            out = np.where(u > 0, special.ndtr(-z), 1.0)
        return out

    def rdp(self, alpha: float) -> float:
        return self._rdp(alpha)


@functools.lru_cache(maxsize=128)
def _prv_cached(parts: tuple[tuple[float, float, int], ...], delta: float, eps_error: float) -> tuple[float, float, int]:
    return _prv_epsilon(list(parts), delta, eps_error)


def _prv_epsilon(parts: list[tuple[float, float, int]], delta: float, eps_error: float) -> tuple[float, float, int]:
    """(certified upper epsilon, estimate, grid points) of the composition of Poisson-subsampled Gaussians
    ``parts`` = [(q, sigma, steps)], the larger of the remove and add directions. ParameterError when the grid would
    exceed :data:`MAX_PRV_POINTS` (checked before it is built)."""
    counts = [t for _, _, t in parts]
    tables = [_RdpTable(q, s) for q, s, _ in parts]
    remove = [_RemoveDirectionSubsampledGaussian(q, s, tab) for (q, s, _), tab in zip(parts, tables)]
    add = [_AddDirectionSubsampledGaussian(q, s, tab) for (q, s, _), tab in zip(parts, tables)]
    # prv_accountant's own grid size (its remark 5.6), computed once for both directions (the add direction's RDP is
    # bounded by the remove direction's), then handed to both accountants as eps_max
    half_width = compute_safe_domain_size(remove, counts, eps_error=eps_error, delta_error=delta * 1e-3)
    mesh = eps_error / math.sqrt(sum(counts) / 2.0 * math.log(12.0 / (delta * 1e-3)))
    if not 2.0 * half_width / mesh <= MAX_PRV_POINTS:
        raise ParameterError(f"{sum(counts)} compositions need a PRV grid of about {2.0 * half_width / mesh:,.0f} points "
                             f"(out of the route's supported range, <= {MAX_PRV_POINTS:,}).")
    worst_up, worst_est, points = 0.0, 0.0, 0
    for prvs in (remove, add):
        acc = _Prv(prvs=list(prvs), max_self_compositions=counts, eps_error=eps_error, delta_error=delta * 1e-3,
                   eps_max=half_width)
        points = max(points, max(len(d.pmf) for d in acc.composer.prvs))
        low, est, up = acc.compute_epsilon(delta=delta, num_self_compositions=counts)
        if math.isnan(up) or math.isnan(est):
            raise ValueError("the PRV accountant returned NaN")
        worst_up, worst_est = max(worst_up, float(up)), max(worst_est, float(est))
    return worst_up, worst_est, points


class PrvAccountant(Accountant):
    """Compose Poisson-subsampled Gaussian events (and fixed-size batches under add/remove, which reduce to
    them), then ``get_statement(delta)``: the PRV accountant's certified upper bound (module docstring).

    Heterogeneous phases compose (one PRV per distinct (q, sigma)). The route refuses, with a
    :class:`~dpaudit.errors.ParameterError` naming the reason, what it cannot certify: q = 1 (use the exact Gaussian
    route), delta not above the accountant's floating-point floor, a grid beyond :data:`MAX_PRV_POINTS`.
    """

    name = "prv"

    def __init__(self, eps_error: float = PRV_EPS_ERROR) -> None:
        super().__init__()
        self.eps_error = check_float(eps_error, "eps_error", "PrvAccountant", low=1e-4, high=1.0)
        self._parts: dict[tuple[float, float], int] = {}
        self._assumptions: dict[str, None] = {}

    def fork(self) -> "PrvAccountant":
        new = cast(PrvAccountant, super().fork())
        new._parts = dict(self._parts)
        return new

    @staticmethod
    def _poisson(event: DpEvent) -> tuple[float, float, int] | None:
        if isinstance(event, SubsampledGaussian):
            return event.sampling_rate, event.noise_multiplier, event.steps
        if isinstance(event, FixedBatchGaussian):
            eq = poisson_equivalent(event)
            return None if eq is None else (eq[0], eq[1], event.steps)
        return None

    def supports(self, event: DpEvent) -> bool:
        return self._poisson(event) is not None

    def compose(self, event: DpEvent, count: int = 1) -> "PrvAccountant":
        count = check_int(count, "count", "PrvAccountant", low=0)
        if not isinstance(event, DpEvent):
            raise ParameterError(f"The 'event' parameter of PrvAccountant.compose must be a DpEvent. Got {event!r:.80} instead.")
        leaves = flatten(event)
        parts = []
        for leaf, mult in leaves:
            p = self._poisson(leaf)
            if p is None:
                why = f" under {leaf.neighbouring}" if isinstance(leaf, FixedBatchGaussian) else ""
                raise UnsupportedEventError(f"PrvAccountant does not support events of type {type(leaf).__name__}{why}.")
            parts.append((p[0], p[1], p[2] * mult * count))
        if count == 0:
            return self
        for q, sigma, t in parts:
            self._parts[(q, sigma)] = self._parts.get((q, sigma), 0) + t
        append_event(self._events, event, count)
        for a in join_assumptions(*(event_assumptions(leaf) for leaf, _ in leaves)):
            self._assumptions.setdefault(a, None)
        return self

    def _statement(self, target_delta: float) -> PrivacyStatement:
        if not self._parts:
            return PrivacyStatement(0.0, target_delta, "prv", assumptions=("No privacy-relevant events were composed.",))
        eps_up, eps_est, points = self.certified_epsilon(target_delta)
        base = (f"PRV accountant (Gopi, Lee, Wutschitz 2021; Microsoft's prv_accountant): the certified upper bound "
                f"(estimate {eps_est:.6g} plus the error bound, eps_error {self.eps_error:g}, delta_error "
                f"{target_delta * 1e-3:.3g}), the larger of the add and remove directions.",)
        return PrivacyStatement(eps_up, target_delta, "prv", assumptions=join_assumptions(base, tuple(self._assumptions)),
                                details={"estimate": eps_est, "eps_error": self.eps_error, "grid_points": points})

    def certified_epsilon(self, delta: float) -> tuple[float, float, int]:
        """``(certified upper epsilon, estimate, grid points)``; ParameterError when the route does not apply."""
        parts = [(q, s, t) for (q, s), t in self._parts.items()]
        total = sum(t for _, _, t in parts)
        if any(q >= 1.0 for q, _, _ in parts):
            raise ParameterError("q = 1 (full batch) is out of the PRV route's supported range; the exact Gaussian route applies.")
        if total > MAX_PRV_COMPOSITIONS:
            raise ParameterError(f"{total} compositions are out of the PRV route's supported range (<= {MAX_PRV_COMPOSITIONS}).")
        if not delta >= 1e-12:
            raise ParameterError(f"delta = {delta:g} is out of the PRV route's supported range (>= 1e-12).")
        if any(s < 0.05 or s > 1e6 or q < 1e-12 for q, s, _ in parts):
            raise ParameterError("a noise multiplier outside [0.05, 1e6] or a sampling rate below 1e-12 is out of the PRV "
                                 "route's supported range.")
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                up, est, points = _prv_cached(tuple(sorted(parts)), delta, self.eps_error)
        except (ValueError, RuntimeError, OverflowError, FloatingPointError, ZeroDivisionError, MemoryError) as exc:
            if isinstance(exc, ParameterError):
                raise
            raise ParameterError(f"the PRV accountant could not compute this case ({type(exc).__name__}: {str(exc)[:120]})") from None
        if points > MAX_PRV_POINTS:
            raise ParameterError(f"the PRV grid has {points:,} points (out of the route's supported range).")
        if math.isnan(up) or up < 0:
            raise ParameterError("the PRV accountant returned an invalid epsilon.")
        return up, est, points

"""Privacy-loss-distribution accountant: the smallest of the valid routes for what was composed.

Routes (each an upper bound on epsilon; the statement reports the smallest and names it):

- ``"gaussian-dp exact"``: everything composed is a Gaussian mechanism (``SubsampledGaussian`` with q = 1,
  ``GaussianNoisyMax`` without votes, its threshold check included). k-fold composition of mu_i-GDP mechanisms is
  exactly sqrt(sum mu_i^2)-GDP (Dong, Roth & Su 2019, Cor. 3.3), converted exactly (Balle & Wang 2018, Thm 8).
- ``"pure-dp optimal composition"``: everything composed is pure eps0-DP with one eps0 (``LaplaceNoisyMax`` without
  votes: each query; ``RandomizedResponse``: each report): exact k-fold composition (Kairouz, Oh, Viswanath 2015).
- ``"basic composition"``: everything composed is pure DP: the sum of the epsilons (delta 0).
- ``"pld (dp_accounting)"``: dp_accounting's privacy loss distributions (pessimistic discretisation, Doroshenko et
  al., "Connect the dots", PETS 2022), convolved by FFT. dp_accounting adds the truncated tail mass to delta, but
  FFT round-off makes the computed delta(eps) off by up to ~1e-13 in absolute terms (measured: -5e-14 against the
  exact Gaussian, where the computed delta even goes negative). dpaudit therefore asks dp_accounting for the
  epsilon at ``delta - 1e-12`` (:data:`FFT_DELTA_ALLOWANCE`) and does not use this route for delta <= 2e-12.

Supported events: ``SubsampledGaussian``, ``FixedBatchGaussian`` (under add/remove the Poisson-subsampled Gaussian
that bounds it: rate B/n, noise multiplier sigma/2; under substitution and zero-out Dong-Roth-Su's subsampling operator
without replacement at sensitivity 2C as a PLD, :func:`dpaudit.accountants.sampling.fixed_size_gaussian_pld`; zero-out
with B = n is the exact Gaussian), ``ShuffledBatchGaussian`` (its participations
are Gaussian mechanisms: the exact route), ``RandomizedResponse`` (K labels, each dp_accounting's C-ary randomized
response, REPLACE_ONE), ``LaplaceNoisyMax`` / ``GaussianNoisyMax`` without votes, ``Shuffled`` (Feldman-McMillan-Talwar
2021's dominating pair, :func:`dpaudit.accountants.ldp.shuffle_pld`). Data-dependent PATE events are not supported
(:class:`~dpaudit.accountants.base.UnsupportedEventError`).
"""

from __future__ import annotations

import functools
import math
from typing import Any, cast

import numpy as np
from dp_accounting import privacy_accountant
from dp_accounting.pld import common as pld_common
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from dpaudit.accountants._common import FFT_DELTA_ALLOWANCE, MAX_FFT_COMPOSITIONS, append_event, inv_square, quiet_overflow
from dpaudit.accountants.base import Accountant, UnsupportedEventError
from dpaudit.accountants.closed_form import gaussian_mechanism_epsilon, pure_composition_epsilon
from dpaudit.accountants.events import (DpEvent, FixedBatchGaussian, GaussianNoisyMax, LaplaceNoisyMax, RandomizedResponse,
                                        Shuffled, ShuffledBatchGaussian, SubsampledGaussian, flatten)
from dpaudit.accountants.ldp import shuffle_pld
from dpaudit.accountants.rdp import RdpAccountant, event_assumptions
from dpaudit.accountants.sampling import fixed_size_gaussian_pld
from dpaudit.accountants.statement import PrivacyStatement, join_assumptions
from dpaudit.errors import DPAuditError, ParameterError, check_float, check_int

__all__ = ["PldAccountant", "FFT_DELTA_ALLOWANCE", "MAX_FFT_COMPOSITIONS"]

#: Most privacy-loss grid points the FFT route aims for; the interval is coarsened (pessimistically) beyond it.
MAX_GRID_POINTS = 2_000_000


@functools.lru_cache(maxsize=32)
def gaussian_pld(standard_deviation: float, sensitivity: float = 1.0, sampling_prob: float = 1.0, *,
                 value_discretization_interval: float, pessimistic_estimate: bool = True,
                 use_connect_dots: bool = True) -> Any:
    """dp_accounting's one-step PLD of the (subsampled) Gaussian mechanism, memoised per process: building it walks
    the loss grid in Python (about 0.6 s at the default interval), and one process often accounts the same mechanism
    several times (an upper bound and its worst-case pair, several claims or routes over one recipe). The object is
    only ever composed, never changed (dp_accounting's composition returns new objects), so sharing it is safe; at
    most 32 are kept (a one-step PLD holds the grid up to its tail, a few thousand points)."""
    return pld_lib.from_gaussian_mechanism(standard_deviation, sensitivity=sensitivity, sampling_prob=sampling_prob,
                                           value_discretization_interval=value_discretization_interval,
                                           pessimistic_estimate=pessimistic_estimate, use_connect_dots=use_connect_dots)
_PROBE_ORDERS = (1.01, 1.1, 1.5, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 256.0)


def _gaussian_mu2(event: DpEvent) -> float | None:
    """mu^2 of one occurrence of a Gaussian-mechanism event (sensitivity/sigma squared, summed), else None."""
    if isinstance(event, SubsampledGaussian) and event.sampling_rate == 1.0:
        return event.steps * inv_square(event.noise_multiplier)
    if isinstance(event, FixedBatchGaussian) and event.sampling_rate == 1.0 and event.neighbouring != "substitution":
        s = 2.0 if event.neighbouring == "add-remove" else 1.0
        return event.steps * s * s * inv_square(event.noise_multiplier)
    if isinstance(event, ShuffledBatchGaussian):
        return event.participations * event.sensitivity ** 2 * inv_square(event.noise_multiplier)
    if isinstance(event, GaussianNoisyMax) and event.votes is None:
        per = 2.0 * inv_square(event.sigma)
        if event.sigma_threshold is not None:
            per += inv_square(event.sigma_threshold)
        return event.n_queries * per
    return None


def _pure_parts(event: DpEvent) -> tuple[float, int] | None:
    """(eps0, k): one occurrence of ``event`` is k adaptive eps0-DP mechanisms, else None."""
    if isinstance(event, LaplaceNoisyMax) and event.votes is None:
        return event.query_epsilon, event.n_queries
    if isinstance(event, RandomizedResponse):
        return event.report_epsilon, 1
    return None


class PldAccountant(Accountant):
    """Compose events, then ``get_statement(delta)``: the smallest epsilon over the valid routes (module docstring).

    Composition only validates and records (invalid or unsupported events leave the state untouched); the PLDs are
    built when a statement is asked for, incrementally. ``value_discretization_interval`` is dp_accounting's grid
    of privacy-loss values (pessimistic rounding).
    """

    name = "pld"

    def __init__(self, value_discretization_interval: float = 1e-4) -> None:
        super().__init__()
        self.value_discretization_interval = check_float(
            value_discretization_interval, "value_discretization_interval", "PldAccountant", low=0.0, high=1.0, low_open=True)
        self._leaves: list[tuple[DpEvent, int]] = []
        self._built: tuple[int, Any] = (0, None)  # (leaves folded in, dp_accounting PLD or None)
        self._built_vdi = self.value_discretization_interval
        self._assumptions: dict[str, None] = {}
        self.warnings: tuple[str, ...] = ()

    def fork(self) -> "PldAccountant":
        new = cast(PldAccountant, super().fork())
        new._leaves = list(self._leaves)
        return new

    def supports(self, event: DpEvent) -> bool:
        if isinstance(event, (LaplaceNoisyMax, GaussianNoisyMax)):
            return event.votes is None
        if isinstance(event, FixedBatchGaussian):
            return True   # every relation: fixed_size_gaussian_pld
        return isinstance(event, (SubsampledGaussian, RandomizedResponse, Shuffled, ShuffledBatchGaussian))

    def compose(self, event: DpEvent, count: int = 1) -> "PldAccountant":
        count = check_int(count, "count", "PldAccountant", low=0)
        if not isinstance(event, DpEvent):
            raise ParameterError(f"The 'event' parameter of PldAccountant.compose must be a DpEvent. Got {event!r:.80} instead.")
        leaves = flatten(event)
        for leaf, _ in leaves:
            if not self.supports(leaf):
                why = (" with votes (data-dependent)" if getattr(leaf, "votes", None) is not None else
                       "")
                raise UnsupportedEventError(f"PldAccountant does not support events of type {type(leaf).__name__}{why}.")
        if count == 0:
            return self
        new_assumptions = join_assumptions(*(event_assumptions(leaf) for leaf, _ in leaves))
        self._leaves.extend((leaf, mult * count) for leaf, mult in leaves)
        append_event(self._events, event, count)
        for a in new_assumptions:
            self._assumptions.setdefault(a, None)
        return self

    # ------------------------------------------------------------------------------------------ routes

    def _leaf_pld(self, event: DpEvent, count: int, vdi: float) -> Any:
        inner = {SubsampledGaussian: "steps", RandomizedResponse: "num_samples", LaplaceNoisyMax: "num_queries",
                 GaussianNoisyMax: "num_queries", FixedBatchGaussian: "steps",
                 ShuffledBatchGaussian: "participations"}.get(type(event))
        n = count * (int(getattr(event, inner)) if inner else 1)
        if n > MAX_FFT_COMPOSITIONS:
            raise ParameterError(f"{n} compositions are out of the FFT route's supported range (<= {MAX_FFT_COMPOSITIONS}).")
        if isinstance(event, SubsampledGaussian):
            one = gaussian_pld(event.noise_multiplier, sampling_prob=event.sampling_rate, value_discretization_interval=vdi)
            return one.self_compose(event.steps * count)
        if isinstance(event, FixedBatchGaussian):
            if event.neighbouring == "add-remove":   # the Poisson Gaussian at sigma/2 (memoised here)
                one = gaussian_pld(event.noise_multiplier / 2.0, sampling_prob=event.sampling_rate,
                                   value_discretization_interval=vdi)
            else:   # Dong-Roth-Su's subsampling operator without replacement (2C sensitivity), as a PLD
                one = fixed_size_gaussian_pld(event.dataset_size, event.batch_size, event.noise_multiplier, 1,
                                              neighbouring=event.neighbouring, value_discretization_interval=vdi)
            return one.self_compose(event.steps * count)
        if isinstance(event, ShuffledBatchGaussian):
            one = gaussian_pld(event.noise_multiplier / event.sensitivity, value_discretization_interval=vdi)
            return one.self_compose(event.participations * count)
        if isinstance(event, RandomizedResponse):
            one = pld_lib.from_randomized_response(
                noise_parameter=1.0 - event.beta, num_buckets=event.num_classes, value_discretization_interval=vdi,
                neighboring_relation=privacy_accountant.NeighboringRelation.REPLACE_ONE)
            return one.self_compose(event.num_samples * count)
        if isinstance(event, LaplaceNoisyMax):
            one = pld_lib.from_privacy_parameters(pld_common.DifferentialPrivacyParameters(event.query_epsilon, 0.0),
                                                  value_discretization_interval=vdi)
            return one.self_compose(event.n_queries * count)
        if isinstance(event, GaussianNoisyMax):
            one = gaussian_pld(event.sigma, sensitivity=math.sqrt(2.0), value_discretization_interval=vdi)
            if event.sigma_threshold is not None:
                one = one.compose(gaussian_pld(event.sigma_threshold, sensitivity=1.0, value_discretization_interval=vdi))
            return one.self_compose(event.n_queries * count)
        if isinstance(event, Shuffled):
            return shuffle_pld(event.local_epsilon, event.num_users, value_discretization_interval=vdi).self_compose(count)
        raise UnsupportedEventError(f"PldAccountant does not support events of type {type(event).__name__}.")

    def _interval(self, delta: float) -> float:
        """The discretisation interval: the requested one, coarsened so that the loss range up to about the RDP
        epsilon fits in :data:`MAX_GRID_POINTS` points (a coarser pessimistic grid only rounds up)."""
        probe = RdpAccountant(_PROBE_ORDERS)
        est = 0.0
        for leaf, count in self._leaves:
            if probe.supports(leaf):
                probe.compose(leaf, count)
            elif isinstance(leaf, Shuffled):
                est += count * leaf.local_epsilon
        est += probe.epsilon_quiet(delta)
        vdi = max(self.value_discretization_interval, est / MAX_GRID_POINTS)
        fine = self._tiny_epsilon_interval(est)
        if fine is not None:
            vdi = min(vdi, fine)
        if not vdi <= 0.05:
            raise ParameterError(f"the loss range (epsilon about {est:.3g}) is out of the FFT route's supported range "
                                 f"(a grid of {MAX_GRID_POINTS} points at interval <= 0.05).")
        return vdi

    def _tiny_epsilon_interval(self, est: float) -> float | None:
        """A finer interval where the epsilon is tiny (RDP estimate below 0.2; issue 47: at epsilon ~1e-3 the default 1e-4 per step made the
        pessimistic figure 2.4x the exact one): about est / 5000 (est is the RDP figure, above the PLD's), but no finer
        than one step's loss range over 1e5 points (its grid is built point by point) nor 1e-7. Only for subsampled
        Gaussian leaves (SubsampledGaussian, FixedBatchGaussian), whose largest loss to about 12 standard deviations is
        :math:`\\log(1 + q(e^{(1+24s)/(2s^2)} - 1))` (noise s in units of the sensitivity: sigma/2 for fixed-size
        batches)."""
        if not 0.0 < est < 0.2:
            return None
        lmax = 0.0
        for leaf, _ in self._leaves:
            if isinstance(leaf, SubsampledGaussian):
                q, s = leaf.sampling_rate, leaf.noise_multiplier
            elif isinstance(leaf, FixedBatchGaussian):   # add/remove: the Poisson Gaussian at sigma/2; the others
                q, s = leaf.sampling_rate, leaf.noise_multiplier / 2.0   # the hull of that pair (sensitivity 2C)
            else:
                return None
            with np.errstate(over="ignore"):
                lmax = max(lmax, math.log1p(q * math.expm1(min((1.0 + 24.0 * s) / (2.0 * s * s), 700.0))))
        return max(est / 5000.0, lmax / 1e5, 1e-7)

    def _fft_epsilon(self, delta: float) -> float:
        if delta <= 2.0 * FFT_DELTA_ALLOWANCE:
            raise ParameterError(f"delta = {delta:g} is within the FFT round-off allowance ({FFT_DELTA_ALLOWANCE:g}).")
        vdi = self._interval(delta)
        done, pld = self._built
        if pld is None or self._built_vdi != vdi:
            done, pld = 0, pld_lib.identity(value_discretization_interval=vdi)
        try:
            with np.errstate(all="ignore"):  # dp_accounting's own float warnings; the result is checked below
                for leaf, count in self._leaves[done:]:
                    pld = pld.compose(self._leaf_pld(leaf, count, vdi))
                self._built, self._built_vdi = (len(self._leaves), pld), vdi
                eps = float(pld.get_epsilon_for_delta(delta - FFT_DELTA_ALLOWANCE))
            if math.isnan(eps):
                raise ValueError("NaN epsilon")
            return max(eps, 0.0)
        except (OverflowError, ZeroDivisionError, FloatingPointError, MemoryError, ValueError) as exc:
            if isinstance(exc, DPAuditError):
                raise
            raise ParameterError(f"dp_accounting could not build the PLD ({type(exc).__name__}: {exc})") from None

    def privacy_profile(self, epsilons) -> np.ndarray:
        """delta(eps) of everything composed at each of ``epsilons`` (>= 0), from dp_accounting's pessimistic PLD
        plus the FFT round-off allowance: at or above the true privacy profile, so the trade-off curve built from
        these pairs lies at or below the mechanism's (a test that rejects it also rejects the true curve)."""
        eps = np.asarray(epsilons, dtype=np.float64).ravel()
        if eps.size == 0 or np.any(~np.isfinite(eps)) or np.any(eps < 0):
            raise ParameterError(f"The 'epsilons' parameter of privacy_profile must be finite values >= 0. Got "
                                 f"{eps.size} values.")
        if not self._leaves:
            return np.zeros(eps.size)
        vdi = self._interval(1e-10)
        pld = pld_lib.identity(value_discretization_interval=vdi)
        try:
            with np.errstate(all="ignore"):
                for leaf, count in self._leaves:
                    pld = pld.compose(self._leaf_pld(leaf, count, vdi))
                d = np.asarray(pld.get_delta_for_epsilon(eps), dtype=np.float64)
        except (OverflowError, ZeroDivisionError, FloatingPointError, MemoryError, ValueError) as exc:
            if isinstance(exc, DPAuditError):
                raise
            raise ParameterError(f"dp_accounting could not build the PLD ({type(exc).__name__}: {exc})") from None
        if np.any(np.isnan(d)):
            raise ParameterError("dp_accounting returned NaN deltas for the privacy profile.")
        return np.clip(d + FFT_DELTA_ALLOWANCE, 0.0, 1.0)

    def routes(self, delta: float, *, fft: bool | None = None) -> tuple[dict[str, float], dict[str, str]]:
        """``({route: epsilon}, {route: why it does not apply})`` at ``delta`` for everything composed so far.

        The FFT route is skipped when an exact route applies (it can only be at or above the exact figure), unless
        ``fft=True``."""
        eps: dict[str, float] = {}
        skipped: dict[str, str] = {}
        mu2s = [_gaussian_mu2(leaf) for leaf, _ in self._leaves]
        if all(m is not None for m in mu2s):
            mu = math.sqrt(sum(float(m) * c for m, (_, c) in zip(mu2s, self._leaves) if m is not None))
            eps["gaussian-dp exact"] = (gaussian_mechanism_epsilon(mu, delta) if delta > 0 and math.isfinite(mu) and mu > 0
                                        else (0.0 if mu == 0 else math.inf))
        pures = [_pure_parts(leaf) for leaf, _ in self._leaves]
        if all(p is not None for p in pures):
            parts = [(p[0], p[1] * c) for p, (_, c) in zip(pures, self._leaves) if p is not None]
            eps["basic composition"] = math.fsum(e0 * k for e0, k in parts)
            e0s = {e0 for e0, _ in parts}
            if len(e0s) == 1:
                try:
                    eps["pure-dp optimal composition"] = pure_composition_epsilon(parts[0][0], sum(k for _, k in parts), delta)
                except ParameterError as exc:
                    skipped["pure-dp optimal composition"] = str(exc)
        # the FFT PLD of these events is the same pair as the exact route (Gaussian; binary randomized response for
        # a pure-DP noisy max), so it cannot be smaller; C-ary randomized response is not the worst case: keep FFT
        exact = "gaussian-dp exact" in eps or (
            "pure-dp optimal composition" in eps and not any(isinstance(leaf, RandomizedResponse) for leaf, _ in self._leaves))
        if fft or (fft is None and not exact):
            try:
                eps["pld (dp_accounting)"] = self._fft_epsilon(delta)
            except ParameterError as exc:
                skipped["pld (dp_accounting)"] = str(exc)
        return eps, skipped

    @quiet_overflow
    def _statement(self, target_delta: float) -> PrivacyStatement:
        if not self._leaves:
            return PrivacyStatement(0.0, target_delta, "pld", assumptions=("No privacy-relevant events were composed.",))
        eps, skipped = self.routes(target_delta)
        finite = {k: v for k, v in eps.items() if not math.isnan(v)}
        if finite:
            route = min(finite, key=lambda k: finite[k])
            best = finite[route]
        else:
            route, best = "none", math.inf
        base = [f"Smallest epsilon over the valid routes ({', '.join(f'{k}: {v:.6g}' for k, v in eps.items())}); "
                f"taken from {route}."]
        if route == "pld (dp_accounting)":
            base.append(f"dp_accounting PLDs convolved (adaptive composition), pessimistic discretisation (interval "
                        f"{self._built_vdi:g}); epsilon taken at delta - {FFT_DELTA_ALLOWANCE:g} to cover "
                        "FFT round-off.")
        for k, why in skipped.items():
            base.append(f"Route {k} not used: {why}")
        if math.isinf(best):
            base.append("epsilon is infinite: no route gives a finite epsilon at this delta.")
        return PrivacyStatement(best, target_delta, "pld" if route == "pld (dp_accounting)" else route,
                                assumptions=join_assumptions(tuple(base), tuple(self._assumptions)),
                                details={"route": route, **{f"epsilon[{k}]": v for k, v in eps.items()}})

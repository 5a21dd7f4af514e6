"""DP-SGD: the Poisson-subsampled Gaussian mechanism, and the account of a DP-SGD run under its batch sampler.

:func:`account_dpsgd` accounts Poisson sampling, fixed-size batches without replacement and shuffled batches
(:mod:`dpaudit.accountants.sampling`) by every route that applies -- RDP, PLD and the PRV accountant
(:mod:`dpaudit.accountants.prv`) -- and makes the smallest valid upper bound the headline.

References
----------
- Abadi et al., "Deep learning with differential privacy", CCS 2016 (DP-SGD, the moments accountant).
- Mironov, Talwar, Zhang, "Rényi differential privacy of the sampled Gaussian mechanism", arXiv:1908.10530
  (the RDP computed by dp_accounting for ``PoissonSampledDpEvent(GaussianDpEvent)``).
- Koskela, Jälkö, Honkela 2020; Doroshenko et al., "Connect the dots", PETS 2022 (PLD accounting).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from dpaudit.accountants._common import inv_square, quiet_overflow
from dpaudit.accountants._dp_accounting import rdp_poisson_subsampled_gaussian
from dpaudit.accountants.base import register_rdp
from dpaudit.accountants.events import (DpEvent, FixedBatchGaussian, ShuffledBatchGaussian, SubsampledGaussian,
                                        canonical_relation, flatten)
from dpaudit.accountants.pairs import dpsgd_lower_bound
from dpaudit.accountants.pld import PldAccountant
from dpaudit.accountants.prv import PrvAccountant
from dpaudit.accountants.rdp import RdpAccountant
from dpaudit.accountants.statement import AccountingResult, PrivacyStatement, headline_facts, pick_headline
from dpaudit.errors import ParameterError, check_bool, check_choice, check_float, check_int, check_probability

__all__ = ["rdp_subsampled_gaussian", "dpsgd_steps", "dpsgd_event", "account_dpsgd", "dpsgd_routes", "DPSGD_ASSUMPTIONS",
           "SAMPLING_SCHEMES", "SAMPLING_NAMES"]

#: The batch samplers ``account_dpsgd`` accounts: Poisson (each example independently with probability q = B/n),
#: ``fixed-wor`` (exactly B examples without replacement, independently at each step), ``shuffle`` (a random
#: permutation per epoch cut into consecutive batches of B: PyTorch's ``DataLoader(shuffle=True)``).
SAMPLING_SCHEMES = ("poisson", "shuffle", "fixed-wor")
#: How each scheme is named in every output.
SAMPLING_NAMES = {"poisson": "Poisson sampling", "fixed-wor": "fixed-size batches sampled without replacement",
                  "shuffle": "shuffled fixed-size batches"}

DPSGD_ASSUMPTIONS = (
    "Neighbouring datasets differ by adding or removing one example (example-level DP).",
    "Each step samples every example independently with probability q (Poisson sampling); shuffled fixed-size "
    "batches are NOT covered by this analysis (account them with sampling='shuffle').",
    "Per-example gradients are clipped to L2 norm C and Gaussian noise of standard deviation sigma*C is added to their sum.",
    "Only the released model/updates are accounted; hyper-parameter tuning and any other use of the data are not.",
)
_SCHEME_ASSUMPTION = {
    "fixed-wor": "Each step draws exactly B of the n examples uniformly without replacement, independently of the other "
                 "steps (not shuffling: an example may be in two consecutive batches).",
    "shuffle": "Each epoch permutes the n examples uniformly at random and cuts them into consecutive batches of B; an "
               "example is in at most one batch per epoch. No privacy amplification by shuffling is counted: the "
               "upper bound is that of deterministic batches, valid whatever the order (Chua et al., ICML 2024, show "
               "that the Poisson analysis does not bound shuffled batches).",
}


#: Most DP-SGD steps accepted (the RDP is exact at any count; the PLD route stops at 1e7 compositions).
MAX_STEPS = 1e15
#: Most quadrature points per fractional order; beyond it the convexity bound between integer orders is used.
_MAX_QUAD_POINTS = 400_000
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def log_a_fractional(q: float, sigma: float, order: float) -> float:
    r""":math:`\log A_\alpha` for the Poisson-subsampled Gaussian at any real order :math:`\alpha > 1`, by quadrature.

    :math:`A_\alpha = E_{x \sim N(0,1)}[((1-q) + q\,e^{x/\sigma - 1/(2\sigma^2)})^\alpha]` (Mironov, Talwar, Zhang 2019,
    Section 3: the RDP is :math:`\log A_\alpha / (\alpha-1)`). The log integrand is summed with the trapezoidal rule
    (log-sum-exp, no overflow) on :math:`[-40, \alpha/\sigma + 40]`, which holds both modes (near 0 and near
    :math:`\alpha/\sigma`); the step is at most 0.05 and at most sigma/10 (the width of the integrand's transition),
    where the trapezoidal rule on this smooth, fast-decaying integrand is accurate far beyond double precision. The
    mass outside the interval is below e^-800 of the total. The result is rounded up by a relative 1e-10.
    Returns inf when the grid would need more than 400,000 points (the caller then bounds it by convexity).
    """
    h = min(0.05, sigma / 10.0)
    hi = order / sigma + 40.0
    n = int(math.ceil((hi + 40.0) / h)) + 1
    if n > _MAX_QUAD_POINTS:
        return math.inf
    x = np.linspace(-40.0, hi, n)
    step = (hi + 40.0) / (n - 1)
    with np.errstate(divide="ignore"):
        log_1mq = math.log1p(-q) if q < 1.0 else -math.inf
    inner = np.logaddexp(log_1mq, math.log(q) + x / sigma - 0.5 * inv_square(sigma))
    g = -0.5 * x * x - _LOG_SQRT_2PI + order * inner
    m = float(g.max())
    val = m + math.log(float(np.exp(g - m).sum()) * step)
    return val + 1e-10 * abs(val) + 1e-15


def _rdp_exact(q: float, sigma: float, orders: tuple[float, ...]) -> np.ndarray:
    r"""Integer orders: dp_accounting's exact finite sum. Fractional orders: :func:`log_a_fractional`; where that is
    out of range, the chord between the neighbouring integer orders, an upper bound because
    :math:`\log A_\alpha` is convex in :math:`\alpha` (Hölder's inequality)."""
    a = np.asarray(orders, dtype=np.float64)
    out = np.empty(a.size)
    if sigma < 1e-150:  # 1/sigma^2 overflows: the RDP is +inf at every order (conservative and, here, right)
        out[:] = np.inf
        return out
    if sigma > 1e100:  # sigma^2 overflows dp_accounting's arithmetic; subsampling never hurts: the full-batch
        return a * (0.5 * inv_square(sigma))  # Gaussian's alpha / (2 sigma^2) (Mironov 2017, Prop. 7) bounds it
    integer = a == np.round(a)
    if np.any(integer):
        out[integer] = rdp_poisson_subsampled_gaussian(q, sigma, a[integer])
    for i in np.flatnonzero(~integer):
        la = log_a_fractional(q, sigma, float(a[i]))
        if not math.isfinite(la):
            lo, hi = math.floor(a[i]), math.floor(a[i]) + 1
            r = rdp_poisson_subsampled_gaussian(q, sigma, [max(lo, 2), hi])
            la_lo = 0.0 if lo < 2 else float(r[0]) * (lo - 1)
            la_hi = float(r[1]) * (hi - 1)
            la = (hi - a[i]) * la_lo + (a[i] - lo) * la_hi
        out[i] = max(la, 0.0) / (a[i] - 1.0)
    return out


@functools.lru_cache(maxsize=256)
def _rdp_cached(q: float, sigma: float, orders: tuple[float, ...]) -> np.ndarray:
    out = _rdp_exact(q, sigma, orders)
    out = np.where(np.isnan(out), np.inf, np.maximum(out, 0.0))
    out.setflags(write=False)
    return out


def rdp_subsampled_gaussian(sampling_rate: float, noise_multiplier: float, orders) -> np.ndarray:
    """RDP of ONE step of the Poisson-subsampled Gaussian mechanism at each order (add/remove neighbours,
    Mironov, Talwar, Zhang 2019): exact at every order — integer orders by dp_accounting's finite sum, fractional
    orders by quadrature (:func:`log_a_fractional`, checked against mpmath in the tests). dp_accounting's own
    fractional-order series sums absolute values of its terms and can be loose by 30x (issue 17)."""
    owner = "rdp_subsampled_gaussian"
    q = check_float(sampling_rate, "sampling_rate", owner, low=0.0, high=1.0, low_open=True)
    sigma = check_float(noise_multiplier, "noise_multiplier", owner, low=0.0, low_open=True)
    a = np.asarray(orders, dtype=np.float64)
    if a.ndim != 1 or np.any(~(a > 1.0)) or np.any(~np.isfinite(a)):
        raise ParameterError(f"The 'orders' parameter of {owner} must be a 1-D array of finite floats > 1. Got {a!r:.60} instead.")
    return np.array(_rdp_cached(q, sigma, tuple(float(x) for x in a)))


@register_rdp(SubsampledGaussian)
def _rdp_sg_event(event: SubsampledGaussian, orders: np.ndarray) -> np.ndarray:
    return event.steps * rdp_subsampled_gaussian(event.sampling_rate, event.noise_multiplier, orders)


def dpsgd_steps(*, dataset_size: int, batch_size: int, epochs: float | None = None, steps: int | None = None) -> tuple[int, float]:
    """``(steps, q)``: q = batch_size / dataset_size; steps given, or ceil(epochs * dataset_size / batch_size)."""
    owner = "account_dpsgd"
    n = check_int(dataset_size, "dataset_size", owner, low=1)
    b = check_int(batch_size, "batch_size", owner, low=1)
    if b > n:
        raise ParameterError(
            f"The 'batch_size' parameter of {owner} must be an int <= dataset_size ({n}) so that the sampling rate is "
            f"at most 1. Got {b} instead.")
    if (epochs is None) == (steps is None):
        raise ParameterError(f"{owner} needs exactly one of 'epochs' or 'steps'. Got epochs={epochs!r}, steps={steps!r} instead.")
    if steps is not None:
        t = check_int(steps, "steps", owner, low=1, high=int(MAX_STEPS))
    else:
        e = check_float(epochs, "epochs", owner, low=0.0, low_open=True)
        steps_f = e * n / b
        if not steps_f <= MAX_STEPS:
            raise ParameterError(f"The 'epochs' parameter of {owner} is out of the supported range: epochs * dataset_size / "
                                 f"batch_size must be at most {MAX_STEPS:g} steps. Got epochs={e!r} ({steps_f:g} steps) instead.")
        t = math.ceil(steps_f - 1e-9)
        if t < 1:
            raise ParameterError(f"The 'epochs' parameter of {owner} must give at least one step (epochs * dataset_size / "
                                 f"batch_size >= 1e-9). Got epochs={e!r} instead.")
    return t, b / n


def dpsgd_event(*, dataset_size: int, batch_size: int, noise_multiplier: float, epochs: float | None = None,
                steps: int | None = None, sampling: str = "poisson", neighbouring: str | None = None,
                drop_last: bool = False, owner: str = "account_dpsgd") -> DpEvent:
    """The DP event of a DP-SGD run: ``SubsampledGaussian`` (Poisson), ``FixedBatchGaussian`` (fixed-wor) or
    ``ShuffledBatchGaussian`` (shuffle). With ``epochs``, shuffled runs take ceil(epochs * T) steps (T batches per
    epoch), the others ceil(epochs * n / B). ``neighbouring`` defaults to add-remove (Poisson, fixed-wor) and zero-out
    (shuffle); Poisson takes add-remove or zero-out (the same pair)."""
    sampling = check_choice(sampling, "sampling", owner, SAMPLING_SCHEMES)
    neighbouring = canonical_relation(neighbouring)  # replace-one = substitution
    sigma = check_float(noise_multiplier, "noise_multiplier", owner, low=0.0, low_open=True)
    drop_last = check_bool(drop_last, "drop_last", owner)
    if drop_last and sampling != "shuffle":
        raise ParameterError(f"The 'drop_last' parameter of {owner} applies to sampling='shuffle' only. Got it with "
                             f"sampling={sampling!r} instead.")
    if sampling == "shuffle":
        relation = check_choice("zero-out" if neighbouring is None else neighbouring, "neighbouring", owner,
                                ("zero-out", "substitution"))
        n = check_int(dataset_size, "dataset_size", owner, low=1)
        b = check_int(batch_size, "batch_size", owner, low=1)
        if b > n:
            raise ParameterError(f"The 'batch_size' parameter of {owner} must be an int <= dataset_size ({n}). Got {b} instead.")
        per_epoch = n // b if drop_last else -(-n // b)
        if epochs is not None and steps is None:
            e = check_float(epochs, "epochs", owner, low=0.0, low_open=True)
            if not e * per_epoch <= MAX_STEPS:
                raise ParameterError(f"The 'epochs' parameter of {owner} is out of the supported range: epochs * batches "
                                     f"per epoch must be at most {MAX_STEPS:g} steps. Got epochs={e!r} instead.")
            steps = max(1, math.ceil(e * per_epoch - 1e-9))
            epochs = None
        t, _ = dpsgd_steps(dataset_size=n, batch_size=b, epochs=epochs, steps=steps)
        return ShuffledBatchGaussian(n, b, sigma, t, drop_last=drop_last, neighbouring=relation)
    t, q = dpsgd_steps(dataset_size=dataset_size, batch_size=batch_size, epochs=epochs, steps=steps)
    if sampling == "fixed-wor":
        relation = check_choice("add-remove" if neighbouring is None else neighbouring, "neighbouring", owner,
                                ("add-remove", "zero-out", "substitution"))
        return FixedBatchGaussian(int(dataset_size), int(batch_size), sigma, t, neighbouring=relation)
    check_choice("add-remove" if neighbouring is None else neighbouring, "neighbouring", owner, ("add-remove", "zero-out"))
    return SubsampledGaussian(sampling_rate=q, noise_multiplier=sigma, steps=t)


def dpsgd_routes(event: DpEvent, delta: float, *, label: str, common: tuple[str, ...] = (),
                 orders=None) -> tuple[list[PrivacyStatement], dict[str, str], list[str]]:
    """Every route that applies to a DP-SGD ``event`` (RDP on ``orders``, PLD, PRV): ``(statements, {route: why it was
    not used}, warnings)``. Each statement names its route; the caller picks the headline with
    :func:`~dpaudit.accountants.statement.pick_headline`."""
    stmts: list[PrivacyStatement] = []
    skipped: dict[str, str] = {}
    warns: list[str] = []
    makers = (("rdp", lambda: RdpAccountant(orders)), ("pld", PldAccountant), ("prv", PrvAccountant))
    for name, make in makers:
        acc = make()
        if not all(acc.supports(leaf) for leaf, _ in flatten(event)):
            kinds = sorted({type(leaf).__name__ + (f" under {leaf.neighbouring}" if isinstance(leaf, FixedBatchGaussian)
                                                    else "") for leaf, _ in flatten(event) if not acc.supports(leaf)})
            skipped[name] = f"it does not apply to {', '.join(kinds)}"
            continue
        try:
            st = acc.compose(event).get_statement(delta)
        except ParameterError as exc:
            skipped[name] = str(exc)
            continue
        # one vocabulary: the method is the route's name (``headline_route``); how the route computed it (e.g. the
        # PLD accountant's exact Gaussian-DP composition) is ``details["computation"]``
        details = {k: v for k, v in st.details.items() if k != "route"}
        if st.method != name or st.details.get("route", name) != name:
            details["computation"] = str(st.details.get("route", st.method))
        stmts.append(PrivacyStatement(st.epsilon, st.delta, name, order=st.order, label=f"{label} ({name})",
                                      assumptions=st.assumptions + common, details=details, route=name))
        warns.extend(getattr(acc, "warnings", ()))
    return stmts, skipped, warns


@quiet_overflow
def account_dpsgd(*, dataset_size: int, batch_size: int, noise_multiplier: float, epochs: float | None = None,
                  steps: int | None = None, delta: float, accountant: str = "best", sampling: str = "poisson",
                  neighbouring: str | None = None, drop_last: bool = False, lower_bound: bool = True,
                  opacus_loader: bool = False) -> AccountingResult:
    """Epsilon of DP-SGD with batch size B = ``batch_size`` of n = ``dataset_size`` examples and noise multiplier
    sigma, under its batch sampler (``sampling``, :data:`SAMPLING_SCHEMES`).

    Every route that applies is computed and named: ``"rdp"`` (:class:`~dpaudit.accountants.rdp.RdpAccountant`),
    ``"pld"`` (:class:`~dpaudit.accountants.pld.PldAccountant`: exact Gaussian-DP where the run is a composition of
    Gaussian mechanisms, dp_accounting's pessimistic PLD otherwise) and ``"prv"``
    (:class:`~dpaudit.accountants.prv.PrvAccountant`, certified upper bound; Poisson and fixed-size batches under
    add/remove). Fixed-size batches under zero-out or substitution have two routes: RDP (Wang-Balle-Kasiviswanathan's
    substitution bound) and PLD (Dong-Roth-Su's subsampling operator without replacement at sensitivity 2C,
    :func:`~dpaudit.accountants.sampling.fixed_size_gaussian_pld`). ``accountant="best"`` (default) makes the smallest the headline; a route name forces that
    route's figure (e.g. to reproduce a published RDP figure) and the result names it (``headline_route``).

    ``lower_bound`` (default True): beside the headline, the certified lower bound of an explicit pair of neighbouring
    datasets (:func:`~dpaudit.accountants.pairs.dpsgd_lower_bound`), so that the result reads "epsilon in [lower,
    upper]"; a route below it raises :class:`~dpaudit.accountants.statement.BoundsCrossedError` (a bug, never a figure).

    Shuffled batches (``"shuffle"``): the headline is the valid no-amplification upper bound; beside it, the facts give
    Chua et al.'s certified lower bound (:func:`~dpaudit.accountants.sampling.shuffle_lower_bound`) and the Poisson
    figure of the same parameters, which is NOT a guarantee for this run, so that the reader sees the uncertainty.

    ``opacus_loader=True`` (Poisson only) counts as Opacus's ``DPDataLoader`` does for a ``DataLoader`` of batch size
    B over n records (``drop_last=False``): T = ceil(n / B) = ``len(data_loader)`` batches per epoch, sample rate
    q = 1 / T (Opacus's ``sample_rate = 1 / len(data_loader)``), ``epochs`` E giving ceil(E * T) steps. Without it,
    q = B / n and ceil(E * n / B) steps; the two agree when B divides n.
    """
    owner = "account_dpsgd"
    accountant = check_choice(accountant, "accountant", owner, ("best", "rdp", "pld", "prv"))
    neighbouring = canonical_relation(neighbouring)  # replace-one = substitution
    sigma = check_float(noise_multiplier, "noise_multiplier", owner, low=0.0, low_open=True)
    delta = check_probability(delta, "delta", owner)
    if check_bool(opacus_loader, "opacus_loader", owner):
        if sampling != "poisson":
            raise ParameterError(f"The 'opacus_loader' parameter of {owner} applies to sampling='poisson' only "
                                 f"(Opacus's DPDataLoader). Got it with sampling={sampling!r} instead.")
        n = check_int(dataset_size, "dataset_size", owner, low=1)
        b = check_int(batch_size, "batch_size", owner, low=1)
        dpsgd_steps(dataset_size=n, batch_size=b, epochs=epochs, steps=steps)     # the same checks and ranges
        per_epoch = -(-n // b)
        t = steps if steps is not None else max(1, math.ceil(check_float(epochs, "epochs", owner) * per_epoch - 1e-9))
        if not t <= MAX_STEPS:
            raise ParameterError(f"The 'epochs' parameter of {owner} is out of the supported range: epochs * batches "
                                 f"per epoch must be at most {MAX_STEPS:g} steps. Got epochs={epochs!r} instead.")
        q = 1.0 / per_epoch
        check_choice("add-remove" if neighbouring is None else neighbouring, "neighbouring", owner,
                     ("add-remove", "zero-out"))
        event: DpEvent = SubsampledGaussian(sampling_rate=q, noise_multiplier=sigma, steps=int(t))
        qdesc = f"q = 1/ceil({dataset_size}/{batch_size}) = 1/{per_epoch} = {q:.6g} (Opacus: 1 / len(data_loader))"
    else:
        event = dpsgd_event(dataset_size=dataset_size, batch_size=batch_size, noise_multiplier=sigma, epochs=epochs,
                            steps=steps, sampling=sampling, neighbouring=neighbouring, drop_last=drop_last)
        q = int(batch_size) / int(dataset_size)
        qdesc = f"q = {batch_size}/{dataset_size} = {q:.6g} (batch size B / n)"
    t = event.steps  # type: ignore[attr-defined]
    relation = getattr(event, "neighbouring", "add-remove" if neighbouring is None else neighbouring)
    scheme = SAMPLING_NAMES[sampling]
    sdesc = f"{scheme}: {qdesc}, sigma = {sigma:g}, {t} steps."
    common: tuple[str, ...] = (sdesc,)
    if sampling in _SCHEME_ASSUMPTION:
        common = (_SCHEME_ASSUMPTION[sampling],) + common
    stmts, skipped, warns = dpsgd_routes(event, delta, label=f"DP-SGD, {scheme}", common=common)
    headline = pick_headline(stmts, None if accountant == "best" else accountant, owner=owner)
    by_route = {s.route: s for s in stmts}
    params = {"dataset_size": int(dataset_size), "batch_size": int(batch_size), "noise_multiplier": sigma,
              "epochs": epochs, "steps": t, "delta": delta, "accountant": accountant, "sampling": sampling,
              "neighbouring": relation, "drop_last": bool(drop_last), "opacus_loader": bool(opacus_loader)}
    facts: dict = {"sampling": scheme, "neighbouring": relation, "sampling_rate": q, "steps": t,
                   **headline_facts(stmts, headline)}
    if "rdp" in by_route:
        facts["rdp_order"] = by_route["rdp"].order
    if "pld" in by_route:
        facts["pld_computation"] = by_route["pld"].details.get("computation", "pld")
    if "prv" in by_route:
        facts["prv_estimate"] = by_route["prv"].details.get("estimate")
    for name, why in skipped.items():
        facts[f"route {name} not used"] = why
    lower = None
    if lower_bound or isinstance(event, ShuffledBatchGaussian):
        # the pair at the rate that ran: Opacus's loader samples at q = 1/ceil(n/B), i.e. one record in per_epoch
        n_pair, b_pair = (per_epoch, 1) if opacus_loader else (int(dataset_size), int(batch_size))
        lower = dpsgd_lower_bound(dataset_size=n_pair, batch_size=b_pair, noise_multiplier=sigma,
                                  steps=t, delta=delta, sampling=sampling, neighbouring=relation, drop_last=drop_last)
    if isinstance(event, ShuffledBatchGaussian) and lower is not None:
        poisson = [s.epsilon for s in dpsgd_routes(SubsampledGaussian(q, sigma, t), delta, label="")[0] if s.route != "prv"]
        facts.update({"batches_per_epoch": event.batches_per_epoch, "participations": event.participations,
                      "lower_bound_epsilon": lower.epsilon, "lower_bound_construction": lower.pair,
                      "poisson_epsilon_not_valid_here": min(poisson)})
        warns.append(
            f"Shuffled batches: epsilon <= {stmts[headline].epsilon:.4g} is a valid upper bound (no amplification "
            f"counted); Chua et al.'s construction certifies that no analysis of these parameters can give less than "
            f"{lower.epsilon:.4g}; the Poisson figure of the same parameters ({min(poisson):.4g}) is not a guarantee "
            "for shuffled batches.")
        if not lower_bound:
            lower = None
    return AccountingResult(f"dpsgd ({scheme}, {relation})", tuple(stmts), headline=headline, parameters=params,
                            facts=facts, warnings=tuple(warns), lower_bound=lower)

"""The mechanism table: one name per mechanism description, one function that accounts it.

Used by ``dpaudit account`` (the CLI), by claims files (:mod:`dpaudit.auditing.evaluate`) and by the tests, so the
mapping from a mechanism's name to its math exists once.

- ``laplace`` / ``gaussian``: the plain Laplace and Gaussian mechanisms (``scale`` or ``sigma``, ``sensitivity``,
  ``count``): the Gaussian in closed form (:mod:`dpaudit.accountants.closed_form`), the Laplace mechanism by basic
  composition, optimal composition of pure DP and its own PLD; each with the certified lower bound of its pair.
- ``tuning``: :func:`~dpaudit.accountants.tuning.account_tuning` (the best of K DP-SGD runs, K random).
- ``ldp``, ``dpsgd``, ``pate``, ``gnmax``: :func:`~dpaudit.accountants.ldp.account_ldp`,
  :func:`~dpaudit.accountants.dpsgd.account_dpsgd`, :func:`~dpaudit.accountants.pate.account_pate`,
  :func:`~dpaudit.accountants.gnmax.account_gnmax`, called with the description's parameters as keywords.
"""

from __future__ import annotations

import inspect
import math
from typing import Any, Callable, Mapping

import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from dpaudit.accountants._common import FFT_DELTA_ALLOWANCE, MAX_FFT_COMPOSITIONS
from dpaudit.accountants.closed_form import gaussian_mechanism_epsilon, pure_composition_epsilon
from dpaudit.accountants.dpsgd import account_dpsgd
from dpaudit.accountants.gnmax import account_gnmax
from dpaudit.accountants.ldp import account_ldp
from dpaudit.accountants.pairs import gaussian_mechanism_lower_bound, laplace_mechanism_lower_bound
from dpaudit.accountants.pate import account_pate
from dpaudit.accountants.statement import AccountingResult, PrivacyStatement
from dpaudit.accountants.tuning import account_tuning
from dpaudit.errors import ParameterError, check_float, check_int, check_probability

__all__ = ["ACCOUNTING_FUNCTIONS", "MECHANISM_KINDS", "laplace_mechanism", "gaussian_mechanism", "account_mechanism",
           "check_account_keywords"]


#: The most compositions the plain mechanisms account (a count beyond it is a typo; the figures stay floats).
MAX_COUNT = 10**15


def laplace_mechanism(*, scale: float, sensitivity: float = 1.0, count: int = 1, delta: float = 0.0,
                      owner: str = "the laplace mechanism") -> AccountingResult:
    """``count`` Laplace(``scale``) answers to queries of L1 sensitivity ``sensitivity``.

    Routes: ``"basic"``, pure ``count * sensitivity / scale``-DP (Dwork et al. 2006, delta 0); with ``delta`` > 0 also
    ``"optimal composition"`` of pure DP (Kairouz, Oh, Viswanath 2015: valid for any eps0-DP mechanism) and ``"pld"``,
    dp_accounting's pessimistic (connect-the-dots) privacy-loss distribution of the Laplace mechanism itself, composed
    by FFT and read at ``delta - 1e-12``. The smallest is the headline. Beside it, the certified lower bound of the pair
    Lap(0, b) vs Lap(sensitivity, b) (:func:`~dpaudit.accountants.pairs.laplace_mechanism_lower_bound`)."""
    sens = check_float(sensitivity, "sensitivity", owner, low=0.0, low_open=True)
    count = check_int(count, "count", owner, low=1, high=MAX_COUNT)
    scale = check_float(scale, "scale", owner, low=0.0, low_open=True)
    delta = check_probability(delta, "delta", owner, allow_zero=True)
    eps0 = sens / scale
    eps = count * eps0
    if not math.isfinite(eps):
        raise ParameterError(f"The 'scale' parameter of {owner} is out of the supported range: count * sensitivity / scale "
                             f"overflows (scale = {scale!r}, sensitivity = {sens!r}, count = {count}).")
    base = (f"Laplace noise of scale {scale:g} on a query of L1 sensitivity {sens:g} between neighbours; "
            f"{count} composition(s).")
    label = f"{count} quer{'y' if count == 1 else 'ies'}"
    stmts = [PrivacyStatement(epsilon=eps, delta=0.0, method="Laplace mechanism, basic composition",
                              assumptions=(base, "Basic composition: the epsilons add up (Dwork et al. 2006)."),
                              label=label + " (basic)", route="basic")]
    facts: dict[str, Any] = {}
    if delta > 0.0 and count > 1:
        try:
            kov = pure_composition_epsilon(eps0, count, delta)
            stmts.append(PrivacyStatement(kov, delta, "optimal composition of pure DP (Kairouz et al. 2015)",
                                          assumptions=(base,), label=label + " (optimal composition)",
                                          route="optimal composition"))
        except ParameterError as exc:
            facts["route optimal composition not used"] = str(exc)
    if delta > 2.0 * FFT_DELTA_ALLOWANCE and count <= MAX_FFT_COMPOSITIONS and eps0 <= 50.0:
        vdi = max(1e-4, 40.0 * eps0 * math.sqrt(count) / 2e6)
        try:
            with np.errstate(all="ignore"):
                pld = pld_lib.from_laplace_mechanism(scale, sensitivity=sens, value_discretization_interval=vdi)
                if count > 1:
                    pld = pld.self_compose(count)
                e_pld = float(pld.get_epsilon_for_delta(delta - FFT_DELTA_ALLOWANCE))
            if math.isfinite(e_pld) and not math.isnan(e_pld):
                stmts.append(PrivacyStatement(max(e_pld, 0.0), delta, "pld (dp_accounting, pessimistic, Laplace mechanism)",
                                              assumptions=(base, "dp_accounting's connect-the-dots PLD of the Laplace "
                                                           "mechanism, composed by FFT; read at delta - 1e-12."),
                                              label=label + " (pld)", route="pld"))
        except (OverflowError, ValueError, FloatingPointError, MemoryError) as exc:
            facts["route pld not used"] = f"{type(exc).__name__}: {exc}"
    lower = laplace_mechanism_lower_bound(scale=scale, sensitivity=sens, count=count, delta=delta)
    return AccountingResult(mechanism="laplace", statements=tuple(stmts),
                            parameters={"scale": scale, "sensitivity": sens, "count": count, "delta": delta},
                            facts=facts, lower_bound=lower)


def gaussian_mechanism(*, sigma: float, delta: float, sensitivity: float = 1.0, count: int = 1,
                       owner: str = "the gaussian mechanism") -> AccountingResult:
    """``count`` Gaussian(``sigma``) answers to queries of L2 sensitivity ``sensitivity``: exactly
    mu-GDP with mu = sqrt(count) * sensitivity / sigma (Dong, Roth & Su 2019), converted exactly at ``delta``."""
    sens = check_float(sensitivity, "sensitivity", owner, low=0.0, low_open=True)
    count = check_int(count, "count", owner, low=1, high=MAX_COUNT)
    sigma = check_float(sigma, "sigma", owner, low=0.0, low_open=True)
    mu = math.sqrt(count) * sens / sigma
    if not math.isfinite(mu):
        raise ParameterError(f"The 'sigma' parameter of {owner} is out of the supported range: sqrt(count) * sensitivity / sigma "
                             f"overflows (sigma = {sigma!r}, sensitivity = {sens!r}, count = {count}).")
    eps = gaussian_mechanism_epsilon(mu, delta)
    assumptions = [f"Gaussian noise of standard deviation {sigma:g} on a query of L2 sensitivity {sens:g}; "
                   f"{count} composition(s), i.e. mu = {mu:.6g}-GDP (Dong, Roth & Su 2019)."]
    if math.isinf(eps):
        assumptions.append("epsilon is infinite because delta = 0: the Gaussian mechanism is not pure DP." if delta == 0.0
                           else "epsilon is infinite: mu is so large that no finite epsilon reaches this delta.")
    st = PrivacyStatement(
        epsilon=eps, delta=delta, method="Gaussian mechanism, exact (Balle & Wang 2018; GDP composition)",
        assumptions=tuple(assumptions), label=f"{count} quer{'y' if count == 1 else 'ies'}", details={"mu": mu},
    )
    lower = (gaussian_mechanism_lower_bound(sigma=sigma, sensitivity=sens, count=count, delta=delta)
             if delta > 0.0 else None)
    return AccountingResult(mechanism="gaussian", statements=(st,),
                            parameters={"sigma": sigma, "sensitivity": sens, "count": count}, lower_bound=lower)


#: mechanism name -> the function that accounts it (keyword arguments, ``delta`` among them where it applies).
ACCOUNTING_FUNCTIONS: Mapping[str, Callable[..., AccountingResult]] = {
    "laplace": laplace_mechanism,
    "gaussian": gaussian_mechanism,
    "ldp": account_ldp,
    "dpsgd": account_dpsgd,
    "pate": account_pate,
    "gnmax": account_gnmax,
    "tuning": account_tuning,
}
MECHANISM_KINDS: tuple[str, ...] = tuple(ACCOUNTING_FUNCTIONS)

#: Keywords of the accounting functions that are not the caller's to pass (the owner named in error messages).
_INTERNAL = frozenset({"owner"})


def check_account_keywords(mechanism: str, fn: Callable[..., Any], params: Mapping[str, Any], *,
                           owner: str = "account", release_epsilon: bool = False) -> None:
    """Refuse, before any work, keywords that ``fn`` (the accounting function of ``mechanism``) does not take or
    misses: one :class:`~dpaudit.errors.ParameterError` naming the caller's spelling and every accepted keyword
    (never Python's ``TypeError`` about an internal function). ``release_epsilon``: the keywords are those of the
    private release of GNMax's data-dependent epsilon, which cannot be combined with ``interactive`` or
    ``data_independent`` (the data-independent figures need no release), as ``dpaudit account`` refuses too."""
    if release_epsilon:
        clash = [k for k in ("interactive", "data_independent") if params.get(k)]
        if clash:
            raise ParameterError(f"The 'release_epsilon' parameter of {owner} releases the data-dependent figure of "
                                 f"'gnmax': it cannot be combined with {' or '.join(repr(k) for k in clash)}. "
                                 f"Got release_epsilon=True, {', '.join(f'{k}={params[k]!r}' for k in clash)}.")
        params = {k: v for k, v in params.items() if k not in ("interactive", "data_independent")}
    sig = inspect.signature(fn)
    accepted = [p for p in sig.parameters.values()
                if p.name not in _INTERNAL and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    names = [p.name for p in accepted] + (["release_epsilon"] if mechanism == "gnmax" else [])
    what = f"{mechanism!r}" + (" with release_epsilon=True" if release_epsilon else "")
    for key in params:
        if key == "release_epsilon":        # account() itself says which mechanism takes it
            continue
        if not isinstance(key, str) or key not in names or key in _INTERNAL:
            raise ParameterError(f"{owner}({what}) takes the keywords {', '.join(names)}. Got {key!r} instead.")
    missing = [p.name for p in accepted if p.default is p.empty and p.name not in params]
    if missing:
        raise ParameterError(f"{owner}({what}) needs the keyword{'s' if len(missing) > 1 else ''} "
                             f"{', '.join(repr(m) for m in missing)} (it takes {', '.join(names)}). Got none.")


_CLOSED = {"laplace": ("scale", "sensitivity", "count"), "gaussian": ("sigma", "sensitivity", "count")}


def account_mechanism(kind: str, params: Mapping[str, Any], delta: float) -> AccountingResult:
    """Account the mechanism description ``(kind, params)`` at ``delta``.

    ``params`` are the keyword arguments of ``ACCOUNTING_FUNCTIONS[kind]`` (``delta`` excluded). ``delta = 0`` asks
    for the pure figure: functions whose ``delta`` is optional get none. Unknown kinds and parameters raise
    :class:`~dpaudit.errors.ParameterError` listing the allowed ones.
    """
    fn = ACCOUNTING_FUNCTIONS.get(kind)
    if fn is None:
        raise ParameterError(f"The mechanism kind must be one of {', '.join(MECHANISM_KINDS)}. Got {kind!r} instead.")
    kwargs = dict(params)
    if kind in _CLOSED:
        allowed = set(_CLOSED[kind])
        extra = sorted(set(kwargs) - allowed)
        if extra:
            raise ParameterError(f"Unknown parameter {extra[0]!r} of the {kind} mechanism; allowed: {', '.join(sorted(allowed))}.")
        required = _CLOSED[kind][0]
        if required not in kwargs:
            raise ParameterError(f"The {required!r} parameter of the {kind} mechanism is required. Got nothing instead.")
        kwargs["delta"] = delta
        return fn(**kwargs)
    sig = inspect.signature(fn)
    if "delta" in sig.parameters:
        optional = sig.parameters["delta"].default is None
        if not (delta == 0.0 and optional):
            kwargs["delta"] = delta
    try:
        sig.bind(**kwargs)
    except TypeError as exc:
        known = ", ".join(p for p in sig.parameters if p != "delta")
        raise ParameterError(f"Bad parameters for the {kind!r} mechanism ({exc}); its parameters are: {known}.") from None
    return fn(**kwargs)

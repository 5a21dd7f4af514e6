"""The mechanism table: one name per mechanism description, one function that accounts it.

Used by ``dpaudit account`` (the CLI), by claims files (:mod:`dpaudit.auditing.evaluate`) and by the tests, so the
mapping from a mechanism's name to its math exists once.

- ``laplace`` / ``gaussian``: the plain Laplace and Gaussian mechanisms (``scale`` or ``sigma``, ``sensitivity``,
  ``count``), in closed form (:mod:`dpaudit.accountants.closed_form`).
- ``tuning``: :func:`~dpaudit.accountants.tuning.account_tuning` (the best of K DP-SGD runs, K random).
- ``ldp``, ``dpsgd``, ``pate``, ``gnmax``: :func:`~dpaudit.accountants.ldp.account_ldp`,
  :func:`~dpaudit.accountants.dpsgd.account_dpsgd`, :func:`~dpaudit.accountants.pate.account_pate`,
  :func:`~dpaudit.accountants.gnmax.account_gnmax`, called with the description's parameters as keywords.
"""

from __future__ import annotations

import inspect
import math
from typing import Any, Callable, Mapping

from dpaudit.accountants.closed_form import gaussian_mechanism_epsilon
from dpaudit.accountants.dpsgd import account_dpsgd
from dpaudit.accountants.gnmax import account_gnmax
from dpaudit.accountants.ldp import account_ldp
from dpaudit.accountants.pate import account_pate
from dpaudit.accountants.statement import AccountingResult, PrivacyStatement
from dpaudit.accountants.tuning import account_tuning
from dpaudit.errors import ParameterError, check_float, check_int

__all__ = ["ACCOUNTING_FUNCTIONS", "MECHANISM_KINDS", "laplace_mechanism", "gaussian_mechanism", "account_mechanism"]


def laplace_mechanism(*, scale: float, sensitivity: float = 1.0, count: int = 1, owner: str = "the laplace mechanism") -> AccountingResult:
    """``count`` Laplace(``scale``) answers to queries of L1 sensitivity ``sensitivity``: pure
    ``count * sensitivity / scale``-DP (Dwork et al. 2006, basic composition)."""
    sens = check_float(sensitivity, "sensitivity", owner, low=0.0, low_open=True)
    count = check_int(count, "count", owner, low=1)
    scale = check_float(scale, "scale", owner, low=0.0, low_open=True)
    eps = count * sens / scale
    if not math.isfinite(eps):
        raise ParameterError(f"The 'scale' parameter of {owner} is out of the supported range: count * sensitivity / scale "
                             f"overflows (scale = {scale!r}, sensitivity = {sens!r}, count = {count}).")
    st = PrivacyStatement(
        epsilon=eps, delta=0.0, method="Laplace mechanism, basic composition",
        assumptions=(f"Laplace noise of scale {scale:g} on a query of L1 sensitivity {sens:g} between neighbours; "
                     f"{count} composition(s) add up (Dwork et al. 2006).",),
        label=f"{count} quer{'y' if count == 1 else 'ies'}",
    )
    return AccountingResult(mechanism="laplace", statements=(st,),
                            parameters={"scale": scale, "sensitivity": sens, "count": count})


def gaussian_mechanism(*, sigma: float, delta: float, sensitivity: float = 1.0, count: int = 1,
                       owner: str = "the gaussian mechanism") -> AccountingResult:
    """``count`` Gaussian(``sigma``) answers to queries of L2 sensitivity ``sensitivity``: exactly
    mu-GDP with mu = sqrt(count) * sensitivity / sigma (Dong, Roth & Su 2019), converted exactly at ``delta``."""
    sens = check_float(sensitivity, "sensitivity", owner, low=0.0, low_open=True)
    count = check_int(count, "count", owner, low=1)
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
    return AccountingResult(mechanism="gaussian", statements=(st,),
                            parameters={"sigma": sigma, "sensitivity": sens, "count": count})


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
        if kind == "gaussian":
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

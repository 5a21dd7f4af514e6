"""Certified canary audits of each method's whole training run, against the paper's claim and dpaudit's accounting.

:func:`audit_method_run` runs a method's real code path (PrivateKT's round loop, the PATE family's teacher
training and noisy-max aggregation, ProxyFL's DP-SGD proxy training) with auditor-planted canaries and certifies
a lower bound on its epsilon (one-run: Steinke, Nasr, Jagielski 2023, Theorem 3; multi-run: Clopper-Pearson over
independent runs). The result says whether the bound refutes the paper's claim and how far it is from the
ideal-attack reference at the same number of trials.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from dpaudit.auditing.method_runs import pate_family
from dpaudit.auditing.method_runs import privatekt as privatekt_run
from dpaudit.auditing.method_runs import proxyfl as proxyfl_run
from dpaudit.auditing.method_runs.result import MethodRunAudit
from dpaudit.errors import ParameterError, check_choice, check_name

__all__ = ["MethodRunAudit", "MethodAuditSpec", "METHOD_RUN_AUDITS", "audit_method_run", "check_method_params",
           "check_param_type", "method_run_parameters"]


# method name -> the module function that audits its run; filled in below as each family lands
METHOD_RUN_AUDITS: dict[str, Callable[..., MethodRunAudit]] = {}


METHOD_RUN_AUDITS["proxyfl"] = proxyfl_run.audit_run
# the PATE family: one-query noisy max after the real teacher training (PATE, FedKT-L1, FREDY)
METHOD_RUN_AUDITS["pate"] = pate_family.audit_pate_run
METHOD_RUN_AUDITS["fedkt"] = pate_family.audit_fedkt_run
METHOD_RUN_AUDITS["fredy"] = pate_family.audit_fredy_run
METHOD_RUN_AUDITS["privatekt"] = privatekt_run.audit_run


def method_run_parameters(method: str) -> dict[str, Any]:
    """The audit parameters of ``method`` and their defaults (``inspect.Parameter.empty`` when required)."""
    check_choice(method, "method", "audit_method_run", tuple(METHOD_RUN_AUDITS))
    sig = inspect.signature(METHOD_RUN_AUDITS[method])
    return {n: p.default for n, p in sig.parameters.items()
            if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and n != "progress"}


def audit_method_run(method: str, *, progress: Any = False, **params: Any) -> MethodRunAudit:
    """Run the certified audit of ``method``'s full training run (see the module docstring); ``params`` are the
    family's audit parameters (documented on each ``audit_run``; :func:`method_run_parameters` lists them).
    An unknown parameter is a :class:`~dpaudit.errors.ParameterError` naming it and the known ones."""
    known = method_run_parameters(method)
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ParameterError(f"The audit of {method!r} takes the parameters {', '.join(sorted(known))}. Got unknown "
                             f"parameter(s) {', '.join(unknown)} instead.")
    missing = sorted(k for k, d in known.items() if d is inspect.Parameter.empty and k not in params)
    if missing:
        raise ParameterError(f"The '{missing[0]}' parameter of the audit of {method!r} is required. Got nothing instead.")
    if "device" in params:
        _check_device(params["device"], f"the audit of {method!r}")
    return METHOD_RUN_AUDITS[method](progress=progress, **params)


def _check_device(device: Any, owner: str) -> None:
    """A method audit's ``device``, parsed and checked like ``dpaudit train --device`` (before any work)."""
    from dpaudit.training.methods.scaffold import check_device

    check_device(device, f"'device' parameter of {owner}")


def check_param_type(key: str, default: Any, value: Any, owner: str) -> None:
    """Raise a ParameterError naming ``params.KEY`` of ``owner`` when ``value`` cannot be what the audit's parameter
    ``key`` (default ``default``) takes (checked when a config or claims file is read; ranges are checked by the
    audit when it runs)."""
    if default is None or default is inspect.Parameter.empty:
        return  # no typed default: the audit checks the value when it runs
    if isinstance(default, bool):
        ok, want = isinstance(value, bool), "a boolean"
    elif isinstance(default, int):
        ok, want = isinstance(value, int) and not isinstance(value, bool), "an integer"
    elif isinstance(default, float):
        ok, want = isinstance(value, (int, float)) and not isinstance(value, bool), "a number"
    elif isinstance(default, str):
        ok, want = isinstance(value, str), "a string"
    elif isinstance(default, (tuple, list)):
        ok, want = isinstance(value, (tuple, list)), "an array"
    else:
        return
    if not ok:
        raise ParameterError(f"The 'params.{key}' parameter of {owner} must be {want} (its default is {default!r}). "
                             f"Got {value!r} instead.")



def check_method_params(method: str, params: Mapping[str, Any], owner: str, reserved: Mapping[str, str]) -> None:
    """Check a ``params`` table for ``method``'s audit when a config or claims file is read: every key is one of the
    audit's parameters and not in ``reserved`` (key -> what is used instead), every value has its default's type
    (:func:`check_param_type`), and every required parameter is given. Raises a ParameterError naming the key and
    ``owner``; ranges are checked by the audit when it runs."""
    known = method_run_parameters(method)
    for key in sorted(params):
        if key in reserved and key in known:
            raise ParameterError(f"The 'params' table of {owner} must not set '{key}': {reserved[key]} is used. "
                                 f"Got {key}={params[key]!r} instead.")
        if key not in known:
            takes = sorted(set(known) - set(reserved))
            raise ParameterError(f"Unknown key {key!r} in the 'params' table of {owner}; the {method!r} audit takes "
                                 f"{', '.join(takes)}. Got {key} instead.")
        check_param_type(key, known[key], params[key], owner)
        if key == "device":
            _check_device(params[key], owner)
    missing = sorted(k for k, d in known.items() if d is inspect.Parameter.empty and k not in params)
    if missing:
        raise ParameterError(f"The 'params.{missing[0]}' parameter of {owner} is required by the {method!r} audit. "
                             f"Got nothing instead.")


@dataclass(frozen=True)
class MethodAuditSpec:
    """One ``[[method_audits]]`` entry of an audit config: ``method`` (a key of :data:`METHOD_RUN_AUDITS`), its audit
    ``params`` (checked against the method's audit parameters when the config is read) and a ``name`` (default:
    the method). The audit's seed and confidence are the audit config's, and so are its data set and data_dir
    unless ``params`` names them."""

    method: str
    params: Mapping[str, Any] = field(default_factory=dict)
    name: str = ""

    def __post_init__(self) -> None:
        o = "method_audits"
        check_choice(self.method, "method", o, tuple(METHOD_RUN_AUDITS))
        if not isinstance(self.params, Mapping):
            raise ParameterError(f"The 'params' parameter of {o} must be a table. Got {self.params!r} instead.")
        check_method_params(self.method, self.params, f"{o} entry {self.method!r}",
                            {"seed": "the audit config's 'seed'", "confidence": "the audit config's 'confidence'"})
        name = check_name(self.name or self.method, "name", o)    # it names the audit's folder under the run directory
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "params", dict(self.params))

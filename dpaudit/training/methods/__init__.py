"""The methods, one module each, behind one entry point.

:func:`run_method` runs any method by name and returns where its release(s) went, so callers (the audit,
the claims checker) need not know the two configuration dialects:

- PATE-family methods (``pate``, ``fedkt``, ``fredy``): a flat config dataclass; ``params`` are its fields
  (``{"gamma": 0.1, "teachers": 10}``), TOML files hold them at top level with ``method = "<name>"``.
- Federated methods (``privatekt``, ``proxyfl`` and the baselines): TOML tables ``[data]``, ``[model]``,
  ``[method]``, ``[run]``; ``params`` are nested overrides by table (``{"method": {"rounds": 20}}``).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from dpaudit.errors import ParameterError, check_choice

__all__ = ["METHODS", "FEDERATED_METHODS", "get_method", "run_method", "MethodRun", "method_names"]

#: PATE-family: method name -> (module, config class, run function). Every run function has the signature
#: ``run(config, *, dataset, out, seed, data_dir=None, device=None, overwrite=False, progress=True) -> MethodResult``.
METHODS: dict[str, tuple[str, str, str]] = {
    "pate": ("dpaudit.training.methods.pate", "PATEConfig", "run_pate"),
    "fedkt": ("dpaudit.training.methods.fedkt", "FedKTConfig", "run_fedkt"),
    "fredy": ("dpaudit.training.methods.fredy", "FREDYConfig", "run_fredy"),
}

#: Federated methods: name -> (module, function, fixed keyword arguments). Each function has the signature
#: ``train_x(dataset, out, *, config_path, seed, data_dir, device, overwrite, progress, overrides, **fixed)``.
FEDERATED_METHODS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "privatekt": ("dpaudit.training.methods.privatekt", "train_privatekt", {}),
    "fedmd-ldp": ("dpaudit.training.methods.privatekt", "train_privatekt", {"fedmd": True}),
    "fedavg-ldp": ("dpaudit.training.methods.baselines", "train_ldp_updates", {"mode": "fedavg"}),
    "fedsgd-ldp": ("dpaudit.training.methods.baselines", "train_ldp_updates", {"mode": "fedsgd"}),
    "centrain": ("dpaudit.training.methods.baselines", "train_centrain", {}),
    **{name: ("dpaudit.training.methods.proxyfl", "train_proxyfl", {"variant": variant})
       for name, variant in (("proxyfl", "proxyfl"), ("fml", "fml"), ("fedavg-dpsgd", "fedavg"),
                             ("avgpush", "avgpush"), ("cwt", "cwt"), ("regular", "regular"), ("joint", "joint"))},
}


def method_names() -> tuple[str, ...]:
    return tuple(sorted({*METHODS, *FEDERATED_METHODS}))


def get_method(name: str) -> tuple[type, Callable[..., Any]]:
    """``(ConfigClass, run_function)`` of the PATE-family method ``name``."""
    check_choice(name, "method", "get_method", sorted(METHODS))
    module, cfg, fn = METHODS[name]
    mod = importlib.import_module(module)
    return getattr(mod, cfg), getattr(mod, fn)


@dataclass(frozen=True)
class MethodRun:
    """Where a method run wrote its release(s): ``release`` and, by name, ``extra_releases``
    (FREDY's ``"nonprivate"`` baseline)."""

    method: str
    release: Path
    utility: Mapping[str, Any] = field(default_factory=dict)
    extra_releases: Mapping[str, Path] = field(default_factory=dict)


def run_method(name: str, *, dataset: str, out: str | Path, seed: int = 0, config_file: str | Path | None = None,
               params: Mapping[str, Any] | None = None, data_dir: str | Path | None = None, device: str | None = None,
               overwrite: bool = False, progress: bool = True) -> MethodRun:
    """Run the method ``name`` and write its release bundle to ``out`` (see the module docstring for ``params``)."""
    check_choice(name, "method", "run_method", method_names())
    params = dict(params or {})
    if name in METHODS:
        from dpaudit.training.methods.common import load_config

        cls, run = get_method(name)
        config = load_config(cls, config_file, **params)
        res = run(config, dataset=dataset, out=out, seed=seed, data_dir=data_dir, device=device,
                  overwrite=overwrite, progress=progress)
        return MethodRun(name, Path(res.release), dict(res.utility), {k: Path(v) for k, v in res.extra_releases.items()})
    bad = [k for k, v in params.items() if not isinstance(v, Mapping)]
    if bad:
        raise ParameterError(f"The 'params' of federated method {name!r} must be tables of overrides "
                             f"(e.g. {{method = {{rounds = 20}}}}). Got non-table key(s) {bad} instead.")
    module, fn, fixed = FEDERATED_METHODS[name]
    train = getattr(importlib.import_module(module), fn)
    summary = train(dataset, out, config_path=config_file, seed=seed, data_dir=data_dir, device=device,
                    overwrite=overwrite, progress=progress, overrides=params or None, **fixed)
    return MethodRun(name, Path(summary.out), dict(summary.utility), {})

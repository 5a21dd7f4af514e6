"""The methods, one module each. :func:`get_method` resolves a method name to its config class and run
function without importing every method module up front."""

from __future__ import annotations

import importlib
from typing import Any, Callable

from dpaudit.errors import check_choice

__all__ = ["METHODS", "get_method"]

#: method name -> (module, config class, run function). Every run function has the signature
#: ``run(config, *, dataset, out, seed, data_dir=None, device=None, overwrite=False, progress=True) -> MethodResult``.
METHODS: dict[str, tuple[str, str, str]] = {
    "pate": ("dpaudit.training.methods.pate", "PATEConfig", "run_pate"),
    "fedkt": ("dpaudit.training.methods.fedkt", "FedKTConfig", "run_fedkt"),
    "fredy": ("dpaudit.training.methods.fredy", "FREDYConfig", "run_fredy"),
}


def get_method(name: str) -> tuple[type, Callable[..., Any]]:
    """``(ConfigClass, run_function)`` of the method ``name``."""
    check_choice(name, "method", "get_method", sorted(METHODS))
    module, cfg, fn = METHODS[name]
    mod = importlib.import_module(module)
    return getattr(mod, cfg), getattr(mod, fn)

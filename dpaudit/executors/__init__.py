"""Executors: run independent units (groups of shadow / reference models, attacks, models of an audit grid)
in this process (``local``, the default) or on a Ray cluster (``ray``, the optional extra
``pip install 'dpaudit[ray]'``), with the same results for the same seed, checkpoints to resume from, and one
progress display across units. See :mod:`dpaudit.executors.base` for the contract.

This package imports only ``dpaudit.errors``, ``dpaudit._io``, ``dpaudit.progress`` and ``dpaudit.threads``; Ray is imported
only when a Ray executor is made.
"""

from __future__ import annotations

from dpaudit.errors import ParameterError, check_choice
from dpaudit.executors.base import (Executor, Unit, UnitFailed, derive_seed, fingerprint_arrays, load_checkpoint,
                                    save_checkpoint)
from dpaudit.executors.local import LocalExecutor
from dpaudit.progress import Reporter

__all__ = ["EXECUTORS", "Executor", "LocalExecutor", "Unit", "UnitFailed", "derive_seed", "fingerprint_arrays",
           "load_checkpoint", "make_executor", "save_checkpoint"]

EXECUTORS = ("local", "ray")


def make_executor(name: str = "local", *, address: str | None = None, num_cpus: int | None = None,
                  progress: "bool | Reporter" = False) -> Executor:
    """``"local"`` or ``"ray"``. ``address`` (Ray only) joins an existing cluster (``"auto"``, ``"HOST:PORT"``
    or ``"ray://HOST:PORT"``); without it a local Ray instance with ``num_cpus`` CPUs (default: this
    machine's) is started when the first unit runs. ``progress``: the executor's default display."""
    check_choice(name, "executor", "make_executor", EXECUTORS)
    if name == "local":
        if address is not None:
            raise ParameterError(f"The 'ray_address' parameter needs the ray executor (--executor ray). "
                                 f"Got executor 'local' with address {address!r} instead.")
        return LocalExecutor(progress=progress)
    from dpaudit.executors.ray_executor import RayExecutor

    return RayExecutor(address=address, num_cpus=num_cpus, progress=progress)

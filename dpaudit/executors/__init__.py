"""Executors: run independent units (groups of shadow / reference models, attacks, models of an audit grid)
in this process (``local``), in worker processes of this machine of one intra-op thread each (``processes``,
:mod:`dpaudit.executors.processes`) or on a Ray cluster (``ray``, the optional extra
``pip install 'dpaudit[ray]'``), with the same results for the same seed, checkpoints to resume from, and one
progress display across units. See :mod:`dpaudit.executors.base` for the contract. ``auto`` (the CLI's default,
:func:`default_executor`) is ``processes`` when this process may use more than one core, else ``local``.

This package imports only ``dpaudit.errors``, ``dpaudit._io``, ``dpaudit.progress`` and ``dpaudit.threads``; Ray is imported
only when a Ray executor is made.
"""

from __future__ import annotations

from dpaudit.errors import ParameterError, check_choice
from dpaudit.executors.base import (Executor, Unit, UnitFailed, derive_seed, fingerprint_arrays, load_checkpoint,
                                    save_checkpoint)
from dpaudit.executors.local import LocalExecutor
from dpaudit.executors.processes import ProcessExecutor, default_workers
from dpaudit.progress import Reporter

__all__ = ["AUTO_EXECUTOR", "EXECUTORS", "Executor", "LocalExecutor", "ProcessExecutor", "Unit", "UnitFailed",
           "default_executor", "default_workers", "derive_seed", "fingerprint_arrays", "load_checkpoint",
           "make_executor", "save_checkpoint"]

EXECUTORS = ("local", "processes", "ray")
AUTO_EXECUTOR = "auto"
"""The name that asks for :func:`default_executor`."""


def default_executor() -> str:
    """``"processes"`` when this process may use more than one core (:func:`default_workers`: usable cores, divided
    among pytest-xdist's workers under xdist; the cores ``--threads auto`` counts), else ``"local"``."""
    return "processes" if default_workers() > 1 else "local"


def make_executor(name: str = "local", *, address: str | None = None, num_cpus: int | None = None,
                  workers: int | None = None, progress: "bool | Reporter" = False) -> Executor:
    """``"local"``, ``"processes"``, ``"ray"`` or ``"auto"`` (:func:`default_executor`;
    ``processes`` when ``workers`` is given). ``address`` (Ray only)
    joins an existing cluster (``"auto"``, ``"HOST:PORT"`` or ``"ray://HOST:PORT"``); without it a local Ray
    instance with ``num_cpus`` CPUs (default: this machine's) is started when the first unit runs. ``workers``
    (processes only): worker processes (default :func:`default_workers`). ``progress``: the executor's default
    display."""
    check_choice(name, "executor", "make_executor", (*EXECUTORS, AUTO_EXECUTOR))
    if name == AUTO_EXECUTOR:
        name = "processes" if workers is not None else default_executor()
    if workers is not None and name != "processes":
        raise ParameterError(f"The 'workers' parameter needs the processes executor (--executor processes). "
                             f"Got executor {name!r} with workers={workers!r} instead.")
    if name in ("local", "processes") and address is not None:
        raise ParameterError(f"The 'ray_address' parameter needs the ray executor (--executor ray). "
                             f"Got executor {name!r} with address {address!r} instead.")
    if name == "local":
        return LocalExecutor(progress=progress)
    if name == "processes":
        return ProcessExecutor(workers=workers, progress=progress)
    from dpaudit.executors.ray_executor import RayExecutor

    return RayExecutor(address=address, num_cpus=num_cpus, progress=progress)

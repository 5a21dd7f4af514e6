"""``dpaudit train METHOD --engine flower``: a method's run as Flower apps on Flower's simulation engine.

The run is the method's own ``run`` (the same scaffold, ledger, accounting and release bundle as the in-process
runner), executed inside a Flower ``ServerApp`` whose party tasks go to one ``ClientApp`` per party through Flower
messages (see :mod:`.apps`). The simulation engine (``flwr.simulation.run_simulation``, Ray backend) starts one
virtual SuperNode per party; its ``partition-id`` is the party's number.

Several runs can share one simulation (:func:`run_methods`): Ray starts once, and each run talks to the nodes it
needs (the first ``parties`` partition ids).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from dpaudit.errors import DataError, ParameterError

__all__ = ["ENGINES", "FlowerJob", "flower_methods", "run_method", "run_methods"]

#: ``--engine`` values: the in-process runner and Flower's simulation engine.
ENGINES = ("inprocess", "flower")


def flower_methods() -> tuple[str, ...]:
    """The methods that run as Flower apps: those whose module exports party tasks."""
    from dpaudit.training.methods import METHODS

    return tuple(sorted(n for n, e in METHODS.items()
                        if e.module.rsplit(".", 1)[-1] in ("privatekt", "proxyfl", "fedkt", "fredy")))


@dataclass(frozen=True)
class FlowerJob:
    """One method run (the arguments of :func:`dpaudit.training.methods.run_method`)."""

    name: str
    out: str | Path
    seed: int = 0
    config_file: str | Path | None = None
    params: Mapping[str, Any] | None = None
    sets: Sequence[str] = ()
    dataset: str | None = None
    data_dir: str | Path | None = None
    device: str | None = None
    overwrite: bool = False
    progress: Any = True
    tables: dict = field(default_factory=dict, compare=False)


def _tables(job: FlowerJob, module: Any) -> dict[str, dict[str, Any]]:
    """The run's configuration tables, as :func:`~dpaudit.training.methods.load_method_config` merges them (the
    parties rebuild the same ``Config`` from them)."""
    from dpaudit.training.methods.scaffold import merge_tables, parse_sets, read_config_file, tables_from_params

    explicit: dict[str, dict[str, Any]] = {}
    if job.dataset is not None:
        explicit.setdefault("data", {})["name"] = job.dataset
    if job.data_dir is not None:
        explicit.setdefault("data", {})["data_dir"] = str(Path(job.data_dir).resolve())
    if job.device is not None:
        explicit["run"] = {"device": job.device}
    layers = [read_config_file(job.config_file, flat_family=module.Config.flat_family)] if job.config_file is not None else []
    tables = merge_tables(*layers, tables_from_params(job.params), parse_sets(job.sets), explicit)
    json.dumps(tables)  # a party receives them as JSON
    return tables


def _prepare(job: FlowerJob) -> tuple[Any, Any, dict, int]:
    from dpaudit.errors import check_int
    from dpaudit.training.methods import method_module

    supported = flower_methods()
    if job.name not in supported:
        raise ParameterError(f"The 'engine' parameter of dpaudit train must be 'inprocess' for {job.name}; the methods "
                             f"that run on Flower are {', '.join(supported)}.")
    check_int(job.seed, "seed", job.name, low=0)
    module = method_module(job.name)
    tables = _tables(job, module)
    config = module.Config.from_tables(job.name, tables)
    device = config.run.device
    if device is not None and str(device) != "cpu":
        raise ParameterError(f"The 'device' parameter of dpaudit train --engine flower must be 'cpu' (the simulation "
                             f"gives the parties' ClientApps no GPU). Got {str(device)[:40]!r} instead.")
    out = Path(job.out)
    if (out.exists() or out.is_symlink()) and not job.overwrite:  # before Ray starts (the run checks it again)
        raise DataError(f"The release directory {out} already exists; replace it with --overwrite.")
    return module, config, tables, int(module.party_count(config, int(job.seed)))


def run_methods(jobs: Sequence[FlowerJob], *, num_cpus: int | None = None, timeout: float | None = 3600.0,
                verbose: bool = False) -> list[Any]:
    """Run every job, one after another, as Flower apps in one simulation (Ray starts once); returns their
    :class:`~dpaudit.training.methods.scaffold.RunResult` (None for a run that ``[run] stop_after`` stopped).

    Every configuration is loaded and checked before the simulation starts. ``num_cpus``: Ray's CPUs (default:
    dpaudit's usable cores); each party's ClientApp takes one. ``timeout``: seconds the server waits for the
    parties' replies to one task."""
    prepared = [_prepare(j) for j in jobs]
    outs = [Path(j.out).resolve() for j in jobs]
    if len(set(outs)) < len(outs):
        raise ParameterError("The runs of one Flower simulation must write different release directories.")
    try:
        from flwr.simulation import run_simulation
    except ImportError as e:
        raise ParameterError("The 'engine' parameter of dpaudit train is 'flower', which needs Flower's simulation "
                             f"engine: pip install 'dpaudit[flower]' ({e}).") from None

    from dpaudit.progress import as_reporter
    from dpaudit.threads import usable_cores
    from dpaudit.training.flower.apps import client_app, make_server_app

    nodes = max(p[3] for p in prepared)
    box: dict[str, Any] = {}

    def body(executor_for: Any) -> list[Any]:
        results = []
        for job, (module, config, tables, parties) in zip(jobs, prepared):
            run_id = hashlib.sha256(json.dumps([job.name, tables, int(job.seed), str(job.out)],
                                               sort_keys=True).encode()).hexdigest()[:16]
            with executor_for(method=job.name, tables=tables, seed=int(job.seed), parties=parties, run=run_id):
                as_reporter(job.progress).log(f"{job.name}: {parties} parties as Flower ClientApps, the curator as the "
                                              f"ServerApp (Flower simulation engine, {nodes} SuperNodes)")
                results.append(module.run(config, job.out, seed=int(job.seed), progress=job.progress,
                                          overwrite=job.overwrite))
        return results

    cpus = int(num_cpus or max(1, usable_cores()))
    app = make_server_app(body, box, nodes=nodes, timeout=timeout)
    backend = {"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
               "init_args": {"num_cpus": cpus, "num_gpus": 0, "include_dashboard": False, "log_to_driver": verbose,
                             "logging_level": logging.INFO if verbose else logging.ERROR}}
    env_before = os.environ.get("PYTHONPATH")
    flwr_logger = logging.getLogger("flwr")
    level = flwr_logger.level
    if not verbose:
        flwr_logger.setLevel(logging.ERROR)
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # run_simulation's deprecation notice ('flwr run' needs a packaged app)
            run_simulation(server_app=app, client_app=client_app, num_supernodes=nodes, backend_config=backend,
                           verbose_logging=verbose)
    finally:
        flwr_logger.setLevel(level)
        if env_before is None:  # the Ray backend extends PYTHONPATH for its workers; put it back
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = env_before
    if "error" in box:
        raise box["error"]
    if "result" not in box:
        raise DataError("The Flower simulation ended without running the ServerApp.")
    return box["result"]


def run_method(name: str, *, out: str | Path, seed: int = 0, config_file: str | Path | None = None,
               params: Mapping[str, Any] | None = None, sets: Sequence[str] = (), dataset: str | None = None,
               data_dir: str | Path | None = None, device: str | None = None, overwrite: bool = False,
               progress: Any = True, **options: Any) -> Any:
    """:func:`dpaudit.training.methods.run_method` with the parties as Flower ClientApps (see the module docstring)."""
    job = FlowerJob(name, out, seed, config_file, params, tuple(sets), dataset, data_dir, device, overwrite, progress)
    return run_methods([job], **options)[0]

"""``dpaudit train METHOD --engine flower``: a method's run as Flower apps on Flower's simulation engine (or, with
``--engine flower-deployment``, on a local deployment of SuperLink and SuperNode processes).

The run is the method's own ``run`` (the same scaffold, ledger, accounting and release bundle as the in-process
runner), executed inside a Flower ``ServerApp`` whose party tasks go to one ``ClientApp`` per party through Flower
messages (see :mod:`.apps`). The simulation engine (``flwr.simulation.run_simulation``, Ray backend) starts one
virtual SuperNode per party; its ``partition-id`` is the party's number.

Several runs can share one simulation (:func:`run_methods`): Ray starts once, and each run talks to the nodes it
needs (the first ``parties`` partition ids).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from dpaudit.errors import DataError, ParameterError

__all__ = ["ENGINES", "FlowerJob", "flower_methods", "run_method", "run_methods"]

#: ``dpaudit train --engine`` values: the in-process runner, Flower's simulation engine, a local Flower deployment.
ENGINES = ("inprocess", "flower", "flower-deployment")


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


def prepare_jobs(jobs: Sequence[FlowerJob]) -> list[tuple[Any, Any, dict, int]]:
    """Every job's module, config, tables and party count, checked (before any Flower process starts)."""
    prepared = [_prepare(j) for j in jobs]
    outs = [Path(j.out).resolve() for j in jobs]
    if len(set(outs)) < len(outs):
        raise ParameterError("The runs of one Flower simulation must write different release directories.")
    return prepared


def run_jobs(jobs: Sequence[FlowerJob], prepared: Sequence[tuple], executor_for: Any, where: str) -> list[Any]:
    """The ServerApp's work: each job's run with its parties' executor in force."""
    from dpaudit.progress import as_reporter

    results = []
    for job, (module, config, tables, parties) in zip(jobs, prepared):
        run_id = hashlib.sha256(json.dumps([job.name, tables, int(job.seed), str(job.out)],
                                           sort_keys=True).encode()).hexdigest()[:16]
        with executor_for(method=job.name, tables=tables, seed=int(job.seed), parties=parties, run=run_id):
            as_reporter(job.progress).log(f"{job.name}: {parties} parties as Flower ClientApps, the curator as the "
                                          f"ServerApp ({where})")
            results.append(module.run(config, job.out, seed=int(job.seed), progress=job.progress,
                                      overwrite=job.overwrite))
    return results


def run_methods(jobs: Sequence[FlowerJob], *, engine: str = "simulation", num_cpus: int | None = None,
                timeout: float | None = 3600.0, verbose: bool = False) -> list[Any]:
    """Run every job, one after another, as Flower apps in one Flower run; returns their
    :class:`~dpaudit.training.methods.scaffold.RunResult` (None for a run that ``[run] stop_after`` stopped).

    ``engine``: ``"simulation"`` (Flower's simulation engine: Ray starts once, one virtual SuperNode per party) or
    ``"deployment"`` (a local deployment: a ``flower-superlink`` and one ``flower-supernode`` process per party on
    127.0.0.1, free ports, the run submitted with ``flwr run``; see :func:`run_deployment`). Every configuration is
    loaded and checked before any Flower process starts. ``num_cpus``: Ray's CPUs (simulation; default: dpaudit's
    usable cores); each party's ClientApp takes one. ``timeout``: seconds the server waits for the parties' replies
    to one task."""
    from dpaudit.errors import check_choice

    check_choice(engine, "engine", "run_methods", ("simulation", "deployment"))
    prepared = prepare_jobs(jobs)
    if engine == "deployment":
        return run_deployment(jobs, prepared, timeout=timeout, verbose=verbose)
    try:
        from flwr.simulation import run_simulation
    except ImportError as e:
        raise ParameterError("The 'engine' parameter of dpaudit train is 'flower', which needs Flower's simulation "
                             f"engine: pip install 'dpaudit[flower]' ({e}).") from None

    from dpaudit._ray_local import loopback_only
    from dpaudit.threads import usable_cores
    from dpaudit.training.flower.apps import client_app, make_server_app

    nodes = max(p[3] for p in prepared)
    box: dict[str, Any] = {}

    def body(executor_for: Any) -> list[Any]:
        return run_jobs(jobs, prepared, executor_for, f"Flower simulation engine, {nodes} SuperNodes")

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
            with loopback_only():   # the simulation's Ray instance listens on 127.0.0.1 only
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


def _free_ports(count: int) -> list[int]:
    import socket

    socks, ports = [], []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(int(s.getsockname()[1]))
    finally:
        for s in socks:
            s.close()
    return ports


def _wait_port(port: int, deadline: float, proc: Any) -> None:
    import socket
    import time

    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DataError(f"flower-superlink exited (code {proc.returncode}) before it listened on port {port}.")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.3)
    raise DataError(f"flower-superlink did not listen on 127.0.0.1:{port} in time.")


_APP_TOML = """[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "dpauditrun"
version = "1.0.0"
description = "dpaudit method runs as Flower apps"
license = "Apache-2.0"
dependencies = []

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "dpaudit"

[tool.flwr.app.components]
serverapp = "dpaudit.training.flower.deploy:server_app"
clientapp = "dpaudit.training.flower.deploy:client_app"

[tool.flwr.app.config]
jobs-file = ""
"""


def run_deployment(jobs: Sequence[FlowerJob], prepared: Sequence[tuple], *, timeout: float | None = 3600.0,
                   verbose: bool = False) -> list[Any]:
    """The jobs on a local Flower deployment: ``flower-superlink`` and one ``flower-supernode`` per party
    (``--node-config "partition-id=P num-partitions=N"``), all on 127.0.0.1 with free ports, under a temporary
    ``FLWR_HOME``; the jobs (JSON) go to the ServerApp (:mod:`.deploy`) through a file named in the run config,
    ``flwr run --stream`` submits the app and waits; every process started here is stopped at the end (its whole
    process group). The releases are read back from their directories (:func:`~dpaudit.training.release.load_release`).
    Each message a SuperNode receives starts a ``flwr-clientapp`` process (Flower's process isolation), so a task
    pays a Python start-up and the party's data preparation: much slower than the simulation for many rounds."""
    import shutil
    import signal
    import subprocess
    import sys
    import tempfile
    import time

    import dpaudit
    from dpaudit._io import write_json

    nodes = max(p[3] for p in prepared)
    tmp = Path(tempfile.mkdtemp(prefix="dpaudit-flower-"))
    bindir = str(Path(sys.executable).parent)
    env = {**os.environ, "FLWR_HOME": str(tmp / "home"),
           "PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
           "PYTHONPATH": os.pathsep.join([str(Path(dpaudit.__file__).resolve().parents[1])]
                                         + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))}
    (tmp / "home").mkdir()
    (tmp / "app").mkdir()
    port, *node_ports = _free_ports(1 + nodes)
    (tmp / "home" / "config.toml").write_text(
        f'[superlink]\ndefault = "local"\n\n[superlink.local]\naddress = "127.0.0.1:{port}"\ninsecure = true\n')
    (tmp / "app" / "pyproject.toml").write_text(_APP_TOML)
    write_json(tmp / "jobs.json", {"timeout": timeout, "jobs": [
        {"name": j.name, "out": str(Path(j.out).resolve()), "seed": int(j.seed), "tables": prepared[i][2],
         "overwrite": bool(j.overwrite), "progress": bool(j.progress)} for i, j in enumerate(jobs)]})
    procs: list[Any] = []

    def start(args: list[str], log: str) -> Any:
        f = open(tmp / log, "wb")
        p = subprocess.Popen(args, env=env, cwd=tmp, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(p)
        return p

    t0 = time.perf_counter()
    try:
        link = start([str(Path(bindir) / "flower-superlink"), "--insecure", "--host", "127.0.0.1", "--port", str(port)],
                     "superlink.log")
        _wait_port(port, time.monotonic() + 120, link)
        for p, node_port in enumerate(node_ports):
            start([str(Path(bindir) / "flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{port}",
                   "--node-config", f"partition-id={p} num-partitions={nodes}", "--host", "127.0.0.1",
                   "--port", str(node_port)], f"supernode{p}.log")
        cmd = [str(Path(bindir) / "flwr"), "run", str(tmp / "app"), "local", "--stream",
               "--run-config", f"jobs-file='{tmp / 'jobs.json'}'"]
        shown = verbose or any(bool(j.progress) for j in jobs)  # the run's log stream (progress) on stderr
        r = subprocess.run(cmd, env=env, cwd=tmp, stdout=sys.stderr if shown else subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=None if timeout is None else timeout * 4 + 600)
        stream = "" if shown else (r.stdout or b"").decode(errors="replace")
        missing = [str(j.out) for j in jobs if not (Path(j.out) / "release.json").is_file()]
        if r.returncode != 0 or missing:
            raise DataError(f"The Flower deployment run did not write {', '.join(missing) or 'its releases'} "
                            f"(flwr run exited {r.returncode}). Its output ends:\n{stream[-3000:]}")
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGTERM)
        for p in reversed(procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=20)
        shutil.rmtree(tmp, ignore_errors=True)
    seconds = time.perf_counter() - t0
    return [_result_from_release(job, config, seconds) for job, (_, config, _, _) in zip(jobs, prepared)]


def _result_from_release(job: FlowerJob, config: Any, seconds: float) -> Any:
    """The RunResult of a run whose release another process wrote."""
    from dpaudit.training.methods.scaffold import RunResult
    from dpaudit.training.release import load_release

    out = Path(job.out)
    rel = load_release(out)
    extras = {p.name: p for p in sorted(out.iterdir()) if p.is_dir() and (p / "release.json").is_file()}
    return RunResult(method=config.name, release=out, utility=dict(rel.meta.get("utility") or {}),
                     accounting=rel.info.statement, claimed_epsilon=float(rel.meta["claim"]["epsilon"]),
                     extra_releases=extras, seconds=seconds)


def run_method(name: str, *, out: str | Path, seed: int = 0, config_file: str | Path | None = None,
               params: Mapping[str, Any] | None = None, sets: Sequence[str] = (), dataset: str | None = None,
               data_dir: str | Path | None = None, device: str | None = None, overwrite: bool = False,
               progress: Any = True, **options: Any) -> Any:
    """:func:`dpaudit.training.methods.run_method` with the parties as Flower ClientApps (see the module docstring)."""
    job = FlowerJob(name, out, seed, config_file, params, tuple(sets), dataset, data_dir, device, overwrite, progress)
    return run_methods([job], **options)[0]

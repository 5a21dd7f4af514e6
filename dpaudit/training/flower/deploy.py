"""The apps of a local Flower deployment (``flower-superlink`` and ``flower-supernode`` processes, see
:func:`~.runner.run_deployment`): the ServerApp reads the runs to do from the JSON file its run config names
(``jobs-file``: each run's method, release directory, seed and configuration tables); the ClientApp is the
simulation's (:data:`~.apps.client_app`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flwr.serverapp import ServerApp

from dpaudit.training.flower.apps import client_app, discover, GridExecutor

__all__ = ["server_app", "client_app"]

server_app = ServerApp()


@server_app.main()
def main(grid: Any, context: Any) -> None:
    import contextlib

    from dpaudit.training.flower.runner import FlowerJob, prepare_jobs, run_jobs
    from dpaudit.training.parties import using_executor

    from dpaudit._io import read_json

    spec = read_json(Path(str(context.run_config["jobs-file"])))
    jobs = [FlowerJob(j["name"], j["out"], int(j["seed"]), params=j["tables"], overwrite=bool(j["overwrite"]),
                      progress=bool(j["progress"])) for j in spec["jobs"]]
    prepared = prepare_jobs(jobs)
    found = discover(grid, max(p[3] for p in prepared), spec.get("timeout"))

    @contextlib.contextmanager
    def executor_for(**run: Any) -> Any:
        with using_executor(GridExecutor(grid, found, engine="flower-deployment", timeout=spec.get("timeout"), **run)) as ex:
            yield ex

    run_jobs(jobs, prepared, executor_for, "deployment")

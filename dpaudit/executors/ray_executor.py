"""The Ray executor (optional extra: ``pip install 'dpaudit[ray]'``): units as Ray tasks on a local instance
sized to this machine, or on an existing cluster (``address``).

* Each unit is one task of 1 CPU (and ``gpus_per_unit`` GPUs when the cluster has GPUs, 1 by default). Its
  intra-op thread count (:mod:`dpaudit.threads`) is set before it runs: ``--threads`` / ``DPAUDIT_THREADS``
  when the driver was given a count, with ``auto`` this machine's usable cores divided by the tasks running at
  once on a local instance, else one thread (the default; on a cluster, the task's one CPU).
* A task whose worker dies (killed, out of memory, node lost) is retried by Ray up to ``max_retries`` times
  (then :class:`~dpaudit.executors.UnitFailed`); an exception raised by the unit itself is not retried (it
  would raise again) and stops the run once the units in flight have finished.
* Results come back in the order of the units, whatever the order of completion; units carry their own
  seeds (:func:`dpaudit.executors.derive_seed`), so the numbers are those of the local executor.
* On a cluster, the run's output folder must be on storage every node sees (units that read releases or
  write checkpoints use paths), and dpaudit must be installed on every node.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Callable

from dpaudit.errors import DataError, DPAuditError, ParameterError, check_int
from dpaudit.executors.base import Executor, Unit, UnitFailed, note_unit
from dpaudit.threads import AUTO, DEFAULT_THREADS, ENV_VAR, ThreadSetting, apply_setting, current, resolve_threads

__all__ = ["RayExecutor", "ray_available"]


def ray_available() -> bool:
    """True when Ray can be imported."""
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def _call(fn: Callable[..., Any], args: tuple, kwargs: dict, threads: ThreadSetting | None = None) -> Any:
    if threads is not None:  # the worker's thread count, before the unit's tensor work (dpaudit.threads)
        apply_setting(threads)
    return fn(*args, **kwargs)


class RayExecutor(Executor):
    """Units as Ray tasks. ``address``: join that cluster; else start a local instance with ``num_cpus``
    CPUs (default and maximum: this machine's). ``max_retries``: re-runs of a unit whose worker died.
    ``gpus_per_unit``: GPUs each task requests when the cluster has any (default 1). ``progress``: the
    default display of :meth:`map`."""

    name = "ray"
    in_process = False

    def __init__(self, *, address: str | None = None, num_cpus: int | None = None, max_retries: int = 3,
                 gpus_per_unit: float | None = None, progress: Any = False) -> None:
        super().__init__(progress=progress)
        owner = "RayExecutor"
        try:
            import ray  # noqa: F401
        except ImportError:
            raise ParameterError("The 'ray' executor needs Ray, an optional extra: pip install 'dpaudit[ray]' "
                                 "(or pip install 'ray>=2.9').") from None
        if address is not None and (not isinstance(address, str) or not address.strip()):
            raise ParameterError(f"The 'ray_address' parameter must be a non-empty string (HOST:PORT, ray://HOST:PORT "
                                 f"or auto). Got {address!r} instead.")
        cpus = os.cpu_count() or 1
        self.address = address
        self.num_cpus = cpus if num_cpus is None else check_int(num_cpus, "num_cpus", owner, low=1, high=cpus)
        self.max_retries = check_int(max_retries, "max_retries", owner, low=0)
        self.gpus_per_unit = gpus_per_unit
        self.startup_seconds: float | None = None
        self._owns = False
        self._remote: Any = None
        self._gpus = 0.0
        self._cpus = float(self.num_cpus)
        self._root = self  # copies made by with_checkpoints share this one's connection

    def describe(self) -> str:
        where = f"cluster {self.address}" if self.address else f"a local Ray instance, {self.num_cpus} CPUs"
        return f"ray ({where})"

    @property
    def slots(self) -> int:
        return max(1, int(self._root._cpus))

    def start(self) -> float:
        """Connect to (or start) Ray; returns the seconds it took (0 when already connected)."""
        import ray

        if self._root is not self:
            return self._root.start()

        if self._remote is not None and ray.is_initialized():
            return 0.0
        t0 = time.perf_counter()
        if not ray.is_initialized():
            if self.address:
                try:
                    ray.init(address=self.address, logging_level=logging.WARNING)
                except Exception as exc:  # unreachable address, version mismatch: one line, not a traceback
                    raise DataError(f"Could not join the Ray cluster at {self.address!r}: {exc}") from None
            else:
                # workers inherit the driver's environment: make this dpaudit importable there
                root = str(Path(__file__).resolve().parents[2])
                old = os.environ.get("PYTHONPATH")
                os.environ["PYTHONPATH"] = root if not old else (old if root in old.split(os.pathsep) else root + os.pathsep + old)
                try:
                    # "local": always a new instance of our own, never someone else's cluster on this machine
                    # on loopback: a local instance talks to nothing outside this machine (dpaudit._ray_local)
                    from dpaudit._ray_local import loopback_only

                    with loopback_only():
                        ray.init(address="local", num_cpus=self.num_cpus, include_dashboard=False,
                                 logging_level=logging.WARNING)
                finally:
                    if old is None:
                        os.environ.pop("PYTHONPATH", None)
                    else:
                        os.environ["PYTHONPATH"] = old
            self._owns = True
        res = ray.cluster_resources()
        self._cpus = float(res.get("CPU", self.num_cpus))
        self._gpus = float(res.get("GPU", 0.0))
        gpus = (1.0 if self.gpus_per_unit is None else float(self.gpus_per_unit)) if self._gpus > 0 else 0.0
        self._remote = ray.remote(_call).options(num_cpus=1, num_gpus=gpus, max_retries=self.max_retries,
                                                 retry_exceptions=False)
        self.startup_seconds = time.perf_counter() - t0
        return self.startup_seconds

    def unit_threads(self) -> ThreadSetting:
        """The thread setting each task applies before its unit runs (see the module docstring)."""
        cur = current()
        if cur.source in ("--threads", ENV_VAR):
            return ThreadSetting(cur.threads, cur.source, cur.cores, self.slots)
        if self._root.address:  # a cluster: each task reserves one CPU of its node
            return ThreadSetting(1, "policy", 1, 1)
        if cur.source == "auto":  # auto: this machine's cores shared among the tasks that run at once
            return resolve_threads(AUTO, workers=self.slots)
        return ThreadSetting(DEFAULT_THREADS, "policy", cur.cores, self.slots)

    def _run(self, units: list[Unit], index: list[int], on_done: Callable[[int, Any], None], tally: Any) -> None:
        import ray
        from ray.exceptions import RayTaskError

        self.start()
        remote = self._root._remote
        threads = self.unit_threads()
        window = 2 * self.slots  # in flight at once: stop submitting quickly when a unit fails
        todo = list(zip(index, units))
        inflight: dict[Any, tuple[int, Unit]] = {}
        error: BaseException | None = None
        while todo or inflight:
            while todo and error is None and len(inflight) < window:
                i, u = todo.pop(0)
                inflight[remote.remote(u.fn, u.args, dict(u.kwargs), threads)] = (i, u)
            tally.running = min(len(inflight), self.slots)
            ready, _ = ray.wait(list(inflight), num_returns=1)
            for ref in ready:
                i, u = inflight.pop(ref)
                tally.running = min(len(inflight), self.slots)
                try:
                    result = ray.get(ref)
                except RayTaskError as exc:  # the unit raised: its own error (a dpaudit one as is, for one line)
                    tally.failed += 1
                    if error is None:
                        cause = getattr(exc, "cause", None)
                        error = note_unit(cause if isinstance(cause, DPAuditError) else exc.as_instanceof_cause(), u.key)
                    continue
                except Exception as exc:  # the worker died more than max_retries times, or the cluster went away
                    tally.failed += 1
                    if error is None:
                        error = UnitFailed(f"Unit {u.key!r} failed after {self.max_retries} retries: "
                                           f"{type(exc).__name__}: {exc}")
                    continue
                on_done(i, result)
            if error is not None:
                todo = []
        tally.running = 0
        if error is not None:
            raise error

    def shutdown(self) -> None:
        """Stop the local Ray instance this executor started (a joined cluster is left running)."""
        root = self._root
        if root._owns:
            import ray

            ray.shutdown()
            root._owns = False
        root._remote = None

"""The thread policy: how many intra-op threads torch and the BLAS libraries use in a dpaudit process.

Left alone, torch, MKL and OpenBLAS each start one thread per CPU the machine shows. A parallel region whose
threads do not all get a core waits at its barrier for the slowest one, so as soon as anything else runs on the
machine (other jobs on a CI runner, several workers of one run, a CPU quota smaller than the CPU count) every step
stalls: measured on a shared 2-core machine, two threads per process were 2.8-7x slower than one beside six busy
processes. dpaudit therefore sets the count itself, before any tensor work, and by default to **one intra-op
thread per process**. Its parallelism comes from independent units instead (the models of an ensemble trained
as one batched computation, the units of an executor run as Ray tasks or processes), whose results do not depend
on how many run at once.

Why one and not "the free cores": the thread count can change floating-point summation order, and the same command
with the same seed must give the same numbers on the same machine whatever else is running, so the default may
not look at the load. One thread is the count that is never slowed by the load; dpaudit's models are small, so on
a quiet machine more threads buy little (``bench/bench_threads.py`` measures both; ``docs/results/speed.md``).

Overrides, first that is set wins: an explicit count (the CLI's ``--threads N``, given before or after the command
name), the environment variable ``DPAUDIT_THREADS`` (a positive integer, or ``auto``), the default (1). ``auto``
(``--threads auto`` or ``DPAUDIT_THREADS=auto``) divides the cores among the workers::

    threads = max(1, usable_cores() // workers)

* :func:`usable_cores`: the CPUs this process may run on (``os.sched_getaffinity``), capped by the cgroup CPU
  quota (cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us / cpu.cfs_period_us``, rounded down, at least 1);
* ``workers``: how many processes or tasks of this run work at the same time (1 for the local executor; a Ray
  task gets its CPU share from :class:`~dpaudit.executors.ray_executor.RayExecutor`).

Use ``auto`` (or a count) only on a machine that is yours alone and for large models (a GPU run does not depend on
it). :func:`apply_threads` sets torch (when it is imported; otherwise ``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS`` make
torch start with the count), the BLAS libraries already loaded (through ``threadpoolctl`` when it is installed) and,
for libraries loaded later and child processes, ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS`` and
``OPENBLAS_NUM_THREADS``. :func:`current` returns the setting in force; reports and releases record it. This module
is layer-free: it imports neither torch nor numpy itself.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from dpaudit.errors import ParameterError, check_int

__all__ = ["ENV_VAR", "MAX_THREADS", "DEFAULT_THREADS", "AUTO", "ThreadSetting", "parse_threads", "usable_cores", "cgroup_cpu_limit", "resolve_threads",
           "apply_threads", "apply_setting", "current"]

ENV_VAR = "DPAUDIT_THREADS"
MAX_THREADS = 4096
DEFAULT_THREADS = 1
"""Intra-op threads per process when nothing is set (see the module docstring)."""
AUTO = "auto"
"""The value (of ``--threads`` or ``DPAUDIT_THREADS``) that asks for usable cores / workers."""
_BLAS_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


@dataclass(frozen=True, slots=True)
class ThreadSetting:
    """A resolved thread count: ``threads`` intra-op threads, chosen by ``source`` (``"--threads"``,
    ``"DPAUDIT_THREADS"``, ``"policy"`` (the default, one thread) or ``"auto"`` (cores / workers)) on a process that may use ``cores`` cores and runs beside
    ``workers - 1`` other workers."""

    threads: int
    source: str
    cores: int
    workers: int

    def describe(self) -> str:
        """One line for reports: ``1 intra-op thread (policy; 2 usable cores / 1 worker)``."""
        why = {"policy": "policy", "auto": "auto: cores / workers", "--threads": "set with --threads", ENV_VAR: f"set with {ENV_VAR}"}.get(
            self.source, self.source)
        plural = "s" if self.threads != 1 else ""
        return (f"{self.threads} intra-op thread{plural} ({why}; {self.cores} usable core{'s' if self.cores != 1 else ''}"
                f" / {self.workers} worker{'s' if self.workers != 1 else ''})")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _own_cgroup_paths(controller: str | None) -> list[str]:
    """This process's cgroup paths from /proc/self/cgroup: the v2 entry (``controller=None``) or the v1 entry
    listing ``controller``."""
    text = _read(Path("/proc/self/cgroup")) or ""
    out = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if (controller is None and controllers == "") or (controller is not None and controller in controllers.split(",")):
            out.append(path)
    return out


def _limits_up(root: Path, rel: str, read_one) -> list[float]:
    """``read_one(directory)`` for the cgroup ``rel`` under ``root`` and each of its ancestors (a quota on any of
    them applies); the cgroup root itself last. Missing directories (a container's namespaced view) are skipped."""
    found = []
    parts = [p for p in rel.strip("/").split("/") if p]
    for k in range(len(parts), -1, -1):
        d = root.joinpath(*parts[:k])
        v = read_one(d)
        if v is not None:
            found.append(v)
    return found


def _v2_limit(d: Path) -> float | None:
    text = _read(d / "cpu.max")
    if not text:
        return None
    fields = text.split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    try:
        quota, period = float(fields[0]), float(fields[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _v1_limit(d: Path) -> float | None:
    q, p = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
    try:
        quota, period = float(q or "-1"), float(p or "0")
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def cgroup_cpu_limit(root: str | Path = "/sys/fs/cgroup") -> float | None:
    """The CPU quota of this process's cgroup (and its ancestors) in CPUs, e.g. ``1.5``; None when there is none
    (or it cannot be read). cgroup v2 (``cpu.max``) first, then v1 (``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``)."""
    root = Path(root)
    limits: list[float] = []
    if (root / "cgroup.controllers").is_file():  # the unified (v2) hierarchy
        for rel in _own_cgroup_paths(None) or ["/"]:
            limits += _limits_up(root, rel, _v2_limit)
    for mount in ("cpu,cpuacct", "cpu", "cpuacct,cpu"):
        base = root / mount
        if base.is_dir():
            for rel in _own_cgroup_paths("cpu") or ["/"]:
                limits += _limits_up(base, rel, _v1_limit)
            break
    return min(limits) if limits else None


def usable_cores() -> int:
    """The cores this process may use: its CPU affinity, capped by the cgroup CPU quota (rounded down), >= 1."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        n = os.cpu_count() or 1
    quota = cgroup_cpu_limit()
    if quota is not None:
        n = min(n, int(math.floor(quota + 1e-9)))
    return max(1, n)


def parse_threads(value: "int | str | None", name: str = ENV_VAR) -> "int | str | None":
    """A thread count as a user typed it: a positive integer, ``"auto"``, or None / ``""`` (not set); ``name``
    (the option or variable) is named in the error."""
    if value is None:
        return None
    if isinstance(value, bool):
        n = -1
    elif isinstance(value, int):
        n = value
    else:
        text = str(value).strip().lower()
        if text == "":
            return None
        if text == AUTO:
            return AUTO
        try:
            n = int(text)
        except ValueError:
            n = -1
    if not 1 <= n <= MAX_THREADS:
        what = "environment variable" if name == ENV_VAR else "option"
        raise ParameterError(f"The {what} {name} must be a positive integer in [1, {MAX_THREADS}] "
                             f"or 'auto'. Got {value!r} instead.")
    return n


def resolve_threads(threads: "int | str | None" = None, *, workers: int = 1,
                    environ: Mapping[str, str] | None = None) -> ThreadSetting:
    """The thread count to use (see the module docstring): ``threads`` if given (a count or ``"auto"``), else
    ``DPAUDIT_THREADS`` if set, else one thread. ``auto`` gives ``max(1, usable_cores() // workers)``. Nothing is
    changed."""
    workers = check_int(workers, "workers", "resolve_threads", low=1, high=MAX_THREADS)
    env = os.environ if environ is None else environ
    cores = usable_cores()
    if threads is not None:
        if isinstance(threads, str) and threads.strip().lower() == AUTO:
            return ThreadSetting(max(1, cores // workers), "auto", cores, workers)
        n = check_int(threads, "threads", "dpaudit (--threads)", low=1, high=MAX_THREADS)
        return ThreadSetting(n, "--threads", cores, workers)
    from_env = parse_threads(env.get(ENV_VAR, ""))
    if from_env == AUTO:
        return ThreadSetting(max(1, cores // workers), "auto", cores, workers)
    if from_env is not None:
        return ThreadSetting(int(from_env), ENV_VAR, cores, workers)
    return ThreadSetting(DEFAULT_THREADS, "policy", cores, workers)


_CURRENT: ThreadSetting | None = None


def apply_threads(threads: "int | str | None" = None, *, workers: int = 1) -> ThreadSetting:
    """Resolve the thread count (:func:`resolve_threads`) and set it for torch, the loaded BLAS libraries, and
    (through the environment) libraries loaded later and child processes. Returns the setting, also kept as
    :func:`current`."""
    return apply_setting(resolve_threads(threads, workers=workers))


def apply_setting(setting: ThreadSetting) -> ThreadSetting:
    """Set an already resolved :class:`ThreadSetting` (e.g. one a driver resolved for its workers)."""
    global _CURRENT
    if not isinstance(setting, ThreadSetting):
        raise ParameterError(f"The 'setting' parameter of apply_setting must be a ThreadSetting. "
                             f"Got {type(setting).__name__} instead.")
    n = setting.threads
    for var in _BLAS_VARS:
        os.environ[var] = str(n)
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "set_num_threads"):
        if torch.get_num_threads() != n:
            torch.set_num_threads(n)
    if "numpy" in sys.modules:  # numpy's BLAS read its variable when it was loaded: set it directly
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
            pass
        else:
            threadpool_limits(limits=n, user_api="blas")
    _CURRENT = setting
    return setting


def current() -> ThreadSetting:
    """The setting last applied in this process; before any, what :func:`resolve_threads` would choose (torch's
    own count, if torch is imported and was set otherwise, is reported as ``source="torch"``)."""
    if _CURRENT is not None:
        torch = sys.modules.get("torch")
        if torch is not None and hasattr(torch, "get_num_threads") and torch.get_num_threads() != _CURRENT.threads:
            return ThreadSetting(torch.get_num_threads(), "torch", _CURRENT.cores, _CURRENT.workers)
        return _CURRENT
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "get_num_threads"):
        return ThreadSetting(torch.get_num_threads(), "torch", usable_cores(), 1)
    return resolve_threads()

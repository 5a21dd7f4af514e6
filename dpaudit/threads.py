"""The thread policy: how many intra-op threads torch and the BLAS libraries use in a dpaudit process.

Left alone, torch, MKL and OpenBLAS each start one thread per CPU the machine shows. That oversubscribes the
cores as soon as several workers run at once (Ray tasks, spawned processes, a CPU quota smaller than the CPU
count), and a parallel region whose threads do not all get a core waits at its barrier for the slowest one.
dpaudit therefore sets the count itself, before any tensor work::

    threads = max(1, usable_cores() // workers)

* :func:`usable_cores`: the CPUs this process may run on (``os.sched_getaffinity``), capped by the cgroup CPU
  quota (cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us / cpu.cfs_period_us``, rounded down, at least 1);
* ``workers``: how many processes or tasks of this run work at the same time (1 for the local executor; a Ray
  task gets its CPU share from :class:`~dpaudit.executors.ray_executor.RayExecutor`).

Overrides, first that is set wins: an explicit count (the CLI's global ``--threads N``), the environment variable
``DPAUDIT_THREADS`` (a positive integer, or ``auto`` for the policy), the policy. The policy deliberately does not
look at the machine's load average: the thread count can change floating-point summation order, and the same
command with the same seed must give the same numbers on the same machine whatever else is running. On a machine
shared with other jobs, set ``DPAUDIT_THREADS=1`` (or ``--threads 1``): every process then keeps to one core.

:func:`apply_threads` sets torch (when it is imported; otherwise ``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS`` make torch
start with the count), the BLAS libraries already loaded (through ``threadpoolctl`` when it is installed) and, for
libraries loaded later and child processes, ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS`` and ``OPENBLAS_NUM_THREADS``.
:func:`current` returns the setting in force; reports and releases record it. This module is layer-free: it
imports neither torch nor numpy itself.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from dpaudit.errors import ParameterError, check_int

__all__ = ["ENV_VAR", "MAX_THREADS", "ThreadSetting", "usable_cores", "cgroup_cpu_limit", "resolve_threads",
           "apply_threads", "apply_setting", "current"]

ENV_VAR = "DPAUDIT_THREADS"
MAX_THREADS = 4096
_BLAS_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


@dataclass(frozen=True, slots=True)
class ThreadSetting:
    """A resolved thread count: ``threads`` intra-op threads, chosen by ``source`` (``"--threads"``,
    ``"DPAUDIT_THREADS"`` or ``"policy"``) on a process that may use ``cores`` cores and runs beside
    ``workers - 1`` other workers."""

    threads: int
    source: str
    cores: int
    workers: int

    def describe(self) -> str:
        """One line for reports: ``2 threads (policy: 2 usable cores / 1 worker)``."""
        why = {"policy": "policy", "--threads": "set with --threads", ENV_VAR: f"set with {ENV_VAR}"}.get(
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


def _parse_env(value: str) -> int | None:
    text = value.strip().lower()
    if text in ("", "auto", "0"):
        return None
    try:
        n = int(text)
    except ValueError:
        n = -1
    if not 1 <= n <= MAX_THREADS:
        raise ParameterError(f"The environment variable {ENV_VAR} must be a positive integer in [1, {MAX_THREADS}] "
                             f"or 'auto'. Got {value!r} instead.")
    return n


def resolve_threads(threads: int | None = None, *, workers: int = 1,
                    environ: Mapping[str, str] | None = None) -> ThreadSetting:
    """The thread count to use (see the module docstring): ``threads`` if given, else ``DPAUDIT_THREADS`` if set,
    else ``max(1, usable_cores() // workers)``. Nothing is changed."""
    workers = check_int(workers, "workers", "resolve_threads", low=1, high=MAX_THREADS)
    env = os.environ if environ is None else environ
    cores = usable_cores()
    if threads is not None:
        n = check_int(threads, "threads", "dpaudit (--threads)", low=1, high=MAX_THREADS)
        return ThreadSetting(n, "--threads", cores, workers)
    from_env = _parse_env(env.get(ENV_VAR, ""))
    if from_env is not None:
        return ThreadSetting(from_env, ENV_VAR, cores, workers)
    return ThreadSetting(max(1, cores // workers), "policy", cores, workers)


_CURRENT: ThreadSetting | None = None


def apply_threads(threads: int | None = None, *, workers: int = 1) -> ThreadSetting:
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

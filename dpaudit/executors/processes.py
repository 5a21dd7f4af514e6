"""The process executor: units side by side in worker processes of this machine, each with one intra-op thread.

Why processes and not more threads per process: a parallel region (torch's intra-op threads) waits at its barrier
for its slowest thread, so on a machine that is busy with other work every step stalls (``dpaudit.threads``);
independent units in processes of one thread each never wait for one another, and because every unit takes its
randomness from its arguments (:func:`dpaudit.executors.derive_seed`) and runs with the same thread count wherever
it runs, the results are those of :class:`~dpaudit.executors.LocalExecutor`, bit for bit, whatever the number of
workers or the order in which they finish.

* **Workers**: ``workers`` processes (default :func:`default_workers`: the cores this process may use, divided
  among the pytest-xdist workers when under xdist). They start from a ``forkserver`` (``spawn`` where there is
  none) that has imported torch and the units' modules once, so a worker starts in a fraction of a second; the
  pool starts on the first :meth:`map` with at least ``min_units`` units to run (or earlier, in the background,
  with :meth:`warm_up`) and is reused by every later call (the copies :meth:`~dpaudit.executors.Executor.with_checkpoints` makes share it) until :meth:`shutdown`.
  A map with fewer units, or with a unit that cannot be pickled (a closure, a caller's object), runs its units
  here, one after another, with the workers' thread setting.
* **Threads**: each worker applies the driver's thread setting before it runs anything: one intra-op thread by
  default, ``--threads N`` / ``DPAUDIT_THREADS=N`` as given, ``auto`` as usable cores / workers.
* **Failures**: a unit that raises makes :meth:`map` raise that exception (with a note naming the unit) once the
  units already running have finished and been checkpointed, as the local executor does; a worker that dies
  (killed, out of memory) breaks the pool: a new one is started and the units it was running are run again, one at
  a time until the one whose worker dies is known; that one is retried up to ``max_retries`` times, then
  :class:`~dpaudit.executors.UnitFailed` names it.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import pickle
import sys
import threading
from concurrent.futures import FIRST_COMPLETED, Future, wait
from concurrent.futures.process import BrokenProcessPool, ProcessPoolExecutor
from typing import Any, Callable, Iterator, Sequence

from dpaudit.errors import check_int
from dpaudit.executors.base import Executor, Unit, UnitFailed, note_unit
from dpaudit.threads import AUTO, MAX_THREADS, ThreadSetting, apply_setting, current, resolve_threads, usable_cores

__all__ = ["ProcessExecutor", "default_workers", "XDIST_VAR"]

XDIST_VAR = "PYTEST_XDIST_WORKER_COUNT"
"""Set by pytest-xdist in its workers: how many test processes share the machine."""

#: modules every worker needs whatever it runs: imported once in the fork server, not once per worker
_PRELOAD = ("numpy", "torch", "dpaudit.executors.processes")


def default_workers(environ: "dict[str, str] | None" = None) -> int:
    """Worker processes for this process: its usable cores (:func:`dpaudit.threads.usable_cores`) divided among the
    processes of a pytest-xdist run (``PYTEST_XDIST_WORKER_COUNT``) when there is one; at least 1."""
    env = os.environ if environ is None else environ
    try:
        siblings = max(1, int(env.get(XDIST_VAR, "1")))
    except ValueError:
        siblings = 1
    return max(1, usable_cores() // siblings)


def _init_worker(setting: ThreadSetting) -> None:
    apply_setting(setting)  # before the unit's tensor work (dpaudit.threads)


def _call(blob: bytes) -> Any:
    fn, args, kwargs = pickle.loads(blob)  # made by this run's driver from its own units (never a file's content)
    return fn(*args, **kwargs)


def _noop() -> None:
    """A first task for each worker (:meth:`ProcessExecutor.warm_up`)."""


def _pickled(units: list[Unit]) -> list[bytes] | None:
    """Each unit's function and arguments pickled for a worker, or None when one of them cannot be (a closure, a
    lambda, a caller's object): such a map runs in the driver, with the same numbers."""
    try:
        return [pickle.dumps((u.fn, u.args, dict(u.kwargs)), protocol=pickle.HIGHEST_PROTOCOL) for u in units]
    except (pickle.PicklingError, AttributeError, TypeError):
        return None


@contextlib.contextmanager
def _main_not_inherited() -> Iterator[None]:
    """Start workers without the driver's main script: multiprocessing would import it again in every worker (a
    script without ``if __name__ == "__main__":`` would run again there, and start workers of its own). Units are
    module-level functions of importable modules, so a worker needs only those."""
    main = sys.modules.get("__main__")
    saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if main is not None and k in main.__dict__}
    try:
        if main is not None:
            main.__dict__.pop("__file__", None)
            main.__dict__["__spec__"] = None
        yield
    finally:
        if main is not None:
            main.__dict__.pop("__spec__", None)
            main.__dict__.update(saved)


def _context() -> Any:
    methods = mp.get_all_start_methods()
    return mp.get_context("forkserver" if "forkserver" in methods else "spawn")


class ProcessExecutor(Executor):
    """Units in ``workers`` local processes of one intra-op thread each (see the module docstring).
    ``min_units``: a map with fewer units to run runs them in this process and starts no workers.
    ``max_retries``: re-runs of units whose worker died. ``progress``: the default display of :meth:`map`."""

    name = "processes"
    in_process = False

    def __init__(self, *, workers: int | None = None, min_units: int = 2, max_retries: int = 1,
                 progress: Any = False) -> None:
        super().__init__(progress=progress)
        owner = "ProcessExecutor"
        self.workers = default_workers() if workers is None else check_int(workers, "workers", owner, low=1,
                                                                             high=MAX_THREADS)
        self.min_units = check_int(min_units, "min_units", owner, low=1)
        self.max_retries = check_int(max_retries, "max_retries", owner, low=0)
        self.startups = 0  # pools started (a broken one is replaced)
        self._pool: ProcessPoolExecutor | None = None
        self._warming: threading.Thread | None = None
        self._setting: ThreadSetting | None = None
        self._root = self  # copies made by with_checkpoints share this one's pool

    def describe(self) -> str:
        return f"processes ({self.workers} worker{'s' if self.workers != 1 else ''})"

    @property
    def slots(self) -> int:
        return self.workers

    def worker_setting(self) -> ThreadSetting:
        """The thread setting every worker applies: the driver's own count when one was given (``--threads N``,
        ``DPAUDIT_THREADS=N``), usable cores / workers for ``auto``, else the default (one thread)."""
        here = current()
        if here.source == "auto":
            return resolve_threads(AUTO, workers=self.workers)
        if here.source in ("--threads", "DPAUDIT_THREADS", "torch"):
            return ThreadSetting(here.threads, here.source, here.cores, self.workers)
        return resolve_threads(workers=self.workers)

    def warm_up(self, modules: "Sequence[str]" = ()) -> None:
        """Start the pool and its workers now, without waiting (the fork server imports torch and ``modules`` while
        the caller goes on), when more than one worker is asked for."""
        root = self._root
        if self.workers < 2 or root._pool is not None:
            return
        pool = self._start(set(modules))

        def spawn() -> None:  # the first worker's start waits for the fork server's imports: not in the caller
            with _main_not_inherited():
                for _ in range(self.workers):
                    pool.submit(_noop)

        root._warming = threading.Thread(target=spawn, name="dpaudit-workers-start", daemon=True)
        root._warming.start()

    def _warmed(self) -> None:
        """Wait for :meth:`warm_up`'s thread (its submits and this thread's must not overlap)."""
        t, self._root._warming = self._root._warming, None
        if t is not None:
            t.join()

    def _start(self, modules: set[str]) -> ProcessPoolExecutor:
        root = self._root
        if root._pool is None:
            ctx = _context()
            if ctx.get_start_method() == "forkserver":
                # import once in the server (a no-op if it is already running), not once per worker
                ctx.set_forkserver_preload([m for m in (*_PRELOAD, *sorted(modules)) if m != "__main__"])
            root._setting = self.worker_setting()
            root._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx, initializer=_init_worker,
                                             initargs=(root._setting,))
            root.startups += 1
        return root._pool

    def _run(self, units: list[Unit], index: list[int], on_done: Callable[[int, Any], None], tally: Any) -> None:
        blobs = _pickled(units) if len(units) >= self.min_units else None
        if blobs is None:
            self._run_here(units, index, on_done, tally)
            return
        blob_of = dict(zip(index, blobs))
        self._warmed()
        modules = {getattr(u.fn, "__module__", "") or "" for u in units} - {""}
        todo = list(zip(index, units))  # in the order given: the caller puts long units first
        attempts = {i: 0 for i in index}
        suspects: set[int] = set()  # in flight with others when a worker died: each runs alone next, to tell
        inflight: dict[Future, tuple[int, Unit]] = {}
        error: BaseException | None = None
        while todo or inflight:
            pool = self._start(modules)
            cap = 1 if suspects else self.workers + 1
            while todo and error is None and len(inflight) < cap:
                i, u = todo.pop(0)
                with _main_not_inherited():  # a submit may start a worker
                    inflight[pool.submit(_call, blob_of[i])] = (i, u)
            if error is not None and not inflight:
                break
            tally.running = min(len(inflight), self.slots)
            done, _ = wait(list(inflight), return_when=FIRST_COMPLETED)
            broken: list[tuple[int, Unit]] = []
            for fut in done:
                i, u = inflight.pop(fut)
                if not isinstance(fut.exception(), BrokenProcessPool):
                    suspects.discard(i)
                try:
                    result = fut.result()
                except BrokenProcessPool as exc:  # a worker died: every unit in flight failed with it
                    broken.append((i, u))
                    last = exc
                    continue
                except Exception as exc:  # the unit raised: its own exception, with the unit named
                    tally.failed += 1
                    if error is None:
                        error = note_unit(exc, u.key)
                    continue
                on_done(i, result)
            if broken:
                for fut in list(inflight):  # the rest of the pool's work is lost too
                    broken.append(inflight.pop(fut))
                self._discard_pool()
                for i, u in broken:
                    if len(broken) > 1:  # which of them killed the worker is not known: each runs alone next
                        suspects.add(i)
                        todo.append((i, u))
                        continue
                    suspects.discard(i)
                    attempts[i] += 1
                    if attempts[i] > self.max_retries:
                        tally.failed += 1
                        if error is None:
                            error = UnitFailed(f"Unit {u.key!r} failed: its worker process died "
                                               f"{attempts[i]} time(s) (max_retries={self.max_retries}; "
                                               f"{type(last).__name__}: {last}).")
                    else:
                        todo.append((i, u))
                todo.sort(key=lambda t: (t[0] not in suspects, index.index(t[0])))
            if error is not None:
                todo = []
        tally.running = 0
        if error is not None:
            raise error

    def _run_here(self, units: list[Unit], index: list[int], on_done: Callable[[int, Any], None], tally: Any) -> None:
        """A small map: in this process, with the workers' thread setting (so the numbers are the same)."""
        setting = self._root._setting or self.worker_setting()
        before = current()
        changed = before.threads != setting.threads
        if changed:
            apply_setting(setting)
        try:
            for i, unit in zip(index, units):
                tally.running = 1
                try:
                    result = unit()
                except Exception as exc:
                    tally.failed += 1
                    raise note_unit(exc, unit.key)
                finally:
                    tally.running = 0
                on_done(i, result)
        finally:
            if changed:
                apply_setting(before)

    def _discard_pool(self) -> None:
        self._warmed()
        root = self._root
        if root._pool is not None:
            root._pool.shutdown(wait=False, cancel_futures=True)
            root._pool = None

    def shutdown(self) -> None:
        """Stop the workers (waiting for them to exit)."""
        self._warmed()
        root = self._root
        if root._pool is not None:
            root._pool.shutdown(wait=True, cancel_futures=True)
            root._pool = None


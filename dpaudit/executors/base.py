"""The executor contract: run independent units, in any order, anywhere, with the same results.

A :class:`Unit` is one independent piece of work (a group of shadow models trained by the ensemble trainer,
one attack on one release, one model of an audit grid): a module-level function with its arguments, and a
``key`` that names it uniquely within one :meth:`Executor.map` call. Its randomness must come from its
arguments only -- build them with :func:`derive_seed` ``(run_seed, key)``, never from the order in which
units happen to be scheduled -- so every executor gives the same results as :class:`LocalExecutor`.

Checkpoints: an executor given a folder (:meth:`Executor.with_checkpoints`) writes each finished unit's
result there atomically (``<key>.npz``, numpy arrays only, read back with ``allow_pickle=False``) and, on the
next call, loads it instead of running the unit again -- a re-run after a crash (of a worker or of the
driver) does only what is missing. A checkpoint is reused only when its fingerprint (the unit's own
fingerprint of its inputs, salted with the folder's context) matches, so a changed setting recomputes; the
digest also covers the checkpoint's own content, so an edited or ready-made checkpoint is recomputed, never used.
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from dpaudit._io import load_npz_file, save_npz
from dpaudit.errors import DataError, DPAuditError, ParameterError, check_int
from dpaudit.progress import Reporter, as_reporter

__all__ = ["Unit", "UnitFailed", "Executor", "derive_seed", "fingerprint_arrays", "load_checkpoint", "save_checkpoint",
           "note_unit"]

_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=+-]*$")
_FP = "__fingerprint__"


def derive_seed(run_seed: int, key: str) -> int:
    """The seed of unit ``key`` in a run seeded with ``run_seed``: a hash of both, in [0, 2**31 - 1).

    Depends on nothing else (not on the executor, the number of workers or the order of completion)."""
    run_seed = check_int(run_seed, "run_seed", "derive_seed", low=0)
    if not isinstance(key, str) or not key:
        raise ParameterError(f"The 'key' parameter of derive_seed must be a non-empty string. Got {key!r} instead.")
    digest = hashlib.sha256(f"dpaudit-unit:{run_seed}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "little") % (2**31 - 1)


def fingerprint_arrays(*parts: Any) -> str:
    """A short hash of numpy arrays (shape, dtype and bytes) and plain values, for :attr:`Unit.fingerprint`."""
    h = hashlib.sha256()
    for p in parts:
        if isinstance(p, np.ndarray):
            a = np.ascontiguousarray(p)
            h.update(f"{a.dtype.str}{a.shape}".encode())
            h.update(a.tobytes())
        elif isinstance(p, (list, tuple)):
            h.update(f"seq{len(p)}".encode())
            h.update(fingerprint_arrays(*p).encode())
        else:
            h.update(repr(p).encode())
    return h.hexdigest()[:24]


@dataclass(frozen=True)
class Unit:
    """One independent piece of work: ``fn(*args, **kwargs)``.

    ``fn`` must be a module-level function (so a remote worker can import it) and the arguments picklable;
    ``key`` names the unit (letters, digits, ``._=+-``; unique within one map call) and its checkpoint file;
    ``fingerprint`` identifies its inputs (a checkpoint with another fingerprint is recomputed). To be
    checkpointed, a unit returns a ``dict`` of numpy arrays.
    """

    key: str
    fn: Callable[..., Any]
    args: tuple = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    fingerprint: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not _KEY.match(self.key):
            raise ParameterError("The 'key' parameter of Unit must be a string of letters, digits and ._=+- "
                                 f"(not starting with a symbol). Got {self.key!r} instead.")
        if not callable(self.fn):
            raise ParameterError(f"The 'fn' parameter of Unit must be callable. Got {type(self.fn).__name__} instead.")
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "kwargs", dict(self.kwargs))

    def __call__(self) -> Any:
        return self.fn(*self.args, **self.kwargs)


def note_unit(exc: BaseException, key: str) -> BaseException:
    """Add "(in executor unit KEY)" to an exception's notes (Python >= 3.11; a no-op before) and return it."""
    if hasattr(exc, "add_note"):
        exc.add_note(f"(in executor unit {key!r})")
    return exc


class UnitFailed(DPAuditError, RuntimeError):
    """A unit's worker died more often than the executor retries (or the cluster went away)."""


# --------------------------------------------------------------------------------------------------
# checkpoints
# --------------------------------------------------------------------------------------------------


def _full_fingerprint(unit: Unit, salt: str) -> str:
    return hashlib.sha256(f"{salt}\0{unit.key}\0{unit.fingerprint}".encode()).hexdigest()[:24]


def _content_digest(arrays: Mapping[str, np.ndarray]) -> str:
    """sha256 over every array of a checkpoint: name, dtype, shape and bytes, in name order."""
    h = hashlib.sha256()
    for k in sorted(arrays):
        a = np.ascontiguousarray(arrays[k])
        h.update(f"{k}\0{a.dtype.str}\0{a.shape}\0".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _seal(unit: Unit, salt: str, arrays: Mapping[str, np.ndarray]) -> str:
    """The checkpoint's digest: its unit's inputs (salted with the run's context -- for an attack, the content of
    the bundle attacked) and its own content, so a checkpoint edited, copied from another bundle or run, or
    shipped ready-made is recomputed, never used."""
    return hashlib.sha256(f"{_full_fingerprint(unit, salt)}\0{_content_digest(arrays)}".encode()).hexdigest()


def save_checkpoint(directory: str | Path, unit: Unit, result: Any, *, salt: str = "") -> Path:
    """Write ``result`` (a dict of numpy arrays) of ``unit`` to ``directory/<key>.npz`` atomically, sealed with a
    digest of the unit's inputs and the result's content."""
    if not isinstance(result, Mapping) or not all(isinstance(k, str) and k != _FP for k in result):
        raise ParameterError(f"A checkpointed unit must return a dict of numpy arrays; unit {unit.key!r} returned "
                             f"{type(result).__name__}.")
    arrays = {k: np.asarray(v) for k, v in result.items()}
    bad = [k for k, v in arrays.items() if v.dtype == object]
    if bad:
        raise ParameterError(f"A checkpointed unit must return numpy arrays; unit {unit.key!r} returned objects in {bad}.")
    arrays[_FP] = np.array(_seal(unit, salt, arrays))
    return save_npz(Path(directory) / f"{unit.key}.npz", **arrays)


def load_checkpoint(directory: str | Path, unit: Unit, *, salt: str = "") -> dict[str, np.ndarray] | None:
    """The checkpointed result of ``unit``, or ``None`` (recompute) when absent, unreadable, too large, or when its
    digest does not match the unit's inputs and its own content (see :func:`save_checkpoint`). Read through the
    capped loader (:func:`dpaudit._io.load_npz_file`); a symbolic link is never followed."""
    path = Path(directory) / f"{unit.key}.npz"
    if path.is_symlink() or not path.is_file():
        return None
    try:
        data = load_npz_file(path, "the unit checkpoint", kinds=None)
    except DataError:  # a torn, foreign or oversized file: recompute (writes are atomic, so rare)
        return None
    fp = data.pop(_FP, None)
    if fp is None or fp.shape != () or fp.dtype.kind != "U" or str(fp) != _seal(unit, salt, data):
        return None
    return data


# --------------------------------------------------------------------------------------------------
# progress across units
# --------------------------------------------------------------------------------------------------


class _Tally:
    """done / running / failed counts and an ETA, drawn through one :class:`dpaudit.progress` stage."""

    def __init__(self, reporter: Reporter, label: str, total: int, stage: Any) -> None:
        self.rep, self.label, self.total, self.stage = reporter, label, total, stage
        self.done = self.failed = self.running = self.cached = 0
        self.t0 = time.perf_counter()

    def line(self) -> str:
        ran = self.done - self.cached
        left = self.total - self.done - self.failed
        eta = ""
        if ran > 0 and left > 0:
            per = (time.perf_counter() - self.t0) / ran  # wall time per finished unit, parallelism included
            eta = f", eta {per * left:.0f}s"
        return (f"{self.label}: {self.done}/{self.total} done, {self.running} running, {self.failed} failed"
                + (f" ({self.cached} from checkpoints)" if self.cached else "") + eta)

    def finished(self, key: str, *, cached: bool = False) -> None:
        self.done += 1
        self.cached += int(cached)
        self.stage.advance()
        if not self.rep.interactive and not cached:
            self.rep.log(f"{self.line()}  [{key}]")


# --------------------------------------------------------------------------------------------------
# the executor base class
# --------------------------------------------------------------------------------------------------


class Executor:
    """Runs independent :class:`Unit` s; :meth:`map` returns their results in the order given.

    Subclasses implement :meth:`_run` (run the pending units, calling ``on_done(index, result)`` as each
    finishes) and :attr:`slots` (how many units run at once). Checkpoints and progress live here, so every
    executor resumes and reports the same way.
    """

    name = "base"
    #: True when units run in this process (they may print their own progress then).
    in_process = True

    def __init__(self, *, progress: "bool | Reporter" = False) -> None:
        self.checkpoint_dir: Path | None = None
        self.salt = ""
        self.progress = progress

    @property
    def slots(self) -> int:
        return 1

    def with_checkpoints(self, directory: str | Path | None, *, salt: str = "") -> "Executor":
        """A copy of this executor (same workers) that checkpoints finished units in ``directory``;
        ``salt`` (e.g. a hash of the settings the units come from) is mixed into every fingerprint."""
        other = self.__class__.__new__(self.__class__)
        other.__dict__.update(self.__dict__)
        other.checkpoint_dir = None if directory is None else Path(directory)
        other.salt = str(salt)
        return other

    def map(self, units: Sequence[Unit], *, label: str = "units", progress: "bool | Reporter | None" = None) -> list[Any]:
        """Run ``units`` (resuming from checkpoints when a folder is set) and return their results in order.

        ``progress`` (default: the executor's own) draws one display across the units on stderr: done /
        running / failed and an ETA.

        A unit that raises makes the whole call raise the unit's own exception (with a note naming the unit),
        after the units already running have finished and been checkpointed; a unit whose worker keeps dying
        raises :class:`UnitFailed`.
        """
        units = list(units)
        if not units:
            return []
        keys = [u.key for u in units]
        if len(set(keys)) != len(keys):
            dup = sorted({k for k in keys if keys.count(k) > 1})
            raise ParameterError(f"Unit keys must be distinct within one map call. Got duplicates {dup} instead.")
        rep = as_reporter(self.progress if progress is None else progress)
        results: list[Any] = [None] * len(units)
        pending: list[int] = []
        ckpt = self.checkpoint_dir
        with rep.stage(f"{label}: {len(units)} units on {self.describe()}", total=len(units),
                       plain_progress=False) as stage:  # the tally prints its own lines (done/running/failed, eta)
            tally = _Tally(rep, label, len(units), stage)
            for i, u in enumerate(units):
                hit = load_checkpoint(ckpt, u, salt=self.salt) if ckpt is not None else None
                if hit is None:
                    pending.append(i)
                else:
                    results[i] = hit
                    tally.finished(u.key, cached=True)
            if tally.cached:
                rep.log(f"{label}: {tally.cached} of {len(units)} units found in {ckpt}, not run again")

            def on_done(i: int, result: Any) -> None:
                if ckpt is not None:
                    save_checkpoint(ckpt, units[i], result, salt=self.salt)
                results[i] = result
                tally.finished(units[i].key)

            if pending:
                self._run([units[i] for i in pending], pending, on_done, tally)
        return results

    def describe(self) -> str:
        return self.name

    def warm_up(self, modules: Sequence[str] = ()) -> None:
        """Start workers now, in the background, with ``modules`` imported, so their start overlaps the caller's
        own work (a no-op for executors without start-up cost)."""

    def _run(self, units: list[Unit], index: list[int], on_done: Callable[[int, Any], None], tally: _Tally) -> None:
        raise NotImplementedError

    def shutdown(self) -> None:
        """Release workers (nothing for the local executor)."""

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

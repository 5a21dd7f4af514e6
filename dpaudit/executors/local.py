"""The local executor: today's behaviour -- every unit in this process, one after another, in the order given."""

from __future__ import annotations

from typing import Any, Callable

from dpaudit.errors import DPAuditError
from dpaudit.executors.base import Executor, Unit, UnitFailed

__all__ = ["LocalExecutor"]


class LocalExecutor(Executor):
    """Runs units in this process, in order (``progress``: the default display of :meth:`map`).
    Imports nothing beyond dpaudit's own error, I/O and progress helpers."""

    name = "local"
    in_process = True

    def _run(self, units: list[Unit], index: list[int], on_done: Callable[[int, Any], None], tally: Any) -> None:
        for i, unit in zip(index, units):
            tally.running = 1
            try:
                result = unit()
            except DPAuditError:
                tally.failed += 1
                raise
            except Exception as exc:
                tally.failed += 1
                raise UnitFailed(f"Unit {unit.key!r} failed: {type(exc).__name__}: {exc}") from exc
            finally:
                tally.running = 0
            on_done(i, result)

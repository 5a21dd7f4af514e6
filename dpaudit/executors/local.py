"""The local executor: today's behaviour -- every unit in this process, one after another, in the order given."""

from __future__ import annotations

from typing import Any, Callable

from dpaudit.executors.base import Executor, Unit, note_unit

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
            except Exception as exc:  # as is, traceback and all (today's behaviour), with the unit named
                tally.failed += 1
                raise note_unit(exc, unit.key)
            finally:
                tally.running = 0
            on_done(i, result)

"""One progress reporter for every long-running command.

Everything goes to **stderr** (stdout carries results only). On a terminal a stage is a rich progress bar
with its ETA; elsewhere (CI logs, pipes) a stage prints one line when it starts and one when it ends, so logs
stay short. ``Reporter(enabled=False)`` (``--quiet``) prints nothing.

Library functions take ``progress: bool | Reporter``; :func:`as_reporter` turns either into a reporter::

    rep = as_reporter(progress)
    rep.log("loading data")
    with rep.stage("training 16 x mlp", total=epochs) as stage:
        for _ in range(epochs):
            ...
            stage.advance()
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from typing import Any, Iterator, TextIO

__all__ = ["Reporter", "Stage", "as_reporter", "QUIET"]


class Stage:
    """A running stage: :meth:`advance` moves it on by ``n`` steps of its ``total``."""

    def __init__(self, bar: Any = None, task: Any = None) -> None:
        self._bar = bar
        self._task = task
        self.done = 0

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.advance(self._task, n)


class Reporter:
    """Progress for one command. ``enabled=False`` prints nothing; ``stream`` defaults to ``sys.stderr``;
    ``prefix`` starts every plain line (``"dpaudit"``)."""

    def __init__(self, enabled: bool = True, *, stream: TextIO | None = None, prefix: str = "dpaudit") -> None:
        self.enabled = bool(enabled)
        self.prefix = prefix
        self._stream = stream
        self._console: Any = None

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    def _rich_console(self) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(file=self.stream, stderr=self._stream is None)
        return self._console

    @property
    def interactive(self) -> bool:
        """True when bars can be drawn (stderr is a terminal)."""
        try:
            return bool(self.enabled and self.stream.isatty())
        except (AttributeError, ValueError):
            return False

    def log(self, message: str) -> None:
        """One line on stderr (nothing when quiet)."""
        if self.enabled:
            print(f"[{self.prefix}] {message}", file=self.stream, flush=True)

    @contextmanager
    def stage(self, description: str, total: int | None = None) -> Iterator[Stage]:
        """A stage of ``total`` steps: a bar with ETA on a terminal, a start and an end line otherwise."""
        if not self.enabled:
            yield Stage()
            return
        t0 = time.perf_counter()
        if self.interactive and total:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn,
                                       TimeRemainingColumn)

            bar = Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                           TimeElapsedColumn(), "eta", TimeRemainingColumn(), console=self._rich_console(),
                           transient=True)
            task = bar.add_task(description, total=total)
            bar.start()
            try:
                yield Stage(bar, task)
            finally:
                bar.stop()
            self.log(f"{description}: done in {time.perf_counter() - t0:.1f}s")
            return
        self.log(f"{description} ...")
        yield Stage()
        self.log(f"{description}: done in {time.perf_counter() - t0:.1f}s")


#: A reporter that prints nothing.
QUIET = Reporter(enabled=False)


def as_reporter(progress: "bool | Reporter | None", *, prefix: str = "dpaudit") -> Reporter:
    """``True`` -> a stderr reporter, ``False``/``None`` -> :data:`QUIET`, a :class:`Reporter` -> itself."""
    if isinstance(progress, Reporter):
        return progress
    return Reporter(bool(progress), prefix=prefix) if progress else QUIET

"""One progress reporter for every long-running command.

Everything goes to **stderr** (stdout carries results only). On a terminal a stage is a rich progress bar with
its count, elapsed time and ETA; stages opened inside a running stage (the models of an audit inside the audit)
are drawn as further bars under it, and go away when they end. Elsewhere (CI logs, pipes) a stage prints one
line when it starts, a line with its ETA at most every tenth of the way (and not more often than every few
seconds), and one when it ends, so logs stay short. ``Reporter(enabled=False)`` (``--quiet``) prints nothing.

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

from dpaudit._escape import console_text

__all__ = ["Reporter", "Stage", "as_reporter", "QUIET", "format_eta"]

#: Plain (non-terminal) mode: at most one progress line per this many seconds within a stage.
PLAIN_MIN_SECONDS = 5.0


def format_eta(seconds: float) -> str:
    """``42s``, ``3m05s``, ``1h02m``: a duration for a progress line."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


class _Live:
    """The one rich progress display of a stream: every stage running on it is a task (a bar) of it."""

    def __init__(self, console: Any) -> None:
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                   TimeRemainingColumn)

        self.progress = Progress(TextColumn("[progress.description]{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                                 console=console, transient=True,
                                 redirect_stdout=False)  # stdout is results: never routed through the bars' stream
        self.tasks = 0
        self.progress.start()


_LIVE: dict[int, _Live] = {}


class Stage:
    """A running stage: :meth:`advance` moves it on by ``n`` steps of its ``total``."""

    def __init__(self, bar: Any = None, task: Any = None, *, reporter: "Reporter | None" = None,
                 description: str = "", total: int | None = None, plain: bool = False) -> None:
        self._bar = bar
        self._task = task
        self._rep = reporter
        self._description = description
        self._total = total
        self._plain = plain
        self._t0 = time.perf_counter()
        self._last_line = self._t0
        self._last_tenth = 0
        self.done = 0

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.advance(self._task, n)
        elif self._plain and self._rep is not None and self._total:
            tenth = min(10, self.done * 10 // self._total)
            now = time.perf_counter()
            if tenth > self._last_tenth and self.done < self._total and now - self._last_line >= PLAIN_MIN_SECONDS:
                self._last_tenth, self._last_line = tenth, now
                elapsed = now - self._t0
                eta = elapsed / self.done * (self._total - self.done)
                self._rep.log(f"{self._description}: {self.done}/{self._total}, {format_eta(elapsed)} elapsed, "
                              f"eta {format_eta(eta)}")


class Reporter:
    """Progress for one command. ``enabled=False`` prints nothing; ``stream`` defaults to ``sys.stderr``;
    ``prefix`` starts every plain line (``"dpaudit"``)."""

    def __init__(self, enabled: bool = True, *, stream: TextIO | None = None, prefix: str = "dpaudit") -> None:
        self.enabled = bool(enabled)
        self.prefix = prefix
        self._stream = stream

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    @property
    def interactive(self) -> bool:
        """True when bars can be drawn (stderr is a terminal)."""
        try:
            return bool(self.enabled and self.stream.isatty())
        except (AttributeError, ValueError):
            return False

    def log(self, message: str) -> None:
        """One line on stderr (nothing when quiet); on a terminal it is printed above the running bars."""
        if not self.enabled:
            return
        live = _LIVE.get(id(self.stream))
        if live is not None:
            from rich.text import Text

            live.progress.console.print(Text(console_text(f"[{self.prefix}] {message}")), soft_wrap=True)
        else:
            print(console_text(f"[{self.prefix}] {message}"), file=self.stream, flush=True)

    @contextmanager
    def stage(self, description: str, total: int | None = None, *, plain_progress: bool = True) -> Iterator[Stage]:
        """A stage of ``total`` steps: a bar with its ETA on a terminal (under the bars of the stages it runs in);
        otherwise a start line, lines with the ETA as it goes (unless ``plain_progress=False``: the caller prints
        its own) and an end line."""
        if not self.enabled:
            yield Stage()
            return
        t0 = time.perf_counter()
        if self.interactive:
            from rich.console import Console

            key = id(self.stream)
            live = _LIVE.get(key)
            if live is None:
                live = _LIVE[key] = _Live(Console(file=self.stream, stderr=self._stream is None))
            live.tasks += 1
            task = live.progress.add_task(description, total=total)
            try:
                yield Stage(live.progress, task)
            finally:
                live.progress.remove_task(task)
                live.tasks -= 1
                if live.tasks == 0:
                    live.progress.stop()
                    _LIVE.pop(key, None)
            self.log(f"{description}: done in {format_eta(time.perf_counter() - t0)}")
            return
        self.log(f"{description} ...")
        yield Stage(reporter=self, description=description, total=total, plain=plain_progress)
        self.log(f"{description}: done in {format_eta(time.perf_counter() - t0)}")


#: A reporter that prints nothing.
QUIET = Reporter(enabled=False)


def as_reporter(progress: "bool | Reporter | None", *, prefix: str = "dpaudit") -> Reporter:
    """``True`` -> a stderr reporter, ``False``/``None`` -> :data:`QUIET`, a :class:`Reporter` -> itself."""
    if isinstance(progress, Reporter):
        return progress
    return Reporter(bool(progress), prefix=prefix) if progress else QUIET

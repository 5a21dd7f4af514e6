"""Numbers and tables for people: the one number format and the one table style of every console output.

Layer-free (like :mod:`dpaudit._io`): the accountants' summaries, the report's Markdown, the claims table and
the CLI all format numbers with :func:`fmt_number`, and every table the CLI prints is built by
:func:`print_table` (rich), at most the terminal's width, or 100 columns when piped. A table never truncates a name or a value: cells wrap at spaces only, and on a
terminal too narrow for the table's longest words each row is printed as a block of ``column: value`` lines.
"""

from __future__ import annotations

import math
import numbers
import os
import re
import sys
from typing import Any, Iterable, Sequence, TextIO

from dpaudit._escape import console_text

__all__ = ["fmt_number", "make_console", "build_table", "print_table", "table_text", "NO_VALUE", "printable",
           "PIPE_TABLE_WIDTH", "table_width"]

#: What an absent value prints as.
NO_VALUE = "–"

#: The one console escaping (:func:`dpaudit._escape.console_text`), under the name the CLI has always used: strings a
#: release bundle or an input file carries are printed through it.
printable = console_text


#: Width of a console that is neither a terminal nor given a width (COLUMNS): lines are never folded.
_UNLIMITED = 100_000

#: Width of a table printed where no width is known (a pipe, a log, a string): cells wrap at spaces to fit it.
PIPE_TABLE_WIDTH = 100


def _short_exponent(x: float, digits: int) -> str:
    """``1e-05`` -> ``1e-5``, ``1.50e+07`` -> ``1.5e7``: ``digits`` significant digits, no padding zeros."""
    mantissa, _, exponent = f"{x:.{digits - 1}e}".partition("e")
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}"


def fmt_number(x: Any, digits: int = 4) -> str:
    """A number for people: ``digits`` significant digits, never padded.

    ``0`` for zero (not ``0e+00``), ``1e-5`` for small numbers (below 0.001), ``0.6401``, ``3.6``, ``1349``
    (numbers with ``digits`` or more integer digits are rounded to an integer, never written ``1.35e+03``),
    ``1.2e7`` from a million on, ``∞`` / ``-∞``, ``nan``; ints as they are, ``None`` as ``–``; anything else
    (a string) unchanged. numpy scalars are numbers too."""
    if x is None:
        return NO_VALUE
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, numbers.Integral):
        return str(int(x))
    if not isinstance(x, numbers.Real):
        return str(x)
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "∞" if x > 0 else "-∞"
    if x == 0:
        return "0"
    a = abs(x)
    if a < 1e-3 or a >= 1e6:
        return _short_exponent(x, digits)
    if a >= 10 ** (digits - 1):
        return f"{x:.0f}"
    return f"{x:.{digits}g}"


# --------------------------------------------------------------------------------------------------
# consoles and tables (rich)
# --------------------------------------------------------------------------------------------------


def _is_tty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def make_console(*, stderr: bool = False, file: TextIO | None = None) -> Any:
    """A rich console on stdout (``stderr=True``: stderr, or ``file``) whose width is ``COLUMNS`` when set,
    the terminal's on a terminal, and unlimited otherwise (a pipe or a log: no line is folded)."""
    from rich.console import Console

    stream = file if file is not None else (sys.stderr if stderr else sys.stdout)
    columns = os.environ.get("COLUMNS", "")
    width: int | None = None
    if columns.isdigit() and int(columns) > 0:
        width = int(columns)
    elif not _is_tty(stream):
        width = _UNLIMITED
    return Console(file=stream, width=width, highlight=False, soft_wrap=False)


def build_table(head: Sequence[str], rows: Iterable[Sequence[Any]], *, title: str | None = None,
                right: Iterable[int] = ()) -> Any:
    """The rich table of ``rows`` under ``head`` (cells: strings, or numbers through :func:`fmt_number`);
    column indices in ``right`` are right-aligned. Cells are literal text (no rich markup) and wrap at spaces
    only (a word longer than its column is folded, never cut)."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    right = set(right)
    table = Table(title=None if title is None else Text(printable(title), style="bold"), title_justify="left",
                  box=box.SIMPLE_HEAD, show_edge=False, header_style="bold", pad_edge=False)
    for i, h in enumerate(head):
        table.add_column(Text(printable(h)), justify="right" if i in right else "left", overflow="fold")
    for row in rows:
        table.add_row(*(Text(printable(c) if isinstance(c, str) else fmt_number(c)) for c in row))
    return table


def _column_widths(console: Any, head: Sequence[str], cells: list[list[str]], available: int) -> list[int] | None:
    """Content widths of the columns that fit ``available`` characters without breaking a word (the widest
    columns give up space first, none below its longest word), or None when no such widths exist."""
    from rich.measure import Measurement
    from rich.text import Text

    opts = console.options.update_width(_UNLIMITED)
    lo, hi = [], []
    for j, h in enumerate(head):
        ms = [Measurement.get(console, opts, Text(c)) for c in [h] + [r[j] for r in cells]]
        lo.append(max(m.minimum for m in ms))
        hi.append(max(m.maximum for m in ms))
    overhead = 3 * (len(head) - 1)  # padding and divider between columns (SIMPLE_HEAD, no edges)
    room = available - overhead
    if sum(hi) <= room:
        return hi
    if sum(lo) > room:
        return None
    cap_lo, cap_hi = 0, max(hi)  # the largest cap c with sum(clip(hi, lo, c)) <= room
    while cap_lo < cap_hi:
        c = (cap_lo + cap_hi + 1) // 2
        if sum(max(a, min(b, c)) for a, b in zip(lo, hi)) <= room:
            cap_lo = c
        else:
            cap_hi = c - 1
    return [max(a, min(b, cap_lo)) for a, b in zip(lo, hi)]


def table_width(console: Any) -> int:
    """The width a table gets on ``console``: its own (a terminal's, ``COLUMNS``), else :data:`PIPE_TABLE_WIDTH`
    (a pipe or a log); a console made with an explicit width keeps it."""
    return console.width if console.width < _UNLIMITED else PIPE_TABLE_WIDTH


def print_table(console: Any, head: Sequence[str], rows: Iterable[Sequence[Any]], *, title: str | None = None,
                right: Iterable[int] = ()) -> None:
    """Print a table (:func:`build_table`) at the console's width (:data:`PIPE_TABLE_WIDTH` when it has none: a
    pipe or a log), wrapping cells at spaces only. When the console is narrower than the table's longest words, each row is printed instead as its first cell followed
    by indented ``column: value`` lines, so that no name or value is ever cut or broken inside a word."""
    from rich.text import Text

    cells = [[printable(c) if isinstance(c, str) else fmt_number(c) for c in r] for r in rows]
    head = [printable(h) for h in head]
    if title:
        console.print(Text(printable(title), style="bold"), soft_wrap=True)
    widths = _column_widths(console, head, cells, table_width(console))
    if widths is None:
        for row in cells:
            console.print(Text(f"{head[0]}: {row[0]}", style="bold"), soft_wrap=True)
            for h, c in zip(head[1:], row[1:]):
                console.print(Text(f"  {h}: {c}"), soft_wrap=True)
        return
    table = build_table(head, cells, right=right)
    for col, w in zip(table.columns, widths):
        col.width = w
    with console.capture() as captured:
        console.print(table)
    # rich pads every cell to its column's width: drop the spaces that end a line (before any closing style code)
    console.file.write(_TRAILING_SPACES.sub(r"\1", captured.get()))
    console.file.flush()


_TRAILING_SPACES = re.compile(r" +((?:\x1b\[[0-9;]*m)*)$", re.MULTILINE)


def table_text(head: Sequence[str], rows: Iterable[Sequence[Any]], *, title: str | None = None,
               right: Iterable[int] = (), width: int | None = None) -> str:
    """:func:`print_table` into a string (plain text, ``width`` columns; default: unlimited, as for a file)."""
    import io

    from rich.console import Console

    buf = io.StringIO()
    console = Console(file=buf, width=width or _UNLIMITED - 1, highlight=False, soft_wrap=False, color_system=None)
    print_table(console, head, rows, title=title, right=right)
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines())

"""Rendering of an :class:`~dpaudit.accountants.statement.AccountingResult` for the terminal (rich) and as JSON.

Shared by every command that prints accounting: a table of the statements (each row pointing at its
assumptions by number), the derived facts, the numbered assumptions, and the warnings.
"""

from __future__ import annotations

import json
import math
from typing import Any

from rich.console import Console
from rich.table import Table

from dpaudit.accountants.statement import AccountingResult

__all__ = ["render_result", "result_json", "format_number", "make_console"]



def make_console() -> Console:
    """A rich console: the terminal's width on a terminal, 120 columns when piped or logged (rich's default
    of 80 would fold every table)."""
    import sys

    return Console() if sys.stdout.isatty() else Console(width=120)

def format_number(x: Any) -> str:
    """Numbers for people: 4 significant digits, inf as 'inf', ints as they are."""
    if isinstance(x, bool) or x is None:
        return str(x)
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        if x == 0:
            return "0"
        if 1e-3 <= abs(x) < 1e6:
            return f"{x:.4g}" if abs(x) < 1e4 else f"{x:.1f}"
        return f"{x:.3e}"
    return str(x)


def _jsonable(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return "inf" if x > 0 else ("-inf" if x < 0 else "nan")
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if hasattr(x, "item") and callable(x.item):  # numpy scalars
        return _jsonable(x.item())
    return x


def result_json(result: AccountingResult) -> str:
    """Strict JSON (no NaN/Infinity literals) of ``result.to_dict()``."""
    return json.dumps(_jsonable(result.to_dict()), indent=2, allow_nan=False)


def render_result(result: AccountingResult, console: Console | None = None) -> None:
    """Print ``result``: statements (headline marked), facts, numbered assumptions, warnings."""
    console = console or make_console()
    numbers: dict[str, int] = {}
    for st in result.statements:
        for a in st.assumptions:
            numbers.setdefault(a, len(numbers) + 1)

    table = Table(title=f"{result.mechanism}", title_justify="left", show_lines=False)
    for col, kw in (("", {}), ("figure", {}), ("epsilon", {"justify": "right"}), ("delta", {"justify": "right"}),
                    ("method", {}), ("order", {"justify": "right"}), ("assumptions", {})):
        table.add_column(col, **kw)
    for i, st in enumerate(result.statements):
        mark = "*" if i == result.headline else ""
        eps = format_number(st.epsilon) + (" (data-dep.)" if st.data_dependent else "")
        table.add_row(mark, st.label or "-", eps, format_number(st.delta), st.method,
                      "-" if st.order is None else format_number(st.order),
                      ",".join(str(numbers[a]) for a in st.assumptions))
    console.print(table)
    route = f" (route: {result.headline_route})" if result.headline_route else ""
    console.print(f"[bold]* headline:[/bold] epsilon = {format_number(result.epsilon)}, delta = {format_number(result.delta)}"
                  f"{route}", highlight=False)
    if result.facts:
        facts = Table(title="facts", title_justify="left", show_header=False)
        facts.add_column("name")
        facts.add_column("value", justify="right")
        for k, v in result.facts.items():
            facts.add_row(k, format_number(v))
        console.print(facts)
    if numbers:
        console.print("[bold]assumptions[/bold]")
        for a, n in numbers.items():
            console.print(f"  {n}. {a}", highlight=False)
    for w in result.warnings:
        console.print(f"[yellow]warning:[/yellow] {w}", highlight=False)

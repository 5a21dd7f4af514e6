"""Rendering of an :class:`~dpaudit.accountants.statement.AccountingResult` for the terminal (rich) and as JSON.

Shared by every command that prints accounting: a table of the statements (each row pointing at its
assumptions by number), the derived facts, the numbered assumptions (stdout), and the warnings (stderr). The
console, table and number helpers every command prints with (:mod:`dpaudit._format`) are re-exported here.
"""

from __future__ import annotations

import json
import math
import textwrap
from typing import TYPE_CHECKING, Any, Iterable

import click
from rich.console import Console
from rich.text import Text

from dpaudit._format import fmt_number, make_console, print_table, printable, table_width
from dpaudit.serial import to_dict

if TYPE_CHECKING:  # the accountants (scipy, dp_accounting) load when a command accounts, not for --help
    from dpaudit.accountants.statement import AccountingResult

__all__ = ["render_result", "render_run", "result_json", "format_number", "make_console", "print_table", "warn",
           "print_warnings", "echo"]

#: The one number format (:func:`dpaudit._format.fmt_number`), under the name the commands import.
format_number = fmt_number


def echo(text: Any, *, err: bool = False) -> None:
    """One line of results on stdout (``err``: stderr) through the one console escaping
    (:func:`dpaudit._escape.console_text`): a bundle's strings are shown, never obeyed by the terminal."""
    click.echo(printable(text), err=err)


def warn(message: str) -> None:
    """One ``dpaudit: warning: ...`` line on stderr (stdout holds results only)."""
    click.echo(f"dpaudit: warning: {printable(message)}", err=True)


def print_warnings(warnings: Iterable[str], *, where: str = "") -> None:
    """Each warning on stderr, once, as :func:`warn` (``where``: ``" (claim a)"`` after "warning")."""
    for w in dict.fromkeys(warnings):
        click.echo(f"dpaudit: warning{printable(where)}: {printable(w)}", err=True)


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
    """Strict JSON (no NaN/Infinity literals) of ``result`` (:func:`dpaudit.serial.to_dict`)."""
    return json.dumps(_jsonable(to_dict(result)), indent=2, allow_nan=False)


def render_result(result: AccountingResult, console: Console | None = None) -> None:
    """Print ``result``: statements (headline marked), facts, numbered assumptions on stdout; its warnings on
    stderr."""
    console = console or make_console()
    numbers: dict[str, int] = {}
    for st in result.statements:
        for a in st.assumptions:
            numbers.setdefault(a, len(numbers) + 1)
    rows = []
    for i, st in enumerate(result.statements):
        rows.append([("* " if i == result.headline else "") + (st.label or "-"),
                     fmt_number(st.epsilon) + (" (data-dep.)" if st.data_dependent else ""), fmt_number(st.delta),
                     st.method, fmt_number(st.order), ",".join(str(numbers[a]) for a in st.assumptions)])
    print_table(console, ["figure", "ε", "δ", "method", "order", "assumptions"], rows, title=result.mechanism,
                right=(1, 2, 4))
    route = f" (route: {result.headline_route})" if result.headline_route else ""
    console.print(Text.assemble(("* headline: ", "bold"),
                                printable(f"ε = {fmt_number(result.epsilon)}, δ = {fmt_number(result.delta)}{route}")),
                  soft_wrap=True)
    low = result.lower_bound
    if low is not None:
        bracket = (f"ε in [{fmt_number(low.epsilon)}, {fmt_number(result.epsilon)}]" if result.interval_text() else
                   f"ε >= {fmt_number(low.epsilon)} for {', '.join(low.routes) or 'every route'}")
        console.print(Text.assemble(("  certified interval: ", "bold"),
                                    printable(f"{bracket} at δ = {fmt_number(low.delta)}")), soft_wrap=True)
        # prose from the construction: folded at the tables' width (100 columns when piped), like the tables above it
        text = textwrap.fill(printable(f"lower bound: the pair {low.pair}; {low.method}."), width=table_width(console),
                             initial_indent="  ", subsequent_indent="    ", break_long_words=False)
        console.print(Text(text), soft_wrap=True)
    if result.facts:
        print_table(console, ["fact", "value"], [[k, fmt_number(v)] for k, v in result.facts.items()], title="facts",
                    right=(1,))
    if numbers:
        console.print(Text("assumptions", style="bold"))
        for a, n in numbers.items():
            console.print(Text(printable(f"  {n}. {a}")), soft_wrap=True)
    print_warnings(result.warnings)


def render_run(result: Any, console: Console | None = None) -> None:
    """Print a method run's :class:`~dpaudit.training.methods.scaffold.RunResult`: where the release went, its
    utility, its accounting (:func:`render_result`) and the claimed epsilon."""
    console = console or make_console()
    rounds = f", {result.rounds_run} rounds" if result.rounds_run is not None else ""
    console.print(Text(printable(f"{result.method}: release written to {result.release} ({result.seconds:.1f} s{rounds})")),
                  soft_wrap=True)
    for name, path in result.extra_releases.items():
        console.print(Text(printable(f"  {name} release: {path}")), soft_wrap=True)
    utility = [[k, fmt_number(v)] for k, v in result.utility.items() if isinstance(v, (int, float, str))]
    if utility:
        print_table(console, ["utility", "value"], utility, right=(1,))
    render_result(result.accounting, console)
    claimed = result.claimed_epsilon
    console.print(Text.assemble(("claimed ε: ", "bold"), fmt_number(claimed) + (" (no guarantee claimed)" if
                                                                              math.isinf(claimed) else "")),
                  soft_wrap=True)

"""``dpaudit audit [CONFIG.toml]``: train or load releases, account, attack, and write the report."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape

from dpaudit._format import printable
from dpaudit.cli.executor_options import executor_options
from dpaudit.cli.render import make_console
from dpaudit.cli.render import print_table as shared_print_table


@click.command("audit")
@click.argument("config", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("runs/audit"), show_default=True,
              help="Run directory: releases, attack results and the report. Re-running resumes what is complete.")
@click.option("--device", default=None, help="torch device (default: cuda when available, else cpu).")
@click.option("--quiet", is_flag=True, help="No progress on stderr (results still go to stdout).")
@click.option("--trust-bundle-code", is_flag=True,
              help="Let release models run the factory / training function their bundles name (printed to stderr "
                   "first). Without it, only the code a [[models]] entry names itself (factory = / train_fn =, "
                   "checked against the bundle's sha256) runs.")
@executor_options
def command(config: Path | None, out: Path, device: str | None, quiet: bool, trust_bundle_code: bool, executor: str,
            ray_address: str | None, workers: int | None) -> None:
    """Audit released models: theoretical epsilon beside empirical attack figures, a verdict per model.

    With no CONFIG, runs the embedded default (FREDY-style students on scikit-learn digits at three noise
    levels plus the non-private baseline; loss-threshold, shadow-model and LiRA attacks). Progress goes to
    stderr; the summary, the verdicts and the flags to stdout.
    """
    from dpaudit.api import audit
    from dpaudit.report.render import (CERTIFIED_HEAD, INTRO, METHOD_AUDIT_HEAD, POWER_HEAD, SUMMARY_HEAD,
                                       certified_rows, grouped_flags, method_audit_rows, power_rows, summary_rows,
                                       verdict_lines)

    report = audit(config, out, device=device, progress=not quiet, executor=executor, ray_address=ray_address,
                   trust_bundle_code=trust_bundle_code, workers=workers)
    console = make_console()
    printed: list[str] = []

    def print_table(title: str, head: list[str], rows: list[list[str]], no_wrap=None) -> None:
        """The one table style (:func:`dpaudit.cli.render.print_table`), a blank line between tables: nothing is
        ever cut (``no_wrap`` is accepted and ignored: cells wrap at spaces only)."""
        if printed:
            console.print()
        printed.append(title)
        shared_print_table(console, head, rows, title=title)

    print_table(report.title, SUMMARY_HEAD, summary_rows(report), lambda col: col in ("model", "method", "test accuracy"))
    if report.certified:
        print_table("certified canary audits (DP-SGD recipes)", CERTIFIED_HEAD, certified_rows(report))
    if report.method_audits:
        print_table("certified audits of the methods' whole training runs", METHOD_AUDIT_HEAD, method_audit_rows(report))
    power = power_rows(report)
    if power:
        print_table("attack power (on the non-private reference)", POWER_HEAD, power, lambda col: True)
    else:
        console.print("attack power: unknown (no non-private reference in this audit)")
    console.print(escape(INTRO), soft_wrap=True)
    console.print("[bold]verdicts[/]")
    for name, text in verdict_lines(report):
        console.print(f"  [bold]{escape(printable(name))}[/]: {escape(printable(text))}", soft_wrap=True)
    colour = {"red": "bold red", "warning": "yellow", "info": "cyan"}
    for sev, code, msgs in grouped_flags(report.flags):
        for msg, models in msgs:
            console.print(f"[{colour.get(sev, 'white')}]{escape(printable(sev.upper()))}[/] {escape(printable(code))} "
                          f"({escape(printable(', '.join(models)))}): {escape(printable(msg))}", soft_wrap=True)
    console.print(f"report: {escape(str(out / 'report.html'))} (and report.md, report.json, figures)", soft_wrap=True)

"""``dpaudit audit [CONFIG.toml]``: train or load releases, account, attack, and write the report."""

from __future__ import annotations

import math
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table


@click.command("audit")
@click.argument("config", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("runs/audit"), show_default=True,
              help="Run directory: releases, attack results and the report. Re-running resumes what is complete.")
@click.option("--device", default=None, help="torch device (default: cuda when available, else cpu).")
@click.option("--quiet", is_flag=True, help="No progress messages.")
def command(config: Path | None, out: Path, device: str | None, quiet: bool) -> None:
    """Audit released models: theoretical epsilon beside empirical attack lower bounds.

    With no CONFIG, runs the embedded default (FREDY-style students on scikit-learn digits at three noise
    levels plus the non-private baseline; loss-threshold and shadow-model attacks).
    """
    from dpaudit.report.audit import default_config, load_audit_config, run_audit

    cfg = default_config() if config is None else load_audit_config(config)
    report = run_audit(cfg, out, device=device, progress=not quiet)
    console = Console()
    table = Table(title=report.title, title_justify="left")
    for col in ("model", "test acc.", "theoretical ε", "empirical ε ≥ (attack)", "best AUC", "blind AUC"):
        table.add_column(col)
    for m in report.models:
        best = m.best_empirical
        eps = m.theoretical_epsilon
        acc = m.utility.get("test_accuracy")
        table.add_row(
            m.name, f"{acc:.3f}" if acc is not None else "–",
            "∞ (no mechanism)" if not math.isfinite(eps) else f"{eps:.3g} (δ={m.theoretical_delta:.0e})",
            "–" if best is None else f"{best.epsilon_lower:.3g} ({best.attack}, {best.confidence:g})",
            "–" if not m.attacks else f"{max(a.auc for a in m.attacks):.3f}",
            "–" if not m.attacks else f"{max(a.blind_auc for a in m.attacks):.3f}",
        )
    console.print(table)
    colour = {"red": "bold red", "warning": "yellow", "info": "cyan"}
    for f in report.flags:
        console.print(f"[{colour.get(f.severity, 'white')}]{f.severity.upper()}[/] {f.model}: {f.message}", soft_wrap=True)
    console.print(f"report: {out / 'report.html'} (and report.md, report.json, figures)")

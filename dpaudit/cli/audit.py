"""``dpaudit audit [CONFIG.toml]``: train or load releases, account, attack, and write the report."""

from __future__ import annotations

import math
from pathlib import Path

import click
from dpaudit.cli.render import make_console
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
    levels plus the non-private baseline; loss-threshold, shadow-model and LiRA attacks).
    """
    from dpaudit.audit.runner import default_config, load_audit_config, run_audit

    cfg = default_config() if config is None else load_audit_config(config)
    report = run_audit(cfg, out, device=device, progress=not quiet)
    console = make_console()
    table = Table(title=report.title, title_justify="left")
    table.add_column("model", no_wrap=True)
    for col in ("test acc.", "theoretical ε", "empirical ε ≥", "by attack", "AUC", "blind AUC"):
        table.add_column(col, no_wrap=True)
    for m in report.models:
        best = m.best_empirical
        eps = m.theoretical_epsilon
        acc = m.utility.get("test_accuracy")
        table.add_row(
            m.name, f"{acc:.3f}" if acc is not None else "–",
            "∞" if not math.isfinite(eps) else f"{eps:.3g}",
            "–" if best is None else f"{best.epsilon_lower:.3g}",
            "–" if best is None else best.attack,
            "–" if best is None else f"{best.auc:.3f}",
            "–" if best is None else f"{best.blind_auc:.3f}",
        )
    console.print(table)
    if report.models and report.models[0].attacks:
        a = report.models[0].attacks[0]
        console.print(f"empirical ε: lower bound at confidence {a.confidence:g}, δ = {a.delta:g}; "
                      "theoretical ε: the release's accounted guarantee (∞ = no mechanism).")
    colour = {"red": "bold red", "warning": "yellow", "info": "cyan"}
    for f in report.flags:
        console.print(f"[{colour.get(f.severity, 'white')}]{f.severity.upper()}[/] {f.model}: {f.message}", soft_wrap=True)
    console.print(f"report: {out / 'report.html'} (and report.md, report.json, figures)")

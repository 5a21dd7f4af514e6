"""``dpaudit reproduce PAPER``: rerun a paper's experiment grid and write its reproduction table.

Tables go to ``runs/reproduce/PAPER/`` (scratch) unless ``--out`` says otherwise; the committed tables change only
with ``--out reports/reproduce``, and a table made with more seeds (or settings, or at another scale) is replaced
only with ``--force``.
"""

from __future__ import annotations

from pathlib import Path

import click
from rich.text import Text

from dpaudit.cli.render import make_console, print_table

# Spelled here so that ``dpaudit reproduce --help`` loads no audit code (scipy, torch); tests/cli/test_cold_start.py
# checks that they equal dpaudit.auditing.reproduce's PAPERS, SCALES, DEFAULT_OUT and COMMITTED_OUT.
PAPERS = ("privatekt", "fedkt", "fredy", "proxyfl")
SCALES = ("cpu", "paper")
DEFAULT_OUT = Path("runs") / "reproduce"
COMMITTED_OUT = Path("reports") / "reproduce"


@click.command("reproduce")
@click.argument("paper", type=click.Choice(PAPERS))
@click.option("--scale", type=click.Choice(SCALES), default="cpu", show_default=True,
              help="cpu: offline data sets, small settings (minutes on a laptop); paper: the paper's data and configs.")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Directory with the real data files (needed with --scale paper).")
@click.option("--seeds", type=int, default=5, show_default=True, help="Seeds 0..N-1 per setting (mean ± std).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_OUT, show_default=True,
              help=f"Root of the tables: OUT/PAPER/PAPER.md and .json. The committed tables are --out {COMMITTED_OUT}.")
@click.option("--force", is_flag=True,
              help="Replace a table at OUT made with more seeds, more settings (--only) or at another scale.")
@click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the releases go (default runs/reproduce/PAPER).")
@click.option("--only", default=None, help="Comma-separated setting keys: run only these (and the claims they decide).")
@click.option("--no-attacks", is_flag=True, help="Skip the empirical (threshold-attack) column.")
@click.option("--device", default=None, help="Torch device (default: cuda when available, else cpu).")
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
def command(paper: str, scale: str, data_dir: Path | None, seeds: int, out: Path, force: bool, work_dir: Path | None,
            only: str | None, no_attacks: bool, device: str | None, quiet: bool) -> None:
    """Rerun PAPER's experiment grid (privatekt, fedkt, fredy, proxyfl) and write a Markdown and a JSON table:
    the paper's number, dpaudit's reproduction (mean ± std over seeds), accounted, claimed and empirical
    epsilon, and a verdict per claim."""
    from dpaudit.auditing.reproduce import CLAIMS_HEAD, NOTE, SETTINGS_HEAD, grid_settings, paper_grid, reproduce

    grid = paper_grid(paper, scale)
    if only is not None:      # --only '' selects nothing: refused, never the whole grid
        grid = grid_settings(grid, [k.strip() for k in only.split(",") if k.strip()])
    table = reproduce(paper, scale=scale, data_dir=data_dir, seeds=seeds, out=out, work_dir=work_dir, device=device,
                      attacks=not no_attacks, grid=grid, force=force, progress=not quiet)
    console = make_console()
    g = table.grid
    print_table(console, list(SETTINGS_HEAD), table.setting_rows(),
                title=f"{g.title}: {g.scale} scale, {len(table.seeds)} seed(s), {table.seconds:.0f} s")
    console.print()
    print_table(console, list(CLAIMS_HEAD), table.claim_rows(), title="claims")
    console.print()
    console.print(Text(NOTE), soft_wrap=True)

"""``dpaudit attack RELEASE``: attack a release bundle and print / write what leaks.

Loads the release (never unpickling), hands its model, member / non-member / attacker records and training
recipe to :func:`dpaudit.audit.attack_release.attack_release`, prints a table and writes ``attack.json`` (and ``roc.png``).
Results go to stdout; progress and the paths written to stderr (``--quiet``: nothing on stderr).
"""

from __future__ import annotations

from pathlib import Path

import click

from dpaudit._format import fmt_number, make_console, table_text
from dpaudit.attacks import ATTACKS, ESTIMATE_CAVEAT, AttackReport, AttackResult
from dpaudit.attacks.shadow import CLASSIFIERS
from dpaudit.attacks.threshold import THRESHOLD_KINDS
from dpaudit.cli.executor_options import executor_options
from dpaudit.progress import as_reporter


def _empirical(r: AttackResult) -> str:
    b = r.bound
    if b.certified:
        return f"≥ {fmt_number(b.epsilon)} (certified)"
    rng = f" [{fmt_number(b.split_low)}, {fmt_number(b.split_high)}]" if b.num_splits > 1 else ""
    return f"≈ {fmt_number(b.epsilon)}{rng} (estimate)"


def _row(r: AttackResult) -> list[str]:
    m = r.metrics
    auc_iv = m.intervals.get("auc")
    auc = f"{m.auc:.3f}" + (f" [{auc_iv.low:.3f}, {auc_iv.high:.3f}]" if auc_iv else "")
    tprs = " / ".join(f"{t:.3f}" for _, t in m.tpr_at_fpr)
    return [r.name, auc, tprs, f"{m.accuracy:.3f}", f"{m.macro_precision:.3f}", f"{m.macro_recall:.3f}",
            f"{m.macro_f1:.3f}", _empirical(r)]


def render(report: AttackReport) -> str:
    """What ``dpaudit attack`` prints: the table (the one table style, at the console's width) and its notes."""
    m, b = report.attack.metrics, report.attack.bound
    fprs = " / ".join(fmt_number(f) for f, _ in m.tpr_at_fpr)
    head = ["attack", "AUC [CI]", f"TPR @ FPR {fprs}", "acc", "prec", "rec", "F1", "empirical ε (kind)"]
    rows = [_row(report.attack)] + ([_row(report.blind)] if report.blind is not None else [])
    out = [table_text(head, rows, title=report.attack.description, right=range(1, 7), width=make_console().width)]
    out.append(f"members / non-members evaluated: {m.num_members} / {m.num_nonmembers} (balanced); "
               f"precision/recall/F1 are macro averages at threshold {fmt_number(m.threshold)} ({m.threshold_rule}).")
    if b.certified:
        out.append(f"empirical epsilon: certified lower bound {fmt_number(b.epsilon)} at confidence "
                   f"{fmt_number(b.confidence)}, delta {fmt_number(b.delta)} (Clopper-Pearson over independent trials).")
    else:
        out.append(f"empirical epsilon: {ESTIMATE_CAVEAT}. Median {fmt_number(b.epsilon)} over {b.num_splits} split "
                   f"seeds, range [{fmt_number(b.split_low)}, {fmt_number(b.split_high)}], at confidence "
                   f"{fmt_number(b.confidence)}, delta {fmt_number(b.delta)} (Clopper-Pearson formula, threshold "
                   f"chosen on a disjoint half: FPR {fmt_number(b.fpr)}, FNR {fmt_number(b.fnr)}).")
    out.extend(f"note: {n}" for n in report.notes)
    return "\n".join(out)


@click.command("attack")
@click.argument("release", type=click.Path(file_okay=False, path_type=Path))
@click.option("--attack", "attack", type=click.Choice(ATTACKS), default="shadow", show_default=True)
@click.option("--shadows", type=click.IntRange(2, 10_000), default=16, show_default=True, help="Number of shadow models.")
@click.option("--classifier", type=click.Choice(CLASSIFIERS), default="catboost", show_default=True,
              help="Attack classifier (shadow attack and blind baseline).")
@click.option("--global-model", is_flag=True, help="Shadow attack: one global attack model instead of one per class.")
@click.option("--threshold-kind", type=click.Choice(THRESHOLD_KINDS), default="loss", show_default=True)
@click.option("--offline", is_flag=True, help="LiRA: the offline variant (OUT shadows only).")
@click.option("--confidence", type=float, default=0.95, show_default=True,
              help="Confidence of the empirical epsilon (an estimate on one model) and the bootstrap intervals.")
@click.option("--delta", type=float, default=None,
              help="delta of the empirical epsilon (default: the release's claimed delta, else 0).")
@click.option("--bootstrap", type=click.IntRange(0, 100_000), default=1000, show_default=True, help="Bootstrap replicates.")
@click.option("--seed", type=click.IntRange(0, 2**32 - 1), default=0, show_default=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Output directory (default: RELEASE/attack). Finished groups of shadow models are kept in "
                   "OUT/units, so a re-run trains only what is missing.")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Directory of the release's data files (instead of the dataset.data_dir its release.json names).")
@click.option("--trust-data-dir", is_flag=True,
              help="Read the data from the dataset.data_dir named in release.json even when it lies outside the bundle.")
@click.option("--quiet", is_flag=True, help="No progress on stderr (results still go to stdout).")
@click.option("--audit", "audit", type=click.Choice(("one-run", "multi-run")), default=None,
              help="Certified canary audit instead of a membership attack (writes canary_audit.json). one-run on a "
                   "release trained with [canaries]: the released model itself, from the canaries in its bundle; "
                   "otherwise the release's DP-SGD recipe is retrained with fresh canaries (also writes canaries.npz).")
@click.option("--canary", type=click.Choice(("mislabeled", "ood", "dirac")), default=None,
              help="Canary audit: input canaries (black-box) or Dirac gradient canaries (white-box). Default: the "
                   "bundle's kind if it holds canaries, else dirac.")
@click.option("--canaries", type=int, default=None,
              help="One-run audit: number of canaries m. Default: the bundle's count if it holds canaries, else 1000.")
@click.option("--models", type=int, default=200, show_default=True, help="Multi-run audit: number of models N.")
@click.option("--score", type=click.Choice(("loss", "lira", "dirac-lr", "dirac-sum")), default=None,
              help="Canary score (default: dirac-lr for Dirac canaries, loss otherwise).")
@executor_options
def command(release: Path, attack: str, shadows: int, classifier: str, global_model: bool, threshold_kind: str,
            offline: bool, confidence: float, delta: float | None, bootstrap: int, seed: int, out: Path | None,
            data_dir: Path | None, trust_data_dir: bool, quiet: bool, audit: str | None, canary: str | None,
            canaries: int | None,
            models: int, score: str | None, executor: str, ray_address: str | None) -> None:
    """Attack the model of a release bundle; print AUC, TPR@FPR, accuracy/precision/recall/F1, the empirical
    epsilon (an estimate on one model, with its range over split seeds) and the blind baseline; write attack.json.
    With --audit, run a certified canary audit instead: of the released model itself when the bundle holds canaries
    (one-run), else of the release's DP-SGD recipe, retrained."""
    from dpaudit.api import attack as run_attack

    result = run_attack(release, attack, out=out, audit=audit, shadows=shadows, classifier=classifier,
                        per_class=not global_model, threshold_kind=threshold_kind, lira_online=not offline,
                        confidence=confidence, delta=delta, bootstrap=bootstrap, seed=seed, canary=canary,
                        canaries=canaries, models=models, score=score, data_dir=data_dir, trust_data_dir=trust_data_dir,
                        executor=executor, ray_address=ray_address, progress=as_reporter(not quiet, prefix="dpaudit attack"))
    if audit is not None:
        click.echo(result.summary())
        for note in result.notes:
            click.echo(f"note: {note}")
        return
    click.echo(render(result))

"""``dpaudit attack RELEASE``: attack a release bundle and print / write what leaks.

Loads the release (never unpickling, running no code it names unless the user names the same code or passes
``--trust-bundle-code``), hands its model, member / non-member / attacker records and training recipe to
:func:`dpaudit.auditing.attack_release.attack_release`, prints a table and writes ``attack.json`` (and ``roc.png``)
into the folder :func:`~dpaudit.auditing.attack_release.attack_out_dir` chooses (never inside the bundle).
Results go to stdout; progress and the paths written to stderr (``--quiet``: nothing on stderr).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from dpaudit._format import fmt_number, make_console, printable, table_text, table_width
from dpaudit.cli.executor_options import executor_options
from dpaudit.progress import as_reporter

if TYPE_CHECKING:
    from dpaudit.attacks import AttackReport, AttackResult

# The choices of the options, spelled here so that ``dpaudit attack --help`` loads no attack (scipy, sklearn,
# catboost); tests/cli/test_cold_start.py checks that they equal dpaudit.attacks.ATTACKS, .shadow.CLASSIFIERS and
# .threshold.THRESHOLD_KINDS.
ATTACKS = ("shadow", "threshold", "lira", "rmia")
CLASSIFIERS = ("catboost", "logreg", "gbdt", "rf")
THRESHOLD_KINDS = ("loss", "confidence")


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
    tprs = " / ".join(f"{t:.3f}" for t in m.tpr_at_fpr.values())
    return [r.name, auc, tprs, f"{m.accuracy:.3f}", f"{m.macro_precision:.3f}", f"{m.macro_recall:.3f}",
            f"{m.macro_f1:.3f}", _empirical(r)]


def render(report: AttackReport) -> str:
    """What ``dpaudit attack`` prints: the table (the one table style, at the console's width) and its notes."""
    from dpaudit.attacks import ESTIMATE_CAVEAT

    m, b = report.attack.metrics, report.attack.bound
    fprs = " / ".join(fmt_number(f) for f in m.tpr_at_fpr)
    head = ["attack", "AUC [CI]", f"TPR @ FPR {fprs}", "acc", "prec", "rec", "F1", "empirical ε (kind)"]
    rows = [_row(report.attack)] + ([_row(report.blind)] if report.blind is not None else [])
    out = [table_text(head, rows, title=report.attack.description, right=range(1, 7), width=table_width(make_console()))]
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
        if b.bayes_median is not None:
            out.append(f"Bayesian estimate at that threshold (Zanella-Beguelin et al. 2023): posterior median "
                       f"{fmt_number(b.bayes_median)}, {fmt_number(b.confidence)} credible interval "
                       f"[{fmt_number(b.bayes_low)}, {fmt_number(b.bayes_high)}] (an estimate, not certified).")
    out.extend(f"note: {printable(n)}" for n in report.notes)
    return "\n".join(out)


@click.command("attack")
@click.argument("release", type=click.Path(file_okay=False, path_type=Path))
@click.option("--attack", "attack", type=click.Choice(ATTACKS), default="shadow", show_default=True)
@click.option("--shadows", type=click.IntRange(2, 10_000), default=16, show_default=True, help="Number of shadow models.")
@click.option("--classifier", type=click.Choice(CLASSIFIERS), default="catboost", show_default=True,
              help="Attack classifier (shadow attack and blind baseline).")
@click.option("--global-model", is_flag=True, help="Shadow attack: one global attack model instead of one per class.")
@click.option("--threshold-kind", type=click.Choice(THRESHOLD_KINDS), default="loss", show_default=True)
@click.option("--offline", is_flag=True, help="LiRA / RMIA: the offline variant (OUT reference models only).")
@click.option("--population", type=click.IntRange(1, None), default=None,
              help="RMIA: population records held out of the attacker's pool (default: every pool record the "
                   "reference models do not need to match the target's training-set size, at least a quarter of "
                   "the pool, at most 10,000; scores-only releases: a subsample of the population records they ship).")
@click.option("--rmia-a", "rmia_a", type=click.FloatRange(0.0, 1.0), default=None,
              help="Offline RMIA's a in Pr(x) = ((1 + a) Pr_OUT(x) + 1 - a) / 2 (default: fitted on the reference models).")
@click.option("--gamma", type=click.FloatRange(0.0, None, min_open=True), default=1.0, show_default=True,
              help="RMIA: the pairwise likelihood-ratio threshold.")
@click.option("--compare", is_flag=True,
              help="Every reference-model attack (threshold, LiRA online/offline/fixed variance, RMIA online/offline) "
                   "on the same --shadows reference models and targets: writes comparison.json/.md and roc_compare.png.")
@click.option("--min-k", "min_k", type=click.FloatRange(0.0, 1.0, min_open=True), default=0.2, show_default=True,
              help="LM releases: Min-K% / Min-K%++ average the lowest fraction k of each text's token scores.")
@click.option("--min-k-rounding", "min_k_rounding", type=click.Choice(("floor", "ceil")), default="floor",
              show_default=True,
              help="LM releases: keep int(k n) of the n scored tokens (floor: the published reference code) or "
                   "ceil(k n); at least one.")
@click.option("--per-record", "per_record", is_flag=True,
              help="Per-record risk: write per_record.csv (every record's scores, p-value or likelihood ratio, rank) "
                   "and per_record.md/.json with the most exposed records and a score histogram (and an image grid "
                   "for image data sets).")
@click.option("--confidence", type=float, default=0.95, show_default=True,
              help="Confidence of the empirical epsilon (an estimate on one model) and the bootstrap intervals.")
@click.option("--delta", type=float, default=None,
              help="delta of the empirical epsilon (default: the release's claimed delta, else 0).")
@click.option("--bootstrap", type=click.IntRange(0, 100_000), default=1000, show_default=True, help="Bootstrap replicates.")
@click.option("--seed", type=click.IntRange(0, 2**32 - 1), default=0, show_default=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Output folder (default: runs/attack/<bundle name>-<attack>, under the current folder; never "
                   "inside the bundle). Finished groups of shadow models are kept in OUT/units, so a re-run trains "
                   "only what is missing.")
@click.option("--overwrite", is_flag=True,
              help="Replace the results of an earlier attack in OUT (only in a folder dpaudit wrote).")
@click.option("--factory", default=None, metavar="FILE.py:NAME",
              help="Your copy of the code that builds the bundle's torch model (FILE.py:NAME or module:NAME). It runs "
                   "only if NAME and the file's sha256 match what the bundle records.")
@click.option("--train-fn", "train_fn", default=None, metavar="FILE.py:NAME",
              help="Your copy of the bundle's training function for shadow / reference models, checked the same way.")
@click.option("--trust-bundle-code", is_flag=True,
              help="Run the factory / training function the bundle names (one source file of the recorded sha256; "
                   "never the standard library, dpaudit or an installed package), after printing the file, digest, "
                   "function and arguments to stderr. Without this or --factory / --train-fn, no code a bundle "
                   "names runs.")
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
@click.option("--analysis", type=click.Choice(("auto", "eps", "fdp", "fdp-dp", "gdp")), default="auto",
              show_default=True,
              help="Canary audit: how the certified bound is computed. one-run: eps (Steinke et al. 2023, Thm 3), fdp "
                   "(f-DP test of Gaussian-DP curves, Mahloujifar et al. 2025; its epsilon assumes a Gaussian "
                   "trade-off curve), fdp-dp (f-DP test of (eps, delta) curves); multi-run: eps (Clopper-Pearson) or "
                   "gdp (Gaussian DP). auto: fixed before the run on the ideal attack of the accounted mechanism, "
                   "among the analyses valid for it. Every analysis is shown side by side.")
@click.option("--strict", is_flag=True,
              help="Multi-run canary audit: refuse (instead of warning) when --models is below the count the ideal "
                   "attack needs to certify any positive epsilon at this confidence.")
@executor_options
def command(release: Path, attack: str, shadows: int, classifier: str, global_model: bool, threshold_kind: str,
            offline: bool, population: int | None, rmia_a: float | None, gamma: float, compare: bool,
            per_record: bool, confidence: float, delta: float | None, bootstrap: int, seed: int, out: Path | None,
            data_dir: Path | None, trust_data_dir: bool, quiet: bool, audit: str | None, canary: str | None,
            canaries: int | None, models: int, score: str | None, analysis: str, strict: bool, overwrite: bool,
            factory: str | None, train_fn: str | None, trust_bundle_code: bool, executor: str,
            ray_address: str | None, workers: int | None, min_k: float, min_k_rounding: str) -> None:
    """Attack the model of a release bundle; print AUC, TPR@FPR, accuracy/precision/recall/F1, the empirical
    epsilon (an estimate on one model, with its range over split seeds) and the blind baseline; write attack.json.
    With --audit, run a certified canary audit instead: of the released model itself when the bundle holds canaries
    (one-run), else of the release's DP-SGD recipe, retrained.

    \b
    Output: attack.json, roc.png and OUT/units (or canary_audit.json, canaries.npz)
    in --out, by default runs/attack/<bundle name>-<attack or audit>; never inside
    the bundle (its files, cached results included, may come from the party
    audited). Earlier results are replaced only with --overwrite.
    Code: a bundle may name code (a torch factory, a training function); dpaudit
    runs it only when you pass the same code (--factory / --train-fn, checked
    against the bundle's sha256) or --trust-bundle-code. Nothing in a bundle is
    unpickled; symbolic links in it are refused."""
    from dpaudit.api import attack as run_attack
    from dpaudit.api import specs_from_keywords

    # the flags build the same typed specs a Python caller passes (dpaudit.specs)
    spec, execution, code = specs_from_keywords(
        attack, audit=audit, compare=compare, shadows=shadows, classifier=classifier, per_class=not global_model,
        threshold_kind=threshold_kind, lira_online=not offline, population=population, gamma=gamma,
        rmia_a=rmia_a, canary=canary, canaries=canaries, models=models, score=score,
        analysis=analysis, strict=strict, factory=factory, train_fn=train_fn, trust_bundle_code=trust_bundle_code,
        executor=executor, ray_address=ray_address, workers=workers, min_k=min_k, min_k_rounding=min_k_rounding)
    result = run_attack(release, spec, execution, out=out, per_record=per_record, confidence=confidence, delta=delta,
                        bootstrap=bootstrap, seed=seed, overwrite=overwrite, code=code, data_dir=data_dir,
                        trust_data_dir=trust_data_dir, progress=as_reporter(not quiet, prefix="dpaudit attack"))
    if audit is not None:
        click.echo(printable(result.summary()))
        for note in result.notes:
            click.echo(f"note: {printable(note)}")
        return
    if compare:
        from dpaudit.report.attack_outputs import comparison_text

        click.echo(printable(comparison_text(result)))
        return
    click.echo(printable(render(result)))

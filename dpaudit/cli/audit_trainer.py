"""``dpaudit audit-trainer FILE.py:train --claim epsilon=2 --claim delta=1e-5``: audit a training function you wrote
(:func:`dpaudit.api.audit_trainer`).

Exit status: 0 when nothing refutes the claim, 1 when it is REFUTED (a certified or analytic lower bound above it),
2 on usage or input errors. Results go to stdout (the findings, or ``--json``); progress to stderr (``--quiet``:
none); ``--out DIR`` writes ``trainer_audit.json`` atomically.
"""

from __future__ import annotations

from pathlib import Path

import click

from dpaudit._format import printable
from dpaudit._io import dumps_json
from dpaudit.progress import as_reporter
from dpaudit.serial import to_dict

__all__ = ["command"]


@click.command("audit-trainer")
@click.argument("train_fn", metavar="FILE.py:NAME")
@click.option("--claim", "claims", multiple=True, required=True, metavar="KEY=VALUE",
              help="The claim: --claim epsilon=2 --claim delta=1e-5 (repeatable).")
@click.option("--recipe", "recipe", multiple=True, metavar="KEY=VALUE",
              help="The declared DP-SGD recipe the recorded run is compared with: dataset_size, batch_size, "
                   "noise_multiplier, epochs or steps, sampling (repeatable, e.g. --recipe noise_multiplier=1.48).")
@click.option("--threat-model", type=click.Choice(["white-box", "final-model"]), default="white-box",
              show_default=True,
              help="What the auditor sees: white-box = every privatised update (the hook records them); "
                   "final-model = only the model the function returns (it must return it): 60 (ci) or 150 "
                   "(thorough) independent runs with input canaries, no recorded-run accounting.")
@click.option("--budget", type=click.Choice(["ci", "thorough"]), default="ci", show_default=True,
              help="ci: one run, 500 canaries and 500 probe coordinates; thorough: two independent runs of "
                   "2,000 canaries and 300 probes each (a model with at least 2,300 trainable coordinates). When "
                   "they do not refute the claim, 20 (ci) or 40 (thorough) more runs with input canaries follow.")
@click.option("--canaries", type=click.IntRange(4, 100_000), default=None, help="Override the budget's canary count.")
@click.option("--records", type=click.IntRange(10, 1797), default=1000, show_default=True,
              help="Digits records the training function gets (the canaries come on top).")
@click.option("--seed", type=click.IntRange(0, 2**31 - 1), default=0, show_default=True)
@click.option("--confidence", type=float, default=0.95, show_default=True,
              help="Confidence of the verdict (its failure probability split over the noise limit, the "
                   "certified bound, the rate limit and the input canaries' certified bound).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Directory to write trainer_audit.json into.")
@click.option("--overwrite", is_flag=True, help="Replace --out if dpaudit wrote it before.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--quiet", is_flag=True, help="No progress on stderr (results still go to stdout).")
@click.pass_context
def command(ctx: click.Context, train_fn: str, claims: tuple[str, ...], recipe: tuple[str, ...], threat_model: str,
            budget: str, canaries: int | None, records: int, seed: int, confidence: float, out: Path | None,
            overwrite: bool, as_json: bool, quiet: bool) -> None:
    """Audit your own DP-SGD training function FILE.py:NAME, called as NAME(X, y, *, seed, hook), white-box or
    final-model.

    Canary records join the data by fair coins and go through your own sampler, clipping and noise; the hook you
    attach in two lines (hook.optimizer(opt); grads = hook.per_example(grads, idx)) records each step's batch and
    privatised update. The claim is REFUTED when the certified one-run bound, or the recorded mechanism's lower
    bound (analytic: it assumes independent Gaussian noise per step and the identified sampler), is above it; what
    the loop ran differently from --recipe is named. Otherwise more runs follow with input canaries (records
    extreme in one feature, which catch a normalisation with the training set's own statistics), their certified
    bound pooled over the runs. With --threat-model final-model only the returned models are scored: canary
    records extreme in one feature with random labels, in by fair coins, over many independent runs, their
    certified one-run bound pooled over the runs. The file's sha256 is recorded.
    """
    from dpaudit.api import audit_trainer

    rep = as_reporter(not quiet, prefix="dpaudit audit-trainer")
    result = audit_trainer(train_fn, claim=list(claims), recipe=list(recipe) if recipe else None,
                           threat_model=threat_model, budget=budget, canaries=canaries, records=records, seed=seed,
                           confidence=confidence, out=out, overwrite=overwrite, progress=rep)
    if as_json:
        click.echo(dumps_json(to_dict(result)))
    else:
        for line in result.lines():
            click.echo(printable(line))
    if out is not None:
        rep.log(f"wrote {out / 'trainer_audit.json'}")
    ctx.exit(result.exit_code)

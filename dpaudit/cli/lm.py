"""``dpaudit lm ...``: language-model audits of the user's own fine-tune.

``dpaudit lm audit --base-model DIR --texts FILE --train-fn FILE.py:NAME``: plant canary texts by fair coins into the
user's texts, run their fine-tuning function on a copy of their base model, score the canaries and certify a lower
bound (:func:`dpaudit.auditing.lm_audit.audit_lm_finetune`); ``canary_audit.json`` in ``--out`` is what a claims
file cites (``canary_audit = "..."``). Parsing and printing only.
"""

from __future__ import annotations

from pathlib import Path

import click

from dpaudit._format import fmt_number, printable

_DIR = click.Path(file_okay=False, path_type=Path)
# spelled here so that --help loads nothing heavy (tests/lm/test_lm_user_finetune.py checks they agree)
CANARY_KINDS = ("auto", "new-tokens", "random-tokens")


@click.group("lm")
def command() -> None:
    """Language-model audits: a certified canary audit of your own fine-tune of your own causal LM."""


@command.command("audit")
@click.option("--base-model", "base_model", type=_DIR, required=True,
              help="Your base LM directory (config.json, model.safetensors, tokenizer.json), checked as --lm is.")
@click.option("--texts", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Your private fine-tuning texts (.jsonl with a 'text' field, or one text a line).")
@click.option("--train-fn", "train_fn", required=True, metavar="FILE.py:NAME",
              help="Your fine-tuning function, finetune(model, tokenizer, texts, *, seed) -> what ran (dpaudit's "
                   "FinetuneResult, an Opacus PrivacyEngine or (engine, data_loader), or None). The file runs as "
                   "named; its sha256 is recorded in canary_audit.json.")
@click.option("--train-fn-sha256", "train_fn_sha256", default=None, metavar="HEX",
              help="Refuse to run unless the file's sha256 is this one.")
@click.option("--canaries", type=click.IntRange(2, 100_000), default=256, show_default=True,
              help="Canary texts, each inserted into the texts by a fair coin.")
@click.option("--canary", type=click.Choice(CANARY_KINDS), default="auto", show_default=True,
              help="new-tokens: the tokenizer's reserved <cK> tokens, none shared (Panda et al. 2025); random-tokens: "
                   "ordinary vocabulary tokens drawn uniformly (any tokenizer); auto: new-tokens when the tokenizer "
                   "has enough of them.")
@click.option("--secret-length", "secret_length", type=click.IntRange(1, 256), default=6, show_default=True,
              help="Tokens per canary.")
@click.option("--delta", type=click.FloatRange(0.0, 1.0, min_open=True, max_open=True), default=1e-5,
              show_default=True)
@click.option("--confidence", type=click.FloatRange(0.0, 1.0, min_open=True, max_open=True), default=0.95,
              show_default=True)
@click.option("--replicates", type=click.IntRange(1, 1001), default=11, show_default=True,
              help="Simulated audits of the ideal attack that plan the guessing rule before the run.")
@click.option("--max-length", "max_length", type=click.IntRange(2, 1 << 20), default=64, show_default=True,
              help="Tokens scored per canary.")
@click.option("--lm-bos/--no-lm-bos", "bos", default=True, show_default=True,
              help="Score each canary with the tokenizer's BOS token first.")
@click.option("--seed", type=click.IntRange(0, 2**32 - 1), default=0, show_default=True)
@click.option("--device", default="cpu", show_default=True)
@click.option("--out", type=_DIR, default=None, help="Write canary_audit.json here.")
@click.option("--json", "as_json", is_flag=True, help="Print canary_audit.json's content instead of the summary.")
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
def audit(base_model: Path, texts: Path, train_fn: str, train_fn_sha256: str | None, canaries: int, canary: str,
          secret_length: int, delta: float, confidence: float, replicates: int, max_length: int, bos: bool, seed: int,
          device: str, out: Path | None, as_json: bool, quiet: bool) -> None:
    """Certified one-run canary audit of your own DP fine-tune: print the certified lower bound, the ideal
    attack's reference and the epsilon accounted from what the run recorded."""
    from dpaudit.auditing.lm_audit import audit_lm_finetune

    result = audit_lm_finetune(base_model, texts, train_fn, train_fn_sha256=train_fn_sha256, canaries=canaries,
                               canary=canary, secret_length=secret_length, delta=delta, confidence=confidence,
                               replicates=replicates, max_length=max_length, bos=bos, seed=seed, device=device,
                               out=out, progress=not quiet)
    if as_json:
        from dpaudit._io import dumps_json
        from dpaudit.serial import to_dict

        click.echo(dumps_json(to_dict(result)), nl=False)     # exactly canary_audit.json's text (write_json's)
        return
    click.echo(printable(result.summary()))
    acc = result.accounted_epsilon
    click.echo(f"accounted epsilon: {'none (non-private run)' if acc is None else fmt_number(acc)} "
               f"({printable(result.settings['accounting_source'])}); certified lower bound: "
               f"{fmt_number(result.bound.epsilon)}")
    for note in result.notes:
        click.echo(f"note: {printable(note)}")
    if out is not None:
        click.echo(f"wrote {out / 'canary_audit.json'}", err=True)

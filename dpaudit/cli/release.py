"""``dpaudit release make``: a release bundle from a model trained elsewhere (or only its scores).

Parsing and printing only: the work is :func:`dpaudit.auditing.release_make.make_release`.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from dpaudit._format import fmt_number, printable
from dpaudit.cli.render import echo
from dpaudit.errors import ParameterError

_PATH = click.Path(dir_okay=False, path_type=Path)


def json_kwargs(text: str | None, what: str) -> dict | None:
    """The JSON object an option holds (``--factory-kwargs``, also ``dpaudit flower``'s), or a ParameterError naming
    the option; a deeply nested text (RecursionError in json) is refused the same way, and the text shown is cut."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        why = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
        raise ParameterError(f"The '{what}' parameter must be a JSON object. Got {text!r:.80} ({why}) instead.") from None
    if not isinstance(value, dict):
        raise ParameterError(f"The '{what}' parameter must be a JSON object. Got {text!r:.80} instead.")
    return value


@click.group("release")
def command() -> None:
    """Release bundles made outside dpaudit's own methods."""


@command.command("make")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True, help="Bundle directory to write.")
@click.option("--model", type=_PATH, default=None,
              help="Model file: .safetensors (with --factory), .skops (scikit-learn) or .cbm (CatBoost). Never a pickle.")
@click.option("--factory", default=None, help="path/to/file.py:build or module:build, the function building the torch module "
              "(THIS RUNS YOUR CODE; its sha256 is recorded, and attacking the bundle runs it again only when you name "
              "the same code).")
@click.option("--factory-kwargs", default=None, help="JSON object of keyword arguments for --factory.")
@click.option("--scores", type=_PATH, default=None, help="Scores-only release: an .npz of the model's outputs "
              "(logits_/probs_/loss_ train/test, labels_train/test, optional reference_* arrays).")
@click.option("--data", type=_PATH, default=None, help="Records: .npz (X, y), .npy (features, with --labels) or .csv.")
@click.option("--labels", type=_PATH, default=None, help="Labels .npy for a .npy --data.")
@click.option("--label-column", default=None, help="CSV: the label column (default: the last).")
@click.option("--dataset", default=None, help="Instead of --data: a dpaudit data set name (digits, mnist, adult, ...).")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Directory of the real-format files for --dataset (MNIST IDX, CIFAR-10 batches, SVHN .mat, Adult CSV).")
@click.option("--members", type=_PATH, default=None, help="Members (training records): .npy/.txt indices or a boolean mask.")
@click.option("--nonmembers", type=_PATH, default=None, help="Non-members: .npy/.txt indices or a boolean mask.")
@click.option("--attacker", type=_PATH, default=None,
              help="The attacker's records for shadow models (default: every record neither member nor non-member).")
@click.option("--train-fn", default=None, help="file.py:train or module:train, train(X, y, seed) -> model, the recipe "
              "for shadow / reference models (THIS RUNS YOUR CODE, now, and when the release is attacked with the same "
              "--train-fn).")
@click.option("--recipe-model", default=None, help="Instead of --train-fn: a dpaudit architecture (mlp, cnn_fedkt, "
              "random_forest, ...) trained with --recipe-config.")
@click.option("--recipe-kwargs", default=None, help="JSON object of architecture keyword arguments for --recipe-model.")
@click.option("--recipe-config", type=_PATH, default=None, help="TrainConfig fields (.json or .toml) for --recipe-model.")
@click.option("--opacus-recipe", default=None, help="Instead of --train-fn: an Opacus PrivacyEngine recipe as a JSON "
              "object (noise_multiplier, max_grad_norm, epochs, batch_size, lr; optional optimizer sgd|adam, momentum, "
              "weight_decay, poisson_sampling) that trains shadow / reference models on --factory's module: no "
              "train(X, y, seed) to write (dpaudit.integrations.opacus.OpacusRecipe).")
@click.option("--ledger", type=_PATH, default=None, help="Accounting: a dpaudit ledger JSON.")
@click.option("--dp-events", type=_PATH, default=None, help="Accounting: a dp_accounting event as JSON "
              "(dpaudit.integrations.dp_accounting.dp_event_to_json).")
@click.option("--opacus", type=_PATH, default=None, help="Accounting: an Opacus run JSON "
              "(dpaudit.integrations.opacus.OpacusRun.to_dict(), or its bare history list).")
@click.option("--runs-tried", type=int, default=1, show_default=True,
              help="Training runs tried in the hyper-parameter search that produced the model (the release is the best "
                   "of them): all are accounted, and a claim that covers fewer is a red flag.")
@click.option("--claim", "claims", multiple=True, required=True,
              help="KEY=VALUE, repeated: epsilon=8, delta=1e-5, granularity=record (or example|user|party|...), text=...")
@click.option("--lm", "lm", type=click.Path(path_type=Path), default=None,
              help="Language model: a local Hugging Face-style directory (config.json, model.safetensors, "
                   "tokenizer.json; built-in architectures only, no remote code, never a pickle), with --members and "
                   "--nonmembers as text files (.jsonl with a 'text' field, or one text a line).")
@click.option("--lm-scores", "lm_scores", type=_PATH, default=None,
              help="Scores-only LM release: an .npz of per-token log-probabilities (offsets, logp, member; optional "
                   "mu/sigma, zlib_bytes, reference_totals/reference_in, population_*).")
@click.option("--reference-lm", "reference_lms", multiple=True, type=click.Path(path_type=Path),
              help="--lm: a reference LM directory (same tokenizer), repeated; for the reference ratio, LiRA and RMIA.")
@click.option("--reference-in", "reference_in", type=_PATH, default=None,
              help="--lm: .npy bool (targets, K): which reference LM trained on which target (members then "
                   "non-members); default: none did.")
@click.option("--population-texts", "population_texts", type=_PATH, default=None,
              help="--lm: other texts, trained on by no model (RMIA's population).")
@click.option("--max-length", "max_length", type=click.IntRange(2, 1 << 20), default=512, show_default=True,
              help="--lm: tokens kept per text.")
@click.option("--lm-bos/--no-lm-bos", "lm_bos", default=True, show_default=True,
              help="--lm: score each text with the tokenizer's BOS token first, so that its first token is scored too "
                   "(recorded in lm_release.json); --no-lm-bos: the text's own tokens only.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--overwrite", is_flag=True, help="Replace an existing bundle at --out (only a folder dpaudit wrote).")
def make(out: Path, model: Path | None, factory: str | None, factory_kwargs: str | None, scores: Path | None,
         data: Path | None, labels: Path | None, label_column: str | None, dataset: str | None, data_dir: Path | None,
         members: Path | None, nonmembers: Path | None, attacker: Path | None, train_fn: str | None,
         recipe_model: str | None, recipe_kwargs: str | None, recipe_config: Path | None, opacus_recipe: str | None,
         ledger: Path | None,
         dp_events: Path | None, opacus: Path | None, runs_tried: int, claims: tuple[str, ...], seed: int,
         overwrite: bool, lm: Path | None, lm_scores: Path | None, reference_lms: tuple[Path, ...],
         reference_in: Path | None, population_texts: Path | None, max_length: int, lm_bos: bool) -> None:
    """Build a release bundle from a model trained elsewhere, so that `dpaudit attack`, `dpaudit audit` and
    `dpaudit check` work on it."""
    from dpaudit.api import make_release
    from dpaudit.report.flags import RELEASE_FLAG_SEVERITY

    if lm is not None or lm_scores is not None:
        other = [k for k, v in (("--model", model), ("--factory", factory), ("--scores", scores), ("--data", data),
                                ("--dataset", dataset), ("--attacker", attacker), ("--train-fn", train_fn),
                                ("--recipe-model", recipe_model)) if v is not None]
        if other or runs_tried != 1:
            raise ParameterError(f"--lm / --lm-scores make a language-model release; they take none of {other or ['--runs-tried']}.")
        kw = {} if lm_scores is not None else {"members": members, "nonmembers": nonmembers,
                                               "population": population_texts, "reference_lms": list(reference_lms),
                                               "reference_in": reference_in, "max_length": max_length,
                                               "bos": lm_bos}
        lrel = make_release(out, claim=list(claims), lm=lm, lm_scores=lm_scores, ledger=ledger, dp_events=dp_events,
                            opacus=opacus, seed=seed, overwrite=overwrite, **kw)
        counts = lrel.meta["counts"]
        click.echo(f"wrote {lrel.path} ({lrel.kind} release, {counts['members']} members, {counts['nonmembers']} "
                   "non-members)")
        click.echo(f"claim: {printable(lrel.meta['claim']['text'])}")
        st = lrel.meta.get("statement")
        if st is not None:
            head = st["statement"]
            h_eps = float(head["epsilon"]) if isinstance(head["epsilon"], str) else head["epsilon"]
            click.echo(f"accounted: ε = {fmt_number(h_eps)} at δ = {fmt_number(head['delta'])} ({st['mechanism']})")
        click.echo("attack it with: dpaudit attack " + printable(str(lrel.path)) + " --compare")
        return
    rel = make_release(
        out, claim=list(claims), model=model, factory=factory, factory_kwargs=json_kwargs(factory_kwargs, "--factory-kwargs"),
        data=data, labels=labels, label_column=label_column, dataset=dataset,
        data_dir=None if data_dir is None else str(data_dir), members=members, nonmembers=nonmembers, attacker=attacker,
        scores=scores, train_fn=train_fn, recipe_model=recipe_model,
        recipe_kwargs=json_kwargs(recipe_kwargs, "--recipe-kwargs"), recipe_config=recipe_config,
        opacus_recipe=json_kwargs(opacus_recipe, "--opacus-recipe"), ledger=ledger,
        dp_events=dp_events, opacus=opacus, runs_tried=runs_tried, seed=seed, overwrite=overwrite)
    path, meta = rel.path, rel.meta
    st = meta.get("statement")
    echo(f"wrote {path} ({rel.kind} model, {len(rel.membership['members'])} members, "
               f"{len(rel.membership['nonmembers'])} non-members)")
    echo(f"claim: {meta['claim']['text']}")
    if st is not None:
        head = st["statement"]
        route = f", route {st['headline_route']}" if st.get("headline_route") else ""
        h_eps = float(head["epsilon"]) if isinstance(head["epsilon"], str) else head["epsilon"]  # "inf" in JSON
        echo(f"headline: ε = {fmt_number(h_eps)} at δ = {fmt_number(head['delta'])} ({st['mechanism']}{route}; the "
                   "smallest valid upper bound)")
        for s in st["statements"]:
            eps = float(s["epsilon"]) if isinstance(s["epsilon"], str) else s["epsilon"]  # "inf" in JSON
            echo(f"accounted: ε = {fmt_number(eps)} at δ = {fmt_number(s['delta'])} ({s['label'] or s['method']})")
        lower = st.get("facts", {}).get("lower_bound_epsilon")
        if lower is not None:
            echo(f"lower bound (Chua et al. 2024, certified): no analysis of this run can give ε below "
                       f"{fmt_number(lower)}")
    echo(f"attacks possible: {', '.join(meta['params'].get('possible_attacks', []))}")
    for f in meta.get("flags", []):
        echo(f"{RELEASE_FLAG_SEVERITY.get(f['code'], 'warning')} flag ({f['code']}): {f['message']}")

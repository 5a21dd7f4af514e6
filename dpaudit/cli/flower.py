"""``dpaudit flower ...``: run a recorded Flower simulation, release a recorded run, audit one with canary clients.

``dpaudit account --flower-run DIR`` prints the same accounting as ``dpaudit flower account DIR``. Parsing and
printing only: the work is in :mod:`dpaudit.auditing.flower_run` and :mod:`dpaudit.auditing.flower_canary`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import click

from dpaudit._format import fmt_number, printable
from dpaudit.cli.release import json_kwargs
from dpaudit.cli.render import warn

_DIR = click.Path(file_okay=False, path_type=Path)
_NEIGHBOURING = click.Choice(("replace-one", "substitution", "add-remove"))  # substitution = replace-one


def render_flower_accounting(acc, as_json: bool = False) -> None:
    """Print a :class:`~dpaudit.integrations.flower.accounting.FlowerAccounting` (table, or JSON with ``as_json``)."""
    from rich.console import Console

    from dpaudit._format import print_table
    from dpaudit.report.flags import RELEASE_FLAG_SEVERITY
    from dpaudit.serial import to_dict

    if as_json:
        d = to_dict(acc)
        d.pop("ledger", None)
        click.echo(json.dumps(d, indent=2))
        return
    console = Console(highlight=False, soft_wrap=False)
    click.echo(f"Flower run: {acc.kind} DP, {acc.released_rounds} released rounds, population {acc.population}, "
               f"sample size {acc.sample_size if acc.sample_size is not None else 'varies'}; sampling "
               f"{'verified (uniform without replacement)' if acc.sampler_verified else 'NOT verified (no amplification)'}")
    click.echo(f"client-level epsilon at delta {fmt_number(acc.delta)} ({acc.neighbouring}): {fmt_number(acc.epsilon)} "
               "(largest per-client figure)")
    if acc.lower_bound is not None:
        click.echo(f"ex ante: [{fmt_number(acc.lower_bound)}, {fmt_number(acc.sampled_epsilon)}] (certified lower bound "
                   "from an explicit pair, upper bound under the sampler that ran)")
    routes = acc.facts.get("sampled_routes") or {}
    if len(routes) > 1:
        click.echo("amplified figure by route: " + ", ".join(f"{k} {fmt_number(v)}" for k, v in routes.items())
                   + f" (the smaller, {acc.facts.get('sampled_route')}, is used)")
    if acc.local_epsilon is not None:
        click.echo(f"local DP (LocalDpMod, against the server): largest client epsilon {fmt_number(acc.local_epsilon)}")
    rows = [[str(c.partition) if c.partition is not None else str(c.node_id), c.rounds, c.sampled, c.participation,
             c.headline] + ([c.local if c.local is not None else "-"] if acc.local_epsilon is not None else [])
            for c in sorted(acc.per_client, key=lambda c: (c.partition is None, c.partition or 0, c.node_id))]
    head = ["client", "rounds", "sampled (ex ante)", "own rounds (ex post)", "epsilon"] + (
        ["local DP"] if acc.local_epsilon is not None else [])
    print_table(console, head, rows, right=range(1, len(head)))
    for f in acc.flower:
        mark = "  RED FLAG: below dpaudit's certified lower bound" if f.below_lower_bound else ""
        click.echo(f"Flower's accountant ({f.convention}, {f.source}): epsilon {fmt_number(f.epsilon)} at delta "
                   f"{fmt_number(f.delta)}{mark}")
    for code, msg in acc.flags:
        click.echo(f"{RELEASE_FLAG_SEVERITY.get('flower_epsilon_below_lower_bound' if code == 'flower_below_lower_bound' else code, 'warning')} "
                   f"flag ({code}): {printable(msg)}")
    for a in acc.assumptions:
        click.echo(f"assumption: {printable(a)}")


@click.group("flower")
def command() -> None:
    """Flower runs: simulate and record, account, release, audit with canary clients."""


@command.command("simulate")
@click.option("--out", type=_DIR, required=True, help="Run directory to write (flower_run.json, ledger.json, model).")
@click.option("--clients", type=int, default=20, show_default=True, help="SuperNodes (one digits partition each).")
@click.option("--sampled", type=int, default=5, show_default=True, help="Clients sampled per round.")
@click.option("--rounds", type=int, default=30, show_default=True)
@click.option("--records-per-client", type=int, default=40, show_default=True)
@click.option("--noise-multiplier", type=float, default=2.0, show_default=True)
@click.option("--clipping-norm", type=float, default=1.0, show_default=True)
@click.option("--dp", type=click.Choice(("server-fixed", "server-adaptive", "none")), default="server-fixed",
              show_default=True, help="Flower's DP wrapper around FedAvg.")
@click.option("--delta", type=float, default=1e-5, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--overwrite", is_flag=True)
def simulate(out: Path, clients: int, sampled: int, rounds: int, records_per_client: int, noise_multiplier: float,
             clipping_norm: float, dp: str, delta: float, seed: int, overwrite: bool) -> None:
    """Federated softmax regression on digits in Flower's simulation engine, recorded into --out."""
    from dpaudit.auditing.flower_run import run_digits_simulation

    path = run_digits_simulation(out, clients=clients, sampled=sampled, rounds=rounds,
                                 records_per_client=records_per_client, noise_multiplier=noise_multiplier,
                                 clipping_norm=clipping_norm, dp=dp, delta=delta, seed=seed, overwrite=overwrite)
    click.echo(f"wrote {path}")


@command.command("account")
@click.argument("run_dir", type=_DIR)
@click.option("--delta", type=float, default=1e-5, show_default=True)
@click.option("--neighbouring", type=_NEIGHBOURING, default="replace-one", show_default=True)
@click.option("--json", "as_json", is_flag=True)
def account(run_dir: Path, delta: float, neighbouring: str, as_json: bool) -> None:
    """Client-level accounting of a recorded Flower run (same as `dpaudit account --flower-run`)."""
    from dpaudit.auditing.flower_run import account_flower_run

    render_flower_accounting(account_flower_run(run_dir, delta=delta, neighbouring=neighbouring), as_json)


@command.command("release")
@click.argument("run_dir", type=_DIR)
@click.option("--out", type=_DIR, required=True, help="Release bundle directory to write.")
@click.option("--delta", type=float, default=1e-5, show_default=True)
@click.option("--neighbouring", type=_NEIGHBOURING, default="replace-one", show_default=True)
@click.option("--claim", "claims", multiple=True, help="The run's claim, e.g. --claim epsilon=8 --claim delta=1e-5 "
              "--claim granularity=user (default: dpaudit's own figure).")
@click.option("--factory", default=None, help="path/to/file.py:build, the function building your torch module (the "
              "run's global_model.safetensors is loaded into it; pinned by its sha256, as in `release make`). Default: "
              "the digits softmax regression of `flower simulate`.")
@click.option("--factory-kwargs", default=None, help="JSON object of keyword arguments for --factory.")
@click.option("--overwrite", is_flag=True)
def release(run_dir: Path, out: Path, delta: float, neighbouring: str, claims: tuple[str, ...], factory: str | None,
            factory_kwargs: str | None, overwrite: bool) -> None:
    """A release bundle of the run's final global model, its ledger and its claim (for attack and check)."""
    from dpaudit.auditing.flower_run import release_flower_run

    path = release_flower_run(run_dir, out, delta=delta, neighbouring=neighbouring, claim=list(claims) or None,
                              factory=factory, factory_kwargs=json_kwargs(factory_kwargs, "--factory-kwargs"),
                              overwrite=overwrite)
    click.echo(f"wrote {path}")


@command.command("audit")
@click.option("--out", type=_DIR, required=True, help="Folder for the canary runs and flower_canary_audit.json.")
@click.option("--canaries", type=int, default=32, show_default=True,
              help="Canary clients, 2-128 (each included by a fair coin).")
@click.option("--clients", type=int, default=8, show_default=True,
              help="Ordinary clients, 1-100 (with the canaries at most 200 SuperNodes).")
@click.option("--sampled", type=int, default=4, show_default=True)
@click.option("--rounds", type=int, default=5, show_default=True)
@click.option("--noise-multiplier", type=float, default=2.0, show_default=True)
@click.option("--clipping-norm", type=float, default=1.0, show_default=True)
@click.option("--delta", type=float, default=1e-5, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--factory", default=None, help="path/to/file.py:build, your torch module for the clients to train "
              "(pinned by its sha256, recorded in the result). Default: the digits softmax regression.")
@click.option("--factory-kwargs", default=None, help="JSON object of keyword arguments for --factory.")
def audit(out: Path, canaries: int, clients: int, sampled: int, rounds: int, noise_multiplier: float,
          clipping_norm: float, delta: float, seed: int, factory: str | None, factory_kwargs: str | None) -> None:
    """A certified client-level canary audit of a real Flower simulation (server-side fixed clipping)."""
    from dpaudit.auditing.flower_canary import audit_flower_simulation

    res = audit_flower_simulation(out, canaries=canaries, clients=clients, sampled=sampled, rounds=rounds,
                                  noise_multiplier=noise_multiplier, clipping_norm=clipping_norm, delta=delta, seed=seed,
                                  factory=factory, factory_kwargs=json_kwargs(factory_kwargs, "--factory-kwargs"))
    click.echo(f"canaries: {res.num_canaries} ({res.num_included} included by fair coins), {res.rounds} rounds")
    click.echo(f"certified lower bound: epsilon >= {fmt_number(res.certified_epsilon)} (one run, confidence "
               f"{fmt_number(res.confidence)}); the ideal attack on this mechanism: {fmt_number(res.ideal_epsilon)}")
    click.echo(f"accounted (dpaudit, {res.neighbouring}): {fmt_number(res.accounted_epsilon)}")
    if math.isfinite(res.accounted_epsilon) and res.certified_epsilon > res.accounted_epsilon:
        warn("the certified bound lies above the accounted epsilon: the run leaks more than its accounting says")

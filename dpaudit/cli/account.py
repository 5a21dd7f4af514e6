"""``dpaudit account --mechanism ...``: one accounting function call, then a table (or ``--json``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from dpaudit.accountants.rdp import parse_orders
from dpaudit.api import account
from dpaudit.cli.render import render_result, result_json

MECHANISMS = ("ldp", "dpsgd", "laplace", "gaussian", "pate", "gnmax")

# option name (python identifier) -> CLI spelling
_FLAG = {
    "epsilon": "--epsilon", "samples": "--samples", "classes": "--classes", "rounds": "--rounds",
    "participation": "--participation", "users": "--users", "delta": "--delta",
    "dataset_size": "--dataset-size", "batch_size": "--batch-size", "noise_multiplier": "--noise-multiplier",
    "epochs": "--epochs", "steps": "--steps", "accountant": "--accountant",
    "gamma": "--gamma", "queries": "--queries", "sensitivity": "--sensitivity", "votes": "--votes",
    "fedkt_level": "--fedkt-level", "granularity": "--granularity", "partitions": "--partitions",
    "teachers": "--teachers", "z": "--z", "data_independent": "--data-independent", "orders": "--orders",
    "conversion": "--conversion", "sigma": "--sigma", "threshold": "--threshold", "sigma1": "--sigma1",
}

# mechanism -> (required options, optional options)
_USES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "ldp": (("epsilon", "samples", "classes"), ("rounds", "participation", "users", "delta")),
    "dpsgd": (("dataset_size", "batch_size", "noise_multiplier", "delta"), ("epochs", "steps", "accountant")),
    "laplace": (("gamma", "queries", "delta"), ("sensitivity", "orders", "conversion")),
    "gaussian": (("sigma", "queries", "delta"), ("orders", "threshold", "sigma1")),
    "pate": (("votes", "gamma", "delta"), ("sensitivity", "queries", "fedkt_level", "granularity", "partitions",
                                          "teachers", "z", "data_independent", "orders", "conversion")),
    "gnmax": (("votes", "sigma", "delta"), ("queries", "threshold", "sigma1", "data_independent", "orders")),
}


def _check_options(mechanism: str, given: dict[str, Any]) -> None:
    required, optional = _USES[mechanism]
    for name in required:
        if given.get(name) is None:
            raise click.UsageError(f"{_FLAG[name]} is required for --mechanism {mechanism}.")
    unused = [name for name, v in given.items() if v not in (None, False) and name not in required + optional]
    if unused:
        raise click.UsageError(
            f"{', '.join(_FLAG[n] for n in unused)} {'is' if len(unused) == 1 else 'are'} not used by --mechanism {mechanism} "
            f"(it takes {', '.join(_FLAG[n] for n in required + optional)}).")
    if mechanism == "dpsgd" and (given.get("epochs") is None) == (given.get("steps") is None):
        raise click.UsageError("exactly one of --epochs or --steps is required for --mechanism dpsgd.")


def _call(mechanism: str, o: dict[str, Any]):
    """The options as one call of :func:`dpaudit.account` (the mechanism table's functions,
    :data:`dpaudit.accountants.mechanisms.ACCOUNTING_FUNCTIONS`).

    The CLI's ``laplace`` and ``gaussian`` are the PATE noisy-max mechanisms without votes (data-independent):
    ``pate`` and ``gnmax`` with ``data_independent=True``."""
    if mechanism == "ldp":
        return account("ldp", epsilon=o["epsilon"], samples=o["samples"], classes=o["classes"], rounds=o["rounds"],
                       participation=o["participation"], users=o["users"], delta=o["delta"])
    if mechanism == "dpsgd":
        return account("dpsgd", dataset_size=o["dataset_size"], batch_size=o["batch_size"],
                       noise_multiplier=o["noise_multiplier"], epochs=o["epochs"], steps=o["steps"], delta=o["delta"],
                       accountant=o["accountant"] or "best")
    orders = parse_orders(o["orders"]) if o["orders"] is not None else None
    if mechanism in ("laplace", "pate"):
        extra = {} if o["sensitivity"] is None else {"sensitivity": o["sensitivity"]}
        if mechanism == "laplace":
            return account("pate", votes=None, gamma=o["gamma"], delta=o["delta"], queries=o["queries"],
                           data_independent=True, orders=orders, conversion=o["conversion"] or "best", **extra)
        return account("pate", votes=o["votes"], gamma=o["gamma"], delta=o["delta"], queries=o["queries"],
                       data_independent=o["data_independent"], fedkt_level=o["fedkt_level"],
                       granularity=o["granularity"], partitions=o["partitions"], teachers=o["teachers"], z=o["z"],
                       orders=orders, conversion=o["conversion"] or "best", **extra)
    if mechanism == "gaussian":
        return account("gnmax", votes=None, sigma=o["sigma"], delta=o["delta"], queries=o["queries"],
                       threshold=o["threshold"], sigma1=o["sigma1"], data_independent=True, orders=orders)
    return account("gnmax", votes=o["votes"], sigma=o["sigma"], delta=o["delta"], queries=o["queries"],
                   threshold=o["threshold"], sigma1=o["sigma1"], data_independent=o["data_independent"], orders=orders)


@click.command("account")
@click.option("--mechanism", type=click.Choice(MECHANISMS), required=True, help="What to account.")
@click.option("--epsilon", type=float, help="[ldp] LDP budget of one report of K labels.")
@click.option("--samples", type=int, help="[ldp] K, labels per report.")
@click.option("--classes", type=int, help="[ldp] C, number of classes.")
@click.option("--rounds", type=int, help="[ldp] number of rounds.")
@click.option("--participation", type=float, help="[ldp] fraction of clients per round.")
@click.option("--users", type=int, help="[ldp] total clients (users*participation reports are shuffled per round).")
@click.option("--delta", type=float, help="target delta.")
@click.option("--dataset-size", type=int, help="[dpsgd] examples in the training set.")
@click.option("--batch-size", type=int, help="[dpsgd] expected batch size (q = batch/dataset).")
@click.option("--noise-multiplier", type=float, help="[dpsgd] sigma.")
@click.option("--epochs", type=float, help="[dpsgd] epochs (steps = ceil(epochs*dataset/batch)).")
@click.option("--steps", type=int, help="[dpsgd] steps.")
@click.option("--accountant", type=click.Choice(("best", "rdp", "pld")), help="[dpsgd] headline route: best (default: the smaller of rdp and pld), or force rdp or pld.")
@click.option("--gamma", type=float, help="[laplace, pate] inverse Laplace scale on vote counts.")
@click.option("--queries", type=int, help="[laplace, gaussian, pate, gnmax] number of queries.")
@click.option("--sensitivity", type=float, help="[laplace, pate] L1 sensitivity of the vote histogram (default 2).")
@click.option("--votes", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="[pate, gnmax] vote histograms (.npy).")
@click.option("--fedkt-level", type=click.Choice(("L1", "L2")), help="[pate] FedKT privacy level.")
@click.option("--granularity", type=click.Choice(("party", "example")), help="[pate] FedKT granularity.")
@click.option("--partitions", type=int, help="[pate] FedKT s.")
@click.option("--teachers", type=int, help="[pate] FedKT t.")
@click.option("--z", type=int, help="[pate] FedKT z (example-level).")
@click.option("--data-independent", is_flag=True, help="[pate, gnmax] use the data-independent bound only.")
@click.option("--orders", type=str, help="[laplace, gaussian, pate, gnmax] orders, e.g. '1-8' or '2,4,8,16'.")
@click.option("--conversion", type=click.Choice(("best", "moments", "rdp")), help="[laplace, pate] best (default: the smallest of moments, rdp and pure-DP composition), or force moments (PATE 2017) or rdp.")
@click.option("--sigma", type=float, help="[gaussian, gnmax] GNMax noise std.")
@click.option("--threshold", type=float, help="[gaussian, gnmax] Confident-GNMax threshold T.")
@click.option("--sigma1", type=float, help="[gaussian, gnmax] Confident-GNMax threshold noise std.")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON.")
def command(mechanism: str, as_json: bool, **options: Any) -> None:
    """Theoretical epsilon of a mechanism, with every figure's assumptions."""
    _check_options(mechanism, options)
    result = _call(mechanism, options)
    if as_json:
        click.echo(result_json(result))
    else:
        render_result(result)

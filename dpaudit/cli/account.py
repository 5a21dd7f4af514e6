"""``dpaudit account --mechanism ...``: one accounting function call, then a table (or ``--json``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from dpaudit.cli.render import render_result, result_json

MECHANISMS = ("ldp", "dpsgd", "tuning", "laplace-mechanism", "gaussian-mechanism", "laplace-noisy-max",
              "gaussian-noisy-max", "pate", "gnmax", "laplace", "gaussian")
#: Old names kept as aliases that warn: before issue 47 ``laplace`` and ``gaussian`` were PATE's noisy max without votes
#: (Laplace noisy max and GNMax), not the plain Laplace and Gaussian mechanisms; they still mean what they meant.
ALIASES = {"laplace": "laplace-noisy-max", "gaussian": "gaussian-noisy-max"}

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
    "answered": "--answered", "interactive": "--interactive", "release_epsilon": "--release-epsilon", "seed": "--seed",
    "release_order": "--release-order", "release_beta": "--release-beta", "release_sigma_ss": "--release-sigma-ss",
    "sampling": "--sampling", "neighbouring": "--neighbouring", "drop_last": "--drop-last",
    "opacus_loader": "--opacus-loader",
    "runs_distribution": "--runs-distribution", "mean_runs": "--mean-runs", "eta": "--eta", "scale": "--scale",
}

# mechanism -> (required options, optional options)
_USES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "ldp": (("epsilon", "samples", "classes"), ("rounds", "participation", "users", "delta")),
    "dpsgd": (("dataset_size", "batch_size", "noise_multiplier", "delta"),
              ("epochs", "steps", "accountant", "sampling", "neighbouring", "drop_last", "opacus_loader")),
    "tuning": (("runs_distribution", "mean_runs", "dataset_size", "batch_size", "noise_multiplier", "delta"),
               ("eta", "epochs", "steps", "sampling", "neighbouring", "drop_last")),
    "laplace-mechanism": (("scale",), ("sensitivity", "queries", "delta")),
    "gaussian-mechanism": (("sigma", "delta"), ("sensitivity", "queries")),
    "laplace-noisy-max": (("gamma", "queries", "delta"), ("sensitivity", "orders", "conversion")),
    "gaussian-noisy-max": (("sigma", "queries", "delta"), ("orders", "threshold", "sigma1", "answered", "interactive")),
    "pate": (("votes", "gamma", "delta"), ("sensitivity", "queries", "fedkt_level", "granularity", "partitions",
                                          "teachers", "z", "data_independent", "orders", "conversion")),
    "gnmax": (("votes", "sigma", "delta"), ("queries", "threshold", "sigma1", "data_independent", "orders", "answered",
                                           "interactive", "release_epsilon", "seed", "release_order", "release_beta",
                                           "release_sigma_ss")),
}
_RELEASE_ONLY = ("seed", "release_order", "release_beta", "release_sigma_ss")


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
    if mechanism in ("dpsgd", "tuning") and (given.get("epochs") is None) == (given.get("steps") is None):
        raise click.UsageError(f"exactly one of --epochs or --steps is required for --mechanism {mechanism}.")
    if mechanism == "gnmax" and not given.get("release_epsilon"):
        extra = [_FLAG[n] for n in _RELEASE_ONLY if given.get(n) is not None]
        if extra:
            raise click.UsageError(f"{', '.join(extra)} {'is' if len(extra) == 1 else 'are'} used only with --release-epsilon.")
    if mechanism == "gnmax" and given.get("release_epsilon") and (given.get("data_independent") or given.get("interactive")):
        raise click.UsageError("--release-epsilon releases the data-dependent figure: it cannot be combined with "
                               "--data-independent or --interactive.")


def _call(mechanism: str, o: dict[str, Any]):
    """The options as one call of :func:`dpaudit.account` (the mechanism table's functions,
    :data:`dpaudit.accountants.mechanisms.ACCOUNTING_FUNCTIONS`).

    ``laplace-mechanism`` and ``gaussian-mechanism`` are the plain mechanisms (``queries`` answers to queries of
    sensitivity ``sensitivity``: the table's ``laplace`` and ``gaussian``); ``laplace-noisy-max`` and
    ``gaussian-noisy-max`` are PATE's noisy max and GNMax without votes (data-independent): ``pate`` and ``gnmax`` with
    ``data_independent=True`` (the old CLI names ``laplace`` and ``gaussian``, :data:`ALIASES`)."""
    from dpaudit.accountants.rdp import parse_orders   # here, not at the top: ``--help`` loads no accountant
    from dpaudit.api import account

    if mechanism == "ldp":
        return account("ldp", epsilon=o["epsilon"], samples=o["samples"], classes=o["classes"], rounds=o["rounds"],
                       participation=o["participation"], users=o["users"], delta=o["delta"])
    if mechanism in ("dpsgd", "tuning"):
        run = dict(dataset_size=o["dataset_size"], batch_size=o["batch_size"], noise_multiplier=o["noise_multiplier"],
                   epochs=o["epochs"], steps=o["steps"], delta=o["delta"], sampling=o["sampling"] or "poisson",
                   neighbouring=o["neighbouring"], drop_last=bool(o["drop_last"]))
        if mechanism == "dpsgd":
            return account("dpsgd", **run, accountant=o["accountant"] or "best", opacus_loader=bool(o["opacus_loader"]))
        return account("tuning", runs_distribution=o["runs_distribution"], mean_runs=o["mean_runs"], eta=o["eta"], **run)
    if mechanism in ("laplace-mechanism", "gaussian-mechanism"):
        plain = {k: v for k, v in (("sensitivity", o["sensitivity"]), ("count", o["queries"])) if v is not None}
        if mechanism == "laplace-mechanism":
            return account("laplace", scale=o["scale"], delta=0.0 if o["delta"] is None else o["delta"], **plain)
        return account("gaussian", sigma=o["sigma"], delta=o["delta"], **plain)
    orders = parse_orders(o["orders"]) if o["orders"] is not None else None
    if mechanism in ("laplace-noisy-max", "pate"):
        extra = {} if o["sensitivity"] is None else {"sensitivity": o["sensitivity"]}
        if mechanism == "laplace-noisy-max":
            return account("pate", votes=None, gamma=o["gamma"], delta=o["delta"], queries=o["queries"],
                           data_independent=True, orders=orders, conversion=o["conversion"] or "best", **extra)
        return account("pate", votes=o["votes"], gamma=o["gamma"], delta=o["delta"], queries=o["queries"],
                       data_independent=o["data_independent"], fedkt_level=o["fedkt_level"],
                       granularity=o["granularity"], partitions=o["partitions"], teachers=o["teachers"], z=o["z"],
                       orders=orders, conversion=o["conversion"] or "best", **extra)
    if mechanism == "gaussian-noisy-max":
        answered = o["answered"]
        if answered is not None:   # only the count of answered queries matters without votes
            from dpaudit.accountants.gnmax import load_answered

            answered = int(load_answered(answered, o["queries"]).sum())
        return account("gnmax", votes=None, sigma=o["sigma"], delta=o["delta"], queries=o["queries"],
                       threshold=o["threshold"], sigma1=o["sigma1"], data_independent=True, orders=orders,
                       answered=answered, interactive=o["interactive"])
    if o["release_epsilon"]:
        return account("gnmax", votes=o["votes"], release_epsilon=True, sigma=o["sigma"], delta=o["delta"],
                       seed=o["seed"], threshold=o["threshold"], sigma1=o["sigma1"], answered=o["answered"],
                       order=o["release_order"], beta=o["release_beta"], sigma_ss=o["release_sigma_ss"])
    return account("gnmax", votes=o["votes"], sigma=o["sigma"], delta=o["delta"], queries=o["queries"],
                   threshold=o["threshold"], sigma1=o["sigma1"], data_independent=o["data_independent"], orders=orders,
                   answered=o["answered"], interactive=o["interactive"])


@click.command("account")
@click.option("--mechanism", type=click.Choice(MECHANISMS), default=None,
              help="What to account (or --flower-run): laplace-mechanism / gaussian-mechanism (plain Laplace or Gaussian "
                   "answers to queries), laplace-noisy-max / gaussian-noisy-max (PATE's noisy max and GNMax without "
                   "votes), pate, gnmax, ldp, dpsgd, tuning. 'laplace' and 'gaussian' are old names of "
                   "laplace-noisy-max and gaussian-noisy-max (they warn).")
@click.option("--flower-run", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Instead of --mechanism: a recorded Flower run directory, accounted per client (with --delta, "
                   "default 1e-5, and --neighbouring substitution (replace-one, default) or add-remove).")
@click.option("--epsilon", type=float, help="[ldp] LDP budget of one report of K labels.")
@click.option("--samples", type=int, help="[ldp] K, labels per report.")
@click.option("--classes", type=int, help="[ldp] C, number of classes.")
@click.option("--rounds", type=int, help="[ldp] number of rounds.")
@click.option("--participation", type=float, help="[ldp] fraction of clients per round.")
@click.option("--users", type=int, help="[ldp] total clients (users*participation reports are shuffled per round).")
@click.option("--delta", type=float, help="target delta.")
@click.option("--dataset-size", type=int, help="[dpsgd, tuning] examples in the training set.")
@click.option("--batch-size", type=int, help="[dpsgd, tuning] (expected) batch size (q = batch/dataset).")
@click.option("--noise-multiplier", type=float, help="[dpsgd, tuning] sigma.")
@click.option("--epochs", type=float, help="[dpsgd, tuning] epochs (steps = ceil(epochs*dataset/batch); shuffle, --opacus-loader: epochs * batches per epoch).")
@click.option("--steps", type=int, help="[dpsgd, tuning] steps.")
@click.option("--accountant", type=click.Choice(("best", "rdp", "pld", "prv")), help="[dpsgd] headline route: best (default: the smallest valid upper bound of rdp, pld and prv), or force one route (the output names it).")
@click.option("--sampling", type=click.Choice(("poisson", "shuffle", "fixed-wor")), help="[dpsgd, tuning] batch sampler: poisson (default), shuffle (a random permutation per epoch cut into batches: PyTorch's DataLoader(shuffle=True)), fixed-wor (B examples without replacement at every step).")
@click.option("--neighbouring", type=click.Choice(("add-remove", "zero-out", "substitution", "replace-one")), help="[dpsgd, tuning] neighbouring relation: add-remove (default; poisson, fixed-wor), zero-out (default for shuffle), substitution (= replace-one).")
@click.option("--opacus-loader", is_flag=True, help="[dpsgd] count as Opacus's DPDataLoader does (PrivacyEngine.make_private, poisson_sampling=True): T = ceil(dataset/batch) = len(data_loader) batches per epoch, q = 1/T, steps = ceil(epochs*T). Without it q = batch/dataset; the two agree when the batch size divides the dataset size.")
@click.option("--drop-last", is_flag=True, help="[dpsgd, tuning] shuffle: the loader drops the last incomplete batch of each epoch.")
@click.option("--runs-distribution", type=click.Choice(("poisson", "geometric", "logarithmic", "truncated-negative-binomial")), help="[tuning] distribution of the number of training runs K (random stopping, Papernot & Steinke 2022).")
@click.option("--mean-runs", type=float, help="[tuning] expected number of runs E[K].")
@click.option("--eta", type=float, help="[tuning] eta of the truncated negative binomial (> -1; geometric is 1, logarithmic 0).")
@click.option("--gamma", type=float, help="[laplace-noisy-max, pate] inverse Laplace scale on vote counts.")
@click.option("--queries", type=int, help="[laplace-mechanism, gaussian-mechanism (default 1), laplace-noisy-max, "
                                          "gaussian-noisy-max, pate, gnmax] number of queries.")
@click.option("--scale", type=float, help="[laplace-mechanism] Laplace noise scale b.")
@click.option("--sensitivity", type=float, help="[laplace-mechanism, gaussian-mechanism] sensitivity of each query "
                                                "(L1 / L2, default 1); [laplace-noisy-max, pate] L1 sensitivity of the "
                                                "vote histogram (default 2).")
@click.option("--votes", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="[pate, gnmax] vote histograms (.npy).")
@click.option("--fedkt-level", type=click.Choice(("L1", "L2")), help="[pate] FedKT privacy level.")
@click.option("--granularity", type=click.Choice(("party", "example")), help="[pate] FedKT granularity.")
@click.option("--partitions", type=int, help="[pate] FedKT s.")
@click.option("--teachers", type=int, help="[pate] FedKT t.")
@click.option("--z", type=int, help="[pate] FedKT z (example-level).")
@click.option("--data-independent", is_flag=True, help="[pate, gnmax] use the data-independent bound only.")
@click.option("--orders", type=str, help="[laplace-noisy-max, gaussian-noisy-max, pate, gnmax] orders, e.g. '1-8' or '2,4,8,16'.")
@click.option("--conversion", type=click.Choice(("best", "moments", "rdp")), help="[laplace-noisy-max, pate] best (default: the smallest of moments, rdp and pure-DP composition), or force moments (PATE 2017) or rdp.")
@click.option("--sigma", type=float, help="[gaussian-mechanism] Gaussian noise std; [gaussian-noisy-max, gnmax] GNMax noise std.")
@click.option("--threshold", type=float, help="[gaussian-noisy-max, gnmax] Confident-GNMax threshold T.")
@click.option("--sigma1", type=float, help="[gaussian-noisy-max, gnmax] Confident-GNMax threshold noise std.")
@click.option("--answered", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="[gaussian-noisy-max, gnmax] which queries Confident-GNMax answered: a bool mask (.npy, or true/false text) or "
                   "0-based indices (integer .npy or text). Every query pays the check; only these pay GNMax.")
@click.option("--interactive", is_flag=True, help="[gaussian-noisy-max, gnmax] Interactive GNMax (PATE 2018 Alg. 2): data-independent "
                                                 "figures only (its data-dependent analysis is refused).")
@click.option("--release-epsilon", is_flag=True, help="[gnmax] release the data-dependent epsilon privately (PATE 2018 "
                                                     "smooth-sensitivity release; searches beta and the noise scale).")
@click.option("--seed", type=int, help="[gnmax --release-epsilon] seed of the release noise (default: a fresh random "
                                       "seed, printed; keep it private).")
@click.option("--release-order", type=float, help="[gnmax --release-epsilon] fix the Rényi order of the release.")
@click.option("--release-beta", type=float, help="[gnmax --release-epsilon] fix the smooth sensitivity's beta.")
@click.option("--release-sigma-ss", type=float, help="[gnmax --release-epsilon] fix the release's noise multiplier.")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON.")
def command(mechanism: str | None, flower_run: Path | None, as_json: bool, **options: Any) -> None:
    """Theoretical epsilon of a mechanism, with every figure's assumptions."""
    if (mechanism is None) == (flower_run is None):
        raise click.UsageError("give exactly one of --mechanism or --flower-run.")
    if flower_run is not None:
        from dpaudit.auditing.flower_run import account_flower_run
        from dpaudit.cli.flower import render_flower_accounting

        extra = [_FLAG[k] for k, v in options.items() if v not in (None, False) and k not in ("delta", "neighbouring")]
        if extra:
            raise click.UsageError(f"{', '.join(extra)} {'is' if len(extra) == 1 else 'are'} not used with --flower-run.")
        nb = {None: "replace-one", "substitution": "replace-one", "replace-one": "replace-one",
              "add-remove": "add-remove"}.get(options.get("neighbouring"))
        if nb is None:
            raise click.UsageError("--neighbouring must be substitution (replace-one, the default) or add-remove with "
                                   f"--flower-run. Got {options.get('neighbouring')!r} instead.")
        delta = 1e-5 if options.get("delta") is None else options["delta"]
        render_flower_accounting(account_flower_run(flower_run, delta=delta, neighbouring=nb), as_json)
        return
    alias = mechanism if mechanism in ALIASES else None
    mechanism = ALIASES.get(mechanism, mechanism)
    _check_options(mechanism, options)
    result = _call(mechanism, options)
    if alias is not None:   # after the work: an error stays one line
        from dpaudit.cli.render import warn

        plain = "laplace-mechanism" if alias == "laplace" else "gaussian-mechanism"
        warn(f"--mechanism {alias} is an old name of --mechanism {mechanism} (PATE's "
             f"{'Laplace noisy max' if alias == 'laplace' else 'GNMax'} without votes); it will be removed. The "
             f"plain {alias.capitalize()} mechanism is --mechanism {plain}.")
    if as_json:
        click.echo(result_json(result))
    else:
        render_result(result)

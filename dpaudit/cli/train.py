"""``dpaudit train METHOD``: run a method and write an auditable release bundle.

One command per method, generated from the method registry (:data:`dpaudit.training.methods.METHODS`), with
the same flags everywhere; a method's shorthand flags (``--gamma``, ``--rounds``, ...) are ``--set`` in
disguise. Each command is one call of :func:`dpaudit.training.methods.run_method` plus printing (with
``--engine flower``: :func:`dpaudit.training.flower.run_method`, the same run with its parties as Flower apps).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import click

from dpaudit._format import printable
from dpaudit.cli.render import render_run
from dpaudit.training.methods import METHODS, MethodEntry, Shorthand

_TYPES: dict[str, Any] = {"int": int, "float": float, "str": str}


def _option(sh: Shorthand) -> Any:
    dest = "sh_" + sh.flag.lstrip("-").replace("-", "_")
    if sh.value is not None:
        return click.option(sh.flag, dest, is_flag=True, default=False, help=f"{sh.help} (= --set {sh.key}={str(sh.value).lower()})")
    kind = click.Choice(sh.type.split(":", 1)[1].split(",")) if sh.type.startswith("choice:") else _TYPES[sh.type]
    return click.option(sh.flag, dest, type=kind, default=None, help=f"{sh.help} (= --set {sh.key}=...)")


def _command(name: str, entry: MethodEntry) -> click.Command:
    def callback(config_path: Path | None, sets: tuple[str, ...], seed: int, out: Path | None, quiet: bool,
                 device: str | None, data_dir: Path | None, dataset: str | None, overwrite: bool, engine: str,
                 **shorthands: Any) -> None:
        if engine == "inprocess":
            from dpaudit.training.methods import run_method
        else:  # the same run, its parties as Flower ClientApps
            import functools

            from dpaudit.training.flower import run_method as flower_run

            run_method = functools.partial(flower_run, engine="simulation" if engine == "flower" else "deployment")

        params: dict[str, Any] = {}
        for sh in entry.shorthands:
            value = shorthands.get("sh_" + sh.flag.lstrip("-").replace("-", "_"))
            if sh.value is not None and value:
                params[sh.key] = sh.value
            elif sh.value is None and value is not None:
                params[sh.key] = value
        with warnings.catch_warnings():  # deprecations: one line each on stderr, when they happen
            warnings.simplefilter("always", FutureWarning)
            warnings.showwarning = lambda message, *_, **__: click.echo(f"dpaudit: warning: {printable(message)}", err=True)
            result = run_method(name, out=out or Path("runs") / name, dataset=dataset, seed=seed,
                                config_file=config_path, sets=sets, params=params, data_dir=data_dir, device=device,
                                overwrite=overwrite, progress=not quiet)
        if result is None:
            click.echo(f"{name}: stopped early ([run] stop_after); run the same command again to resume.")
        else:
            render_run(result)

    params: list[click.Parameter] = [
        click.Option(["--config", "config_path"], type=click.Path(dir_okay=False, path_type=Path), default=None,
                     help="TOML file with [data], [model], [method], [run] (and, to plant canaries, [canaries]) tables (see configs/)."),
        click.Option(["--set", "sets"], multiple=True, metavar="TABLE.KEY=VALUE",
                     help="Override one setting, e.g. --set method.gamma=0.1 (repeatable; wins over --config)."),
        click.Option(["--seed"], type=int, default=0, show_default=True, help="Seed of everything random in the run."),
        click.Option(["--out"], type=click.Path(file_okay=False, path_type=Path), default=None,
                     help=f"Release directory to write (default runs/{name})."),
        click.Option(["--quiet"], is_flag=True, help="No progress output (progress goes to stderr)."),
        click.Option(["--device"], default=None, help="torch device: cpu, cuda, cuda:N (default: cuda when available)."),
        click.Option(["--data-dir"], type=click.Path(file_okay=False, path_type=Path), default=None,
                     help="Directory holding real data files (MNIST IDX, CIFAR-10 batches, SVHN .mat, Adult CSV)."),
        click.Option(["--dataset"], default=None, help="Data set name (= --set data.name=...; default digits)."),
        click.Option(["--overwrite"], is_flag=True, help="Replace an existing release directory at --out."),
        click.Option(["--engine"], type=click.Choice(["inprocess", "flower", "flower-deployment"]), default="inprocess",
                     show_default=True,
                     help="Where the parties run: in this process, as Flower ClientApps on Flower's simulation engine "
                          "(flower), or on a local Flower deployment of SuperLink and SuperNode processes "
                          "(flower-deployment); privatekt, fedkt, fredy, proxyfl and their variants; needs "
                          "dpaudit[flower]."),
    ]
    cmd = click.Command(name, callback=callback, params=params, help=entry.help)
    for sh in entry.shorthands:
        _option(sh)(cmd)
    return cmd


@click.group("train")
def command() -> None:
    """Run a method and write an auditable release bundle (same flags for every method)."""


for _name, _entry in METHODS.items():
    command.add_command(_command(_name, _entry))

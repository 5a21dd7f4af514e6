"""``dpaudit train METHOD``: one subcommand per method, each defined in ``dpaudit.cli.train_<module>``.

Each such module defines ``commands``: a list of click commands (decorated with :func:`train_options`)
that call one library function under ``dpaudit.training.methods`` and print its result.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Callable

import click

_METHOD_MODULES = ("train_pate", "train_fredy", "train_fedkt", "train_privatekt", "train_proxyfl", "train_baselines")


def train_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The options every ``dpaudit train`` subcommand takes."""
    fn = click.option("--overwrite", is_flag=True, help="Replace an existing release directory at --out.")(fn)
    fn = click.option("--device", default=None, help="torch device (default: cuda when available, else cpu).")(fn)
    fn = click.option("--seed", type=int, default=0, show_default=True, help="Seed of everything random in the run.")(fn)
    fn = click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
                      help="TOML file of method parameters (see configs/); command-line options win.")(fn)
    fn = click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
                      help="Directory holding real data files (MNIST IDX, CIFAR-10 batches, SVHN .mat, Adult CSV).")(fn)
    fn = click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
                      help="Release directory to write (e.g. runs/NAME).")(fn)
    fn = click.option("--dataset", default="digits", show_default=True, help="Data set name.")(fn)
    return fn


@click.group("train")
def command() -> None:
    """Run a method and write an auditable release bundle."""


for _name in _METHOD_MODULES:
    try:
        _mod = importlib.import_module(f"dpaudit.cli.{_name}")
    except ModuleNotFoundError as exc:  # pragma: no cover - only while a method is not yet written
        if exc.name != f"dpaudit.cli.{_name}":
            raise
        continue
    for _cmd in getattr(_mod, "commands", ()):
        command.add_command(_cmd)

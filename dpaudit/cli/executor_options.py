"""``--executor local|ray`` and ``--ray-address ADDR``, shared by ``dpaudit audit`` and ``dpaudit attack``."""

from __future__ import annotations

from typing import Any, Callable

import click

from dpaudit.executors import EXECUTORS


def executor_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Add the two options (parameters ``executor`` and ``ray_address``) to a click command."""
    fn = click.option("--ray-address", "ray_address", default=None, metavar="ADDR",
                      help="Join this Ray cluster (HOST:PORT, ray://HOST:PORT or auto) instead of starting a local "
                           "instance; the output folder must be on storage every node sees.")(fn)
    return click.option("--executor", type=click.Choice(EXECUTORS), default="local", show_default=True,
                        help="Where independent units (models, attacks, groups of shadow models) run: this process, "
                             "or Ray (pip install 'dpaudit[ray]'; a local instance sized to this machine). "
                             "Same numbers either way.")(fn)

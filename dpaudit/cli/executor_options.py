"""``--executor auto|local|processes|ray``, ``--workers N`` and ``--ray-address ADDR``, shared by ``dpaudit audit``
and ``dpaudit attack``. ``auto`` (the default): ``processes`` when this process may use more than one core or
``--workers`` is given, else ``local`` (:func:`dpaudit.executors.make_executor`)."""

from __future__ import annotations

from typing import Any, Callable

import click

from dpaudit.executors import AUTO_EXECUTOR, EXECUTORS


def _workers(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """``--workers``: a positive count (a dpaudit error naming the option otherwise: exit 2)."""
    if value is None:
        return None
    from dpaudit.errors import ParameterError
    from dpaudit.threads import MAX_THREADS

    try:
        n = int(value.strip())
    except ValueError:
        n = -1
    if not 1 <= n <= MAX_THREADS:
        raise ParameterError(f"The option --workers must be a positive integer in [1, {MAX_THREADS}] (worker "
                             f"processes of --executor processes). Got {value!r} instead.")
    return n


def executor_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Add the options (parameters ``executor``, ``workers`` and ``ray_address``) to a click command; ``executor``
    may be ``auto``."""
    fn = click.option("--workers", "workers", default=None, metavar="N", callback=_workers,
                      help="Worker processes of --executor processes (default: the cores this process may use).")(fn)
    fn = click.option("--ray-address", "ray_address", default=None, metavar="ADDR",
                      help="Join this Ray cluster (HOST:PORT, ray://HOST:PORT or auto) instead of starting a local "
                           "instance; the output folder must be on storage every node sees.")(fn)
    return click.option("--executor", type=click.Choice((AUTO_EXECUTOR, *EXECUTORS)), default=AUTO_EXECUTOR,
                        show_default=True,
                        help="Where independent units (models, attacks, certified audits, groups of shadow models) "
                             "run: auto (processes when more than one core is usable, else local), this process "
                             "(local), worker processes of one intra-op thread each (processes), or Ray (pip install "
                             "'dpaudit[ray]'; a local instance sized to this machine). Same numbers either way.")(fn)

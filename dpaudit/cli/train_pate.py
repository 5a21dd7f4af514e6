"""``dpaudit train pate``: PATE (Papernot et al. 2017) -> release bundle."""

from __future__ import annotations

import click

from dpaudit.cli.train import train_options


@click.command("pate")
@train_options
@click.option("--teachers", type=int, default=None, help="Number of teachers (disjoint subsets of the private data).")
@click.option("--gamma", type=float, default=None, help="Inverse Laplace noise scale on vote counts (noise Lap(1/gamma)).")
@click.option("--queries", type=int, default=None, help="Number of public queries answered.")
@click.option("--quiet", is_flag=True, help="No progress output.")
def command(dataset, out, data_dir, config_path, seed, device, overwrite, teachers, gamma, queries, quiet):
    """PATE: teachers on disjoint data, Laplace noisy max on public queries, a released student."""
    from dpaudit.training.methods.common import load_config
    from dpaudit.training.methods.pate import PATEConfig, run_pate

    result = run_pate(load_config(PATEConfig, config_path, teachers=teachers, gamma=gamma, queries=queries),
                      dataset=dataset, out=out, seed=seed, data_dir=data_dir, device=device, overwrite=overwrite,
                      progress=not quiet)
    click.echo(result.summary())


commands = [command]

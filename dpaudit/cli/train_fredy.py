"""``dpaudit train fredy``: FREDY (Future Internet 2023) -> release bundle (+ the non-private baseline's)."""

from __future__ import annotations

import click

from dpaudit.cli.train import train_options


@click.command("fredy")
@train_options
@click.option("--teachers", type=int, default=None, help="Number of teachers (FedAvg clients) T.")
@click.option("--rounds", type=int, default=None, help="Federated rounds n (the last one is local only).")
@click.option("--gamma", type=float, default=None, help="The paper's per-query 'epsilon': Laplace noise Lap(1/gamma) on vote counts.")
@click.option("--queries", type=int, default=None, help="Number of public queries answered.")
@click.option("--quiet", is_flag=True, help="No progress output.")
def command(dataset, out, data_dir, config_path, seed, device, overwrite, teachers, rounds, gamma, queries, quiet):
    """FREDY: FedAvg-trained teachers, Laplace noisy labels, a released student and a non-private baseline."""
    from dpaudit.training.methods.common import load_config
    from dpaudit.training.methods.fredy import FREDYConfig, run_fredy

    cfg = load_config(FREDYConfig, config_path, teachers=teachers, rounds=rounds, gamma=gamma, queries=queries)
    result = run_fredy(cfg, dataset=dataset, out=out, seed=seed, data_dir=data_dir, device=device, overwrite=overwrite,
                       progress=not quiet)
    click.echo(result.summary())


commands = [command]

"""``dpaudit train fedkt``: FedKT (Li, He, Song 2021) at privacy level L0/L1/L2 -> release bundle."""

from __future__ import annotations

import click

from dpaudit.cli.train import train_options


@click.command("fedkt")
@train_options
@click.option("--level", type=click.Choice(["L0", "L1", "L2"]), default=None, help="Privacy level (L0 none, L1 server noise, L2 party noise).")
@click.option("--gamma", type=float, default=None, help="Inverse Laplace noise scale (noise Lap(1/gamma)) at the level's place.")
@click.option("--parties", type=int, default=None, help="Number of parties n.")
@click.option("--partitions", type=int, default=None, help="Partitions per party s.")
@click.option("--teachers", type=int, default=None, help="Teachers per partition t.")
@click.option("--quiet", is_flag=True, help="No progress output.")
def command(dataset, out, data_dir, config_path, seed, device, overwrite, level, gamma, parties, partitions, teachers, quiet):
    """FedKT: two-tier knowledge transfer with consistent voting; SOLO and PATE baselines in the same run."""
    from dpaudit.training.methods.common import load_config
    from dpaudit.training.methods.fedkt import FedKTConfig, run_fedkt

    cfg = load_config(FedKTConfig, config_path, level=level, gamma=gamma, parties=parties, partitions=partitions, teachers=teachers)
    result = run_fedkt(cfg, dataset=dataset, out=out, seed=seed, data_dir=data_dir, device=device, overwrite=overwrite,
                       progress=not quiet)
    click.echo(result.summary())


commands = [command]

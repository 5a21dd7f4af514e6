"""``dpaudit train fedavg-ldp|fedsgd-ldp|fedmd-ldp|centrain``: PrivateKT's baselines (Qi et al. 2023, Fig. 2)."""

from __future__ import annotations

import click

from dpaudit.cli.train import train_options


def _ldp(mode: str) -> click.Command:
    @click.command(f"{mode}-ldp", help=f"{mode.replace('fed', 'Fed').replace('avg', 'Avg').replace('sgd', 'SGD')} "
                   "with Laplace LDP (scale 2C/eps) on L1-clipped updates.")
    @train_options
    @click.option("--rounds", type=int, default=None, help="Override [method] rounds.")
    @click.option("--epsilon", type=float, default=None, help="Override [method] epsilon (per-round LDP budget).")
    def cmd(dataset, out, data_dir, config_path, seed, device, overwrite, rounds, epsilon):
        from dpaudit.training.methods.baselines import train_ldp_updates
        from dpaudit.training.methods.privatekt import ablation_overrides

        summary = train_ldp_updates(dataset, out, mode=mode, config_path=config_path, seed=seed, data_dir=data_dir,
                                    device=device, overwrite=overwrite,
                                    overrides=ablation_overrides(rounds=rounds, epsilon=epsilon))
        click.echo("\n".join(summary.lines()))

    return cmd


@click.command("fedmd-ldp")
@train_options
@click.option("--rounds", type=int, default=None, help="Override [method] rounds.")
@click.option("--epsilon", type=float, default=None, help="Override [method] epsilon (per-round LDP budget).")
def fedmd_ldp(dataset, out, data_dir, config_path, seed, device, overwrite, rounds, epsilon):
    """FedMD + LDP: randomized response on predictions over the whole public set."""
    from dpaudit.training.methods.privatekt import ablation_overrides, train_privatekt

    summary = train_privatekt(dataset, out, config_path=config_path, seed=seed, data_dir=data_dir, device=device,
                              overwrite=overwrite, fedmd=True, overrides=ablation_overrides(rounds=rounds, epsilon=epsilon))
    click.echo("\n".join(summary.lines()))


@click.command("centrain")
@train_options
def centrain(dataset, out, data_dir, config_path, seed, device, overwrite):
    """CenTrain: centralised training on the pooled records (no privacy; the reference)."""
    from dpaudit.training.methods.baselines import train_centrain

    summary = train_centrain(dataset, out, config_path=config_path, seed=seed, data_dir=data_dir, device=device,
                             overwrite=overwrite)
    click.echo("\n".join(summary.lines()))


commands = [_ldp("fedavg"), _ldp("fedsgd"), fedmd_ldp, centrain]

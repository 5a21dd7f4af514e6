"""``dpaudit train privatekt``: PrivateKT (Qi et al. 2023) and its release bundle."""

from __future__ import annotations

import click

from dpaudit.cli.train import train_options


@click.command("privatekt")
@train_options
@click.option("--rounds", type=int, default=None, help="Override [method] rounds.")
@click.option("--epsilon", type=float, default=None, help="Override [method] epsilon (per-round LDP budget).")
@click.option("--no-buffer", is_flag=True, help="Ablation: knowledge buffer of one round.")
@click.option("--uniform-sampling", is_flag=True, help="Ablation: uniform instead of entropy importance sampling.")
@click.option("--no-self-training", is_flag=True, help="Ablation: no self-training.")
def privatekt(dataset, out, data_dir, config_path, seed, device, overwrite, rounds, epsilon, no_buffer,
              uniform_sampling, no_self_training):
    """PrivateKT: randomized-response labels on K actively sampled public samples per round."""
    from dpaudit.training.methods.privatekt import ablation_overrides, train_privatekt

    summary = train_privatekt(dataset, out, config_path=config_path, seed=seed, data_dir=data_dir, device=device,
                              overwrite=overwrite, overrides=ablation_overrides(rounds=rounds, epsilon=epsilon,
                              no_buffer=no_buffer, uniform_sampling=uniform_sampling, no_self_training=no_self_training))
    click.echo("\n".join(summary.lines()))


commands = [privatekt]

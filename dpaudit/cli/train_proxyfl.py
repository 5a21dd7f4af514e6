"""``dpaudit train proxyfl`` and its baselines (Kalra et al. 2023): fml, fedavg-dpsgd, avgpush, cwt, regular, joint."""

from __future__ import annotations

import click

from dpaudit.cli.train import train_options


def _make(variant: str, name: str, help_text: str) -> click.Command:
    @click.command(name, help=help_text)
    @train_options
    @click.option("--rounds", type=int, default=None, help="Override [method] rounds.")
    @click.option("--budget", type=float, default=None, help="Epsilon at which a client drops out.")
    @click.option("--release-client", type=int, default=0, show_default=True, help="Whose shared model is released.")
    def cmd(dataset, out, data_dir, config_path, seed, device, overwrite, rounds, budget, release_client):
        from dpaudit.training.methods.proxyfl import method_overrides, train_proxyfl

        summary = train_proxyfl(dataset, out, variant=variant, config_path=config_path, seed=seed, data_dir=data_dir,
                                device=device, overwrite=overwrite, release_client=release_client,
                                overrides=method_overrides(rounds=rounds, budget=budget))
        click.echo("\n".join(summary.lines()))

    return cmd


commands = [
    _make("proxyfl", "proxyfl", "ProxyFL: private + DP proxy per client, PushSum over the exponential graph."),
    _make("fml", "fml", "FML: private + DP proxy per client, proxies averaged by a server."),
    _make("fedavg", "fedavg-dpsgd", "FedAvg with DP-SGD local training (ProxyFL's baseline)."),
    _make("avgpush", "avgpush", "AvgPush: DP-SGD models averaged with PushSum."),
    _make("cwt", "cwt", "CWT: cyclical weight transfer of DP-SGD models."),
    _make("regular", "regular", "Regular: each client trains alone with DP-SGD."),
    _make("joint", "joint", "Joint: one DP-SGD model on the pooled records."),
]

"""PrivateKT's baselines under the same per-round epsilon-LDP (Qi et al. 2023, Fig. 2), as engine step functions.

- **FedAvg + LDP** and **FedSGD + LDP**: each sampled client releases its model update (FedAvg: local
  training from the global model, update = local - global; FedSGD: the full-batch gradient of the global
  model on its data) clipped to L1 norm C, plus i.i.d. Laplace noise of scale 2C/eps on every coordinate
  (:func:`~dpaudit.training.methods.fl_common.laplace_scale_for_ldp` derives the calibration). The server
  averages the noisy updates (FedSGD: steps ``-server_lr`` times the mean gradient). Each release is a pure
  eps-LDP report; the ledger records it as :class:`~dpaudit.accountants.pure.PureDp` (no existing event
  describes additive Laplace noise on a vector; ``LaplaceNoisyMax`` would be wrong).
- **FedMD + LDP**: prediction sharing over the *whole* public pool with randomized response, the epsilon split
  over every shared label (K = |public pool|): :func:`fedmd_config` builds the PrivateKT configuration that
  is exactly this protocol (uniform, no buffer, no self-training).
- **CenTrain** (the non-private reference) lives in :mod:`.centrain`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar, Any, Mapping

import numpy as np

from dpaudit.accountants.pure import PureDp
from dpaudit.errors import check_choice, check_float, check_int
from dpaudit.training.engine import party_rng, party_seed
from dpaudit.training.methods.fl_common import (
    GlobalModelResult,
    GlobalModelSteps,
    RoundSettings,
    DataSettings,
    FederatedData,
    flatten_state,
    full_batch_gradient,
    init_model_state,
    laplace_ldp,
    laplace_scale_for_ldp,
    make_classifier,
    model_spec_from,
    run_global_model,
    unflatten_state,
)
from dpaudit.training.methods.scaffold import (MethodConfig, Outcome, Release, RunContext, RunResult, build_dataclass,
                                               execute)

__all__ = ["Config", "LdpUpdateConfig", "LdpUpdateMethod", "LdpUpdateResult", "run", "run_ldp_updates", "fedmd_config",
           "laplace_mechanism_text", "ldp_update_statement"]


def laplace_mechanism_text(bound: float, epsilon: float) -> str:
    return (f"Laplace noise of scale 2C/eps = {laplace_scale_for_ldp(bound, epsilon):.4g} on every coordinate of an update "
            f"clipped to L1 norm C = {bound:g}: any two clipped updates differ by at most 2C in L1 norm, so each "
            f"release is {epsilon:g}-LDP (Laplace mechanism, Dwork & Roth 2014, Thm 3.6).")


@dataclass(frozen=True)
class LdpUpdateConfig(RoundSettings):
    """FedAvg/FedSGD with Laplace LDP on L1-clipped updates.

    ``mode``: "fedavg" (local epochs, update = local - global) or "fedsgd" (one full-batch gradient).
    ``epsilon``: per-round LDP budget of one client's release. ``clip``: L1 bound C of the update.
    ``server_lr``: FedAvg multiplies the mean update by it (1 = plain averaging); FedSGD steps by it.
    """

    label: ClassVar[str] = "FedAvg/FedSGD-LDP"

    mode: str = "fedavg"
    clip: float = 1.0

    def __post_init__(self) -> None:
        o = "LdpUpdateConfig"
        check_choice(self.mode, "mode", o, ("fedavg", "fedsgd"))
        self.check_rounds(o, min_local_epochs=1)
        check_float(self.clip, "clip", o, low=0.0, low_open=True)



class LdpUpdateMethod(GlobalModelSteps):
    """FedAvg/FedSGD + Laplace LDP as engine step functions."""

    def __init__(self, config: LdpUpdateConfig, data: FederatedData, spec: Any, *, device: str | None = None) -> None:
        self.config, self.data, self.spec, self.device = config, data, spec, device
        self.event = PureDp(config.epsilon, laplace_mechanism_text(config.clip, config.epsilon))

    def init_server(self, seed: int) -> tuple[dict, dict]:
        from dpaudit.accountants.ledger import PrivacyLedger

        params = init_model_state(self.spec, party_seed(seed, 0, -1, stream=9))
        st = {"round": 0, "seed": int(seed), "params": params, "ledger": PrivacyLedger(delta=self.config.delta),
              "history": [], "reports": np.zeros(self.data.num_clients, dtype=np.int64)}
        return st, {"round": 0, "seed": int(seed), "params": params}

    def client_steps(self, states: list, datas: list, messages: list) -> tuple[list, list]:
        cfg, msg = self.config, messages[0]
        ids = [int(d[0]) for d in datas]
        g0 = flatten_state(msg["params"])
        if cfg.mode == "fedavg":
            from dpaudit.training.ensemble import TrainConfig, train_ensemble

            ens = train_ensemble(self.spec, [(d[1], d[2]) for d in datas],
                                 TrainConfig(epochs=cfg.local_epochs, batch_size=cfg.local_batch_size, lr=cfg.local_lr),
                                 seed=party_seed(msg["seed"], msg["round"], min(ids), stream=2), device=self.device,
                                 progress=False, init_state=msg["params"])
            updates = np.stack([flatten_state(ens.state_dict(i)) - g0 for i in range(len(ids))])
        else:
            updates = np.stack([full_batch_gradient(self.spec, msg["params"], d[1], d[2]) for d in datas])
        replies = []
        for i, cid in enumerate(ids):
            noisy = laplace_ldp(updates[i : i + 1], cfg.clip, cfg.epsilon, party_rng(msg["seed"], msg["round"], cid, stream=3))[0]
            replies.append({"update": noisy, "event": self.event})
        return list(states), replies

    def server_step(self, state: dict, replies: Mapping[int, dict]) -> tuple[dict, dict]:
        cfg = self.config
        ledger, reports = state["ledger"], state["reports"].copy()
        for cid in sorted(replies):
            ledger.record(f"client{cid}", replies[cid]["event"])
            reports[cid] += 1
        mean = np.mean([replies[c]["update"] for c in sorted(replies)], axis=0)
        sign = 1.0 if cfg.mode == "fedavg" else -1.0
        params = unflatten_state(flatten_state(state["params"]) + sign * cfg.server_lr * mean, state["params"])
        t = state["round"]
        history = self.history_after(state, params)
        new = {**state, "round": t + 1, "params": params, "ledger": ledger, "history": history, "reports": reports}
        return new, {"round": t + 1, "seed": state["seed"], "params": params}



#: What :func:`run_ldp_updates` returns.
LdpUpdateResult = GlobalModelResult


def run_ldp_updates(data: FederatedData, spec: Any, config: LdpUpdateConfig, *, seed: int, device: str | None = None,
                    **engine: Any) -> GlobalModelResult:
    """Run FedAvg/FedSGD + Laplace LDP and return the global model with its ledger (``engine``: checkpoint_dir,
    checkpoint_every, progress, stop_after of :func:`~.fl_common.run_global_model`)."""
    return run_global_model(LdpUpdateMethod(config, data, spec, device=device), data, config, seed=seed, **engine)


def fedmd_config(base: Any, public_size: int) -> Any:
    """The PrivateKT configuration that is FedMD + LDP: every client labels the whole public pool
    (K = |public|, eps split over all K labels), uniform samples, no buffer, no self-training."""
    n = check_int(public_size, "public_size", "fedmd_config", low=1)
    return replace(base, samples_per_round=n, buffer_rounds=1, use_buffer=False, importance_sampling=False,
                   self_training=False)


# --------------------------------------------------------------------------------------------------
# releases
# --------------------------------------------------------------------------------------------------

LDP_UPDATE_DEFAULTS: dict[str, dict[str, Any]] = {
    "data": {"num_clients": 10, "partition": "dirichlet", "alpha": 0.5},
    "model": {"name": "mlp", "hidden": [100]},
    "method": {"rounds": 100},
    "run": {"checkpoint_every": 10, "num_threads": 1},
}

def ldp_update_statement(ledger: Any, config: LdpUpdateConfig, reports: np.ndarray) -> Any:
    """Per-release pure epsilon and two valid bounds on the composition over each client's releases (max over
    clients): basic composition (route ``"basic"``, delta = 0) and the ledger's (its accountant's route); the smaller
    is the headline (:func:`~dpaudit.accountants.statement.pick_headline`)."""
    from dpaudit.accountants.statement import AccountingResult, PrivacyStatement

    text = laplace_mechanism_text(config.clip, config.epsilon)
    per = PrivacyStatement(config.epsilon, 0.0, "pure LDP (Laplace mechanism)", label="per release (one round)",
                           assumptions=(text, "Local DP: any two local data sets of one client are neighbours."))
    worst = int(np.max(reports)) if len(reports) else 0
    basic = PrivacyStatement(worst * config.epsilon, 0.0, "basic composition",
                             label=f"client, releases actually made (max over clients: {worst}), basic",
                             assumptions=(text, "The releases of one client compose adaptively."), route="basic")
    overall = ledger.overall()
    actual = PrivacyStatement(overall.epsilon, overall.delta, overall.method, order=overall.order,
                              label=f"client, releases actually made (max over clients: {worst}), RDP",
                              assumptions=overall.assumptions + (text,), details=dict(overall.details),
                              route=ledger.accountant)
    return AccountingResult(f"{config.mode} + Laplace LDP on L1-clipped updates", (per, basic, actual),
                            facts={"laplace_scale": laplace_scale_for_ldp(config.clip, config.epsilon),
                                   "reports_per_client_max": worst, "reports_per_client_mean": float(np.mean(reports))})


class Config(MethodConfig):
    """A FedAvg + LDP or FedSGD + LDP run (``fedavg-ldp``, ``fedsgd-ldp``): ``[data]``, ``[model]``, ``[method]``
    (:class:`LdpUpdateConfig`; ``mode`` follows the method's name) and ``[run]``."""

    method_cls = LdpUpdateConfig
    data_cls = DataSettings
    defaults = LDP_UPDATE_DEFAULTS

    @classmethod
    def method_table(cls, name: str, table: Mapping[str, Any]) -> LdpUpdateConfig:
        return build_dataclass(LdpUpdateConfig, {**table, "mode": name.split("-")[0]}, f"[method] of {name}")


def run(config: Config, out: Any, *, seed: int = 0, progress: Any = True, overwrite: bool = False) -> RunResult | None:
    """Run FedAvg + LDP or FedSGD + LDP and write its release bundle to ``out`` (None when ``[run] stop_after``
    stopped it early; the same call again resumes)."""
    return execute(config, out, seed=seed, progress=progress, overwrite=overwrite, body=_train, config_cls=Config)


def _train(cfg: Config, ctx: RunContext) -> Outcome | None:
    from dpaudit.training.ensemble import TrainConfig

    data = cfg.prepare_data(ctx.seed)
    spec = model_spec_from(cfg.model, data)
    config = cfg.method
    res = run_ldp_updates(data, spec, config, seed=ctx.seed, device=cfg.run.device, checkpoint_dir=ctx.checkpoints,
                          checkpoint_every=cfg.run.checkpoint_every, progress=ctx.reporter, stop_after=cfg.run.stop_after)
    if cfg.run.stop_after is not None and res.rounds_run < config.rounds:
        return None
    statement = ldp_update_statement(res.ledger, config, res.reports_per_client)
    name = f"{config.mode}_ldp"
    claim = {"epsilon": config.epsilon, "delta": 0.0, "granularity": "round",
             "text": f"{name} as PrivateKT's baseline (Qi et al. 2023, Fig. 2): every released update is eps-LDP."}
    return Outcome(Release(
        method=name, dataset=data.dataset_spec,
        params={"method": config.to_dict(), "data": data.partition, "model": dict(cfg.model)},
        utility={"test_accuracy": res.test_accuracy, "history": [list(h) for h in res.history]},
        classifier=make_classifier(spec, res.params),
        train_config=TrainConfig(epochs=config.local_epochs, batch_size=config.local_batch_size, lr=config.local_lr),
        ledger=res.ledger, statement=statement, claim=claim, membership=data.membership(),
        assumptions=("The per-round figure is what the baseline claims; the headline composes every "
                     "release a client made over the run.",
                     "Members: every client's private records; non-members: the held-out test records.")),
        rounds_run=res.rounds_run)

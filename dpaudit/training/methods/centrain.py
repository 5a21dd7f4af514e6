"""CenTrain: one model on the pooled records of every client, no privacy — the non-private reference of
PrivateKT's comparison (Qi et al. 2023, Fig. 2), written as a release with epsilon = inf."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from dpaudit.errors import check_float, check_int
from dpaudit.training.limits import MAX_EPOCHS, MAX_RECORDS
from dpaudit.training.methods.fl_common import ConfigDict, DataSettings, model_spec_from
from dpaudit.training.methods.scaffold import MethodConfig, Outcome, Release, RunContext, RunResult, execute

__all__ = ["Config", "CenTrainConfig", "run", "CENTRAIN_DEFAULTS"]


@dataclass(frozen=True)
class CenTrainConfig(ConfigDict):
    """``epochs``, ``batch_size`` and Adam's ``lr`` of the one centralised model."""

    label: ClassVar[str] = "CenTrain"

    epochs: int = 30
    batch_size: int = 32
    lr: float = 1e-3

    def __post_init__(self) -> None:
        o = "CenTrainConfig"
        check_int(self.epochs, "epochs", o, low=1, high=MAX_EPOCHS)
        check_int(self.batch_size, "batch_size", o, low=1, high=MAX_RECORDS)
        check_float(self.lr, "lr", o, low=0.0, low_open=True)


CENTRAIN_DEFAULTS: dict[str, dict[str, Any]] = {
    "data": {"num_clients": 10, "partition": "dirichlet", "alpha": 0.5},
    "model": {"name": "mlp", "hidden": [100]},
    "method": {"epochs": 30, "batch_size": 32, "lr": 1e-3},
    "run": {"num_threads": 1},
}


class Config(MethodConfig):
    """A CenTrain run: ``[data]`` (the same client split as PrivateKT, whose records are pooled), ``[model]``,
    ``[method]`` (:class:`CenTrainConfig`) and ``[run]``."""

    method_cls = CenTrainConfig
    data_cls = DataSettings
    defaults = CENTRAIN_DEFAULTS


def run(config: Config, out: Any, *, seed: int = 0, progress: Any = True, overwrite: bool = False) -> RunResult | None:
    """Train one model on the pooled client records and write it as a release (no DP: epsilon = inf)."""
    return execute(config, out, seed=seed, progress=progress, overwrite=overwrite, body=_train, config_cls=Config)


def _train(cfg: Config, ctx: RunContext) -> Outcome:
    from dpaudit.accountants.ledger import PrivacyLedger
    from dpaudit.accountants.statement import AccountingResult, PrivacyStatement
    from dpaudit.training.ensemble import TrainConfig, train_ensemble

    data = cfg.prepare_data(ctx.seed)
    spec = model_spec_from(cfg.model, data)
    m = cfg.method
    train_cfg = TrainConfig(epochs=m.epochs, batch_size=m.batch_size, lr=m.lr)
    members = data.members
    ctx.reporter.log(f"training one {spec.name} model on the {len(members)} pooled client records")
    ens = train_ensemble(spec, [(data.X[members], data.y[members])], train_cfg, seed=ctx.seed, device=cfg.run.device,
                         progress=False)
    clf = ens.member(0)
    acc = float((clf.predict(data.X[data.test]) == data.y[data.test]).mean())
    st = PrivacyStatement(math.inf, 0.0, "none", label="no privacy (centralised training)",
                          assumptions=("The records of every client are pooled and trained on without any DP mechanism.",))
    ledger = PrivacyLedger(delta=1e-5)
    ledger.add_assumption("No DP mechanism was applied; no events were recorded.")
    return Outcome(Release(
        method="centrain", dataset=data.dataset_spec,
        params={"method": m.to_dict(), "data": data.partition, "model": dict(cfg.model)},
        utility={"test_accuracy": acc}, classifier=clf, train_config=train_cfg, ledger=ledger,
        statement=AccountingResult("CenTrain (no DP)", (st,)),
        claim={"epsilon": math.inf, "delta": 0.0, "granularity": "none",
               "text": "CenTrain is the non-private reference of PrivateKT's comparison (no guarantee)."},
        membership=data.membership(), assumptions=("No privacy: the reference for utility.",)))

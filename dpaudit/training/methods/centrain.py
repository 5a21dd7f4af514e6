"""CenTrain: one model on the pooled records of every client, no privacy — the non-private reference of
PrivateKT's comparison (Qi et al. 2023, Fig. 2), written as a release with epsilon = inf.

Its DP-SGD variant (``[method] noise_multiplier`` set): the same model trained by DP-SGD (Abadi et al. 2016) with
Poisson sampling at the fixed rate ``q = min(1, batch_size / n)`` of the n pooled records, per-example clipping
to ``max_grad_norm`` and Gaussian noise; accounted by RDP (:class:`~dpaudit.accountants.events.SubsampledGaussian`)
at ``delta``, which is also its claim.

``[canaries]`` (see :mod:`dpaudit.training.canaries`): ``count`` one-run canaries planted in the released model's
training data, each by its own fair coin. ``"mislabeled"`` canaries are records of the public pool (which CenTrain
never trains on and which no membership list names) with a wrong label; ``"ood"`` are uniform noise in the pool's
value range with random labels; both are appended to the pooled records. ``"dirac"`` (DP-SGD variant only) adds
the gradient ``C e_j`` of each included canary, Poisson-sampled with rate q like a record, in every step, and
records the noised gradient sum at its coordinate. The sampling rate stays that of the n pooled records, so the
accounting is exact with the canaries in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from dpaudit.errors import ParameterError, check_float, check_int
from dpaudit.training.limits import MAX_EPOCHS, MAX_RECORDS
from dpaudit.training.methods.fl_common import ConfigDict, DataSettings, model_spec_from
from dpaudit.training.methods.scaffold import MethodConfig, Outcome, Release, RunContext, RunResult, execute

__all__ = ["Config", "CenTrainConfig", "run", "CENTRAIN_DEFAULTS"]


@dataclass(frozen=True)
class CenTrainConfig(ConfigDict):
    """``epochs``, ``batch_size`` and Adam's ``lr`` of the one centralised model; ``noise_multiplier`` (None: no
    DP) switches on DP-SGD with clipping bound ``max_grad_norm``, accounted at ``delta``."""

    label: ClassVar[str] = "CenTrain"

    epochs: int = 30
    batch_size: int = 32
    lr: float = 1e-3
    noise_multiplier: float | None = None
    max_grad_norm: float = 1.0
    delta: float = 1e-5

    def __post_init__(self) -> None:
        o = "CenTrainConfig"
        check_int(self.epochs, "epochs", o, low=1, high=MAX_EPOCHS)
        check_int(self.batch_size, "batch_size", o, low=1, high=MAX_RECORDS)
        check_float(self.lr, "lr", o, low=0.0, low_open=True)
        if self.noise_multiplier is not None:
            check_float(self.noise_multiplier, "noise_multiplier", o, low=0.0, low_open=True)
        check_float(self.max_grad_norm, "max_grad_norm", o, low=0.0, low_open=True)
        check_float(self.delta, "delta", o, low=0.0, high=1.0, low_open=True, high_open=True)

    @property
    def dp(self) -> bool:
        return self.noise_multiplier is not None


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
    canary_kinds = ("mislabeled", "ood", "dirac")

    def check_canaries(self) -> None:
        super().check_canaries()
        if self.canaries is not None and self.canaries.kind == "dirac" and not self.method.dp:
            raise ParameterError(f"The 'kind' parameter of [canaries] of {self.name} may be 'dirac' only with DP-SGD "
                                 "([method] noise_multiplier set): without it the run has no DP-SGD iterates to record. "
                                 "Got 'dirac' instead.")

    def check_canaries_fit(self, seed: int) -> None:
        c = self.canaries
        if c is None:
            return
        data = self.prepare_data(seed)
        if c.kind == "dirac":
            from dpaudit.training.models import build_model

            total = sum(p.numel() for p in build_model(model_spec_from(self.model, data)).parameters())
            if c.count > total:
                raise ParameterError(f"The 'count' parameter of [canaries] of {self.name} must be an int <= {total} (the "
                                     f"parameters of the model, one coordinate per Dirac canary). Got {c.count} instead.")
        elif len(data.public) == 0:
            raise ParameterError(f"The [canaries] of {self.name} take their records (mislabeled) or value range (ood) "
                                 "from the public pool, which is empty; set [data] public_fraction > 0.")
        elif c.kind == "mislabeled" and c.count > len(data.public):
            raise ParameterError(f"The 'count' parameter of [canaries] of {self.name} must be an int <= "
                                 f"{len(data.public)} (the public-pool records available as mislabeled canaries). "
                                 f"Got {c.count} instead.")


def run(config: Config, out: Any, *, seed: int = 0, progress: Any = True, overwrite: bool = False) -> RunResult | None:
    """Train one model on the pooled client records and write it as a release (no DP: epsilon = inf)."""
    return execute(config, out, seed=seed, progress=progress, overwrite=overwrite, body=_train, config_cls=Config)


def _train(cfg: Config, ctx: RunContext) -> Outcome:
    from dpaudit.accountants.events import SubsampledGaussian
    from dpaudit.accountants.ledger import PrivacyLedger
    from dpaudit.accountants.statement import AccountingResult, PrivacyStatement
    from dpaudit.training.ensemble import DPSGDConfig, TrainConfig, dp_steps_per_epoch, train_ensemble

    data = cfg.prepare_data(ctx.seed)
    spec = model_spec_from(cfg.model, data)
    m = cfg.method
    members = data.members
    X, y = data.X[members], data.y[members]
    dp = None
    if m.dp:
        dp = DPSGDConfig(m.noise_multiplier, m.max_grad_norm, min(1.0, m.batch_size / len(members)))
    train_cfg = TrainConfig(epochs=m.epochs, batch_size=m.batch_size, lr=m.lr, dp=dp)
    datasets, hook, can, canary_note = _plant_canaries(cfg, ctx, spec, data, X, y)
    ctx.reporter.log(f"training one {spec.name} model on the {len(members)} pooled client records"
                     + (" by DP-SGD" if dp else "") + (f" with {cfg.canaries.count} {cfg.canaries.kind} canaries"
                                                       if cfg.canaries else ""))
    ens = train_ensemble(spec, datasets, train_cfg, seed=ctx.seed, device=cfg.run.device, progress=ctx.reporter,
                         canary_hook=hook)
    clf = ens.member(0)
    acc = float((clf.predict(data.X[data.test]) == data.y[data.test]).mean())
    assumptions = ["Members: the pooled client records; non-members: the held-out test records."]
    canary_files = None
    if can is not None:
        from dpaudit.training.canaries import release_canary_files

        canary_files = release_canary_files(can, None if hook is None else hook.observations())
    if canary_note:
        assumptions.append(canary_note)
    if dp is None:
        st = PrivacyStatement(math.inf, 0.0, "none", label="no privacy (centralised training)",
                              assumptions=("The records of every client are pooled and trained on without any DP mechanism.",))
        ledger = PrivacyLedger(delta=m.delta)
        ledger.add_assumption("No DP mechanism was applied; no events were recorded.")
        statement = AccountingResult("CenTrain (no DP)", (st,))
        claim = {"epsilon": math.inf, "delta": 0.0, "granularity": "none",
                 "text": "CenTrain is the non-private reference of PrivateKT's comparison (no guarantee)."}
        assumptions.insert(0, "No privacy: the reference for utility.")
    else:
        steps = m.epochs * dp_steps_per_epoch(len(members), train_cfg)
        ledger = PrivacyLedger(delta=m.delta)
        ledger.record("pooled", SubsampledGaussian(sampling_rate=dp.sampling_rate, noise_multiplier=dp.noise_multiplier,
                                                   steps=steps))
        head = ledger.statement("pooled")
        st = PrivacyStatement(head.epsilon, head.delta, head.method, order=head.order,
                              label=f"record, DP-SGD ({steps} steps, q = {dp.sampling_rate:.4g}, sigma = {dp.noise_multiplier:g}), RDP",
                              assumptions=head.assumptions + ("Poisson sampling at the fixed rate q of the pooled records; "
                                                              "add/remove one record.",), details=dict(head.details))
        statement = AccountingResult("CenTrain by DP-SGD", (st,))
        claim = {"epsilon": float(st.epsilon), "delta": float(st.delta), "granularity": "example",
                 "text": "CenTrain trained by DP-SGD: (eps, delta)-DP per record (add/remove one) by RDP accounting of "
                         "the subsampled Gaussian."}
    return Outcome(Release(
        method="centrain", dataset=data.dataset_spec,
        params={"method": m.to_dict(), "data": data.partition, "model": dict(cfg.model),
                **({"canaries": cfg.canaries.to_dict()} if cfg.canaries else {})},
        utility={"test_accuracy": acc}, classifier=clf, train_config=train_cfg, ledger=ledger,
        statement=statement, claim=claim, membership=data.membership(), assumptions=tuple(assumptions),
        canaries=canary_files))


def _plant_canaries(cfg: Config, ctx: RunContext, spec: Any, data: Any, X: Any, y: Any) -> tuple:
    """The training set(s), the Dirac hook, the canaries and a line for the release's assumptions."""
    if cfg.canaries is None:
        return [(X, y)], None, None, None
    from dpaudit.training.canaries import DiracHook, canary_datasets, make_canaries

    c, m = cfg.canaries, cfg.method
    pool = data.public
    can = make_canaries(c.kind, "one-run", num_canaries=c.count, seed=c.seed, spec=spec, X_pool=data.X[pool],
                        y_pool=data.y[pool], X_train=X)
    if c.kind == "dirac":
        hook = DiracHook(spec, can, max_grad_norm=m.max_grad_norm, noise_multiplier=m.noise_multiplier, seed=c.seed)
        note = (f"Canaries: {c.count} Dirac gradient canaries (one-run, fair coins, seed {c.seed}) added to the clipped "
                "gradient sum like records; canaries.npz holds their coordinates and the noised sums observed there.")
        return [(X, y)], hook, can, note
    src = "public-pool records with a wrong label" if c.kind == "mislabeled" else "uniform noise inputs with random labels"
    note = (f"Canaries: {c.count} {c.kind} canaries ({src}; one-run, fair coins, seed {c.seed}) appended to the "
            "training records; they are in no membership list.")
    return canary_datasets(X, y, can), None, can, note

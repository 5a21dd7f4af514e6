"""PrivateKT: private knowledge transfer on a few actively sampled public samples (Qi et al., "Differentially
private knowledge transfer for federated learning", Nature Communications 14, 2023; Algorithm 1).

Round t (as step functions of :mod:`dpaudit.training.engine`):

- server -> sampled clients G_t: the global model :math:`\\Theta_t` and the K knowledge-transfer samples;
- client c: trains :math:`\\Theta_t` on its local data (``local`` TrainConfig; all sampled clients at once
  through the ensemble trainer from the same ``init_state``), predicts hard labels on the K samples, perturbs
  each with K-ary randomized response of keep probability :math:`\\beta` (Lemma 1, Eq. 6, from eps/K and C),
  replies with the K perturbed labels and its DP event;
- server: debiases (Eq. 3), pushes the round's (samples, targets) into the FIFO buffer of B rounds,
  fine-tunes :math:`\\Theta_t` on the buffer (``server_steps`` full-batch Adam steps), self-trains on M public
  samples drawn with weights :math:`\\propto e^{-u}` (Eq. 5), draws the next K samples with weights
  :math:`\\propto e^{u}` (Eq. 4), and records each reporting client's RandomizedResponse event in the ledger.

Choices the paper leaves open, with their defaults:

- ``label_mode="hard"``: the debiased estimate becomes a one-hot target (argmax), as in the reference code;
  ``"soft"`` clips negatives and renormalises.
- ``server_steps=4`` full-batch steps on the buffer per round (reference code).
- ``self_train_fraction=0.1`` of the public pool per round, one epoch, ``self_train_targets="hard"``
  (pseudo-labels). The reference code trains on the model's own *soft* predictions, whose cross-entropy
  gradient is zero at the first step, i.e. nearly a no-op; ``"soft"`` reproduces that.
- B counts rounds (each holds K samples), as in the reference code's buffer.
- ``local_optimizer``/``server_optimizer``: ``"adam"`` (default, lr 1e-3: dpaudit's choice, the paper names
  no optimizer) or ``"sgd"`` (the public reference code: plain SGD, lr 0.05 for clients and server). The
  paper-scale config ``configs/privatekt_paper_mnist.toml`` uses the reference's SGD.
- ``[data] partition``: ``"dirichlet"`` (dpaudit's default: per-class Dirichlet(alpha) over clients, sizes vary,
  e.g. 199-986 records at 600 on average) or ``"dirichlet_fixed"`` (the reference code: each client draws its
  class proportions from Dir(alpha) and gets exactly ``samples_per_client`` records).

Ablation switches (paper Fig. 3): ``use_buffer=False`` (buffer of one round), ``importance_sampling=False``
(uniform KT samples), ``self_training=False``.

Privacy. Each report is :math:`\\epsilon`-LDP (Lemma 1). The paper claims that "model shuffling" keeps the
whole process at :math:`\\epsilon`; nothing in Algorithm 1 shuffles, and a client that reports in T rounds
releases T reports computed from the same data, so the ledger composes them. The statement shows the
per-report figure, the composition over the rounds each client really took part in (headline), and what an
(absent) trusted shuffler would give; the claim is recorded as a red flag, not assumed.

``fedmd_ldp`` (a baseline) is the same protocol with K = |public pool|, uniform sampling, no buffer and no
self-training: every client's predictions on the whole public set, epsilon split over all of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Mapping

import numpy as np
import torch

from dpaudit.accountants.events import RandomizedResponse, rr_keep_probability
from dpaudit.errors import ParameterError, check_bool, check_choice, check_float, check_int
from dpaudit.training.limits import MAX_RECORDS, MAX_STEPS
from dpaudit.training.engine import party_rng, party_seed
from dpaudit.training.methods.fl_common import (
    GlobalModelResult,
    GlobalModelSteps,
    RoundSettings,
    DataSettings,
    FederatedData,
    adam_train,
    buffer_fetch,
    buffer_push,
    entropy_weights,
    init_model_state,
    make_classifier,
    model_spec_from,
    run_global_model,
    rr_debias,
    rr_perturb,
    to_distribution,
    weighted_sample,
)

from dpaudit.training.methods.scaffold import MethodConfig, Outcome, Release, RunContext, RunResult, execute

__all__ = ["Config", "PrivateKTConfig", "PrivateKTMethod", "PrivateKTResult", "run", "run_privatekt", "privatekt_statement",
           "party_setup", "party_count", "PARTY_TASKS"]


@dataclass(frozen=True)
class PrivateKTConfig(RoundSettings):
    """Parameters of PrivateKT. Defaults: small and fast; ``configs/privatekt.toml`` holds the paper's.

    Attributes
    ----------
    epsilon: LDP budget of one client's report of K labels (per round), > 0.
    samples_per_round: K, knowledge-transfer samples per round.
    buffer_rounds: B, rounds of aggregated knowledge kept in the FIFO buffer.
    rounds: T. client_fraction: share of clients sampled per round (reference: 0.5).
    local_epochs, local_batch_size, local_lr, local_optimizer: client training of the global model
    (``"adam"``, default, or ``"sgd"``: the reference code's SGD with lr 0.05).
    server_steps, server_lr, server_optimizer: full-batch steps on the buffer per round (Adam, or SGD as the
    reference code).
    self_train_fraction: M / |public pool|. label_mode, self_train_targets: see the module docstring.
    use_buffer, importance_sampling, self_training: ablation switches.
    eval_every: evaluate test accuracy every this many rounds (0 = only at the end).
    delta: delta of the (epsilon, delta) figures (RDP composition, shuffling).
    """

    label: ClassVar[str] = "PrivateKT"

    local_epochs: int = 2
    local_lr: float = 1e-3
    server_lr: float = 1e-3
    samples_per_round: int = 2
    buffer_rounds: int = 25
    server_steps: int = 4
    self_train_fraction: float = 0.1
    label_mode: str = "hard"
    self_train_targets: str = "hard"
    use_buffer: bool = True
    importance_sampling: bool = True
    self_training: bool = True
    local_optimizer: str = "adam"
    server_optimizer: str = "adam"

    def __post_init__(self) -> None:
        o = "PrivateKTConfig"
        check_choice(self.local_optimizer, "local_optimizer", o, ("adam", "sgd"))
        check_choice(self.server_optimizer, "server_optimizer", o, ("adam", "sgd"))
        self.check_rounds(o, min_local_epochs=0)
        check_int(self.samples_per_round, "samples_per_round", o, low=1, high=MAX_RECORDS)
        check_int(self.buffer_rounds, "buffer_rounds", o, low=1, high=MAX_STEPS)
        check_int(self.server_steps, "server_steps", o, low=0, high=MAX_STEPS)
        check_float(self.self_train_fraction, "self_train_fraction", o, low=0.0, high=1.0)
        check_choice(self.label_mode, "label_mode", o, ("hard", "soft"))
        check_choice(self.self_train_targets, "self_train_targets", o, ("hard", "soft"))
        for name in ("use_buffer", "importance_sampling", "self_training"):
            check_bool(getattr(self, name), name, o)



class PrivateKTMethod(GlobalModelSteps):
    """PrivateKT as engine step functions (see the module docstring)."""

    def __init__(self, config: PrivateKTConfig, data: FederatedData, spec: Any, *, device: str | None = None,
                 observer: Callable[[int, Mapping[int, np.ndarray]], None] | None = None) -> None:
        self.config = config
        self.observer = observer
        self.data = data
        self.spec = spec
        self.device = device
        self.num_classes = data.num_classes
        k = min(config.samples_per_round, len(data.public))
        self.k = k
        self.beta = rr_keep_probability(config.epsilon, k, self.num_classes)
        self.event = RandomizedResponse(num_classes=self.num_classes, num_samples=k, epsilon=config.epsilon)
        self.X_public = data.X[data.public]

    # -- engine hooks ----------------------------------------------------------------------------
    def _kt_indices(self, params: Mapping[str, torch.Tensor], seed: int, t: int) -> np.ndarray:
        rng = party_rng(seed, t, -1, stream=1)
        if self.config.importance_sampling:
            probs = make_classifier(self.spec, params).predict_proba(self.X_public)
            return weighted_sample(entropy_weights(probs, +1.0), self.k, rng)  # Eq. 4
        return weighted_sample(None, self.k, rng, pool_size=len(self.X_public))

    def _message(self, state: Mapping[str, Any]) -> dict:
        return {"round": state["round"], "seed": state["seed"], "params": state["params"],
                "kt_x": self.X_public[state["kt"]]}

    def init_server(self, seed: int) -> tuple[dict, dict]:
        from dpaudit.accountants.ledger import PrivacyLedger

        params = init_model_state(self.spec, party_seed(seed, 0, -1, stream=9))
        # Algorithm 1 line 3: the first K samples are drawn uniformly (the model is untrained)
        kt = weighted_sample(None, self.k, party_rng(seed, 0, -1, stream=1), pool_size=len(self.X_public))
        state = {"round": 0, "seed": int(seed), "params": params, "opt": None, "buffer": [], "kt": kt,
                 "ledger": PrivacyLedger(delta=self.config.delta), "history": [],
                 "reports": np.zeros(self.data.num_clients, dtype=np.int64)}
        return state, self._message(state)

    def client_step_in_group(self, state: Any, data: tuple, message: dict, group: list[int]) -> tuple[Any, dict]:
        """One client's step when it runs alone (a Flower ClientApp): the same seeds as its place in the batched
        in-process step of the round's ``group`` (see :meth:`client_steps`)."""
        states, replies = self.client_steps([state], [data], [message], group=group)
        return states[0], replies[0]

    def client_steps(self, states: list, datas: list, messages: list, *, group: list[int] | None = None) -> tuple[list, list]:
        """All sampled clients at once: the ensemble trainer trains every client's copy of the global model
        (same ``init_state``) on its own data; each client then perturbs its own labels with its own RNG.

        The randomized response of client c depends only on ``(seed, round, c)``. The local training's
        initialisation and batch order come from the ensemble trainer's seed (from the round and the group's first
        client) and the client's position in the round's ``group`` (default: the clients given), so a client
        training alone with ``group`` set (the Flower engine) draws the same batches as in the batched step."""
        from dpaudit.training.ensemble import TrainConfig, train_ensemble

        msg = messages[0]  # a broadcast: the same for every client
        cfg = self.config
        ids = [int(d[0]) for d in datas]
        group = ids if group is None else [int(c) for c in group]
        positions = [group.index(c) for c in ids]
        if positions != list(range(positions[0], positions[0] + len(ids))):
            raise ParameterError(f"PrivateKT's client step needs clients in consecutive places of the round's group. "
                                 f"Got {ids} in the group {group} instead.")
        if cfg.local_epochs > 0:
            ens = train_ensemble(
                self.spec, [(d[1], d[2]) for d in datas],
                TrainConfig(epochs=cfg.local_epochs, batch_size=cfg.local_batch_size, optimizer=cfg.local_optimizer,
                            lr=cfg.local_lr),
                seed=party_seed(msg["seed"], msg["round"], min(group), stream=2), device=self.device,
                progress=False, init_state=msg["params"], model_offset=positions[0])
            probs = ens.predict_proba(msg["kt_x"])  # (G, K, C)
        else:
            p = make_classifier(self.spec, msg["params"]).predict_proba(msg["kt_x"])
            probs = np.broadcast_to(p, (len(ids),) + p.shape)
        replies = []
        for i, cid in enumerate(ids):
            labels = probs[i].argmax(-1)
            reported = rr_perturb(labels, self.beta, self.num_classes, party_rng(msg["seed"], msg["round"], cid, stream=3))
            replies.append({"labels": reported, "event": self.event})
        return list(states), replies

    def server_step(self, state: dict, replies: Mapping[int, dict]) -> tuple[dict, dict]:
        cfg = self.config
        t, seed = state["round"], state["seed"]
        ledger = state["ledger"]
        reports = state["reports"].copy()
        for cid in sorted(replies):
            ledger.record(f"client{cid}", replies[cid]["event"])
            reports[cid] += 1
        if self.observer is not None:  # an auditor reading what the server receives (copies: it cannot alter the run)
            self.observer(t, {cid: np.array(replies[cid]["labels"], copy=True) for cid in sorted(replies)})
        labels = np.stack([replies[c]["labels"] for c in sorted(replies)])  # (G, K)
        estimate = rr_debias(labels, self.beta, self.num_classes)  # Eq. 3
        targets = to_distribution(estimate, cfg.label_mode)
        buffer = buffer_push(state["buffer"], state["kt"], targets, cfg.buffer_rounds if cfg.use_buffer else 1)
        params, opt = state["params"], state["opt"]
        if cfg.server_steps > 0:
            idx, tgt = buffer_fetch(buffer)
            params, opt = adam_train(self.spec, params, opt, self.X_public[idx], tgt, steps=cfg.server_steps,
                                     lr=cfg.server_lr, seed=party_seed(seed, t, -1, stream=4),
                                     optimizer=cfg.server_optimizer)
        if cfg.self_training and cfg.self_train_fraction > 0:
            m = max(1, int(round(cfg.self_train_fraction * len(self.X_public))))
            probs = make_classifier(self.spec, params).predict_proba(self.X_public)
            pick = weighted_sample(entropy_weights(probs, -1.0), m, party_rng(seed, t, -1, stream=5))  # Eq. 5
            st_targets = to_distribution(probs[pick], "hard") if cfg.self_train_targets == "hard" else probs[pick]
            params, opt = adam_train(self.spec, params, opt, self.X_public[pick], st_targets, epochs=1,
                                     batch_size=cfg.local_batch_size, lr=cfg.server_lr,
                                     seed=party_seed(seed, t, -1, stream=6), optimizer=cfg.server_optimizer)
        history = self.history_after(state, params)
        new = {**state, "round": t + 1, "params": params, "opt": opt, "buffer": buffer, "ledger": ledger,
               "history": history, "reports": reports}
        new["kt"] = self._kt_indices(params, seed, t + 1)
        return new, self._message(new)



@dataclass(frozen=True)
class PrivateKTResult(GlobalModelResult):
    """The global model and what the run recorded, with the randomized response's keep probability."""

    beta: float = 0.0


def run_privatekt(data: FederatedData, spec: Any, config: PrivateKTConfig, *, seed: int, device: str | None = None,
                  observer: Callable[[int, Mapping[int, np.ndarray]], None] | None = None,
                  **engine: Any) -> PrivateKTResult:
    """Run PrivateKT on prepared federated data and return the global model with its ledger (``engine``:
    checkpoint_dir, checkpoint_every, progress, stop_after of :func:`~.fl_common.run_global_model`).

    ``observer(round, uploads)``, when given, is called once per round computed in this call with what the server
    received: ``{client_id: perturbed labels (K,)}`` (copies). It is for auditors (see
    :mod:`dpaudit.auditing.method_runs.privatekt`); it draws no randomness, so the run's numbers are the same with or
    without it. Rounds restored from a checkpoint are not replayed to it."""
    method = PrivateKTMethod(config, data, spec, device=device, observer=observer)
    return run_global_model(method, data, config, seed=seed, result=PrivateKTResult, beta=method.beta, **engine)


# --------------------------------------------------------------------------------------------------
# statement, claim and release
# --------------------------------------------------------------------------------------------------

SHUFFLING_EXPLANATION = (
    "The paper states that 'model shuffling' stops the privacy budget from "
    "accumulating over rounds, so the whole process would be eps-LDP. Algorithm 1 contains no shuffler, and a "
    "client that reports in T rounds releases T randomized responses computed from the same local data: under "
    "local DP they compose (T * eps by basic composition; the RDP figure is shown). Even with a trusted shuffler "
    "the guarantee becomes a central (eps, delta) per round that still composes over rounds. The headline figure "
    "is the composition over the rounds each client actually took part in (maximum over clients).")
SHUFFLING_RED_FLAG = "RED FLAG (PrivateKT's privacy claim): t" + SHUFFLING_EXPLANATION[1:]


def privatekt_statement(ledger: Any, *, epsilon: float, samples: int, classes: int, rounds: int,
                        clients_per_round: int, num_clients: int, delta: float, reports: np.ndarray,
                        mechanism: str = "PrivateKT") -> Any:
    """An :class:`~dpaudit.accountants.statement.AccountingResult` for a run: per-report LDP epsilon, the expected
    composition and the shuffled figures of :func:`~dpaudit.accountants.ldp.account_ldp` (other quantities: no
    route), and two valid bounds on the composition over the rounds each client took part in (max over clients):
    basic composition (route ``"basic"``) and the ledger's (its accountant's route), the smaller the headline
    (:func:`~dpaudit.accountants.statement.pick_headline`)."""
    import dataclasses

    from dpaudit.accountants.ldp import account_ldp
    from dpaudit.accountants.statement import AccountingResult, PrivacyStatement

    participation = clients_per_round / num_clients
    acc = account_ldp(epsilon, samples, classes, rounds=rounds, participation=participation,
                      users=num_clients, delta=delta)
    overall = ledger.overall()
    worst = int(np.max(reports)) if len(reports) else 0
    actual = PrivacyStatement(
        overall.epsilon, overall.delta, overall.method, order=overall.order,
        label=f"client, rounds actually taken part in (max over clients: {worst} reports), RDP",
        assumptions=overall.assumptions + (
            f"Recorded by the run's ledger: one RandomizedResponse(eps={epsilon:g}, K={samples}, C={classes}) event per "
            "report of a client; the reports of one client compose adaptively.",),
        details={**overall.details, "max_reports": worst, "basic_composition": worst * epsilon},
        route=ledger.accountant)
    basic = PrivacyStatement(
        worst * epsilon, 0.0, "basic composition",
        label=f"client, rounds actually taken part in (max over clients: {worst} reports), basic",
        assumptions=(f"{worst} reports of eps = {epsilon:g} each (the most any client made) compose adaptively: "
                     "basic composition.",), route="basic")
    statements = [dataclasses.replace(s, route="") for s in acc.statements] + [basic, actual]
    facts = {**acc.facts, "reports_per_client_min": int(np.min(reports)), "reports_per_client_mean": float(np.mean(reports)),
             "reports_per_client_max": worst, "clients_per_round": clients_per_round}
    return AccountingResult(f"{mechanism}: randomized response per round, composed over rounds", tuple(statements),
                            parameters=acc.parameters, facts=facts,
                            warnings=acc.warnings + (SHUFFLING_RED_FLAG,))


PRIVATEKT_DEFAULTS: dict[str, dict[str, Any]] = {
    "data": {"num_clients": 10, "partition": "dirichlet", "alpha": 0.5},
    "model": {"name": "mlp", "hidden": [100]},
    "method": {"rounds": 100, "local_epochs": 5, "local_lr": 1e-2, "server_lr": 1e-2},
    "run": {"checkpoint_every": 10, "num_threads": 1},
}


class Config(MethodConfig):
    """A PrivateKT (or FedMD + LDP) run: ``[data]`` (name, data_dir and the client split, see
    :class:`~dpaudit.training.methods.fl_common.DataSettings`), ``[model]``, ``[method]``
    (:class:`PrivateKTConfig`) and ``[run]``; defaults :data:`PRIVATEKT_DEFAULTS` under the file."""

    method_cls = PrivateKTConfig
    data_cls = DataSettings
    defaults = PRIVATEKT_DEFAULTS


def run(config: Config, out: Any, *, seed: int = 0, progress: Any = True, overwrite: bool = False) -> RunResult | None:
    """Run PrivateKT (or, for the config of ``fedmd-ldp``, FedMD + LDP) and write its release bundle to ``out``.

    Engine checkpoints go beside ``out``; running the same command again after an interruption resumes; they
    are removed once the release is written. ``[run] stop_after`` stops after that many rounds without writing
    a release (returns None).
    """
    return execute(config, out, seed=seed, progress=progress, overwrite=overwrite, body=_train, config_cls=Config)


def _setting(cfg: Config, seed: int) -> tuple[FederatedData, Any, PrivateKTConfig]:
    """The run's data, model spec and method parameters (FedMD + LDP: PrivateKT's over the whole public set)."""
    data = cfg.prepare_data(seed)
    spec = model_spec_from(cfg.model, data)
    config = cfg.method
    if cfg.name == "fedmd-ldp":
        from dpaudit.training.methods.baselines import fedmd_config

        config = fedmd_config(config, len(data.public))
    return data, spec, config


def party_setup(cfg: Config, seed: int) -> tuple[PrivateKTMethod, list]:
    """What a client rebuilds before its first round (see :mod:`dpaudit.training.parties`): the method's step
    functions and the clients' data (it reads only its own)."""
    data, spec, config = _setting(cfg, seed)
    return PrivateKTMethod(config, data, spec, device=cfg.run.device), data.client_tuples()


def party_count(cfg: Config, seed: int) -> int:
    """The number of clients of a run."""
    return int(cfg.prepare_data(seed).num_clients)


def _party_round(setup: tuple, party: int, payload: Any, state: Any) -> tuple[Any, Any]:
    from dpaudit.training.engine import party_round_step

    return party_round_step(setup[0], setup[1][party], party, payload, state)


def _party_state(setup: tuple, party: int, payload: Any, state: Any) -> tuple[Any, Any]:
    from dpaudit.training.engine import party_final_state

    return party_final_state(setup[0], setup[1][party], party, payload, state)


#: The clients' side of a run when they run elsewhere (see :mod:`dpaudit.training.parties`).
PARTY_TASKS = {"round": _party_round, "state": _party_state}


def _train(cfg: Config, ctx: RunContext) -> Outcome | None:
    from dpaudit.training.ensemble import TrainConfig

    seed = ctx.seed
    fedmd = cfg.name == "fedmd-ldp"
    data, spec, config = _setting(cfg, seed)
    res = run_privatekt(data, spec, config, seed=seed, device=cfg.run.device, checkpoint_dir=ctx.checkpoints,
                        checkpoint_every=cfg.run.checkpoint_every, progress=ctx.reporter, stop_after=cfg.run.stop_after)
    if cfg.run.stop_after is not None and res.rounds_run < config.rounds:
        return None
    per_round = max(1, int(math.floor(config.client_fraction * data.num_clients)))
    k = min(config.samples_per_round, len(data.public))
    statement = privatekt_statement(res.ledger, epsilon=config.epsilon, samples=k, classes=data.num_classes,
                                    rounds=config.rounds, clients_per_round=per_round, num_clients=data.num_clients,
                                    delta=config.delta, reports=res.reports_per_client,
                                    mechanism="FedMD + LDP" if fedmd else "PrivateKT")
    claim = {"epsilon": config.epsilon, "delta": 0.0, "granularity": "user",
             "text": ("PrivateKT (Qi et al. 2023, Lemma 1 and 'model shuffling'): each round is eps-LDP and the whole "
                      "knowledge transfer stays eps-LDP because budgets do not accumulate.") if not fedmd else
                     ("FedMD + LDP as PrivateKT's baseline: each round's predictions on the whole public set are eps-LDP "
                      "(eps split over every label).")}
    utility = {"test_accuracy": res.test_accuracy, "history": [list(h) for h in res.history], "beta": res.beta}
    local_cfg = TrainConfig(epochs=max(1, config.local_epochs), batch_size=config.local_batch_size, lr=config.local_lr)
    return Outcome(Release(
        method="fedmd_ldp" if fedmd else "privatekt", dataset=data.dataset_spec,
        params={"method": config.to_dict(), "data": data.partition, "model": dict(cfg.model)},
        utility=utility, classifier=make_classifier(spec, res.params), train_config=local_cfg,
        ledger=res.ledger, statement=statement, claim=claim, membership=data.membership(),
        assumptions=(SHUFFLING_RED_FLAG,
                     "The released model is the server's global model; it never saw private records directly, "
                     "only randomized-response labels on public samples. train_config is the clients' local "
                     "recipe (the best available recipe for shadow models, not the global model's).",
                     "Members: every client's private records; non-members: the held-out test records."),
        flags=(("composition_ignored_by_claim", SHUFFLING_EXPLANATION),)), rounds_run=res.rounds_run)

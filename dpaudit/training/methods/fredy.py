"""FREDY: federated teachers, PATE-style noisy labelling, one released student (Future Internet 2023, Algorithm 1).

T teachers (clients) hold disjoint data. From common initial weights :math:`W^0`, they run FedAvg for n rounds:
in rounds 1..n-1 each trains E local epochs from the global model and the server averages the T models; in round n
each teacher trains from :math:`W^{n-1}` and keeps its model. The teachers label public queries; each answer is the
Laplace noisy max :math:`\\arg\\max_c (V_c(x) + \\mathrm{Lap}(1/\\epsilon))` (Eq. 4; the paper's per-query "epsilon" is
the inverse noise scale, called ``gamma`` here). A student trained from :math:`W^0` on the answered queries is the only
released model. The non-private baseline (same architecture on the teachers' pooled data) is released beside it, in
``OUT/nonprivate``, as the model a membership attack should find vulnerable.

Privacy, honestly. PATE's argument gives sensitivity 2 per answer because one record moves one teacher's vote.
After FedAvg rounds (n >= 2) every teacher's model depends on every teacher's data, so one record can move all T
votes: the vote histogram's L1 sensitivity is 2T. The ledger records every answered query (total over all of them,
with the votes for the data-dependent analysis) at sensitivity 2T by default (``sensitivity="worst_case"``); the
figure under PATE's one-record-one-teacher assumption is reported beside it as the paper's implicit claim, and the
assumption is stated plainly in the statement and in ``release.json``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Mapping

import numpy as np

from dpaudit.accountants.events import LaplaceNoisyMax
from dpaudit.errors import ParameterError, check_bool, check_choice, check_float, check_int, check_probability
from dpaudit.training.limits import MAX_MODELS, MAX_RECORDS, MAX_ROUNDS
from dpaudit.training.ensemble import TrainConfig
from dpaudit.training.methods.common import (accounting_result, accuracy, balanced_membership, central_ledger,
    config_to_dict, derive_rng, derive_seed, FamilySettings, model_spec, ModelGroup, new_ledger, no_privacy_result,
    noiseless_accounting, noisy_argmax, schedule, select_queries, StageCache, stage_key, student_utility, teacher_parts,
    train_group, vote_counts)
from dpaudit.training.methods.scaffold import MethodConfig, Outcome, Release, RunContext, RunResult, execute

__all__ = ["Config", "FREDYConfig", "run", "fedavg", "fedavg_teachers", "initial_state", "fredy_sensitivity", "FEDAVG_ASSUMPTION",
           "party_setup", "party_count", "PARTY_TASKS"]

FEDAVG_ASSUMPTION = (
    "PATE's sensitivity argument assumes one record affects one teacher. FREDY trains its teachers with FedAvg, so "
    "after the first round every teacher's model depends on every teacher's data and one record can change all T "
    "teachers' votes. A guarantee computed with sensitivity 2 (as PATE's analysis, and FREDY's claim) does not hold "
    "for FREDY; only the sensitivity-2T figure is a valid bound."
)


@dataclass(frozen=True)
class FREDYConfig(FamilySettings):
    """Parameters of a FREDY run.

    Attributes
    ----------
    teachers:
        T clients with disjoint, equal random shares of the private split (the paper: 5, 15, 25).
    rounds:
        n federated rounds (the paper: 10); the last one is local only.
    gamma:
        The paper's per-query "epsilon": Laplace noise of scale ``1/gamma`` on each vote count (1, 0.5, 0.2, 0.1,
        0.01 in the paper). ``None`` answers without noise (no guarantee).
    queries, query_fraction:
        Public records answered (the paper: 500, 1000, 2000, 9000 of 9000).
    model, model_kwargs:
        Architecture of teachers, student and baseline (the paper: ``cnn_fredy``).
    teacher_train:
        Local schedule of one round (``epochs`` = E, the paper: 10 epochs, Adam 1e-3, weight decay 1e-5, batch 32).
    student_train, baseline_train:
        Schedules of the student and the non-private baseline (the paper: 20 epochs).
    sensitivity:
        ``"worst_case"`` (2T when rounds >= 2; valid) or ``"pate"`` (2; PATE's assumption, which FedAvg breaks).
    nonprivate_baseline:
        Also train and release the non-private baseline in ``OUT/nonprivate``.
    baseline_data:
        What the non-private baseline trains on. ``"private"`` (default, dpaudit's choice): the teachers' pooled
        private data, so that the attack on it measures what the private data would leak without FREDY.
        ``"student"``: the paper's wording (Sec. 5, "identical train and test datasets as the student"): the
        answered public records with their true labels; its members are then those public records.
    """

    method_name: ClassVar[str] = "fredy"

    teachers: int = 5
    rounds: int = 3
    gamma: float | None = 1.0
    queries: int | None = None
    query_fraction: float = 1.0
    model: str = "mlp"
    model_kwargs: Mapping[str, Any] = field(default_factory=dict)
    teacher_train: TrainConfig = schedule(epochs=5, batch_size=32, lr=1e-2, weight_decay=1e-5)
    student_train: TrainConfig = schedule(epochs=20, batch_size=64, lr=1e-2, weight_decay=1e-5)
    baseline_train: TrainConfig = schedule(epochs=20, batch_size=64, lr=1e-2, weight_decay=1e-5)
    sensitivity: str = "worst_case"
    nonprivate_baseline: bool = True
    baseline_data: str = "private"

    def __post_init__(self) -> None:
        o = "FREDYConfig"
        check_choice(self.baseline_data, "baseline_data", o, ("private", "student"))
        check_int(self.teachers, "teachers", o, low=1, high=MAX_MODELS)
        check_int(self.rounds, "rounds", o, low=1, high=MAX_ROUNDS)
        if self.gamma is not None:
            check_float(self.gamma, "gamma", o, low=0.0, low_open=True)
        if self.queries is not None:
            check_int(self.queries, "queries", o, low=1, high=MAX_RECORDS)
        check_probability(self.query_fraction, "query_fraction", o, allow_one=True)
        check_choice(self.sensitivity, "sensitivity", o, ("worst_case", "pate"))
        check_bool(self.nonprivate_baseline, "nonprivate_baseline", o)
        self.check_family(o)


def fredy_sensitivity(teachers: int, rounds: int, mode: str = "worst_case") -> float:
    """L1 sensitivity of the teachers' vote histogram to one record.

    With one round there is no averaging: each teacher sees only its own data and PATE's 2 holds. With
    ``rounds >= 2`` every teacher's final model depends on all data, so up to all T votes move: 2T.
    ``mode="pate"`` returns PATE's 2 regardless (the paper's implicit assumption).
    """
    check_choice(mode, "mode", "fredy_sensitivity", ("worst_case", "pate"))
    t = check_int(teachers, "teachers", "fredy_sensitivity", low=1)
    r = check_int(rounds, "rounds", "fredy_sensitivity", low=1)
    if mode == "pate" or r == 1:
        return 2.0
    return 2.0 * t


def fedavg(states: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The unweighted FedAvg average :math:`\\frac1T \\sum_t W_t` of ``T`` state dicts (FREDY Eq. 1).

    Floating tensors are averaged; integer buffers (batch-norm step counters) take the rounded mean.
    """
    import torch

    if not states:
        raise ParameterError("The 'states' parameter of fedavg must hold at least one state dict. Got none instead.")
    keys = list(states[0])
    out: dict[str, Any] = {}
    for k in keys:
        stacked = torch.stack([torch.as_tensor(s[k]).detach().cpu() for s in states])
        if stacked.is_floating_point():
            out[k] = stacked.mean(dim=0)
        else:
            out[k] = stacked.double().mean(dim=0).round().to(stacked.dtype)
    return out


def initial_state(spec: Any, seed: int) -> dict[str, Any]:
    """:math:`W^0`: the seeded initial weights shared by every teacher and by the student."""
    import torch

    from dpaudit.training.models import build_model

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = build_model(spec)
    return {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}


def _to_npz(state: Mapping[str, Any]) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in state.items()}


def _from_npz(arrays: Mapping[str, np.ndarray]) -> dict[str, Any]:
    import torch

    return {k: torch.from_numpy(np.array(v)) for k, v in arrays.items()}


def fedavg_teachers(spec: Any, datasets: list[tuple[np.ndarray, np.ndarray]], train: TrainConfig, *, rounds: int,
                    w0: Mapping[str, Any], seed: int, device: str | None, cache: StageCache, progress: bool,
                    group_size: int | None = None) -> ModelGroup:
    """FREDY's teacher training (Algorithm 1): from ``w0``, FedAvg rounds 1..n-1 (each client trains from the global
    model, the server averages the clients; each round checkpointed in ``cache``), then the local last round, whose
    models are the teachers. Returns the trained teachers.

    ``group_size``: ``None`` (a run: all ``datasets`` are one federation) or ``T``: ``datasets`` are consecutive
    independent federations of ``T`` clients each, trained in the same ensemble calls and averaged only within their
    federation (how an audit runs many FREDY trainings at once; each model's randomness depends on its index only).
    """
    M = len(datasets)
    T = M if group_size is None else check_int(group_size, "group_size", "fedavg_teachers", low=1, high=M)
    if M % T:
        raise ParameterError(f"The 'group_size' parameter of fedavg_teachers must divide the {M} datasets. Got {T} instead.")
    state: Mapping[str, Any] = w0
    for r in range(1, rounds):
        def one_round(r: int = r, start: Mapping[str, Any] = state) -> dict[str, np.ndarray]:
            cache.reporter.log(f"FedAvg round {r}/{rounds}: {T} clients x {train.epochs} local epochs"
                               + ("" if T == M else f", {M // T} federations"))
            g = train_group(spec, datasets, train, seed=derive_seed(seed, "fedavg", r), device=device,
                            checkpoint_dir=cache.subdir(f"round{r}.ckpt"), progress=progress, init_state=start)
            avgs = [fedavg([g.state_dict(i) for i in range(f, f + T)]) for f in range(0, M, T)]
            if len(avgs) == 1:
                return _to_npz(avgs[0])
            # one state per model: its federation's average
            return {k: np.repeat(np.stack([a[k].numpy() for a in avgs]), T, axis=0) for k in avgs[0]}

        state = _from_npz(cache.get_or_run(f"round{r}", one_round))
    cache.reporter.log(f"round {rounds}/{rounds}: teachers train locally and keep their models")
    return train_group(spec, datasets, train, seed=derive_seed(seed, "fedavg", rounds), device=device,
                       checkpoint_dir=cache.subdir("teachers.ckpt"), progress=progress, init_state=state)


def _federated_teachers(executor: Any, T: int, rounds: int, w0: Mapping[str, Any], log: Any) -> dict[str, np.ndarray]:
    """:func:`fedavg_teachers` with the teachers at the parties (the Flower engine): in rounds 1..n-1 each party
    trains from the global model and returns its weights, which the server averages (:func:`fedavg`); in round n
    each trains and keeps its teacher, and returns its predictions on the public pool and its test accuracy."""
    state: Mapping[str, Any] = w0
    for r in range(1, rounds):
        log(f"FedAvg round {r}/{rounds}: {T} parties ({executor.engine})")
        got = executor.call("fedavg", {i: {"round": r, "start": dict(state)} for i in range(T)})
        state = fedavg([got[i] for i in range(T)])
    log(f"round {rounds}/{rounds}: {T} parties train locally and keep their teachers ({executor.engine})")
    got = executor.call("teach", {i: {"start": dict(state)} for i in range(T)})
    return {"preds": np.stack([got[i]["preds"] for i in range(T)]),
            "test_acc": np.array([float(got[i]["test_acc"]) for i in range(T)])}


def party_setup(config: "Config", seed: int) -> tuple:
    """What a party (teacher) rebuilds before its tasks (see :mod:`dpaudit.training.parties`): the split data,
    the model spec and the teachers' shares (it reads only its own)."""
    data, parts = config.prepare_data(seed)
    spec = model_spec(config.method.model, config.method.model_kwargs, data.dataset)
    return config, spec, data, parts, int(seed)


def party_count(config: "Config", seed: int) -> int:
    """The number of parties (teachers) of a run."""
    return int(config.method.teachers)


def _party_fedavg(setup: tuple, party: int, payload: Mapping[str, Any], state: Any) -> tuple[dict, Any]:
    """Round r < n at teacher ``party``: train from the global model (model ``party`` of round r's group)."""
    config, spec, data, parts, seed = setup
    r = int(payload["round"])
    g = train_group(spec, [data.xy(parts[party])], config.method.teacher_train, seed=derive_seed(seed, "fedavg", r),
                    device=config.run.device, progress=False, init_state=payload["start"], model_offset=party)
    return dict(g.state_dict(0)), state


def _party_teach(setup: tuple, party: int, payload: Mapping[str, Any], state: Any) -> tuple[dict, Any]:
    """Round n at teacher ``party``: train locally from the global model, keep the teacher, report its votes."""
    config, spec, data, parts, seed = setup
    g = train_group(spec, [data.xy(parts[party])], config.method.teacher_train,
                    seed=derive_seed(seed, "fedavg", config.method.rounds), device=config.run.device, progress=False,
                    init_state=payload["start"], model_offset=party)
    X_pub, _ = data.xy(data.splits.public)
    X_te, y_te = data.xy(data.splits.test)
    return {"preds": g.predict(X_pub)[0], "test_acc": float((g.predict(X_te)[0] == y_te).mean())}, state


#: The teachers' side of a run when they run elsewhere (see :mod:`dpaudit.training.parties`).
PARTY_TASKS = {"fedavg": _party_fedavg, "teach": _party_teach}


class Config(MethodConfig):
    """A FREDY run: ``[data] name``/``data_dir``, ``[method]`` (:class:`FREDYConfig`, with
    ``[method.teacher_train]``, ``[method.student_train]``, ``[method.baseline_train]``) and ``[run]``."""

    method_cls = FREDYConfig
    flat_family = "fredy"

    def prepare_data(self, seed: int) -> tuple[Any, list[np.ndarray]]:
        """The split data and the teachers' (clients') disjoint shares of its private part."""
        return teacher_parts(self.dataset, self.method, seed=seed, data_dir=self.data_dir, owner="FREDY teachers")


def run(config: Config, out: str | Path, *, seed: int = 0, progress: Any = True, overwrite: bool = False) -> RunResult:
    """Run FREDY (Algorithm 1) and write the student's release to ``out`` and, with ``nonprivate_baseline``,
    the non-private baseline's to ``out/nonprivate``. Each FedAvg round is checkpointed beside ``out``."""
    return execute(config, out, seed=seed, progress=progress, overwrite=overwrite, body=_train, config_cls=Config)


def _train(config: Config, ctx: RunContext) -> Outcome:
    seed, cache, device, progress = ctx.seed, ctx.cache, config.run.device, ctx.progress
    log = ctx.reporter.log
    data, parts = config.prepare_data(seed)
    cfg = config.method
    ds = data.dataset
    C = int(ds.num_classes)
    spec = model_spec(cfg.model, cfg.model_kwargs, ds)
    if not spec.is_torch:
        raise ParameterError(f"The 'model' parameter of FREDYConfig must be a neural model (FedAvg averages weights). Got {cfg.model!r} instead.")
    X_pub, y_pub = data.xy(data.splits.public)
    X_te, y_te = data.xy(data.splits.test)

    datasets = [data.xy(p) for p in parts]
    w0 = initial_state(spec, derive_seed(seed, "fedavg", 0))

    # -- FedAvg rounds 1..n-1 (each checkpointed), then the local last round -------------------------
    def teachers() -> dict[str, np.ndarray]:
        from dpaudit.training.parties import current_executor

        executor = current_executor()
        if executor is not None:
            return _federated_teachers(executor, len(datasets), cfg.rounds, w0, log)
        g = fedavg_teachers(spec, datasets, cfg.teacher_train, rounds=cfg.rounds, w0=w0, seed=seed, device=device,
                            cache=cache, progress=progress)
        return {"preds": g.predict(X_pub), "test_acc": (g.predict(X_te) == y_te[None, :]).mean(axis=1)}

    # the teachers depend on exactly these settings (not on gamma, the queries, the student or the baseline), so a
    # sweep over gamma inside dpaudit.training.methods.common.shared_stages trains them once
    key = stage_key("fredy", spec.to_dict(), [np.asarray(p, dtype=np.int64) for p in parts], data.spec,
                    data.splits.public, data.splits.test, cfg.teacher_train.to_dict(), int(cfg.rounds), int(seed), device)
    tp = cache.get_or_run("teachers", teachers, share=key)

    # -- noisy labelling and the student ---------------------------------------------------------------
    q = select_queries(len(X_pub), queries=cfg.queries, fraction=cfg.query_fraction, rng=derive_rng(seed, "queries"), owner="FREDY")
    votes = vote_counts(tp["preds"][:, q], C)
    labels = noisy_argmax(votes, cfg.gamma, derive_rng(seed, "noise"))
    log(f"student: training on {len(q)} labelled queries")
    student = train_group(spec, [(X_pub[q], labels)], cfg.student_train, seed=derive_seed(seed, "students"), device=device,
                          checkpoint_dir=cache.subdir("student.ckpt"), progress=progress, init_state=w0).member(0)
    utility = student_utility(student, data, teacher_acc=tp["test_acc"], labels=labels, queries=q, teachers=cfg.teachers)

    # -- the non-private baseline --------------------------------------------------------------------------
    baseline = None
    if cfg.nonprivate_baseline:
        base_idx = data.splits.train if cfg.baseline_data == "private" else np.asarray(data.splits.public)[q]
        log(f"non-private baseline: the same architecture on {'the teachers pooled data' if cfg.baseline_data == 'private' else 'the student training records, true labels'}")
        baseline = train_group(spec, [data.xy(base_idx)], cfg.baseline_train, seed=derive_seed(seed, "nonprivate"),
                               device=device, checkpoint_dir=cache.subdir("nonprivate.ckpt"), progress=progress,
                               init_state=w0).member(0)
        utility["nonprivate_accuracy"] = accuracy(baseline.predict_proba(X_te), y_te)

    # -- accounting ------------------------------------------------------------------------------------------
    sens = fredy_sensitivity(cfg.teachers, cfg.rounds, cfg.sensitivity)
    assumptions = (FEDAVG_ASSUMPTION,) if cfg.rounds >= 2 else ()
    if cfg.gamma is None:
        ledger, accounting, claim = noiseless_accounting(
            "FREDY (noiseless)", cfg.delta,
            "gamma = None: the teachers' votes were answered without noise; no differential-privacy guarantee holds.",
            claim_text="FREDY without noise")
    else:
        ledger = central_ledger(cfg.delta, LaplaceNoisyMax(gamma=cfg.gamma, sensitivity=sens, votes=votes),
                                assumptions=assumptions)
        di = central_ledger(cfg.delta, LaplaceNoisyMax(gamma=cfg.gamma, sensitivity=sens, num_queries=len(q)))
        paper = central_ledger(cfg.delta, LaplaceNoisyMax(gamma=cfg.gamma, sensitivity=2.0, votes=votes))
        what = "worst case after FedAvg" if sens > 2 else "PATE's assumption"
        accounting = accounting_result(
            "FREDY (Laplace noisy max over FedAvg-trained teachers)",
            [(f"sensitivity {sens:g} ({what}), data-dependent, {len(q)} queries", ledger),
             (f"sensitivity {sens:g}, data-independent, {len(q)} queries", di),
             (f"sensitivity 2 (PATE's one-record-one-teacher assumption), data-dependent, {len(q)} queries", paper)],
            extra_assumptions=assumptions,
            facts={"per_query_laplace_parameter": cfg.gamma, "sensitivity": sens, "rounds": cfg.rounds},
        )
        claim = {
            "epsilon": accounting.statements[2].epsilon, "delta": cfg.delta, "granularity": "example",
            "text": (f"FREDY (2023) answers {len(q)} queries with per-query Laplace parameter {cfg.gamma}; the PATE-style "
                     "guarantee it relies on assumes one record affects one teacher"),
        }
    membership = balanced_membership(data.splits.train, data.splits.test, data.splits.attacker, derive_rng(seed, "membership"))
    main = Release(
        method="fredy", dataset=data.spec, params=config_to_dict(cfg), utility=utility, classifier=student,
        train_config=cfg.student_train, ledger=ledger, statement=accounting, claim=claim, membership=membership,
        votes=votes, assumptions=accounting.statement.assumptions,
        flags=(("teachers_not_independent", FEDAVG_ASSUMPTION),) if cfg.rounds >= 2 else (),
    )
    extras: dict[str, Release] = {}
    if baseline is not None:
        reason = ("Non-private baseline: trained directly on the teachers' pooled private data, no DP mechanism."
                  if cfg.baseline_data == "private" else
                  "Non-private baseline (the paper's): trained on the student's training records (answered public "
                  "records) with their true labels, no DP mechanism.")
        base_membership = membership if cfg.baseline_data == "private" else balanced_membership(
            base_idx, data.splits.test, data.splits.attacker, derive_rng(seed, "membership", 1))
        nledger = new_ledger(cfg.delta)
        nledger.add_assumption(reason)
        extras["nonprivate"] = Release(
            method="fredy_nonprivate", dataset=data.spec, params=config_to_dict(cfg),
            utility={"test_accuracy": utility["nonprivate_accuracy"]}, classifier=baseline, train_config=cfg.baseline_train,
            ledger=nledger, statement=no_privacy_result("none (non-private baseline)", cfg.delta, reason),
            claim={"epsilon": float("inf"), "delta": cfg.delta, "granularity": "none", "text": reason},
            membership=base_membership, votes=None, assumptions=(reason,),
        )
    return Outcome(main, extras)

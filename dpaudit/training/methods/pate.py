"""PATE: private aggregation of teacher ensembles (Papernot, Abadi, Erlingsson, Goodfellow, Talwar, ICLR 2017).

The private training split is cut into ``teachers`` disjoint subsets; one teacher is trained on each (all at
once by the ensemble trainer for torch models). The teachers vote on a chosen number (or fraction) of public
queries; each answer is the Laplace noisy max :math:`\\arg\\max_c (n_c + \\mathrm{Lap}(1/\\gamma))` of the vote
histogram. A student trained on the answered queries is the released model. With ``n*t`` teachers this is
FedKT's centralised upper bound (Li, He, Song 2021, Table 1).

Privacy: one record lies in one teacher's subset and moves one vote, so each answer is ``2*gamma``-DP
(replace-one); the ledger records the answered queries with their votes (data-dependent analysis, PATE 2017
Theorem 3) under party ``"central"``, and the data-independent figure is reported beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Mapping

import numpy as np

from dpaudit.accountants.events import LaplaceNoisyMax
from dpaudit.errors import check_float, check_int, check_probability
from dpaudit.training.limits import MAX_MODELS, MAX_RECORDS
from dpaudit.training.ensemble import TrainConfig
from dpaudit.training.methods.common import (accounting_result, balanced_membership, central_ledger,
    config_to_dict, data_independent_ledger, DataBundle, derive_rng, derive_seed, FamilySettings, model_spec,
    noiseless_accounting, noisy_argmax, PATE_ASSUMPTION, schedule, select_queries, StageCache, stage_key, student_utility,
    teacher_parts, train_group, vote_counts)
from dpaudit.training.methods.scaffold import MethodConfig, Outcome, Release, RunContext, RunResult, execute

__all__ = ["Config", "PATEConfig", "run", "teacher_predictions", "pate_student"]


@dataclass(frozen=True)
class PATEConfig(FamilySettings):
    """Parameters of a PATE run.

    Attributes
    ----------
    teachers:
        Number of teachers M; the private split is cut into M disjoint, near-equal subsets.
    gamma:
        Inverse Laplace scale: each vote count gets :math:`\\mathrm{Lap}(1/\\gamma)` noise. ``None`` answers
        with the noiseless argmax (a non-private baseline; the release then claims no guarantee).
    queries, query_fraction:
        How many public records are answered: ``queries`` if given, else ``query_fraction`` of the public pool.
    teacher_model, student_model:
        Model names of :mod:`dpaudit.training.models` (student defaults to the teacher's).
    teacher_train, student_train:
        Training schedules.
    delta:
        Target delta of the (epsilon, delta) statement.
    public_fraction, test_fraction, attacker_fraction, num_samples:
        Passed to ``split_dataset`` / ``load_dataset``.
    """

    method_name: ClassVar[str] = "pate"

    teachers: int = 10
    gamma: float | None = 1.0
    queries: int | None = None
    query_fraction: float = 1.0
    teacher_model: str = "mlp"
    teacher_model_kwargs: Mapping[str, Any] = field(default_factory=dict)
    student_model: str | None = None
    student_model_kwargs: Mapping[str, Any] | None = None
    teacher_train: TrainConfig = schedule(epochs=30, batch_size=32, lr=1e-2)
    student_train: TrainConfig = schedule(epochs=20, batch_size=64, lr=1e-2)

    def __post_init__(self) -> None:
        o = "PATEConfig"
        check_int(self.teachers, "teachers", o, low=1, high=MAX_MODELS)
        if self.gamma is not None:
            check_float(self.gamma, "gamma", o, low=0.0, low_open=True)
        if self.queries is not None:
            check_int(self.queries, "queries", o, low=1, high=MAX_RECORDS)
        check_probability(self.query_fraction, "query_fraction", o, allow_one=True)
        self.check_family(o)


# --------------------------------------------------------------------------------------------------
# Shared with FedKT and FREDY
# --------------------------------------------------------------------------------------------------


def teacher_predictions(
    spec: Any,
    parts: list[np.ndarray],
    data: DataBundle,
    train: TrainConfig,
    *,
    seed: int,
    device: str | None,
    cache: StageCache,
    stage: str,
) -> dict[str, np.ndarray]:
    """Train one model per index array in ``parts`` and return their predictions on the public pool
    (``preds`` (M, P)) and test accuracies (``test_acc`` (M,)); cached as stage ``stage``."""

    def run() -> dict[str, np.ndarray]:
        cache.reporter.log(f"{stage}: training {len(parts)} {spec.name} models")
        group = train_group(
            spec, [data.xy(p) for p in parts], train, seed=seed, device=device,
            checkpoint_dir=cache.subdir(stage + ".ckpt"), progress=cache.reporter,
        )
        X_pub, _ = data.xy(data.splits.public)
        X_te, y_te = data.xy(data.splits.test)
        test_pred = group.predict(X_te)
        return {"preds": group.predict(X_pub), "test_acc": (test_pred == y_te[None, :]).mean(axis=1)}

    # the teachers depend on exactly these (never on the noise or the queries): shareable across a sweep
    key = stage_key(spec.to_dict(), [np.asarray(p, dtype=np.int64) for p in parts], data.spec, data.splits.public,
                    data.splits.test, train.to_dict(), int(seed), device)
    return cache.get_or_run(stage, run, share=key)


def pate_student(
    teacher_preds: np.ndarray,
    data: DataBundle,
    *,
    num_classes: int,
    gamma: float | None,
    queries: int | None,
    query_fraction: float,
    student_spec: Any,
    student_train: TrainConfig,
    seed: int,
    device: str | None,
    cache: StageCache,
    stage: str,
) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray]:
    """Answer queries by Laplace noisy max over ``teacher_preds`` (M, P) and train a student on them.

    Returns ``(student, query_idx, votes, labels)``: indices into the public pool, the (k, C) vote histograms
    of the answered queries, and the noisy labels.
    """
    P = teacher_preds.shape[1]
    q = select_queries(P, queries=queries, fraction=query_fraction, rng=derive_rng(seed, "queries"), owner="PATE")
    votes = vote_counts(teacher_preds[:, q], num_classes)
    labels = noisy_argmax(votes, gamma, derive_rng(seed, "noise"))
    X_pub, _ = data.xy(data.splits.public)
    cache.reporter.log(f"{stage}: training the student on {len(q)} labelled queries")
    group = train_group(
        student_spec, [(X_pub[q], labels)], student_train, seed=derive_seed(seed, "students"), device=device,
        checkpoint_dir=cache.subdir(stage + ".ckpt"), progress=cache.reporter,
    )
    return group.member(0), q, votes, labels


# --------------------------------------------------------------------------------------------------
# The method
# --------------------------------------------------------------------------------------------------


class Config(MethodConfig):
    """A PATE run: ``[data] name``/``data_dir``, ``[method]`` (:class:`PATEConfig`, with
    ``[method.teacher_train]`` and ``[method.student_train]``) and ``[run]``."""

    method_cls = PATEConfig
    flat_family = "pate"

    def prepare_data(self, seed: int) -> tuple[DataBundle, list[np.ndarray]]:
        """The split data and the teachers' disjoint subsets of its private part."""
        return teacher_parts(self.dataset, self.method, seed=seed, data_dir=self.data_dir, owner="PATE teachers")


def run(config: Config, out: str | Path, *, seed: int = 0, progress: Any = True, overwrite: bool = False) -> RunResult:
    """Run PATE and write its release bundle to ``out``.

    Steps: disjoint teacher subsets of the private split -> teachers (ensemble trainer) -> Laplace noisy max on
    the chosen public queries -> student on the answered queries -> ledger (party ``"central"``) -> release.
    Interrupted runs resume from the checkpoints beside ``out``.
    """
    return execute(config, out, seed=seed, progress=progress, overwrite=overwrite, body=_train, config_cls=Config)


def _train(cfg: Config, ctx: RunContext) -> Outcome:
    config, seed, cache, device = cfg.method, ctx.seed, ctx.cache, cfg.run.device
    data, parts = cfg.prepare_data(seed)
    ds = data.dataset
    t_spec = model_spec(config.teacher_model, config.teacher_model_kwargs, ds)
    s_spec = model_spec(config.student_model or config.teacher_model,
                        config.student_model_kwargs if config.student_model_kwargs is not None else config.teacher_model_kwargs, ds)

    tp = teacher_predictions(t_spec, parts, data, config.teacher_train, seed=derive_seed(seed, "teachers"),
                             device=device, cache=cache, stage="teachers")
    student, q, votes, labels = pate_student(
        tp["preds"], data, num_classes=ds.num_classes, gamma=config.gamma, queries=config.queries,
        query_fraction=config.query_fraction, student_spec=s_spec, student_train=config.student_train,
        seed=seed, device=device, cache=cache, stage="student",
    )
    utility = student_utility(student, data, teacher_acc=tp["test_acc"], labels=labels, queries=q,
                              teachers=config.teachers)
    if config.gamma is None:
        ledger, accounting, claim = noiseless_accounting(
            "PATE (noiseless)", config.delta,
            "gamma = None: the queries were answered without noise, so no differential-privacy guarantee holds.",
            claim_text="non-private PATE baseline")
    else:
        ledger = central_ledger(config.delta, LaplaceNoisyMax(gamma=config.gamma, sensitivity=2.0, votes=votes),
                                assumptions=(PATE_ASSUMPTION,))
        accounting = accounting_result(
            "PATE (Laplace noisy max)",
            [("data-dependent (PATE 2017, Thm 3)", ledger),
             ("data-independent", data_independent_ledger(ledger))],
        )
        claim = {
            "epsilon": accounting.epsilon, "delta": config.delta, "granularity": "example",
            "text": f"PATE (Papernot et al. 2017): {len(q)} Laplace noisy-max answers with gamma={config.gamma}, "
                    "data-dependent moments/RDP analysis",
        }
    membership = balanced_membership(data.splits.train, data.splits.test, data.splits.attacker, derive_rng(seed, "membership"))
    return Outcome(Release(
        method="pate", dataset=data.spec, params=config_to_dict(config), utility=utility, classifier=student,
        train_config=config.student_train if s_spec.is_torch else None, ledger=ledger, statement=accounting, claim=claim,
        membership=membership, votes=votes, assumptions=accounting.statement.assumptions,
    ))

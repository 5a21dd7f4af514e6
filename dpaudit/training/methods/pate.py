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

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Mapping

import numpy as np

from dpaudit.accountants.events import LaplaceNoisyMax
from dpaudit.errors import ParameterError, check_float, check_int, check_probability
from dpaudit.training.ensemble import TrainConfig
from dpaudit.training.methods.common import (
    MethodResult,
    StageCache,
    accuracy,
    balanced_membership,
    config_to_dict,
    derive_rng,
    derive_seed,
    disjoint_splits,
    log,
    noisy_argmax,
    select_queries,
    start_run,
    train_group,
    vote_counts,
    PATE_ASSUMPTION,
    accounting_result,
    data_independent_ledger,
    finish_run,
    new_ledger,
    no_privacy_result,
)

__all__ = ["PATEConfig", "run_pate", "DataBundle", "load_data", "model_spec", "release_dataset_spec"]


@dataclass(frozen=True)
class PATEConfig:
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
    teacher_train: TrainConfig = field(
        default_factory=lambda: TrainConfig(epochs=30, batch_size=32, lr=1e-2), metadata={"train_config": True}
    )
    student_train: TrainConfig = field(
        default_factory=lambda: TrainConfig(epochs=20, batch_size=64, lr=1e-2), metadata={"train_config": True}
    )
    delta: float = 1e-5
    public_fraction: float = 0.25
    test_fraction: float = 0.2
    attacker_fraction: float = 0.15
    num_samples: int | None = None

    def __post_init__(self) -> None:
        o = "PATEConfig"
        check_int(self.teachers, "teachers", o, low=1)
        if self.gamma is not None:
            check_float(self.gamma, "gamma", o, low=0.0, low_open=True)
        if self.queries is not None:
            check_int(self.queries, "queries", o, low=1)
        check_probability(self.query_fraction, "query_fraction", o, allow_one=True)
        check_probability(self.delta, "delta", o)
        _check_split(self, o)
        for name in ("teacher_train", "student_train"):
            if not isinstance(getattr(self, name), TrainConfig):
                raise ParameterError(f"The '{name}' parameter of {o} must be a TrainConfig. Got {getattr(self, name)!r} instead.")


def _check_split(cfg: Any, owner: str) -> None:
    for name in ("public_fraction", "test_fraction", "attacker_fraction"):
        check_probability(getattr(cfg, name), name, owner)
    total = cfg.public_fraction + cfg.test_fraction + cfg.attacker_fraction
    if total >= 1.0:
        raise ParameterError(
            f"The split fractions of {owner} (public + test + attacker) must sum to < 1 to leave private data. Got {total} instead."
        )
    if cfg.num_samples is not None:
        check_int(cfg.num_samples, "num_samples", owner, low=10)


# --------------------------------------------------------------------------------------------------
# Shared with FedKT and FREDY
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DataBundle:
    """A loaded data set with its splits, as every PATE-family run uses them."""

    dataset: Any  # dpaudit.training.data.Dataset
    splits: Any   # dpaudit.training.data.Splits
    spec: dict[str, Any]  # release.json "dataset"

    def xy(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.dataset.X[idx], self.dataset.y[idx]


def load_data(name: str, cfg: Any, *, seed: int, data_dir: str | Path | None) -> DataBundle:
    from dpaudit.training.data import load_dataset, split_dataset

    ds = load_dataset(name, data_dir=data_dir, seed=seed, num_samples=cfg.num_samples)
    splits = split_dataset(
        ds, seed=seed, public_fraction=cfg.public_fraction, test_fraction=cfg.test_fraction,
        attacker_fraction=cfg.attacker_fraction,
    )
    return DataBundle(ds, splits, release_dataset_spec(name, seed, cfg.num_samples, data_dir))


def release_dataset_spec(name: str, seed: int, num_samples: int | None, data_dir: str | Path | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": name, "seed": int(seed), "num_samples": num_samples}
    if data_dir is not None:
        spec["data_dir"] = str(data_dir)
    return spec


def model_spec(name: str, kwargs: Mapping[str, Any] | None, ds: Any) -> Any:
    from dpaudit.training.models import ModelSpec

    return ModelSpec(name=name, input_shape=tuple(ds.input_shape), num_classes=int(ds.num_classes), kwargs=dict(kwargs or {}))


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
    progress: bool,
) -> dict[str, np.ndarray]:
    """Train one model per index array in ``parts`` and return their predictions on the public pool
    (``preds`` (M, P)) and test accuracies (``test_acc`` (M,)); cached as stage ``stage``."""

    def run() -> dict[str, np.ndarray]:
        log(progress, f"{stage}: training {len(parts)} {spec.name} models")
        group = train_group(
            spec, [data.xy(p) for p in parts], train, seed=seed, device=device,
            checkpoint_dir=cache.subdir(stage + ".ckpt"), progress=progress,
        )
        X_pub, _ = data.xy(data.splits.public)
        X_te, y_te = data.xy(data.splits.test)
        test_pred = group.predict(X_te)
        return {"preds": group.predict(X_pub), "test_acc": (test_pred == y_te[None, :]).mean(axis=1)}

    return cache.get_or_run(stage, run)


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
    progress: bool,
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
    log(progress, f"{stage}: training the student on {len(q)} labelled queries")
    group = train_group(
        student_spec, [(X_pub[q], labels)], student_train, seed=derive_seed(seed, "students"), device=device,
        checkpoint_dir=cache.subdir(stage + ".ckpt"), progress=progress,
    )
    return group.member(0), q, votes, labels


# --------------------------------------------------------------------------------------------------
# The method
# --------------------------------------------------------------------------------------------------


def run_pate(
    config: PATEConfig,
    *,
    dataset: str,
    out: str | Path,
    seed: int,
    data_dir: str | Path | None = None,
    device: str | None = None,
    overwrite: bool = False,
    progress: bool = True,
) -> MethodResult:
    """Run PATE and write its release bundle to ``out``.

    Steps: disjoint teacher subsets of the private split -> teachers (ensemble trainer) -> Laplace noisy max on
    the chosen public queries -> student on the answered queries -> ledger (party ``"central"``) -> release.
    Interrupted runs resume from the checkpoints beside ``out`` (see :func:`~.common.checkpoint_dir_for`).
    """
    run = start_run("pate", config, PATEConfig, dataset=dataset, out=out, seed=seed, data_dir=data_dir,
                    overwrite=overwrite, progress=progress)
    seed, cache, data, ck = run.seed, run.cache, run.data, run.checkpoints
    ds = data.dataset
    t_spec = model_spec(config.teacher_model, config.teacher_model_kwargs, ds)
    s_spec = model_spec(config.student_model or config.teacher_model,
                        config.student_model_kwargs if config.student_model_kwargs is not None else config.teacher_model_kwargs, ds)

    parts = disjoint_splits(data.splits.train, config.teachers, derive_rng(seed, "partition"), owner="PATE teachers")
    tp = teacher_predictions(t_spec, parts, data, config.teacher_train, seed=derive_seed(seed, "teachers"),
                             device=device, cache=cache, stage="teachers", progress=progress)
    student, q, votes, labels = pate_student(
        tp["preds"], data, num_classes=ds.num_classes, gamma=config.gamma, queries=config.queries,
        query_fraction=config.query_fraction, student_spec=s_spec, student_train=config.student_train,
        seed=seed, device=device, cache=cache, stage="student", progress=progress,
    )
    X_te, y_te = data.xy(data.splits.test)
    _, y_pub = data.xy(data.splits.public)
    utility = {
        "test_accuracy": accuracy(student.predict_proba(X_te), y_te),
        "teacher_accuracy_mean": float(np.mean(tp["test_acc"])),
        "label_accuracy": accuracy(labels, y_pub[q]),
        "num_queries": int(len(q)),
        "num_teachers": int(config.teachers),
    }

    if config.gamma is None:
        ledger = new_ledger(config.delta)
        reason = "gamma = None: the queries were answered without noise, so no differential-privacy guarantee holds."
        ledger.add_assumption(reason)
        accounting = no_privacy_result("PATE (noiseless)", config.delta, reason)
        claim = {"epsilon": float("inf"), "delta": config.delta, "granularity": "example", "text": "non-private PATE baseline"}
    else:
        ledger = new_ledger(config.delta)
        ledger.add_assumption(PATE_ASSUMPTION)
        ledger.record("central", LaplaceNoisyMax(gamma=config.gamma, sensitivity=2.0, votes=votes))
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
    from dpaudit.training.release import write_release

    path = write_release(
        out, method="pate", dataset=data.spec, params=config_to_dict(config), seed=seed, utility=utility,
        classifier=student, train_config=config.student_train if s_spec.is_torch else None, ledger=ledger, statement=accounting, claim=claim,
        membership=membership, votes=votes, assumptions=accounting.statement.assumptions, overwrite=overwrite,
    )
    finish_run(ck)
    log(progress, f"release written to {path}")
    return MethodResult("pate", utility, accounting, Path(path))

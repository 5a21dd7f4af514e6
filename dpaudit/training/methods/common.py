"""Shared pieces of the PATE-family methods (PATE, FedKT, FREDY).

Pure numpy logic (vote histograms, consistent voting, Laplace noisy max vectorised over queries, query
selection, disjoint splits, balanced membership ground truth), the family's data loading and split checks,
ledgers and accounting results, stage checkpoints that let an interrupted run resume, and a thin wrapper
that trains a group of models of one architecture (torch models through the ensemble trainer, tree models
one by one). The run scaffold (config, output, release writing) is :mod:`.scaffold`.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from dpaudit._io import load_npz_file, save_npz
from dpaudit.accountants.statement import AccountingResult, PrivacyStatement
from dpaudit.errors import DataError, ParameterError, check_float, check_int, check_probability
from dpaudit.training.limits import MAX_RECORDS
from dpaudit.progress import Reporter, as_reporter

__all__ = [
    "config_to_dict",
    "vote_counts",
    "consistent_vote_counts",
    "noisy_argmax",
    "top_two_gap",
    "select_queries",
    "disjoint_splits",
    "balanced_membership",
    "accuracy",
    "derive_rng",
    "derive_seed",
    "StageCache",
    "shared_stages",
    "stage_key",
    "ModelGroup",
    "train_group",
    "no_privacy_result",
    "new_ledger",
    "data_independent_ledger",
    "accounting_result",
    "PATE_ASSUMPTION",
    "DataBundle",
    "load_data",
    "release_dataset_spec",
    "model_spec",
    "check_split",
    "FamilySettings",
    "schedule",
    "teacher_parts",
    "noiseless_accounting",
    "central_ledger",
    "student_utility",
]


PATE_ASSUMPTION = (
    "Each private record lies in exactly one teacher's training subset, so changing one record changes at most "
    "one teacher's vote (L1 change 2 of a vote histogram); neighbouring datasets differ by replacing one record."
)


def new_ledger(delta: float):
    """A :class:`~dpaudit.accountants.ledger.PrivacyLedger` at ``delta`` with the default (RDP) accountant."""
    from dpaudit.accountants.ledger import PrivacyLedger

    return PrivacyLedger(delta=delta)


def data_independent_ledger(ledger: Any):
    """A copy of ``ledger`` with the vote histograms dropped from every noisy-max event (the data-independent
    analysis of the same queries: Laplace pure-DP composition)."""
    from dpaudit.accountants.events import LaplaceNoisyMax, flatten

    out = new_ledger(ledger.delta)
    for text in ledger.assumptions:
        out.add_assumption(text)
    for party in ledger.parties:
        for ev, count in flatten(ledger.events(party)):
            if isinstance(ev, LaplaceNoisyMax) and ev.votes is not None:
                ev = LaplaceNoisyMax(gamma=ev.gamma, sensitivity=ev.sensitivity, num_queries=ev.num_queries)
            out.record(party, ev, count)
    return out


def accounting_result(
    mechanism: str,
    ledgers: Sequence[tuple[str, Any]],
    *,
    extra_assumptions: Sequence[str] = (),
    facts: Mapping[str, Any] | None = None,
    parameters: Mapping[str, Any] | None = None,
) -> AccountingResult:
    """One statement per ``(label, ledger)`` (each ledger's ``overall()``: max over parties, i.e. parallel
    composition over disjoint data); ``extra_assumptions`` are added to each.

    The first two are the data-dependent and data-independent analyses of the same events (routes
    ``"data-dependent"`` and ``"data-independent"``): both are valid upper bounds, so the headline is the smaller of
    them (:func:`~dpaudit.accountants.statement.pick_headline`; on a tie the data-independent one, which can be
    published: a data-dependent figure is not itself private). Later ones (another granularity, the paper's
    assumption) name no route: they are shown beside the headline, never picked.
    """
    from dpaudit.accountants.statement import ROUTE_DATA_DEPENDENT, ROUTE_DATA_INDEPENDENT, join_assumptions

    statements = []
    warnings: list[str] = []
    routes = (ROUTE_DATA_DEPENDENT, ROUTE_DATA_INDEPENDENT) if len(ledgers) > 1 else ()
    for i, (label, ledger) in enumerate(ledgers):
        st = ledger.overall()
        statements.append(
            dataclasses.replace(st, label=f"{label}; {st.label}" if st.label else label,
                                assumptions=join_assumptions(st.assumptions, extra_assumptions),
                                route=routes[i] if i < len(routes) else "")
        )
    return AccountingResult(  # the headline: pick_headline over the two routes
        mechanism=mechanism, statements=tuple(statements), parameters=dict(parameters or {}),
        facts=dict(facts or {}), warnings=tuple(warnings),
    )


def no_privacy_result(mechanism: str, delta: float, reason: str) -> AccountingResult:
    """An honest statement for a release that no DP mechanism protects: epsilon = inf."""
    st = PrivacyStatement(
        epsilon=math.inf,
        delta=delta,
        method="none",
        label="no DP mechanism",
        assumptions=(reason,),
    )
    return AccountingResult(mechanism=mechanism, statements=(st,))


def central_ledger(delta: float, *events: Any, assumptions: Sequence[str] = ()) -> Any:
    """A ledger at ``delta`` holding ``events`` under the one party ``"central"`` (a curator answering queries
    about the whole private split), with ``assumptions`` stated."""
    ledger = new_ledger(delta)
    for text in assumptions:
        ledger.add_assumption(text)
    for ev in events:
        ledger.record("central", ev)
    return ledger


def noiseless_accounting(mechanism: str, delta: float, reason: str, *, claim_text: str,
                         granularity: str = "example") -> tuple[Any, AccountingResult, dict[str, Any]]:
    """``(ledger, accounting, claim)`` of a run that added no noise: an empty ledger stating ``reason``,
    epsilon = inf, and a claim of no guarantee."""
    ledger = new_ledger(delta)
    ledger.add_assumption(reason)
    claim = {"epsilon": float("inf"), "delta": delta, "granularity": granularity, "text": claim_text}
    return ledger, no_privacy_result(mechanism, delta, reason), claim


# --------------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------------


def config_to_dict(config: Any) -> dict[str, Any]:
    """A JSON-ready dict of a method config (TrainConfig fields through their ``to_dict``)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        v = getattr(config, f.name)
        if hasattr(v, "to_dict"):
            v = v.to_dict()
        elif isinstance(v, tuple):
            v = list(v)
        elif isinstance(v, Mapping):
            v = dict(v)
        out[f.name] = v
    return out


# --------------------------------------------------------------------------------------------------
# Votes
# --------------------------------------------------------------------------------------------------


def vote_counts(predictions: np.ndarray, num_classes: int) -> np.ndarray:
    """Vote histogram of ``M`` models on ``Q`` queries.

    Parameters
    ----------
    predictions:
        int array (M, Q): model m's predicted class on query q, in [0, num_classes).
    num_classes:
        C.

    Returns
    -------
    int64 array (Q, C) with ``votes[q, c] = |{m : predictions[m, q] = c}|``; each row sums to M.
    """
    owner = "vote_counts"
    c = check_int(num_classes, "num_classes", owner, low=2)
    p = np.asarray(predictions)
    if p.ndim != 2:
        raise ParameterError(f"The 'predictions' parameter of {owner} must have shape (models, queries). Got shape {p.shape} instead.")
    if p.size and (p.min() < 0 or p.max() >= c):
        raise ParameterError(f"The 'predictions' parameter of {owner} must hold classes in [0, {c}). Got {p.min()}..{p.max()} instead.")
    m, q = p.shape
    flat = (np.arange(q)[None, :] * c + p.astype(np.int64)).ravel()
    return np.bincount(flat, minlength=q * c).reshape(q, c).astype(np.int64)


def consistent_vote_counts(predictions: np.ndarray, num_classes: int) -> np.ndarray:
    """FedKT's consistent voting (Li, He, Song 2021, Algorithm 1 lines 15-21).

    Parameters
    ----------
    predictions:
        int array (n, s, Q): the prediction of student j of party i on query q.

    Returns
    -------
    int64 array (Q, C) with :math:`v_m(x) = s \\cdot |\\{i : \\text{all } s \\text{ students of party } i
    \\text{ predict } m\\}|`. A party whose students disagree contributes nothing.
    """
    p = np.asarray(predictions)
    if p.ndim != 3:
        raise ParameterError(
            f"The 'predictions' parameter of consistent_vote_counts must have shape (parties, partitions, queries). Got shape {p.shape} instead."
        )
    n, s, q = p.shape
    agree = np.all(p == p[:, :1, :], axis=1)  # (n, Q)
    counts = vote_counts(np.where(agree, p[:, 0, :], 0), num_classes)  # placeholder votes for disagreeing parties
    # remove the placeholder votes (class 0) cast by parties that disagree
    counts[:, 0] -= (~agree).sum(axis=0)
    return counts * s


def noisy_argmax(votes: np.ndarray, gamma: float | None, rng: np.random.Generator) -> np.ndarray:
    """Report noisy max: :math:`\\arg\\max_c (v_c + \\mathrm{Lap}(1/\\gamma))` per row, vectorised.

    ``gamma=None`` is the noiseless argmax (FedKT-L0, non-private baselines); no random numbers are drawn.
    Ties go to the lowest class index (numpy's argmax), which only matters without noise.
    """
    v = np.asarray(votes, dtype=np.float64)
    if v.ndim != 2:
        raise ParameterError(f"The 'votes' parameter of noisy_argmax must have shape (queries, classes). Got shape {v.shape} instead.")
    if gamma is None:
        return np.argmax(v, axis=1).astype(np.int64)
    g = check_float(gamma, "gamma", "noisy_argmax", low=0.0, low_open=True)
    return np.argmax(v + rng.laplace(0.0, 1.0 / g, size=v.shape), axis=1).astype(np.int64)


def top_two_gap(votes: np.ndarray) -> np.ndarray:
    """Per query, the largest vote count minus the second largest (>= 0)."""
    v = np.asarray(votes)
    part = np.sort(v, axis=1)
    return part[:, -1] - part[:, -2]


def select_queries(
    num_public: int, *, queries: int | None, fraction: float | None, rng: np.random.Generator, owner: str = "select_queries"
) -> np.ndarray:
    """Indices (sorted, without repetition) of the public records that are answered.

    ``queries`` (a count) wins over ``fraction`` (of ``num_public``, rounded, at least 1).
    """
    n = check_int(num_public, "num_public", owner, low=1)
    if queries is not None:
        k = check_int(queries, "queries", owner, low=1, high=n)
    else:
        frac = check_float(1.0 if fraction is None else fraction, "query_fraction", owner, low=0.0, high=1.0, low_open=True)
        k = max(1, int(round(frac * n)))
    if k == n:
        return np.arange(n, dtype=np.int64)
    return np.sort(rng.choice(n, size=k, replace=False)).astype(np.int64)


def disjoint_splits(indices: np.ndarray, parts: int, rng: np.random.Generator, *, owner: str = "disjoint_splits") -> list[np.ndarray]:
    """Shuffle ``indices`` and cut them into ``parts`` disjoint pieces of near-equal size (their union)."""
    k = check_int(parts, "parts", owner, low=1)
    idx = np.asarray(indices, dtype=np.int64)
    if len(idx) < k:
        raise DataError(f"Cannot split {len(idx)} records into {k} non-empty disjoint subsets ({owner}); use fewer teachers or more data.")
    perm = rng.permutation(idx)
    return [np.sort(p) for p in np.array_split(perm, k)]


def balanced_membership(
    members: np.ndarray, nonmembers: np.ndarray, attacker: np.ndarray, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """Ground truth for the membership attack, balanced: as many members as non-members.

    The larger of the two pools is subsampled (without replacement, by ``rng``) to the size of the smaller.
    """
    m = np.unique(np.asarray(members, dtype=np.int64))
    n = np.unique(np.asarray(nonmembers, dtype=np.int64))
    if np.intersect1d(m, n).size:
        raise DataError("Membership ground truth: members and non-members overlap.")
    k = min(len(m), len(n))
    if len(m) > k:
        m = np.sort(rng.choice(m, size=k, replace=False))
    if len(n) > k:
        n = np.sort(rng.choice(n, size=k, replace=False))
    return {"members": m, "nonmembers": n, "attacker": np.asarray(attacker, dtype=np.int64)}


def accuracy(proba_or_labels: np.ndarray, y: np.ndarray) -> float:
    """Fraction of correct predictions; accepts probabilities (n, C) or labels (n,). NaN when ``y`` is empty."""
    y = np.asarray(y)
    if len(y) == 0:
        return float("nan")
    p = np.asarray(proba_or_labels)
    pred = p.argmax(axis=-1) if p.ndim == 2 else p
    return float(np.mean(pred == y))


# --------------------------------------------------------------------------------------------------
# Seeds
# --------------------------------------------------------------------------------------------------

_TAGS = {
    "split": 1, "partition": 2, "teachers": 3, "queries": 4, "noise": 5, "students": 6, "final": 7,
    "solo": 8, "pate": 9, "membership": 10, "server_queries": 11, "server_noise": 12, "nonprivate": 13, "fedavg": 14,
}


def derive_seed(seed: int, tag: str, *extra: int) -> int:
    """A 31-bit seed for one stage of a run, independent across tags (so resuming reproduces each stage)."""
    ss = np.random.SeedSequence([int(seed), _TAGS[tag], *map(int, extra)])
    return int(ss.generate_state(1, dtype=np.uint32)[0] & 0x7FFFFFFF)


def derive_rng(seed: int, tag: str, *extra: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed), _TAGS[tag], *map(int, extra)]))


# --------------------------------------------------------------------------------------------------
# Output directory and stage checkpoints
# --------------------------------------------------------------------------------------------------


_SHARED_STAGES: contextvars.ContextVar[Path | None] = contextvars.ContextVar("dpaudit_shared_stages", default=None)


@contextlib.contextmanager
def shared_stages(directory: str | Path) -> Iterator[Path]:
    """Within this block, stages that declare what they depend on (``get_or_run(..., share=key)``: the teachers
    of PATE, FedKT and FREDY) are computed once per key and reused by every run, from ``directory``.

    A sweep over the noise level or the number of queries (e.g. an audit of FREDY at three gammas) then trains the
    teachers once: the key holds exactly the settings the teachers depend on (data, their index sets, architecture,
    schedule, seed, device), never the noise or the queries, so a reused stage equals a freshly trained one.
    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    token = _SHARED_STAGES.set(d)
    try:
        yield d
    finally:
        _SHARED_STAGES.reset(token)


def stage_key(*parts: Any) -> str:
    """A hash of ``parts`` (numpy arrays and sequences of them by content, other values as canonical JSON): the
    key of a shareable stage."""
    from dpaudit.executors import fingerprint_arrays

    return fingerprint_arrays(*(p if isinstance(p, (np.ndarray, list, tuple)) else
                                json.dumps(p, sort_keys=True, default=str) for p in parts))


class StageCache:
    """Finished stages of a run as ``.npz`` files (written atomically); a resumed run skips them.

    ``cache.get_or_run("teacher_votes", fn)`` returns the arrays saved by an earlier run, or runs ``fn()``
    (which returns a dict of numpy arrays), saves the result and returns it. ``None`` disables caching.
    ``share=key`` (see :func:`stage_key`) also looks the stage up in, and stores it into, the directory of an
    enclosing :func:`shared_stages` block; ``shared`` lists the stages taken from there.
    """

    def __init__(self, directory: Path | None, progress: bool | Reporter = False) -> None:
        self.directory = directory
        self.reporter = as_reporter(progress)
        self.resumed: list[str] = []
        self.shared: list[str] = []

    def path(self, name: str) -> Path | None:
        return None if self.directory is None else self.directory / f"{name}.npz"

    def get_or_run(self, name: str, fn: Callable[[], Mapping[str, np.ndarray]], *,
                   share: str | None = None) -> dict[str, np.ndarray]:
        p = self.path(name)
        if p is not None and p.exists():
            arrays = _load_npz(p)
            self.resumed.append(name)
            self.reporter.log(f"resumed stage '{name}' from {p}")
            return arrays
        shared_dir = _SHARED_STAGES.get() if share is not None else None
        sp = None if shared_dir is None else shared_dir / f"{name}-{share}.npz"
        if sp is not None and sp.exists():
            arrays = _load_npz(sp)
            self.shared.append(name)
            self.reporter.log(f"stage '{name}' reused from {sp} (same settings)")
        else:
            arrays = {k: np.asarray(v) for k, v in fn().items()}
            if sp is not None:
                save_npz(sp, **arrays)
        if p is not None:
            save_npz(p, **arrays)
        return arrays

    def subdir(self, name: str) -> Path | None:
        if self.directory is None:
            return None
        d = self.directory / name
        d.mkdir(parents=True, exist_ok=True)
        return d


def _load_npz(path: Path) -> dict[str, np.ndarray]:
    return load_npz_file(path, "the stage checkpoint", kinds=None)   # the one capped loader


# --------------------------------------------------------------------------------------------------
# Training a group of models of one architecture
# --------------------------------------------------------------------------------------------------


class ModelGroup:
    """``M`` trained models of one spec: torch models in one :class:`Ensemble`, tree models in a list."""

    def __init__(self, spec: Any, *, ensemble: Any = None, members: Sequence[Any] | None = None) -> None:
        self.spec = spec
        self._ensemble = ensemble
        self._members = None if members is None else list(members)
        self.num_models = ensemble.num_models if ensemble is not None else len(self._members or ())

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """(M, n, C) class probabilities of every model on ``X``."""
        if self._ensemble is not None:
            return np.asarray(self._ensemble.predict_proba(X))
        return np.stack([np.asarray(m.predict_proba(X)) for m in self._members])  # type: ignore[union-attr]

    def predict(self, X: np.ndarray) -> np.ndarray:
        """(M, n) predicted classes."""
        return self.predict_proba(X).argmax(axis=-1).astype(np.int64)

    def state_dict(self, i: int) -> dict[str, Any]:
        """Model i's torch state dict (torch groups only)."""
        if self._ensemble is None:
            raise ParameterError("state_dict is only defined for torch models.")
        return self._ensemble.state_dict(i)

    def member(self, i: int) -> Any:
        if self._ensemble is not None:
            return self._ensemble.member(i)
        return self._members[i]  # type: ignore[index]


def train_group(
    spec: Any,
    datasets: Sequence[tuple[np.ndarray, np.ndarray]],
    config: Any,
    *,
    seed: int,
    device: str | None = None,
    checkpoint_dir: Path | None = None,
    progress: bool | Reporter = True,
    init_state: Mapping[str, Any] | None = None,
    model_offset: int = 0,
) -> ModelGroup:
    """Train model i on ``datasets[i]`` for every i: torch specs all at once with the ensemble trainer
    (resumable through its ``checkpoint_dir``), tree specs one after another with ``fit_classifier``.
    ``model_offset``: model i is model ``model_offset + i`` of a larger group with the same seed (a party
    training its own share of the group; see :func:`~dpaudit.training.ensemble.train_ensemble`)."""
    if spec.is_torch:
        from dpaudit.training.ensemble import train_ensemble

        ens = train_ensemble(
            spec, list(datasets), config, seed=seed, device=device, checkpoint_dir=checkpoint_dir,
            progress=progress, init_state=init_state, model_offset=model_offset,
        )
        return ModelGroup(spec, ensemble=ens)
    from dpaudit.training.ensemble import fit_classifier

    members = [fit_classifier(spec, X, y, config, (seed + model_offset + i) % 2**31) for i, (X, y) in enumerate(datasets)]
    return ModelGroup(spec, members=members)


# --------------------------------------------------------------------------------------------------
# The family's data: one data set, split into private / public / test / attacker
# --------------------------------------------------------------------------------------------------


def check_split(cfg: Any, owner: str) -> None:
    """The split fractions of a PATE-family config leave private data, and ``num_samples`` is sensible."""
    for name in ("public_fraction", "test_fraction", "attacker_fraction"):
        check_probability(getattr(cfg, name), name, owner)
    total = cfg.public_fraction + cfg.test_fraction + cfg.attacker_fraction
    if total >= 1.0:
        raise ParameterError(
            f"The split fractions of {owner} (public + test + attacker) must sum to < 1 to leave private data. Got {total} instead."
        )
    if cfg.num_samples is not None:
        check_int(cfg.num_samples, "num_samples", owner, low=10, high=MAX_RECORDS)


def schedule(**kwargs: Any) -> Any:
    """A training-schedule field of a PATE-family config: a ``TrainConfig(**kwargs)`` default, written in TOML as
    a ``[method.<field>]`` table merged over it."""

    def make() -> Any:
        from dpaudit.training.ensemble import TrainConfig

        return TrainConfig(**kwargs)

    return field(default_factory=make, metadata={"train_config": True})


@dataclass(frozen=True)
class FamilySettings:
    """What every PATE-family config has: the target ``delta`` of its (epsilon, delta) statement and the data
    split (``public_fraction``, ``test_fraction``, ``attacker_fraction`` of the data set, and ``num_samples``
    for the generated data sets), passed to ``split_dataset`` / ``load_dataset``."""

    delta: float = 1e-5
    public_fraction: float = 0.25
    test_fraction: float = 0.2
    attacker_fraction: float = 0.15
    num_samples: int | None = None

    def check_family(self, owner: str) -> None:
        """Check the shared fields and that every training schedule (see :func:`schedule`) is a TrainConfig."""
        from dpaudit.training.ensemble import TrainConfig

        check_probability(self.delta, "delta", owner)
        check_split(self, owner)
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.metadata.get("train_config") and not isinstance(value, TrainConfig):
                raise ParameterError(f"The '{f.name}' parameter of {owner} must be a TrainConfig. Got {value!r} instead.")


@dataclass(frozen=True)
class DataBundle:
    """A loaded data set with its splits, as every PATE-family run uses them."""

    dataset: Any  # dpaudit.training.data.Dataset
    splits: Any   # dpaudit.training.data.Splits
    spec: dict[str, Any]  # release.json "dataset"

    def xy(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.dataset.X[idx], self.dataset.y[idx]


def load_data(name: str, cfg: Any, *, seed: int, data_dir: str | Path | None) -> DataBundle:
    """Load ``name`` and split it with the fractions of the method config ``cfg``."""
    from dpaudit.training.data import load_dataset, split_dataset

    ds = load_dataset(name, data_dir=data_dir, seed=seed, num_samples=cfg.num_samples)
    splits = split_dataset(
        ds, seed=seed, public_fraction=cfg.public_fraction, test_fraction=cfg.test_fraction,
        attacker_fraction=cfg.attacker_fraction,
    )
    return DataBundle(ds, splits, release_dataset_spec(name, seed, cfg.num_samples, data_dir))


def teacher_parts(name: str, cfg: Any, *, seed: int, data_dir: str | Path | None,
                  owner: str) -> tuple[DataBundle, list[np.ndarray]]:
    """The data split with ``cfg``'s fractions and its private part cut into ``cfg.teachers`` disjoint subsets."""
    data = load_data(name, cfg, seed=seed, data_dir=data_dir)
    return data, disjoint_splits(data.splits.train, cfg.teachers, derive_rng(seed, "partition"), owner=owner)


def student_utility(student: Any, data: DataBundle, *, teacher_acc: np.ndarray, labels: np.ndarray,
                    queries: np.ndarray, teachers: int) -> dict[str, Any]:
    """The utility of a student trained on noisy teacher labels: its test accuracy, the teachers' mean test
    accuracy, the labels' accuracy on the answered public ``queries`` and the counts."""
    X_te, y_te = data.xy(data.splits.test)
    _, y_pub = data.xy(data.splits.public)
    return {
        "test_accuracy": accuracy(student.predict_proba(X_te), y_te),
        "teacher_accuracy_mean": float(np.mean(teacher_acc)),
        "label_accuracy": accuracy(labels, y_pub[queries]),
        "num_queries": int(len(queries)),
        "num_teachers": int(teachers),
    }


def release_dataset_spec(name: str, seed: int, num_samples: int | None, data_dir: str | Path | None) -> dict[str, Any]:
    """``release.json``'s ``dataset``: what rebuilds the data the membership indices point into."""
    spec: dict[str, Any] = {"name": name, "seed": int(seed), "num_samples": num_samples}
    if data_dir is not None:
        spec["data_dir"] = str(data_dir)
    return spec


def model_spec(name: str, kwargs: Mapping[str, Any] | None, ds: Any) -> Any:
    """The :class:`~dpaudit.training.models.ModelSpec` of model ``name`` for the data set ``ds``."""
    from dpaudit.training.models import ModelSpec

    return ModelSpec(name=name, input_shape=tuple(ds.input_shape), num_classes=int(ds.num_classes), kwargs=dict(kwargs or {}))

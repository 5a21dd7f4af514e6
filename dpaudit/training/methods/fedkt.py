"""FedKT: one-shot federated learning by two-tier knowledge transfer (Li, He, Song, "Practical One-Shot
Federated Learning for Cross-Silo Setting", IJCAI 2021), Algorithm 1.

n parties; party i cuts its data s times ("partitions") into t disjoint subsets and trains one teacher per
subset (n*s*t teachers, all trained at once by the ensemble trainer for torch models). In each partition the t
teachers label the public queries and a student is trained on them (n*s students). The server takes the
students as teachers: with **consistent voting** a party's s votes count (s times the agreed class) only when
all its s students agree, and it trains the final, released model on the labelled public queries.

Privacy levels (Section 3): L0 adds no noise; L1 adds :math:`\\mathrm{Lap}(1/\\gamma)` to the server's vote
counts (party-level sensitivity 2s, Theorems 1-2; example-level 2z, Theorem 8); L2 adds it to every
partition's vote counts (example-level sensitivity 2 per partition, Theorem 3, parallel composition over
parties, Theorem 4; party-level 2t, Theorems 9-10). The ledger records exactly these events, per party.

Baselines in the same run (Table 1): SOLO (each party trains the final architecture on its own data; mean
test accuracy over parties) and centralised PATE on the pooled private data, with ``pate_teachers`` teachers:
dpaudit's default is ``n*t`` (as many teachers as FedKT trains per partition set); the paper (Appendix, "For PATE,
the number of teacher models is set to be same as the number of parties of FedKT") uses ``n``, which the
paper-scale configs set.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Mapping

import numpy as np

from dpaudit.accountants.events import LaplaceNoisyMax
from dpaudit.errors import DataError, ParameterError, check_bool, check_choice, check_float, check_int, check_probability
from dpaudit.training.limits import MAX_MODELS, MAX_RECORDS
from dpaudit.training.ensemble import TrainConfig
from dpaudit.training.methods.common import (accounting_result, accuracy, balanced_membership, config_to_dict,
    consistent_vote_counts, data_independent_ledger, DataBundle, derive_rng, derive_seed, disjoint_splits,
    FamilySettings, load_data, model_spec, new_ledger, noiseless_accounting, noisy_argmax, schedule,
    select_queries, StageCache, top_two_gap, train_group, vote_counts)
from dpaudit.training.methods.pate import pate_student, teacher_predictions
from dpaudit.training.methods.scaffold import MethodConfig, Outcome, Release, RunContext, RunResult, execute

__all__ = [
    "Config",
    "FedKTConfig",
    "run",
    "LEVELS",
    "party_teacher_subsets",
    "party_labels",
    "server_votes",
    "server_labels",
    "l1_example_sensitivity",
    "record_fedkt_events",
    "party_setup",
    "party_count",
    "PARTY_TASKS",
]

LEVELS = ("L0", "L1", "L2")
PARTITIONS = ("iid", "dirichlet")


@dataclass(frozen=True)
class FedKTConfig(FamilySettings):
    """Parameters of a FedKT run (defaults: small enough for a CPU in well under a minute on ``digits``).

    Attributes
    ----------
    parties, partitions, teachers:
        n, s (partitions per party) and t (teachers per partition) of Algorithm 1.
    partition, beta:
        How the private split is divided among parties: ``"dirichlet"`` label skew with concentration
        ``beta`` (the paper's default 0.5) or ``"iid"``.
    level:
        ``"L0"`` (no noise), ``"L1"`` (server noise) or ``"L2"`` (party noise).
    gamma:
        Inverse Laplace scale of the noise at the level's place (ignored at L0).
    party_queries, party_query_fraction, server_queries, server_query_fraction:
        How many public records each side answers (count wins over fraction), as tuned in Tables 2, 8, 9.
    consistent_voting:
        The server's per-party rule (True, the paper's default) or plain votes of the n*s students.
    teacher_model, student_model, final_model (+ ``*_kwargs``):
        Any classifier of :mod:`dpaudit.training.models` (neural, or trees: e.g. decision-tree teachers and
        random-forest students for tabular data). Students and final model default to the teacher's model.
    teacher_train, student_train, final_train:
        Training schedules.
    baselines:
        Any of ``"solo"`` and ``"pate"``.
    pate_teachers, pate_gamma:
        The PATE baseline's teacher count (None: n*t, dpaudit's default; the paper uses n = ``parties``) and noise
        (None: noiseless, the accuracy upper bound).
    delta:
        Target delta.
    """

    method_name: ClassVar[str] = "fedkt"

    parties: int = 4
    partitions: int = 2
    teachers: int = 3
    partition: str = "dirichlet"
    beta: float = 0.5
    level: str = "L0"
    gamma: float = 0.5
    party_queries: int | None = None
    party_query_fraction: float = 1.0
    server_queries: int | None = None
    server_query_fraction: float = 1.0
    consistent_voting: bool = True
    teacher_model: str = "mlp"
    teacher_model_kwargs: Mapping[str, Any] = field(default_factory=dict)
    student_model: str | None = None
    student_model_kwargs: Mapping[str, Any] | None = None
    final_model: str | None = None
    final_model_kwargs: Mapping[str, Any] | None = None
    teacher_train: TrainConfig = schedule(epochs=30, batch_size=32, lr=1e-2)
    student_train: TrainConfig = schedule(epochs=15, batch_size=64, lr=1e-2)
    final_train: TrainConfig = schedule(epochs=20, batch_size=64, lr=1e-2)
    baselines: tuple[str, ...] = ("solo", "pate")
    pate_teachers: int | None = None
    pate_gamma: float | None = None

    def __post_init__(self) -> None:
        o = "FedKTConfig"
        check_int(self.parties, "parties", o, low=1, high=MAX_MODELS)
        check_int(self.partitions, "partitions", o, low=1, high=MAX_MODELS)
        check_int(self.teachers, "teachers", o, low=1, high=MAX_MODELS)
        models = self.parties * self.partitions * self.teachers
        if models > MAX_MODELS:
            raise ParameterError(f"FedKT trains parties x partitions x teachers models, at most {MAX_MODELS}. Got "
                                 f"{self.parties} x {self.partitions} x {self.teachers} = {models} instead.")
        check_choice(self.partition, "partition", o, PARTITIONS)
        check_float(self.beta, "beta", o, low=0.0, low_open=True)
        check_choice(self.level, "level", o, LEVELS)
        check_float(self.gamma, "gamma", o, low=0.0, low_open=True)
        for name, high in (("party_queries", MAX_RECORDS), ("server_queries", MAX_RECORDS), ("pate_teachers", MAX_MODELS)):
            if getattr(self, name) is not None:
                check_int(getattr(self, name), name, o, low=1, high=high)
        check_probability(self.party_query_fraction, "party_query_fraction", o, allow_one=True)
        check_probability(self.server_query_fraction, "server_query_fraction", o, allow_one=True)
        check_bool(self.consistent_voting, "consistent_voting", o)
        if self.pate_gamma is not None:
            check_float(self.pate_gamma, "pate_gamma", o, low=0.0, low_open=True)
        object.__setattr__(self, "baselines", tuple(self.baselines))
        for b in self.baselines:
            check_choice(b, "baselines", o, ("solo", "pate"))
        self.check_family(o)


# --------------------------------------------------------------------------------------------------
# The algorithm's pieces (pure numpy; tested on their own)
# --------------------------------------------------------------------------------------------------


def party_teacher_subsets(party_indices: list[np.ndarray], partitions: int, teachers: int, seed: int) -> list[list[list[np.ndarray]]]:
    """Algorithm 1 line 2: for party i and partition j, a fresh random cut of the party's whole data into t
    disjoint subsets. Returns ``subsets[i][j][k]`` (index arrays). Every record of party i lies in exactly one
    subset of each partition, so in exactly s of the party's s*t teachers."""
    out = []
    for i, idx in enumerate(party_indices):
        out.append([
            disjoint_splits(idx, teachers, derive_rng(seed, "partition", i, j), owner=f"FedKT party {i} (records: {len(idx)})")
            for j in range(partitions)
        ])
    return out


def party_labels(votes: np.ndarray, level: str, gamma: float, rng: np.random.Generator) -> np.ndarray:
    """Labels of each partition's queries: votes (n, s, k, C) -> labels (n, s, k). Laplace noise only at L2."""
    n, s, k, c = votes.shape
    g = gamma if level == "L2" else None
    return noisy_argmax(votes.reshape(n * s * k, c), g, rng).reshape(n, s, k)


def server_votes(student_preds: np.ndarray, num_classes: int, consistent: bool) -> np.ndarray:
    """The server's vote histogram (k, C) from the students' predictions (n, s, k)."""
    if consistent:
        return consistent_vote_counts(student_preds, num_classes)
    n, s, k = student_preds.shape
    return vote_counts(student_preds.reshape(n * s, k), num_classes)


def server_labels(votes: np.ndarray, level: str, gamma: float, rng: np.random.Generator) -> np.ndarray:
    """The server's labels (k,) from its votes (k, C). Laplace noise only at L1."""
    return noisy_argmax(votes, gamma if level == "L1" else None, rng)


def l1_example_sensitivity(z: int, partitions: int, consistent: bool) -> float:
    """L1 sensitivity of the server's vote histogram to one record of a party with ``z`` sensitive partitions.

    Theorem 8 (Li, He, Song 2021): one record changes at most z of the party's students (z counts the partitions
    in which some query had a top-two gap <= 1), so plain voting changes by at most ``2z``. With consistent
    voting (the paper's remark after Theorem 8) a party's contribution is s times a one-hot vector or zero: if
    z < s at least one student is unchanged, so the party can only gain or lose its s votes (L1 change s); if
    z = s it may move them from one class to another (2s). ``z = 0`` is floored at 1: z is computed on private
    data, and a zero sensitivity is not a bound this package reports.
    """
    s = int(partitions)
    z = max(1, min(int(z), s))
    if not consistent:
        return 2.0 * z
    return 2.0 * s if z >= s else float(s)


def record_fedkt_events(
    level: str,
    *,
    gamma: float,
    partitions: int,
    teachers: int,
    party_votes: np.ndarray,
    server_votes_answered: np.ndarray,
    z: np.ndarray,
    consistent: bool,
    delta: float,
) -> dict[str, Any]:
    """The ledgers of a FedKT run, one per granularity: ``{"party": ledger, "example": ledger}`` (empty at L0).

    - L1 party-level: every party records the server's answers with sensitivity 2s (Theorems 1-2).
    - L1 example-level: party i records them with the sensitivity of :func:`l1_example_sensitivity` for its z_i
      (Theorem 8; the max over parties is the paper's z = max_i z_i) - data-dependent.
    - L2 example-level: party i records its s partitions' answers with sensitivity 2 each (Theorem 3; s
      compositions, since one record is in one teacher of every partition); parties compose in parallel
      (Theorem 4).
    - L2 party-level: the same answers with sensitivity 2t (Theorems 9-10).

    ``party_votes`` (n, s, k_p, C) are the partitions' histograms of the answered party queries,
    ``server_votes_answered`` (k_s, C) the server's.
    """
    n, s = party_votes.shape[:2]
    party, example = new_ledger(delta), new_ledger(delta)
    if level == "L1":
        for i in range(n):
            party.record(f"party{i}", LaplaceNoisyMax(gamma=gamma, sensitivity=2.0 * s, votes=server_votes_answered))
            example.record(
                f"party{i}",
                LaplaceNoisyMax(gamma=gamma, sensitivity=l1_example_sensitivity(int(z[i]), s, consistent), votes=server_votes_answered),
            )
    elif level == "L2":
        for i in range(n):
            for j in range(s):
                example.record(f"party{i}", LaplaceNoisyMax(gamma=gamma, sensitivity=2.0, votes=party_votes[i, j]))
                party.record(f"party{i}", LaplaceNoisyMax(gamma=gamma, sensitivity=2.0 * teachers, votes=party_votes[i, j]))
    return {"party": party, "example": example}


# --------------------------------------------------------------------------------------------------
# Partition among parties
# --------------------------------------------------------------------------------------------------


def _party_indices(cfg: FedKTConfig, train_idx: np.ndarray, y: np.ndarray, seed: int) -> list[np.ndarray]:
    """Index arrays (into the data set) of each party's records, from :mod:`dpaudit.training.partition`.

    Dirichlet draws repeat until every party holds at least ``max(10, t)`` records (as FedKT's public code
    asks for 10), so every teacher subset is non-empty.
    """
    from dpaudit.training import partition as part

    labels = y[train_idx]
    if cfg.partition == "iid":
        local = part.iid(labels, cfg.parties, seed=seed)
    else:
        min_size = min(max(10, cfg.teachers), len(labels) // cfg.parties)
        local = part.dirichlet(labels, cfg.parties, cfg.beta, seed=seed, min_size=min_size)
    out = [np.sort(train_idx[np.asarray(p, dtype=np.int64)]) for p in local]
    small = [i for i, p in enumerate(out) if len(p) < cfg.teachers]
    if small:
        raise DataError(
            f"FedKT parties {small} hold fewer records than teachers per partition ({cfg.teachers}); "
            "use fewer parties or teachers, a larger beta, or more data."
        )
    return out


# --------------------------------------------------------------------------------------------------
# The method, in named stages
# --------------------------------------------------------------------------------------------------


class Config(MethodConfig):
    """A FedKT run: ``[data] name``/``data_dir``, ``[method]`` (:class:`FedKTConfig`, with
    ``[method.teacher_train]``, ``[method.student_train]``, ``[method.final_train]``) and ``[run]``."""

    method_cls = FedKTConfig
    flat_family = "fedkt"

    def prepare_data(self, seed: int) -> tuple[DataBundle, list[np.ndarray]]:
        """The split data, its parties' records and (checked here, drawn again by the run) every party's teacher
        subsets and the PATE baseline's."""
        cfg = self.method
        data = load_data(self.dataset, cfg, seed=seed, data_dir=self.data_dir)
        parties = _party_indices(cfg, data.splits.train, data.dataset.y, derive_seed(seed, "partition"))
        party_teacher_subsets(parties, cfg.partitions, cfg.teachers, seed)
        if "pate" in cfg.baselines:
            disjoint_splits(np.concatenate(parties), cfg.pate_teachers or cfg.parties * cfg.teachers,
                            derive_rng(seed, "pate"), owner="FedKT's PATE baseline")
        return data, parties


def run(config: Config, out: str | Path, *, seed: int = 0, progress: Any = True, overwrite: bool = False) -> RunResult:
    """Run FedKT (Algorithm 1) at ``[method] level`` with its baselines, and write the release to ``out``.

    The released model is the server's final model. ``votes.npy`` holds the histograms of the answered
    queries where the noise was added: the server's (k_s, C) at L0/L1, the partitions' stacked
    (n*s*k_p, C) (rows ordered party, partition, query) at L2. Stages are checkpointed beside ``out`` so an
    interrupted run resumes.
    """
    return execute(config, out, seed=seed, progress=progress, overwrite=overwrite, body=_train, config_cls=Config)


@dataclass(frozen=True)
class _Specs:
    teacher: Any
    student: Any
    final: Any


def _model_specs(cfg: FedKTConfig, ds: Any) -> _Specs:
    """Teacher, student and final architectures (students default to the teacher's, the final model to the student's)."""
    s_kw = cfg.student_model_kwargs if cfg.student_model_kwargs is not None else cfg.teacher_model_kwargs
    return _Specs(
        teacher=model_spec(cfg.teacher_model, cfg.teacher_model_kwargs, ds),
        student=model_spec(cfg.student_model or cfg.teacher_model, s_kw, ds),
        final=model_spec(cfg.final_model or cfg.student_model or cfg.teacher_model,
                         cfg.final_model_kwargs if cfg.final_model_kwargs is not None else s_kw, ds),
    )


@dataclass(frozen=True)
class _PartySide:
    teacher_acc: np.ndarray    # (n*s*t,)
    queries: np.ndarray        # q_party
    votes: np.ndarray          # (n, s, k_p, C)
    labels: np.ndarray         # (n, s, k_p)
    z: np.ndarray              # (n,) Theorem 8's sensitive partitions per party
    student_preds: np.ndarray  # (n, s, P)
    student_acc: np.ndarray


def _party_side(cfg: FedKTConfig, specs: _Specs, parties: list[np.ndarray], data: DataBundle, *, seed: int,
                device: str | None, cache: StageCache) -> _PartySide:
    """Algorithm 1 lines 1-14: teachers per partition, (noisy at L2) partition votes, one student per partition.
    With a party executor in force (the Flower engine) each party computes its own share (:func:`_party_share`)."""
    from dpaudit.training.parties import current_executor

    executor = current_executor()
    if executor is not None:
        cache.reporter.log(f"parties: {cfg.parties} parties train their teachers and students ({executor.engine})")
        got = executor.call("party", {i: {} for i in range(cfg.parties)})
        shares = [got[i] for i in range(cfg.parties)]
        X_pub, _ = data.xy(data.splits.public)
        q_party = select_queries(len(X_pub), queries=cfg.party_queries, fraction=cfg.party_query_fraction,
                                 rng=derive_rng(seed, "queries"), owner="FedKT (party side)")
        return _PartySide(np.concatenate([r["teacher_acc"] for r in shares]), q_party,
                          np.stack([r["votes"] for r in shares]), np.stack([r["labels"] for r in shares]),
                          np.array([int(r["z"]) for r in shares], dtype=np.int64),
                          np.stack([r["student_preds"] for r in shares]),
                          np.concatenate([r["student_acc"] for r in shares]))
    n, s, t = cfg.parties, cfg.partitions, cfg.teachers
    C = int(data.dataset.num_classes)
    X_pub, _ = data.xy(data.splits.public)
    X_te, y_te = data.xy(data.splits.test)
    P = len(X_pub)
    subsets = party_teacher_subsets(parties, s, t, seed)
    flat_subsets = [subsets[i][j][k] for i in range(n) for j in range(s) for k in range(t)]
    tp = teacher_predictions(specs.teacher, flat_subsets, data, cfg.teacher_train, seed=derive_seed(seed, "teachers"),
                             device=device, cache=cache, stage="teachers")
    teacher_preds = tp["preds"].reshape(n, s, t, P)
    q_party = select_queries(P, queries=cfg.party_queries, fraction=cfg.party_query_fraction,
                             rng=derive_rng(seed, "queries"), owner="FedKT (party side)")
    pv = np.stack([
        np.stack([vote_counts(teacher_preds[i, j][:, q_party], C) for j in range(s)]) for i in range(n)
    ])  # (n, s, k_p, C)
    plabels = party_labels(pv, cfg.level, cfg.gamma, derive_rng(seed, "noise"))
    # Theorem 8's z_i: partitions of party i with a query whose top-two gap is <= 1
    z = (top_two_gap(pv.reshape(-1, C)).reshape(n, s, -1) <= 1).any(axis=2).sum(axis=1)

    def students() -> dict[str, np.ndarray]:
        cache.reporter.log(f"students: training {n * s} {specs.student.name} models on {len(q_party)} labelled queries each")
        group = train_group(
            specs.student, [(X_pub[q_party], plabels[i, j]) for i in range(n) for j in range(s)], cfg.student_train,
            seed=derive_seed(seed, "students"), device=device, checkpoint_dir=cache.subdir("students.ckpt"),
            progress=cache.reporter,
        )
        return {"preds": group.predict(X_pub), "test_acc": (group.predict(X_te) == y_te[None, :]).mean(axis=1)}

    st = cache.get_or_run("students", students)
    return _PartySide(tp["test_acc"], q_party, pv, plabels, z, st["preds"].reshape(n, s, P), st["test_acc"])


def _party_share(cfg: FedKTConfig, specs: _Specs, parties: list[np.ndarray], data: DataBundle, i: int, *, seed: int,
                 device: str | None) -> dict[str, Any]:
    """Party ``i``'s part of :func:`_party_side`, computed by the party alone with the same seeds: its s*t teachers
    (models ``i*s*t ...`` of the teachers' group), its partitions' votes and labels (at L2 its rows of the one
    Laplace draw of every partition's queries), its z_i (Theorem 8) and its s students (models ``i*s ...``)."""
    n, s, t = cfg.parties, cfg.partitions, cfg.teachers
    C = int(data.dataset.num_classes)
    X_pub, _ = data.xy(data.splits.public)
    X_te, y_te = data.xy(data.splits.test)
    P = len(X_pub)
    # party i's cuts, as party_teacher_subsets draws them: from derive_rng(seed, "partition", i, j), its own streams
    subsets = [disjoint_splits(parties[i], t, derive_rng(seed, "partition", i, j),
                               owner=f"FedKT party {i} (records: {len(parties[i])})") for j in range(s)]
    teachers = train_group(specs.teacher, [data.xy(subsets[j][k]) for j in range(s) for k in range(t)],
                           cfg.teacher_train, seed=derive_seed(seed, "teachers"), device=device, progress=False,
                           model_offset=i * s * t)
    preds = teachers.predict(X_pub).reshape(s, t, P)
    teacher_acc = (teachers.predict(X_te) == y_te[None, :]).mean(axis=1)
    q_party = select_queries(P, queries=cfg.party_queries, fraction=cfg.party_query_fraction,
                             rng=derive_rng(seed, "queries"), owner="FedKT (party side)")
    k = len(q_party)
    pv = np.stack([vote_counts(preds[j][:, q_party], C) for j in range(s)])  # (s, k, C)
    if cfg.level == "L2":  # party_labels draws Lap(1/gamma) for every party's rows at once; ours are rows i*s*k...
        noise = derive_rng(seed, "noise").laplace(0.0, 1.0 / cfg.gamma, size=(n * s * k, C))[i * s * k:(i + 1) * s * k]
        labels = np.argmax(pv.reshape(s * k, C).astype(np.float64) + noise, axis=1).astype(np.int64).reshape(s, k)
    else:
        labels = noisy_argmax(pv.reshape(s * k, C), None, derive_rng(seed, "noise")).reshape(s, k)
    z = int((top_two_gap(pv.reshape(-1, C)).reshape(s, -1) <= 1).any(axis=1).sum())
    students = train_group(specs.student, [(X_pub[q_party], labels[j]) for j in range(s)], cfg.student_train,
                           seed=derive_seed(seed, "students"), device=device, progress=False, model_offset=i * s)
    return {"teacher_acc": teacher_acc, "votes": pv, "labels": labels, "z": z, "student_preds": students.predict(X_pub),
            "student_acc": (students.predict(X_te) == y_te[None, :]).mean(axis=1)}


def party_setup(config: Config, seed: int) -> tuple[Config, _Specs, list[np.ndarray], DataBundle, int]:
    """What a party rebuilds before its task (see :mod:`dpaudit.training.parties`): the split data and the
    parties' records (it reads only its own)."""
    data, parties = config.prepare_data(seed)
    return config, _model_specs(config.method, data.dataset), parties, data, int(seed)


def party_count(config: Config, seed: int) -> int:
    """The number of parties of a run."""
    return int(config.method.parties)


def _party_task(setup: tuple, party: int, payload: Any, state: Any) -> tuple[dict, Any]:
    config, specs, parties, data, seed = setup
    return _party_share(config.method, specs, parties, data, party, seed=seed, device=config.run.device), state


#: The parties' side of a run when they run elsewhere (see :mod:`dpaudit.training.parties`).
PARTY_TASKS = {"party": _party_task}


def _server_side(cfg: FedKTConfig, specs: _Specs, party: _PartySide, data: DataBundle, *, seed: int,
                 device: str | None, cache: StageCache) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray]:
    """Algorithm 1 lines 15-24: the server's (consistent) votes, (noisy at L1) labels and the final model.
    Returns ``(final, q_server, server_votes, server_labels)``."""
    C = int(data.dataset.num_classes)
    X_pub, _ = data.xy(data.splits.public)
    q_server = select_queries(len(X_pub), queries=cfg.server_queries, fraction=cfg.server_query_fraction,
                              rng=derive_rng(seed, "server_queries"), owner="FedKT (server side)")
    sv = server_votes(party.student_preds[:, :, q_server], C, cfg.consistent_voting)
    slabels = server_labels(sv, cfg.level, cfg.gamma, derive_rng(seed, "server_noise"))
    cache.reporter.log(f"final: training the {specs.final.name} final model on {len(q_server)} labelled queries")
    final = train_group(specs.final, [(X_pub[q_server], slabels)], cfg.final_train, seed=derive_seed(seed, "final"),
                        device=device, checkpoint_dir=cache.subdir("final.ckpt"),
                        progress=cache.reporter).member(0)
    return final, q_server, sv, slabels


def _baselines(cfg: FedKTConfig, specs: _Specs, parties: list[np.ndarray], data: DataBundle, *, seed: int,
               device: str | None, cache: StageCache) -> dict[str, Any]:
    """Table 1's baselines in the same run: SOLO (mean accuracy of per-party models) and centralised PATE."""
    X_te, y_te = data.xy(data.splits.test)
    n, t = cfg.parties, cfg.teachers
    C = int(data.dataset.num_classes)
    utility: dict[str, Any] = {}
    if "solo" in cfg.baselines:
        def solo() -> dict[str, np.ndarray]:
            cache.reporter.log(f"SOLO baseline: {n} {specs.final.name} models, one per party")
            g = train_group(specs.final, [data.xy(p) for p in parties], cfg.final_train, seed=derive_seed(seed, "solo"),
                            device=device, checkpoint_dir=cache.subdir("solo.ckpt"), progress=cache.reporter)
            return {"test_acc": (g.predict(X_te) == y_te[None, :]).mean(axis=1)}

        utility["solo_accuracy"] = float(np.mean(cache.get_or_run("solo", solo)["test_acc"]))
    if "pate" in cfg.baselines:
        m = cfg.pate_teachers or n * t
        pparts = disjoint_splits(np.concatenate(parties), m, derive_rng(seed, "pate"), owner="FedKT's PATE baseline")
        ptp = teacher_predictions(specs.teacher, pparts, data, cfg.teacher_train, seed=derive_seed(seed, "pate", 1),
                                  device=device, cache=cache, stage="pate_teachers")

        def pate() -> dict[str, np.ndarray]:
            student, _, _, _ = pate_student(
                ptp["preds"], data, num_classes=C, gamma=cfg.pate_gamma, queries=cfg.server_queries,
                query_fraction=cfg.server_query_fraction, student_spec=specs.final, student_train=cfg.final_train,
                seed=derive_seed(seed, "pate", 2), device=device, cache=cache, stage="pate_student",
            )
            return {"accuracy": np.array(accuracy(student.predict_proba(X_te), y_te))}

        utility["pate_accuracy"] = float(cache.get_or_run("pate", pate)["accuracy"])
        utility["pate_teachers"] = int(m)
    return utility


def _accounting(cfg: FedKTConfig, party: _PartySide, sv: np.ndarray, q_server: np.ndarray) -> tuple[Any, Any, dict, np.ndarray]:
    """The ledger, accounting result, claim and published votes of the run's level. Returns
    ``(ledger, accounting, claim, votes)``."""
    s, t = cfg.partitions, cfg.teachers
    C = party.votes.shape[-1]
    z = party.z
    ledgers = record_fedkt_events(cfg.level, gamma=cfg.gamma, partitions=s, teachers=t, party_votes=party.votes,
                                  server_votes_answered=sv, z=z, consistent=cfg.consistent_voting, delta=cfg.delta)
    facts = {"z": [int(v) for v in z], "z_max": int(z.max()) if len(z) else 0}
    if cfg.level == "L0":
        ledger, accounting, claim = noiseless_accounting(
            "FedKT-L0", cfg.delta, "FedKT-L0 adds no noise anywhere: the final model carries no differential-privacy guarantee.",
            claim_text="FedKT-L0: no privacy mechanism", granularity="none")
        return ledger, accounting, claim, sv
    if cfg.level == "L1":  # headline party-level (Theorems 1-2), example-level (Theorem 8) beside it
        primary, secondary, votes = "party", "example", sv
        mechanism = "FedKT-L1 (Laplace noisy max at the server)"
        labels = ("party-level, data-dependent (Theorem 2)", "party-level, data-independent (Theorem 1)",
                  "example-level, data-dependent (Theorem 8)")
        a_primary = (f"Party-level: neighbouring data sets differ in one party's whole data, which moves at most its s={s} "
                     f"students' votes (sensitivity 2s = {2 * s}); FedKT Theorems 1-2.")
        a_secondary = (f"Example-level: sensitivity from z (Theorem 8) with consistent voting={cfg.consistent_voting}; "
                       "z is computed from the parties' private vote histograms, so this figure is data-dependent "
                       "beyond the votes and is itself not differentially private.")
        claim_text = f"FedKT-L1 (Li, He, Song 2021, Theorem 2): {len(q_server)} server answers, gamma={cfg.gamma}, s={s}"
    else:  # L2: headline example-level (Theorems 3-4), party-level (Theorems 9-10) beside it
        primary, secondary, votes = "example", "party", party.votes.reshape(-1, C)
        mechanism = "FedKT-L2 (Laplace noisy max in every partition)"
        labels = ("example-level, data-dependent (Theorems 3-4)", "example-level, data-independent",
                  "party-level, data-dependent (Theorem 10)")
        a_primary = ("Example-level: one record lies in one teacher of each of its party's s partitions (sensitivity 2 per "
                     "partition query, composed over the s partitions); parties hold disjoint data, so the final model's "
                     "epsilon is the max over parties (FedKT Theorems 3-4).")
        a_secondary = (f"Party-level: one party's data moves all t={t} teachers of each of its partitions "
                       f"(sensitivity 2t = {2 * t}; Theorems 9-10).")
        claim_text = (f"FedKT-L2 (Li, He, Song 2021, Theorems 3-4): {len(party.queries)} queries per partition, "
                      f"gamma={cfg.gamma}")
    ledger = ledgers[primary]
    ledger.add_assumption(a_primary)
    accounting = accounting_result(
        mechanism, [(labels[0], ledger), (labels[1], data_independent_ledger(ledger)), (labels[2], ledgers[secondary])],
        extra_assumptions=(a_primary,), facts=facts,
    )
    accounting = _add_assumption_to(accounting, 2, a_secondary)
    claim = {"epsilon": accounting.epsilon, "delta": cfg.delta, "granularity": primary, "text": claim_text}
    return ledger, accounting, claim, votes


def _train(config: Config, ctx: RunContext) -> Outcome:
    cfg, seed, cache, device = config.method, ctx.seed, ctx.cache, config.run.device
    data, parties = config.prepare_data(seed)
    ds = data.dataset
    n, s = cfg.parties, cfg.partitions
    specs = _model_specs(cfg, ds)
    _, y_pub = data.xy(data.splits.public)
    X_te, y_te = data.xy(data.splits.test)

    party = _party_side(cfg, specs, parties, data, seed=seed, device=device, cache=cache)
    final, q_server, sv, slabels = _server_side(cfg, specs, party, data, seed=seed, device=device, cache=cache)
    utility: dict[str, Any] = {
        "test_accuracy": accuracy(final.predict_proba(X_te), y_te),
        "teacher_accuracy_mean": float(np.mean(party.teacher_acc)),
        "student_accuracy_mean": float(np.mean(party.student_acc)),
        "party_label_accuracy": accuracy(party.labels.reshape(-1), np.tile(y_pub[party.queries], n * s)),
        "server_label_accuracy": accuracy(slabels, y_pub[q_server]),
        "server_no_consensus_fraction": float(np.mean(sv.sum(axis=1) == 0)),
        "num_party_queries": int(len(party.queries)),
        "num_server_queries": int(len(q_server)),
        "party_sizes_min": int(min(len(p) for p in parties)),
        "party_sizes_max": int(max(len(p) for p in parties)),
    }
    utility.update(_baselines(cfg, specs, parties, data, seed=seed, device=device, cache=cache))
    ledger, accounting, claim, votes = _accounting(cfg, party, sv, q_server)

    membership = balanced_membership(np.concatenate(parties), data.splits.test, data.splits.attacker,
                                     derive_rng(seed, "membership"))
    params = config_to_dict(cfg)
    params["votes_layout"] = "server (queries, classes)" if cfg.level != "L2" else "partitions stacked (party, partition, query) x classes"
    return Outcome(Release(
        method="fedkt", dataset=data.spec, params=params, utility=utility, classifier=final,
        train_config=cfg.final_train if specs.final.is_torch else None, ledger=ledger, statement=accounting, claim=claim,
        membership=membership, votes=votes, assumptions=accounting.statement.assumptions,
    ))


def _add_assumption_to(result: Any, index: int, text: str) -> Any:
    import dataclasses

    sts = list(result.statements)
    sts[index] = dataclasses.replace(sts[index], assumptions=tuple(sts[index].assumptions) + (text,))
    return dataclasses.replace(result, statements=tuple(sts))

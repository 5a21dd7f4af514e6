"""Certified audits of the PATE family's real training runs: PATE, FedKT (level L1) and FREDY.

What is audited. The noisy-max answer to one auditor-chosen query, released after the method's real teacher
training on the private data plus, by a coin, one auditor canary record. The canary's input is the query: an
out-of-distribution input (``canary_features`` input features that vary least over the data set, all other
features 0, set to ``canary_scale``) with an auditor-chosen label; the observation of a trial is whether the answer
is the canary's label. A one-query release is what makes a *per-query* claim testable.

Trials are independent: ``trials`` complete trainings (half of them with the canary, in a random order), each with
its own training randomness (the ensemble trainer draws model ``i``'s initialisation and batch order from
``(seed, i)`` only) and its own noise; the data set, its split and the teachers' partition are fixed, as a DP
guarantee must hold for every data set. The bound is :func:`dpaudit.attacks.canary.multi_run_certified`
(Clopper-Pearson over the trials; pure DP, ``delta = 0``). The observation is binary and the test "answer = the
canary's label" is fixed before the trials, so it is evaluated on all trials as one threshold fixed in advance
(``selection="bonferroni"`` with the single threshold 1) instead of being chosen on a split half, which would only
halve the trials.

Which code is the methods' own, and what is batched:

- Data and partition: the method's ``Config.prepare_data`` (PATE / FREDY: ``teacher_parts``; FedKT: its parties
  and, per trial, ``fedkt.party_teacher_subsets`` on the party's data with the canary when it is in). The canary
  joins teacher 0's subset (PATE), client 0's data (FREDY) or party 0's data (FedKT), as one more record.
- Teacher training: PATE and FedKT through ``pate.teacher_predictions`` (the same function a run calls), FREDY
  through ``fredy.fedavg_teachers`` (the run's FedAvg stage, with ``group_size`` so that each trial's ``T`` clients
  are averaged only among themselves). *Batched*: every trial's teachers are trained in one such call (the
  ensemble trainer trains the models independently, so this equals one call per trial up to the per-model seeds).
- FedKT's students: ``common.train_group`` on the partitions' labels of the party queries (``fedkt.party_labels``:
  noiseless at L1), all trials' students in one call; the server's histogram is ``fedkt.server_votes`` (consistent
  voting) and its answer ``fedkt.server_labels`` (Laplace noisy max at L1). The orchestration between these stages
  (flattening over parties/partitions/trials) is written here, as FedKT's party-side stage does for one run.
- Aggregation and release: ``common.vote_counts`` and ``common.noisy_argmax`` (PATE, FREDY), one row per trial
  (each row gets its own Laplace draws). Not run: the students/final models trained on the answers (they are
  post-processing of the answers, which cannot raise epsilon), and the other queries of a run (a run answers
  many; the per-query claim is about one).

Figures (``MethodRunAudit``):

- claimed: the paper's per-query figure at these settings -- PATE 2017: ``2 gamma`` (each Laplace noisy-max
  answer is (2 gamma, 0)-DP); FedKT L1 example-level (Theorem 8, consistent voting, ``z = s``): ``2 s gamma``;
  FREDY: its per-query "epsilon" ``gamma`` (Eq. 4).
- accounted: dpaudit's pure-DP figure for the one answer, ``sensitivity * gamma`` (``LaplaceNoisyMax``): PATE 2,
  FedKT L1 party-level ``2 s`` (which also bounds one record), FREDY ``fredy.fredy_sensitivity`` (``2 T`` after
  FedAvg: one record influences every teacher).
- ideal: the same multi-run rule on simulated answers of the same ``noisy_argmax`` to the best-case histogram pair
  at the accounted shift (``sensitivity / 2`` votes moved from a competitor to the canary's label), median over
  ``replicates`` simulated audits with the same numbers of trials (:func:`noisy_max_ideal_epsilon`). It is a
  reference, not a ceiling: a real run's histograms differ from the pair (e.g. FREDY's trials without the canary
  spread their votes over several classes), and with few trials either figure may come out ahead by chance.

The canary's label is chosen before the trials, from ``pilot`` extra trainings without the canary (seeds
independent of the trials', so the test is fixed before any trial is drawn): the class the teachers vote for least
on the query.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

import numpy as np

from dpaudit.attacks.canary import multi_run_certified
from dpaudit.auditing.method_runs.result import MethodRunAudit, RunControl
from dpaudit.errors import ParameterError, check_float, check_int
from dpaudit.progress import as_reporter
from dpaudit.training.limits import MAX_EPOCHS, MAX_MODELS, MAX_RECORDS, MAX_WIDTH

__all__ = ["audit_pate_run", "audit_fedkt_run", "audit_fredy_run", "noisy_max_ideal_epsilon", "canary_input",
           "FREDY_RESTS_ON"]

_SEED_TAG = 0x9A7E


def _seed(seed: int, *tags: int) -> int:
    return int(np.random.SeedSequence([seed, _SEED_TAG, *tags]).generate_state(1, dtype=np.uint32)[0] & 0x7FFFFFFF)


def canary_input(X: np.ndarray, *, features: int, scale: float) -> np.ndarray:
    """The auditor's out-of-distribution input for data ``X`` (n, *shape): 0 everywhere except the ``features``
    (flattened) input features of least variance over ``X`` (ties: lowest index), which are ``scale``."""
    X = np.asarray(X, dtype=np.float32)
    flat = X.reshape(len(X), -1)
    k = check_int(features, "canary_features", "canary_input", low=1, high=flat.shape[1])
    s = check_float(scale, "canary_scale", "canary_input", low=0.0, low_open=True)
    order = np.argsort(flat.var(axis=0), kind="stable")[:k]
    x = np.zeros(flat.shape[1], dtype=np.float32)
    x[order] = s
    return x.reshape(X.shape[1:])


def noisy_max_ideal_epsilon(*, shift: float, voters: float, classes: int, gamma: float, num_in: int, num_out: int,
                            confidence: float = 0.95, replicates: int = 21, seed: int = 0) -> float:
    """The multi-run bound the ideal attack certifies on the exact Laplace noisy max at a vote shift.

    Histograms: ``voters - shift`` votes split evenly between the canary's label c and a competitor d, the ``shift``
    remaining votes on c (with the canary) or on d (without), the other ``classes - 2`` classes at 0 (L1 distance
    ``2 shift``). Each simulated trial is answered by ``common.noisy_argmax`` at ``gamma``, observed as "answer = c",
    and the bound is :func:`~dpaudit.attacks.canary.multi_run_certified` on ``num_in`` / ``num_out`` trials; the
    median over ``replicates`` simulated audits."""
    from dpaudit.training.methods.common import noisy_argmax

    o = "noisy_max_ideal_epsilon"
    h = check_float(shift, "shift", o, low=0.0, low_open=True)
    v = check_float(voters, "voters", o, low=h)
    C = check_int(classes, "classes", o, low=2)
    g = check_float(gamma, "gamma", o, low=0.0, low_open=True)
    n1, n0 = check_int(num_in, "num_in", o, low=2), check_int(num_out, "num_out", o, low=2)
    r = check_int(replicates, "replicates", o, low=1)
    rng = np.random.default_rng(np.random.SeedSequence([check_int(seed, "seed", o, low=0), _SEED_TAG, 1]))
    inc = np.r_[np.ones(n1, bool), np.zeros(n0, bool)]
    votes = np.zeros((n1 + n0, C))
    votes[:, 0] = votes[:, 1] = (v - h) / 2
    votes[inc, 0] += h
    votes[~inc, 1] += h
    eps = []
    for _ in range(r):
        score = (noisy_argmax(votes, g, rng) == 0).astype(float)
        eps.append(_certify(score, inc, confidence, int(rng.integers(2**31))).epsilon)
    return float(np.median(eps))


# --------------------------------------------------------------------------------------------------
# shared driver
# --------------------------------------------------------------------------------------------------


def _augmented(data: Any, x: np.ndarray, label: int, public: np.ndarray) -> tuple[Any, int]:
    """``data`` with the canary record appended (index ``len(X)``) and the public pool replaced by ``public`` plus
    the canary's input last; returns the bundle and the canary's index."""
    from dpaudit.training.data import Dataset
    from dpaudit.training.methods.common import DataBundle

    ds = data.dataset
    idx = len(ds.X)
    aug = Dataset(ds.name, np.concatenate([ds.X, x[None]]), np.concatenate([ds.y, [label]]), ds.num_classes,
                  ds.input_shape)
    splits = dataclasses.replace(data.splits, public=np.r_[np.asarray(public, dtype=np.int64), idx])
    return DataBundle(aug, splits, data.spec), idx


def _certify(score: np.ndarray, inc: np.ndarray, confidence: float, seed: int) -> Any:
    """The multi-run bound on binary observations: the test "answer = the canary's label" is fixed before the
    trials, so it is evaluated on all of them (one threshold, fixed in advance) rather than chosen on a split half."""
    return multi_run_certified(score, inc, delta=0.0, confidence=confidence, seed=seed, selection="bonferroni",
                               thresholds=[1.0], score="count")


def _assignments(trials: int, seed: int) -> np.ndarray:
    """Half of the trials (rounded down) with the canary, in a random order."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, _SEED_TAG, 2]))
    inc = np.zeros(trials, bool)
    inc[: trials // 2] = True
    return rng.permutation(inc)


def _run_audit(method: str, *, votes_fn: Callable[[np.ndarray, int, int], np.ndarray],
               answer_fn: Callable[[np.ndarray, np.random.Generator], np.ndarray], classes: int, trials: int,
               pilot: int, seed: int, confidence: float, replicates: int, claimed: float, accounted: float,
               sensitivity: float, voters: float, gamma: float, settings: dict[str, Any], notes: tuple[str, ...],
               start: float, progress: Any) -> MethodRunAudit:
    """Pilot -> label; trials -> votes -> answers -> certified bound, ideal reference and the result."""
    log = as_reporter(progress).log
    log(f"{method} run audit: {pilot} pilot trainings without the canary (to choose its label)")
    pv = votes_fn(np.zeros(pilot, bool), 0, _seed(seed, 3))
    label = int(np.argmin(pv.sum(axis=0)))
    inc = _assignments(trials, seed)
    log(f"{method} run audit: {trials} trainings, {int(inc.sum())} with the canary (label {label})")
    votes = votes_fn(inc, label, _seed(seed, 4))
    answers = answer_fn(votes, np.random.default_rng(np.random.SeedSequence([seed, _SEED_TAG, 5])))
    score = (answers == label).astype(float)
    bound = _certify(score, inc, confidence, seed)
    ideal = noisy_max_ideal_epsilon(shift=sensitivity / 2, voters=voters, classes=classes, gamma=gamma,
                                    num_in=int(inc.sum()), num_out=int((~inc).sum()), confidence=confidence,
                                    replicates=replicates, seed=seed)
    lab_votes_in = votes[inc, label].mean()
    lab_votes_out = votes[~inc, label].mean()
    settings = dict(settings, canary_label=label, mean_label_votes_with=float(lab_votes_in),
                    mean_label_votes_without=float(lab_votes_out), answer_rate_with=float(score[inc].mean()),
                    answer_rate_without=float(score[~inc].mean()), sensitivity=sensitivity)
    return MethodRunAudit(method=method, audit="multi-run, one-query noisy max, canary record",
                          bound=bound.with_ideal(ideal),
                          claimed_epsilon=float(claimed), accounted_epsilon=float(accounted), trials=int(trials),
                          settings=settings, elapsed_seconds=time.perf_counter() - start, notes=notes)


def _check_device(device: Any, o: str) -> str | None:
    """``device`` parsed and checked as ``dpaudit train --device`` checks it (an unknown name, ``meta``, or a CUDA
    device this machine lacks is refused before any work)."""
    from dpaudit.training.methods.scaffold import check_device

    return check_device(device, f"'device' parameter of {o}")


def _common_checks(o: str, trials: int, pilot: int, seed: int, gamma: float, confidence: float, replicates: int,
                   canary_features: int, canary_scale: float, num_samples: int, hidden: int, epochs: int) -> None:
    check_int(trials, "trials", o, low=4, high=MAX_MODELS)
    check_int(pilot, "pilot", o, low=1, high=1000)
    check_int(seed, "seed", o, low=0)
    check_float(gamma, "gamma", o, low=0.0, low_open=True)
    check_float(confidence, "confidence", o, low=0.0, high=1.0, low_open=True, high_open=True)
    check_int(replicates, "replicates", o, low=1, high=1001)
    check_int(canary_features, "canary_features", o, low=1, high=MAX_WIDTH)
    check_float(canary_scale, "canary_scale", o, low=0.0, low_open=True)
    check_int(num_samples, "num_samples", o, low=10, high=MAX_RECORDS)
    check_int(hidden, "hidden", o, low=1, high=MAX_WIDTH)
    check_int(epochs, "epochs", o, low=1, high=MAX_EPOCHS)


def _check_models(o: str, trials: int, per_trial: int, what: str) -> None:
    """All trials' models are trained in one ensemble: refuse more than the training layer's MAX_MODELS before any
    allocation, naming ``trials``."""
    if trials * per_trial > MAX_MODELS:
        raise ParameterError(f"The 'trials' parameter of {o} must be an int <= {MAX_MODELS // per_trial} ({per_trial} "
                             f"{what} per trial, at most {MAX_MODELS} models in all). Got {trials} instead.")


def _train_config(epochs: int, lr: float, o: str) -> Any:
    from dpaudit.training.ensemble import TrainConfig

    return TrainConfig(epochs=epochs, batch_size=32, lr=check_float(lr, "lr", o, low=0.0, low_open=True))


# --------------------------------------------------------------------------------------------------
# PATE
# --------------------------------------------------------------------------------------------------


def audit_pate_run(*, trials: int = 400, teachers: int = 5, gamma: float = 1.0, dataset: str = "digits",
                   num_samples: int = 1797, hidden: int = 32, epochs: int = 10, lr: float = 1e-2,
                   canary_features: int = 3, canary_scale: float = 3.0, pilot: int = 4, confidence: float = 0.95,
                   replicates: int = 21, seed: int = 0, device: str | None = None,
                   progress: Any = False) -> MethodRunAudit:
    """Audit PATE (Papernot et al. 2017) at ``teachers`` teachers and ``gamma``: ``trials`` trainings of the
    teachers (``pate.teacher_predictions``; MLP of one hidden layer of width ``hidden``, ``epochs`` epochs, Adam at
    ``lr``, batch 32) on ``dataset`` (``num_samples`` records, the method's split and partition), the canary in
    teacher 0's subset in half of them; the answer is ``common.noisy_argmax`` on the teachers' votes on the canary's
    input. Claimed = accounted = ``2 gamma``. See the module docstring."""
    from dpaudit.training.methods import pate
    from dpaudit.training.methods.common import model_spec, noisy_argmax, StageCache, vote_counts

    start = time.perf_counter()
    o = "audit_pate_run"
    _common_checks(o, trials, pilot, seed, gamma, confidence, replicates, canary_features, canary_scale, num_samples,
                   hidden, epochs)
    device = _check_device(device, o)
    M = check_int(teachers, "teachers", o, low=1, high=MAX_MODELS)
    _check_models(o, trials, M, "teachers")
    cfg = pate.PATEConfig(teachers=M, gamma=gamma, num_samples=num_samples, teacher_model="mlp",
                          teacher_model_kwargs={"hidden": [hidden]}, teacher_train=_train_config(epochs, lr, o))
    data, parts = pate.Config(name="pate", method=cfg, dataset=dataset).prepare_data(seed)
    ds = data.dataset
    C = int(ds.num_classes)
    x = canary_input(ds.X[data.splits.train], features=canary_features, scale=canary_scale)
    spec = model_spec(cfg.teacher_model, cfg.teacher_model_kwargs, ds)

    def votes_fn(inc: np.ndarray, label: int, s: int) -> np.ndarray:
        aug, ci = _augmented(data, x, label, np.empty(0, np.int64))
        flat = [np.r_[p, ci] if (b and m == 0) else p for b in inc for m, p in enumerate(parts)]
        tp = pate.teacher_predictions(spec, flat, aug, cfg.teacher_train, seed=s, device=device,
                                      cache=StageCache(None, as_reporter(progress)), stage="teachers")
        return vote_counts(tp["preds"][:, -1].reshape(len(inc), M).T, C)  # (trials, C)

    return _run_audit(
        "pate", votes_fn=votes_fn, answer_fn=lambda v, rng: noisy_argmax(v, gamma, rng), classes=C, trials=trials,
        pilot=pilot, seed=seed, confidence=confidence, replicates=replicates, claimed=2 * gamma,
        accounted=2 * gamma, sensitivity=2.0, voters=M, gamma=gamma,
        settings={"dataset": dataset, "num_samples": num_samples, "teachers": M, "gamma": gamma, "hidden": hidden,
                  "epochs": epochs, "lr": lr, "canary_scale": canary_scale, "canary_features": canary_features,
                  "pilot": pilot},
        notes=("PATE 2017: one record lies in one teacher's subset, so one answer is (2 gamma, 0)-DP; claim = "
               "accounting.",),
        start=start, progress=progress)


# --------------------------------------------------------------------------------------------------
# FedKT (level L1)
# --------------------------------------------------------------------------------------------------


def audit_fedkt_run(*, trials: int = 400, parties: int = 2, partitions: int = 2, teachers: int = 1,
                    gamma: float = 1.0, party_queries: int = 50, dataset: str = "digits", num_samples: int = 1797,
                    hidden: int = 32, epochs: int = 10, lr: float = 1e-2, canary_features: int = 3,
                    canary_scale: float = 3.0, pilot: int = 4, confidence: float = 0.95, replicates: int = 21,
                    seed: int = 0, device: str | None = None, progress: Any = False) -> MethodRunAudit:
    """Audit FedKT-L1 (Li, He, Song 2021) with ``parties`` x ``partitions`` x ``teachers`` (n, s, t) teachers (iid
    parties): per trial, the teachers (``pate.teacher_predictions``) label ``party_queries`` public records plus the
    canary's input (``fedkt.party_labels``, noiseless at L1), each partition's student learns them
    (``common.train_group``), the server's consistent votes on the canary's input (``fedkt.server_votes``) are
    answered by ``fedkt.server_labels`` (Laplace noisy max). The canary is one more record of party 0 in half the
    trials. Claimed: Theorem 8's example-level figure with consistent voting at ``z = s`` (``2 s gamma``); accounted:
    party-level ``2 s gamma`` (Theorem 1), which bounds one record too. See the module docstring."""
    from dpaudit.training.methods import fedkt, pate
    from dpaudit.training.methods.common import derive_rng, model_spec, select_queries, StageCache, train_group

    start = time.perf_counter()
    o = "audit_fedkt_run"
    _common_checks(o, trials, pilot, seed, gamma, confidence, replicates, canary_features, canary_scale, num_samples,
                   hidden, epochs)
    device = _check_device(device, o)
    n, s, t = (check_int(v, k, o, low=1, high=MAX_MODELS) for v, k in ((parties, "parties"), (partitions, "partitions"),
                                                       (teachers, "teachers")))
    kq = check_int(party_queries, "party_queries", o, low=1, high=MAX_RECORDS)
    _check_models(o, trials, n * s * (t + 1), "teachers and students")
    train = _train_config(epochs, lr, o)
    cfg = fedkt.FedKTConfig(parties=n, partitions=s, teachers=t, partition="iid", level="L1", gamma=gamma,
                            num_samples=num_samples, teacher_model="mlp", teacher_model_kwargs={"hidden": [hidden]},
                            teacher_train=train, student_train=train, baselines=())
    data, party_idx = fedkt.Config(name="fedkt", method=cfg, dataset=dataset).prepare_data(seed)
    ds = data.dataset
    C = int(ds.num_classes)
    if kq > len(data.splits.public):
        raise ParameterError(f"The 'party_queries' parameter of {o} must be at most the public pool's "
                             f"{len(data.splits.public)} records. Got {kq} instead.")
    x = canary_input(ds.X[data.splits.train], features=canary_features, scale=canary_scale)
    spec = model_spec("mlp", {"hidden": [hidden]}, ds)
    pub = np.asarray(data.splits.public)[select_queries(len(data.splits.public), queries=kq, fraction=None,
                                                        rng=derive_rng(seed, "queries"), owner=o)]

    def votes_fn(inc: np.ndarray, label: int, sd: int) -> np.ndarray:
        from dpaudit.training.methods.common import vote_counts

        aug, ci = _augmented(data, x, label, pub)
        plain = fedkt.party_teacher_subsets(party_idx, s, t, seed)
        with_c = fedkt.party_teacher_subsets([np.r_[party_idx[0], ci]] + party_idx[1:], s, t, seed)
        flat = [(with_c if b else plain)[i][j][k] for b in inc for i in range(n) for j in range(s) for k in range(t)]
        tp = pate.teacher_predictions(spec, flat, aug, train, seed=sd, device=device,
                                      cache=StageCache(None, as_reporter(progress)),
                                      stage="teachers")
        N, P = len(inc), kq + 1
        preds = tp["preds"].reshape(N, n, s, t, P)
        pv = np.stack([vote_counts(preds[b, i, j], C) for b in range(N) for i in range(n) for j in range(s)])
        plabels = fedkt.party_labels(pv.reshape(N * n, s, P, C), "L1", gamma, np.random.default_rng(0))
        X_pub = aug.xy(aug.splits.public)[0]
        students = train_group(spec, [(X_pub, lab) for lab in plabels.reshape(N * n * s, P)], train,
                               seed=_seed(sd, 1), device=device, progress=as_reporter(progress))
        sp = students.predict(X_pub[-1:])[:, 0].reshape(N, n, s, 1)
        return np.concatenate([fedkt.server_votes(sp[b], C, True) for b in range(N)])  # (trials, C)

    claimed = gamma * fedkt.l1_example_sensitivity(s, s, True)
    return _run_audit(
        "fedkt", votes_fn=votes_fn, answer_fn=lambda v, rng: fedkt.server_labels(v, "L1", gamma, rng), classes=C,
        trials=trials, pilot=pilot, seed=seed, confidence=confidence, replicates=replicates, claimed=claimed,
        accounted=2 * s * gamma, sensitivity=2.0 * s, voters=n * s, gamma=gamma,
        settings={"dataset": dataset, "num_samples": num_samples, "parties": n, "partitions": s, "teachers": t,
                  "level": "L1", "gamma": gamma, "party_queries": kq, "hidden": hidden, "epochs": epochs, "lr": lr,
                  "canary_scale": canary_scale, "canary_features": canary_features, "pilot": pilot},
        notes=("FedKT-L1: the canary is one record of party 0; it reaches the server only through party 0's s "
               "students (consistent voting: L1 change at most 2s).",
               "Not audited here: FedKT-L2 (noise in every partition, then students and a noiseless server).",
               "The party-side labels are noiseless at L1 (party_labels draws no random numbers)."),
        start=start, progress=progress)


# --------------------------------------------------------------------------------------------------
# FREDY
# --------------------------------------------------------------------------------------------------


def audit_fredy_run(*, trials: int = 400, teachers: int = 5, rounds: int = 2, gamma: float = 1.0,
                    dataset: str = "digits", num_samples: int = 1797, hidden: int = 32, epochs: int = 10,
                    lr: float = 1e-2, canary_features: int = 3, canary_scale: float = 3.0, pilot: int = 4,
                    confidence: float = 0.95, replicates: int = 21, seed: int = 0,
                    device: str | None = None, progress: Any = False, control: bool = True) -> MethodRunAudit:
    """Audit FREDY (Future Internet 2023) with ``teachers`` clients and ``rounds`` FedAvg rounds: per trial, the
    teachers are trained by ``fredy.fedavg_teachers`` from ``fredy.initial_state`` (all trials' federations in the
    same calls, averaged within their federation), the canary one more record of client 0 in half the trials; the
    answer is ``common.noisy_argmax`` on the teachers' votes on the canary's input. Claimed: the paper's per-query
    ``gamma``; accounted: ``fredy_sensitivity(T, rounds) * gamma`` (``2 T gamma`` after FedAvg). See the module
    docstring. ``control`` (with ``rounds > 1``): the same audit with one round (no FedAvg), attached as the
    result's control (:data:`FREDY_RESTS_ON` says why)."""
    from dpaudit.training.methods import fredy
    from dpaudit.training.methods.common import model_spec, noisy_argmax, StageCache, vote_counts

    start = time.perf_counter()
    o = "audit_fredy_run"
    _common_checks(o, trials, pilot, seed, gamma, confidence, replicates, canary_features, canary_scale, num_samples,
                   hidden, epochs)
    device = _check_device(device, o)
    T = check_int(teachers, "teachers", o, low=1, high=MAX_MODELS)
    R = check_int(rounds, "rounds", o, low=1, high=1000)
    _check_models(o, trials, T, "teachers")
    train = _train_config(epochs, lr, o)
    cfg = fredy.FREDYConfig(teachers=T, rounds=R, gamma=gamma, num_samples=num_samples, model="mlp",
                            model_kwargs={"hidden": [hidden]}, teacher_train=train)
    data, parts = fredy.Config(name="fredy", method=cfg, dataset=dataset).prepare_data(seed)
    ds = data.dataset
    C = int(ds.num_classes)
    x = canary_input(ds.X[data.splits.train], features=canary_features, scale=canary_scale)
    spec = model_spec(cfg.model, cfg.model_kwargs, ds)
    w0 = fredy.initial_state(spec, _seed(seed, 6))

    def votes_fn(inc: np.ndarray, label: int, sd: int) -> np.ndarray:
        aug, ci = _augmented(data, x, label, np.empty(0, np.int64))
        flat = [aug.xy(np.r_[p, ci] if (b and m == 0) else p) for b in inc for m, p in enumerate(parts)]
        g = fredy.fedavg_teachers(spec, flat, train, rounds=R, w0=w0, seed=sd, device=device,
                                  cache=StageCache(None, as_reporter(progress)), progress=as_reporter(progress),
                                  group_size=T)
        return vote_counts(g.predict(x[None])[:, 0].reshape(len(inc), T).T, C)  # (trials, C)

    sens = fredy.fredy_sensitivity(T, R)
    result = _run_audit(
        "fredy", votes_fn=votes_fn, answer_fn=lambda v, rng: noisy_argmax(v, gamma, rng), classes=C, trials=trials,
        pilot=pilot, seed=seed, confidence=confidence, replicates=replicates, claimed=gamma, accounted=sens * gamma,
        sensitivity=sens, voters=T, gamma=gamma,
        settings={"dataset": dataset, "num_samples": num_samples, "teachers": T, "rounds": R, "gamma": gamma,
                  "hidden": hidden, "epochs": epochs, "lr": lr, "canary_scale": canary_scale,
                  "canary_features": canary_features, "pilot": pilot},
        notes=(f"FREDY's per-query claim is gamma = {gamma:g}; PATE's one-record-one-teacher analysis would give "
               f"2 gamma = {2 * gamma:g}; after FedAvg one record can move all {T} votes (accounted {sens:g} gamma).",),
        start=start, progress=progress)
    controls: tuple[RunControl, ...] = ()
    if control and R > 1:
        one = audit_fredy_run(trials=trials, teachers=T, rounds=1, gamma=gamma, dataset=dataset, num_samples=num_samples,
                              hidden=hidden, epochs=epochs, lr=lr, canary_features=canary_features,
                              canary_scale=canary_scale, pilot=pilot, confidence=confidence, replicates=replicates,
                              seed=seed, device=device, progress=progress, control=False)
        controls = (RunControl("one round (no FedAvg)", f"the same audit with 1 training round: each teacher trains "
                               f"on its own client's data only, so the canary moves at most one of the {T} votes",
                               one.bound, one.trials),)
    return dataclasses.replace(result, rests_on=FREDY_RESTS_ON, controls=controls,
                               elapsed_seconds=time.perf_counter() - start)


#: What a refutation of FREDY's per-query claim by this audit depends on.
FREDY_RESTS_ON = (
    "FedAvg: after the federated rounds every teacher's weights depend on every client's data, so one record can "
    "move all T teacher votes on a query (sensitivity 2T) while the per-query claim assumes it moves one;",
    "one released answer per trial: the claim is per query, so the audit releases exactly one noisy-max answer (the "
    "canary's input as the query); a real run answers many, which can only add to epsilon.",
)

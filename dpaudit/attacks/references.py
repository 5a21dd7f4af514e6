"""Reference models shared by the reference-model attacks (LiRA, RMIA): what each model says about each record.

:class:`ReferenceSignals` holds, per record, the two statistics the attacks use -- ``log Pr(x | theta) = log p_y``
(RMIA, the threshold attack) and LiRA's ``phi = log p_y - log sum_{j != y} p_j`` -- under the target and under K
reference models, with the inclusion masks (which reference model trained on which record), for three sets of
records:

* the **targets** (the evaluation records: the release's members and non-members),
* the **population** (RMIA's z records: the attacker's own records, held out of every reference model),
* the **calibration** records (records whose inclusion in the reference models is known, for fitting offline
  RMIA's ``a``: the records the reference models drew from).

:func:`train_reference_signals` trains the reference models with the target's recipe, in units on an executor
(:func:`~dpaudit.attacks.shadow.shadow_probabilities`: seeded per unit, checkpointed, Ray-ready), so every attack
computed from one :class:`ReferenceSignals` uses the *same* reference models and targets.

Layout (:func:`paired_inclusion`): models come in complementary pairs (2j, 2j + 1): each record the models draw
from is IN exactly one model of each pair. So any first 2P models have every record IN for exactly P of them (the
reference-count sweep takes nested subsets), each model trains on about half of the records it draws from, and
in each pair one model is OUT for the record (offline attacks on an online layout use those).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np

from dpaudit.attacks.lira import logit_confidence
from dpaudit.attacks.protocols import BatchTrainFn, Model, TrainFn
from dpaudit.attacks.shadow import shadow_probabilities
from dpaudit.attacks.threshold import loss_scores
from dpaudit.errors import DataError, ParameterError, check_bool, check_int
from dpaudit.executors import Executor, derive_seed

__all__ = ["MAX_POPULATION", "ReferenceSignals", "paired_inclusion", "default_population", "train_reference_signals",
           "signals_from_scores"]

#: Default cap on the population (RMIA's z records) held out of the attacker's pool.
MAX_POPULATION = 10_000


def default_population(pool_size: int, needed: int = 0) -> int:
    """How many of the attacker's ``pool_size`` records to hold out as RMIA's population when the reference models
    want ``needed`` pool records for training: every record they do not need, or a quarter of the pool when they
    need more than three quarters; at most 10,000 and at least 1."""
    pool_size, needed = int(pool_size), int(needed)
    spare = pool_size - needed
    m = spare if spare >= pool_size // 4 else pool_size // 4
    return max(1, min(MAX_POPULATION, m))


def paired_inclusion(num_records: int, num_models: int, *, seed: int) -> np.ndarray:
    """(num_records, num_models) bool: models (2j, 2j + 1) are complementary -- each record is IN exactly one of
    them, by a fair coin per record and pair (seeded). With an odd count the last model gets its own coins."""
    owner = "paired_inclusion"
    n = check_int(num_records, "num_records", owner, low=1)
    K = check_int(num_models, "num_models", owner, low=1)
    rng = np.random.default_rng(check_int(seed, "seed", owner, low=0))
    coins = rng.random((n, (K + 1) // 2)) < 0.5
    inc = np.empty((n, K), dtype=bool)
    inc[:, 0::2] = coins[:, : (K + 1) // 2]
    inc[:, 1::2] = ~coins[:, : K // 2]
    return inc


@dataclass(frozen=True, eq=False)
class ReferenceSignals:
    """Per-record statistics of a target model and K reference models (see the module docstring).

    Targets (n records): ``target_logp``, ``target_phi`` (n,); ``logp``, ``phi``, ``inclusion`` (n, K).
    Population (m records): ``population_target_logp`` (m,), ``population_logp`` (m, K), ``population_inclusion``
    (m, K): the models left out of a population record's offline average -- those that trained on it and, when the
    targets are IN for some models (online layout), a random complementary half (one model of each pair), so that a
    population record averages as many models as a target record and the two statistics are alike (otherwise the
    population's less noisy Pr(z) would leave non-member targets beyond its range, tied at score 1).
    Calibration (c records): ``calibration_logp``, ``calibration_inclusion`` (c, K) (c may be 0): true inclusion.
    ``layout``: ``"online"`` (targets IN for about half the models), ``"offline"`` (targets OUT of every model) or
    ``"given"`` (arrays supplied by the caller, e.g. a scores-only release).
    """

    target_logp: np.ndarray
    target_phi: np.ndarray
    logp: np.ndarray
    phi: np.ndarray
    inclusion: np.ndarray
    population_target_logp: np.ndarray
    population_logp: np.ndarray
    population_inclusion: np.ndarray
    calibration_logp: np.ndarray
    calibration_inclusion: np.ndarray
    layout: str = "given"

    def __post_init__(self) -> None:
        n, K = np.shape(self.logp)
        m = np.shape(self.population_target_logp)[0]
        shapes = {"target_logp": (n,), "target_phi": (n,), "phi": (n, K), "inclusion": (n, K),
                  "population_logp": (m, K), "population_inclusion": (m, K)}
        for name, shape in shapes.items():
            if np.shape(getattr(self, name)) != shape:
                raise DataError(f"ReferenceSignals: '{name}' must have shape {shape}; got {np.shape(getattr(self, name))}.")
        c = np.shape(self.calibration_logp)
        if len(c) != 2 or c[1] != K or np.shape(self.calibration_inclusion) != c:
            raise DataError(f"ReferenceSignals: calibration arrays must be (c, {K}); got {c} and "
                            f"{np.shape(self.calibration_inclusion)}.")

    @property
    def num_references(self) -> int:
        return int(np.shape(self.logp)[1])

    @property
    def num_targets(self) -> int:
        return int(np.shape(self.logp)[0])

    @property
    def num_population(self) -> int:
        return int(np.shape(self.population_target_logp)[0])

    def subset(self, models: Sequence[int] | slice) -> "ReferenceSignals":
        """The same records with only the reference models ``models`` (column indices or a slice)."""
        cols = np.arange(self.num_references)[models]
        if cols.size == 0:
            raise ParameterError(f"The 'models' parameter of ReferenceSignals.subset must select at least one of the "
                                 f"{self.num_references} reference models. Got {models!r} instead.")
        return replace(self, logp=self.logp[:, cols], phi=self.phi[:, cols], inclusion=self.inclusion[:, cols],
                       population_logp=self.population_logp[:, cols],
                       population_inclusion=self.population_inclusion[:, cols],
                       calibration_logp=self.calibration_logp[:, cols],
                       calibration_inclusion=self.calibration_inclusion[:, cols])

    def threshold(self) -> np.ndarray:
        """The global threshold attack's score, ``log p_y`` under the target (Yeom et al. 2018)."""
        return self.target_logp


def _stats(proba: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return loss_scores(proba, labels), logit_confidence(proba, labels)


def train_reference_signals(target: Model, X_eval, y_eval, X_pool, y_pool, *, num_references: int = 16,
                            online: bool = True, population: int | None = None, train_size: int | None = None,
                            train_fn: TrainFn | None = None, batch_train_fn: BatchTrainFn | None = None,
                            seed: int = 0, executor: Executor | None = None) -> tuple[ReferenceSignals, dict[str, Any]]:
    """Train K reference models with the target's recipe and collect their statistics (and the target's).

    ``population`` records (default: every pool record the reference models do not need, see
    :func:`default_population`) are drawn from the attacker's pool (seeded) and held out of every reference model.
    The reference models draw from (online) the evaluation records plus pool records, or (offline) pool records
    only -- as many as make each model's training set about ``train_size`` (default: half
    the evaluation records), as far as the pool allows -- in the :func:`paired_inclusion` layout. Models are trained
    by :func:`~dpaudit.attacks.shadow.shadow_probabilities` (units of 8 on ``executor``; checkpointed when the
    executor has a checkpoint folder), each queried on the targets, the population and the records it drew from.

    Returns the signals and a dict of settings (layout, population, reference training-set size, ...).
    """
    owner = "train_reference_signals"
    online = check_bool(online, "online", owner)
    K = check_int(num_references, "num_references", owner, low=2 if online else 1)
    seed = check_int(seed, "seed", owner, low=0)
    X_eval, y_eval = np.asarray(X_eval), np.asarray(y_eval)
    X_pool, y_pool = np.asarray(X_pool), np.asarray(y_pool)
    n = len(X_eval)
    if len(y_eval) != n or len(y_pool) != len(X_pool):
        raise DataError(f"{owner}: features and labels differ in length (evaluation {n} vs {len(y_eval)}, pool "
                        f"{len(X_pool)} vs {len(y_pool)}).")
    if len(X_pool) < 2:
        raise DataError(f"{owner}: the attacker's pool has {len(X_pool)} records; at least 2 are needed (population "
                        "and reference training data).")
    size = max(1, n // 2) if train_size is None else check_int(train_size, "train_size", owner, low=1)
    need = max(0, 2 * size - n) if online else 2 * size
    m = default_population(len(X_pool), need) if population is None else \
        check_int(population, "population", owner, low=1, high=len(X_pool) - 1)
    rng = np.random.default_rng(derive_seed(seed, "reference-layout"))
    perm = rng.permutation(len(X_pool))
    pop, rest = np.sort(perm[:m]), perm[m:]
    ext = np.sort(rest[:min(len(rest), need)])
    if not online and len(ext) < 2:
        raise DataError(f"{owner} (offline): the attacker's pool ({len(X_pool)} records, {m} held out as the "
                        "population) leaves fewer than 2 records to train reference models on.")
    X_draw = np.concatenate([X_eval, X_pool[ext]]) if online else X_pool[ext]
    y_draw = np.concatenate([y_eval, y_pool[ext]]) if online else y_pool[ext]
    inc = paired_inclusion(len(X_draw), K, seed=derive_seed(seed, "reference-inclusion"))
    datasets = [(X_draw[inc[:, k]], y_draw[inc[:, k]]) for k in range(K)]
    X_q = np.concatenate([X_eval, X_pool[pop], X_pool[ext]])
    y_q = np.concatenate([y_eval, y_pool[pop], y_pool[ext]])
    probs = shadow_probabilities(datasets, [X_q] * K, train_fn=train_fn, batch_train_fn=batch_train_fn,
                                 seed=derive_seed(seed, "reference-models"), executor=executor,
                                 label="reference models")
    stats = [_stats(p, y_q) for p in probs]
    L = np.stack([s[0] for s in stats], axis=1)
    PHI = np.stack([s[1] for s in stats], axis=1)
    tp = np.asarray(target.predict_proba(np.concatenate([X_eval, X_pool[pop]])), dtype=np.float64)
    t_logp, t_phi = _stats(tp, np.concatenate([y_eval, y_pool[pop]]))
    cal_rows = np.r_[np.arange(n), n + m + np.arange(len(ext))] if online else n + m + np.arange(len(ext))
    sig = ReferenceSignals(
        target_logp=t_logp[:n], target_phi=t_phi[:n], logp=L[:n], phi=PHI[:n],
        inclusion=inc[:n] if online else np.zeros((n, K), dtype=bool),
        population_target_logp=t_logp[n:], population_logp=L[n:n + m],
        population_inclusion=paired_inclusion(m, K, seed=derive_seed(seed, "population-mask")) if online and K > 1
        else np.zeros((m, K), bool),
        calibration_logp=L[cal_rows], calibration_inclusion=inc, layout="online" if online else "offline")
    sizes = inc.sum(axis=0)
    settings = {"layout": sig.layout, "num_references": K, "population": m, "population_source": "attacker's pool, "
                "held out of every reference model", "reference_draw_records": int(len(X_draw)),
                "reference_train_size": int(round(float(sizes.mean()))), "target_train_size": int(size)}
    return sig, settings


def signals_from_scores(target_logp, target_phi, reference_logp, reference_phi, reference_in, *,
                        population_logp=None, population_reference_logp=None, population_in=None) -> ReferenceSignals:
    """:class:`ReferenceSignals` from statistics computed elsewhere (a scores-only release): the calibration records
    are the targets and the population records with their true masks. Without ``population_in``, when the targets
    are IN for some models, each population record leaves out each model with the targets' IN rate (seeded, at least
    one model kept), so that population and targets average alike many models offline (see :class:`ReferenceSignals`)."""
    lp = np.asarray(reference_logp, dtype=np.float64)
    inc = np.asarray(reference_in, dtype=bool)
    K = lp.shape[1]
    if population_logp is None:
        zt, zl, zi = np.zeros(0), np.zeros((0, K)), np.zeros((0, K), dtype=bool)
        zmask = zi
    else:
        zt = np.asarray(population_logp, dtype=np.float64)
        zl = np.asarray(population_reference_logp, dtype=np.float64)
        zi = np.zeros(zl.shape, dtype=bool) if population_in is None else np.asarray(population_in, dtype=bool)
        zmask = zi
        if population_in is None and inc.any() and K > 1 and zl.ndim == 2:
            rng = np.random.default_rng(0)
            zmask = rng.random(zl.shape) < float(inc.mean())
            full = zmask.all(axis=1)
            zmask[full, rng.integers(0, K, int(full.sum()))] = False
    return ReferenceSignals(np.asarray(target_logp, dtype=np.float64), np.asarray(target_phi, dtype=np.float64), lp,
                            np.asarray(reference_phi, dtype=np.float64), inc, zt, zl, zmask,
                            np.concatenate([lp, zl]), np.concatenate([inc, zi]), "given")


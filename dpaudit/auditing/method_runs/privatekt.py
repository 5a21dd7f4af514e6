"""One-run certified audit of PrivateKT's whole training run (issue 13, item 3).

PrivateKT (Qi et al., Nature Communications 2023) claims that the *whole* knowledge transfer is eps-LDP for each
client ("model shuffling" stops the budget from accumulating). A client that takes part in T rounds uploads T
randomized responses computed from the same local data, so dpaudit's ledger composes them (T * eps by basic
composition). This audit measures which of the two the real run behaves like.

Setup (:func:`audit_run`). ``canary_clients`` = m auditor-controlled clients are added to a real PrivateKT run
(the real :class:`~dpaudit.training.methods.privatekt.PrivateKTMethod` in the real round loop: client sampling,
local training of the global model through the ensemble trainer, argmax on the K knowledge-transfer samples,
``rr_perturb``, server aggregation, buffer, self-training, importance sampling). Each canary's data is decided by
an independent fair coin: "in" = ``canary_records`` auditor records all labelled class a, "out" = the same records
all labelled class b (client-level substitution: the neighbouring relation of PrivateKT's LDP claim). Local
training on one-class data makes the client's model predict that class on (nearly) every public sample.

Observation and score. For canary j only what the server receives from it: its uploaded labels over all rounds it
was sampled in (read through ``run_privatekt``'s ``observer``); score = #(labels == a) - #(labels == b). Under
PrivateKT's randomized response with deterministic predictions this is the exact likelihood-ratio statistic: one
label's likelihood ratio is e^{eps/K} for a, e^{-eps/K} for b and 1 otherwise, whatever the number of rounds.

Bound: :func:`~dpaudit.attacks.canary.one_run_certified` (Steinke, Nasr, Jagielski 2023, Theorem 3, pure DP,
delta = 0) over the m canaries. The canaries influence the global model and thus each other's later inputs;
Theorem 3 covers this (it needs eps-DP of the whole run with respect to each canary's coin, adaptively).

Figures: claimed = ``epsilon`` (the paper's "eps for the whole process"); accounted = the basic composition, read
from the run's ledger, of the worst canary (the most rounds reported); ideal = the same one-run rule on simulated
exact likelihood-ratio scores of the randomized response at the accounted parameters, with the canaries' actual
participation counts and perfectly deterministic predictions (median over ``replicates`` coin draws).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import numpy as np

from dpaudit._format import fmt_number
from dpaudit.accountants.events import RandomizedResponse, flatten, rr_epsilon_from_keep_probability, \
    rr_keep_probability
from dpaudit.attacks.canary import one_run_certified
from dpaudit.auditing.canary_audit import check_analysis, one_run_with_plan, plan_note
from dpaudit.auditing.method_runs.result import MethodRunAudit, RunControl
from dpaudit.errors import ParameterError, check_float, check_int, check_probability

__all__ = ["audit_run", "rr_ideal_one_run_epsilon", "rr_ideal_simulator", "RESTS_ON"]

#: What a refutation of PrivateKT's whole-process claim by this audit depends on.
RESTS_ON = (
    "composition over rounds: a client reports a fresh randomized response of the same local data in every round it "
    "is sampled, and the audit scores all of them together (the paper's 'model shuffling' is claimed to stop this "
    "accumulation; nothing in the algorithm does);",
    "linkage by client id: the server receives each upload with its client's id (as Algorithm 1 does), so the auditor "
    "can add up one canary's reports across rounds; an anonymous channel (a shuffler) would remove this linkage, and a "
    "claim resting on it needs a shuffling analysis (dpaudit's account --users ...), not 'model shuffling'.",
)

_OWNER = "the PrivateKT run audit"
def _count_score(counts_a: np.ndarray, counts_b: np.ndarray) -> np.ndarray:
    return counts_a.astype(np.float64) - counts_b.astype(np.float64)


def rr_ideal_simulator(reports: np.ndarray, *, samples: int, classes: int, epsilon: float) -> Any:
    """``simulate(rng) -> (scores, included)``: the exact likelihood-ratio test of PrivateKT's randomized response
    for canaries that report ``reports[j]`` times K = ``samples`` labels, all of class a (in) or b (out) before
    perturbation, each kept with PrivateKT's keep probability for ``epsilon`` over K labels and C = ``classes``;
    fresh fair coins in every call. Score: #a - #b (the log likelihood ratio up to a positive factor)."""
    owner = "rr_ideal_simulator"
    r = np.asarray(reports, dtype=np.int64).ravel()
    if r.size < 2 or np.any(r < 0):
        raise ParameterError(f"The 'reports' parameter of {owner} must hold >= 2 counts >= 0. Got {r.size} counts.")
    K = check_int(samples, "samples", owner, low=1)
    C = check_int(classes, "classes", owner, low=2)
    beta = rr_keep_probability(check_float(epsilon, "epsilon", owner, low=0.0, low_open=True), K, C)
    p_other = (1.0 - beta) / C
    p_true = beta + p_other

    def simulate(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        inc = rng.random(r.size) < 0.5
        n = r * K
        true = rng.binomial(n, p_true)                       # labels of the canary's own class
        rest = p_other / (1.0 - p_true) if p_true < 1.0 else 0.0  # keep probability 1 in floating point: no rest
        other = rng.binomial(n - true, rest)                  # labels of the other audited class
        return np.where(inc, 1.0, -1.0) * _count_score(true, other), inc

    return simulate


def rr_ideal_one_run_epsilon(reports: np.ndarray, *, samples: int, classes: int, epsilon: float,
                             confidence: float = 0.95, replicates: int = 5, seed: int = 0) -> float:
    """Median over ``replicates`` simulated one-run audits of the bound :func:`one_run_certified` (dpaudit's earlier
    rule: equal in/out counts, Theorem 3) gives for the exact likelihood-ratio test of PrivateKT's randomized response
    (:func:`rr_ideal_simulator`)."""
    owner = "rr_ideal_one_run_epsilon"
    simulate = rr_ideal_simulator(reports, samples=samples, classes=classes, epsilon=epsilon)
    n_rep = check_int(replicates, "replicates", owner, low=1)
    rng = np.random.default_rng(np.random.SeedSequence([check_int(seed, "seed", owner, low=0), 0x1DE7]))
    out = []
    for _ in range(n_rep):
        score, inc = simulate(rng)
        out.append(one_run_certified(score, inc, confidence=confidence, score="count").epsilon)
    return float(np.median(out))


def _basic_composition(event: Any) -> float:
    """Pure-DP basic composition of the RandomizedResponse events a PrivateKT ledger records for one party."""
    total = 0.0
    for leaf, count in flatten(event):
        if not isinstance(leaf, RandomizedResponse):
            raise ParameterError(f"{_OWNER}: the ledger holds an event it cannot compose basically: "
                                 f"{type(leaf).__name__}.")
        eps = leaf.epsilon if leaf.epsilon is not None else rr_epsilon_from_keep_probability(
            leaf.keep_probability, leaf.num_samples, leaf.num_classes)
        total += count * float(eps)
    return total


def audit_run(*, canary_clients: int, seed: int = 0, confidence: float = 0.95, dataset: str = "digits",
              epsilon: float = 5.0, samples_per_round: int = 2, rounds: int = 60, client_fraction: float = 0.5,
              num_clients: int = 10, canary_records: int = 128, canary_classes: tuple[int, int] = (0, 1),
              hidden: int = 100, local_epochs: int = 5, local_lr: float = 1e-2, local_batch_size: int = 32,
              server_steps: int = 4, server_lr: float = 1e-2, replicates: int = 5, data_dir: Any = None,
              progress: Any = False, analysis: str = "auto", **config_overrides: Any) -> MethodRunAudit:
    """Certified one-run audit of a real PrivateKT run with ``canary_clients`` canary clients (module docstring).

    Parameters
    ----------
    canary_clients: m >= 2 auditor clients, each "in" (records labelled ``canary_classes[0]``) or "out" (labelled
        ``canary_classes[1]``) by a fair coin.
    seed: the coins, the canaries' records, the data split and the run (same seed, same numbers).
    confidence: of the certified bound.
    dataset, data_dir: the data set of the ordinary clients and of the auditor's records (its attacker split).
    epsilon, samples_per_round, rounds, client_fraction: PrivateKT's eps per report, K, T and the share of all
        clients (canaries included) sampled per round. Defaults: the paper's eps = 5, K = 2 and fraction 0.5;
        T = 60, so a client reports in about 30 rounds.
    num_clients: ordinary clients (Dirichlet(0.5) label skew, dpaudit's PrivateKT default split).
    canary_records: records per canary client. hidden: width of the MLP (dpaudit's PrivateKT default model).
    replicates: simulated audits of the ideal reference (median; at least 7 also plan the guessing rule).
    analysis: ``"auto"`` (the analysis and guessing rule planned on the ideal attack before the bound is computed:
        Theorem 3 or the f-DP test with pure-DP curves), ``"eps"`` or ``"fdp"``.
    local_epochs, local_lr, local_batch_size, server_steps, server_lr: PrivateKT's client and server training
        (defaults: dpaudit's PrivateKT defaults).
    progress: passed to the round engine.
    config_overrides: (direct calls only; :func:`~dpaudit.auditing.method_audit.audit_method_run` takes the named
        parameters) any other :class:`~dpaudit.training.methods.privatekt.PrivateKTConfig` field (e.g.
        ``importance_sampling``, ``buffer_rounds``); unknown names are a ParameterError naming them.
    """
    from dpaudit.training.methods.fl_common import model_spec_from, prepare_federated_data
    from dpaudit.training.methods.privatekt import PrivateKTConfig, run_privatekt
    from dpaudit.training.methods.scaffold import build_dataclass

    t0 = time.perf_counter()
    m = check_int(canary_clients, "canary_clients", _OWNER, low=2, high=100_000)
    seed = check_int(seed, "seed", _OWNER, low=0)
    conf = check_probability(confidence, "confidence", _OWNER)
    n_real = check_int(num_clients, "num_clients", _OWNER, low=1, high=100_000)
    n_rec = check_int(canary_records, "canary_records", _OWNER, low=1, high=100_000)
    width = check_int(hidden, "hidden", _OWNER, low=1, high=100_000)
    check_int(replicates, "replicates", _OWNER, low=1, high=10_000)
    check_analysis(analysis, "one-run", _OWNER)
    named = {"epsilon": epsilon, "samples_per_round": samples_per_round, "rounds": rounds,
             "client_fraction": client_fraction, "local_epochs": local_epochs, "local_lr": local_lr,
             "local_batch_size": local_batch_size, "server_steps": server_steps, "server_lr": server_lr}
    config = build_dataclass(PrivateKTConfig, {**config_overrides, **named},
                             f"{_OWNER} (PrivateKTConfig fields)")

    data = prepare_federated_data(dataset, seed=seed, num_clients=n_real, data_dir=data_dir)
    C = data.num_classes
    if (not isinstance(canary_classes, (tuple, list)) or len(canary_classes) != 2
            or any(isinstance(c, bool) or not isinstance(c, (int, np.integer)) or not 0 <= int(c) < C
                   for c in canary_classes) or int(canary_classes[0]) == int(canary_classes[1])):
        raise ParameterError(f"The 'canary_classes' parameter of {_OWNER} must be two distinct classes in [0, {C}). "
                             f"Got {canary_classes!r} instead.")
    a, b = int(canary_classes[0]), int(canary_classes[1])

    # the auditor's coins and records (its own split: the attacker pool), independent of the run's randomness
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xCA7A]))
    included = rng.random(m) < 0.5
    pool = np.asarray(data.attacker, dtype=np.int64)
    if pool.size < n_rec:
        raise ParameterError(f"The 'canary_records' parameter of {_OWNER} must be at most {pool.size} (the auditor's "
                             f"records in {dataset!r}). Got {n_rec} instead.")
    picks = np.stack([rng.choice(pool.size, size=n_rec, replace=False) for _ in range(m)])  # (m, n_rec)
    # two labelled copies of the auditor's records: rows [n, n + P) labelled a, [n + P, n + 2P) labelled b
    n0, P = len(data.y), pool.size
    X = np.concatenate([data.X, data.X[pool], data.X[pool]])
    y = np.concatenate([data.y, np.full(P, a, dtype=data.y.dtype), np.full(P, b, dtype=data.y.dtype)])
    canary_idx = tuple(np.sort(n0 + picks[j] + (0 if included[j] else P)) for j in range(m))
    data = replace(data, X=X, y=y, clients=tuple(data.clients) + canary_idx)
    canary_ids = np.arange(n_real, n_real + m)

    counts_a = np.zeros(m, dtype=np.int64)
    counts_b = np.zeros(m, dtype=np.int64)
    first_a = np.zeros(m, dtype=np.int64)     # the control: each canary's first upload only
    first_b = np.zeros(m, dtype=np.int64)
    seen = np.zeros(m, dtype=bool)

    def observe(_round: int, uploads: Any) -> None:
        for cid, labels in uploads.items():
            j = cid - n_real
            if j >= 0:  # a canary: what the server received from it this round
                na, nb = int(np.count_nonzero(labels == a)), int(np.count_nonzero(labels == b))
                counts_a[j] += na
                counts_b[j] += nb
                if not seen[j]:
                    first_a[j], first_b[j], seen[j] = na, nb, True

    spec = model_spec_from({"name": "mlp", "hidden": [width]}, data)
    res = run_privatekt(data, spec, config, seed=seed, observer=observe, progress=progress)
    t_run = time.perf_counter() - t0

    reports = np.asarray(res.reports_per_client, dtype=np.int64)[canary_ids]
    K = min(config.samples_per_round, len(data.public))
    score = _count_score(counts_a, counts_b)
    reps = max(replicates, 7)
    bound, plan = one_run_with_plan(
        score, included, None, delta=0.0, confidence=conf, analysis=analysis, score="count", calibrated=True,
        replicates=reps, seed=seed, simulate=rr_ideal_simulator(reports, samples=K, classes=C, epsilon=config.epsilon))

    # accounting: the run's own ledger, basic (pure-DP) composition per canary, the worst canary
    parties = set(res.ledger.parties)
    per_canary = np.array([_basic_composition(res.ledger.events(f"client{c}")) if f"client{c}" in parties else 0.0
                           for c in canary_ids])
    worst = int(np.argmax(per_canary))
    accounted = float(per_canary[worst])
    rdp_worst = float(res.ledger.epsilon(f"client{canary_ids[worst]}")) if f"client{canary_ids[worst]}" in parties \
        else 0.0

    # the control: the same run, each canary's first upload only (one report: no composition, no linkage needed)
    one = np.minimum(reports, 1)
    c_bound, _ = one_run_with_plan(
        _count_score(first_a, first_b), included, None, delta=0.0, confidence=conf, analysis=analysis, score="count",
        calibrated=True, replicates=reps, seed=seed,
        simulate=rr_ideal_simulator(one, samples=K, classes=C, epsilon=config.epsilon))
    control = RunControl("one report per canary", f"each canary's first upload only ({int(one.sum())} of {m} canaries "
                         f"reported at least once): one eps = {config.epsilon:g} randomized response, no composition "
                         "over rounds", c_bound, m)

    beta = rr_keep_probability(config.epsilon, K, C)
    p_true = beta + (1.0 - beta) / C
    n_in_labels = int(reports[included].sum()) * K
    share = float(counts_a[included].sum() / n_in_labels) if n_in_labels else float("nan")
    per_round = max(1, int(np.floor(config.client_fraction * data.num_clients)))
    settings = {"dataset": dataset, "canary_clients": m, "ordinary_clients": n_real, "clients_per_round": per_round,
                "canary_records": n_rec, "canary_classes": [a, b], "hidden": width, "epsilon": config.epsilon,
                "samples_per_round": K, "classes": C, "keep_probability": beta, "rounds": config.rounds,
                "client_fraction": config.client_fraction, "local_epochs": config.local_epochs,
                "local_lr": config.local_lr, "seed": seed, "replicates": replicates,
                "reports_per_canary_min": int(reports.min()), "reports_per_canary_mean": float(reports.mean()),
                "reports_per_canary_max": int(reports.max()), "run_seconds": t_run,
                "method_config": config.to_dict()}
    notes = (
        "Claimed: the paper's eps for the whole process (model shuffling); accounted: basic composition of the "
        f"worst canary's {int(reports[worst])} reports in the run's ledger ({accounted:g}; its RDP figure at delta "
        f"{fmt_number(config.delta)}: {fmt_number(rdp_worst)}).",
        f"Observed share of class-{a} labels uploaded by 'in' canaries: {share:.4f} (perfectly deterministic "
        f"predictions give {p_true:.4f}); the ideal reference assumes the latter.",
        f"Global model's test accuracy after the audited run: {res.test_accuracy:.4f} ({m} canaries among "
        f"{data.num_clients} clients).",
    )
    notes += (plan_note(plan, reps),)
    return MethodRunAudit(method="privatekt", audit="one-run", bound=bound, claimed_epsilon=float(config.epsilon),
                          accounted_epsilon=accounted, trials=m, settings=settings,
                          elapsed_seconds=time.perf_counter() - t0, notes=notes, rests_on=RESTS_ON,
                          controls=(control,))

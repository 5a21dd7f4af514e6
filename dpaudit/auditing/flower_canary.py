"""A certified client-level canary audit of a real Flower simulation (``dpaudit flower audit``).

``canaries`` canary clients join ``clients`` ordinary ones (digits softmax regression, :func:`run_digits_simulation`)
in one Flower simulation with server-side fixed clipping. Each canary k holds a fixed random direction u_k of norm
C; a fair coin, drawn before the run and kept apart from what the auditor sees, decides whether it is *included*:
an included canary answers every training message it gets with the update u_k, an excluded one is an ordinary client
training on its own digits (the replace-one neighbour: one client's data replaced). Not the zero update: Flower
1.42's fixed clipping divides by the update's norm (``compute_clip_model_update``), and an exactly zero update stops
the server with a ZeroDivisionError. Flower samples m of the N = clients + canaries nodes each round as usual (its
own uniform sampler, drawing from the nodes in partition order with the seed's generator: the same seed samples
the same clients, and gives the same bound; see :class:`~dpaudit.integrations.flower.recorder.RecordingStrategy`).

The auditor sees every round's global model (Flower's ``evaluate_fn``): x_{k,t} = <Delta_t, u_k> m / (sigma C^2) is,
in units of the noise, N(1/sigma, 1) in a round where included canary k was sampled and N(0, 1) otherwise (up to the
small projections of the other clients' updates). The score is the likelihood ratio of the subsampled Gaussian at
rate q = m/N (:func:`~dpaudit.attacks.canary.dirac_scores`); the one-run bound (Steinke, Nasr, Jagielski,
NeurIPS 2023) on the scores and the coins is certified at the stated confidence
(:func:`~dpaudit.attacks.canary.one_run_certified`). Beside it, the ideal attack's bound: the exact likelihood-ratio
test of the subsampled Gaussian with the same (q, sigma, rounds), same canaries and rule
(:func:`~dpaudit.attacks.canary.ideal_one_run_epsilon`; its "out" canary adds nothing along u_k, where an ordinary
client's update adds a small projection), and dpaudit's accounting of the same run under replace-one
(:class:`~dpaudit.accountants.events.FixedBatchGaussian`, substitution: the smaller of its RDP figure and the PLD of
fixed-size client sampling, :func:`~dpaudit.integrations.flower.accounting.sampled_pld_epsilon`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from dpaudit.accountants.events import FixedBatchGaussian
from dpaudit.accountants.rdp import RdpAccountant
from dpaudit.attacks.canary import CanaryBound, dirac_scores, ideal_one_run_epsilon, one_run_certified
from dpaudit.auditing.flower_run import MAX_SIM_CLIENTS, SIM_NON_MEMBERS
from dpaudit.errors import DataError, ParameterError, check_float, check_int, check_probability, worded
from dpaudit.integrations.flower.accounting import sampled_pld_epsilon

__all__ = ["FlowerCanaryAudit", "audit_flower_simulation", "MAX_CANARIES"]

MAX_CANARIES = 128
#: Digits per client (ordinary or canary) when the population leaves enough; fewer when it does not (every client
#: the same number: FedAvg's equal weights)
RECORDS_PER_CLIENT = 20
_DIM = 10 * 64 + 10


@dataclass(frozen=True)
class FlowerCanaryAudit:
    """The audit's result: ``bound`` certified (with ``bound.ideal_epsilon`` the ideal attack's reference),
    ``accounted_epsilon`` dpaudit's accounting of the run under replace-one."""

    bound: CanaryBound
    num_canaries: int
    num_included: int
    rounds: int
    population: int
    sample_size: int
    noise_multiplier: float
    accounted_epsilon: float
    neighbouring: str = "replace-one"
    settings: Mapping[str, Any] = field(default_factory=dict)

    @property
    def certified_epsilon(self) -> float:
        return self.bound.epsilon

    @property
    def ideal_epsilon(self) -> float | None:
        return self.bound.ideal_epsilon

    @property
    def confidence(self) -> float:
        return self.bound.confidence


def audit_flower_simulation(out: str | os.PathLike, *, canaries: int = 32, clients: int = 8, sampled: int = 4,
                            rounds: int = 5, noise_multiplier: float = 2.0, clipping_norm: float = 1.0,
                            delta: float = 1e-5, confidence: float = 0.95, seed: int = 0,
                            ideal_replicates: int = 21, factory: str | None = None,
                            factory_kwargs: Mapping[str, Any] | None = None) -> FlowerCanaryAudit:
    """Run the audit (module docstring); the run directory is written to ``out/run`` and the result to
    ``out/flower_canary_audit.json``. ``factory`` (``path/to/file.py:build``, ``--factory``): the user's own torch
    module trained by the clients instead of the softmax regression (pinned by the file's sha256, recorded in the
    result's settings); the canary directions then span the flat vector of its ``state_dict``."""
    from dpaudit._io import make_output_dir, write_json
    from dpaudit.auditing.flower_run import TorchFactoryModel, flat_arrays, run_digits_simulation
    from dpaudit.serial import to_dict
    from dpaudit.training.data import load_dataset

    owner = "audit_flower_simulation"
    K = check_int(canaries, "canaries", owner, low=2, high=MAX_CANARIES)
    clients = check_int(clients, "clients", owner, low=1, high=100)
    n = clients + K
    if n > MAX_SIM_CLIENTS:
        names = worded("--canaries + --clients of dpaudit flower audit", f"'canaries' + 'clients' of {owner}")
        raise ParameterError(f"The {names} must be at most {MAX_SIM_CLIENTS} (the simulation's SuperNodes, one per "
                             f"client). Got {K} + {clients} = {n} instead.")
    m = check_int(sampled, "sampled", owner, low=1, high=n)
    T = check_int(rounds, "rounds", owner, low=1, high=1000)
    sigma = check_float(noise_multiplier, "noise_multiplier", owner, low=0.0, low_open=True)
    C = check_float(clipping_norm, "clipping_norm", owner, low=0.0, low_open=True)
    delta = check_probability(delta, "delta", owner)
    confidence = check_probability(confidence, "confidence", owner)
    seed = check_int(seed, "seed", owner, low=0)
    reps = check_int(ideal_replicates, "ideal_replicates", owner, low=1, high=1001)
    # every SuperNode holds its own digits (an excluded canary trains on them), the non-members kept apart: fewer per
    # client when the population is large, so that every --canaries / --clients in range runs
    rpc = min(RECORDS_PER_CLIENT, (len(load_dataset("digits", seed=0)) - SIM_NON_MEMBERS) // n)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xF10E]))
    included = rng.random(K) < 0.5
    dim, pinned, model = _DIM, None, None
    if factory is not None:
        model = TorchFactoryModel.pin(factory, factory_kwargs, owner)
        dim, pinned = model.dimension(seed), {"file": model.factory, "sha256": model.sha256, "kwargs": model.kwargs}
    u = rng.standard_normal((K, dim))
    u *= C / np.linalg.norm(u, axis=1, keepdims=True)
    updates = {clients + k: u[k] for k in range(K) if included[k]}
    models: dict[int, np.ndarray] = {}

    def observe(rnd: int, arrays: Mapping[str, np.ndarray]) -> None:
        models[rnd] = flat_arrays(arrays)

    # the same output-folder rules as every command: a symbolic link is refused, a new folder gets dpaudit's marker
    root = make_output_dir(out, "Flower canary audit")
    run_digits_simulation(Path(root) / "run", clients=n, sampled=m, rounds=T, records_per_client=rpc,
                          noise_multiplier=sigma, clipping_norm=C, dp="server-fixed", delta=delta, seed=seed,
                          canary_updates=updates, observe=observe, overwrite=True,
                          factory=model)
    if sorted(models) != list(range(T + 1)):
        raise DataError(f"The Flower simulation reported the global model of rounds {sorted(models)[:12]}, not 0..{T}.")
    deltas = np.stack([models[t] - models[t - 1] for t in range(1, T + 1)])        # (T, dim)
    x = (deltas @ u.T) * m / (sigma * C * C)                                       # (T, K), units of sigma C
    scores = dirac_scores(x[:, None, :], sampling_rate=m / n, noise_multiplier=sigma)[0]
    bound = one_run_certified(scores, included, delta=delta, confidence=confidence, score="dirac-lr")
    mech = {"kind": "subsampled_gaussian", "sampling_rate": m / n, "noise_multiplier": sigma, "steps": T}
    bound = bound.with_ideal(ideal_one_run_epsilon(mech, K, delta=delta, confidence=confidence, replicates=reps, seed=seed))
    acc = RdpAccountant()
    acc.compose(FixedBatchGaussian(n, m, sigma, steps=T, neighbouring="substitution"))
    # the smaller of the RDP and PLD routes (the PLD of fixed-size client sampling; None outside its range)
    pld = sampled_pld_epsilon({(n, m, sigma): T}, delta, "replace-one")
    accounted = min(float(acc.epsilon_quiet(delta)), math.inf if pld is None else pld)
    res = FlowerCanaryAudit(bound, K, int(included.sum()), T, n, m, sigma, accounted,
                            settings={"clients": clients, "canaries": K, "records_per_client": rpc, "clipping_norm": C,
                                      "delta": delta, "confidence": confidence, "seed": seed, "ideal_replicates": reps,
                                      "observation": "every round's global model (Flower evaluate_fn)",
                                      "model": pinned if pinned is not None else "digits softmax regression"})
    write_json(Path(root) / "flower_canary_audit.json", to_dict(res))
    return res

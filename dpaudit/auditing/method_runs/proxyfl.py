"""Certified one-run audit of ProxyFL's real training run (Kalra et al. 2023): the DP-SGD proxies inside the real
round loop (deep mutual learning with the non-private private model, PushSum over the exponential graph).

:func:`audit_run` runs :class:`~dpaudit.training.methods.proxyfl.ProxyFLMethod` through the
:class:`~dpaudit.training.engine.RoundEngine`, exactly as ``dpaudit train proxyfl`` does, with ``m`` canaries spread
evenly over the clients (client ``k`` holds canaries ``k, k + K, ...``), each included by its own fair coin, and
certifies a lower bound on epsilon by Steinke, Nasr and Jagielski (2023), Theorem 3
(:func:`~dpaudit.attacks.canary.one_run_certified`).

Canaries
--------
``"dirac"`` (white-box): each canary is a worst-case *record* of client ``k`` whose clipped gradient is ``C e_j``
    on one first-layer weight ``j`` of an input feature that is zero in every one of the client's records (so no
    real gradient, distillation term included, ever touches it; :func:`~dpaudit.training.canaries.dirac_coordinates`
    per client; beyond those, random coordinates, where the real gradient competes and the audit is weaker). The proxy's real DP-SGD step (``DPSGDStep.private_grads`` in ``ProxyFLMethod._train``) calls the
    method's ``canary_hook``: in every step an included canary is Poisson-sampled with the client's rate ``q_k`` and
    added to the clipped sum before normalisation; the hook records the client's noised sum at its canary
    coordinates -- what an observer of the proxy's iterates sees (more than the per-round proxies ProxyFL sends;
    DP-SGD's accounting covers it). Scored by the mixture likelihood ratio
    (:func:`~dpaudit.attacks.canary.dirac_scores`, ``"dirac-lr"``). A Dirac record enters only the proxy's loss,
    not the private model's, so this audit tests the DP-SGD step in its real code path, not the distillation: w.r.t.
    a Dirac record the whole run is post-processing of the client's DP-SGD steps, and the paper's figure holds.
``"mislabeled"`` / ``"ood"`` (black-box): input canaries (held-out records with a wrong label / uniform noise
    inputs with random labels, :func:`~dpaudit.training.canaries.make_input_canaries`) appended to client ``k``'s
    private data when included. They train the non-private private model too, so whatever reaches the proxy
    through the distillation term ``beta KL(private || proxy)`` is captured. Scored by the loss of the canary under
    the proxy client ``k`` sends after its last round (``"loss"``). Included canaries change ``n_k`` and so
    ``q_k = b / n_k`` (the method's own rule); the claim is taken at every audited client's actual ``q_k`` and
    steps (the largest).

Figures
-------
``claimed_epsilon``: the paper's DP-SGD figure for the clients' proxies at these settings (RDP of the Poisson
subsampled Gaussian over the client's steps at ``delta``; the largest over clients). ``accounted_epsilon``: None --
dpaudit's accounting of the proxy is "not established", because the proxy distils from a private model trained
without DP on the same records. The ideal reference is the one-run bound that the exact likelihood-ratio test of the
subsampled Gaussian at the proxy's parameters certifies with the same ``m`` and confidence rule
(:func:`~dpaudit.attacks.canary.ideal_one_run_epsilon`). A certified bound above the claim refutes the paper's
figure (leakage beyond DP-SGD, e.g. through the distillation term).
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Any

import numpy as np

from dpaudit.attacks.canary import dirac_scores, ideal_one_run_epsilon, loss_scores, one_run_certified
from dpaudit.auditing.method_runs.result import MethodRunAudit
from dpaudit.errors import ParameterError, check_choice, check_float, check_int, check_probability
from dpaudit.progress import as_reporter
from dpaudit.training.limits import MAX_ROUNDS

__all__ = ["ClientDiracHook", "PROXYFL_RUN_CANARIES", "audit_run"]

PROXYFL_RUN_CANARIES = ("dirac", "mislabeled", "ood")


class ClientDiracHook:
    """``canary_hook`` of :class:`~dpaudit.training.methods.proxyfl.ProxyFLMethod` with Dirac canaries of its own
    per client: ``coords[k]`` (flat proxy-parameter coordinates) and ``included[k]`` (their fair coins).

    In step ``t`` each included canary of a stepping client ``k`` is Poisson-sampled with the client's rate (one
    ``(K, max m_k)`` uniform draw per step, seeded by ``(seed, t)``, so a client's stream does not depend on who
    steps) and adds ``C`` at its coordinate. ``observations(k)``: ``(T, m_k)`` noised sums at client ``k``'s
    coordinates in units of ``sigma C`` (NaN where the client did not step)."""

    def __init__(self, spec: Any, coords: list, included: list, *, max_grad_norm: float, noise_multiplier: float,
                 seed: int) -> None:
        from dpaudit.training.models import build_model

        owner = "ClientDiracHook"
        if len(coords) != len(included) or any(np.shape(c) != np.shape(i) for c, i in zip(coords, included)):
            raise ParameterError(f"The 'coords' and 'included' parameters of {owner} must hold one array per client, of "
                                 f"equal shapes. Got {[np.shape(c) for c in coords]} and "
                                 f"{[np.shape(i) for i in included]} instead.")
        self.C = check_float(max_grad_norm, "max_grad_norm", owner, low=0.0, low_open=True)
        self.sigma = check_float(noise_multiplier, "noise_multiplier", owner, low=0.0, low_open=True)
        self.seed = check_int(seed, "seed", owner, low=0)
        self.shapes = [(k, tuple(v.shape)) for k, v in build_model(spec).named_parameters()]
        self.sizes = [math.prod(s) for _, s in self.shapes]
        total = sum(self.sizes)
        self.coords = [np.asarray(c, dtype=np.int64) for c in coords]
        if any(c.size and (c.min() < 0 or c.max() >= total) for c in self.coords):
            raise ParameterError(f"The 'coords' parameter of {owner} must hold coordinates in [0, {total}).")
        self.included = [np.asarray(i, dtype=bool) for i in included]
        self.width = max(1, max(c.size for c in self.coords))
        self._obs: dict[int, dict[int, np.ndarray]] = {}

    def extra_gradient(self, t: int, clients, q) -> dict[str, Any] | None:
        K = len(self.coords)
        u = np.random.default_rng(np.random.SeedSequence([self.seed, int(t), 0x9F1])).random((K, self.width))
        clients = np.asarray(clients)
        qs = np.broadcast_to(np.asarray(q, dtype=float).reshape(-1), (len(clients),))
        import torch

        flat = torch.zeros((len(clients), sum(self.sizes)), dtype=torch.float32)
        any_added = False
        for row, (k, qk) in enumerate(zip(clients, qs)):
            add = self.included[k] & (u[k, : self.coords[k].size] < qk)
            if add.any():
                flat[row].index_put_((torch.as_tensor(self.coords[k][add]),),
                                     torch.full((int(add.sum()),), self.C), accumulate=True)
                any_added = True
        if not any_added:
            return None
        parts = torch.split(flat, self.sizes, dim=1)
        return {k: p.reshape((len(clients),) + s) for (k, s), p in zip(self.shapes, parts)}

    def observe(self, t: int, clients, noised: dict[str, Any]) -> None:
        import torch

        flat = torch.cat([noised[k].reshape(noised[k].shape[0], -1) for k, _ in self.shapes], dim=1)
        flat = flat.detach().cpu().double().numpy()
        self._obs[int(t)] = {int(k): flat[row, self.coords[k]] / (self.sigma * self.C)
                             for row, k in enumerate(np.asarray(clients))}

    def observations(self, client: int) -> np.ndarray:
        steps = sorted(self._obs)
        out = np.full((len(steps), self.coords[client].size), np.nan)
        for s, t in enumerate(steps):
            if client in self._obs[t]:
                out[s] = self._obs[t][client]
        return out


def _split(m: int, K: int) -> list[np.ndarray]:
    """Canary indices of each client: client k holds k, k + K, ..."""
    return [np.arange(k, m, K) for k in range(K)]


def audit_run(*, canary: str = "dirac", canaries: int = 1000, epsilon: float | None = None,
              noise_multiplier: float | None = None, dataset: str = "digits", data_dir: Any = None,
              num_clients: int = 8, samples_per_client: int = 90, rounds: int = 30, batch_size: int = 16,
              lr: float = 5e-3, hidden: tuple[int, ...] | list[int] = (100,), alpha: float = 0.5, beta: float = 0.5,
              max_grad_norm: float = 1.0, delta: float = 1e-5, confidence: float = 0.95, ideal_replicates: int = 21,
              seed: int = 0, device: str | None = "cpu", progress: Any = False) -> MethodRunAudit:
    """One-run certified audit of a real ProxyFL run (see the module docstring).

    ``canary``: ``"dirac"`` (white-box, score ``dirac-lr``) | ``"mislabeled"`` | ``"ood"`` (black-box, score
    ``loss``). ``canaries``: m >= 2, spread over the ``num_clients`` clients. The proxies' noise: ``noise_multiplier``,
    or calibrated so that the paper's DP-SGD figure of a client without canaries is ``epsilon`` at ``delta``, or (both
    None) the paper's sigma = 1. Data and model: ProxyFL's small default (``dataset`` split ``major_class`` with
    ``p_major`` 0.8, ``samples_per_client`` records each; private model and proxy MLPs with ``hidden`` widths);
    ``rounds``, ``batch_size``, ``lr``, ``alpha``, ``beta``, ``max_grad_norm`` as
    :class:`~dpaudit.training.methods.proxyfl.ProxyFLConfig` (``delta`` is also its accounting delta).
    ``progress``: a line on stderr per stage (``dpaudit.progress``).
    """
    from dpaudit.auditing.canary_audit import dpsgd_noise_for_epsilon
    from dpaudit.training.canaries import dirac_coordinates, inclusion_bits, make_input_canaries
    from dpaudit.training.engine import RoundEngine
    from dpaudit.training.methods.fl_common import DataSettings, make_classifier
    from dpaudit.training.methods.proxyfl import ProxyFLConfig, ProxyFLMethod
    from dpaudit.training.canaries import MAX_CANARIES
    from dpaudit.training.limits import MAX_MODELS
    from dpaudit.training.methods.scaffold import check_device
    from dpaudit.training.models import ModelSpec

    owner = "the ProxyFL run audit"
    check_choice(canary, "canary", owner, PROXYFL_RUN_CANARIES)
    m = check_int(canaries, "canaries", owner, low=2, high=MAX_CANARIES)     # before anything is allocated
    K = check_int(num_clients, "num_clients", owner, low=1, high=MAX_MODELS)
    n0 = check_int(samples_per_client, "samples_per_client", owner, low=2)
    T = check_int(rounds, "rounds", owner, low=1, high=MAX_ROUNDS)
    b = check_int(batch_size, "batch_size", owner, low=1, high=n0)
    delta = check_float(delta, "delta", owner, low=0.0, high=1.0, low_open=True, high_open=True)
    confidence = check_probability(confidence, "confidence", owner)
    seed = check_int(seed, "seed", owner, low=0)
    reps = check_int(ideal_replicates, "ideal_replicates", owner, low=1, high=1001)
    C = check_float(max_grad_norm, "max_grad_norm", owner, low=0.0, low_open=True)
    if not isinstance(hidden, (list, tuple)) or not hidden:
        raise ParameterError(f"The 'hidden' parameter of {owner} must be a non-empty list of widths. Got {hidden!r} instead.")
    hidden = [check_int(h, "hidden", owner, low=1) for h in hidden]
    device = check_device(device, f"'device' parameter of {owner}")
    if epsilon is not None and noise_multiplier is not None:
        raise ParameterError(f"{owner}: give at most one of 'epsilon' and 'noise_multiplier'. Got epsilon={epsilon!r}, "
                             f"noise_multiplier={noise_multiplier!r} instead.")
    steps_per_round = max(1, round(n0 / b))
    if epsilon is not None:
        eps_target = check_float(epsilon, "epsilon", owner, low=0.0, low_open=True)
        sigma = dpsgd_noise_for_epsilon(eps_target, sampling_rate=min(1.0, b / n0), steps=T * steps_per_round,
                                        delta=delta)
    else:
        sigma = 1.0 if noise_multiplier is None else check_float(noise_multiplier, "noise_multiplier", owner, low=0.0,
                                                                 low_open=True)
    rep = as_reporter(progress)
    t0 = time.perf_counter()

    data = DataSettings(num_clients=K, partition="major_class", p_major=0.8, samples_per_client=n0,
                        public_fraction=0.0).prepare(dataset, seed=seed, data_dir=data_dir)
    spec = ModelSpec("mlp", data.input_shape, data.num_classes, {"hidden": hidden})
    config = ProxyFLConfig(rounds=T, batch_size=b, lr=check_float(lr, "lr", owner, low=0.0, low_open=True),
                           alpha=check_float(alpha, "alpha", owner, low=0.0, high=1.0),
                           beta=check_float(beta, "beta", owner, low=0.0, high=1.0), noise_multiplier=sigma,
                           max_grad_norm=C, delta=delta)
    included = inclusion_bits("one-run", m, 1, seed)[0]
    owners = _split(m, K)
    hook = None
    X_can = y_can = None
    if canary == "dirac":
        ss = np.random.SeedSequence([seed, 0x9F2]).generate_state(K)
        coords = []
        for k, idx in enumerate(owners):
            if idx.size == 0:
                coords.append(np.zeros(0, dtype=np.int64))
                continue
            coords.append(dirac_coordinates(spec, idx.size, int(ss[k]), X_train=data.X[data.clients[k]]))
        hook = ClientDiracHook(spec, coords, [included[idx] for idx in owners], max_grad_norm=C,
                               noise_multiplier=sigma, seed=seed)
    else:
        pool = np.concatenate([data.attacker, data.test]).astype(np.int64)
        if canary == "mislabeled" and m > pool.size:
            raise ParameterError(f"The 'canaries' parameter of {owner} must be an int <= {pool.size} (the held-out "
                                 f"records of {dataset} available as mislabeled canaries). Got {m} instead.")
        X_can, y_can = make_input_canaries(canary, data.X[pool], data.y[pool], data.num_classes, m, seed)
        base = len(data.y)
        X_all = np.concatenate([data.X, X_can.astype(data.X.dtype)])
        y_all = np.concatenate([data.y, y_can.astype(data.y.dtype)])
        clients = tuple(np.concatenate([c, base + idx[included[idx]]]).astype(np.int64)
                        for c, idx in zip(data.clients, owners))
        data = replace(data, X=X_all, y=y_all, clients=clients)

    class _Run(ProxyFLMethod):
        """The real method; ``finalize`` also keeps the proxies the clients sent in the last round."""

        def finalize(self, server_state, client_states, messages):
            out = super().finalize(server_state, client_states, messages)
            return {**out, "sent": [st["proxy"] for st in client_states]}

    method = _Run(config, data, spec, spec, device=device, canary_hook=hook)
    rep.log(f"{owner}: {canary} canaries (m = {m}) over {K} clients, {T} rounds of ProxyFL (sigma = {sigma:.4g}, "
            f"b = {b})")
    res = RoundEngine(method, data.client_tuples(), rounds=T, seed=seed).run().result
    dp_steps = [int(c["dp_steps"]) for c in res["clients"]]
    audited = [k for k in range(K) if owners[k].size]
    claims = {k: float(method.epsilon_after(k, dp_steps[k])) for k in audited}
    claimed = max(claims.values())
    worst = max(claims, key=claims.get)

    scores = np.empty(m)
    if canary == "dirac":
        for k in audited:
            scores[owners[k]] = dirac_scores(hook.observations(k)[:, None, :], sampling_rate=float(method.q[k]),
                                             noise_multiplier=sigma)[0]
        score_name = "dirac-lr"
    else:
        for k in audited:
            probs = make_classifier(spec, res["sent"][k]).predict_proba(X_can[owners[k]])
            scores[owners[k]] = loss_scores(probs, y_can[owners[k]])
        score_name = "loss"
    bound = one_run_certified(scores, included, delta=delta, confidence=confidence, score=score_name)
    mech = {"kind": "subsampled_gaussian", "sampling_rate": float(method.q[worst]), "noise_multiplier": sigma,
            "steps": dp_steps[worst]}
    bound = bound.with_ideal(ideal_one_run_epsilon(mech, m, delta=delta, confidence=confidence, replicates=reps,
                                                   seed=seed))
    acc = [data.test_accuracy(spec, c["proxy"]) for c in res["clients"]]
    settings = {"canary": canary, "score": score_name, "canaries": m, "included": int(included.sum()),
                "dataset": dataset, "num_clients": K, "samples_per_client": n0, "rounds": T, "batch_size": b,
                "lr": float(lr), "hidden": hidden, "alpha": float(alpha), "beta": float(beta),
                "noise_multiplier": float(sigma), "max_grad_norm": C, "delta": delta, "confidence": confidence,
                "seed": seed, "ideal_replicates": reps, "sampling_rate": float(method.q[worst]),
                "dp_steps": dp_steps[worst], "epsilon_target": None if epsilon is None else float(epsilon),
                "proxy_test_accuracy_mean": float(np.mean(acc))}
    notes = [
        "dpaudit's accounting of the proxy: not established (it distils from a private model trained without DP on "
        "the same records); claimed = the paper's DP-SGD figure (RDP, subsampled Gaussian) of the largest client.",
        f"ideal reference: median over {reps} simulated one-run audits of the exact likelihood-ratio test of the "
        "subsampled Gaussian at the proxy's (q, sigma, steps), same m and confidence rule.",
    ]
    if canary == "dirac":
        notes.append("white-box: the observation is every DP-SGD step's noised sum of the client's proxy at its canary "
                     "coordinates (Dirac records enter the proxy's loss only, not the private model's).")
    else:
        notes.append("black-box: loss of each canary under the proxy its client sent after the last round; included "
                     "canaries also train the non-private private model, so leakage through distillation is captured.")
    result = MethodRunAudit("proxyfl", f"one-run/{canary}", bound, claimed, None, m, settings,
                            round(time.perf_counter() - t0, 2), tuple(notes))
    rep.log(result.summary())
    return result

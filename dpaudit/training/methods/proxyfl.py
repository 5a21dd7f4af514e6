"""ProxyFL and its baselines (Kalra et al., "Decentralized federated learning through proxy model sharing",
Nature Communications 14, 2023; Algorithm 1).

Every client k holds a private model :math:`f_{\\phi_k}` (never shared, trained without DP) and a proxy
:math:`h_{\\theta_k}` (shared, trained with DP-SGD). A round (one epoch of steps, ``round(n_k / batch)``):

1. Deep mutual learning, alternating on each Poisson-sampled mini-batch (rate :math:`q_k = b/n_k`):
   private step on :math:`(1-\\alpha)\\,CE(f_\\phi) + \\alpha\\,KL(h_\\theta \\| f_\\phi)` (Adam, no DP), then a
   DP-SGD step on :math:`(1-\\beta)\\,CE(h_\\theta) + \\beta\\,KL(f_\\phi \\| h_\\theta)`: per-example gradients
   clipped to L2 norm C, summed, :math:`\\mathcal N(0, \\sigma^2C^2 I)` added, divided by the expected batch
   size :math:`q_k n_k` (DP-Adam).
2. Communication over the directed exponential graph (peer :math:`2^{t \\bmod \\lceil\\log_2 K\\rceil}` away),
   PushSum: client k keeps :math:`\\tfrac12 (w_k\\theta_k, w_k)`, sends the other half to its peer, adds what
   it receives and de-biases :math:`\\theta_k \\leftarrow z_k / w_k` (paper, "Proxy aggregation").

All clients' models are trained at once with ``torch.func`` (``vmap`` over clients, and over examples for the
per-example gradients); each client's Poisson masks and noise come from its own generator, seeded from
``(seed, round, client)``, so the result does not depend on batching. This is a DP step of its own (the
ensemble trainer's DP-SGD handles a plain cross-entropy loss, not the DML loss with a second model).

``communication`` selects the family member (the paper's baselines, Fig. 3):

=========  ==========  ===============================================================
method     mutual      communication
=========  ==========  ===============================================================
proxyfl    yes         ``pushsum`` (``replace``: the reference code's deviation, below)
fml        yes         ``average`` (central server averages the proxies, Shen et al.)
fedavg     no          ``average`` (DP-SGD local models, central averaging)
avgpush    no          ``pushsum``
cwt        no          ``cycle`` (each round client k takes the model of client k-1)
regular    no          ``none`` (local training only)
joint      no          ``none`` on one client holding all records
=========  ==========  ===============================================================

Without ``mutual`` a client has one model, trained with DP-SGD on plain cross-entropy (the paper uses
DP-SGD for Regular, Joint, FedAvg, AvgPush and CWT).

Deviation option ``communication="replace"``: the public reference code replaces a client's proxy by the one
it receives instead of averaging; available, documented, not the default.

Privacy. Each round releases the proxy after ``steps_k`` Poisson-subsampled Gaussian steps: the ledger
records ``SubsampledGaussian(q_k, sigma, steps_k)`` per client per round (add/remove-one record
adjacency, RDP, delta = 1/n_k by default; with unequal sizes the ledger uses the smallest delta). A client
whose next round would exceed ``budget`` drops out (it neither trains nor communicates again). The DP-SGD
analysis treats the private model (trained without DP on the same data) as a fixed function when the proxy's
loss uses it — but the private model depends on the very records being protected, so the standard analysis
does not cover the distillation term; the statement says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar, Any, Mapping

import numpy as np
import torch
from torch.func import functional_call, grad, vmap

from dpaudit._format import fmt_number
from dpaudit.accountants.events import SubsampledGaussian
from dpaudit.training.dpsgd import DPSGDStep, clip_and_noise, poisson_masks
from dpaudit.errors import ParameterError, check_bool, check_choice, check_float, check_int
from dpaudit.training.limits import MAX_RECORDS, MAX_ROUNDS
from dpaudit.training.engine import PerClient, RoundEngine, party_seed
from dpaudit.training.methods.fl_common import (ConfigDict, DataSettings, FederatedData, exponential_peer,
                                                init_model_state, make_classifier, model_spec_from)
from dpaudit.training.methods.scaffold import (MethodConfig, Outcome, Release, RunContext, RunResult, build_dataclass,
                                               execute, merge_tables)
from dpaudit.training.optim import StackedOptimizer

__all__ = ["Config", "ProxyFLConfig", "ProxyFLMethod", "ProxyFLResult", "run", "run_proxyfl", "PROXYFL_VARIANTS",
           "VARIANT_OF", "dml_dp_assumption", "paper_statement", "party_setup", "party_count", "PARTY_TASKS", "PAPER_FIGURE_LABEL", "NOT_ESTABLISHED_LABEL", "poisson_masks", "clip_and_noise", "proxyfl_statement"]

COMMUNICATIONS = ("pushsum", "replace", "average", "cycle", "none")
PROXYFL_VARIANTS: dict[str, dict[str, Any]] = {
    "proxyfl": {"mutual": True, "communication": "pushsum"},
    "fml": {"mutual": True, "communication": "average"},
    "fedavg": {"mutual": False, "communication": "average"},
    "avgpush": {"mutual": False, "communication": "pushsum"},
    "cwt": {"mutual": False, "communication": "cycle"},
    "regular": {"mutual": False, "communication": "none"},
    "joint": {"mutual": False, "communication": "none"},
}
#: registry name -> variant (the method name in the release)
VARIANT_OF: dict[str, str] = {"proxyfl": "proxyfl", "fml": "fml", "fedavg-dpsgd": "fedavg", "avgpush": "avgpush",
                              "cwt": "cwt", "regular": "regular", "joint": "joint"}


PAPER_FIGURE_LABEL = "the paper's figure, under an assumption that does not hold (private model's influence not accounted)"
NOT_ESTABLISHED_LABEL = ("release guarantee: not established (the proxy distils from a private model trained without DP "
                         "on the same records)")


DISTILLATION_VOIDS_BOUND = (
    "The released proxy's DP-SGD bound is void: the paper's epsilon holds only if the private model it distils from "
    "were independent of the protected records. No finite guarantee is established for the release.")


def dml_dp_assumption() -> str:
    return ("The DP-SGD accounting of the proxy treats every term of its loss as a function of the sampled record "
            "only. The proxy's loss includes beta * KL(private || proxy), where the private model was trained "
            "WITHOUT DP on the same client data; it is a function of every record, so one record changes the "
            "distillation target of all others. Standard DP-SGD accounting (as in the paper) does not cover this "
            "cross-record dependence; the epsilon shown assumes it away.")


@dataclass(frozen=True)
class ProxyFLConfig(ConfigDict):
    """Parameters of ProxyFL and its family. Defaults: small and fast; ``configs/proxyfl.toml`` holds the paper's.

    Attributes
    ----------
    rounds: communication rounds. batch_size: expected Poisson batch b (q_k = b / n_k).
    lr, weight_decay: Adam for every model (paper: 1e-3, 1e-4).
    alpha, beta: DML weights of the private and the proxy loss (paper: 0.5).
    noise_multiplier, max_grad_norm: DP-SGD sigma and C (paper: 1.0, 1.0). dp: False trains without DP.
    mutual: private + proxy (True) or a single DP model (False). communication: see the module docstring.
    private_model, proxy_model: model names (``dpaudit.training.models``), kwargs in *_kwargs.
    delta: None -> 1/n_k per client. budget: epsilon at which a client drops out (None: never).
    eval_every: evaluate every this many rounds (0 = at the end only).
    """

    label: ClassVar[str] = "ProxyFL"

    rounds: int = 15
    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 1e-4
    alpha: float = 0.5
    beta: float = 0.5
    noise_multiplier: float = 1.0
    max_grad_norm: float = 1.0
    dp: bool = True
    mutual: bool = True
    communication: str = "pushsum"
    private_model: str = "mlp"
    proxy_model: str = "mlp"
    private_kwargs: dict | None = None
    proxy_kwargs: dict | None = None
    delta: float | None = None
    budget: float | None = None
    eval_every: int = 0

    def __post_init__(self) -> None:
        o = "ProxyFLConfig"
        check_int(self.rounds, "rounds", o, low=1, high=MAX_ROUNDS)
        check_int(self.batch_size, "batch_size", o, low=1, high=MAX_RECORDS)
        check_float(self.lr, "lr", o, low=0.0, low_open=True)
        check_float(self.weight_decay, "weight_decay", o, low=0.0)
        check_float(self.alpha, "alpha", o, low=0.0, high=1.0)
        check_float(self.beta, "beta", o, low=0.0, high=1.0)
        check_float(self.noise_multiplier, "noise_multiplier", o, low=0.0, low_open=True)
        check_float(self.max_grad_norm, "max_grad_norm", o, low=0.0, low_open=True)
        check_bool(self.dp, "dp", o)
        check_bool(self.mutual, "mutual", o)
        check_choice(self.communication, "communication", o, COMMUNICATIONS)
        if self.delta is not None:
            check_float(self.delta, "delta", o, low=0.0, high=1.0, low_open=True, high_open=True)
        if self.budget is not None:
            check_float(self.budget, "budget", o, low=0.0, low_open=True)
        check_int(self.eval_every, "eval_every", o, low=0, high=MAX_ROUNDS)



# --------------------------------------------------------------------------------------------------
# functional pieces
# --------------------------------------------------------------------------------------------------


def _kl(p_target: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """KL(p_target || softmax(logits)) per row (p_target detached)."""
    logq = torch.log_softmax(logits, -1)
    return (p_target * (torch.log(p_target.clamp_min(1e-12)) - logq)).sum(-1)


def _ce(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return -torch.log_softmax(logits, -1).gather(-1, y.unsqueeze(-1)).squeeze(-1)


class _Models:
    """A torch module per architecture, used only as a function of a flat parameter vector."""

    def __init__(self, spec: Any, device: torch.device | None = None) -> None:
        from dpaudit.training.models import build_model

        self.spec = spec
        self.module = build_model(spec).to(device or "cpu")
        if any(True for _ in self.module.buffers()):
            raise ParameterError(f"ProxyFL needs models without buffers (no batch norm: DP-SGD per-example gradients); "
                                 f"{spec.name!r} with kwargs {spec.kwargs} has buffers. Use norm='group' or None.")
        self.module.eval()  # no dropout randomness inside vmap
        self.names = [n for n, _ in self.module.named_parameters()]
        self.shapes = [tuple(p.shape) for _, p in self.module.named_parameters()]
        self.sizes = [int(np.prod(sh)) for sh in self.shapes]

    def flatten(self, state: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return torch.cat([state[n].reshape(-1).float() for n in self.names])

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        return {n: t.reshape(sh) for n, t, sh in zip(self.names, torch.split(flat, self.sizes, dim=-1), self.shapes)}

    def __call__(self, flat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return functional_call(self.module, self.unflatten(flat), (x,))

    def unflatten_stacked(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """(M, P) -> {name: (M, *shape)}."""
        M = flat.shape[0]
        return {n: t.reshape((M,) + sh) for n, t, sh in zip(self.names, torch.split(flat, self.sizes, dim=-1), self.shapes)}

    def flatten_stacked(self, tensors: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """{name: (M, *shape)} -> (M, P)."""
        return torch.cat([tensors[n].reshape(tensors[n].shape[0], -1) for n in self.names], dim=1)


def _stacked_adam(cfg: ProxyFLConfig, flat: torch.Tensor, m: torch.Tensor, v: torch.Tensor,
                  step: torch.Tensor) -> StackedOptimizer:
    """Adam (coupled L2 weight decay, as ``torch.optim.Adam``) for the flat stacked models (M, P), resumed from
    the clients' moments and step counts."""
    opt = StackedOptimizer({"flat": flat}, kind="adam", lr=cfg.lr, weight_decay=cfg.weight_decay)
    opt.load({"opt/step": step, "opt/exp_avg/flat": m, "opt/exp_avg_sq/flat": v})
    return opt


# --------------------------------------------------------------------------------------------------
# the method as engine step functions
# --------------------------------------------------------------------------------------------------


class ProxyFLMethod:
    """ProxyFL (and the baselines of :data:`PROXYFL_VARIANTS`) as engine step functions."""

    def __init__(self, config: ProxyFLConfig, data: FederatedData, private_spec: Any, proxy_spec: Any,
                 *, device: str | None = None, canary_hook: Any = None) -> None:
        """``canary_hook`` (off by default; for certified audits only): an object with
        ``extra_gradient(t, clients, q) -> {name: (len(clients), *shape)} | None`` and
        ``observe(t, clients, noised_sums)``, called in every DP-SGD step ``t = round * max(steps) + j`` of the
        proxies with the clients that step and their sampling rates: the extra gradients (white-box canaries, each
        of norm <= C, like one more clipped example) are added to the clipped sum before the normalisation, and
        ``observe`` then sees each stepping client's noised sum (private gradient times :math:`q_k n_k`), e.g.
        :class:`dpaudit.training.canaries.DiracHook`. Without a hook nothing of the step changes."""
        if canary_hook is not None and not config.dp:
            raise ParameterError("The 'canary_hook' parameter of ProxyFLMethod needs DP-SGD proxies (dp = true). "
                                 "Got dp = false instead.")
        self.canary_hook = canary_hook
        self.config = config
        self.data = data
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        self.private = _Models(private_spec, self.device) if config.mutual else None
        self.proxy = _Models(proxy_spec, self.device)
        self.private_spec, self.proxy_spec = private_spec, proxy_spec
        self.n = np.array([len(c) for c in data.clients])
        if np.any(self.n < 1):
            raise ParameterError("Every ProxyFL client needs at least one record.")
        self.q = np.minimum(1.0, config.batch_size / self.n)
        self.steps = np.maximum(1, np.round(self.n / config.batch_size)).astype(int)
        self.delta_k = np.full(len(self.n), config.delta) if config.delta is not None else 1.0 / self.n
        self.ledger_delta = float(self.delta_k.min())

    # -- privacy ----------------------------------------------------------------------------------
    def round_event(self, k: int) -> SubsampledGaussian:
        return SubsampledGaussian(sampling_rate=float(self.q[k]), noise_multiplier=self.config.noise_multiplier,
                                  steps=int(self.steps[k]))

    def epsilon_after(self, k: int, total_steps: int) -> float:
        """Client k's own (eps, delta_k) after ``total_steps`` DP-SGD steps (RDP)."""
        from dpaudit.accountants.dpsgd import rdp_subsampled_gaussian
        from dpaudit.accountants.rdp import DEFAULT_ORDERS, rdp_to_epsilon

        if total_steps == 0:
            return 0.0
        rdp = rdp_subsampled_gaussian(float(self.q[k]), self.config.noise_multiplier, DEFAULT_ORDERS) * total_steps
        return rdp_to_epsilon(DEFAULT_ORDERS, rdp, float(self.delta_k[k]), warn=False)[0]

    # -- engine hooks -------------------------------------------------------------------------------
    def init_server(self, seed: int) -> tuple[dict, Any]:
        from dpaudit.accountants.ledger import PrivacyLedger

        ledger = PrivacyLedger(delta=self.ledger_delta)
        if self.config.dp:
            ledger.add_assumption(dml_dp_assumption() if self.config.mutual else
                                  "Each client's model is trained with DP-SGD on its own records only.")
        state = {"round": 0, "seed": int(seed), "ledger": ledger, "history": [],
                 "active": np.ones(self.data.num_clients, dtype=bool)}
        return state, {"round": 0, "seed": int(seed)}

    def init_client(self, client_id: int, data: Any, seed: int) -> dict:
        # all proxies start from one initialisation (as averaging-based schemes need); private models differ
        proxy = init_model_state(self.proxy_spec, party_seed(seed, 0, -1, stream=11))
        p = self.proxy.flatten(proxy).numel()
        st = {"proxy": proxy, "proxy_m": torch.zeros(p), "proxy_v": torch.zeros(p), "proxy_step": 0,
              "w": 1.0, "dp_steps": 0, "active": True, "rounds": 0}
        if self.config.mutual:
            priv = init_model_state(self.private_spec, party_seed(seed, 0, client_id, stream=12))
            p = self.private.flatten(priv).numel()
            st.update({"private": priv, "private_m": torch.zeros(p), "private_v": torch.zeros(p), "private_step": 0})
        return st

    def client_active(self, state: dict) -> bool:
        return bool(state["active"])

    def client_step(self, state: dict, data: tuple, message: Any) -> tuple[dict, dict]:
        s, r = self.client_steps([state], [data], [message])
        return s[0], r[0]

    def _receive(self, state: dict, message: Any) -> dict:
        """Apply the messages of the previous round's communication to this client's proxy."""
        if not isinstance(message, Mapping) or "kind" not in message:
            return state
        kind = message["kind"]
        st = dict(state)
        if kind == "pushsum":
            # z_k = kept half + received half; theta_k = z_k / w_k  (de-biasing)
            z = {k: 0.5 * st["w"] * st["proxy"][k] for k in st["proxy"]}
            w = 0.5 * st["w"]
            if message.get("z") is not None:
                z = {k: z[k] + message["z"][k] for k in z}
                w = w + message["w"]
            else:  # nothing sent to us this round (peer dropped): keep our whole mass
                z = {k: st["w"] * st["proxy"][k] for k in st["proxy"]}
                w = st["w"]
            st["proxy"] = {k: z[k] / w for k in z}
            st["w"] = float(w)
        elif kind in ("replace", "average", "cycle") and message.get("params") is not None:
            st["proxy"] = {k: v.clone() for k, v in message["params"].items()}
        return st

    def client_step_in_group(self, state: dict, data: tuple, message: Any, group: list[int]) -> tuple[dict, dict]:
        """One client's step when it runs alone (a Flower ClientApp): its records padded to the largest client of
        the round's ``group``, as in the batched in-process step, so its Poisson masks are the same draws."""
        s, r = self.client_steps([state], [data], [message], width=int(max(self.n[int(c)] for c in group)))
        return s[0], r[0]

    def client_steps(self, states: list, datas: list, messages: list, *, width: int | None = None) -> tuple[list, list]:
        """Every given client's round at once (``width``: pad the records to at least this many, see
        :meth:`client_step_in_group`)."""
        cfg = self.config
        ids = [int(d[0]) for d in datas]
        msg_round = [m.get("round", 0) if isinstance(m, Mapping) else 0 for m in messages]
        t = max(msg_round)
        seed = next(m["seed"] for m in messages if isinstance(m, Mapping) and "seed" in m)
        states = [self._receive(s, m) for s, m in zip(states, messages)]
        # budget check before training: a client whose next round would exceed its budget drops out
        train_ids, out_states, replies = [], list(states), [None] * len(ids)
        for i, k in enumerate(ids):
            if cfg.dp and cfg.budget is not None and self.epsilon_after(k, states[i]["dp_steps"] + int(self.steps[k])) > cfg.budget:
                out_states[i] = {**states[i], "active": False}
                replies[i] = {"dropped": True}
            else:
                train_ids.append(i)
        if train_ids:
            trained = self._train([states[i] for i in train_ids], [datas[i] for i in train_ids], seed, t, width)
            for i, st in zip(train_ids, trained):
                k = ids[i]
                st = {**st, "dp_steps": st["dp_steps"] + (int(self.steps[k]) if cfg.dp else 0), "rounds": st["rounds"] + 1}
                out_states[i] = st
                reply: dict[str, Any] = {"dropped": False, "event": self.round_event(k) if cfg.dp else None}
                if cfg.communication == "pushsum":
                    reply["z"] = {n: 0.5 * st["w"] * v for n, v in st["proxy"].items()}
                    reply["w"] = 0.5 * st["w"]
                elif cfg.communication != "none":
                    reply["params"] = st["proxy"]
                    reply["n"] = int(self.n[k])
                replies[i] = reply
        return out_states, replies

    def _padded_data(self, datas: list, width: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
        """The clients' records stacked and zero-padded to the largest client (or ``width`` if larger):
        ``(X, Y, sizes, padded size)``."""
        M = len(datas)
        n = torch.tensor([len(d[2]) for d in datas])
        nmax = max(int(n.max()), int(width or 0))
        shape = datas[0][1].shape[1:]
        dev = self.device
        X = torch.zeros((M, nmax) + tuple(shape))
        Y = torch.zeros((M, nmax), dtype=torch.long)
        for i, d in enumerate(datas):
            X[i, : len(d[2])] = torch.as_tensor(d[1], dtype=torch.float32)
            Y[i, : len(d[2])] = torch.as_tensor(d[2], dtype=torch.long)
        X, Y = X.to(dev), Y.to(dev)  # randomness (masks, noise) is drawn on the CPU and moved: same on any device
        return X, Y, n, nmax

    def _train(self, states: list, datas: list, seed: int, t: int, width: int | None = None) -> list:
        """One round (an epoch of steps) of DML / DP-SGD for the given clients at once."""
        cfg = self.config
        M = len(states)
        ids = [int(d[0]) for d in datas]
        dev = self.device
        X, Y, n, nmax = self._padded_data(datas, width)
        q = torch.tensor([float(self.q[k]) for k in ids])
        steps = torch.tensor([int(self.steps[k]) for k in ids])
        gens = [torch.Generator().manual_seed(party_seed(seed, t, k, stream=13)) for k in ids]

        proxy_f, private_f = self.proxy, self.private
        mutual = private_f is not None
        proxy = torch.stack([proxy_f.flatten(s["proxy"]) for s in states]).to(dev)
        pm = torch.stack([s["proxy_m"] for s in states]).to(dev)
        pv = torch.stack([s["proxy_v"] for s in states]).to(dev)
        pstep = torch.tensor([float(s["proxy_step"]) for s in states])
        proxy_opt = _stacked_adam(cfg, proxy, pm, pv, pstep)
        if mutual:
            priv = torch.stack([private_f.flatten(s["private"]) for s in states]).to(dev)
            qm = torch.stack([s["private_m"] for s in states]).to(dev)
            qv = torch.stack([s["private_v"] for s in states]).to(dev)
            qstep = torch.tensor([float(s["private_step"]) for s in states])
            private_opt = _stacked_adam(cfg, priv, qm, qv, qstep)
        alpha, beta, C, sigma = cfg.alpha, cfg.beta, cfg.max_grad_norm, cfg.noise_multiplier
        b = beta if mutual else 0.0

        def private_loss(pp, xp, yp, mask, teacher):
            logits = private_f(pp, xp)
            per = (1 - alpha) * _ce(logits, yp) + alpha * _kl(teacher, logits)
            return (per * mask).sum() / mask.sum().clamp_min(1.0)

        def proxy_rows(logits, y, teacher):
            return (1 - b) * _ce(logits, y) + b * _kl(teacher, logits)

        def proxy_loss_batch(pp, xp, yp, mask, teacher):
            per = proxy_rows(proxy_f(pp, xp), yp, teacher)
            return (per * mask).sum() / mask.sum().clamp_min(1.0)

        dp_step = DPSGDStep(proxy_f.module, loss=proxy_rows)
        private_grad = vmap(grad(private_loss))
        proxy_grad_nodp = vmap(grad(proxy_loss_batch))
        expected = (q * n.float()).clamp_min(1.0).unsqueeze(1).to(dev)  # q_k n_k: DP-SGD's fixed denominator
        rows = torch.arange(M, device=dev).unsqueeze(1)
        for j in range(int(steps.max())):
            gate_cpu = (steps > j).float()
            # Poisson sampling: each real record independently with probability q_k (own generator per client)
            sel = poisson_masks(gens, q, n, nmax, gate_cpu)
            L = max(1, int(sel.sum(1).max()))
            order = torch.argsort((~sel).to(torch.int8), dim=1, stable=True)[:, :L]
            mask = torch.gather(sel, 1, order).float().to(dev)
            order = order.to(dev)
            xb = X[rows, order]
            yb = Y[rows, order]
            if mutual:
                with torch.no_grad():
                    teacher_proxy = torch.softmax(vmap(proxy_f)(proxy, xb), -1)
                g = private_grad(priv, xb, yb, mask, teacher_proxy)
                private_opt.update_where({"flat": priv}, {"flat": g}, gate_cpu.numpy() > 0)
                with torch.no_grad():
                    teacher_priv = torch.softmax(vmap(private_f)(priv, xb), -1)
            else:
                teacher_priv = torch.full(tuple(yb.shape) + (self.data.num_classes,), 1.0 / self.data.num_classes,
                                          device=dev)
            if cfg.dp:
                noise = torch.stack([torch.randn(proxy.shape[-1], generator=gens[i]) for i in range(M)]).to(dev)
                parts = dp_step.private_grads(
                    proxy_f.unflatten_stacked(proxy), {}, xb, yb, mask, max_grad_norm=C, noise_multiplier=sigma,
                    expected_batch=expected.reshape(-1), noise=proxy_f.unflatten_stacked(noise), extra=teacher_priv)
                if self.canary_hook is not None:  # audits only: white-box canaries and the observer's view
                    parts = self._hooked(parts, t * int(self.steps.max()) + j, ids, gate_cpu, q, expected.reshape(-1))
                g = proxy_f.flatten_stacked(parts)
            else:
                g = proxy_grad_nodp(proxy, xb, yb, mask, teacher_priv)
            proxy_opt.update_where({"flat": proxy}, {"flat": g}, gate_cpu.numpy() > 0)
        out = []
        proxy, pm, pv, pstep = (proxy.cpu(), proxy_opt.slots["exp_avg"]["flat"].cpu(),
                                proxy_opt.slots["exp_avg_sq"]["flat"].cpu(), proxy_opt.step)
        if mutual:
            priv, qm, qv, qstep = (priv.cpu(), private_opt.slots["exp_avg"]["flat"].cpu(),
                                   private_opt.slots["exp_avg_sq"]["flat"].cpu(), private_opt.step)
        for i, s in enumerate(states):
            ns = {**s, "proxy": {k: v.clone() for k, v in proxy_f.unflatten(proxy[i]).items()},
                  "proxy_m": pm[i].clone(), "proxy_v": pv[i].clone(), "proxy_step": int(pstep[i])}
            if mutual:
                ns.update({"private": {k: v.clone() for k, v in private_f.unflatten(priv[i]).items()},
                           "private_m": qm[i].clone(), "private_v": qv[i].clone(), "private_step": int(qstep[i])})
            out.append(ns)
        return out

    def _hooked(self, grads: dict, step: int, ids: list, gate: torch.Tensor, q: torch.Tensor,
                expected: torch.Tensor) -> dict:
        """The canary hook on one step's private gradients (see ``__init__``): the stepping clients' canary
        gradients added to the clipped sum (divided by the same :math:`q_k n_k`), then their noised sums observed."""
        hook = self.canary_hook
        live = np.flatnonzero(gate.numpy() > 0)
        if live.size == 0:
            return grads
        clients = np.asarray(ids)[live]
        extra = hook.extra_gradient(step, clients, q.numpy()[live])
        rows = torch.as_tensor(live, device=expected.device)
        e = expected.index_select(0, rows)
        out, noised = {}, {}
        for name, v in grads.items():
            shape = (-1,) + (1,) * (v.dim() - 1)
            v = v.clone()
            if extra is not None:
                v.index_add_(0, rows, extra[name].to(v.device, v.dtype) / e.reshape(shape).to(v.dtype))
            out[name] = v
            noised[name] = v.index_select(0, rows) * e.reshape(shape).to(v.dtype)
        hook.observe(step, clients, noised)
        return out

    def server_step(self, state: dict, replies: Mapping[int, dict]) -> tuple[dict, Any]:
        """Record each client's DP event and route/aggregate the proxies (no model is held here)."""
        cfg = self.config
        t, seed = state["round"], state["seed"]
        ledger = state["ledger"]
        active = state["active"].copy()
        live = {k: r for k, r in replies.items() if not r.get("dropped")}
        for k, r in replies.items():
            if r.get("dropped"):
                active[k] = False
        for k in sorted(live):
            if live[k].get("event") is not None:
                ledger.record(f"client{k}", live[k]["event"])
        nxt = {"round": t + 1, "seed": seed}
        route = {"pushsum": self._route_pushsum, "replace": self._route_replace, "average": self._route_average,
                 "cycle": self._route_cycle}.get(cfg.communication)
        messages = route(live, active, nxt, t) if route is not None else nxt
        return {**state, "round": t + 1, "ledger": ledger, "active": active}, messages

    # -- communication: one stage per scheme; each returns the messages of the next round ----------------
    def _route_pushsum(self, live: Mapping[int, dict], active: np.ndarray, nxt: dict, t: int) -> Any:
        """PushSum: each live client's half share goes to its peer on the exponential graph; a share for an
        inactive peer stays home; receivers get the summed shares."""
        K = self.data.num_clients
        recv: dict[int, tuple[dict, float]] = {}
        for k in sorted(live):
            peer = exponential_peer(k, t, K) if K > 1 else k
            dest = k if (peer == k or not active[peer]) else peer  # a share for an inactive peer stays home
            z, w = live[k]["z"], live[k]["w"]
            if dest in recv:
                z0, w0 = recv[dest]
                z, w = {n: z0[n] + z[n] for n in z0}, w0 + w
            recv[dest] = (z, w)
        return PerClient({k: ({**nxt, "kind": "pushsum", "z": recv[k][0], "w": recv[k][1]} if k in recv
                              else {**nxt, "kind": "pushsum"}) for k in range(K)})

    def _route_replace(self, live: Mapping[int, dict], active: np.ndarray, nxt: dict, t: int) -> Any:
        """The reference code's deviation: a client's peer receives its proxy, which replaces the peer's own."""
        K = self.data.num_clients
        msgs = PerClient({k: dict(nxt) for k in range(K)})  # every client learns the round and seed
        for k in sorted(live):
            peer = exponential_peer(k, t, K) if K > 1 else k
            if active[peer]:
                msgs[peer] = {**nxt, "kind": "replace", "params": live[k]["params"]}
        return msgs

    def _route_average(self, live: Mapping[int, dict], active: np.ndarray, nxt: dict, t: int) -> Any:
        """FML / FedAvg: a server averages the live clients' proxies and sends the average to every client."""
        if not live:
            return nxt
        names = next(iter(live.values()))["params"].keys()
        avg = {n: torch.stack([live[k]["params"][n] for k in sorted(live)]).mean(0) for n in names}
        return {**nxt, "kind": "average", "params": avg}

    def _route_cycle(self, live: Mapping[int, dict], active: np.ndarray, nxt: dict, t: int) -> Any:
        """CWT: each active client takes the model of the previous active client."""
        K = self.data.num_clients
        msgs = PerClient({k: dict(nxt) for k in range(K)})
        order = [k for k in range(K) if active[k]]
        for pos, k in enumerate(order):
            if k in live:
                msgs[order[(pos + 1) % len(order)]] = {**nxt, "kind": "cycle", "params": live[k]["params"]}
        return msgs

    def finalize(self, server_state: dict, client_states: list, messages: Any) -> dict:
        """Deliver the last round's communication (post-processing of released proxies) and return everything."""
        final = []
        for k, st in enumerate(client_states):
            m = messages.get(k) if isinstance(messages, PerClient) else messages
            final.append(self._receive(st, m) if st["active"] else st)
        return {"server": server_state, "clients": final}


@dataclass(frozen=True)
class ProxyFLResult:
    """Per-client models and what the run recorded.

    ``private_accuracy[k]``: client k's private model on the test set (None without ``mutual``);
    ``proxy_accuracy[k]``: its proxy (the shared model) on the test set. ``epsilon[k]``: its own
    (eps, delta_k) after the steps it took.
    """

    private_states: tuple | None
    proxy_states: tuple
    private_accuracy: np.ndarray | None
    proxy_accuracy: np.ndarray
    epsilon: np.ndarray
    delta: np.ndarray
    rounds_per_client: np.ndarray
    ledger: Any
    rounds_run: int


def run_proxyfl(data: FederatedData, private_spec: Any, proxy_spec: Any, config: ProxyFLConfig, *, seed: int,
                device: str | None = None,
                checkpoint_dir: str | Path | None = None, checkpoint_every: int = 0, progress: Any = False,
                stop_after: int | None = None) -> ProxyFLResult:
    """Run ProxyFL (or a family member, by ``config``) and evaluate every client's models on the test set."""
    from dpaudit.training.parties import current_executor

    method = ProxyFLMethod(config, data, private_spec, proxy_spec, device=device)
    parties = current_executor()  # the clients run with the parties (Flower): their states stay there
    engine = RoundEngine(method, data.client_tuples(), rounds=config.rounds, seed=seed, clients_per_round=None,
                         checkpoint_dir=checkpoint_dir if parties is None else None, checkpoint_every=checkpoint_every,
                         progress=progress, stop_after=stop_after, parties=parties)
    out = engine.run()
    clients = out.result["clients"]
    proxy_acc = np.array([data.test_accuracy(proxy_spec, c["proxy"]) for c in clients])
    priv_acc = np.array([data.test_accuracy(private_spec, c["private"]) for c in clients]) if config.mutual else None
    eps = np.array([method.epsilon_after(k, c["dp_steps"]) if config.dp else math.inf for k, c in enumerate(clients)])
    return ProxyFLResult(
        private_states=tuple(c["private"] for c in clients) if config.mutual else None,
        proxy_states=tuple(c["proxy"] for c in clients), private_accuracy=priv_acc, proxy_accuracy=proxy_acc,
        epsilon=eps, delta=method.delta_k.copy(), rounds_per_client=np.array([c["rounds"] for c in clients]),
        ledger=out.result["server"]["ledger"], rounds_run=len(out.participants))


# --------------------------------------------------------------------------------------------------
# statement, claim and release
# --------------------------------------------------------------------------------------------------

PROXYFL_DEFAULTS: dict[str, dict[str, Any]] = {
    # 90 records per client: with 100, digits' ~108 training records of a class do not always cover a party's
    # 80 major-class records after the other parties' draws (seeds 1, 6, 9 failed); 90 fits seeds 0..29
    "data": {"num_clients": 8, "partition": "major_class", "p_major": 0.8, "samples_per_client": 90,
             "public_fraction": 0.0},
    "model": {"name": "mlp", "hidden": [100]},
    "method": {"rounds": 30, "batch_size": 16, "lr": 5e-3},
    "run": {"checkpoint_every": 5, "num_threads": 1},
}


def proxyfl_statement(result: ProxyFLResult, config: ProxyFLConfig, *, variant: str) -> Any:
    """Per-client (eps, delta) of the shared models: the ledger's statement of every client and the maximum
    (headline: the one statement of the release's scope, named by the ledger's route), with the DML assumption when
    the proxy distils from a non-private model (then no finite bound is established: route ``"not established"``)."""
    from dpaudit.accountants.statement import AccountingResult, PrivacyStatement

    ledger = result.ledger
    if not config.dp:
        st = PrivacyStatement(math.inf, 0.0, "none", label="no DP (dp = false)",
                              assumptions=("The shared models were trained without DP-SGD: no privacy guarantee.",))
        return AccountingResult(f"{variant}: no DP", (st,), facts={"dp": False})
    per = [ledger.statement(p) for p in ledger.parties]
    overall = replace(ledger.overall(), route=ledger.accountant)
    warnings_ = []
    if overall.epsilon > 10:
        warnings_.append(f"The shared model's epsilon is large ({fmt_number(overall.epsilon)} at delta {fmt_number(overall.delta)}): "
                         "with these settings DP-SGD gives a weak guarantee. It is reported as is.")
    facts = {"epsilon_per_client_own_delta": [float(e) for e in result.epsilon],
             "delta_per_client": [float(d) for d in result.delta],
             "rounds_per_client": [int(r) for r in result.rounds_per_client]}
    statements: tuple[PrivacyStatement, ...] = tuple(per) + (overall,)
    if config.mutual:
        # The proxy distils from a private model trained without DP on the same records: the DP-SGD figures
        # are the paper's, under an assumption that does not hold; the release's own guarantee is not established.
        warnings_.append(dml_dp_assumption())
        paper = tuple(replace(s, label=f"{s.label or 'DP-SGD'}: {PAPER_FIGURE_LABEL}", route="",
                              assumptions=tuple(s.assumptions) + (dml_dp_assumption(),)) for s in statements)
        facts["paper_epsilon"] = float(overall.epsilon)
        none = PrivacyStatement(
            math.inf, float(overall.delta), "not established", label=NOT_ESTABLISHED_LABEL,
            assumptions=(dml_dp_assumption(), "No accounting of the private model's influence on the proxy exists here, "
                         "so no finite epsilon is established for the released proxy. The DP-SGD figure "
                         f"({fmt_number(overall.epsilon)} at delta {fmt_number(overall.delta)}) is the paper's, under an assumption that "
                         "does not hold."), route="not established")
        return AccountingResult(f"{variant}: DP-SGD (Poisson subsampled Gaussian) per client, distilling from a "
                                "non-private model", (none,) + paper, facts=facts, warnings=tuple(warnings_),
                                parameters=_statement_parameters(config))
    return AccountingResult(f"{variant}: DP-SGD (Poisson subsampled Gaussian) per client", statements,
                            facts=facts, warnings=tuple(warnings_),
                            parameters=_statement_parameters(config))


def _statement_parameters(config: ProxyFLConfig) -> dict[str, Any]:
    return {"noise_multiplier": config.noise_multiplier, "max_grad_norm": config.max_grad_norm,
            "batch_size": config.batch_size, "rounds": config.rounds, "budget": config.budget}


def paper_statement(statement: Any) -> Any:
    """The DP-SGD statement the paper reports (the overall per-client maximum): the headline when the proxy does not
    distil from a private model, else the last statement (the paper's figure, under an assumption that does not hold)."""
    return statement.statements[-1]


@dataclass(frozen=True)
class Config(MethodConfig):
    """A ProxyFL-family run (``proxyfl``, ``fml``, ``fedavg-dpsgd``, ``avgpush``, ``cwt``, ``regular``, ``joint``):
    ``[data]``, ``[model]`` (the proxy; the private model is ``[method] private_model``/``private_kwargs``,
    default the proxy's architecture), ``[method]`` (:class:`ProxyFLConfig`, whose ``mutual`` and
    ``communication`` follow the method's name, plus ``release_client``: whose shared model is released) and
    ``[run]``."""

    release_client: int = 0

    method_cls = ProxyFLConfig
    data_cls = DataSettings
    defaults = PROXYFL_DEFAULTS

    @classmethod
    def method_table(cls, name: str, table: Mapping[str, Any]) -> ProxyFLConfig:
        settings = {**table, **PROXYFL_VARIANTS[VARIANT_OF[name]]}
        if name == "proxyfl" and table.get("communication") == "replace":
            settings["communication"] = "replace"  # the reference code's deviation, asked for explicitly
        return build_dataclass(ProxyFLConfig, settings, f"[method] of {name}")

    @classmethod
    def from_tables(cls, name: str, tables: Mapping[str, Mapping[str, Any]]) -> "Config":
        t = merge_tables(cls.defaults, tables)
        method = dict(t.get("method", {}))
        client = method.pop("release_client", 0)
        proxy = t.get("model", {}).get("name", "mlp")
        method.update({"private_model": method.get("private_model") or proxy, "proxy_model": proxy})
        base = super().from_tables(name, {**t, "method": method})
        return replace(base, release_client=check_int(client, "release_client", f"[method] of {name}", low=0))


def run(config: Config, out: Any, *, seed: int = 0, progress: Any = True, overwrite: bool = False) -> RunResult | None:
    """Run ProxyFL or one of its baselines and write a release.

    The released model is client ``release_client``'s shared model (its proxy; for single-model variants its
    model), which is what an outsider can obtain; private-model accuracy is reported as utility.
    """
    return execute(config, out, seed=seed, progress=progress, overwrite=overwrite, body=_train, config_cls=Config)


def _setting(cfg: Config, seed: int) -> tuple[FederatedData, Any, Any]:
    """The run's data (``joint``: one client holding every record) and the private and proxy model specs."""
    from dpaudit.training.models import ModelSpec

    data = cfg.prepare_data(seed)
    if VARIANT_OF[cfg.name] == "joint":  # one client holding every client's records
        data = replace(data, clients=(data.members,))
    proxy_spec = model_spec_from(cfg.model, data)
    config = cfg.method
    priv_kw = config.private_kwargs if config.private_kwargs is not None else (
        proxy_spec.kwargs if config.private_model == proxy_spec.name else {})
    private_spec = ModelSpec(config.private_model, data.input_shape, data.num_classes, dict(priv_kw))
    return data, private_spec, proxy_spec


def party_setup(cfg: Config, seed: int) -> tuple[ProxyFLMethod, list]:
    """What a client rebuilds before its first round (see :mod:`dpaudit.training.parties`): the method's step
    functions and the clients' data (it reads only its own)."""
    data, private_spec, proxy_spec = _setting(cfg, seed)
    return ProxyFLMethod(cfg.method, data, private_spec, proxy_spec, device=cfg.run.device), data.client_tuples()


def party_count(cfg: Config, seed: int) -> int:
    """The number of clients of a run."""
    return int(_setting(cfg, seed)[0].num_clients)


def _party_round(setup: tuple, party: int, payload: Any, state: Any) -> tuple[Any, Any]:
    from dpaudit.training.engine import party_round_step

    return party_round_step(setup[0], setup[1][party], party, payload, state)


def _party_state(setup: tuple, party: int, payload: Any, state: Any) -> tuple[Any, Any]:
    from dpaudit.training.engine import party_final_state

    return party_final_state(setup[0], setup[1][party], party, payload, state)


#: The clients' side of a run when they run elsewhere (see :mod:`dpaudit.training.parties`).
PARTY_TASKS = {"round": _party_round, "state": _party_state}


def _train(cfg: Config, ctx: RunContext) -> Outcome | None:
    from dpaudit.training.ensemble import DPSGDConfig, TrainConfig

    variant, seed = VARIANT_OF[cfg.name], ctx.seed
    data, private_spec, proxy_spec = _setting(cfg, seed)
    config = cfg.method
    res = run_proxyfl(data, private_spec, proxy_spec, config, seed=seed, device=cfg.run.device,
                      checkpoint_dir=ctx.checkpoints, checkpoint_every=cfg.run.checkpoint_every, progress=ctx.reporter,
                      stop_after=cfg.run.stop_after)
    if cfg.run.stop_after is not None and res.rounds_run < config.rounds:
        return None
    k = check_int(cfg.release_client, "release_client", f"[method] of {cfg.name}", low=0, high=data.num_clients - 1)
    statement = proxyfl_statement(res, config, variant=variant)
    utility: dict[str, Any] = {"proxy_accuracy_mean": float(res.proxy_accuracy.mean()),
                               "proxy_accuracy": [float(a) for a in res.proxy_accuracy],
                               "released_client": k, "test_accuracy": float(res.proxy_accuracy[k])}
    if res.private_accuracy is not None:
        utility["private_accuracy_mean"] = float(res.private_accuracy.mean())
        utility["private_accuracy"] = [float(a) for a in res.private_accuracy]
    q = min(1.0, config.batch_size / len(data.clients[k]))
    recipe = TrainConfig(epochs=config.rounds, batch_size=config.batch_size, lr=config.lr, weight_decay=config.weight_decay,
                         dp=DPSGDConfig(noise_multiplier=config.noise_multiplier, max_grad_norm=config.max_grad_norm,
                                        sampling_rate=q) if config.dp else None)
    paper = paper_statement(statement)
    claim = {"epsilon": float(paper.epsilon), "delta": float(paper.delta),
             "granularity": "example",
             "text": (f"{variant} (Kalra et al. 2023): each client's shared model is (eps, delta)-DP per record of "
                      "that client (add/remove one) by DP-SGD RDP accounting; clients drop out at their budget.")}
    assumptions = [f"Released: client {k}'s shared model (after the last round's communication). Members: every client's "
                   "records (communication mixes all clients' models); non-members: held-out test records.",
                   "train_config approximates the recipe (DP-SGD on cross-entropy, one epoch per round) for shadow models; "
                   "the real shared model also mixes peers' models and (ProxyFL/FML) distils from a private model."]
    flags = []
    if config.mutual and config.dp:
        assumptions.append(dml_dp_assumption())
        flags.append(("distillation_not_accounted", DISTILLATION_VOIDS_BOUND + " " + dml_dp_assumption()))
    if config.communication == "replace":
        assumptions.append("DEVIATION from the paper: proxies are replaced by the received one (public reference code), "
                           "not PushSum-averaged.")
    return Outcome(Release(
        method=variant, dataset=data.dataset_spec,
        params={"method": config.to_dict(), "data": data.partition, "model": dict(cfg.model)},
        utility=utility, classifier=make_classifier(proxy_spec, res.proxy_states[k]), train_config=recipe,
        ledger=res.ledger, statement=statement, claim=claim, membership=data.membership(),
        assumptions=assumptions, flags=flags), rounds_run=res.rounds_run)

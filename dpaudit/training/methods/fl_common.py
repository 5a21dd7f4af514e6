"""Building blocks shared by PrivateKT, ProxyFL and their baselines: pure functions on numpy/torch.

- Randomized response on labels and its unbiased aggregation (PrivateKT, Qi et al. 2023, Eqs. 2-3).
- Entropy-weighted sampling (PrivateKT Eqs. 4 and 5) and the FIFO knowledge buffer.
- The Laplace mechanism on L1-clipped model updates (the LDP baselines FedAvg/FedSGD+LDP).
- The directed exponential graph and PushSum mixing with de-biasing weights (ProxyFL, Kalra et al. 2023).

Every function takes its randomness as an explicit ``numpy.random.Generator`` so that callers derive it
from ``(seed, round, party)`` (see :func:`dpaudit.training.engine.party_rng`).
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from dpaudit.errors import ParameterError, check_choice, check_float, check_int, check_probability
from dpaudit.training.limits import MAX_EPOCHS, MAX_MODELS, MAX_RECORDS, MAX_ROUNDS

__all__ = [
    "rr_perturb",
    "rr_debias",
    "predictive_entropy",
    "entropy_weights",
    "weighted_sample",
    "buffer_push",
    "buffer_fetch",
    "clip_l1",
    "laplace_scale_for_ldp",
    "laplace_ldp",
    "exponential_peer",
    "exponential_graph",
    "pushsum_mix",
]


# --------------------------------------------------------------------------------------------------
# Randomized response (PrivateKT Eq. 2) and unbiased aggregation (Eq. 3)
# --------------------------------------------------------------------------------------------------


def rr_perturb(labels: np.ndarray, keep_probability: float, num_classes: int, rng: np.random.Generator) -> np.ndarray:
    """C-ary randomized response on integer labels (PrivateKT Eq. 2).

    Each label is kept with probability :math:`\\beta` (``keep_probability``) and otherwise replaced by a
    label drawn uniformly from all C classes (the true one included), so
    :math:`P(\\hat y = y) = \\beta + (1-\\beta)/C` and :math:`P(\\hat y = j) = (1-\\beta)/C` for :math:`j \\ne y`.

    Parameters
    ----------
    labels: integer array of any shape with values in [0, C).
    keep_probability: :math:`\\beta \\in [0, 1]`.
    num_classes: C >= 2.
    rng: the reporting party's generator.

    Returns the perturbed labels (same shape, int64).
    """
    owner = "rr_perturb"
    beta = check_probability(keep_probability, "keep_probability", owner, allow_zero=True, allow_one=True)
    c = check_int(num_classes, "num_classes", owner, low=2)
    y = np.asarray(labels)
    if y.size and (not np.issubdtype(y.dtype, np.integer) or y.min() < 0 or y.max() >= c):
        raise ParameterError(f"The 'labels' parameter of {owner} must hold integers in [0, {c}). Got values in [{y.min()}, {y.max()}] instead.")
    keep = rng.random(y.shape) < beta
    random_labels = rng.integers(0, c, size=y.shape)
    return np.where(keep, y, random_labels).astype(np.int64)


def rr_debias(reports: np.ndarray, keep_probability: float, num_classes: int) -> np.ndarray:
    """Unbiased estimate of the mean one-hot prediction from randomized-response reports (PrivateKT Eq. 3).

    :math:`\\hat{\\mathbf y}_i = \\frac{1}{\\beta}\\left(\\frac{1}{|G|}\\sum_c \\hat{\\mathbf y}_{c,i} - \\frac{1-\\beta}{C}\\mathbf 1\\right)`.

    ``reports``: integer labels of shape (G, K) (G reporting clients, K samples). Returns (K, C) floats whose
    expectation over the randomized response is the clients' mean one-hot vector (entries may be negative).
    """
    owner = "rr_debias"
    beta = check_float(keep_probability, "keep_probability", owner, low=0.0, high=1.0, low_open=True)
    c = check_int(num_classes, "num_classes", owner, low=2)
    r = np.asarray(reports)
    if r.ndim != 2 or r.shape[0] < 1:
        raise ParameterError(f"The 'reports' parameter of {owner} must have shape (clients >= 1, samples). Got shape {r.shape} instead.")
    onehot_mean = np.eye(c)[r].mean(axis=0)  # (K, C)
    return (onehot_mean - (1.0 - beta) / c) / beta


# --------------------------------------------------------------------------------------------------
# Importance sampling (Eqs. 4 and 5) and the knowledge buffer
# --------------------------------------------------------------------------------------------------


def predictive_entropy(probs: np.ndarray) -> np.ndarray:
    """:math:`u_i = -\\sum_j p_{ij}\\log p_{ij}` (nats) of each row of ``probs`` (n, C); 0 log 0 = 0."""
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 2:
        raise ParameterError(f"The 'probs' parameter of predictive_entropy must have shape (n, C). Got shape {p.shape} instead.")
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * np.log(p), 0.0)
    return -terms.sum(axis=1)


def entropy_weights(probs: np.ndarray, sign: float = 1.0) -> np.ndarray:
    """Sampling weights :math:`w_i \\propto \\exp(\\mathrm{sign}\\cdot u_i)` (a softmax over the pool).

    ``sign=+1``: PrivateKT Eq. (4), knowledge-transfer samples, uncertain ones favoured.
    ``sign=-1``: Eq. (5), self-training samples, confident ones favoured. Computed in log space.
    """
    s = check_float(sign, "sign", "entropy_weights")
    logits = s * predictive_entropy(probs)
    logits -= logits.max()
    w = np.exp(logits)
    return w / w.sum()


def weighted_sample(weights: np.ndarray | None, k: int, rng: np.random.Generator, pool_size: int | None = None) -> np.ndarray:
    """Draw ``k`` distinct indices with probabilities ``weights`` (successive draws without replacement, as
    ``numpy.random.Generator.choice``); ``weights=None`` draws uniformly from ``pool_size``."""
    n = pool_size if weights is None else len(weights)
    k = check_int(k, "k", "weighted_sample", low=0, high=n)
    return rng.choice(n, size=k, replace=False, p=weights)


def buffer_push(buffer: Sequence[tuple[np.ndarray, np.ndarray]], indices: np.ndarray, targets: np.ndarray,
                capacity: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """FIFO knowledge buffer: append one round's ``(indices, targets)`` and keep the newest ``capacity``
    rounds (PrivateKT's B counts rounds of aggregated knowledge, K samples each, as in its reference code).
    ``capacity=1`` is "no buffer" (only the current round). Returns a new list; the input is not changed."""
    cap = check_int(capacity, "capacity", "buffer_push", low=1)
    idx = np.asarray(indices, dtype=np.int64)
    tgt = np.asarray(targets)
    if tgt.shape[0] != idx.shape[0]:
        raise ParameterError(f"The 'targets' parameter of buffer_push must have one row per index ({idx.shape[0]}). Got {tgt.shape[0]} instead.")
    return (list(buffer) + [(idx, tgt)])[-cap:]


def buffer_fetch(buffer: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """All ``(indices, targets)`` in the buffer, oldest first, concatenated."""
    if not buffer:
        raise ParameterError("The 'buffer' parameter of buffer_fetch must hold at least one round. Got an empty buffer instead.")
    return np.concatenate([b[0] for b in buffer]), np.concatenate([b[1] for b in buffer])


# --------------------------------------------------------------------------------------------------
# Laplace mechanism on L1-clipped updates (FedAvg/FedSGD + LDP)
# --------------------------------------------------------------------------------------------------


def clip_l1(vectors: np.ndarray, bound: float) -> np.ndarray:
    """Scale each row of ``vectors`` (n, d) to L1 norm at most ``bound``: :math:`v\\min(1, C/\\|v\\|_1)`."""
    c = check_float(bound, "bound", "clip_l1", low=0.0, low_open=True)
    v = np.asarray(vectors, dtype=np.float64)
    norms = np.abs(v).sum(axis=-1, keepdims=True)
    return v * np.minimum(1.0, c / np.maximum(norms, 1e-300))


def laplace_scale_for_ldp(bound: float, epsilon: float) -> float:
    """Laplace scale :math:`b = 2C/\\epsilon` that makes the release of one L1-clipped update
    :math:`\\epsilon`-LDP.

    Derivation: a client's input is its whole local data set, so neighbouring inputs may give *any* two
    clipped updates :math:`u, u'` with :math:`\\|u\\|_1, \\|u'\\|_1 \\le C`; the L1 sensitivity of the clipped
    update is :math:`\\sup\\|u-u'\\|_1 = 2C`. The Laplace mechanism with scale :math:`\\Delta_1/\\epsilon` is
    :math:`\\epsilon`-DP (Dwork & Roth 2014, Theorem 3.6), hence :math:`b = 2C/\\epsilon`. Clipping by the L2
    norm instead would give L1 sensitivity :math:`2C\\sqrt d`, which is why the L1 norm is clipped.
    """
    c = check_float(bound, "bound", "laplace_scale_for_ldp", low=0.0, low_open=True)
    eps = check_float(epsilon, "epsilon", "laplace_scale_for_ldp", low=0.0, low_open=True)
    return 2.0 * c / eps


def laplace_ldp(vectors: np.ndarray, bound: float, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """Clip each row to L1 norm ``bound`` and add i.i.d. Laplace(2C/eps) noise: each row is eps-LDP."""
    clipped = clip_l1(vectors, bound)
    return clipped + rng.laplace(0.0, laplace_scale_for_ldp(bound, epsilon), size=clipped.shape)


# --------------------------------------------------------------------------------------------------
# Directed exponential graph and PushSum (ProxyFL)
# --------------------------------------------------------------------------------------------------


def exponential_peer(client: int, round_index: int, num_clients: int) -> int:
    """The out-peer of ``client`` in round ``round_index`` on the directed exponential graph:
    :math:`(k + 2^{t \\bmod (\\lfloor\\log_2(n-1)\\rfloor+1)}) \\bmod n` (Assran et al. 2019, as in ProxyFL Fig. 2)."""
    n = check_int(num_clients, "num_clients", "exponential_peer", low=2)
    k = check_int(client, "client", "exponential_peer", low=0, high=n - 1)
    t = check_int(round_index, "round_index", "exponential_peer", low=0)
    hops = int(math.floor(math.log2(n - 1))) + 1
    return (k + 2 ** (t % hops)) % n


def exponential_graph(round_index: int, num_clients: int, active: Sequence[bool] | None = None) -> np.ndarray:
    """Column-stochastic mixing matrix :math:`P^{(t)}` of the one-peer exponential graph.

    Every active client k keeps half of its mass and sends half to its peer:
    :math:`P_{kk} = P_{\\mathrm{peer}(k),k} = 1/2`. If the peer is inactive (dropped out) the client keeps
    everything (:math:`P_{kk} = 1`); an inactive client keeps its own mass and sends nothing. Columns sum
    to 1, so PushSum preserves :math:`\\sum_k w_k\\theta_k` and :math:`\\sum_k w_k`.
    """
    n = check_int(num_clients, "num_clients", "exponential_graph", low=2)
    act = np.ones(n, dtype=bool) if active is None else np.asarray(active, dtype=bool)
    P = np.zeros((n, n))
    for k in range(n):
        peer = exponential_peer(k, round_index, n)
        if act[k] and act[peer] and peer != k:
            P[k, k] += 0.5
            P[peer, k] += 0.5
        else:
            P[k, k] = 1.0
    return P


def pushsum_mix(values: np.ndarray, weights: np.ndarray, P: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One PushSum step (ProxyFL Algorithm 1, lines 7-10).

    Client k holds de-biased parameters :math:`\\theta_k` and a weight :math:`w_k`. It sends
    :math:`(P_{k'k} w_k\\theta_k, P_{k'k} w_k)` to each out-neighbour k'; receivers sum what arrives:
    :math:`z = P(w\\odot\\theta)`, :math:`w' = Pw`, and de-bias :math:`\\theta' = z / w'`.

    ``values``: (n, d) de-biased parameters; ``weights``: (n,) positive; ``P``: (n, n) column-stochastic.
    Returns ``(theta_new, w_new, z)``. With a column-stochastic P, ``z.sum(0)`` equals
    ``(weights[:, None] * values).sum(0)`` and ``w_new.sum()`` equals ``weights.sum()``.
    """
    v = np.asarray(values, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    P = np.asarray(P, dtype=np.float64)
    n = v.shape[0]
    if w.shape != (n,) or P.shape != (n, n):
        raise ParameterError(f"pushsum_mix needs values (n, d), weights (n,), P (n, n) with one n. Got {v.shape}, {w.shape}, {P.shape} instead.")
    if not np.allclose(P.sum(axis=0), 1.0) or np.any(P < 0):
        raise ParameterError("The 'P' parameter of pushsum_mix must be column-stochastic (non-negative, columns summing to 1).")
    z = P @ (w[:, None] * v)
    w_new = P @ w
    return z / w_new[:, None], w_new, z


# --------------------------------------------------------------------------------------------------
# torch helpers: one model's parameters as a state dict, server-side training, classifiers
# --------------------------------------------------------------------------------------------------

import torch  # noqa: E402  (kept below the numpy-only helpers on purpose)
from dpaudit.training.optim import StackedOptimizer  # noqa: E402


def init_model_state(spec: Any, seed: int) -> dict[str, torch.Tensor]:
    """Freshly initialised parameters of ``spec`` (PyTorch default init) from ``seed``, global RNG untouched."""
    from dpaudit.training.models import build_model

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed) % (2**63 - 1))
        module = build_model(spec)
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def make_classifier(spec: Any, state: Mapping[str, torch.Tensor]) -> Any:
    """A :class:`~dpaudit.training.models.Classifier` holding the parameters ``state``."""
    from dpaudit.training.models import Classifier, build_model

    module = build_model(spec)
    module.load_state_dict(dict(state))
    return Classifier(spec, module=module)


def soft_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean over rows of :math:`-\\sum_j t_j \\log\\mathrm{softmax}(z)_j` (targets are distributions)."""
    return -(targets * torch.log_softmax(logits, dim=-1)).sum(-1).mean()


def to_distribution(estimates: np.ndarray, mode: str) -> np.ndarray:
    """Turn debiased estimates (rows may hold negative entries) into training targets.

    ``mode="hard"``: one-hot of the argmax (PrivateKT's reference code). ``mode="soft"``: negative entries
    set to 0 and the row renormalised (a row that is all <= 0 becomes uniform).
    """
    e = np.asarray(estimates, dtype=np.float64)
    mode = check_choice(mode, "mode", "to_distribution", ("hard", "soft"))
    if mode == "hard":
        return np.eye(e.shape[1])[e.argmax(1)]
    p = np.clip(e, 0.0, None)
    s = p.sum(1, keepdims=True)
    return np.where(s > 0, p / np.where(s > 0, s, 1.0), 1.0 / e.shape[1])


def adam_train(spec: Any, state: Mapping[str, torch.Tensor], opt_state: Mapping | None, X: np.ndarray,
               targets: np.ndarray, *, steps: int | None = None, epochs: int | None = None,
               batch_size: int | None = None, lr: float = 1e-3, weight_decay: float = 0.0,
               seed: int = 0, optimizer: str = "adam") -> tuple[dict[str, torch.Tensor], dict]:
    """Train one model with Adam (or plain SGD: ``optimizer="sgd"``) on soft ``targets`` (n, C) and return
    ``(state, optimizer_state)``.

    Either ``steps`` full-batch (``batch_size=None``) or mini-batch steps, or ``epochs`` passes of shuffled
    mini-batches of ``batch_size``. ``opt_state`` (from a previous call) carries Adam's moments across calls,
    as a server that keeps its optimizer between rounds does.
    """
    from dpaudit.training.models import build_model

    owner = "adam_train"
    if (steps is None) == (epochs is None):
        raise ParameterError(f"{owner} needs exactly one of 'steps' and 'epochs'.")
    module = build_model(spec)
    module.load_state_dict(dict(state))
    module.train()
    named = dict(module.named_parameters())
    # the stacked optimizer with M = 1 on views of the module's parameters; fused=False is torch.optim.Adam's
    # arithmetic bit for bit
    views = {k: p.detach().unsqueeze(0) for k, p in named.items()}
    opt = StackedOptimizer(views, kind=optimizer, lr=check_float(lr, "lr", owner, low=0.0, low_open=True),
                           weight_decay=check_float(weight_decay, "weight_decay", owner, low=0.0), fused=False)
    if opt_state:
        opt.load(opt_state)
    Xt = torch.as_tensor(np.asarray(X, dtype=np.float32))
    Tt = torch.as_tensor(np.asarray(targets, dtype=np.float32))
    n = len(Xt)
    gen = torch.Generator().manual_seed(int(seed) % (2**63 - 1))
    bs = n if batch_size is None else min(check_int(batch_size, "batch_size", owner, low=1), n)
    if steps is not None:
        batches = []
        for _ in range(check_int(steps, "steps", owner, low=0)):
            batches.append(torch.arange(n) if bs == n else torch.randperm(n, generator=gen)[:bs])
    else:
        batches = []
        for _ in range(check_int(epochs, "epochs", owner, low=0)):
            perm = torch.randperm(n, generator=gen)
            batches += [perm[s : s + bs] for s in range(0, n, bs)]
    for idx in batches if n else []:
        grads = torch.autograd.grad(soft_cross_entropy(module(Xt[idx]), Tt[idx]), list(named.values()))
        opt.update(views, {k: g.unsqueeze(0) for k, g in zip(named, grads)}, None)
    new_state = {k: v.detach().clone() for k, v in module.state_dict().items()}
    return new_state, _clone_tree(opt.state())


def _clone_tree(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, Mapping):
        return {k: _clone_tree(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_clone_tree(v) for v in obj]
    return obj


def flatten_state(state: Mapping[str, torch.Tensor]) -> np.ndarray:
    """Floating-point entries of a state dict, concatenated in key order (float64)."""
    return np.concatenate([v.detach().double().reshape(-1).numpy() for v in state.values() if v.is_floating_point()])


def unflatten_state(vector: np.ndarray, like: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Inverse of :func:`flatten_state` (non-float entries copied from ``like``)."""
    out, pos = {}, 0
    for k, v in like.items():
        if v.is_floating_point():
            n = v.numel()
            out[k] = torch.as_tensor(vector[pos : pos + n], dtype=v.dtype).reshape(v.shape).clone()
            pos += n
        else:
            out[k] = v.clone()
    return out


# --------------------------------------------------------------------------------------------------
# Federated data: one data set split into clients, a public pool, a test set and the attacker's pool
# --------------------------------------------------------------------------------------------------

from dataclasses import dataclass, field  # noqa: E402



class GlobalModelSteps:
    """Engine hooks shared by the methods whose server holds one global model (PrivateKT, FedAvg/FedSGD + LDP):
    clients keep no state between rounds, one client's step is the batched step of one, the test accuracy is
    recorded every ``config.eval_every`` rounds, and the run's result is the server state. A subclass sets
    ``config``, ``data`` and ``spec`` and defines ``client_steps``."""

    config: Any
    data: "FederatedData"
    spec: Any

    def init_client(self, client_id: int, data: Any, seed: int) -> dict:
        return {}

    def client_step(self, state: dict, data: tuple, message: dict) -> tuple[dict, dict]:
        states, replies = self.client_steps([state], [data], [message])  # type: ignore[attr-defined]
        return states[0], replies[0]

    def history_after(self, state: Mapping[str, Any], params: Mapping[str, torch.Tensor]) -> list:
        """The server's accuracy history after round ``state["round"]`` trained ``params``."""
        t = state["round"]
        history = list(state["history"])
        if self.config.eval_every and (t + 1) % self.config.eval_every == 0:
            history.append([t + 1, self.data.test_accuracy(self.spec, params)])
        return history

    def progress_info(self, state: dict) -> dict:
        return {"acc": state["history"][-1][1]} if state["history"] else {}

    finalize_reads_clients = False  # finalize needs only the server's state (RoundEngine with parties)

    def finalize(self, server_state: dict, client_states: list, messages: Any) -> dict:
        return server_state


@dataclass(frozen=True)
class GlobalModelResult:
    """The global model after a run of a :class:`GlobalModelSteps` method, and what the run recorded."""

    params: dict
    test_accuracy: float
    history: tuple[tuple[int, float], ...]
    ledger: Any
    reports_per_client: np.ndarray
    rounds_run: int


def run_global_model(method: GlobalModelSteps, data: "FederatedData", config: Any, *, seed: int,
                     result: type = GlobalModelResult, checkpoint_dir: Any = None, checkpoint_every: int = 0,
                     progress: Any = False, stop_after: int | None = None, **extra: Any) -> Any:
    """Run ``config.rounds`` rounds of ``method`` with ``floor(config.client_fraction * clients)`` (at least 1)
    clients a round (see :class:`~dpaudit.training.engine.RoundEngine` for checkpoints, progress and
    ``stop_after``) and return ``result(...)``: the global model evaluated on the test records, and ``extra``."""
    from dpaudit.training.engine import RoundEngine
    from dpaudit.training.parties import current_executor

    per_round = max(1, int(math.floor(config.client_fraction * data.num_clients)))
    parties = current_executor()  # the clients' steps run with the parties (Flower): no engine checkpoints
    out = RoundEngine(method, data.client_tuples(), rounds=config.rounds, seed=seed, clients_per_round=per_round,
                      checkpoint_dir=checkpoint_dir if parties is None else None, checkpoint_every=checkpoint_every,
                      progress=progress, stop_after=stop_after, parties=parties).run()
    st = out.result
    return result(params=st["params"], test_accuracy=data.test_accuracy(method.spec, st["params"]),
                  history=tuple(tuple(h) for h in st["history"]), ledger=st["ledger"],
                  reports_per_client=st["reports"], rounds_run=len(out.participants), **extra)


class ConfigDict:
    """``to_dict``/``from_dict`` for a method's frozen config dataclass; ``from_dict`` names unknown keys.
    Subclasses set ``label`` (the method's name in messages)."""

    label: ClassVar[str] = "method"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Any:
        from dpaudit.training.methods.scaffold import build_dataclass

        return build_dataclass(cls, d, f"the {cls.label} parameters")

@dataclass(frozen=True)
class RoundSettings(ConfigDict):
    """The fields every global-model method's config has (PrivateKT, FedAvg/FedSGD + LDP): ``epsilon`` (LDP
    budget of one client's report per round), ``rounds``, ``client_fraction`` (clients sampled per round),
    ``local_epochs``/``local_batch_size``/``local_lr`` (client training), ``server_lr``, ``eval_every`` (0: only
    at the end) and ``delta`` of the (epsilon, delta) figures."""

    epsilon: float = 5.0
    rounds: int = 60
    client_fraction: float = 0.5
    local_epochs: int = 5
    local_batch_size: int = 32
    local_lr: float = 1e-2
    server_lr: float = 1.0
    eval_every: int = 0
    delta: float = 1e-5

    def check_rounds(self, owner: str, *, min_local_epochs: int) -> None:
        check_float(self.epsilon, "epsilon", owner, low=0.0, low_open=True)
        check_int(self.rounds, "rounds", owner, low=1, high=MAX_ROUNDS)
        check_float(self.client_fraction, "client_fraction", owner, low=0.0, high=1.0, low_open=True)
        check_int(self.local_epochs, "local_epochs", owner, low=min_local_epochs, high=MAX_EPOCHS)
        check_int(self.local_batch_size, "local_batch_size", owner, low=1, high=MAX_RECORDS)
        check_float(self.local_lr, "local_lr", owner, low=0.0, low_open=True)
        check_float(self.server_lr, "server_lr", owner, low=0.0, low_open=True)
        check_int(self.eval_every, "eval_every", owner, low=0, high=MAX_ROUNDS)
        check_float(self.delta, "delta", owner, low=0.0, high=1.0, low_open=True, high_open=True)


@dataclass(frozen=True)
class FederatedData:
    """Index arrays into one loaded data set (``X``, ``y``), from a seed.

    ``clients[i]``: client i's private records (the members of the release); ``public``: the unlabelled
    pool (labels never used); ``test``: held-out evaluation records (the non-members); ``attacker``: the
    attacker's own records. ``dataset_spec`` rebuilds the data with ``load_dataset(**dataset_spec)``.
    """

    X: np.ndarray
    y: np.ndarray
    num_classes: int
    input_shape: tuple[int, ...]
    clients: tuple[np.ndarray, ...]
    public: np.ndarray
    test: np.ndarray
    attacker: np.ndarray
    dataset_spec: dict = field(default_factory=dict)
    partition: dict = field(default_factory=dict)

    @property
    def num_clients(self) -> int:
        return len(self.clients)

    @property
    def members(self) -> np.ndarray:
        return np.sort(np.concatenate(self.clients)).astype(np.int64)

    def client_tuples(self) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """``[(client_id, X_i, y_i), ...]``: what each client's steps receive as ``data``."""
        return [(i, self.X[idx], self.y[idx]) for i, idx in enumerate(self.clients)]

    def test_accuracy(self, spec: Any, state: Mapping[str, torch.Tensor]) -> float:
        """Accuracy of the model ``state`` (architecture ``spec``) on the test records."""
        from dpaudit.training.methods.common import accuracy

        return accuracy(make_classifier(spec, state).predict(self.X[self.test]), self.y[self.test])

    def membership(self) -> dict[str, np.ndarray]:
        return {"members": self.members, "nonmembers": np.asarray(self.test, dtype=np.int64),
                "attacker": np.asarray(self.attacker, dtype=np.int64)}


PARTITIONS = ("iid", "dirichlet", "dirichlet_fixed", "major_class", "size_skew", "mixed")


def prepare_federated_data(dataset: str, *, seed: int, num_clients: int, samples_per_client: int | None = None,
                           partition: str = "dirichlet", alpha: float = 0.5, p_major: float = 0.8,
                           size_beta: float = 0.5, data_dir: Any = None, num_samples: int | None = None, public_fraction: float = 0.2,
                           test_fraction: float = 0.2, attacker_fraction: float = 0.2) -> FederatedData:
    """Load ``dataset``, split it (train / public / test / attacker) and partition ``train`` over clients.

    ``partition``: ``"iid"``, ``"dirichlet"`` (label skew with concentration ``alpha``, PrivateKT's setting)
    or ``"major_class"`` (a share ``p_major`` of each client's records from one class, ProxyFL's setting);
    ``"dirichlet_fixed"`` (class proportions ~ Dir(alpha) per client, exactly ``samples_per_client`` records each:
    PrivateKT's reference code); ``"size_skew"`` (IID content, sizes ~ Dir(size_beta)) and ``"mixed"`` (label skew
    Dir(alpha) and size skew Dir(size_beta); PrivateKT Fig. 4).
    ``samples_per_client``: records per client (None: the train split shared out). Seeds derive from ``seed``.
    """
    from dpaudit.training import partition as part
    from dpaudit.training.data import load_dataset, split_dataset

    owner = "[data]"  # the table the user writes these settings in
    n_clients = check_int(num_clients, "num_clients", owner, low=1, high=MAX_MODELS)
    check_choice(partition, "partition", owner, PARTITIONS)
    ds = load_dataset(dataset, data_dir=data_dir, seed=seed, num_samples=num_samples)
    splits = split_dataset(ds, seed=seed, public_fraction=public_fraction, test_fraction=test_fraction,
                           attacker_fraction=attacker_fraction)
    if samples_per_client is not None:
        check_int(samples_per_client, "samples_per_client", owner, low=1)
    pool = splits.train
    if partition == "major_class":
        local = part.major_class(ds.y[pool], n_clients, p_major, seed=seed, samples_per_party=samples_per_client)
    elif partition == "dirichlet_fixed":
        if samples_per_client is None:
            raise ParameterError(f"The 'samples_per_client' parameter of {owner} must be set with partition = "
                                 "'dirichlet_fixed' (every client gets exactly that many records). Got None instead.")
        local = part.dirichlet_fixed_size(ds.y[pool], n_clients, alpha, seed=seed, samples_per_party=samples_per_client)
    else:
        if samples_per_client is not None:  # draw num_clients * samples_per_client records, then share them out
            total = n_clients * samples_per_client
            if total > len(pool):
                raise ParameterError(f"The 'samples_per_client' parameter of {owner} must be at most "
                                     f"{len(pool) // n_clients} (train records / clients). Got {samples_per_client} instead.")
            pool = np.sort(np.random.default_rng([int(seed), 0xC1E5]).choice(pool, size=total, replace=False))
        min_size = min(10, len(pool) // (2 * n_clients))
        if partition == "iid":
            local = part.iid(ds.y[pool], n_clients, seed=seed)
        elif partition == "size_skew":
            local = part.size_skew(ds.y[pool], n_clients, size_beta, seed=seed, min_size=min_size)
        elif partition == "mixed":
            local = part.mixed(ds.y[pool], n_clients, alpha, size_beta, seed=seed, min_size=min_size)
        else:
            local = part.dirichlet(ds.y[pool], n_clients, alpha, seed=seed,
                                   min_size=min(10, len(pool) // (2 * n_clients)))
    clients = tuple(np.sort(pool[np.asarray(ix, dtype=np.int64)]) for ix in local)
    record = {"scheme": partition, "alpha": alpha, "p_major": p_major, "num_clients": n_clients,
              "samples_per_client": samples_per_client}
    if partition in ("size_skew", "mixed"):
        record["size_beta"] = size_beta
    spec = {"name": dataset, "seed": int(seed), "num_samples": num_samples}
    if data_dir is not None:
        spec["data_dir"] = str(data_dir)
    return FederatedData(X=ds.X, y=ds.y, num_classes=ds.num_classes, input_shape=tuple(ds.input_shape),
                         clients=clients, public=splits.public, test=splits.test, attacker=splits.attacker,
                         dataset_spec=spec, partition=record)


def full_batch_gradient(spec: Any, state: Mapping[str, torch.Tensor], X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Gradient of the mean cross-entropy of the model ``state`` on ``(X, y)``, flattened like
    :func:`flatten_state` (float entries only, key order)."""
    from dpaudit.training.models import build_model

    module = build_model(spec)
    module.load_state_dict(dict(state))
    module.train()
    loss = torch.nn.functional.cross_entropy(module(torch.as_tensor(np.asarray(X, dtype=np.float32))),
                                             torch.as_tensor(np.asarray(y, dtype=np.int64)))
    loss.backward()
    grads = dict(module.named_parameters())
    out = []
    for k, v in state.items():
        if not v.is_floating_point():
            continue
        p = grads.get(k)
        out.append((p.grad if p is not None and p.grad is not None else torch.zeros_like(v)).detach().double().reshape(-1).numpy())
    return np.concatenate(out)


# --------------------------------------------------------------------------------------------------
# The [data] and [model] tables of the federated methods
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DataSettings:
    """How the data set is cut into clients (see :func:`prepare_federated_data`)."""

    num_clients: int = 10
    samples_per_client: int | None = None
    partition: str = "dirichlet"
    alpha: float = 0.5
    p_major: float = 0.8
    size_beta: float = 0.5
    num_samples: int | None = None
    public_fraction: float = 0.2
    test_fraction: float = 0.2
    attacker_fraction: float = 0.2

    def __post_init__(self) -> None:
        o = "DataSettings"
        check_int(self.num_clients, "num_clients", o, low=1, high=MAX_MODELS)
        for name in ("samples_per_client", "num_samples"):
            if getattr(self, name) is not None:
                check_int(getattr(self, name), name, o, low=1, high=MAX_RECORDS)
        check_choice(self.partition, "partition", o, PARTITIONS)
        check_float(self.alpha, "alpha", o, low=0.0, low_open=True)
        check_float(self.p_major, "p_major", o, low=0.0, high=1.0)
        check_float(self.size_beta, "size_beta", o, low=0.0, low_open=True)

    def prepare(self, dataset: str, *, seed: int, data_dir: Any = None) -> FederatedData:
        return prepare_federated_data(dataset, seed=seed, data_dir=data_dir, **self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


def model_spec_from(settings: Mapping[str, Any], data: FederatedData) -> Any:
    """The ``[model]`` table (``name`` and architecture keyword arguments) as a ModelSpec for ``data``."""
    from dpaudit.training.models import ModelSpec

    kw = dict(settings)
    name = kw.pop("name", "mlp")
    return ModelSpec(name, data.input_shape, data.num_classes, kw)

"""Flower runs in the audit: read and account a recorded run directory, release its global model as a dpaudit release
bundle (so ``dpaudit attack`` and ``dpaudit check`` read it), and a real Flower simulation of federated softmax
regression on scikit-learn's digits that records itself (the example of ``docs/flower.md`` and the tests).

The recording and the accounting live in :mod:`dpaudit.integrations.flower`; this module joins them with the training
layer's release writer and data sets (the integrations may not import those).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from dpaudit._io import check_output_folder
from dpaudit.errors import DataError, ParameterError, check_choice, check_float, check_int, check_probability
from dpaudit.integrations.flower.accounting import FlowerAccounting, account_run
from dpaudit.integrations.flower.record import MODEL_FILE, FlowerRun, read_flower_run

__all__ = ["account_flower_run", "release_flower_run", "run_digits_simulation", "digits_model_spec", "DP_CHOICES",
           "MAX_SIM_CLIENTS", "MAX_SIM_ROUNDS", "SIM_NON_MEMBERS"]

DP_CHOICES = ("server-fixed", "client-fixed", "server-adaptive", "client-adaptive", "none")
MAX_SIM_CLIENTS = 200
MAX_SIM_ROUNDS = 1000
#: Digits kept out of every client's partition (the release's non-members and the attacker's own records)
SIM_NON_MEMBERS = 200
_W, _B = "layers.1.weight", "layers.1.bias"


def digits_model_spec():
    """The released model's architecture: dpaudit's ``mlp`` with no hidden layer (softmax regression) on 8x8 digits."""
    from dpaudit.training.models import ModelSpec

    return ModelSpec("mlp", (1, 8, 8), 10, {"hidden": []})


def account_flower_run(run_dir: str | os.PathLike, *, delta: float = 1e-5,
                       neighbouring: str = "replace-one") -> FlowerAccounting:
    """dpaudit's client-level accounting of the run recorded in ``run_dir`` (``dpaudit account --flower-run``)."""
    return account_run(read_flower_run(run_dir), delta=delta, neighbouring=neighbouring)


def _claim(acc: FlowerAccounting, claim: Mapping[str, Any] | None) -> dict[str, Any]:
    if claim is None:
        eps = acc.epsilon
        return {"epsilon": eps if math.isfinite(eps) else None, "delta": acc.delta, "granularity": "user",
                "text": f"Client-level DP ({acc.neighbouring}) as accounted by dpaudit from the Flower run record."}
    from dpaudit.auditing.release_make import parse_claim

    return parse_claim(claim)


def release_flower_run(run_dir: str | os.PathLike, out: str | os.PathLike, *, delta: float = 1e-5,
                       neighbouring: str = "replace-one", claim: Mapping[str, Any] | Sequence[str] | None = None,
                       factory: str | None = None, factory_kwargs: Mapping[str, Any] | None = None,
                       overwrite: bool = False) -> Path:
    """Write a release bundle of the run's final global model with its accounting and claim.

    The run must record its data (``RunData``: a dpaudit data set and the clients' record indices). The global model
    is :func:`digits_model_spec`'s softmax regression (``dpaudit flower simulate``'s), or, with ``factory``
    (``path/to/file.py:build``, ``--factory`` on the CLI), the user's own torch module: ``build(**factory_kwargs)``
    with the run's ``global_model.safetensors`` loaded into it, pinned by the file's sha256 exactly as ``release
    make`` pins it (attacking the bundle runs it only for an auditor naming the same code, or with
    ``--trust-bundle-code``). ``claim`` defaults to dpaudit's own figure at client granularity.
    """
    from dpaudit.serial import to_dict
    from dpaudit.accountants.statement import AccountingResult, LowerBound, PrivacyStatement
    from dpaudit.training.data import load_dataset
    from dpaudit.training.models import load_classifier
    from dpaudit.training.release import check_release_target, write_release

    check_release_target(out, "out", "release_flower_run")
    run = read_flower_run(run_dir)
    if run.data is None:
        raise DataError(f"The Flower run {str(run_dir)!r} records no data (which records the clients held); it cannot "
                        "be released for attacks.")
    acc = account_run(run, delta=delta, neighbouring=neighbouring)
    ds = dict(run.data.dataset)
    name = ds.get("name")
    if not isinstance(name, str) or (factory is None and name != "digits"):
        raise DataError(f"The Flower run's data set must be 'digits' for the built-in model (another dpaudit data set "
                        f"needs the model's --factory). Got {name!r:.40} instead.")
    seed = ds.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise DataError(f"The Flower run's data set seed must be an int >= 0. Got {seed!r:.40} instead.")
    num_samples = ds.get("num_samples")
    if num_samples is not None and (isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1):
        raise DataError(f"The Flower run's data set num_samples must be an int >= 1. Got {num_samples!r:.40} instead.")
    data = load_dataset(name, seed=seed, **({"num_samples": num_samples} if num_samples else {}))
    n = len(data)
    members = np.unique(np.concatenate([np.asarray(v, dtype=np.int64) for v in run.data.clients.values()] or [np.zeros(0, np.int64)]))
    non = np.asarray(run.data.nonmembers, dtype=np.int64)
    att = np.asarray(run.data.attacker, dtype=np.int64)
    for what, ids in (("clients", members), ("nonmembers", non), ("attacker", att)):
        if ids.size and ids.max() >= n:
            raise DataError(f"The Flower run's data.{what} index {int(ids.max())} is past the data set's {n} records.")
    model_meta: dict[str, Any] | None = None
    model_src = None
    if factory is None:
        clf = load_classifier(Path(run_dir) / MODEL_FILE, digits_model_spec(), follow_symlinks=False)
    else:
        from dpaudit.auditing.release_make import load_outside_model
        from dpaudit.training.external import absolute_import_path

        clf, model_src = load_outside_model(Path(run_dir) / MODEL_FILE, absolute_import_path(factory), factory_kwargs,
                                            data.X, data.num_classes)
        model_meta = {"kind": clf.spec.name, "recipe": None}
    accuracy = float(np.mean(clf.predict_proba(data.X[non]).argmax(axis=1) == data.y[non])) if non.size else None
    # the headline is the largest client figure: the amplified one (its smaller route, RDP or PLD) or a client's own
    # rounds (exact Gaussian DP)
    route = str(acc.facts.get("sampled_route") or "rdp") if acc.epsilon == acc.sampled_epsilon else "gdp"
    st = PrivacyStatement(acc.epsilon, acc.delta, route, label=f"client-level, max over {len(acc.per_client)} clients",
                          assumptions=acc.assumptions, route=route,
                          details={"lower_bound_epsilon": acc.lower_bound})
    low = None
    if acc.lower_bound is not None:
        # the certified interval [lower, epsilon]; the pair bounds every ex-ante analysis, so where the headline is
        # an ex-post figure below it (a client's own rounds) the bound names the ex-ante route only
        low = LowerBound(acc.lower_bound, acc.delta, "the target client's clipped update +C, every other client's -C, "
                         "under the sampler that ran (ex ante: while participation stays secret)",
                         "privacy-loss distribution of the pair composed over the rounds (dp_accounting, optimistic)",
                         routes=() if acc.lower_bound <= acc.epsilon else ("ex-ante",))
    statement = to_dict(AccountingResult("flower run", (st,), facts={"flower": [to_dict(f) for f in acc.flower],
                                                                     "lower_bound_epsilon": acc.lower_bound,
                                                                     "sampled_epsilon": acc.sampled_epsilon},
                                         warnings=tuple(m for _, m in acc.flags), lower_bound=low))
    flags = [("flower_epsilon_below_lower_bound" if code == "flower_below_lower_bound" else code, msg)
             for code, msg in acc.flags if code in ("flower_below_lower_bound", "granularity_not_covered")]
    claim_d = _claim(acc, claim)
    if claim_d.get("epsilon") is None:
        claim_d["epsilon"] = float("inf")
    return write_release(
        out, method="flower", dataset={"name": name, "seed": seed, "num_samples": num_samples, "num_records": n},
        params={"flower": {"flwr_version": run.flwr_version, "engine": run.engine, "strategy": to_dict(run.strategy),
                           "sampler": run.sampler, "model": model_src,
                           "rounds": len(run.rounds), "clients": len(run.clients), "run_seed": run.seed}},
        seed=run.seed or 0, utility={"test_accuracy": accuracy, "test_split": "non-members"}, classifier=clf,
        train_config=None, ledger=acc.ledger, statement=statement, claim=claim_d,
        membership={"members": members, "nonmembers": non, "attacker": att},
        assumptions=["The model was trained by a Flower run; membership (which records the clients held) is as the run "
                     "record declares it.", *acc.assumptions], flags=flags, overwrite=overwrite, model_meta=model_meta)


# --------------------------------------------------------------------------------------------------
# a real Flower simulation that records itself


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def local_train(w: np.ndarray, b: np.ndarray, X: np.ndarray, y: np.ndarray, *, epochs: int, lr: float) -> tuple[np.ndarray, np.ndarray]:
    """Full-batch gradient descent on the softmax cross-entropy (what each client runs); float32 in and out."""
    w, b = w.astype(np.float64), b.astype(np.float64)
    onehot = np.eye(w.shape[0])[y]
    for _ in range(epochs):
        g = (_softmax(X @ w.T + b) - onehot) / len(y)
        w -= lr * g.T @ X
        b -= lr * g.sum(axis=0)
    return w.astype(np.float32), b.astype(np.float32)


def flat_arrays(arrays: Mapping[str, np.ndarray]) -> np.ndarray:
    """The model's arrays as one float64 vector, in key order (the canary directions' coordinates)."""
    return np.concatenate([np.asarray(v, np.float64).ravel() for v in arrays.values()]) if arrays else np.zeros(0)


def add_flat(arrays: Mapping[str, np.ndarray], u: np.ndarray) -> dict[str, np.ndarray]:
    """``arrays`` moved by the flat vector ``u`` (key order, as :func:`flat_arrays`)."""
    out, i = {}, 0
    for k, v in arrays.items():
        v = np.asarray(v, np.float32)
        out[k] = (v.ravel() + u[i:i + v.size]).reshape(v.shape).astype(np.float32)
        i += v.size
    return out


class TorchFactoryModel:
    """The user's torch module in a Flower simulation: built by ``factory`` (``file.py:name``, the file pinned by its
    sha256 when named and each client re-importing it by that digest; never by pickling the function), trained by
    full-batch SGD on the client's records. Picklable (paths and numbers only), so Ray's workers rebuild it."""

    def __init__(self, factory: str, sha256: str, kwargs: Mapping[str, Any]) -> None:
        self.factory, self.sha256, self.kwargs = factory, sha256, dict(kwargs)

    @classmethod
    def pin(cls, factory: str, kwargs: Mapping[str, Any] | None, owner: str) -> "TorchFactoryModel":
        from dpaudit.training.external import absolute_import_path, import_object
        from dpaudit.training.usercode import code_digest

        if not isinstance(factory, str) or not factory:
            raise ParameterError(f"The 'factory' parameter of {owner} must be 'path/to/file.py:build'. Got {factory!r:.80} "
                                 "instead.")
        if kwargs is not None and not isinstance(kwargs, Mapping):
            raise ParameterError(f"The 'factory_kwargs' parameter of {owner} must be a mapping. Got {kwargs!r:.80} instead.")
        path = absolute_import_path(factory) or factory
        digest = code_digest(path, "--factory")
        import_object(path, "--factory", sha256=digest)          # fails now, not in a client
        return cls(path, digest, kwargs or {})

    def build(self) -> Any:
        import torch

        from dpaudit.training.external import import_object

        net = import_object(self.factory, "--factory", sha256=self.sha256)(**self.kwargs)
        if not isinstance(net, torch.nn.Module):
            raise DataError(f"The --factory {self.factory!r} must build a torch.nn.Module. Got {type(net).__name__} instead.")
        return net

    def initial(self, seed: int) -> dict[str, np.ndarray]:
        import torch

        torch.manual_seed(seed)
        state = {k: v.detach().cpu().numpy() for k, v in self.build().state_dict().items()}
        bad = [k for k, v in state.items() if not np.issubdtype(v.dtype, np.floating)]
        if bad:
            raise DataError(f"The --factory {self.factory!r} module has non-float state ({bad[:3]}): Flower's DP wrappers "
                            "add noise to every array; give a module whose state is float parameters only.")
        return state

    def dimension(self, seed: int) -> int:
        return int(sum(v.size for v in self.initial(seed).values()))

    def train(self, arrays: Mapping[str, np.ndarray], X: np.ndarray, y: np.ndarray, *, epochs: int,
              lr: float) -> dict[str, np.ndarray]:
        import torch

        net = self.build()
        net.load_state_dict({k: torch.tensor(np.asarray(v)) for k, v in arrays.items()})
        opt = torch.optim.SGD(net.parameters(), lr=lr)
        Xt, yt = torch.tensor(X), torch.tensor(y, dtype=torch.long)
        for _ in range(epochs):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(Xt), yt).backward()
            opt.step()
        return {k: v.detach().cpu().numpy() for k, v in net.state_dict().items()}


def run_digits_simulation(out: str | os.PathLike, *, clients: int = 20, sampled: int = 5, rounds: int = 30,
                          records_per_client: int = 40, noise_multiplier: float = 2.0, clipping_norm: float = 1.0,
                          dp: str = "server-fixed", local_epochs: int = 5, lr: float = 0.5, delta: float = 1e-5,
                          seed: int = 0, canary_updates: Mapping[int, np.ndarray] | None = None,
                          observe: Any = None, declared_sampled: int | None = None,
                          local_dp: Mapping[str, float] | None = None, factory: "str | TorchFactoryModel | None" = None,
                          factory_kwargs: Mapping[str, Any] | None = None, overwrite: bool = False) -> Path:
    """Run federated softmax regression on digits with Flower's simulation engine and record it into ``out``.

    ``clients`` SuperNodes (one partition of ``records_per_client`` digits each), ``sampled`` of them per round
    (FedAvg ``fraction_train = sampled / clients``), ``rounds`` rounds, under the DP wrapper ``dp`` (``server-fixed``
also runs Flower's own accountant, ``no-amplification``, whose figure the record keeps). Every partition
    has the same size (equal FedAvg weights). ``canary_updates``: partition id -> a fixed model update (the flat
    weight-then-bias vector) that partition's client sends instead of training (a client-level canary). The run is
    recorded by :class:`~dpaudit.integrations.flower.recorder.RecordingStrategy` (seeded sampling) and written with
    its data (``RunData``) so :func:`release_flower_run` can release it. ``observe(round, {name: array})`` is called with
    the global model before the first round (round 0) and after each round (the auditor's view of every round).
    ``declared_sampled``: the DP wrapper's ``num_sampled_clients`` when it differs from what FedAvg samples (a
    misconfigured app; Flower then scales its noise to the declared number, and dpaudit accounts what was added).
    ``local_dp``: Flower's ``LocalDpMod`` on the (Message-API) ClientApp, with its settings (``clipping_norm``,
    ``sensitivity``, ``epsilon``, ``delta``), recorded and accounted per client against the server.
    ``factory``: ``path/to/file.py:build`` (``--factory``), the user's own torch module trained instead of the softmax
    regression (``build(**factory_kwargs)``, pinned by the file's sha256 and re-imported by that digest in each client;
    ``local_epochs`` full-batch SGD steps at ``lr`` on the client's digits as the factory's input, images (1, 8, 8));
    ``canary_updates`` and ``observe`` then use the flat vector of its ``state_dict`` in key order
    (:func:`flat_arrays`).
    Before any training, the planned run is accounted (a multiplier whose figure cannot be computed is refused here).
    """
    owner = "run_digits_simulation"
    clients = check_int(clients, "clients", owner, low=2, high=MAX_SIM_CLIENTS)
    sampled = check_int(sampled, "sampled", owner, low=1, high=clients)
    rounds = check_int(rounds, "rounds", owner, low=1, high=MAX_SIM_ROUNDS)
    rpc = check_int(records_per_client, "records_per_client", owner, low=1, high=1000)
    sigma = check_float(noise_multiplier, "noise_multiplier", owner, low=0.0)
    clip = check_float(clipping_norm, "clipping_norm", owner, low=0.0, low_open=True)
    dp = check_choice(dp, "dp", owner, DP_CHOICES)
    local_epochs = check_int(local_epochs, "local_epochs", owner, low=1, high=1000)
    lr = check_float(lr, "lr", owner, low=0.0, low_open=True)
    delta = check_probability(delta, "delta", owner)
    seed = check_int(seed, "seed", owner, low=0)
    declared = sampled if declared_sampled is None else check_int(declared_sampled, "declared_sampled", owner, low=1,
                                                                  high=clients)
    ldp = None
    if local_dp is not None:
        from dpaudit.integrations.flower.record import LocalDpSettings

        if not isinstance(local_dp, Mapping) or set(local_dp) != {"clipping_norm", "sensitivity", "epsilon", "delta"}:
            raise ParameterError(f"The 'local_dp' parameter of {owner} must map exactly clipping_norm, sensitivity, "
                                 f"epsilon and delta to numbers. Got {local_dp!r:.120} instead.")
        vals = {k: check_float(v, f"local_dp.{k}", owner, low=0.0) for k, v in local_dp.items()}
        if not vals["clipping_norm"] > 0 or not vals["epsilon"] > 0 or not 0 < vals["delta"] < 1:
            raise ParameterError(f"The 'local_dp' parameter of {owner} needs clipping_norm > 0, epsilon > 0 and delta "
                                 f"in (0, 1). Got {vals} instead.")
        ldp = LocalDpSettings(**vals)
    if dp != "none":
        _preflight(owner, clients=clients, sampled=sampled, declared=declared, rounds=rounds, sigma=sigma, dp=dp,
                   delta=delta)
    check_output_folder(out, f"The 'out' folder of {owner}")  # a link or a file is refused before the simulation
    from dpaudit.training.data import load_dataset

    data = load_dataset("digits", seed=0)
    if clients * rpc > len(data) - SIM_NON_MEMBERS:
        raise ParameterError(f"The 'clients' x 'records_per_client' of {owner} must leave {SIM_NON_MEMBERS} of the "
                             f"{len(data)} digits as non-members. Got {clients} x {rpc} instead.")
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(data))
    parts = {str(i): tuple(int(j) for j in perm[i * rpc:(i + 1) * rpc]) for i in range(clients)}
    rest = perm[clients * rpc:]
    non, att = rest[: len(rest) // 2], rest[len(rest) // 2:]
    X = (data.X.reshape(len(data), -1)).astype(np.float32)
    y = data.y.astype(np.int64)
    model = None
    dim = 10 * 64 + 10
    if factory is not None:
        model = factory if isinstance(factory, TorchFactoryModel) else TorchFactoryModel.pin(factory, factory_kwargs, owner)
        dim = model.dimension(seed)
        X = data.X.astype(np.float32)
    canaries = {int(k): np.asarray(v, dtype=np.float32) for k, v in (canary_updates or {}).items()}
    for k, v in canaries.items():
        if not 0 <= k < clients or v.shape != (dim,):
            raise ParameterError(f"The 'canary_updates' parameter of {owner} must map partition ids in [0, {clients}) to "
                                 f"vectors of {dim} values. Got {k} -> {v.shape} instead.")
    client_data = {i: (X[np.asarray(parts[str(i)])], y[np.asarray(parts[str(i)])]) for i in range(clients)}

    from dpaudit.integrations.flower.record import RunData

    run_data = RunData({"name": "digits", "seed": 0}, {k: v for k, v in parts.items() if int(k) not in canaries},
                       tuple(int(i) for i in non), tuple(int(i) for i in att))
    return _simulate(out, client_data, canaries, clients=clients, sampled=sampled, rounds=rounds, sigma=sigma, clip=clip,
                     dp=dp, local_epochs=local_epochs, lr=lr, delta=delta, seed=seed, run_data=run_data,
                     observe=observe, overwrite=overwrite, declared=declared, local_dp=ldp, model=model)


#: The simulation engine's reply polling interval in seconds (``InMemoryGrid(pull_interval=...)``, Flower's default
#: 0.1), set on the grid the ServerApp gets; bench/bench_flower_engine.py --digits-rounds measures its effect
GRID_PULL_INTERVAL = 0.01

#: Above this noise multiplier Flower's float32 model is noise past the float range (and every figure is 0 anyway)
MAX_SIM_NOISE_MULTIPLIER = 1e6


def _preflight(owner: str, *, clients: int, sampled: int, declared: int, rounds: int, sigma: float, dp: str,
               delta: float) -> None:
    """Account the planned run (every client in turn sampled, every reply aggregated) before anything trains: a
    multiplier outside what Flower's float32 arrays or the accounting can hold is one ParameterError now, not an
    exit 70 after the training."""
    from dpaudit.integrations.flower.record import RUN_FORMAT, RUN_SCHEMA, DpSettings, FlowerRun, RoundRecord

    if sigma > MAX_SIM_NOISE_MULTIPLIER:
        raise ParameterError(f"The 'noise_multiplier' of {owner} must be at most {MAX_SIM_NOISE_MULTIPLIER:g} (Flower's "
                             f"float32 model would hold only noise). Got {sigma!r} instead.")
    if dp.endswith("adaptive"):
        # Flower splits the multiplier between the model and the clipped count itself, in floats that overflow for
        # tiny multipliers (1e-200 ** -2)
        from flwr.supercore.differential_privacy import compute_adaptive_noise_params

        try:
            compute_adaptive_noise_params(sigma, declared, max(declared / 20, sigma))
        except (ArithmeticError, ValueError) as exc:
            raise ParameterError(f"The 'noise_multiplier' of {owner} is outside what Flower's adaptive clipping can "
                                 f"split ({type(exc).__name__}: {str(exc)[:80]}). Got {sigma!r} instead.") from None
    pop = tuple(range(clients))
    recs = tuple(RoundRecord(t + 1, pop, tuple((t * sampled + i) % clients for i in range(sampled)),
                             tuple((t * sampled + i) % clients for i in range(sampled)), 1.0, sigma, True,
                             (1.0,) * sampled, declared) for t in range(rounds))
    extra = dict(clipped_count_stddev=max(declared / 20, sigma)) if dp.endswith("adaptive") else {}
    plan = FlowerRun(RUN_FORMAT, RUN_SCHEMA, "plan", 0, DpSettings(dp, (), declared, sigma, 1.0, **extra),
                     "uniform-without-replacement", recs)
    try:
        account_run(plan, delta=delta)
    except (ArithmeticError, ValueError) as exc:
        raise ParameterError(f"The 'noise_multiplier' of {owner} gives a run dpaudit cannot account "
                             f"({type(exc).__name__}: {str(exc)[:120]}). Got {sigma!r} instead.") from None


def _simulate(out, client_data, canaries, *, clients, sampled, rounds, sigma, clip, dp, local_epochs, lr, delta, seed,
              run_data, observe, overwrite, declared=None, local_dp=None, model=None) -> Path:
    import logging

    from dpaudit._ray_local import loopback_only

    from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp import strategy as fs
    from flwr.simulation import run_simulation

    from dpaudit.integrations.flower.recorder import RecordingStrategy
    from dpaudit.training.flower.apps import discover
    from dpaudit.training.flower.codec import HEADER, header_record

    mod = None
    if local_dp is not None:
        from flwr.clientapp.mod import LocalDpMod

        mod = LocalDpMod(local_dp.clipping_norm, local_dp.sensitivity, local_dp.epsilon, local_dp.delta)
    client_app = ClientApp()

    @client_app.query()
    def query(msg: Message, context: Context) -> Message:
        # the ServerApp's first question: which partition this node holds (Flower's node ids are random)
        return Message(content=RecordDict({HEADER: header_record({"partition_id": int(context.node_config["partition-id"])})}),
                       reply_to=msg)

    @client_app.train(mods=[mod] if mod is not None else None)
    def train(msg: Message, context: Context) -> Message:
        pid = int(context.node_config["partition-id"])
        arrays = {k: v.numpy() for k, v in msg.content["arrays"].items()}
        if pid in canaries:
            new = add_flat(arrays, canaries[pid])
        else:
            Xc, yc = client_data[pid]
            if model is None:
                w2, b2 = local_train(arrays[_W], arrays[_B], Xc, yc, epochs=local_epochs, lr=lr)
                new = {_W: w2, _B: b2}
            else:
                new = model.train(arrays, Xc, yc, epochs=local_epochs, lr=lr)
        reply = RecordDict({"arrays": ArrayRecord({k: Array(np.asarray(v, np.float32)) for k, v in new.items()}),
                            "metrics": MetricRecord({"num-examples": 1, "partition-id": pid})})
        return Message(content=reply, reply_to=msg)

    holder: dict[str, Any] = {}
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        if isinstance(getattr(grid, "pull_interval", None), float):
            # the simulation engine's InMemoryGrid polls for replies every pull_interval seconds (its constructor
            # option, 0.1 by default): at most that much idle wait per round, paid by every round
            grid.pull_interval = GRID_PULL_INTERVAL
        # node id -> partition id, so that the seeded sampler draws partitions, whatever node ids Flower drew
        node_partitions = {node: pid for pid, node in discover(grid, clients, 600).items()}
        inner = fs.FedAvg(fraction_train=sampled / clients, fraction_evaluate=0.0, min_train_nodes=sampled,
                          min_available_nodes=clients)
        m_decl = sampled if declared is None else declared
        if dp == "server-fixed":
            # Flower's own accountant too (the one convention its fixed-clipping wrappers accept), recorded beside ours;
            # it refuses a sample size other than the declared one, so it runs only when they agree
            acc = None
            from dpaudit.integrations.flower.accounting import FLOWER_SIGMA_RANGE

            # (dp_accounting's RDP inside Flower's accountant overflows for multipliers like 1e-300: not attached then)
            if FLOWER_SIGMA_RANGE[0] <= sigma <= FLOWER_SIGMA_RANGE[1] and m_decl == sampled:
                from flwr.supercore.privacy_accounting import (NeighboringRelation, PrivacyConfig, SamplingMethod)
                from flwr.supercore.privacy_accounting.rdp_accountant import RdpAccountant

                acc = RdpAccountant(PrivacyConfig(target_delta=delta, population_size=clients,
                                                  neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
                                                  sampling_method=SamplingMethod.NO_AMPLIFICATION))
            strat = fs.DifferentialPrivacyServerSideFixedClipping(inner, sigma, clip, m_decl, accountant=acc)
        elif dp == "client-fixed":
            strat = fs.DifferentialPrivacyClientSideFixedClipping(inner, sigma, clip, m_decl)
        elif dp == "server-adaptive":
            strat = fs.DifferentialPrivacyServerSideAdaptiveClipping(inner, sigma, m_decl, initial_clipping_norm=clip,
                                                                     clipped_count_stddev=max(m_decl / 20, sigma))
        elif dp == "client-adaptive":
            strat = fs.DifferentialPrivacyClientSideAdaptiveClipping(inner, sigma, m_decl, initial_clipping_norm=clip,
                                                                     clipped_count_stddev=max(m_decl / 20, sigma))
        else:
            strat = inner
        rec = RecordingStrategy(strat, seed=seed, local_dp=mod, node_partitions=node_partitions)
        start = ArrayRecord({k: Array(np.asarray(v, np.float32)) for k, v in (
            {_W: np.zeros((10, 64), np.float32), _B: np.zeros(10, np.float32)} if model is None
            else model.initial(seed)).items()})
        def evaluate(server_round: int, arrays: ArrayRecord):
            observe(server_round, {k: v.numpy().copy() for k, v in arrays.items()})
            return None

        result = rec.start(grid=grid, initial_arrays=start, num_rounds=rounds, timeout=600,
                           evaluate_fn=evaluate if observe is not None else None)
        holder["path"] = rec.write(out, result.arrays, delta=delta, data=run_data, overwrite=overwrite)

    if dp.startswith("client-"):
        raise ParameterError("client-side clipping needs the clipping mod on the ClientApp; the digits simulation runs "
                             "server-side wrappers and plain FedAvg only. Got dp=" + repr(dp) + " instead.")
    flwr_logger = logging.getLogger("flwr")
    flwr_logger.setLevel(logging.WARNING)
    # the ClientApps' own log lines (Ray forwards the workers' output to this process) follow the rule for Flower's
    # log here: shown unless a filter on the 'flwr' logger drops its warnings (the CLI's, without --verbose)
    workers = bool(flwr_logger.filter(logging.LogRecord("flwr", logging.WARNING, __file__, 0, "", None, None)))
    with loopback_only():   # the simulation's Ray instance listens on 127.0.0.1 only
        run_simulation(server_app=server_app, client_app=client_app, num_supernodes=clients,
                       backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                                       "init_args": {"num_cpus": 2, "include_dashboard": False,
                                                     "log_to_driver": workers}})
    if "path" not in holder:
        raise DataError("The Flower simulation ended without writing its run record (see Flower's log above).")
    return holder["path"]

"""Record a Flower run: a strategy wrapper around the strategy a ``ServerApp`` runs (imports ``flwr``).

>>> strategy = DifferentialPrivacyServerSideFixedClipping(FedAvg(fraction_train=0.25), noise_multiplier=1.0,
...                                                        clipping_norm=1.0, num_sampled_clients=5)
>>> rec = RecordingStrategy(strategy, seed=0)          # doctest: +SKIP
>>> result = rec.start(grid=grid, initial_arrays=arrays, num_rounds=30)   # doctest: +SKIP
>>> rec.write("runs/flower", result.arrays, delta=1e-5)                    # doctest: +SKIP

Each round, :meth:`RecordingStrategy.configure_train` records the connected node ids (the population the sampler drew
from), the node ids the inner strategy sent training messages to, and the clipping norm, noise multiplier and
``num_sampled_clients`` of the DP wrapper at that moment (adaptive clipping moves the norm); :meth:`aggregate_train` records whose replies were
aggregated (and, when a reply's metrics carry ``partition-id``, which data partition a node held) and whether a new
global model came out. The wrapper changes nothing it passes on but its order: the connected nodes are listed to
the sampler, and replies handed to the aggregation, in partition order (where known), so that a seed gives the same
run whatever node ids Flower drew and whatever order the replies arrived in. :meth:`write` writes the run directory
(:mod:`dpaudit.integrations.flower.record`): the record, the per-client ledger (accounted by
:func:`~dpaudit.integrations.flower.accounting.account_run`) and the final global model (safetensors).

Known DP wrappers (``flwr.serverapp.strategy``): ``DifferentialPrivacyServerSideFixedClipping``,
``DifferentialPrivacyClientSideFixedClipping``, ``DifferentialPrivacyServerSideAdaptiveClipping``,
``DifferentialPrivacyClientSideAdaptiveClipping``; a plain ``FedAvg`` is recorded as ``kind="none"`` (no
guarantee). ``LocalDpMod`` runs on the clients, out of the server's sight: pass the mod the ClientApp uses as
``local_dp=`` and its settings are recorded.
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit._io import atomic_dir, write_bytes, write_json
from dpaudit.errors import ParameterError, check_int, check_probability
from dpaudit.integrations.flower.accounting import combined_multiplier
from dpaudit.integrations.flower.record import (LEDGER_FILE, MODEL_FILE, RUN_FILE, RUN_FORMAT, RUN_SCHEMA, DpSettings,
                                                FlowerRun, LocalDpSettings, RoundRecord, RunData)
from dpaudit.serial import to_dict

import flwr
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import (DifferentialPrivacyClientSideAdaptiveClipping,
                                     DifferentialPrivacyClientSideFixedClipping,
                                     DifferentialPrivacyServerSideAdaptiveClipping,
                                     DifferentialPrivacyServerSideFixedClipping, FedAvg, Strategy)
from flwr.serverapp.strategy.strategy_utils import sample_nodes

__all__ = ["RecordingStrategy", "describe_strategy", "save_arrays", "grid_engine"]

_DP_KINDS = (
    (DifferentialPrivacyServerSideFixedClipping, "server-fixed"),
    (DifferentialPrivacyClientSideFixedClipping, "client-fixed"),
    (DifferentialPrivacyServerSideAdaptiveClipping, "server-adaptive"),
    (DifferentialPrivacyClientSideAdaptiveClipping, "client-adaptive"),
)
#: Flower strategies whose configure_train samples with ``strategy_utils.sample_nodes`` (``random.sample``: a
#: fixed number of the connected nodes, uniformly without replacement) -- checked by class, exactly
_UNIFORM_SAMPLERS = (FedAvg,)


def _chain(strategy: Any) -> list[Any]:
    out = [strategy]
    while hasattr(out[-1], "strategy") and isinstance(out[-1].strategy, Strategy) and len(out) < 16:
        out.append(out[-1].strategy)
    return out


def describe_strategy(strategy: Strategy) -> tuple[DpSettings, str, Any]:
    """(DP settings, sampler, the DP wrapper or None) of a strategy: the outermost known DP wrapper decides the kind;
    the sampler is ``uniform-without-replacement`` only when the innermost strategy is exactly a Flower ``FedAvg``
    (a subclass might sample otherwise) and its ``configure_train`` is Flower's own."""
    chain = _chain(strategy)
    names = tuple(f"{type(s).__module__}.{type(s).__qualname__}" for s in chain)
    inner = chain[-1]
    uniform = (type(inner) in _UNIFORM_SAMPLERS and type(inner).configure_train is FedAvg.configure_train
               and sample_nodes.__module__ == "flwr.serverapp.strategy.strategy_utils")
    sampler = "uniform-without-replacement" if uniform else "unverified"
    dp = [(s, kind) for s in chain for cls, kind in _DP_KINDS if type(s) is cls]
    if len(dp) > 1:
        raise ParameterError(f"The 'strategy' parameter of RecordingStrategy wraps {len(dp)} DP wrappers; record one. Got {names} instead.")
    if not dp:
        kind = "none" if type(inner) in _UNIFORM_SAMPLERS and len(chain) == 1 else "unknown"
        return DpSettings(kind, names), sampler, None
    wrapper, kind = dp[0]
    common = dict(num_sampled_clients=int(wrapper.num_sampled_clients), noise_multiplier=float(wrapper.noise_multiplier),
                  clipping_norm=float(wrapper.clipping_norm))
    if kind.endswith("adaptive"):
        sz, sb = float(wrapper.noise_multiplier), float(wrapper.clipped_count_stddev)
        # the effective multiplier of the model and clipped-count releases together (Andrew et al. 2021, Thm 1)
        eff = combined_multiplier(sz, 2 * sb) if sb > 0 else sz
        common.update(noise_multiplier=eff, clipped_count_stddev=sb,
                      target_clipped_quantile=float(wrapper.target_clipped_quantile), clip_norm_lr=float(wrapper.clip_norm_lr))
    return DpSettings(kind, names, **common), sampler, wrapper


def save_arrays(path: str | os.PathLike, arrays: ArrayRecord) -> list[str]:
    """Write an ``ArrayRecord`` as safetensors (numpy arrays by their keys), atomically; returns the keys."""
    from safetensors.numpy import save

    tensors = {k: np.ascontiguousarray(v.numpy()) for k, v in arrays.items()}
    write_bytes(path, save(tensors))
    return list(tensors)


#: Flower's Grid classes -> the engine they belong to (``flwr.superlink.grid``)
_ENGINES = {"InMemoryGrid": "simulation", "HttpGrid": "deployment", "GrpcGrid": "deployment"}


def grid_engine(grid: Any) -> str:
    """The engine a ServerApp runs on, from its Grid: ``"simulation"``, ``"deployment"``, or the Grid's class name."""
    name = type(grid).__name__
    return _ENGINES.get(name, name[:64])


class _GridView:
    """The Grid passed to the inner strategy's ``configure_train``: every call goes through; ``get_node_ids()`` lists
    the connected nodes in a fixed order (by partition id where ``order`` knows it, then by node id; Flower's own list
    comes from a set, in an order that changes from run to run) and the last list is kept (the one the sampler drew
    from)."""

    def __init__(self, grid: Grid, order: Any = None) -> None:
        self._grid = grid
        self._order = order
        self.last: tuple[int, ...] = ()

    def get_node_ids(self):
        ids = sorted((int(i) for i in self._grid.get_node_ids()),
                     key=self._order if self._order is not None else (lambda i: (0, i)))
        self.last = tuple(ids)
        return ids

    def __getattr__(self, name: str) -> Any:
        return getattr(self._grid, name)


class RecordingStrategy(Strategy):
    """Wrap ``strategy`` (any ``flwr.serverapp.strategy.Strategy``) and record what each round did (module docstring).

    Parameters
    ----------
    strategy:
        The strategy the ServerApp would run, DP wrapper included.
    seed:
        If given, the inner strategy's calls run with generators of the recorder's own, seeded by ``seed``: Python's
        ``random`` (Flower's ``sample_nodes`` draws from it) starts as after ``random.seed(seed)`` and numpy's global
        generator (Flower's DP wrappers draw their noise from it) as after ``np.random.seed(seed)``; each call takes
        up where the last one ended, and the process's own states are put back after it, so nothing else drawing
        from them in between moves the run. Recorded.
    local_dp:
        The ``LocalDpMod`` the ClientApp runs (its settings are recorded; the server cannot see it).
    node_partitions:
        Node id -> partition id of the connected nodes, where the ServerApp knows it before the first round (e.g. from
        a query each ClientApp answers with its ``partition-id``). The sampler then draws from the nodes in partition
        order, so the same seed samples the same partitions whatever node ids Flower drew (Flower 1.42 draws them
        from ``os.urandom``); partitions reported in training metrics are used from the round after. Replies are
        aggregated in partition order (then node id), not in order of arrival, so the float sums do not depend on
        which client answered first. Neither changes what is sampled (m of N uniformly) or aggregated.
    """

    def __init__(self, strategy: Strategy, *, seed: int | None = None, local_dp: Any = None,
                 node_partitions: Any = None) -> None:
        super().__init__()
        if not isinstance(strategy, Strategy):
            raise ParameterError(f"The 'strategy' parameter of RecordingStrategy must be a flwr.serverapp.strategy.Strategy. Got {type(strategy).__name__} instead.")
        self.strategy = strategy
        self.seed = None if seed is None else check_int(seed, "seed", "RecordingStrategy", low=0)
        self.settings, self.sampler, self._dp = describe_strategy(strategy)
        self.local_dp = None
        if local_dp is not None:
            self.local_dp = LocalDpSettings(float(local_dp.clipping_norm), float(local_dp.sensitivity),
                                            float(local_dp.epsilon), float(local_dp.delta))
        self.engine: str | None = None
        self.rounds: list[RoundRecord] = []
        self.partitions: dict[str, int] = {}
        self._pending: dict[int, dict[str, Any]] = {}
        self._states: tuple[Any, Any] | None = None
        if self.seed is not None:
            self._states = (random.Random(self.seed).getstate(), np.random.RandomState(self.seed).get_state())
        for node, pid in dict(node_partitions or {}).items():
            if isinstance(pid, bool) or not isinstance(pid, (int, np.integer)) or pid < 0:
                raise ParameterError(f"The 'node_partitions' parameter of RecordingStrategy must map node ids to "
                                     f"partition ids >= 0. Got {node!r:.40} -> {pid!r:.40} instead.")
            self.partitions[str(int(node))] = int(pid)

    def _order(self, node: int) -> tuple[int, int]:
        pid = self.partitions.get(str(int(node)))
        return (0, pid, int(node)) if pid is not None else (1, int(node), 0)

    @contextlib.contextmanager
    def _seeded_rngs(self):
        """The recorder's own Python ``random`` and numpy global states in force (with a seed), the process's back after."""
        if self._states is None:
            yield
            return
        outer = (random.getstate(), np.random.get_state())
        random.setstate(self._states[0])
        np.random.set_state(self._states[1])
        try:
            yield
        finally:
            self._states = (random.getstate(), np.random.get_state())
            random.setstate(outer[0])
            np.random.set_state(outer[1])

    # ------------------------------------------------------------------ the Strategy interface, passed through

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        if self.engine is None:
            self.engine = grid_engine(grid)
        dp = self._dp
        clip = None if dp is None else float(dp.clipping_norm)
        sigma = None if dp is None else float(dp.noise_multiplier)
        seen = _GridView(grid, self._order)
        with self._seeded_rngs():
            messages = list(self.strategy.configure_train(server_round, arrays, config, seen))
        sampled = tuple(int(m.metadata.dst_node_id) for m in messages)
        # the population is what the sampler drew from: Flower's sample_nodes samples from the result of its last
        # get_node_ids() call (it waits until enough nodes are connected)
        population = tuple(dict.fromkeys(tuple(seen.last) + sampled))
        # the wrapper's num_sampled_clients now: its noise is sigma C / m on the average of however many replies come
        declared = None if dp is None else int(dp.num_sampled_clients)
        self._pending[server_round] = dict(round=server_round, population=population, sampled=sampled,
                                           clipping_norm=clip, noise_multiplier=sigma, declared_sample_size=declared)
        return messages

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        replies = list(replies)
        for r in replies:
            if r.has_error():
                continue
            for rec in r.content.metric_records.values():
                pid = rec.get("partition-id")
                if isinstance(pid, int) and not isinstance(pid, bool) and pid >= 0:
                    self.partitions[str(int(r.metadata.src_node_id))] = int(pid)
        # a fixed order (partition, then node id), not the order of arrival: the float sums come out the same each run
        replies.sort(key=lambda r: self._order(int(r.metadata.src_node_id)))
        ok = [r for r in replies if not r.has_error()]
        replied = tuple(int(r.metadata.src_node_id) for r in ok)
        key = getattr(_chain(self.strategy)[-1], "weighted_by_key", "num-examples")
        weights = []
        for r in ok:
            w = [rec.get(key) for rec in r.content.metric_records.values() if rec.get(key) is not None]
            weights.append(float(w[0]) if len(w) == 1 and isinstance(w[0], (int, float)) and not isinstance(w[0], bool) else None)
        with self._seeded_rngs():
            arrays, metrics = self.strategy.aggregate_train(server_round, replies)
        pending = self._pending.pop(server_round, None)
        if pending is not None:
            sampled = set(pending["sampled"])
            pending["replied"] = tuple(i for i in replied if i in sampled)
            ws = [w for i, w in zip(replied, weights) if i in sampled]
            pending["weights"] = tuple(ws) if all(w is not None and w > 0 and np.isfinite(w) for w in ws) else ()
            self.rounds.append(RoundRecord(**pending, released=arrays is not None))
        return arrays, metrics

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        with self._seeded_rngs():
            return list(self.strategy.configure_evaluate(server_round, arrays, config, _GridView(grid, self._order)))

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        replies = sorted(replies, key=lambda r: self._order(int(r.metadata.src_node_id)))
        with self._seeded_rngs():
            return self.strategy.aggregate_evaluate(server_round, replies)

    def summary(self) -> None:
        self.strategy.summary()

    # ------------------------------------------------------------------ the record

    def _flower_accountant(self) -> dict | None:
        acc = getattr(self._dp, "accountant", None)
        if acc is None:
            return None
        spent = acc.get_privacy_spent()
        return {"epsilon": float(spent.epsilon), "delta": float(spent.delta), "num_releases": int(spent.num_releases),
                "state": acc.state_dict()}

    def run_record(self, *, data: RunData | None = None, model_keys: Iterable[str] = ()) -> FlowerRun:
        """The run so far as a :class:`~dpaudit.integrations.flower.record.FlowerRun`."""
        return FlowerRun(RUN_FORMAT, RUN_SCHEMA, flwr.__version__, self.seed, self.settings, self.sampler,
                         tuple(self.rounds), self.local_dp, dict(self.partitions), self._flower_accountant(), data,
                         tuple(model_keys), self.engine)

    def write(self, out: str | os.PathLike, arrays: ArrayRecord, *, delta: float, data: RunData | None = None,
              neighbouring: str = "replace-one", overwrite: bool = False) -> Path:
        """Write the run directory ``out`` atomically: ``flower_run.json``, ``ledger.json`` (per client, at
        ``delta``, under ``neighbouring``: ``"replace-one"`` or ``"add-remove"``) and ``global_model.safetensors``
        (``arrays``, the final global model: ``Result.arrays`` of ``strategy.start``)."""
        from dpaudit.integrations.flower.accounting import account_run

        delta = check_probability(delta, "delta", "RecordingStrategy.write")
        if not isinstance(arrays, ArrayRecord):
            raise ParameterError(f"The 'arrays' parameter of RecordingStrategy.write must be an ArrayRecord. Got {type(arrays).__name__} instead.")
        with atomic_dir(out, overwrite, kind="Flower run directory") as tmp:
            keys = save_arrays(tmp / MODEL_FILE, arrays)
            run = self.run_record(data=data, model_keys=keys)
            acc = account_run(run, delta=delta, neighbouring=neighbouring)
            write_json(tmp / RUN_FILE, to_dict(run))
            if acc.ledger is not None:       # a run without DP has no ledger: no guarantee to record
                write_json(tmp / LEDGER_FILE, acc.ledger)
        return Path(out)

"""The record of one Flower run, as :class:`~dpaudit.integrations.flower.recorder.RecordingStrategy` writes it and as
every reader of a run directory takes it back.

A run directory holds ``flower_run.json`` (a :class:`FlowerRun`), ``ledger.json`` (the per-client dpaudit ledger the
recorder accounted at the end) and ``global_model.safetensors`` (the final global model's arrays, by name). A run
directory may come from the party being audited, so :func:`read_flower_run` treats it like a release bundle: no
symbolic links, size caps on every file before it is parsed, types checked field by field (one
:class:`~dpaudit.errors.DataError` naming the field), lists capped before anything is allocated, and strings kept as
data (printed through :func:`dpaudit._format.printable` by whoever prints them). Nothing in it is imported or run.

This module imports no Flower (a run is read and accounted without ``flwr`` installed).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from dpaudit._io import load_json_file, read_input_bytes
from dpaudit.errors import DataError, check_path
from dpaudit.serial import JsonValue, from_dict

__all__ = ["FlowerRun", "RoundRecord", "DpSettings", "LocalDpSettings", "RunData", "read_flower_run", "RUN_FILE",
           "LEDGER_FILE", "MODEL_FILE", "RUN_FORMAT", "RUN_SCHEMA", "MAX_ROUNDS", "MAX_NODES", "MAX_RUN_JSON_BYTES",
           "MAX_MODEL_BYTES", "read_run_model", "DP_KINDS", "SAMPLERS"]

RUN_FILE = "flower_run.json"
LEDGER_FILE = "ledger.json"
MODEL_FILE = "global_model.safetensors"
RUN_FORMAT = "dpaudit-flower-run"
RUN_SCHEMA = 1
#: caps checked before anything is allocated (a hostile run directory cannot make a reader hold more)
MAX_ROUNDS = 100_000
MAX_NODES = 1_000_000
MAX_RECORDED_IDS = 4_000_000
#: what parsing may cost decides the file cap: json holds a node id of a few characters as a Python int (~36 bytes
#: with its list slot) and pydantic copies the lists once more, so a 32 MiB record of short ids peaks near 1 GiB
#: resident (measured: tests/integrations/test_flower_accounting.py); a longer record is refused before it is parsed
MAX_RUN_JSON_BYTES = 32 << 20
MAX_MODEL_BYTES = 1 << 30
MAX_DATA_RECORDS = 10_000_000

#: what the recorder found wrapped around the aggregation (``"none"``: a plain FedAvg, no DP; ``"unknown"``: a
#: strategy dpaudit does not know, accounted as no guarantee)
DP_KINDS = ("server-fixed", "client-fixed", "server-adaptive", "client-adaptive", "none", "unknown")
#: ``"uniform-without-replacement"``: Flower's own ``sample_nodes`` (``random.sample`` of a fixed number of the
#: connected nodes) ran, as the recorder verified from the strategy's class; anything else is ``"unverified"``
SAMPLERS = ("uniform-without-replacement", "unverified")


def _node_id(v: Any, where: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2 ** 64:
        raise DataError(f"{where} must hold node ids (ints in [0, 2**64)). Got {v!r:.40} instead.")
    return v


@dataclass(frozen=True, slots=True)
class RoundRecord:
    """One training round as the server ran it.

    ``population`` the node ids connected when the round sampled (the sampler drew from them), ``sampled`` the
    node ids it sent training messages to, ``replied`` those whose replies were aggregated, ``clipping_norm`` the
    norm the round clipped to (adaptive clipping moves it), ``noise_multiplier`` the multiplier of the noise added to
    the model update (for adaptive clipping the one after the clipped-count share, :attr:`DpSettings.clipped_count_stddev`),
    ``released`` whether the round produced a new global model, ``weights`` the aggregation weight each replied node
    reported (FedAvg's ``weighted_by_key``, ``num-examples`` by default; empty when not reported),
    ``declared_sample_size`` the DP wrapper's ``num_sampled_clients`` m when the round ran (Flower's noise is
    sigma C / m on the *average* of the replies, whatever their number r: sigma r / m relative to their sum; None in
    records written before it was kept, which then read the strategy's).
    """

    round: int
    population: tuple[int, ...]
    sampled: tuple[int, ...]
    replied: tuple[int, ...]
    clipping_norm: float | None = None
    noise_multiplier: float | None = None
    released: bool = True
    weights: tuple[float, ...] = ()
    declared_sample_size: int | None = None

    def __post_init__(self) -> None:
        where = f"round {self.round}"
        if self.declared_sample_size is not None and not 1 <= self.declared_sample_size <= MAX_NODES:
            raise DataError(f"{where}: 'declared_sample_size' must be in [1, {MAX_NODES}]. Got {self.declared_sample_size} instead.")
        if not 1 <= self.round <= MAX_ROUNDS:
            raise DataError(f"A round number must be in [1, {MAX_ROUNDS}]. Got {self.round} instead.")
        for name in ("population", "sampled", "replied"):
            ids = tuple(getattr(self, name))
            if len(ids) > MAX_NODES:
                raise DataError(f"{where}: '{name}' holds {len(ids)} node ids, more than {MAX_NODES}.")
            for v in ids:
                _node_id(v, f"{where}: '{name}'")
            if len(set(ids)) != len(ids):
                raise DataError(f"{where}: '{name}' lists a node id twice.")
            object.__setattr__(self, name, ids)
        object.__setattr__(self, "weights", tuple(self.weights))
        if self.weights and (len(self.weights) != len(self.replied)
                             or not all(math.isfinite(w) and w > 0 for w in self.weights)):
            raise DataError(f"{where}: 'weights' must hold one finite weight > 0 per replied node.")
        pop = set(self.population)
        if not set(self.sampled) <= pop:
            raise DataError(f"{where}: a sampled node is not in the round's population.")
        if not set(self.replied) <= set(self.sampled):
            raise DataError(f"{where}: a node replied that was not sampled.")
        for name in ("clipping_norm", "noise_multiplier"):
            v = getattr(self, name)
            if v is not None and (not math.isfinite(v) or v < 0):
                raise DataError(f"{where}: '{name}' must be a finite float >= 0. Got {v!r} instead.")


@dataclass(frozen=True, slots=True)
class DpSettings:
    """The DP wrapper's settings (Flower's attribute names).

    ``noise_multiplier``: for adaptive clipping the *effective* multiplier of the model and clipped-count releases
    together (Andrew, Thakkar, McMahan, Ramaswamy, "Differentially private learning with adaptive clipping",
    NeurIPS 2021, Theorem 1: :math:`\\sigma = (\\sigma_\\Delta^{-2} + (2\\sigma_b)^{-2})^{-1/2}`), what Flower was
    asked for; the rounds record the model-noise multiplier :math:`\\sigma_\\Delta` that was added.
    """

    kind: str
    classes: tuple[str, ...] = ()
    num_sampled_clients: int | None = None
    noise_multiplier: float | None = None
    clipping_norm: float | None = None
    clipped_count_stddev: float | None = None
    target_clipped_quantile: float | None = None
    clip_norm_lr: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in DP_KINDS:
            raise DataError(f"The strategy 'kind' must be one of {', '.join(DP_KINDS)}. Got {self.kind!r:.60} instead.")
        if len(self.classes) > 16 or any(len(c) > 200 for c in self.classes):
            raise DataError("The strategy 'classes' must be at most 16 names of at most 200 characters.")
        for name in ("noise_multiplier", "clipping_norm", "clipped_count_stddev", "target_clipped_quantile", "clip_norm_lr"):
            v = getattr(self, name)
            if v is not None and (not math.isfinite(v) or v < 0):
                raise DataError(f"The strategy's '{name}' must be a finite float >= 0. Got {v!r} instead.")
        if self.num_sampled_clients is not None and not 1 <= self.num_sampled_clients <= MAX_NODES:
            raise DataError(f"The strategy's 'num_sampled_clients' must be in [1, {MAX_NODES}]. Got {self.num_sampled_clients} instead.")


@dataclass(frozen=True, slots=True)
class LocalDpSettings:
    """``flwr.clientapp.mod.LocalDpMod``'s settings: every reply's update clipped to ``clipping_norm`` (L2) and
    Gaussian noise of standard deviation ``sensitivity * sqrt(2 ln(1.25 / delta)) / epsilon`` added to it."""

    clipping_norm: float
    sensitivity: float
    epsilon: float
    delta: float

    def __post_init__(self) -> None:
        for name in ("clipping_norm", "sensitivity", "epsilon", "delta"):
            v = getattr(self, name)
            if not math.isfinite(v) or v < 0:
                raise DataError(f"The local DP '{name}' must be a finite float >= 0. Got {v!r} instead.")
        if self.delta >= 1.0:
            # the mod's calibration sqrt(2 ln(1.25 / delta)) has no meaning at delta >= 1 (Flower refuses it too)
            raise DataError(f"The local DP 'delta' must be in [0, 1). Got {self.delta!r} instead.")

    @property
    def noise_std(self) -> float:
        """The standard deviation of the noise the mod adds to each coordinate (``inf`` past the float range: a
        tiny epsilon)."""
        if self.epsilon == 0 or self.delta == 0:
            return 0.0
        with np.errstate(over="ignore"):
            return float(np.float64(self.sensitivity) * math.sqrt(2.0 * math.log(1.25 / self.delta)) / np.float64(self.epsilon))


@dataclass(frozen=True, slots=True)
class RunData:
    """Which records the run trained on, for the release bundle: a dpaudit data set (``dataset``: ``name``,
    ``seed``, ``num_samples``) and indices into it -- ``clients`` maps a partition id to its records,
    ``nonmembers`` never trained on, ``attacker`` the auditor's pool."""

    dataset: Mapping[str, JsonValue]
    clients: Mapping[str, tuple[int, ...]]
    nonmembers: tuple[int, ...]
    attacker: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        total = sum(len(v) for v in self.clients.values()) + len(self.nonmembers) + len(self.attacker)
        if total > MAX_DATA_RECORDS or len(self.clients) > MAX_NODES:
            raise DataError(f"The run's data lists {total} record indices, more than {MAX_DATA_RECORDS}.")
        for where, ids in [*((f"data.clients[{k!r:.20}]", v) for k, v in self.clients.items()),
                           ("data.nonmembers", self.nonmembers), ("data.attacker", self.attacker)]:
            if any(isinstance(i, bool) or not 0 <= i < MAX_DATA_RECORDS for i in ids):
                raise DataError(f"{where} must hold record indices in [0, {MAX_DATA_RECORDS}).")


@dataclass(frozen=True, slots=True)
class FlowerRun:
    """The record of a Flower run (``flower_run.json``); see the module docstring."""

    format: str
    schema: int
    flwr_version: str
    seed: int | None
    strategy: DpSettings
    sampler: str
    rounds: tuple[RoundRecord, ...]
    local_dp: LocalDpSettings | None = None
    partitions: Mapping[str, int] = field(default_factory=dict)
    flower_accountant: Mapping[str, JsonValue] | None = None
    data: RunData | None = None
    model_keys: tuple[str, ...] = ()
    #: the engine the ServerApp ran on, from its Grid's class: ``"simulation"`` (Flower's in-memory grid),
    #: ``"deployment"`` (a SuperLink), another Grid's class name; None in records written before it was kept
    engine: str | None = None

    def __post_init__(self) -> None:
        if self.engine is not None and (len(self.engine) > 64 or not self.engine.isprintable()):
            raise DataError("The run's 'engine' must be at most 64 printable characters.")
        if self.format != RUN_FORMAT or self.schema != RUN_SCHEMA:
            raise DataError(f"{RUN_FILE} must have format {RUN_FORMAT!r} and schema {RUN_SCHEMA}. "
                            f"Got {self.format!r:.40}, {self.schema!r:.20} instead.")
        if self.sampler not in SAMPLERS:
            raise DataError(f"The run's 'sampler' must be one of {', '.join(SAMPLERS)}. Got {self.sampler!r:.60} instead.")
        if len(self.flwr_version) > 64:
            raise DataError("The run's 'flwr_version' must be at most 64 characters.")
        if len(self.rounds) > MAX_ROUNDS:
            raise DataError(f"The run records {len(self.rounds)} rounds, more than {MAX_ROUNDS}.")
        if sum(len(r.population) + len(r.sampled) + len(r.replied) for r in self.rounds) > MAX_RECORDED_IDS:
            raise DataError(f"The run records more than {MAX_RECORDED_IDS} node ids in all.")
        nums = [r.round for r in self.rounds]
        if nums != sorted(set(nums)):
            raise DataError("The run's rounds must be listed once each, in increasing order.")
        if len(self.partitions) > MAX_NODES:
            raise DataError(f"The run maps {len(self.partitions)} nodes to partitions, more than {MAX_NODES}.")
        for k, v in self.partitions.items():
            if not k.isdigit() or len(k) > 20:
                raise DataError(f"The run's 'partitions' must be keyed by node id. Got {k!r:.40} instead.")
            if not 0 <= v < MAX_NODES:
                raise DataError(f"The run's 'partitions' must map node ids to partition ids in [0, {MAX_NODES}). Got {v!r:.40} instead.")
        if len(self.model_keys) > 10_000 or any(len(k) > 200 for k in self.model_keys):
            raise DataError("The run's 'model_keys' must be at most 10000 names of at most 200 characters.")

    @property
    def clients(self) -> tuple[int, ...]:
        """Every node id seen in any round's population, in first-seen order."""
        return tuple(dict.fromkeys(i for r in self.rounds for i in r.population))

    def participation(self) -> dict[int, int]:
        """Node id -> number of released rounds whose aggregate held its reply."""
        out = {i: 0 for i in self.clients}
        for r in self.rounds:
            if r.released:
                for i in r.replied:
                    out[i] += 1
        return out


def _check_dir(path: Any) -> Path:
    p = check_path(path, "path", "read_flower_run")     # a str or PathLike, no NUL, a name the system can hold
    if p.is_symlink():
        raise DataError(f"The Flower run directory {str(p)!r} is a symbolic link; give the directory itself.")
    if not p.is_dir():
        raise DataError(f"The Flower run directory {str(p)!r} does not exist or is not a directory.")
    for name in (RUN_FILE, LEDGER_FILE, MODEL_FILE):
        if (p / name).is_symlink():
            raise DataError(f"{name} in the Flower run directory {str(p)!r} is a symbolic link; a run directory holds "
                            "plain files only.")
    return p


def read_flower_run(path: str | os.PathLike) -> FlowerRun:
    """Read and check ``DIR/flower_run.json`` (hostile input: caps first, then the types, field by field)."""
    p = _check_dir(path)
    data = load_json_file(p / RUN_FILE, f"the Flower run file {RUN_FILE}", max_bytes=MAX_RUN_JSON_BYTES,
                          follow_symlinks=False)
    if not isinstance(data, dict):
        raise DataError(f"{RUN_FILE} must hold a JSON object. Got {type(data).__name__} instead.")
    rounds = data.get("rounds")
    if isinstance(rounds, list) and len(rounds) > MAX_ROUNDS:
        raise DataError(f"The run records {len(rounds)} rounds, more than {MAX_ROUNDS}.")
    return from_dict(FlowerRun, data, what=RUN_FILE)


def read_run_model(path: str | os.PathLike) -> bytes:
    """The bytes of ``DIR/global_model.safetensors`` (capped; parse them with a safetensors reader that checks the
    header, e.g. :func:`dpaudit.training.model_files`'s)."""
    p = _check_dir(path)
    return read_input_bytes(p / MODEL_FILE, f"the Flower run's {MODEL_FILE}", max_bytes=MAX_MODEL_BYTES,
                            follow_symlinks=False)

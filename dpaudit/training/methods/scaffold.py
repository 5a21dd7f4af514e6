"""The run scaffold every method goes through: one configuration dialect, one way to run, one result.

A method module (``pate``, ``fedkt``, ``fredy``, ``privatekt``, ``proxyfl``, ``baselines``, ``centrain``)
exports

- ``Config``: a subclass of :class:`MethodConfig` (the typed configuration, built from the TOML tables
  ``[data]``, ``[model]``, ``[method]``, ``[run]``), and
- ``run(config, out, *, seed, progress, overwrite=False) -> RunResult``, which calls :func:`execute` with the
  method's training body.

:func:`execute` does what every method needs around its training: it validates the config and the seed,
checks the device before any work, takes the output's lock (a second run writing the same release stops at
once, naming the first), prepares the output (refusing a finished release unless ``overwrite``,
resuming the checkpoints of an interrupted run with the same settings), sets torch's thread count, reports
progress on stderr (:mod:`dpaudit.progress`), writes the release bundle(s) the body describes and removes
the checkpoints once they are written.

The TOML dialect (``configs/*.toml``)::

    [data]            # name = "digits", data_dir = "...", and for federated methods the split/partition
    [model]           # federated methods: name = "mlp" and architecture keyword arguments
    [method]          # the method's own parameters (PATE family: also split fractions and per-role models)
    [method.teacher_train]   # training schedules of the PATE family, merged over their defaults
    [run]             # device, num_threads, checkpoint_every, stop_after
    [canaries]        # optional: kind = "mislabeled"|"ood"|"dirac", count = m, seed -- one-run canaries planted in
                      # the released model's training data (methods whose Config lists canary_kinds; see
                      # dpaudit.training.canaries); the bundle gains canaries.npz and canaries_truth.npz

Command-line ``--set table.key=value`` (a TOML value; a bare word is a string) and the methods' shorthand
flags (``--gamma 0.1`` is ``--set method.gamma=0.1``) are merged over the file, which is merged over the
method's defaults.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import shutil
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping, Sequence

from dpaudit._format import fmt_number
from dpaudit._io import check_output_folder, check_replaceable, dumps_json, exclusive_lock, parse_toml_value, read_json, read_toml, write_json
from dpaudit.errors import DataError, OutputError, ParameterError, check_bool, check_int
from dpaudit.training.limits import MAX_ROUNDS, MAX_THREADS
from dpaudit.progress import Reporter, as_reporter
from dpaudit.serial import to_dict
from dpaudit.threads import current as current_threads
from dpaudit.training.methods.common import StageCache, config_to_dict

__all__ = [
    "TABLES",
    "MethodConfig",
    "RunSettings",
    "RunContext",
    "Release",
    "Outcome",
    "RunResult",
    "execute",
    "read_config_file",
    "parse_sets",
    "tables_from_params",
    "merge_tables",
    "build_dataclass",
    "check_device",
    "checkpoint_dir_for",
    "lock_file_for",
    "prepare_out",
    "torch_threads",
]

TABLES = ("data", "model", "method", "run", "canaries")


# --------------------------------------------------------------------------------------------------
# Reading the tables: file, --set, params
# --------------------------------------------------------------------------------------------------


def read_config_file(path: str | Path, *, flat_family: str | None = None) -> dict[str, dict[str, Any]]:
    """The tables of a method config file.

    ``flat_family``: for the PATE family (``"pate"``, ``"fedkt"``, ``"fredy"``) the old flat layout (keys at top
    level, ``method = "<name>"``) is still read, as ``[method]``, with a deprecation warning; other methods
    refuse it.
    """
    p = Path(path)
    raw = read_toml(p)
    loose = sorted(k for k, v in raw.items() if k not in TABLES or not isinstance(v, dict))
    if loose:
        if flat_family is None:
            raise DataError(f"The config file {p} has key(s) {loose} outside the tables [data], [model], [method], [run], "
                            "[canaries].")
        declared = raw.pop("method", None) if not isinstance(raw.get("method"), dict) else None
        if declared is not None and declared != flat_family:
            raise DataError(f"The config file {p} is a {declared} config, not a {flat_family} config.")
        warnings.warn(f"The config file {p} uses the old flat layout; move its keys under a [method] table "
                      "(and [teacher_train] to [method.teacher_train]). It is read as [method] for now.",
                      FutureWarning, stacklevel=2)
        return {"method": raw}
    return {t: dict(raw.get(t, {})) for t in TABLES}


def parse_sets(items: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``["method.gamma=0.1", "data.name=mnist"]`` -> ``{"method": {"gamma": 0.1}, "data": {"name": "mnist"}}``.

    The value is read as a TOML value (``0.1``, ``[100, 100]``, ``true``, ``"text"``); anything else is taken as
    a string. A key without a table (``gamma=0.1``) belongs to ``[method]``; ``method.teacher_train.epochs=5``
    sets a key of a sub-table.
    """
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        key, sep, value = str(item).partition("=")
        key = key.strip()
        if not sep or not key:
            raise ParameterError(f"--set takes table.key=value (e.g. method.gamma=0.1). Got {item!r} instead.")
        parts = key.split(".")
        if parts[0] not in TABLES:
            parts = ["method", *parts]
        if len(parts) < 2:
            raise ParameterError(f"--set {item!r}: name a key of the [{parts[0]}] table (e.g. {parts[0]}.name=...).")
        node = out.setdefault(parts[0], {})
        for p in parts[1:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = parse_toml_value(value.strip())
    return out


def tables_from_params(params: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Overrides given in Python (an audit config's ``params``): tables (``{"method": {"rounds": 20}}``),
    dotted keys (``{"method.rounds": 20}``) or bare keys of ``[method]`` (``{"gamma": 0.1}``)."""
    out: dict[str, dict[str, Any]] = {}
    for k, v in dict(params or {}).items():
        if k in TABLES and isinstance(v, Mapping):
            out[k] = merge_tables(out, {k: dict(v)})[k]
        else:
            out = merge_tables(out, _dotted(str(k), v))
    return out


def _dotted(key: str, value: Any) -> dict[str, dict[str, Any]]:
    parts = key.split(".")
    if parts[0] not in TABLES:
        parts = ["method", *parts]
    node: dict[str, Any] = {}
    root = {parts[0]: node}
    for p in parts[1:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = value
    return root


def merge_tables(*layers: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Later layers win, key by key; a sub-table (``[method.teacher_train]``) is merged key by key too."""
    out: dict[str, dict[str, Any]] = {}
    for layer in layers:
        for table, values in layer.items():
            if table not in TABLES:
                raise ParameterError(f"Unknown settings table [{table}]; the tables are {', '.join(f'[{t}]' for t in TABLES)}.")
            if not isinstance(values, Mapping):
                raise ParameterError(f"[{table}] must be a table of settings. Got {values!r} instead.")
            dest = out.setdefault(table, {})
            for k, v in values.items():
                if isinstance(v, Mapping) and isinstance(dest.get(k), Mapping):
                    dest[k] = {**dest[k], **v}
                else:
                    dest[k] = dict(v) if isinstance(v, Mapping) else v
    return out


def build_dataclass(cls: type, values: Mapping[str, Any], where: str) -> Any:
    """``cls()`` with ``values`` replacing its defaults: unknown keys are an error naming ``where`` (e.g.
    ``[method]``); training schedules (fields marked ``train_config``) given as tables are merged over the
    default schedule; lists become tuples."""
    names = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise ParameterError(f"Unknown setting(s) {unknown} in {where}; allowed: {sorted(names)}.")
    defaults = cls()
    kwargs: dict[str, Any] = {}
    for name, value in values.items():
        if value is None:
            continue
        if names[name].metadata.get("train_config") and isinstance(value, Mapping):
            from dpaudit.training.ensemble import TrainConfig

            value = TrainConfig.from_dict({**getattr(defaults, name).to_dict(), **value})
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[name] = value
    return dataclasses.replace(defaults, **kwargs)


# --------------------------------------------------------------------------------------------------
# The typed configuration
# --------------------------------------------------------------------------------------------------


def check_device(device: str | None, where: str = "device") -> str | None:
    """``None`` (cuda when available, else cpu) or a torch device that exists on this machine: an unknown name
    or a CUDA/MPS device the machine lacks is refused before any work."""
    if device is None:
        return None
    import torch

    try:
        dev = torch.device(str(device))
    except (RuntimeError, ValueError):
        raise ParameterError(f"The {where} must be cpu, cuda, cuda:N or mps. Got {device!r} instead.") from None
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ParameterError(f"The {where} {device!r} is not available: this machine has no CUDA device (use cpu).")
        if dev.index is not None and dev.index >= count:
            raise ParameterError(f"The {where} {device!r} is not available: this machine has {count} CUDA device(s).")
    elif dev.type == "mps":
        if not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            raise ParameterError(f"The {where} {device!r} is not available on this machine (use cpu).")
    elif dev.type != "cpu":
        raise ParameterError(f"The {where} must be cpu, cuda, cuda:N or mps. Got {device!r} instead.")
    return str(device)


@dataclass(frozen=True)
class RunSettings:
    """The ``[run]`` table: how a run executes, not what it computes (so not part of its fingerprint).

    ``device``: torch device (None: cuda when available, else cpu). ``num_threads``: torch's intra-op threads
    during the run (None: unchanged). ``checkpoint_every``: federated methods checkpoint every this many rounds
    (0: only at the end). ``stop_after``: stop after this many rounds without writing a release (time-boxed
    runs; the same command again resumes).
    """

    device: str | None = None
    num_threads: int | None = None
    checkpoint_every: int = 0
    stop_after: int | None = None

    def __post_init__(self) -> None:
        o = "[run]"
        check_device(self.device)
        if self.num_threads is not None:
            check_int(self.num_threads, "num_threads", o, low=1, high=MAX_THREADS)
        check_int(self.checkpoint_every, "checkpoint_every", o, low=0, high=MAX_ROUNDS)
        if self.stop_after is not None:
            check_int(self.stop_after, "stop_after", o, low=0, high=MAX_ROUNDS)


@dataclass(frozen=True)
class MethodConfig:
    """A method's whole configuration, one attribute per TOML table.

    ``name``: the registry name (``"fedavg-ldp"``); ``dataset``/``data_dir``: ``[data] name``/``data_dir``;
    ``data``: the rest of ``[data]`` (federated methods: their ``DataSettings``; PATE family: None);
    ``model``: the ``[model]`` table (federated methods); ``method``: the method's typed parameters;
    ``run``: :class:`RunSettings`; ``canaries``: the ``[canaries]`` table
    (:class:`~dpaudit.training.canaries.CanarySettings`), None when the config has none.

    Each method module subclasses it as ``Config`` and sets ``method_cls`` (the ``[method]`` dataclass),
    ``defaults`` (tables under the file) and, for the federated methods, ``data_cls``. A method that can plant
    canaries in its released model lists the kinds in ``canary_kinds`` and overrides :meth:`check_canaries`
    (kinds it can plant only under some settings, e.g. Dirac canaries only with DP-SGD) and
    :meth:`check_canaries_fit` (the canaries against the prepared data); other methods refuse a ``[canaries]``
    table.
    """

    name: str
    method: Any
    dataset: str = "digits"
    data_dir: str | None = None
    data: Any = None
    model: Mapping[str, Any] = field(default_factory=dict)
    run: RunSettings = field(default_factory=RunSettings)
    canaries: Any = None

    method_cls: ClassVar[type] = object
    canary_kinds: ClassVar[tuple[str, ...]] = ()
    data_cls: ClassVar[type | None] = None
    defaults: ClassVar[Mapping[str, Mapping[str, Any]]] = {}
    flat_family: ClassVar[str | None] = None

    @classmethod
    def method_table(cls, name: str, table: Mapping[str, Any]) -> Any:
        """The typed ``[method]`` of the method ``name`` (modules serving several names override this)."""
        return build_dataclass(cls.method_cls, table, f"[method] of {name}")

    @classmethod
    def from_tables(cls, name: str, tables: Mapping[str, Mapping[str, Any]]) -> "MethodConfig":
        """Build from the tables merged over :attr:`defaults`."""
        t = merge_tables(cls.defaults, tables)
        data = dict(t.get("data", {}))
        dataset = data.pop("name", "digits")
        data_dir = data.pop("data_dir", None)
        if not isinstance(dataset, str) or not dataset:
            raise ParameterError(f"[data] name must be a data set name. Got {dataset!r} instead.")
        if cls.data_cls is None:
            if data:
                raise ParameterError(f"Unknown setting(s) {sorted(data)} in [data] of {name}; allowed: ['data_dir', 'name'] "
                                     "(its split fractions are [method] settings).")
            data_obj = None
        else:
            data_obj = build_dataclass(cls.data_cls, data, f"[data] of {name}")
        model = dict(t.get("model", {}))
        if cls.data_cls is None and model:
            raise ParameterError(f"{name} names its models in [method] (e.g. teacher_model); its [model] table must be empty. "
                                 f"Got {sorted(model)} instead.")
        run = build_dataclass(RunSettings, t.get("run", {}), f"[run] of {name}")
        canaries = None
        if t.get("canaries"):
            from dpaudit.training.canaries import CanarySettings

            canaries = build_dataclass(CanarySettings, t["canaries"], f"[canaries] of {name}")
        config = cls(name=name, method=cls.method_table(name, t.get("method", {})), dataset=dataset,
                     data_dir=None if data_dir is None else str(data_dir), data=data_obj, model=model, run=run,
                     canaries=canaries)
        if canaries is not None:
            config.check_canaries()
        return config

    def check_canaries(self) -> None:
        """Refuse a ``[canaries]`` table this method cannot plant (before any data is loaded)."""
        c = self.canaries
        if c is None:
            return
        if not self.canary_kinds:
            raise ParameterError(f"The [canaries] table is not supported by method {self.name}: it cannot plant "
                                 "canaries in its released model (supported: centrain).")
        if c.kind not in self.canary_kinds:
            raise ParameterError(f"The 'kind' parameter of [canaries] of {self.name} must be one of "
                                 f"{', '.join(map(repr, self.canary_kinds))}. Got {c.kind!r} instead.")

    def check_canaries_fit(self, seed: int) -> None:
        """Refuse canaries that do not fit the data a run with ``seed`` would prepare (e.g. more mislabeled
        canaries than records to take them from); called before the output is touched."""
        return None

    @classmethod
    def load(cls, name: str, path: str | Path | None = None, *,
             overrides: Sequence[Mapping[str, Mapping[str, Any]]] = ()) -> "MethodConfig":
        """Defaults, then the TOML file ``path``, then each table set of ``overrides`` in order."""
        layers = [read_config_file(path, flat_family=cls.flat_family)] if path is not None else []
        return cls.from_tables(name, merge_tables(*layers, *overrides))

    def prepare_data(self, seed: int) -> Any:
        """Load the data and cut it as a run with ``seed`` would (split, partition), without training; raises
        the error a run would when the settings do not fit the data. Federated methods: the
        :class:`~dpaudit.training.methods.fl_common.FederatedData`; the PATE family overrides it."""
        if self.data is None:
            raise NotImplementedError(f"{type(self).__module__}.Config must define prepare_data")
        return self.data.prepare(self.dataset, seed=seed, data_dir=self.data_dir)

    def fingerprint(self, seed: int) -> dict[str, Any]:
        """What the run's results depend on (checkpoints are reused only under the same fingerprint)."""
        data = None if self.data is None else config_to_dict(self.data)
        out = {"method": self.name, "dataset": self.dataset, "data_dir": self.data_dir, "data": data,
               "model": dict(self.model), "params": config_to_dict(self.method), "seed": int(seed)}
        if self.canaries is not None:
            out["canaries"] = self.canaries.to_dict()
        return out


# --------------------------------------------------------------------------------------------------
# Running: context, release description, result
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunContext:
    """What :func:`execute` hands a method's body: the validated seed, the reporter, the checkpoint
    directory (beside ``out``) and its stage cache."""

    out: Path
    seed: int
    reporter: Reporter
    checkpoints: Path
    cache: StageCache

    @property
    def progress(self) -> Reporter:
        """The reporter, for the trainers that take ``progress`` (their stages draw under the run's)."""
        return self.reporter


@dataclass(frozen=True)
class Release:
    """One release bundle to write (the arguments of :func:`~dpaudit.training.release.write_release`)."""

    method: str
    dataset: Mapping[str, Any]
    params: Mapping[str, Any]
    utility: Mapping[str, Any]
    classifier: Any
    train_config: Any
    ledger: Any
    statement: Any
    claim: Mapping[str, Any]
    membership: Mapping[str, Any]
    votes: Any = None
    assumptions: Sequence[str] = ()
    flags: Sequence[tuple[str, str]] = ()
    canaries: Any = None   # (files, entry) of training.canaries.release_canary_files, or None

    def write(self, out: Path, *, seed: int, overwrite: bool, run: Mapping[str, Any] | None = None) -> Path:
        from dpaudit.training.release import write_release

        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return Path(write_release(out, seed=seed, overwrite=overwrite, run=run, **fields))


@dataclass(frozen=True)
class Outcome:
    """What a method's body returns: its release, further releases by name (written to ``out/<name>``) and
    the rounds it ran (federated methods)."""

    release: Release
    extras: Mapping[str, Release] = field(default_factory=dict)
    rounds_run: int | None = None


@dataclass(frozen=True)
class RunResult:
    """What a method run returns: where the release(s) went, utility, and the privacy accounting.

    ``utility`` is the release's utility (``test_accuracy`` of the released model always); ``accounting``
    the privacy figures (headline first in :meth:`summary`); ``claimed_epsilon`` what the method claims;
    ``extra_releases`` further bundles by name (FREDY's ``"nonprivate"`` baseline).
    """

    method: str
    release: Path
    utility: Mapping[str, Any]
    accounting: Any
    claimed_epsilon: float
    extra_releases: Mapping[str, Path] = field(default_factory=dict)
    rounds_run: int | None = None
    seconds: float = 0.0
    threads: int | None = None  # intra-op threads during training (dpaudit.threads)

    @property
    def epsilon(self) -> float:
        return float(self.accounting.epsilon)

    def summary(self) -> str:
        """Lines for a terminal: where, utility (scalars), the privacy statements (headline marked) with the
        headline's assumptions, the claim and the warnings."""
        rounds = f", {self.rounds_run} rounds" if self.rounds_run is not None else ""
        lines = [f"{self.method}: release written to {self.release} ({self.seconds:.1f}s{rounds})"]
        lines += [f"  {name} release: {path}" for name, path in self.extra_releases.items()]
        lines.append("utility:")
        for k, v in self.utility.items():
            if isinstance(v, (int, float, str)):
                lines.append(f"  {k:<28} {fmt_number(v)}")
        lines.append("privacy:")
        for i, st in enumerate(self.accounting.statements):
            mark = "*" if i == self.accounting.headline else " "
            eps = "∞ (no guarantee)" if math.isinf(st.epsilon) else fmt_number(st.epsilon)
            dd = ", data-dependent" if st.data_dependent else ""
            lines.append(f" {mark} epsilon = {eps} at delta = {fmt_number(st.delta)}  [{st.label or st.method}{dd}]")
        claimed = "∞ (no guarantee claimed)" if math.isinf(self.claimed_epsilon) else fmt_number(self.claimed_epsilon)
        lines.append(f"  claimed epsilon: {claimed}")
        head = self.accounting.statement
        if head.assumptions:
            lines.append("assumptions:")
            lines.extend(f"  - {a}" for a in head.assumptions)
        lines.extend(f"warning: {w}" for w in self.accounting.warnings)
        return "\n".join(lines)


def checkpoint_dir_for(out: str | Path) -> Path:
    """Where a run writing the release ``out`` keeps its checkpoints: a hidden sibling ``.<name>.checkpoints``
    (the release directory is written atomically as a whole, so it must not exist before the run ends)."""
    out = Path(out)
    return out.parent / f".{out.name}.checkpoints"


def lock_file_for(out: str | Path) -> Path:
    """The lock a run writing the release ``out`` holds: a hidden sibling ``.<name>.lock`` (the release directory
    itself must not exist before the run ends). It stays after the run (removing a lock file races with a run
    that opened it); a lock dies with its process, so a killed run never blocks the next one."""
    out = Path(out)
    return out.parent / f".{out.name}.lock"


def prepare_out(out: str | Path, overwrite: bool, fingerprint: Mapping[str, Any]) -> Path:
    """Check ``out`` before any work and return the checkpoint directory to use.

    A finished release at ``out`` is refused unless ``overwrite``. Checkpoints of an earlier run are reused
    when they were made with the same ``fingerprint`` (every stage is deterministic given it, so a resumed
    run gives the numbers an uninterrupted one would); checkpoints of other settings are refused unless
    ``overwrite`` discards them.
    """
    out = check_output_folder(out, "The release directory")     # never a symbolic link, as for every command
    if (out.exists() or out.is_symlink()) and not overwrite:
        raise DataError(f"The release directory {out} already exists; replace it with --overwrite.")
    if out.exists() and not out.is_dir():
        raise DataError(f"The release directory {out} is a file.")
    if out.exists() or out.is_symlink():
        check_replaceable(out)            # only a folder dpaudit wrote, never '.', '..', home, ...: before any work
    ck = checkpoint_dir_for(out)
    text = dumps_json(fingerprint)
    digest = hashlib.sha256(text.encode()).hexdigest()
    meta = ck / "run.json"
    if ck.is_symlink():
        raise OutputError(f"The checkpoint folder {ck} is a symbolic link; dpaudit never follows links when writing. "
                          "Remove it, or choose another --out.")
    if ck.exists():
        old = read_json(meta).get("digest") if meta.is_file() and not meta.is_symlink() else None
        if old != digest:
            if old is not None and not overwrite:
                raise DataError(f"The checkpoints in {ck} come from a run with other settings; "
                                "discard them with --overwrite.")
            if old is None and any(ck.iterdir()):
                raise OutputError(f"{ck} exists but holds no run.json of dpaudit's; dpaudit removes only checkpoint "
                                  "folders it wrote. Remove it yourself, or choose another --out.")
            shutil.rmtree(ck)
    ck.mkdir(parents=True, exist_ok=True)
    write_json(meta, {"digest": digest, "fingerprint": json.loads(text)})
    return ck


class torch_threads:
    """Context manager: torch's intra-op thread count set to ``n`` inside, restored on exit (None: unchanged).

    The small default runs use 1 thread: their models are tiny, and more threads only add contention on a
    shared machine (measured here: 100 PrivateKT rounds took ~160 s with torch's default threads, ~20 s with 1).
    """

    def __init__(self, n: int | None) -> None:
        self.n = n
        self.before: int | None = None

    def __enter__(self) -> "torch_threads":
        if self.n is not None:
            import torch

            self.before = torch.get_num_threads()
            torch.set_num_threads(self.n)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.before is not None:
            import torch

            torch.set_num_threads(self.before)


Body = Callable[[Any, RunContext], "Outcome | None"]


def execute(config: MethodConfig, out: str | Path, *, seed: int, progress: bool | Reporter, overwrite: bool,
            body: Body, config_cls: type) -> RunResult | None:
    """Run ``body(config, ctx)`` inside the scaffold (see the module docstring) and write what it returns.

    Returns None when the body stopped early (``[run] stop_after``): no release is written and the
    checkpoints stay for the next run.
    """
    if not isinstance(config, config_cls):
        raise ParameterError(f"The config must be a {config_cls.__module__.rsplit('.', 1)[-1]} Config. "
                             f"Got {type(config).__name__} instead.")
    seed = check_int(seed, "seed", config.name, low=0)
    overwrite = check_bool(overwrite, "overwrite", config.name)
    check_device(config.run.device)
    if config.canaries is not None:
        config.check_canaries()
        config.check_canaries_fit(seed)   # before the output (lock, checkpoints) is touched
    rep = as_reporter(progress)
    t0 = time.perf_counter()
    out = Path(out)
    # one writer per release: a second run into the same out stops here, naming the first (before any work)
    with exclusive_lock(out, f"dpaudit train {config.name}", lock_file=lock_file_for(out)):
        ck = prepare_out(out, overwrite, config.fingerprint(seed))
        ctx = RunContext(out=out, seed=seed, reporter=rep, checkpoints=ck, cache=StageCache(ck, rep))
        rep.log(f"{config.name} on {config.dataset} (seed {seed}) -> {out}")
        with torch_threads(config.run.num_threads):
            outcome = body(config, ctx)
            threads = current_threads()  # in force during training ([run] num_threads, else the process's)
        if outcome is None:
            rep.log(f"stopped early ([run] stop_after); checkpoints kept in {ck}: the same command resumes")
            return None
        run_info = {"threads": to_dict(threads)}
        path = outcome.release.write(out, seed=seed, overwrite=overwrite, run=run_info)
        extras = {name: r.write(out / name, seed=seed, overwrite=True, run=run_info) for name, r in outcome.extras.items()}
        shutil.rmtree(ck, ignore_errors=True)
    rep.log(f"release written to {path}")
    rel = outcome.release
    return RunResult(method=config.name, release=path, utility=dict(rel.utility), accounting=rel.statement,
                     claimed_epsilon=float(rel.claim["epsilon"]), extra_releases=extras,
                     rounds_run=outcome.rounds_run, seconds=time.perf_counter() - t0, threads=threads.threads)

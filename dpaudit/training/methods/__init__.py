"""The methods, one module each, behind one registry and one entry point.

Every method module exports a typed ``Config`` (a :class:`~.scaffold.MethodConfig` built from the TOML
tables ``[data]``, ``[model]``, ``[method]``, ``[run]``) and ``run(config, out, *, seed, progress,
overwrite=False) -> RunResult`` (see :mod:`.scaffold`). :data:`METHODS` maps each method name to its module;
:func:`run_method` (what ``dpaudit train METHOD`` and the audit call) loads the config and runs it.

This module imports no method module (nor torch) until a method is asked for, so the command line starts fast.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Mapping, Sequence

from dpaudit.errors import ParameterError

__all__ = ["METHODS", "MethodEntry", "Shorthand", "method_names", "method_module", "load_method_config", "run_method"]


@dataclass(frozen=True)
class Shorthand:
    """A command-line flag kept for users of the per-method commands: ``--gamma X`` is ``--set method.gamma=X``.

    ``type`` is ``"int"``, ``"float"``, ``"str"`` or ``"choice:A,B"``; a flag with ``value`` set takes no
    argument and sets that value (``--no-buffer`` sets ``method.use_buffer = false``)."""

    flag: str
    key: str
    type: str
    help: str
    value: Any = None


@dataclass(frozen=True)
class MethodEntry:
    """A registry row: the module that implements the method, a one-line description, its shorthand flags."""

    module: str
    help: str
    shorthands: tuple[Shorthand, ...] = ()


_M = "dpaudit.training.methods."
_ROUNDS = Shorthand("--rounds", "method.rounds", "int", "Number of rounds ([method] rounds).")
_EPS = Shorthand("--epsilon", "method.epsilon", "float", "Per-round LDP budget ([method] epsilon).")
_TEACHERS = Shorthand("--teachers", "method.teachers", "int", "Number of teachers ([method] teachers).")
_GAMMA = Shorthand("--gamma", "method.gamma", "float", "Inverse Laplace noise scale on vote counts: noise Lap(1/gamma).")
_QUERIES = Shorthand("--queries", "method.queries", "int", "Number of public queries answered ([method] queries).")
_PROXYFL = (_ROUNDS, Shorthand("--budget", "method.budget", "float", "Epsilon at which a client drops out."),
            Shorthand("--release-client", "method.release_client", "int", "Whose shared model is released (default 0)."))

#: Method name -> where it lives and what ``dpaudit train NAME`` offers beside the common flags.
METHODS: dict[str, MethodEntry] = {
    "pate": MethodEntry(_M + "pate", "PATE: teachers on disjoint data, Laplace noisy max on public queries, a released student.",
                        (_TEACHERS, _GAMMA, _QUERIES)),
    "fedkt": MethodEntry(_M + "fedkt", "FedKT: two-tier knowledge transfer with consistent voting; SOLO and PATE baselines.",
                         (Shorthand("--level", "method.level", "choice:L0,L1,L2", "Privacy level (L0 none, L1 server noise, L2 party noise)."),
                          _GAMMA, Shorthand("--parties", "method.parties", "int", "Number of parties n."),
                          Shorthand("--partitions", "method.partitions", "int", "Partitions per party s."),
                          Shorthand("--teachers", "method.teachers", "int", "Teachers per partition t."))),
    "fredy": MethodEntry(_M + "fredy", "FREDY: FedAvg-trained teachers, Laplace noisy labels, a released student and a non-private baseline.",
                         (_TEACHERS, Shorthand("--rounds", "method.rounds", "int", "Federated rounds n (the last one is local only)."),
                          _GAMMA, _QUERIES)),
    "privatekt": MethodEntry(_M + "privatekt", "PrivateKT: randomized-response labels on K actively sampled public samples per round.",
                             (_ROUNDS, _EPS,
                              Shorthand("--no-buffer", "method.use_buffer", "bool", "Ablation: knowledge buffer of one round.", False),
                              Shorthand("--uniform-sampling", "method.importance_sampling", "bool",
                                        "Ablation: uniform instead of entropy importance sampling.", False),
                              Shorthand("--no-self-training", "method.self_training", "bool", "Ablation: no self-training.", False))),
    "fedmd-ldp": MethodEntry(_M + "privatekt", "FedMD + LDP: randomized response on predictions over the whole public set.",
                             (_ROUNDS, _EPS)),
    "fedavg-ldp": MethodEntry(_M + "baselines", "FedAvg with Laplace LDP (scale 2C/eps) on L1-clipped updates.", (_ROUNDS, _EPS)),
    "fedsgd-ldp": MethodEntry(_M + "baselines", "FedSGD with Laplace LDP (scale 2C/eps) on L1-clipped gradients.", (_ROUNDS, _EPS)),
    "centrain": MethodEntry(_M + "centrain", "CenTrain: centralised training on the pooled records (no privacy; the reference)."),
    "proxyfl": MethodEntry(_M + "proxyfl", "ProxyFL: private + DP proxy per client, PushSum over the exponential graph.", _PROXYFL),
    "fml": MethodEntry(_M + "proxyfl", "FML: private + DP proxy per client, proxies averaged by a server.", _PROXYFL),
    "fedavg-dpsgd": MethodEntry(_M + "proxyfl", "FedAvg with DP-SGD local training (ProxyFL's baseline).", _PROXYFL),
    "avgpush": MethodEntry(_M + "proxyfl", "AvgPush: DP-SGD models averaged with PushSum.", _PROXYFL),
    "cwt": MethodEntry(_M + "proxyfl", "CWT: cyclical weight transfer of DP-SGD models.", _PROXYFL),
    "regular": MethodEntry(_M + "proxyfl", "Regular: each client trains alone with DP-SGD.", _PROXYFL),
    "joint": MethodEntry(_M + "proxyfl", "Joint: one DP-SGD model on the pooled records.", _PROXYFL),
}


def method_names() -> tuple[str, ...]:
    return tuple(sorted(METHODS))


def method_module(name: str) -> ModuleType:
    """The module implementing the method ``name`` (its ``Config`` and ``run``)."""
    if name not in METHODS:
        raise ParameterError(f"Unknown method {name!r}; the methods are {', '.join(method_names())}.")
    return importlib.import_module(METHODS[name].module)


def load_method_config(name: str, config_file: str | Path | None = None, *, params: Mapping[str, Any] | None = None,
                       sets: Sequence[str] = (), dataset: str | None = None, data_dir: str | Path | None = None,
                       device: str | None = None) -> Any:
    """The method's ``Config``: its defaults, then ``config_file`` (TOML), then ``params`` (tables, dotted keys or
    bare ``[method]`` keys), then ``sets`` (``"table.key=value"``), then ``dataset``/``data_dir``/``device``."""
    from dpaudit.training.methods.scaffold import parse_sets, tables_from_params

    cls = method_module(name).Config
    explicit: dict[str, dict[str, Any]] = {}
    if dataset is not None:
        explicit.setdefault("data", {})["name"] = dataset
    if data_dir is not None:
        explicit.setdefault("data", {})["data_dir"] = str(data_dir)
    if device is not None:
        explicit["run"] = {"device": device}
    return cls.load(name, config_file, overrides=(tables_from_params(params), parse_sets(sets), explicit))


def run_method(name: str, *, out: str | Path, dataset: str | None = None, seed: int = 0,
               config_file: str | Path | None = None, params: Mapping[str, Any] | None = None, sets: Sequence[str] = (),
               data_dir: str | Path | None = None, device: str | None = None, overwrite: bool = False,
               progress: Any = True) -> Any:
    """Run the method ``name`` and write its release bundle to ``out``; returns its
    :class:`~.scaffold.RunResult` (or None when ``[run] stop_after`` stopped it early).

    The whole configuration is loaded and checked (device included) before any work starts.
    """
    config = load_method_config(name, config_file, params=params, sets=sets, dataset=dataset, data_dir=data_dir,
                                device=device)
    return method_module(name).run(config, out, seed=seed, progress=progress, overwrite=overwrite)

"""``run_audit``: train (or load) released models, account for them, attack them, and write the report.

An audit is described by an :class:`AuditConfig` (TOML, or :func:`default_config` — the embedded default
on scikit-learn's digits). Each model entry either runs a method (``method = "fredy"``, with a method
config file and/or inline overrides) or audits an existing release directory (``release = "runs/x"``).

Stages are resumable: a run directory keeps each model's release and each attack's result; an interrupted
audit started again with the same configuration skips what is complete (results are keyed by a hash of the
settings they came from, so a changed setting recomputes).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from dpaudit import __version__
from dpaudit._io import read_json, write_json
from dpaudit.errors import DPAuditError, DataError, ParameterError, _fmt, check_choice, check_float, check_int, check_probability
from dpaudit.report.flags import compute_flags
from dpaudit.report.render import write_report
from dpaudit.report.schema import AttackSummary, AuditReport, ModelAudit

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["AttackSpec", "ModelRun", "AuditConfig", "default_config", "load_audit_config", "check_audit_config",
           "check_device", "run_audit"]

ATTACK_KINDS = ("threshold", "shadow", "lira")
#: Supported ranges of an audit's settings (beyond them a run would take days or exhaust memory).
MAX_SEED = 2**32 - 1
MAX_BOOTSTRAP = 100_000
MAX_SHADOWS = 10_000


@dataclass(frozen=True)
class AttackSpec:
    """One attack to run on every model: ``kind`` in threshold|shadow|lira; ``shadows`` shadow models;
    ``classifier`` the shadow attack's classifier; ``threshold_kind`` loss|confidence."""

    kind: str
    shadows: int = 8
    classifier: str = "catboost"
    threshold_kind: str = "loss"

    def __post_init__(self) -> None:
        from dpaudit.attacks.shadow import CLASSIFIERS

        check_choice(self.kind, "kind", "AttackSpec", ATTACK_KINDS)
        object.__setattr__(self, "shadows", check_int(self.shadows, "shadows", "AttackSpec", low=2, high=MAX_SHADOWS))
        check_choice(self.classifier, "classifier", "AttackSpec", CLASSIFIERS)
        check_choice(self.threshold_kind, "threshold_kind", "AttackSpec", ("loss", "confidence"))

    @property
    def label(self) -> str:
        return f"threshold-{self.threshold_kind}" if self.kind == "threshold" else self.kind


@dataclass(frozen=True)
class ModelRun:
    """One model of the audit.

    Either ``method`` (a method name, run with ``config_file`` and the inline ``params`` overrides) or
    ``release`` (an existing release directory). ``extra`` names further releases the method run writes
    (FREDY's ``"nonprivate"`` baseline) that are audited too, under ``extra_names``. ``noise`` and
    ``noise_label`` place the model on the privacy-utility curve.
    """

    name: str
    method: str | None = None
    release: str | None = None
    config_file: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    extra: tuple[str, ...] = ()
    extra_names: tuple[str, ...] = ()
    noise: float | None = None
    noise_label: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip() or "/" in self.name or self.name in (".", ".."):
            raise ParameterError(f"The 'name' parameter of ModelRun must be a non-empty string without '/'. Got {_fmt(self.name)} instead.")
        owner = f"model {self.name!r}"
        for key in ("method", "release", "config_file"):
            v = getattr(self, key)
            if v is not None and (not isinstance(v, str) or not v.strip()):
                raise ParameterError(f"The '{key}' parameter of {owner} must be a non-empty string. Got {_fmt(v)} instead.")
        if (self.method is None) == (self.release is None):
            raise ParameterError(f"Model {self.name!r} needs exactly one of 'method' or 'release'. Got method={self.method!r}, release={self.release!r} instead.")
        if not isinstance(self.params, Mapping):
            raise ParameterError(f"The 'params' parameter of {owner} must be a table (e.g. params = {{ gamma = 0.1 }}). Got {_fmt(self.params)} instead.")
        if self.params and self.release is not None:
            raise ParameterError(f"The 'params' parameter of {owner} applies to 'method' models only. Got a release model instead.")
        for key in ("extra", "extra_names"):
            v = getattr(self, key)
            if isinstance(v, str) or not isinstance(v, (list, tuple)) or not all(isinstance(e, str) and e.strip() and "/" not in e for e in v):
                raise ParameterError(f"The '{key}' parameter of {owner} must be a list of names. Got {_fmt(v)} instead.")
        if not isinstance(self.noise_label, str):
            raise ParameterError(f"The 'noise_label' parameter of {owner} must be a string. Got {_fmt(self.noise_label)} instead.")
        object.__setattr__(self, "extra", tuple(self.extra))
        object.__setattr__(self, "extra_names", tuple(self.extra_names) or tuple(f"{self.name}-{e}" for e in self.extra))
        if len(self.extra_names) != len(self.extra):
            raise ParameterError(f"Model {self.name!r}: 'extra_names' must name each of 'extra' ({len(self.extra)}). Got {len(self.extra_names)} instead.")
        if self.noise is not None:
            object.__setattr__(self, "noise", check_float(self.noise, "noise", owner, low=0.0, low_open=True))


@dataclass(frozen=True)
class AuditConfig:
    title: str
    dataset: str
    models: tuple[ModelRun, ...]
    attacks: tuple[AttackSpec, ...]
    seed: int = 0
    confidence: float = 0.95
    delta: float = 1e-5
    n_bootstrap: int = 200
    data_dir: str | None = None

    def __post_init__(self) -> None:
        from dpaudit.training.data import DATASETS

        owner = "AuditConfig"
        for key, cls in (("models", ModelRun), ("attacks", AttackSpec)):
            v = getattr(self, key)
            if isinstance(v, (str, bytes, Mapping)) or not isinstance(v, Sequence) or not all(isinstance(x, cls) for x in v):
                raise ParameterError(f"The '{key}' parameter of {owner} must be a list of {cls.__name__}. Got {_fmt(v)} instead.")
            object.__setattr__(self, key, tuple(v))
        if not self.models:
            raise ParameterError("An audit config needs at least one model ([[models]]). Got none instead.")
        if not self.attacks:
            raise ParameterError("An audit config needs at least one attack ([[attacks]]). Got none instead.")
        if not isinstance(self.title, str):
            raise ParameterError(f"The 'title' parameter of {owner} must be a string. Got {_fmt(self.title)} instead.")
        check_choice(self.dataset, "dataset", owner, DATASETS)
        if self.data_dir is not None and (not isinstance(self.data_dir, str) or not self.data_dir.strip()):
            raise ParameterError(f"The 'data_dir' parameter of {owner} must be a directory path. Got {_fmt(self.data_dir)} instead.")
        names = [n for m in self.models for n in (m.name, *m.extra_names)]
        if len(set(names)) != len(names):
            raise ParameterError(f"Model names of an audit must be distinct. Got {names} instead.")
        object.__setattr__(self, "seed", check_int(self.seed, "seed", owner, low=0, high=MAX_SEED))
        object.__setattr__(self, "confidence", check_probability(self.confidence, "confidence", owner))
        object.__setattr__(self, "delta", check_float(self.delta, "delta", owner, low=0.0, high=1.0, high_open=True))
        object.__setattr__(self, "n_bootstrap", check_int(self.n_bootstrap, "n_bootstrap", owner, low=0, high=MAX_BOOTSTRAP))

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(dataclasses.asdict(self), default=str))


def default_config() -> AuditConfig:
    """The embedded default: FREDY-style students on digits at three noise levels, plus the non-private
    baseline, attacked by the loss-threshold, shadow-model (CatBoost, 16 shadows) and LiRA (16 shadows) attacks."""
    gammas = (0.05, 0.3, 2.0)
    models = []
    for i, g in enumerate(gammas):
        models.append(ModelRun(
            name=f"fredy-gamma{g:g}", method="fredy", params={"gamma": g, "nonprivate_baseline": i == 0},
            extra=("nonprivate",) if i == 0 else (), extra_names=("nonprivate-baseline",) if i == 0 else (),
            noise=g, noise_label="Laplace parameter gamma (noise Lap(1/gamma) per vote count)",
        ))
    return AuditConfig(
        title="dpaudit default audit: FREDY-style knowledge transfer on scikit-learn digits",
        dataset="digits", models=tuple(models),
        attacks=(AttackSpec("threshold", threshold_kind="loss"), AttackSpec("shadow", shadows=16),
                 AttackSpec("lira", shadows=16)),
        seed=0,
    )


_TOP_KEYS = {"title", "dataset", "seed", "confidence", "delta", "n_bootstrap", "data_dir", "models", "attacks"}


def load_audit_config(path: str | Path) -> AuditConfig:
    """Read an audit TOML file (see ``configs/audit_*.toml``). Paths inside are relative to the file.

    Every key is checked here (types and ranges) and each error names the file and the entry; the methods'
    own parameters are checked by :func:`check_audit_config` before anything runs.
    """
    from dpaudit._io import load_toml_file

    p = Path(path)
    data = load_toml_file(p, "the audit config file")
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise ParameterError(f"Unknown key(s) {unknown} in {p}; allowed: {sorted(_TOP_KEYS)}.")
    base = p.parent

    def rel(x: Any) -> Any:
        if not isinstance(x, str) or not x.strip():
            return x  # ModelRun names the wrong type
        q = Path(x)
        return str(q if q.is_absolute() else (base / q))

    def tables(key: str, default: Any) -> list:
        v = data.get(key, default)
        if not isinstance(v, list) or not all(isinstance(x, dict) for x in v):
            raise ParameterError(f"The '{key}' key of {p} must be a list of tables ([[{key}]]). Got {_fmt(v)} instead.")
        return v

    models = []
    mfields = {f.name for f in dataclasses.fields(ModelRun)}
    for i, m in enumerate(tables("models", [])):
        bad = sorted(set(m) - mfields)
        if bad:
            raise ParameterError(f"Unknown key(s) {bad} in [[models]] entry #{i + 1} of {p}; allowed: {sorted(mfields)}.")
        m = dict(m)
        for key in ("config_file", "release"):
            if key in m:
                m[key] = rel(m[key])
        if "name" not in m:
            raise ParameterError(f"The 'name' key of [[models]] entry #{i + 1} of {p} is required. Got nothing instead.")
        models.append(ModelRun(**m))
    afields = {f.name for f in dataclasses.fields(AttackSpec)}
    attacks = []
    for i, a in enumerate(tables("attacks", [{"kind": "threshold"}])):
        bad = sorted(set(a) - afields)
        if bad:
            raise ParameterError(f"Unknown key(s) {bad} in [[attacks]] entry #{i + 1} of {p}; allowed: {sorted(afields)}.")
        if "kind" not in a:
            raise ParameterError(f"The 'kind' key of [[attacks]] entry #{i + 1} of {p} is required. Got nothing instead.")
        attacks.append(AttackSpec(**a))
    data_dir = data.get("data_dir")
    return AuditConfig(
        title=data.get("title", f"dpaudit audit: {p.stem}"), dataset=data.get("dataset", "digits"),
        models=tuple(models), attacks=tuple(attacks), seed=data.get("seed", 0),
        confidence=data.get("confidence", 0.95), delta=data.get("delta", 1e-5),
        n_bootstrap=data.get("n_bootstrap", 200), data_dir=rel(data_dir) if data_dir is not None else None,
    )


def check_device(device: str | None, option: str = "--device") -> str | None:
    """Check that ``device`` names a torch device this machine has (``None``: the default, always fine)."""
    if device is None:
        return None
    import torch

    try:
        dev = torch.device(device) if isinstance(device, str) else None
    except (RuntimeError, TypeError, ValueError):
        dev = None
    if dev is None:
        raise ParameterError(f"The '{option}' option must name a torch device such as 'cpu', 'cuda' or 'cuda:1'. Got {_fmt(device)} instead.")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ParameterError(f"The '{option}' option asks for {device!r}, but this machine has no usable CUDA device "
                                 "(or this torch build has no CUDA support); use 'cpu'.")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ParameterError(f"The '{option}' option asks for {device!r}, but this machine has "
                                 f"{torch.cuda.device_count()} CUDA device(s).")
    elif dev.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise ParameterError(f"The '{option}' option asks for 'mps', which this machine does not have; use 'cpu'.")
    elif dev.type != "cpu":
        raise ParameterError(f"The '{option}' option must be 'cpu', 'cuda[:N]' or 'mps'. Got {device!r} instead.")
    return device


def _check_method_run(run: ModelRun, cfg: AuditConfig) -> None:
    """Build the method config of ``run`` (no data, no training) so that a bad method name or parameter is
    reported before the first model trains."""
    from dpaudit._io import load_toml_file
    from dpaudit.training.methods import FEDERATED_METHODS, METHODS, method_names

    check_choice(run.method, "method", f"model {run.name!r}", method_names())
    if run.config_file is not None:
        load_toml_file(run.config_file, f"the config file of model {run.name!r}")  # stat first: no FIFO blocks
    params = dict(run.params)
    if run.method in METHODS:
        from dpaudit.training.methods import get_method
        from dpaudit.training.methods.common import load_config

        cls, _ = get_method(run.method)
        load_config(cls, run.config_file, **params)
        return
    bad = [k for k, v in params.items() if not isinstance(v, Mapping)]
    if bad:
        raise ParameterError(f"The 'params' of federated method {run.method!r} must be tables of overrides "
                             f"(e.g. {{method = {{rounds = 20}}}}). Got non-table key(s) {bad} instead.")
    import importlib

    from dpaudit.training.methods.fl_common import DataSettings, merge_settings, run_options
    from dpaudit.training.models import MODELS

    module_name, _fn, fixed = FEDERATED_METHODS[run.method]
    module = importlib.import_module(module_name)
    defaults = {"privatekt": "PRIVATEKT_DEFAULTS", "baselines": "LDP_UPDATE_DEFAULTS", "proxyfl": "PROXYFL_DEFAULTS"}
    key = "CENTRAIN_DEFAULTS" if run.method == "centrain" else defaults[module_name.rsplit(".", 1)[1]]
    s = merge_settings(getattr(module, key), run.config_file, params)
    DataSettings(**s["data"])
    run_options(s["run"], default_checkpoint_every=1)
    model_name = s["model"].get("name", "mlp")
    check_choice(model_name, "name", f"the [model] table of model {run.name!r}", MODELS)
    m = s["method"]
    if run.method == "centrain":
        unknown = set(m) - {"epochs", "batch_size", "lr"}
        if unknown:
            raise ParameterError(f"Unknown CenTrain parameter(s) {sorted(unknown)}; allowed: ['batch_size', 'epochs', 'lr'].")
    elif "variant" in fixed:
        variant = {**m, **module.PROXYFL_VARIANTS[fixed["variant"]]}
        variant.update({"private_model": m.get("private_model") or model_name, "proxy_model": model_name})
        module.ProxyFLConfig.from_dict(variant)
    elif "mode" in fixed:
        module.LdpUpdateConfig.from_dict({**m, "mode": fixed["mode"]})
    else:
        module.PrivateKTConfig.from_dict(m)


def check_audit_config(config: AuditConfig, *, device: str | None = None) -> None:
    """Check everything an audit will need before any of it runs: ``device``, the data directory, every
    model's method and parameters (by building its config, without data or training), every release path
    and every attack's settings. Errors name the model and the parameter."""
    from dpaudit.training.data import DATASETS  # noqa: F401 - the data layer must import

    if not isinstance(config, AuditConfig):
        raise ParameterError(f"The 'config' parameter of run_audit must be an AuditConfig. Got {type(config).__name__} instead.")
    check_device(device)
    if config.data_dir is not None and not Path(config.data_dir).is_dir():
        raise DataError(f"The data_dir {config.data_dir} of the audit config is not a directory.")
    for run in config.models:
        if run.method is None:
            if not Path(run.release).is_dir():  # type: ignore[arg-type]
                raise DataError(f"Model {run.name!r}: the release directory {run.release} does not exist.")
            continue
        try:
            _check_method_run(run, config)
        except DPAuditError as exc:
            text = str(exc)
            raise type(exc)(text if run.name in text else f"Model {run.name!r}: {text}") from None
        except (TypeError, ValueError, KeyError, AttributeError) as exc:  # a wrong type deep in a method config
            raise ParameterError(f"Model {run.name!r}: invalid parameters for method {run.method!r} ({str(exc)[:200]}).") from None


# --------------------------------------------------------------------------------------------------
# stages
# --------------------------------------------------------------------------------------------------


def _hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _say(progress: bool, msg: str) -> None:
    if progress:
        print(f"[dpaudit audit] {msg}", file=sys.stderr, flush=True)


def _train(run: ModelRun, cfg: AuditConfig, out: Path, device: str | None, progress: bool) -> dict[str, Path]:
    """Run the model's method (resuming from its own checkpoints) and return its release paths by name."""
    from dpaudit.training.methods import run_method

    stage = out / "models" / run.name
    key = _hash({"method": run.method, "params": dict(run.params), "config_file": run.config_file,
                 "config_text": Path(run.config_file).read_text() if run.config_file else None,
                 "dataset": cfg.dataset, "seed": cfg.seed, "data_dir": cfg.data_dir})
    done = stage / "stage.json"
    if done.is_file():
        info = read_json(done)
        if info.get("key") == key and all(Path(v).is_dir() for v in info["releases"].values()):
            _say(progress, f"{run.name}: release found, skipping training")
            return {k: Path(v) for k, v in info["releases"].items()}
    _say(progress, f"{run.name}: training ({run.method})")
    result = run_method(run.method, dataset=cfg.dataset, out=stage / "release", seed=cfg.seed,  # type: ignore[arg-type]
                        config_file=run.config_file, params=run.params, data_dir=cfg.data_dir, device=device,
                        overwrite=True, progress=progress)
    releases = {run.name: Path(result.release)}
    for extra, name in zip(run.extra, run.extra_names):
        if extra not in result.extra_releases:
            raise DataError(f"Model {run.name!r}: the {run.method} run wrote no extra release {extra!r} "
                            f"(it wrote {sorted(result.extra_releases)}).")
        releases[name] = Path(result.extra_releases[extra])
    write_json(done, {"key": key, "releases": {k: str(v) for k, v in releases.items()}})
    return releases


def _summary(report: Any, label: str, delta: float) -> AttackSummary:
    """Adapt an :class:`dpaudit.attacks.AttackReport` to the report's :class:`AttackSummary`."""
    res, blind = report.attack, report.blind
    m = res.metrics
    ci = m.intervals.get("auc")
    return AttackSummary(
        attack=label, auc=float(m.auc), tpr_at_fpr={f"{f:g}": float(t) for f, t in m.tpr_at_fpr},
        accuracy=float(m.accuracy), precision=float(m.precision), recall=float(m.recall), f1=float(m.f1),
        epsilon_lower=float(res.bound.epsilon), confidence=float(res.bound.confidence), delta=float(delta),
        blind_auc=float(blind.metrics.auc) if blind else float("nan"),
        blind_epsilon_lower=float(blind.bound.epsilon) if blind else 0.0,
        auc_ci=(float(ci.low), float(ci.high)) if ci is not None else None,
        roc_fpr=tuple(float(x) for x in _thin(res.roc.fpr)), roc_tpr=tuple(float(x) for x in _thin(res.roc.tpr)),
        num_members=int(m.num_members), num_nonmembers=int(m.num_nonmembers),
        details={"description": res.description, "threshold_rule": m.threshold_rule,
                 "bound_selection": res.bound.selection, "notes": list(report.notes)},
    )


def _thin(a: np.ndarray, n: int = 400) -> np.ndarray:
    a = np.asarray(a, dtype=float)
    if a.size <= n:
        return a
    idx = np.unique(np.linspace(0, a.size - 1, n).round().astype(int))
    return a[idx]


def _attack(release: Any, spec: AttackSpec, cfg: AuditConfig, cache: Path, progress: bool) -> AttackSummary:

    key = _hash({"attack": dataclasses.asdict(spec), "seed": cfg.seed, "confidence": cfg.confidence,
                 "delta": cfg.delta, "n_bootstrap": cfg.n_bootstrap,
                 "release": release.meta.get("created_at", release.meta.get("seed")), "path": str(release.path)})
    path = cache / f"{spec.label}.json"
    if path.is_file():
        data = read_json(path)
        if data.get("key") == key:
            _say(progress, f"  {spec.label}: cached")
            return AttackSummary.from_dict(data["summary"])
    _say(progress, f"  {spec.label}: attacking")
    from dpaudit.audit.attack_release import attack_release

    report = attack_release(release, attack=spec.kind, num_shadows=spec.shadows, classifier=spec.classifier,
                            threshold_kind=spec.threshold_kind, confidence=cfg.confidence, delta=cfg.delta,
                            n_bootstrap=cfg.n_bootstrap, seed=cfg.seed)
    summary = _summary(report, spec.label, cfg.delta)
    write_json(path, {"key": key, "summary": summary.to_dict()})
    return summary


def _model_audit(name: str, run: ModelRun | None, release: Any, attacks: Sequence[AttackSummary], is_primary: bool) -> ModelAudit:
    meta = release.meta
    statement = meta.get("statement")
    theoretical = None
    if statement is not None:
        eps = statement.get("epsilon")
        theoretical = None if eps in ("inf", float("inf")) else statement
    ledger = meta.get("ledger") or {}
    per_party = _per_party(ledger)
    utility = dict(meta.get("utility", {}))
    return ModelAudit(
        name=name, method=str(meta.get("method", run.method if run else "release")), release=str(release.path),
        utility={k: v for k, v in utility.items() if isinstance(v, (int, float))}, theoretical=theoretical,
        attacks=tuple(attacks), noise=run.noise if (run is not None and is_primary) else None,
        noise_label=run.noise_label if run is not None else "", claim=meta.get("claim"),
        per_party_epsilon=per_party, assumptions=tuple(meta.get("assumptions", ())),
        num_train=int(len(release.membership["members"])), params=dict(meta.get("params", {})),
        release_flags=tuple((f["code"], f["message"]) for f in meta.get("flags", ())),
    )


def _per_party(ledger: Mapping[str, Any]) -> dict[str, float]:
    """Per-party epsilon from a stored ledger (recomputed by the accountant, never trusted from text)."""
    if not ledger or not ledger.get("parties"):
        return {}
    try:
        from dpaudit.accountants.ledger import PrivacyLedger

        led = PrivacyLedger.from_dict(ledger)
        return {p: float(s.epsilon) for p, s in led.statements().items()}
    except Exception as exc:  # a stored ledger we cannot re-account is reported, not hidden
        _say(True, f"warning: could not re-account the stored ledger ({exc})")
        return {}


def run_audit(config: AuditConfig, out: str | Path, *, device: str | None = None, progress: bool = True) -> AuditReport:
    """Run every stage of ``config`` into the run directory ``out`` and write the report there."""
    from dpaudit.training.release import load_release

    from dpaudit._io import exclusive_lock

    check_audit_config(config, device=device)  # the whole config, before anything trains
    out = Path(out)
    with exclusive_lock(out, "dpaudit audit"):  # a second audit into the same --out stops here, naming this one
        return _run_audit(config, out, device, progress)


def _run_audit(config: AuditConfig, out: Path, device: str | None, progress: bool) -> AuditReport:
    from dpaudit.training.release import load_release

    t0 = time.perf_counter()
    audits: list[ModelAudit] = []
    for run in config.models:
        if run.method is not None:
            releases = _train(run, config, out, device, progress)
        else:
            releases = {run.name: Path(run.release)}  # type: ignore[arg-type]
        for i, (name, path) in enumerate(releases.items()):
            # releases this audit trained read the audit's own data_dir; for others, the config's data_dir
            # (when set) overrides what their release.json names
            release = (load_release(path, trust_data_dir=True) if run.method is not None
                       else load_release(path, data_dir=config.data_dir))
            _say(progress, f"{name}: attacks")
            summaries = [_attack(release, spec, config, out / "models" / name / "attacks", progress) for spec in config.attacks]
            audits.append(_model_audit(name, run, release, summaries, is_primary=(i == 0)))
    report = AuditReport(
        title=config.title, seed=config.seed, dataset={"name": config.dataset, "data_dir": config.data_dir},
        models=tuple(audits), flags=tuple(compute_flags(audits)), config=config.to_dict(),
        created_by=f"dpaudit {__version__}", elapsed_seconds=round(time.perf_counter() - t0, 1),
    )
    write_report(report, out)
    _say(progress, f"report written to {out}/report.html (and report.md, report.json)")
    return report

"""``run_audit``: train (or load) released models, account for them, attack them, and write the report.

An audit is described by an :class:`AuditConfig` (TOML, or :func:`default_config` — the embedded default
on scikit-learn's digits). Each model entry either runs a method (``method = "fredy"``, with a method
config file and/or inline overrides) or audits an existing release directory (``release = "runs/x"``).

Stages are resumable: a run directory keeps each model's release and each attack's result; an interrupted
audit started again with the same configuration skips what is complete. Every stage is keyed by a hash of
everything its result depends on (:func:`release_digest` for the content of a release):

- training: method, inline params, the method config file's text, data set, seed, data_dir, dpaudit version
  (and the stored release must still have the content it was written with);
- each attack: the attack's settings, the audit's seed / confidence / delta / n_bootstrap, the content of the
  release it attacks (every file of the bundle: model weights, release.json, membership, votes), the number of
  split seeds and the dpaudit version.

So a changed model parameter retrains that model and re-attacks it, a changed attack setting re-runs that
attack only, and an edited release re-runs its attacks; everything else stays cached.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from dpaudit._version import __version__
from dpaudit._io import make_output_dir, read_input_text, read_json, write_json
from dpaudit.errors import (DPAuditError, DataError, OutputError, ParameterError, format_value, check_choice, check_float, check_int,
                            check_name, check_probability)
from dpaudit.serial import from_dict, to_dict
from dpaudit.executors import Executor, LocalExecutor, Unit
from dpaudit.progress import QUIET, Reporter, as_reporter
from dpaudit.threads import current as current_threads
from dpaudit.report.flags import compute_flags, method_audit_flags
from dpaudit.report.render import write_report
from dpaudit.report.schema import AttackSummary, AuditReport, ModelAudit, headline_statement
from dpaudit.report.verdict import compute_verdicts

__all__ = ["AttackSpec", "ModelRun", "AuditConfig", "default_config", "load_audit_config", "check_audit_config",
           "run_audit", "release_digest"]

ATTACK_KINDS = ("threshold", "shadow", "lira")
#: Supported ranges of an audit's settings (beyond them a run would take days or exhaust memory).
from dpaudit.auditing.attack_release import MAX_BOOTSTRAP, MAX_SEED, MAX_SHADOWS  # noqa: E402 - one set of limits


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
    ``noise_label`` place the model on the privacy-utility curve. ``factory`` / ``train_fn`` (release models only):
    your copy of the code the bundle names (``FILE.py:NAME``; a relative file is relative to the config file), run
    only when its sha256 matches the bundle's record -- a bundle's own code never runs otherwise (see
    :class:`~dpaudit.training.usercode.BundleCode`; ``dpaudit audit --trust-bundle-code`` opts in to it).
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
    factory: str | None = None
    train_fn: str | None = None

    def __post_init__(self) -> None:
        from dpaudit.training.usercode import parse_import_path

        check_name(self.name, "name", "ModelRun")     # it names the model's folder under the run directory
        owner = f"model {self.name!r}"
        for key in ("method", "release", "config_file"):
            v = getattr(self, key)
            if v is not None and (not isinstance(v, str) or not v.strip()):
                raise ParameterError(f"The '{key}' parameter of {owner} must be a non-empty string. Got {format_value(v)} instead.")
        if (self.method is None) == (self.release is None):
            raise ParameterError(f"Model {self.name!r} needs exactly one of 'method' or 'release'. Got method={self.method!r}, release={self.release!r} instead.")
        if not isinstance(self.params, Mapping):
            raise ParameterError(f"The 'params' parameter of {owner} must be a table (e.g. params = {{ gamma = 0.1 }}). Got {format_value(self.params)} instead.")
        if self.params and self.release is not None:
            raise ParameterError(f"The 'params' parameter of {owner} applies to 'method' models only. Got a release model instead.")
        for key in ("factory", "train_fn"):
            v = getattr(self, key)
            if v is not None:
                if self.release is None:
                    raise ParameterError(f"The '{key}' parameter of {owner} applies to 'release' models only. Got a method model instead.")
                try:
                    parse_import_path(v, key)
                except ParameterError as exc:
                    raise ParameterError(f"Model {self.name!r}: {exc}") from None
        for key in ("extra", "extra_names"):
            v = getattr(self, key)
            if isinstance(v, str) or not isinstance(v, (list, tuple)) or not all(isinstance(e, str) and e.strip() and "/" not in e for e in v):
                raise ParameterError(f"The '{key}' parameter of {owner} must be a list of names. Got {format_value(v)} instead.")
        if not isinstance(self.noise_label, str):
            raise ParameterError(f"The 'noise_label' parameter of {owner} must be a string. Got {format_value(self.noise_label)} instead.")
        object.__setattr__(self, "extra", tuple(self.extra))
        object.__setattr__(self, "extra_names", tuple(self.extra_names) or tuple(f"{self.name}-{e}" for e in self.extra))
        for e in self.extra_names:
            check_name(e, "extra_names", owner)
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
    canary_audits: tuple = ()  # CanaryAuditSpec entries: certified audits of DP-SGD recipes ([[canary_audits]])
    method_audits: tuple = ()  # MethodAuditSpec entries: certified audits of methods' whole runs ([[method_audits]])

    def __post_init__(self) -> None:
        from dpaudit.training.data import DATASETS

        owner = "AuditConfig"
        for key, cls in (("models", ModelRun), ("attacks", AttackSpec)):
            v = getattr(self, key)
            if isinstance(v, (str, bytes, Mapping)) or not isinstance(v, Sequence) or not all(isinstance(x, cls) for x in v):
                raise ParameterError(f"The '{key}' parameter of {owner} must be a list of {cls.__name__}. Got {format_value(v)} instead.")
            object.__setattr__(self, key, tuple(v))
        cnames = [c.name for c in self.canary_audits]
        if len(set(cnames)) != len(cnames):
            raise ParameterError(f"Canary audit names of an audit must be distinct. Got {cnames} instead.")
        object.__setattr__(self, "canary_audits", tuple(self.canary_audits))
        mnames = [c.name for c in self.method_audits]
        if len(set(mnames)) != len(mnames):
            raise ParameterError(f"Method audit names of an audit must be distinct. Got {mnames} instead.")
        object.__setattr__(self, "method_audits", tuple(self.method_audits))
        if not self.models and not self.canary_audits and not self.method_audits:
            raise ParameterError("An audit config needs at least one model ([[models]]), canary audit "
                                 "([[canary_audits]]) or method audit ([[method_audits]]). Got none instead.")
        if self.models and not self.attacks:
            raise ParameterError("An audit config needs at least one attack ([[attacks]]). Got none instead.")
        if not isinstance(self.title, str):
            raise ParameterError(f"The 'title' parameter of {owner} must be a string. Got {format_value(self.title)} instead.")
        check_choice(self.dataset, "dataset", owner, DATASETS)
        if self.data_dir is not None and (not isinstance(self.data_dir, str) or not self.data_dir.strip()):
            raise ParameterError(f"The 'data_dir' parameter of {owner} must be a directory path. Got {format_value(self.data_dir)} instead.")
        names = [n for m in self.models for n in (m.name, *m.extra_names)]
        if len(set(names)) != len(names):
            raise ParameterError(f"Model names of an audit must be distinct. Got {names} instead.")
        object.__setattr__(self, "seed", check_int(self.seed, "seed", owner, low=0, high=MAX_SEED))
        object.__setattr__(self, "confidence", check_probability(self.confidence, "confidence", owner))
        object.__setattr__(self, "delta", check_float(self.delta, "delta", owner, low=0.0, high=1.0, high_open=True))
        object.__setattr__(self, "n_bootstrap", check_int(self.n_bootstrap, "n_bootstrap", owner, low=0, high=MAX_BOOTSTRAP))


def default_config() -> AuditConfig:
    """The embedded default: FREDY-style students on digits at three noise levels, plus the non-private
    baseline, attacked by the loss-threshold, shadow-model (CatBoost, 16 shadows) and LiRA (16 shadows) attacks;
    and two certified audits: a one-run white-box audit (1000 Dirac canaries) of DP-SGD at epsilon 8 on digits, and a
    multi-run audit of FREDY's whole training (400 trainings with or without a canary record) at gamma 0.3."""
    from dpaudit.auditing.canary_audit import CanaryAuditSpec
    from dpaudit.auditing.method_audit import MethodAuditSpec

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
        canary_audits=(CanaryAuditSpec("dpsgd-eps8-one-run-whitebox", audit="one-run", canary="dirac", canaries=1000,
                                       epsilon=8.0),),
        method_audits=(MethodAuditSpec("fredy", {"gamma": 0.3, "trials": 400}, name="fredy-gamma0.3-run"),),
    )


_TOP_KEYS = {"title", "dataset", "seed", "confidence", "delta", "n_bootstrap", "data_dir", "models", "attacks",
             "canary_audits", "method_audits"}


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
            raise ParameterError(f"The '{key}' key of {p} must be a list of tables ([[{key}]]). Got {format_value(v)} instead.")
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
        for key in ("factory", "train_fn"):   # file.py:name relative to the config file
            v = m.get(key)
            if isinstance(v, str) and v.count(":") == 1 and v.split(":")[0].endswith(".py"):
                m[key] = f"{rel(v.split(':')[0])}:{v.split(':')[1]}"
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
    from dpaudit.auditing.canary_audit import CanaryAuditSpec

    cfields = {f.name for f in dataclasses.fields(CanaryAuditSpec)}
    canary_audits = []
    for i, c in enumerate(tables("canary_audits", [])):
        bad = sorted(set(c) - cfields)
        if bad:
            raise ParameterError(f"Unknown key(s) {bad} in [[canary_audits]] entry #{i + 1} of {p}; allowed: {sorted(cfields)}.")
        try:
            canary_audits.append(CanaryAuditSpec(**c))
        except TypeError as exc:  # a required key missing
            raise ParameterError(f"[[canary_audits]] entry #{i + 1} of {p}: {exc}.") from None
    from dpaudit.auditing.method_audit import MethodAuditSpec

    method_audits = []
    for i, c in enumerate(tables("method_audits", [])):
        bad = sorted(set(c) - {"name", "method", "params"})
        if bad or "method" not in c:
            raise ParameterError(f"[[method_audits]] entry #{i + 1} of {p} takes the keys method (required), params and "
                                 f"name. Got {sorted(c)} instead.")
        method_audits.append(MethodAuditSpec(**c))
    return AuditConfig(
        title=data.get("title", f"dpaudit audit: {p.stem}"), dataset=data.get("dataset", "digits"),
        models=tuple(models), attacks=tuple(attacks), seed=data.get("seed", 0),
        confidence=data.get("confidence", 0.95), delta=data.get("delta", 1e-5),
        n_bootstrap=data.get("n_bootstrap", 200), data_dir=rel(data_dir) if data_dir is not None else None,
        canary_audits=tuple(canary_audits), method_audits=tuple(method_audits),
    )


def _load_release(path: str | Path, cfg: AuditConfig, code: Any = None) -> Any:
    """A release of the audit: the config's ``data_dir`` (the user's choice) overrides the one a release names; a
    release naming a data directory outside itself needs it (see :func:`~dpaudit.training.release.load_release`).
    ``code``: the :class:`~dpaudit.training.usercode.BundleCode` of its model entry."""
    from dpaudit.training.release import load_release

    return load_release(path, data_dir=cfg.data_dir, code=code)


def _code_of(run: ModelRun | None, trust: bool) -> Any:
    """What code a model entry's release may run: the entry's own ``factory`` / ``train_fn`` (the user's), or the
    bundle's with ``trust`` (``--trust-bundle-code``); a method's release of dpaudit runs dpaudit's code only."""
    from dpaudit.training.usercode import BundleCode

    if run is None or run.release is None:
        return BundleCode()
    return BundleCode(factory=run.factory, train_fn=run.train_fn, trust_bundle=bool(trust))


def check_audit_config(config: AuditConfig, *, device: str | None = None) -> None:
    """Check everything an audit will need before any of it runs: ``device``, the data directory, every
    model's method and parameters (by building its config, without data or training), every release path
    and every attack's settings. Errors name the model and the parameter."""
    from dpaudit.training.data import DATASETS  # noqa: F401 - the data layer must import

    if not isinstance(config, AuditConfig):
        raise ParameterError(f"The 'config' parameter of run_audit must be an AuditConfig. Got {type(config).__name__} instead.")
    from dpaudit.training.methods import load_method_config
    from dpaudit.training.methods.scaffold import check_device

    check_device(device, "--device")
    if config.data_dir is not None and not Path(config.data_dir).is_dir():
        raise DataError(f"The data_dir {config.data_dir} of the audit config is not a directory.")
    for run in config.models:
        if run.method is None:
            if not Path(run.release).is_dir():  # type: ignore[arg-type]
                raise DataError(f"Model {run.name!r}: the release directory {run.release} does not exist.")
            continue
        try:  # the method's typed Config, built as the run will build it: no data, no training
            mc = load_method_config(run.method, run.config_file, params=run.params, dataset=config.dataset,
                                    data_dir=config.data_dir, device=device)
            if mc.model:  # federated methods name their architecture in [model]; checked at training otherwise
                from dpaudit.training.models import MODELS

                check_choice(mc.model.get("name", "mlp"), "name", f"the [model] table of model {run.name!r}", MODELS)
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


def release_digest(path: str | Path) -> str:
    """SHA-256 of a release bundle's content (:func:`dpaudit.training.release.bundle_digest`): the name and bytes of
    every file at its top level, in name order; sub-directories are not hashed, a symbolic link is hashed by its
    target path, never read through."""
    from dpaudit.training.release import bundle_digest

    return bundle_digest(path)


def _digests(releases: Mapping[str, Path]) -> dict[str, str]:
    return {k: release_digest(v) for k, v in releases.items()}


def _train(run: ModelRun, cfg: AuditConfig, out: Path, device: str | None, rep: Reporter) -> dict[str, Path]:
    """Run the model's method (resuming from its own checkpoints) and return its release paths by name."""
    from dpaudit.training.methods import run_method
    from dpaudit.training.methods.common import shared_stages

    stage = out / "models" / run.name
    key = _hash({"method": run.method, "params": dict(run.params), "config_file": run.config_file,
                 "config_text": read_input_text(run.config_file, "the method config file") if run.config_file else None,
                 "dataset": cfg.dataset, "seed": cfg.seed, "data_dir": cfg.data_dir, "version": __version__})
    done = stage / "stage.json"
    if done.is_file():
        info = read_json(done)
        found = {k: Path(v) for k, v in info.get("releases", {}).items()}
        if (info.get("key") == key and found and all(p.is_dir() for p in found.values())
                and info.get("digests") == _digests(found)):
            rep.log(f"{run.name}: release found (same settings, same content), skipping training")
            return found
    rep.log(f"{run.name}: training ({run.method})")
    with shared_stages(out / "shared_stages"):  # teachers trained once across a sweep of noise levels / queries
        result = run_method(run.method, dataset=cfg.dataset, out=stage / "release", seed=cfg.seed,  # type: ignore[arg-type]
                            config_file=run.config_file, params=run.params, data_dir=cfg.data_dir, device=device,
                            overwrite=True, progress=rep.enabled)
    releases = {run.name: Path(result.release)}
    for extra, name in zip(run.extra, run.extra_names):
        if extra not in result.extra_releases:
            raise DataError(f"Model {run.name!r}: the {run.method} run wrote no extra release {extra!r} "
                            f"(it wrote {sorted(result.extra_releases)}).")
        releases[name] = Path(result.extra_releases[extra])
    write_json(done, {"key": key, "releases": {k: str(v) for k, v in releases.items()}, "digests": _digests(releases)})
    return releases


def _summary(report: Any, label: str, delta: float) -> AttackSummary:
    """Adapt an :class:`dpaudit.attacks.AttackReport` to the report's :class:`AttackSummary`."""
    res, blind = report.attack, report.blind
    m = res.metrics
    ci = m.intervals.get("auc")
    b = res.bound
    band = res.roc_band
    return AttackSummary(
        attack=label, auc=float(m.auc), tpr_at_fpr={f"{f:g}": float(t) for f, t in m.tpr_at_fpr.items()},
        accuracy=float(m.accuracy), precision=float(m.precision), recall=float(m.recall), f1=float(m.f1),
        epsilon_lower=float(res.bound.epsilon), confidence=float(res.bound.confidence), delta=float(delta),
        blind_auc=float(blind.metrics.auc) if blind else float("nan"),
        blind_epsilon_lower=float(blind.bound.epsilon) if blind else 0.0,
        auc_ci=(float(ci.low), float(ci.high)) if ci is not None else None,
        roc_fpr=tuple(float(x) for x in _thin(res.roc.fpr)), roc_tpr=tuple(float(x) for x in _thin(res.roc.tpr)),
        num_members=int(m.num_members), num_nonmembers=int(m.num_nonmembers),
        details={"description": res.description, "threshold_rule": m.threshold_rule,
                 "bound_selection": res.bound.selection, "notes": list(report.notes)},
        epsilon_kind=b.kind, epsilon_range=(float(b.split_low), float(b.split_high)), num_splits=int(b.num_splits),
        epsilon_credible=None if b.bayes_median is None else (float(b.bayes_median), float(b.bayes_low or 0.0),
                                                              float(b.bayes_high or 0.0)),
        tpr_ci={f"{f:g}": (float(m.intervals[f"tpr@{f:g}"].low), float(m.intervals[f"tpr@{f:g}"].high))
                for f in m.tpr_at_fpr if f"tpr@{f:g}" in m.intervals},
        roc_band=None if band is None else {"fpr": tuple(float(x) for x in band.fpr),
                                            "low": tuple(float(x) for x in band.low),
                                            "high": tuple(float(x) for x in band.high)},
    )


def _thin(a: np.ndarray, n: int = 400) -> np.ndarray:
    a = np.asarray(a, dtype=float)
    if a.size <= n:
        return a
    idx = np.unique(np.linspace(0, a.size - 1, n).round().astype(int))
    return a[idx]


def _attack(release: Any, digest: str, spec: AttackSpec, cfg: AuditConfig, cache: Path, rep: Reporter) -> AttackSummary:
    from dpaudit.attacks.run import NUM_SPLITS

    key = _hash({"attack": dataclasses.asdict(spec), "seed": cfg.seed, "confidence": cfg.confidence,
                 "delta": cfg.delta, "n_bootstrap": cfg.n_bootstrap, "release": digest, "num_splits": NUM_SPLITS,
                 "version": __version__})
    path = cache / f"{spec.label}.json"
    if path.is_file():
        data = read_json(path)
        if data.get("key") == key:
            rep.log(f"  {spec.label}: cached (same settings, same release content)")
            return from_dict(AttackSummary, data["summary"], what=str(path))
    rep.log(f"  {spec.label}: attacking")
    from dpaudit.auditing.attack_release import attack_release

    report = attack_release(release, attack=spec.kind, num_shadows=spec.shadows, classifier=spec.classifier,
                            threshold_kind=spec.threshold_kind, confidence=cfg.confidence, delta=cfg.delta,
                            n_bootstrap=cfg.n_bootstrap, seed=cfg.seed, checkpoint_dir=cache / f"{spec.label}.units")
    summary = _summary(report, spec.label, cfg.delta)
    write_json(path, {"key": key, "summary": to_dict(summary)})
    return summary


def _canary_audit(spec: Any, cfg: AuditConfig, out: Path, device: str | None, rep: Reporter) -> dict:
    """Run (or reuse) one certified canary audit; its result dict (``kind: "certified"``)."""
    from dpaudit.auditing.canary_audit import run_canary_spec

    stage = out / "canary_audits" / spec.name
    key = _hash({"spec": to_dict(spec), "dataset": cfg.dataset, "seed": cfg.seed, "delta": cfg.delta,
                 "confidence": cfg.confidence, "data_dir": cfg.data_dir, "version": __version__})
    done = stage / "stage.json"
    if done.is_file() and (stage / "canary_audit.json").is_file() and read_json(done).get("key") == key:
        rep.log(f"canary audit {spec.name}: cached (same settings)")
        return read_json(stage / "canary_audit.json")
    rep.log(f"canary audit {spec.name}: {spec.audit}, {spec.canary} canaries")
    res = run_canary_spec(spec, dataset=cfg.dataset, seed=cfg.seed, delta=cfg.delta, confidence=cfg.confidence,
                          data_dir=cfg.data_dir, device=device, out=stage, progress=rep)
    write_json(done, {"key": key})
    return to_dict(res)


def _method_audit(spec: Any, cfg: AuditConfig, out: Path, rep: Reporter) -> dict:
    """Run (or reuse) one certified audit of a method's whole run; its result dict (``kind: "certified"``)."""
    from dpaudit.auditing.method_audit import audit_method_run, method_run_parameters

    # the audit config's data set (and data_dir) unless the entry names its own
    taken = method_run_parameters(spec.method)
    defaults = {"dataset": cfg.dataset, "data_dir": cfg.data_dir}
    params = {**{k: v for k, v in defaults.items() if k in taken and v is not None}, **spec.params}
    stage = out / "method_audits" / spec.name
    key = _hash({"spec": to_dict(spec), "params": params, "seed": cfg.seed, "confidence": cfg.confidence,
                 "version": __version__})
    done, result = stage / "stage.json", stage / "method_audit.json"
    if done.is_file() and result.is_file() and read_json(done).get("key") == key:
        rep.log(f"method audit {spec.name}: cached (same settings)")
        return read_json(result)
    rep.log(f"method audit {spec.name}: certified audit of {spec.method}'s whole run")
    res = audit_method_run(spec.method, seed=cfg.seed, confidence=cfg.confidence, progress=rep, **params)
    d = {"name": spec.name, **to_dict(res)}
    write_json(result, d)
    write_json(done, {"key": key})
    return d


def _attack_unit(path: Path, spec: AttackSpec, cfg: AuditConfig, cache: Path, rep: Reporter,
                 code: Any = None) -> AttackSummary:
    """One executor unit: one attack on one release (loaded and digested where the unit runs)."""
    return _attack(_load_release(path, cfg, code), release_digest(path), spec, cfg, cache, rep)


def _unit_key(*parts: Any) -> str:
    return "-".join(re.sub(r"[^A-Za-z0-9._=+-]", "_", str(p)) for p in parts)


def _model_audit(name: str, run: ModelRun | None, release: Any, attacks: Sequence[AttackSummary], is_primary: bool) -> ModelAudit:
    meta = release.meta
    statement = meta.get("statement")
    theoretical = None
    if statement is not None:
        # no privacy mechanism at all (headline method "none", epsilon infinite): the model is a non-private
        # reference; a mechanism whose guarantee is not established for the release (ProxyFL's distilling proxy)
        # keeps its statement, with epsilon infinite
        eps = statement.get("epsilon")
        no_mechanism = eps in ("inf", float("inf")) and headline_statement(statement).get("method") == "none"
        theoretical = None if no_mechanism else statement
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
        num_classes=int(getattr(getattr(release, "spec", None), "num_classes", 0) or 0),
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
        as_reporter(True, prefix="dpaudit audit").log(f"warning: could not re-account the stored ledger ({exc})")
        return {}


def run_audit(config: AuditConfig, out: str | Path, *, device: str | None = None,
              progress: bool | Reporter = True, executor: Executor | None = None,
              trust_bundle_code: bool = False) -> AuditReport:
    """Run every stage of ``config`` into the run directory ``out`` and write the report there.

    ``progress``: True (stderr), False (silent) or a :class:`~dpaudit.progress.Reporter`: one line per
    training stage, and one display over the attack units (a bar with ETA on a terminal).
    ``executor`` (default: this process) runs the independent units: the models (one unit each), then every
    attack on every release (one unit each; their shadow models are checkpointed in groups under the run
    directory). The report's numbers do not depend on it. ``trust_bundle_code``: let release models run the code
    their bundles name (see :class:`~dpaudit.training.usercode.BundleCode`; a model entry's own ``factory`` /
    ``train_fn`` is the other way)."""
    from dpaudit.training.release import load_release

    from dpaudit._io import exclusive_lock

    check_audit_config(config, device=device)  # the whole config, before anything trains
    rep = as_reporter(progress, prefix="dpaudit audit")
    out = Path(out)
    _outside_releases(config, out)
    make_output_dir(out, "audit")
    with exclusive_lock(out, "dpaudit audit"):  # a second audit into the same --out stops here, naming this one
        return _run_audit(config, out, device, rep, executor, bool(trust_bundle_code))


def _outside_releases(config: AuditConfig, out: Path) -> None:
    """The run directory may not lie inside a release the audit reads (nothing is written into a bundle)."""
    real = out.resolve()
    for run in config.models:
        if run.release is not None:
            b = Path(run.release).resolve()
            if real == b or b in real.parents:
                raise OutputError(f"--out {out} lies inside the release bundle {run.release} of model {run.name!r}; "
                                  "dpaudit never writes into a bundle. Choose a run directory outside it.")


def _run_audit(config: AuditConfig, out: Path, device: str | None, rep: Reporter, executor: Executor | None,
               trust: bool = False) -> AuditReport:
    t0 = time.perf_counter()
    ex = executor if executor is not None else LocalExecutor()
    inline = rep if ex.in_process else QUIET  # units elsewhere report through the executor's display only
    trained = [r for r in config.models if r.method is not None]
    done = ex.map([Unit(_unit_key("train", j, r.name), _train, (r, config, out, device, inline))
                   for j, r in enumerate(trained)], label="models to train", progress=rep)
    releases_of = {r.name: rel for r, rel in zip(trained, done)}
    targets = [(run, i, name, Path(path)) for run in config.models
               for i, (name, path) in enumerate(releases_of.get(run.name, {run.name: run.release}).items())]
    # the whole-run and canary audits do not read the releases: units of the same map as the attacks, first (the
    # longest units; a pool of workers then balances the attacks around them). Each takes its seed from the config.
    audit_units = ([Unit(_unit_key("method-audit", k, c.name), _method_audit, (c, config, out, inline))
                    for k, c in enumerate(config.method_audits)]
                   + [Unit(_unit_key("canary-audit", k, c.name), _canary_audit, (c, config, out, device, inline))
                      for k, c in enumerate(config.canary_audits)])
    n_audits = len(audit_units)
    label = f"{len(config.attacks)} attack(s) on each of {len(targets)} release(s)"
    if n_audits:
        label += f" and {n_audits} certified audit(s)"
    results = ex.map(audit_units + [Unit(_unit_key("attack", j, name, spec.label), _attack_unit,
                                         (path, spec, config, out / "models" / name / "attacks", inline,
                                          _code_of(run, trust)))
                                    for j, (run, _, name, path) in enumerate(targets) for spec in config.attacks],
                     label=label, progress=rep)
    method_audits = tuple(results[:len(config.method_audits)])
    certified = tuple(results[len(config.method_audits):n_audits])
    summaries = results[n_audits:]
    audits: list[ModelAudit] = []
    per = len(config.attacks)
    for j, (run, i, name, path) in enumerate(targets):
        audits.append(_model_audit(name, run, _load_release(path, config, _code_of(run, trust)), summaries[j * per:(j + 1) * per], is_primary=(i == 0)))
    report = AuditReport(
        title=config.title, seed=config.seed, dataset={"name": config.dataset, "data_dir": config.data_dir},
        models=tuple(audits), flags=tuple(compute_flags(audits) + method_audit_flags(method_audits)), config=to_dict(config),
        created_by=f"dpaudit {__version__}", elapsed_seconds=round(time.perf_counter() - t0, 1),
        verdicts=tuple(compute_verdicts(audits)), certified=certified, method_audits=method_audits,
        settings={"threads": to_dict(current_threads()), "executor": ex.describe()},
    )
    write_report(report, out)
    rep.log(f"report written to {out}/report.html (and report.md, report.json)")
    return report

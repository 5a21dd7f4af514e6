"""The Python entry points: the same library calls the command line makes (``dpaudit account | attack | audit |
check | release make``), each one function returning a typed, frozen result (write it as JSON with
:func:`dpaudit.serial.to_dict`). Re-exported at the top level: ``dpaudit.account(...)`` and so on.

Heavy layers (torch, the training layer) are imported inside the functions that need them, so ``import dpaudit``
and :func:`account` stay fast.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from dpaudit.errors import ParameterError, check_bool, check_path, format_value

if TYPE_CHECKING:  # pragma: no cover - for the signatures only
    from dpaudit.accountants.statement import AccountingResult
    from dpaudit.attacks.compare import AttackComparison
    from dpaudit.attacks.results import AttackReport
    from dpaudit.auditing.canary_audit import CanaryAuditResult
    from dpaudit.auditing.evaluate import ClaimsReport
    from dpaudit.auditing.runner import AuditConfig
    from dpaudit.auditing.trainer_audit import TrainerAuditResult
    from dpaudit.progress import Reporter
    from dpaudit.report.schema import AuditReport
    from dpaudit.specs import AttackSpec, Execution
    from dpaudit.training.release import Release

__all__ = ["account", "attack", "audit", "check", "audit_trainer", "make_release", "load_release", "DEFAULT_AUDIT_OUT",
           "specs_from_keywords"]

#: Where ``dpaudit audit`` (and :func:`audit`) write when no output folder is given.
DEFAULT_AUDIT_OUT = Path("runs/audit")


def account(mechanism: str, **params: Any) -> "AccountingResult":
    """The accounted (theoretical) epsilon of a mechanism, every valid route side by side (``dpaudit account``).

    ``mechanism`` is one of :data:`dpaudit.accountants.mechanisms.MECHANISM_KINDS` and ``params`` the keyword
    arguments of its function in :data:`~dpaudit.accountants.mechanisms.ACCOUNTING_FUNCTIONS`:
    ``"dpsgd"`` (:func:`~dpaudit.accountants.account_dpsgd`: ``dataset_size``, ``batch_size``, ``noise_multiplier``,
    ``epochs`` or ``steps``, ``delta``), ``"ldp"`` (:func:`~dpaudit.accountants.account_ldp`), ``"pate"``
    (:func:`~dpaudit.accountants.account_pate`: ``votes``, ``gamma``, ``delta``, ...), ``"gnmax"``
    (:func:`~dpaudit.accountants.account_gnmax`), ``"laplace"`` / ``"gaussian"`` (the plain mechanisms in closed
    form), ``"tuning"`` (:func:`~dpaudit.accountants.tuning.account_tuning`: the best of K DP-SGD runs).
    ``votes`` may be an array or the path of a ``.npy`` file, ``answered`` (gnmax) an array or a file
    (:func:`~dpaudit.accountants.gnmax.load_answered`); ``release_epsilon=True`` (gnmax, with ``seed``, ``order``,
    ``beta``, ``sigma_ss``) releases the data-dependent epsilon privately
    (:func:`~dpaudit.accountants.smooth_sensitivity.release_gnmax_epsilon`). The result's ``epsilon`` / ``delta`` are the
    headline's (``result.statement``), the smallest valid figure; ``result.statements`` holds every route.

    >>> import dpaudit
    >>> r = dpaudit.account("dpsgd", dataset_size=60000, batch_size=150, noise_multiplier=1.3, epochs=15, delta=1e-5)
    >>> f"{r.epsilon:.4f} ({r.statement.method})"
    '0.6401 (pld)'
    """
    from dpaudit.accountants.mechanisms import ACCOUNTING_FUNCTIONS, MECHANISM_KINDS, check_account_keywords

    fn = ACCOUNTING_FUNCTIONS.get(mechanism) if isinstance(mechanism, str) else None
    if fn is None:
        raise ParameterError(f"The 'mechanism' parameter of account must be one of {', '.join(MECHANISM_KINDS)}. "
                             f"Got {format_value(mechanism)} instead.")
    if "release_epsilon" in params:
        params["release_epsilon"] = check_bool(params["release_epsilon"], "release_epsilon", "account")
    if params.get("release_epsilon") and mechanism == "gnmax":
        from dpaudit.accountants.smooth_sensitivity import release_gnmax_epsilon

        check_account_keywords(mechanism, release_gnmax_epsilon, params, release_epsilon=True)
    else:
        check_account_keywords(mechanism, fn, params)
    votes = params.get("votes")
    if isinstance(votes, (str, os.PathLike)):
        from dpaudit.accountants.pate import load_votes

        params["votes"] = votes = load_votes(votes)
    if mechanism in ("pate", "gnmax") and "votes" not in params:
        params["votes"] = None
    answered = params.get("answered")
    if mechanism == "gnmax" and isinstance(answered, (str, os.PathLike)):
        from dpaudit.accountants.gnmax import load_answered

        import numpy as np

        shape = None if params.get("votes") is None else np.shape(params["votes"])
        queries = params.get("queries") if shape is None else (shape[0] if shape else None)
        if queries is None:
            raise ParameterError("The 'queries' parameter of account must be given with an 'answered' file and no votes.")
        params["answered"] = load_answered(answered, queries)
    if params.pop("release_epsilon", False):
        if mechanism != "gnmax":
            raise ParameterError(f"The 'release_epsilon' parameter of account applies to mechanism 'gnmax' only. "
                                 f"Got mechanism {mechanism!r}.")
        from dpaudit.accountants.smooth_sensitivity import release_gnmax_epsilon

        return release_gnmax_epsilon(params.pop("votes"), **params)
    return fn(**params)


#: The flat keywords of :func:`attack` before the typed specs (one release of deprecation): name -> default.
_LEGACY_ATTACK_KEYWORDS: dict[str, Any] = {
    "audit": None, "compare": False, "shadows": 16, "classifier": "catboost", "per_class": True,
    "threshold_kind": "loss", "lira_online": True, "population": None, "gamma": 1.0, "rmia_a": None, "canary": None,
    "canaries": None, "models": 200, "score": None, "analysis": "auto", "strict": False, "factory": None,
    "train_fn": None, "trust_bundle_code": False, "executor": "local", "ray_address": None, "workers": None, "min_k": 0.2,
    "min_k_rounding": "floor",
}


def specs_from_keywords(attack: str | None = "shadow", **keywords: Any) -> "tuple[AttackSpec, Execution, Any]":
    """The typed specs the old flat keywords of :func:`attack` (``attack="lira", shadows=8, lira_online=False,
    audit="one-run", executor="ray", factory=...``) stand for: ``(attack spec, Execution, BundleCode or None)``.
    ``dpaudit attack``'s flags are these keywords; it builds its specs here."""
    from dpaudit.specs import RMIA, CanaryAudit, Compare, Execution, LiRA, Shadow, Threshold

    unknown = sorted(set(keywords) - set(_LEGACY_ATTACK_KEYWORDS))
    if unknown:
        raise ParameterError(f"dpaudit.attack got unknown keyword(s) {', '.join(repr(k) for k in unknown)}; it takes "
                             "attack specs (Threshold, Shadow, LiRA, RMIA, Compare, CanaryAudit, Execution) and "
                             "out, per_record, confidence, delta, bootstrap, seed, overwrite, code, data_dir, "
                             "trust_data_dir, progress.")
    k = {**_LEGACY_ATTACK_KEYWORDS, **keywords}
    if k["audit"] is not None:
        spec: Any = CanaryAudit(k["audit"], canaries=k["canaries"], models=k["models"], canary=k["canary"],
                                score=k["score"], analysis=k["analysis"], strict=k["strict"])
    elif k["compare"]:
        spec = Compare(references=k["shadows"], population=k["population"], gamma=k["gamma"], a=k["rmia_a"],
                       min_k=k["min_k"], min_k_rounding=k["min_k_rounding"])
    else:
        from dpaudit.errors import check_choice

        kind = check_choice(attack, "attack", "dpaudit.attack", ("shadow", "threshold", "lira", "rmia"))
        blind = k["classifier"]
        if kind == "threshold":
            spec = Threshold(k["threshold_kind"], blind=blind)
        elif kind == "shadow":
            spec = Shadow(k["shadows"], k["classifier"], per_class=k["per_class"], blind=blind)
        elif kind == "lira":
            spec = LiRA(k["shadows"], offline=not k["lira_online"], blind=blind)
        else:
            spec = RMIA(k["shadows"], offline=not k["lira_online"], population=k["population"], gamma=k["gamma"],
                        a=k["rmia_a"] if not k["lira_online"] else None, blind=blind)
    execution = Execution(k["executor"], k["ray_address"], k["workers"])
    code = None
    if k["factory"] is not None or k["train_fn"] is not None or k["trust_bundle_code"]:
        from dpaudit.training.usercode import BundleCode

        code = BundleCode(factory=k["factory"], train_fn=k["train_fn"], trust_bundle=bool(k["trust_bundle_code"]))
    return spec, execution, code


def attack(release: "str | os.PathLike | Release", *specs: Any, out: str | os.PathLike | None = None,
           per_record: bool = False, confidence: float = 0.95, delta: float | None = None, bootstrap: int = 1000,
           seed: int = 0, overwrite: bool = False, code: Any = None, data_dir: str | os.PathLike | None = None,
           trust_data_dir: bool = False, progress: "bool | Reporter" = False,
           **legacy: Any) -> "AttackReport | CanaryAuditResult | AttackComparison | tuple":
    """Attack a release bundle (``dpaudit attack``) with typed specs (:mod:`dpaudit.specs`)::

        dpaudit.attack(release, dpaudit.RMIA(references=16, offline=True), per_record=True)
        dpaudit.attack(release, dpaudit.CanaryAudit("one-run", canaries=1000))
        dpaudit.attack(release, dpaudit.LiRA(), dpaudit.RMIA(), dpaudit.Execution("ray"))   # two attacks

    A membership-inference attack (:class:`~dpaudit.specs.Threshold`, :class:`~dpaudit.specs.Shadow` -- the
    default --, :class:`~dpaudit.specs.LiRA`, :class:`~dpaudit.specs.RMIA`) runs beside the blind baseline, its
    empirical epsilon an *estimate* on one model (an :class:`~dpaudit.attacks.results.AttackReport`);
    :class:`~dpaudit.specs.Compare` runs every reference-model attack on the same reference models (an
    :class:`~dpaudit.attacks.compare.AttackComparison`); :class:`~dpaudit.specs.CanaryAudit` is a *certified* canary
    audit (of the released model itself when the bundle holds canaries, else of its DP-SGD recipe, retrained; a
    :class:`~dpaudit.auditing.canary_audit.CanaryAuditResult`). :class:`~dpaudit.specs.Execution` says where shadow /
    reference models train (default: this process). Several attack specs run one after the other and give a tuple
    of results, each written into its own folder.

    Writes ``attack.json`` and ``roc.png`` (a comparison: ``comparison.json/.md``, ``roc_compare.png``; a canary
    audit: ``canary_audit.json``; ``per_record=True``: ``per_record.*``) into ``out`` (default
    ``runs/attack/<bundle name>-<attack>``; with several specs, ``out/<attack>``; never inside the bundle, and earlier
    results there are replaced only with ``overwrite=True``) and returns the result. Finished groups of shadow models
    are kept in ``out/units``, so a re-run trains only what is missing. ``confidence``, ``delta`` (default: the
    release's claimed delta), ``bootstrap`` (replicates of the intervals) and ``seed`` apply to every attack. Code a
    bundle names runs only as ``code`` (a :class:`~dpaudit.training.usercode.BundleCode`) allows.

    The flat keywords of earlier releases (``attack="lira"`` as the second argument, ``shadows=``,
    ``lira_online=``, ``audit="one-run"``, ``compare=True``, ``executor=``, ``factory=`` ...) still work for this
    release, with a :class:`DeprecationWarning`; :func:`specs_from_keywords` shows the specs they stand for."""
    import warnings

    from dpaudit.specs import CanaryAudit, Compare, Execution, LiRA, RMIA, Shadow, Threshold

    attack_types = (Threshold, Shadow, LiRA, RMIA, Compare, CanaryAudit)
    old_kind = legacy.pop("attack", None)       # attack="lira" by keyword (deprecated)
    if specs and isinstance(specs[0], str):
        if old_kind is not None:
            raise ParameterError(f"dpaudit.attack got the attack twice ({specs[0]!r} and attack={old_kind!r}).")
        old_kind, specs = specs[0], specs[1:]
    if old_kind is not None or legacy:
        if any(isinstance(s, attack_types + (Execution,)) for s in specs):
            raise ParameterError("dpaudit.attack takes attack specs or the deprecated flat keywords "
                                 f"({', '.join(sorted(legacy)) or repr(old_kind)}), not both.")
        if specs:
            raise ParameterError(f"dpaudit.attack takes attack specs. Got {format_value(specs[0])} instead.")
        legacy_code = {k: legacy[k] for k in ("factory", "train_fn", "trust_bundle_code") if k in legacy}
        if legacy_code and code is not None:
            raise ParameterError("dpaudit.attack takes code=BundleCode(...) or the deprecated factory= / train_fn= / "
                                 "trust_bundle_code=, not both.")
        from dpaudit.auditing.attack_release import check_attack_counts

        # every count of the flat keywords bounded before any work, whether or not the attack uses it
        check_attack_counts("attack", shadows=legacy.get("shadows"), population=legacy.get("population"),
                            models=legacy.get("models"), canaries=legacy.get("canaries"), bootstrap=bootstrap,
                            seed=seed)
        spec, execution, old_code = specs_from_keywords("shadow" if old_kind is None else old_kind, **legacy)
        warnings.warn("dpaudit.attack's flat keywords (attack=..., shadows=..., audit=..., executor=..., factory=...) "
                      f"are deprecated; pass typed specs instead: dpaudit.attack(release, {spec!r}"
                      + (f", {execution!r}" if execution != Execution() else "")
                      + (", code=BundleCode(...)" if old_code is not None else "") + ").",
                      DeprecationWarning, stacklevel=2)
        specs, code = (spec, execution), code if old_code is None else old_code
    attacks = [s for s in specs if isinstance(s, attack_types)]
    executions = [s for s in specs if isinstance(s, Execution)]
    others = [s for s in specs if not isinstance(s, attack_types + (Execution,))]
    if others:
        raise ParameterError(f"The specs of dpaudit.attack must be Threshold, Shadow, LiRA, RMIA, Compare, CanaryAudit "
                             f"or Execution objects. Got {format_value(others[0])} instead.")
    if len(executions) > 1:
        raise ParameterError(f"dpaudit.attack takes at most one Execution. Got {len(executions)} instead.")
    if not attacks:
        attacks = [Shadow()]
    names = [a.name for a in attacks]
    if len(set(names)) != len(names):
        raise ParameterError(f"dpaudit.attack runs each attack once; give different attacks. Got {', '.join(names)}.")
    execution = executions[0] if executions else Execution()
    if len(attacks) > 1:
        base = None if out is None else Path(out)
        return tuple(attack(release, a, execution, out=None if base is None else base / a.name, per_record=per_record,
                            confidence=confidence, delta=delta, bootstrap=bootstrap, seed=seed, overwrite=overwrite,
                            code=code, data_dir=data_dir, trust_data_dir=trust_data_dir, progress=progress)
                     for a in attacks)
    return _attack_one(release, attacks[0], execution, out=out, per_record=per_record, confidence=confidence,
                       delta=delta, bootstrap=bootstrap, seed=seed, overwrite=overwrite, code=code, data_dir=data_dir,
                       trust_data_dir=trust_data_dir, progress=progress)


def _attack_one(release: "str | os.PathLike | Release", spec: Any, execution: Any, *, out: Any, per_record: bool,
                confidence: float, delta: float | None, bootstrap: int, seed: int, overwrite: bool, code: Any,
                data_dir: Any, trust_data_dir: bool, progress: Any) -> Any:
    from dpaudit.auditing.attack_release import attack_out_dir, attack_output, check_attack_counts
    from dpaudit.progress import as_reporter
    from dpaudit.specs import RMIA, CanaryAudit, Compare, LiRA, Shadow, Threshold
    from dpaudit.training.release import Release, load_release
    from dpaudit.training.usercode import BundleCode

    # every count bounded before any work (the specs check their own types and ranges at construction too)
    check_attack_counts("attack", shadows=getattr(spec, "shadows", getattr(spec, "references", None)),
                        bootstrap=bootstrap, population=getattr(spec, "population", None),
                        models=getattr(spec, "models", None), canaries=getattr(spec, "canaries", None), seed=seed)
    rep = as_reporter(progress, prefix="dpaudit attack")
    root = Path(release.path) if isinstance(release, Release) else check_path(release, "release", "attack")
    name = spec.name
    out = attack_out_dir(root, name, out, overwrite=overwrite)   # refused before any work
    from dpaudit.auditing.lm_release import is_lm_release

    if not isinstance(release, Release) and is_lm_release(root):
        return _attack_lm(root, out, name, audit=spec.kind if isinstance(spec, CanaryAudit) else None,
                          compare=isinstance(spec, Compare), gamma=getattr(spec, "gamma", 1.0),
                          rmia_a=getattr(spec, "a", None), min_k=getattr(spec, "min_k", 0.2),
                          min_k_rounding=getattr(spec, "min_k_rounding", "floor"), per_record=per_record, confidence=confidence, delta=delta, bootstrap=bootstrap, seed=seed,
                          overwrite=overwrite, rep=rep)
    if isinstance(release, Release):
        bundle = release
    else:
        bundle = load_release(root, data_dir=data_dir, trust_data_dir=trust_data_dir, code=BundleCode.of(code))
    if isinstance(spec, CanaryAudit):
        from dpaudit.auditing.canary_audit import canary_audit_release

        with attack_output(root, name, out, overwrite=overwrite):
            return canary_audit_release(bundle, audit=spec.kind, canary=spec.canary, canaries=spec.canaries,
                                        models=spec.models, score=spec.score,
                                        delta=1e-5 if delta is None else delta, confidence=confidence, seed=seed,
                                        out=out, progress=rep, analysis=spec.analysis, strict=spec.strict)
    from dpaudit._io import atomic_path, write_json
    from dpaudit.attacks.plots import roc_figure
    from dpaudit.auditing.attack_release import attack_release, compare_release, release_record_images
    from dpaudit.executors import make_executor
    from dpaudit.report.attack_outputs import write_comparison, write_per_record
    from dpaudit.serial import to_dict

    if isinstance(spec, Compare):
        with attack_output(root, name, out, overwrite=overwrite), \
                make_executor(execution.executor, address=execution.ray_address, workers=execution.workers,
                              progress=rep) as ex, \
                rep.stage(f"attack comparison on {root}"):
            comp = compare_release(bundle, num_references=spec.references, population=spec.population,
                                   gamma=spec.gamma, rmia_a=spec.a, confidence=confidence, delta=delta,
                                   n_bootstrap=bootstrap, seed=seed, executor=ex, checkpoint_dir=out / "units",
                                   per_record=per_record)
            paths = write_comparison(out, comp, title=f"Reference-model attacks on {root}",
                                     images_of=release_record_images(bundle), extra={"release": str(root)})
        rep.log("wrote " + ", ".join(str(p) for p in paths))
        return comp
    kw: dict[str, Any] = {"blind": spec.blind is not None, "classifier": spec.blind or "catboost"}
    if isinstance(spec, Threshold):
        kw.update(threshold_kind=spec.kind)
    elif isinstance(spec, Shadow):
        kw.update(num_shadows=spec.shadows, classifier=spec.classifier, per_class=spec.per_class)
    elif isinstance(spec, LiRA):
        kw.update(num_shadows=spec.references, lira_online=not spec.offline)
    elif isinstance(spec, RMIA):
        kw.update(num_shadows=spec.references, rmia_online=not spec.offline, lira_online=not spec.offline,
                  population=spec.population, gamma=spec.gamma, rmia_a=spec.a)
    with attack_output(root, name, out, overwrite=overwrite), \
            make_executor(execution.executor, address=execution.ray_address, workers=execution.workers,
                          progress=rep) as ex, \
            rep.stage(f"{name} attack on {root}"):
        report = attack_release(bundle, attack=name, confidence=confidence, delta=delta, n_bootstrap=bootstrap,
                                seed=seed, executor=ex, checkpoint_dir=out / "units", per_record=per_record, **kw)
        path = write_json(out / "attack.json", {"release": str(root), **to_dict(report)})
        if report.per_record is not None:
            for p in write_per_record(out, report.per_record, images_of=release_record_images(bundle)):
                rep.log(f"wrote {p}")
        fig = roc_figure([r for r in (report.attack, report.blind) if r is not None])
        with atomic_path(out / "roc.png", suffix=".png") as tmp:
            fig.savefig(tmp, format="png", dpi=120)
    rep.log(f"wrote {path} and {out / 'roc.png'}")
    return report


def _attack_lm(root: Path, out: Path, name: str, *, audit: str | None, compare: bool, gamma: float,
               rmia_a: float | None, per_record: bool, confidence: float, delta: float | None, bootstrap: int,
               seed: int, overwrite: bool, rep: Any, min_k: float = 0.2,
               min_k_rounding: str = "floor") -> "AttackComparison":
    """``dpaudit attack`` on an LM bundle: every sequence-level attack side by side (``--compare``)."""
    from dpaudit.auditing.attack_release import attack_output
    from dpaudit.auditing.lm_release import compare_lm_release, load_lm_release
    from dpaudit.report.attack_outputs import write_comparison

    if audit is not None or not compare:
        raise ParameterError("An LM release is attacked with --compare (every sequence-level attack side by side); "
                             "a certified canary audit of your LM fine-tune runs with `dpaudit lm audit --base-model "
                             "DIR --texts FILE --train-fn FILE.py:NAME` (dpaudit.auditing.lm_audit.audit_lm_finetune). "
                             "Got "
                             f"{'--audit ' + audit if audit else 'no --compare'} instead.")
    rel = load_lm_release(root)
    with attack_output(root, name, out, overwrite=overwrite), rep.stage(f"LM attack comparison on {root}"):
        comp = compare_lm_release(rel, k=min_k, rounding=min_k_rounding, gamma=gamma, rmia_a=rmia_a,
                                  confidence=confidence, delta=delta,
                                  n_bootstrap=bootstrap, seed=seed, per_record=per_record, cache_dir=out / "cache")
        paths = write_comparison(out, comp, title=f"Sequence-level membership attacks on the LM of {root}",
                                 extra={"release": str(root)})
    rep.log("wrote " + ", ".join(str(p) for p in paths))
    return comp


#: What an audit's units import (the attacks, their classifiers, the certified audits, the trainers): a processes
#: executor's fork server imports them once, so each worker starts with them loaded.
_AUDIT_UNIT_MODULES = ("dpaudit.auditing.runner", "dpaudit.auditing.attack_release", "dpaudit.attacks.run",
                       "dpaudit.auditing.canary_audit", "dpaudit.auditing.method_audit", "dpaudit.auditing.method_runs",
                       "dpaudit.training.methods.scaffold", "dpaudit.training.ensemble", "dpaudit.training.dpsgd",
                       "catboost", "sklearn.linear_model", "scipy.stats")


def audit(config: "str | os.PathLike | AuditConfig | None" = None, out: str | os.PathLike = DEFAULT_AUDIT_OUT, *,
          device: str | None = None, progress: "bool | Reporter" = False, executor: str = "local",
          ray_address: str | None = None, trust_bundle_code: bool = False, workers: int | None = None) -> "AuditReport":
    """Run an audit (``dpaudit audit``): train or load the releases of ``config`` (an audit TOML file, an
    :class:`~dpaudit.auditing.runner.AuditConfig`, or None for the embedded default on digits), account them, attack
    them, run the certified canary and whole-run audits, and write ``report.{json,md,html}`` with its figures into
    ``out``. Re-running resumes what is complete. ``executor``: ``"local"`` (this process), ``"processes"``
    (``workers`` worker processes, default the usable cores), ``"ray"`` or ``"auto"`` (processes when more than one
    core is usable, else local; the CLI's default); the numbers are the same. ``trust_bundle_code``: let release
    models run the code their bundles name (otherwise only the code a ``[[models]]`` entry names itself). Returns the
    :class:`~dpaudit.report.schema.AuditReport`."""
    from dpaudit.executors import make_executor

    with make_executor(executor, address=ray_address, workers=workers) as ex:
        ex.warm_up(_AUDIT_UNIT_MODULES)  # workers start while this process imports and checks the config
        from dpaudit.auditing.runner import AuditConfig, default_config, load_audit_config, run_audit

        cfg = (default_config() if config is None else config if isinstance(config, AuditConfig)
               else load_audit_config(config))
        return run_audit(cfg, out, device=device, progress=progress, executor=ex, trust_bundle_code=trust_bundle_code)


def check(claims: str | os.PathLike, *, junit: str | os.PathLike | None = None,
          progress: "bool | Reporter" = False, trust_bundle_code: bool = False) -> "ClaimsReport":
    """Check the privacy claims of a claims TOML file (``dpaudit check``). Each claim gets a verdict: HOLDS (the
    accounting shows it), UNPROVEN (it cannot) or REFUTED (certified evidence above the claimed epsilon; estimates
    never refute). The :class:`~dpaudit.auditing.evaluate.ClaimsReport` has ``verdict`` (the worst), ``exit_code``
    (0 / 3 / 1) and a result per claim; ``junit`` also writes JUnit XML there, one test case per claim. A claim
    that cannot be evaluated (a missing subject file, ...) does not stop the others: every claim is evaluated, the
    JUnit file records it as an ``<error>``, and then :class:`~dpaudit.auditing.evaluate.ClaimsIncomplete` (a
    ``DataError``, exit 2 in the CLI) is raised, naming it and holding the whole report (``.report``). A claims file
    that cannot be read at all raises its error after writing a JUnit file with one ``<error>`` for it.
    ``trust_bundle_code``: let attacks run the code release bundles name (otherwise only the code a claim names
    itself)."""
    from dpaudit.auditing.claims import load_claims
    from dpaudit.auditing.evaluate import ClaimError, ClaimsIncomplete, ClaimsReport, evaluate_claims, write_junit
    from dpaudit.errors import DPAuditError

    try:
        parsed = load_claims(claims)
    except DPAuditError as exc:
        if junit is not None:  # CI reads the JUnit file: it says why there are no verdicts
            try:
                write_junit(ClaimsReport(str(claims), (), (ClaimError("claims file", str(claims), str(exc)),)), junit)
            except (DPAuditError, OSError):
                pass   # the claims file's own error is the one to report
        raise
    report = evaluate_claims(parsed, progress=progress, trust_bundle_code=trust_bundle_code, keep_going=True)
    if junit is not None:
        write_junit(report, junit)
    if report.errors:
        raise ClaimsIncomplete(report)
    return report


def audit_trainer(train_fn: str, *, claim: Sequence[str] | dict, recipe: Sequence[str] | dict | None = None,
                  threat_model: str = "white-box", budget: str = "ci", canaries: int | None = None,
                  records: int = 1000, seed: int = 0, confidence: float = 0.95,
                  out: str | os.PathLike | None = None, overwrite: bool = False,
                  progress: "bool | Reporter" = False) -> "TrainerAuditResult":
    """Audit a training function you wrote (``dpaudit audit-trainer FILE.py:train``). ``threat_model="white-box"``:
    it runs on digits records plus fair-coin canaries with the white-box audit hook attached in two lines (see
    :mod:`dpaudit.training.audit_hook`), once at ``ci`` (twice at ``thorough``), then, when the gradient canaries do
    not refute the claim, 20 (``ci``) or 40 (``thorough``) more times with input canaries; the claim
    (``["epsilon=2", "delta=1e-5"]`` or a dict) is REFUTED when a certified bound or the recorded mechanism's analytic
    lower bound exceeds it. ``threat_model="final-model"``: it runs 60 (``ci``) or 150 (``thorough``) times with input
    canaries and must return the trained model; only the returned models are scored (certified one-run bound pooled
    over the runs; no recorded-run accounting). ``recipe``: the declared
    DP-SGD recipe (``["dataset_size=1000", "batch_size=64", "noise_multiplier=1.48", "epochs=5"]`` or a dict) the
    record is compared with. Returns a :class:`~dpaudit.auditing.trainer_audit.TrainerAuditResult` (``verdict``,
    ``exit_code``); ``out`` also writes ``trainer_audit.json``."""
    from dpaudit._io import parse_toml_value
    from dpaudit.auditing.release_make import parse_claim
    from dpaudit.auditing.trainer_audit import audit_trainer as run

    c = parse_claim(claim)
    rec: dict | None = None
    if recipe is not None and not isinstance(recipe, dict):
        if not isinstance(recipe, (list, tuple)):
            raise ParameterError("The 'recipe' parameter must be a list of KEY=VALUE strings or a dict. Got "
                                 f"{format_value(recipe)} instead.")
        rec = {}
        for item in recipe:
            key, sep, value = str(item).partition("=")
            if not sep or not key.strip():
                raise ParameterError(f"The '--recipe' parameter must be KEY=VALUE. Got {item!r} instead.")
            rec[key.strip()] = parse_toml_value(value.strip())
    elif recipe is not None:
        rec = dict(recipe)
    return run(train_fn, epsilon=c["epsilon"], delta=c["delta"], recipe=rec, threat_model=threat_model, budget=budget,
               canaries=canaries, records=records, seed=seed, confidence=confidence, out=out, overwrite=overwrite,
               progress=progress)


def make_release(out: str | os.PathLike, *, claim: Sequence[str] | dict, overwrite: bool = False,
                 **inputs: Any) -> "Release":
    """A release bundle from a model trained elsewhere, or only its scores (``dpaudit release make``); returns the
    loaded :class:`~dpaudit.training.release.Release`. ``claim`` is ``["epsilon=8", "delta=1e-5", ...]`` or a dict;
    ``inputs`` are :func:`dpaudit.auditing.release_make.make_release`'s (``model=``, ``factory=``, ``data=``,
    ``members=``, ``nonmembers=``, ``scores=``, ``opacus=``, ...)."""
    if inputs.get("lm") is not None or inputs.get("lm_scores") is not None:
        import inspect

        from dpaudit.auditing.lm_release import load_lm_release, make_lm_release

        lm_keys = [k for k in inspect.signature(make_lm_release).parameters if k not in ("out", "claim", "overwrite")]
        unknown = [k for k in inputs if k not in lm_keys]
        if unknown:     # e.g. data= beside lm=: the LM release's own keywords, never Python's TypeError
            raise ParameterError(f"release.make with lm= or lm_scores= (an LM release) takes the keywords out, claim, "
                                 f"overwrite, {', '.join(lm_keys)}. Got {unknown[0]!r} instead.")
        return load_lm_release(make_lm_release(out, claim=claim, overwrite=overwrite, **inputs))  # type: ignore[return-value]
    from dpaudit.auditing.release_make import make_release as make
    from dpaudit.training.release import load_release as load
    from dpaudit.training.usercode import BundleCode

    import inspect

    accepted = [k for k in inspect.signature(make).parameters if k not in ("out", "claim", "overwrite")]
    unknown = [k for k in inputs if k not in accepted]
    if unknown:     # the caller's spelling and every keyword accepted (never Python's TypeError about make())
        raise ParameterError(f"release.make takes the keywords out, claim, overwrite, {', '.join(accepted)}. "
                             f"Got {unknown[0]!r} instead.")
    path = make(out, claim=claim, overwrite=overwrite, **inputs)
    # loaded with the code just named (the factory / training function), checked against the bundle's digests
    return load(path, code=BundleCode(factory=inputs.get("factory"), train_fn=inputs.get("train_fn")))


def load_release(path: str | os.PathLike, *, data_dir: str | os.PathLike | None = None,
                 trust_data_dir: bool = False, code: Any = None) -> "Release":
    """Load and check a release bundle (never unpickling anything, running no code it names unless ``code``, a
    :class:`~dpaudit.training.usercode.BundleCode`, allows it); see :func:`dpaudit.training.release.load_release`."""
    from dpaudit.training.release import load_release as load

    return load(path, data_dir=data_dir, trust_data_dir=trust_data_dir, code=code)

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

from dpaudit.errors import ParameterError, check_bool, check_choice, check_path, format_value

if TYPE_CHECKING:  # pragma: no cover - for the signatures only
    from dpaudit.accountants.statement import AccountingResult
    from dpaudit.attacks.compare import AttackComparison
    from dpaudit.attacks.results import AttackReport
    from dpaudit.audit.canary_audit import CanaryAuditResult
    from dpaudit.audit.evaluate import ClaimsReport
    from dpaudit.audit.runner import AuditConfig
    from dpaudit.progress import Reporter
    from dpaudit.report.schema import AuditReport
    from dpaudit.training.release import Release

__all__ = ["account", "attack", "audit", "check", "make_release", "load_release", "DEFAULT_AUDIT_OUT"]

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


def attack(release: "str | os.PathLike | Release", attack: str = "shadow", *, out: str | os.PathLike | None = None,
           audit: str | None = None, compare: bool = False, shadows: int = 16, classifier: str = "catboost",
           per_class: bool = True, threshold_kind: str = "loss", lira_online: bool = True,
           population: int | None = None, gamma: float = 1.0, rmia_a: float | None = None, per_record: bool = False,
           confidence: float = 0.95, delta: float | None = None, bootstrap: int = 1000, seed: int = 0,
           canary: str | None = None, canaries: int | None = None, models: int = 200, score: str | None = None,
           analysis: str = "auto", strict: bool = False, overwrite: bool = False, factory: str | None = None,
           train_fn: str | None = None, trust_bundle_code: bool = False, data_dir: str | os.PathLike | None = None,
           trust_data_dir: bool = False, executor: str = "local", ray_address: str | None = None,
           progress: "bool | Reporter" = False) -> "AttackReport | CanaryAuditResult | AttackComparison":
    """Attack a release bundle (``dpaudit attack``): a membership-inference attack (``attack``: ``"shadow"``,
    ``"threshold"``, ``"lira"``, ``"rmia"``; ``lira_online=False``: the offline LiRA / RMIA) beside the blind
    baseline, its empirical epsilon an *estimate* on one model; with ``compare=True`` every reference-model attack on
    the same reference models (an :class:`~dpaudit.attacks.compare.AttackComparison`); or, with
    ``audit="one-run"`` / ``"multi-run"``, a *certified* canary audit (of the released model itself when the bundle
    holds canaries, else of its DP-SGD recipe, retrained; ``analysis``, ``strict`` as ``dpaudit attack``).

    Writes ``attack.json`` and ``roc.png`` (a comparison: ``comparison.json/.md``, ``roc_compare.png``; a canary
    audit: ``canary_audit.json``; ``per_record=True``: ``per_record.*``) into ``out`` (default
    ``runs/attack/<bundle name>-<attack>``; never inside the bundle, and earlier results there are replaced only with
    ``overwrite=True``) and returns the result. Finished groups of shadow models are kept in ``out/units``, so a
    re-run trains only what is missing. Code a bundle names runs only when ``factory`` / ``train_fn`` name the same
    code or ``trust_bundle_code=True`` (:class:`~dpaudit.training.usercode.BundleCode`). ``executor``: ``"local"``
    or ``"ray"``."""
    from dpaudit.attacks.run import ATTACKS
    from dpaudit.audit.attack_release import attack_out_dir, attack_output, check_attack_counts
    from dpaudit.progress import as_reporter
    from dpaudit.training.release import Release, load_release
    from dpaudit.training.usercode import BundleCode

    check_attack_counts("attack", shadows=shadows, bootstrap=bootstrap, population=population, models=models,
                        canaries=canaries, seed=seed)                 # every count bounded before any work
    if audit is not None:
        check_choice(audit, "audit", "attack", ("one-run", "multi-run"))
    elif not compare:
        check_choice(attack, "attack", "attack", ATTACKS)
    compare = check_bool(compare, "compare", "attack")
    rep = as_reporter(progress, prefix="dpaudit attack")
    root = Path(release.path) if isinstance(release, Release) else check_path(release, "release", "attack")
    name = audit or ("compare" if compare else attack)
    out = attack_out_dir(root, name, out, overwrite=overwrite)   # refused before any work
    from dpaudit.audit.lm_release import is_lm_release

    if not isinstance(release, Release) and is_lm_release(root):
        return _attack_lm(root, out, name, audit=audit, compare=compare, gamma=gamma, rmia_a=rmia_a,
                          per_record=per_record, confidence=confidence, delta=delta, bootstrap=bootstrap, seed=seed,
                          overwrite=overwrite, rep=rep)
    if isinstance(release, Release):
        bundle = release
    else:
        code = BundleCode(factory=factory, train_fn=train_fn, trust_bundle=trust_bundle_code)
        bundle = load_release(root, data_dir=data_dir, trust_data_dir=trust_data_dir, code=code)
    if audit is not None:
        from dpaudit.audit.canary_audit import canary_audit_release

        with attack_output(root, audit, out, overwrite=overwrite):
            return canary_audit_release(bundle, audit=audit, canary=canary, canaries=canaries, models=models,
                                        score=score, delta=1e-5 if delta is None else delta, confidence=confidence,
                                        seed=seed, out=out, progress=rep, analysis=analysis, strict=strict)
    from dpaudit._io import atomic_path, write_json
    from dpaudit.attacks.plots import roc_figure
    from dpaudit.audit.attack_release import attack_release, compare_release, release_record_images
    from dpaudit.executors import make_executor
    from dpaudit.report.attack_outputs import write_comparison, write_per_record
    from dpaudit.serial import to_dict

    if compare:
        with attack_output(root, name, out, overwrite=overwrite), \
                make_executor(executor, address=ray_address, progress=rep) as ex, \
                rep.stage(f"attack comparison on {root}"):
            comp = compare_release(bundle, num_references=shadows, population=population, gamma=gamma, rmia_a=rmia_a,
                                   confidence=confidence, delta=delta, n_bootstrap=bootstrap, seed=seed, executor=ex,
                                   checkpoint_dir=out / "units", per_record=per_record)
            paths = write_comparison(out, comp, title=f"Reference-model attacks on {root}",
                                     images_of=release_record_images(bundle), extra={"release": str(root)})
        rep.log("wrote " + ", ".join(str(p) for p in paths))
        return comp
    with attack_output(root, attack, out, overwrite=overwrite), \
            make_executor(executor, address=ray_address, progress=rep) as ex, rep.stage(f"{attack} attack on {root}"):
        report = attack_release(bundle, attack=attack, num_shadows=shadows, classifier=classifier,
                                per_class=per_class, threshold_kind=threshold_kind, lira_online=lira_online,
                                rmia_online=lira_online, population=population, gamma=gamma, rmia_a=rmia_a,
                                confidence=confidence, delta=delta, n_bootstrap=bootstrap, seed=seed, executor=ex,
                                checkpoint_dir=out / "units", per_record=per_record)
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
               seed: int, overwrite: bool, rep: Any) -> "AttackComparison":
    """``dpaudit attack`` on an LM bundle: every sequence-level attack side by side (``--compare``)."""
    from dpaudit.audit.attack_release import attack_output
    from dpaudit.audit.lm_release import compare_lm_release, load_lm_release
    from dpaudit.report.attack_outputs import write_comparison

    if audit is not None or not compare:
        raise ParameterError("An LM release is attacked with --compare (every sequence-level attack side by side); "
                             "canary audits of LM fine-tuning run with dpaudit.audit.lm_audit. Got "
                             f"{'--audit ' + audit if audit else 'no --compare'} instead.")
    rel = load_lm_release(root)
    with attack_output(root, name, out, overwrite=overwrite), rep.stage(f"LM attack comparison on {root}"):
        comp = compare_lm_release(rel, gamma=gamma, rmia_a=rmia_a, confidence=confidence, delta=delta,
                                  n_bootstrap=bootstrap, seed=seed, per_record=per_record, cache_dir=out / "cache")
        paths = write_comparison(out, comp, title=f"Sequence-level membership attacks on the LM of {root}",
                                 extra={"release": str(root)})
    rep.log("wrote " + ", ".join(str(p) for p in paths))
    return comp


def audit(config: "str | os.PathLike | AuditConfig | None" = None, out: str | os.PathLike = DEFAULT_AUDIT_OUT, *,
          device: str | None = None, progress: "bool | Reporter" = False, executor: str = "local",
          ray_address: str | None = None, trust_bundle_code: bool = False) -> "AuditReport":
    """Run an audit (``dpaudit audit``): train or load the releases of ``config`` (an audit TOML file, an
    :class:`~dpaudit.audit.runner.AuditConfig`, or None for the embedded default on digits), account them, attack
    them, run the certified canary and whole-run audits, and write ``report.{json,md,html}`` with its figures into
    ``out``. Re-running resumes what is complete. ``trust_bundle_code``: let release models run the code their
    bundles name (otherwise only the code a ``[[models]]`` entry names itself). Returns the
    :class:`~dpaudit.report.schema.AuditReport`."""
    from dpaudit.audit.runner import AuditConfig, default_config, load_audit_config, run_audit
    from dpaudit.executors import make_executor

    cfg = (default_config() if config is None else config if isinstance(config, AuditConfig)
           else load_audit_config(config))
    with make_executor(executor, address=ray_address) as ex:
        return run_audit(cfg, out, device=device, progress=progress, executor=ex, trust_bundle_code=trust_bundle_code)


def check(claims: str | os.PathLike, *, junit: str | os.PathLike | None = None,
          progress: "bool | Reporter" = False, trust_bundle_code: bool = False) -> "ClaimsReport":
    """Check the privacy claims of a claims TOML file (``dpaudit check``). Each claim gets a verdict: HOLDS (the
    accounting shows it), UNPROVEN (it cannot) or REFUTED (certified evidence above the claimed epsilon; estimates
    never refute). The :class:`~dpaudit.audit.evaluate.ClaimsReport` has ``verdict`` (the worst), ``exit_code``
    (0 / 3 / 1) and a result per claim; ``junit`` also writes JUnit XML there. ``trust_bundle_code``: let attacks
    run the code release bundles name (otherwise only the code a claim names itself)."""
    from dpaudit.audit.evaluate import check_claims, write_junit

    report = check_claims(claims, progress=progress, trust_bundle_code=trust_bundle_code)
    if junit is not None:
        write_junit(report, junit)
    return report


def make_release(out: str | os.PathLike, *, claim: Sequence[str] | dict, overwrite: bool = False,
                 **inputs: Any) -> "Release":
    """A release bundle from a model trained elsewhere, or only its scores (``dpaudit release make``); returns the
    loaded :class:`~dpaudit.training.release.Release`. ``claim`` is ``["epsilon=8", "delta=1e-5", ...]`` or a dict;
    ``inputs`` are :func:`dpaudit.audit.release_make.make_release`'s (``model=``, ``factory=``, ``data=``,
    ``members=``, ``nonmembers=``, ``scores=``, ``opacus=``, ...)."""
    if inputs.get("lm") is not None or inputs.get("lm_scores") is not None:
        from dpaudit.audit.lm_release import load_lm_release, make_lm_release

        return load_lm_release(make_lm_release(out, claim=claim, overwrite=overwrite, **inputs))  # type: ignore[return-value]
    from dpaudit.audit.release_make import make_release as make
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

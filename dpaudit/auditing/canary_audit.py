"""Certified canary audits of a DP-SGD training recipe, end to end: plant canaries, train, score, bound.

:func:`run_canary_audit` takes a recipe (architecture, :class:`~dpaudit.training.ensemble.TrainConfig` with
DP-SGD), the base training set and a pool of records the models are not trained on, and runs

- ``audit="one-run"``: one model trained on the base data plus the canaries its fair coins include
  (Steinke, Nasr, Jagielski 2023), ``canaries = m``;
- ``audit="multi-run"``: ``models = N`` models trained at once by the ensemble trainer, model ``i`` on the base
  data plus the canary iff its coin says so (Jagielski et al. 2020; Nasr et al. 2021, 2023); one canary.

Canaries: ``"mislabeled"`` / ``"ood"`` (black-box; scored by ``"loss"`` or ``"lira"``) or ``"dirac"`` (white-box:
gradient canaries observed in every step's noised gradient sum; scored by ``"dirac-lr"`` or ``"dirac-sum"``).
The result is a :class:`~dpaudit.attacks.canary.CanaryBound` (``kind = "certified"``) beside the accounted epsilon
of the recipe and the ideal-attack reference at the same number of trials.

What :func:`run_canary_audit` audits is the *training recipe* (the release's ``train_config`` run by dpaudit's
ensemble trainer), not the released weights themselves; the sampling rate is fixed to ``B / n`` of the base data for
every model so the accounting is exact.

:func:`audit_release_canaries` audits *the released model itself*: when a release was trained with a ``[canaries]``
table (its bundle holds ``canaries.npz`` and ``canaries_truth.npz``), the canaries are scored on the released
weights (input canaries: ``"loss"``) or on the noised gradient sums the run recorded at their coordinates (Dirac:
``"dirac-lr"`` / ``"dirac-sum"``) by :func:`release_canary_scores`, which reads only the attacker's view; the
inclusion bits are read afterwards, only to certify the one-run bound (Steinke, Nasr, Jagielski 2023, Thm 3). No
model is trained. :func:`canary_audit_release` picks it for ``audit="one-run"`` on such a release and otherwise
retrains the recipe, saying so in the result's notes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from dpaudit._format import fmt_number
from dpaudit._io import write_json
from dpaudit.attacks.auditor import CanaryScoreAuditor
from dpaudit.attacks.canary import (
    MULTI_RUN_ANALYSES,
    ONE_RUN_ANALYSES,
    SCORE_KINDS,
    CanaryBound,
    dirac_scores,
    gaussian_shaped,
    ideal_multi_run_epsilon,
    lira_scores,
    logit_confidence,
    loss_scores,
    min_models_for_positive_bound,
    multi_run_certified,
    one_run_certified,
    plan_one_run,
)
from dpaudit.errors import DataError, ParameterError, check_choice, check_float, check_int, check_name, check_probability
from dpaudit.serial import to_dict
from dpaudit.progress import as_reporter
from dpaudit.training.limits import MAX_EPOCHS, MAX_MODELS, MAX_RECORDS, MAX_WIDTH

__all__ = ["ANALYSIS_CHOICES", "UnderpoweredAuditWarning", "one_run_with_plan", "accounted_curve_test", "plan_note",
           "check_analysis", "analysis_line",
           "audit_release_canaries", "release_canary_scores", "CanaryAuditResult", "CanaryAuditSpec", "ZooAudit", "run_canary_audit", "run_canary_spec", "run_zoo_audit", "audit_method_step", "MethodStepAudit", "METHOD_STEPS", "canary_audit_release",
           "dpsgd_noise_for_epsilon", "default_score"]


def default_score(canary: str) -> str:
    return "dirac-lr" if canary == "dirac" else "loss"


#: ``analysis`` values of a canary audit: ``"auto"`` (one run: the analysis and guessing rule planned before the run
#: on the ideal attack of the accounted mechanism, among those valid for it; multi-run: "gdp" for Gaussian-shaped
#: mechanisms, else "eps"), a one-run analysis (``"eps"``, ``"fdp"``, ``"fdp-dp"``) or a multi-run one (``"eps"``,
#: ``"gdp"``).
ANALYSIS_CHOICES = ("auto",) + tuple(dict.fromkeys(ONE_RUN_ANALYSES + MULTI_RUN_ANALYSES))


class UnderpoweredAuditWarning(UserWarning):
    """A multi-run audit with fewer models than it needs to certify any positive epsilon at its confidence."""


def check_analysis(analysis: str, audit: str, owner: str) -> str:
    check_choice(analysis, "analysis", owner, ANALYSIS_CHOICES)
    allowed = ("auto",) + (ONE_RUN_ANALYSES if audit == "one-run" else MULTI_RUN_ANALYSES)
    if analysis not in allowed:
        raise ParameterError(f"The 'analysis' parameter of the {audit} {owner} must be one of {', '.join(allowed)}. "
                             f"Got {analysis!r} instead.")
    return analysis


def one_run_with_plan(scores, included, mechanism: Mapping[str, Any] | None, *, delta: float, confidence: float,
                      analysis: str = "auto", score: str, calibrated: bool, replicates: int, seed: int,
                      simulate: Any = None) -> tuple[CanaryBound, Any]:
    """The one-run bound with its analysis and guessing rule fixed *before* looking at ``scores``: planned on the
    ideal attack of ``mechanism`` (or ``simulate``) by :func:`~dpaudit.attacks.canary.plan_one_run` (``analysis``
    ``"auto"``: the best of the analyses valid for the mechanism; else that one), then

    ``calibrated`` admits sign rules (guesses by the side of 0); only for scores whose zero is the decision boundary
    whatever the real attack does (PrivateKT's symmetric count difference). White-box Dirac scores are not: a
    canary's coordinate can carry real gradients that shift its scores, so their audits use the score-order rules
    (equal counts or the grid), which do not lose validity or much power when the real attack is weaker than the
    ideal one.
    :func:`~dpaudit.attacks.canary.one_run_certified` with the plan. Returns ``(bound, plan)``; the bound carries
    every analysis side by side, each with its planned rule and ideal reference."""
    m = int(np.asarray(scores).size)
    d = float(delta)
    eligible = None
    if analysis != "auto":
        eligible = ("fdp",) if (analysis == "fdp-dp" and d == 0) else (analysis,)
    plan = plan_one_run(m, mechanism=mechanism, simulate=simulate, delta=d, confidence=confidence,
                        calibrated=calibrated, eligible=eligible, replicates=replicates, seed=seed)
    return one_run_certified(scores, included, delta=d, confidence=confidence, score=score, plan=plan), plan


def accounted_curve_test(scores, included, mechanism: Mapping[str, Any], plan: Any, *, confidence: float,
                         delta: float) -> Any:
    """The f-DP test of the mechanism's *accounted* trade-off curve (its PLD privacy profile, dp_accounting,
    pessimistic) against the guesses of the plan's ``"fdp-dp"`` rule (its ``"fdp"`` rule at delta = 0): is the
    accounted curve consistent with what the attack achieved? None when the mechanism has no PLD here."""
    from dpaudit.accountants.events import SubsampledGaussian
    from dpaudit.accountants.pld import PldAccountant

    if mechanism.get("kind") != "subsampled_gaussian":
        return None
    ev = SubsampledGaussian(sampling_rate=float(mechanism["sampling_rate"]),
                            noise_multiplier=float(mechanism["noise_multiplier"]), steps=int(mechanism["steps"]))
    eps = np.linspace(0.0, 40.0, 401)
    try:
        deltas = PldAccountant(value_discretization_interval=1e-3).compose(ev).privacy_profile(eps)
    except ParameterError:      # a PLD out of the FFT route's range (epsilon in the thousands): no curve to test
        return None
    rule = plan.rules.get("fdp-dp", plan.rules.get("fdp"))
    aud = CanaryScoreAuditor.from_canaries(scores, included)
    return aud.one_run_curve_test(eps, deltas, rule, confidence=confidence,
                                  curve="accounted PLD of the Poisson-subsampled Gaussian (dp_accounting, pessimistic)")


def plan_note(plan: Any, replicates: int) -> str:
    ideal = ", ".join(f"{k} {v:.3g}" for k, v in plan.ideal.items())
    return (f"analysis and guessing rule fixed before the run on {replicates} simulated audits of the ideal attack at the "
            f"accounted parameters (headline: {plan.analysis}, eligible {', '.join(plan.eligible)}; ideal references: "
            f"{ideal}); each analysis uses one planned rule, so no multiple-testing correction is needed.")


@dataclass(frozen=True)
class CanaryAuditResult:
    """A certified canary audit: the bound (with its ideal reference), the recipe's accounted epsilon, settings."""

    bound: CanaryBound
    accounted_epsilon: float | None
    mechanism: Mapping[str, Any]
    settings: Mapping[str, Any]
    elapsed_seconds: float
    notes: tuple[str, ...] = field(default_factory=tuple)
    schema: int = 1

    __json_computed__ = ("kind",)

    @property
    def kind(self) -> str:
        return self.bound.kind

    @property
    def refutes_claim(self) -> bool:
        """True when the certified bound exceeds the accounted (claimed) epsilon."""
        return self.accounted_epsilon is not None and self.bound.epsilon > self.accounted_epsilon

    def summary(self) -> str:
        b = self.bound
        ideal = "–" if b.ideal_epsilon is None else f"{b.ideal_epsilon:.3f}"
        acc = "–" if self.accounted_epsilon is None else f"{self.accounted_epsilon:.3f}"
        target = self.settings.get("target")
        what = f" of {target}" if target else ""
        lines = [f"{b.audit} canary audit{what} ({self.settings.get('canary')}, score {b.score}): certified epsilon >= "
                 f"{b.epsilon:.3f} at confidence {fmt_number(b.confidence)}, delta {fmt_number(b.delta)}, over {b.trials} trials "
                 f"(analysis {b.analysis}; rule: {b.rule or '–'}); ideal attack at the same trials: {ideal}; accounted "
                 f"epsilon: {acc}."]
        marked = False
        for e in b.analyses:
            head = not marked and e.analysis == b.analysis
            marked = marked or head
            lines.append("  " + analysis_line(e, headline=head))
        if b.curve_test is not None:
            ct = b.curve_test
            lines.append(f"  accounted curve ({ct.curve}): {'REJECTED' if ct.rejected else 'consistent'} with the guesses "
                         f"(p = {ct.p_value:.3g}, {ct.rule}).")
        return "\n".join(lines)


def analysis_line(e: Any, *, headline: bool = False) -> str:
    """One analysis of a canary audit in words: its figure, kind, mu, credible interval, ideal reference,
    assumption."""
    from dpaudit.attacks.canary import ANALYSIS_LABELS

    name = "fdp-dp" if e.analysis == "fdp" and e.details.get("family") == "approx-dp" else e.analysis
    label = ANALYSIS_LABELS.get(name, name)
    if e.kind == "estimate":
        fig = f"~ {e.epsilon:.3f} [{e.low:.3f}, {e.high:.3f}] (estimate, {e.confidence:g} credible interval)"
    else:
        fig = f">= {e.epsilon:.3f} (certified" + (f"; mu >= {e.mu:.3f}" if e.mu is not None else "") + ")"
    ideal = "" if e.ideal_epsilon is None else f"; ideal attack {e.ideal_epsilon:.3f}"
    why = f"; {e.assumption}" if e.assumption else ""
    tag = "headline" if headline else "for comparison"
    return f"[{tag}] {label}: epsilon {fig}{ideal}; rule: {e.rule}{why}"


MAX_NOISE_MULTIPLIER = 1e6
"""The largest noise multiplier :func:`dpsgd_noise_for_epsilon` searches (an epsilon needing more is refused)."""


def dpsgd_noise_for_epsilon(epsilon: float, *, sampling_rate: float, steps: int, delta: float, tol: float = 1e-3) -> float:
    """Smallest noise multiplier (to ``tol``, rounded up) whose RDP-accounted epsilon is <= ``epsilon``."""
    from dpaudit.accountants.events import SubsampledGaussian
    from dpaudit.accountants.rdp import RdpAccountant

    eps = check_float(epsilon, "epsilon", "dpsgd_noise_for_epsilon", low=0.0, low_open=True)

    def acc(sigma: float) -> float:
        ev = SubsampledGaussian(sampling_rate=sampling_rate, noise_multiplier=sigma, steps=steps)
        return RdpAccountant().compose(ev).get_statement(delta).epsilon

    lo, hi = 0.05, 1.0
    while acc(hi) > eps:
        lo, hi = hi, hi * 2
        if hi > MAX_NOISE_MULTIPLIER:
            raise ParameterError(f"The 'epsilon' parameter of dpsgd_noise_for_epsilon is too small to calibrate: it needs "
                                 f"a noise multiplier above {MAX_NOISE_MULTIPLIER:g} at sampling rate {sampling_rate:g}, "
                                 f"{steps} steps and delta {fmt_number(delta)}. Got {eps!r} instead.")
    while hi - lo > tol:
        mid = (lo + hi) / 2
        if acc(mid) > eps:
            lo = mid
        else:
            hi = mid
    return hi


def _account(q: float, sigma: float, steps: int, delta: float) -> float:
    """The recipe's accounted epsilon (RDP: an over-estimate, so a bound above it refutes every tighter figure)."""
    from dpaudit.accountants.events import SubsampledGaussian
    from dpaudit.accountants.rdp import RdpAccountant

    ev = SubsampledGaussian(sampling_rate=q, noise_multiplier=sigma, steps=steps)
    return float(RdpAccountant().compose(ev).get_statement(delta).epsilon)


def _check_models(mechanism: Mapping[str, Any], trials: int, *, delta: float, confidence: float, seed: int,
                  strict: bool, owner: str) -> str:
    """Before training: the smallest model count at which the ideal attack could certify epsilon > 0; a warning (or
    with ``strict`` an error) when ``trials`` is below it. Returns the note for the result."""
    import warnings

    need = min_models_for_positive_bound(mechanism, delta=delta, confidence=confidence, seed=seed)
    if need is not None and trials >= need:
        return (f"model count checked before training: the ideal attack needs about {need} models to certify a positive "
                f"epsilon at confidence {confidence:g}; this audit has {trials}.")
    what = "more than 1,000,000" if need is None else f"about {need}"
    msg = (f"The 'models' parameter of the multi-run {owner} is too small to certify any positive epsilon at confidence "
           f"{confidence:g}: even the ideal attack on the accounted mechanism needs {what} models (median of simulated "
           f"audits). Got {trials} trial models instead.")
    if strict:
        raise ParameterError(msg)
    warnings.warn(msg, UnderpoweredAuditWarning, stacklevel=3)
    return "underpowered: " + msg


def _with_multi_ideals(bound: CanaryBound, mechanism: Mapping[str, Any], n_in: int, n_out: int, *, delta: float,
                       confidence: float, replicates: int, seed: int) -> CanaryBound:
    """The ideal-attack reference under each multi-run analysis (the headline's becomes ``ideal_epsilon``)."""
    entries = []
    for e in bound.analyses:
        if e.analysis in MULTI_RUN_ANALYSES and n_in >= 2 and n_out >= 2:
            ideal = ideal_multi_run_epsilon(mechanism, n_in, n_out, delta=delta, confidence=confidence,
                                            replicates=replicates, seed=seed, analysis=e.analysis)
            e = replace(e, ideal_epsilon=ideal)
        entries.append(e)
    head = next((e.ideal_epsilon for e in entries if e.analysis == bound.analysis), None)
    return replace(bound, analyses=tuple(entries), ideal_epsilon=head)


def run_canary_audit(spec, config, X_base, y_base, X_pool, y_pool, *, audit: str, canary: str, canaries: int = 1,
                     models: int = 2, score: str | None = None, delta: float = 1e-5, confidence: float = 0.95,
                     reference_models: int = 8, seed: int = 0, device: str | None = None, out: str | Path | None = None,
                     progress: Any = False, ideal_replicates: int = 21,
                     extra_settings: Mapping[str, Any] | None = None,
                     extra_notes: tuple[str, ...] = (), analysis: str = "auto",
                     strict: bool = False) -> CanaryAuditResult:
    """Run one certified canary audit of the DP-SGD recipe ``(spec, config)`` (see the module docstring).

    ``canaries`` (one-run) is m; ``models`` (multi-run) is N >= 2. ``reference_models``: LiRA's reference models
    (one-run: trained without canaries, offline LiRA; multi-run: the first ones of the N, left out of the trials).
    ``out``: when given, ``canaries.npz`` and ``canary_audit.json`` are written there (atomically, after training).
    ``analysis``: :data:`ANALYSIS_CHOICES` (``"auto"``: fixed before the run, see :func:`one_run_with_plan`).
    Multi-run: before training, the smallest model count at which the ideal attack of the accounted mechanism could
    certify a positive epsilon is computed (:func:`~dpaudit.attacks.canary.min_models_for_positive_bound`); fewer
    models give an :class:`UnderpoweredAuditWarning` (and a note), or a ParameterError with ``strict``.
    """
    from dpaudit.training.canaries import MAX_CANARIES, DiracHook, canary_datasets, make_canaries
    from dpaudit.training.ensemble import DPSGDConfig, TrainConfig, dp_steps_per_epoch, train_ensemble

    owner = "canary audit"
    check_choice(audit, "audit", owner, ("one-run", "multi-run"))
    check_choice(canary, "canary", owner, ("mislabeled", "ood", "dirac"))
    score = default_score(canary) if score is None else score
    check_choice(score, "score", owner, SCORE_KINDS)
    if (canary == "dirac") != score.startswith("dirac"):
        raise ParameterError(f"The 'score' parameter of the {owner} must be dirac-lr|dirac-sum for Dirac canaries and "
                             f"loss|lira for input canaries. Got score={score!r} with canary={canary!r} instead.")
    delta = check_float(delta, "delta", owner, low=0.0, high=1.0, high_open=True)
    confidence = check_probability(confidence, "confidence", owner)
    seed = check_int(seed, "seed", owner, low=0)
    if audit == "one-run":
        m = check_int(canaries, "canaries", owner, low=2, high=MAX_CANARIES)
        N = 1
    else:
        m = 1
        N = check_int(models, "models", owner, low=2, high=MAX_MODELS)   # the method audits' cap, before any work
    R = check_int(reference_models, "reference_models", owner, low=0, high=MAX_MODELS)
    analysis = check_analysis(analysis, audit, owner)
    if score == "lira" and R < 2:
        raise ParameterError(f"The 'reference_models' parameter of the {owner} must be an int >= 2 for LiRA scores. Got {R} instead.")
    if score == "lira" and audit == "multi-run" and N - R < 4:
        raise ParameterError(f"The 'models' parameter of the {owner} must exceed reference_models + 3 for LiRA. Got {N} instead.")
    if not getattr(spec, "is_torch", False) or not isinstance(config, TrainConfig) or config.dp is None:
        what = "white-box (Dirac) canaries need" if canary == "dirac" else "a certified canary audit needs"
        raise ParameterError(f"The {owner}: {what} a torch model trained by DP-SGD (a recipe with dp set); this "
                             "recipe exposes no DP-SGD iterates.")
    X_base = np.asarray(X_base, dtype=np.float32)
    y_base = np.asarray(y_base).astype(np.int64)
    n = len(y_base)
    if n == 0:
        raise DataError(f"The {owner} needs a non-empty base training set.")
    if canary == "mislabeled" and m > len(X_pool):
        raise ParameterError(f"The 'canaries' parameter of the {owner} must be an int <= {len(X_pool)} (the records "
                             f"outside the training set available as mislabeled canaries). Got {m} instead.")
    rep = as_reporter(progress)
    t0 = time.perf_counter()

    q = min(1.0, config.batch_size / n)
    cfg = replace(config, dp=DPSGDConfig(config.dp.noise_multiplier, config.dp.max_grad_norm, q))
    steps = config.epochs * dp_steps_per_epoch(n, cfg)
    sigma, C = cfg.dp.noise_multiplier, cfg.dp.max_grad_norm
    mechanism = {"kind": "subsampled_gaussian", "sampling_rate": q, "noise_multiplier": sigma, "steps": int(steps)}
    notes: list[str] = list(extra_notes)
    if audit == "multi-run":
        notes.append(_check_models(mechanism, N - (R if score == "lira" else 0), delta=delta, confidence=confidence,
                                   seed=seed, strict=strict, owner=owner))
    can = make_canaries(canary, audit, num_canaries=m, num_models=N, seed=seed, spec=spec, X_pool=X_pool,
                        y_pool=y_pool, X_train=X_base)
    hook = None
    if canary == "dirac":
        hook = DiracHook(spec, can, max_grad_norm=C, noise_multiplier=sigma, seed=seed)
        datasets = [(X_base, y_base)] * N
    else:
        datasets = canary_datasets(X_base, y_base, can)
    rep.log(f"{owner}: {audit}, {canary} canaries (m = {m}), training {N} model(s) x {spec.name}, "
            f"{steps} DP-SGD steps (q = {q:.4g}, sigma = {sigma:g})")
    ens = train_ensemble(spec, datasets, cfg, seed=seed, device=device, progress=rep, canary_hook=hook)
    inc = can.included
    if canary == "dirac":
        s = dirac_scores(hook.observations(), sampling_rate=q, noise_multiplier=sigma, method=score.split("-")[1])
        notes.append("white-box: the observation is every step's noised gradient sum at the canary coordinates "
                     "(what the iterates reveal under plain SGD).")
    else:
        probs = ens.predict_proba(can.X)  # (N, m, C)
        if score == "loss":
            s = loss_scores(probs, can.y)
        elif audit == "one-run":
            rep.log(f"{owner}: training {R} LiRA reference models without canaries")
            ref = train_ensemble(spec, [(X_base, y_base)] * R, cfg, seed=seed + 1, device=device, progress=rep)
            s = lira_scores(logit_confidence(probs, can.y), logit_confidence(ref.predict_proba(can.X), can.y))
            notes.append(f"offline LiRA with {R} reference models trained without canaries.")
        else:
            lc = logit_confidence(probs, can.y)[:, 0]
            ri, ro = lc[:R][inc[:R, 0]], lc[:R][~inc[:R, 0]]
            if ri.size < 2 or ro.size < 2:
                raise DataError(f"The {owner}: the {R} LiRA reference models hold fewer than 2 models with or "
                                "without the canary; use more reference_models.")
            s = lira_scores(lc[R:, None], ro[:, None], ri[:, None])
            inc = inc[R:]
            notes.append(f"online LiRA fitted on the first {R} models, which are not counted as trials.")
    if audit == "one-run":
        bound, plan = one_run_with_plan(s[0], inc[0], mechanism, delta=delta, confidence=confidence, analysis=analysis,
                                        score=score, calibrated=False, replicates=ideal_replicates,
                                        seed=seed)
        bound = replace(bound, curve_test=accounted_curve_test(s[0], inc[0], mechanism, plan, confidence=confidence,
                                                               delta=delta))
        notes.append(plan_note(plan, ideal_replicates))
    else:
        sc = np.asarray(s).reshape(len(inc), -1)[:, 0]
        head = ("gdp" if gaussian_shaped(mechanism) and delta > 0 else "eps") if analysis == "auto" else analysis
        bound = multi_run_certified(sc, inc[:, 0], delta=delta, confidence=confidence, seed=seed, score=score,
                                    analysis=head)
        bound = _with_multi_ideals(bound, mechanism, int(inc[:, 0].sum()), int((~inc[:, 0]).sum()), delta=delta,
                                   confidence=confidence, replicates=ideal_replicates, seed=seed)
    accounted = _account(q, sigma, int(steps), delta) if delta > 0 else None
    settings = {"target": "the training recipe (retrained)", **dict(extra_settings or {}), "audit": audit, "canary": canary, "canaries": m, "models": N, "score": score, "delta": delta,
                "confidence": confidence, "seed": seed, "reference_models": R, "model": spec.to_dict(),
                "train_config": cfg.to_dict(), "num_train": n, "ideal_replicates": ideal_replicates}
    notes.append("ideal reference: median over {ideal_replicates} simulated audits of the exact likelihood-ratio test of the "
                 "Poisson-subsampled Gaussian at the accounted parameters, same trials and confidence rule.".format(
                     ideal_replicates=ideal_replicates))
    result = CanaryAuditResult(bound, accounted, mechanism, settings, round(time.perf_counter() - t0, 2), tuple(notes))
    if out is not None:
        from dpaudit.training.canaries import write_canaries

        out = Path(out)
        write_canaries(out / "canaries.npz", can)
        write_json(out / "canary_audit.json", to_dict(result))
    rep.log(result.summary())
    return result


def canary_audit_release(release, *, audit: str = "one-run", canary: str | None = None, canaries: int | None = None,
                         code: Any = None, **kwargs) -> CanaryAuditResult:
    """A certified canary audit of a release.

    ``audit="one-run"`` on a release whose bundle holds canaries: :func:`audit_release_canaries` (the released model
    itself, nothing retrained; ``canary`` / ``canaries`` are the bundle's, so other values are refused). Otherwise
    :func:`run_canary_audit` of the release's recipe: its architecture and ``train_config``, base data = its members,
    canary pool = its non-members and attacker records (``canary`` default ``"dirac"``, ``canaries`` default 1000);
    the result's notes say that the recipe, not the released weights, was audited. ``code``: see
    :func:`~dpaudit.training.release.load_release` (for a release given by path)."""
    from dpaudit.training.release import Release, load_release

    from dpaudit.training.canaries import MAX_CANARIES

    check_choice(audit, "audit", "canary audit", ("one-run", "multi-run"))
    # sizes first: a model count beyond the training layer's cap is refused before the release or its data is read
    if audit == "multi-run":
        check_int(kwargs.get("models", 2), "models", "canary audit", low=2, high=MAX_MODELS)
    if canaries is not None:
        check_int(canaries, "canaries", "canary audit", low=2, high=MAX_CANARIES)
    rel = release if isinstance(release, Release) else load_release(release, code=code)
    info = rel.canary_info
    if info is not None and audit == "one-run":
        if canary is not None and canary != info["kind"]:
            raise ParameterError(f"The 'canary' parameter of the canary audit of release {rel.path} must be the bundle's "
                                 f"kind {info['kind']!r} (its canaries are already planted). Got {canary!r} instead.")
        if canaries is not None and canaries != info["count"]:
            raise ParameterError(f"The 'canaries' parameter of the canary audit of release {rel.path} must be the "
                                 f"bundle's count {info['count']} (its canaries are already planted). Got {canaries!r} instead.")
        keep = {k: kwargs[k] for k in ("score", "delta", "confidence", "seed", "out", "progress", "ideal_replicates",
                                       "analysis") if k in kwargs}
        return audit_release_canaries(rel, **keep)
    canary = "dirac" if canary is None else canary
    canaries = 1000 if canaries is None else canaries
    spec, config = rel.spec, rel.train_config
    recipe_note: tuple[str, ...] = ()
    if rel.kind != "dpaudit":
        recipe = rel.meta["model"].get("recipe") or {}
        if not recipe.get("model") and (recipe.get("train_fn") or recipe.get("opacus")) and canary != "dirac":
            return _train_fn_canary_audit(rel, recipe, audit=audit, canary=canary, canaries=canaries, **kwargs)
        spec, config = _outside_recipe(rel, recipe, canary)
        recipe_note = (f"the bundle's recipe (model.recipe: dpaudit's {spec.name!r} with its train_config) is what "
                       "is retrained and audited, not the outside model's own training code.",)
    if config is None or config.dp is None or spec is None or not spec.is_torch:
        what = "white-box (Dirac) canaries need" if canary == "dirac" else "a certified canary audit needs"
        raise ParameterError(f"Release {rel.path}: {what} a torch model trained by DP-SGD; method "
                             f"{rel.meta.get('method')!r} exposes no DP-SGD iterates (no dp in its train_config). "
                             f"{TRAINER_ROUTE}")
    if info is None:
        note = ("the release holds no canaries (it was trained without a [canaries] table), so this audits its training "
                "recipe retrained by dpaudit with freshly planted canaries, not the released weights.")
    else:
        note = ("multi-run audits need many models: this audits the release's training recipe retrained by dpaudit; "
                "the bundle's own one-run canaries are not used (audit them with audit='one-run').")
    ds = rel.dataset()
    mem, pool = _members_and_pool(rel)
    return run_canary_audit(spec, config, ds.X[mem], ds.y[mem], ds.X[pool], ds.y[pool], audit=audit,
                            canary=canary, canaries=canaries, extra_notes=(note, *recipe_note), **kwargs)


def _members_and_pool(rel: Any) -> tuple[np.ndarray, np.ndarray]:
    """A release's training records (``members``) and the records outside them that canaries are drawn from
    (``nonmembers`` and ``attacker``, where recorded)."""
    mem = np.asarray(rel.membership["members"])
    pool = np.concatenate([np.asarray(rel.membership[k]) for k in ("nonmembers", "attacker") if k in rel.membership])
    return mem, pool


#: What works where a bundle's recipe cannot take planted canaries (said in every such error).
TRAINER_ROUTE = ("To audit your own training code, audit the trainer itself: `dpaudit audit-trainer FILE.py:train "
                 "--claim epsilon=E --claim delta=D` (white-box: its only threat model); or remake the bundle with "
                 "`dpaudit release make ... --recipe-model NAME --recipe-config FILE` whose config sets dp "
                 "(dpaudit's DP-SGD recipe, retrained with canaries).")


def _outside_recipe(rel: Any, recipe: Mapping[str, Any], canary: str) -> tuple[Any, Any]:
    """The DP-SGD recipe of an outside release (``release make``) that canaries can be planted into:
    ``model.recipe.model`` and ``model.recipe.train_config`` (``--recipe-model`` / ``--recipe-config``), its ``dp``
    set. Anything else is a ParameterError naming what the bundle holds and the routes that work."""
    from dpaudit.training.ensemble import TrainConfig
    from dpaudit.training.models import ModelSpec

    where = f"Release {rel.path}"
    what = "white-box (Dirac) canaries need" if canary == "dirac" else "a certified canary audit needs"
    if recipe.get("model"):
        spec = ModelSpec.from_dict(recipe["model"])
        config = TrainConfig.from_dict(recipe.get("train_config") or {})
        if config.dp is None or not spec.is_torch:
            raise ParameterError(f"{where}: {what} a DP-SGD recipe; the bundle's recipe (model.recipe: "
                                 f"{spec.name!r}) sets no dp in its train_config (model.recipe.train_config.dp). "
                                 f"{TRAINER_ROUTE}")
        return spec, config
    if recipe.get("train_fn") or recipe.get("opacus"):
        kind = "a training function (--train-fn)" if recipe.get("train_fn") else "an Opacus recipe (--opacus-recipe)"
        raise ParameterError(f"{where}: {what} DP-SGD iterates, which the bundle's recipe, {kind}, does not expose "
                             f"(mislabeled or ood canaries run through it: canary='mislabeled'). {TRAINER_ROUTE}")
    raise ParameterError(f"{where}: {what} a training recipe to plant canaries into; the bundle (method "
                         f"{rel.meta.get('method')!r}, model kind {rel.kind!r}) records none. {TRAINER_ROUTE}")


def _train_fn_canary_audit(rel: Any, recipe: Mapping[str, Any], *, audit: str, canary: str, canaries: int,
                           models: int = 2, score: str | None = None, delta: float = 1e-5, confidence: float = 0.95,
                           seed: int = 0, out: str | Path | None = None, progress: Any = False,
                           ideal_replicates: int = 21, analysis: str = "auto", strict: bool = False,
                           **unused: Any) -> CanaryAuditResult:
    """A black-box canary audit through an outside release's own training code (``model.recipe.train_fn``: the
    user's ``train(X, y, seed)``, digest-checked; ``model.recipe.opacus``: an Opacus ``PrivacyEngine`` recipe on the
    bundle's factory): input canaries (mislabeled / ood) included by fair coins in the members' data, each model
    trained by :meth:`~dpaudit.training.release.Release.train_fn` with its own seed, scored by its loss on the
    canaries (score fixed before the run); one-run (Steinke, Nasr & Jagielski 2023) or multi-run (Clopper-Pearson /
    Gaussian DP over the independently trained models). The mechanism for planning the rule and the ideal reference is
    the Opacus recipe's Poisson-subsampled Gaussian when the bundle records one; a user's function is planned on a
    perfect attack (valid whatever it does; the plan only affects power)."""
    from dpaudit.training.canaries import MAX_CANARIES, canary_datasets, make_canaries
    from dpaudit.training.ensemble import model_seed
    from dpaudit.training.models import ModelSpec

    owner = "canary audit"
    score = "loss" if score is None else score
    if score != "loss":
        raise ParameterError(f"The 'score' parameter of the {owner} through the bundle's training function must be "
                             f"'loss' (LiRA needs reference models of the same code). Got {score!r} instead.")
    delta = check_float(delta, "delta", owner, low=0.0, high=1.0, high_open=True)
    confidence = check_probability(confidence, "confidence", owner)
    seed = check_int(seed, "seed", owner, low=0)
    R = check_int(ideal_replicates, "ideal_replicates", owner, low=1)
    analysis = check_analysis(analysis, audit, owner)
    m = check_int(canaries, "canaries", owner, low=2, high=MAX_CANARIES) if audit == "one-run" else 1
    N = 1 if audit == "one-run" else check_int(models, "models", owner, low=2, high=MAX_MODELS)
    if rel.spec is None:
        raise ParameterError(f"Release {rel.path}: a canary audit through its training function needs a model "
                             "(a scores-only bundle has none).")
    rep = as_reporter(progress)
    t0 = time.perf_counter()
    ds = rel.dataset()
    mem, pool = _members_and_pool(rel)
    X_base, y_base = ds.X[mem], ds.y[mem]
    if canary == "mislabeled" and m > len(pool):
        raise ParameterError(f"The 'canaries' parameter of the {owner} must be an int <= {len(pool)} (the records "
                             f"outside the training set available as mislabeled canaries). Got {m} instead.")
    n = len(mem)
    mechanism: dict[str, Any] | None = None
    op = recipe.get("opacus")
    if op and op.get("poisson_sampling", True):
        B, E = int(op["batch_size"]), int(op["epochs"])
        q = min(1.0, B / n)
        mechanism = {"kind": "subsampled_gaussian", "sampling_rate": q,
                     "noise_multiplier": float(op["noise_multiplier"]), "steps": int(E * -(-n // B))}
    # input canaries need only the class count and input shape of the release's model (which may be an outside spec)
    shape_spec = ModelSpec("mlp", tuple(rel.spec.input_shape), int(rel.spec.num_classes), {})
    can = make_canaries(canary, audit, num_canaries=m, num_models=N, seed=seed, spec=shape_spec, X_pool=ds.X[pool],
                        y_pool=ds.y[pool], X_train=X_base)
    train = rel.train_fn()
    label = "its Opacus recipe" if op else "the user's training function"
    rep.log(f"{owner}: {audit}, {canary} canaries (m = {m}), training {N} model(s) with {label}")
    probs = []
    with rep.stage(f"{owner}: models trained by {label}", N) as stage:
        for i, (X, y) in enumerate(canary_datasets(X_base, y_base, can)):
            model = train(X, y, int(model_seed(seed, i) % (2**31 - 1)))
            probs.append(np.asarray(model.predict_proba(can.X), dtype=np.float64))
            stage.advance()
    s = loss_scores(np.stack(probs), can.y)
    inc = can.included
    notes = [f"black-box: {N} model(s) trained by the release's own recipe ({label}); input canaries included by "
             "fair coins, scored by the final model's loss on them (fixed before the run)."]
    if audit == "one-run":
        bound, plan = one_run_with_plan(s[0], inc[0], mechanism, delta=delta, confidence=confidence,
                                        analysis=analysis if mechanism is not None else "eps", score=score,
                                        calibrated=False, replicates=R, seed=seed,
                                        simulate=None if mechanism is not None else _perfect_attack(m))
        notes.append(plan_note(plan, R))
    else:
        sc = np.asarray(s).reshape(len(inc), -1)[:, 0]
        head = ("gdp" if mechanism is not None and gaussian_shaped(mechanism) and delta > 0 else "eps") \
            if analysis == "auto" else analysis
        bound = multi_run_certified(sc, inc[:, 0], delta=delta, confidence=confidence, seed=seed, score=score,
                                    analysis=head)
        if mechanism is not None:
            bound = _with_multi_ideals(bound, mechanism, int(inc[:, 0].sum()), int((~inc[:, 0]).sum()), delta=delta,
                                       confidence=confidence, replicates=R, seed=seed)
    st = rel.meta.get("statement") or {}
    acc = st.get("epsilon")
    accounted = float(acc) if isinstance(acc, (int, float)) and not isinstance(acc, bool) else None
    settings = {"target": f"the release's training recipe ({label}, retrained)", "release": str(rel.path),
                "audit": audit, "canary": canary, "canaries": m, "models": N, "score": score, "delta": delta,
                "analysis": analysis, "confidence": confidence, "seed": seed, "num_train": n, "ideal_replicates": R,
                "recipe": "opacus" if op else "train_fn"}
    notes.append("accounted epsilon: the release's own statement (release.json).")
    result = CanaryAuditResult(bound, accounted, mechanism or {"kind": "unknown"}, settings,
                               round(time.perf_counter() - t0, 2), tuple(notes))
    if out is not None:
        write_json(Path(out) / "canary_audit.json", to_dict(result))
    rep.log(result.summary())
    return result


def release_canary_scores(release, score: str | None = None) -> np.ndarray:
    """The ``(m,)`` scores (larger = more likely included) of the canaries planted in a release, from what the
    attacker sees alone: the released model's log-likelihood of each input canary's label (``"loss"``), or the
    white-box statistic of the noised gradient sums recorded at each Dirac canary's coordinate (``"dirac-lr"``,
    ``"dirac-sum"``). The inclusion bits (``canaries_truth.npz``) are never read here."""
    owner = "release canary scores"
    info, view = release.canary_info, release.canaries
    if info is None or view is None:
        raise ParameterError(f"Release {release.path}: it holds no canaries (trained without a [canaries] table).")
    kind = info["kind"]
    score = default_score(kind) if score is None else score
    allowed = ("dirac-lr", "dirac-sum") if kind == "dirac" else ("loss",)
    if score not in allowed:
        why = "" if kind == "dirac" else " (LiRA needs reference models; the released-model audit trains none)"
        raise ParameterError(f"The 'score' parameter of the {owner} must be one of {', '.join(map(repr, allowed))} for "
                             f"{kind} canaries{why}. Got {score!r} instead.")
    if kind != "dirac":
        return loss_scores(release.model.predict_proba(view["X"])[None], view["y"])[0]
    dp = None if release.train_config is None else release.train_config.dp
    if dp is None or dp.sampling_rate is None:
        raise DataError(f"{release.path}: Dirac canaries need the release's DP-SGD recipe with its sampling rate "
                        "(model.train_config.dp.sampling_rate in release.json).")
    return dirac_scores(view["observations"], sampling_rate=dp.sampling_rate, noise_multiplier=dp.noise_multiplier,
                        method=score.split("-")[1])[0]


def _perfect_attack(m: int) -> Any:
    """The ideal attack of a release without DP: scores = the coins (a perfect attack), fresh fair coins."""
    def simulate(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        inc = rng.random(m) < 0.5
        return inc.astype(float), inc
    return simulate


def audit_release_canaries(release, *, score: str | None = None, delta: float = 1e-5, confidence: float = 0.95,
                           seed: int = 0, out: str | Path | None = None, progress: Any = False,
                           ideal_replicates: int = 21, analysis: str = "auto") -> CanaryAuditResult:
    """Certified one-run audit of *the released model* from the canaries planted in its training data (see the
    module docstring): scores from :func:`release_canary_scores`, then the bound of
    :func:`~dpaudit.attacks.canary.one_run_certified` with the bundle's inclusion bits, its analysis and guessing
    rule planned before on the ideal attack (DP-SGD: the exact likelihood-ratio test of the subsampled Gaussian at
    the release's parameters; no DP: a perfect attack; :func:`one_run_with_plan`), beside the accounted epsilon and
    the f-DP test of the accounted curve. ``out``: ``canary_audit.json`` is written there."""
    from dpaudit.training.ensemble import dp_steps_per_epoch
    from dpaudit.training.release import Release, load_release

    owner = "canary audit"
    rel = release if isinstance(release, Release) else load_release(release)
    delta = check_float(delta, "delta", owner, low=0.0, high=1.0, high_open=True)
    confidence = check_probability(confidence, "confidence", owner)
    seed = check_int(seed, "seed", owner, low=0)
    R = check_int(ideal_replicates, "ideal_replicates", owner, low=1)
    analysis = check_analysis(analysis, "one-run", owner)
    rep = as_reporter(progress)
    t0 = time.perf_counter()
    info = rel.canary_info
    if info is None:
        raise ParameterError(f"Release {rel.path}: it holds no canaries (trained without a [canaries] table).")
    kind, m = info["kind"], int(info["count"])
    score = default_score(kind) if score is None else score
    rep.log(f"{owner}: one-run, {m} {kind} canaries planted in the released model of {rel.path}; scoring them on "
            "the released " + ("run's recorded gradient sums" if kind == "dirac" else "weights"))
    s = release_canary_scores(rel, score)      # the attacker's view only
    inc = rel.canary_truth()                   # read after scoring, for the bound alone
    cfg = rel.train_config
    notes = ["the released model itself is audited: its canaries were planted in its training data by independent "
             "fair coins, scored without the coins, and the coins used only for the bound (nothing retrained)."]
    if cfg is not None and cfg.dp is not None:
        q = cfg.dp.sampling_rate
        if q is None:
            q = min(1.0, cfg.batch_size / max(1, len(rel.membership["members"])))
        steps = int(info["steps"]) if kind == "dirac" else cfg.epochs * dp_steps_per_epoch(
            len(rel.membership["members"]), replace(cfg, dp=replace(cfg.dp, sampling_rate=q)))
        mechanism: dict[str, Any] = {"kind": "subsampled_gaussian", "sampling_rate": float(q),
                                     "noise_multiplier": cfg.dp.noise_multiplier, "steps": int(steps)}
        bound, plan = one_run_with_plan(s, inc, mechanism, delta=delta, confidence=confidence, analysis=analysis,
                                        score=score, calibrated=False, replicates=R, seed=seed)
        bound = replace(bound, curve_test=accounted_curve_test(s, inc, mechanism, plan, confidence=confidence,
                                                               delta=delta))
        accounted = _account(float(q), cfg.dp.noise_multiplier, int(steps), delta) if delta > 0 else None
        notes.append(f"ideal reference: median over {R} simulated audits of the exact likelihood-ratio test of the "
                     "Poisson-subsampled Gaussian at the release's parameters (a white-box Dirac canary on a dead "
                     "coordinate), same canaries, analysis and guessing rule.")
    else:
        mechanism = {"kind": "none"}
        bound, plan = one_run_with_plan(s, inc, None, delta=delta, confidence=confidence, analysis=analysis,
                                        score=score, calibrated=False, replicates=R, seed=seed,
                                        simulate=_perfect_attack(m))
        accounted = None
        notes.append(f"no DP mechanism (accounted epsilon: none, the claim is infinite); ideal reference: a perfect "
                     f"attack, median over {R} fair-coin draws of the bound {m} canaries can certify.")
    notes.append(plan_note(plan, R))
    if kind == "dirac":
        notes.append("white-box: the observation is every step's noised gradient sum at the canary coordinates, "
                     "recorded during the real training run.")
    settings = {"target": "the released model", "release": str(rel.path), "audit": "one-run", "canary": kind,
                "canaries": m, "canary_seed": int(info["seed"]), "models": 1, "score": score, "delta": delta,
                "analysis": analysis,
                "confidence": confidence, "seed": seed, "model": None if rel.spec is None else rel.spec.to_dict(),
                "train_config": None if cfg is None else cfg.to_dict(),
                "num_train": int(len(rel.membership["members"])), "ideal_replicates": R}
    result = CanaryAuditResult(bound, accounted, mechanism, settings, round(time.perf_counter() - t0, 2), tuple(notes))
    if out is not None:
        write_json(Path(out) / "canary_audit.json", to_dict(result))
    rep.log(result.summary())
    return result


@dataclass(frozen=True)
class CanaryAuditSpec:
    """One ``[[canary_audits]]`` entry of an audit config: a certified audit of a DP-SGD recipe on the audit's
    data set (an MLP with ``hidden`` widths trained on ``num_train`` records by DP-SGD with sampling rate
    ``batch_size / num_train``; the noise multiplier is ``noise_multiplier``, or calibrated by the RDP accountant
    so that the recipe is (``epsilon``, delta)-DP). The other records form the canary pool."""

    name: str
    audit: str = "one-run"
    canary: str = "dirac"
    canaries: int = 1000
    models: int = 200
    score: str | None = None
    epsilon: float | None = 8.0
    noise_multiplier: float | None = None
    epochs: int = 5
    batch_size: int = 50
    lr: float = 0.5
    hidden: tuple[int, ...] = (32,)
    num_train: int = 1000
    reference_models: int = 8
    analysis: str = "auto"

    def __post_init__(self) -> None:
        from dpaudit.training.canaries import MAX_CANARIES

        o = "canary_audits"
        check_name(self.name, "name", o)      # it names the audit's folder under the run directory
        check_choice(self.audit, "audit", o, ("one-run", "multi-run"))
        check_choice(self.canary, "canary", o, ("mislabeled", "ood", "dirac"))
        if self.score is not None:
            check_choice(self.score, "score", o, SCORE_KINDS)
        check_analysis(self.analysis, self.audit, o)
        if self.audit == "one-run":
            check_int(self.canaries, "canaries", o, low=2, high=MAX_CANARIES)
        else:
            check_int(self.models, "models", o, low=2, high=MAX_MODELS)
        if (self.epsilon is None) == (self.noise_multiplier is None):
            raise ParameterError(f"Canary audit {self.name!r} needs exactly one of 'epsilon' or 'noise_multiplier'. "
                                 f"Got epsilon={self.epsilon!r}, noise_multiplier={self.noise_multiplier!r} instead.")
        if self.epsilon is not None:
            check_float(self.epsilon, "epsilon", o, low=0.0, low_open=True)
        else:
            check_float(self.noise_multiplier, "noise_multiplier", o, low=0.0, low_open=True)
        check_int(self.epochs, "epochs", o, low=1, high=MAX_EPOCHS)
        check_int(self.num_train, "num_train", o, low=2, high=MAX_RECORDS)
        check_int(self.batch_size, "batch_size", o, low=1, high=self.num_train)
        check_float(self.lr, "lr", o, low=0.0, low_open=True)
        check_int(self.reference_models, "reference_models", o, low=0, high=MAX_MODELS)
        if not isinstance(self.hidden, (list, tuple)) or not self.hidden:
            raise ParameterError(f"The 'hidden' parameter of {o} must be a non-empty list of widths. Got {self.hidden!r} instead.")
        object.__setattr__(self, "hidden", tuple(check_int(h, "hidden", o, low=1, high=MAX_WIDTH) for h in self.hidden))


def run_canary_spec(spec: CanaryAuditSpec, *, dataset: str, seed: int, delta: float, confidence: float,
                    data_dir: str | None = None, device: str | None = None, out: str | Path | None = None,
                    progress: Any = False) -> CanaryAuditResult:
    """Run one :class:`CanaryAuditSpec` on ``dataset`` (the base/pool split is a seeded permutation)."""
    from dpaudit.training.data import load_dataset
    from dpaudit.training.ensemble import DPSGDConfig, TrainConfig, dp_steps_per_epoch
    from dpaudit.training.models import ModelSpec

    ds = load_dataset(dataset, data_dir=data_dir, seed=seed)
    n = spec.num_train
    if n >= len(ds):
        raise ParameterError(f"The 'num_train' parameter of canary audit {spec.name!r} must be an int < {len(ds)} (the "
                             f"records of {dataset}). Got {n} instead.")
    perm = np.random.default_rng(np.random.SeedSequence([seed, 0xCA4E])).permutation(len(ds))
    base, pool = perm[:n], perm[n:]
    X = ds.X.reshape(len(ds), -1)
    model = ModelSpec("mlp", (X.shape[1],), ds.num_classes, {"hidden": list(spec.hidden)})
    sigma = spec.noise_multiplier
    if sigma is None:
        probe = TrainConfig(epochs=spec.epochs, batch_size=spec.batch_size, dp=DPSGDConfig(1.0, 1.0))
        steps = spec.epochs * dp_steps_per_epoch(n, probe)
        sigma = dpsgd_noise_for_epsilon(spec.epsilon, sampling_rate=min(1.0, spec.batch_size / n), steps=steps,
                                        delta=delta)
    cfg = TrainConfig(epochs=spec.epochs, batch_size=spec.batch_size, optimizer="sgd", lr=spec.lr,
                      dp=DPSGDConfig(sigma, 1.0))
    result = run_canary_audit(model, cfg, X[base], ds.y[base], X[pool], ds.y[pool], audit=spec.audit,
                              canary=spec.canary, canaries=spec.canaries, models=spec.models, score=spec.score,
                              delta=delta, confidence=confidence, reference_models=spec.reference_models, seed=seed,
                              device=device, out=out, progress=progress,
                              extra_settings={"name": spec.name, "dataset": dataset}, analysis=spec.analysis)
    return result


@dataclass(frozen=True)
class ZooAudit:
    """A certified multi-run audit of one zoo pipeline: ``caught`` iff the certified bound exceeds the claim."""

    name: str
    bound: CanaryBound
    claimed_epsilon: float
    broken: bool

    __json_computed__ = ("kind", "caught")

    @property
    def kind(self) -> str:
        return self.bound.kind

    @property
    def caught(self) -> bool:
        return self.bound.epsilon > self.claimed_epsilon


def run_zoo_audit(name: str, *, trials: int = 2000, seed: int = 0, confidence: float = 0.95) -> ZooAudit:
    """Run zoo pipeline ``name`` (:mod:`dpaudit.training.zoo`) ``trials`` times and certify a lower bound on its
    epsilon (multi-run: each run is an independent trial; score = the sum of the observations the auditor watches)."""
    from dpaudit.training.zoo import run_zoo

    run = run_zoo(name, trials=trials, seed=seed)
    b = multi_run_certified(run.scores(), run.included, delta=run.delta, confidence=confidence,
                            seed=seed, score="sum")
    return ZooAudit(name, b, run.claimed_epsilon, run.broken)


METHOD_STEPS = ("privatekt-rr", "fredy-noisy-max", "proxyfl-dpsgd")


@dataclass(frozen=True)
class MethodStepAudit:
    """A certified audit of one method's own privatization function against its paper's claim."""

    name: str
    bound: CanaryBound
    claimed_epsilon: float
    accounted_epsilon: float
    params: Mapping[str, Any]

    __json_computed__ = ("kind", "refutes_claim")

    @property
    def kind(self) -> str:
        return self.bound.kind

    @property
    def refutes_claim(self) -> bool:
        return self.bound.epsilon > self.claimed_epsilon


def audit_method_step(name: str, *, trials: int = 20000, seed: int = 0, confidence: float = 0.95,
                      rounds: int = 30, samples: int = 10, classes: int = 10, epsilon: float = 5.0,
                      teachers: int = 10, gamma: float = 0.1, noise_multiplier: float = 1.0,
                      sampling_rate: float = 0.1, steps: int = 50, delta: float = 1e-5) -> MethodStepAudit:
    """Run a method's real privatization function ``trials`` times on a worst-case canary (fair coin per trial) and
    certify a lower bound on its epsilon (multi-run, threshold on a split half; pure DP, delta = 0).

    ``"privatekt-rr"``: PrivateKT's randomized response (``fl_common.rr_perturb`` with PrivateKT's keep probability
    for ``epsilon`` split over ``samples`` labels per round) of a client whose predictions are deterministic (all
    labels class 0 with the canary, class 1 without), over ``rounds`` rounds it takes part in; the observation is all
    its uploads (default 30 rounds: PrivateKT's 60 rounds at client fraction 0.5). Claim: the paper's ``epsilon``;
    accounted: ``rounds * epsilon`` (basic composition over the rounds the client reports in).
    ``"fredy-noisy-max"``: the PATE/FedKT/FREDY report-noisy-max (``common.noisy_argmax``, Laplace 1/gamma) on one
    auditor-chosen query whose ``teachers`` votes the canary controls (FedAvg makes every teacher depend on every
    record): (v + T, v) with the canary, (v, v + T) without. Claim: the paper's per-query figure ``gamma``;
    accounted: ``2 T gamma`` (sensitivity 2T).
    ``"proxyfl-dpsgd"``: ProxyFL's private gradient (``proxyfl.clip_and_noise``, one "client" per trial) over
    ``steps`` steps with Poisson rate ``sampling_rate`` and ``noise_multiplier`` (paper: sigma = C = 1), a Dirac canary
    of norm 100 C on a coordinate no other record's gradient touches, Poisson-sampled like a record; the observation is
    every step's private gradient at that coordinate (scored by the mixture likelihood ratio). Claim = accounted: the
    RDP epsilon of the subsampled Gaussian at ``delta`` -- a correct step, which the audit must not refute; the
    ideal-attack reference is reported beside it.
    """
    from dpaudit.accountants.events import rr_keep_probability
    from dpaudit.training.methods.common import noisy_argmax
    from dpaudit.training.methods.fl_common import rr_perturb

    owner = "audit_method_step"
    check_choice(name, "step", owner, METHOD_STEPS)
    N = check_int(trials, "trials", owner, low=4)
    rng = np.random.default_rng(np.random.SeedSequence([check_int(seed, "seed", owner, low=0), 0x3E7]))
    inc = rng.random(N) < 0.5
    if name == "privatekt-rr":
        R = check_int(rounds, "rounds", owner, low=1)
        K = check_int(samples, "samples", owner, low=1)
        C = check_int(classes, "classes", owner, low=2)
        eps = check_float(epsilon, "epsilon", owner, low=0.0, low_open=True)
        beta = rr_keep_probability(eps, K, C)
        labels = np.repeat(np.where(inc, 0, 1)[:, None], K, axis=1)
        score = np.zeros(N)
        for _ in range(R):  # one call per round, every trial's K labels at once (elementwise, so equal in law)
            score += (rr_perturb(labels, beta, C, rng) == 0).sum(axis=1)
        claimed, accounted = eps, R * eps
        params = {"rounds": R, "samples": K, "classes": C, "epsilon": eps, "keep_probability": beta}
    elif name == "proxyfl-dpsgd":
        import torch

        from dpaudit.accountants.events import SubsampledGaussian
        from dpaudit.accountants.rdp import RdpAccountant
        from dpaudit.training.methods.proxyfl import clip_and_noise

        q = check_float(sampling_rate, "sampling_rate", owner, low=0.0, high=1.0, low_open=True)
        sigma = check_float(noise_multiplier, "noise_multiplier", owner, low=0.0, low_open=True)
        T = check_int(steps, "steps", owner, low=1)
        n, P, C = 20, 4, 1.0
        gen = torch.Generator().manual_seed(int(rng.integers(2**62)))
        obs = np.empty((T, 1, N))
        for t in range(T):
            g = torch.randn((N, n + 1, P), generator=gen, dtype=torch.float64)
            g[:, :, 0] = 0.0
            g[:, n] = 0.0
            g[:, n, 0] = 100.0 * C                              # the canary's gradient, in the last slot
            mask = torch.from_numpy(np.concatenate([rng.random((N, n)) < q, (inc & (rng.random(N) < q))[:, None]],
                                                   axis=1).astype(np.float64))
            noise = torch.randn((N, P), generator=gen, dtype=torch.float64)
            expected = torch.full((N,), q * n, dtype=torch.float64)
            out = clip_and_noise(g, mask, C, sigma, expected, noise)
            obs[t, 0] = (out[:, 0] * q * n / (sigma * C)).numpy()
        score = dirac_scores(obs, sampling_rate=q, noise_multiplier=sigma)[0]
        ev = SubsampledGaussian(sampling_rate=q, noise_multiplier=sigma, steps=T)
        claimed = accounted = float(RdpAccountant().compose(ev).get_statement(delta).epsilon)
        params = {"sampling_rate": q, "noise_multiplier": sigma, "steps": T, "delta": delta}
        mech = {"kind": "subsampled_gaussian", "sampling_rate": q, "noise_multiplier": sigma, "steps": T}
        b = multi_run_certified(score, inc, delta=delta, confidence=confidence, seed=seed, score="dirac-lr")
        b = b.with_ideal(ideal_multi_run_epsilon(mech, int(inc.sum()), int((~inc).sum()), delta=delta,
                                                 confidence=confidence, replicates=5, seed=seed))
        return MethodStepAudit(name, b, claimed, accounted, params)
    else:
        T = check_int(teachers, "teachers", owner, low=1)
        g = check_float(gamma, "gamma", owner, low=0.0, low_open=True)
        v = 2 * T
        votes = np.zeros((N, 3))
        votes[:, 0] = v + T * inc
        votes[:, 1] = v + T * ~inc
        score = (noisy_argmax(votes, g, rng) == 0).astype(float)
        claimed, accounted = g, 2 * T * g
        params = {"teachers": T, "gamma": g}
    b = multi_run_certified(score, inc, delta=0.0, confidence=confidence, seed=seed, score="count")
    return MethodStepAudit(name, b, float(claimed), float(accounted), params)

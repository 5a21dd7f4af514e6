"""Canary scoring and certified epsilon lower bounds from canary audits, beside the ideal-attack reference.

Scores (larger = more likely included)
--------------------------------------
- :func:`loss_scores`: minus the cross-entropy of the canary's (input, label) under the model (black-box).
- :func:`lira_scores`: LiRA-style log likelihood ratio (Carlini et al. 2022) of the logit-scaled confidence
  ``log(p / (1 - p))`` under Gaussians fitted per canary on reference models that did / did not include it
  (offline: only the "out" Gaussian; the score is then its upper-tail log-likelihood, larger = more likely in).
- :func:`dirac_scores`: white-box. The observation of canary ``k`` in step ``t`` is the noised gradient sum at its
  coordinate in units of ``sigma C`` (``x_t``); an included canary adds ``mu = 1/sigma`` with probability q.
  ``method="lr"`` sums the exact per-step log likelihood ratio of that mixture, ``log(1 - q + q exp(mu x_t -
  mu^2 / 2))``, over all observed steps (the Neyman-Pearson test for a dead coordinate); ``"sum"`` is the
  plain alignment ``sum_t x_t``.

Certified bounds
----------------
- **One-run** (Steinke, Nasr, Jagielski 2023, Theorem 3 via :func:`dpaudit.attacks.bounds.one_run_audit`):
  canaries included by independent fair coins; ``k`` "in" guesses for the highest scores and ``k`` "out" guesses
  for the lowest, for each ``k`` of a grid fixed in advance; the failure probability is split over the grid
  (Bonferroni), and the largest bound is reported. Valid at confidence ``confidence`` with no further assumption
  than the coins being fair and independent of everything else.
- **Multi-run** (Jagielski et al. 2020; Nasr et al. 2021): one trial per independently trained model; the
  threshold is chosen on one half of the models and the Clopper-Pearson bound computed on the other half
  (:func:`dpaudit.attacks.bounds.epsilon_lower_bound` with ``selection="split"``), or over a fixed threshold
  list with Bonferroni.

Both are ``kind = "certified"``: with probability >= ``confidence`` over the audit's own randomness (coins,
training noise), a correct (epsilon, delta)-DP training pipeline gives a bound <= epsilon.

Every analysis of the same evidence is computed side by side (:class:`~dpaudit.attacks.results.AnalysisBound`,
through :class:`~dpaudit.attacks.auditor.CanaryScoreAuditor`): one run -- ``"eps"`` (Theorem 3), ``"fdp"`` (the f-DP
test of Mahloujifar, Melis, Chaudhuri 2025 with Gaussian-DP curves: certified mu, and an epsilon that needs a
Gaussian trade-off curve) and ``"fdp-dp"`` (the same test with (epsilon, delta) curves, no assumption); multi-run --
``"eps"``, ``"gdp"`` (certified Gaussian-DP mu from the Clopper-Pearson limits of FPR / FNR, Nasr et al. 2023) and a
Bayesian estimate (Zanella-Beguelin et al. 2023). The headline analysis and the one-run guessing rule are fixed
before the scores are seen, on simulated audits of the ideal attack (:func:`plan_one_run`), or paid for
(``analysis="both"``: Bonferroni over two analyses; rules with several guess counts: Bonferroni over them).

Ideal-attack reference
----------------------
:func:`ideal_scores` draws the exact likelihood-ratio statistic of the mechanism at its accounted parameters
(Gaussian: the output itself; Laplace with epsilon = sensitivity / scale: the output; Poisson-subsampled Gaussian over
T steps: the sum of per-step mixture log likelihood ratios of a dead-coordinate Dirac canary).
:func:`ideal_one_run_epsilon` / :func:`ideal_multi_run_epsilon` simulate the *same* audit (same trials, same
confidence rule, same threshold / guess-count selection) with those scores and report the median bound over
replicates, so a reader sees whether a small empirical bound means "private" or "too few trials". The reference is
a figure of merit (a median; a single audit may land above it), not a bound. :func:`ideal_roc` gives the test's ROC.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

import numpy as np
from scipy import special, stats

from dpaudit._io import json_number as _num
from dpaudit.attacks.auditor import (
    BayesParams,
    CanaryScoreAuditor,
    EqualGuesses,
    FixedGuesses,
    FixedThresholds,
    GuessGrid,
    PairGrid,
    SignGuesses,
    Split,
    default_fdp_family,
)
from dpaudit.attacks.bounds import epsilon_from_rates, epsilon_lower_bound
from dpaudit.attacks.results import CERTIFIED, AnalysisBound, CurveTest, HasBoundKind
from dpaudit.errors import DataError, ParameterError, check_choice, check_float, check_int, check_probability
from dpaudit.serial import JsonValue

__all__ = [
    "SCORE_KINDS",
    "CanaryBound",
    "loss_scores",
    "logit_confidence",
    "lira_scores",
    "dirac_scores",
    "ONE_RUN_ANALYSES",
    "MULTI_RUN_ANALYSES",
    "ANALYSIS_LABELS",
    "OneRunPlan",
    "one_run_k_grid",
    "one_run_analyses",
    "one_run_analysis",
    "gaussian_shaped",
    "one_run_certified",
    "plan_one_run",
    "multi_run_certified",
    "min_models_for_positive_bound",
    "plan_multi_run_threshold",
    "ideal_roc",
    "ideal_scores",
    "ideal_one_run_epsilon",
    "ideal_multi_run_epsilon",
    "soundness_one_run",
    "soundness_multi_run",
]

SCORE_KINDS = ("loss", "lira", "dirac-lr", "dirac-sum")


@dataclass(frozen=True)
class CanaryBound(HasBoundKind):
    """A certified epsilon lower bound from a canary audit.

    Attributes
    ----------
    audit : ``"one-run"`` or ``"multi-run"``
    epsilon : the lower bound (holds with probability >= ``confidence``), from the ``analysis`` chosen before the
        data was seen (see :func:`one_run_certified`)
    delta, confidence
    trials : canaries (one-run) or evaluation models (multi-run) the bound is computed on
    score : the score used (:data:`SCORE_KINDS`)
    ideal_epsilon : the ideal attack's bound at the same trials, rule and analysis (None when no mechanism was given)
    kind : ``"certified"`` (always, for this type)
    details : the rule's numbers (one-run: k_plus, k_minus, correct, ...; multi-run: threshold, FPR, FNR, ...)
    analysis : the headline's analysis (``"eps"``, ``"fdp"``, ``"fdp-dp"``; multi-run ``"eps"`` or ``"gdp"``)
    rule : the guessing rule / threshold choice that produced the headline, in words
    analyses : every analysis computed on the same evidence, side by side (each with its own kind, rule,
        assumption and ideal reference; those other than the headline are shown for comparison)
    curve_test : the f-DP test of the mechanism's accounted trade-off curve against the guesses (one-run), if run
    """

    audit: str
    epsilon: float
    delta: float
    confidence: float
    trials: int
    score: str
    ideal_epsilon: float | None = None
    kind: str = CERTIFIED
    details: Mapping[str, JsonValue] = field(default_factory=dict)
    analysis: str = "eps"
    rule: str = ""
    analyses: tuple[AnalysisBound, ...] = ()
    curve_test: CurveTest | None = None

    def with_ideal(self, ideal: float | None) -> "CanaryBound":
        """This bound with the ideal-attack reference of its headline analysis (also set on that analysis' entry)."""
        entries, done = [], False
        for e in self.analyses:
            if not done and e.analysis == self.analysis and e.ideal_epsilon is None:
                e, done = replace(e, ideal_epsilon=ideal), True
            entries.append(e)
        return replace(self, ideal_epsilon=ideal, analyses=tuple(entries))

    def analysis_bound(self, name: str) -> AnalysisBound | None:
        """The side-by-side entry of analysis ``name`` (the first one), or None."""
        return next((a for a in self.analyses if a.analysis == name), None)


# --------------------------------------------------------------------------------------------------
# scores


def _probs_labels(probs, labels, owner: str) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(probs, dtype=np.float64)
    y = np.asarray(labels).astype(np.int64).ravel()
    if p.ndim < 2 or p.shape[-2] != y.size or np.any(y < 0) or np.any(y >= p.shape[-1]):
        raise DataError(f"{owner}: 'probs' must have shape (..., m, C) with m = len(labels) = {y.size} and labels in "
                        f"[0, C). Got probs of shape {p.shape}.")
    return p, y


def loss_scores(probs, labels) -> np.ndarray:
    """``log p(label | x)`` (minus the cross-entropy), shape ``probs.shape[:-1]``; larger = more likely in."""
    p, y = _probs_labels(probs, labels, "loss_scores")
    py = np.take_along_axis(p, np.broadcast_to(y[:, None], p.shape[:-1] + (1,)), axis=-1)[..., 0]
    return np.log(np.clip(py, 1e-300, 1.0))


def logit_confidence(probs, labels) -> np.ndarray:
    """``log p_y - log(1 - p_y)`` (Carlini et al. 2022's logit scaling), shape ``probs.shape[:-1]``."""
    p, y = _probs_labels(probs, labels, "logit_confidence")
    py = np.take_along_axis(p, np.broadcast_to(y[:, None], p.shape[:-1] + (1,)), axis=-1)[..., 0]
    rest = 1.0 - py
    return np.log(np.clip(py, 1e-300, 1.0)) - np.log(np.clip(rest, 1e-300, 1.0))


def lira_scores(target, ref_out, ref_in=None, *, min_std: float = 1e-3) -> np.ndarray:
    """LiRA log likelihood ratio per canary.

    ``target``: ``(..., m)`` logit confidences of the audited model(s); ``ref_out`` / ``ref_in``: ``(R, m)`` of
    reference models without / with each canary. Online (``ref_in`` given): ``log N(s; mu_in, sd_in) -
    log N(s; mu_out, sd_out)``. Offline: ``log Phi((s - mu_out) / sd_out)`` (one-sided, larger = more likely in).
    """
    s = np.asarray(target, dtype=np.float64)
    ro = np.asarray(ref_out, dtype=np.float64)
    if ro.ndim != 2 or ro.shape[1] != s.shape[-1] or ro.shape[0] < 2:
        raise DataError(f"lira_scores: 'ref_out' must have shape (R >= 2, {s.shape[-1]}). Got {ro.shape}.")
    mo, so = ro.mean(0), np.maximum(ro.std(0, ddof=1), min_std)
    if ref_in is None:
        return special.log_ndtr((s - mo) / so)
    ri = np.asarray(ref_in, dtype=np.float64)
    if ri.ndim != 2 or ri.shape[1] != s.shape[-1] or ri.shape[0] < 2:
        raise DataError(f"lira_scores: 'ref_in' must have shape (R >= 2, {s.shape[-1]}). Got {ri.shape}.")
    mi, si = ri.mean(0), np.maximum(ri.std(0, ddof=1), min_std)
    return stats.norm.logpdf(s, mi, si) - stats.norm.logpdf(s, mo, so)


def dirac_scores(observations, *, sampling_rate: float, noise_multiplier: float, method: str = "lr") -> np.ndarray:
    """White-box scores ``(M, m)`` from per-step observations ``(T, M, m)`` in units of ``sigma C`` (NaN = model
    did not step); see the module docstring."""
    owner = "dirac_scores"
    q = check_float(sampling_rate, "sampling_rate", owner, low=0.0, high=1.0, low_open=True)
    sigma = check_float(noise_multiplier, "noise_multiplier", owner, low=0.0, low_open=True)
    check_choice(method, "method", owner, ("lr", "sum"))
    x = np.asarray(observations, dtype=np.float64)
    if x.ndim != 3:
        raise DataError(f"{owner}: 'observations' must have shape (T, M, m). Got {x.shape}.")
    seen = ~np.isnan(x)
    x = np.where(seen, x, 0.0)
    if method == "sum":
        return x.sum(axis=0)
    # mu = 1 / sigma, capped where it would overflow: beyond 1e300 the two hypotheses are separated by more than
    # any float64 observation's noise, and only the scores' order matters
    mu = min(1.0 / sigma, 1e300)
    # log(1 - q + q e^{mu x - mu^2/2}) = logaddexp(log(1-q), log q + mu (x - mu/2)); written so that a tiny sigma
    # overflows to -inf / +inf (certainly out / in), never to inf - inf = NaN
    a = math.log1p(-q) if q < 1.0 else -np.inf
    with np.errstate(over="ignore"):
        ll = np.logaddexp(a, math.log(q) + mu * (x - mu / 2.0))
    return np.where(seen, ll, 0.0).sum(axis=0)


# --------------------------------------------------------------------------------------------------
# certified bounds


def one_run_k_grid(num_canaries: int) -> tuple[int, ...]:
    """The fixed grid of guess counts k (k "in" and k "out" guesses): m/2 times 1/50, 1/20, 1/10, 1/4, 1/2, 1,
    at least 1, distinct."""
    m = check_int(num_canaries, "canaries", "one_run_k_grid", low=1)
    ks = sorted({max(1, int(round(f * m / 2))) for f in (0.02, 0.05, 0.1, 0.25, 0.5, 1.0)})
    return tuple(k for k in ks if 2 * k <= m) or (0,)


def _one_run_grid(num_canaries: int, k_grid: Sequence[int] | None) -> tuple[int, ...]:
    grid = one_run_k_grid(num_canaries) if k_grid is None else tuple(int(k) for k in k_grid)
    if not grid or any(k < 0 or 2 * k > num_canaries for k in grid):
        raise ParameterError(f"The 'k_grid' parameter of one_run_certified must be non-empty ints k with 0 <= 2k <= "
                             f"{num_canaries}. Got {grid} instead.")
    return grid


#: Analyses of a one-run audit (see :mod:`dpaudit.attacks.auditor`): ``"eps"`` Theorem 3 of Steinke et al. 2023;
#: ``"fdp"`` the f-DP test of Mahloujifar et al. 2025 with Gaussian-DP curves (the pure-DP curve at delta = 0);
#: ``"fdp-dp"`` the same test with (epsilon, delta)-DP curves (no assumption on the curve's shape).
ONE_RUN_ANALYSES = ("eps", "fdp", "fdp-dp")
#: Analyses of a multi-run audit: ``"eps"`` Clopper-Pearson on the (epsilon, delta) test; ``"gdp"`` the certified
#: Gaussian-DP mu from the Clopper-Pearson limits of FPR / FNR (and the epsilon it implies at delta).
MULTI_RUN_ANALYSES = ("eps", "gdp")

#: How each analysis is named in every output.
ANALYSIS_LABELS = {
    "eps": "(eps, delta) test: Steinke et al. 2023 Thm 3 (one run) / Clopper-Pearson (multi-run)",
    "fdp": "f-DP one-run test, Gaussian-DP curves (Mahloujifar et al. 2025)",
    "fdp-dp": "f-DP one-run test, (eps, delta)-DP curves (Mahloujifar et al. 2025)",
    "gdp": "Gaussian DP from Clopper-Pearson FPR/FNR (Nasr et al. 2023)",
    "bayes": "Bayesian posterior of (FPR, FNR) (Zanella-Beguelin et al. 2023)",
}


def _check_scores(scores, included, owner: str) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(scores, dtype=np.float64).ravel()
    inc = np.asarray(included, dtype=bool).ravel()
    # the bounds depend on the scores' order only, so +-inf (a certain guess) is a score; NaN has no order
    if s.size != inc.size or s.size < 2 or np.isnan(s).any():
        raise DataError(f"{owner}: 'scores' and 'included' must be of equal length >= 2, the scores without NaN. Got "
                        f"{s.size} and {inc.size}{' (with NaN scores)' if np.isnan(s).any() else ''}.")
    return s, inc


def one_run_analyses(delta: float) -> tuple[str, ...]:
    """The analyses computed side by side for a one-run audit at ``delta`` (at delta = 0 ``"fdp"`` already uses the
    pure-DP curves, so ``"fdp-dp"`` would repeat it)."""
    return ("eps", "fdp", "fdp-dp") if delta > 0 else ("eps", "fdp")


def gaussian_shaped(mechanism: Mapping[str, Any] | None) -> bool:
    """True for mechanisms whose trade-off curve is exactly Gaussian (the Gaussian mechanism; DP-SGD without
    subsampling): only for these may a Gaussian-DP analysis be the headline."""
    if not mechanism:
        return False
    kind = mechanism.get("kind")
    return kind == "gaussian" or (kind == "subsampled_gaussian" and float(mechanism.get("sampling_rate", 0)) >= 1.0)


def one_run_analysis(auditor: CanaryScoreAuditor, name: str, rule: Any, *, delta: float,
                     confidence: float) -> AnalysisBound:
    """One named analysis (:data:`ONE_RUN_ANALYSES`) of a one-run auditor with ``rule``."""
    check_choice(name, "analysis", "one_run_analysis", ONE_RUN_ANALYSES)
    if name == "eps":
        return auditor.one_run_eps(rule, delta=delta, confidence=confidence)
    if name == "fdp":
        return auditor.one_run_fdp(rule, delta=delta, confidence=confidence, family=default_fdp_family(delta))
    return replace(auditor.one_run_fdp(rule, delta=delta, confidence=confidence, family="approx-dp"), analysis="fdp-dp")


@dataclass(frozen=True)
class OneRunPlan:
    """How a one-run audit will analyse its guesses, fixed before the run from the ideal attack on the accounted
    mechanism (:func:`plan_one_run`): ``rules`` maps each analysis to the one guessing rule it uses (no
    Bonferroni: a single rule, chosen on simulated scores); ``analysis`` is the headline, the one of
    ``eligible`` with the largest ideal reference; ``ideal`` holds each analysis' ideal reference (median over
    fresh simulated audits with its rule)."""

    analysis: str
    rules: Mapping[str, Any]
    ideal: Mapping[str, float]
    eligible: tuple[str, ...]
    candidates: int
    replicates: int

    def describe(self, name: str) -> str:
        return f"{self.rules[name].describe()}; planned on the ideal attack before the run"

    def to_dict(self) -> dict[str, Any]:
        return {"analysis": self.analysis, "rules": {k: self.describe(k) for k in self.rules},
                "ideal": {k: _num(v) for k, v in self.ideal.items()}, "eligible": list(self.eligible),
                "candidates": self.candidates, "replicates": self.replicates}


def one_run_certified(scores, included, *, delta: float = 0.0, confidence: float = 0.95,
                      k_grid: Sequence[int] | None = None, score: str = "loss", analysis: str = "eps",
                      rule: Any = None, plan: OneRunPlan | None = None, compare: bool = True) -> CanaryBound:
    """One-run certified bound (see the module docstring) from ``m`` canary scores and their coin flips.

    ``plan`` (from :func:`plan_one_run`, made before the run): each analysis uses its planned rule and the headline
    is the planned analysis. Otherwise ``analysis`` (:data:`ONE_RUN_ANALYSES`, or ``"both"``: ``"eps"`` and
    ``"fdp-dp"`` each at level ``(1 - confidence) / 2``, the larger reported -- the choice paid for) with ``rule``
    (a guessing rule of :mod:`dpaudit.attacks.auditor`; default: equal in/out counts over ``k_grid``, dpaudit's
    earlier rule). ``compare``: also compute the other analyses, side by side (each at ``confidence``; shown for
    comparison, not chosen after the fact)."""
    owner = "one_run_certified"
    s, inc = _check_scores(scores, included, owner)
    conf = check_probability(confidence, "confidence", owner)
    d = check_float(delta, "delta", owner, low=0.0, high=1.0, high_open=True)
    auditor = CanaryScoreAuditor.from_canaries(s, inc)
    names = one_run_analyses(d)
    paid_names: tuple[str, ...] = ()
    if plan is not None:
        head, rules, level = plan.analysis, dict(plan.rules), {n: conf for n in names}
        names = tuple(n for n in names if n in rules)
    else:
        check_choice(analysis, "analysis", owner, ONE_RUN_ANALYSES + ("both",))
        if rule is None:
            grid = _one_run_grid(s.size, k_grid)
            rule = PairGrid(tuple((k, k) for k in grid)) if k_grid is not None else EqualGuesses()
        rules = {n: rule for n in names}
        if analysis == "both":
            both = ("eps", "fdp-dp") if d > 0 else ("eps", "fdp")
            level = {n: (1.0 - (1.0 - conf) / 2.0 if n in both else conf) for n in names}
            head = "both"
            paid_names = both
        else:
            if analysis == "fdp-dp" and d == 0:
                analysis = "fdp"
            head, level = analysis, {n: conf for n in names}
    if head not in ("both",) and head not in names:
        names = names + (head,)
    if not compare:
        names = tuple(n for n in names if n == head or (head == "both" and n in paid_names))
    entries = []
    for n in names:
        e = one_run_analysis(auditor, n, rules.get(n, rule), delta=d, confidence=level[n])
        if plan is not None:
            e = replace(e, rule=plan.describe(n), ideal_epsilon=plan.ideal.get(n))
        entries.append(e)
    if plan is not None and compare and not isinstance(plan.rules.get("eps"), EqualGuesses):
        earlier = auditor.one_run_eps(EqualGuesses(), delta=d, confidence=conf)
        entries.append(replace(earlier, rule=earlier.rule + "; dpaudit's rule before issue 24, for comparison"))
    if head == "both":
        paid = [e for e in entries if e.analysis in paid_names]
        best = max(paid, key=lambda e: e.epsilon)
        rule_text = f"{best.rule}; {best.analysis} chosen after the fact between {' and '.join(e.analysis for e in paid)} " \
                    f"(each at level {(1.0 - conf) / 2:g})"
        headline = best
    else:
        headline = next(e for e in entries if e.analysis == head)
        rule_text = headline.rule
    details = {**{k: v for k, v in headline.details.items()}, "rule": rule_text}
    if k_grid is not None and plan is None:
        details["k_grid"] = list(_one_run_grid(s.size, k_grid))
    return CanaryBound("one-run", float(headline.epsilon), d, conf, int(s.size), score,
                       ideal_epsilon=headline.ideal_epsilon, details=details, analysis=headline.analysis,
                       rule=rule_text, analyses=tuple(entries))


#: The totals (fractions of m) of the sign rules and of the single pairs a plan may choose.
PLAN_TOTALS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


def _plan_candidates(m: int, calibrated: bool, single_pairs: bool) -> list[Any]:
    rules: list[Any] = [EqualGuesses(), GuessGrid()]
    if calibrated:
        rules += [SignGuesses(f, 0.0) for f in PLAN_TOTALS]
    if single_pairs:
        pairs = GuessGrid(totals=PLAN_TOTALS, in_shares=(0.0, 0.25, 0.5, 0.75, 1.0)).pairs(m)
        rules += [FixedGuesses(int(a), int(b)) for a, b in pairs]
    return rules


def _rule_values(aud: CanaryScoreAuditor, name: str, rules: Sequence[Any], delta: float, alpha: float) -> np.ndarray:
    """The bound of analysis ``name`` under each rule (its pairs at ``alpha / pairs``, the best kept), vectorised
    over all the rules' pairs at once (Gaussian f-DP: mu, which orders like its epsilon)."""
    pairs = [np.asarray(r.pairs_for(aud), dtype=np.int64).reshape(-1, 2) for r in rules]
    sizes = np.array([p.shape[0] for p in pairs])
    allp = np.concatenate(pairs)
    level = np.repeat(alpha / sizes, sizes)
    kp, km = allp[:, 0], allp[:, 1]
    if name == "eps":
        vals = aud.one_run_eps_each(kp, km, delta=delta, alpha=level)
    else:
        fam = "approx-dp" if name == "fdp-dp" else default_fdp_family(delta)
        vals = aud.one_run_fdp_each(kp, km, delta=delta, alpha=level, family=fam)
    return np.maximum.reduceat(vals, np.r_[0, np.cumsum(sizes)[:-1]])


def plan_one_run(num_canaries: int, *, mechanism: Mapping[str, Any] | None = None, simulate: Any = None,
                 delta: float = 0.0, confidence: float = 0.95, calibrated: bool = False,
                 eligible: Sequence[str] | None = None, replicates: int = 11, seed: int = 0,
                 single_pairs: bool = False) -> OneRunPlan:
    """Fix, before the run, the guessing rule of each one-run analysis and the headline analysis, from the ideal
    attack: ``simulate(rng) -> (scores, included)`` (default: :func:`ideal_scores` of ``mechanism`` with fair coins).

    Candidate rules: :class:`~dpaudit.attacks.auditor.EqualGuesses` and :class:`~dpaudit.attacks.auditor.GuessGrid`
    (each paying Bonferroni over its own pairs); with ``calibrated`` (scores are log likelihood ratios, 0 the Bayes
    boundary) also :class:`~dpaudit.attacks.auditor.SignGuesses` at totals ``f m`` (f in :data:`PLAN_TOTALS`); with
    ``single_pairs`` also every single pair ``(k_plus, k_minus)`` with those totals and in-shares 0, 1/4, ..., 1 --
    the sharpest choice when the audited attack *is* the ideal one (a mechanism test), a fragile one when the real
    attack is weaker than the ideal (its best guess count is then larger). Each analysis gets the rule with the
    largest median bound over ``replicates`` simulated audits (the audit will apply that rule only, so the choice
    costs nothing); its reference is the median over ``replicates`` *fresh* simulated audits. The headline is the
    analysis of ``eligible`` (default: ``"eps"``, ``"fdp-dp"``, and ``"fdp"`` for a Gaussian-shaped ``mechanism``,
    see :func:`gaussian_shaped`; at delta = 0 ``"eps"`` and ``"fdp"``) with the largest reference. Nothing here
    looks at the audited run's scores."""
    owner = "plan_one_run"
    m = check_int(num_canaries, "canaries", owner, low=2)
    d = check_float(delta, "delta", owner, low=0.0, high=1.0, high_open=True)
    conf = check_probability(confidence, "confidence", owner)
    R = check_int(replicates, "replicates", owner, low=1, high=10_000)
    seed = check_int(seed, "seed", owner, low=0)
    if simulate is None:
        if mechanism is None:
            raise ParameterError(f"{owner} needs a 'mechanism' or a 'simulate' function. Got neither.")

        def simulate(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
            inc = rng.random(m) < 0.5
            s0, s1 = ideal_scores(mechanism, int((~inc).sum()), int(inc.sum()), rng)
            out = np.empty(m)
            out[~inc], out[inc] = s0, s1
            return out, inc

    names = one_run_analyses(d)
    if eligible is None:
        eligible = ("eps", "fdp") if d == 0 else (("eps", "fdp-dp", "fdp") if gaussian_shaped(mechanism) else
                                                  ("eps", "fdp-dp"))
    eligible = tuple(check_choice(e, "eligible", owner, names) for e in eligible)
    cands = _plan_candidates(m, calibrated, single_pairs)
    table = {n: np.zeros((R, len(cands))) for n in names}
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x91A4]))
    for r in range(R):
        sc, inc = simulate(rng)
        aud = CanaryScoreAuditor.from_canaries(sc, inc)
        for n in names:
            table[n][r] = _rule_values(aud, n, cands, d, 1.0 - conf)
    rules = {n: cands[int(np.argmax(np.median(table[n], axis=0)))] for n in names}
    fresh: dict[str, list[float]] = {n: [] for n in names}
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x91A5]))
    for _ in range(R):
        sc, inc = simulate(rng)
        aud = CanaryScoreAuditor.from_canaries(sc, inc)
        for n in names:
            fresh[n].append(one_run_analysis(aud, n, rules[n], delta=d, confidence=conf).epsilon)
    ideal = {n: float(np.median(v)) for n, v in fresh.items()}
    head = max(eligible, key=lambda n: (ideal[n], -eligible.index(n)))
    return OneRunPlan(head, rules, ideal, eligible, len(cands), R)


def multi_run_certified(scores, included, *, delta: float = 0.0, confidence: float = 0.95, seed: int = 0,
                        selection: str = "split", thresholds: Sequence[float] | None = None,
                        score: str = "loss", analysis: str = "eps", compare: bool = True,
                        gdp_fraction: float = 0.25) -> CanaryBound:
    """Multi-run certified bound from one score per independently trained model and its coin flip.

    Headline ``analysis``: ``"eps"`` (Clopper-Pearson on the (epsilon, delta) test; threshold on a split half, or
    Bonferroni over ``thresholds`` fixed in advance) or ``"gdp"`` (certified Gaussian-DP mu and its epsilon at delta:
    only for Gaussian-shaped mechanisms, delta > 0). ``compare``: side by side, the other analysis (GDP with the
    threshold chosen on ``gdp_fraction`` of the runs, when delta > 0) and the Bayesian estimate (posterior median and
    credible interval: of the Gaussian-DP mu's epsilon at the GDP threshold when delta > 0, else of the (eps, delta)
    formula at the "eps" threshold; an estimate)."""
    owner = "multi_run_certified"
    s = np.asarray(scores, dtype=np.float64).ravel()
    inc = np.asarray(included, dtype=bool).ravel()
    if s.size != inc.size or not np.all(np.isfinite(s)):
        raise DataError(f"{owner}: 'scores' and 'included' must be finite and of equal length. Got {s.size} and {inc.size}.")
    if s.size < 2:
        raise ParameterError(f"The 'models' parameter of {owner} must be an int >= 2. Got {s.size} instead.")
    if inc.sum() < 2 or (~inc).sum() < 2:
        raise DataError(f"{owner} needs at least 2 models with and 2 without the canary; got {int(inc.sum())} and "
                        f"{int((~inc).sum())} (too few models).")
    check_choice(analysis, "analysis", owner, MULTI_RUN_ANALYSES)
    d = check_float(delta, "delta", owner, low=0.0, high=1.0, high_open=True)
    if analysis == "gdp" and d == 0:
        raise ParameterError(f"The 'analysis' parameter of {owner} must be 'eps' at delta = 0 (no mu-GDP curve has a "
                             "finite epsilon there). Got 'gdp' instead.")
    check_choice(selection, "selection", owner, ("split", "bonferroni"))
    auditor = CanaryScoreAuditor(s[inc], s[~inc])
    if selection == "bonferroni":
        if thresholds is None:
            raise ParameterError(f"The 'thresholds' parameter of {owner} must be given (fixed in advance) when "
                                 "selection='bonferroni'. Got None instead.")
        strategy: Any = FixedThresholds(tuple(thresholds))
        gdp_strategy: Any = strategy
    else:
        strategy, gdp_strategy = Split(0.5, seed), Split(gdp_fraction, seed)
    b = auditor.multi_run_eps(strategy, delta=d, confidence=confidence)
    eps_entry = AnalysisBound("eps", float(b.epsilon), float(b.delta), float(b.confidence), strategy.describe(),
                              CERTIFIED, details={"threshold": b.threshold, "fpr": b.fpr, "fnr": b.fnr,
                                                  "fpr_high": b.fpr_high, "fnr_high": b.fnr_high,
                                                  "num_in": b.num_members, "num_out": b.num_nonmembers})
    entries = [eps_entry]
    if d > 0 and (compare or analysis == "gdp"):
        entries.append(auditor.multi_run_gdp(gdp_strategy, delta=d, confidence=confidence))
    if compare:
        entries.append(auditor.multi_run_bayes(gdp_strategy if d > 0 else strategy, delta=d, confidence=confidence,
                                               params=BayesParams(seed=seed)))
    head = next(e for e in entries if e.analysis == analysis)
    details = {"threshold": head.details["threshold"], "fpr": head.details["fpr"], "fnr": head.details["fnr"],
               "fpr_high": head.details["fpr_high"], "fnr_high": head.details["fnr_high"],
               "selection": b.selection if analysis == "eps" else strategy.__class__.__name__.lower(),
               "num_in": head.details["num_in"], "num_out": head.details["num_out"]}
    return CanaryBound("multi-run", float(head.epsilon), d, float(b.confidence),
                       int(head.details["num_in"] + head.details["num_out"]), score, details=details,
                       analysis=analysis, rule=head.rule, analyses=tuple(entries))


def plan_multi_run_threshold(mechanism: Mapping[str, Any], num_in: int, num_out: int, *, delta: float = 1e-5,
                             confidence: float = 0.95, replicates: int = 21, seed: int = 0) -> FixedThresholds:
    """One threshold for the multi-run Gaussian-DP analysis, fixed before the runs on the ideal attack of
    ``mechanism``: among 49 quantiles of its pooled scores (from a large simulation), the one whose certified mu
    (all ``num_in`` / ``num_out`` runs, no split) has the largest median over ``replicates`` simulated audits. Exact
    when the audited attack is the ideal one (a mechanism test); a real attack whose scores are on another scale
    should choose its threshold on a split instead."""
    owner = "plan_multi_run_threshold"
    n1 = check_int(num_in, "num_in", owner, low=2)
    n0 = check_int(num_out, "num_out", owner, low=2)
    R = check_int(replicates, "replicates", owner, low=1, high=10_000)
    rng = np.random.default_rng(np.random.SeedSequence([check_int(seed, "seed", owner, low=0), 0x7A12]))
    big0, big1 = ideal_scores(mechanism, 20_000, 20_000, rng)
    cand = np.quantile(np.concatenate([big0, big1]), np.linspace(0.02, 0.98, 49))
    table = np.zeros((R, cand.size))
    for r in range(R):
        s0, s1 = ideal_scores(mechanism, n0, n1, rng)
        aud = CanaryScoreAuditor(s1, s0)
        for j, t in enumerate(cand):
            table[r, j] = aud.multi_run_gdp(FixedThresholds((float(t),)), delta=delta, confidence=confidence).mu
    return FixedThresholds((float(cand[int(np.argmax(np.median(table, axis=0)))]),))


def min_models_for_positive_bound(mechanism: Mapping[str, Any] | None = None, *, delta: float = 0.0,
                                  confidence: float = 0.95, replicates: int = 11, seed: int = 0,
                                  max_models: int = 1_000_000) -> int | None:
    """The smallest number of models N at which a multi-run audit (threshold on a split half, Clopper-Pearson)
    could certify a positive epsilon at ``confidence``, computed before any training.

    With ``mechanism``: the smallest N (searched on 8, 16, 32, ... then halved down) at which the ideal attack's
    median bound (:func:`ideal_multi_run_epsilon`, ``replicates`` simulated audits) is positive. Without it: the
    count a *perfect* attack needs (every run separated), a floor no attack can beat. None beyond ``max_models``."""
    owner = "min_models_for_positive_bound"
    conf = check_probability(confidence, "confidence", owner)
    d = check_float(delta, "delta", owner, low=0.0, high=1.0, high_open=True)
    cap = check_int(max_models, "max_models", owner, low=8)

    if mechanism is None:
        def positive(n: int) -> bool:
            n1 = n // 2
            s = np.r_[np.ones(n1), np.zeros(n - n1)]
            inc = s > 0.5
            return epsilon_lower_bound(s[inc], s[~inc], delta=d, confidence=conf, seed=seed).epsilon > 0
    else:
        def positive(n: int) -> bool:
            return ideal_multi_run_epsilon(mechanism, n // 2, n - n // 2, delta=d, confidence=conf,
                                           replicates=replicates, seed=seed) > 0

    n = 8
    while not positive(n):
        n *= 2
        if n > cap:
            return None
    lo, hi = n // 2, n
    while hi - lo > max(1, hi // 32):
        mid = (lo + hi) // 2
        if mid >= 8 and positive(mid):
            hi = mid
        else:
            lo = mid
    return hi


# --------------------------------------------------------------------------------------------------
# the ideal attack


def ideal_roc(mechanism: Mapping[str, Any], *, grid: int = 4001, samples: int = 200_000, seed: int = 0
              ) -> tuple[np.ndarray, np.ndarray]:
    """``(fpr, tpr)`` of the exact likelihood-ratio test "in vs out" of one record, FPR increasing.

    ``mechanism``: ``{"kind": "gaussian", "mu": sensitivity / sigma}``, ``{"kind": "laplace", "epsilon":
    sensitivity / scale}``, or ``{"kind": "subsampled_gaussian", "sampling_rate": q, "noise_multiplier": sigma,
    "steps": T}`` (Monte Carlo with ``samples`` draws per hypothesis, seeded).
    """
    owner = "ideal_roc"
    kind = check_choice(mechanism.get("kind"), "kind", owner, ("gaussian", "laplace", "subsampled_gaussian"))
    if kind == "gaussian":
        mu = check_float(mechanism.get("mu"), "mu", owner, low=0.0)
        t = np.linspace(-8.0, mu + 8.0, grid)[::-1]
        return special.ndtr(-t), special.ndtr(mu - t)
    if kind == "laplace":
        eps = check_float(mechanism.get("epsilon"), "epsilon", owner, low=0.0)
        # out ~ Lap(0, 1), in ~ Lap(eps, 1); the LR is monotone in x, so tests are x >= t
        t = np.linspace(-30.0, eps + 30.0, grid)[::-1]
        return stats.laplace.sf(t), stats.laplace.sf(t - eps)
    q = check_float(mechanism.get("sampling_rate"), "sampling_rate", owner, low=0.0, high=1.0, low_open=True)
    sigma = check_float(mechanism.get("noise_multiplier"), "noise_multiplier", owner, low=0.0, low_open=True)
    T = check_int(mechanism.get("steps"), "steps", owner, low=1)
    n = check_int(samples, "samples", owner, low=100)
    rng = np.random.default_rng(np.random.SeedSequence([check_int(seed, "seed", owner, low=0), 0x1DEA]))
    mu = 1.0 / sigma
    a = math.log1p(-q) if q < 1.0 else -np.inf
    out = np.zeros(n)
    inn = np.zeros(n)
    chunk = max(1, 4_000_000 // n)
    for s in range(0, T, chunk):
        w = min(chunk, T - s)
        x0 = rng.standard_normal((w, n))
        x1 = rng.standard_normal((w, n)) + mu * (rng.random((w, n)) < q)
        out += np.logaddexp(a, math.log(q) + mu * x0 - mu * mu / 2).sum(0)
        inn += np.logaddexp(a, math.log(q) + mu * x1 - mu * mu / 2).sum(0)
    thr = np.unique(np.concatenate([out, inn]))[::-1]
    out.sort()
    inn.sort()
    fpr = 1.0 - np.searchsorted(out, thr, side="left") / n
    tpr = 1.0 - np.searchsorted(inn, thr, side="left") / n
    return fpr, tpr


def ideal_scores(mechanism: Mapping[str, Any], num_out: int, num_in: int, rng: np.random.Generator
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Scores of the exact likelihood-ratio test (any increasing transform of it) for ``num_out`` trials without
    and ``num_in`` trials with the record, drawn from the mechanism (see :func:`ideal_roc` for ``mechanism``)."""
    owner = "ideal_scores"
    kind = check_choice(mechanism.get("kind"), "kind", owner, ("gaussian", "laplace", "subsampled_gaussian"))
    if kind == "gaussian":
        mu = check_float(mechanism.get("mu"), "mu", owner, low=0.0)
        return rng.standard_normal(num_out), rng.standard_normal(num_in) + mu
    if kind == "laplace":
        eps = check_float(mechanism.get("epsilon"), "epsilon", owner, low=0.0)
        return rng.laplace(size=num_out), rng.laplace(size=num_in) + eps
    q = check_float(mechanism.get("sampling_rate"), "sampling_rate", owner, low=0.0, high=1.0, low_open=True)
    sigma = check_float(mechanism.get("noise_multiplier"), "noise_multiplier", owner, low=0.0, low_open=True)
    T = check_int(mechanism.get("steps"), "steps", owner, low=1)
    x0 = rng.standard_normal((T, 1, num_out))
    with np.errstate(over="ignore"):     # sigma below ~1e-308: the shift is +inf, the record certainly visible
        x1 = rng.standard_normal((T, 1, num_in)) + (rng.random((T, 1, num_in)) < q) / sigma
    f = lambda x: dirac_scores(x, sampling_rate=q, noise_multiplier=sigma)[0]  # noqa: E731
    return f(x0), f(x1)


def _replicate(fn, replicates: int, seed: int) -> float:
    r = check_int(replicates, "replicates", "ideal reference", low=1)
    rng = np.random.default_rng(np.random.SeedSequence([check_int(seed, "seed", "ideal reference", low=0), 0x1DEB]))
    return float(np.median([fn(rng) for _ in range(r)]))


def ideal_multi_run_epsilon(mechanism: Mapping[str, Any], num_in: int, num_out: int, *, delta: float = 0.0,
                            confidence: float = 0.95, replicates: int = 21, seed: int = 0,
                            analysis: str = "eps", gdp_fraction: float = 0.25) -> float:
    """Median, over ``replicates`` simulated audits, of the multi-run bound that the exact likelihood-ratio test of
    ``mechanism`` certifies with ``num_in`` / ``num_out`` trials: ``analysis="eps"`` the split-half Clopper-Pearson
    rule, ``"gdp"`` the Gaussian-DP epsilon (threshold on ``gdp_fraction`` of the runs)."""
    n1 = check_int(num_in, "num_in", "ideal_multi_run_epsilon", low=2)
    n0 = check_int(num_out, "num_out", "ideal_multi_run_epsilon", low=2)
    check_choice(analysis, "analysis", "ideal_multi_run_epsilon", MULTI_RUN_ANALYSES)

    def one(rng):
        s0, s1 = ideal_scores(mechanism, n0, n1, rng)
        split_seed = int(rng.integers(2**31))
        if analysis == "gdp":
            return CanaryScoreAuditor(s1, s0).multi_run_gdp(Split(gdp_fraction, split_seed), delta=delta,
                                                             confidence=confidence).epsilon
        return epsilon_lower_bound(s1, s0, delta=delta, confidence=confidence, seed=split_seed).epsilon

    return _replicate(one, replicates, seed)


def ideal_one_run_epsilon(mechanism: Mapping[str, Any], num_canaries: int, *, delta: float = 0.0,
                          confidence: float = 0.95, k_grid: Sequence[int] | None = None, replicates: int = 21,
                          seed: int = 0, analysis: str = "eps", rule: Any = None) -> float:
    """Median, over ``replicates`` simulated one-run audits with ``num_canaries`` fair-coin canaries, of the bound
    that the exact likelihood-ratio test of ``mechanism`` certifies with the rule of :func:`one_run_certified`
    (``rule``, default: equal in/out counts over ``k_grid``) under ``analysis``."""
    m = check_int(num_canaries, "canaries", "ideal_one_run_epsilon", low=2)

    def one(rng):
        inc = rng.random(m) < 0.5
        s0, s1 = ideal_scores(mechanism, int((~inc).sum()), int(inc.sum()), rng)
        s = np.empty(m)
        s[~inc], s[inc] = s0, s1
        return one_run_certified(s, inc, delta=delta, confidence=confidence, k_grid=k_grid, analysis=analysis,
                                 rule=rule, compare=False).epsilon

    return _replicate(one, replicates, seed)


# --------------------------------------------------------------------------------------------------
# soundness checks on mechanisms with known epsilon (used by the tests and bench/bench_canary.py)


def soundness_one_run(epsilon: float, num_canaries: int, runs: int, *, k_grid: Sequence[int] | None = None,
                      seed: int = 0) -> np.ndarray:
    """One-run bounds of ``runs`` audits of epsilon-DP randomized response on each canary's coin (pure DP, exact
    epsilon): a correct certified bound exceeds ``epsilon`` in at most 1 - confidence of the runs."""
    eps = check_float(epsilon, "epsilon", "soundness_one_run", low=0.0)
    m = check_int(num_canaries, "canaries", "soundness_one_run", low=2)
    rng = np.random.default_rng(np.random.SeedSequence([check_int(seed, "seed", "soundness_one_run", low=0), 0x5011]))
    p = math.exp(eps) / (1.0 + math.exp(eps))
    out = np.empty(check_int(runs, "runs", "soundness_one_run", low=1))
    for r in range(out.size):
        inc = rng.random(m) < 0.5
        o = np.where(rng.random(m) < p, inc, ~inc) + 1e-6 * rng.random(m)
        out[r] = one_run_certified(o, inc, k_grid=k_grid).epsilon
    return out


def soundness_multi_run(mu: float, num_models: int, runs: int, *, seed: int = 0) -> tuple[int, np.ndarray]:
    """``(failures, bounds)`` of ``runs`` multi-run audits of the Gaussian mechanism (``mu`` = sensitivity / sigma)
    on one bit; a failure is a bound above the epsilon of the chosen threshold's exact (FPR, FNR), which is <= the
    mechanism's epsilon: a correct certified bound fails in at most 1 - confidence of the runs."""
    n = check_int(num_models, "models", "soundness_multi_run", low=4)
    rng = np.random.default_rng(np.random.SeedSequence([check_int(seed, "seed", "soundness_multi_run", low=0), 0x5012]))
    fails, vals = 0, np.empty(check_int(runs, "runs", "soundness_multi_run", low=1))
    for r in range(vals.size):
        inc = rng.random(n) < 0.5
        x = inc * mu + rng.standard_normal(n)
        b = multi_run_certified(x, inc, seed=r)
        t = b.details["threshold"]
        fails += int(b.epsilon > float(epsilon_from_rates(special.ndtr(-t), special.ndtr(t - mu))))
        vals[r] = b.epsilon
    return fails, vals

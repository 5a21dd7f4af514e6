"""A strong final-model (black-box) audit of DP-SGD: worst-case initial parameters and a crafted canary, many models.

The audited mechanism is DP-SGD on a ``num_records`` sample of scikit-learn's digits (softmax regression, clipping
norm ``C``, ``steps`` full-batch steps: sampling rate 1, every record in every step), with the noise multiplier
calibrated so that the run is (``epsilon``, ``delta``)-DP under add/remove of one record. The auditor

1. picks the initialisation (:func:`dpaudit.training.worst_case.worst_case_init`: pre-trained on the base data, the
   weights of the always-zero pixels and the biases set to zero; Annamalai & De Cristofaro, NeurIPS 2024: DP-SGD's
   guarantee holds for any fixed initialisation) and a crafted canary on those pixels
   (:func:`~dpaudit.training.worst_case.crafted_canary`, its gradient always clipped to ``C``);
2. draws one fair coin per model and trains ``models`` models at once, model ``i`` on the base data plus the canary iff
   its coin says so (:func:`~dpaudit.training.worst_case.train_final_models`);
3. scores each *final* model from its class probabilities on the canary and on an all-zero input
   (:func:`dpaudit.attacks.final_model.centered_log_prob_scores`, fixed before the run), in units of the score's
   standard deviation without the canary (known from the recipe before the run: ``lr / n * sigma * C * ||x_c|| *
   sqrt(steps (1 - 1/K))``);
4. certifies with the multi-run analyses of :func:`dpaudit.attacks.canary.multi_run_certified` at a threshold fixed
   before the runs on the ideal attack (:func:`~dpaudit.attacks.canary.plan_multi_run_threshold`): ``"gdp"`` (the
   headline: Clopper-Pearson limits of the false-positive and false-negative rates read as a certified Gaussian-DP mu,
   and its epsilon at ``delta``) beside ``"eps"`` (the Clopper-Pearson (epsilon, delta) test at the same threshold,
   no assumption) and the Bayesian estimate.

What each figure needs: the certified mu and the ``eps`` figure need only the fair coins and independent training
runs. The ``gdp`` epsilon also needs the mechanism's trade-off curve to be Gaussian, which full-batch DP-SGD's is
exactly (a composition of Gaussian mechanisms: mu = sqrt(steps) / sigma; Dong, Roth & Su 2022), so it is the headline
here as dpaudit makes it for any Gaussian-shaped mechanism (:func:`~dpaudit.attacks.canary.gaussian_shaped`); an
implementation that is not what it claims may not have a Gaussian curve, and then only mu and ``eps`` refute it.
DP-SGD's step divides the noised sum by ``q n`` of each model's own data set (``n`` or ``n + 1`` records): the models
with the canary are scaled by ``n / (n + 1)``, a difference far below what the audit can resolve (said in the notes).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

import numpy as np

from dpaudit.errors import ParameterError, check_float, check_int, check_probability
from dpaudit.progress import as_reporter
from dpaudit.training.limits import MAX_MODELS

__all__ = ["FinalModelAudit", "final_model_audit", "gaussian_mu_for_epsilon", "MAX_FINAL_MODEL_STEPS"]

#: The most full-batch steps :func:`final_model_audit` runs (each costs one pass over the data per model).
MAX_FINAL_MODEL_STEPS = 10_000


@dataclass(frozen=True)
class FinalModelAudit:
    """A final-model audit's certified bound (:class:`~dpaudit.attacks.canary.CanaryBound`, its analyses side by
    side) beside the accounted epsilon of the run's recipe, the Gaussian-DP mu the noise was calibrated to, the
    ideal attack's median bound under the same rule, the settings and the notes (assumptions, caveats)."""

    bound: Any
    accounted_epsilon: float
    mu: float | None
    ideal_epsilon: float | None
    settings: Mapping[str, Any]
    elapsed_seconds: float
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: each model's standardised score (``(models,)``, N(0, 1) without the canary when the recipe is what it says) and
    #: its coin
    scores: np.ndarray | None = None
    included: np.ndarray | None = None

    @property
    def ratio(self) -> float:
        """Certified / accounted epsilon."""
        return float(self.bound.epsilon) / self.accounted_epsilon if self.accounted_epsilon > 0 else math.nan

    def summary(self) -> str:
        b = self.bound
        ideal = "–" if self.ideal_epsilon is None else f"{self.ideal_epsilon:.3f}"
        lines = [f"final-model audit (worst-case init, crafted canary, {self.settings['models']} models): certified "
                 f"epsilon >= {b.epsilon:.3f} ({b.analysis}) at confidence {b.confidence:g}, delta {b.delta:g}; accounted "
                 f"epsilon {self.accounted_epsilon:.3f} (ratio {self.ratio:.2f}); ideal attack under the same rule "
                 f"{ideal}; {self.elapsed_seconds:.1f} s."]
        for e in b.analyses:
            kind = "estimate" if e.kind == "estimate" else "certified"
            mu = "" if e.mu is None else f", mu >= {e.mu:.3f}"
            lines.append(f"  {e.analysis}: epsilon {e.epsilon:.3f} ({kind}{mu}){'; ' + e.assumption if e.assumption else ''}")
        return "\n".join(lines)


def gaussian_mu_for_epsilon(epsilon: float, delta: float) -> float:
    """The Gaussian-DP mu whose exact (epsilon, delta) curve (Balle & Wang 2018) gives ``epsilon`` at ``delta``
    (bisection to 1e-12 relative, rounded down: a mechanism calibrated to it is (epsilon, delta)-DP)."""
    from dpaudit.accountants.closed_form import gaussian_mechanism_epsilon

    eps = check_float(epsilon, "epsilon", "gaussian_mu_for_epsilon", low=0.0, low_open=True, high=1000.0)
    d = check_probability(delta, "delta", "gaussian_mu_for_epsilon")
    lo, hi = 0.0, 1.0
    while gaussian_mechanism_epsilon(hi, d) < eps:
        lo, hi = hi, hi * 2
    while hi - lo > 1e-12 * hi:
        mid = (lo + hi) / 2
        if gaussian_mechanism_epsilon(mid, d) > eps:
            hi = mid
        else:
            lo = mid
    return lo


def _noise_for(epsilon: float, n: int, B: int, T: int, delta: float) -> float:
    """The smallest noise multiplier (relative tolerance 1e-3, rounded up) at which dpaudit's DP-SGD accounting of
    ``T`` Poisson-sampled steps at rate ``B / n`` gives at most ``epsilon``."""
    from dpaudit.accountants.dpsgd import account_dpsgd

    def eps(sig: float) -> float:
        return float(account_dpsgd(dataset_size=n, batch_size=B, noise_multiplier=sig, steps=T, delta=delta,
                                   lower_bound=False).epsilon)

    lo, hi = 0.3, 1.0
    while eps(hi) > epsilon:
        lo, hi = hi, hi * 2
        if hi > 1e4:
            raise ParameterError(f"The 'epsilon' parameter of final_model_audit is too small to calibrate at q = {B / n:g} "
                                 f"and {T} steps. Got {epsilon!r} instead.")
    while hi - lo > 1e-3 * hi:
        mid = (lo + hi) / 2
        if eps(mid) > epsilon:
            lo = mid
        else:
            hi = mid
    return hi


def _ideal_fixed(mu: float, threshold: float, n_in: int, n_out: int, *, delta: float, confidence: float,
                 replicates: int, seed: int) -> float:
    """Median over ``replicates`` simulated audits of the exact test of N(0, 1) vs N(mu, 1) at the planned
    threshold: the GDP epsilon the ideal attack certifies under this audit's rule."""
    from dpaudit.attacks.auditor import CanaryScoreAuditor, FixedThresholds
    from dpaudit.attacks.canary import ideal_scores

    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xF1A1]))
    vals = []
    for _ in range(replicates):
        s0, s1 = ideal_scores({"kind": "gaussian", "mu": mu}, n_out, n_in, rng)
        vals.append(CanaryScoreAuditor(s1, s0).multi_run_gdp(FixedThresholds((threshold,)), delta=delta,
                                                             confidence=confidence).epsilon)
    return float(np.median(vals))


def final_model_audit(*, epsilon: float = 10.0, delta: float = 1e-5, num_records: int = 1000, models: int = 1000,
                      steps: int = 10, lr: float = 0.1, max_grad_norm: float = 1.0, canary_norm: float = 100.0,
                      confidence: float = 0.95, seed: int = 0, ideal_replicates: int = 11, init_epochs: int = 30,
                      sampling_rate: float = 1.0, progress: Any = False) -> FinalModelAudit:
    """Run the audit of the module docstring and return its :class:`FinalModelAudit`. ``seed`` fixes the data
    sample, the coins, the initialisation and the training noise; the same seed gives the same numbers.
    ``ideal_replicates``: simulated audits of the ideal attack, both for planning the threshold (before the runs) and
    for the ideal reference. ``sampling_rate`` q < 1: Poisson-subsampled DP-SGD instead (``steps`` a multiple of
    ``round(1 / q)``), noise calibrated by dpaudit's accountant; its final model is not a Gaussian mechanism, so the
    headline is the assumption-free ``eps`` analysis with its threshold chosen on a split half (no ideal reference)."""
    from dpaudit.accountants.dpsgd import account_dpsgd
    from dpaudit.attacks.canary import multi_run_certified, plan_multi_run_threshold
    from dpaudit.attacks.final_model import centered_log_prob_scores
    from dpaudit.training.data import load_dataset
    from dpaudit.training.ensemble import DPSGDConfig, TrainConfig
    from dpaudit.training.worst_case import (crafted_canary, dead_coordinates, softmax_regression_spec,
                                             train_final_models, worst_case_init)

    owner = "final_model_audit"
    epsilon = check_float(epsilon, "epsilon", owner, low=0.0, low_open=True, high=100.0)
    delta = check_float(delta, "delta", owner, low=0.0, high=1.0, low_open=True, high_open=True)
    N = check_int(models, "models", owner, low=4, high=MAX_MODELS)
    T = check_int(steps, "steps", owner, low=1, high=MAX_FINAL_MODEL_STEPS)
    lr = check_float(lr, "lr", owner, low=0.0, low_open=True, high=1e3)
    C = check_float(max_grad_norm, "max_grad_norm", owner, low=0.0, low_open=True, high=1e6)
    norm = check_float(canary_norm, "canary_norm", owner, low=0.0, low_open=True, high=1e6)
    confidence = check_probability(confidence, "confidence", owner)
    seed = check_int(seed, "seed", owner, low=0)
    R = check_int(ideal_replicates, "ideal_replicates", owner, low=1, high=1000)
    q = check_float(sampling_rate, "sampling_rate", owner, low=0.0, low_open=True, high=1.0)
    rep = as_reporter(progress)
    t0, c0 = time.perf_counter(), time.process_time()

    ds = load_dataset("digits", seed=0)
    n = check_int(num_records, "num_records", owner, low=10, high=len(ds) - 1)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xF1A0]))
    idx = np.sort(rng.permutation(len(ds))[:n])
    X, y = ds.X[idx], ds.y[idx]
    K = int(ds.num_classes) if hasattr(ds, "num_classes") else int(np.max(ds.y)) + 1
    spec = softmax_regression_spec(X.shape[1:], K)
    dead = dead_coordinates(X)
    canary_x = crafted_canary(X.shape[1:], dead, norm=norm)
    canary_y = 0

    full = q >= 1.0
    if full:
        B, spe = n, 1
        mu: float | None = gaussian_mu_for_epsilon(epsilon, delta)
        sigma = math.sqrt(T) / mu
    else:
        B = max(1, int(round(q * n)))
        q = B / n
        spe = max(1, int(round(1.0 / q)))
        if T % spe:
            raise ParameterError(f"The 'steps' parameter of {owner} must be a multiple of {spe} (one epoch at sampling "
                                 f"rate {q:g}). Got {T} instead.")
        mu, sigma = None, _noise_for(epsilon, n, B, T, delta)
    acc = account_dpsgd(dataset_size=n, batch_size=B, noise_multiplier=sigma, steps=T, delta=delta)
    accounted = float(acc.epsilon)

    included = rng.random(N) < 0.5
    n_in, n_out = int(included.sum()), int((~included).sum())
    if n_in < 2 or n_out < 2:
        raise ParameterError(f"The 'models' parameter of {owner} gave {n_in} models with and {n_out} without the "
                             f"canary; at least 2 of each are needed (use more models). Got {N} instead.")
    # fixed before any model is trained: the threshold on the standardised score, from the ideal attack at mu
    threshold = None if mu is None else float(plan_multi_run_threshold(
        {"kind": "gaussian", "mu": mu}, n_in, n_out, delta=delta, confidence=confidence, replicates=R,
        seed=seed).thresholds[0])
    scale = lr / (q * n) * sigma * C * norm * math.sqrt(T * (1.0 - 1.0 / K))

    rep.log(f"{owner}: {N} softmax-regression models on {n} digits records, {T} DP-SGD steps at q = {q:g} "
            f"(sigma {sigma:.4g}, C {C:g}, accounted epsilon {accounted:.4g} at delta {delta:g}); canary on "
            f"{dead.size} always-zero pixels")
    init = worst_case_init(spec, X, y, dead, seed=seed, epochs=init_epochs)
    config = TrainConfig(epochs=T // spe, batch_size=B, optimizer="sgd", lr=lr,
                         dp=DPSGDConfig(sigma, C, 1.0 if full else q))
    ens = train_final_models(spec, X, y, canary_x, canary_y, included, config, init_state=init, seed=seed,
                             progress=rep)
    probe = np.concatenate([canary_x, np.zeros_like(canary_x)])
    probs = ens.predict_proba(probe)                                   # (N, 2, K): the attacker's black-box view
    s = centered_log_prob_scores(probs[:, :1], probs[:, 1:], np.array([canary_y]))[:, 0] / scale
    if mu is not None and threshold is not None:
        bound = multi_run_certified(s, included, delta=delta, confidence=confidence, seed=seed, selection="bonferroni",
                                    thresholds=(threshold,), score="crafted-logit", analysis="gdp")
        ideal: float | None = _ideal_fixed(mu, threshold, n_in, n_out, delta=delta, confidence=confidence,
                                           replicates=R, seed=seed)
        bound = replace(bound, ideal_epsilon=ideal)
        rule = (f"threshold fixed before the runs on the ideal attack (Gaussian, mu = {mu:.4f}): {threshold:.4f}; one "
                "threshold, so no multiple-testing correction.")
    else:
        bound = multi_run_certified(s, included, delta=delta, confidence=confidence, seed=seed, selection="split",
                                    score="crafted-logit", analysis="eps")
        ideal = None
        rule = (f"sampling rate {q:g}: the final model sums the steps that drew the canary, not a Gaussian mechanism; "
                "headline: the (epsilon, delta) test with its threshold chosen on a split half (gdp beside it needs a "
                "Gaussian curve, which this mechanism has only approximately).")
    notes = (
        "worst-case initial parameters (Annamalai & De Cristofaro 2024): softmax regression pre-trained without DP "
        "on the base data, the weights of the always-zero pixels and the biases set to zero; the same fixed "
        "initialisation for every model, as DP-SGD's guarantee allows.",
        "crafted canary: all its mass on the always-zero pixels (norm "
        f"{norm:g}), label {canary_y}; score fixed before the run: the centred log-probability of its label on the "
        "canary minus on an all-zero input (black-box: two queries of each final model), in units of its standard "
        "deviation without the canary.",
        rule,
        "the gdp epsilon needs a Gaussian trade-off curve: exact for full-batch DP-SGD (a composition of Gaussian "
        "mechanisms); the certified mu and the eps analysis need only the coins and independent runs.",
        f"DP-SGD divides each model's noised sum by its own data set size ({n} or {n + 1}): the models with the canary "
        "are scaled by n / (n + 1), far below what the audit resolves.",
        f"accounted epsilon: dpaudit's account_dpsgd at q = {q:g}, {T} steps, sigma {sigma:.6g} "
        f"({acc.headline_route})" + (f"; the exact Gaussian-DP figure is {epsilon:g}." if full else "."),
    )
    settings: dict[str, Any] = {"epsilon_target": epsilon, "delta": delta, "num_records": n, "models": N, "steps": T, "lr": lr,
                "max_grad_norm": C, "noise_multiplier": sigma, "canary_norm": norm, "dead_pixels": dead.tolist(),
                "confidence": confidence, "seed": seed, "threshold": threshold, "ideal_replicates": R,
                "init_epochs": init_epochs, "models_in": n_in, "models_out": n_out, "sampling_rate": q}
    settings["cpu_seconds"] = round(time.process_time() - c0, 2)
    return FinalModelAudit(bound, accounted, mu, ideal, settings, round(time.perf_counter() - t0, 2), notes,
                           scores=s, included=included)

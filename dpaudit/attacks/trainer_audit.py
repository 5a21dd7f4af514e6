"""White-box audit of a recorded DP-SGD run: what the loop really ran, and how much it leaks.

The evidence is what :class:`dpaudit.training.audit_hook.AuditHook` records in a user's own training loop: per step
``t`` the dataset indices of the batch, the privatised gradient at each of ``m`` Dirac canary coordinates
(``canary_obs`` (T, m)) and at ``P`` probe coordinates no canary touches (``probe_obs`` (T, P)); canary ``j`` is a
record of the data set when its fair coin says so (``canary_index[j] >= 0``). The analyses (5 needs no record: the
final-model threat model):

1. **The sampler as it ran** (:func:`identify_sampler`): shuffled batches (every index exactly once per epoch),
   fixed-size batches, Poisson (batch sizes vary, consistent with Binomial(N, q); q's Clopper-Pearson lower limit),
   full batch, or unknown; the step count T.

2. **The recorded mechanism** (:func:`estimate_noise`, :func:`recorded_lower_bound`): per step, the probes' root
   mean square ``r_t`` estimates the noise standard deviation ``n_t`` (real gradients on the probes can only inflate
   it); the canaries' observations in units of ``r_t`` have mean ``a_t / n_t`` in a batch that holds them (``a_t``:
   the canary's contribution after the user's clipping and scaling) and 0 otherwise. The per-step difference of
   the in-batch and out-of-batch means, averaged over steps with a one-sided t limit and corrected for the bias of
   ``1 / r_t`` (exactly: E[n / r] for a chi distribution with P degrees of freedom), gives an upper confidence
   limit on the effective noise multiplier ``sigma_eff = n_t / a_t``. The certified lower bound of the explicit
   pair of neighbouring data sets (:func:`dpaudit.accountants.pairs.dpsgd_lower_bound`) of DP-SGD with the
   identified sampler, T steps and that sigma is then a lower bound on the epsilon of the loop **if** the loop is a
   subsampled Gaussian mechanism of that form: Gaussian noise, independent per step, of a scale proportional to the
   canary's signal, the sampler identified. It is labelled *analytic* (parametric) in every output: its confidence
   holds under those assumptions (checked by simulation on exact mechanisms in the tests), not for any mechanism.
   This is the Gaussian-DP white-box audit of Nasr et al. 2023 ("Tight Auditing of Differentially Private Machine
   Learning"), with the per-step statistics pooled over the steps of **one** run and the subsampling of the
   canaries by the loop's own sampler kept in the accounting (a canary in every step would be compared with a
   mechanism without amplification).

3. **Certified one-run audit** (:func:`certified_one_run`): a score per canary from the released observations
   only (never from its batch membership, which the mechanism does not release): the exact likelihood ratio of
   the subsampled Gaussian at the *claimed* recipe's rate and noise multiplier (fixed before the run), or the plain
   sum of normalised observations without a recipe; where the probes show that the noise is not drawn afresh each
   step (consecutive observations nearly equal), the largest step-to-step jump in units of the probes' jumps. Fed to
   :func:`dpaudit.attacks.canary.one_run_certified` (Steinke, Nasr & Jagielski 2023, Theorem 3, and the f-DP test):
   **certified** with no assumption beyond the fair coins.

4. **Input canaries over several runs** (:func:`input_canary_design`, :func:`input_canary_scores`,
   :func:`certified_input_canaries`): a leak that does not pass through one record's clipped gradient -- a
   normalisation of the inputs with the training set's own mean and standard deviation, canaries included -- is
   invisible to Dirac gradient canaries, whose contribution the user's clipping bounds. An input canary is a record
   whose feature ``j`` lies ``extreme`` standard deviations above the real mean (its other features at the real
   mean, its label random): one canary per non-constant feature, each in the data by a fair coin. When canary ``j``
   is in and the loop standardises with the training set's statistics, feature ``j``'s standard deviation explodes
   and every real record's normalised feature ``j`` is about 0, so the real records' gradients on the first-layer
   weights of feature ``j`` vanish for the whole run. The score, fixed before any run: minus the log squared norm
   of the first-layer slice of feature ``j`` summed over the run's recorded updates (low energy: guess "in"). The
   guessing rule, also fixed in advance (:data:`INPUT_CANARY_RULE`): "out" on the ``0.2 m`` lowest scores (an
   energetic slice shows that real gradients reached it), no "in" guess. Score and rule were chosen on pilot seeds
   (4000-7019) of the bug suite's normalisation trainer, none of the seeds the tests use.

   Soundness (certified, no assumption beyond the coins and the runs' independence): each canary's coin changes
   the data set of its own run by one record, and the runs are independent, so the combined algorithm (all runs
   together) is (epsilon, delta)-DP with respect to each single canary whenever one run is; Theorem 3 of Steinke,
   Nasr & Jagielski 2023 therefore applies to the canaries of all runs pooled (their guesses may depend on every
   run's output). The score may be uninformative (another first layer, a trainer that does not normalise): the
   bound is then small, never wrong.

5. **Final model only** (:func:`final_model_scores`, :func:`certified_final_model`): the auditor sees only the
   model the training function returns (no hook record). The canaries are input records as in 4, built by
   :func:`input_canary_design` at :data:`FINAL_MODEL_EXTREME` (1e3) real standard deviations, each with a random
   label and in the data by a fair coin. The score, fixed before any run: the log likelihood the returned model
   gives the canary's own label (its input fed to the returned model as is); the rule, also fixed in advance
   (:data:`FINAL_MODEL_RULE`): "out" on the ``0.05 m`` lowest scores, no "in" guess. An extreme input makes the
   canary's gradient concentrate on the first-layer weights of its feature; a loop whose clipping does not bound one
   record's step (clipping of the batch mean) fits the canary's random label, and a loop that standardises with the
   training set's statistics changes what the model learns of that feature when the canary is in; an "out" canary
   then has a clearly lower likelihood of its random label. Design, extreme and rule were chosen on pilot seeds
   (5001-5005, 20-100 runs each) of the bug suite, none of the seeds the tests use. Soundness: as in 4 (each coin
   changes one run's data set by one record; the runs are independent), with :func:`certified_pooled`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
from scipy import special, stats

from dpaudit.attacks.bounds import clopper_pearson_lower
from dpaudit.errors import DataError, check_float, check_probability
from dpaudit.serial import JsonValue

__all__ = ["SamplerFinding", "NoiseFinding", "RecordedBound", "identify_sampler", "estimate_noise",
           "estimate_noise_runs", "recorded_lower_bound", "whitebox_scores", "certified_one_run", "certified_runs", "chi_mean_inverse", "ANALYTIC_ASSUMPTIONS",
           "SAMPLER_KINDS", "simulate_record", "input_canary_design", "input_canary_scores",
           "certified_input_canaries", "INPUT_CANARY_EXTREME", "INPUT_CANARY_RULE", "INPUT_CANARY_SCORE",
           "certified_pooled", "final_model_scores", "certified_final_model", "FINAL_MODEL_EXTREME",
           "FINAL_MODEL_RULE", "FINAL_MODEL_SCORE"]

SAMPLER_KINDS = ("poisson", "shuffle", "fixed", "full-batch", "unknown")

#: What an analytic (parametric) figure of the recorded mechanism assumes, written beside it in every output.
ANALYTIC_ASSUMPTIONS = ("the loop is DP-SGD of the recorded form: Gaussian noise drawn independently at each step, "
                        "of a standard deviation proportional to one record's clipped contribution (sigma_eff = noise "
                        "std / canary signal, constant over the steps), with the batch sampler identified from the "
                        "recorded batches")


@dataclass(frozen=True, slots=True)
class SamplerFinding:
    """The batch sampler identified from the recorded batches. ``kind``: :data:`SAMPLER_KINDS`; ``steps`` T;
    ``num_records`` N; ``batch_size``: the modal batch size (shuffle / fixed) or the mean (Poisson); ``rate``: mean
    batch size / N, with its one-sided Clopper-Pearson lower limit ``rate_low`` (Poisson); ``epochs`` (shuffle: full
    passes); ``drop_last`` (shuffle: an incomplete last batch is dropped); ``evidence``: why, in words."""

    kind: str
    steps: int
    num_records: int
    batch_size: float
    rate: float
    rate_low: float
    epochs: float
    drop_last: bool
    evidence: str
    batch_size_min: int = 0
    batch_size_max: int = 0


@dataclass(frozen=True, slots=True)
class NoiseFinding:
    """The noise and the canary signal, in the units of the recorded gradient. ``noise_std``: median over steps of
    the probes' root mean square (an estimate of the noise's standard deviation, inflated by real gradients if
    any); ``signal``: the canary's mean contribution to the recorded gradient in a step whose batch holds it (the
    effective clipping norm over the user's divisor); ``sigma_eff``: noise std / signal (the effective noise
    multiplier; point estimate) and ``sigma_eff_upper``: its upper limit at ``confidence`` (inf when the signal is
    not significantly positive); ``difference_ratio``: the probes' mean squared step-to-step difference over twice
    their mean square (about 1 for fresh noise each step, near 0 when the noise is reused); ``steps_used``: steps
    whose batch held a canary."""

    noise_std: float
    signal: float
    sigma_eff: float
    sigma_eff_upper: float
    confidence: float
    difference_ratio: float
    steps_used: int
    probes: int


@dataclass(frozen=True, slots=True)
class RecordedBound:
    """The lower bound on the epsilon of the recorded mechanism (analytic: holds under
    :data:`ANALYTIC_ASSUMPTIONS`). ``epsilon`` at ``delta``; ``estimate``: the same pair's epsilon at the point
    estimate of sigma_eff (an estimate, not a bound); ``mechanism``: the parameters it was computed with;
    ``pair``: the construction."""

    epsilon: float
    delta: float
    confidence: float
    estimate: float
    mechanism: Mapping[str, JsonValue] = field(default_factory=dict)
    pair: str = ""
    kind: str = "analytic"
    assumptions: str = ANALYTIC_ASSUMPTIONS


# ------------------------------------------------------------------------------------------------------- sampler


def identify_sampler(membership: Sequence[np.ndarray], num_records: int, *, confidence: float = 0.95) -> SamplerFinding:
    """Which sampler produced these batches (module docstring, 1)."""
    n = int(num_records)
    T = len(membership)
    if T == 0:
        raise DataError("identify_sampler: no recorded step.")
    sizes = np.array([len(b) for b in membership], dtype=np.int64)
    alpha = 1.0 - check_probability(confidence, "confidence", "identify_sampler")
    smin, smax = int(sizes.min()), int(sizes.max())
    common = dict(steps=T, num_records=n, batch_size_min=smin, batch_size_max=smax)
    dup = any(len(np.unique(b)) != len(b) for b in membership)
    if dup:
        return SamplerFinding("unknown", batch_size=float(sizes.mean()), rate=float(sizes.mean() / n),
                              rate_low=0.0, epochs=0.0, drop_last=False,
                              evidence="an index repeats within a batch (sampling with replacement)", **common)
    if smin == n:
        return SamplerFinding("full-batch", batch_size=float(n), rate=1.0, rate_low=1.0, epochs=float(T),
                              drop_last=False, evidence=f"every one of the {T} batches holds all {n} records", **common)
    # shuffled batches: each index at most once per epoch; an epoch ends when (almost) all were seen
    seen = np.zeros(n, dtype=bool)
    count, epochs, shuffle, dropped = 0, 0, True, False
    for b in membership:
        if b.size and seen[b].any():
            if count >= n - smax:
                epochs += 1
                dropped = dropped or count < n
                seen[:] = False
                count = 0
            else:
                shuffle = False
                break
        seen[b] = True
        count += b.size
        if count == n:
            epochs += 1
            seen[:] = False
            count = 0
    modal = int(np.bincount(sizes).argmax())
    # no index repeated: shuffled batches (a partial epoch when none completed; its pair is the shuffle pair, the
    # more private reading of batches of one size that never repeat an index)
    if shuffle and (epochs >= 1 or smin == smax):
        ragged = int(np.sum(sizes != modal))
        if ragged <= epochs + 1:
            return SamplerFinding("shuffle", batch_size=float(modal), rate=modal / n, rate_low=modal / n,
                                  epochs=float(epochs + count / n), drop_last=bool(dropped),
                                  evidence=(f"each index at most once per epoch over {epochs} full epoch(s); batches "
                                            f"of {modal}" if epochs else f"no index repeated ({count} of {n} drawn, "
                                            f"less than one epoch); batches of {modal}")
                                  + (" (the incomplete last batch dropped)" if dropped else ""),
                                  **common)
    total = int(sizes.sum())
    q = total / (n * T)
    if smin == smax:
        return SamplerFinding("fixed", batch_size=float(modal), rate=q, rate_low=q, epochs=total / n,
                              drop_last=False, evidence=f"every batch holds exactly {modal} records, indices repeat "
                                                        "within an epoch", **common)
    # Poisson: binomial dispersion of the batch sizes
    var = n * q * (1 - q)
    stat = float(np.sum((sizes - n * q) ** 2) / var) if var > 0 else 0.0
    p_low = float(stats.chi2.cdf(stat, T - 1)) if T > 1 else 0.5
    p_high = float(stats.chi2.sf(stat, T - 1)) if T > 1 else 0.5
    q_low = float(clopper_pearson_lower(total, n * T, alpha))
    if min(p_low, p_high) < 1e-4:
        return SamplerFinding("unknown", batch_size=float(sizes.mean()), rate=q, rate_low=q_low, epochs=total / n,
                              drop_last=False, evidence=f"batch sizes vary ({smin}-{smax}) but not as Binomial(N, q) "
                                                        f"(dispersion test p = {min(p_low, p_high):.2g})", **common)
    return SamplerFinding("poisson", batch_size=float(sizes.mean()), rate=q, rate_low=q_low, epochs=total / n,
                          drop_last=False, evidence=f"batch sizes {smin}-{smax}, consistent with Binomial({n}, "
                                                    f"{q:.4g}) (dispersion p = {2 * min(p_low, p_high):.2g})", **common)


# ------------------------------------------------------------------------------------------------------- noise


def chi_mean_inverse(probes: int) -> float:
    """E[n / r] where r^2 = n^2 chi^2_P / P: ``sqrt(P / 2) Gamma((P - 1) / 2) / Gamma(P / 2)`` (P >= 2)."""
    p = float(probes)
    return math.exp(0.5 * math.log(p / 2.0) + special.gammaln((p - 1.0) / 2.0) - special.gammaln(p / 2.0))


#: Below this :attr:`NoiseFinding.difference_ratio` the noise is taken as not drawn afresh each step (the certified
#: score then uses step-to-step differences, and the analytic bound's independence assumption is reported as failing).
DIFFERENCE_THRESHOLD = 0.5


def _difference_ratio(y: np.ndarray) -> float:
    """The probes' mean squared step-to-step difference over twice their mean square (1 with fewer than 2 steps or
    no movement at all): about 1 for fresh noise each step, near 0 when the noise is reused."""
    if y.shape[0] < 2:
        return 1.0
    dy = np.diff(y, axis=0)
    ms = float(np.mean(y * y))
    return float(np.mean(dy * dy) / (2.0 * ms)) if ms > 0 else 1.0


def _canary_in_batch(membership: Sequence[np.ndarray], canary_index: np.ndarray, T: int) -> np.ndarray:
    m = canary_index.size
    inb = np.zeros((T, m), dtype=bool)
    lookup = {int(r): j for j, r in enumerate(canary_index) if r >= 0}
    for t, b in enumerate(membership):
        for r in b.tolist():
            j = lookup.get(r)
            if j is not None:
                inb[t, j] = True
    return inb


def _step_contrasts(canary_obs, probe_obs, membership: Sequence[np.ndarray], canary_index):
    """Per step whose batch holds some canaries: the in-batch minus out-of-batch mean of the canary observations in
    units of the probes' root mean square (inf where the probes did not move at all), and the same in the
    gradient's units; the probes' r_t; the probes' P."""
    x = np.asarray(canary_obs, dtype=np.float64)
    y = np.asarray(probe_obs, dtype=np.float64)
    ci = np.asarray(canary_index, dtype=np.int64)
    T, P = y.shape
    if P < 2 or x.shape != (T, ci.size):
        raise DataError(f"estimate_noise: canary_obs must be (T, m) = ({T}, {ci.size}) and probes >= 2. Got "
                        f"{x.shape} and {P}.")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        return None
    r = np.sqrt(np.mean(y * y, axis=1))
    ok = r > np.finfo(np.float64).tiny
    inb = _canary_in_batch(membership, ci, T)
    # each canary coordinate less its mean over the steps whose batch did not hold that canary: the real gradients'
    # lasting part on that coordinate (which only adds variance to the contrasts) goes; the signal stays whole, since
    # a canary's membership at a step is independent of the real gradients and of the other steps' noise
    out = ~inb
    n_out = out.sum(axis=0)
    x = x - np.where(n_out > 0, np.where(out, x, 0.0).sum(axis=0) / np.maximum(n_out, 1), 0.0)[None, :]
    xt = np.where(ok[:, None], x / np.where(ok, r, 1.0)[:, None], 0.0)
    diffs, signal = [], []
    for t in range(T):
        k_in = int(inb[t].sum())
        if k_in == 0 or k_in == ci.size:
            continue
        if not ok[t] and not np.any(x[t, inb[t]] != x[t, ~inb[t]].mean()):
            continue                 # nothing moved at all (the update is not in what the hook records): no evidence
        signal.append(float(x[t, inb[t]].mean() - x[t, ~inb[t]].mean()))
        # no noise at all at this step and a canary moved: no finite noise multiplier
        diffs.append(float(xt[t, inb[t]].mean() - xt[t, ~inb[t]].mean()) if ok[t] else np.inf)
    return np.asarray(diffs), signal, r, P, _difference_ratio(y)


def estimate_noise(canary_obs, probe_obs, membership: Sequence[np.ndarray], canary_index, *,
                   confidence: float = 0.95) -> NoiseFinding:
    """Noise, canary signal and the upper confidence limit of sigma_eff (module docstring, 2) from one run."""
    return estimate_noise_runs([(canary_obs, probe_obs, membership, canary_index)], confidence=confidence)


def estimate_noise_runs(runs: Sequence[tuple[Any, Any, Sequence[np.ndarray], Any]], *,
                        confidence: float = 0.95) -> NoiseFinding:
    """:func:`estimate_noise` pooled over independent runs of the same loop (``(canary_obs, probe_obs, membership,
    canary_index)`` each, with as many probes): the per-step contrasts of all runs are independent samples of the
    same mean under the model, so the t limit takes them together (Nasr et al. 2023 audit with two runs)."""
    alpha = 1.0 - check_probability(confidence, "confidence", "estimate_noise")
    parts = [_step_contrasts(*run) for run in runs]
    probes = [np.asarray(run[1]).shape[1] for run in runs]
    if len(set(probes)) != 1:
        raise DataError(f"estimate_noise_runs: every run needs the same number of probes. Got {probes}.")
    P = probes[0]
    if any(p is None for p in parts):
        return NoiseFinding(0.0, float("inf"), 0.0, 0.0, confidence, 0.0, 0, P)
    d = np.concatenate([p[0] for p in parts])
    signal = [v for p in parts for v in p[1]]
    noise = float(np.median(np.concatenate([p[2] for p in parts])))
    ratio = float(min(p[4] for p in parts))
    sig = float(np.mean(signal)) if signal else 0.0
    if d.size < 2:
        return NoiseFinding(noise, sig, float("inf"), float("inf"), confidence, ratio, int(d.size), P)
    if np.any(np.isinf(d)):
        return NoiseFinding(noise, sig, 0.0, 0.0, confidence, ratio, int(d.size), P)
    kappa = chi_mean_inverse(P)
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    low = (mean - stats.t.ppf(1.0 - alpha, d.size - 1) * sd / math.sqrt(d.size)) / kappa
    upper = 1.0 / low if low > 0 else float("inf")
    est = kappa / mean if mean > 0 else float("inf")
    return NoiseFinding(noise, sig, est, upper, confidence, ratio, int(d.size), P)


# ------------------------------------------------------------------------------------------------------- bounds

#: How much finer than one record the Poisson rate's lower limit is kept in the pair (dataset size times this).
POISSON_RATE_SCALE = 1000

#: The smallest noise multiplier the pair is computed at (a larger sigma only lowers a lower bound: still valid).
SIGMA_FLOOR = 0.1


def recorded_lower_bound(sampler: SamplerFinding, noise: NoiseFinding, delta: float) -> RecordedBound | None:
    """The certified pair lower bound of DP-SGD with the recorded sampler, T and ``sigma_eff_upper`` (analytic:
    under :data:`ANALYTIC_ASSUMPTIONS`); None for an unknown sampler."""
    from dpaudit.accountants.pairs import dpsgd_lower_bound

    d = check_float(delta, "delta", "recorded_lower_bound", low=0.0, high=1.0, low_open=True, high_open=True)
    if sampler.kind == "unknown":
        return None
    n, T = sampler.num_records, sampler.steps
    if sampler.kind == "poisson":
        # the Poisson pair depends on the rate b / n only: a data set 1,000 times larger keeps the rate's lower limit
        # to 1e-3 of a record instead of rounding it down to a whole record (about 2% of the rate at b = 50)
        n = n * POISSON_RATE_SCALE
        b, sampling = max(1, int(math.floor(sampler.rate_low * n))), "poisson"
    elif sampler.kind == "full-batch":
        b, sampling = n, "poisson"
    elif sampler.kind == "shuffle":
        b, sampling = int(sampler.batch_size), "shuffle"
    else:
        b, sampling = int(sampler.batch_size), "fixed-wor"
    b = min(max(b, 1), n)

    def at(sigma: float) -> tuple[float, str]:
        if not math.isfinite(sigma):
            return 0.0, "no significant canary signal"
        lb = dpsgd_lower_bound(dataset_size=n, batch_size=b, noise_multiplier=max(sigma, SIGMA_FLOOR), steps=T,
                               delta=d, sampling=sampling,
                               drop_last=bool(sampler.drop_last) if sampling == "shuffle" else False)
        return float(lb.epsilon), str(lb.pair)

    eps, pair = at(noise.sigma_eff_upper)
    est, _ = at(noise.sigma_eff)
    scale = POISSON_RATE_SCALE if sampling == "poisson" and sampler.kind == "poisson" else 1
    mech = {"sampling": sampling, "dataset_size": n // scale, "batch_size": b / scale if scale > 1 else b,
            "steps": T,
            "noise_multiplier": float(max(noise.sigma_eff_upper, SIGMA_FLOOR)) if math.isfinite(noise.sigma_eff_upper) else "inf"}
    return RecordedBound(eps, d, noise.confidence, est, mechanism=mech, pair=pair)


# ------------------------------------------------------------------------------------------------------- one run


def whitebox_scores(canary_obs, probe_obs, *, sampling_rate: float | None = None,
                    noise_multiplier: float | None = None,
                    difference_threshold: float = DIFFERENCE_THRESHOLD) -> tuple[np.ndarray, str]:
    """Per-canary scores from the released observations only (module docstring, 3): ``(scores, score name)``."""
    from dpaudit.attacks.canary import dirac_scores

    x = np.asarray(canary_obs, dtype=np.float64)
    y = np.asarray(probe_obs, dtype=np.float64)
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        x = np.nan_to_num(x, nan=0.0, posinf=1e300, neginf=-1e300)
        y = np.nan_to_num(y, nan=0.0, posinf=1e300, neginf=-1e300)
    T = x.shape[0]
    if T > 1:
        if _difference_ratio(y) < difference_threshold:
            dy = np.diff(y, axis=0)
            dx = np.diff(x, axis=0)
            v = np.mean(dy * dy, axis=1)
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                # a step whose probes did not move at all had no noise: any jump of a canary there is its signal
                e = np.where(v[:, None] > 0, dx * dx / np.where(v > 0, v, 1.0)[:, None],
                             np.where(dx != 0, np.inf, 0.0))
            e = np.nan_to_num(e, nan=0.0, posinf=1e300)
            # the largest normalised jump: a canary entering or leaving a batch moves its coordinate by its whole
            # signal while the reused noise cancels (the sum would also add up the real gradients' drift)
            return e.max(axis=0) + 1e-9 * e.mean(axis=0), "difference-max"
    r = np.sqrt(np.mean(y * y, axis=1))
    r = np.where(r > 0, r, max(float(np.max(r)), 1e-300))
    xt = x / r[:, None]
    if sampling_rate is not None and noise_multiplier is not None:
        return dirac_scores(xt[:, None, :], sampling_rate=sampling_rate, noise_multiplier=noise_multiplier)[0], "dirac-lr"
    return xt.sum(axis=0), "dirac-sum"


def certified_one_run(canary_obs, probe_obs, included, *, delta: float, confidence: float = 0.95,
                      sampling_rate: float | None = None, noise_multiplier: float | None = None) -> Any:
    """The certified one-run bound (:class:`~dpaudit.attacks.canary.CanaryBound`) from the white-box scores."""
    return certified_runs([(canary_obs, probe_obs, included)], delta=delta, confidence=confidence,
                          sampling_rate=sampling_rate, noise_multiplier=noise_multiplier)


def certified_runs(runs: Sequence[tuple[Any, Any, Any]], *, delta: float, confidence: float = 0.95,
                   sampling_rate: float | None = None, noise_multiplier: float | None = None) -> Any:
    """:func:`certified_one_run` over the canaries of independent runs (``(canary_obs, probe_obs, included)`` each):
    every canary's coin is fair and independent of the other runs, and each canary is in one run only, so Theorem 3
    applies to all of them together; each run's scores come from its own observations."""
    from dpaudit.attacks.canary import one_run_certified

    scores, coins, names = [], [], set()
    for x, y, inc in runs:
        s, name = whitebox_scores(x, y, sampling_rate=sampling_rate, noise_multiplier=noise_multiplier)
        scores.append(np.nan_to_num(s, nan=0.0, posinf=1e300, neginf=-1e300))
        coins.append(np.asarray(inc, dtype=bool))
        names.add(name)
    if len(names) > 1:      # scores of different kinds are not comparable across runs: rank within each run
        scores = [stats.rankdata(s) / s.size for s in scores]
    return one_run_certified(np.concatenate(scores), np.concatenate(coins), delta=delta, confidence=confidence,
                             score="+".join(sorted(names)), analysis="eps", compare=True)


# ------------------------------------------------------------------------------------------------------- input canaries

#: How many real standard deviations above the real mean an input canary's feature lies: after a normalisation with
#: the training set's statistics, the real records' values of that feature shrink by about sqrt(N) / this (0.003 at
#: N = 1,000), while the canary's own normalised value is about sqrt(N) (its gradient is clipped by the user anyway).
INPUT_CANARY_EXTREME = 1e4

#: The input canaries' score (module docstring, 4).
INPUT_CANARY_SCORE = "minus-log-first-layer-slice-energy"


def _input_rule() -> Any:
    from dpaudit.attacks.auditor import GuessGrid

    return GuessGrid(totals=(0.2,), in_shares=(0.0,), min_guesses=10)


#: The input canaries' guessing rule, one pair fixed by the canary count m: "out" on the round(0.2 m) lowest scores.
INPUT_CANARY_RULE = _input_rule()


def input_canary_design(X, *, extreme: float = INPUT_CANARY_EXTREME) -> tuple[np.ndarray, np.ndarray]:
    """The input canaries for real inputs ``X`` (N, d), from the real data only (never from a coin): ``(features,
    rows)``, the non-constant features (those with a positive standard deviation; a constant feature's canary moves
    no real gradient) and one canary input per such feature, (F, d) float32: the real mean everywhere but feature
    ``j`` = mean + ``extreme`` std."""
    x = np.asarray(X, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 2:
        raise DataError(f"input_canary_design: X must be (N, d) with N >= 2. Got shape {x.shape}.")
    ext = check_float(extreme, "extreme", "input_canary_design", low=1.0)
    mu, sd = x.mean(0), x.std(0)
    features = np.flatnonzero(sd > 0)
    rows = np.repeat(mu[None, :], features.size, axis=0)
    rows[np.arange(features.size), features] = mu[features] + ext * sd[features]
    return features.astype(np.int64), rows.astype(np.float32)


def input_canary_scores(watch, features) -> np.ndarray:
    """Each canary's score (module docstring, 4) from one run's :attr:`~dpaudit.training.audit_hook.HookRecord.watch`
    (d, k): minus the log squared norm of feature ``j``'s summed first-layer update (a slice that never moved, or an
    overflowing one: +inf or -inf, kept finite as +-1e300; a non-finite update counts as 0, or +-1e150 for an
    infinity)."""
    w = np.asarray(watch, dtype=np.float64)
    f = np.asarray(features, dtype=np.int64)
    if w.ndim != 2 or (f.size and (f.min() < 0 or f.max() >= w.shape[0])):
        raise DataError(f"input_canary_scores: watch must be (d, k) with every feature below d. Got {w.shape} and "
                        f"features {f.tolist()[:8]}.")
    w = np.nan_to_num(w, nan=0.0, posinf=1e150, neginf=-1e150)
    with np.errstate(divide="ignore", over="ignore"):
        energy = np.sum(w[f] * w[f], axis=1)
        return np.clip(-np.log(energy), -1e300, 1e300)


def certified_pooled(runs: Sequence[tuple[Any, Any]], *, delta: float, confidence: float, score: str, rule: Any,
                     owner: str = "certified_pooled") -> Any:
    """The certified one-run bound (:func:`dpaudit.attacks.canary.one_run_certified`, Theorem 3 of Steinke, Nasr &
    Jagielski 2023, analysis "eps") of canaries pooled over independent runs: ``(scores, included)`` per run, each
    canary's score from its own run's output only. Sound with no assumption beyond the fair coins and the runs'
    independence (module docstring, 4): each coin changes one run's data set by one record. ``rule``: the guessing
    rule, fixed before any run."""
    from dpaudit.attacks.canary import one_run_certified

    scores, coins = [], []
    for sc, inc in runs:
        s = np.asarray(sc, dtype=np.float64).ravel()
        c = np.asarray(inc, dtype=bool).ravel()
        if c.shape != s.shape:
            raise DataError(f"{owner}: {s.size} scores but {c.size} coins in a run.")
        scores.append(s)
        coins.append(c)
    return one_run_certified(np.concatenate(scores), np.concatenate(coins), delta=delta, confidence=confidence,
                             score=score, analysis="eps", rule=rule, compare=False)


def certified_input_canaries(runs: Sequence[tuple[Any, Any, Any]], *, delta: float, confidence: float = 0.95) -> Any:
    """The certified bound (:class:`~dpaudit.attacks.canary.CanaryBound`) of input canaries pooled over independent
    runs (``(watch, features, included)`` each; module docstring, 4), with :data:`INPUT_CANARY_RULE`."""
    return certified_pooled([(input_canary_scores(watch, features), inc) for watch, features, inc in runs],
                            delta=delta, confidence=confidence, score=INPUT_CANARY_SCORE, rule=INPUT_CANARY_RULE,
                            owner="certified_input_canaries")


# ------------------------------------------------------------------------------------------------------- final model

#: How many real standard deviations above the real mean a final-model canary's feature lies (module docstring, 5).
FINAL_MODEL_EXTREME = 1e3

#: The final-model canaries' score (module docstring, 5).
FINAL_MODEL_SCORE = "canary-log-likelihood"


def _final_rule() -> Any:
    from dpaudit.attacks.auditor import GuessGrid

    return GuessGrid(totals=(0.05,), in_shares=(0.0,), min_guesses=10)


#: The final-model guessing rule, one pair fixed by the canary count m: "out" on the round(0.05 m) lowest scores.
FINAL_MODEL_RULE = _final_rule()


def final_model_scores(logits, labels) -> np.ndarray:
    """Each final-model canary's score (module docstring, 5): ``log softmax(logits)[label]``, the log likelihood the
    returned model gives the canary's own label, computed in log space (no clipping: extreme inputs give logits in
    the hundreds). ``logits`` (m, classes), ``labels`` (m,). A non-finite logit row scores -1e300 (no evidence of
    a fit)."""
    z = np.asarray(logits, dtype=np.float64)
    lab = np.asarray(labels, dtype=np.int64).ravel()
    if z.ndim != 2 or z.shape[0] != lab.size or z.shape[1] < 2 or (lab.size and (lab.min() < 0 or lab.max() >= z.shape[1])):
        raise DataError(f"final_model_scores: logits must be (m, classes >= 2) with every label below the class count. "
                        f"Got logits {z.shape} and {lab.size} labels (largest {int(lab.max()) if lab.size else None}).")
    bad = ~np.all(np.isfinite(z), axis=1)
    z = np.where(bad[:, None], 0.0, z)
    top = z.max(axis=1, keepdims=True)
    lse = top[:, 0] + np.log(np.sum(np.exp(z - top), axis=1))
    out = z[np.arange(lab.size), lab] - lse
    return np.where(bad, -1e300, out)


def certified_final_model(runs: Sequence[tuple[Any, Any, Any]], *, delta: float, confidence: float = 0.95) -> Any:
    """The certified bound of final-model canaries pooled over independent runs (``(logits, labels, included)``
    each; module docstring, 5), with :data:`FINAL_MODEL_RULE`."""
    return certified_pooled([(final_model_scores(z, lab), inc) for z, lab, inc in runs], delta=delta,
                            confidence=confidence, score=FINAL_MODEL_SCORE, rule=FINAL_MODEL_RULE,
                            owner="certified_final_model")


# ------------------------------------------------------------------------------------------------------- simulation


def simulate_record(*, num_real: int, canaries: int, probes: int, sampling_rate: float, noise_multiplier: float,
                    steps: int, seed: int, sampler: str = "poisson", batch_size: int | None = None,
                    signal: float = 1.0, contamination: float = 0.0) -> dict[str, Any]:
    """An exactly known DP-SGD record (for the soundness tests and benchmarks): the observations a correct loop
    would give the hook, numpy only. Canary j is in the data with a fair coin; per step the sampler draws the batch,
    each canary in it adds ``signal`` to its coordinate, and every recorded coordinate gets independent
    N(0, (noise_multiplier * signal)^2) noise plus, if ``contamination`` > 0, a slowly varying real-gradient term."""
    rng = np.random.default_rng(seed)
    inc = rng.random(canaries) < 0.5
    k = int(inc.sum())
    n = num_real + k
    ci = np.full(canaries, -1, dtype=np.int64)
    ci[inc] = num_real + np.arange(k)
    membership = []
    if sampler == "poisson":
        for _ in range(steps):
            membership.append(np.flatnonzero(rng.random(n) < sampling_rate))
    else:
        b = int(batch_size or max(1, round(sampling_rate * n)))
        perm = rng.permutation(n)
        pos = 0
        for _ in range(steps):
            if pos + b > n:
                perm, pos = rng.permutation(n), 0
            membership.append(np.sort(perm[pos:pos + b]))
            pos += b
    sd = noise_multiplier * signal
    x = rng.normal(0.0, sd, size=(steps, canaries))
    y = rng.normal(0.0, sd, size=(steps, probes))
    if contamination:
        drift = np.cumsum(rng.normal(0.0, contamination / math.sqrt(steps), size=(steps, canaries + probes)), axis=0)
        x += drift[:, :canaries]
        y += drift[:, canaries:]
    x[_canary_in_batch(membership, ci, steps)] += signal     # each batch holds an index at most once
    return {"canary_obs": x, "probe_obs": y, "membership": tuple(membership), "num_records": n,
            "canary_index": ci, "included": inc}

"""DP-SGD under the batch samplers people really use: fixed-size batches without replacement and shuffled batches.

Upper bounds (registered RDP functions, so every accountant and ledger takes the events):

- :class:`~dpaudit.accountants.events.FixedBatchGaussian` -- ``"substitution"``: Wang, Balle, Kasiviswanathan,
  "Subsampled Rényi differential privacy and analytical moments accountant", AISTATS 2019 (arXiv:1808.00087),
  Theorem 9 with the Gaussian base mechanism (:func:`rdp_wor_gaussian`), and ``"zero-out"`` by the same analysis (a
  null record replacing the target is one substitution; :func:`rdp_fixed_batch` says why nothing smaller holds);
  ``"add-remove"``: the Poisson-subsampled Gaussian at rate B/n with noise multiplier sigma/2 (the coupling argument in
  the event's docstring).
- :class:`~dpaudit.accountants.events.ShuffledBatchGaussian` -- no amplification: P participations of a Gaussian
  mechanism of sensitivity s (1 or 2), RDP :math:`P s^2 \\alpha / (2\\sigma^2)`, exactly mu-GDP with
  :math:`\\mu = s\\sqrt{P}/\\sigma`.

Lower bound for shuffling (:func:`shuffle_lower_bound`): the construction of Chua, Ghazi, Kamath, Kumar, Manurangsi,
Sinha, Zhang, "How private are DP-SGD implementations?", ICML 2024, Section 4 (and "Scalable DP-SGD: shuffling vs.
Poisson subsampling", NeurIPS 2024, for several epochs). A one-dimensional linear loss whose clipped gradient is +1 for
the target record and ``b`` for every other record; per epoch the adversary sees the T noisy batch sums, of which
exactly one carries the target's extra ``a - b``: the pair of mixtures
:math:`\\mathrm{MoG}(m) = \\frac1T \\sum_t N(m e_t, \\sigma^2 I_T)`. Any test statistic gives a lower bound on the
hockey-stick divergence (data processing); like Chua et al. we use the maximum coordinate, whose law is known in
closed form: :math:`P(\\max_t y_t \\le c) = \\Phi((c-m)/\\sigma)\\Phi(c/\\sigma)^{T-1}`. The maximum is binned (a
further post-processing), the binned pair's privacy-loss distribution is built with dp_accounting's *optimistic*
rounding and composed over the epochs (independent permutations and noise), and its epsilon at
``delta + 1e-12`` (FFT round-off) is reported: a certified lower bound on the epsilon that ANY analysis of shuffled
DP-SGD with these parameters can give (it is attained by a valid dataset), not an estimate.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy import special

from dpaudit.accountants._dp_accounting import rdp_sample_wor_gaussian
from dpaudit.accountants._common import FFT_DELTA_ALLOWANCE, LOG2, inv_square, log1mexp, logsumexp_rows, quiet_overflow
from dpaudit.accountants.base import rdp_function_for, register_rdp
from dpaudit.accountants.events import FixedBatchGaussian, ShuffledBatchGaussian, SubsampledGaussian
from dpaudit.errors import DPAuditError, ParameterError, check_choice, check_float, check_int, check_probability

__all__ = ["rdp_wor_gaussian", "rdp_wor_gaussian_theorem9", "rdp_fixed_batch", "rdp_shuffled_batches", "shuffle_lower_bound", "ShuffleLowerBound",
           "poisson_equivalent", "WBK_MAX_ORDER", "max_statistic_log_cdf", "fixed_size_gaussian_pld",
           "fixed_size_gaussian_epsilon", "subsampled_gaussian_hockey_stick"]

#: Largest order at which Theorem 9's sum is evaluated; above it only the unsampled Gaussian bound is used.
WBK_MAX_ORDER = 10_000
#: Most bins of the maximum statistic in the shuffle lower bound (the bin width grows past it; still a lower bound).
MAX_LOWER_BOUND_BINS = 100_000
#: Most epochs the lower bound composes (beyond, the first ones only: fewer epochs observed is still a lower bound).
MAX_LOWER_BOUND_EPOCHS = 100_000
#: Most points of the composed privacy-loss grid of the lower bound: the interval coarsens past it (optimistic
#: rounding on a coarser grid is still a lower bound).
MAX_LOWER_BOUND_POINTS = 2_000_000


@quiet_overflow
def _wbk_log_a(log_gamma: float, c: float, alphas: np.ndarray) -> np.ndarray:
    """:math:`\\log A(\\alpha)` of WBK Theorem 9 at integer ``alphas`` >= 2 for a base mechanism with RDP
    :math:`\\epsilon(j) = c j` (the Gaussian) and :math:`\\epsilon(\\infty) = \\infty` (so every min{2, .} is 2):

    .. math:: A = 1 + \\gamma^2\\binom{\\alpha}{2}\\min\\{4(e^{\\epsilon(2)}-1), 2e^{\\epsilon(2)}\\}
              + \\sum_{j=3}^{\\alpha} 2\\gamma^j\\binom{\\alpha}{j} e^{(j-1)\\epsilon(j)}
    """
    amax = int(alphas.max())
    rows = max(1, 4_000_000 // amax)          # at most ~32 MB of terms at a time
    if alphas.size > rows:
        return np.concatenate([_wbk_log_a(log_gamma, c, alphas[i:i + rows]) for i in range(0, alphas.size, rows)])
    j = np.arange(2, amax + 1, dtype=np.float64)
    a = alphas[:, None]
    with np.errstate(invalid="ignore"):
        log_comb = special.gammaln(a + 1) - special.gammaln(j + 1) - special.gammaln(np.maximum(a - j, 0) + 1)
    eps2 = 2.0 * c
    log_f2m1 = eps2 + float(log1mexp(-eps2)) if eps2 > 0 else -math.inf
    t2 = min(math.log(4.0) + log_f2m1, LOG2 + eps2)
    coeff = np.where(j == 2.0, t2, LOG2 + j * (j - 1.0) * c)
    terms = j * log_gamma + log_comb + coeff
    terms = np.where(j[None, :] <= a, terms, -np.inf)
    terms = np.concatenate([np.zeros((alphas.size, 1)), terms], axis=1)   # the 1
    return logsumexp_rows(terms)


def rdp_wor_gaussian(sampling_rate: float, noise_multiplier: float, orders, *, sensitivity: float = 2.0) -> np.ndarray:
    """RDP of ONE step of the Gaussian mechanism on a batch sampled without replacement (substitution neighbours).

    The base mechanism adds :math:`N(0, \\sigma^2)` to a sum of L2 sensitivity ``sensitivity`` (in units of the
    clipping norm; 2 for a clipped-gradient sum under substitution), so :math:`\\epsilon(j) = j s^2/(2\\sigma^2)`.
    The smallest at each order of three valid bounds:

    - WBK 2019 Theorem 9 (:func:`rdp_wor_gaussian_theorem9`, dpaudit's own, vectorised);
    - dp_accounting's ``SampledWithoutReplacementDpEvent`` RDP (WBK Theorem 27, tighter for large sigma; with
      ``GaussianDpEvent(sigma / s)`` under ``REPLACE_ONE``);
    - the unsampled Gaussian's :math:`\\alpha s^2/(2\\sigma^2)` (sampling never hurts: joint convexity).
    """
    theorem9 = rdp_wor_gaussian_theorem9(sampling_rate, noise_multiplier, orders, sensitivity=sensitivity)
    a = tuple(float(x) for x in np.asarray(orders, dtype=np.float64))
    return np.minimum(theorem9, _wor_dp_accounting(float(sampling_rate), float(noise_multiplier) / float(sensitivity), a))


#: dp_accounting's without-replacement RDP is a Python loop per order (quadratic up to order 256): it is asked only at
#: orders up to this, and for grids of at most _WOR_MAX_ORDERS orders; elsewhere Theorem 9 alone (valid, looser).
_WOR_DP_ACCOUNTING_MAX_ORDER = 1024.0
_WOR_MAX_ORDERS = 512


@functools.lru_cache(maxsize=64)
def _wor_dp_accounting(q: float, sigma: float, orders: tuple[float, ...]) -> np.ndarray:
    out = np.full(len(orders), np.inf)
    if not 1e-3 <= sigma <= 1e6 or q >= 1.0 or len(orders) > _WOR_MAX_ORDERS:
        return out   # outside, its float arithmetic or its cost is not affordable here: Theorem 9 alone
    use = [i for i, a in enumerate(orders) if a <= _WOR_DP_ACCOUNTING_MAX_ORDER]
    if use:
        out[use] = rdp_sample_wor_gaussian(q, sigma, [orders[i] for i in use])
    out.setflags(write=False)
    return out


def rdp_wor_gaussian_theorem9(sampling_rate: float, noise_multiplier: float, orders, *,
                              sensitivity: float = 2.0) -> np.ndarray:
    """WBK 2019 Theorem 9 for the Gaussian base mechanism of :func:`rdp_wor_gaussian`, at every order.

    Integer orders: :func:`_wbk_log_a`. Fractional orders: the chord of :math:`(\\alpha-1)\\epsilon(\\alpha)`
    between the neighbouring integer orders (WBK Corollary 10: the cumulant generating function is convex; at
    :math:`\\alpha < 2` the chord from :math:`(1, 0)`). Each order also takes the unsampled Gaussian's bound when
    smaller. Orders above :data:`WBK_MAX_ORDER` take the Gaussian bound only.
    """
    owner = "rdp_wor_gaussian_theorem9"
    gamma = check_float(sampling_rate, "sampling_rate", owner, low=0.0, high=1.0, low_open=True)
    sigma = check_float(noise_multiplier, "noise_multiplier", owner, low=0.0, low_open=True)
    s = check_float(sensitivity, "sensitivity", owner, low=0.0, low_open=True)
    a = np.asarray(orders, dtype=np.float64)
    if a.ndim != 1 or np.any(~(a > 1.0)) or np.any(~np.isfinite(a)):
        raise ParameterError(f"The 'orders' parameter of {owner} must be a 1-D array of finite floats > 1. Got {a!r:.60} instead.")
    c = 0.5 * s * s * inv_square(sigma)
    with np.errstate(over="ignore"):
        gauss = a * c
    if not math.isfinite(c):
        return np.full(a.size, math.inf)
    use = a <= WBK_MAX_ORDER
    out = gauss.copy()
    if np.any(use):
        lo = np.floor(a[use])
        hi = np.ceil(a[use])
        ints = np.unique(np.concatenate([lo, hi]))
        ints = ints[ints >= 2]
        log_a = dict(zip(ints.tolist(), _wbk_log_a(math.log(gamma), c, ints).tolist()))
        log_a[1.0] = 0.0
        k_lo = np.array([log_a[x] for x in lo])
        k_hi = np.array([log_a[x] for x in hi])
        t = a[use] - lo
        with np.errstate(invalid="ignore", over="ignore"):
            k = np.where(t == 0, k_lo, (1.0 - t) * k_lo + t * k_hi)
            wbk = np.maximum(k, 0.0) / (a[use] - 1.0)
        wbk = np.where(np.isnan(wbk), np.inf, wbk)
        out[use] = np.minimum(wbk, gauss[use])
    return out


def rdp_fixed_batch(event: FixedBatchGaussian, orders) -> np.ndarray:
    r"""RDP of ONE step of a :class:`~dpaudit.accountants.events.FixedBatchGaussian` under its neighbouring relation.

    - ``"add-remove"``: the Poisson-subsampled Gaussian at rate B/n and noise multiplier sigma/2 (the event's docstring).
    - ``"substitution"``: Wang-Balle-Kasiviswanathan's without-replacement bound (:func:`rdp_wor_gaussian`, base
      sensitivity 2C).
    - ``"zero-out"``: the substitution bound too. Replacing the target by a null record is one substitution, so the
      substitution figure is valid for it. No smaller Poisson equivalent exists: including the target displaces
      another record of the batch, so one step can be :math:`(1-\gamma)N(0, \sigma^2) + \gamma N(2, \sigma^2)`
      against :math:`(1-\gamma)N(0, \sigma^2) + \gamma N(1, \sigma^2)` (every other gradient -C, the target's +C),
      whose tail keeps the unsampled Gaussian's loss; the Poisson-subsampled Gaussian at sigma, used before, is below
      that pair (issue 33: 0.504 where the pair forces >= 3.9 on the MNIST setting). WBK's Theorem 9 with base
      sensitivity C is not valid either: its proof compares batches that differ in a record other than the target.
      With B = n every record is in every batch and the step is exactly the Gaussian mechanism of sensitivity C.
    """
    q, sigma = event.sampling_rate, event.noise_multiplier
    a = np.asarray(orders, dtype=np.float64)
    if event.neighbouring == "zero-out" and event.batch_size == event.dataset_size:
        with np.errstate(over="ignore"):
            return a * (0.5 * inv_square(sigma))
    if event.neighbouring in ("substitution", "zero-out"):
        return rdp_wor_gaussian(q, sigma, a)
    poisson = SubsampledGaussian(q, sigma / 2.0, 1)
    return np.asarray(rdp_function_for(poisson)(poisson, a), dtype=np.float64)


def poisson_equivalent(event: FixedBatchGaussian) -> tuple[float, float] | None:
    """``(q, sigma)`` of the Poisson-subsampled Gaussian that bounds ``event`` step by step: add/remove only (rate B/n,
    sigma/2). None under substitution and zero-out: no such reduction holds there (:func:`rdp_fixed_batch`)."""
    if event.neighbouring != "add-remove":
        return None
    return event.sampling_rate, event.noise_multiplier / 2.0


@register_rdp(FixedBatchGaussian)
def _rdp_fixed_batch_event(event: FixedBatchGaussian, orders: np.ndarray) -> np.ndarray:
    return event.steps * rdp_fixed_batch(event, orders)


def rdp_shuffled_batches(event: ShuffledBatchGaussian, orders) -> np.ndarray:
    """RDP of a whole :class:`~dpaudit.accountants.events.ShuffledBatchGaussian` without amplification: its
    participations P compose Gaussian mechanisms of sensitivity s, :math:`P s^2 \\alpha / (2\\sigma^2)`."""
    a = np.asarray(orders, dtype=np.float64)
    with np.errstate(over="ignore"):
        return a * (0.5 * event.participations * event.sensitivity ** 2 * inv_square(event.noise_multiplier))


@register_rdp(ShuffledBatchGaussian)
def _rdp_shuffled_event(event: ShuffledBatchGaussian, orders: np.ndarray) -> np.ndarray:
    return rdp_shuffled_batches(event, orders)


# --------------------------------------------------------------------------------------------------
# fixed-size sampling without replacement: a dominating pair as a privacy-loss distribution
# --------------------------------------------------------------------------------------------------

#: Most grid points of the one-step privacy-loss distribution of :func:`fixed_size_gaussian_pld` (beyond, the caller
#: must coarsen the interval: a ParameterError says so).
MAX_WOR_PLD_POINTS = 2_000_000
#: The one-step grid ends where the profile falls below this; the rest (at most this much) is put at infinite loss.
_WOR_TAIL_DELTA = 1e-30


def subsampled_gaussian_hockey_stick(epsilons, sampling_rate: float, mu: float, *, direction: str) -> np.ndarray:
    r"""The exact hockey-stick divergence :math:`H_{e^\epsilon}` of the Poisson-style mixture pair
    :math:`P_\gamma = (1-\gamma)N(0,1) + \gamma N(\mu,1)` and :math:`N(0,1)`, at each of ``epsilons``:
    ``direction="remove"`` is :math:`H_{e^\epsilon}(P_\gamma \| N(0,1))`, ``"add"`` is
    :math:`H_{e^\epsilon}(N(0,1) \| P_\gamma)`. The loss is monotone in the output, so each is one closed form at the
    threshold :math:`t` where :math:`(1-\gamma) + \gamma e^{\mu t - \mu^2/2} = e^{\pm\epsilon}`:

    - remove: :math:`\gamma[\bar\Phi(t-\mu) - e^{\mu t-\mu^2/2}\bar\Phi(t)]` for :math:`e^\epsilon > 1-\gamma`, else
      :math:`1-e^\epsilon`;
    - add: :math:`\Phi(t)(1 - (1-\gamma)e^\epsilon) - \gamma e^\epsilon\Phi(t-\mu)` for
      :math:`e^{-\epsilon} > 1-\gamma`, else 0.

    (dp_accounting's ``GaussianPrivacyLoss`` with ``sampling_prob`` computes the same two curves point by point; the
    tests compare them.)"""
    eps = np.asarray(epsilons, dtype=np.float64)
    g = float(sampling_rate)
    out = np.zeros_like(eps)
    sign = 1.0 if direction == "remove" else -1.0
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        if g >= 1.0:
            x = np.full_like(eps, np.inf)
            inside = np.ones(eps.shape, dtype=bool)
            t = (sign * eps + 0.5 * mu * mu) / mu
        else:
            # e^{s eps} - (1 - g) = g e^{mu t - mu^2/2}
            lhs = np.where(sign * eps > 0, np.expm1(sign * eps) + g, np.exp(sign * eps) - 1.0 + g)
            inside = lhs > 0
            x = np.where(inside, lhs, 1.0)
            t = (np.log(x) - math.log(g) + 0.5 * mu * mu) / mu
        if direction == "remove":
            # g [Phibar(t - mu) - e^{mu t - mu^2/2} Phibar(t)]: both terms in log space, then the difference
            a = special.log_ndtr(mu - t)
            b = mu * t - 0.5 * mu * mu + special.log_ndtr(-t)
            val = g * np.exp(a) * -np.expm1(np.minimum(b - a, 0.0))
            out = np.where(inside, val, -np.expm1(np.minimum(eps, 0.0)))
        else:
            a = special.log_ndtr(t)
            term1 = np.exp(a) * (1.0 - (1.0 - g) * np.exp(eps))
            term2 = g * np.exp(eps + special.log_ndtr(t - mu))
            out = np.where(inside, term1 - term2, 0.0)
    return np.clip(np.nan_to_num(out, nan=0.0), 0.0, 1.0)


@functools.lru_cache(maxsize=16)
def _wor_one_step(sampling_rate: float, mu: float, vdi: float) -> Any:
    """The pessimistic connect-the-dots PLD of one step of the hull pair of :func:`fixed_size_gaussian_pld`."""
    hull = lambda e: np.maximum(subsampled_gaussian_hockey_stick(e, sampling_rate, mu, direction="remove"),  # noqa: E731
                                subsampled_gaussian_hockey_stick(e, sampling_rate, mu, direction="add"))
    top = 10.0 * vdi
    while float(hull(np.array([top]))[0]) > _WOR_TAIL_DELTA and top < 1e6:
        top *= 1.25
    points = int(math.ceil(top / vdi))
    if 2 * points + 1 > MAX_WOR_PLD_POINTS:
        raise ParameterError(f"the one-step loss range of fixed-size sampling (up to {top:.3g}) needs {2 * points + 1} "
                             f"grid points at interval {vdi:g}, more than the supported {MAX_WOR_PLD_POINTS}.")
    rounded = np.arange(-points, points + 1)
    deltas = np.minimum.accumulate(hull(rounded * vdi))
    pmf = pld_pmf.create_pmf_pessimistic_connect_dots(vdi, rounded, deltas)
    return pld_lib.PrivacyLossDistribution(pmf)


def fixed_size_gaussian_pld(dataset_size: int, batch_size: int, noise_multiplier: float, steps: int = 1, *,
                            neighbouring: str = "substitution", value_discretization_interval: float = 1e-4) -> Any:
    r"""A pessimistic privacy-loss distribution (dp_accounting ``PrivacyLossDistribution``) of ``steps`` steps of
    the Gaussian mechanism on a batch of exactly ``batch_size`` = m of ``dataset_size`` = N records drawn without
    replacement at every step: each record's contribution clipped to norm C, :math:`N(0, \sigma^2C^2)` noise on the
    sum (``noise_multiplier`` = sigma). Its epsilon at any delta (read at ``delta - 1e-12`` for the FFT round-off,
    :func:`fixed_size_gaussian_epsilon`) is a valid upper bound. This is the one implementation for DP-SGD's
    fixed-size batches (:class:`~dpaudit.accountants.events.FixedBatchGaussian`, the PLD route) and for federated
    client sampling (m clients of N per round, ``noise_multiplier`` the server noise over the clipping norm).

    ``neighbouring``:

    - ``"substitution"`` (replace-one) and ``"zero-out"``: Dong, Roth and Su, "Gaussian differential privacy" (JRSS-B
      2022), Theorem 4.2 (subsampling without replacement, datasets of the same size differing in one record): if the
      mechanism on the batch is f-DP, the subsampled one is :math:`C_\gamma(f)`-DP, :math:`\gamma = m/N`,
      :math:`C_\gamma(f) = \min\{f_\gamma, f_\gamma^{-1}\}^{**}` with :math:`f_\gamma = \gamma f + (1-\gamma)\mathrm{Id}`.
      The batch mechanism is :math:`G_\mu` with :math:`\mu = 2/\sigma`: replacing one record moves a clipped sum by
      up to 2C (zero-out is one such replacement; its own figure is no smaller, :func:`rdp_fixed_batch` says why).
      :math:`f_\gamma` is the trade-off function of :math:`((1-\gamma)N(0,1) + \gamma N(\mu,1), N(0,1))`, so the
      privacy profile of :math:`C_\gamma(G_\mu)` (the convex conjugate of the hull is the larger of the two conjugates)
      is, at every epsilon, the larger of that pair's two hockey-stick curves
      (:func:`subsampled_gaussian_hockey_stick`, exact). Its pessimistic connect-the-dots discretisation (Doroshenko,
      Ghazi, Kamath, Kumar, Manurangsi 2022, Algorithm 1: a dominating pair, since the curve is the exact profile of
      the hull pair) on the grid ``value_discretization_interval`` from -E to E, with the profile beyond E (below
      1e-30) put at infinite loss, is one step; steps compose as dominating pairs (Zhu, Dong, Wang 2022, Theorem 10)
      by FFT, each with dp_accounting's pessimistic tail truncation. The same bound in (epsilon, delta) form for one
      step is at most Balle-Barthe-Gaboardi 2018's Theorem 10 (:math:`\log(1 + \gamma(e^\epsilon-1))`,
      :math:`\gamma\delta`).
    - ``"add-remove"``: the Poisson-subsampled Gaussian at rate m/N with noise multiplier sigma/2
      (:class:`~dpaudit.accountants.events.FixedBatchGaussian`'s coupling: adding the target displaces one record of
      the batch, a change of up to 2C), dp_accounting's own PLD of it (both directions).

    With m = N (every record in every batch) ``"zero-out"`` is the Gaussian mechanism of sensitivity C, exactly."""
    owner = "fixed_size_gaussian_pld"
    n = check_int(dataset_size, "dataset_size", owner, low=1)
    m = check_int(batch_size, "batch_size", owner, low=1, high=n)
    sigma = check_float(noise_multiplier, "noise_multiplier", owner, low=0.0, low_open=True)
    t = check_int(steps, "steps", owner, low=0)
    relation = check_choice(neighbouring, "neighbouring", owner, ("substitution", "zero-out", "add-remove"))
    vdi = check_float(value_discretization_interval, "value_discretization_interval", owner, low=1e-7, high=1.0)
    gamma = m / n
    with np.errstate(all="ignore"):
        if relation == "add-remove":
            one = pld_lib.from_gaussian_mechanism(sigma / 2.0, sampling_prob=gamma, value_discretization_interval=vdi)
        elif relation == "zero-out" and m == n:
            one = pld_lib.from_gaussian_mechanism(sigma, sensitivity=1.0, value_discretization_interval=vdi)
        else:
            one = _wor_one_step(gamma, 2.0 / sigma, vdi)
        if t == 0:
            return pld_lib.identity(value_discretization_interval=vdi)
        return one.self_compose(t) if t > 1 else one


def fixed_size_gaussian_epsilon(dataset_size: int, batch_size: int, noise_multiplier: float, steps: int, delta: float,
                                *, neighbouring: str = "substitution",
                                value_discretization_interval: float = 1e-4) -> float:
    """The epsilon at ``delta`` of :func:`fixed_size_gaussian_pld` (read at ``delta - 1e-12``, the FFT round-off
    allowance): a valid upper bound for ``steps`` steps of fixed-size sampling without replacement."""
    delta = check_probability(delta, "delta", "fixed_size_gaussian_epsilon")
    if delta <= 2.0 * FFT_DELTA_ALLOWANCE:
        raise ParameterError(f"The 'delta' parameter of fixed_size_gaussian_epsilon must be above "
                             f"{2.0 * FFT_DELTA_ALLOWANCE:g} (the FFT round-off allowance). Got {delta!r} instead.")
    pld = fixed_size_gaussian_pld(dataset_size, batch_size, noise_multiplier, steps, neighbouring=neighbouring,
                                  value_discretization_interval=value_discretization_interval)
    with np.errstate(all="ignore"):
        return max(0.0, float(pld.get_epsilon_for_delta(delta - FFT_DELTA_ALLOWANCE)))


# --------------------------------------------------------------------------------------------------
# the lower bound for shuffled batches (Chua et al. 2024)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ShuffleLowerBound:
    """A certified lower bound on the epsilon of shuffled DP-SGD (the largest over the constructions tried).

    ``construction`` names the gradient values (target record, others) and the direction that gave it;
    ``epochs`` is the number of epoch windows composed; ``delta`` the target delta."""

    epsilon: float
    delta: float
    construction: str
    epochs: int


def _windows(events: Sequence[ShuffledBatchGaussian]) -> list[tuple[int, float, float]]:
    """(k batches observed, probability the target is among them, sigma) per epoch window, at most one window per
    epoch (an epoch split between two phases keeps its larger part: the parts are not independent)."""
    best: dict[int, tuple[int, float, float]] = {}
    for ev in events:
        n, b, t = ev.dataset_size, ev.batch_size, ev.batches_per_epoch
        sizes_last = b if ev.drop_last else n - (t - 1) * b
        start, end = ev.first_step, ev.first_step + ev.steps
        first_epoch, last_epoch = start // t, (end - 1) // t
        if last_epoch - first_epoch + 1 > MAX_LOWER_BOUND_EPOCHS:
            last_epoch = first_epoch + MAX_LOWER_BOUND_EPOCHS - 1
        for e in range(first_epoch, last_epoch + 1):
            u, v = max(start - e * t, 0), min(end - e * t, t)
            k = v - u
            records = k * b - (b - sizes_last if v == t else 0)
            w = min(1.0, records / n)
            if e not in best or k > best[e][0]:
                best[e] = (k, w, ev.noise_multiplier)
    return list(best.values())


def max_statistic_log_cdf(c: np.ndarray, m: float, sigma: float, k: int, w: float) -> np.ndarray:
    """log P(max of the k observed batch sums <= c) when the target adds m to one of them with probability w (the noise
    of each sum is N(0, sigma^2); the other records' known contribution subtracted): the law of Chua et al.'s test
    statistic, :math:`w\\Phi((c-m)/\\sigma)\\Phi(c/\\sigma)^{k-1} + (1-w)\\Phi(c/\\sigma)^k`."""
    log_phi = special.log_ndtr(c / sigma)
    inc = special.log_ndtr((c - m) / sigma) + (k - 1) * log_phi
    if w >= 1.0:
        return inc
    return np.logaddexp(math.log(w) + inc, math.log1p(-w) + k * log_phi)


def _binned_log_pmf(m: float, edges: np.ndarray, sigma: float, k: int, w: float) -> np.ndarray:
    """log masses of the bins (-inf, e0], (e0, e1], ..., (e_last, inf) of the maximum under MoG(m)."""
    log_f = max_statistic_log_cdf(edges, m, sigma, k, w)
    with np.errstate(divide="ignore", invalid="ignore"):
        mid = log_f[1:] + log1mexp(np.minimum(log_f[:-1] - log_f[1:], 0.0))
    return np.concatenate([[log_f[0]], mid, [float(log1mexp(min(float(log_f[-1]), 0.0)))]])


def _binned_pair(a: float, b: float, sigma: float, k: int, w: float, vdi: float,
                 reverse: bool) -> tuple[np.ndarray, np.ndarray]:
    """log masses (upper, lower) of the binned maximum, upper = MoG(a), lower = MoG(b) (swapped if reverse); bins where
    either is zero are left out (dropping outcomes is a post-processing: still a lower bound)."""
    lo = sigma * float(special.ndtri(math.exp(-45.0 / k)))
    hi = a + sigma * float(-special.ndtri(math.exp(-45.0) / (k + 1)))
    h = max(vdi * sigma * sigma / (a - b), (hi - lo) / MAX_LOWER_BOUND_BINS)
    edges = np.linspace(lo, hi, int(min(MAX_LOWER_BOUND_BINS, math.ceil((hi - lo) / h))) + 1)
    lp_a = _binned_log_pmf(a, edges, sigma, k, w)
    lp_b = _binned_log_pmf(b, edges, sigma, k, w)
    upper, lower = (lp_b, lp_a) if reverse else (lp_a, lp_b)
    keep = np.isfinite(upper) & np.isfinite(lower)
    return upper[keep], lower[keep]


def _pair_pld(upper: np.ndarray, lower: np.ndarray, vdi: float):
    """dp_accounting's optimistic PLD of one binned pair."""
    idx = range(upper.size)
    return pld_lib.from_two_probability_mass_functions(
        dict(zip(idx, lower.tolist())), dict(zip(idx, upper.tolist())),
        pessimistic_estimate=False, value_discretization_interval=vdi)


def shuffle_lower_bound(events: ShuffledBatchGaussian | Sequence[ShuffledBatchGaussian], delta: float, *,
                        value_discretization_interval: float = 1e-3) -> ShuffleLowerBound:
    """A certified lower bound on the epsilon at ``delta`` of DP-SGD with shuffled batches (module docstring).

    Constructions (gradient of the target record, of every other record, and of the target's neighbour):
    zero-out -- Chua et al.'s (+1, -1, 0), i.e. MoG(2) vs MoG(1), and (+1, 0, 0), MoG(1) vs N(0); substitution
    adds (+1, -1, -1), MoG(2) vs N(0). Both directions of each pair are tried; the largest epsilon is returned.
    ``events`` are the phases of one run, in order (the same dataset, so their epochs compose).
    """
    owner = "shuffle_lower_bound"
    evs = (events,) if isinstance(events, ShuffledBatchGaussian) else tuple(events)
    if not evs or not all(isinstance(e, ShuffledBatchGaussian) for e in evs):
        raise ParameterError(f"The 'events' parameter of {owner} must be ShuffledBatchGaussian events. Got {events!r:.80} instead.")
    delta = check_probability(delta, "delta", owner)
    vdi = check_float(value_discretization_interval, "value_discretization_interval", owner, low=1e-6, high=1.0)
    # zero-out's constructions are substitution instances too (a record with zero gradient replaces the target); the
    # substitution-only pair needs every phase to be analysed under substitution
    relation = "substitution" if all(e.neighbouring == "substitution" for e in evs) else "zero-out"
    pairs = [(2.0, 1.0, "target +1, others -1, neighbour 0 (Chua et al. 2024)"), (1.0, 0.0, "target +1, others 0, neighbour 0")]
    if relation == "substitution":
        pairs.append((2.0, 0.0, "target +1, others -1, neighbour -1"))
    groups: dict[tuple[int, float, float], int] = {}
    for win in _windows(evs):
        groups[win] = groups.get(win, 0) + 1
    best = (0.0, "none")
    for a, b, name in pairs:
        for reverse in (False, True):
            try:
                with np.errstate(all="ignore"):
                    binned = {g: _binned_pair(a, b, g[2], g[0], g[1], vdi, reverse) for g in groups if g[1] > 0.0}
                    # the composed loss spans at most the sum of the epochs' spans: coarsen the grid to keep it small
                    span = sum(groups[g] * float(np.ptp(up - lo)) for g, (up, lo) in binned.items() if up.size)
                    step = max(vdi, span / MAX_LOWER_BOUND_POINTS)
                    total = None
                    for g, (up, lo) in binned.items():
                        if not up.size:
                            continue
                        one = _pair_pld(up, lo, step).self_compose(groups[g])
                        total = one if total is None else total.compose(one)
                    if total is None:
                        continue
                    eps = float(total.get_epsilon_for_delta(min(delta + FFT_DELTA_ALLOWANCE, 1.0)))
            except (OverflowError, ValueError, FloatingPointError, MemoryError, ZeroDivisionError, IndexError) as exc:
                if isinstance(exc, DPAuditError):
                    raise
                continue  # dp_accounting could not evaluate this construction: the others (or 0) still bound below
            if math.isfinite(eps) and eps > best[0]:
                best = (eps, f"{name}, {'remove' if not reverse else 'add'} direction")
    return ShuffleLowerBound(max(best[0], 0.0), delta, best[1], len(_windows(evs)))

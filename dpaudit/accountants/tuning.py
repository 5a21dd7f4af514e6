"""Hyperparameter tuning by random stopping: the RDP of releasing the best of K runs, K random (Papernot & Steinke).

Papernot and Steinke, "Hyperparameter tuning with Rényi differential privacy", ICLR 2022 (arXiv:2110.03620):

- Theorem 2 (K ~ truncated negative binomial :math:`\\mathcal{D}_{\\eta,\\gamma}`): if one run is
  :math:`(\\lambda, \\epsilon)`- and :math:`(\\hat\\lambda, \\hat\\epsilon)`-RDP, the best of K runs is
  :math:`(\\lambda, \\epsilon')`-RDP with
  :math:`\\epsilon' = \\epsilon + (1+\\eta)(1 - 1/\\hat\\lambda)\\hat\\epsilon + (1+\\eta)\\log(1/\\gamma)/\\hat\\lambda
  + \\log E[K] / (\\lambda - 1)`; dpaudit takes the smallest over :math:`\\hat\\lambda` in the order grid.
- Theorem 6 (K ~ Poisson(mu), mu >= 1 here: below, the formula falls under the exact divergence of a concrete
  best-of-K mechanism, see the tests): if one run is :math:`(\\lambda, \\epsilon)`-RDP and :math:`(\\hat\\epsilon,
  \\hat\\delta)`-DP with :math:`e^{\\hat\\epsilon} \\le 1 + 1/(\\lambda - 1)`, the best of K runs is
  :math:`(\\lambda, \\epsilon + \\mu\\hat\\delta + \\log(\\mu)/(\\lambda - 1))`-RDP; dpaudit takes
  :math:`\\hat\\epsilon = \\log(\\lambda/(\\lambda-1))` and :math:`\\hat\\delta` from the run's RDP (the conversion of
  :func:`~dpaudit.accountants.rdp.rdp_to_epsilon`, solved for delta: a valid upper bound), or, for a pure
  :math:`\\epsilon_0`-DP run, the exact :math:`\\hat\\delta = (e^{\\epsilon_0} - e^{\\hat\\epsilon})_+/(1 + e^{\\epsilon_0})`
  (0 where :math:`\\hat\\epsilon \\ge \\epsilon_0`: the theorem's pure-DP case), the smaller.

Every order then takes the smallest bound at or above it: Rényi divergence is non-decreasing in the order, which the
theorems' figures (loose at low orders, e.g. the truncated negative binomial with a Gaussian run) do not use.

Both hold for adaptive runs whose candidate hyperparameters are drawn independently of the data, and a best run chosen
by a score each run outputs (a private score, or one computed on public data).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import optimize

from dpaudit.accountants.base import register_rdp
from dpaudit.accountants.dpsgd import SAMPLING_NAMES, account_dpsgd, dpsgd_event
from dpaudit.accountants.events import RandomStoppingTuning, tnb_expected_runs
from dpaudit.accountants.pairs import dpsgd_lower_bound
from dpaudit.accountants.rdp import RdpAccountant, event_assumptions, pure_epsilon, rdp_to_epsilon
from dpaudit.accountants.statement import AccountingResult, LowerBound, PrivacyStatement, headline_facts, join_assumptions
from dpaudit.errors import ParameterError, check_choice, check_float, check_probability

__all__ = ["rdp_random_stopping", "tnb_gamma_for_mean", "account_tuning", "RUNS_DISTRIBUTIONS"]

#: ``--runs-distribution`` names: the geometric (eta = 1) and logarithmic (eta = 0) distributions are truncated
#: negative binomials.
RUNS_DISTRIBUTIONS = ("poisson", "geometric", "logarithmic", "truncated-negative-binomial")


def tnb_gamma_for_mean(eta: float, mean_runs: float) -> float:
    """The gamma in (0, 1) at which the truncated negative binomial with ``eta`` has E[K] = ``mean_runs`` (> 1);
    E[K] decreases from infinity to 1 as gamma goes from 0 to 1."""
    owner = "tnb_gamma_for_mean"
    eta = check_float(eta, "eta", owner, low=-1.0, high=1e6, low_open=True)
    m = check_float(mean_runs, "mean_runs", owner, low=1.0, high=1e9, low_open=True)

    def f(log_g: float) -> float:
        return math.log(tnb_expected_runs(eta, math.exp(log_g))) - math.log(m)

    lo, hi = math.log(1e-12), math.log(1.0 - 1e-12)
    if f(lo) < 0:
        raise ParameterError(f"The 'mean_runs' parameter of {owner} is out of the supported range for eta = {eta:g} "
                             f"(gamma would be below 1e-12). Got {m!r} instead.")
    if f(hi) > 0:
        raise ParameterError(f"The 'mean_runs' parameter of {owner} must be a float > 1 (more than one run on average). "
                             f"Got {m!r} instead.")
    return math.exp(optimize.brentq(f, lo, hi, xtol=1e-14, rtol=1e-14))


def _log_delta_from_rdp(orders: np.ndarray, rdp: np.ndarray, eps: np.ndarray) -> np.ndarray:
    """log of the smallest delta the RDP curve certifies at each epsilon in ``eps`` (Mironov 2017, Prop. 3, and
    Canonne-Kamath-Steinke 2020, Prop. 12 -- the conversions of rdp_to_epsilon, solved for delta), capped at 0."""
    a = orders[None, :]
    r = rdp[None, :]
    e = eps[:, None]
    with np.errstate(over="ignore", invalid="ignore"):
        mironov = (a - 1.0) * (r - e)
        cks = (a - 1.0) * (r - e + np.log1p(-1.0 / a)) - np.log(a)
        best = np.minimum(mironov, cks)
    best = np.where(np.isnan(best), np.inf, best)
    return np.minimum(best.min(axis=1), 0.0)


def rdp_random_stopping(event: RandomStoppingTuning, orders: Any) -> np.ndarray:
    """RDP at each order of the best-of-K release described by ``event`` (module docstring)."""
    a = np.asarray(orders, dtype=np.float64)
    inner = RdpAccountant(a).rdp_of(event.event)
    log_ek = math.log(event.expected_runs)
    with np.errstate(over="ignore", invalid="ignore"):
        if event.distribution == "poisson":
            mu = float(event.mu)  # type: ignore[arg-type]
            eps_hat = np.log(a / (a - 1.0))
            delta_hat = np.exp(_log_delta_from_rdp(a, inner, eps_hat))
            eps0 = pure_epsilon(event.event)
            if eps0 < 700.0:
                # a pure eps0-DP run is (eps, (e^eps0 - e^eps)/(1 + e^eps0))-DP for eps <= eps0 and (eps, 0)-DP above
                # (binary randomized response dominates every eps0-DP mechanism: Kairouz, Oh, Viswanath 2015), so
                # Papernot-Steinke's pure-DP case delta-hat = 0 applies wherever e^eps0 <= lambda / (lambda - 1)
                e0 = math.exp(eps0)
                delta_hat = np.minimum(delta_hat, np.maximum(0.0, (e0 - a / (a - 1.0)) / (1.0 + e0)))
            out = inner + mu * delta_hat + log_ek / (a - 1.0)
        else:
            eta, gamma = float(event.eta), float(event.gamma)  # type: ignore[arg-type]
            extra = (1.0 + eta) * ((1.0 - 1.0 / a) * inner + math.log(1.0 / gamma) / a)
            extra = np.where(np.isnan(extra), np.inf, extra)
            out = inner + float(extra.min()) + log_ek / (a - 1.0)
    out = np.where(np.isnan(out), np.inf, out)
    # Rényi divergence is non-decreasing in the order (van Erven & Harremoës 2014, Theorem 3): the bound at a higher
    # order bounds every lower one, so each order takes the smallest bound at or above it (the theorems' figures at
    # low orders can be far above those at higher ones)
    idx = np.argsort(a, kind="stable")
    suffix_min = np.minimum.accumulate(out[idx][::-1])[::-1]
    out = out.copy()
    out[idx] = suffix_min
    return np.maximum(out, 0.0)


@register_rdp(RandomStoppingTuning)
def _rdp_tuning_event(event: RandomStoppingTuning, orders: np.ndarray) -> np.ndarray:
    return rdp_random_stopping(event, orders)


def tuning_event(run, *, runs_distribution: str, mean_runs: float, eta: float | None = None,
                 owner: str = "account_tuning") -> RandomStoppingTuning:
    """The :class:`~dpaudit.accountants.events.RandomStoppingTuning` of ``run`` with E[K] = ``mean_runs``."""
    dist = check_choice(runs_distribution, "runs_distribution", owner, RUNS_DISTRIBUTIONS)
    if dist == "poisson":
        if eta is not None:
            raise ParameterError(f"The 'eta' parameter of {owner} applies to the truncated negative binomial only. Got "
                                 f"eta={eta!r} with runs_distribution='poisson' instead.")
        m = check_float(mean_runs, "mean_runs", owner, low=1.0, high=1e9)
        return RandomStoppingTuning(run, "poisson", mu=m)
    fixed = {"geometric": 1.0, "logarithmic": 0.0}
    if dist in fixed:
        if eta is not None and float(eta) != fixed[dist]:
            raise ParameterError(f"The 'eta' parameter of {owner} is {fixed[dist]:g} for the {dist} distribution. Got "
                                 f"{eta!r} instead.")
        eta = fixed[dist]
    elif eta is None:
        raise ParameterError(f"The 'eta' parameter of {owner} is required for the truncated negative binomial "
                             "(a float > -1). Got nothing instead.")
    eta = check_float(eta, "eta", owner, low=-1.0, high=1e6, low_open=True)
    m = check_float(mean_runs, "mean_runs", owner, low=1.0, high=1e9, low_open=True)
    return RandomStoppingTuning(run, "truncated-negative-binomial", eta=eta, gamma=tnb_gamma_for_mean(eta, m))


def account_tuning(*, runs_distribution: str, mean_runs: float, eta: float | None = None, dataset_size: int,
                   batch_size: int, noise_multiplier: float, epochs: float | None = None, steps: int | None = None,
                   delta: float, sampling: str = "poisson", neighbouring: str | None = None,
                   drop_last: bool = False) -> AccountingResult:
    """Epsilon of releasing the best of K DP-SGD runs (each accounted as :func:`~dpaudit.accountants.dpsgd.account_dpsgd`
    would), K random with E[K] = ``mean_runs`` (``runs_distribution``: :data:`RUNS_DISTRIBUTIONS`; ``eta`` for the
    truncated negative binomial). The headline is the tuning figure (route ``"rdp"``); one run's figure is shown
    beside it, but it is not a guarantee for the tuned release."""
    owner = "account_tuning"
    delta = check_probability(delta, "delta", owner)
    run = dpsgd_event(dataset_size=dataset_size, batch_size=batch_size, noise_multiplier=noise_multiplier, epochs=epochs,
                      steps=steps, sampling=sampling, neighbouring=neighbouring, drop_last=drop_last, owner=owner)
    ev = tuning_event(run, runs_distribution=runs_distribution, mean_runs=mean_runs, eta=eta, owner=owner)
    acc = RdpAccountant()
    st = acc.compose(ev).get_statement(delta)
    one = account_dpsgd(dataset_size=dataset_size, batch_size=batch_size, noise_multiplier=noise_multiplier,
                        epochs=epochs, steps=steps, delta=delta, sampling=sampling, neighbouring=neighbouring,
                        drop_last=drop_last, lower_bound=False)
    # the lower bound: a run whose score is constant releases the first run's output whenever K >= 1 (nothing when
    # K = 0), so the tuned release of that pair has delta(eps) = P(K >= 1) delta_run(eps): at least one run's
    # epsilon at delta / P(K >= 1), for the run's explicit pair (dpsgd_lower_bound)
    p_some = -math.expm1(-float(ev.mu)) if ev.mu is not None else 1.0   # K ~ Poisson(mu) can be 0
    low_run = dpsgd_lower_bound(dataset_size=int(dataset_size), batch_size=int(batch_size),
                                noise_multiplier=float(noise_multiplier), steps=int(run.steps),  # type: ignore[attr-defined]
                                delta=min(1.0, delta / p_some), sampling=sampling,
                                neighbouring=getattr(run, "neighbouring", neighbouring), drop_last=drop_last)
    lower = LowerBound(low_run.epsilon, delta, f"one run's pair, the score constant (the first run released when K >= "
                       f"1, P = {p_some:.6g}): {low_run.pair}", low_run.method, routes=("rdp",))
    theorem = "Theorem 6" if ev.distribution == "poisson" else "Theorem 2"
    desc = (f"K ~ {runs_distribution} with E[K] = {ev.expected_runs:.4g}"
            + (f" (eta = {ev.eta:g}, gamma = {ev.gamma:.6g})" if ev.distribution != "poisson" else f" (mu = {ev.mu:g})"))
    tuned = PrivacyStatement(
        st.epsilon, delta, f"rdp (Papernot & Steinke 2022, {theorem})", order=st.order,
        label=f"best of K runs, {desc}", route="rdp",
        assumptions=join_assumptions((f"The best of K DP-SGD runs is released, {desc}; RDP of one run from the RDP "
                                      f"accountant, the tuned release's RDP by Papernot & Steinke 2022, {theorem}, "
                                      "converted to (epsilon, delta) with the Canonne-Kamath-Steinke bound.",),
                                     event_assumptions(ev), st.assumptions),
        details=st.details)
    single = PrivacyStatement(one.epsilon, delta, one.statement.method, order=one.statement.order,
                              label=f"one run ({one.headline_route}): NOT a guarantee for the tuned release",
                              assumptions=one.statement.assumptions)
    facts = {"runs_distribution": runs_distribution, "expected_runs": ev.expected_runs, "eta": ev.eta, "gamma": ev.gamma,
             "mu": ev.mu, "sampling": SAMPLING_NAMES[sampling], "one_run_epsilon": one.epsilon,
             **headline_facts((tuned, single))}
    params = {"runs_distribution": runs_distribution, "mean_runs": float(mean_runs), "eta": eta, **dict(one.parameters)}
    warns = tuple(acc.warnings) + (f"Tuning: one run costs epsilon = {one.epsilon:.4g}; releasing the best of K runs "
                                   f"({desc}) costs epsilon = {st.epsilon:.4g}.",)
    return AccountingResult(f"tuning (best of K DP-SGD runs, {SAMPLING_NAMES[sampling]})", (tuned, single),
                            parameters=params, facts=facts, warnings=warns, lower_bound=lower)

"""DP-SGD: the Poisson-subsampled Gaussian mechanism, by RDP or PLD (both from dp_accounting).

References
----------
- Abadi et al., "Deep learning with differential privacy", CCS 2016 (DP-SGD, the moments accountant).
- Mironov, Talwar, Zhang, "Rényi differential privacy of the sampled Gaussian mechanism", arXiv:1908.10530
  (the RDP computed by dp_accounting for ``PoissonSampledDpEvent(GaussianDpEvent)``).
- Koskela, Jälkö, Honkela 2020; Doroshenko et al., "Connect the dots", PETS 2022 (PLD accounting).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from dpaudit.accountants._dp_accounting import rdp_poisson_subsampled_gaussian
from dpaudit.accountants.base import register_rdp
from dpaudit.accountants.events import SubsampledGaussian
from dpaudit.accountants.pld import PldAccountant
from dpaudit.accountants.rdp import RdpAccountant
from dpaudit.accountants.statement import AccountingResult, PrivacyStatement
from dpaudit.errors import ParameterError, check_choice, check_float, check_int, check_probability

__all__ = ["rdp_subsampled_gaussian", "dpsgd_steps", "account_dpsgd", "DPSGD_ASSUMPTIONS"]

DPSGD_ASSUMPTIONS = (
    "Neighbouring datasets differ by adding or removing one example (example-level DP).",
    "Each step samples every example independently with probability q (Poisson sampling); shuffled fixed-size "
    "batches are NOT covered by this analysis.",
    "Per-example gradients are clipped to L2 norm C and Gaussian noise of standard deviation sigma*C is added to their sum.",
    "Only the released model/updates are accounted; hyper-parameter tuning and any other use of the data are not.",
)


@functools.lru_cache(maxsize=256)
def _rdp_cached(q: float, sigma: float, orders: tuple[float, ...]) -> np.ndarray:
    # dp_accounting's RDP of PoissonSampledDpEvent(GaussianDpEvent(sigma)) with rate q (Mironov et al. 2019).
    out = rdp_poisson_subsampled_gaussian(q, sigma, orders)
    out.setflags(write=False)
    return out


def rdp_subsampled_gaussian(sampling_rate: float, noise_multiplier: float, orders) -> np.ndarray:
    """RDP of ONE step of the Poisson-subsampled Gaussian mechanism at each order (dp_accounting's
    computation for ``PoissonSampledDpEvent(q, GaussianDpEvent(sigma))``, add/remove neighbours)."""
    owner = "rdp_subsampled_gaussian"
    q = check_float(sampling_rate, "sampling_rate", owner, low=0.0, high=1.0, low_open=True)
    sigma = check_float(noise_multiplier, "noise_multiplier", owner, low=0.0, low_open=True)
    a = np.asarray(orders, dtype=np.float64)
    if a.ndim != 1 or np.any(~(a > 1.0)):
        raise ParameterError(f"The 'orders' parameter of {owner} must be a 1-D array of floats > 1. Got {a!r:.60} instead.")
    return np.array(_rdp_cached(q, sigma, tuple(float(x) for x in a)))


@register_rdp(SubsampledGaussian)
def _rdp_sg_event(event: SubsampledGaussian, orders: np.ndarray) -> np.ndarray:
    return event.steps * rdp_subsampled_gaussian(event.sampling_rate, event.noise_multiplier, orders)


def dpsgd_steps(*, dataset_size: int, batch_size: int, epochs: float | None = None, steps: int | None = None) -> tuple[int, float]:
    """``(steps, q)``: q = batch_size / dataset_size; steps given, or ceil(epochs * dataset_size / batch_size)."""
    owner = "account_dpsgd"
    n = check_int(dataset_size, "dataset_size", owner, low=1)
    b = check_int(batch_size, "batch_size", owner, low=1)
    if b > n:
        raise ParameterError(
            f"The 'batch_size' parameter of {owner} must be an int <= dataset_size ({n}) so that the sampling rate is "
            f"at most 1. Got {b} instead.")
    if (epochs is None) == (steps is None):
        raise ParameterError(f"{owner} needs exactly one of 'epochs' or 'steps'. Got epochs={epochs!r}, steps={steps!r} instead.")
    if steps is not None:
        t = check_int(steps, "steps", owner, low=1)
    else:
        e = check_float(epochs, "epochs", owner, low=0.0, low_open=True)
        t = math.ceil(e * n / b - 1e-9)
    return t, b / n


def account_dpsgd(*, dataset_size: int, batch_size: int, noise_multiplier: float, epochs: float | None = None,
                  steps: int | None = None, delta: float, accountant: str = "rdp") -> AccountingResult:
    """Epsilon of DP-SGD with Poisson sampling rate q = batch_size/dataset_size and noise multiplier sigma.

    ``accountant="rdp"``: dpaudit's :class:`~dpaudit.accountants.rdp.RdpAccountant` (dp_accounting's RDP of the
    sampled Gaussian, converted with the Canonne-Kamath-Steinke bound). ``accountant="pld"``: dp_accounting's
    PLD accountant (tighter; pessimistic discretisation). The other figure is given beside the headline.
    """
    owner = "account_dpsgd"
    accountant = check_choice(accountant, "accountant", owner, ("rdp", "pld"))
    sigma = check_float(noise_multiplier, "noise_multiplier", owner, low=0.0, low_open=True)
    delta = check_probability(delta, "delta", owner)
    t, q = dpsgd_steps(dataset_size=dataset_size, batch_size=batch_size, epochs=epochs, steps=steps)
    event = SubsampledGaussian(sampling_rate=q, noise_multiplier=sigma, steps=t)

    sdesc = f"q = {batch_size}/{dataset_size} = {q:.6g}, sigma = {sigma:g}, {t} steps."
    stmts = []
    warns: list[str] = []
    for name in ("rdp", "pld"):
        acc = RdpAccountant() if name == "rdp" else PldAccountant()
        st = acc.compose(event).get_statement(delta)
        stmts.append(PrivacyStatement(st.epsilon, st.delta, st.method, order=st.order, label=f"DP-SGD ({name})",
                                      assumptions=st.assumptions + (sdesc,), details=st.details))
        warns.extend(getattr(acc, "warnings", ()))
    headline = 0 if accountant == "rdp" else 1
    params = {"dataset_size": int(dataset_size), "batch_size": int(batch_size), "noise_multiplier": sigma,
              "epochs": epochs, "steps": t, "delta": delta, "accountant": accountant}
    facts = {"sampling_rate": q, "steps": t}
    return AccountingResult("dpsgd (Poisson-subsampled Gaussian)", tuple(stmts), headline=headline, parameters=params,
                            facts=facts, warnings=tuple(warns))

"""The one place where dpaudit calls private functions of dp_accounting.

dp_accounting's public RDP accountant (``RdpAccountant().compose(PoissonSampledDpEvent(q, GaussianDpEvent(s)))``)
gives the RDP of the Poisson-subsampled Gaussian summed with everything composed before, through an object;
dpaudit needs the bare per-step vector at many (q, sigma) pairs, which dp_accounting computes in
``rdp_privacy_accountant._compute_rdp_poisson_subsampled_gaussian``. That private name may change between
releases: it is wrapped here only, and ``tests/accountants/test_dp_accounting_bridge.py`` pins this wrapper against
the public accountant, so an upgrade that changes it fails one named test. The same holds for
``_compute_rdp_sample_wor_gaussian`` (sampling without replacement, :func:`rdp_sample_wor_gaussian`).
"""

from __future__ import annotations

import logging
from typing import Sequence

import numpy as np
from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib

__all__ = ["rdp_poisson_subsampled_gaussian", "rdp_sample_wor_gaussian"]


def _one(q: float, sigma: float, order: float) -> float:
    try:
        return float(rdp_lib._compute_rdp_poisson_subsampled_gaussian(q, sigma, [order])[0])
    except (OverflowError, ZeroDivisionError, ValueError):
        return float("inf")


def rdp_poisson_subsampled_gaussian(q: float, sigma: float, orders: Sequence[float]) -> np.ndarray:
    """dp_accounting's RDP of ONE step of the Poisson-subsampled Gaussian (rate ``q``, noise multiplier ``sigma``,
    add/remove neighbours; Mironov, Talwar, Zhang 2019) at each order, as a float64 array.

    Exact at integer orders. At fractional orders dp_accounting sums absolute values of the series terms (an upper
    bound, loose for large q) and may give inf; NaN is returned as inf. Its absl warnings are silenced.
    """
    absl = logging.getLogger("absl")
    level = absl.level
    absl.setLevel(logging.ERROR)
    try:
        try:
            out = np.asarray(rdp_lib._compute_rdp_poisson_subsampled_gaussian(q, sigma, list(orders)), dtype=np.float64)
        except (OverflowError, ZeroDivisionError, ValueError):
            # tiny sigma: its float arithmetic overflows at some order; those orders are +inf (conservative)
            out = np.array([_one(q, sigma, a) for a in orders], dtype=np.float64)
    finally:
        absl.setLevel(level)
    return np.where(np.isnan(out), np.inf, np.maximum(out, 0.0))


def rdp_sample_wor_gaussian(q: float, sigma: float, orders: Sequence[float]) -> np.ndarray:
    """dp_accounting's RDP of ONE step of the Gaussian mechanism (noise multiplier ``sigma`` relative to the
    replace-one sensitivity) on a batch of ``q * n`` records sampled without replacement, at each order (REPLACE_ONE;
    Wang, Balle, Kasiviswanathan 2019: their Theorem 27 for orders <= 256, Theorem 9 above; the chord of the
    cumulant generating function at fractional orders). An order whose computation fails is +inf (conservative);
    its absl warnings are silenced."""
    absl = logging.getLogger("absl")
    level = absl.level
    absl.setLevel(logging.ERROR)
    out = np.empty(len(orders))
    try:
        with np.errstate(all="ignore"):
            for i, a in enumerate(orders):
                try:
                    out[i] = float(rdp_lib._compute_rdp_sample_wor_gaussian(q, sigma, [a])[0])
                except (OverflowError, ZeroDivisionError, ValueError, FloatingPointError):
                    out[i] = np.inf
    finally:
        absl.setLevel(level)
    return np.where(np.isnan(out), np.inf, np.maximum(out, 0.0))

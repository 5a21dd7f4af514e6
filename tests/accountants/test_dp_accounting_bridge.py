"""The one private dp_accounting function dpaudit calls is pinned against dp_accounting's public RDP accountant."""

from __future__ import annotations

import dp_accounting
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as rdp_public

from dpaudit.accountants._dp_accounting import rdp_poisson_subsampled_gaussian

ORDERS = [1.5, 2.0, 3.0, 4.5, 8.0, 16.0, 32.0, 64.0]


@pytest.mark.parametrize("q,sigma", [(0.01, 1.1), (0.1, 0.8), (0.5, 2.0), (1.0, 1.0), (0.0025, 1.3)])
def test_wrapper_equals_public_accountant(q, sigma):
    ours = rdp_poisson_subsampled_gaussian(q, sigma, ORDERS)
    for order, rdp in zip(ORDERS, ours):
        # one order at a time: the public epsilon is then a strictly increasing function of the RDP value
        acc = rdp_public.RdpAccountant([order])
        acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), 3)
        eps_public = acc.get_epsilon(1e-5)
        eps_ours = rdp_public.compute_epsilon([order], [3 * rdp], 1e-5)[0]
        assert eps_ours == pytest.approx(eps_public, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("n,b,sigma", [(1000, 10, 1.1), (500, 50, 4.0), (100, 50, 0.8), (60000, 150, 0.65)])
def test_wor_wrapper_equals_public_accountant(n, b, sigma):
    from dpaudit.accountants._dp_accounting import rdp_sample_wor_gaussian

    ours = rdp_sample_wor_gaussian(b / n, sigma, ORDERS)
    for order, rdp in zip(ORDERS, ours):
        acc = rdp_public.RdpAccountant([order], dp_accounting.NeighboringRelation.REPLACE_ONE)
        acc.compose(dp_accounting.SampledWithoutReplacementDpEvent(n, b, dp_accounting.GaussianDpEvent(sigma)), 3)
        eps_public = acc.get_epsilon(1e-5)
        eps_ours = rdp_public.compute_epsilon([order], [3 * rdp], 1e-5)[0]
        assert eps_ours == pytest.approx(eps_public, rel=1e-12, abs=1e-12)

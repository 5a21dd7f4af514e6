"""Extending an RDP order grid past its edge (dpaudit.accountants.order_search)."""

from __future__ import annotations

import math

import numpy as np

from dpaudit.accountants.order_search import search_rdp_orders
from dpaudit.accountants.rdp import DEFAULT_ORDERS, rdp_to_epsilon


def gaussian(rho):
    return lambda a: rho * np.asarray(a, dtype=np.float64)


def test_extends_above_and_below_and_matches_a_fine_search():
    for rho in (1e-9, 1e-7, 5.0, 1e4):  # optimum far above 4096, inside, near 1
        found = search_rdp_orders(gaussian(rho), DEFAULT_ORDERS, 1e-5)
        fine = np.concatenate([1 + np.geomspace(1e-9, 1e8, 20000)])
        best = rdp_to_epsilon(fine, rho * fine, 1e-5, warn=False)[0]
        assert best * (1 - 1e-12) <= found.epsilon <= best * 1.02, (rho, found.epsilon, best)
        assert not found.at_edge
        grid_only = rdp_to_epsilon(DEFAULT_ORDERS, rho * DEFAULT_ORDERS, 1e-5, warn=False)[0]
        assert found.epsilon <= grid_only
        assert found.extended == (found.order not in DEFAULT_ORDERS)
        if found.extended:
            assert "extended" in found.note()


def test_a_given_grid_is_not_extended_and_reports_its_edge():
    found = search_rdp_orders(gaussian(1e-9), [2.0, 4.0, 8.0], 1e-5, extend=False)
    assert found.order == 8.0 and found.at_edge and found.warning() and not found.extended


def test_infinite_and_zero_curves():
    inf = search_rdp_orders(lambda a: np.full(np.size(a), math.inf), DEFAULT_ORDERS, 1e-5)
    assert inf.epsilon == math.inf and inf.order is None and not inf.warning()
    zero = search_rdp_orders(lambda a: np.zeros(np.size(a)), DEFAULT_ORDERS, 1e-5)
    assert zero.epsilon >= 0 and not zero.at_edge or zero.epsilon == 0

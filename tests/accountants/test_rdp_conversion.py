import math
import warnings

import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as rdp_mod

from dpaudit.accountants.rdp import DEFAULT_ORDERS, EdgeOrderWarning, parse_orders, rdp_to_epsilon
from dpaudit.errors import ParameterError


@pytest.mark.parametrize("sigma,delta", [(1.0, 1e-5), (3.0, 1e-6), (0.7, 1e-3)])
def test_conversion_matches_dp_accounting_on_gaussian(sigma, delta):
    # Gaussian mechanism RDP alpha/(2 sigma^2); dp_accounting's compute_epsilon is the independent reference.
    rdp = DEFAULT_ORDERS / (2 * sigma**2)
    ours, _ = rdp_to_epsilon(DEFAULT_ORDERS, rdp, delta, warn=False)
    ref, _ = rdp_mod.compute_epsilon(DEFAULT_ORDERS, rdp, delta)
    assert ours <= ref * (1 + 1e-9) + 1e-12
    assert ours == pytest.approx(ref, rel=1e-6)


def test_conversion_edges():
    orders = np.array([2.0, 4.0])
    assert rdp_to_epsilon(orders, [0.0, 0.0], 0.0) == (0.0, 2.0)
    assert rdp_to_epsilon(orders, [1.0, 2.0], 0.0) == (math.inf, None)
    assert rdp_to_epsilon(orders, [np.inf, np.inf], 1e-5) == (math.inf, None)
    with pytest.warns(EdgeOrderWarning):
        rdp_to_epsilon(orders, [1e-4, 2e-4], 1e-5)
    with pytest.raises(ParameterError, match="'delta' parameter of rdp_to_epsilon"):
        rdp_to_epsilon(orders, [1.0, 1.0], 1.5)


def test_parse_orders():
    assert parse_orders("1-8") == tuple(float(i) for i in range(1, 9))
    assert parse_orders("2,4, 8.5,2-3") == (2.0, 3.0, 4.0, 8.5)
    for bad in ["", "a-b", "8-1", "0,2", "nan", "1.5-3"]:
        with pytest.raises(ParameterError, match="'orders' parameter"):
            parse_orders(bad)

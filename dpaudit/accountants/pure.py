"""Pure epsilon-DP mechanisms described only by their epsilon, and their Rényi DP.

Some mechanisms are analysed once, by hand, as pure :math:`\\epsilon`-DP and have no event of their own:
the Laplace mechanism on an L1-clipped model update (the FedAvg/FedSGD + LDP baselines of PrivateKT),
for instance. :class:`PureDp` records such a mechanism honestly: the epsilon, and a sentence saying what
the mechanism was and why it is epsilon-DP. It must not be used where a sharper event exists
(randomized response -> :class:`~dpaudit.accountants.events.RandomizedResponse`; noisy max ->
:class:`~dpaudit.accountants.events.LaplaceNoisyMax`).

RDP of a pure :math:`\\epsilon`-DP mechanism at order :math:`\\alpha > 1` (any mechanism, worst case):

.. math:: D_\\alpha \\le \\frac{1}{\\alpha-1}\\log\\frac{e^{\\alpha\\epsilon} + e^{(1-\\alpha)\\epsilon}}{1+e^{\\epsilon}}
          \\;\\le\\; \\min\\left(\\epsilon, \\tfrac{\\alpha\\epsilon^2}{2}\\right).

The middle expression is the Rényi divergence of binary randomized response, the extremal pair among
distributions whose likelihood ratio lies in :math:`[e^{-\\epsilon}, e^{\\epsilon}]` (Bun & Steinke,
"Concentrated differential privacy", TCC 2016, Proposition 3.3 and its proof; Mironov, "Rényi
differential privacy", CSF 2017, Proposition 3 for the bound :math:`\\epsilon`). The tests check it
against random distribution pairs with bounded likelihood ratio.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpaudit.accountants.base import register_rdp
from dpaudit.accountants.events import DpEvent
from dpaudit.errors import check_float

__all__ = ["PureDp", "rdp_pure_dp"]


@dataclass(frozen=True, slots=True)
class PureDp(DpEvent):
    """One release by a mechanism that is :math:`\\epsilon`-DP (pure, delta = 0).

    ``epsilon``: the mechanism's pure-DP epsilon (> 0). ``mechanism``: one sentence naming the mechanism
    and why it is epsilon-DP (e.g. "Laplace(2C/eps) on an L1-clipped update, L1 sensitivity 2C"); it is
    copied into statements. Neighbouring relation: the one the mechanism's analysis used — for local DP,
    any two inputs of one user.
    """

    epsilon: float
    mechanism: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_float(self.epsilon, "epsilon", "PureDp", low=0.0, low_open=True))
        if not isinstance(self.mechanism, str):
            object.__setattr__(self, "mechanism", str(self.mechanism))


def rdp_pure_dp(epsilon: float, orders: np.ndarray) -> np.ndarray:
    """RDP at ``orders`` (each > 1) of one :math:`\\epsilon`-DP release (see the module docstring), in log space."""
    eps = check_float(epsilon, "epsilon", "rdp_pure_dp", low=0.0, low_open=True)
    a = np.asarray(orders, dtype=np.float64)
    # log(e^{a eps} + e^{(1-a) eps}) - log(1 + e^eps), all via logaddexp
    tight = (np.logaddexp(a * eps, (1.0 - a) * eps) - np.logaddexp(0.0, eps)) / (a - 1.0)
    with np.errstate(over="ignore"):
        return np.minimum(np.minimum(tight, eps), a * eps * eps / 2.0)


@register_rdp(PureDp)
def _rdp_pure_event(event: PureDp, orders: np.ndarray) -> np.ndarray:
    return rdp_pure_dp(event.epsilon, orders)

"""The shared accountant conformance suite (tests/conformance.py) run on the PATE accountants."""

from __future__ import annotations

import numpy as np

from conformance import AccountantConformance
from dpaudit.accountants.events import GaussianNoisyMax, LaplaceNoisyMax, Repeated
from dpaudit.accountants.pate import MomentsAccountant
from dpaudit.accountants.rdp import RdpAccountant

# a fixed vote pattern with a clear but not overwhelming plurality (data-dependent bound applies)
_ROW = np.array([30.0, 12, 8, 0, 0])


class TestMomentsConformanceDataIndependent(AccountantConformance):
    # noise = Laplace scale 1/gamma in units of 10 votes
    def make_accountant(self):
        return MomentsAccountant()

    def make_event(self, noise, steps):
        return LaplaceNoisyMax(gamma=0.1 / noise, num_queries=steps)


class TestMomentsConformanceVotes(AccountantConformance):
    noise_levels = (1.0, 2.0, 4.0)  # with these votes q stays below the threshold and the bound is monotone

    def make_accountant(self):
        return MomentsAccountant()

    def make_event(self, noise, steps):
        return LaplaceNoisyMax(gamma=0.05 / noise, votes=np.tile(_ROW, (steps, 1)))


class TestRdpConformanceLaplaceVotes(AccountantConformance):
    noise_levels = (1.0, 2.0, 4.0)

    def make_accountant(self):
        return RdpAccountant()

    def make_event(self, noise, steps):
        return Repeated(LaplaceNoisyMax(gamma=0.05 / noise, votes=_ROW[None, :]), steps)


class TestRdpConformanceGnmaxVotes(AccountantConformance):
    noise_levels = (60.0, 120.0, 240.0)  # q above the Theorem 6 range: data-independent, monotone

    def make_accountant(self):
        return RdpAccountant()

    def make_event(self, noise, steps):
        return GaussianNoisyMax(sigma=noise, votes=np.tile([200.0, 40, 10, 0], (steps, 1)))

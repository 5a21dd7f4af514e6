"""Privacy-loss-distribution accountant, delegating to dp_accounting's PLD library (pessimistic estimates).

Supported events:

- ``SubsampledGaussian``: dp_accounting's PLD of the Poisson-subsampled Gaussian (add/remove neighbours).
- ``RandomizedResponse``: K labels, each dp_accounting's C-ary randomized response with noise parameter
  ``1 - beta`` (REPLACE_ONE: one label's value changes), composed K times.
- ``LaplaceNoisyMax`` without votes: each query as a pure ``sensitivity * gamma``-DP mechanism (the worst-case PLD
  of a pure eps-DP mechanism, i.e. binary randomized response).
- ``GaussianNoisyMax`` without votes: Gaussian mechanism of L2 sensitivity sqrt(2) and std sigma per query
  (plus the threshold check, std sigma_threshold and sensitivity 1, for every query of Confident-GNMax).
- ``Shuffled``: Feldman-McMillan-Talwar 2021's dominating pair (see :func:`dpaudit.accountants.ldp.shuffle_pld`).

Data-dependent PATE events are not supported (:class:`~dpaudit.accountants.base.UnsupportedEventError`).
Reference: Doroshenko, Ghazi, Kamath, Kumar, Manurangsi, "Connect the dots: tighter discrete approximations of
privacy loss distributions", PETS 2022.
"""

from __future__ import annotations

import math

from dp_accounting import privacy_accountant
from dp_accounting.pld import common as pld_common
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from dpaudit.accountants._common import append_event
from dpaudit.accountants.base import Accountant, UnsupportedEventError
from dpaudit.accountants.events import (DpEvent, GaussianNoisyMax, LaplaceNoisyMax, RandomizedResponse, Repeated,
                                        Shuffled, SubsampledGaussian, flatten)
from dpaudit.accountants.ldp import shuffle_pld
from dpaudit.accountants.rdp import event_assumptions
from dpaudit.accountants.statement import PrivacyStatement, join_assumptions
from dpaudit.errors import ParameterError, check_float, check_int

__all__ = ["PldAccountant"]


class PldAccountant(Accountant):
    """Compose events as dp_accounting privacy loss distributions; ``get_statement(delta)`` gives the epsilon.

    The PLD of each event is built when it is composed (invalid or unsupported events leave the state
    untouched). ``value_discretization_interval`` is dp_accounting's grid of privacy-loss values; rounding is
    pessimistic, so the epsilon is an upper bound.
    """

    name = "pld"

    def __init__(self, value_discretization_interval: float = 1e-4) -> None:
        super().__init__()
        self._lib = pld_lib
        self.value_discretization_interval = check_float(
            value_discretization_interval, "value_discretization_interval", "PldAccountant", low=0.0, high=1.0, low_open=True)
        self._pld = pld_lib.identity(value_discretization_interval=self.value_discretization_interval)
        self._assumptions: dict[str, None] = {}
        self.warnings: tuple[str, ...] = ()

    def supports(self, event: DpEvent) -> bool:
        if isinstance(event, (LaplaceNoisyMax, GaussianNoisyMax)):
            return event.votes is None
        return isinstance(event, (SubsampledGaussian, RandomizedResponse, Shuffled))

    def _leaf_pld(self, event: DpEvent, count: int):
        lib, vdi = self._lib, self.value_discretization_interval
        if isinstance(event, SubsampledGaussian):
            one = lib.from_gaussian_mechanism(standard_deviation=event.noise_multiplier, sampling_prob=event.sampling_rate,
                                              value_discretization_interval=vdi)
            return one.self_compose(event.steps * count)
        if isinstance(event, RandomizedResponse):
            one = lib.from_randomized_response(
                noise_parameter=1.0 - event.beta, num_buckets=event.num_classes, value_discretization_interval=vdi,
                neighboring_relation=privacy_accountant.NeighboringRelation.REPLACE_ONE)
            return one.self_compose(event.num_samples * count)
        if isinstance(event, LaplaceNoisyMax):
            one = lib.from_privacy_parameters(pld_common.DifferentialPrivacyParameters(event.query_epsilon, 0.0),
                                              value_discretization_interval=vdi)
            return one.self_compose(event.n_queries * count)
        if isinstance(event, GaussianNoisyMax):
            one = lib.from_gaussian_mechanism(standard_deviation=event.sigma, sensitivity=math.sqrt(2.0),
                                              value_discretization_interval=vdi)
            if event.threshold is not None:
                one = one.compose(lib.from_gaussian_mechanism(standard_deviation=event.sigma_threshold, sensitivity=1.0,
                                                              value_discretization_interval=vdi))
            return one.self_compose(event.n_queries * count)
        if isinstance(event, Shuffled):
            one = shuffle_pld(event.local_epsilon, event.num_users, value_discretization_interval=vdi)
            return one.self_compose(count)
        raise UnsupportedEventError(f"PldAccountant does not support events of type {type(event).__name__}.")

    def compose(self, event: DpEvent, count: int = 1) -> "PldAccountant":
        count = check_int(count, "count", "PldAccountant", low=0)
        if not isinstance(event, DpEvent):
            raise ParameterError(f"The 'event' parameter of PldAccountant.compose must be a DpEvent. Got {event!r:.80} instead.")
        leaves = flatten(event)
        for leaf, _ in leaves:
            if not self.supports(leaf):
                why = " with votes (data-dependent)" if getattr(leaf, "votes", None) is not None else ""
                raise UnsupportedEventError(f"PldAccountant does not support events of type {type(leaf).__name__}{why}.")
        if count == 0:
            return self
        pld = self._pld
        for leaf, mult in leaves:
            pld = pld.compose(self._leaf_pld(leaf, mult * count))
        # all computed: now mutate
        self._pld = pld
        append_event(self._events, event, count)
        for a in join_assumptions(*(event_assumptions(l) for l, _ in leaves)):
            self._assumptions.setdefault(a, None)
        return self

    def _statement(self, target_delta: float) -> PrivacyStatement:
        eps = float(self._pld.get_epsilon_for_delta(target_delta)) if self._events else 0.0
        base = ("Privacy loss distributions of all composed events convolved (adaptive composition) with dp_accounting, "
                "pessimistic discretisation (interval {:g}).".format(self.value_discretization_interval),)
        return PrivacyStatement(max(eps, 0.0), target_delta, "pld", assumptions=join_assumptions(base, tuple(self._assumptions)))

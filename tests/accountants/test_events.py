"""Events: validation messages, derived quantities, JSON round trips."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from dpaudit.accountants.events import (
    Composed, GaussianNoisyMax, LaplaceNoisyMax, RandomizedResponse, Repeated, Shuffled, SubsampledGaussian,
    event_from_dict, flatten, rr_epsilon_from_keep_probability, rr_keep_probability,
)
from dpaudit.errors import ParameterError


def test_privatekt_beta_matches_lemma_1():
    # Qi et al. 2023, Lemma 1: beta = (e^{eps/K}-1)/(e^{eps/K}-1+C); eps=5, K=2, C=10 -> 0.5279
    beta = rr_keep_probability(5.0, 2, 10)
    assert round(beta, 3) == 0.528
    assert beta == pytest.approx(math.expm1(2.5) / (math.expm1(2.5) + 10), rel=1e-15)
    assert rr_epsilon_from_keep_probability(beta, 2, 10) == pytest.approx(5.0, rel=1e-12)


def test_rr_likelihood_ratio_is_exp_sample_epsilon():
    ev = RandomizedResponse(num_classes=10, num_samples=2, epsilon=5.0)
    b, c = ev.beta, ev.num_classes
    ratio = (b + (1 - b) / c) / ((1 - b) / c)
    assert math.log(ratio) == pytest.approx(ev.sample_epsilon, rel=1e-12)
    assert ev.report_epsilon == 5.0


@pytest.mark.parametrize(
    "make, needle",
    [
        (lambda: LaplaceNoisyMax(gamma=-0.1), "The 'gamma' parameter of LaplaceNoisyMax must be a float > 0.0. Got -0.1 instead."),
        (lambda: LaplaceNoisyMax(gamma=float("nan")), "'gamma' parameter of LaplaceNoisyMax"),
        (lambda: RandomizedResponse(num_classes=1, epsilon=1.0), "'num_classes' parameter of RandomizedResponse must be an int >= 2"),
        (lambda: RandomizedResponse(num_classes=3), "exactly one of 'epsilon' or 'keep_probability'"),
        (lambda: SubsampledGaussian(sampling_rate=1.5, noise_multiplier=1.0), "'sampling_rate' parameter of SubsampledGaussian must be a float in the range (0.0, 1.0]. Got 1.5"),
        (lambda: LaplaceNoisyMax(gamma=0.1, votes=[[1.0, -2.0]]), "counts >= 0"),
        (lambda: LaplaceNoisyMax(gamma=0.1, votes=[[1.0]]), "at least 2 classes"),
        (lambda: GaussianNoisyMax(sigma=1.0, threshold=3.0), "both 'threshold' and 'sigma_threshold'"),
        (lambda: Repeated(SubsampledGaussian(0.1, 1.0), -1), "'count' parameter of Repeated"),
    ],
)
def test_invalid_parameters_name_parameter_range_and_value(make, needle):
    with pytest.raises(ParameterError) as err:
        make()
    assert needle in str(err.value)


def test_json_round_trip_of_nested_events():
    votes = np.array([[3.0, 1.0, 0.0], [0.0, 4.0, 0.0]])
    ev = Composed((
        Repeated(RandomizedResponse(num_classes=10, num_samples=2, epsilon=5.0), 7),
        LaplaceNoisyMax(gamma=0.05, sensitivity=4.0, votes=votes),
        GaussianNoisyMax(sigma=40.0, num_queries=3, threshold=300.0, sigma_threshold=150.0),
        SubsampledGaussian(0.0025, 1.3, 6000),
        Shuffled(RandomizedResponse(num_classes=10, epsilon=1.0), 80),
    ))
    text = json.dumps(ev.to_dict())
    back = event_from_dict(json.loads(text))
    assert back == ev
    assert hash(back.events[1]) == hash(ev.events[1])
    assert back.events[1].num_queries == 2 and back.events[1].data_dependent


def test_flatten_multiplies_counts():
    a = SubsampledGaussian(0.1, 1.0, 10)
    b = LaplaceNoisyMax(gamma=0.1, num_queries=5)
    assert flatten(Repeated(Composed((a, Repeated(b, 3))), 2)) == [(a, 2), (b, 6)]
    assert flatten(Repeated(a, 0)) == []


def test_unknown_event_type_is_rejected():
    with pytest.raises(ParameterError, match="'type' of an event dict"):
        event_from_dict({"type": "Nope"})

"""Issue 47: brackets that close where a tight answer is known (tiny epsilons, very many compositions).

- The plain Gaussian mechanism over many compositions: the pair's composed law is exactly N(mu, 1) vs N(0, 1) (the sum
  of the answers is sufficient), so the lower bound is the exact figure (it lost 20% at 7e4 queries on a 2% grid).
- Poisson DP-SGD at epsilon ~1e-3: the PLD route's default interval (1e-4 per step) made the upper bound 2.4x the
  exact figure; the accountant now refines its grid there (checked against dp_accounting at interval 1e-6).
"""

from __future__ import annotations

import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib

import dpaudit


@pytest.mark.parametrize("sigma,count", [(100.0, 70_000), (50.0, 10_000), (1.0, 1), (3.0, 1_000_000)])
def test_gaussian_mechanism_bracket_closes(sigma, count):
    r = dpaudit.account("gaussian", sigma=sigma, count=count, delta=1e-5)
    assert r.lower_bound.epsilon <= r.epsilon <= r.lower_bound.epsilon * (1 + 1e-8)


@pytest.mark.parametrize("n,b,sigma,steps,delta", [(100_000, 10, 5.0, 100, 1e-5), (60_000, 6, 3.0, 1000, 1e-5),
                                                     (1000, 1, 10.0, 10, 1e-6)])
def test_poisson_tiny_epsilon_bracket(n, b, sigma, steps, delta):
    r = dpaudit.account("dpsgd", dataset_size=n, batch_size=b, noise_multiplier=sigma, steps=steps, delta=delta)
    fine = pld_lib.from_gaussian_mechanism(sigma, sampling_prob=b / n, value_discretization_interval=1e-6).self_compose(
        steps).get_epsilon_for_delta(delta - 1e-12)
    # measured: l/u 0.962, 0.946, 0.998 (before: 0.40, 0.49, 0.92); the upper within 4% of the interval-1e-6 PLD
    assert r.lower_bound.epsilon <= r.epsilon <= fine * 1.04
    assert r.lower_bound.epsilon >= 0.94 * r.epsilon

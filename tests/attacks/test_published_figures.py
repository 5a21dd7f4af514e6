"""dpaudit's one-run bound against what Steinke, Nasr & Jagielski 2023 ("Privacy Auditing with One (1) Training Run",
NeurIPS 2023) state, in the idealized setting (guesses as accurate as epsilon-DP allows, or perfect) and at their
published white-box point.

Sources and their limits (issue 13): the stored text of the paper available here covers its Section 1; the plots of
the idealized setting could not be read, so the idealized values below are pinned against Theorem 3 itself (closed
forms that follow from it), not against values read off a figure. The one published DP-SGD number used is from
Section 1 ("Our results"): white-box DP-SGD on CIFAR-10 (Wide ResNet), empirical lower bound epsilon ~ 1.8 at a
theoretical epsilon = 4.
"""

import math

import pytest
from dpaudit.attacks.bounds import one_run_epsilon


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


@pytest.mark.parametrize("r", [10, 100, 1000])
def test_perfect_guesses_delta_zero_closed_form(r):
    # Theorem 3 with delta = 0 and all r guesses correct: P[Binomial(r, q) >= r] = q^r <= beta exactly when
    # q <= beta^(1/r), so the certified bound is logit(beta^(1/r)) (1.052, 3.493, 5.809 for r = 10, 100, 1000 at
    # 95%). It does not depend on m: with perfect guessing, m = 1000 canaries can never certify more than ~5.81.
    beta = 0.05
    expected = _logit(beta ** (1.0 / r))
    assert one_run_epsilon(1000, r, r, delta=0.0, confidence=0.95) == pytest.approx(expected, abs=1e-4)


def test_perfect_guesses_pinned_values():
    assert one_run_epsilon(1000, 10, 10, confidence=0.95) == pytest.approx(1.0518, abs=1e-3)
    assert one_run_epsilon(1000, 100, 100, confidence=0.95) == pytest.approx(3.4929, abs=1e-3)
    assert one_run_epsilon(1000, 1000, 1000, confidence=0.95) == pytest.approx(5.8093, abs=1e-3)


@pytest.mark.parametrize("m,eps", [(1000, 2.0), (1000, 4.0), (10_000, 4.0)])
def test_idealized_expected_accuracy_is_below_and_approaches_epsilon(m, eps):
    # Guesses as accurate as eps-DP randomized response allows, counted at their expectation: the bound is below eps
    # (Theorem 3 is sound) and, with all m guessed, reaches a fraction of eps that grows with m.
    q = 1.0 / (1.0 + math.exp(-eps))
    b = one_run_epsilon(m, m, int(math.floor(m * q)), delta=1e-5, confidence=0.95)
    assert b < eps
    small = one_run_epsilon(m // 10, m // 10, int(math.floor(m // 10 * q)), delta=1e-5, confidence=0.95)
    assert small < b


def test_idealized_pinned_values_delta_1e5():
    # dpaudit's idealized numbers at delta = 1e-5, 95% (bench/bench_published.py), pinned so a change of the bound
    # shows; the m = 1000 values were checked against the mpmath transcription of Theorem 3 in
    # tests/attacks/test_bounds.py (its p-value crosses 0.05 within +-0.002 of each).
    def ideal(m, eps):
        q = 1.0 / (1.0 + math.exp(-eps))
        return one_run_epsilon(m, m, int(math.floor(m * q)), delta=1e-5, confidence=0.95)

    assert ideal(1000, 2.0) == pytest.approx(1.829, abs=2e-3)
    assert ideal(1000, 4.0) == pytest.approx(3.598, abs=2e-3)
    assert ideal(1000, 8.0) == pytest.approx(5.332, abs=2e-3)
    assert ideal(10_000, 4.0) == pytest.approx(3.871, abs=2e-3)


def test_published_whitebox_point_is_within_the_idealized_ceiling():
    # Steinke et al. 2023, Sec. 1: 1.8 certified at theoretical eps = 4 (white-box, CIFAR-10). A certified bound from
    # m canaries cannot exceed the idealized ceiling at the same eps; with m = 1000 that ceiling is ~3.6, and with
    # perfect guesses ~5.8, so the published point is consistent with Theorem 3 as dpaudit computes it, and a bound
    # function returning less than 1.8 there would contradict a published audit.
    q = 1.0 / (1.0 + math.exp(-4.0))
    ceiling = one_run_epsilon(1000, 1000, int(math.floor(1000 * q)), delta=1e-5, confidence=0.95)
    assert 1.8 < ceiling < 4.0

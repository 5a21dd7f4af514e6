"""dpaudit.testing: the pytest helpers, and a zoo of broken mechanisms they must catch beside correct twins
that must pass.

Each zoo entry is a vectorised mechanism ``(input, rng, size) -> outputs``, a pair of neighbouring inputs, and
the claim its author would have made. The broken twin has one classic bug; the correct twin is the same code
without it. Detection margins are asserted below (``min_margin``: epsilon lower bound / claimed epsilon at every
seed 0-4). Measured at 40 000 runs per input, alpha 1e-3, seeds 0-4 (eps LB = the 99.9%-confidence lower bound):

=================================================  =======  ============  ========  ============  ==============
case                                               claim    broken eps LB  margin    correct LB    runs to catch
=================================================  =======  ============  ========  ============  ==============
randomized response, beta(eps) not beta(eps/K)     2.0      5.14-5.46     2.57x     <= 1.74       1 000 / input
Laplace at half the scale                          1.0      1.76-1.82     1.76x     <= 0.91       1 000
DP-SGD step without clipping (norm-3 example)      4.377    5.52-5.71     1.26x     <= 2.31       10 000
noise for the mean added to the sum (n = 10)       1.0      5.65-5.70     5.65x     <= 0.91       500
GNMax with sigma / T noise (T = 8)                 1.478    2.35-2.40     1.59x     <= 0.26       500
=================================================  =======  ============  ========  ============  ==============

("runs to catch": smallest of 500/1k/2k/5k/10k/20k/40k runs per input at which seeds 0-4 all reject.)
False alarms measured for the correct twins: 0 of 100 seeds each at alpha = 0.1 with 2 000 runs per input; a
delta-tight leak (output = input with probability 0.05, claim (0, 0.05)): 0/200 at alpha 0.1, 2/200 at alpha 0.5.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest
from scipy import optimize, stats

from dpaudit.accountants.rdp import DEFAULT_ORDERS, rdp_to_epsilon
from dpaudit.accountants.statement import AccountingResult, PrivacyStatement
from dpaudit.errors import ParameterError
from dpaudit.testing import assert_epsilon_at_most, assert_mechanism_private, statement_of

SAMPLES = 40_000  # runs per input in the default zoo tests
ALPHA = 1e-3


# --------------------------------------------------------------------------------------------------
# The zoo
# --------------------------------------------------------------------------------------------------


def gaussian_mechanism_epsilon(mu: float, delta: float) -> float:
    """Exact epsilon of the Gaussian mechanism with sensitivity/sigma = mu at delta (Balle & Wang, ICML 2018,
    "Improving the Gaussian mechanism", Theorem 8): delta(eps) = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu)."""
    f = lambda e: stats.norm.cdf(mu / 2 - e / mu) - math.exp(e) * stats.norm.cdf(-mu / 2 - e / mu) - delta  # noqa: E731
    return optimize.brentq(f, 0.0, 100.0)


# 1. Randomized response on K labels with C classes (PrivateKT, Lemma 1): the report of K labels claims eps, so
#    each label must use beta(eps/K). Bug: beta computed from eps (each label eps-LDP, the report K*eps).
K, C, RR_EPS = 3, 4, 2.0


def _rr(label_eps: float):
    beta = math.expm1(label_eps) / (math.expm1(label_eps) + C)

    def mech(x, rng, size):
        keep = rng.random((size, K)) < beta
        return np.where(keep, np.asarray(x), rng.integers(0, C, (size, K)))

    return mech


# 2. Laplace mechanism on a sensitivity-1 query, claim eps = 1: scale 1/eps. Bug: half the scale.
def _laplace(scale: float):
    return lambda x, rng, size: x + rng.laplace(0.0, scale, size)


# 3. One DP-SGD step (sum of per-example gradients + N(0, (sigma C)^2 I)), add/remove one example.
#    Bug: no per-example clipping, and the added example has gradient norm 3C.
SGD_C, SGD_SIGMA, SGD_DELTA = 1.0, 1.0, 1e-5
_G = np.random.default_rng(123).normal(0.0, 0.1, (20, 5))  # 20 small gradients in R^5
_G_BIG = np.vstack([_G, np.full((1, 5), 3.0 / math.sqrt(5))])  # plus one of norm 3


def _dpsgd_step(clip: bool):
    def mech(grads, rng, size):
        g = np.asarray(grads)
        if clip:
            norms = np.linalg.norm(g, axis=1, keepdims=True)
            g = g * np.minimum(1.0, SGD_C / np.maximum(norms, 1e-12))
        return g.sum(axis=0) + rng.normal(0.0, SGD_SIGMA * SGD_C, (size, g.shape[1]))

    return mech


# 4. Noisy mean of n values clipped to [0, 1], replace-one neighbours, claim eps = 1: Laplace(1/eps) on the
#    SUM (sensitivity 1), then divide by n. Bug: scale computed for the mean's sensitivity (1/n) but the noise
#    is added to the sum before the division: effective epsilon n * eps.
MEAN_N, MEAN_EPS = 10, 1.0


def _noisy_mean(buggy: bool):
    def mech(values, rng, size):
        v = np.clip(np.asarray(values, dtype=float), 0.0, 1.0)
        scale = (1.0 / MEAN_N if buggy else 1.0) / MEAN_EPS
        return (v.sum() + rng.laplace(0.0, scale, size)) / MEAN_N

    return mech


# 5. Gaussian noisy-max (PATE 2018 GNMax) on teacher votes, claim from RDP alpha/sigma^2 at sigma = 4.
#    Bug: the noise was calibrated on vote *fractions* (sigma / T with T = 8 teachers) but added to counts.
GN_SIGMA, GN_T, GN_DELTA = 4.0, 8, 1e-5


def _gnmax(noise_sd: float):
    def mech(votes, rng, size):
        v = np.asarray(votes, dtype=float)
        return np.argmax(v + rng.normal(0.0, noise_sd, (size, v.size)), axis=1)

    return mech


@dataclass(frozen=True)
class Case:
    name: str
    broken: Callable[..., Any]
    correct: Callable[..., Any]
    inputs: tuple[Any, Any]
    epsilon: float
    delta: float
    min_margin: float  # broken twin: epsilon lower bound >= min_margin * claimed epsilon at every seed 0-4


ZOO = [
    Case("randomized response, beta from eps instead of eps/K", _rr(RR_EPS), _rr(RR_EPS / K),
         (np.zeros(K, dtype=int), np.ones(K, dtype=int)), RR_EPS, 0.0, 2.0),
    Case("Laplace at half the scale", _laplace(0.5), _laplace(1.0), (0.0, 1.0), 1.0, 0.0, 1.5),
    Case("DP-SGD step without clipping", _dpsgd_step(False), _dpsgd_step(True), (_G, _G_BIG),
         gaussian_mechanism_epsilon(1.0 / SGD_SIGMA, SGD_DELTA), SGD_DELTA, 1.0),
    Case("noise calibrated for the mean, added to the sum", _noisy_mean(True), _noisy_mean(False),
         (np.zeros(MEAN_N), np.r_[1.0, np.zeros(MEAN_N - 1)]), MEAN_EPS, 0.0, 4.0),
    Case("GNMax with sigma / T noise", _gnmax(GN_SIGMA / GN_T), _gnmax(GN_SIGMA), (np.array([5, 4, 0]), np.array([4, 5, 0])),
         rdp_to_epsilon(DEFAULT_ORDERS, DEFAULT_ORDERS / GN_SIGMA**2, GN_DELTA)[0], GN_DELTA, 1.3),
]
IDS = [c.name for c in ZOO]


@pytest.mark.parametrize("case", ZOO, ids=IDS)
def test_zoo_broken_is_caught(case: Case) -> None:
    with pytest.raises(AssertionError, match="REFUTES") as info:
        assert_mechanism_private(case.broken, case.inputs, case.epsilon, case.delta, samples=SAMPLES, alpha=ALPHA, seed=0)
    assert "Witness" in str(info.value) and "event" in str(info.value)


@pytest.mark.parametrize("case", ZOO, ids=IDS)
def test_zoo_correct_twin_passes(case: Case) -> None:
    res = assert_mechanism_private(case.correct, case.inputs, case.epsilon, case.delta, samples=SAMPLES, alpha=ALPHA, seed=0)
    assert res.passed and res.witness is None
    assert res.epsilon_lower_bound <= case.epsilon  # valid bounds never exceed the truth (on the 1-alpha event)


@pytest.mark.parametrize("case", ZOO, ids=IDS)
def test_zoo_detection_margin_across_seeds(case: Case) -> None:
    """The broken twin is caught at seeds 0-4, with the epsilon lower bound at least min_margin x the claim."""
    from dpaudit.attacks.mechanism_audit import audit_mechanism

    for seed in range(5):
        res = audit_mechanism(case.broken, case.inputs, case.epsilon, case.delta, samples=SAMPLES, alpha=ALPHA, seed=seed)
        assert not res.passed, seed
        assert res.epsilon_lower_bound >= case.min_margin * case.epsilon, (seed, res.epsilon_lower_bound)


def test_correct_twins_false_alarm_rate() -> None:
    """Correct mechanisms at a loose alpha = 0.2 over 30 seeds: rejections stay within what alpha allows
    (P[Binomial(30, 0.2) >= 13] < 0.01; measured rate is far lower, the union bound is conservative)."""
    from dpaudit.attacks.mechanism_audit import audit_mechanism

    case_rr, case_lap = ZOO[0], ZOO[1]
    rejections = 0
    for seed in range(30):
        for case in (case_rr, case_lap):
            res = audit_mechanism(case.correct, case.inputs, case.epsilon, case.delta, samples=5_000, alpha=0.2, seed=seed)
            rejections += not res.passed
    assert rejections <= 12


@pytest.mark.slow
@pytest.mark.parametrize("case", ZOO, ids=IDS)
def test_zoo_sweep_seeds_slow(case: Case) -> None:
    """Longer sweep: 20 seeds, the broken twin always caught, the correct twin never rejected at alpha 1e-3."""
    from dpaudit.attacks.mechanism_audit import audit_mechanism

    for seed in range(20):
        bad = audit_mechanism(case.broken, case.inputs, case.epsilon, case.delta, samples=SAMPLES, alpha=ALPHA, seed=seed)
        good = audit_mechanism(case.correct, case.inputs, case.epsilon, case.delta, samples=SAMPLES, alpha=ALPHA, seed=seed)
        assert not bad.passed and good.passed, seed


@pytest.mark.slow
def test_false_alarm_rate_slow() -> None:
    """Tight correct mechanisms (randomized response whose claim is exactly its epsilon), alpha = 0.1,
    300 seeds: the rejection rate must be below alpha (binomial upper tail: <= 45 rejections)."""
    from dpaudit.attacks.mechanism_audit import audit_mechanism

    case = ZOO[0]
    rej = sum(not audit_mechanism(case.correct, case.inputs, case.epsilon, 0.0, samples=5_000, alpha=0.1, seed=s).passed
              for s in range(300))
    assert rej <= 45


def test_non_vectorised_mechanism_gives_same_verdicts() -> None:
    def laplace_one(x, rng):
        return x + rng.laplace(0.0, 0.5)

    with pytest.raises(AssertionError):
        assert_mechanism_private(laplace_one, (0.0, 1.0), 1.0, samples=5_000, seed=1)


def test_same_seed_same_result_and_message() -> None:
    case = ZOO[1]
    msgs = []
    for _ in range(2):
        with pytest.raises(AssertionError) as info:
            assert_mechanism_private(case.broken, case.inputs, case.epsilon, samples=5_000, seed=7)
        msgs.append(str(info.value))
    assert msgs[0] == msgs[1]


# --------------------------------------------------------------------------------------------------
# assert_epsilon_at_most
# --------------------------------------------------------------------------------------------------


def _statement(eps: float, delta: float = 1e-5, **kw: Any) -> PrivacyStatement:
    return PrivacyStatement(epsilon=eps, delta=delta, method="rdp", order=8.0, assumptions=("add/remove one record",), **kw)


def test_assert_epsilon_at_most_passes_and_returns_statement() -> None:
    st = _statement(1.5)
    assert assert_epsilon_at_most(st, 1.5) is st
    res = AccountingResult(mechanism="dpsgd", statements=(_statement(3.0), st), headline=1)
    assert assert_epsilon_at_most(res, 2.0, 1e-5) is st


def test_assert_epsilon_at_most_message_has_figure_method_and_assumptions() -> None:
    with pytest.raises(AssertionError) as info:
        assert_epsilon_at_most(_statement(2.5, label="per report"), 2.0)
    msg = str(info.value)
    assert "2.5" in msg and "exceeds the claimed 2" in msg and "method=rdp" in msg and "order=8" in msg
    assert "add/remove one record" in msg and "per report" in msg


def test_assert_epsilon_at_most_delta_and_data_dependence() -> None:
    with pytest.raises(AssertionError, match="delta 1e-5 exceeds the claimed 1e-6"):
        assert_epsilon_at_most(_statement(1.0), 2.0, 1e-6)
    dd = _statement(1.0, data_dependent=True)
    assert_epsilon_at_most(dd, 2.0)
    with pytest.raises(AssertionError, match="DATA-DEPENDENT"):
        assert_epsilon_at_most(dd, 2.0, allow_data_dependent=False)
    with pytest.raises(AssertionError):
        assert_epsilon_at_most(_statement(math.inf), 1e9)


class _FakeLedger:
    """Duck-typed PrivacyLedger (CONTRACTS.md): overall() and statement(party)."""

    parties = ("a", "b")

    def statement(self, party: str) -> PrivacyStatement:
        return _statement({"a": 1.0, "b": 3.0}[party])

    def overall(self) -> PrivacyStatement:
        return self.statement("b")


def test_assert_epsilon_at_most_on_a_ledger() -> None:
    led = _FakeLedger()
    assert_epsilon_at_most(led, 1.0, party="a")
    with pytest.raises(AssertionError, match="party 'b'"):
        assert_epsilon_at_most(led, 2.0, party="b")
    with pytest.raises(AssertionError):
        assert_epsilon_at_most(led, 2.0)
    with pytest.raises(ParameterError):
        statement_of(led, party="zz")
    with pytest.raises(ParameterError):
        statement_of(object())
    with pytest.raises(ParameterError):
        assert_epsilon_at_most(_statement(1.0), -1.0)

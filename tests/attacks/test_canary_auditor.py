"""The canary score auditor: guessing rules and their cost, ties, Theorem 3 in batch against an mpmath oracle, the
multi-run Gaussian-DP bound and the Bayesian estimate against implementations written here, the plan, the model
count check, and Monte Carlo soundness."""

import math

import numpy as np
import pytest
from scipy import special, stats

from dpaudit.attacks.auditor import (
    BayesParams,
    CanaryScoreAuditor,
    EqualGuesses,
    FixedGuesses,
    FixedThresholds,
    GuessGrid,
    PairGrid,
    SignGuesses,
    Split,
)
from dpaudit.attacks.bounds import bayes_epsilon, one_run_epsilon_batch
from dpaudit.attacks.canary import (
    CanaryBound,
    min_models_for_positive_bound,
    multi_run_certified,
    one_run_certified,
    plan_one_run,
)
from dpaudit.attacks.results import AnalysisBound, CurveTest
from dpaudit.errors import DataError, ParameterError
from dpaudit.serial import from_dict, to_dict


def _oracle_p(m, r, v, eps, delta):
    """Theorem 3 of Steinke et al. 2023, term by term in mpmath (as tests/attacks/test_bounds.py's oracle)."""
    import mpmath as mp

    mp.mp.dps = 40
    q = mp.e ** eps / (1 + mp.e ** eps)
    f = lambda u: mp.fsum(mp.binomial(r, j) * q ** j * (1 - q) ** (r - j) for j in range(max(u, 0), r + 1))  # noqa
    tail = f(v)
    if v == 0:
        return 1.0
    if delta == 0:
        return float(min(1, tail))
    return float(min(1, tail + 2 * m * delta * max((f(v - i) - tail) / i for i in range(1, v + 1))))


@pytest.mark.parametrize("m,r,v,delta", [(100, 40, 35, 0.0), (100, 40, 35, 1e-3), (1000, 200, 170, 1e-5),
                                         (50, 50, 50, 1e-4), (2000, 60, 52, 1e-5)])
def test_batch_theorem_3_is_the_oracles_largest_rejected_epsilon(m, r, v, delta):
    eps = float(one_run_epsilon_batch(m, [r], [v], delta=delta, alpha=0.05)[0])
    assert _oracle_p(m, r, v, eps, delta) <= 0.05 * (1 + 1e-9)            # rejected at the value returned ...
    assert _oracle_p(m, r, v, eps + 1e-4, delta) > 0.05                   # ... and not just above it


def test_guess_rules_pairs_are_fixed_by_m():
    assert EqualGuesses().pairs(1000).tolist() == [[10, 10], [25, 25], [50, 50], [125, 125], [250, 250], [500, 500]]
    g = GuessGrid().pairs(1000)
    assert [10, 0] in g.tolist() and [500, 500] in g.tolist() and [1000, 0] in g.tolist()
    assert len(g) == 14 and all(a + b <= 1000 for a, b in g)
    assert GuessGrid().pairs(12).tolist() == [[5, 5], [6, 6], [10, 0], [12, 0]]
    with pytest.raises(ParameterError, match="k_plus"):
        FixedGuesses(-1, 0)
    with pytest.raises(ParameterError, match="totals"):
        GuessGrid(totals=(0.0,))
    with pytest.raises(ParameterError, match="pairs_list"):
        PairGrid(())


def test_ties_are_broken_against_the_auditor():
    """With every score equal nothing can be told apart: whatever the coins, the pessimistic count of correct "in"
    guesses is max(0, k - #out), never the count of a lucky order."""
    inc = np.array([True, False, True, False, False, True])
    a = CanaryScoreAuditor.from_canaries(np.zeros(6), inc)
    assert a.correct(3, 0) == 0 and a.correct(4, 0) == 1 and a.correct(0, 3) == 0 and a.correct(3, 3) == 0
    # distinct scores: the plain count
    b = CanaryScoreAuditor.from_canaries(np.arange(6.0), inc)
    assert b.correct(1, 0) == 1 and b.correct(0, 2) == 1 and b.correct(3, 3) == 2


def test_equal_guesses_reproduce_the_earlier_rule():
    rng = np.random.default_rng(0)
    for _ in range(5):
        inc = rng.random(1000) < 0.5
        x = inc + rng.standard_normal(1000)
        old = one_run_certified(x, inc, delta=1e-5, compare=False)            # default: dpaudit's earlier rule
        new = CanaryScoreAuditor.from_canaries(x, inc).one_run_eps(EqualGuesses(), delta=1e-5)
        assert new.epsilon == pytest.approx(old.epsilon, abs=2e-6)


def test_sign_guesses_reach_the_ceiling_with_a_perfect_attack():
    """All 2000 canaries guessed by the sign of a perfect score: Theorem 3's ceiling 6.50 (delta 0); equal in / out
    counts cannot guess all of them right unless the coins split exactly in half (5.34 when only k = 500 is
    error-free: r = 1000 guesses at level 0.05 / 6)."""
    rng = np.random.default_rng(1)
    inc = rng.random(2000) < 0.5
    a = CanaryScoreAuditor.from_canaries(np.where(inc, 1.0, -1.0), inc)
    assert a.one_run_eps(SignGuesses(1.0), delta=0.0).epsilon == pytest.approx(6.50, abs=0.01)
    assert 5.34 - 0.01 <= a.one_run_eps(EqualGuesses(), delta=0.0).epsilon < 6.2
    assert SignGuesses(1.0).pairs_for(a).tolist() == [[int(inc.sum()), int((~inc).sum())]]


def test_one_run_analyses_side_by_side_and_round_trip():
    rng = np.random.default_rng(2)
    inc = rng.random(1000) < 0.5
    x = inc * 1.5 + rng.standard_normal(1000)
    b = one_run_certified(x, inc, delta=1e-5, rule=GuessGrid())
    names = [e.analysis for e in b.analyses]
    assert names == ["eps", "fdp", "fdp-dp"] and b.analysis == "eps" and b.epsilon == b.analyses[0].epsilon
    fdp = b.analysis_bound("fdp")
    assert fdp.mu > 0 and "Gaussian" in fdp.assumption and fdp.kind == "certified"
    assert b.analysis_bound("eps").assumption == ""
    assert from_dict(CanaryBound, to_dict(b)) == b
    # at delta = 0 the f-DP analysis uses the pure-DP curves (no Gaussian curve has a finite epsilon there)
    b0 = one_run_certified(x, inc, delta=0.0, analysis="fdp")
    assert [e.analysis for e in b0.analyses] == ["eps", "fdp"] and b0.analysis_bound("fdp").mu is None
    # "both": each at half the level, the larger reported and named
    bb = one_run_certified(x, inc, delta=1e-5, analysis="both")
    assert bb.analysis in ("eps", "fdp-dp") and "chosen after the fact" in bb.rule
    assert all(e.confidence == pytest.approx(0.975) for e in bb.analyses if e.analysis != "fdp")
    assert bb.epsilon == max(e.epsilon for e in bb.analyses if e.analysis != "fdp")
    with pytest.raises(ParameterError, match="analysis"):
        one_run_certified(x, inc, analysis="nope")


def _cp_upper(k, n, a):
    return 1.0 if k >= n else float(stats.beta.ppf(1 - a, k + 1, n - k))


def test_multi_run_gdp_matches_an_implementation_written_here():
    """Fixed thresholds, Bonferroni: mu = max_t Phi^-1(1 - FPR_hi(t)) - Phi^-1(FNR_hi(t)) with Clopper-Pearson
    limits at alpha / (2 n) (Dong, Roth, Su 2022, Eq. 6 / Nasr et al. 2023), epsilon of mu-GDP at delta."""
    from dpaudit.accountants.closed_form import gaussian_mechanism_epsilon

    rng = np.random.default_rng(3)
    pos, neg = rng.standard_normal(300) + 1.2, rng.standard_normal(300)
    thr = (0.0, 0.6, 1.2)
    got = CanaryScoreAuditor(pos, neg).multi_run_gdp(FixedThresholds(thr), delta=1e-5)
    best = 0.0
    for t in thr:
        fpr_hi = _cp_upper(int((neg >= t).sum()), 300, 0.05 / 6)
        fnr_hi = _cp_upper(int((pos < t).sum()), 300, 0.05 / 6)
        best = max(best, stats.norm.isf(fpr_hi) - stats.norm.ppf(fnr_hi))
    assert got.mu == pytest.approx(best, rel=1e-9)
    assert got.epsilon == pytest.approx(gaussian_mechanism_epsilon(best, 1e-5), rel=1e-6)
    assert got.kind == "certified" and "Gaussian" in got.assumption


def test_bayes_epsilon_matches_quadrature_written_here():
    """The posterior of epsilon (Zanella-Beguelin et al. 2023) at delta = 0 with the one-sided test dominant: the
    epsilon quantiles follow from the Beta posteriors; compared with a deterministic quasi-Monte-Carlo evaluation
    (Beta quantiles on a grid) instead of dpaudit's seeded sampler."""
    fp, n0, fn, n1 = 12, 400, 150, 400
    med, lo, hi = bayes_epsilon(fp, n0, fn, n1, delta=0.0, confidence=0.9, samples=200_000, seed=1)
    u = (np.arange(400) + 0.5) / 400
    a = stats.beta.ppf(u, fp + 0.5, n0 - fp + 0.5)[:, None]
    b = stats.beta.ppf(u, fn + 0.5, n1 - fn + 0.5)[None, :]
    eps = np.maximum(np.maximum(np.log((1 - b) / a), np.log((1 - a) / b)), 0).ravel()
    q = np.quantile(eps, [0.05, 0.5, 0.95])
    assert (lo, med, hi) == pytest.approx(tuple(q), abs=0.02)
    assert lo < med < hi


def test_multi_run_certified_side_by_side():
    rng = np.random.default_rng(4)
    inc = rng.random(1000) < 0.5
    x = inc * 2.0 + rng.standard_normal(1000)
    b = multi_run_certified(x, inc, delta=1e-5)
    assert [e.analysis for e in b.analyses] == ["eps", "gdp", "bayes"] and b.analysis == "eps"
    bayes = b.analysis_bound("bayes")
    assert bayes.kind == "estimate" and bayes.low <= bayes.epsilon <= bayes.high
    g = multi_run_certified(x, inc, delta=1e-5, analysis="gdp")
    assert g.epsilon == g.analysis_bound("gdp").epsilon and g.epsilon > b.epsilon
    assert from_dict(CanaryBound, to_dict(g)) == g
    # delta = 0: no Gaussian-DP epsilon
    b0 = multi_run_certified(x, inc, delta=0.0)
    assert [e.analysis for e in b0.analyses] == ["eps", "bayes"]
    with pytest.raises(ParameterError, match="analysis"):
        multi_run_certified(x, inc, delta=0.0, analysis="gdp")


def test_result_types_round_trip():
    a = AnalysisBound("fdp", 1.5, 1e-5, 0.95, "rule", mu=0.4, assumption="x", ideal_epsilon=math.inf,
                      details={"k_plus": 3, "pairs": [1, 2]})
    assert from_dict(AnalysisBound, to_dict(a)) == a
    c = CurveTest("accounted", 0.01, 0.95, "rule", {"guesses": 4})
    assert c.rejected and from_dict(CurveTest, to_dict(c)) == c
    with pytest.raises(ParameterError):
        AnalysisBound("eps", 1.0, 0.0, 0.95, "r", kind="guess")


def test_plan_is_fixed_by_the_mechanism_and_the_seed():
    mech = {"kind": "gaussian", "mu": 1.0}
    p1 = plan_one_run(400, mechanism=mech, delta=1e-5, replicates=3, seed=5)
    p2 = plan_one_run(400, mechanism=mech, delta=1e-5, replicates=3, seed=5)
    assert p1 == p2
    assert p1.analysis in ("eps", "fdp-dp", "fdp") and set(p1.rules) == {"eps", "fdp", "fdp-dp"}
    # a subsampled Gaussian is not Gaussian-shaped: the Gaussian-DP analysis never heads its audit
    sub = {"kind": "subsampled_gaussian", "sampling_rate": 0.1, "noise_multiplier": 1.0, "steps": 20}
    p3 = plan_one_run(400, mechanism=sub, delta=1e-5, replicates=3, seed=5, calibrated=True)
    assert p3.eligible == ("eps", "fdp-dp") and p3.analysis != "fdp"
    with pytest.raises(ParameterError, match="mechanism"):
        plan_one_run(400, delta=1e-5)


def test_min_models_for_positive_bound():
    """A perfect attack needs 6 runs on each side of the evaluation half at confidence 0.95 (Clopper-Pearson with
    no error: (alpha / 2)^(1/n) > 1/2 iff n >= 6) and a selection half that finds the threshold: 23 models (11 with
    the canary split 5 / 6, 12 without split 6 / 6; with 22 the 5 / 5 selection halves cannot tell the threshold);
    a weak mechanism needs many more."""
    n = 6
    assert (0.025 ** (1 / n) > 0.5) and not (0.025 ** (1 / (n - 1)) > 0.5)
    assert min_models_for_positive_bound(None, delta=1e-5, confidence=0.95) == 23
    n = min_models_for_positive_bound({"kind": "gaussian", "mu": 1.0}, delta=1e-5, replicates=5)
    assert n is not None and n > 24
    assert min_models_for_positive_bound({"kind": "gaussian", "mu": 0.01}, delta=1e-5, replicates=3,
                                         max_models=4096) is None


def test_bad_input():
    with pytest.raises(DataError):
        CanaryScoreAuditor([np.nan], [0.0])
    with pytest.raises(DataError):
        CanaryScoreAuditor.from_canaries([1.0, 2.0], [True])
    a = CanaryScoreAuditor([1.0, 2.0], [0.0])
    with pytest.raises(ParameterError):
        a.correct(3, 1)
    with pytest.raises(DataError, match="at least 2"):
        a.multi_run_gdp(delta=1e-5)
    with pytest.raises(ParameterError, match="family"):
        a.one_run_fdp(FixedGuesses(1, 1), delta=0.0, family="gaussian")
    with pytest.raises(ParameterError):
        BayesParams(samples=1)
    with pytest.raises(ParameterError):
        Split(fraction=1.0)


def _multi_run_gdp_fails(mu: float, n: int, runs: int, seed: int) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    bad, vals = 0, []
    for r in range(runs):
        inc = rng.random(n) < 0.5
        x = inc * mu + rng.standard_normal(n)
        g = CanaryScoreAuditor(x[inc], x[~inc]).multi_run_gdp(Split(0.25, r), delta=1e-5)
        bad += g.mu > mu
        vals.append(g.mu)
    return bad / runs, float(np.median(vals))


def test_multi_run_gdp_soundness_cheap():
    """200 multi-run audits of the Gaussian mechanism (mu = 1, 400 runs each): the certified mu exceeds the true mu
    in at most 5% of them."""
    rate, med = _multi_run_gdp_fails(1.0, 400, 200, seed=6)
    assert rate <= 0.05 and med > 0.4


@pytest.mark.slow
@pytest.mark.parametrize("mu,n", [(0.5, 1000), (1.0, 200), (2.0, 1000)])
def test_multi_run_gdp_soundness_many_seeds(mu, n):
    rate, _ = _multi_run_gdp_fails(mu, n, 2000, seed=7)
    assert rate <= 0.05


def _one_run_fails(rule, analysis: str, eps: float, m: int, runs: int, seed: int) -> float:
    """eps-DP randomized response per canary (pure DP, the worst case for Theorem 3), audited with ``rule``."""
    rng = np.random.default_rng(seed)
    p = math.exp(eps) / (1 + math.exp(eps))
    bad = 0
    for _ in range(runs):
        inc = rng.random(m) < 0.5
        s = np.where(rng.random(m) < p, inc, ~inc) * 2.0 - 1.0 + 1e-6 * rng.standard_normal(m)
        a = CanaryScoreAuditor.from_canaries(s, inc)
        b = a.one_run_eps(rule, delta=0.0) if analysis == "eps" else a.one_run_fdp(rule, delta=0.0)
        bad += b.epsilon > eps
    return bad / runs


def test_one_run_rules_soundness_cheap():
    for rule in (SignGuesses(1.0), GuessGrid()):
        for analysis in ("eps", "fdp"):
            assert _one_run_fails(rule, analysis, 2.0, 400, 60, seed=8) <= 0.05


@pytest.mark.slow
@pytest.mark.parametrize("analysis", ["eps", "fdp"])
def test_one_run_rules_soundness_many_seeds(analysis):
    for rule in (SignGuesses(1.0), SignGuesses(0.2), GuessGrid(), FixedGuesses(100, 100)):
        assert _one_run_fails(rule, analysis, 1.0, 1000, 1000, seed=9) <= 0.05

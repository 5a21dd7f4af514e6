"""An auditor over canary scores: built once from the scores of included ("in") and excluded ("out") canaries
(sorted once), with every certified bound and estimate of a canary audit as a method on it.

One-run audits (one training run, m canaries each included by an independent fair coin; Steinke, Nasr, Jagielski
2023): the auditor guesses "in" for the ``k_plus`` highest scores and "out" for the ``k_minus`` lowest, abstaining
elsewhere. Which pairs ``(k_plus, k_minus)`` are tried is a *guessing rule* (small frozen dataclasses below), fixed
before the scores are seen; every pair tried is paid for (Bonferroni over the rule's pairs), and the result names
the rule and the pair that produced the bound.

- :class:`EqualGuesses` -- equal in / out counts ``k = f m / 2`` over six fractions (dpaudit's rule before issue
  24; it cannot reach Theorem 3's ceiling: with 2000 canaries a perfect attack certifies at most 5.34, not 6.50).
- :class:`GuessGrid` -- the honest grid: total guess counts ``m, m/2, m/4, ...`` times in-shares
  ``0, 1/4, 1/2, 3/4, 1`` (unequal counts allowed; all guesses "in" suits DP-SGD, whose confident calls are the
  included canaries that were sampled).
- :class:`FixedGuesses` -- one pair, fixed in advance (no correction), e.g. planned on the ideal attack of the
  accounted mechanism before the run (:func:`dpaudit.attacks.canary.plan_one_run`).
- :class:`SignGuesses` -- a fixed number of guesses on the scores farthest from a fixed center, each by its side
  (for log-likelihood-ratio scores; the split is read from the scores alone, no coin).

A held-out split of canaries would not make a data-dependent guess *count* valid in one run: the held-out canaries'
scores come from the same model, so the count chosen on them depends on the output the theorem's fixed count is
about; the grid is therefore paid for by Bonferroni. (The in / out direction of each guess may depend on the
output: only the counts are fixed.)

Ties: the guess sets are the top / bottom of the scores with ties broken *against* the auditor (excluded canaries
first among equal scores for the "in" guesses, included ones first for the "out" guesses). That count is never
above the count of any label-independent tie-break, so the bound stays valid without an arbitrary order.

Analyses of one run: :meth:`CanaryScoreAuditor.one_run_eps` (Theorem 3 of Steinke et al.),
:meth:`~CanaryScoreAuditor.one_run_fdp` (f-DP test of Mahloujifar, Melis, Chaudhuri 2025, :mod:`dpaudit.attacks.fdp`:
Gaussian-DP curves, or (epsilon, delta) curves that need no assumption on the curve's shape) and
:meth:`~CanaryScoreAuditor.one_run_curve_test` (is a stated curve, e.g. a release's accounted PLD, consistent with
the guesses?).

Multi-run audits (one score per independently trained model): threshold choice is a strategy too --
:class:`Split` (chosen on a fraction of the models, the bound computed on the rest) or :class:`FixedThresholds`
(fixed in advance, Bonferroni). Analyses: :meth:`~CanaryScoreAuditor.multi_run_eps` (Clopper-Pearson on the
(epsilon, delta) test; Kairouz et al. 2015, Jagielski et al. 2020), :meth:`~CanaryScoreAuditor.multi_run_gdp`
(the Clopper-Pearson limits of FPR and FNR turned into a certified Gaussian-DP mu, Dong, Roth, Su 2022 / Nasr et al.
2023, and the epsilon it implies at delta) and :meth:`~CanaryScoreAuditor.multi_run_bayes` (posterior credible
interval of epsilon, Zanella-Beguelin et al. 2023 -- an estimate, never a bound).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from scipy import special

from dpaudit.attacks.bounds import (
    bayes_epsilon,
    bayes_gdp_mu,
    clopper_pearson_upper,
    epsilon_lower_bound,
    one_run_epsilon_batch,
)
from dpaudit.attacks.fdp import fdp_approx_dp_epsilon, fdp_gdp_mu, fdp_profile_p_value, gdp_epsilon
from dpaudit.attacks.results import CERTIFIED, ESTIMATE, AnalysisBound, CurveTest, EpsilonBound
from dpaudit.errors import DataError, ParameterError, check_choice, check_float, check_int, check_probability

__all__ = [
    "EqualGuesses",
    "GuessGrid",
    "FixedGuesses",
    "PairGrid",
    "SignGuesses",
    "GuessRule",
    "Split",
    "FixedThresholds",
    "ThresholdStrategy",
    "BayesParams",
    "CanaryScoreAuditor",
    "FDP_FAMILIES",
    "GAUSSIAN_ASSUMPTION",
    "default_fdp_family",
]

FDP_FAMILIES = ("gaussian", "approx-dp")

#: What an epsilon derived from a certified Gaussian-DP mu needs.
GAUSSIAN_ASSUMPTION = ("certified: the mechanism is not mu-GDP for this mu; the epsilon at delta assumes its trade-off "
                       "curve is Gaussian (exact for the Gaussian mechanism, approximate for DP-SGD)")


def default_fdp_family(delta: float) -> str:
    """``"gaussian"`` when ``delta > 0`` (the issue's f-DP analysis), else ``"approx-dp"`` (no mu-GDP curve has a
    finite epsilon at delta = 0; the pure-DP curve is the only one)."""
    return "gaussian" if delta > 0 else "approx-dp"


# --------------------------------------------------------------------------------------------------
# guessing rules (one run) and threshold strategies (multi-run)


def _fractions(values: Sequence[float], name: str, owner: str, *, low_open: bool = True) -> tuple[float, ...]:
    vals = tuple(float(check_float(v, name, owner, low=0.0, high=1.0, low_open=low_open)) for v in values)
    if not vals:
        raise ParameterError(f"The '{name}' parameter of {owner} must be a non-empty list. Got {list(values)} instead.")
    return vals


@dataclass(frozen=True, slots=True)
class EqualGuesses:
    """k "in" and k "out" guesses for each ``k = max(1, round(f m / 2))``, f in ``fractions`` (distinct k with
    ``2k <= m``); Bonferroni over them. dpaudit's rule before issue 24."""

    fractions: tuple[float, ...] = (0.02, 0.05, 0.1, 0.25, 0.5, 1.0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fractions", _fractions(self.fractions, "fractions", "EqualGuesses"))

    def pairs(self, m: int) -> np.ndarray:
        ks = sorted({max(1, int(round(f * m / 2))) for f in self.fractions})
        ks = [k for k in ks if 2 * k <= m] or [0]
        return np.array([[k, k] for k in ks], dtype=np.int64)

    def pairs_for(self, auditor: "CanaryScoreAuditor") -> np.ndarray:
        return self.pairs(auditor.num_canaries)

    def describe(self) -> str:
        return f"equal in/out counts k = f m/2, f in {list(self.fractions)} (Bonferroni)"


@dataclass(frozen=True, slots=True)
class GuessGrid:
    """Total guess counts ``r = max(min_guesses, round(f m))`` for f in ``totals`` (at most m), each split into
    ``round(s r)`` "in" and ``r - round(s r)`` "out" guesses for s in ``in_shares``; Bonferroni over the distinct
    pairs. Unequal counts are allowed; every pair is fixed by m alone, before any score is seen.

    The default is small on purpose: every pair costs level (Theorem 3's delta term, ``2 m delta``, does not shrink
    with the level, so a large grid at delta > 0 loses more than it finds)."""

    totals: tuple[float, ...] = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
    in_shares: tuple[float, ...] = (0.5, 1.0)
    min_guesses: int = 10

    def __post_init__(self) -> None:
        check_int(self.min_guesses, "min_guesses", "GuessGrid", low=1)
        object.__setattr__(self, "totals", _fractions(self.totals, "totals", "GuessGrid"))
        object.__setattr__(self, "in_shares", _fractions(self.in_shares, "in_shares", "GuessGrid", low_open=False))

    def guess_totals(self, m: int) -> list[int]:
        floor = min(m, self.min_guesses)
        return sorted({min(m, max(floor, int(round(f * m)))) for f in self.totals})

    def pairs(self, m: int) -> np.ndarray:
        out = sorted({(int(round(s * r)), r - int(round(s * r))) for r in self.guess_totals(m) for s in self.in_shares})
        return np.array(out, dtype=np.int64)

    def pairs_for(self, auditor: "CanaryScoreAuditor") -> np.ndarray:
        return self.pairs(auditor.num_canaries)

    def describe(self) -> str:
        return f"guess grid: totals f m, f in {list(self.totals)}, x in-shares {list(self.in_shares)} (Bonferroni)"


@dataclass(frozen=True, slots=True)
class FixedGuesses:
    """One pair ``(k_plus, k_minus)`` fixed in advance (no correction)."""

    k_plus: int
    k_minus: int

    def __post_init__(self) -> None:
        check_int(self.k_plus, "k_plus", "FixedGuesses", low=0)
        check_int(self.k_minus, "k_minus", "FixedGuesses", low=0)

    def pairs(self, m: int) -> np.ndarray:
        if self.k_plus + self.k_minus > m:
            raise ParameterError(f"The 'k_plus' + 'k_minus' parameters of FixedGuesses must be at most the {m} canaries. "
                                 f"Got {self.k_plus} + {self.k_minus} instead.")
        return np.array([[self.k_plus, self.k_minus]], dtype=np.int64)

    def pairs_for(self, auditor: "CanaryScoreAuditor") -> np.ndarray:
        return self.pairs(auditor.num_canaries)

    def describe(self) -> str:
        return f"fixed k+ = {self.k_plus}, k- = {self.k_minus}"


@dataclass(frozen=True, slots=True)
class PairGrid:
    """Explicit ``(k_plus, k_minus)`` pairs fixed in advance; Bonferroni over them."""

    pairs_list: tuple[tuple[int, int], ...]

    def __post_init__(self) -> None:
        try:
            pl = tuple((int(a), int(b)) for a, b in self.pairs_list)
        except (TypeError, ValueError):
            pl = ()
        if not pl or any(a < 0 or b < 0 for a, b in pl):
            raise ParameterError(f"The 'pairs_list' parameter of PairGrid must be a non-empty list of (k_plus, k_minus) "
                                 f"pairs of ints >= 0. Got {self.pairs_list!r} instead.")
        object.__setattr__(self, "pairs_list", pl)

    def pairs_for(self, auditor: "CanaryScoreAuditor") -> np.ndarray:
        m = auditor.num_canaries
        if any(a + b > m for a, b in self.pairs_list):
            raise ParameterError(f"The 'pairs_list' parameter of PairGrid must have k_plus + k_minus <= {m} (the "
                                 f"canaries). Got {list(self.pairs_list)} instead.")
        return np.array(self.pairs_list, dtype=np.int64)

    def describe(self) -> str:
        return f"{len(self.pairs_list)} fixed (k+, k-) pair(s) (Bonferroni)"


@dataclass(frozen=True, slots=True)
class SignGuesses:
    """``r = max(1, round(fraction m))`` guesses on the canaries whose scores lie farthest from ``center``, each
    guessed by its side ("in" above, "out" at or below). The in / out split is read from the scores alone (no
    coin), so only r is fixed in advance: one pair, no correction. Meant for scores with a meaningful zero, such as
    log likelihood ratios (``dirac-lr``; PrivateKT's count difference), where the side of ``center = 0`` is the
    Bayes decision."""

    fraction: float = 1.0
    center: float = 0.0

    def __post_init__(self) -> None:
        check_float(self.fraction, "fraction", "SignGuesses", low=0.0, high=1.0, low_open=True)
        check_float(self.center, "center", "SignGuesses")

    def pairs_for(self, auditor: "CanaryScoreAuditor") -> np.ndarray:
        m = auditor.num_canaries
        r = min(m, max(1, int(round(self.fraction * m))))
        d = auditor.pooled_scores - self.center           # ascending by score: a label-free order for ties of |d|
        far = np.argsort(-np.abs(d), kind="stable")[:r]
        kp = int(np.count_nonzero(d[far] > 0))
        return np.array([[kp, r - kp]], dtype=np.int64)

    def describe(self) -> str:
        return f"the {self.fraction:g} m scores farthest from {self.center:g}, guessed by side"


GuessRule = EqualGuesses | GuessGrid | FixedGuesses | PairGrid | SignGuesses


@dataclass(frozen=True, slots=True)
class Split:
    """Choose the threshold on ``fraction`` of the in and of the out trials (seeded), compute the bound on the rest."""

    fraction: float = 0.5
    seed: int = 0

    def __post_init__(self) -> None:
        check_float(self.fraction, "fraction", "Split", low=0.0, high=1.0, low_open=True, high_open=True)
        check_int(self.seed, "seed", "Split", low=0)

    def describe(self) -> str:
        return f"threshold chosen on {self.fraction:g} of the runs (seed {self.seed}), bound on the rest"


@dataclass(frozen=True, slots=True)
class FixedThresholds:
    """Thresholds fixed before the runs, all evaluated on all runs; Bonferroni over them."""

    thresholds: tuple[float, ...]

    def __post_init__(self) -> None:
        t = tuple(float(v) for v in self.thresholds)
        if not t or any(math.isnan(v) for v in t):
            raise ParameterError(f"The 'thresholds' parameter of FixedThresholds must be a non-empty list of numbers. "
                                 f"Got {list(self.thresholds)} instead.")
        object.__setattr__(self, "thresholds", t)

    def describe(self) -> str:
        return f"{len(self.thresholds)} threshold(s) fixed in advance (Bonferroni)"


ThresholdStrategy = Split | FixedThresholds


@dataclass(frozen=True, slots=True)
class BayesParams:
    """Posterior sampling of :meth:`CanaryScoreAuditor.multi_run_bayes`: ``samples`` draws, Beta(``prior``,
    ``prior``) priors on FPR and FNR (0.5: Jeffreys), seeded."""

    samples: int = 20_000
    prior: float = 0.5
    seed: int = 0

    def __post_init__(self) -> None:
        check_int(self.samples, "samples", "BayesParams", low=100, high=10_000_000)
        check_float(self.prior, "prior", "BayesParams", low=0.0, low_open=True)
        check_int(self.seed, "seed", "BayesParams", low=0)


# --------------------------------------------------------------------------------------------------
# the auditor


def _finite_order(x: np.ndarray, other: np.ndarray) -> np.ndarray:
    """``x`` with +-inf (a certain guess, e.g. a likelihood ratio at zero noise) replaced by finite values beyond
    every finite score of ``x`` and ``other`` and on the same side of 0: every bound here reads the scores' order
    and their sign only, so nothing changes but the arithmetic stays finite."""
    if np.all(np.isfinite(x)):
        return x
    both = np.concatenate([x, other])
    fin = both[np.isfinite(both)]
    hi = max(float(fin.max()) if fin.size else 0.0, 1.0)
    lo = min(float(fin.min()) if fin.size else 0.0, -1.0)
    hi, lo = (np.nextafter(hi, np.inf) if hi in fin else hi), (np.nextafter(lo, -np.inf) if lo in fin else lo)
    return np.where(x == np.inf, hi, np.where(x == -np.inf, lo, x))


class CanaryScoreAuditor:
    """Built once from the scores (larger = more likely included) of included and excluded canaries (one run) or
    of the runs with and without the canary (multi-run); every bound is a method. Scores are copied and sorted once.
    """

    __slots__ = ("_in", "_out", "_pooled", "_top_in", "_bottom_out")

    def __init__(self, in_scores, out_scores) -> None:
        owner = "CanaryScoreAuditor"
        pos = np.asarray(in_scores, dtype=np.float64).ravel()
        neg = np.asarray(out_scores, dtype=np.float64).ravel()
        if pos.size + neg.size == 0 or np.isnan(pos).any() or np.isnan(neg).any():
            raise DataError(f"{owner} needs scores without NaN, at least one. Got {pos.size} in and {neg.size} out.")
        pos, neg = np.sort(_finite_order(pos, neg)), np.sort(_finite_order(neg, pos))
        pos.setflags(write=False)
        neg.setflags(write=False)
        self._in, self._out = pos, neg
        s = np.concatenate([pos, neg])
        pooled = np.sort(s)
        pooled.setflags(write=False)
        self._pooled = pooled
        lab = np.concatenate([np.ones(pos.size, np.int64), np.zeros(neg.size, np.int64)])
        top = np.lexsort((lab, -s))          # score descending, excluded first among ties (against the auditor)
        bottom = np.lexsort((-lab, s))       # score ascending, included first among ties
        self._top_in = np.concatenate([[0], np.cumsum(lab[top])])
        self._bottom_out = np.concatenate([[0], np.cumsum(1 - lab[bottom])])

    @classmethod
    def from_canaries(cls, scores, included) -> "CanaryScoreAuditor":
        """From one score per canary and its coin (one run)."""
        s = np.asarray(scores, dtype=np.float64).ravel()
        inc = np.asarray(included).ravel()
        if inc.dtype != bool and not np.all(np.isin(inc, (0, 1))):
            raise DataError("CanaryScoreAuditor.from_canaries: 'included' must be booleans (or 0/1).")
        inc = inc.astype(bool)
        if s.size != inc.size:
            raise DataError(f"CanaryScoreAuditor.from_canaries: 'scores' and 'included' must be of equal length. Got "
                            f"{s.size} and {inc.size}.")
        return cls(s[inc], s[~inc])

    @property
    def in_scores(self) -> np.ndarray:
        return self._in

    @property
    def out_scores(self) -> np.ndarray:
        return self._out

    @property
    def pooled_scores(self) -> np.ndarray:
        """All scores, ascending, without their labels (what a guessing rule may look at)."""
        return self._pooled

    @property
    def num_in(self) -> int:
        return int(self._in.size)

    @property
    def num_out(self) -> int:
        return int(self._out.size)

    @property
    def num_canaries(self) -> int:
        return self.num_in + self.num_out

    def correct(self, k_plus, k_minus) -> np.ndarray:
        """Correct guesses of "in" for the ``k_plus`` highest and "out" for the ``k_minus`` lowest scores (ties
        against the auditor), vectorised; requires ``k_plus + k_minus <= m``."""
        kp = np.asarray(k_plus, dtype=np.int64)
        km = np.asarray(k_minus, dtype=np.int64)
        m = self.num_canaries
        if np.any(kp < 0) or np.any(km < 0) or np.any(kp + km > m):
            raise ParameterError(f"Guess counts must be >= 0 with k_plus + k_minus <= {m}. Got {kp} and {km}.")
        return self._top_in[kp] + self._bottom_out[km]

    # ---------------------------------------------------------------------------------------------- one run

    def _pairs(self, rule: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if not hasattr(rule, "pairs_for"):
            raise ParameterError(f"The 'rule' parameter must be a guessing rule (EqualGuesses, GuessGrid, FixedGuesses, "
                                 f"SignGuesses). Got {rule!r} instead.")
        pairs = np.asarray(rule.pairs_for(self), dtype=np.int64).reshape(-1, 2)
        kp, km = pairs[:, 0], pairs[:, 1]
        return kp, km, self.correct(kp, km)

    def _one_run_details(self, rule: Any, kp, km, c, j: int | None) -> dict[str, Any]:
        d: dict[str, Any] = {"pairs": int(kp.size), "num_canaries": self.num_canaries, "rule_name": type(rule).__name__}
        if j is not None:
            d.update(k_plus=int(kp[j]), k_minus=int(km[j]), guesses=int(kp[j] + km[j]), correct=int(c[j]))
        return d

    def one_run_eps_each(self, k_plus, k_minus, *, delta: float = 0.0, alpha=0.05) -> np.ndarray:
        """Theorem 3's bound for each pair ``(k_plus[j], k_minus[j])`` at its own level ``alpha`` (broadcast), no
        correction: the building block of the rules (vectorised)."""
        kp, km = np.broadcast_arrays(np.atleast_1d(k_plus), np.atleast_1d(k_minus))
        c = self.correct(kp, km)
        r = kp + km
        live = (r > 0) & (2 * c > r)
        out = np.zeros(kp.shape, dtype=np.float64)
        if live.any():
            a = np.broadcast_to(np.asarray(alpha, dtype=np.float64), kp.shape)[live]
            out[live] = one_run_epsilon_batch(self.num_canaries, r[live], c[live], delta=delta, alpha=a)
        return out

    def one_run_fdp_each(self, k_plus, k_minus, *, delta: float = 0.0, alpha=0.05,
                         family: str = "approx-dp") -> np.ndarray:
        """The f-DP test's largest rejected parameter (mu for ``"gaussian"``, epsilon for ``"approx-dp"``) for each
        pair at its own level ``alpha`` (broadcast), no correction (vectorised)."""
        check_choice(family, "family", "one_run_fdp_each", FDP_FAMILIES)
        kp, km = np.broadcast_arrays(np.atleast_1d(k_plus), np.atleast_1d(k_minus))
        c = self.correct(kp, km)
        r = kp + km
        live = (r > 0) & (2 * c > r)          # at most half right: not even perfect privacy is rejected
        out = np.zeros(kp.shape, dtype=np.float64)
        if live.any():
            conf = 1.0 - np.broadcast_to(np.asarray(alpha, dtype=np.float64), kp.shape)[live]
            if family == "gaussian":
                out[live] = fdp_gdp_mu(self.num_canaries, r[live], c[live], confidence=conf)
            else:
                out[live] = fdp_approx_dp_epsilon(self.num_canaries, r[live], c[live], delta=delta, confidence=conf)
        return out

    def one_run_eps(self, rule: Any = None, *, delta: float = 0.0, confidence: float = 0.95) -> AnalysisBound:
        """Theorem 3 of Steinke, Nasr, Jagielski 2023 for every pair of ``rule`` (default :class:`GuessGrid`) at level
        ``(1 - confidence) / pairs``; the largest bound, with the pair that gave it. Valid for any (epsilon,
        delta)-DP mechanism (coins fair and independent)."""
        owner = "one_run_eps"
        rule = GuessGrid() if rule is None else rule
        conf = check_probability(confidence, "confidence", owner)
        d = check_float(delta, "delta", owner, low=0.0, high=1.0, high_open=True)
        kp, km, c = self._pairs(rule)
        vals = self.one_run_eps_each(kp, km, delta=d, alpha=(1.0 - conf) / kp.size)
        j = int(np.argmax(vals)) if vals.max() > 0 else None
        best = float(vals[j]) if j is not None else 0.0
        return AnalysisBound("eps", best, d, conf, rule.describe(), CERTIFIED,
                             details=self._one_run_details(rule, kp, km, c, j))

    def one_run_fdp(self, rule: Any = None, *, delta: float = 0.0, confidence: float = 0.95,
                    family: str | None = None) -> AnalysisBound:
        """The f-DP test (Mahloujifar et al. 2025) for every pair of ``rule`` at level ``(1 - confidence) / pairs``.

        ``family="gaussian"`` (default when ``delta > 0``): the largest mu whose mu-GDP curve is rejected
        (``mu``) and the epsilon of that curve at ``delta`` (needs a Gaussian trade-off curve, see
        :data:`GAUSSIAN_ASSUMPTION`). ``family="approx-dp"`` (default at ``delta = 0``): the largest epsilon whose
        (epsilon, delta)-DP curve is rejected; no assumption beyond the coins."""
        owner = "one_run_fdp"
        rule = GuessGrid() if rule is None else rule
        conf = check_probability(confidence, "confidence", owner)
        d = check_float(delta, "delta", owner, low=0.0, high=1.0, high_open=True)
        fam = default_fdp_family(d) if family is None else check_choice(family, "family", owner, FDP_FAMILIES)
        if fam == "gaussian" and d == 0.0:
            raise ParameterError(f"The 'family' parameter of {owner} must be 'approx-dp' at delta = 0 (no mu-GDP curve "
                                 "has a finite epsilon at delta = 0). Got 'gaussian' instead.")
        kp, km, c = self._pairs(rule)
        vals = self.one_run_fdp_each(kp, km, delta=d, alpha=(1.0 - conf) / kp.size, family=fam)
        j = int(np.argmax(vals)) if vals.max() > 0 else None
        best = float(vals[j]) if j is not None else 0.0
        details = {**self._one_run_details(rule, kp, km, c, j), "family": fam}
        if fam == "gaussian":
            return AnalysisBound("fdp", gdp_epsilon(best, d), d, conf, rule.describe(), CERTIFIED, mu=best,
                                 assumption=GAUSSIAN_ASSUMPTION, details=details)
        return AnalysisBound("fdp", best, d, conf, rule.describe(), CERTIFIED, details=details)

    def one_run_curve_test(self, epsilons, deltas, rule: Any = None, *, confidence: float = 0.95,
                           curve: str = "stated privacy profile") -> CurveTest:
        """Is the trade-off curve of the privacy profile ``(epsilons, deltas)`` (e.g. a release's accounted PLD)
        consistent with the guesses? The f-DP test's smallest rejecting level over the rule's pairs, times the
        number of pairs (Bonferroni), capped at 1."""
        rule = GuessGrid() if rule is None else rule
        conf = check_probability(confidence, "confidence", "one_run_curve_test")
        kp, km, c = self._pairs(rule)
        r = kp + km
        p = np.ones(kp.size)
        live = (r > 0) & (2 * c > r)
        if live.any():
            p[live] = fdp_profile_p_value(self.num_canaries, r[live], c[live], epsilons, deltas)
        j = int(np.argmin(p))
        return CurveTest(curve, float(min(1.0, p[j] * kp.size)), conf, rule.describe(),
                         details=self._one_run_details(rule, kp, km, c, j))

    # ---------------------------------------------------------------------------------------------- multi-run

    def _check_multi(self, owner: str) -> None:
        if self.num_in < 2 or self.num_out < 2:
            raise DataError(f"{owner} needs at least 2 runs with and 2 without the canary; got {self.num_in} and "
                            f"{self.num_out} (too few runs).")

    def multi_run_eps(self, strategy: Any = None, *, delta: float = 0.0, confidence: float = 0.95) -> EpsilonBound:
        """Clopper-Pearson lower bound of the (epsilon, delta) test (``kind="certified"``: every run independent)."""
        strategy = Split() if strategy is None else strategy
        self._check_multi("multi_run_eps")
        if isinstance(strategy, FixedThresholds):
            return epsilon_lower_bound(self._in, self._out, delta=delta, confidence=confidence, selection="bonferroni",
                                       thresholds=strategy.thresholds, kind=CERTIFIED)
        if not isinstance(strategy, Split):
            raise ParameterError(f"The 'strategy' parameter of multi_run_eps must be Split or FixedThresholds. Got "
                                 f"{strategy!r} instead.")
        return epsilon_lower_bound(self._in, self._out, delta=delta, confidence=confidence, selection="split",
                                   seed=strategy.seed, fraction=strategy.fraction, kind=CERTIFIED)

    def multi_run_gdp(self, strategy: Any = None, *, delta: float = 0.0, confidence: float = 0.95) -> AnalysisBound:
        """Certified Gaussian-DP mu from the Clopper-Pearson upper limits of FPR and FNR at one threshold (each at
        ``(1 - confidence) / 2``, over the thresholds tried for :class:`FixedThresholds`):
        ``mu >= Phi^{-1}(1 - FPR_hi) - Phi^{-1}(FNR_hi)`` (a mu-GDP mechanism has FNR >= G_mu(FPR) at every
        threshold); ``epsilon`` is mu's at ``delta`` (:data:`GAUSSIAN_ASSUMPTION`; inf at delta = 0)."""
        owner = "multi_run_gdp"
        strategy = Split() if strategy is None else strategy
        conf = check_probability(confidence, "confidence", owner)
        d = check_float(delta, "delta", owner, low=0.0, high=1.0, high_open=True)
        self._check_multi(owner)
        alpha = 1.0 - conf
        if isinstance(strategy, FixedThresholds):
            thr = np.asarray(strategy.thresholds)
            mu, fnr, fpr, fnr_hi, fpr_hi = _gdp_at(self._in, self._out, thr, alpha / (2 * thr.size))
            i = int(np.argmax(mu))
            n1, n0 = self.num_in, self.num_out
        elif isinstance(strategy, Split):
            rng = np.random.default_rng(strategy.seed)
            ps, pe = _split(self._in, strategy.fraction, rng)
            ns, ne = _split(self._out, strategy.fraction, rng)
            cand = np.unique(np.concatenate([ps, ns]))
            if cand.size == 0 or pe.size == 0 or ne.size == 0:
                raise DataError(f"{owner}: too few runs to split ({self.num_in} in, {self.num_out} out).")
            sel = _gdp_at(np.sort(ps), np.sort(ns), cand, alpha / 2)[0]
            thr = np.array([cand[int(np.argmax(sel))]])
            mu, fnr, fpr, fnr_hi, fpr_hi = _gdp_at(np.sort(pe), np.sort(ne), thr, alpha / 2)
            i = 0
            n1, n0 = pe.size, ne.size
        else:
            raise ParameterError(f"The 'strategy' parameter of {owner} must be Split or FixedThresholds. Got "
                                 f"{strategy!r} instead.")
        m = float(mu[i])
        details = {"threshold": float(thr[i]), "fpr": float(fpr[i]), "fnr": float(fnr[i]), "fpr_high": float(fpr_hi[i]),
                   "fnr_high": float(fnr_hi[i]), "num_in": int(n1), "num_out": int(n0)}
        return AnalysisBound("gdp", gdp_epsilon(m, d), d, conf, strategy.describe(), CERTIFIED, mu=m,
                             assumption=GAUSSIAN_ASSUMPTION, details=details)

    def multi_run_bayes(self, strategy: Any = None, *, delta: float = 0.0, confidence: float = 0.95,
                        params: BayesParams | None = None, gaussian: bool | None = None) -> AnalysisBound:
        """Bayesian estimate of epsilon (Zanella-Beguelin et al. 2023): Beta posteriors of FPR and FNR at one
        threshold, evaluated on runs it was not chosen on; ``epsilon`` is the posterior median and ``[low, high]``
        the equal-tailed credible interval at ``confidence``. An estimate (``kind="estimate"``), never a bound.

        ``gaussian`` (default: ``delta > 0``): the posterior of the Gaussian-DP mu at :meth:`multi_run_gdp`'s
        threshold, turned into epsilon at delta -- an estimate of the *mechanism's* epsilon if its trade-off curve
        is Gaussian. Otherwise the posterior of the (epsilon, delta) test's formula at :meth:`multi_run_eps`'s
        threshold -- what that one test shows, below the mechanism's epsilon when its worst case lies elsewhere."""
        params = BayesParams() if params is None else params
        d = check_float(delta, "delta", "multi_run_bayes", low=0.0, high=1.0, high_open=True)
        gauss = (d > 0) if gaussian is None else bool(gaussian)
        if gauss:
            if d == 0:
                raise ParameterError("The 'gaussian' parameter of multi_run_bayes must be False at delta = 0 (no mu-GDP "
                                     "curve has a finite epsilon there). Got True instead.")
            strategy = Split(0.25, 0) if strategy is None else strategy
            g = self.multi_run_gdp(strategy, delta=d, confidence=confidence)
            n1, n0 = g.details["num_in"], g.details["num_out"]
            fp, fn = int(round(g.details["fpr"] * n0)), int(round(g.details["fnr"] * n1))
            med, lo, hi = bayes_gdp_mu(fp, n0, fn, n1, confidence=g.confidence, samples=params.samples,
                                       prior=params.prior, seed=params.seed)
            eps = [gdp_epsilon(max(v, 0.0), d) for v in (med, lo, hi)]
            rule = (f"{strategy.describe()}; Beta({params.prior:g}, {params.prior:g}) priors; posterior of the "
                    f"Gaussian-DP mu (median {med:.3g}, [{lo:.3g}, {hi:.3g}])")
            return AnalysisBound("bayes", eps[0], d, g.confidence, rule, ESTIMATE, mu=None, low=eps[1], high=eps[2],
                                 assumption="estimate of the mechanism's epsilon if its trade-off curve is Gaussian",
                                 details={"threshold": g.details["threshold"], "fp": fp, "num_out": n0, "fn": fn,
                                          "num_in": n1, "samples": params.samples, "mu_median": med, "mu_low": lo,
                                          "mu_high": hi})
        b = self.multi_run_eps(strategy, delta=d, confidence=confidence)
        n1, n0 = b.num_members, b.num_nonmembers
        fp, fn = int(round(b.fpr * n0)), int(round(b.fnr * n1))
        med, lo, hi = bayes_epsilon(fp, n0, fn, n1, delta=b.delta, confidence=b.confidence, samples=params.samples,
                                    prior=params.prior, seed=params.seed)
        rule = (strategy or Split()).describe() + f"; Beta({params.prior:g}, {params.prior:g}) priors"
        return AnalysisBound("bayes", med, b.delta, b.confidence, rule, ESTIMATE, low=lo, high=hi,
                             assumption="estimate of what this one test shows (the (eps, delta) formula at its threshold)",
                             details={"threshold": b.threshold, "fp": fp, "num_out": n0, "fn": fn, "num_in": n1,
                                      "samples": params.samples})


def _split(x: np.ndarray, fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    perm = rng.permutation(x.size)
    k = min(max(int(math.floor(x.size * fraction)), 1), x.size - 1) if x.size >= 2 else 0
    return x[perm[:k]], x[perm[k:]]


def _gdp_at(pos_sorted: np.ndarray, neg_sorted: np.ndarray, thr: np.ndarray, alpha_each: float):
    """(mu lower bounds, FNR, FPR, FNR_hi, FPR_hi) of "in iff score >= t" for each t."""
    fn = np.searchsorted(pos_sorted, thr, side="left")
    fp = neg_sorted.size - np.searchsorted(neg_sorted, thr, side="left")
    fnr_hi = clopper_pearson_upper(fn, pos_sorted.size, alpha_each)
    fpr_hi = clopper_pearson_upper(fp, neg_sorted.size, alpha_each)
    with np.errstate(invalid="ignore"):
        mu = special.ndtri(1.0 - fpr_hi) - special.ndtri(fnr_hi)
    mu = np.maximum(np.nan_to_num(mu, nan=0.0, posinf=0.0, neginf=0.0), 0.0)
    return mu, fn / pos_sorted.size, fp / neg_sorted.size, fnr_hi, fpr_hi


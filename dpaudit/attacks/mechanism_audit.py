"""Statistical tests of a mechanism *implementation* against a claimed (epsilon, delta).

A mechanism :math:`M` is :math:`(\\epsilon, \\delta)`-DP for a pair of neighbouring inputs :math:`x, x'` iff
for every event :math:`S`, in both directions,

.. math:: P(S) - e^{\\epsilon} Q(S) \\le \\delta, \\qquad P = \\mathcal{L}(M(x)),\\ Q = \\mathcal{L}(M(x')),

i.e. iff the hockey-stick divergence :math:`D_{e^\\epsilon}(P \\| Q) = \\sup_S P(S) - e^\\epsilon Q(S)` is at most
:math:`\\delta`. The tests here run the mechanism many times on both inputs and compute a *lower confidence
bound* on that divergence; the claim is rejected when the bound exceeds :math:`\\delta`. This is the approach
of DP-Auditorium (Kong et al., "DP-Auditorium: a large-scale library for auditing differential privacy",
IEEE S&P 2024): estimate a divergence lower bound from samples and compare it with what the claim allows.

Two testers, each run in both directions (:math:`P \\| Q` and :math:`Q \\| P`):

``histogram``
    Outputs are discretised into bins (categorical values, or quantile bins of a one-dimensional statistic),
    chosen on a separate *selection* batch. On the *test* batch every bin probability gets a Clopper-Pearson
    interval, and :math:`\\sum_b \\max(0, \\underline{p}_b - e^\\epsilon \\overline{q}_b)` lower-bounds the
    divergence (data processing: binning can only lower it).
``event``
    On the selection batch, candidate events are scored: unions of cells in decreasing order of the estimated
    likelihood ratio (the Neyman-Pearson-optimal shape), and for continuous outputs the half-lines
    :math:`\\{s > t\\}`, :math:`\\{s \\le t\\}` of the statistic. The single best event per direction is then
    tested on the test batch with one Clopper-Pearson bound on :math:`P(S)` and one on :math:`Q(S)`.

**Error control.** Bins and events depend on the selection batch only, so conditionally on it every
Clopper-Pearson bound on the independent test batch holds with its nominal level. ``alpha`` is split equally
between the testers that run; within the histogram tester over the :math:`4m` one-sided bounds
(m bins, 2 inputs, upper and lower), within the event tester over its 4 one-sided bounds (2 directions x
:math:`P(S)`, :math:`Q(S)`). By the union bound all bounds hold simultaneously with probability at least
:math:`1-\\alpha`, and then a correct mechanism is never rejected: **a mechanism that satisfies the claim fails
with probability at most** ``alpha``, whatever it is. On the same event every reported lower bound on epsilon
(at the claimed delta) is valid, all of them at once.

Everything is deterministic given ``seed``: each (input, batch) pair draws from its own child of
``numpy.random.SeedSequence(seed)``.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from scipy import optimize, stats

from dpaudit._format import fmt_number
from dpaudit.errors import ParameterError, check_float, check_int, check_probability
from dpaudit.attacks.bounds import clopper_pearson_lower, clopper_pearson_upper

__all__ = [
    "TesterOutcome",
    "MechanismAuditResult",
    "audit_mechanism",
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "histogram_divergence_bound",
    "TESTERS",
]

TESTERS: tuple[str, ...] = ("histogram", "event")
_OWNER = "audit_mechanism"


# --------------------------------------------------------------------------------------------------
# Clopper-Pearson bounds (vectorised)
# --------------------------------------------------------------------------------------------------


# clopper_pearson_lower / clopper_pearson_upper: one implementation, in dpaudit.attacks.bounds (imported above)


def histogram_divergence_bound(p_lower: np.ndarray, q_upper: np.ndarray, epsilon: float) -> float:
    """:math:`\\sum_b \\max(0, \\underline{p}_b - e^\\epsilon \\overline{q}_b)`: a lower bound on
    :math:`D_{e^\\epsilon}(P\\|Q)` whenever every :math:`\\underline{p}_b \\le P(b)` and :math:`\\overline{q}_b \\ge Q(b)`."""
    return float(np.sum(np.maximum(0.0, np.asarray(p_lower) - math.exp(epsilon) * np.asarray(q_upper))))


def _histogram_epsilon_bound(p_lower: np.ndarray, q_upper: np.ndarray, delta: float) -> float:
    """Largest eps' whose histogram divergence bound still exceeds delta (0 if none): the mechanism is then
    not (eps', delta)-DP for any eps' below it."""
    f = lambda e: histogram_divergence_bound(p_lower, q_upper, e) - delta  # noqa: E731
    if f(0.0) <= 0.0:
        return 0.0
    pos = (p_lower > 0) & (q_upper > 0)
    if not np.any(pos):
        return math.inf
    hi = float(np.max(np.log(p_lower[pos] / q_upper[pos]))) + 1e-9
    if f(hi) > 0.0:  # only bins with q_upper == 0 can do this (cannot happen with finite samples)
        return math.inf
    return float(optimize.brentq(f, 0.0, hi, xtol=1e-10))


def _event_epsilon_bound(p_lower: float, q_upper: float, delta: float) -> float:
    if p_lower <= delta:
        return 0.0
    if q_upper <= 0.0:
        return math.inf
    return max(0.0, math.log((p_lower - delta) / q_upper))


# --------------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TesterOutcome:
    """What one tester found in one direction.

    ``direction`` is ``"x||x'"`` (P = outputs on the first input, Q = on the second) or ``"x'||x"``.
    ``divergence_lower_bound`` is a lower confidence bound on :math:`D_{e^\\epsilon}(P\\|Q)` (compare with
    delta); ``epsilon_lower_bound`` the largest epsilon the data refute at the claimed delta (0 when none).
    ``event`` describes the witness event (the chosen event, or the bins that contribute); ``p_hat``,
    ``q_hat``, ``p_lower``, ``q_upper`` are its empirical and bounding probabilities (summed over
    contributing bins for the histogram tester). ``bounds`` is how many one-sided bounds of level ``level``
    this tester used (its share of the Bonferroni correction).
    """

    tester: str
    direction: str
    divergence_lower_bound: float
    epsilon_lower_bound: float
    event: str
    p_hat: float
    q_hat: float
    p_lower: float
    q_upper: float
    bounds: int
    level: float


@dataclass(frozen=True, slots=True)
class MechanismAuditResult:
    """The verdict of :func:`audit_mechanism`.

    ``passed`` is False when some lower bound on the hockey-stick divergence exceeds ``delta``; a mechanism
    that satisfies the claim gets ``passed=False`` with probability at most ``alpha``.
    ``witness`` is the outcome with the largest divergence bound (the evidence; ``None`` when passed).
    ``samples`` counts mechanism runs (both inputs, selection and test batches).
    """

    passed: bool
    epsilon: float
    delta: float
    alpha: float
    divergence_lower_bound: float
    epsilon_lower_bound: float
    witness: TesterOutcome | None
    outcomes: tuple[TesterOutcome, ...]
    samples: int
    seed: int
    output_kind: str
    details: Mapping[str, Any] = field(default_factory=dict)

    def summary(self) -> str:
        """One paragraph for an assertion message or a log."""
        verdict = "consistent with" if self.passed else "REFUTES"
        text = (
            f"mechanism test ({self.samples} runs, {self.output_kind} outputs, seed {self.seed}, "
            f"alpha {self.alpha:g}) {verdict} the claim (epsilon={fmt_number(self.epsilon)}, delta={fmt_number(self.delta)}): "
            f"hockey-stick divergence >= {self.divergence_lower_bound:.4g} at epsilon {fmt_number(self.epsilon)}, "
            f"epsilon >= {fmt_number(self.epsilon_lower_bound)} at delta {fmt_number(self.delta)} (both at confidence {1 - self.alpha:g})."
        )
        if self.witness is not None:
            w = self.witness
            text += (
                f" Witness ({w.tester} tester, direction {w.direction}): event {w.event}; "
                f"P(S)={w.p_hat:.4g} (>= {w.p_lower:.4g}), Q(S)={w.q_hat:.4g} (<= {w.q_upper:.4g}), "
                f"P(S) - e^eps Q(S) >= {w.divergence_lower_bound:.4g} > delta."
            )
        return text


# --------------------------------------------------------------------------------------------------
# Sampling
# --------------------------------------------------------------------------------------------------


def _is_vectorized(mechanism: Callable[..., Any]) -> bool:
    try:
        sig = inspect.signature(mechanism)
    except (TypeError, ValueError):
        return False
    params = [p for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(params) >= 3 or any(p.kind == p.VAR_POSITIONAL for p in sig.parameters.values())


def _sample(mechanism: Callable[..., Any], x: Any, rng: np.random.Generator, n: int, vectorized: bool) -> np.ndarray:
    if vectorized:
        out = np.asarray(mechanism(x, rng, n))
        if out.ndim == 0 or out.shape[0] != n:
            raise ParameterError(
                f"The 'mechanism' parameter of {_OWNER} must return {n} outputs (first axis) when called as "
                f"mechanism(input, rng, {n}). Got an array of shape {out.shape} instead."
            )
    else:
        out = np.stack([np.asarray(mechanism(x, rng)) for _ in range(n)])
    out = out.reshape(n, -1)
    if out.dtype.kind not in "biuf":
        raise ParameterError(
            f"The 'mechanism' parameter of {_OWNER} must return numbers (bool, int or float). Got dtype {out.dtype} instead."
        )
    if out.dtype.kind == "f" and not np.all(np.isfinite(out)):
        raise ParameterError(f"The 'mechanism' parameter of {_OWNER} returned a non-finite output (nan or inf).")
    return out


# --------------------------------------------------------------------------------------------------
# Cells: how outputs become discrete
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Cells:
    """Cell ids for the selection and test batches of both inputs; ``labels[i]`` describes cell i;
    ``ordered`` is True when cells are intervals of a statistic in increasing order (half-lines exist)."""

    sel: tuple[np.ndarray, np.ndarray]
    test: tuple[np.ndarray, np.ndarray]
    labels: tuple[str, ...]
    ordered: bool


def _fmt_row(row: np.ndarray) -> str:
    vals = [int(v) if float(v).is_integer() else float(v) for v in row]
    return str(vals[0]) if len(vals) == 1 else "(" + ", ".join(str(v) for v in vals) + ")"


def _categorical_cells(sel: Sequence[np.ndarray], test: Sequence[np.ndarray], max_cells: int) -> _Cells:
    pooled_sel = np.concatenate(sel)
    cats, counts = np.unique(pooled_sel, axis=0, return_counts=True)
    if len(cats) > max_cells - 1:  # keep the most frequent, the rest go to "other"
        keep = np.sort(np.argsort(-counts, kind="stable")[: max_cells - 1])
        cats = cats[keep]
    other = len(cats)

    def ids(a: np.ndarray) -> np.ndarray:
        allrows = np.concatenate([cats, a])
        _, inv = np.unique(allrows, axis=0, return_inverse=True)
        inv = inv.ravel()
        lookup = np.full(inv.max() + 1, other, dtype=np.int64)
        lookup[inv[: len(cats)]] = np.arange(len(cats))
        return lookup[inv[len(cats):]]

    labels = tuple(f"output = {_fmt_row(c)}" for c in cats) + ("output not seen in the selection batch",)
    return _Cells(sel=(ids(sel[0]), ids(sel[1])), test=(ids(test[0]), ids(test[1])), labels=labels, ordered=False)


def _projection(sel: Sequence[np.ndarray]) -> np.ndarray:
    a, b = sel
    if a.shape[1] == 1:
        return np.ones(1)
    diff = a.mean(axis=0) - b.mean(axis=0)
    var = 0.5 * (a.var(axis=0) + b.var(axis=0))
    w = diff / np.where(var > 0, var, 1.0)
    norm = np.linalg.norm(w)
    if not np.isfinite(norm) or norm == 0.0:
        w = np.zeros(a.shape[1])
        w[0] = 1.0
        return w
    return w / norm


def _interval_cells(sel: Sequence[np.ndarray], test: Sequence[np.ndarray], num_cells: int) -> tuple[_Cells, np.ndarray]:
    w = _projection(sel)
    s_sel = [a @ w for a in sel]
    s_test = [a @ w for a in test]
    pooled = np.concatenate(s_sel)
    edges = np.unique(np.quantile(pooled, np.linspace(0.0, 1.0, num_cells + 1)[1:-1]))
    ids = lambda s: np.searchsorted(edges, s, side="right")  # noqa: E731  cell i = (edges[i-1], edges[i]]
    stat = "output" if len(w) == 1 else "w . output"
    lo = np.concatenate([[-np.inf], edges])
    hi = np.concatenate([edges, [np.inf]])
    labels = tuple(f"{l:.6g} <= {stat} < {h:.6g}" for l, h in zip(lo, hi))
    cells = _Cells(sel=(ids(s_sel[0]), ids(s_sel[1])), test=(ids(s_test[0]), ids(s_test[1])), labels=labels, ordered=True)
    return cells, np.concatenate([[-np.inf], edges, [np.inf]])


# --------------------------------------------------------------------------------------------------
# Testers
# --------------------------------------------------------------------------------------------------

_DIRECTIONS = ("x||x'", "x'||x")


def _histogram_tester(cells: _Cells, n_test: int, epsilon: float, delta: float, alpha: float) -> list[TesterOutcome]:
    m = len(cells.labels)
    level = alpha / (4 * m)
    counts = [np.bincount(c, minlength=m) for c in cells.test]
    lower = [clopper_pearson_lower(k, n_test, level) for k in counts]
    upper = [clopper_pearson_upper(k, n_test, level) for k in counts]
    out = []
    for d, (i, j) in enumerate(((0, 1), (1, 0))):
        p_lo, q_hi = lower[i], upper[j]
        contrib = p_lo - math.exp(epsilon) * q_hi > 0
        div = histogram_divergence_bound(p_lo, q_hi, epsilon)
        idx = np.flatnonzero(contrib)
        shown = "; ".join(cells.labels[b] for b in idx[:5]) + (f"; ... ({len(idx)} bins)" if len(idx) > 5 else "")
        out.append(
            TesterOutcome(
                tester="histogram",
                direction=_DIRECTIONS[d],
                divergence_lower_bound=div,
                epsilon_lower_bound=_histogram_epsilon_bound(p_lo, q_hi, delta),
                event=f"union of {len(idx)} of {m} bins: {shown}" if len(idx) else f"no bin of {m} contributes",
                p_hat=float(counts[i][idx].sum() / n_test),
                q_hat=float(counts[j][idx].sum() / n_test),
                p_lower=float(p_lo[idx].sum()),
                q_upper=float(q_hi[idx].sum()),
                bounds=4 * m,
                level=level,
            )
        )
    return out


def _candidate_events(cells: _Cells, n_sel: int, p_idx: int, q_idx: int) -> tuple[np.ndarray, np.ndarray, list[np.ndarray], list[str]]:
    """Candidate events from the selection batch as boolean masks over cells, with their selection frequencies."""
    m = len(cells.labels)
    pc = np.bincount(cells.sel[p_idx], minlength=m).astype(np.float64)
    qc = np.bincount(cells.sel[q_idx], minlength=m).astype(np.float64)
    masks: list[np.ndarray] = []
    names: list[str] = []
    ratio = (pc + 0.5) / (qc + 0.5)
    order = np.argsort(-ratio, kind="stable")
    for j in range(1, m):  # nested unions of the cells with the largest estimated likelihood ratio
        mask = np.zeros(m, dtype=bool)
        mask[order[:j]] = True
        masks.append(mask)
        names.append("LR")
    if cells.ordered:
        for j in range(1, m):  # half-lines {s < t} and {s >= t}
            mask = np.zeros(m, dtype=bool)
            mask[:j] = True
            masks.append(mask)
            names.append("below")
            masks.append(~mask)
            names.append("above")
    M = np.array(masks)
    return M @ pc / n_sel, M @ qc / n_sel, masks, names


def _describe(cells: _Cells, mask: np.ndarray, kind: str) -> str:
    idx = np.flatnonzero(mask)
    if cells.ordered:  # merge runs of adjacent intervals: "{a <= s < b} or {c <= s < d}"
        stat = cells.labels[0].split(" <= ")[1].split(" < ")[0]
        starts = idx[np.r_[True, np.diff(idx) > 1]]
        ends = idx[np.r_[np.diff(idx) > 1, True]]
        parts = []
        for a, b in zip(starts, ends):
            lo = cells.labels[a].split(" <= ")[0]
            hi = cells.labels[b].split(" < ")[-1]
            if lo == "-inf":
                parts.append(f"{stat} < {hi}")
            elif hi == "inf":
                parts.append(f"{stat} >= {lo}")
            else:
                parts.append(f"{lo} <= {stat} < {hi}")
        shown = parts[:4] + ([f"... ({len(parts)} intervals)"] if len(parts) > 4 else [])
        return "{" + " or ".join(shown) + "}"
    shown = " or ".join(cells.labels[i] for i in idx[:4])
    return "{" + shown + (f" or ... ({len(idx)} outcomes)" if len(idx) > 4 else "") + "}"


def _event_tester(cells: _Cells, n_sel: int, n_test: int, epsilon: float, delta: float, alpha: float) -> list[TesterOutcome]:
    level = alpha / 4
    e_eps = math.exp(epsilon)
    m = len(cells.labels)
    out = []
    for d, (i, j) in enumerate(((0, 1), (1, 0))):
        p_sel, q_sel, masks, names = _candidate_events(cells, n_sel, i, j)
        # score: the bound each event would get on a test batch of n_test with the selection frequencies
        score = clopper_pearson_lower(np.round(p_sel * n_test), n_test, level) - e_eps * clopper_pearson_upper(
            np.round(q_sel * n_test), n_test, level
        )
        best = int(np.argmax(score))
        mask = masks[best]
        kp = int(np.isin(cells.test[i], np.flatnonzero(mask)).sum())
        kq = int(np.isin(cells.test[j], np.flatnonzero(mask)).sum())
        p_lo = float(clopper_pearson_lower(kp, n_test, level))
        q_hi = float(clopper_pearson_upper(kq, n_test, level))
        out.append(
            TesterOutcome(
                tester="event",
                direction=_DIRECTIONS[d],
                divergence_lower_bound=max(0.0, p_lo - e_eps * q_hi),
                epsilon_lower_bound=_event_epsilon_bound(p_lo, q_hi, delta),
                event=_describe(cells, mask, names[best]),
                p_hat=kp / n_test,
                q_hat=kq / n_test,
                p_lower=p_lo,
                q_upper=q_hi,
                bounds=4,
                level=level,
            )
        )
    del m
    return out


# --------------------------------------------------------------------------------------------------
# The test
# --------------------------------------------------------------------------------------------------


def audit_mechanism(
    mechanism: Callable[..., Any],
    neighbouring_inputs: Sequence[Any],
    epsilon: float,
    delta: float = 0.0,
    *,
    samples: int = 100_000,
    alpha: float = 1e-3,
    seed: int = 0,
    vectorized: bool | None = None,
    statistic: Callable[[np.ndarray], np.ndarray] | None = None,
    testers: Sequence[str] = TESTERS,
    bins: int = 16,
    event_cells: int = 64,
    max_categories: int = 256,
    selection_fraction: float = 0.3,
) -> MechanismAuditResult:
    """Test statistically whether ``mechanism`` can be (epsilon, delta)-DP on one pair of neighbouring inputs.

    Parameters
    ----------
    mechanism:
        ``mechanism(input, rng) -> output`` (a number or an array of numbers), or vectorised
        ``mechanism(input, rng, size) -> outputs`` with ``size`` outputs along the first axis (detected from the
        signature: three positional parameters; force with ``vectorized``). ``rng`` is a
        ``numpy.random.Generator``; the mechanism must draw all its randomness from it.
    neighbouring_inputs:
        The pair ``(x, x')`` of neighbouring inputs (under the neighbouring relation of the claim).
    epsilon, delta:
        The claim: epsilon >= 0, delta in [0, 1).
    samples:
        Mechanism runs per input (the same count for both); ``selection_fraction`` of them choose bins and
        events, the rest test them.
    alpha:
        Bound on the probability that a mechanism satisfying the claim is rejected (Bonferroni over testers,
        directions, bins and events; see the module docstring).
    seed:
        Seeds every draw; same seed, same result.
    statistic:
        Optional post-processing ``f(outputs) -> values`` applied to the (n, ...) array of outputs before
        testing (post-processing cannot increase privacy loss, so a refutation of ``f(M)`` refutes ``M``).
    testers:
        Subset of ``("histogram", "event")``.
    bins, event_cells:
        Number of quantile bins of the histogram tester and of cells the event tester builds its candidate
        events from, for continuous outputs (a 1-D statistic: the output itself, or its projection on the
        direction separating the two inputs' selection samples).
    max_categories:
        Outputs that are integer-valued with at most this many distinct values in the selection batch are
        treated as categorical (one cell per value, plus one for values not seen); otherwise as continuous.
        The histogram tester keeps the ``bins`` most frequent categories (plus "other").

    Returns
    -------
    MechanismAuditResult
    """
    owner = _OWNER
    if not callable(mechanism):
        raise ParameterError(f"The 'mechanism' parameter of {owner} must be callable. Got {mechanism!r:.80} instead.")
    try:
        pair = list(neighbouring_inputs)
    except TypeError:
        pair = []
    if len(pair) != 2:
        raise ParameterError(
            f"The 'neighbouring_inputs' parameter of {owner} must be a pair (x, x'). Got {neighbouring_inputs!r:.80} instead."
        )
    epsilon = check_float(epsilon, "epsilon", owner, low=0.0)
    delta = check_probability(delta, "delta", owner, allow_zero=True)
    samples = check_int(samples, "samples", owner, low=100)
    alpha = check_probability(alpha, "alpha", owner)
    seed = check_int(seed, "seed", owner, low=0)
    bins = check_int(bins, "bins", owner, low=2)
    event_cells = check_int(event_cells, "event_cells", owner, low=2)
    max_categories = check_int(max_categories, "max_categories", owner, low=2)
    selection_fraction = check_float(selection_fraction, "selection_fraction", owner, low=0.0, high=1.0, low_open=True, high_open=True)
    testers = tuple(testers)
    if not testers or any(t not in TESTERS for t in testers) or len(set(testers)) != len(testers):
        raise ParameterError(f"The 'testers' parameter of {owner} must be a non-empty subset of {TESTERS}. Got {testers!r} instead.")
    n_sel = int(round(samples * selection_fraction))
    n_test = samples - n_sel
    if n_sel < 50 or n_test < 50:
        raise ParameterError(
            f"The 'selection_fraction' parameter of {owner} must leave at least 50 runs in each batch. Got {selection_fraction!r} instead."
        )
    if vectorized is None:
        vectorized = _is_vectorized(mechanism)

    rngs = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(4)]
    sel = [_sample(mechanism, pair[k], rngs[k], n_sel, vectorized) for k in (0, 1)]
    test = [_sample(mechanism, pair[k], rngs[2 + k], n_test, vectorized) for k in (0, 1)]
    if sel[0].shape[1] != sel[1].shape[1] or test[0].shape[1] != sel[0].shape[1]:
        raise ParameterError(f"The 'mechanism' parameter of {owner} must return outputs of one shape. Got shapes of different sizes instead.")
    if statistic is not None:
        sel = [np.asarray(statistic(a)).reshape(n_sel, -1) for a in sel]
        test = [np.asarray(statistic(a)).reshape(n_test, -1) for a in test]

    pooled = np.concatenate(sel)
    integral = pooled.dtype.kind in "biu" or bool(np.all(pooled == np.round(pooled)))
    discrete = integral and len(np.unique(pooled, axis=0)) <= max_categories
    a_share = alpha / len(testers)
    outcomes: list[TesterOutcome] = []
    if discrete:
        kind = "discrete"
        if "histogram" in testers:
            outcomes += _histogram_tester(_categorical_cells(sel, test, bins + 1), n_test, epsilon, delta, a_share)
        if "event" in testers:
            outcomes += _event_tester(_categorical_cells(sel, test, max_categories + 1), n_sel, n_test, epsilon, delta, a_share)
    else:
        kind = "continuous"
        if "histogram" in testers:
            outcomes += _histogram_tester(_interval_cells(sel, test, bins)[0], n_test, epsilon, delta, a_share)
        if "event" in testers:
            outcomes += _event_tester(_interval_cells(sel, test, event_cells)[0], n_sel, n_test, epsilon, delta, a_share)

    best = max(outcomes, key=lambda o: (o.divergence_lower_bound, o.epsilon_lower_bound))
    div = best.divergence_lower_bound
    passed = not div > delta
    return MechanismAuditResult(
        passed=passed,
        epsilon=epsilon,
        delta=delta,
        alpha=alpha,
        divergence_lower_bound=div,
        epsilon_lower_bound=max(o.epsilon_lower_bound for o in outcomes),
        witness=None if passed else best,
        outcomes=tuple(outcomes),
        samples=2 * samples,
        seed=seed,
        output_kind=kind,
        details={"selection_samples": n_sel, "test_samples": n_test, "testers": list(testers), "vectorized": bool(vectorized)},
    )

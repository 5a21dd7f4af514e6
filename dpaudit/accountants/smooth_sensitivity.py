"""Smooth sensitivity of GNMax's data-dependent RDP, and its private release (PATE 2018, Section 4 and Appendix).

A data-dependent epsilon is a function of the private votes. To publish it, PATE 2018 adds Gaussian noise scaled
by its smooth sensitivity (Nissim, Raskhodnikova, Smith, STOC 2007):

.. math:: SS_\\beta(n) = \\max_{d \\ge 0} e^{-\\beta d} A^{(d)}(n),\\qquad
          A^{(d)}(n) = \\max_{n' : \\mathrm{dist}(n, n') \\le d}\\ \\max_{n'' \\sim n'} |\\epsilon(n') - \\epsilon(n'')|,

where one step moves one teacher's vote. How dpaudit bounds :math:`A^{(d)}` (the construction):

1. :math:`\\epsilon` at a fixed order :math:`\\lambda` depends on the histogram only through :math:`\\tilde q`, via
   :math:`g(\\tilde q)` = :func:`~dpaudit.accountants.gnmax.rdp_gnmax_mu2` of :func:`~dpaudit.accountants.gnmax.mu2_from_log_q`
   (log q clamped below at -1e300, a larger q, which is always allowed); :math:`g` is non-decreasing in
   :math:`\\tilde q` (PATE 2018, condition C5; checked by the tests).
2. :math:`\\tilde q` is a decreasing function of the **sorted** gaps :math:`n_{(1)} - n_{(i)}`. Sorting is 1-Lipschitz in
   :math:`\\ell_\\infty` and one step moves each count by at most 1, so after :math:`d` steps every sorted gap moved by
   at most :math:`2d` and stays in :math:`[0, N]` (N the row's number of votes, which a step keeps):
   :math:`\\tilde q(n') \\in I_d = [Q_{lo}(d), Q_{hi}(d)]`. Working on sorted counts makes the result invariant to
   relabelling the classes.
3. One step from a histogram with bound :math:`q` lands in :math:`[B_L(q), B_U(q)]` with
   :math:`B_{U/L}(q) = (C-1)\\,\\bar\\Phi(x \\mp \\sqrt2/\\sigma)`, :math:`x = \\bar\\Phi^{-1}(q/(C-1))` (PATE 2018,
   Proposition 13). So :math:`LS(n') \\le \\ell(q') = \\max(g(B_U(q')) - g(q'),\\ g(q') - g(B_L(q')))`.
4. :math:`A^{(d)} \\le \\sup_{q \\in I_d} \\ell(q)`, **computed exactly**: :math:`\\ell` is a fixed function of log q (for
   given :math:`\\sigma, \\lambda, C`). Its jumps (where g, :math:`g \\circ B_U` or :math:`g \\circ B_L` switch to the
   data-independent :math:`\\lambda/\\sigma^2`) are located to adjacent floats by bisection, its interior local extrema
   are bracketed on a fine scan and refined by golden-section search, and between consecutive such points
   :math:`\\ell` is monotone; so the supremum over any interval is the larger of its end values (where the adjacent
   piece slopes towards the end) and the values at the points inside. The scan (64 points per unit of the
   standardised gap, geometric in the far tail) only brackets the extrema: the values come from the refined points and
   the interval's own ends, not from scan points (the tests check against a far denser scan). (PATE 2018's
   Algorithm 3 assumes the shape of its conditions C5-C6 instead — a peak at :math:`q_1 = B_L(q_0)` and a plateau — which
   fails for small :math:`\\sigma`, where :math:`\\ell` has an interior maximum, and by about 2% at :math:`\\sigma = 40`.)

Because :math:`I_d(n) \\subseteq I_{d+1}(n')` for neighbours n, n' and the supremum is monotone under inclusion,
:math:`A^{(d)}(n) \\le A^{(d+1)}(n')` and :math:`SS_\\beta(n) \\le e^\\beta SS_\\beta(n')`: the bound is
:math:`\\beta`-smooth (Nissim et al., Definition 2.1), as PATE 2018's Theorem 23 needs. Beyond :math:`d = \\lceil N/2\\rceil`
the interval no longer grows, so the maximum over d is over finitely many distances.

For a sum over queries the local sensitivities add (one record moves one vote in every query), so
:math:`SS_\\beta` of the total is :math:`\\max_d e^{-\\beta d}\\sum_i A_i^{(d)}`. Confident-GNMax's threshold cost depends
on the largest count m only, which a step moves by at most 1 within :math:`[\\lceil N/C\\rceil, N]`: its :math:`A^{(d)}` is
exact (:func:`local_sensitivity_bounds_threshold`).

The release (PATE 2018, Theorem 23, "GNSS"): publish :math:`\\epsilon_\\lambda(n) + SS_\\beta(n)\\, \\mathcal N(0, \\sigma_s^2)`;
the release itself is :math:`(\\lambda, \\lambda e^{2\\beta}/\\sigma_s^2 + (\\beta\\lambda - \\tfrac12\\log(1-2\\lambda\\beta))/(\\lambda-1))`-RDP
for :math:`1 < \\lambda < 1/(2\\beta)`. :func:`release_gnmax_epsilon` searches :math:`\\beta` and :math:`\\sigma_s`.

The smooth sensitivity is rounded up by a relative 1e-9 (the released function and the bound sum log q's terms in
different orders). Supported range: :math:`10^{-2} \\le \\sigma \\le 10^{8}` and integer vote counts (one vote moves
at a time).
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import log_ndtr, ndtri_exp

from dpaudit.accountants.gnmax import account_gnmax, gaussian_log_q, mu2_from_log_q, rdp_gnmax_mu2, threshold_mu2
from dpaudit.accountants._common import validated_votes
from dpaudit.accountants.rdp import rdp_to_epsilon
from dpaudit.accountants.statement import AccountingResult, PrivacyStatement
from dpaudit.errors import ParameterError, check_float, check_int, check_probability

__all__ = [
    "gnmax_step_bounds",
    "local_sensitivity_bounds_gnmax",
    "smooth_sensitivity_gnmax",
    "local_sensitivity_bounds_threshold",
    "rdp_gnss",
    "SmoothSensitivityRelease",
    "release_noisy_epsilon",
    "release_gnmax_epsilon",
    "RELEASE_STDS",
]

#: log q below this is raised to it (a larger q is always allowed; g is non-decreasing in q).
LOG_Q_FLOOR = -1e300
_SIGMA_RANGE = (1e-2, 1e8)
_MAX_ORDER = 1e5
#: The scan that brackets the local extrema of ell: this many points per unit of the standardised gap x.
_SCAN_PER_UNIT = 64
_MAX_SCAN = 600_000
#: The smooth sensitivity is rounded up by this relative amount: the released function and the bound evaluate log q
#: in different summation orders (last-bit differences), and the bound must cover the function's exact changes.
_SS_SLACK = 1.0 + 1e-9


def _check_sigma(sigma: Any, name: str, owner: str) -> float:
    lo, hi = _SIGMA_RANGE
    return check_float(sigma, name, owner, low=lo, high=hi)


def _check_order(order: float, owner: str) -> float:
    return check_float(order, "order", owner, low=1.0, high=_MAX_ORDER, low_open=True)


def _integer_votes(votes: Any, owner: str) -> np.ndarray:
    v = validated_votes(votes, owner)
    if not np.all(v == np.round(v)) or v.max() > 2**52:
        raise ParameterError(f"The 'votes' parameter of {owner} must hold integer vote counts (one teacher's vote moves at a "
                             "time), each <= 2^52. Got a fractional or too large count instead.")
    return v


def gnmax_step_bounds(log_q: Any, sigma: float, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """``(log B_L(q), log B_U(q))``: bounds on :math:`\\tilde q` one step away (PATE 2018, Proposition 13)."""
    sigma = check_float(sigma, "sigma", "gnmax_step_bounds", low=0.0, low_open=True)
    c = check_int(num_classes, "num_classes", "gnmax_step_bounds", low=2)
    lq = np.asarray(log_q, dtype=np.float64)
    lm = math.log(c - 1)
    cap = math.log1p(-1.0 / c)
    with np.errstate(over="ignore", invalid="ignore"):
        x = -ndtri_exp(np.minimum(lq - lm, math.log(0.5)))  # per-term standardised gap >= 0
        shift = math.sqrt(2.0) / sigma
        lo = lm + log_ndtr(-(x + shift))
        hi = np.minimum(lm + log_ndtr(-(x - shift)), cap)
    return np.minimum(lo, lq), np.maximum(hi, lq)


# --------------------------------------------------------------------------------------------------
# ell(q) and its exact supremum over intervals
# --------------------------------------------------------------------------------------------------


def _float_key(x: float) -> int:
    """An integer that orders doubles as their values do (adjacent doubles differ by 1)."""
    b = int(np.array(x, dtype=np.float64).view(np.int64))
    return b if b >= 0 else -(b & 0x7FFFFFFFFFFFFFFF)


def _key_float(k: int) -> float:
    return float(np.array(k if k >= 0 else -k, dtype=np.int64).view(np.float64)) * (1.0 if k >= 0 else -1.0)


class _Ell:
    """ell(log q) = max(g(B_U(q)) - g(q), g(q) - g(B_L(q))) for one (sigma, order, classes), with the points that cut
    it into monotone pieces (``K``, sorted log q values; ``kval`` = ell there; ``inc[j]`` whether ell increases on
    [K[j], K[j+1]])."""

    def __init__(self, sigma: float, order: float, num_classes: int) -> None:
        self.sigma, self.order, self.c = sigma, order, num_classes
        self.di = order / (sigma * sigma)
        self.cap = math.log1p(-1.0 / num_classes)
        self.lm = math.log(num_classes - 1)
        self._critical_points()

    # -- evaluation
    def g(self, lq: np.ndarray) -> np.ndarray:
        lq = np.clip(np.asarray(lq, dtype=np.float64), LOG_Q_FLOOR, self.cap)
        return rdp_gnmax_mu2(mu2_from_log_q(lq, self.sigma), self.sigma, [self.order])[:, 0].reshape(lq.shape)

    def g_low(self, lq: np.ndarray) -> np.ndarray:
        """A lower bound on g at ``lq`` (0 below the floor, where the clamp would raise it)."""
        lq = np.asarray(lq, dtype=np.float64)
        return np.where(lq >= LOG_Q_FLOOR, self.g(lq), 0.0)

    def __call__(self, lq: Any) -> np.ndarray:
        lq = np.asarray(lq, dtype=np.float64)
        lo, hi = gnmax_step_bounds(lq, self.sigma, self.c)
        g0 = self.g(lq)
        return np.maximum(np.maximum(self.g(hi) - g0, g0 - self.g_low(lo)), 0.0)

    def lq_of_x(self, x: np.ndarray) -> np.ndarray:
        return np.minimum(self.lm + log_ndtr(-x), self.cap)

    # -- structure
    def _jump(self, pred) -> list[float]:
        """Adjacent floats (lo, hi) in [floor, cap] with pred(lo) False and pred(hi) True (pred monotone), or []."""
        a, b = LOG_Q_FLOOR, self.cap
        if pred(a) or not pred(b):
            return []
        ka, kb = _float_key(a), _float_key(b)
        while kb - ka > 1:
            km = (ka + kb) // 2
            if pred(_key_float(km)):
                kb = km
            else:
                ka = km
        return [_key_float(ka), _key_float(kb)]

    def _critical_points(self) -> None:
        di = self.di
        s = self.sigma

        def at(f):
            return lambda z: bool(f(np.array([z]))[0] >= di)

        jumps = (self._jump(at(self.g))
                 + self._jump(at(lambda z: self.g(gnmax_step_bounds(z, s, self.c)[1])))
                 + self._jump(at(lambda z: self.g_low(gnmax_step_bounds(z, s, self.c)[0]))))
        # the scan: uniform in the standardised per-class gap x over the range where g and its shifts change, then
        # geometric out to the floor
        shift = math.sqrt(2.0) / s
        x_cap = float(-ndtri_exp(np.array(self.cap - self.lm)))
        x_far = x_cap + 4.0 * shift + 2.0 * math.sqrt(2.0) * (self.order - 1.0) / s + 4.0 * math.sqrt(2.0) / s + 64.0
        n_uni = int(math.ceil((x_far - x_cap) * _SCAN_PER_UNIT)) + 1
        if n_uni > _MAX_SCAN:
            raise ParameterError(f"The 'order' / 'sigma' of the smooth sensitivity are out of the supported range: order "
                                 f"{self.order:g} at sigma {s:g} needs a scan of {n_uni} points (at most {_MAX_SCAN}); "
                                 "use a larger sigma or a smaller order.")
        x_floor = math.sqrt(-2.0 * LOG_Q_FLOOR)
        xs = np.concatenate([np.linspace(x_cap, x_far, n_uni), np.geomspace(x_far * 1.001, x_floor, 4000)])
        pts = np.unique(np.concatenate([self.lq_of_x(xs), [LOG_Q_FLOOR, self.cap], jumps]))
        vals = self(pts)
        # continuous segments: split between the two floats of every jump
        cuts = set()
        for i in range(0, len(jumps), 2):
            cuts.add(jumps[i])
        k_pts: list[float] = [LOG_Q_FLOOR, self.cap] + jumps
        seg_start = 0
        for i in range(pts.size + 1):
            if i == pts.size or (i > 0 and pts[i - 1] in cuts):
                k_pts += self._extrema(pts[seg_start:i], vals[seg_start:i])
                seg_start = i
        k = np.unique(np.array(k_pts))
        kv = self(k)
        self.K, self.kval = k, kv
        self.inc = kv[1:] >= kv[:-1]
        self.argmax = float(k[int(np.argmax(kv))])
        self.vmax = float(kv.max())
        # sparse table over kval for range maxima
        levels = [kv]
        while 2 ** len(levels) <= kv.size:
            prev, w = levels[-1], 2 ** (len(levels) - 1)
            levels.append(np.maximum(prev[:-w], prev[w:]))
        self._levels = levels

    def _extrema(self, p: np.ndarray, v: np.ndarray) -> list[float]:
        """Local extrema of ell inside one continuous segment (sampled at p, values v), refined by golden section."""
        if p.size < 3:
            return []
        dv = np.diff(v)
        tol = 1e-12 * np.maximum(np.abs(v[1:]), np.abs(v[:-1])) + 1e-300
        sign = np.where(dv > tol, 1, np.where(dv < -tol, -1, 0))
        out = []
        last, last_i = 0, 0
        for i, sg in enumerate(sign):
            if sg == 0:
                continue
            if last != 0 and sg != last:  # direction changed between sample last_i + 1 and i
                lo_i, hi_i = max(last_i, 0), min(i + 1, p.size - 1)
                out.append(self._golden(p[lo_i], p[hi_i], maximum=last > 0))
                out += [float(p[j]) for j in range(last_i + 1, i + 1)]  # the flat stretch, if any
            last, last_i = sg, i
        return out

    def _golden(self, a: float, b: float, maximum: bool) -> float:
        sgn = -1.0 if maximum else 1.0
        invphi = (math.sqrt(5.0) - 1.0) / 2.0
        c, d = b - invphi * (b - a), a + invphi * (b - a)
        fc, fd = sgn * float(self(np.array([c]))[0]), sgn * float(self(np.array([d]))[0])
        for _ in range(200):
            if abs(b - a) <= 4.0 * np.spacing(max(abs(a), abs(b))):
                break
            if fc < fd:
                b, d, fd = d, c, fc
                c = b - invphi * (b - a)
                fc = sgn * float(self(np.array([c]))[0])
            else:
                a, c, fc = c, d, fd
                d = a + invphi * (b - a)
                fd = sgn * float(self(np.array([d]))[0])
        return c if fc < fd else d

    def _range_max(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """max kval[i:j] (j > i), -inf where empty."""
        out = np.full(i.shape, -np.inf)
        has = j > i
        if np.any(has):
            ii, jj = i[has], j[has]
            lev = np.floor(np.log2(jj - ii)).astype(int)
            r = np.empty(ii.size)
            for level in np.unique(lev):
                sel = lev == level
                tab = self._levels[level]
                r[sel] = np.maximum(tab[ii[sel]], tab[jj[sel] - 2**level])
            out[has] = r
        return out

    def sup(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Exact sup of ell over [a, b] (arrays of log q, a <= b), elementwise."""
        a = np.asarray(a, dtype=np.float64)
        b = np.asarray(b, dtype=np.float64)
        out = self._range_max(np.searchsorted(self.K, a, side="left"), np.searchsorted(self.K, b, side="right"))
        pa = np.searchsorted(self.K, a, side="right") - 1
        pb = np.searchsorted(self.K, b, side="right") - 1
        n_pieces = self.inc.size
        need_a = (pa < n_pieces) & ~self.inc[np.minimum(pa, n_pieces - 1)] & (self.K[np.minimum(pa, self.K.size - 1)] != a)
        need_b = (pb < n_pieces) & self.inc[np.minimum(pb, n_pieces - 1)] & (self.K[np.minimum(pb, self.K.size - 1)] != b)
        if np.any(need_a):
            out[need_a] = np.maximum(out[need_a], self(a[need_a]))
        if np.any(need_b):
            out[need_b] = np.maximum(out[need_b], self(b[need_b]))
        return np.maximum(out, 0.0)


_ELL_CACHE: dict[tuple[float, float, int], _Ell] = {}


def _ell(sigma: float, order: float, num_classes: int) -> _Ell:
    key = (float(sigma), float(order), int(num_classes))
    hit = _ELL_CACHE.get(key)
    if hit is None:
        if len(_ELL_CACHE) >= 64:
            _ELL_CACHE.pop(next(iter(_ELL_CACHE)))
        hit = _ELL_CACHE[key] = _Ell(*key)
    return hit


def _gap_table(sigma: float, nmax: int) -> np.ndarray:
    """log Phi(-k / (sqrt 2 sigma)) for integer gaps k = 0..nmax (one term of Proposition 7's sum)."""
    with np.errstate(over="ignore"):
        return log_ndtr(-np.arange(nmax + 1, dtype=np.float64) / (math.sqrt(2.0) * sigma))


def _log_q_of_gaps(idx: np.ndarray, table: np.ndarray, cap: float) -> np.ndarray:
    """log q of integer gap vectors (last axis, ascending) by table look-up, clamped to [floor, cap]."""
    lt = table[idx]
    m = lt[..., 0]  # the smallest gap has the largest term
    safe = np.where(np.isfinite(m), m, 0.0)
    lt -= safe[..., None]
    np.exp(lt, out=lt)
    with np.errstate(divide="ignore"):
        out = safe + np.log(lt.sum(axis=-1))
    return np.clip(out, LOG_Q_FLOOR, cap)


#: Elements (rows x distances x classes) per block of the look-ups.
_BLOCK_ELEMENTS = 3_000_000


def _gnmax_blocks(v: np.ndarray, ell: _Ell, dmax: int):
    """Yield (start, A) blocks: A[r, d] = sup of ell over I_d for d = 0..dmax (rows as in v)."""
    s = -np.sort(-v, axis=1)
    gaps = (s[:, :1] - s[:, 1:]).astype(np.int64)  # ascending
    totals = v.sum(axis=1).astype(np.int64)
    table = _gap_table(ell.sigma, int(totals.max()))
    d2 = 2 * np.arange(dmax + 1, dtype=np.int64)
    rows = max(1, _BLOCK_ELEMENTS // ((dmax + 1) * gaps.shape[1]))
    for start in range(0, v.shape[0], rows):
        g = gaps[start:start + rows]
        n = totals[start:start + rows]
        hi = _log_q_of_gaps(np.maximum(g[:, None, :] - d2[None, :, None], 0), table, ell.cap)
        lo = _log_q_of_gaps(np.minimum(g[:, None, :] + d2[None, :, None], n[:, None, None]), table, ell.cap)
        yield start, np.maximum.accumulate(ell.sup(lo, hi), axis=1)


def local_sensitivity_bounds_gnmax(votes: Any, *, sigma: float, order: float, max_distance: int | None = None) -> np.ndarray:
    """Upper bounds on :math:`A^{(d)}` of one query's data-dependent GNMax RDP at ``order`` (the exact supremum of the
    construction in the module docstring), for d = 0..``max_distance``, per query: shape (queries, max_distance + 1).

    ``max_distance`` defaults to :math:`\\lceil N/2 \\rceil` for the largest row total N (beyond it nothing grows)."""
    owner = "local_sensitivity_bounds_gnmax"
    sigma = _check_sigma(sigma, "sigma", owner)
    order = _check_order(order, owner)
    v = _integer_votes(votes, owner)
    if max_distance is None:
        max_distance = int(math.ceil(v.sum(axis=1).max() / 2.0))
    dmax = check_int(max_distance, "max_distance", owner, low=0, high=10**7)
    ell = _ell(sigma, order, v.shape[1])
    out = np.empty((v.shape[0], dmax + 1))
    for start, a in _gnmax_blocks(v, ell, dmax):
        out[start:start + a.shape[0]] = a
    return out


def _threshold_cost(m: np.ndarray, threshold: float, sigma1: float, order: float) -> np.ndarray:
    return rdp_gnmax_mu2(threshold_mu2(m, threshold, sigma1), math.sqrt(2.0) * sigma1, [order])[:, 0]


def local_sensitivity_bounds_threshold(votes: Any, *, threshold: float, sigma1: float, order: float,
                                       max_distance: int | None = None) -> np.ndarray:
    """:math:`A^{(d)}` of Confident-GNMax's data-dependent threshold cost at ``order`` (the cost of
    :func:`~dpaudit.accountants.gnmax.threshold_mu2` with :func:`~dpaudit.accountants.gnmax.rdp_gnmax_mu2`), d =
    0..``max_distance``, per query.

    The cost is a function g(m) of the largest count m only; a step moves m by at most 1 and m stays in
    :math:`[\\lceil N/C\\rceil, N]` (N votes, C classes), so :math:`LS(m') \\le \\max |g(m'\\pm1) - g(m')|` over the feasible
    neighbours and :math:`A^{(d)}(m) = \\max_{|m'-m| \\le d} LS(m')` over feasible m'."""
    owner = "local_sensitivity_bounds_threshold"
    threshold = check_float(threshold, "threshold", owner)
    sigma1 = _check_sigma(sigma1, "sigma1", owner)
    order = _check_order(order, owner)
    v = _integer_votes(votes, owner)
    totals = v.sum(axis=1)
    if max_distance is None:
        max_distance = int(totals.max())
    dmax = check_int(max_distance, "max_distance", owner, low=0, high=10**7)
    nc = v.shape[1]
    m = v.max(axis=1)
    out = np.empty((v.shape[0], dmax + 1))
    keys = np.stack([totals, m], axis=1)
    uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    inv = inv.ravel()
    cache: dict[float, tuple[float, np.ndarray]] = {}
    rows = np.empty((uniq.shape[0], dmax + 1))
    for u, (n_tot, m0) in enumerate(uniq):
        if n_tot not in cache:
            lo_m = math.ceil(n_tot / nc)
            ms = np.arange(lo_m, n_tot + 1, dtype=np.float64)
            g = _threshold_cost(ms, threshold, sigma1, order)
            step = np.abs(np.diff(g))
            ls = np.zeros(ms.size)
            if step.size:
                ls[:-1] = step
                ls[1:] = np.maximum(ls[1:], step)
            cache[n_tot] = (lo_m, ls)
        lo_m, ls = cache[n_tot]
        c = int(m0 - lo_m)
        d = np.arange(dmax + 1)
        left = np.maximum.accumulate(ls[np.maximum(c - d, 0)])
        right = np.maximum.accumulate(ls[np.minimum(c + d, ls.size - 1)])
        rows[u] = np.maximum(left, right)
    out[:] = rows[inv]
    return out


def _total_a(v: np.ndarray, *, sigma: float, order: float, threshold: float | None, sigma1: float | None,
             answered: np.ndarray | None) -> np.ndarray:
    """sum_i A_i^(d) for d = 0..D (D: where every row's bound stops growing) of the release's total."""
    totals = v.sum(axis=1)
    d_gn = int(math.ceil(totals.max() / 2.0))
    d_thr = int(totals.max()) if threshold is not None else 0
    dmax = max(d_gn, d_thr)
    a = np.zeros(dmax + 1)
    rows = v if answered is None else v[answered]
    if rows.shape[0]:
        ell = _ell(sigma, order, v.shape[1])
        for _, blk in _gnmax_blocks(rows, ell, d_gn):
            a[:d_gn + 1] += blk.sum(axis=0)
            a[d_gn + 1:] += blk[:, -1].sum()
    if threshold is not None and sigma1 is not None:
        a += local_sensitivity_bounds_threshold(v, threshold=threshold, sigma1=sigma1, order=order,
                                                max_distance=dmax).sum(axis=0)
    return a


def _check_pair(threshold: Any, sigma1: Any, owner: str) -> None:
    if (threshold is None) != (sigma1 is None):
        raise ParameterError(f"{owner} needs both 'threshold' and 'sigma1', or neither. "
                             f"Got threshold={threshold!r}, sigma1={sigma1!r} instead.")


def _answered_mask(answered: Any, queries: int, owner: str) -> np.ndarray | None:
    if answered is None:
        return None
    mask = np.asarray(answered)
    if mask.dtype != bool or mask.shape != (queries,):
        raise ParameterError(f"The 'answered' parameter of {owner} must be a bool array of shape ({queries},). "
                             f"Got {mask.dtype} {mask.shape} instead.")
    return mask


def smooth_sensitivity_gnmax(votes: Any, *, sigma: float, order: float, beta: float, threshold: float | None = None,
                             sigma1: float | None = None, answered: Any = None) -> float:
    """:math:`\\max_d e^{-\\beta d} \\sum_i A_i^{(d)}` for the total data-dependent RDP at ``order`` over all queries
    (exact for the construction in the module docstring; :math:`\\beta`-smooth).

    With ``threshold`` and ``sigma1`` (Confident-GNMax) the total also holds every query's data-dependent threshold
    cost, and only the ``answered`` rows (a bool mask; default all) pay the GNMax cost."""
    owner = "smooth_sensitivity_gnmax"
    beta = check_float(beta, "beta", owner, low=0.0, low_open=True)
    sigma = _check_sigma(sigma, "sigma", owner)
    order = _check_order(order, owner)
    _check_pair(threshold, sigma1, owner)
    v = _integer_votes(votes, owner)
    if threshold is not None:
        threshold = check_float(threshold, "threshold", owner)
        sigma1 = _check_sigma(sigma1, "sigma1", owner)
    a = _total_a(v, sigma=sigma, order=order, threshold=threshold, sigma1=sigma1,
                 answered=_answered_mask(answered, v.shape[0], owner))
    return float(np.max(a * np.exp(-beta * np.arange(a.size)))) * _SS_SLACK


def rdp_gnss(beta: float, sigma_ss: float, order: float) -> float:
    """RDP at ``order`` of releasing :math:`f + SS_\\beta \\mathcal N(0, \\sigma_s^2)` (PATE 2018, Theorem 23)."""
    owner = "rdp_gnss"
    beta = check_float(beta, "beta", owner, low=0.0, low_open=True)
    sigma_ss = check_float(sigma_ss, "sigma_ss", owner, low=0.0, low_open=True)
    order = check_float(order, "order", owner, low=1.0, high=1.0 / (2.0 * beta), low_open=True, high_open=True)
    # divided twice, not by sigma_ss**2: a huge sigma_ss gives a vanishing cost and a tiny one an infinite cost (sound),
    # where the square alone overflows (OverflowError)
    return order * math.exp(2.0 * beta) / sigma_ss / sigma_ss + (beta * order - 0.5 * math.log1p(-2.0 * order * beta)) / (order - 1.0)


def _private_total(v: np.ndarray, *, sigma: float, order: float, threshold: float | None, sigma1: float | None,
                   answered: np.ndarray | None) -> float:
    """The released function: sum of the data-dependent GNMax RDP at ``order`` (answered rows; log q clamped at the
    floor, as the smooth sensitivity assumes) and of every row's data-dependent threshold cost."""
    lq = np.maximum(gaussian_log_q(v, sigma), LOG_Q_FLOOR)
    gn = rdp_gnmax_mu2(mu2_from_log_q(lq, sigma), sigma, [order])[:, 0]
    if answered is not None:
        gn = gn[answered]
    total = float(gn.sum())
    if threshold is not None and sigma1 is not None:
        total += float(_threshold_cost(v.max(axis=1), threshold, sigma1, order).sum())
    return total


@dataclass(frozen=True, slots=True)
class SmoothSensitivityRelease:
    """A privately released data-dependent GNMax figure.

    ``noisy_rdp`` (the data-dependent RDP at ``order`` plus :math:`SS_\\beta \\mathcal N(0,\\sigma_s^2)`, clipped at 0) and
    ``epsilon`` (from ``noisy_rdp + release_rdp`` at that order) may be published; ``smooth_sensitivity`` and
    ``private_rdp`` are functions of the private votes: keep them private (they are returned for audits and tests).
    The noisy figure is an unbiased estimate of the private one (before clipping); it is below it about half of the time.
    """

    noisy_rdp: float
    release_rdp: float
    epsilon: float
    delta: float
    order: float
    beta: float
    sigma_ss: float
    seed: int
    smooth_sensitivity: float
    private_rdp: float


def release_noisy_epsilon(votes: Any, *, sigma: float, order: float, beta: float, sigma_ss: float, delta: float, seed: int,
                          threshold: float | None = None, sigma1: float | None = None,
                          answered: Any = None) -> SmoothSensitivityRelease:
    """Release GNMax's data-dependent RDP at ``order`` with smooth-sensitivity Gaussian noise (PATE 2018, Section 4.2).

    Parameters
    ----------
    votes:
        Vote histograms (queries x classes), integer counts.
    sigma:
        GNMax noise standard deviation (supported: 1e-2..1e8).
    order:
        Rényi order :math:`\\lambda`, with :math:`1 < \\lambda < 1/(2\\beta)`.
    beta:
        Smoothness :math:`\\beta > 0` of the smooth sensitivity.
    sigma_ss:
        Noise multiplier :math:`\\sigma_s` of the release.
    delta:
        Target delta for the final epsilon (single-order conversion at ``order``).
    seed:
        Seed of the release noise (recorded; same seed, same figure).
    threshold, sigma1, answered:
        Confident-GNMax (PATE 2018, Algorithm 1): every row's check is charged its data-dependent cost, only the
        ``answered`` rows (bool mask, default all) the GNMax cost; the smooth sensitivity covers both.
    """
    owner = "release_noisy_epsilon"
    sigma = _check_sigma(sigma, "sigma", owner)
    beta = check_float(beta, "beta", owner, low=0.0, low_open=True)
    order = check_float(order, "order", owner, low=1.0, high=min(1.0 / (2.0 * beta), _MAX_ORDER), low_open=True, high_open=True)
    sigma_ss = check_float(sigma_ss, "sigma_ss", owner, low=0.0, low_open=True)
    delta = check_probability(delta, "delta", owner)
    seed = check_int(seed, "seed", owner, low=0)
    _check_pair(threshold, sigma1, owner)
    v = _integer_votes(votes, owner)
    if threshold is not None:
        threshold = check_float(threshold, "threshold", owner)
        sigma1 = _check_sigma(sigma1, "sigma1", owner)
    mask = _answered_mask(answered, v.shape[0], owner)
    private = _private_total(v, sigma=sigma, order=order, threshold=threshold, sigma1=sigma1, answered=mask)
    a = _total_a(v, sigma=sigma, order=order, threshold=threshold, sigma1=sigma1, answered=mask)
    ss = float(np.max(a * np.exp(-beta * np.arange(a.size)))) * _SS_SLACK
    return _release(private, ss, order=order, beta=beta, sigma_ss=sigma_ss, delta=delta, seed=seed)


def _release(private: float, ss: float, *, order: float, beta: float, sigma_ss: float, delta: float,
             seed: int) -> SmoothSensitivityRelease:
    z = float(np.random.default_rng(seed).standard_normal())
    noisy = max(private + ss * sigma_ss * z, 0.0)
    cost = rdp_gnss(beta, sigma_ss, order)
    eps, _ = rdp_to_epsilon([order], [noisy + cost], delta, warn=False)
    return SmoothSensitivityRelease(noisy, cost, eps, delta, order, beta, sigma_ss, seed, ss, private)


#: The search's objective counts this many standard deviations of the release noise (PATE 2018's analysis uses 2).
RELEASE_STDS = 2.0
_BETA_FRACTIONS = np.geomspace(1e-4, 0.99, 96)


def release_gnmax_epsilon(votes: Any, *, sigma: float, delta: float, seed: int | None = None,
                          threshold: float | None = None, sigma1: float | None = None, answered: Any = None,
                          order: float | None = None, beta: float | None = None,
                          sigma_ss: float | None = None) -> AccountingResult:
    """Private release of (Confident-)GNMax's data-dependent epsilon: PATE 2018's smooth-sensitivity release ("GNSS",
    Theorem 23) with its parameters searched, as one :class:`AccountingResult`.

    1. The order: ``order``, or the data-dependent route's best order (:func:`~dpaudit.accountants.gnmax.account_gnmax`).
    2. :math:`\\beta \\in (0, 1/(2\\lambda))` (96 values, geometric) and :math:`\\sigma_s` minimising the data-dependent RDP
       plus the release's own RDP plus ``RELEASE_STDS`` standard deviations of the release noise; for a given
       :math:`\\beta` the best :math:`\\sigma_s = (2\\lambda e^{2\\beta}/(k\\, SS_\\beta))^{1/3}` in closed form (k =
       ``RELEASE_STDS``). ``beta`` / ``sigma_ss`` fix either.
    3. The release: RDP + :math:`SS_\\beta\\sigma_s Z`, Z ~ N(0, 1) drawn from ``seed`` (a fresh one from the operating
       system when None; recorded either way).

    Statements: the released total (answers plus the release itself), the released epsilon of the answers alone, and
    the data-independent figure, which is the headline: the headline is the smallest valid upper bound
    (:func:`~dpaudit.accountants.statement.pick_headline`) and the released figures are noisy estimates, not bounds
    (they name no route). The
    smooth sensitivity and the private RDP are not in the result (they are functions of the votes). The seed is
    recorded in ``facts``: it regenerates the noise, so it must be kept as private as the votes.
    """
    owner = "release_gnmax_epsilon"
    sigma = _check_sigma(sigma, "sigma", owner)
    delta = check_probability(delta, "delta", owner)
    _check_pair(threshold, sigma1, owner)
    if threshold is not None:
        threshold = check_float(threshold, "threshold", owner)
        sigma1 = _check_sigma(sigma1, "sigma1", owner)
    v = _integer_votes(votes, owner)
    mask = _answered_mask(answered, v.shape[0], owner)
    if seed is None:
        seed = secrets.randbits(63)
    seed = check_int(seed, "seed", owner, low=0)
    searched = []
    acc = account_gnmax(v, sigma=sigma, delta=delta, threshold=threshold, sigma1=sigma1, answered=mask)
    dd_stmt = acc.statements[0]
    di_stmt = acc.statements[1]
    if order is None:
        if dd_stmt.order is None:
            raise ParameterError(f"{owner} found no finite data-dependent epsilon to release (the data-dependent RDP is "
                                 "infinite at every order); publish the data-independent figure instead.")
        order = min(float(dd_stmt.order), _MAX_ORDER)
        searched.append("order")
    order = _check_order(order, owner)
    if beta is not None:
        beta = check_float(beta, "beta", owner, low=0.0, high=1.0 / (2.0 * order), low_open=True, high_open=True)
    if sigma_ss is not None:
        sigma_ss = check_float(sigma_ss, "sigma_ss", owner, low=0.0, low_open=True)
    private = _private_total(v, sigma=sigma, order=order, threshold=threshold, sigma1=sigma1, answered=mask)
    a = _total_a(v, sigma=sigma, order=order, threshold=threshold, sigma1=sigma1, answered=mask)
    d = np.arange(a.size)
    betas = np.array([beta]) if beta is not None else _BETA_FRACTIONS / (2.0 * order)
    if beta is None:
        searched.append("beta")
    if sigma_ss is None:
        searched.append("sigma_ss")
    best: tuple[float, float, float, float] | None = None  # (objective, beta, sigma_ss, ss)
    for b in betas:
        ss = float(np.max(a * np.exp(-b * d))) * _SS_SLACK
        if ss == 0.0:  # the released function is constant: nothing to hide, nothing to pay
            s_ss = math.inf if sigma_ss is None else sigma_ss
            cost = 0.0 if math.isinf(s_ss) else rdp_gnss(b, s_ss, order)
            obj = private + cost
        else:
            s_ss = sigma_ss if sigma_ss is not None else (2.0 * order * math.exp(2.0 * b) / (RELEASE_STDS * ss)) ** (1.0 / 3.0)
            obj = private + rdp_gnss(b, s_ss, order) + RELEASE_STDS * ss * s_ss
        if best is None or obj < best[0]:
            best = (obj, float(b), float(s_ss), ss)
    assert best is not None
    _, beta_, sigma_ss_, ss_ = best
    z = float(np.random.default_rng(seed).standard_normal())
    noise = 0.0 if ss_ == 0.0 else ss_ * sigma_ss_ * z
    noisy = max(private + noise, 0.0)
    cost = 0.0 if math.isinf(sigma_ss_) else rdp_gnss(beta_, sigma_ss_, order)
    eps_total, _ = rdp_to_epsilon([order], [noisy + cost], delta, warn=False)
    eps_answers, _ = rdp_to_epsilon([order], [noisy], delta, warn=False)
    route = "smooth-sensitivity release (PATE 2018, GNSS)"
    common = [
        f"PATE 2018's GNSS release (Theorem 23) of the data-dependent RDP at order {order:g}: the private RDP plus "
        f"SS_beta * N(0, {sigma_ss_:.6g}^2), beta = {beta_:.6g}, with dpaudit's beta-smooth bound on the smooth sensitivity "
        "(exact for its construction; see dpaudit.accountants.smooth_sensitivity).",
        "A NOISY ESTIMATE, not a guaranteed upper bound: the released figure is the private one plus zero-mean noise "
        "(clipped at 0) and falls below it about half of the time. The data-independent figure is the guarantee.",
    ]
    if searched:
        common.append(f"The release parameters ({', '.join(searched)}) were chosen by looking at the private votes (as "
                      "PATE 2018's analysis does); Theorem 23 assumes them fixed in advance, so their choice is not covered. "
                      "Fix them beforehand (order, beta, sigma_ss) for a release covered entirely.")
    total_stmt = PrivacyStatement(
        eps_total, delta, route, order,
        tuple(dd_stmt.assumptions[:2]) + tuple(common) + (
            f"Total = released RDP of the answers + the release's own RDP ({cost:.6g} at order {order:g}), composed.",),
        f"released total (answers + release), {v.shape[0]} queries", False,
        details={"route": route + ", total", "order": order, "beta": beta_, "sigma_ss": sigma_ss_,
                 "release_rdp": cost, "noisy_rdp": noisy})
    answers_stmt = PrivacyStatement(
        eps_answers, delta, route, order, tuple(dd_stmt.assumptions[:2]) + tuple(common),
        "released data-dependent epsilon of the answers (noisy)", False,
        details={"route": route + ", answers", "noisy_rdp": noisy})
    facts = {"order": order, "beta": beta_, "sigma_ss": sigma_ss_, "release_rdp": cost, "noisy_rdp": noisy,
             "seed": seed, "searched": ", ".join(searched) or "nothing (all fixed)",
             "objective": f"data-dependent RDP + release RDP + {RELEASE_STDS:g} std of the release noise"}
    warnings_ = [f"The seed ({seed}) regenerates the release noise: keep it as private as the votes (publishing it "
                 "cancels the noise).",
                 "The released epsilons are noisy estimates (unbiased before clipping at 0), not guaranteed upper bounds."]
    params = {"sigma": sigma, "delta": delta, "queries": int(v.shape[0]), "threshold": threshold, "sigma1": sigma1,
              "answered": int(v.shape[0] if mask is None else mask.sum()), "order": order, "beta": beta,
              "sigma_ss": sigma_ss, "seed": seed}
    # the released figures are estimates (no route): the headline is the data-independent guarantee (pick_headline)
    return AccountingResult("gnmax (smooth-sensitivity release)", (total_stmt, answers_stmt, di_stmt), None, params,
                            facts, tuple(warnings_))

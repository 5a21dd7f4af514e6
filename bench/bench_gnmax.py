"""Benchmark: dpaudit's vectorised GNMax data-dependent analysis (PATE 2018) against a per-query organisation.

Run ``python bench/bench_gnmax.py [--queries 10000] [--big 1000000] [--out runs/bench/gnmax.json]``.

The baseline is organised as tensorflow_privacy's PATE analysis is: a Python loop over queries; for each query, the
log of Proposition 7's q from that one vote row (numpy on the row), then the data-dependent RDP of Theorem 6 for all
orders at once (numpy over orders), summed into a running total. It is written here from the paper's formulas (not
copied), with the same orders and conditions as dpaudit, so both give the same epsilon.
Timings are wall-clock in one process; on a shared machine only the ratio is meaningful.
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats
from scipy.special import log_ndtr

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dpaudit._io import write_json  # noqa: E402
from dpaudit.accountants.gnmax import account_gnmax  # noqa: E402
from dpaudit.accountants.rdp import DEFAULT_ORDERS, rdp_to_epsilon  # noqa: E402


def per_query_epsilon(votes: np.ndarray, sigma: float, delta: float, orders: np.ndarray, *, tfp_style: bool = True) -> float:
    """Per-query organisation of the PATE 2018 data-dependent analysis (Prop. 7 q, Theorem 6 with Prop. 10's orders).

    ``tfp_style``: q as tensorflow_privacy's PATE analysis computes it per row (``scipy.stats.norm.logsf`` on the
    row's gaps, a Python-level log-sum-exp); otherwise a leaner row computation (``scipy.special.log_ndtr``)."""
    total = np.zeros(orders.size)
    var = sigma * sigma
    for counts in votes:
        s = np.sort(counts)[::-1]
        if tfp_style:
            lt = stats.norm.logsf(s[0] - s[1:], scale=math.sqrt(2.0) * sigma)
            m = max(lt)
            logq = min(m + math.log(sum(np.exp(lt - m))), math.log1p(-1.0 / counts.size))
        else:
            lt = log_ndtr(-(s[0] - s[1:]) / (math.sqrt(2.0) * sigma))
            m = lt.max()
            logq = min(m + math.log(np.exp(lt - m).sum()), math.log1p(-1.0 / counts.size))
        rdp = orders / var
        mu2 = sigma * math.sqrt(max(-logq, 0.0))
        mu1 = mu2 + 1.0
        if mu2 > 1.0 and -logq > mu2 / var:
            eps1, eps2 = mu1 / var, mu2 / var
            if logq <= (mu2 - 1.0) * eps2 - mu2 * (math.log(mu1 / (mu1 - 1.0)) + math.log(mu2 / (mu2 - 1.0))):
                log1q = math.log1p(-math.exp(logq))
                x = (logq + eps2) * (1.0 - 1.0 / mu2)
                log_a = log1q - (math.log1p(-math.exp(x)) if x < -math.log(2) else math.log(-math.expm1(x)))
                log_b = eps1 - logq / (mu1 - 1.0)
                lm1 = orders - 1.0
                bound = np.logaddexp(log1q + lm1 * log_a, logq + lm1 * log_b) / lm1
                ok = orders < mu1
                rdp = np.where(ok, np.minimum(np.maximum(bound, 0.0), rdp), rdp)
        total += rdp
    return rdp_to_epsilon(orders, total, delta, warn=False)[0]


def _votes(n: int, rng: np.random.Generator, classes: int = 10, teachers: int = 250) -> np.ndarray:
    p = rng.dirichlet(np.full(classes, 0.3), size=n)
    u = rng.random((n, teachers))
    cum = np.cumsum(p, axis=1)
    labels = (u[:, :, None] > cum[:, None, :]).sum(axis=2)
    return np.stack([np.bincount(row, minlength=classes) for row in labels]).astype(np.float64)


def _time(fn, repeat: int) -> tuple[float, object]:
    best, out = math.inf, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def run(queries: int = 10_000, big: int = 1_000_000, sigma: float = 40.0, delta: float = 1e-5, seed: int = 0,
        baseline_queries: int | None = None) -> dict:
    rng = np.random.default_rng(seed)
    orders = np.array(DEFAULT_ORDERS)
    votes = _votes(queries, rng)
    nb = queries if baseline_queries is None else baseline_queries
    t_base, eps_base = _time(lambda: per_query_epsilon(votes[:nb], sigma, delta, orders), 1)
    t_lean, eps_lean = _time(lambda: per_query_epsilon(votes[:nb], sigma, delta, orders, tfp_style=False), 1)
    t_ours, res = _time(lambda: account_gnmax(votes[:nb], sigma=sigma, delta=delta), 5)
    # the same route as the baseline: the data-dependent RDP figure (the headline may be a smaller data-independent route)
    eps_ours = res.statements[0].epsilon  # type: ignore[attr-defined]
    out = {"machine": platform.platform(), "seed": seed, "sigma": sigma, "delta": delta, "orders": int(orders.size),
           "queries": nb, "per_query_seconds": t_base, "dpaudit_seconds": t_ours, "speedup": t_base / t_ours,
           "lean_per_query_seconds": t_lean, "speedup_vs_lean": t_lean / t_ours,
           "epsilon_per_query": eps_base, "epsilon_dpaudit": eps_ours, "headline_epsilon": res.epsilon,  # type: ignore[attr-defined]
           "epsilons_agree": bool(max(abs(eps_base - eps_ours), abs(eps_lean - eps_ours)) <= 1e-9 * max(1.0, abs(eps_base)))}
    if big:
        v_big = np.tile(votes, (max(1, big // queries), 1))[:big]
        t_big, res_big = _time(lambda: account_gnmax(v_big, sigma=sigma, delta=delta), 2)
        out.update({"big_queries": int(v_big.shape[0]), "big_seconds": t_big, "big_epsilon": res_big.epsilon})  # type: ignore[attr-defined]
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--big", type=int, default=1_000_000)
    ap.add_argument("--sigma", type=float, default=40.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    res = run(args.queries, args.big, args.sigma, seed=args.seed)
    print(f"{res['queries']} queries x 10 classes, {res['orders']} orders: per-query {res['per_query_seconds']:.3f} s, "
          f"dpaudit {res['dpaudit_seconds'] * 1e3:.1f} ms, speed-up {res['speedup']:.0f}x (vs a leaner per-query loop "
          f"{res['lean_per_query_seconds']:.3f} s: {res['speedup_vs_lean']:.0f}x); epsilon {res['epsilon_dpaudit']:.6g} "
          f"(per-query {res['epsilon_per_query']:.6g}, agree={res['epsilons_agree']})")
    if "big_seconds" in res:
        print(f"{res['big_queries']} queries: {res['big_seconds']:.3f} s (epsilon {res['big_epsilon']:.6g})")
    if args.out is not None:
        write_json(args.out, res)
    return res


if __name__ == "__main__":
    main()

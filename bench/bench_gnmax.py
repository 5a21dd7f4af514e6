"""Benchmark: dpaudit's vectorised GNMax data-dependent analysis (PATE 2018) against per-query organisations, like for
like, and the smooth-sensitivity release.

Run ``python bench/bench_gnmax.py [--queries 10000] [--big 1000000] [--out runs/bench/gnmax.json]``.

Like for like: every arm analyses the same votes over **the same orders**, the order set of the reference PATE 2018
analysis (tensorflow_privacy ``research/pate_2018``: ``np.concatenate((np.arange(2, 100 + 1, .5),
np.logspace(np.log10(100), np.log10(500), num=100)))``, 298 orders; printed), and must give the same data-dependent
epsilon (checked). dpaudit gets the orders as an explicit grid, so it does not extend it; it does not evaluate every
order on every query either (a search on a subsample of the queries, then a walk to the local minimum over all of them;
"orders evaluated" counts the orders evaluated on all queries), which is part of what is measured.

- "reference organisation": a Python loop over queries as tensorflow_privacy's analysis is organised: per row, the log
  of Proposition 7's q (``scipy.stats.norm.logsf`` on the row's gaps, a Python-level log-sum-exp), then Theorem 6 for
  all orders at once (numpy over orders), summed into a running total. Written here from the paper's formulas.
- "per-query loop": the same loop written leanly (``scipy.special.log_ndtr`` on the row): what dpaudit's own
  formulas cost one query at a time.

A per-query loop's time is linear in the number of queries; on ``--big`` queries both loops are timed on the first
``--baseline-rows`` rows and scaled (``--full-baseline`` times them on every row). The release row times
:func:`~dpaudit.accountants.smooth_sensitivity.release_gnmax_epsilon` (Confident-GNMax, searched beta and noise scale).
Timings are wall-clock in one process; on a shared machine only the ratios are meaningful.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats
from scipy.special import log_ndtr

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dpaudit._io import write_json  # noqa: E402
from dpaudit.accountants.gnmax import (account_gnmax, gaussian_log_q, rdp_gnmax_data_dependent,  # noqa: E402
                                      rdp_gnmax_votes_total)
from dpaudit.accountants.rdp import rdp_to_epsilon  # noqa: E402
from dpaudit.accountants.smooth_sensitivity import release_gnmax_epsilon  # noqa: E402

#: The reference analysis's order set (tensorflow_privacy research/pate_2018, "long list of orders").
REFERENCE_ORDERS = np.concatenate((np.arange(2, 100 + 1, .5), np.logspace(np.log10(100), np.log10(500), num=100)))


def per_query_total(votes: np.ndarray, sigma: float, orders: np.ndarray, *, tfp_style: bool = True) -> np.ndarray:
    """Per-query organisation of the PATE 2018 data-dependent analysis (Prop. 7 q, Theorem 6 with Prop. 10's orders);
    the RDP summed over queries at every order."""
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
    return total


def per_query_epsilon(votes: np.ndarray, sigma: float, delta: float, orders: np.ndarray, *, tfp_style: bool = True) -> float:
    return rdp_to_epsilon(orders, per_query_total(votes, sigma, orders, tfp_style=tfp_style), delta, warn=False)[0]


def exhaustive_epsilon(votes: np.ndarray, sigma: float, delta: float, orders: np.ndarray) -> float:
    """dpaudit with no order search: every order evaluated on every query, in row blocks that stay in cache
    (:func:`~dpaudit.accountants.gnmax.rdp_gnmax_votes_total`)."""
    return rdp_to_epsilon(orders, rdp_gnmax_votes_total(votes, sigma, orders), delta, warn=False)[0]


def matrix_epsilon(votes: np.ndarray, sigma: float, delta: float, orders: np.ndarray) -> float:
    """dpaudit's vectorised formulas as one (queries x orders) matrix in memory (the "every order" arm before it was
    organised in blocks): memory-bound from about 1e5 queries."""
    rdp = rdp_gnmax_data_dependent(gaussian_log_q(votes, sigma), sigma, orders).sum(axis=0)
    return rdp_to_epsilon(orders, rdp, delta, warn=False)[0]


def _votes(n: int, rng: np.random.Generator, classes: int = 10, teachers: int = 250) -> np.ndarray:
    """n vote histograms of `teachers` teachers: each query's class probabilities ~ Dirichlet(0.3) (distinct rows)."""
    p = rng.dirichlet(np.full(classes, 0.3), size=n)
    return rng.multinomial(teachers, p).astype(np.float64)


def _time(fn, repeat: int) -> tuple[float, object]:
    best, out = math.inf, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def _case(votes: np.ndarray, sigma: float, delta: float, orders: np.ndarray, baseline_rows: int, repeat: int,
          rounds: int) -> dict:
    n = votes.shape[0]
    nb = min(n, baseline_rows)
    sub = votes[:nb]
    scale = n / nb
    # the arms alternate, best of `rounds` each (a loaded machine slows whichever runs during a burst)
    t_ref = t_lean = t_ours = t_all = t_matrix = math.inf
    for _ in range(rounds):
        t, eps_all = _time(lambda: exhaustive_epsilon(votes, sigma, delta, orders), 1)
        t_all = min(t_all, t)
        t, eps_matrix = _time(lambda: matrix_epsilon(votes, sigma, delta, orders), 1)
        t_matrix = min(t_matrix, t)
        t, eps_ref = _time(lambda: per_query_epsilon(sub, sigma, delta, orders), 1)
        t_ref = min(t_ref, t)
        t, eps_lean = _time(lambda: per_query_epsilon(sub, sigma, delta, orders, tfp_style=False), 1)
        t_lean = min(t_lean, t)
        t, res = _time(lambda: account_gnmax(votes, sigma=sigma, delta=delta, orders=orders), repeat)
        t_ours = min(t_ours, t)
    eps_ours = res.statements[0].epsilon  # type: ignore[attr-defined]  # the data-dependent RDP route
    if nb < n:  # agreement on the rows the loops saw
        eps_sub = account_gnmax(sub, sigma=sigma, delta=delta, orders=orders).statements[0].epsilon
    else:
        eps_sub = eps_ours
    agree = max(abs(eps_ref - eps_sub), abs(eps_lean - eps_sub)) <= 1e-9 * max(1.0, abs(eps_ref))
    # every order on the rows the loops saw: never below the reference's epsilon
    eps_all_sub = exhaustive_epsilon(sub, sigma, delta, orders)
    all_not_below = bool(eps_all_sub >= eps_ref and eps_all_sub >= eps_lean)
    return {"queries": n, "baseline_rows": nb, "baseline_scaled": nb < n,
            "reference_seconds": t_ref * scale, "per_query_loop_seconds": t_lean * scale, "dpaudit_seconds": t_ours,
            "speedup_vs_reference": t_ref * scale / t_ours, "speedup_vs_per_query_loop": t_lean * scale / t_ours,
            "epsilon_dpaudit": eps_ours, "epsilon_reference_rows": eps_ref, "epsilon_dpaudit_same_rows": eps_sub,
            "dpaudit_every_order_seconds": t_all, "speedup_every_order_vs_reference": t_ref * scale / t_all,
            "speedup_every_order_vs_per_query_loop": t_lean * scale / t_all, "epsilon_every_order": eps_all,
            "dpaudit_every_order_matrix_seconds": t_matrix, "speedup_every_order_matrix_vs_reference": t_ref * scale / t_matrix,
            "epsilon_every_order_matrix": eps_matrix, "every_order_not_below_reference": all_not_below,
            "epsilon_every_order_reference_rows": eps_all_sub,
            "epsilons_agree": bool(agree and max(abs(eps_all - eps_ours), abs(eps_matrix - eps_all)) <= 1e-9 * max(1.0, abs(eps_all))), "orders_evaluated": res.statements[0].details["orders_evaluated"]}  # type: ignore[attr-defined]


def run(queries: int = 10_000, big: int = 1_000_000, sigma: float = 40.0, delta: float = 1e-5, seed: int = 0,
        baseline_rows: int = 100_000, release: bool = True, repeat: int = 5, rounds: int = 3) -> dict:
    rng = np.random.default_rng(seed)
    orders = REFERENCE_ORDERS.copy()
    votes = _votes(queries, rng)
    out: dict = {"machine": platform.platform(), "cpus": os.cpu_count(), "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                 "load_average_1_5_15_min_at_start": os.getloadavg(), "seed": seed, "sigma": sigma, "delta": delta,
                 "orders": int(orders.size), "order_set": "np.concatenate((np.arange(2, 100 + 1, .5), "
                                                         "np.logspace(np.log10(100), np.log10(500), num=100)))"}
    out["small"] = _case(votes, sigma, delta, orders, baseline_rows, repeat, rounds)
    if big:
        v_big = np.concatenate([votes, _votes(max(big - queries, 0), rng)])[:big]
        out["big"] = _case(v_big, sigma, delta, orders, baseline_rows, 2, rounds)
    if release:
        mask = votes.max(axis=1) >= 150
        t_rel, rel = _time(lambda: release_gnmax_epsilon(votes, sigma=sigma, delta=delta, seed=seed, threshold=150.0,
                                                         sigma1=50.0, answered=mask), 1)
        out["release"] = {"queries": queries, "answered": int(mask.sum()), "seconds": t_rel,
                          "released_total_epsilon": rel.epsilon, "order": rel.facts["order"],  # type: ignore[attr-defined]
                          "beta": rel.facts["beta"], "sigma_ss": rel.facts["sigma_ss"]}  # type: ignore[attr-defined]
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--big", type=int, default=1_000_000)
    ap.add_argument("--sigma", type=float, default=40.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--baseline-rows", type=int, default=100_000)
    ap.add_argument("--full-baseline", action="store_true", help="time the per-query loops on every row")
    ap.add_argument("--no-release", action="store_true")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    rows = 10**12 if args.full_baseline else args.baseline_rows
    res = run(args.queries, args.big, args.sigma, seed=args.seed, baseline_rows=rows, release=not args.no_release)
    print(f"orders: the reference analysis's set, {res['orders']} orders = {res['order_set']}")
    for key in ("small", "big"):
        if key not in res:
            continue
        c = res[key]
        scaled = f" (timed on {c['baseline_rows']} rows, scaled)" if c["baseline_scaled"] else ""
        print(f"{c['queries']} queries x 10 classes: reference organisation {c['reference_seconds']:.3f} s, per-query loop "
              f"{c['per_query_loop_seconds']:.3f} s{scaled}; dpaudit {c['dpaudit_seconds'] * 1e3:.1f} ms "
              f"({c['orders_evaluated']} orders evaluated): {c['speedup_vs_reference']:.0f}x the reference organisation, "
              f"{c['speedup_vs_per_query_loop']:.0f}x the per-query loop; epsilon {c['epsilon_dpaudit']:.6g} "
              f"(agree={c['epsilons_agree']})")
        print(f"    without the order search (every order on every query, in row blocks): dpaudit "
              f"{c['dpaudit_every_order_seconds']:.3f} s: {c['speedup_every_order_vs_reference']:.1f}x the reference "
              f"organisation, {c['speedup_every_order_vs_per_query_loop']:.1f}x the per-query loop (never below the "
              f"reference's epsilon on its rows: {c['every_order_not_below_reference']}); as one (queries x orders) "
              f"matrix: {c['dpaudit_every_order_matrix_seconds']:.3f} s, "
              f"{c['speedup_every_order_matrix_vs_reference']:.1f}x the reference organisation")
    if "release" in res:
        r = res["release"]
        print(f"smooth-sensitivity release, {r['queries']} queries ({r['answered']} answered, Confident-GNMax): "
              f"{r['seconds']:.2f} s (order {r['order']:g}, beta {r['beta']:.4g}, sigma_ss {r['sigma_ss']:.4g}; released "
              f"total epsilon {r['released_total_epsilon']:.4g})")
    if args.out is not None:
        write_json(args.out, res)
    return res


if __name__ == "__main__":
    main()

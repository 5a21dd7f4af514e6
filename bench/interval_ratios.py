"""Certified lower bound over accounted upper bound (l / u) per mechanism family, over seeded random settings.

    python bench/interval_ratios.py [--per-family N] [--seed S] [--json OUT]

Each family's settings are drawn from a fixed seed (plus the named settings: the README's and MNIST's DP-SGD runs,
the Flower headline run), accounted with ``dpaudit.account`` (every route; the headline is the smallest valid upper
bound) and compared with the result's certified lower bound. Prints per family the median and minimum of l / u and
the worst setting. Written for issue 47 (run it on two checkouts to compare; a family without a pair reads "-").
Flower's client sampling (m of N clients without replacement, replace-one) is the fixed-size substitution analysis at
Flower-sized settings.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time

import numpy as np

import dpaudit


def _log_uniform(rng, lo, hi):
    return float(10 ** rng.uniform(math.log10(lo), math.log10(hi)))


def settings(family: str, rng: np.random.Generator, count: int) -> list[tuple[str, dict]]:
    out: list[tuple[str, dict]] = []
    named = {
        "poisson": [("README MNIST", dict(dataset_size=60000, batch_size=150, noise_multiplier=1.3, epochs=15, delta=1e-5))],
        "fixed add-remove": [("MNIST fixed", dict(dataset_size=60000, batch_size=256, noise_multiplier=1.1, steps=702, delta=1e-5))],
        "fixed zero-out": [("MNIST fixed", dict(dataset_size=60000, batch_size=256, noise_multiplier=1.1, steps=702, delta=1e-5))],
        "fixed substitution": [("MNIST fixed", dict(dataset_size=60000, batch_size=256, noise_multiplier=1.1, steps=702, delta=1e-5))],
        "flower client sampling": [("Flower headline", dict(dataset_size=20, batch_size=5, noise_multiplier=2.0, steps=30, delta=1e-5)),
                                   ("9 of 10", dict(dataset_size=10, batch_size=9, noise_multiplier=2.0, steps=30, delta=1e-5))],
    }.get(family, [])
    out.extend(named)
    for i in range(count):
        if family in ("poisson", "fixed add-remove", "fixed zero-out", "fixed substitution", "shuffle"):
            n = int(_log_uniform(rng, 1e3, 1e5))
            b = int(max(1, min(n - 1, round(_log_uniform(rng, 1, n / 4)))))
            kw = dict(dataset_size=n, batch_size=b, noise_multiplier=_log_uniform(rng, 0.6, 5.0),
                      steps=int(_log_uniform(rng, 10, 3000)), delta=_log_uniform(rng, 1e-8, 1e-3))
        elif family == "flower client sampling":
            n = int(rng.integers(10, 101))
            kw = dict(dataset_size=n, batch_size=int(rng.integers(2, n)), noise_multiplier=_log_uniform(rng, 0.8, 4.0),
                      steps=int(rng.integers(10, 101)), delta=_log_uniform(rng, 1e-8, 1e-3))
        elif family == "laplace":
            kw = dict(scale=_log_uniform(rng, 0.5, 50), count=int(_log_uniform(rng, 1, 1e4)), delta=_log_uniform(rng, 1e-8, 1e-3))
        elif family == "gaussian":
            kw = dict(sigma=_log_uniform(rng, 0.5, 200), count=int(_log_uniform(rng, 1, 1e5)), delta=_log_uniform(rng, 1e-8, 1e-3))
        elif family == "randomized response":
            kw = dict(epsilon=float(rng.uniform(0.1, 5)), samples=int(rng.integers(1, 4)), classes=int(rng.integers(2, 21)),
                      rounds=int(rng.integers(1, 301)), delta=_log_uniform(rng, 1e-8, 1e-3))
        elif family == "pate":
            kw = dict(votes=None, gamma=_log_uniform(rng, 0.02, 1.0), queries=int(_log_uniform(rng, 10, 1000)),
                      delta=_log_uniform(rng, 1e-8, 1e-3), data_independent=True)
        elif family == "gnmax":
            kw = dict(votes=None, sigma=_log_uniform(rng, 5, 100), queries=int(_log_uniform(rng, 10, 3000)),
                      delta=_log_uniform(rng, 1e-8, 1e-3), data_independent=True)
        elif family == "tuning":
            n = int(_log_uniform(rng, 1e3, 1e5))
            kw = dict(runs_distribution="poisson", mean_runs=float(rng.uniform(2, 20)), dataset_size=n,
                      batch_size=int(max(1, round(_log_uniform(rng, 1, n / 10)))), noise_multiplier=_log_uniform(rng, 0.8, 5.0),
                      steps=int(_log_uniform(rng, 10, 2000)), delta=_log_uniform(rng, 1e-8, 1e-3))
        else:
            raise ValueError(family)
        out.append((f"random {i}", kw))
    return out


def account(family: str, kw: dict):
    if family == "poisson":
        return dpaudit.account("dpsgd", **kw)
    if family.startswith("fixed "):
        return dpaudit.account("dpsgd", **kw, sampling="fixed-wor", neighbouring=family.split()[1])
    if family == "flower client sampling":
        return dpaudit.account("dpsgd", **kw, sampling="fixed-wor", neighbouring="substitution")
    if family == "shuffle":
        return dpaudit.account("dpsgd", **kw, sampling="shuffle")
    if family in ("laplace", "gaussian"):
        return dpaudit.account(family, **kw)
    if family == "randomized response":
        return dpaudit.account("ldp", **kw)
    return dpaudit.account(family, **kw)


FAMILIES = ("poisson", "fixed add-remove", "fixed zero-out", "fixed substitution", "flower client sampling", "laplace",
            "gaussian", "randomized response", "shuffle", "pate", "gnmax", "tuning")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-family", type=int, default=10)
    ap.add_argument("--seed", type=int, default=47)
    ap.add_argument("--json", default=None)
    ap.add_argument("--only", default=None, help="comma-separated families")
    a = ap.parse_args(argv)
    rows = {}
    fams = FAMILIES if a.only is None else tuple(a.only.split(","))
    for family in fams:
        rng = np.random.default_rng([a.seed, FAMILIES.index(family)])   # the same settings with --only
        ratios, worst = [], None
        t0 = time.time()
        for name, kw in settings(family, rng, a.per_family):
            r = account(family, kw)
            low = r.lower_bound
            if low is None or not math.isfinite(r.epsilon) or r.epsilon <= 0:
                continue
            ratio = low.epsilon / r.epsilon
            ratios.append(ratio)
            if worst is None or ratio < worst[0]:
                worst = (ratio, name, {k2: v for k2, v in kw.items() if v is not None}, low.epsilon, r.epsilon)
            if name != "random 0" and not name.startswith("random"):
                print(f"  {family} {name}: [{low.epsilon:.4g}, {r.epsilon:.4g}] l/u {ratio:.3f}", file=sys.stderr)
        rows[family] = {"n": len(ratios), "median": statistics.median(ratios) if ratios else None,
                        "min": min(ratios) if ratios else None, "worst": worst, "seconds": time.time() - t0}
        m = "-" if not ratios else f"{statistics.median(ratios):.3f} / {min(ratios):.3f}"
        print(f"{family:24s} n={len(ratios):3d}  median/min l/u = {m}  ({time.time() - t0:.1f} s)", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

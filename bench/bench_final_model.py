"""Benchmark: the strong final-model (black-box) audit's budget curve (issue 42, item 4).

    python bench/bench_final_model.py --models 100 250 500 1000 2000 --seeds 0 1 2 --out bench/results/final_model.json
    python bench/bench_final_model.py --models 1000 --eps 1 2 4 8 10       # other epsilons at one budget

Worst-case initial parameters and a crafted canary (dpaudit.auditing.final_model_audit): softmax regression on a
1,000-record digits sample, 10 full-batch DP-SGD steps calibrated to (epsilon, 1e-5), N models trained at once on the
CPU; certified epsilon (headline: Gaussian DP at a threshold planned before the runs; beside it the assumption-free
Clopper-Pearson (epsilon, delta) test at the same threshold) vs the number of models. Each row is one JSON line with
the process CPU seconds of that audit (the cost that does not depend on the machine's load) and wall seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, nargs="+", default=[100, 250, 500, 1000, 2000])
    ap.add_argument("--eps", type=float, nargs="+", default=[10.0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--num-records", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)

    from dpaudit.auditing.final_model_audit import final_model_audit
    from dpaudit.threads import apply_threads

    apply_threads(workers=1)
    rows = []
    for eps in args.eps:
        for N in args.models:
            for seed in args.seeds:
                t0 = time.perf_counter()
                r = final_model_audit(epsilon=eps, models=N, seed=seed, num_records=args.num_records, steps=args.steps)
                by = {e.analysis: e for e in r.bound.analyses}
                row = {"epsilon": eps, "models": N, "seed": seed, "accounted": r.accounted_epsilon,
                       "certified_gdp": by["gdp"].epsilon, "mu_lower": by["gdp"].mu, "certified_eps": by["eps"].epsilon,
                       "bayes_estimate": by["bayes"].epsilon, "ideal_gdp": r.ideal_epsilon, "ratio": r.ratio,
                       "cpu_seconds": r.settings["cpu_seconds"], "wall_seconds": round(time.perf_counter() - t0, 1)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.out is not None:
        meta = {"machine": platform.platform(), "processor": platform.processor(), "cpus": os.cpu_count(),
                "load_average": os.getloadavg(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

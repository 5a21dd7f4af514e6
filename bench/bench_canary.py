"""Benchmark: certified canary audits (issue 13's targets).

    python bench/bench_canary.py soundness                 # >= 200 seeds of mechanisms with known epsilon
    python bench/bench_canary.py zoo                       # broken pipelines and correct twins, 20 seeds each
    python bench/bench_canary.py methods                   # methods' own privatization steps vs their claims
    python bench/bench_canary.py table --eps 1 2 4 8       # DP-SGD on digits (MLP, dpaudit's trainer), delta 1e-5
    python bench/bench_canary.py table --eps 8 --audits multi-run:dirac --models 1000 --device cuda

Every row is printed as one JSON line (and collected into ``--out`` when given). Timings are wall-clock seconds
of this process; on a shared machine they are upper bounds.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from dpaudit.serial import to_dict  # noqa: E402


def _emit(rows: list, row: dict) -> None:
    rows.append(row)
    print(json.dumps(row), flush=True)


def soundness(args, rows):
    """One-run: eps-DP randomized response on each canary's coin (pure DP): certified bound > eps counts as a
    failure. Multi-run: Gaussian mechanism (mu = 3) on one bit, failure = bound > the epsilon of the chosen
    threshold's exact (FPR, FNR) (which is <= the mechanism's epsilon)."""
    from dpaudit.attacks.bounds import clopper_pearson
    from dpaudit.attacks.canary import soundness_multi_run, soundness_one_run

    for eps, m, grid in ((2.0, 1000, [500]), (2.0, 1000, None), (4.0, 2000, None)):
        vals = soundness_one_run(eps, m, args.seeds, k_grid=grid, seed=args.seed)
        k = int(np.sum(vals > eps))
        lo, hi = clopper_pearson(k, args.seeds, 0.95)
        _emit(rows, {"bench": "soundness", "audit": "one-run", "mechanism": f"randomized response eps={eps}",
                     "canaries": m, "k_grid": grid or "default", "seeds": args.seeds, "failures": k,
                     "rate": k / args.seeds, "rate_ci95": [float(lo), float(hi)], "stated": 0.05,
                     "median_bound": float(np.median(vals))})
    fails, vals = soundness_multi_run(3.0, 1000, args.seeds, seed=args.seed)
    lo, hi = clopper_pearson(fails, args.seeds, 0.95)
    _emit(rows, {"bench": "soundness", "audit": "multi-run", "mechanism": "gaussian mu=3", "models": 1000,
                 "seeds": args.seeds, "failures": fails, "rate": fails / args.seeds, "rate_ci95": [float(lo), float(hi)],
                 "stated": 0.05, "median_bound": float(np.median(vals))})


def zoo(args, rows):
    from dpaudit.auditing.canary_audit import run_zoo_audit
    from dpaudit.training.zoo import ZOO

    for name in ZOO:
        t = time.perf_counter()
        res = [run_zoo_audit(name, trials=args.trials, seed=100 + s) for s in range(args.zoo_seeds)]
        _emit(rows, {"bench": "zoo", "pipeline": name, "broken": res[0].broken, "claimed": res[0].claimed_epsilon,
                     "caught": sum(r.caught for r in res), "seeds": len(res), "trials": args.trials,
                     "median_certified": float(np.median([r.bound.epsilon for r in res])),
                     "seconds": round(time.perf_counter() - t, 2)})


def methods(args, rows):
    from dpaudit.auditing.canary_audit import METHOD_STEPS, audit_method_step

    for name in METHOD_STEPS:
        for n in (2000, 20000, 100000):
            a = audit_method_step(name, trials=n, seed=args.seed)
            _emit(rows, {"bench": "methods", **to_dict(a), "trials": n})


def table(args, rows):
    from dpaudit.auditing.canary_audit import CanaryAuditSpec, run_canary_spec

    for eps in args.eps:
        for item in args.audits:
            audit, canary = item.split(":")
            sizes = args.canaries if audit == "one-run" else args.models
            for size in sizes:
                spec = CanaryAuditSpec(f"eps{eps:g}-{audit}-{canary}-{size}", audit=audit, canary=canary,
                                       canaries=size, models=size, epsilon=eps, epochs=args.epochs,
                                       batch_size=args.batch_size, lr=args.lr, hidden=tuple(args.hidden),
                                       num_train=args.num_train)
                t = time.perf_counter()
                runs = [run_canary_spec(spec, dataset="digits", seed=args.seed + k, delta=1e-5, confidence=0.95,
                                        device=args.device) for k in range(args.repeat)]
                r = runs[0]
                cert = [x.bound.epsilon for x in runs]
                ideal = [x.bound.ideal_epsilon for x in runs]
                _emit(rows, {"bench": "table", "target_eps": eps, "accounted": r.accounted_epsilon, "audit": audit,
                             "canary": canary, "size": size, "score": r.bound.score, "seeds": args.repeat,
                             "certified_median": float(np.median(cert)), "certified": cert,
                             "ideal_median": float(np.median(ideal)),
                             "ratio": float(np.median(cert) / np.median(ideal)) if np.median(ideal) > 0 else None,
                             "trials": r.bound.trials, "sigma": r.mechanism["noise_multiplier"],
                             "steps": r.mechanism["steps"],
                             "seconds_per_audit": round((time.perf_counter() - t) / args.repeat, 1),
                             "device": args.device or "auto"})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("soundness", "zoo", "methods", "table"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=200, help="soundness: seeds per mechanism")
    ap.add_argument("--zoo-seeds", type=int, default=20)
    ap.add_argument("--trials", type=int, default=2000, help="zoo: runs per audit")
    ap.add_argument("--eps", type=float, nargs="+", default=[1.0, 2.0, 4.0, 8.0])
    ap.add_argument("--audits", nargs="+", default=["one-run:dirac", "one-run:mislabeled", "multi-run:dirac",
                                                    "multi-run:mislabeled"])
    ap.add_argument("--canaries", type=int, nargs="+", default=[1000], help="one-run sizes m")
    ap.add_argument("--models", type=int, nargs="+", default=[200], help="multi-run sizes N")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=50)
    ap.add_argument("--lr", type=float, default=0.5)
    ap.add_argument("--hidden", type=int, nargs="+", default=[100])
    ap.add_argument("--num-train", type=int, default=1000)
    ap.add_argument("--device", default=None)
    ap.add_argument("--repeat", type=int, default=3, help="table: audits per row (seeds seed, seed+1, ...); medians")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rows: list = []
    t0 = time.perf_counter()
    {"soundness": soundness, "zoo": zoo, "methods": methods, "table": table}[args.what](args, rows)
    if args.out is not None:
        from dpaudit._io import write_json

        write_json(args.out, {"bench": args.what, "args": {k: (str(v) if isinstance(v, Path) else v)
                                                           for k, v in vars(args).items()},
                              "platform": platform.platform(), "seconds": round(time.perf_counter() - t0, 1),
                              "rows": rows})


if __name__ == "__main__":
    main()

"""Benchmark: how tight the white-box trainer audit is (issue 42, item 3) on the digits DP-SGD recipe of
docs/results/canary-audits.md (MLP, 1,000 records, q = 0.05, 100 steps, C = 1, sigma calibrated by RDP to epsilon
1 / 2 / 4 / 8 at delta 1e-5), run through a user's own loop (examples/trainers/dpsgd_correct.py with that recipe:
batch 50 of N records, 4 epochs of round(N / 50) = 25 steps) and ``dpaudit.auditing.trainer_audit.audit_trainer``
(one run, ``--budget``). The canaries join the data, so N is about 1,250 and the rate 50 / N about 0.04: the
reference is the accounted epsilon of the run as recorded (N, batch 50, sigma, T; PLD), beside the recipe's.

Per epsilon and seed: the certified one-run bound (no assumption) and the recorded mechanism's analytic lower bound
(Gaussian noise independent per step, the identified sampler), each at confidence 0.975, as fractions of the
recorded run's accounted epsilon.

    python bench/bench_trainer_audit.py --seeds 3 --out bench/results/trainer_audit_power.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402


def calibrate(eps: float, *, n: int = 1000, batch: int = 50, steps: int = 100, delta: float = 1e-5) -> float:
    from dpaudit.accountants.dpsgd import account_dpsgd

    lo, hi = 0.3, 20.0
    for _ in range(30):
        mid = (lo + hi) / 2
        e = account_dpsgd(dataset_size=n, batch_size=batch, noise_multiplier=mid, steps=steps, delta=delta,
                          accountant="rdp", lower_bound=False).epsilon
        lo, hi = (mid, hi) if e > eps else (lo, mid)
    return hi


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 2.0, 4.0, 8.0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--budget", default="ci", choices=["ci", "thorough"])
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--canaries", type=int, default=None, help="per run (default: the budget's)")
    ap.add_argument("--probes", type=int, default=None, help="per run (default: the budget's; 500 with --canaries)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    import torch

    from dpaudit.accountants.dpsgd import account_dpsgd
    from dpaudit.auditing.trainer_audit import audit_trainer

    torch.set_num_threads(1)
    src = (ROOT / "examples" / "trainers" / "dpsgd_correct.py").read_text()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for eps in args.epsilons:
            sigma = calibrate(eps)
            code = re.sub(r'CONFIG = \{.*\}', f'CONFIG = {{"batch_size": 50, "epochs": 4, "lr": 0.5, "clip": 1.0, '
                                              f'"noise_multiplier": {sigma!r}, "hidden": {args.hidden}}}', src)
            path = Path(tmp) / ("recipe_" + f"{eps:g}".replace(".", "_") + ".py")
            path.write_text(code)
            recipe = {"dataset_size": 1000, "batch_size": 50, "noise_multiplier": sigma, "steps": 100}
            for seed in range(args.seeds):
                t0 = time.process_time()
                r = audit_trainer(f"{path}:train", epsilon=eps, delta=1e-5, recipe=recipe, budget=args.budget,
                                  canaries=args.canaries,
                                  probes=args.probes if args.probes is not None else None if args.canaries is None else 500,
                                  seed=seed, input_runs=0)     # the gradient canaries' power and cost only
                cpu = time.process_time() - t0
                s = r.sampler
                acc = account_dpsgd(dataset_size=s.num_records, batch_size=50, noise_multiplier=sigma, steps=s.steps,
                                    delta=1e-5, lower_bound=False).epsilon
                row = {"epsilon_recipe": eps, "sigma": sigma, "seed": seed, "records": s.num_records,
                       "steps": s.steps, "accounted_recorded": acc, "accounted_recipe": r.recipe_epsilon,
                       "certified_one_run": r.certified.epsilon,
                       "analytic": None if r.recorded is None else r.recorded.epsilon,
                       "analytic_point_estimate": None if r.recorded is None else r.recorded.estimate,
                       "sigma_eff": r.noise.sigma_eff, "sigma_eff_upper": r.noise.sigma_eff_upper,
                       "verdict": r.verdict, "cpu_s": cpu}
                rows.append(row)
                print(f"eps {eps:g} (sigma {sigma:.3f}) seed {seed}: accounted (recorded run) {acc:.3f}; certified "
                      f"{row['certified_one_run']:.3f} (x{row['certified_one_run'] / acc:.2f}); analytic "
                      f"{row['analytic']:.3f} (x{row['analytic'] / acc:.2f}); sigma_eff {r.noise.sigma_eff:.3f} "
                      f"<= {r.noise.sigma_eff_upper:.3f}; {cpu:.1f} s CPU", flush=True)
    print("\n| recipe epsilon | sigma | accounted (recorded run) | certified one-run (x accounted) | analytic, "
          "parametric (x accounted) |\n|---|---|---|---|---|")
    for eps in args.epsilons:
        rs = [r for r in rows if r["epsilon_recipe"] == eps]
        acc = float(np.median([r["accounted_recorded"] for r in rs]))
        c = float(np.median([r["certified_one_run"] for r in rs]))
        a = float(np.median([r["analytic"] for r in rs]))
        print(f"| {eps:g} | {rs[0]['sigma']:.3f} | {acc:.2f} | {c:.2f} (x{c / acc:.2f}) | {a:.2f} (x{a / acc:.2f}) |")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                        "machine": platform.machine(), "cpus": os.cpu_count(),
                                        "load_average": os.getloadavg(), "budget": args.budget, "hidden": args.hidden,
                                        "rows": rows},
                                       indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

"""Benchmark: what the white-box audit hook (dpaudit.training.audit_hook) costs a user's training loop.

The same training function (examples/trainers/dpsgd_correct.py: torch.func per-example gradients, per-example
clipping, Poisson sampling, Gaussian noise) runs with ``NO_HOOK`` and with an ``AuditHook`` (500 canaries in the
data set by fair coins, 500 probe coordinates recorded at every step), alternating the arms ``--rounds`` times in one
process; each arm's fastest round is kept, in process CPU time (steadier than wall time on a shared machine) and wall
time. The ratio hook / no hook is the overhead a user sees. The two arms train on the same records plus the same
canary rows (so both do the same number of steps); only the hook differs. Cases: the digits MLP of the bug suite
(64-32-10, 2,410 parameters) and a wider one (64-512-10, 38,410 parameters) where per-step work dominates.

    python bench/bench_trainer_hook.py --out bench/results/trainer_hook.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--hidden", type=int, nargs="+", default=[32, 512])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    import torch

    from dpaudit.auditing.trainer_audit import _digits
    from dpaudit.training.audit_hook import NO_HOOK, AuditHook
    from dpaudit.training.usercode import load_callable

    torch.set_num_threads(args.threads)
    fn = load_callable(f"{ROOT / 'examples' / 'trainers' / 'dpsgd_correct.py'}:train", "train_fn")
    X, y = _digits(1000, 0)
    rng = np.random.default_rng(0)
    m = 500
    inc = rng.random(m) < 0.5
    k = int(inc.sum())
    ci = np.full(m, -1, dtype=np.int64)
    ci[inc] = 1000 + np.arange(k)
    Xa, ya = np.concatenate([X, X[rng.integers(0, 1000, k)]]), np.concatenate([y, rng.integers(0, 10, k)])
    rows = []
    for hidden in args.hidden:
        fn.__globals__["CONFIG"]["hidden"] = hidden
        fn(Xa, ya, seed=0, hook=NO_HOOK)        # warm-up
        best = {"none": [np.inf, np.inf], "hook": [np.inf, np.inf]}
        for _ in range(args.rounds):
            for arm in ("none", "hook"):
                hook = NO_HOOK if arm == "none" else AuditHook(num_real=1000, canary_index=ci, probes=500, seed=0)
                c0, w0 = time.process_time(), time.perf_counter()
                fn(Xa, ya, seed=0, hook=hook)
                c, w = time.process_time() - c0, time.perf_counter() - w0
                if arm == "hook":
                    steps = hook.record().steps
                best[arm] = [min(best[arm][0], c), min(best[arm][1], w)]
        row = {"hidden": hidden, "parameters": 64 * hidden + hidden + hidden * 10 + 10, "steps": steps,
               "cpu_no_hook_s": best["none"][0], "cpu_hook_s": best["hook"][0],
               "wall_no_hook_s": best["none"][1], "wall_hook_s": best["hook"][1],
               "ratio_cpu": best["hook"][0] / best["none"][0], "ratio_wall": best["hook"][1] / best["none"][1]}
        rows.append(row)
        print(f"hidden {hidden:4d} ({row['parameters']} parameters, {steps} steps): no hook {row['cpu_no_hook_s']:.3f} s "
              f"CPU, hook {row['cpu_hook_s']:.3f} s CPU: x{row['ratio_cpu']:.3f} (wall x{row['ratio_wall']:.3f})")
    info = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": platform.machine(),
            "processor": platform.processor(), "cpus": os.cpu_count(), "threads": args.threads,
            "load_average": os.getloadavg(), "torch": torch.__version__, "device": "cpu", "rounds": args.rounds,
            "cases": rows}
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(info, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

"""The certified one-run audit of DP fine-tuning of a tiny causal LM (issue 35): bound, ideal-attack reference and
accounted epsilon at epsilon 4 and 8, full fine-tuning and LoRA, over seeds; and the same canaries without DP.

Every bound is certified (Steinke, Nasr, Jagielski 2023, Thm 3 / the f-DP test, rule planned before the run); the
AUC and TPR figures of the canaries are estimates on one run. Usage: python bench/bench_lm_audit.py [--seeds 3]
[--epsilons 4 8] [--canaries 256] [--no-dp] [--multi-run N] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dpaudit._io import write_json  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--epsilons", type=float, nargs="+", default=[4.0, 8.0])
    ap.add_argument("--canaries", type=int, default=256)
    ap.add_argument("--lora", type=int, nargs="+", default=[0, 4])
    ap.add_argument("--no-dp", action="store_true", help="also one run without DP")
    ap.add_argument("--multi-run", type=int, default=0, help="also a multi-run audit with this many models (per epsilon)")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    from dpaudit.auditing.lm_audit import run_lm_canary_audit

    rows = []
    cases = [(e, r) for e in a.epsilons for r in a.lora] + ([(None, 0)] if a.no_dp else [])
    for eps, lora in cases:
        for seed in range(a.seeds if eps is not None else 1):
            t = time.perf_counter()
            res = run_lm_canary_audit(epsilon=eps, lora_rank=lora, seed=seed, canaries=a.canaries)
            b = res.bound
            row = {"epsilon": eps, "lora_rank": lora, "seed": seed, "certified_bound": b.epsilon,
                   "analysis": b.analysis, "ideal": b.ideal_epsilon, "accounted": res.accounted_epsilon,
                   "ratio_to_ideal": None if not b.ideal_epsilon else b.epsilon / b.ideal_epsilon,
                   "sound": res.accounted_epsilon is None or b.epsilon <= res.accounted_epsilon,
                   "canary_auc_estimate": res.settings["canary_auc_estimate"],
                   "canary_tpr_at_1pct_fpr_estimate": res.settings["canary_tpr_at_1pct_fpr_estimate"],
                   "seconds": round(time.perf_counter() - t, 1)}
            rows.append(row)
            print(row, flush=True)
    for eps in a.epsilons if a.multi_run else []:
        from dpaudit.auditing.lm_audit import run_lm_multi_run_audit

        t = time.perf_counter()
        res = run_lm_multi_run_audit(epsilon=eps, models=a.multi_run)
        b = res.bound
        row = {"audit": "multi-run", "epsilon": eps, "models": a.multi_run, "certified_bound": b.epsilon,
               "ideal": b.ideal_epsilon, "accounted": res.accounted_epsilon,
               "sound": b.epsilon <= res.accounted_epsilon, "seconds": round(time.perf_counter() - t, 1)}
        rows.append(row)
        print(row, flush=True)
    out = {"load_avg_1min": os.getloadavg()[0], "rows": rows}
    if a.out:
        write_json(a.out, out)


if __name__ == "__main__":
    main()

"""Benchmark of the scores-only audit (issue 14's target: 1e5 members + 1e5 non-members with 64 reference models
in < 5 s on 2 cores).

Times :func:`scores_audit` with its defaults (threshold attack + online LiRA, metrics without bootstrap, the
Clopper-Pearson bounds) end to end, and once more with 20 bootstrap replicates for the intervals (opt-in).

Synthetic outputs of a leaky 10-class model: float32 logits whose true-label margin is larger on members, and 64
reference models' logits with inclusion masks (each record IN for about half the references). Prints the 1-minute
load average and the process's CPU time beside the wall-clock timings: on a shared machine the wall-clock seconds
scale with the load, the CPU seconds much less (the audit runs on one thread).

Usage: python bench/bench_scores.py [--n 100000] [--references 64] [--classes 10] [--repeats 2] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dpaudit._io import write_json  # noqa: E402
from dpaudit.attacks.scores import scores_attack, scores_audit, synthetic_scores  # noqa: E402


def make_inputs(n: int, K: int, C: int, seed: int = 0):
    a = synthetic_scores(n, num_classes=C, num_references=K, kind="logits", leak=0.8, seed=seed)
    ref = np.concatenate([a["reference_logits_train"], a["reference_logits_test"]])
    inc = np.concatenate([a["reference_in_train"], a["reference_in_test"]])
    return a["logits_train"], a["labels_train"], a["logits_test"], a["labels_test"], ref, inc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--references", type=int, default=64)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    zm, ym, zn, yn, ref, inc = make_inputs(a.n, a.references, a.classes)
    kw = dict(kind="logits", member_labels=ym, nonmember_labels=yn, delta=1e-5, seed=0)
    timings: dict[str, float] = {}
    for r in range(a.repeats):
        load = os.getloadavg()[0]
        t0, c0 = time.perf_counter(), time.process_time()
        audit = scores_audit(zm, zn, reference_scores=ref, reference_in=inc, **kw)
        total, cpu = time.perf_counter() - t0, time.process_time() - c0
        t0 = time.perf_counter()
        scores_audit(zm, zn, reference_scores=ref, reference_in=inc, n_bootstrap=20, **kw)
        boot = time.perf_counter() - t0
        t0 = time.perf_counter()
        scores_attack(zm, zn, attack="threshold", **kw)
        thr = time.perf_counter() - t0
        print(f"run {r}: audit (threshold + online LiRA + bounds) {total:.2f} s wall, {cpu:.2f} s CPU [threshold alone {thr:.2f} s]; with 20 "
              f"bootstrap replicates {boot:.2f} s; load average {load:.1f} on {os.cpu_count()} cores", flush=True)
        if total < timings.get("audit_s", np.inf):
            timings = {"audit_s": total, "audit_cpu_s": cpu, "threshold_only_s": thr, "audit_bootstrap20_s": boot, "load_1min": load}
    lira = audit.reports["lira"].attack
    print(f"LiRA AUC {lira.metrics.auc:.3f}, epsilon >= {lira.bound.epsilon:.3f} (estimate); threshold AUC "
          f"{audit.reports['threshold'].attack.metrics.auc:.3f}")
    result = {"n_members": a.n, "n_nonmembers": a.n, "references": a.references, "classes": a.classes, **timings,
              "target_s": 5.0, "machine": platform.platform(), "cores": os.cpu_count()}
    if a.out:
        write_json(a.out, result)
    print(result)


if __name__ == "__main__":
    main()

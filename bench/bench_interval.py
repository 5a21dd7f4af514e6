"""Cost of the certified lower bound beside the accounted upper bound (issue 33), in one process.

On the README's DP-SGD setting (n = 60000, B = 150, sigma = 1.3, 15 epochs, delta = 1e-5) and the MNIST setting of
issue 33 (B = 256, sigma = 1.1, 702 steps), for each batch sampler and relation: CPU seconds of the upper bound
(``account_dpsgd(..., lower_bound=False)``: every route) and of the lower bound alone
(:func:`dpaudit.accountants.pairs.dpsgd_lower_bound`), their ratio, and the CPU and wall time of the whole library
call ``dpaudit.account("dpsgd", ...)`` (both bounds). Every call gets fresh parameters (nothing cached: the dataset
size is nudged by a few records per call, which moves no figure beyond 1e-3).
Prints a table and writes JSON (``--out``, default runs/bench/bench_interval.json).

    python bench/bench_interval.py [--repeats 3] [--out PATH]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import dpaudit
from dpaudit._io import write_json
from dpaudit.accountants.dpsgd import account_dpsgd, dpsgd_steps
from dpaudit.accountants.pairs import dpsgd_lower_bound

SETTINGS = {
    "README (60000/150/1.3/15 epochs)": dict(dataset_size=60000, batch_size=150, noise_multiplier=1.3, epochs=15),
    "MNIST (60000/256/1.1/702 steps)": dict(dataset_size=60000, batch_size=256, noise_multiplier=1.1, steps=702),
}
COMBOS = [("poisson", "add-remove"), ("fixed-wor", "add-remove"), ("fixed-wor", "zero-out"),
          ("fixed-wor", "substitution"), ("shuffle", "zero-out"), ("shuffle", "substitution")]


def _steps(kw: dict, sampling: str) -> int:
    if "steps" in kw:
        return kw["steps"]
    if sampling == "shuffle":
        per = -(-kw["dataset_size"] // kw["batch_size"])
        return per * kw["epochs"]
    return dpsgd_steps(dataset_size=kw["dataset_size"], batch_size=kw["batch_size"], epochs=kw["epochs"])[0]


def run(repeats: int) -> dict:
    rows = []
    for name, base in SETTINGS.items():
        for ci, (sampling, relation) in enumerate(COMBOS):
            up_s = low_s = call_s = call_cpu = 0.0
            up = low = None
            for r in range(repeats):
                kw = {**base, "dataset_size": base["dataset_size"] + 100 * ci + 2 * r}
                t0 = time.process_time()
                res = account_dpsgd(**kw, delta=1e-5, sampling=sampling, neighbouring=relation, lower_bound=False)
                up_s += time.process_time() - t0
                t0 = time.process_time()
                lb = dpsgd_lower_bound(dataset_size=kw["dataset_size"], batch_size=kw["batch_size"],
                                       noise_multiplier=kw["noise_multiplier"], steps=_steps(kw, sampling), delta=1e-5,
                                       sampling=sampling, neighbouring=relation)
                low_s += time.process_time() - t0
                kw2 = {**base, "dataset_size": base["dataset_size"] + 100 * ci + 2 * r + 1}
                t0, c0 = time.perf_counter(), time.process_time()
                dpaudit.account("dpsgd", **kw2, delta=1e-5, sampling=sampling, neighbouring=relation)
                call_s += time.perf_counter() - t0
                call_cpu += time.process_time() - c0
                if r == 0:
                    up, low = res.epsilon, lb.epsilon
            rows.append({"setting": name, "sampling": sampling, "neighbouring": relation, "upper": up, "lower": low,
                         "upper_cpu_s": up_s / repeats, "lower_cpu_s": low_s / repeats,
                         "ratio_lower_over_upper_cost": low_s / up_s if up_s else None,
                         "account_wall_s": call_s / repeats, "account_cpu_s": call_cpu / repeats})
    return {"rows": rows, "repeats": repeats, "machine": platform.platform(), "cpus": os.cpu_count(),
            "load_average": os.getloadavg(), "date": time.strftime("%Y-%m-%d %H:%M:%S")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("runs/bench/bench_interval.json"))
    args = ap.parse_args()
    out = run(args.repeats)
    print(f"{'setting':34} {'sampler':10} {'relation':13} {'lower':>8} {'upper':>8} {'low cpu':>8} {'up cpu':>8} "
          f"{'ratio':>6} {'account() cpu / wall':>21}")
    for r in out["rows"]:
        print(f"{r['setting']:34} {r['sampling']:10} {r['neighbouring']:13} {r['lower']:8.4g} {r['upper']:8.4g} "
              f"{r['lower_cpu_s']:8.3f} {r['upper_cpu_s']:8.3f} {r['ratio_lower_over_upper_cost']:6.2f} "
              f"{r['account_cpu_s']:10.3f} / {r['account_wall_s']:8.3f}")
    print(f"load average {out['load_average']}, {out['date']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out, out)


if __name__ == "__main__":
    main()

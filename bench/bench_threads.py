"""Benchmark: dpaudit's default thread count (dpaudit.threads) against every fixed choice, quiet and under load.

The work: dpaudit's ensemble trainer on 8 MLPs (64-100-100-10) x 300 digits records x 4 epochs (Adam, batch 32),
the shadow / reference / teacher models of an audit. Each *load* runs ``B`` busy processes beside it (``python -c
"while True: pass"``, each bounded by ``timeout`` and killed afterwards; 0 = quiet, as quiet as the machine is);
each *arm* trains in one fresh process after a warm-up run (imports, first-call costs):

* ``default``: nothing set (no ``--threads``, no ``DPAUDIT_THREADS``): what ``dpaudit COMMAND`` does;
* ``N``: a fixed count (``DPAUDIT_THREADS=N``), for N = 1, 2, ... up to the usable cores (and ``--counts``).

The arms alternate within a load, ``--repeats`` times; the figure is the median wall time, and the ratio
``default / best fixed`` (1.0 = the default is the best choice; the target is at most 1.2). On a machine shared
with other jobs the absolute times move with their load: compare the ratios within one session, and read the load
average printed beside them.

    python bench/bench_threads.py                          # loads 0 1 4 12, 3 repeats
    python bench/bench_threads.py --loads 0 4 --repeats 2 --out runs/bench/threads.json
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "DPAUDIT_THREADS")

_CHILD = r"""
import sys, time
sys.path.insert(0, {root!r})
import numpy as np
from dpaudit.threads import apply_threads
apply_threads()  # what the CLI does: the default, or DPAUDIT_THREADS
import torch
from dpaudit.training.data import load_dataset
from dpaudit.training.ensemble import TrainConfig, train_ensemble
from dpaudit.training.models import ModelSpec

def train(models, epochs):
    ds = load_dataset("digits")
    rng = np.random.default_rng(0)
    data = [(ds.X[p], ds.y[p]) for p in (rng.choice(len(ds), 300, replace=False) for _ in range(models))]
    spec = ModelSpec("mlp", ds.input_shape, ds.num_classes, {{"hidden": [100, 100]}})
    return train_ensemble(spec, data, TrainConfig(epochs=epochs, batch_size=32, lr=1e-3), seed=0, device="cpu",
                          progress=False)

train(2, 1)
t0 = time.perf_counter()
train({models}, {epochs})
print(time.perf_counter() - t0, torch.get_num_threads())
"""


def _arm(count: int | None, args) -> tuple[float, int]:
    env = {k: v for k, v in os.environ.items() if k not in _THREAD_VARS}
    if count is not None:
        env["DPAUDIT_THREADS"] = str(count)
    code = _CHILD.format(root=str(Path(__file__).resolve().parents[1]), models=args.models, epochs=args.epochs)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=args.timeout,
                         check=True).stdout.split()
    return float(out[0]), int(out[1])


def _busy(n: int, seconds: int) -> list[subprocess.Popen]:
    """``n`` busy processes, each ended by ``timeout`` after ``seconds`` at the latest."""
    return [subprocess.Popen(["timeout", str(seconds), sys.executable, "-c", "while True: pass"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(n)]


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:  # timeout forwards the signal to its child
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loads", type=int, nargs="+", default=[0, 1, 4, 12], help="busy processes beside the run")
    ap.add_argument("--counts", type=int, nargs="+", default=None,
                    help="fixed thread counts to compare (default: 1 .. usable cores, at least 1 and 2)")
    ap.add_argument("--models", type=int, default=8)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timeout", type=int, default=300, help="seconds per training process, and the busy processes' "
                                                            "bound per load")
    ap.add_argument("--out", default="runs/bench/threads.json")
    args = ap.parse_args(argv)
    from dpaudit.threads import usable_cores

    cores = usable_cores()
    counts = args.counts or sorted({1, 2, *range(1, cores + 1)})
    arms: list[int | None] = [None, *counts]
    rows = []
    for load in args.loads:
        busy = _busy(load, args.timeout * args.repeats * len(arms))
        try:
            time.sleep(1.0 if load else 0.0)
            la_before = os.getloadavg()[0]
            times: dict[str, list[float]] = {}
            threads: dict[str, int] = {}
            for _ in range(args.repeats):
                for count in arms:  # the arms alternate
                    name = "default" if count is None else str(count)
                    t, n = _arm(count, args)
                    times.setdefault(name, []).append(t)
                    threads[name] = n
            la_after = os.getloadavg()[0]
        finally:
            _stop(busy)
        med = {k: statistics.median(v) for k, v in times.items()}
        best = min((k for k in med if k != "default"), key=med.__getitem__)
        row = {"busy_processes": load, "seconds": times, "threads": threads, "median_s": med, "best_fixed": best,
               "ratio_default_over_best": med["default"] / med[best], "load_average": [la_before, la_after]}
        rows.append(row)
        arms_txt = ", ".join(f"{k} thread{'s' if k != '1' else ''} {v:.2f} s" for k, v in med.items() if k != "default")
        print(f"beside {load:>2} busy: default ({threads['default']} thread(s)) {med['default']:.2f} s; {arms_txt} "
              f"-> default / best ({best}) x{row['ratio_default_over_best']:.2f} (load average {la_before:.1f} -> "
              f"{la_after:.1f})", flush=True)
    import torch

    result = {"command": "python bench/bench_threads.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "work": f"train_ensemble: {args.models} MLPs 64-100-100-10 x 300 digits records x {args.epochs} epochs",
              "usable_cores": cores, "cpu_count": os.cpu_count(), "torch": torch.__version__,
              "platform": platform.platform(), "processor": platform.processor(), "date": time.strftime("%Y-%m-%d"),
              "loads": rows}
    from dpaudit._io import write_json

    write_json(Path(args.out), result)
    print(f"wrote {args.out} ({os.cpu_count()} cores)")
    return result


if __name__ == "__main__":
    main()

"""Benchmark: dpaudit's thread policy (dpaudit.threads) vs torch's default thread count, on a loaded machine.

The work: dpaudit's ensemble trainer on 16 MLPs (64-100-100-10) x 300 digits records x 8 epochs (Adam, batch 32),
the shadow / reference / teacher models of an audit. Two scenarios, each run as fresh processes that start their
training together (a barrier after the imports); the arms alternate, ``--repeats`` times, and the ratio is
``default / policy`` of the median wall time of the slowest process:

* ``workers``: ``W`` processes (default: the usable cores) train at once, each the whole ensemble, as Ray tasks
  or parallel jobs do. *policy*: each applies ``apply_threads(workers=W)`` (cores / W threads); *default*: torch
  picks its own count (all cores) in every process, so the machine runs W x cores threads.
* ``external``: one dpaudit process trains while a second process, not dpaudit's, keeps one core busy (a pure
  Python loop) -- a machine shared with other jobs. *policy*: the override the policy gives for that case,
  ``DPAUDIT_THREADS=1``; *default*: torch's own count. (The policy itself cannot see other jobs: with one worker
  it picks all usable cores, as torch does, so that on a quiet machine the two are the same.)

    python bench/bench_threads.py                     # both scenarios, 3 repeats
    python bench/bench_threads.py --repeats 5 --out runs/bench/threads.json
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "DPAUDIT_THREADS")


def _train_once(models: int, epochs: int) -> None:
    import numpy as np

    from dpaudit.training.data import load_dataset
    from dpaudit.training.ensemble import TrainConfig, train_ensemble
    from dpaudit.training.models import ModelSpec

    ds = load_dataset("digits")
    rng = np.random.default_rng(0)
    data = [(ds.X[p], ds.y[p]) for p in (rng.choice(len(ds), 300, replace=False) for _ in range(models))]
    spec = ModelSpec("mlp", ds.input_shape, ds.num_classes, {"hidden": [100, 100]})
    train_ensemble(spec, data, TrainConfig(epochs=epochs, batch_size=32, lr=1e-3), seed=0, device="cpu", progress=False)


def _worker(mode: str, workers: int, models: int, epochs: int, barrier, queue) -> None:
    for var in _THREAD_VARS:  # torch's own choice in the default arm: nothing inherited
        os.environ.pop(var, None)
    if mode == "policy":
        from dpaudit.threads import apply_threads

        apply_threads(workers=workers)
    elif mode == "env1":
        os.environ["DPAUDIT_THREADS"] = "1"
        from dpaudit.threads import apply_threads

        apply_threads()
    import torch

    _train_once(2, 1)  # imports, first-call costs
    barrier.wait()
    t0 = time.perf_counter()
    _train_once(models, epochs)
    queue.put((time.perf_counter() - t0, torch.get_num_threads()))


def _hog(stop) -> None:
    x = 0
    while not stop.is_set():
        for _ in range(100_000):
            x += 1


def _scenario(mode: str, workers: int, hog: bool, args) -> tuple[float, int]:
    ctx = mp.get_context("spawn")
    barrier, queue, stop = ctx.Barrier(workers), ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=_worker, args=(mode, workers, args.models, args.epochs, barrier, queue))
             for _ in range(workers)]
    h = ctx.Process(target=_hog, args=(stop,)) if hog else None
    if h is not None:
        h.start()
    for p in procs:
        p.start()
    res = [queue.get() for _ in procs]
    for p in procs:
        p.join()
    if h is not None:
        stop.set()
        h.join()
    return max(r[0] for r in res), res[0][1]


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=None, help="processes of the 'workers' scenario (default: usable cores)")
    ap.add_argument("--models", type=int, default=16)
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--scenarios", nargs="+", default=["workers", "external"], choices=["workers", "external"])
    ap.add_argument("--out", default="runs/bench/threads.json")
    args = ap.parse_args(argv)
    from dpaudit.threads import usable_cores

    cores = usable_cores()
    W = args.workers or max(2, cores)
    plan = {"workers": [("policy", W, False), ("default", W, False)],
            "external": [("env1", 1, True), ("default", 1, True)]}
    load_before = list(os.getloadavg())
    rows = []
    for name in args.scenarios:
        times: dict[str, list] = {}
        threads: dict[str, int] = {}
        for _ in range(args.repeats):
            for mode, workers, hog in plan[name]:  # the arms alternate
                t, n = _scenario(mode, workers, hog, args)
                times.setdefault(mode, []).append(t)
                threads[mode] = n
        arm = plan[name][0][0]
        row = {"scenario": name, "processes": plan[name][0][1], "external_load": plan[name][0][2],
               "seconds": times, "threads": threads,
               "median_s": {k: statistics.median(v) for k, v in times.items()}}
        row["ratio_default_over_policy"] = row["median_s"]["default"] / row["median_s"][arm]
        rows.append(row)
        label = "DPAUDIT_THREADS=1" if arm == "env1" else f"policy ({threads[arm]} thread(s) each)"
        print(f"{name:<9} {row['processes']} process(es){' + a busy process' if row['external_load'] else ''}: "
              f"{label} {row['median_s'][arm]:.2f} s, torch default ({threads['default']} threads each) "
              f"{row['median_s']['default']:.2f} s -> x{row['ratio_default_over_policy']:.2f}", flush=True)
    import torch

    result = {"command": "python bench/bench_threads.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "work": f"train_ensemble: {args.models} MLPs 64-100-100-10 x 300 digits records x {args.epochs} epochs",
              "usable_cores": cores, "cpu_count": os.cpu_count(), "torch": torch.__version__,
              "platform": platform.platform(), "date": time.strftime("%Y-%m-%d"),
              "load_average_before": load_before, "load_average_after": list(os.getloadavg()), "scenarios": rows}
    from dpaudit._io import write_json

    write_json(Path(args.out), result)
    print(f"wrote {args.out} (load average {load_before[0]:.1f} -> {result['load_average_after'][0]:.1f} on "
          f"{os.cpu_count()} cores)")
    return result


if __name__ == "__main__":
    main()

"""Benchmark: DP-SGD for many models, dpaudit's ensemble trainer vs Opacus's PrivacyEngine one model at a time.

Same models (``init_model(spec, 0, i)`` for model i in both arms), same data (model i: its own random
``records`` rows of ``load_digits``), same hyperparameters (SGD, lr, batch 32, noise multiplier 1.0, clipping
norm 1.0, Poisson sampling at rate q = 1 / ceil(n / batch) with ceil(n / batch) steps per epoch, which is what
Opacus's DPDataLoader does for a DataLoader of that batch size). Only the execution differs (the Poisson masks
and the noise are drawn from different generators, so the weights are not compared).

By default each case runs in one freshly spawned process: the ensemble's *cold* call first (the first training
call of the process, after imports, so it also pays the process's first-use costs), then the baseline's first
call, then ``--warm`` rounds alternating the arms (*warm*: the fastest call per arm), so that both arms see the
same machine load; ratios are ``baseline / ensemble`` within that process. The peak resident memory
(``ru_maxrss``) is taken after each arm's cold call: the ensemble's own, and the process's peak so far for the
baseline. ``--separate`` runs every arm in its own process instead (per-arm peak memory and cold starts, but the
load may change between arms). The non-DP case compares the ensemble with a plain per-model torch loop (same
batch order and init).

Both arms run under dpaudit's thread policy (:mod:`dpaudit.threads`: the usable cores, or ``$DPAUDIT_THREADS``;
``--threads N`` overrides). Beside wall time each arm's process CPU time is reported: on a machine loaded by
other jobs it is the steadier measure of the work done (with more than one thread it also counts the threads'
waiting). ``--device cuda`` runs both arms on the GPU (``torch.cuda.synchronize`` around every timed call);
``--baseline-models N`` times the one-model-at-a-time baseline on the first N models and scales it by M / N (it is
a sequential loop over identical-sized models), for the GPU-sized cases of ``bench/gpu_run.sh``; ``--quick`` runs
two tiny cases (a check that the script works).

Where the time goes (torch.profiler, CPU, 1 thread, 2026-11-26, the ensemble's warm call; shares of the
profiled operator time). dp-mlp-64 (64 models x 35 steps, batches padded to about 40 rows): batched matmuls 36%
(per layer: the forward, the backward to the layer's output, and the clipped sum as one weighted matmul; no
per-example gradient is stored), the Gaussian noise 34% (1.13 million N(0, 1) numbers per step, as many as
Opacus draws; torch's CPU sampler runs at about 4 ns a number and on one thread, so ``BlockNoise`` draws fixed
blocks on all the policy's threads), the rest (bias adds, ReLU forward and backward, norms, gathering the
batches, the optimizer) about 30%. dp-cnn-64 (21 steps): batched matmuls 32%, copies 20% (mostly the im2col
rows), the noise 8%, GroupNorm forward and backward 9%, the grouped transposed convolution that gives a conv
layer's input gradient 5%. Before this session's changes the CNN spent a quarter of its time in ``F.unfold`` /
``col2im`` (per-example loops) and ``unfold_backward``, and the MLP about 6% in ``log_softmax`` over 10 classes.

    python bench/bench_dpsgd.py                                  # the issue's table + a CNN case, CPU
    python bench/bench_dpsgd.py --cases dp-mlp-64 --warm 3 --out runs/bench/dpsgd.json
    python bench/bench_dpsgd.py --device cuda --cases dp-mlp-1024 dp-cnn-512 --baseline-models 64
    python bench/bench_dpsgd.py --quick
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import platform
import resource
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from bench_ensemble import plain_loop  # noqa: E402  (the same plain torch loop as the non-DP ensemble benchmark)

MLP = {"name": "mlp", "kwargs": {"hidden": [100, 100]}}
CNN = {"name": "cnn_fedkt", "kwargs": {"norm": "group"}}
CASES = {
    "dp-mlp-16": {"model": MLP, "models": 16, "records": 200, "epochs": 5, "dp": True},
    "dp-mlp-64": {"model": MLP, "models": 64, "records": 200, "epochs": 5, "dp": True},
    "dp-mlp-256": {"model": MLP, "models": 256, "records": 100, "epochs": 3, "dp": True},
    "dp-cnn-64": {"model": CNN, "models": 64, "records": 200, "epochs": 3, "dp": True},
    "nodp-mlp-64": {"model": MLP, "models": 64, "records": 200, "epochs": 5, "dp": False},
    # GPU sizes (bench/gpu_run.sh): the baseline trains --baseline-models of them and is scaled to all
    "dp-mlp-1024": {"model": MLP, "models": 1024, "records": 200, "epochs": 3, "dp": True},
    "dp-cnn-512": {"model": CNN, "models": 512, "records": 200, "epochs": 3, "dp": True},
    # --quick: a smoke run of the script (CPU, seconds)
    "quick-dp-mlp": {"model": MLP, "models": 4, "records": 64, "epochs": 1, "dp": True},
    "quick-dp-cnn": {"model": CNN, "models": 4, "records": 64, "epochs": 1, "dp": True},
}
DEFAULT_CASES = ["dp-mlp-16", "dp-mlp-64", "dp-mlp-256", "dp-cnn-64", "nodp-mlp-64"]
QUICK_CASES = ["quick-dp-mlp", "quick-dp-cnn"]
BATCH, LR, SIGMA, CLIP = 32, 0.1, 1.0, 1.0


def _setup(case: dict):
    from dpaudit.training.data import load_dataset
    from dpaudit.training.ensemble import DPSGDConfig, TrainConfig
    from dpaudit.training.models import ModelSpec

    ds = load_dataset("digits")
    rng = np.random.default_rng(0)
    n = case["records"]
    datasets = [(ds.X[p], ds.y[p]) for p in (rng.choice(len(ds), n, replace=False) for _ in range(case["models"]))]
    spec = ModelSpec(case["model"]["name"], (1, 8, 8), 10, case["model"]["kwargs"])
    q = 1.0 / math.ceil(n / BATCH)  # Opacus: sample_rate = 1 / len(data_loader)
    dp = DPSGDConfig(SIGMA, CLIP, q) if case["dp"] else None
    cfg = TrainConfig(epochs=case["epochs"], batch_size=BATCH, optimizer="sgd", lr=LR, dp=dp)
    return datasets, spec, cfg


def _train_ensemble(datasets, spec, cfg, dev, method):
    from dpaudit.training.ensemble import train_ensemble

    train_ensemble(spec, datasets, cfg, seed=0, device=dev, progress=False, dp_method=method)


def _train_opacus(datasets, spec, cfg, dev):
    import torch
    import torch.nn.functional as F
    from opacus import PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset

    from dpaudit.training.ensemble import init_model

    for i, (X, y) in enumerate(datasets):
        model = init_model(spec, 0, i).to(dev).train()
        opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
        loader = DataLoader(TensorDataset(torch.from_numpy(X), torch.from_numpy(y)), batch_size=cfg.batch_size)
        engine = PrivacyEngine(accountant="rdp")
        model, opt, loader = engine.make_private(module=model, optimizer=opt, data_loader=loader,
                                                 noise_multiplier=cfg.dp.noise_multiplier,
                                                 max_grad_norm=cfg.dp.max_grad_norm, poisson_sampling=True)
        for _ in range(cfg.epochs):
            for xb, yb in loader:
                xb, yb = xb.to(dev), yb.to(dev)
                opt.zero_grad(set_to_none=True)
                F.cross_entropy(model(xb), yb).backward()
                opt.step()


def _arms(case_name: str, arms: list, warm: int, device: str, threads: int | None, baseline_models: int | None,
          queue) -> None:
    """Run ``arms`` in this process: each arm's cold call in order, then ``warm`` rounds that alternate the
    arms (so the arms share the machine's load); the fastest warm call per arm is kept. ``cpu_s``: the
    process CPU time of the same call (all threads; on a loaded machine the steadier figure of work done)."""
    warnings.filterwarnings("ignore")
    from dpaudit.threads import apply_threads

    apply_threads(threads)  # dpaudit's thread policy (or --threads) for both arms, before torch starts its pool
    import torch

    import opacus  # noqa: F401  (imports are not part of the cold call)

    from dpaudit.training import ensemble  # noqa: F401

    datasets, spec, cfg = _setup(CASES[case_name])
    dev = torch.device(device)
    M = len(datasets)
    nb = M if not baseline_models else min(M, baseline_models)  # the baseline's models (time scaled by M / nb)

    def once(arm: str) -> tuple[float, float]:
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0, c0 = time.perf_counter(), time.process_time()
        if arm == "ensemble":
            _train_ensemble(datasets, spec, cfg, dev, "auto")
        elif arm == "ensemble_per_example":
            _train_ensemble(datasets, spec, cfg, dev, "per_example")
        elif arm == "opacus":
            _train_opacus(datasets[:nb], spec, cfg, dev)
        else:
            plain_loop(datasets[:nb], spec, cfg, dev)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        scale = M / nb if arm in ("opacus", "loop") else 1.0
        return (time.perf_counter() - t0) * scale, (time.process_time() - c0) * scale

    out = {}
    for arm in arms:
        wall, cpu = once(arm)
        out[arm] = {"cold_s": wall, "warm_s": None, "cold_cpu_s": cpu, "warm_cpu_s": None,
                    "models_timed": nb if arm in ("opacus", "loop") else M,
                    # KiB on Linux; after this arm's cold call: its own peak for the first arm of a process,
                    # the largest so far for later ones
                    "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}
    for _ in range(warm):
        for arm in arms:
            wall, cpu = once(arm)
            o = out[arm]
            o["warm_s"] = wall if o["warm_s"] is None else min(o["warm_s"], wall)
            o["warm_cpu_s"] = cpu if o["warm_cpu_s"] is None else min(o["warm_cpu_s"], cpu)
    for arm in arms:
        out[arm]["gpu_peak_mb"] = torch.cuda.max_memory_allocated() / 2**20 if dev.type == "cuda" else None
    queue.put(out)


def _run(case_name, arms, args) -> dict:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_arms, args=(case_name, arms, args.warm, args.device, args.threads, args.baseline_models, q))
    p.start()
    out = q.get()
    p.join()
    return out


def _device_name(device: str) -> str:
    if device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(torch.device(device))
    return platform.processor() or platform.machine()


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=None, choices=list(CASES),
                    help=f"default: {' '.join(DEFAULT_CASES)} ({' '.join(QUICK_CASES)} with --quick)")
    ap.add_argument("--quick", action="store_true", help="tiny cases, one warm round: checks the script runs")
    ap.add_argument("--baseline-models", type=int, default=None, metavar="N",
                    help="time the one-model-at-a-time baseline on the first N models only and scale its time by "
                         "M / N (it is a sequential loop over models; for the large GPU cases)")
    ap.add_argument("--warm", type=int, default=2, help="warm calls per arm after the cold one (fastest is kept)")
    ap.add_argument("--per-example", action="store_true", help="also time the ensemble's vmap(grad) reference path")
    ap.add_argument("--separate", action="store_true",
                    help="one fresh process per arm (clean cold starts and per-arm peak memory) instead of one "
                         "process per case with the arms' warm calls alternating (ratios under the same load)")
    ap.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    ap.add_argument("--threads", type=int, default=None,
                    help="intra-op threads of both arms (default: dpaudit's policy, dpaudit.threads: $DPAUDIT_THREADS "
                         "or the usable cores)")
    ap.add_argument("--out", default="runs/bench/dpsgd.json")
    args = ap.parse_args(argv)
    if args.cases is None:
        args.cases = QUICK_CASES if args.quick else DEFAULT_CASES
    if args.quick:
        args.warm = min(args.warm, 1)
    import opacus
    import torch

    from dpaudit.serial import to_dict
    from dpaudit.threads import resolve_threads

    threads = resolve_threads(args.threads)
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")

    rows = []
    load_before = list(os.getloadavg())
    from dpaudit._io import write_json

    def result() -> dict:
        return {
            "command": "python bench/bench_dpsgd.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "settings": {"dataset": "digits (load_digits), each model its own random records", "batch_size": BATCH,
                         "optimizer": "sgd", "lr": LR, "noise_multiplier": SIGMA, "max_grad_norm": CLIP,
                         "sampling": "Poisson, q = 1/ceil(n/batch), ceil(n/batch) steps per epoch"},
            "device": args.device, "device_name": _device_name(args.device), "torch": torch.__version__,
            "opacus": opacus.__version__, "cpu_count": os.cpu_count(), "torch_threads": threads.threads,
            "threads": to_dict(threads), "baseline_models": args.baseline_models, "date": time.strftime("%Y-%m-%d"),
            "load_average_before": load_before, "load_average_after": list(os.getloadavg()),
            "platform": platform.platform(), "processes": "one per arm" if args.separate else
            "one per case, arms alternating; peak_rss_mb of a later arm is the process's peak so far", "cases": rows,
        }

    for name in args.cases:
        case = CASES[name]
        baseline = "opacus" if case["dp"] else "loop"
        arms = [baseline, "ensemble"] + (["ensemble_per_example"] if args.per_example and case["dp"] else [])
        if args.separate:
            res = {arm: _run(name, [arm], args)[arm] for arm in arms}
        else:  # the ensemble first: the peak memory after its cold call is its own
            res = _run(name, arms[1:] + arms[:1], args)
        row = {"case": name, **{k: v for k, v in case.items() if k != "model"}, "model": case["model"],
               "baseline": baseline, "arms": res}
        for mode in ("cold_s", "warm_s", "cold_cpu_s", "warm_cpu_s"):
            if res["ensemble"][mode]:
                row[f"speedup_{mode[:-2]}"] = res[baseline][mode] / res["ensemble"][mode]
        rows.append(row)
        e, b = res["ensemble"], res[baseline]
        scaled = f" (timed on {b['models_timed']}, scaled)" if b["models_timed"] != case["models"] else ""
        print(f"{name:<12} {baseline:>7}{scaled} warm {b['warm_s'] or float('nan'):7.2f} s cold {b['cold_s']:7.2f} s "
              f"({b['peak_rss_mb']:.0f} MB) | ensemble warm {e['warm_s'] or float('nan'):6.2f} s cold {e['cold_s']:6.2f} s "
              f"({e['peak_rss_mb']:.0f} MB) | x{row.get('speedup_warm', float('nan')):.1f} warm, "
              f"x{row['speedup_cold']:.1f} cold, x{row.get('speedup_warm_cpu', float('nan')):.1f} in CPU time", flush=True)
        write_json(Path(args.out), result())  # after every case: a run cut short keeps what it finished
    final = result()
    write_json(Path(args.out), final)
    print(f"wrote {args.out} (load average {load_before[0]:.1f} -> {final['load_average_after'][0]:.1f} "
          f"on {os.cpu_count()} cores; {threads.describe()}; {final['device_name']})")
    return final


if __name__ == "__main__":
    main()

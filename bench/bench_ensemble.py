"""Benchmark: M MLP teachers on load_digits partitions, ensemble trainer vs a plain per-model PyTorch loop.

Same data (a Dirichlet partition of digits' training split), same epochs, same batch order and the same
initialisation in both arms; only the execution differs. Each arm runs in its own fresh subprocess
(spawned one after the other), so its peak resident memory (``ru_maxrss``) is its own; the speed-up is the
ratio of the two wall-clock times taken in this one run.

    python bench/bench_ensemble.py                      # 100 teachers, 20 epochs, CPU
    python bench/bench_ensemble.py --models 100 --epochs 20 --device cuda --out runs/bench/ensemble_gpu.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402


def _setup(args):
    from dpaudit.training.data import load_dataset, split_dataset
    from dpaudit.training.ensemble import TrainConfig
    from dpaudit.training.models import ModelSpec
    from dpaudit.training.partition import dirichlet

    ds = load_dataset("digits")
    pool = np.arange(len(ds)) if args.all_data else split_dataset(ds, seed=0).train
    parts = dirichlet(ds.y[pool], args.models, args.beta, seed=0, min_size=2)
    datasets = [(ds.X[pool][p], ds.y[pool][p]) for p in parts]
    spec = ModelSpec("mlp", (1, 8, 8), 10, {"hidden": list(args.hidden)})
    cfg = TrainConfig(epochs=args.epochs, batch_size=args.batch_size, optimizer="adam", lr=1e-3)
    return ds, pool, datasets, spec, cfg


def plain_loop(datasets, spec, cfg, dev) -> list[dict]:
    """The baseline: each model alone, a plain torch loop with the ensemble's init and batch order
    (``torch.optim.Adam`` or ``SGD`` as ``cfg.optimizer`` says; no momentum or weight decay)."""
    import torch
    import torch.nn.functional as F

    from dpaudit.training.ensemble import batch_schedule, init_model

    states = []
    for i, (X, y) in enumerate(datasets):
        m = init_model(spec, 0, i).to(dev).train()
        opt = (torch.optim.Adam if cfg.optimizer == "adam" else torch.optim.SGD)(m.parameters(), lr=cfg.lr)
        Xt, yt = torch.from_numpy(X).to(dev), torch.from_numpy(y).to(dev)
        for b in batch_schedule(len(y), cfg.batch_size, cfg.epochs, 0, i):
            bt = torch.from_numpy(b).to(dev)
            opt.zero_grad()
            F.cross_entropy(m(Xt[bt]), yt[bt]).backward()
            opt.step()
        states.append({k: v.detach().cpu() for k, v in m.state_dict().items()})
    return states


def _arm(kind: str, args, queue) -> None:
    from dpaudit.threads import apply_threads

    apply_threads(args.threads)  # dpaudit's thread policy (or --threads), before torch starts its pool
    import torch

    from dpaudit.training.ensemble import train_ensemble

    _, _, datasets, spec, cfg = _setup(args)
    dev = torch.device(args.device)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    if kind == "ensemble":
        ens = train_ensemble(spec, datasets, cfg, seed=0, device=dev, progress=False)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        secs = time.perf_counter() - t0
        states = [ens.state_dict(i) for i in range(len(datasets))]
    else:
        states = plain_loop(datasets, spec, cfg, dev)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        secs = time.perf_counter() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux
    gpu_peak = torch.cuda.max_memory_allocated() / 2**20 if dev.type == "cuda" else None
    flat = [torch.cat([v.reshape(-1).float() for v in s.values()]).numpy() for s in states]
    queue.put({"seconds": secs, "peak_rss_mb": peak_mb, "gpu_peak_mb": gpu_peak, "params": flat})


def _run(kind, args):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_arm, args=(kind, args, q))
    p.start()
    out = q.get()
    p.join()
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=100)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--hidden", type=int, nargs="+", default=[100, 100], help="FedKT's MLP: two hidden layers of 100")
    ap.add_argument("--beta", type=float, default=0.5, help="Dirichlet label-skew parameter of the partition")
    ap.add_argument("--all-data", action="store_true",
                    help="partition all 1797 digits (default: the private train split of split_dataset)")
    ap.add_argument("--device", default="cuda" if _cuda() else "cpu")
    ap.add_argument("--threads", type=int, default=None,
                    help="intra-op threads of both arms (default: dpaudit's policy, dpaudit.threads)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="8 models, 2 epochs: checks the script runs")
    ap.add_argument("--out", default="runs/bench/ensemble.json")
    args = ap.parse_args(argv)
    if args.quick:
        args.models, args.epochs = 8, 2
    from dpaudit.serial import to_dict
    from dpaudit.threads import resolve_threads

    threads = resolve_threads(args.threads)

    _, _, datasets, _, _ = _setup(args)
    sizes = [len(y) for _, y in datasets]
    rows = []
    for r in range(args.repeats):
        loop = _run("loop", args)
        ens = _run("ensemble", args)
        diff = max(float(np.abs(a - b).max()) for a, b in zip(loop["params"], ens["params"]))
        rows.append({"loop_s": loop["seconds"], "ensemble_s": ens["seconds"], "speedup": loop["seconds"] / ens["seconds"],
                     "loop_peak_rss_mb": loop["peak_rss_mb"], "ensemble_peak_rss_mb": ens["peak_rss_mb"],
                     "loop_gpu_peak_mb": loop["gpu_peak_mb"], "ensemble_gpu_peak_mb": ens["gpu_peak_mb"],
                     "max_param_diff": diff})
    import torch

    result = {
        "command": "python bench/bench_ensemble.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "models": args.models, "epochs": args.epochs, "batch_size": args.batch_size, "hidden": args.hidden,
        "device": args.device, "dataset": "digits (%s, Dirichlet beta=%g partition)" % ("all records" if args.all_data else "train split", args.beta),
        "party_sizes": {"min": int(min(sizes)), "median": float(np.median(sizes)), "max": int(max(sizes))},
        "torch": torch.__version__, "cpu_count": os.cpu_count(), "torch_threads": threads.threads,
        "threads": to_dict(threads), "date": time.strftime("%Y-%m-%d"),
        "device_name": torch.cuda.get_device_name(torch.device(args.device)) if args.device.startswith("cuda")
        else (platform.processor() or platform.machine()),
        "load_average": list(os.getloadavg()), "platform": platform.platform(), "runs": rows,
        "median_speedup": float(np.median([r["speedup"] for r in rows])),
    }
    print(f"$ {result['command']}")
    print(f"{args.models} MLP {args.hidden} teachers, {args.epochs} epochs, batch {args.batch_size}, device {args.device}; "
          f"party sizes {result['party_sizes']}; load average {result['load_average'][0]:.1f} on {os.cpu_count()} cores; "
          f"{threads.describe()}; {result['device_name']}")
    print(f"{'run':>3} {'loop s':>9} {'ensemble s':>11} {'speed-up':>9} {'loop RSS MB':>12} {'ens RSS MB':>11} {'max |dparam|':>13}")
    for k, r in enumerate(rows):
        print(f"{k:>3} {r['loop_s']:>9.2f} {r['ensemble_s']:>11.2f} {r['speedup']:>8.1f}x {r['loop_peak_rss_mb']:>12.0f} "
              f"{r['ensemble_peak_rss_mb']:>11.0f} {r['max_param_diff']:>13.2e}")
    out = Path(args.out)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from dpaudit._io import write_json

    write_json(out, result)
    print(f"wrote {out}")
    return result


def _cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:  # pragma: no cover
        return False


if __name__ == "__main__":
    main()

"""Benchmark of the executors (local vs Ray) and of the ensemble trainer on GPU.

1. LiRA with 64 reference models on digits (an MLP target; the release-style recipe: the ensemble trainer as the
   BatchTrainFn, 8 units of 8 models): the local executor vs a local Ray instance with ``--workers`` CPUs.
   Ray's start-up (``ray.init``) is timed on its own; the first Ray run also pays for the workers importing
   torch and dpaudit, so the same attack runs twice on Ray (cold, then warm workers); overhead = start-up +
   (cold - warm). The scores of every run must be identical.
2. The default audit grid (``dpaudit audit`` with no config: 3 FREDY students + the non-private baseline x
   threshold / shadow / LiRA): ``run_audit`` with each executor into fresh folders; report numbers compared.
3. When CUDA is available (or ``--trainers-device`` forces a device): M models trained with DP-SGD by the
   ensemble trainer at once, vs the same trainer one model at a time, vs Opacus one model at a time.
   Without a GPU the section records that it was skipped.

Timings within one run are comparable (same machine, same load); absolute seconds on a shared machine are not.
Usage: python bench/bench_executor.py [--out runs/bench/executor.json] [--workers 2] [--quick] [--skip-audit]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from dpaudit._io import write_json  # noqa: E402
from dpaudit.serial import to_dict  # noqa: E402


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def _ray_executor(workers: int):
    from dpaudit.executors.ray_executor import RayExecutor, ray_available

    if not ray_available():
        return None
    return RayExecutor(num_cpus=workers)


def bench_lira(workers: int, num_models: int, epochs: int) -> dict:
    import torch

    from dpaudit.attacks.lira import lira_attack
    from dpaudit.executors import LocalExecutor
    from dpaudit.training.data import load_dataset
    from dpaudit.training.ensemble import TrainConfig, fit_classifier, train_ensemble
    from dpaudit.training.models import ModelSpec

    torch.set_num_threads(1)
    ds = load_dataset("digits", seed=0)
    spec = ModelSpec("mlp", ds.input_shape, ds.num_classes, {"hidden": [128, 64]})
    cfg = TrainConfig(epochs=epochs, batch_size=64, lr=1e-3)

    def many(datasets, seed):
        return train_ensemble(spec, list(datasets), cfg, seed=seed, progress=False).members()

    perm = np.random.default_rng(0).permutation(len(ds))
    mem, non, pool = perm[:300], perm[300:600], perm[600:]
    target = fit_classifier(spec, ds.X[mem], ds.y[mem], cfg, 0)
    ev = np.r_[mem, non]
    args = (target, ds.X[ev], ds.y[ev], ds.X[pool], ds.y[pool])
    kw = dict(num_shadows=num_models, batch_train_fn=many, train_size=300, seed=0)
    # twice, like Ray below: the first call in a process also pays for torch's first use
    local, t_local_cold = _timed(lambda: lira_attack(*args, executor=LocalExecutor(), **kw))
    _, t_local = _timed(lambda: lira_attack(*args, executor=LocalExecutor(), **kw))
    out = {"models": num_models, "units": -(-num_models // 8), "epochs": epochs,
           "model": "mlp [128, 64] on digits, 300 training records each", "local_first_run_s": t_local_cold,
           "local_s": t_local}
    ex = _ray_executor(workers)
    if ex is None:
        out["ray"] = "skipped: Ray is not installed (pip install 'dpaudit[ray]')"
        return out
    try:
        out["ray_startup_s"] = ex.start()
        # first run: the workers also import torch and dpaudit (part of Ray's start-up cost); second: warm workers
        remote, t_cold = _timed(lambda: lira_attack(*args, executor=ex, **kw))
        again, t_warm = _timed(lambda: lira_attack(*args, executor=ex, **kw))
    finally:
        ex.shutdown()
    overhead = out["ray_startup_s"] + max(0.0, t_cold - t_warm)
    out.update(ray_workers=workers, ray_first_run_s=t_cold, ray_warm_run_s=t_warm,
               ray_overhead_s=overhead, speedup_warm=t_local / t_warm,
               speedup_including_startup=t_local_cold / (out["ray_startup_s"] + t_cold),
               identical_scores=bool(np.array_equal(local, remote) and np.array_equal(local, again)))
    return out


def bench_audit(workers: int) -> dict:
    from dpaudit.auditing.runner import default_config, run_audit
    from dpaudit.executors import LocalExecutor

    tmp = Path(tempfile.mkdtemp(prefix="dpaudit-bench-executor-"))
    try:
        cfg = default_config()
        rep_local, t_local = _timed(lambda: run_audit(cfg, tmp / "local", progress=False, executor=LocalExecutor()))
        out = {"grid": f"{len(cfg.models)} method runs x {len(cfg.attacks)} attacks (default audit)", "local_s": t_local}
        ex = _ray_executor(workers)
        if ex is None:
            out["ray"] = "skipped: Ray is not installed (pip install 'dpaudit[ray]')"
            return out
        try:
            startup = ex.start()
            rep_ray, t_ray = _timed(lambda: run_audit(cfg, tmp / "ray", progress=False, executor=ex))
        finally:
            ex.shutdown()

        def numbers(rep, root):
            """The report without its run times (``elapsed_seconds`` at any depth) and run folder."""
            def drop(x):
                if isinstance(x, dict):
                    return {k: drop(v) for k, v in x.items() if k != "elapsed_seconds"}
                return [drop(v) for v in x] if isinstance(x, list) else x
            return drop(json.loads(json.dumps(to_dict(rep)).replace(str(root), "RUN")))

        out.update(ray_workers=workers, ray_startup_s=startup, ray_s=t_ray, ray_plus_startup_s=t_ray + startup,
                   speedup_without_startup=t_local / t_ray, speedup_with_startup=t_local / (t_ray + startup),
                   identical_report_numbers=numbers(rep_local, tmp / "local") == numbers(rep_ray, tmp / "ray"))
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def bench_trainers(device: str, num_models: int, epochs: int) -> dict:
    """DP-SGD on M models: the ensemble trainer at once, the same trainer one at a time, Opacus one at a time."""
    import torch

    from dpaudit.training.data import load_dataset
    from dpaudit.training.ensemble import DPSGDConfig, TrainConfig, init_model, train_ensemble
    from dpaudit.training.models import ModelSpec

    ds = load_dataset("digits", seed=0)
    spec = ModelSpec("mlp", ds.input_shape, ds.num_classes, {"hidden": [128, 64]})
    dp = DPSGDConfig(noise_multiplier=1.0, max_grad_norm=1.0)
    cfg = TrainConfig(epochs=epochs, batch_size=64, optimizer="sgd", lr=0.1, dp=dp)
    rng = np.random.default_rng(0)
    datasets = [(ds.X[i], ds.y[i]) for i in (rng.choice(len(ds), 500, replace=False) for _ in range(num_models))]

    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    def ensemble():
        train_ensemble(spec, datasets, cfg, seed=0, device=device, progress=False)
        sync()

    def loop():
        for j, d in enumerate(datasets):
            train_ensemble(spec, [d], cfg, seed=j, device=device, progress=False)
        sync()

    def opacus_loop():
        from opacus import PrivacyEngine

        for j, (X, y) in enumerate(datasets):
            model = init_model(spec, 0, j).to(device)
            opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
            data = torch.utils.data.TensorDataset(torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(y))
            loader = torch.utils.data.DataLoader(data, batch_size=cfg.batch_size)
            model, opt, loader = PrivacyEngine().make_private(module=model, optimizer=opt, data_loader=loader,
                                                              noise_multiplier=dp.noise_multiplier,
                                                              max_grad_norm=dp.max_grad_norm, poisson_sampling=True)
            for _ in range(cfg.epochs):
                for xb, yb in loader:
                    if len(yb) == 0:
                        continue
                    opt.zero_grad()
                    torch.nn.functional.cross_entropy(model(xb.to(device)), yb.to(device)).backward()
                    opt.step()
        sync()

    train_ensemble(spec, datasets[:1], TrainConfig(epochs=1, dp=dp), seed=0, device=device, progress=False)  # warm-up
    _, t_ens = _timed(ensemble)
    _, t_loop = _timed(loop)
    _, t_opacus = _timed(opacus_loop)
    return {"device": device, "gpu": torch.cuda.get_device_name() if device.startswith("cuda") else None,
            "models": num_models, "epochs": epochs, "recipe": "mlp [128, 64], 500 digits each, DP-SGD sigma 1, C 1, q 64/500",
            "ensemble_s": t_ens, "per_model_loop_s": t_loop, "opacus_one_at_a_time_s": t_opacus,
            "speedup_vs_loop": t_loop / t_ens, "speedup_vs_opacus": t_opacus / t_ens}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("runs/bench/executor.json"))
    ap.add_argument("--workers", type=int, default=2, help="Ray CPUs (the local instance's size).")
    ap.add_argument("--models", type=int, default=64, help="LiRA reference models.")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="16 reference models, 3 epochs, no audit grid.")
    ap.add_argument("--skip-audit", action="store_true", help="Leave out the audit grid (the slowest part).")
    ap.add_argument("--trainers-device", default=None,
                    help="Run section 3 on this device even without CUDA (default: cuda when available, else skip).")
    ap.add_argument("--trainer-models", type=int, default=64)
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.quick:
        args.models, args.epochs, args.skip_audit, args.trainer_models = 16, 3, True, 4
    import torch

    result = {"machine": {"platform": platform.platform(), "python": platform.python_version(),
                          "cpus": os.cpu_count(), "torch": torch.__version__,
                          "load_average_at_start": list(os.getloadavg())},
              "note": "timings taken in one process; the ratios are meaningful, absolute seconds depend on load"}
    print(f"[bench] LiRA, {args.models} reference models: local vs Ray ({args.workers} workers) ...", file=sys.stderr)
    result["lira"] = bench_lira(args.workers, args.models, args.epochs)
    if not args.skip_audit:
        print("[bench] default audit grid: local vs Ray ...", file=sys.stderr)
        result["audit_grid"] = bench_audit(args.workers)
    device = args.trainers_device or ("cuda" if torch.cuda.is_available() else None)
    if device is None:
        result["trainers"] = "skipped: no CUDA device (pass --trainers-device cpu to run it on the CPU anyway)"
    else:
        print(f"[bench] DP-SGD trainers on {device} ...", file=sys.stderr)
        result["trainers"] = bench_trainers(device, args.trainer_models, args.epochs)
    result["machine"]["load_average_at_end"] = list(os.getloadavg())
    write_json(args.out, result)
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()

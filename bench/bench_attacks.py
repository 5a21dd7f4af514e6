"""Benchmark of the attack layer.

1. Shadow training: 16 shadow models of the target's recipe (an MLP on digits) trained at once through the
   release's BatchTrainFn (the torch.func ensemble trainer) vs one at a time through its TrainFn; ratio.
2. LiRA scoring: 1e5 examples x 64 shadow models (online / offline, fixed / per-record variance), in seconds;
   the issue's target is < 2 s on a 2-core CPU.
3. RMIA scoring: 1e5 targets x 1e4 population records x 64 reference models (online, and offline with a given a),
   sort-based (dpaudit.attacks.rmia.rmia_scores) vs a direct pairwise count of the paper's formula (the n x m
   likelihood ratios, in chunks of targets) on the same arrays; the scores must agree exactly. Target < 5 s on 2
   cores (issue 25).
4. Attack-classifier fits: the shadow attack's CatBoost classifiers (global + one per class, digits-shaped shadow
   features) fitted one after another with every thread each vs side by side in one Python thread per core of one
   CatBoost thread each (``AttackModel.fit`` does the latter); the scores must be identical.

Both timings are taken in the same process, so the ratio is meaningful on a shared, noisy machine.
Usage: python bench/bench_attacks.py [--out runs/bench/attacks.json] [--shadows 16] [--epochs 10] [--quick]
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
from dpaudit.attacks.lira import lira_inclusion, lira_scores  # noqa: E402
from dpaudit.attacks.rmia import rmia_scores  # noqa: E402


def _best_of(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def bench_shadow_training(num_shadows: int, epochs: int, train_size: int) -> dict:
    """Release-style recipe: the same code paths as Release.train_fn / Release.train_many."""
    import torch

    from dpaudit.training.data import load_dataset
    from dpaudit.training.ensemble import TrainConfig, train_ensemble
    from dpaudit.training.ensemble import fit_classifier
    from dpaudit.training.models import ModelSpec

    ds = load_dataset("digits", seed=0)
    spec = ModelSpec("mlp", ds.input_shape, ds.num_classes, {"hidden": [128, 64]})
    config = TrainConfig(epochs=epochs, batch_size=64, lr=1e-3)
    rng = np.random.default_rng(0)
    datasets = [(ds.X[idx], ds.y[idx]) for idx in (rng.choice(len(ds), train_size, replace=False)
                                                   for _ in range(num_shadows))]
    t0 = time.perf_counter()
    ens = train_ensemble(spec, datasets, config, seed=0, progress=False)
    batched = time.perf_counter() - t0
    t0 = time.perf_counter()
    singles = [fit_classifier(spec, X, y, config, seed=j) for j, (X, y) in enumerate(datasets)]
    sequential = time.perf_counter() - t0
    acc_b = float(np.mean([(m.predict_proba(ds.X).argmax(1) == ds.y).mean() for m in ens.members()]))
    acc_s = float(np.mean([(m.predict_proba(ds.X).argmax(1) == ds.y).mean() for m in singles]))
    return {"num_shadows": num_shadows, "epochs": epochs, "train_size": train_size, "model": "mlp [128, 64] on digits",
            "batched_s": batched, "sequential_s": sequential, "speedup": sequential / batched,
            "mean_accuracy_batched": acc_b, "mean_accuracy_sequential": acc_s, "torch_threads": torch.get_num_threads()}


def bench_lira(n: int, K: int, repeats: int) -> list[dict]:
    rng = np.random.default_rng(0)
    mask = lira_inclusion(n, K, seed=0)
    phi = rng.normal(0, 1, (n, K)) + 1.5 * mask
    target = rng.normal(0.5, 1.2, n)
    rows = []
    for online in (True, False):
        for fixed in (True, False):
            secs = _best_of(lambda: lira_scores(target, phi, mask, online=online, fixed_variance=fixed), repeats)
            rows.append({"examples": n, "shadows": K, "online": online, "fixed_variance": fixed, "seconds": secs})
    return rows


def _direct_rmia(lx, rx, lz, rz, gamma: float, chunk: int = 2000) -> np.ndarray:
    """The baseline: Score(x) = mean_z [ (p(x)/Pr(x)) / (p(z)/Pr(z)) >= gamma ] over the n x m ratios (online
    Pr = mean over reference models), in chunks of ``chunk`` targets so the matrix never exceeds chunk x m."""
    ratio_x = np.exp(lx) / np.exp(rx).mean(axis=1)
    ratio_z = np.exp(lz) / np.exp(rz).mean(axis=1)
    out = np.empty(lx.size)
    for s in range(0, lx.size, chunk):
        out[s:s + chunk] = ((ratio_x[s:s + chunk, None] / ratio_z[None, :]) >= gamma).mean(axis=1)
    return out


def bench_rmia(n: int, m: int, K: int, repeats: int) -> dict:
    rng = np.random.default_rng(0)
    inc = lira_inclusion(n, K, seed=0)
    rx = np.log(np.clip(rng.uniform(0.05, 1.0, (n, K)) * np.where(inc, 1.3, 1.0), 1e-12, 1.0))
    lx = np.log(rng.uniform(0.05, 1.0, n))
    rz = np.log(rng.uniform(0.05, 1.0, (m, K)))
    lz = np.log(rng.uniform(0.05, 1.0, m))
    online = _best_of(lambda: rmia_scores(lx, rx, lz, rz, online=True), repeats)
    offline = _best_of(lambda: rmia_scores(lx, rx, lz, rz, reference_in=inc, online=False, a=0.3), repeats)
    t0 = time.perf_counter()
    direct = _direct_rmia(lx, rx, lz, rz, 1.0)
    direct_s = time.perf_counter() - t0
    agree = bool(np.array_equal(direct, rmia_scores(lx, rx, lz, rz, online=True).score))
    return {"targets": n, "population": m, "references": K, "online_s": online, "offline_s": offline,
            "direct_pairwise_s": direct_s, "speedup_vs_direct": direct_s / online, "scores_identical": agree,
            "target_s": 5.0, "load_1min": os.getloadavg()[0], "cores": os.cpu_count()}


def bench_attack_fits(records: int, classes: int, repeats: int) -> dict:
    """AttackModel.fit with the thread policy at 1 (fits one after another, at the process's thread count through
    CatBoost itself) vs at the usable core count (fits side by side), same process, best of ``repeats``."""
    import dpaudit.attacks.shadow as shadow
    import dpaudit.threads as th
    from catboost import CatBoostClassifier

    cores = th.usable_cores()
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(classes) * 0.3, size=records)
    y = rng.integers(0, classes, records)
    member = (p[np.arange(records), y] + 0.3 * rng.normal(size=records) > 0.5).astype(int)
    real_current = th.current
    real_fit_all = shadow._fit_all

    def sequential_all_threads(jobs, *, concurrent):   # the previous organisation: each fit with every thread
        for _, clf, X, t in jobs:
            clf.set_params(thread_count=cores)
            clf.fit(X, t)

    out = {}
    try:
        th.current = lambda: th.ThreadSetting(cores, "--threads", cores, 1)
        shadow._fit_all = sequential_all_threads
        seq = _best_of(lambda: out.__setitem__("seq", shadow.AttackModel(seed=0).fit(p, y, member)), repeats)
        shadow._fit_all = real_fit_all
        par = _best_of(lambda: out.__setitem__("par", shadow.AttackModel(seed=0).fit(p, y, member)), repeats)
    finally:
        th.current, shadow._fit_all = real_current, real_fit_all
    same = bool(np.array_equal(out["seq"].predict_proba(p, y), out["par"].predict_proba(p, y)))
    assert isinstance(out["par"].global_, CatBoostClassifier)
    return {"records": records, "classes": classes, "fits": 1 + len(out["par"].per_class_), "cores": cores,
            "one_after_another_s": seq, "side_by_side_s": par, "speedup": seq / par, "scores_identical": same,
            "load_1min": os.getloadavg()[0]}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("runs/bench/attacks.json"))
    ap.add_argument("--shadows", type=int, default=16)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--train-size", type=int, default=300)
    ap.add_argument("--examples", type=int, default=100_000)
    ap.add_argument("--lira-shadows", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--population", type=int, default=10_000, help="RMIA population records.")
    ap.add_argument("--skip-training", action="store_true", help="Only the LiRA and RMIA scoring parts.")
    ap.add_argument("--only-rmia", action="store_true", help="Only the RMIA scoring part.")
    ap.add_argument("--only-fits", action="store_true", help="Only the attack-classifier fits.")
    ap.add_argument("--fit-records", type=int, default=9600, help="Shadow records the attack classifiers learn from.")
    args = ap.parse_args(argv)

    result: dict = {"machine": platform.platform(), "python": platform.python_version()}
    if not args.only_rmia:
        f = bench_attack_fits(args.fit_records, 10, args.repeats)
        result["attack_fits"] = f
        print(f"Attack-classifier fits, {f['fits']} CatBoost fits on {f['records']} shadow records ({f['classes']} "
              f"classes, best of {args.repeats}): one after another {f['one_after_another_s']:.2f} s, side by side "
              f"{f['side_by_side_s']:.2f} s (x{f['speedup']:.2f}); scores identical: {f['scores_identical']}; "
              f"load average {f['load_1min']:.1f} on {f['cores']} cores")
    if args.only_fits:
        write_json(args.out, result)
        print(f"wrote {args.out}")
        return
    r = bench_rmia(args.examples, args.population, args.lira_shadows, args.repeats)
    result["rmia"] = r
    print(f"RMIA scoring, {r['targets']} targets x {r['population']} population x {r['references']} references "
          f"(best of {args.repeats}): online {r['online_s']:.3f} s, offline {r['offline_s']:.3f} s; direct pairwise "
          f"{r['direct_pairwise_s']:.2f} s (x{r['speedup_vs_direct']:.0f}); scores identical: {r['scores_identical']}; "
          f"load average {r['load_1min']:.1f} on {r['cores']} cores")
    if args.only_rmia:
        write_json(args.out, result)
        print(f"wrote {args.out}")
        return
    result["lira"] = bench_lira(args.examples, args.lira_shadows, args.repeats)
    print(f"LiRA scoring, {args.examples} examples x {args.lira_shadows} shadows (best of {args.repeats}):")
    print(f"  {'mode':<8} {'variance':<10} {'seconds':>8}")
    for r in result["lira"]:
        print(f"  {'online' if r['online'] else 'offline':<8} {'fixed' if r['fixed_variance'] else 'per-rec':<10} "
              f"{r['seconds']:>8.3f}")
    if not args.skip_training:
        s = bench_shadow_training(args.shadows, args.epochs, args.train_size)
        result["shadow_training"] = s
        print(f"Shadow training, {s['num_shadows']} x {s['model']}, {s['epochs']} epochs, {s['train_size']} records:")
        print(f"  ensemble (BatchTrainFn) {s['batched_s']:.2f} s   one at a time (TrainFn) {s['sequential_s']:.2f} s"
              f"   speedup x{s['speedup']:.2f}   (accuracy {s['mean_accuracy_batched']:.3f} vs "
              f"{s['mean_accuracy_sequential']:.3f}, torch threads {s['torch_threads']})")
    write_json(args.out, result)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

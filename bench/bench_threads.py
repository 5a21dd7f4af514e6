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

``--job audit`` times an audit-shaped job instead, each arm one fresh process from start to finish (imports, the
worker pool's start and the report included, as a user's ``dpaudit audit`` is): the default audit scaled down
(FREDY at gamma 2 plus the non-private baseline; loss-threshold, shadow-model (CatBoost, 8 shadows) and
LiRA (8 references) attacks; a one-run canary audit of DP-SGD with 300 canaries; FREDY's whole-run audit with 100
trainings), small enough that the heavy-load row finishes in minutes. Its arms are executor / thread choices:

* ``default``: nothing set (``--executor auto``, no ``--threads``): what ``dpaudit audit`` does;
* ``local-1``, ``local-2``: ``--executor local`` with ``DPAUDIT_THREADS=1`` / ``2`` (one process, intra-op threads);
* ``processes``: ``--executor processes`` (one worker per usable core, one thread each).

Every arm's report must hold the same numbers (``bench/compare_reports.py``); the differences are counted.

    python bench/bench_threads.py --job audit --loads 0 1 4 12 --repeats 2 --out runs/bench/threads-audit.json
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


_AUDIT_CHILD = r"""
import dataclasses, sys, time
t0 = time.perf_counter()
sys.path.insert(0, {root!r})
from dpaudit.threads import apply_threads
apply_threads()  # what the CLI does: the default, or DPAUDIT_THREADS
from dpaudit.api import audit
from dpaudit.auditing.runner import AttackSpec, default_config
cfg = default_config()
cfg = dataclasses.replace(
    cfg, models=cfg.models[2:],  # gamma 2, with the non-private baseline
    attacks=(AttackSpec("threshold", threshold_kind="loss"), AttackSpec("shadow", shadows=8),
             AttackSpec("lira", shadows=8)),
    canary_audits=tuple(dataclasses.replace(c, canaries=300) for c in cfg.canary_audits),
    method_audits=tuple(dataclasses.replace(m, params={{**m.params, "trials": 100}}) for m in cfg.method_audits))
m0 = cfg.models[0]
cfg = dataclasses.replace(cfg, models=(dataclasses.replace(m0, params={{**m0.params, "nonprivate_baseline": True}},
                                                           extra=("nonprivate",), extra_names=("nonprivate-baseline",)),
                                       *cfg.models[1:]))
report = audit(cfg, {out!r}, executor={executor!r}, progress=False)
import torch
print(time.perf_counter() - t0, torch.get_num_threads(), report.settings["executor"])
"""

#: --job audit: (arm, --executor, DPAUDIT_THREADS or None)
AUDIT_ARMS = (("default", "auto", None), ("local-1", "local", "1"), ("local-2", "local", "2"),
              ("processes", "processes", None))


def _audit_arm(arm: tuple[str, str, str | None], out: Path, args) -> tuple[float, float, int, str]:
    """One fresh process running the small audit into ``out``: (wall seconds of the whole process, seconds it
    measured itself, its intra-op threads, its executor)."""
    import shutil

    name, executor, threads = arm
    shutil.rmtree(out, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if k not in _THREAD_VARS}
    if threads is not None:
        env["DPAUDIT_THREADS"] = threads
    code = _AUDIT_CHILD.format(root=str(Path(__file__).resolve().parents[1]), out=str(out), executor=executor)
    t0 = time.perf_counter()
    try:
        res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                             timeout=args.timeout)
    except subprocess.TimeoutExpired:  # recorded as the bound (a lower bound on its time), its report not compared
        return float(args.timeout), float("nan"), -1, "timed out"
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise RuntimeError(f"arm {name} failed: {res.stderr[-2000:]}")
    line = res.stdout.strip().splitlines()[-1].split(maxsplit=2)
    return wall, float(line[0]), int(line[1]), line[2]


def _audit_rows(args) -> list[dict]:
    from compare_reports import compare

    runs = Path(args.out).with_suffix("")
    arms = [a for a in AUDIT_ARMS if a[0] in args.arms]
    _audit_arm(arms[0], runs / "warm-up", args)  # file caches, the data set, first-call costs
    reference = runs / "warm-up" / "report.json"
    rows = []
    for load in args.loads:
        busy = _busy(load, args.timeout * args.repeats * len(arms))
        try:
            time.sleep(1.0 if load else 0.0)
            la_before = os.getloadavg()[0]
            times: dict[str, list[float]] = {}
            info: dict[str, list] = {}
            diffs: dict[str, int] = {}
            timed_out: list[str] = []
            for r in range(args.repeats):
                order = arms if r % 2 == 0 else arms[::-1]  # alternate, and reverse every other repeat
                for arm in order:
                    out = runs / f"busy{load}-{arm[0]}-{r}"
                    wall, _, n, where = _audit_arm(arm, out, args)
                    times.setdefault(arm[0], []).append(wall)
                    info[arm[0]] = [n, where]
                    if where != "timed out":
                        diffs[arm[0]] = diffs.get(arm[0], 0) + len(compare(str(reference),
                                                                           str(out / "report.json"))["diff"])
                    else:
                        timed_out.append(f"{arm[0]} (repeat {r})")
                    shutil_rm(out)
            la_after = os.getloadavg()[0]
        finally:
            _stop(busy)
        med = {k: statistics.median(v) for k, v in times.items()}
        fixed = [k for k in med if k != "default"]
        best = min(fixed, key=med.__getitem__)
        row = {"busy_processes": load, "seconds": times, "arms": info, "median_s": med, "best_fixed": best,
               "ratio_default_over_best": med["default"] / med[best] if "default" in med else None,
               "report_differences": diffs, "timed_out": timed_out, "load_average": [la_before, la_after]}
        rows.append(row)
        arms_txt = ", ".join(f"{k} {v:.1f} s" for k, v in med.items())
        ratio = f"x{row['ratio_default_over_best']:.2f}" if "default" in med else "n/a"
        print(f"beside {load:>2} busy: {arms_txt} -> default / best ({best}) {ratio}; report differences "
              f"{sum(diffs.values())}{'; timed out (counted as ' + str(args.timeout) + ' s): ' + ', '.join(timed_out) if timed_out else ''} "
              f"(load average {la_before:.1f} -> {la_after:.1f})", flush=True)
    shutil_rm(runs / "warm-up")
    return rows


def shutil_rm(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


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
    ap.add_argument("--job", choices=("train", "audit"), default="train",
                    help="train: the ensemble trainer under thread counts; audit: the small audit under executor / "
                         "thread arms (see the module docstring)")
    ap.add_argument("--arms", nargs="+", default=[a[0] for a in AUDIT_ARMS], help="--job audit: the arms to run")
    args = ap.parse_args(argv)
    from dpaudit.threads import usable_cores

    cores = usable_cores()
    if args.job == "audit":
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        rows = _audit_rows(args)
        import torch

        result = {"command": "python bench/bench_threads.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                  "work": "the default audit scaled down (bench_threads.py --job audit), one fresh process per arm",
                  "usable_cores": cores, "cpu_count": os.cpu_count(), "torch": torch.__version__,
                  "platform": platform.platform(), "date": time.strftime("%Y-%m-%d %H:%M"), "loads": rows}
        from dpaudit._io import write_json

        write_json(Path(args.out), result)
        print(f"wrote {args.out} ({os.cpu_count()} cores)")
        return result
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

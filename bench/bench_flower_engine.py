"""Benchmark of ``dpaudit train METHOD --engine flower`` against the in-process runner, on the same method and seed.

For each method (default: privatekt, fedkt, fredy, proxyfl on digits, small settings with ``--parties`` parties):

1. the in-process run (``dpaudit.training.methods.run_method``), twice (cold, then warm: the first run of a
   process pays torch's first-call costs): its run time (``RunResult.seconds``);
2. the Flower run: every method twice (cold, then warm Ray workers) in ONE simulation
   (``dpaudit.training.flower.run_methods``), so Ray's start-up is paid once and timed apart (total simulation wall
   time minus the runs); each run's own time is its ``RunResult.seconds`` inside the simulation.

3. with ``--deployment-methods``: those methods again on a local Flower deployment (``flower-superlink`` and one
   ``flower-supernode`` process per party; every message starts a ``flwr-clientapp`` process), timed end to end
   (process start-up included), one run each.

Like for like by default: the in-process runner uses one thread and Ray gets ``--ray-cpus 1`` CPU, so the parties
run one after another as in process (more Ray CPUs run parties in parallel: a speed-up the in-process runner gets
from batching instead).

Reported per method: both times, the ratio warm Flower / warm in-process, the ratio cold / cold, and whether the
two releases agree (epsilon equal; weights equal or their largest difference). Ratios are measured in one session
under the same load; absolute seconds on a shared machine are not comparable across sessions (the load average is
recorded).

With ``--digits-rounds T`` instead: where a T-round ``dpaudit flower simulate`` run (the digits simulation, 20
clients, 5 sampled) spends its time, at each simulation-grid polling interval of ``--pull-intervals`` (Flower's
default 0.1 s, dpaudit's :data:`~dpaudit.auditing.flower_run.GRID_PULL_INTERVAL`): the wall time from the call to the
first round's global model (Ray and Flower start-up), the rounds (first to last global model: per round), and the
rest (recording, accounting, shutdown), alternating the settings ``--repeats`` times in one session.

Usage: python bench/bench_flower_engine.py [--methods privatekt,fedkt] [--rounds 10] [--parties 3]
       [--ray-cpus 1] [--deployment-methods fedkt,fredy] [--out runs/bench/flower_engine.json]
       python bench/bench_flower_engine.py --digits-rounds 30 [--pull-intervals 0.1,0.01] [--repeats 2]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from dpaudit._io import write_json  # noqa: E402


def settings(name: str, parties: int, rounds: int) -> dict:
    if name == "privatekt":
        return {"data": {"num_clients": parties}, "model": {"hidden": [32]},
                "method": {"rounds": rounds, "local_epochs": 1, "client_fraction": 0.67}}
    if name == "proxyfl":
        return {"data": {"num_clients": parties, "samples_per_client": 60}, "model": {"hidden": [32]},
                "method": {"rounds": rounds, "batch_size": 16}}
    if name == "fedkt":
        return {"method": {"level": "L2", "parties": parties, "partitions": 2, "teachers": 3, "partition": "iid",
                           "baselines": [], "teacher_model_kwargs": {"hidden": [32]}}}
    if name == "fredy":
        return {"method": {"teachers": parties, "rounds": max(2, rounds // 5), "model_kwargs": {"hidden": [32]},
                           "nonprivate_baseline": False}}
    raise SystemExit(f"unknown method {name}")


def compare(a: Path, b: Path) -> dict:
    import json

    from safetensors.numpy import load_file

    wa, wb = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    ma, mb = json.loads((a / "release.json").read_text()), json.loads((b / "release.json").read_text())
    return {"weights_equal": all(np.array_equal(wa[k], wb[k]) for k in wa),
            "weights_max_abs_diff": max(float(np.abs(wa[k] - wb[k]).max()) for k in wa),
            "ledger_equal": ma["ledger"] == mb["ledger"], "statement_equal": ma["statement"] == mb["statement"]}


def digits_rounds(rounds: int, intervals: list[float], repeats: int, seed: int, out: str) -> None:
    """The ``--digits-rounds`` mode (module docstring)."""
    import dpaudit.auditing.flower_run as fr

    tmp = Path(tempfile.mkdtemp(prefix="bench_flower_digits_"))
    rows: dict[str, list[dict]] = {}
    for rep in range(repeats):
        for iv in intervals:
            stamps: dict[int, float] = {}
            fr.GRID_PULL_INTERVAL = iv
            t0 = time.perf_counter()
            fr.run_digits_simulation(tmp / f"run_{iv}_{rep}", rounds=rounds, seed=seed, overwrite=True,
                                     observe=lambda t, _a: stamps.setdefault(t, time.perf_counter()))
            wall = time.perf_counter() - t0
            start, first, last = stamps[0] - t0, stamps[0], stamps[max(stamps)]
            row = {"wall_s": wall, "startup_s": start, "rounds_s": last - first,
                   "per_round_s": (last - first) / max(1, max(stamps)), "rest_s": wall - (last - t0)}
            rows.setdefault(str(iv), []).append(row)
            print(f"pull interval {iv:g} s (repeat {rep}): wall {wall:.2f} s = start-up {start:.2f} + {rounds} rounds "
                  f"{row['rounds_s']:.2f} ({row['per_round_s'] * 1000:.0f} ms/round) + rest {row['rest_s']:.2f}",
                  flush=True)
    write_json(Path(out), {"date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), "machine": platform.platform(),
                           "cpus": os.cpu_count(), "loadavg": list(os.getloadavg()), "rounds": rounds, "seed": seed,
                           "pull_intervals": rows})
    print(f"written to {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--methods", default="privatekt,fedkt,fredy,proxyfl")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--parties", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ray-cpus", type=int, default=1)
    ap.add_argument("--deployment-methods", default="", help="comma-separated; empty: no deployment arm")
    ap.add_argument("--out", default="runs/bench/flower_engine.json")
    ap.add_argument("--digits-rounds", type=int, default=0, help="time a digits simulation of this many rounds instead")
    ap.add_argument("--pull-intervals", default="0.1,0.01")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    if args.digits_rounds:
        digits_rounds(args.digits_rounds, [float(v) for v in args.pull_intervals.split(",") if v], args.repeats,
                      args.seed, args.out)
        return
    os.environ.setdefault("DPAUDIT_THREADS", "1")
    from dpaudit.threads import apply_threads

    apply_threads(1)
    from dpaudit.training.flower import FlowerJob, run_methods
    from dpaudit.training.methods import run_method

    names = [n for n in args.methods.split(",") if n]
    tmp = Path(tempfile.mkdtemp(prefix="bench_flower_"))
    rows = {}
    inproc, inproc_cold = {}, {}
    for phase in ("cold", "warm"):
        for n in names:
            r = run_method(n, dataset="digits", out=tmp / f"{n}_in_{phase}", seed=args.seed, progress=False,
                           params=settings(n, args.parties, args.rounds))
            (inproc if phase == "warm" else inproc_cold)[n] = r
            print(f"{n}: in-process ({phase}) {r.seconds:.2f} s", flush=True)
    jobs = [FlowerJob(n, tmp / f"{n}_fl_{phase}", args.seed, params=settings(n, args.parties, args.rounds),
                      dataset="digits", progress=False) for phase in ("cold", "warm") for n in names]
    t0 = time.perf_counter()
    res = run_methods(jobs, num_cpus=args.ray_cpus)
    total = time.perf_counter() - t0
    by = {(j.name, str(j.out).rsplit("_", 1)[-1]): r for j, r in zip(jobs, res)}
    for n in names:
        cold, warm = by[(n, "cold")], by[(n, "warm")]
        rows[n] = {"inprocess_cold_s": inproc_cold[n].seconds, "inprocess_warm_s": inproc[n].seconds,
                   "flower_cold_s": cold.seconds, "flower_warm_s": warm.seconds,
                   "ratio_warm": warm.seconds / inproc[n].seconds, "ratio_cold": cold.seconds / inproc_cold[n].seconds,
                   "epsilon_equal": warm.epsilon == inproc[n].epsilon,
                   **compare(tmp / f"{n}_in_warm", tmp / f"{n}_fl_warm")}
        print(f"{n}: flower cold {cold.seconds:.2f} s, warm {warm.seconds:.2f} s; ratio warm/in-process "
              f"{rows[n]['ratio_warm']:.1f}x (cold {rows[n]['ratio_cold']:.1f}x); epsilon equal {rows[n]['epsilon_equal']}, "
              f"weights equal {rows[n]['weights_equal']} (max diff {rows[n]['weights_max_abs_diff']:.2g})", flush=True)
    for n in [m for m in args.deployment_methods.split(",") if m]:
        job = FlowerJob(n, tmp / f"{n}_dep", args.seed, params=settings(n, args.parties, args.rounds),
                        dataset="digits", progress=False)
        t1 = time.perf_counter()
        run_methods([job], engine="deployment")
        wall = time.perf_counter() - t1
        row = rows.setdefault(n, {})
        row.update({"deployment_wall_s": wall, "ratio_deployment_wall": wall / inproc[n].seconds,
                    **{f"deployment_{k}": v for k, v in compare(tmp / f"{n}_in_warm", tmp / f"{n}_dep").items()}})
        print(f"{n}: local deployment {wall:.1f} s end to end ({row['ratio_deployment_wall']:.0f}x the warm in-process "
              f"run); weights equal {row['deployment_weights_equal']}", flush=True)
    runs = sum(r.seconds for r in res)
    startup = total - runs
    print(f"simulation wall {total:.1f} s, of which Ray/Flower start-up and shutdown {startup:.1f} s", flush=True)
    out = {"date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), "machine": platform.platform(),
           "cpus": os.cpu_count(), "loadavg": list(os.getloadavg()), "rounds": args.rounds, "parties": args.parties, "ray_cpus": args.ray_cpus,
           "seed": args.seed, "methods": rows, "simulation_wall_s": total, "startup_and_shutdown_s": startup}
    write_json(Path(args.out), out)
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()

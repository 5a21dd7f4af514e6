"""Benchmark: certified audits of each method's whole training run (the README's table "Audits of the methods'
whole training runs").

    python bench/bench_method_runs.py            # every row (several minutes on 2 cores)
    python bench/bench_method_runs.py --quick    # the cheap rows only (FREDY at 40 trainings, PATE, ProxyFL)
    python bench/bench_method_runs.py --rows fredy-40 pate

Each row is one :func:`dpaudit.auditing.method_audit.audit_method_run` call at seed 0, confidence 0.95, on digits;
printed as a JSON line (certified bound, ideal-attack reference, the paper's claim, dpaudit's accounting, trials,
seconds), then as a Markdown table. Seconds depend on the machine's load: compare them within one run only.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# name: (method, params, label)
ROWS: dict[str, tuple[str, dict, str]] = {
    "privatekt-20": ("privatekt", {"canary_clients": 2000, "rounds": 20},
                     "PrivateKT, eps = 5 per report, K = 2, C = 10, 20 rounds"),
    "privatekt-60": ("privatekt", {"canary_clients": 2000, "rounds": 60}, "PrivateKT, same, 60 rounds"),
    "fredy-40": ("fredy", {"trials": 40}, "FREDY, T = 5, 2 FedAvg rounds, gamma = 1"),
    "fredy-400": ("fredy", {"trials": 400}, "FREDY, T = 5, 2 FedAvg rounds, gamma = 1"),
    "fredy-0.3": ("fredy", {"trials": 400, "gamma": 0.3}, "FREDY, gamma = 0.3 (the default audit)"),
    "fredy-1-round": ("fredy", {"trials": 400, "rounds": 1}, "FREDY, 1 round (no FedAvg: control)"),
    "pate": ("pate", {"trials": 400}, "PATE, 5 teachers, gamma = 1"),
    "fedkt": ("fedkt", {"trials": 400}, "FedKT-L1, 2 parties, s = 2, gamma = 1"),
    "proxyfl-wb-8": ("proxyfl", {"canary": "dirac", "canaries": 2000, "epsilon": 8.0},
                     "ProxyFL, white-box, sigma calibrated to eps = 8"),
    "proxyfl-wb-paper": ("proxyfl", {"canary": "dirac", "canaries": 2000}, "ProxyFL, white-box, the paper's sigma = 1"),
    "proxyfl-bb": ("proxyfl", {"canary": "ood", "canaries": 2000}, "ProxyFL, black-box OOD, sigma = 1"),
}
QUICK = ("fredy-40", "pate", "proxyfl-wb-8")


def run_row(name: str, seed: int = 0) -> dict:
    from dpaudit.auditing.method_audit import audit_method_run

    method, params, label = ROWS[name]
    t0 = time.perf_counter()
    r = audit_method_run(method, seed=seed, confidence=0.95, **params)
    return {"row": name, "label": label, "method": method, "params": params, "trials": r.trials,
            "certified": r.bound.epsilon, "ideal": r.bound.ideal_epsilon, "claimed": r.claimed_epsilon,
            "accounted": r.accounted_epsilon, "refutes_claim": r.refutes_claim,
            "refutes_accounting": r.refutes_accounting, "analysis": r.bound.analysis, "rule": r.bound.rule,
            "analyses": [{"analysis": e.analysis, "kind": e.kind, "epsilon": e.epsilon, "low": e.low, "high": e.high,
                          "ideal": e.ideal_epsilon, "rule": e.rule} for e in r.bound.analyses],
            "controls": [{"name": c.name, "certified": c.bound.epsilon, "ideal": c.bound.ideal_epsilon,
                          "trials": c.trials} for c in r.controls],
            "seconds": round(time.perf_counter() - t0, 1)}


def markdown(rows: list[dict]) -> str:
    num = lambda v: "–" if v is None else f"{v:.3g}"  # noqa: E731
    out = ["| setting | trials | certified eps >= (analysis) | ideal attack | paper's claim | accounted | claim | "
           "control: certified (ideal) | s |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        verdict = "none made" if r["claimed"] is None else ("refuted" if r["refutes_claim"] else "not refuted")
        ctrl = "; ".join(f"{c['name']}: {num(c['certified'])} ({num(c['ideal'])})" for c in r.get("controls", ())) or "–"
        out.append(f"| {r['label']} | {r['trials']} | {num(r['certified'])} ({r.get('analysis', 'eps')}) | "
                   f"{num(r['ideal'])} | {num(r['claimed'])} | {num(r['accounted'])} | {verdict} | {ctrl} | "
                   f"{r['seconds']} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    ap.add_argument("--rows", nargs="+", choices=sorted(ROWS), help="these rows only")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    names = args.rows or (list(QUICK) if args.quick else list(ROWS))
    rows = []
    for name in names:
        row = run_row(name, args.seed)
        print(json.dumps(row), flush=True)
        rows.append(row)
    print(markdown(rows))


if __name__ == "__main__":
    main()

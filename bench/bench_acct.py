"""Per-round cost of the privacy ledger: 100 parties x 500 rounds, each party asking for its epsilon every round.

Compares the ledger (cached summed RDP per party) with a baseline that re-accounts a party's whole history
from scratch each round (what a naive implementation does), measured in the same process on a prefix of the
rounds. Prints a small table and writes JSON (``--out``, default runs/bench/bench_acct.json).

    python bench/bench_acct.py [--parties 100] [--rounds 500] [--out PATH]
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

from dpaudit._io import write_json
from dpaudit.accountants.events import RandomizedResponse, Repeated
from dpaudit.accountants.ledger import PrivacyLedger
from dpaudit.accountants.rdp import RdpAccountant


def run(parties: int, rounds: int) -> dict:
    ev = RandomizedResponse(num_classes=10, num_samples=2, epsilon=0.2)
    led = PrivacyLedger(delta=1e-5, budget=1e9)
    t0 = time.perf_counter()
    for _ in range(rounds):
        for p in range(parties):
            name = f"c{p}"
            if not led.would_exceed(name, ev):
                led.record(name, ev)
            led.epsilon(name)
    ledger_s = time.perf_counter() - t0
    # baseline on a prefix: rebuild each party's accountant from its full history every round
    prefix = max(1, rounds // 10)
    t0 = time.perf_counter()
    for r in range(prefix):
        for p in range(parties):
            acc = RdpAccountant()
            for _ in range(r + 1):
                acc.compose(ev)
            acc.get_epsilon(1e-5)
    base_s = (time.perf_counter() - t0)
    # the prefix baseline costs ~ prefix^2/2 compositions; extrapolate to all rounds quadratically
    base_full = base_s * (rounds / prefix) ** 2
    return {"parties": parties, "rounds": rounds, "ledger_seconds": ledger_s,
            "ledger_us_per_party_round": 1e6 * ledger_s / (parties * rounds),
            "baseline_prefix_rounds": prefix, "baseline_prefix_seconds": base_s,
            "baseline_extrapolated_seconds": base_full, "speedup_vs_baseline": base_full / ledger_s,
            "final_epsilon": led.overall().epsilon}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parties", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=500)
    ap.add_argument("--out", type=Path, default=Path("runs/bench/bench_acct.json"))
    a = ap.parse_args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # edge-of-grid warnings of the baseline's accountants
        res = run(a.parties, a.rounds)
    w = max(len(k) for k in res)
    for k, v in res.items():
        print(f"{k:<{w}}  {v:.4g}" if isinstance(v, float) else f"{k:<{w}}  {v}")
    write_json(a.out, res)


if __name__ == "__main__":
    main()

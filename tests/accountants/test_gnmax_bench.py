"""The GNMax benchmark runs and every organisation gives the same data-dependent epsilon on the same orders."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_gnmax.py"


def test_bench_gnmax_smoke_and_agreement():
    spec = importlib.util.spec_from_file_location("bench_gnmax", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.REFERENCE_ORDERS.size == 298 and mod.REFERENCE_ORDERS.min() == 2.0 and abs(mod.REFERENCE_ORDERS.max() - 500.0) < 1e-9
    res = mod.run(queries=300, big=600, baseline_rows=200, release=False, repeat=1, rounds=1)
    assert res["small"]["epsilons_agree"] and res["big"]["epsilons_agree"], res
    assert res["big"]["baseline_scaled"] and res["small"]["speedup_vs_reference"] > 0

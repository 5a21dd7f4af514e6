"""The GNMax benchmark runs and both organisations give the same data-dependent epsilon."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_gnmax.py"


def test_bench_gnmax_smoke_and_agreement():
    spec = importlib.util.spec_from_file_location("bench_gnmax", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    res = mod.run(queries=300, big=0)
    assert res["epsilons_agree"], res
    assert res["speedup"] > 0

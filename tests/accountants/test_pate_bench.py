"""Smoke test of bench/bench_pate.py: small sizes, the baseline and dpaudit must give the same epsilon."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_pate.py"


def test_bench_smoke(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("bench_pate", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "pate.json"
    res = mod.main(["--queries", "2000", "--big", "3000", "--out", str(out)])
    assert res["epsilons_agree"]
    assert abs(res["baseline_epsilon"] - res["dpaudit_epsilon"]) < 1e-9 * res["baseline_epsilon"]
    data = json.loads(out.read_text())
    assert data["params"]["queries"] == 2000 and data["big_queries"] == 3000
    assert "speed-up" in capsys.readouterr().out


def test_baseline_matches_reference_value():
    # issue 3 / PATE 2017 reference analysis: 100 x [150, 60, 40, 0...], gamma 0.05, delta 1e-5 -> 2.31594
    spec = importlib.util.spec_from_file_location("bench_pate", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert abs(mod.baseline_epsilon([[150, 60, 40] + [0] * 7] * 100, 0.05, 1e-5) - 2.31594) < 1e-5


def test_script_style_baseline_matches_reference_value():
    spec = importlib.util.spec_from_file_location("bench_pate", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    import numpy as np

    votes = np.array([[150, 60, 40] + [0] * 7] * 100, dtype=float)
    assert abs(mod.script_style_epsilon(votes, 0.05, 1e-5) - 2.31594) < 1e-5

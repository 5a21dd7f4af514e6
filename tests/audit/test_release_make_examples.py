"""The two examples end to end (slow): real Opacus DP-SGD on digits -> safetensors -> `dpaudit release make` ->
`dpaudit audit` and `dpaudit check`; and the scikit-learn scores-only example -> release -> LiRA."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from dpaudit.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _example(rel: str):
    spec = importlib.util.spec_from_file_location(Path(rel).stem + "_example", ROOT / rel)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _cli(args, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in args])
    cap = capsys.readouterr()
    return exc.value.code, cap.out + cap.err


@pytest.mark.slow
def test_opacus_example_end_to_end(tmp_path, capsys):
    info = _example("examples/opacus_digits/train_opacus.py").main(tmp_path, epsilon=4.0, epochs=8)
    assert info["opacus_epsilon"] <= 4.0 + 1e-6 and info["test_accuracy"] > 0.5
    code, out = _cli(["release", "make", "--out", tmp_path / "release", "--model", tmp_path / "weights.safetensors",
                      "--factory", f"{ROOT}/examples/opacus_digits/digits_cnn.py:build", "--data", tmp_path / "data.npz",
                      "--members", tmp_path / "members.npy", "--nonmembers", tmp_path / "nonmembers.npy",
                      "--opacus", tmp_path / "opacus.json", "--claim", "epsilon=4", "--claim", "delta=1e-5",
                      "--claim", "granularity=record"], capsys)
    assert code == 0, out
    meta = json.loads((tmp_path / "release" / "release.json").read_text())
    opacus_fig = meta["statement"]["statements"][0]
    assert opacus_fig["epsilon"] == pytest.approx(info["opacus_epsilon"], rel=1e-6)   # Opacus's get_epsilon, shown
    # the headline: the smallest valid route (issue 27), the same figure the example printed
    assert meta["statement"]["headline_route"] == info["dpaudit_route"] == "pld"
    assert "route pld; the smallest valid upper bound" in out       # the console names the same route
    assert meta["statement"]["epsilon"] == pytest.approx(info["dpaudit_epsilon"]) and info["dpaudit_epsilon"] < info["opacus_epsilon"]
    code, out = _cli(["audit", tmp_path / "audit.toml", "--out", tmp_path / "audit"], capsys)
    assert code == 0, out
    report = json.loads((tmp_path / "audit" / "report.json").read_text())
    assert report["models"][0]["attacks"][0]["attack"].startswith("threshold")
    code, out = _cli(["check", tmp_path / "claims.toml"], capsys)
    assert code == 0 and "1 claim: 1 HOLDS" in out, out


@pytest.mark.slow
def test_opacus_example_shuffled_batches(tmp_path, capsys):
    # issue 26: the same training set-up with DataLoader(shuffle=True): Opacus still reports its Poisson figure,
    # dpaudit accounts the shuffled batches (valid upper bound) with Chua et al.'s lower bound beside it
    info = _example("examples/opacus_digits/train_opacus.py").main(tmp_path, epsilon=4.0, epochs=4, shuffle=True)
    assert info["sampling"] == "shuffled fixed-size batches"
    assert info["opacus_epsilon"] <= 4.0 + 1e-6 < info["dpaudit_lower_bound_epsilon"] <= info["dpaudit_epsilon"]
    code, out = _cli(["release", "make", "--out", tmp_path / "release", "--model", tmp_path / "weights.safetensors",
                      "--factory", f"{ROOT}/examples/opacus_digits/digits_cnn.py:build", "--data", tmp_path / "data.npz",
                      "--members", tmp_path / "members.npy", "--nonmembers", tmp_path / "nonmembers.npy",
                      "--opacus", tmp_path / "opacus.json", "--claim", "epsilon=4", "--claim", "delta=1e-5"], capsys)
    assert code == 0 and "shuffled fixed-size batches" in out and "opacus_epsilon_assumes_poisson" in out, out
    meta = json.loads((tmp_path / "release" / "release.json").read_text())
    assert meta["statement"]["epsilon"] == pytest.approx(info["dpaudit_epsilon"])


@pytest.mark.slow
def test_sklearn_scores_example_end_to_end(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)        # attack results go to runs/attack/<bundle>-<attack> under the cwd
    scores = _example("examples/sklearn_scores/make_scores.py").main(tmp_path, references=8)
    code, out = _cli(["release", "make", "--out", tmp_path / "release", "--scores", scores, "--claim", "epsilon=1",
                      "--claim", "delta=1e-5"], capsys)
    assert code == 0 and "attacks possible: threshold, lira" in out, out
    for attack in ("threshold", "lira"):
        code, out = _cli(["attack", tmp_path / "release", "--attack", attack, "--bootstrap", "0"], capsys)
        assert code == 0 and "estimate" in out, out
        assert (tmp_path / "runs" / "attack" / f"release-{attack}" / "attack.json").is_file()
    code, out = _cli(["attack", tmp_path / "release", "--attack", "shadow"], capsys)
    assert code == 2 and "Possible here: threshold, lira" in out

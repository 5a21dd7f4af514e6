"""``dpaudit train centrain`` with [canaries] and ``dpaudit attack --audit one-run`` on the bundle it writes."""

from __future__ import annotations

import json

import pytest

SETS = ["--set", "method.epochs=2", "--set", "method.noise_multiplier=0.3", "--set", "model.hidden=[100]"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_train_then_attack_the_released_model(tmp_path, cli, monkeypatch):
    monkeypatch.chdir(tmp_path)        # the default output folder is runs/attack/<bundle>-<audit> under the cwd
    cfg = tmp_path / "c.toml"
    cfg.write_text('[canaries]\nkind = "dirac"\ncount = 200\nseed = 1\n')
    rel = tmp_path / "rel"
    code, out, _ = cli(["train", "centrain", "--config", cfg, "--out", rel, "--quiet", *SETS])
    assert code in (0, None) and "release written" in out
    meta = json.loads((rel / "release.json").read_text())
    assert meta["canaries"]["kind"] == "dirac" and meta["canaries"]["count"] == 200
    runs = []
    for again in ([], ["--overwrite"]):    # a second run replaces the first's results only with --overwrite
        code, out, err = cli(["attack", rel, "--audit", "one-run", "--seed", "2", "--quiet", *again])
        assert code in (0, None) and err == ""
        assert "one-run canary audit of the released model (dirac" in out and "nothing retrained" in out
        runs.append(json.loads((tmp_path / "runs" / "attack" / "rel-one-run" / "canary_audit.json").read_text())["bound"])
    assert not (rel / "attack").exists()   # nothing is written into the bundle
    assert runs[0] == runs[1] and runs[0]["epsilon"] > 0 and runs[0]["kind"] == "certified"


def test_attack_without_canaries_says_it_retrains(tmp_path, cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rel = tmp_path / "rel"
    code, _, _ = cli(["train", "centrain", "--out", rel, "--quiet", *SETS])
    assert code in (0, None) and not (rel / "canaries.npz").exists()
    code, out, _ = cli(["attack", rel, "--audit", "one-run", "--canaries", "20", "--quiet"])
    assert code in (0, None) and "of the training recipe (retrained)" in out and "holds no canaries" in out


@pytest.mark.parametrize("sets,what", [
    (["--set", "canaries.kind=poison"], "'kind' parameter of [canaries]"),
    (["--set", "canaries.kind=ood", "--set", "canaries.count=1"], "'count' parameter of [canaries]"),
    (["--set", "canaries.kind=mislabeled", "--set", "canaries.count=100000"], "'count' parameter of [canaries] of centrain"),
    (["--set", "canaries.kind=dirac"], "may be 'dirac' only with DP-SGD"),
])
def test_train_errors_write_nothing(tmp_path, cli, sets, what):
    rel = tmp_path / "rel"
    args = ["train", "centrain", "--out", rel, "--quiet", "--set", "method.epochs=1", *sets]   # no DP-SGD
    code, out, err = cli(args)
    assert code == 2 and what in err and len(err.strip().splitlines()) == 1 and out == ""
    assert list(tmp_path.iterdir()) == []


def test_attack_errors_on_a_canary_bundle(tmp_path, cli):
    rel = tmp_path / "rel"
    code, _, _ = cli(["train", "centrain", "--out", rel, "--quiet", *SETS, "--set", "canaries.kind=dirac",
                      "--set", "canaries.count=20"])
    assert code in (0, None)
    for args, what in ((["--canary", "ood"], "'canary' parameter"), (["--canaries", "5"], "'canaries' parameter"),
                       (["--score", "loss"], "'score' parameter"), (["--analysis", "gdp"], "'analysis' parameter")):
        bad = tmp_path / "bad"
        code, out, err = cli(["attack", rel, "--audit", "one-run", "--out", bad, "--quiet", *args])
        assert code == 2 and what in err and len(err.strip().splitlines()) == 1 and out == ""
        assert not bad.exists()


def test_attack_analysis_and_strict_multi_run(tmp_path, cli, monkeypatch):
    """--analysis names the headline analysis (every analysis is printed side by side); a multi-run audit with fewer
    models than the ideal attack needs is refused with --strict before anything is trained (exit 2, one line)."""
    monkeypatch.chdir(tmp_path)        # the default output folder is runs/attack/<bundle>-<audit> under the cwd
    rel = tmp_path / "rel"
    code, _, _ = cli(["train", "centrain", "--out", rel, "--quiet", *SETS, "--set", "canaries.kind=dirac",
                      "--set", "canaries.count=40"])
    assert code in (0, None)
    code, out, err = cli(["attack", rel, "--audit", "one-run", "--analysis", "fdp", "--out", tmp_path / "one", "--quiet"])
    assert code in (0, None) and "analysis fdp" in out and "[headline] f-DP" in out and "[for comparison]" in out
    assert "assumes its trade-off curve is Gaussian" in out
    bad = tmp_path / "multi"
    code, out, err = cli(["attack", rel, "--audit", "multi-run", "--models", "8", "--strict", "--out", bad, "--quiet"])
    assert code == 2 and "'models' parameter of the multi-run" in err and len(err.strip().splitlines()) == 1
    assert out == "" and not bad.exists()

"""Issue 43 item 4: a Flower run of the user's own torch model released (``--factory FILE.py:build``, pinned by its
sha256 like ``release make``), attacked and checked. Record-level: the run directory is written here (the real engine
runs in test_flower_run.py)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.dirname(__file__))
from test_flower_accounting import _run  # noqa: E402
from test_flower_hostile import _main, _write_run_dir  # noqa: E402

from dpaudit.errors import DataError  # noqa: E402
from dpaudit.integrations.flower.record import MODEL_FILE  # noqa: E402

FACTORY = '''import torch


def build(hidden=16):
    """A small MLP on 8x8 digits: the user's own model."""
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, 10))
'''


def _own_run(tmp_path: Path) -> tuple[Path, Path]:
    from safetensors.torch import save_file

    factory = tmp_path / "mymodel.py"
    factory.write_text(FACTORY)
    run = _write_run_dir(tmp_path / "run", _run())
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 16), torch.nn.ReLU(), torch.nn.Linear(16, 10))
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(run / MODEL_FILE))
    return run, factory


def test_release_attack_and_check_a_flower_run_of_the_users_own_torch_model(tmp_path, capsys, monkeypatch):
    run, factory = _own_run(tmp_path)
    monkeypatch.chdir(tmp_path)
    code, out = _main(capsys, "flower", "release", str(run), "--out", "bundle", "--factory", f"{factory}:build",
                      "--factory-kwargs", '{"hidden": 16}')
    assert code == 0, out
    meta = json.loads((tmp_path / "bundle" / "release.json").read_text())
    import hashlib

    assert meta["method"] == "flower" and meta["model"]["kind"] == "torch_factory"
    assert meta["model"]["spec"]["kwargs"]["factory_sha256"] == hashlib.sha256(factory.read_bytes()).hexdigest()
    assert meta["params"]["flower"]["model"]["sha256"] == hashlib.sha256((run / MODEL_FILE).read_bytes()).hexdigest()
    assert meta["statement"]["lower_bound"] is not None
    # the attack runs the pinned factory only when the auditor names the same code
    code, out = _main(capsys, "attack", "bundle", "--attack", "threshold", "--out", "att", "--quiet")
    assert code == 2 and "factory" in out
    code, out = _main(capsys, "attack", "bundle", "--attack", "threshold", "--out", "att", "--quiet",
                      "--factory", f"{factory}:build")
    assert code == 0, out
    claims = tmp_path / "claims.toml"
    claims.write_text('[[claim]]\nname = "run"\nepsilon = 11\ndelta = 1e-5\ngranularity = "user"\nrelease = "bundle"\n'
                      f'factory = "{factory}:build"\n')
    code, out = _main(capsys, "check", str(claims), "--json", "--quiet", stdout_only=True)
    assert code == 0 and json.loads(out)["results"][0]["verdict"] == "HOLDS"


def test_a_factory_that_does_not_match_the_run_model_is_one_error(tmp_path):
    run, factory = _own_run(tmp_path)
    from dpaudit.auditing.flower_run import release_flower_run

    with pytest.raises(DataError, match="1.weight|shape|unexpected|missing"):
        release_flower_run(run, tmp_path / "b", factory=f"{factory}:build", factory_kwargs={"hidden": 8})
    assert not (tmp_path / "b").exists()
    # the built-in softmax regression does not take it either
    with pytest.raises(DataError):
        release_flower_run(run, tmp_path / "b")


def test_flower_audit_refuses_a_factory_that_builds_no_module_before_any_simulation(tmp_path, capsys):
    # issue 43 item 2: 'flower audit --factory' pins the file and builds the module before Ray starts; a factory
    # returning something else is one named error (exit 2), with no run directory written
    bad = tmp_path / "notamodel.py"
    bad.write_text("def build():\n    return 3\n")
    rc, err = _main(capsys, "flower", "audit", "--out", str(tmp_path / "audit"), "--factory", f"{bad}:build")
    assert rc == 2 and "torch.nn.Module" in err and "Traceback" not in err
    assert not (tmp_path / "audit" / "run").exists()


@pytest.mark.slow
def test_flower_canary_audit_of_the_users_own_torch_model(tmp_path, capsys):
    # issue 43 item 2: the canary audit on a real Flower simulation whose clients train the user's MLP (64-8-10,
    # 610 parameters); the canaries' directions span its flat state_dict. The certified bound lies below the
    # accounted figure, and the result names the factory by file and sha256
    import hashlib

    factory = tmp_path / "mymodel.py"
    factory.write_text(FACTORY)
    out = tmp_path / "audit"
    rc, text = _main(capsys, "flower", "audit", "--out", str(out), "--canaries", "64", "--clients", "4", "--sampled",
                     "34", "--rounds", "4", "--noise-multiplier", "0.5", "--factory", f"{factory}:build",
                     "--factory-kwargs", '{"hidden": 8}')
    assert rc == 0, text
    res = json.loads((out / "flower_canary_audit.json").read_text())
    model = res["settings"]["model"]
    assert model["sha256"] == hashlib.sha256(factory.read_bytes()).hexdigest() and model["kwargs"] == {"hidden": 8}
    assert 0 < res["bound"]["epsilon"] <= res["accounted_epsilon"]
    from safetensors.numpy import load_file

    assert sum(v.size for v in load_file(out / "run" / MODEL_FILE).values()) == 64 * 8 + 8 + 8 * 10 + 10

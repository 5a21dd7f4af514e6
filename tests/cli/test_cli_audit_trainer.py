"""``dpaudit audit-trainer``: exit codes like ``check`` (1 refuted, 0 not, 2 bad input), the findings on stdout,
trainer_audit.json through --out, the same result as ``dpaudit.audit_trainer``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import dpaudit

ROOT = Path(__file__).resolve().parents[2]
TRAINERS = ROOT / "examples" / "trainers"
RECIPE = ["--recipe", "dataset_size=1000", "--recipe", "batch_size=64", "--recipe", "noise_multiplier=1.48",
          "--recipe", "epochs=5"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_a_bug_exits_1_and_writes_the_json(cli, tmp_path):
    out = tmp_path / "audit"
    code, stdout, _ = cli(["audit-trainer", f"{TRAINERS / 'dpsgd_bug_sigma_wrong_field.py'}:train", "--claim",
                           "epsilon=2", "--claim", "delta=1e-5", *RECIPE, "--out", str(out), "--quiet"])
    assert code == 1, stdout
    assert "REFUTED" in stdout and "where the recipe says 1.48" in stdout
    data = json.loads((out / "trainer_audit.json").read_text())
    assert data["verdict"] == "REFUTED" and data["sampler"]["kind"] == "poisson" and len(data["sha256"]) == 64
    api = dpaudit.audit_trainer(f"{TRAINERS / 'dpsgd_bug_sigma_wrong_field.py'}:train",
                                claim=["epsilon=2", "delta=1e-5"],
                                recipe={"dataset_size": 1000, "batch_size": 64, "noise_multiplier": 1.48, "epochs": 5})
    assert api.refuted_by == tuple(data["refuted_by"]) and api.certified.epsilon == data["certified"]["epsilon"]
    code, _, err = cli(["audit-trainer", f"{TRAINERS / 'dpsgd_bug_sigma_wrong_field.py'}:train", "--claim",
                        "epsilon=2", "--claim", "delta=1e-5", "--out", str(out), "--quiet"])
    assert code == 2 and "already exists" in err


def test_the_correct_trainer_exits_0(cli):
    code, stdout, _ = cli(["audit-trainer", f"{TRAINERS / 'dpsgd_correct.py'}:train", "--claim", "epsilon=2",
                           "--claim", "delta=1e-5", "--json", "--quiet"])
    assert code == 0
    data = json.loads(stdout)
    assert data["verdict"] == "NOT REFUTED" and data["certified"]["kind"] == "certified"
    assert data["recorded"]["kind"] == "analytic" and "independently" in data["recorded"]["assumptions"]
    ic = data["input_canaries"]           # the gradient canaries did not refute: the input canaries ran, found nothing
    assert ic["runs"] == 20 and ic["canaries"] == 20 * ic["features"] and ic["certified"]["epsilon"] < 2.0


def test_the_normalisation_bug_is_refuted_by_the_input_canaries(cli, tmp_path):
    out = tmp_path / "norm"
    code, stdout, _ = cli(["audit-trainer", f"{TRAINERS / 'dpsgd_bug_data_dependent_normalisation.py'}:train",
                           "--claim", "epsilon=2", "--claim", "delta=1e-5", "--out", str(out), "--quiet"])
    assert code == 1, stdout
    assert "REFUTED: input canaries over 20 runs: certified one-run lower bound" in stdout
    assert "no assumption beyond the runs' independence" in stdout
    data = json.loads((out / "trainer_audit.json").read_text())
    assert data["input_canaries"]["certified"]["epsilon"] > 2.0 and data["certified"]["epsilon"] < 2.0
    assert data["input_canaries"]["certified"]["kind"] == "certified"


def test_bad_input_exits_2(cli, tmp_path):
    code, _, err = cli(["audit-trainer", "nope.py:train", "--claim", "epsilon=2", "--claim", "delta=1e-5"])
    assert code == 2 and "nope.py" in err
    code, _, err = cli(["audit-trainer", f"{TRAINERS / 'dpsgd_correct.py'}:train", "--claim", "epsilon=2"])
    assert code == 2 and "delta" in err
    code, _, err = cli(["audit-trainer", f"{TRAINERS / 'dpsgd_correct.py'}:train", "--claim", "epsilon=2",
                        "--claim", "delta=1e-5", "--recipe", "sigma=1"])
    assert code == 2 and "Unknown key 'sigma'" in err
    lazy = tmp_path / "lazy.py"
    lazy.write_text("def train(X, y, *, seed, hook):\n    return None\n")
    code, _, err = cli(["audit-trainer", f"{lazy}:train", "--claim", "epsilon=2", "--claim", "delta=1e-5", "--quiet"])
    assert code == 2 and "no optimizer step through the audit hook" in err


def test_cli_final_model_choice_and_exit_2(cli, tmp_path):
    silent = tmp_path / "silent.py"
    silent.write_text("def train(X, y, *, seed, hook=None):\n    return None\n")
    code, _, err = cli(["audit-trainer", f"{silent}:train", "--claim", "epsilon=2", "--claim", "delta=1e-5",
                        "--threat-model", "final-model", "--quiet"])
    assert code == 2 and "train_fn" in err and "Traceback" not in err
    code, _, err = cli(["audit-trainer", f"{silent}:train", "--claim", "epsilon=2", "--claim", "delta=1e-5",
                        "--threat-model", "black-box", "--quiet"])
    assert code == 2 and "--threat-model" in err

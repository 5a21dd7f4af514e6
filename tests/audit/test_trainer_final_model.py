"""The final-model threat model of the trainer audit (``--threat-model final-model``): only the model the user's
function returns is scored, over 60 independent runs at ``ci``. The normalisation bug is REFUTED through a claims
file (certified 3.55 at seed 0, with a wide margin); the correct plain-torch trainer is not (one seed here; 20 seeds
of it and of the Opacus trainer under -m slow); a bad threat model, a function that returns no model and a bad
``final_runs`` are dpaudit errors naming the parameter (exit 2 from the CLI)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpaudit.api import check
from dpaudit.auditing.trainer_audit import audit_trainer
from dpaudit.errors import DataError, ParameterError

ROOT = Path(__file__).resolve().parents[2]
TRAINERS = ROOT / "examples" / "trainers"
RECIPE = 'params = { dataset_size = 1000, batch_size = 64, noise_multiplier = 1.48, epochs = 5 }'


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _claims(tmp_path: Path, file: str, seed: int = 0) -> Path:
    p = tmp_path / f"claims_{file}_{seed}.toml"
    p.write_text(f"""
[[claim]]
name = "my-trainer"
epsilon = 2.0
delta = 1e-5
granularity = "example"
mechanism = "dpsgd"
{RECIPE}
attack = {{ kind = "trainer", train_fn = "{TRAINERS / file}:train", threat_model = "final-model", seed = {seed} }}
""")
    return p


def test_normalisation_bug_is_refuted_from_the_final_models_alone(tmp_path):
    report = check(_claims(tmp_path, "dpsgd_bug_data_dependent_normalisation.py"))
    r = report.results[0]
    assert r.verdict == "REFUTED" and report.exit_code == 1, r.message()
    assert len(r.reasons) == 1 and r.reasons[0].startswith("final-model canaries over 60 runs: certified one-run")
    assert "runs' independence" in r.reasons[0]
    d = r.empirical.details
    assert r.empirical.certified and r.empirical.epsilon_lower_bound > 3.0, r.message()
    assert d["threat_model"] == "final-model" and d["final_model_epsilon"] == r.empirical.epsilon_lower_bound
    assert d["sampler"] is None and d["trials"] == 60 * 59
    assert any("not available in the final-model threat model" in n for n in d["notes"])


def test_correct_trainer_is_not_refuted_and_the_json_says_the_threat_model(tmp_path):
    res = audit_trainer(f"{TRAINERS / 'dpsgd_correct.py'}:train", epsilon=2, delta=1e-5, threat_model="final-model",
                        seed=0, out=tmp_path / "fm")
    assert res.verdict == "NOT REFUTED" and res.certified.epsilon < 2.0 and res.exit_code == 0
    data = json.loads((tmp_path / "fm" / "trainer_audit.json").read_text())
    assert data["threat_model"] == "final-model" and data["sampler"] is None and data["noise"] is None
    fm = data["final_model"]
    assert fm["runs"] == 60 and fm["canaries"] == 60 * fm["features"] and fm["certified"]["kind"] == "certified"
    text = "\n".join(res.lines())
    assert "threat model final-model" in text and "certified: one-run theorem pooled over the runs" in text
    assert "recorded-run accounting: not available" in text


def test_bad_final_model_input_is_an_error_naming_the_parameter(tmp_path):
    fn = f"{TRAINERS / 'dpsgd_correct.py'}:train"
    with pytest.raises(ParameterError, match="threat_model"):
        audit_trainer(fn, epsilon=2, delta=1e-5, threat_model="black-box")
    with pytest.raises(ParameterError, match="final_runs"):
        audit_trainer(fn, epsilon=2, delta=1e-5, threat_model="final-model", final_runs=0)
    with pytest.raises(ParameterError, match="'canaries'.*white-box threat model only"):
        audit_trainer(fn, epsilon=2, delta=1e-5, threat_model="final-model", canaries=100)
    bad = _claims(tmp_path, "dpsgd_correct.py")
    bad.write_text(bad.read_text().replace('threat_model = "final-model"', 'threat_model = "final-model", canaries = 50'))
    with pytest.raises(ParameterError, match="'canaries'.*white-box"):
        check(bad)
    silent = tmp_path / "silent.py"
    silent.write_text("def train(X, y, *, seed, hook=None):\n    return None\n")
    with pytest.raises(DataError, match="'train_fn'.*returns the trained model"):
        audit_trainer(f"{silent}:train", epsilon=2, delta=1e-5, threat_model="final-model", final_runs=2)


@pytest.mark.slow
@pytest.mark.parametrize("file", ["dpsgd_correct.py", "opacus_correct.py"])
def test_correct_trainer_never_refuted_final_model_over_20_seeds(file):
    bounds = []
    for seed in range(20):
        res = audit_trainer(f"{TRAINERS / file}:train", epsilon=2, delta=1e-5, threat_model="final-model", seed=seed)
        assert res.verdict == "NOT REFUTED", (seed, res.lines())
        bounds.append(res.certified.epsilon)
    print(f"{file} final-model: certified bounds {min(bounds):.2f}-{max(bounds):.2f} over 20 seeds")

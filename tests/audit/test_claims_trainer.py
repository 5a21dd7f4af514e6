"""Claims files with ``attack = {kind = "trainer", ...}``: keys, values and granularity checked from the file alone
(usage errors naming the key), nothing run while parsing, relative paths from the claims file's folder."""

from __future__ import annotations

import pytest

from dpaudit.auditing.claims import parse_claims
from dpaudit.errors import ParameterError


def _doc(attack: dict, granularity: str = "example", **extra) -> dict:
    return {"claim": [{"name": "c", "epsilon": 2.0, "delta": 1e-5, "granularity": granularity, "mechanism": "dpsgd",
                       "params": {"dataset_size": 1000, "batch_size": 64, "noise_multiplier": 1.48, "epochs": 5},
                       "attack": attack, **extra}]}


def test_a_trainer_attack_is_parsed_and_its_path_taken_from_the_claims_folder(tmp_path):
    c = parse_claims(_doc({"kind": "trainer", "train_fn": "t.py:train", "budget": "thorough", "canaries": 64,
                           "seed": 3, "confidence": 0.9}), base_dir=tmp_path).claims[0]
    a = c.attack
    assert a.kind == "trainer" and a.seed == 3 and a.confidence == 0.9
    assert a.params == {"train_fn": f"{tmp_path / 't.py'}:train", "budget": "thorough", "threat_model": "white-box",
                        "records": 1000, "canaries": 64}
    assert not (tmp_path / "t.py").exists()          # nothing read or run while parsing


@pytest.mark.parametrize("attack,granularity,match", [
    ({"kind": "trainer"}, "example", "'train_fn' parameter .* is required"),
    ({"kind": "trainer", "train_fn": "t.py:train", "shadows": 3}, "example", "Unknown key 'shadows'"),
    ({"kind": "trainer", "train_fn": "t.py:train", "budget": "huge"}, "example", "budget"),
    ({"kind": "trainer", "train_fn": "t.py:train", "threat_model": "black-box"}, "example", "threat_model"),
    ({"kind": "trainer", "train_fn": "t.py:train", "threat_model": "final-model", "canaries": 500}, "example",
     "canaries"),
    ({"kind": "trainer", "train_fn": "t.py:train", "canaries": 2}, "example", "canaries"),
    ({"kind": "trainer", "train_fn": "t.py"}, "example", "train_fn"),
    ({"kind": "trainer", "train_fn": "t.py:train"}, "party", "granularity"),
])
def test_bad_trainer_attacks_are_usage_errors(tmp_path, attack, granularity, match):
    with pytest.raises(ParameterError, match=match):
        parse_claims(_doc(attack, granularity), base_dir=tmp_path)

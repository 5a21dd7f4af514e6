"""The published JSON Schemas (dpaudit/schemas/): equal to what the result types generate today, shipped with the
package, and strict enough to catch a file that does not fit (every file the tests make dpaudit write is validated by
the autouse fixture in conftest.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from dpaudit.auditing.json_schemas import SCHEMA_DIR, SCHEMA_FILES, build_schema, load_schema, main, validate_file_data
from dpaudit.errors import DataError
from dpaudit.serial import from_dict, json_schema, to_dict

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", sorted(SCHEMA_FILES))
def test_committed_schema_matches_the_types(name):
    committed = json.loads((SCHEMA_DIR / name).read_text(encoding="utf-8"))
    assert committed == build_schema(name), (
        f"dpaudit/schemas/{name} is stale: the result types changed; run python -m dpaudit.auditing.json_schemas")
    assert load_schema(name) == committed   # shipped as package data, read through importlib.resources


def test_check_mode_says_up_to_date(capsys):
    assert main(["--check"]) == 0 and "up to date" in capsys.readouterr().out


def test_pyproject_ships_the_schemas():
    assert '"schemas/*.json"' in (ROOT / "pyproject.toml").read_text()


def test_a_written_attack_report_validates_and_a_broken_one_does_not():
    from dpaudit.attacks.metrics import attack_metrics, roc_curve
    from dpaudit.attacks.bounds import epsilon_lower_bound
    from dpaudit.attacks.results import AttackReport, AttackResult
    import numpy as np

    rng = np.random.default_rng(0)
    pos, neg = rng.normal(0.3, 1, 200), rng.normal(0, 1, 200)
    res = AttackResult("threshold", attack_metrics(pos, neg), epsilon_lower_bound(pos, neg), roc_curve(pos, neg))
    data = {"release": "runs/x", **to_dict(AttackReport(res, None, {"attack": "threshold"}))}
    json.dumps(data, allow_nan=False)   # strict JSON: infinite thresholds are the string "inf"
    assert "inf" in data["attack"]["roc"]["thresholds"]
    validate_file_data("attack.json", data)
    with pytest.raises(DataError, match="attack.json does not match .* at attack/bound"):
        validate_file_data("attack.json", {**data, "attack": {**data["attack"], "bound": {"epsilon": 1.0}}})
    with pytest.raises(DataError, match="Additional properties|additional"):
        validate_file_data("attack.json", {**data, "surprise": 1})


def test_committed_example_files_of_old_schemas_still_read():
    """Reports of schema 2 (the committed ones) read through the same types (an upgrade on read)."""
    from dpaudit.report.schema import read_report

    for path in sorted((ROOT / "reports").glob("*/report.json")):
        rep = read_report(json.loads(path.read_text()), what=str(path))
        validate_file_data("report.json", to_dict(rep))   # and written again, they are schema 3


def test_numbers_and_computed_fields():
    from dpaudit.accountants import account_dpsgd
    from dpaudit.accountants.statement import AccountingResult

    r = account_dpsgd(dataset_size=60000, batch_size=150, noise_multiplier=1.3, epochs=15, delta=1e-5)
    d = to_dict(r)
    assert d["statement"] == d["statements"][d["headline"]] and d["epsilon"] == r.epsilon
    assert from_dict(AccountingResult, json.loads(json.dumps(d))) == r
    old = {**d, "headline": d["statements"][d["headline"]]}      # before: the headline statement itself
    assert from_dict(AccountingResult, old).headline == r.headline
    s = json_schema(AccountingResult)
    assert s["properties"]["epsilon"]["readOnly"] and s["additionalProperties"] is False
    assert to_dict(math.inf) == "inf" and to_dict(-math.inf) == "-inf" and to_dict(float("nan")) == "nan"


def test_a_bad_file_is_one_data_error_naming_the_field():
    from dpaudit.attacks.results import EpsilonBound

    with pytest.raises(DataError, match=r"bound.json: field num_members: .*got 'many'"):
        from_dict(EpsilonBound, {"epsilon": 1, "delta": 0, "confidence": 0.95, "threshold": 0, "fpr": 0, "fnr": 0,
                                 "fpr_high": 0, "fnr_high": 0, "selection": "split", "num_thresholds": 1,
                                 "num_members": "many", "num_nonmembers": 3}, what="bound.json")
    with pytest.raises(DataError, match="'kind' parameter of EpsilonBound must be one of"):
        from_dict(EpsilonBound, {"epsilon": 1, "delta": 0, "confidence": 0.95, "threshold": 0, "fpr": 0, "fnr": 0,
                                 "fpr_high": 0, "fnr_high": 0, "selection": "split", "num_thresholds": 1,
                                 "num_members": 3, "num_nonmembers": 3, "kind": "proof"})

"""Atomic output and JSON numbers (dpaudit._io)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from dpaudit._io import atomic_dir, json_number, parse_json_number, save_npy, save_npz, write_json


def test_json_numbers_round_trip_through_strict_json():
    values = [math.inf, -math.inf, 1.5, 3, None, np.float64(2.5), np.int64(7)]
    text = json.dumps([json_number(v) for v in values], allow_nan=False)  # strict JSON: no Infinity/NaN tokens
    back = [parse_json_number(v) for v in json.loads(text)]
    assert back == [math.inf, -math.inf, 1.5, 3, None, 2.5, 7]
    assert isinstance(back[6], int)
    assert math.isnan(parse_json_number(json.loads(json.dumps(json_number(float("nan"))))))


def test_npz_and_npy_land_complete_at_the_target(tmp_path):
    # numpy appends .npz/.npy to a path without the suffix; the atomic writer must still fill the target
    save_npz(tmp_path / "m.npz", members=np.arange(5))
    save_npy(tmp_path / "v.npy", np.ones((2, 3)))
    with np.load(tmp_path / "m.npz", allow_pickle=False) as z:
        assert z["members"].tolist() == [0, 1, 2, 3, 4]
    assert np.load(tmp_path / "v.npy", allow_pickle=False).shape == (2, 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.npz", "v.npy"]


def test_failed_write_leaves_old_file_and_no_temporaries(tmp_path):
    target = tmp_path / "r.json"
    write_json(target, {"a": 1})

    class Boom:
        def to_dict(self):
            raise RuntimeError("half-way")

    with pytest.raises(RuntimeError):
        write_json(target, {"b": Boom()})
    assert json.loads(target.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_atomic_dir_appears_whole_or_not_at_all(tmp_path):
    with pytest.raises(RuntimeError):
        with atomic_dir(tmp_path / "rel") as d:
            (d / "x").write_text("partial")
            raise RuntimeError("interrupted")
    assert list(tmp_path.iterdir()) == []
    with atomic_dir(tmp_path / "rel") as d:
        (d / "x").write_text("complete")
    assert (tmp_path / "rel" / "x").read_text() == "complete"
    with pytest.raises(FileExistsError):
        with atomic_dir(tmp_path / "rel"):
            pass


def test_atomic_outputs_get_the_mode_open_would_give(tmp_path):
    import os
    import stat

    old = os.umask(0o022)
    try:
        write_json(tmp_path / "a.json", {})
        with atomic_dir(tmp_path / "d") as d:
            (d / "x").write_text("x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.json").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "d").stat().st_mode) == 0o755


def test_one_toml_reader():
    """Every TOML file and --set value goes through dpaudit._io (tomli fallback on Python 3.10, size and depth
    limits, one error text): no other module imports tomllib."""
    from pathlib import Path

    pkg = Path(__file__).resolve().parents[1] / "dpaudit"
    users = sorted(str(p.relative_to(pkg)) for p in pkg.rglob("*.py") if "tomllib" in p.read_text(encoding="utf-8"))
    assert users == ["_io.py"]


def test_parse_toml_value():
    from dpaudit._io import parse_toml_value

    assert parse_toml_value("0.1") == 0.1 and parse_toml_value("true") is True
    assert parse_toml_value("[1, 2]") == [1, 2] and parse_toml_value("mnist") == "mnist"
    assert parse_toml_value('"x y"') == "x y"

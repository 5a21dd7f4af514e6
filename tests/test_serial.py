"""The one serialiser (dpaudit.serial): what to_dict writes, what from_dict reads back, and its hooks."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pytest

from dpaudit.errors import DataError
from dpaudit.serial import FloatArray, JsonUpgrade, JsonValue, from_dict, json_schema, to_dict


@dataclass(frozen=True, slots=True)
class Inner:
    x: float
    label: str = ""


@dataclass(frozen=True)
class Outer(JsonUpgrade):
    inner: Inner
    items: tuple[Inner, ...] = ()
    curve: FloatArray = field(default_factory=lambda: np.zeros(0))
    details: Mapping[str, JsonValue] = field(default_factory=dict)
    maybe: float | None = None

    __json_computed__ = ("total",)

    @property
    def total(self) -> float:
        return self.inner.x + sum(i.x for i in self.items)

    @classmethod
    def __json_upgrade__(cls, d: Any) -> Any:
        if isinstance(d, Mapping) and "old_inner" in d:      # a renamed field of an older file
            d = {**{k: v for k, v in d.items() if k != "old_inner"}, "inner": d["old_inner"]}
        return d

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Outer) and to_dict(self) == to_dict(other)


def test_round_trip_with_numbers_arrays_computed_and_free_form_figures():
    o = Outer(Inner(np.float64(1.5), "a"), (Inner(math.inf),), np.array([0.0, math.inf, -math.inf]),
              {"q_max": math.inf, "nested": {"n": [1, -math.inf]}, "k": np.int64(3)}, None)
    d = to_dict(o)
    text = json.dumps(d, allow_nan=False)          # strict JSON
    assert d["curve"] == [0.0, "inf", "-inf"] and d["items"] == [{"x": "inf", "label": ""}] and d["total"] == "inf"
    assert d["details"] == {"q_max": "inf", "nested": {"n": [1, "-inf"]}, "k": 3}
    back = from_dict(Outer, json.loads(text))
    assert back == o and back.details["q_max"] == math.inf and back.details["nested"]["n"][1] == -math.inf
    assert isinstance(back.items, tuple) and isinstance(back.curve, np.ndarray) and back.curve[1] == math.inf


def test_plain_values():
    assert to_dict({1: Path("a/b"), "s": {3, 1}, "t": (np.int32(2), np.bool_(True))}) == {"1": "a/b", "s": [1, 3],
                                                                                         "t": [2, True]}
    assert to_dict(float("nan")) == "nan"
    with pytest.raises(TypeError, match="cannot write a object"):
        to_dict(object())


def test_objects_with_their_own_to_dict_are_written_through_it():
    from dpaudit.accountants.events import SubsampledGaussian

    ev = SubsampledGaussian(0.01, 1.0, 10)
    assert to_dict({"event": ev})["event"] == {"type": "SubsampledGaussian", "sampling_rate": 0.01,
                                               "noise_multiplier": 1.0, "steps": 10}


def test_upgrade_hook_runs_at_any_depth_and_bad_data_names_the_field():
    data = {"old_inner": {"x": 2.0}, "items": [{"x": "1"}]}
    o = from_dict(Outer, data)
    assert o.inner == Inner(2.0) and o.total == 3.0
    with pytest.raises(DataError, match=r"outer.json: field items.0.x: .*got 'many'"):
        from_dict(Outer, {"inner": {"x": 1}, "items": [{"x": "many"}]}, what="outer.json")
    with pytest.raises(DataError, match="field curve: expected a list of numbers"):
        from_dict(Outer, {"inner": {"x": 1}, "curve": "0,1"})


def test_schema_has_every_field_and_computed_property_required_and_nothing_else():
    s = json_schema(Outer)
    assert set(s["properties"]) == {"inner", "items", "curve", "details", "maybe", "total"}
    assert s["required"] == list(s["properties"]) and s["additionalProperties"] is False
    assert s["properties"]["total"]["readOnly"] is True
    assert {"enum": ["inf", "-inf", "nan"]} in s["$defs"]["Inner"]["properties"]["x"]["anyOf"]
    assert "default" not in json.dumps(s) and "title" not in s and "description" not in s

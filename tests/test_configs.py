"""Every PATE-family config under configs/ (top-level ``method = "..."``) loads into its method's config class."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from dpaudit.training.methods import METHODS, get_method
from dpaudit.training.methods.common import load_config

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def _method_configs():
    out = []
    for p in sorted(CONFIGS.glob("*.toml")):
        m = tomllib.loads(p.read_text()).get("method")
        if isinstance(m, str):
            out.append((p, m))
    return out


def test_there_are_pate_family_configs():
    assert {m for _, m in _method_configs()} >= {"pate", "fedkt", "fredy"}


@pytest.mark.parametrize("path,method", _method_configs(), ids=lambda x: getattr(x, "name", x))
def test_config_loads(path, method):
    assert method in METHODS
    cls, run = get_method(method)
    cfg = load_config(cls, path)
    assert isinstance(cfg, cls) and callable(run)

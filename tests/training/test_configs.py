"""Every PATE-family config under configs/ (top-level ``method = "..."``) loads into its method's config class."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from dpaudit.training.methods import METHODS, get_method
from dpaudit.training.methods.common import load_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


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


def test_every_config_file_has_a_home():
    """Each file under configs/ is one of the three dialects, so some test validates it."""
    for p in sorted(CONFIGS.glob("*.toml")):
        data = tomllib.loads(p.read_text())
        fl = any(isinstance(data.get(t), dict) for t in ("data", "model", "method"))
        pate_family = isinstance(data.get("method"), str)
        audit = p.name.startswith("audit_") and "models" in data
        assert fl + pate_family + audit == 1, p.name

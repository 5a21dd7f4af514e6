"""The one direction of dependency between the layers (CONTRIBUTING.md): checked on the source, import by import."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "dpaudit"

# package -> top-level modules / dpaudit subpackages it must not import
FORBIDDEN = {
    "accountants": {"torch", "sklearn", "catboost", "opacus", "matplotlib",
                    "dpaudit.training", "dpaudit.attacks", "dpaudit.report", "dpaudit.auditing", "dpaudit.cli",
                    "dpaudit.integrations", "dpaudit.executors"},
    "integrations": {"dpaudit.training", "dpaudit.attacks", "dpaudit.report", "dpaudit.auditing", "dpaudit.cli",
                     "dpaudit.executors"},
    "training": {"dpaudit.attacks", "dpaudit.report", "dpaudit.auditing", "dpaudit.cli"},
    "attacks": {"dpaudit.training", "dpaudit.report", "dpaudit.auditing", "dpaudit.cli"},
    "report": {"dpaudit.cli", "dpaudit.auditing"},
    "auditing": {"dpaudit.cli"},
    # executors run anything and know nothing: only dpaudit.errors, dpaudit._io and dpaudit.progress
    "executors": {"torch", "sklearn", "catboost", "opacus", "matplotlib", "dpaudit.accountants",
                  "dpaudit.integrations", "dpaudit.training", "dpaudit.attacks", "dpaudit.report", "dpaudit.auditing",
                  "dpaudit.cli", "dpaudit.testing"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def _violations(package: str) -> list[str]:
    bad = []
    for path in sorted((PKG / package).rglob("*.py")):
        for mod in _imports(path):
            for forbidden in FORBIDDEN[package]:
                if mod == forbidden or mod.startswith(forbidden + "."):
                    bad.append(f"{path.relative_to(PKG.parent)} imports {mod}")
    return bad


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_layer_rule(package: str) -> None:
    assert _violations(package) == []


def test_rule_checker_catches_a_violation(tmp_path: Path) -> None:
    f = tmp_path / "x.py"
    f.write_text("import torch\nfrom dpaudit.cli import main\n")
    assert _imports(f) == {"torch", "dpaudit.cli"}

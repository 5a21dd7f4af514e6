"""Registration is explicit and one-way; no accountants module borrows another's underscore names."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "dpaudit" / "accountants"


def test_no_lazy_registry_module():
    assert not (PKG / "_register_all.py").exists()


def test_every_event_has_rdp_after_importing_one_module(tmp_path):
    code = ("from dpaudit.accountants.rdp import RdpAccountant\n"
            "from dpaudit.accountants.events import SubsampledGaussian, LaplaceNoisyMax, GaussianNoisyMax, RandomizedResponse\n"
            "acc = RdpAccountant()\n"
            "for e in (SubsampledGaussian(0.1, 1.0, 10), LaplaceNoisyMax(0.1), GaussianNoisyMax(10.0), RandomizedResponse(3, 1, 1.0)):\n"
            "    acc.compose(e)\n"
            "print('ok')\n")
    root = PKG.parents[1]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                         env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_no_underscore_imports_between_accountant_modules():
    bad = []
    for path in sorted(PKG.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dpaudit"):
                bad += [f"{path.name}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    assert bad == []


def test_no_function_local_imports_of_dpaudit_in_accountants():
    bad = []
    for path in sorted(PKG.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, (ast.Import, ast.ImportFrom)):
                        bad.append(f"{path.name}:{node.lineno}")
    assert bad == []

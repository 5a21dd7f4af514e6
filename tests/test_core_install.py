"""The documented core install (``pip install ./dpaudit``, no extras, no test tools: docs/tutorials/ci-claims.md)
runs a CI job's commands: a subprocess in which the extras' and the test tools' packages cannot be imported runs
``dpaudit --help`` and ``dpaudit check`` (which accounts each claim's mechanism)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# what pyproject.toml's extras (flower, lm, ray, docs, test) add beyond the core dependencies
NOT_IN_CORE = ("flwr", "transformers", "tokenizers", "ray", "mkdocs", "mkdocstrings", "pytest", "hypothesis",
               "jsonschema", "mpmath", "mypy", "xdist")

_DRIVER = r"""
import sys, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Block())
for m in list(sys.modules):
    if m.split(".")[0] in {blocked!r}:
        del sys.modules[m]
from dpaudit.cli import main
main(sys.argv[1:])
"""


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _DRIVER.format(blocked=NOT_IN_CORE), *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def test_core_install_runs_a_ci_jobs_commands():
    proc = _run("--help")
    assert proc.returncode == 0 and "check" in proc.stdout, proc.stderr
    proc = _run("check", "examples/claims/holds.toml", "--quiet")
    assert proc.returncode == 0 and "HOLDS" in proc.stdout, proc.stderr[-2000:]

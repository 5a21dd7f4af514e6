"""The accounting layer type-checks (mypy, configured in pyproject's [tool.mypy])."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_accountants_typecheck_clean():
    api = pytest.importorskip("mypy.api")
    out, err, status = api.run(["--config-file", str(ROOT / "pyproject.toml"),
                                str(ROOT / "dpaudit" / "accountants")])
    assert status == 0, out + err
    assert "Success" in out


def test_py_typed_marker_is_shipped():
    assert (ROOT / "dpaudit" / "py.typed").is_file()
    assert "py.typed" in (ROOT / "pyproject.toml").read_text(encoding="utf-8")

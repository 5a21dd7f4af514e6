"""The accounting layer type-checks (mypy, configured in pyproject's [tool.mypy])."""

from __future__ import annotations

import getpass
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_accountants_typecheck_clean():
    api = pytest.importorskip("mypy.api")
    # mypy's cache in the temporary folder, not the checkout (a later run finds it warm; mypy replaces its files
    # atomically)
    cache = Path(tempfile.gettempdir()) / f"dpaudit-mypy-cache-{getpass.getuser()}"
    out, err, status = api.run(["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(cache),
                                str(ROOT / "dpaudit" / "accountants")])
    assert status == 0, out + err
    assert "Success" in out


def test_py_typed_marker_is_shipped():
    assert (ROOT / "dpaudit" / "py.typed").is_file()
    assert "py.typed" in (ROOT / "pyproject.toml").read_text(encoding="utf-8")

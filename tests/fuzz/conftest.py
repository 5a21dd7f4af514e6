"""Fixtures of the fuzz suite and the count of generated inputs printed at the end of the run."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from fuzz_helpers import COUNTS


def pytest_terminal_summary(terminalreporter):
    if COUNTS:
        total = sum(COUNTS.values())
        parts = ", ".join(f"{k} {v}" for k, v in sorted(COUNTS.items()))
        terminalreporter.write_line(f"fuzz: {total} generated inputs ({parts})")


@pytest.fixture(scope="session")
def tiny_bundle(forest_release) -> Path:
    """A valid release bundle (a 3-tree forest on digits) that the bundle fuzzer copies and mutates."""
    out = forest_release(members=150, trees=3, votes=np.ones((3, 10)))
    os.chmod(out, 0o755)
    return out

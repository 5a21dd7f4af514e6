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
def tiny_bundle(tmp_path_factory) -> Path:
    """A valid release bundle (a 3-tree forest on digits) that the bundle fuzzer copies and mutates."""
    from dpaudit.training.data import load_dataset
    from dpaudit.training.ensemble import fit_classifier
    from dpaudit.training.models import ModelSpec
    from dpaudit.training.release import write_release

    ds = load_dataset("digits", seed=0)
    perm = np.random.default_rng(0).permutation(len(ds))
    mem, non, att = perm[:150], perm[150:300], perm[300:600]
    spec = ModelSpec("random_forest", ds.input_shape, ds.num_classes, {"n_estimators": 3})
    clf = fit_classifier(spec, ds.X[mem], ds.y[mem], None, 0)
    out = tmp_path_factory.mktemp("fuzzrel") / "bundle"
    write_release(out, method="baseline", dataset={"name": "digits", "seed": 0, "num_samples": None}, params={},
                  seed=0, utility={"test_accuracy": 0.5}, classifier=clf, train_config=None, ledger=None, statement=None,
                  claim={"epsilon": 1.0, "delta": 1e-5, "granularity": "example", "text": "t"},
                  membership={"members": mem, "nonmembers": non, "attacker": att}, votes=np.ones((3, 10)))
    os.chmod(out, 0o755)
    return out

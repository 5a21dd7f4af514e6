"""Fixtures of the fuzz suite and the count of generated inputs printed at the end of the run."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from fuzz_helpers import COUNTS, OUTCOMES


def pytest_terminal_summary(terminalreporter):
    if COUNTS:
        total = sum(COUNTS.values())
        parts = ", ".join(f"{k} {v}" for k, v in sorted(COUNTS.items()))
        terminalreporter.write_line(f"fuzz: {total} generated inputs ({parts})")
    if OUTCOMES:
        codes = {c: sum(o[c] for o in OUTCOMES.values()) for c in (0, 1, 2)}
        per = "; ".join(f"{k}: " + ", ".join(f"exit {c} x{n}" for c, n in sorted(o.items()))
                        for k, o in sorted(OUTCOMES.items()))
        terminalreporter.write_line(f"fuzz outcomes: {codes[0]} answered (exit 0), {codes[1]} claims failed (exit 1), "
                                    f"{codes[2]} refused in one line (exit 2), no traceback ({per})")


@pytest.fixture(scope="session")
def tiny_bundle(forest_release) -> Path:
    """A valid release bundle (a 3-tree forest on digits) that the bundle fuzzer copies and mutates."""
    out = forest_release(members=150, trees=3, votes=np.ones((3, 10)))
    os.chmod(out, 0o755)
    return out


@pytest.fixture(scope="session")
def outside_artefacts(tmp_path_factory) -> dict:
    """Artefacts of a model trained outside dpaudit (digits, a scikit-learn model in .skops, index files, a scores
    file) and the two bundles `release make` builds from them: ``sk`` (model + bundled data + an MLP recipe) and
    ``sc`` (scores only, with reference models)."""
    import skops.io as sio
    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression

    from dpaudit.attacks.scores import synthetic_scores
    from dpaudit.auditing.release_make import make_release

    root = tmp_path_factory.mktemp("outside")
    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float32)
    perm = np.random.default_rng(0).permutation(len(y))
    mem, non = perm[:100], perm[100:200]
    f = {"data": root / "data.npz", "members": root / "members.npy", "nonmembers": root / "nonmembers.npy",
         "model": root / "model.skops", "scores": root / "scores.npz", "X": X, "y": y}
    np.savez(f["data"], X=X, y=y)
    np.save(f["members"], mem)
    np.save(f["nonmembers"], non)
    sio.dump(LogisticRegression(max_iter=50).fit(X[mem], y[mem]), f["model"])
    arrays = synthetic_scores(30, num_classes=4, num_references=2, kind="probabilities", leak=2.0, seed=0)
    np.savez(f["scores"], **{k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in arrays.items()})
    claim = ["epsilon=8", "delta=1e-5"]
    events = root / "events.json"       # accounted: so that claims on the bundle can hold or fail
    events.write_text('{"type": "SelfComposedDpEvent", "count": 100, "event": {"type": "PoissonSampledDpEvent", '
                      '"sampling_probability": 0.01, "event": {"type": "GaussianDpEvent", "noise_multiplier": 1.0}}}')
    f["sk"] = make_release(root / "sk", claim=claim, model=f["model"], data=f["data"], members=f["members"],
                           nonmembers=f["nonmembers"], recipe_model="mlp", dp_events=events)
    f["sc"] = make_release(root / "sc", claim=claim, scores=f["scores"])
    for b in (f["sk"], f["sc"]):
        os.chmod(b, 0o755)
    return f


@pytest.fixture(scope="session")
def canary_bundles(tmp_path_factory) -> dict:
    """dpaudit's own releases with planted canaries: CenTrain by DP-SGD with 20 Dirac canaries, and without DP with
    20 out-of-distribution input canaries (each trains in about a second)."""
    import torch

    from dpaudit.training.methods import run_method

    root = tmp_path_factory.mktemp("canaries")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out = {}
        for name, params in (("dirac", {"method.epochs": 1, "method.noise_multiplier": 1.0, "model.hidden": [8],
                                        "canaries.kind": "dirac", "canaries.count": 20}),
                             ("ood", {"method.epochs": 1, "model.hidden": [8], "canaries.kind": "ood",
                                      "canaries.count": 20})):
            out[name] = run_method("centrain", out=root / name, dataset="digits", seed=0, progress=False,
                                   params=params).release
            os.chmod(out[name], 0o755)
    finally:
        torch.set_num_threads(before)
    return out

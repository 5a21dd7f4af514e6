"""Outside artefacts for the `dpaudit release make` tests: a digits subset, index files, a scikit-learn model, a torch
factory module with safetensors weights, a training function module, a scores file (all written under a tmp dir)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

FACTORY_SRC = '''
import torch

def build(hidden=16):
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, 10))
'''

TRAIN_SRC = '''
from sklearn.linear_model import LogisticRegression

def train(X, y, seed):
    return LogisticRegression(max_iter=200, random_state=seed).fit(X.reshape(len(X), -1), y)
'''


def digits_files(root: Path, n_members: int = 150) -> dict[str, Path]:
    """data.npz (X, y of sklearn digits), members.npy / nonmembers.npy (indices) and model.skops (trained on members)."""
    import skops.io as sio
    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression

    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float32)
    perm = np.random.default_rng(0).permutation(len(y))
    mem, non = perm[:n_members], perm[n_members:2 * n_members]
    files = {"data": root / "data.npz", "members": root / "members.npy", "nonmembers": root / "nonmembers.npy",
             "skops": root / "model.skops"}
    np.savez(files["data"], X=X, y=y)
    np.save(files["members"], mem)
    np.save(files["nonmembers"], non)
    sio.dump(LogisticRegression(max_iter=100).fit(X[mem], y[mem]), files["skops"])
    return files


def torch_files(root: Path, hidden: int = 16) -> dict[str, Path]:
    """byomnet.py (factory build(hidden)) and weights.safetensors of build(hidden) (random init, seed 0)."""
    import importlib
    import sys

    import torch
    from safetensors.torch import save_file

    (root / "byomnet.py").write_text(FACTORY_SRC)
    (root / "byomtrain.py").write_text(TRAIN_SRC)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    sys.modules.pop("byomnet", None)
    net = importlib.import_module("byomnet").build(hidden)
    torch.manual_seed(0)
    for p in net.parameters():
        torch.nn.init.normal_(p, std=0.1)
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(root / "weights.safetensors"))
    return {"factory_module": root / "byomnet.py", "weights": root / "weights.safetensors"}


def scores_file(root: Path, n: int = 200, C: int = 4, K: int = 8, *, references: bool = True, seed: int = 0) -> Path:
    """scores.npz in TF Privacy AttackInputData names: probs_train/test, labels_train/test (+ reference models)."""
    from scipy.special import softmax

    rng = np.random.default_rng(seed)
    y = rng.integers(0, C, 2 * n)
    member = np.r_[np.ones(n, bool), np.zeros(n, bool)]
    inc = rng.random((2 * n, K)) < 0.5

    def probs(in_mask):
        z = rng.normal(0, 1, (2 * n, C))
        z[np.arange(2 * n), y] += 1.0 + 2.0 * in_mask
        return softmax(z, axis=1)

    p = probs(member)
    arrays = {"probs_train": p[:n], "probs_test": p[n:], "labels_train": y[:n], "labels_test": y[n:]}
    if references:
        ref = np.stack([probs(inc[:, k]) for k in range(K)], axis=1)
        arrays.update(reference_probs_train=ref[:n], reference_probs_test=ref[n:], reference_in_train=inc[:n],
                      reference_in_test=inc[n:])
    path = root / "scores.npz"
    np.savez(path, **arrays)
    return path

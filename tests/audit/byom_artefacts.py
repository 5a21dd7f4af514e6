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
    from dpaudit.attacks.scores import synthetic_scores

    arrays = synthetic_scores(n, num_classes=C, num_references=K if references else 0, kind="probabilities",
                              leak=2.0, seed=seed)
    path = root / "scores.npz"
    np.savez(path, **{k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in arrays.items()})
    return path

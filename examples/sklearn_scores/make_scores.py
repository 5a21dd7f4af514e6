"""A scores-only audit made with scikit-learn: only the model's outputs leave the training environment.

The "target" is an MLP trained on half of scikit-learn's breast-cancer data; the auditor receives its predicted
probabilities on the members (its training records) and on non-members, plus the probabilities of 16 reference
models trained the same way on random halves of all records, with the inclusion masks -- the arrays of TensorFlow
Privacy's ``AttackInputData`` (``probs_train`` / ``probs_test`` / ``labels_*``) and LiRA's reference models.

    python examples/sklearn_scores/make_scores.py --out runs/sklearn_scores
    dpaudit release make --out runs/sklearn_scores/release --scores runs/sklearn_scores/scores.npz \\
        --claim epsilon=1 --claim delta=1e-5 --claim granularity=record
    dpaudit attack runs/sklearn_scores/release --attack lira     # online LiRA on the reference models' scores
    dpaudit attack runs/sklearn_scores/release --attack threshold
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def _model(seed: int):
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), MLPClassifier((64,), alpha=1e-4, max_iter=400, random_state=seed))


def main(out: str | Path, *, references: int = 16, seed: int = 0) -> Path:
    import warnings

    from sklearn.datasets import load_breast_cancer
    from sklearn.exceptions import ConvergenceWarning

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    X, y = load_breast_cancer(return_X_y=True)
    rng = np.random.default_rng(seed)
    n = len(y)
    member = np.zeros(n, bool)
    member[rng.permutation(n)[: n // 2]] = True
    inc = rng.random((n, references)) < 0.5                       # record i in reference model k
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        target = _model(seed).fit(X[member], y[member])
        ref = np.stack([_model(seed + 1 + k).fit(X[inc[:, k]], y[inc[:, k]]).predict_proba(X)
                        for k in range(references)], axis=1)       # (n, K, 2)
    p = target.predict_proba(X)
    path = out / "scores.npz"
    np.savez(path, probs_train=p[member], probs_test=p[~member], labels_train=y[member], labels_test=y[~member],
             reference_probs_train=ref[member], reference_probs_test=ref[~member],
             reference_in_train=inc[member], reference_in_test=inc[~member])
    print(f"wrote {path}: {member.sum()} members, {(~member).sum()} non-members, {references} reference models; "
          f"target accuracy on non-members {np.mean(p[~member].argmax(1) == y[~member]):.3f}")
    return path


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/sklearn_scores")
    ap.add_argument("--references", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    main(a.out, references=a.references, seed=a.seed)

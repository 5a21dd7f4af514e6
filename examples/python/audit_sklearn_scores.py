"""Audit a scikit-learn model from its scores alone: a release bundle from the model's predicted probabilities on
its training records and on held-out records, then a loss-threshold membership attack on it.

One model's records are coupled through the model, so its empirical epsilon is an *estimate* (the median over
split seeds, with its range), never a certified bound.

    python examples/python/audit_sklearn_scores.py [OUT]      # default OUT: runs/python_sklearn_scores
"""

import sys
import warnings
from pathlib import Path

import numpy as np
from sklearn.datasets import load_breast_cancer
from sklearn.exceptions import ConvergenceWarning
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import dpaudit


def main(out: str | Path = "runs/python_sklearn_scores") -> dpaudit.AttackReport:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    X, y = load_breast_cancer(return_X_y=True)
    member = np.random.default_rng(0).random(len(y)) < 0.5           # the records the model trains on
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = make_pipeline(StandardScaler(), MLPClassifier((64,), max_iter=400, random_state=0))
        model.fit(X[member], y[member])
    p = model.predict_proba(X)
    # TensorFlow Privacy's AttackInputData names: "train" = members, "test" = non-members
    np.savez(out / "scores.npz", probs_train=p[member], probs_test=p[~member],
             labels_train=y[member], labels_test=y[~member])

    release = dpaudit.release.make(out / "release", scores=out / "scores.npz", overwrite=True,
                                   claim=["epsilon=1", "delta=1e-5", "granularity=record"])
    report = dpaudit.attack(release, dpaudit.Threshold(), out=out / "attack")   # writes attack.json and roc.png
    b = report.attack.bound
    print(f"{report.attack.name}: AUC {report.attack.metrics.auc:.3f}; empirical epsilon ≈ {b.epsilon:.2f} "
          f"[{b.split_low:.2f}, {b.split_high:.2f}] ({b.kind}) against the claimed 1")
    return report


if __name__ == "__main__":
    main(*sys.argv[1:])

"""Leaky target recipes shared by the attack tests: random forests that expose probabilities over all classes."""

from __future__ import annotations

import numpy as np
from sklearn.ensemble import RandomForestClassifier


class Forest:
    """A random forest whose ``predict_proba`` covers all ``C`` classes (classes missing from ``y`` get 0)."""

    def __init__(self, X, y, seed, C=10, n_estimators=20):
        self.clf = RandomForestClassifier(n_estimators=n_estimators, random_state=seed, n_jobs=1).fit(X, y)
        self.C = C

    def predict_proba(self, X):
        out = np.zeros((len(X), self.C))
        out[:, self.clf.classes_] = self.clf.predict_proba(X)
        return out


def forest_fn(X, y, seed):
    """``TrainFn`` of the default forest."""
    return Forest(X, y, seed)

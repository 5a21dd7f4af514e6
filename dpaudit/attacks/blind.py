"""The blind baseline: a membership "attack" that never queries the model.

It learns membership from the records alone — raw features (flattened) and the one-hot label — with the attack
classifier, cross-fitted over the evaluation set: the records are split into ``folds`` stratified folds, and each
fold is scored by a classifier trained on the other folds' ground-truth membership. If the release's members and
non-members come from the same distribution, its AUC is about 0.5; if it is clearly above 0.5, the membership split
itself is distinguishable, and any attack's "leakage" must be read against it (Das, Zhang, Tramer 2024, "Blind
baselines beat membership inference attacks for foundation models"). It is a diagnostic of the evaluation set,
computed by the auditor who knows the split — not an attack a real adversary could run.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any

import numpy as np

from dpaudit.attacks.shadow import make_classifier
from dpaudit.errors import DataError, check_int

__all__ = ["blind_scores"]

# The blind baseline depends on the evaluation records only, not on the model: an audit asks for it once per
# attack on every release, and releases of one method run (a sweep of noise levels) share their membership split.
# Results of named classifiers (deterministic given the seed) are kept here, keyed by a hash of every input.
_MEMO: "OrderedDict[str, tuple[np.ndarray, np.ndarray]]" = OrderedDict()
_MEMO_SIZE = 16


def _memo_key(arrays: tuple, *rest: Any) -> str:
    h = hashlib.sha256(repr(rest).encode())
    for a in arrays:
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def blind_scores(X_members, y_members, X_nonmembers, y_nonmembers, *, num_classes: int | None = None,
                 classifier: Any = "catboost", folds: int = 2, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Out-of-fold P[member] from record features only: (member scores, non-member scores)."""
    owner = "blind_scores"
    k = check_int(folds, "folds", owner, low=2)
    seed = check_int(seed, "seed", owner, low=0)
    Xm, Xn = np.asarray(X_members, dtype=np.float64), np.asarray(X_nonmembers, dtype=np.float64)
    ym, yn = np.asarray(y_members, dtype=np.int64), np.asarray(y_nonmembers, dtype=np.int64)
    if len(Xm) < k or len(Xn) < k:
        raise DataError(f"{owner} needs at least {k} members and {k} non-members; got {len(Xm)} and {len(Xn)}.")
    y = np.r_[ym, yn]
    C = int(y.max()) + 1 if num_classes is None else check_int(num_classes, "num_classes", owner, low=1)
    F = np.concatenate([np.concatenate([Xm.reshape(len(Xm), -1), Xn.reshape(len(Xn), -1)]), np.eye(C)[y]], axis=1)
    member = np.r_[np.ones(len(Xm), dtype=int), np.zeros(len(Xn), dtype=int)]
    key = _memo_key((Xm, ym, Xn, yn), C, classifier, k, seed) if isinstance(classifier, str) else None
    if key is not None and key in _MEMO:
        _MEMO.move_to_end(key)
        return tuple(a.copy() for a in _MEMO[key])  # type: ignore[return-value]
    from sklearn.model_selection import StratifiedKFold
    out = np.empty(len(member))
    for i, (tr, te) in enumerate(StratifiedKFold(k, shuffle=True, random_state=seed).split(F, member)):
        clf = make_classifier(classifier, seed=seed + i)
        clf.fit(F[tr], member[tr])
        out[te] = clf.predict_proba(F[te])[:, 1]
    result = (out[: len(Xm)], out[len(Xm):])
    if key is not None:
        _MEMO[key] = tuple(a.copy() for a in result)  # type: ignore[assignment]
        while len(_MEMO) > _MEMO_SIZE:
            _MEMO.popitem(last=False)
    return result

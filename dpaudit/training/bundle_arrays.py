"""The arrays of a release bundle, checked the same way when they are written and when they are read: an outside
model's records (``data.npz``), a scores-only bundle's ``scores.npz`` and the attacker's view of planted canaries
(``canaries.npz``). Used by :mod:`dpaudit.training.release_meta` (with the checks of ``release.json``),
``dpaudit release make`` and the bundle loaders of :mod:`dpaudit.training.external`. Every failure is one
:class:`~dpaudit.errors.DataError` naming ``FILE[array]``, what it must be and what it is.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from dpaudit.errors import DataError, format_value

__all__ = ["MAX_RECORDS", "MAX_CLASSES", "MAX_INPUT_SIZE", "SCORE_ARRAYS", "check_records", "check_bundle_scores",
           "check_canary_view", "check_votes"]

#: Largest data set a release may point into, and largest class count / input size of its model spec:
#: beyond these a bundle would make dpaudit allocate without bound, so it is refused as malformed.
MAX_RECORDS = 100_000_000
MAX_CLASSES = 100_000
MAX_INPUT_SIZE = 100_000_000
#: The arrays of a scores-only bundle's ``scores.npz`` (members first, then non-members).
SCORE_ARRAYS = ("member_scores", "nonmember_scores", "member_labels", "nonmember_labels", "reference_scores",
                "reference_in", "population_scores", "population_labels", "population_reference_scores",
                "population_reference_in")



def _real(a: Any, where: str, field: str, kinds: str = "biuf") -> np.ndarray:
    a = np.asarray(a) if not isinstance(a, np.ndarray) else a
    if a.dtype.kind == "c":
        raise DataError(f"{where}[{field}]: holds complex numbers (dtype {a.dtype}); it must be real "
                        "(dpaudit does not drop imaginary parts silently).")
    if a.dtype.kind not in kinds or a.dtype.hasobject:
        names = {"b": "booleans", "i": "integers", "u": "integers", "f": "floats"}
        want = " or ".join(dict.fromkeys(names[k] for k in kinds))
        raise DataError(f"{where}[{field}]: must hold {want}. Got dtype {a.dtype} instead.")
    return a


def _finite(a: np.ndarray, where: str, field: str) -> None:
    if a.dtype.kind == "f" and a.size and not np.isfinite(a).all():
        bad = ~np.isfinite(a)
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise DataError(f"{where}[{field}]: holds NaN or infinite values ({int(bad.sum())} of them, first at index "
                        f"{first}); it must be finite.")


def _labels(y: Any, n: int, where: str, field: str, num_classes: int | None) -> np.ndarray:
    y = _real(y, where, field, "iuf")
    if y.shape != (n,):
        raise DataError(f"{where}[{field}]: must have shape ({n},) (one label per record). Got {y.shape} instead.")
    _finite(y, where, field)
    if y.size and (y.dtype.kind == "f" and not np.all(y == np.round(y))):
        raise DataError(f"{where}[{field}]: must hold integer class labels. Got non-integral values.")
    hi = MAX_CLASSES if num_classes is None else num_classes
    if y.size and (y.min() < 0 or y.max() >= hi):
        raise DataError(f"{where}[{field}]: must hold class labels in [0, {hi}). Got the range "
                        f"[{format_value(y.min().item())}, {format_value(y.max().item())}] instead.")
    return y.astype(np.int64)


def check_records(X: Any, y: Any, where: str, *, num_classes: int | None = None,
                  input_shape: tuple[int, ...] | None = None, num_records: int | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The records of an outside release (``release make --data``, a bundle's ``data.npz``): ``X`` a real, finite
    ``(n, ...)`` array (1-4 feature axes, n >= 1), ``y`` ``n`` integer labels in ``[0, num_classes)``; with
    ``input_shape`` / ``num_records`` the shapes must match. Returns ``(X float32, y int64)``."""
    X = _real(X, where, "X")
    if X.ndim < 2 or X.ndim > 5 or X.shape[0] < 1:
        raise DataError(f"{where}[X]: must be an (n, ...) array with one row per record (n >= 1, 1-4 feature axes). "
                        f"Got shape {X.shape} instead.")
    if X.shape[0] > MAX_RECORDS or math.prod(X.shape[1:]) > MAX_INPUT_SIZE:
        raise DataError(f"{where}[X]: of shape {X.shape} exceeds the supported {MAX_RECORDS} records of "
                        f"{MAX_INPUT_SIZE} features.")
    if input_shape is not None and tuple(X.shape[1:]) != tuple(input_shape):
        raise DataError(f"{where}[X]: has records of shape {tuple(X.shape[1:])}; the model takes {tuple(input_shape)}.")
    if num_records is not None and X.shape[0] != num_records:
        raise DataError(f"{where}[X]: has {X.shape[0]} records; release.json says {num_records}.")
    _finite(X, where, "X")
    y = _labels(y, X.shape[0], where, "y", num_classes)
    return X.astype(np.float32), y


def check_bundle_scores(arrays: Mapping[str, Any], where: str, *, score_kind: str, num_records: int,
                        num_classes: int | None) -> dict[str, np.ndarray]:
    """The arrays of a scores-only bundle's ``scores.npz`` (:data:`SCORE_ARRAYS`): member then non-member scores of
    ``score_kind`` (``(n, C)``; ``(n,)`` for losses), finite reals, together ``num_records`` rows, ``C =
    num_classes``; integer labels in ``[0, C)`` (required unless losses); reference models' scores ``(n, K[, C])``
    with boolean inclusion masks ``(n, K)``, both or neither. Returns the arrays (scores float64, labels int64)."""
    unknown = sorted(str(k) for k in arrays if k not in SCORE_ARRAYS)
    if unknown:
        raise DataError(f"{where}: unknown array(s) {', '.join(repr(k) for k in unknown[:5])}; a scores bundle holds "
                        f"{', '.join(SCORE_ARRAYS)}.")
    needed = ["member_scores", "nonmember_scores"] + ([] if score_kind == "losses" else ["member_labels", "nonmember_labels"])
    missing = [k for k in needed if k not in arrays]
    if missing:
        raise DataError(f"{where}: lacks the array(s) {', '.join(repr(k) for k in missing)} ({score_kind} scores).")
    rec_ndim = 1 if score_kind == "losses" else 2
    out: dict[str, np.ndarray] = {}
    sizes = []
    for side in ("member", "nonmember"):
        key = f"{side}_scores"
        s = _real(arrays[key], where, key, "iuf")
        if s.ndim != rec_ndim or s.shape[0] < 1 or (rec_ndim == 2 and s.shape[1] != num_classes):
            want = "(n,)" if rec_ndim == 1 else f"(n, {num_classes})"
            raise DataError(f"{where}[{key}]: must have shape {want} with n >= 1 ({score_kind}). Got {s.shape} instead.")
        _finite(s, where, key)
        out[key] = s.astype(np.float64)
        sizes.append(s.shape[0])
        lab = f"{side}_labels"
        if lab in arrays:
            out[lab] = _labels(arrays[lab], s.shape[0], where, lab, num_classes)
    if sum(sizes) != num_records:
        raise DataError(f"{where}: holds {sizes[0]} member and {sizes[1]} non-member scores; release.json says "
                        f"{num_records} records.")
    refs = [k for k in ("reference_scores", "reference_in") if k in arrays]
    if len(refs) == 1:
        raise DataError(f"{where}: reference models need both 'reference_scores' and 'reference_in'; it holds only "
                        f"{refs[0]!r}.")
    if refs:
        r = _real(arrays["reference_scores"], where, "reference_scores", "iuf")
        inc = _real(arrays["reference_in"], where, "reference_in", "b")
        ok = r.ndim == rec_ndim + 1 and r.shape[0] == num_records and r.shape[1] >= 1 and (
            rec_ndim == 1 or r.shape[2] == num_classes)
        if not ok:
            want = f"({num_records}, K)" if rec_ndim == 1 else f"({num_records}, K, {num_classes})"
            raise DataError(f"{where}[reference_scores]: must have shape {want} with K >= 1. Got {r.shape} instead.")
        if inc.shape != r.shape[:2]:
            raise DataError(f"{where}[reference_in]: must have shape {r.shape[:2]} (one bit per record and reference "
                            f"model). Got {inc.shape} instead.")
        _finite(r, where, "reference_scores")
        out["reference_scores"], out["reference_in"] = r.astype(np.float64), inc.astype(bool)
    pops = [k for k in SCORE_ARRAYS[6:] if k in arrays]
    if pops:
        _check_population(arrays, out, where, score_kind, rec_ndim, num_classes)
    return out


def _check_population(arrays: Mapping[str, Any], out: dict[str, np.ndarray], where: str, score_kind: str,
                      rec_ndim: int, num_classes: int) -> None:
    """RMIA's population records (non-members of the target): the target's scores ``(m[, C])``, their labels
    (required unless losses), the same reference models' scores ``(m, K[, C])`` and optionally their inclusion masks
    ``(m, K)``; they need the reference models of the records (``reference_scores``)."""
    needed = ["population_scores", "population_reference_scores"] + ([] if score_kind == "losses" else
                                                                     ["population_labels"])
    missing = [k for k in needed if k not in arrays]
    if missing or "reference_scores" not in out:
        lack = missing or ["reference_scores"]
        raise DataError(f"{where}: population records need {', '.join(needed)} and the records' reference_scores; it "
                        f"lacks {', '.join(repr(k) for k in lack)}.")
    z = _real(arrays["population_scores"], where, "population_scores", "iuf")
    if z.ndim != rec_ndim or z.shape[0] < 1 or (rec_ndim == 2 and z.shape[1] != num_classes):
        want = "(m,)" if rec_ndim == 1 else f"(m, {num_classes})"
        raise DataError(f"{where}[population_scores]: must have shape {want} with m >= 1 ({score_kind}). Got {z.shape} "
                        "instead.")
    _finite(z, where, "population_scores")
    m, k = z.shape[0], out["reference_scores"].shape[1]
    out["population_scores"] = z.astype(np.float64)
    if "population_labels" in arrays:
        out["population_labels"] = _labels(arrays["population_labels"], m, where, "population_labels", num_classes)
    zr = _real(arrays["population_reference_scores"], where, "population_reference_scores", "iuf")
    want_shape = (m, k) + ((num_classes,) if rec_ndim == 2 else ())
    if zr.shape != want_shape:
        raise DataError(f"{where}[population_reference_scores]: must have shape {want_shape} (the same {k} reference "
                        f"models). Got {zr.shape} instead.")
    _finite(zr, where, "population_reference_scores")
    out["population_reference_scores"] = zr.astype(np.float64)
    if "population_reference_in" in arrays:
        zin = _real(arrays["population_reference_in"], where, "population_reference_in", "b")
        if zin.shape != (m, k):
            raise DataError(f"{where}[population_reference_in]: must have shape {(m, k)} (one bit per population record "
                            f"and reference model). Got {zin.shape} instead.")
        out["population_reference_in"] = zin.astype(bool)


def check_canary_view(raw: Mapping[str, Any], entry: Mapping[str, Any], spec: Any, where: str,
                      parameter_count: int | None = None) -> dict[str, np.ndarray]:
    """The attacker's view of a release's planted canaries (``canaries.npz``) against its ``release.json["canaries"]``
    entry and the model spec: Dirac -- ``coords`` (m distinct integer parameter coordinates in ``[0,
    parameter_count)``) and ``observations`` (``(steps, 1, m)`` finite floats: the one released model stepped in every
    step, so a NaN, which means "did not step", cannot be in a release); input canaries -- ``X`` (``(m, *input
    shape)`` finite floats) and ``y`` (m labels in ``[0, num_classes)``)."""
    from dpaudit.training.canaries import RELEASE_VIEW_KEYS

    kind, m = entry["kind"], int(entry["count"])
    want = set(RELEASE_VIEW_KEYS[kind])
    if set(raw) != want:
        raise DataError(f"{where}: {kind} canaries hold exactly {sorted(want)}; found {sorted(raw)}.")
    if kind == "dirac":
        coords = _real(raw["coords"], where, "coords", "iu")
        total = parameter_count
        if coords.shape != (m,) or (m and (coords.min() < 0 or (total is not None and coords.max() >= total))) \
                or np.unique(coords).size != m:
            raise DataError(f"{where}[coords]: must be {m} distinct integer parameter coordinates in [0, {total}). "
                            f"Got shape {coords.shape}, dtype {coords.dtype} instead.")
        obs = _real(raw["observations"], where, "observations", "f")
        steps = int(entry["steps"])
        if obs.shape != (steps, 1, m):
            raise DataError(f"{where}[observations]: must be a float array of shape ({steps}, 1, {m}) (canaries.steps, "
                            f"one model, canaries.count). Got {obs.shape} instead.")
        _finite(obs, where, "observations")
        return {"coords": coords.astype(np.int64), "observations": obs.astype(np.float64)}
    X = _real(raw["X"], where, "X", "f")
    if X.shape != (m, *spec.input_shape):
        raise DataError(f"{where}[X]: must have shape {(m, *spec.input_shape)}. Got {X.shape} instead.")
    _finite(X, where, "X")
    y = _labels(raw["y"], m, where, "y", spec.num_classes)
    return {"X": X.astype(np.float32), "y": y}


def check_votes(votes: Any, where: str, num_classes: int | None) -> np.ndarray:
    """A PATE-style release's ``votes.npy``: a real ``(queries, classes)`` array of finite counts >= 0 with one column
    per class of the released model."""
    v = _real(votes, where, "votes")
    if v.ndim != 2 or (num_classes is not None and v.shape[1] != num_classes):
        raise DataError(f"{where}[votes]: must be a (queries x {num_classes}) array (one column per class of the model). "
                        f"Got shape {v.shape} instead.")
    _finite(v, where, "votes")
    if v.size and v.min() < 0:
        raise DataError(f"{where}[votes]: must hold vote counts >= 0. Got {format_value(v.min().item())} instead.")
    return v


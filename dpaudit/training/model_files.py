"""Model files from elsewhere, read without trusting them: the one reader of each kind of model file a release
bundle holds (``.skops``, ``.safetensors``).

A model file in a bundle may come from the party being audited, and the libraries that read these formats run
native code on what the file says: scikit-learn's tree code follows the child indices stored in a fitted tree
without bounds checks (an index out of range reads outside the tree -- a crash; a child pointing back at its parent
loops forever), gradient boosting writes each stage's output into the column its position names (a wrong shape
writes outside the output array), and skops rebuilds any scikit-learn estimator it is given. So, before any
library sees a file:

* **.skops** (:func:`load_skops_file`): the file is read once (capped); its ``schema.json`` (at most
  :data:`MAX_SKOPS_SCHEMA_BYTES`) is walked without recursion and must use only skops' plain loaders (containers,
  JSON values, numpy arrays, random states) and objects of the classes in :data:`SKOPS_CLASSES` -- classifiers
  whose ``predict_proba`` is numpy arithmetic or tree code dpaudit checks, and their parts; functions, methods,
  ``functools.partial``, sparse matrices, byte strings and arbitrary constructors are refused. Every array the
  schema refers to is counted each time it is referred to (a 1 MB array named a thousand times is 1 GB) and its
  ``.npy`` header checked against its size. After skops has built the object, every fitted tree is checked
  (:func:`check_sklearn_structures`): node count equal to its storage, children after their parent and inside the
  tree, features inside the input, depth within the node count; histogram-gradient-boosting predictors likewise
  (and their category bitsets); a gradient-boosting model's stage matrix must have exactly as many columns as its
  raw predictions. Only then is the model returned.
* **.safetensors** (:func:`load_safetensors_file`): read once, at most :func:`dpaudit._io.max_array_bytes`; the
  header is parsed and its tensor names, dtypes and shapes compared with what the module expects *before* any
  tensor is materialised, so an oversized or extra tensor (a sparse file of terabytes) is refused from the header.
"""

from __future__ import annotations

import io
import json
import math
import zipfile
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from dpaudit._io import (ARRAY_BYTES_ENV, check_input_file, max_array_bytes, read_input_bytes, read_npy_header,
                         read_zip_archive)
from dpaudit.errors import DataError

__all__ = ["SKOPS_CLASSES", "SKOPS_CLASSIFIERS", "MAX_SKOPS_SCHEMA_BYTES", "MAX_SKOPS_NODES", "MAX_SKOPS_DEPTH",
           "load_skops_file", "check_skops_schema", "check_sklearn_structures",
           "load_safetensors_file", "MAX_SAFETENSORS_HEADER_BYTES"]

#: The largest ``schema.json`` of a ``.skops`` file (a forest of 500 trees needs about 1.5 MB; the JSON is parsed
#: three times, at about 25 bytes of Python objects per byte).
MAX_SKOPS_SCHEMA_BYTES = 32 << 20
#: The most nodes and the deepest nesting of a ``.skops`` schema (skops builds it recursively).
MAX_SKOPS_NODES = 1_000_000
MAX_SKOPS_DEPTH = 64
#: The largest safetensors header (names, dtypes, shapes and offsets of the tensors, and the metadata).
MAX_SAFETENSORS_HEADER_BYTES = 16 << 20

# skops loaders whose result is plain data (containers, JSON values, numpy arrays and dtypes, random states), a
# reference to a node already built (CachedNode), or an object of a class checked below (ObjectNode; TreeNode and
# LossNode rebuild scikit-learn's tree and loss objects from their own fixed constructors).
_PLAIN_LOADERS = frozenset({"DictNode", "ListNode", "SetNode", "TupleNode", "JsonNode", "NdArrayNode", "DTypeNode",
                            "RandomStateNode", "RandomGeneratorNode", "CachedNode", "TypeNode", "ObjectNode",
                            "TreeNode", "LossNode"})
# a TypeNode yields the type itself: only plain value types
_PLAIN_TYPES = frozenset({"builtins.str", "builtins.int", "builtins.float", "builtins.bool", "builtins.list",
                          "builtins.tuple", "builtins.dict", "builtins.set"})


def _classifier_names() -> tuple[frozenset[str], frozenset[str]]:
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis, QuadraticDiscriminantAnalysis
    from sklearn.dummy import DummyClassifier
    from sklearn.ensemble import (ExtraTreesClassifier, GradientBoostingClassifier, HistGradientBoostingClassifier,
                                  RandomForestClassifier)
    from sklearn.ensemble._hist_gradient_boosting.binning import _BinMapper
    from sklearn.ensemble._hist_gradient_boosting.predictor import TreePredictor
    from sklearn.linear_model import LogisticRegression, SGDClassifier
    from sklearn.naive_bayes import BernoulliNB, ComplementNB, GaussianNB, MultinomialNB
    from sklearn.neural_network import MLPClassifier
    from sklearn.neural_network._stochastic_optimizers import AdamOptimizer, SGDOptimizer
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import LabelBinarizer, LabelEncoder, MaxAbsScaler, MinMaxScaler, StandardScaler
    from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor, ExtraTreeClassifier, ExtraTreeRegressor

    top = [DecisionTreeClassifier, ExtraTreeClassifier, RandomForestClassifier, ExtraTreesClassifier,
           GradientBoostingClassifier, HistGradientBoostingClassifier, LogisticRegression, SGDClassifier,
           MLPClassifier, GaussianNB, BernoulliNB, MultinomialNB, ComplementNB, LinearDiscriminantAnalysis,
           QuadraticDiscriminantAnalysis, DummyClassifier, Pipeline]
    parts = [DecisionTreeRegressor, ExtraTreeRegressor, TreePredictor, _BinMapper, LabelEncoder, LabelBinarizer,
             StandardScaler, MinMaxScaler, MaxAbsScaler, AdamOptimizer, SGDOptimizer]
    try:        # the loss and link objects of the gradient-boosting models (pure Python around numpy)
        import sklearn._loss.link as link
        import sklearn._loss.loss as loss

        parts += [getattr(loss, n) for n in ("HalfBinomialLoss", "HalfMultinomialLoss", "ExponentialLoss")
                  if hasattr(loss, n)]
        parts += [getattr(link, n) for n in ("Interval", "LogitLink", "HalfLogitLink", "MultinomialLogit",
                                             "IdentityLink") if hasattr(link, n)]
    except ImportError:  # pragma: no cover - older scikit-learn
        pass
    name = lambda c: f"{c.__module__}.{c.__qualname__}"  # noqa: E731 - how skops records a class
    return frozenset(map(name, top)), frozenset(map(name, top + parts))


_NAMES: tuple[frozenset[str], frozenset[str]] | None = None


def _names() -> tuple[frozenset[str], frozenset[str]]:
    global _NAMES
    if _NAMES is None:
        _NAMES = _classifier_names()
    return _NAMES


def __getattr__(name: str) -> Any:      # SKOPS_CLASSIFIERS / SKOPS_CLASSES without importing scikit-learn at import
    if name == "SKOPS_CLASSIFIERS":
        return _names()[0]
    if name == "SKOPS_CLASSES":
        return _names()[1]
    raise AttributeError(name)


def _read_capped(p: Path, what: str, follow_symlinks: bool) -> bytes:
    """The bytes of a model file, read once, at most :func:`dpaudit._io.max_array_bytes`."""
    cap = max_array_bytes()
    size = check_input_file(p, what, max_bytes=None, follow_symlinks=follow_symlinks).stat().st_size
    if size > cap:
        raise DataError(f"{what[:1].upper() + what[1:]} {p} is {size} bytes; dpaudit reads at most {cap} here (set "
                        f"{ARRAY_BYTES_ENV} to raise the limit).")
    return read_input_bytes(p, what, max_bytes=cap, follow_symlinks=follow_symlinks)


def _refuse(path: Any, why: str) -> DataError:
    return DataError(f"{path}: refusing to load this .skops file: {why}.")


def check_skops_schema(data: bytes, path: Any, *, top_classes: Iterable[str] | None = None) -> dict:
    """Check the ``schema.json`` of the ``.skops`` archive ``data`` (already read, its zip directory capped) before
    skops sees it (see the module docstring); returns the parsed schema. ``top_classes``: the class names
    (``module.Class``) the top-level object may have (default: :data:`SKOPS_CLASSIFIERS`)."""
    top_ok, allowed = _names()
    top_ok = frozenset(top_classes) if top_classes is not None else top_ok
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
        infos = {i.filename: i for i in zf.infolist()}
        info = infos.get("schema.json")
        if info is None:
            raise _refuse(path, "it has no schema.json (not a skops file)")
        if info.file_size > MAX_SKOPS_SCHEMA_BYTES:
            raise _refuse(path, f"its schema.json unpacks to {info.file_size} bytes (at most {MAX_SKOPS_SCHEMA_BYTES})")
        schema = json.loads(zf.read(info).decode("utf-8"))
    except DataError:
        raise
    except RecursionError:
        raise _refuse(path, "its schema.json is nested too deeply") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, KeyError, ValueError, OSError, EOFError, NotImplementedError,
            RuntimeError) as exc:
        raise DataError(f"{path}: not a readable skops file ({str(exc)[:200]}).") from None
    if not isinstance(schema, dict) or schema.get("__loader__") != "ObjectNode":
        raise _refuse(path, "its top-level object is not a scikit-learn estimator")
    top = f"{schema.get('__module__')}.{schema.get('__class__')}"
    if top not in top_ok:
        raise _refuse(path, f"it holds a {str(schema.get('__class__'))[:80]} ({top[:160]}) at its top level; accepted "
                            f"there: {', '.join(sorted(n.rsplit('.', 1)[1] for n in top_ok))}")
    cap = max_array_bytes()
    referenced = 0
    count = 0
    stack: list[tuple[Any, int]] = [(schema, 0)]
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_SKOPS_NODES:
            raise _refuse(path, f"its schema holds more than {MAX_SKOPS_NODES} entries")
        if depth > MAX_SKOPS_DEPTH:
            raise _refuse(path, f"its schema is nested more than {MAX_SKOPS_DEPTH} levels deep")
        if isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
            continue
        if not isinstance(node, dict):
            continue
        loader = node.get("__loader__")
        if loader is not None:
            name = f"{node.get('__module__')}.{node.get('__class__')}"
            if loader not in _PLAIN_LOADERS:
                raise _refuse(path, f"it holds an object outside dpaudit's allow-list: {name[:160]} (built by "
                                    f"skops' {str(loader)[:40]}, which can call code or holds what a classifier never "
                                    "needs: functions, methods, partials, sparse matrices, byte strings and "
                                    "arbitrary constructors are refused)")
            if loader == "ObjectNode" and name not in allowed:
                raise _refuse(path, f"it holds an object outside dpaudit's allow-list: {name[:160]} (dpaudit loads "
                                    "scikit-learn models built only of "
                                    f"{', '.join(sorted(n.rsplit('.', 1)[1] for n in allowed))})")
            if loader == "TypeNode" and name not in _PLAIN_TYPES and not name.startswith("numpy."):
                raise _refuse(path, f"it refers to a type outside dpaudit's allow-list: {name[:160]}")
            if loader == "TreeNode" and name != "sklearn.tree._tree.Tree":
                raise _refuse(path, f"it holds a {name} as a tree")
            if loader == "NdArrayNode":
                if node.get("type") == "numpy":
                    if name != "numpy.ndarray" and not name.startswith("numpy."):
                        raise _refuse(path, f"it rebuilds an array as a {name}")
                    member = infos.get(str(node.get("file")))
                    if member is None:
                        raise _refuse(path, f"it refers to an array file {str(node.get('file'))[:80]!r} it does "
                                            "not hold")
                    referenced += member.file_size
                    if referenced > cap:
                        raise _refuse(path, f"the arrays it refers to (each time it refers to them) add up to more "
                                            f"than {cap} bytes (set {ARRAY_BYTES_ENV} to raise the limit)")
                    with zf.open(member) as fh:
                        _shape, _dtype, nbytes = read_npy_header(fh, "the model file", f"{path}[{member.filename}]")
                        if nbytes != member.file_size - fh.tell():
                            raise _refuse(path, f"the header of {member.filename} promises {nbytes} bytes of data, "
                                                f"it holds {member.file_size - fh.tell()}")
                elif node.get("type") != "json":
                    raise _refuse(path, f"an array of unknown storage {str(node.get('type'))[:40]!r}")
        stack.extend((v, depth + 1) for k, v in node.items() if isinstance(v, (dict, list)))
    return schema


def _walk(obj: Any, limit: int = 10 * MAX_SKOPS_NODES) -> list[Any]:
    """Every object reachable from a loaded estimator (its attributes, containers, object arrays), each once."""
    seen: dict[int, Any] = {}
    stack = [obj]
    while stack:
        o = stack.pop()
        if id(o) in seen or o is None or isinstance(o, (str, bytes, int, float, bool, np.generic, type, np.dtype)):
            continue            # values, and types (a dtype or a type a schema names): nothing of the model below
        seen[id(o)] = o
        if len(seen) > limit:
            raise DataError("A scikit-learn model holds more objects than dpaudit checks; refusing it.")
        if isinstance(o, dict):
            stack.extend(o.keys())
            stack.extend(o.values())
        elif isinstance(o, (list, tuple, set, frozenset)):
            stack.extend(o)
        elif isinstance(o, np.ndarray):
            if o.dtype == object:
                stack.extend(o.ravel().tolist())
        elif hasattr(o, "__dict__"):
            stack.extend(vars(o).values())
    return list(seen.values())


def _bad(path: Any, why: str) -> DataError:
    return DataError(f"{path}: the model's fitted structure is inconsistent ({why}); a file scikit-learn wrote never "
                     "is, so dpaudit refuses it before any prediction runs.")


def _check_tree(tree: Any, n_features: int, path: Any) -> None:
    from sklearn.tree._tree import TREE_LEAF

    n = int(tree.node_count)
    # node_count is set from the file independently of the nodes stored: every array view of the tree has
    # node_count rows, so it must equal the storage before any of them is read
    if n < 1 or n != int(tree.capacity):
        raise _bad(path, f"a tree says it has {n} nodes but stores {int(tree.capacity)}")
    if int(tree.n_features) != n_features or int(tree.n_outputs) < 1:
        raise _bad(path, f"a tree for {int(tree.n_features)} features in a model of {n_features}")
    if not 0 <= int(tree.max_depth) <= n:
        raise _bad(path, f"a tree of {n} nodes says it is {int(tree.max_depth)} deep")
    left, right, feat = (np.asarray(a, dtype=np.int64) for a in (tree.children_left, tree.children_right, tree.feature))
    idx = np.arange(n)
    leaf = left == TREE_LEAF
    inner = ~leaf
    # scikit-learn creates a node's children after it, so every child index is larger than its parent's: this
    # keeps every walk inside the tree and makes cycles impossible
    ok = (np.all(right[leaf] == TREE_LEAF)
          and np.all((left[inner] > idx[inner]) & (left[inner] < n))
          and np.all((right[inner] > idx[inner]) & (right[inner] < n))
          and np.all((feat[inner] >= 0) & (feat[inner] < n_features)))
    if not ok:
        raise _bad(path, "a tree node's child or feature index lies outside the tree or the input")


def _check_predictor(pred: Any, n_features: int, categorical: np.ndarray | None, path: Any) -> None:
    from sklearn.ensemble._hist_gradient_boosting.common import PREDICTOR_RECORD_DTYPE

    nodes = getattr(pred, "nodes", None)
    if not isinstance(nodes, np.ndarray) or nodes.dtype != PREDICTOR_RECORD_DTYPE or nodes.ndim != 1 or not len(nodes):
        raise _bad(path, "a histogram-boosting predictor's node table is not scikit-learn's")
    bitsets = []
    for name in ("raw_left_cat_bitsets", "binned_left_cat_bitsets"):
        b = getattr(pred, name, None)
        if not isinstance(b, np.ndarray) or b.ndim != 2 or b.shape[1] != 8 or b.dtype != np.uint32:
            raise _bad(path, f"a predictor's {name} is not an (n, 8) uint32 table")
        bitsets.append(b)
    n = len(nodes)
    idx = np.arange(n)
    inner = nodes["is_leaf"] == 0
    left, right = nodes["left"].astype(np.int64), nodes["right"].astype(np.int64)
    feat = nodes["feature_idx"].astype(np.int64)
    ok = (np.all((left[inner] > idx[inner]) & (left[inner] < n)) and np.all((right[inner] > idx[inner]) & (right[inner] < n))
          and np.all((feat[inner] >= 0) & (feat[inner] < n_features)))
    if not ok:
        raise _bad(path, "a predictor node's child or feature index lies outside the tree or the input")
    cat = inner & (nodes["is_categorical"] != 0)
    if cat.any():
        if (categorical is None or np.any(nodes["bitset_idx"][cat].astype(np.int64) >= len(bitsets[0]))
                or np.any(nodes["bitset_idx"][cat].astype(np.int64) >= len(bitsets[1]))
                or not np.all(categorical[feat[cat]])):
            raise _bad(path, "a categorical split names a bitset or a feature the model does not have")


def check_sklearn_structures(est: Any, path: Any) -> None:
    """Check what scikit-learn's native prediction code would follow without bounds checks, in every part of the
    loaded estimator ``est`` (see the module docstring); a :class:`DataError` naming ``path`` when anything is
    inconsistent."""
    from sklearn.ensemble import GradientBoostingClassifier, HistGradientBoostingClassifier
    from sklearn.ensemble._hist_gradient_boosting.predictor import TreePredictor
    from sklearn.tree import DecisionTreeRegressor, ExtraTreeRegressor
    from sklearn.tree._tree import Tree

    try:
        n_features = est.n_features_in_
    except (AttributeError, IndexError, TypeError, ValueError):
        raise _bad(path, "the model is not fitted (no n_features_in_)") from None
    if isinstance(n_features, bool) or not isinstance(n_features, (int, np.integer)) or not 1 <= n_features <= 10**8:
        raise _bad(path, f"n_features_in_ is {str(n_features)[:40]}")
    n_features = int(n_features)
    objects = _walk(est)
    # every part sees the input the top-level model validated: the transformers dpaudit accepts keep its width
    for o in objects:
        nf = vars(o).get("n_features_in_") if hasattr(o, "__dict__") and not isinstance(o, type) else None
        if nf is not None and (isinstance(nf, bool) or not isinstance(nf, (int, np.integer)) or int(nf) != n_features):
            raise _bad(path, f"a {type(o).__name__} inside takes {str(nf)[:40]} features, the model {n_features}")
    for o in objects:
        if isinstance(o, Tree):
            _check_tree(o, n_features, path)
    for o in objects:
        if isinstance(o, HistGradientBoostingClassifier):
            mapper = getattr(o, "_bin_mapper", None)
            cats = getattr(mapper, "is_categorical_", None)
            cats = (np.asarray(cats).astype(bool) if isinstance(cats, np.ndarray) and cats.ndim == 1
                    and len(cats) == n_features and cats.dtype.kind in "bui" else None)
            preds = getattr(o, "_predictors", None)
            if not isinstance(preds, list) or not all(isinstance(row, list) for row in preds):
                raise _bad(path, "a histogram-boosting model's predictors are not a list of lists")
            for row in preds:
                for p in row:
                    if type(p) is not TreePredictor:
                        raise _bad(path, f"a histogram-boosting predictor is a {type(p).__name__}")
                    _check_predictor(p, n_features, cats, path)
        elif isinstance(o, TreePredictor):
            _check_predictor(o, n_features, None, path)
    for o in objects:
        if isinstance(o, GradientBoostingClassifier):
            stages = getattr(o, "estimators_", None)
            if (not isinstance(stages, np.ndarray) or stages.dtype != object or stages.ndim != 2 or not stages.size
                    or not all(type(t) in (DecisionTreeRegressor, ExtraTreeRegressor) for t in stages.ravel())):
                raise _bad(path, "a gradient-boosting model's stages are not a matrix of regression trees")
            if any(t.tree_.n_outputs != 1 or t.tree_.max_n_classes != 1 for t in stages.ravel()):
                raise _bad(path, "a gradient-boosting stage is not a single-output regression tree")
            try:        # the raw predictions each stage adds its column into (numpy only: the init estimator)
                width = o._raw_predict_init(np.zeros((1, n_features), dtype=np.float32)).shape
            except Exception as exc:  # noqa: BLE001 - scikit-learn raises many types on inconsistent state
                raise _bad(path, f"its initial prediction fails ({type(exc).__name__})") from None
            if len(width) != 2 or width[1] != stages.shape[1]:
                raise _bad(path, f"{stages.shape[1]} stage columns for raw predictions of shape {width}")


def load_skops_file(path: str | Path, trusted_types: Iterable[str], *, top_classes: Iterable[str] | None = None,
                    follow_symlinks: bool = True, what: str = "the model file") -> Any:
    """The estimator of a ``.skops`` file, read once and checked before and after skops builds it (see the module
    docstring). ``trusted_types``: the types beyond skops' defaults skops may build (each still under the checks
    here). A :class:`DataError` naming the file for anything refused or unreadable; never unpickles."""
    import skops.io as sio

    p = Path(path)
    data = read_zip_archive(p, what, kind="skops file", follow_symlinks=follow_symlinks)
    check_skops_schema(data, p, top_classes=top_classes)
    try:
        untrusted = sio.get_untrusted_types(data=data)
    except Exception as exc:  # noqa: BLE001 - skops raises several types on malformed archives
        raise DataError(f"{p}: not a readable skops file ({str(exc)[:200]}).") from None
    refused = sorted(set(untrusted) - set(trusted_types))
    if refused:
        raise DataError(f"{p}: refusing to load; the file contains types outside dpaudit's allow-list: {refused}.")
    try:
        est = sio.loads(data, trusted=list(untrusted))
    except Exception as exc:  # noqa: BLE001 - skops / scikit-learn raise many types on malformed content
        raise DataError(f"{p}: could not load the skops file ({type(exc).__name__}: {str(exc)[:200]}).") from None
    check_sklearn_structures(est, p)
    if callable(getattr(est, "predict_proba", None)):   # (callers name a model without it)
        try:        # its structures checked: one prediction turns any other inconsistency into one line, now
            np.asarray(est.predict_proba(np.zeros((1, int(est.n_features_in_)))), dtype=np.float64)
        except Exception as exc:  # noqa: BLE001 - scikit-learn raises many types on inconsistent fitted state
            raise DataError(f"{p}: the model cannot predict ({type(exc).__name__}: {str(exc)[:200]}).") from None
    return est


# --------------------------------------------------------------------------------------------------
# safetensors

_ST_DTYPES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
              "U16": 2, "U32": 4, "U64": 8, "F8_E4M3": 1, "F8_E5M2": 1}


def load_safetensors_file(path: str | Path, expected: Mapping[str, tuple[int, ...]] | None = None, *,
                          follow_symlinks: bool = True, what: str = "the weights file",
                          mismatch: str = "does not match the module") -> dict[str, Any]:
    """The tensors of a ``.safetensors`` file as a ``{name: torch.Tensor}`` dict, read once and at most
    :func:`dpaudit._io.max_array_bytes` bytes. With ``expected`` (``{name: shape}``, e.g. a module's
    ``state_dict`` built on torch's ``meta`` device), the header's names and shapes must be exactly those before
    any tensor is materialised (every missing, unexpected or mis-shaped tensor is named)."""
    from safetensors import SafetensorError
    from safetensors.torch import load as st_load

    p = Path(path)
    blob = _read_capped(p, what, follow_symlinks)
    n = int.from_bytes(blob[:8], "little") if len(blob) >= 8 else -1
    if not 2 <= n <= min(MAX_SAFETENSORS_HEADER_BYTES, len(blob) - 8):
        raise DataError(f"{p}: not a readable safetensors file (header of {n} bytes in a file of {len(blob)}).")
    try:
        header = json.loads(blob[8:8 + n].decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise DataError(f"{p}: not a readable safetensors file (its header is not JSON: {str(exc)[:120]}).") from None
    if not isinstance(header, dict):
        raise DataError(f"{p}: not a readable safetensors file (its header is not an object).")
    shapes: dict[str, tuple[int, ...]] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        shape = entry.get("shape") if isinstance(entry, dict) else None
        if (not isinstance(shape, list) or len(shape) > 8
                or not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s for s in shape)
                or entry.get("dtype") not in _ST_DTYPES
                or math.prod(shape) * _ST_DTYPES[entry["dtype"]] > len(blob)):
            raise DataError(f"{p}: the tensor {name[:80]!r} has an invalid header entry ({str(entry)[:120]}).")
        shapes[name] = tuple(shape)
    if expected is not None:
        want = {k: tuple(int(s) for s in v) for k, v in expected.items()}
        missing = sorted(set(want) - set(shapes))
        unexpected = sorted(set(shapes) - set(want))
        shaped = sorted(f"{k} {shapes[k]} vs {want[k]}" for k in set(shapes) & set(want) if shapes[k] != want[k])
        if missing or unexpected or shaped:
            parts = [f"missing {', '.join(missing)}" if missing else "",
                     f"unexpected {', '.join(unexpected)[:400]}" if unexpected else "",
                     f"mis-shaped (file vs module) {'; '.join(shaped)[:400]}" if shaped else ""]
            raise DataError(f"{p} {mismatch}: " + "; ".join(x for x in parts if x) + ".")
    try:
        return st_load(blob)
    except (SafetensorError, ValueError, RuntimeError, OverflowError) as exc:
        raise DataError(f"{p}: not a readable safetensors file ({str(exc)[:200]}).") from None



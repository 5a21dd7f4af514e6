"""Model files from elsewhere, read without trusting them: the one reader of each kind of model file a release
bundle holds (``.skops``, ``.safetensors``, ``.cbm``).

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
* **.cbm** (:func:`load_catboost_file`): CatBoost's own loader crashes on crafted files (one random byte mutation
  in 200 of a small model was a segmentation fault), so dpaudit parses the file itself (:class:`_Fb`: every
  offset, length and index checked) and evaluates the symmetric trees with numpy (:class:`CatBoostModel`), the
  same numbers as CatBoost's ``predict_proba`` (to 1e-15 in the tests).
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
           "load_safetensors_file", "safetensors_entry", "MAX_SAFETENSORS_HEADER_BYTES",
           "load_catboost_file", "parse_catboost_model", "CatBoostModel", "MAX_CATBOOST_TREES", "MAX_CATBOOST_DEPTH",
           "MAX_CATBOOST_DIM"]

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


def _plain_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def safetensors_entry(name: Any, entry: Any, dtypes: Mapping[str, int], where: str,
                      size: int) -> tuple[str, tuple[int, ...], tuple[int, int]]:
    """One tensor entry of a safetensors header checked by its types before any value is used: ``dtype`` a string
    of ``dtypes`` (name -> bytes per element), ``shape`` a list of at most 8 ints >= 0, ``data_offsets`` two ints
    ``0 <= begin <= end <= size`` (the data part's length) spanning exactly the tensor's bytes. Returns
    ``(dtype, shape, (begin, end))``; anything else (``"dtype": ["F32"]``, string or float offsets, a bool in a shape)
    is one :class:`DataError` naming the tensor and the field, never a ``TypeError``."""
    label = f"{where}: the tensor {str(name)[:80]!r}"
    if not isinstance(entry, dict):
        raise DataError(f"{label} has an invalid header entry (an object with dtype, shape and data_offsets is "
                        f"needed; got {str(entry)[:80]}).")
    dtype, shape, offs = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in dtypes:
        raise DataError(f"{label} has an invalid header entry: 'dtype' must be one of {', '.join(dtypes)}; got "
                        f"{str(dtype)[:40]}.")
    if not isinstance(shape, list) or len(shape) > 8 or not all(_plain_int(d) and d >= 0 for d in shape):
        raise DataError(f"{label} has an invalid header entry: 'shape' must be a list of at most 8 ints >= 0; got "
                        f"{str(shape)[:80]}.")
    if (not isinstance(offs, list) or len(offs) != 2 or not all(_plain_int(o) for o in offs)
            or not 0 <= offs[0] <= offs[1] <= size):
        raise DataError(f"{label} has an invalid header entry: 'data_offsets' must be two ints 0 <= begin <= end <= "
                        f"{size}; got {str(offs)[:80]}.")
    nbytes = math.prod(shape) * dtypes[dtype]
    if offs[1] - offs[0] != nbytes:
        raise DataError(f"{label} has an invalid header entry: its data_offsets span {offs[1] - offs[0]} bytes, its "
                        f"dtype and shape {nbytes}.")
    return dtype, tuple(shape), (offs[0], offs[1])


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
        _, shapes[name], _ = safetensors_entry(name, entry, _ST_DTYPES, str(p), len(blob) - 8 - n)
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


# --------------------------------------------------------------------------------------------------
# CatBoost: the .cbm file parsed in Python, the model evaluated with numpy (CatBoost's own loader never sees it)

#: The most trees, the deepest tree and the most approx dimensions (classes) of a CatBoost model dpaudit reads.
MAX_CATBOOST_TREES = 100_000
MAX_CATBOOST_DEPTH = 16
MAX_CATBOOST_DIM = 100_000
_CBM_FORMAT = "FlabuffersModel_v1"      # (sic) what CatBoost writes as its flatbuffers format version
_CBM_LOSSES = {"Logloss": "binary", "CrossEntropy": "binary", "MultiClass": "multiclass"}


class _Fb:
    """A bounds-checked reader of one flatbuffer (CatBoost's model core): every offset, length and field is checked
    against the buffer before it is read, so a corrupt or hostile file is a :class:`DataError`, never a read
    outside it."""

    def __init__(self, buf: bytes, where: Any) -> None:
        self.buf, self.where = buf, where

    def bad(self, why: str) -> DataError:
        return DataError(f"{self.where}: not a CatBoost model dpaudit can read ({why}).")

    def _at(self, fmt: str, pos: int) -> Any:
        import struct

        size = struct.calcsize(fmt)
        if not 0 <= pos <= len(self.buf) - size:
            raise self.bad(f"an offset points outside the file ({pos})")
        return struct.unpack_from("<" + fmt, self.buf, pos)[0]

    def table(self, pos: int) -> tuple[int, list[int]]:
        vt = pos - self._at("i", pos)
        vsize, _tsize = self._at("H", vt), self._at("H", vt + 2)
        if vsize < 4 or vsize % 2:
            raise self.bad("a table's layout is corrupt")
        return pos, [self._at("H", vt + 4 + 2 * i) for i in range((vsize - 4) // 2)]

    @staticmethod
    def _slot(t: tuple[int, list[int]], i: int) -> int | None:
        pos, fields = t
        return pos + fields[i] if i < len(fields) and fields[i] else None

    def scalar(self, t: tuple[int, list[int]], i: int, fmt: str, default: Any) -> Any:
        p = self._slot(t, i)
        return default if p is None else self._at(fmt, p)

    def ref(self, t: tuple[int, list[int]], i: int) -> int | None:
        p = self._slot(t, i)
        return None if p is None else p + self._at("I", p)

    def vector(self, t: tuple[int, list[int]], i: int, dtype: str) -> np.ndarray | None:
        p = self.ref(t, i)
        if p is None:
            return None
        n = self._at("I", p)
        dt = np.dtype(dtype)
        if n * dt.itemsize > len(self.buf) - p - 4:
            raise self.bad(f"a vector of {n} entries runs past the end of the file")
        return np.frombuffer(self.buf, dtype=dt, count=n, offset=p + 4)

    def tables(self, t: tuple[int, list[int]], i: int) -> list[tuple[int, list[int]]]:
        offs = self.vector(t, i, "<u4")
        if offs is None:
            return []
        p = self.ref(t, i) + 4      # type: ignore[operator] - not None: the vector exists
        return [self.table(p + 4 * k + int(o)) for k, o in enumerate(offs)]

    def string(self, pos: int | None) -> str | None:
        if pos is None:
            return None
        n = self._at("I", pos)
        if n > len(self.buf) - pos - 4:
            raise self.bad("a string runs past the end of the file")
        try:
            return self.buf[pos + 4:pos + 4 + n].decode("utf-8")
        except UnicodeDecodeError:
            raise self.bad("a string is not UTF-8") from None


class CatBoostModel:
    """A CatBoost classifier read from its ``.cbm`` file by :func:`load_catboost_file`: symmetric (oblivious) trees
    over numeric features, evaluated with numpy exactly as CatBoost does (features compared as float32 with each
    split's border, leaf index bit ``d`` from the tree's ``d``-th split, raw value ``scale * sum + bias``, then the
    sigmoid (Logloss, CrossEntropy) or the softmax (MultiClass)). ``predict_proba(X)`` and ``classes_`` like
    CatBoost's own classifier."""

    def __init__(self, *, columns: np.ndarray, borders: np.ndarray, nan_true: np.ndarray, splits: np.ndarray,
                 depths: np.ndarray, leaf_offsets: np.ndarray, leaf_values: np.ndarray, dim: int, scale: float,
                 bias: np.ndarray, kind: str, classes: np.ndarray, n_features: int, blob: bytes) -> None:
        self._blob = blob
        self._columns, self._borders, self._nan_true = columns, borders, nan_true
        self._splits, self._depths, self._leaf_offsets = splits, depths, leaf_offsets
        self._leaf_values, self._dim, self._scale, self._bias, self._kind = leaf_values, dim, scale, bias, kind
        self.classes_ = classes
        self.n_features_in_ = n_features
        self.tree_count_ = len(depths)

    def _raw(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=np.float32).reshape(len(X), -1)
        if X.shape[1] != self.n_features_in_:
            raise DataError(f"The CatBoost model takes {self.n_features_in_} features; got {X.shape[1]}.")
        T, D = self._splits.shape
        out = np.empty((len(X), self._dim), dtype=np.float64)
        step = max(1, (1 << 22) // max(1, T * max(D, self._dim)))
        weights = (1 << np.arange(D, dtype=np.int64))
        for a in range(0, len(X), step):
            x = X[a:a + step][:, self._columns]                     # (n, bins): the value each border is applied to
            bits = np.where(np.isnan(x), self._nan_true, x > self._borders)
            bits = np.concatenate([bits, np.zeros((len(x), 1), dtype=bool)], axis=1)   # the padding split: always 0
            leaf = (bits[:, self._splits].astype(np.int64) * weights).sum(axis=2)      # (n, T)
            vals = self._leaf_values[(self._leaf_offsets + leaf)[..., None] * self._dim + np.arange(self._dim)]
            out[a:a + step] = self._scale * vals.sum(axis=1) + self._bias
        return out

    def save_model(self, fname: str | Path, format: str = "cbm") -> None:
        """Write the model back as the very ``.cbm`` bytes it was read from (CatBoost's ``save_model`` API)."""
        if format != "cbm":
            raise DataError(f"A CatBoost model read by dpaudit is written back as .cbm only. Got format {format!r} instead.")
        Path(fname).write_bytes(self._blob)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        raw = self._raw(X)
        if self._kind == "binary":
            z = raw[:, 0]                   # 1 / (1 + exp(-z)) and its complement, without overflow
            return np.stack([np.exp(-np.logaddexp(0.0, z)), np.exp(-np.logaddexp(0.0, -z))], axis=1)
        z = raw - raw.max(axis=1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=1, keepdims=True)


def _cbm_info(fb: _Fb, root: tuple[int, list[int]]) -> dict[str, str]:
    info: dict[str, str] = {}
    for kv in fb.tables(root, 2):
        key = fb.string(fb.ref(kv, 0))
        if key is not None:
            info[key] = fb.string(fb.ref(kv, 1)) or ""
    return info


def _cbm_json(info: Mapping[str, str], key: str, fb: _Fb) -> Any:
    try:
        return json.loads(info[key]) if key in info else None
    except (ValueError, RecursionError):
        raise fb.bad(f"its {key} are not valid JSON") from None


def parse_catboost_model(blob: bytes, where: Any) -> CatBoostModel:
    """Parse and check the bytes of a ``.cbm`` file (see :class:`CatBoostModel`); nothing of it reaches CatBoost's
    native code. Models with categorical, text or embedding features, non-symmetric trees, extra model parts or a
    loss other than Logloss / CrossEntropy / MultiClass are refused, naming what they hold."""
    fb = _Fb(blob, where)
    if len(blob) < 8 or blob[:4] != b"CBM1":
        raise fb.bad("no CatBoost model header")
    core_size = int.from_bytes(blob[4:8], "little")
    if core_size != len(blob) - 8:
        raise fb.bad(f"its model core says {core_size} bytes, the file holds {len(blob) - 8} after the header "
                     "(extra model parts such as CTR tables are not read)")
    fb = _Fb(blob[8:], where)
    root = fb.table(fb._at("I", 0))
    if fb.string(fb.ref(root, 0)) != _CBM_FORMAT:
        raise fb.bad(f"format {str(fb.string(fb.ref(root, 0)))[:40]!r}, expected {_CBM_FORMAT!r}")
    if fb.ref(root, 3) is not None and len(fb.vector(root, 3, "<u4")) > 0:    # type: ignore[arg-type]
        raise fb.bad("it has extra model parts (CTR tables of categorical features)")
    if fb.ref(root, 1) is None:
        raise fb.bad("it has no trees")
    mt = fb.table(fb.ref(root, 1))                                              # type: ignore[arg-type]
    for i, what in ((4, "categorical features"), (6, "one-hot features"), (7, "CTR features"),
                    (10, "non-symmetric trees"), (11, "non-symmetric trees"), (12, "text features"),
                    (13, "estimated features"), (18, "embedding features")):
        v = fb.vector(mt, i, "<u4")
        if v is not None and len(v):
            raise fb.bad(f"it has {what}; dpaudit reads CatBoost models of numeric features with symmetric trees")
    dim = fb.scalar(mt, 0, "i", 0)
    if not 1 <= dim <= MAX_CATBOOST_DIM:
        raise fb.bad(f"approx dimension {dim}")
    sizes = fb.vector(mt, 2, "<i4")
    splits = fb.vector(mt, 1, "<i4")
    starts = fb.vector(mt, 3, "<i4")
    values = fb.vector(mt, 8, "<f8")
    if sizes is None or splits is None or values is None or not 1 <= len(sizes) <= MAX_CATBOOST_TREES:
        raise fb.bad("it has no trees or too many")
    sizes = sizes.astype(np.int64)
    if sizes.min() < 0 or sizes.max() > MAX_CATBOOST_DEPTH:
        raise fb.bad(f"a tree of depth {int(sizes.max()) if sizes.max() > 0 else int(sizes.min())}")
    first = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    if len(splits) != int(sizes.sum()) or (starts is not None and not np.array_equal(starts.astype(np.int64), first)):
        raise fb.bad("its trees' split lists do not add up")
    leaves = (1 << sizes)
    leaf_offsets = np.concatenate([[0], np.cumsum(leaves)[:-1]])
    if len(values) != int(leaves.sum()) * dim or not np.all(np.isfinite(values)):
        raise fb.bad(f"{len(values)} leaf values for {int(leaves.sum())} leaves of {dim} values (or not finite)")
    feats = fb.tables(mt, 5)
    columns, borders, nan_true = [], [], []
    flat = []
    for f in feats:
        idx = fb.scalar(f, 2, "i", -1)
        b = fb.vector(f, 3, "<f4")
        b = np.zeros(0, np.float32) if b is None else b
        nan = fb.scalar(f, 5, "b", 0)
        if nan not in (0, 1, 2):
            raise fb.bad(f"NaN treatment {nan}")
        flat.append(idx)
        columns += [idx] * len(b)
        borders.append(b)
        nan_true += [nan == 2] * len(b)
    n_features = len(feats)
    if flat != list(range(n_features)):
        raise fb.bad("its numeric features are not the columns 0..n-1 in order")
    n_bins = len(columns)
    if len(splits) and (splits.min() < 0 or splits.max() >= n_bins):
        raise fb.bad(f"a split names binary feature {int(splits.max())} of {n_bins}")
    D = int(sizes.max())
    table = np.full((len(sizes), D), n_bins, dtype=np.int64)      # padded with the always-0 split
    for t, (a, d) in enumerate(zip(first.tolist(), sizes.tolist())):
        table[t, :d] = splits[a:a + d]
    scale = fb.scalar(mt, 14, "d", 1.0)
    bias = fb.scalar(mt, 15, "d", 0.0)
    multi = fb.vector(mt, 16, "<f8")
    bias_v = np.asarray(multi, dtype=np.float64) if multi is not None and len(multi) else np.full(dim, bias)
    if len(bias_v) != dim or not np.all(np.isfinite(bias_v)) or not math.isfinite(scale):
        raise fb.bad("its scale or bias is not finite or of the wrong length")
    info = _cbm_info(fb, root)
    params = _cbm_json(info, "params", fb) or {}
    loss = params.get("loss_function", {}) if isinstance(params, dict) else {}
    loss_type = loss.get("type") if isinstance(loss, dict) else None
    kind = _CBM_LOSSES.get(str(loss_type))
    if kind is None or (kind == "binary") != (dim == 1):
        raise fb.bad(f"loss {str(loss_type)[:40]!r} with {dim} raw values; dpaudit reads Logloss, CrossEntropy and "
                     "MultiClass classifiers")
    cp = _cbm_json(info, "class_params", fb)
    want = 2 if kind == "binary" else dim
    names = cp.get("class_names") if isinstance(cp, dict) else None
    if names is None or names == []:        # no labels recorded (probability targets): CatBoost's classes are 0..k-1
        names = list(range(want))
    if (not isinstance(names, list) or len(names) != want or len(set(map(str, names))) != want
            or not all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c < 2**31 for c in names)):
        raise fb.bad(f"its class labels {str(names)[:80]} are not {want} distinct integers >= 0")
    return CatBoostModel(columns=np.asarray(columns, dtype=np.int64), borders=np.concatenate(borders or [np.zeros(0, np.float32)]),
                         nan_true=np.asarray(nan_true, dtype=bool), splits=table, depths=sizes,
                         leaf_offsets=leaf_offsets.astype(np.int64), leaf_values=np.asarray(values, dtype=np.float64),
                         dim=dim, scale=float(scale), bias=bias_v, kind=kind, classes=np.asarray(names, dtype=np.int64),
                         n_features=n_features, blob=bytes(blob))


def load_catboost_file(path: str | Path, *, follow_symlinks: bool = True, what: str = "the model file") -> CatBoostModel:
    """A CatBoost classifier from a ``.cbm`` file, read once (at most :func:`dpaudit._io.max_array_bytes` bytes)
    and parsed by :func:`parse_catboost_model`: CatBoost's own loader, which a crafted file crashes, never runs on
    it."""
    p = Path(path)
    return parse_catboost_model(_read_capped(p, what, follow_symlinks), p)

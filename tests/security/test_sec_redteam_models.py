"""Red-team review of issue 23, model files: a bundle's model file is read without trusting it.

Every hostile file is built here. Before the fixes each of these crashed the auditor's process (segmentation
fault), hung it, wrote outside a heap array, or made it allocate what a sparse file claims; now each is refused
with one ``dpaudit: error:`` line before any library's native code follows what the file says. (The "before"
results are stated per test; they were reproduced in a subprocess, never here.)
"""

from __future__ import annotations

import io
import json
import shutil
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest

from sec_helpers import digits_arrays
from dpaudit.errors import DataError
from dpaudit.training.external import load_sklearn_model


def _one_error(cli, args, *needles):
    code, _, err = cli(args)
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("[dpaudit")]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("dpaudit: error:"), err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def _dump(est, path: Path) -> Path:
    import skops.io as sio

    sio.dump(est, path)
    return path


def _edit_skops(src: Path, dst: Path, fn) -> Path:
    """Rewrite a .skops archive: ``fn(schema, members)`` edits the parsed schema.json and the dict of members."""
    with zipfile.ZipFile(src) as zin:
        members = {n: zin.read(n) for n in zin.namelist()}
    schema = json.loads(members.pop("schema.json"))
    fn(schema, members)
    with zipfile.ZipFile(dst, "w", compression=zipfile.ZIP_DEFLATED) as zout:
        zout.writestr("schema.json", json.dumps(schema))
        for n, b in members.items():
            zout.writestr(n, b)
    return dst


def _tree_state(est, **change):
    """``est.tree_`` with fields of its node table changed (``left_child={0: 10**9}``), through Tree's own state."""
    st = est.tree_.__getstate__()
    nodes = st["nodes"].copy()
    for field, edits in change.items():
        for i, v in edits.items():
            nodes[field][i] = v
    st["nodes"] = nodes
    est.tree_.__setstate__(st)
    return est


@pytest.fixture(scope="module")
def data():
    return digits_arrays()


@pytest.fixture
def tree(data):
    from sklearn.tree import DecisionTreeClassifier

    X, y = data
    return DecisionTreeClassifier(max_depth=4, random_state=0).fit(X, y)


# --------------------------------------------------------------------------------------------------
# scikit-learn trees: indices scikit-learn follows without bounds checks


@pytest.mark.parametrize("change, before", [
    ({"left_child": {0: 10**9}}, "segmentation fault (a child index far outside the node table)"),
    ({"left_child": {0: 0}}, "endless loop (the root is its own child)"),
    ({"right_child": {1: 0}}, "endless loop (a child points back at the root)"),
    ({"feature": {0: 10**9}}, "segmentation fault (a feature index far outside the input row)"),
    ({"feature": {0: -5}}, "reads before the input row"),
    ({"left_child": {3: 3 - 1}}, "a child before its parent: a cycle"),
], ids=["child-far", "root-own-child", "child-to-root", "feature-far", "feature-negative", "child-before-parent"])
def test_a_tree_with_indices_outside_itself_is_refused(tree, tmp_path, change, before):
    p = _dump(_tree_state(tree, **change), tmp_path / "t.skops")
    with pytest.raises(DataError, match="fitted structure is inconsistent"):
        load_sklearn_model(p)


def test_a_tree_whose_node_count_lies_is_clamped_by_scikit_learn(tree, tmp_path):
    """Tried: node_count is read apart from the nodes stored; scikit-learn's resize of a fresh tree clamps it to
    the storage, so skops cannot build such a tree (dpaudit checks the two agree all the same)."""
    def edit(schema, members):
        t = schema["content"]["content"]["tree_"]["content"]["content"]
        t["node_count"].update(content="100000000", __id__=1)     # a fresh id: skops memoises nodes by id

    p = _edit_skops(_dump(tree, tmp_path / "t.skops"), tmp_path / "big.skops", edit)
    back = load_sklearn_model(p)
    assert back.tree_.node_count == back.tree_.capacity == tree.tree_.node_count


def test_a_forest_tree_for_more_features_than_the_forest_is_refused(data, tmp_path):
    from sklearn.ensemble import RandomForestClassifier

    X, y = data
    forest = RandomForestClassifier(3, max_depth=3, random_state=0).fit(X, y)
    wide = RandomForestClassifier(1, max_depth=3, random_state=0).fit(np.hstack([X, X]), y)
    forest.estimators_[0] = wide.estimators_[0]     # the forest checks 64 columns, the tree reads up to 128
    with pytest.raises(DataError, match="takes 128 features, the model 64"):
        load_sklearn_model(_dump(forest, tmp_path / "f.skops"))


@pytest.fixture(scope="module")
def hgb(data):
    from sklearn.ensemble import HistGradientBoostingClassifier

    X, y = data
    return HistGradientBoostingClassifier(max_iter=2, max_leaf_nodes=4, random_state=0).fit(X, y > 4)


@pytest.mark.parametrize("field, value", [("left", 2**31), ("right", 0), ("feature_idx", 10**9)])
def test_a_histogram_boosting_predictor_with_indices_outside_itself_is_refused(hgb, tmp_path, field, value):
    # before: segmentation fault in predict_proba (nodes[node.left], numeric_data[row, node.feature_idx])
    import copy

    m = copy.deepcopy(hgb)
    m._predictors[0][0].nodes[field][0] = value
    with pytest.raises(DataError, match="fitted structure is inconsistent"):
        load_sklearn_model(_dump(m, tmp_path / "h.skops"))


def test_gradient_boosting_stages_wider_than_its_predictions_are_refused(data, tmp_path):
    # before: each stage adds its tree's output into column k of the raw predictions, k taken from the stage
    # matrix's width: 100 columns for an (n, 1) array wrote past the heap buffer (segmentation fault)
    from sklearn.ensemble import GradientBoostingClassifier

    X, y = data
    m = GradientBoostingClassifier(n_estimators=2, max_depth=2, random_state=0).fit(X, y)
    m.init_, m.n_trees_per_iteration_ = "zero", 1
    wide = np.empty((2, 100), dtype=object)
    for i in range(2):
        for k in range(100):
            wide[i, k] = m.estimators_[i, k % 10]
    m.estimators_ = wide
    with pytest.raises(DataError, match="100 stage columns for raw predictions of shape"):
        load_sklearn_model(_dump(m, tmp_path / "g.skops"))


def test_the_forest_bundle_attack_refuses_a_crashing_model(forest_release, tmp_path, cli):
    """End to end: `dpaudit attack` on a dpaudit bundle whose model.skops was replaced (before: exit 139)."""
    b = tmp_path / "bundle"
    shutil.copytree(forest_release(members=100, trees=3), b)

    def edit(schema, members):
        tree = schema["content"]["content"]["estimators_"]["content"][0]["content"]["content"]["tree_"]
        f = tree["content"]["content"]["nodes"]["file"]
        a = np.load(io.BytesIO(members[f]))
        a["left_child"][0] = 10**9
        buf = io.BytesIO()
        np.save(buf, a)
        members[f] = buf.getvalue()

    _edit_skops(b / "model.skops", b / "model.skops", edit)
    _one_error(cli, ["attack", b, "--attack", "threshold", "--bootstrap", "0", "--quiet", "--out", tmp_path / "o"],
               "fitted structure is inconsistent")
    assert not (tmp_path / "o").exists()


# --------------------------------------------------------------------------------------------------
# skops: what a classifier never needs, and sizes from the schema


@pytest.mark.parametrize("smuggled, needle", [
    (getattr, "builtins.getattr"),                     # before: trusted by dpaudit's list, loaded as a value
    (np.sin, "numpy.sin"),                             # a function value (skops trusts numpy ufuncs)
    (bytearray(b"x" * 64), "builtins.bytearray"),               # skops builds list(bytes): 9 bytes per byte
    (bytes(64), "builtins.bytes"),
    (slice(1, 2), "builtins.slice"),
], ids=["getattr", "ufunc", "bytearray", "bytes", "slice"])
def test_functions_bytes_and_slices_in_a_model_are_refused(data, tmp_path, smuggled, needle):
    from sklearn.linear_model import LogisticRegression

    X, y = data
    m = LogisticRegression(max_iter=30).fit(X, y)
    m.smuggled = smuggled
    with pytest.raises(DataError, match=f"outside dpaudit's allow-list: {needle}"):
        load_sklearn_model(_dump(m, tmp_path / "m.skops"))


def test_sparse_coefficients_and_unlisted_estimators_are_refused(data, tmp_path):
    from sklearn.linear_model import LogisticRegression
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer
    from sklearn.svm import SVC

    X, y = data
    sparse = LogisticRegression(max_iter=30).fit(X, y).sparsify()      # scipy's native code trusts its indices
    with pytest.raises(DataError, match="allow-list: scipy.sparse"):
        load_sklearn_model(_dump(sparse, tmp_path / "s.skops"))
    inner = make_pipeline(FunctionTransformer(np.sin), LogisticRegression(max_iter=30)).fit(X, y)
    with pytest.raises(DataError, match="allow-list: sklearn.preprocessing._function_transformer.FunctionTransformer"):
        load_sklearn_model(_dump(inner, tmp_path / "p.skops"))
    for est in (KNeighborsClassifier().fit(X, y), SVC(probability=True).fit(X[:100], y[:100])):
        with pytest.raises(DataError, match="at its top level; accepted there"):
            load_sklearn_model(_dump(est, tmp_path / "k.skops"))


def test_one_array_named_a_thousand_times_is_refused_from_the_schema(data, tmp_path):
    """skops reads an array file again for every node naming it: a 1.2 MB archive naming one 1 MB array 1100
    times made it read 1.1 GB (each read a fresh copy) -- counted now, and refused before skops reads any."""
    from sklearn.linear_model import LogisticRegression

    X, y = data
    src = _dump(LogisticRegression(max_iter=30).fit(X, y), tmp_path / "m.skops")
    buf = io.BytesIO()
    np.save(buf, np.zeros(1 << 17))          # 1 MiB of zeros, a few kB compressed

    def edit(schema, members):
        members["big.npy"] = buf.getvalue()
        node = {"__class__": "ndarray", "__module__": "numpy", "__loader__": "NdArrayNode", "type": "numpy",
                "file": "big.npy"}
        schema["content"]["content"]["junk"] = {
            "__class__": "list", "__module__": "builtins", "__loader__": "ListNode",
            "content": [{**node, "__id__": 10**6 + i} for i in range(1100)], "__id__": 999}

    p = _edit_skops(src, tmp_path / "amp.skops", edit)
    assert p.stat().st_size < 2 << 20
    tracemalloc.start()
    try:
        with pytest.raises(DataError, match="refers to \\(each time it refers to them\\) add up to more than"):
            load_sklearn_model(p)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, peak


def test_a_deeply_nested_or_huge_schema_and_lying_array_headers_are_refused(data, tmp_path, cli):
    from sklearn.linear_model import LogisticRegression

    X, y = data
    src = _dump(LogisticRegression(max_iter=30).fit(X, y), tmp_path / "m.skops")
    deep = tmp_path / "deep.skops"                      # before: RecursionError, an internal error (exit 70)
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(deep, "w") as zout:
        for n in zin.namelist():
            if n == "schema.json":
                s = zin.read(n).decode()
                zout.writestr(n, s[:-1] + ', "deep": ' + "[" * 100_000 + "]" * 100_000 + "}")
            else:
                zout.writestr(n, zin.read(n))
    with pytest.raises(DataError, match="nested too deeply"):
        load_sklearn_model(deep)
    huge = tmp_path / "huge.skops"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(huge, "w", compression=zipfile.ZIP_DEFLATED) as zout:
        for n in zin.namelist():
            b = zin.read(n)
            zout.writestr(n, b[:-1] + b', "pad": "' + b" " * (40 << 20) + b'"}' if n == "schema.json" else b)
    with pytest.raises(DataError, match="schema.json unpacks to"):
        load_sklearn_model(huge)

    def lie(schema, members):
        f = schema["content"]["content"]["coef_"]["file"]
        hdr = io.BytesIO()
        np.lib.format.write_array_header_1_0(hdr, {"descr": "<f8", "fortran_order": False, "shape": (10**11,)})
        members[f] = hdr.getvalue() + bytes(64)

    with pytest.raises(DataError, match="promises 800000000000 bytes of data"):
        load_sklearn_model(_edit_skops(src, tmp_path / "lie.skops", lie))


def test_honest_models_of_every_listed_kind_still_load(data, tmp_path):
    from sklearn.ensemble import GradientBoostingClassifier, HistGradientBoostingClassifier, RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y = data
    for i, m in enumerate([RandomForestClassifier(3, max_depth=3, random_state=0),
                           HistGradientBoostingClassifier(max_iter=3, random_state=0),
                           GradientBoostingClassifier(n_estimators=2, max_depth=2, random_state=0),
                           make_pipeline(StandardScaler(), LogisticRegression(max_iter=30)),
                           MLPClassifier((8,), max_iter=5, random_state=0)]):
        m.fit(X, y)
        back = load_sklearn_model(_dump(m, tmp_path / f"{i}.skops"))
        np.testing.assert_array_equal(back.predict_proba(X), m.predict_proba(X))


# --------------------------------------------------------------------------------------------------
# safetensors: sizes from the header, before any tensor is made


def _with_junk_tensor(src: Path, dst: Path, gib: float) -> Path:
    """``src`` plus a float32 tensor 'junk' of ``gib`` GiB, its data a hole in a sparse file (no disk used)."""
    b = src.read_bytes()
    n = int.from_bytes(b[:8], "little")
    header, body = json.loads(b[8:8 + n]), b[8 + n:]
    count = int(gib * (1 << 30)) // 4
    header["junk"] = {"dtype": "F32", "shape": [count], "data_offsets": [len(body), len(body) + 4 * count]}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(dst, "wb") as fh:
        fh.write(len(text).to_bytes(8, "little") + text + body)
        fh.truncate(8 + len(text) + len(body) + 4 * count)
    return dst


@pytest.fixture(scope="module")
def mlp_bundle(tmp_path_factory):
    from dpaudit.training.data import load_dataset
    from dpaudit.training.ensemble import TrainConfig, fit_classifier
    from dpaudit.training.models import ModelSpec
    from dpaudit.training.release import write_release

    ds = load_dataset("digits", seed=0)
    perm = np.random.default_rng(0).permutation(len(ds))
    mem, non, att = perm[:100], perm[100:200], perm[200:400]
    spec = ModelSpec("mlp", ds.input_shape, ds.num_classes, {"hidden": [8]})
    cfg = TrainConfig(epochs=1)
    clf = fit_classifier(spec, ds.X[mem], ds.y[mem], cfg, 0)
    return write_release(tmp_path_factory.mktemp("mlp") / "b", method="baseline", params={}, seed=0,
                         dataset={"name": "digits", "seed": 0, "num_samples": None}, utility={"test_accuracy": 0.5},
                         classifier=clf, train_config=cfg, ledger=None, statement=None,
                         claim={"epsilon": 1.0, "delta": 1e-5, "granularity": "example", "text": "t"},
                         membership={"members": mem, "nonmembers": non, "attacker": att})


def test_a_sparse_gigabyte_tensor_in_a_bundle_is_refused_from_its_size(mlp_bundle, tmp_path, cli):
    # before: safetensors materialised every tensor the header lists: a 3 GiB hole took 3 GiB (MemoryError under a
    # limit, an OOM kill without one), from 8 kB on disk; a terabyte hole is refused by the bundle's size cap
    b = tmp_path / "b"
    shutil.copytree(mlp_bundle, b)
    _with_junk_tensor(mlp_bundle / "model.safetensors", b / "model.safetensors", 3)
    assert (b / "model.safetensors").stat().st_blocks * 512 < 1 << 20
    _one_error(cli, ["attack", b, "--attack", "threshold", "--bootstrap", "0", "--quiet", "--out", tmp_path / "o"],
               "model.safetensors is 32212", "DPAUDIT_MAX_ARRAY_BYTES")
    _with_junk_tensor(mlp_bundle / "model.safetensors", b / "model.safetensors", 1024)
    _one_error(cli, ["attack", b, "--attack", "threshold", "--bootstrap", "0", "--quiet", "--out", tmp_path / "o"],
               "holds more than 17179869184 bytes of files (model.safetensors among them)")
    assert not (tmp_path / "o").exists()


def test_an_extra_tensor_is_refused_from_the_header_before_any_tensor_is_made(mlp_bundle, tmp_path, monkeypatch):
    import safetensors.torch

    from dpaudit.training.release import load_release

    b = tmp_path / "b"
    shutil.copytree(mlp_bundle, b)
    _with_junk_tensor(mlp_bundle / "model.safetensors", b / "model.safetensors", 0.5)

    def never(*a, **k):
        raise AssertionError("a tensor was materialised before the header was checked")

    monkeypatch.setattr(safetensors.torch, "load", never)
    with pytest.raises(DataError, match="weights do not fit the spec mlp .*unexpected junk"):
        load_release(b)


_H = json.dumps({"w": {"dtype": "F32", "shape": [10**12], "data_offsets": [0, 4]}}).encode()


@pytest.mark.parametrize("blob, needle", [
    ((10**12).to_bytes(8, "little") + b"{}", "header of 1000000000000 bytes"),
    ((100_008).to_bytes(8, "little") + b"[" * 50_000 + b"]" * 50_000 + b"\x00" * 8, "not JSON"),
    (len(_H).to_bytes(8, "little") + _H + bytes(4), "invalid header entry"),
], ids=["header-length", "header-nesting", "tensor-size"])
def test_corrupt_safetensors_headers_are_one_line(tmp_path, blob, needle):
    from dpaudit.training.model_files import load_safetensors_file

    p = tmp_path / "w.safetensors"
    p.write_bytes(blob)
    with pytest.raises(DataError, match=needle):
        load_safetensors_file(p)


# --------------------------------------------------------------------------------------------------
# CatBoost: parsed by dpaudit, evaluated with numpy; CatBoost's loader never sees a bundle's .cbm


@pytest.fixture(scope="module")
def cbm(tmp_path_factory, data):
    from catboost import CatBoostClassifier

    X, y = data
    m = CatBoostClassifier(iterations=15, depth=4, verbose=0, thread_count=1, random_seed=0,
                           allow_writing_files=False).fit(X, y)
    p = tmp_path_factory.mktemp("cb") / "m.cbm"
    m.save_model(str(p))
    return p, m


def test_catboost_models_are_evaluated_exactly_as_catboost_does(cbm, data, tmp_path):
    from catboost import CatBoostClassifier
    from sklearn.datasets import load_breast_cancer

    from dpaudit.training.model_files import load_catboost_file

    X, _ = data
    p, m = cbm
    ours = load_catboost_file(p)
    np.testing.assert_allclose(ours.predict_proba(X), m.predict_proba(X), rtol=0, atol=1e-12)
    assert list(ours.classes_) == list(m.classes_)
    Xb, yb = load_breast_cancer(return_X_y=True)
    Xb = np.where(np.random.default_rng(0).random(Xb.shape) < 0.1, np.nan, Xb)     # NaN handling, labels 3 / 7
    for kw in ({}, {"nan_mode": "Max"}):
        mb = CatBoostClassifier(iterations=10, verbose=0, thread_count=1, random_seed=0, allow_writing_files=False,
                                **kw).fit(Xb, np.where(yb == 1, 7, 3))
        mb.save_model(str(tmp_path / "b.cbm"))
        ob = load_catboost_file(tmp_path / "b.cbm")
        np.testing.assert_allclose(ob.predict_proba(Xb), mb.predict_proba(Xb), rtol=0, atol=1e-12)
        assert list(ob.classes_) == [3, 7] == list(mb.classes_)


def test_mutated_cbm_files_are_refused_or_read_never_crash(cbm, data):
    """Before: CatBoost's own loader crashed (segmentation fault) on one of 200 random byte mutations of a small
    model. dpaudit's reader checks every offset: each of these mutations is a DataError or a well-formed model."""
    import random

    from dpaudit.training.model_files import parse_catboost_model

    X, _ = data
    blob = cbm[0].read_bytes()
    rng = random.Random(0)
    outcomes = {"refused": 0, "read": 0}
    for _ in range(300):
        b = bytearray(blob)
        mode = rng.choice(["flip", "int", "trunc"])
        if mode == "flip":
            for _ in range(rng.randint(1, 8)):
                i = rng.randrange(len(b))
                b[i] ^= 1 << rng.randrange(8)
        elif mode == "int":
            i = rng.randrange(len(b) - 4)
            b[i:i + 4] = rng.choice([b"\xff\xff\xff\x7f", b"\x00\x00\x00\x80", b"\xff\xff\xff\xff",
                                     rng.randrange(1 << 31).to_bytes(4, "little")])
        else:
            b = b[:rng.randrange(len(b))]
        try:
            m = parse_catboost_model(bytes(b), "m.cbm")
            assert m.predict_proba(X[:5]).shape[0] == 5
            outcomes["read"] += 1
        except DataError:
            outcomes["refused"] += 1
    assert outcomes["refused"] > 100, outcomes


def test_catboost_models_with_unsupported_parts_are_named(data, tmp_path):
    import pandas as pd
    from catboost import CatBoostClassifier

    from dpaudit.training.model_files import load_catboost_file

    X, y = data
    df = pd.DataFrame(X[:, :4])
    df["c"] = (y % 3).astype(str)
    m = CatBoostClassifier(iterations=3, verbose=0, thread_count=1, allow_writing_files=False,
                           cat_features=["c"]).fit(df, y)
    m.save_model(str(tmp_path / "c.cbm"))
    with pytest.raises(DataError, match="categorical features|extra model parts"):
        load_catboost_file(tmp_path / "c.cbm")
    d = CatBoostClassifier(iterations=3, verbose=0, thread_count=1, allow_writing_files=False,
                           grow_policy="Depthwise").fit(X, y)
    d.save_model(str(tmp_path / "d.cbm"))
    with pytest.raises(DataError, match="non-symmetric trees"):
        load_catboost_file(tmp_path / "d.cbm")

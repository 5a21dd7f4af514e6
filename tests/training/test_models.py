"""Model specs, the papers' architectures on every input shape, masked batch norm, trees, persistence."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from dpaudit.errors import DataError, ParameterError
from dpaudit.training.models import (
    TORCH_MODELS, Classifier, MaskedBatchNorm, ModelSpec, build_model, load_classifier, save_classifier,
)
from dpaudit.training.ensemble import TrainConfig, fit_classifier

SHAPES = [(1, 8, 8), (1, 28, 28), (3, 32, 32), (1, 40)]


CASES = [(n, s, None) for n in TORCH_MODELS for s in SHAPES] + [
    (n, s, norm) for n in TORCH_MODELS for s in [(1, 8, 8), (1, 40)] for norm in ("batch", "group")]


@pytest.mark.parametrize("name,shape,norm", CASES)
def test_every_architecture_adapts_to_input(name, shape, norm):
    m = build_model(ModelSpec(name, shape, 7, {"norm": norm}))
    out = m(torch.randn(3, *shape))
    assert out.shape == (3, 7)
    kinds = {type(x).__name__ for x in m.modules()}
    assert ("MaskedBatchNorm" in kinds) == (norm == "batch")
    assert ("GroupNorm" in kinds) == (norm == "group")


def test_fredy_defaults_to_batch_norm_and_paper_layer_counts():
    m = build_model(ModelSpec("cnn_fredy", (1, 28, 28), 10))
    convs = [x for x in m.modules() if isinstance(x, torch.nn.Conv2d)]
    dense = [x for x in m.modules() if isinstance(x, torch.nn.Linear)]
    assert len(convs) == 3 and all(c.kernel_size == (3, 3) for c in convs)  # FREDY Sec. 5: three 3x3 convs
    assert len(dense) == 3  # ... and three fully connected layers
    assert any(isinstance(x, MaskedBatchNorm) for x in m.modules())


def test_fedkt_cnn_matches_paper_on_32x32():
    # FedKT Sec. 5: two 5x5 convs (6, 16 channels) with 2x2 max pooling, FC 120, FC 84, output
    m = build_model(ModelSpec("cnn_fedkt", (3, 32, 32), 10))
    convs = [x for x in m.modules() if isinstance(x, torch.nn.Conv2d)]
    dense = [x for x in m.modules() if isinstance(x, torch.nn.Linear)]
    assert [c.out_channels for c in convs] == [6, 16] and all(c.kernel_size == (5, 5) for c in convs)
    assert [d.out_features for d in dense] == [120, 84, 10]
    assert dense[0].in_features == 16 * 5 * 5  # valid convolutions on 32x32


def test_mlp_hidden_sizes():
    m = build_model(ModelSpec("mlp", (1, 28, 28), 10, {"hidden": [200, 200]}))  # ProxyFL's 784-200-200
    dims = [(l.in_features, l.out_features) for l in m.modules() if isinstance(l, torch.nn.Linear)]
    assert dims == [(784, 200), (200, 200), (200, 10)]


@pytest.mark.parametrize("dims", [(6, 4), (6, 4, 5, 5), (6, 4, 9)])
def test_masked_batch_norm_equals_torch_batch_norm(dims):
    torch.manual_seed(0)
    x = torch.randn(*dims) * 3 + 1
    ref = (torch.nn.BatchNorm1d if len(dims) < 4 else torch.nn.BatchNorm2d)(4)
    bn = MaskedBatchNorm(4)
    for _ in range(2):
        torch.testing.assert_close(bn(x), ref(x), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(bn.running_mean, ref.running_mean)
    torch.testing.assert_close(bn.running_var, ref.running_var)
    # with a mask: same as the reference on the real rows only
    bn2, ref2 = MaskedBatchNorm(4), type(ref)(4)
    mask = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    keep = mask.bool()
    torch.testing.assert_close(bn2(x, mask)[keep], ref2(x[keep]), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(bn2.running_var, ref2.running_var)
    # an all-zero mask leaves the running statistics alone
    before = bn2.running_mean.clone()
    bn2(x, torch.zeros(6))
    torch.testing.assert_close(bn2.running_mean, before)
    bn2.eval(), ref2.eval()
    torch.testing.assert_close(bn2(x), ref2(x), rtol=1e-5, atol=1e-5)


def test_spec_validation_and_roundtrip():
    s = ModelSpec("mlp", (1, 8, 8), 10, {"hidden": (32, 16), "norm": "group"})
    assert s.kwargs["hidden"] == [32, 16] and s.is_torch
    assert ModelSpec.from_dict(json.loads(json.dumps(s.to_dict()))) == s
    assert not ModelSpec("catboost", (5,), 2).is_torch
    with pytest.raises(ParameterError, match="'name' parameter of ModelSpec"):
        ModelSpec("resnet", (1, 8, 8), 10)
    with pytest.raises(ParameterError, match="'norm' parameter"):
        ModelSpec("mlp", (1, 8, 8), 10, {"norm": "layer"})
    with pytest.raises(ParameterError, match="'num_classes'"):
        ModelSpec("mlp", (1, 8, 8), 1)
    with pytest.raises(ParameterError):
        build_model(ModelSpec("random_forest", (4,), 2))


def _blobs(n=120, d=4, C=3, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, C, n)
    X = rng.normal(size=(n, d)).astype(np.float32) + 2.0 * y[:, None]
    return X, y


@pytest.mark.parametrize("name,kw", [("decision_tree", {"max_depth": 3}), ("random_forest", {"n_estimators": 5}),
                                     ("hist_gbdt", {"max_iter": 10}), ("catboost", {"iterations": 10})])
def test_trees_fit_predict_save_load(tmp_path, name, kw):
    X, y = _blobs()
    spec = ModelSpec(name, (4,), 4, kw)  # class 3 never occurs: still 4 columns
    clf = fit_classifier(spec, X, y, None, seed=1)
    P = clf.predict_proba(X)
    assert P.shape == (120, 4) and np.allclose(P.sum(1), 1) and np.all(P[:, 3] == 0)
    assert (P.argmax(1) == y).mean() > 0.8
    path = save_classifier(clf, tmp_path / "m")
    assert path.suffix == (".cbm" if name == "catboost" else ".skops")
    back = load_classifier(tmp_path / "m", spec)
    np.testing.assert_allclose(back.predict_proba(X), P)


def test_catboost_single_class_falls_back(tmp_path):
    X, _ = _blobs()
    clf = fit_classifier(ModelSpec("catboost", (4,), 3, {"iterations": 5}), X, np.full(len(X), 2), None, seed=0)
    assert np.all(clf.predict_proba(X)[:, 2] == 1.0)
    save_classifier(clf, tmp_path / "m")
    assert load_classifier(tmp_path / "m.skops", clf.spec).predict_proba(X[:3]).shape == (3, 3)


def test_skops_untrusted_type_refused(tmp_path):
    import skops.io as sio
    from sklearn.preprocessing import FunctionTransformer

    import os

    from sklearn.tree import DecisionTreeClassifier

    sio.dump(FunctionTransformer(func=np.sin), tmp_path / "m.skops")
    with pytest.raises(DataError, match="holds a FunctionTransformer"):  # wrong top-level class, checked first
        load_classifier(tmp_path / "m", ModelSpec("decision_tree", (4,), 2))
    # a tree whose attribute smuggles a dangerous callable: the type is outside the allow-list
    X, y = _blobs()
    tree = DecisionTreeClassifier(max_depth=2).fit(X, y)
    tree.smuggled = os.system
    sio.dump(tree, tmp_path / "t.skops")
    with pytest.raises(DataError, match="allow-list.*posix.system"):
        load_classifier(tmp_path / "t", ModelSpec("decision_tree", (4,), 3))


def test_torch_save_load_roundtrip(tmp_path):
    X, y = _blobs()
    spec = ModelSpec("mlp", (4,), 3, {"hidden": [16], "norm": "batch"})
    clf = fit_classifier(spec, X, y, TrainConfig(epochs=3, batch_size=32, lr=1e-2), seed=0)
    p = save_classifier(clf, tmp_path / "m")
    assert p.name == "m.safetensors" and (tmp_path / "m.json").is_file()
    back = load_classifier(p, spec)
    np.testing.assert_allclose(back.predict_proba(X), clf.predict_proba(X), rtol=1e-6)
    np.testing.assert_allclose(back.logits(X), clf.logits(X), rtol=1e-6)
    with pytest.raises(DataError, match="do not fit"):
        load_classifier(p, ModelSpec("mlp", (4,), 3, {"hidden": [8]}))
    with pytest.raises(DataError, match="not found"):
        load_classifier(tmp_path / "other", spec)
    (tmp_path / "bad.safetensors").write_bytes(b"garbage")
    with pytest.raises(DataError, match="safetensors"):
        load_classifier(tmp_path / "bad.safetensors", spec)
    with pytest.raises(ParameterError, match="torch models only"):
        fit_classifier(ModelSpec("decision_tree", (4,), 3), X, y).logits(X)


@pytest.mark.parametrize("name,shape,params", [
    # ProxyFL's reference code (model.py): CNN1 3x3 convs 6/16, pooled, dense 64; CNN2 3x3 convs 128/128, pooled;
    # LeNet5 without padding (fc input 16*4*4 on MNIST). Counts from those layer shapes.
    ("cnn1_proxyfl", (3, 32, 32), 3 * 6 * 9 + 6 + 6 * 16 * 9 + 16 + 16 * 6 * 6 * 64 + 64 + 64 * 10 + 10),
    ("cnn2_proxyfl", (3, 32, 32), 3 * 128 * 9 + 128 + 128 * 128 * 9 + 128 + 128 * 6 * 6 * 10 + 10),
    ("cnn1_proxyfl", (1, 28, 28), 6 * 9 + 6 + 6 * 16 * 9 + 16 + 16 * 5 * 5 * 64 + 64 + 64 * 10 + 10),
    ("lenet5", (1, 28, 28), 6 * 25 + 6 + 6 * 16 * 25 + 16 + 16 * 4 * 4 * 120 + 120 + 120 * 84 + 84 + 84 * 10 + 10),
])
def test_reference_variants_match_the_reference_layer_shapes(name, shape, params):
    from dpaudit.training.models import ModelSpec, build_model

    m = build_model(ModelSpec(name, shape, 10, {"variant": "reference"}))
    assert sum(p.numel() for p in m.parameters()) == params
    assert m(torch.zeros(2, *shape)).shape == (2, 10)
    default = build_model(ModelSpec(name, shape, 10))
    assert sum(p.numel() for p in default.parameters()) != params
    with pytest.raises(ParameterError, match="'variant'"):
        build_model(ModelSpec("cnn_fredy", shape, 10, {"variant": "reference"}))


def test_canonical_safetensors_same_bytes_whatever_the_metadata_order():
    # safetensors writes its metadata in Rust HashMap order (random per process): a resumed run's release had
    # other bytes than an uninterrupted one's. The canonical header is sorted; the file still loads the same.
    import tempfile

    from safetensors import safe_open
    from safetensors.torch import load, save

    from dpaudit.training.models import canonical_safetensors

    tensors = {"b.weight": torch.arange(6.0).reshape(2, 3), "a.bias": torch.ones(3, dtype=torch.float64)}
    meta = {f"k{i}": str(i) * i for i in range(1, 9)}
    blobs = {canonical_safetensors(save(dict(reversed(tensors.items())) if i % 2 else tensors,
                                        metadata=dict(reversed(meta.items())) if i % 3 else meta)) for i in range(6)}
    assert len(blobs) == 1
    blob = blobs.pop()
    assert int.from_bytes(blob[:8], "little") % 8 == 0
    back = load(blob)
    assert set(back) == set(tensors) and all(torch.equal(back[k], v) for k, v in tensors.items())
    with tempfile.NamedTemporaryFile(suffix=".safetensors") as fh:
        fh.write(blob)
        fh.flush()
        with safe_open(fh.name, "pt") as f:
            assert f.metadata() == meta

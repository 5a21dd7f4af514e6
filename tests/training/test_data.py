"""Data sets: embedded/generated ones, loaders of tiny files in each real format, splits."""

from __future__ import annotations

import gzip
import pickle
import pickletools
import struct

import numpy as np
import pytest

from dpaudit.errors import DataError, ParameterError
from dpaudit.training.data import DATASETS, Dataset, load_dataset, split_dataset


def test_digits_shape_and_scale():
    ds = load_dataset("digits")
    assert ds.X.shape == (1797, 1, 8, 8) and ds.X.dtype == np.float32 and ds.y.dtype == np.int64
    assert ds.X.min() == 0.0 and ds.X.max() == 1.0
    assert ds.num_classes == 10 and ds.input_shape == (1, 8, 8)


def test_breast_cancer_standardised():
    ds = load_dataset("breast_cancer")
    assert ds.X.shape == (569, 30) and ds.num_classes == 2
    np.testing.assert_allclose(ds.X.mean(0), 0, atol=1e-5)
    np.testing.assert_allclose(ds.X.std(0), 1, atol=1e-4)


def test_mnist1d_generated_offline_seeded_and_leaves_global_rng(monkeypatch):
    import requests

    def no_network(*a, **k):  # the generator must never touch the download path
        raise AssertionError("network access")

    monkeypatch.setattr(requests, "get", no_network)
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    a = load_dataset("mnist1d", num_samples=200, seed=1)
    assert np.array_equal(np.random.get_state()[1], before)
    b = load_dataset("mnist1d", num_samples=200, seed=1)
    c = load_dataset("mnist1d", num_samples=200, seed=2)
    assert a.X.shape == (200, 1, 40) and a.num_classes == 10
    assert np.array_equal(a.X, b.X) and not np.array_equal(a.X, c.X)
    assert set(np.unique(a.y)) == set(range(10))


def test_synthetic_seeded():
    a, b = load_dataset("synthetic", num_samples=300, seed=4), load_dataset("synthetic", num_samples=300, seed=4)
    assert a.X.shape == (300, 20) and np.array_equal(a.X, b.X) and np.array_equal(a.y, b.y)


def test_num_samples_subsamples_embedded():
    ds = load_dataset("digits", num_samples=100, seed=3)
    assert len(ds) == 100
    assert np.array_equal(ds.X, load_dataset("digits", num_samples=100, seed=3).X)


def test_bad_name_and_missing_data_dir():
    with pytest.raises(ParameterError, match="'name' parameter of load_dataset"):
        load_dataset("imagenet")
    with pytest.raises(DataError, match="data_dir"):
        load_dataset("mnist")


def test_splits_disjoint_and_seeded():
    ds = load_dataset("digits")
    s = split_dataset(ds, seed=0, public_fraction=0.25, test_fraction=0.1, attacker_fraction=0.15)
    parts = [s.train, s.public, s.test, s.attacker]
    allidx = np.concatenate(parts)
    assert len(np.unique(allidx)) == len(allidx) == len(ds)
    assert len(s.public) == int(0.25 * len(ds)) and len(s.test) == int(0.1 * len(ds))
    s2 = split_dataset(ds, seed=0, public_fraction=0.25, test_fraction=0.1, attacker_fraction=0.15)
    assert np.array_equal(s.train, s2.train)
    assert not np.array_equal(s.train, split_dataset(ds, seed=1, public_fraction=0.25, test_fraction=0.1, attacker_fraction=0.15).train)
    with pytest.raises(ParameterError, match="sum to less than 1"):
        split_dataset(ds, seed=0, public_fraction=0.5, test_fraction=0.3, attacker_fraction=0.2)


def test_dataset_subset_and_validation():
    ds = load_dataset("breast_cancer")
    sub = ds.subset([3, 1])
    assert len(sub) == 2 and np.array_equal(sub.X[0], ds.X[3])
    with pytest.raises(DataError):
        ds.subset([len(ds)])
    with pytest.raises(DataError):
        Dataset("x", np.zeros((3, 2)), np.array([0, 1, 5]), 2, (2,))


# ---- real formats, written tiny -----------------------------------------------------------------


def _idx_bytes(arr: np.ndarray) -> bytes:
    return bytes([0, 0, 0x08, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.astype(np.uint8).tobytes()


@pytest.mark.parametrize("name,sub", [("mnist", ""), ("fashion_mnist", "fashion_mnist")])
def test_idx_loader(tmp_path, name, sub):
    d = tmp_path / sub
    d.mkdir(exist_ok=True)
    rng = np.random.default_rng(0)
    tr, te = rng.integers(0, 256, (5, 28, 28)), rng.integers(0, 256, (3, 28, 28))
    (d / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(_idx_bytes(tr)))
    (d / "train-labels-idx1-ubyte.gz").write_bytes(gzip.compress(_idx_bytes(np.array([0, 1, 2, 3, 9]))))
    (d / "t10k-images-idx3-ubyte").write_bytes(_idx_bytes(te))  # plain, not gzip
    (d / "t10k-labels-idx1-ubyte").write_bytes(_idx_bytes(np.array([4, 5, 6])))
    ds = load_dataset(name, data_dir=tmp_path)
    assert ds.X.shape == (8, 1, 28, 28) and list(ds.y) == [0, 1, 2, 3, 9, 4, 5, 6]
    np.testing.assert_allclose(ds.X[5, 0] * 255, te[0], atol=1e-3)


def test_idx_missing_file_names_file_and_dir(tmp_path):
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte.*" + str(tmp_path).replace("/", ".")):
        load_dataset("mnist", data_dir=tmp_path)


def test_idx_truncated(tmp_path):
    (tmp_path / "train-images-idx3-ubyte").write_bytes(_idx_bytes(np.zeros((5, 28, 28)))[:-10])
    with pytest.raises(DataError, match="promises"):
        load_dataset("mnist", data_dir=tmp_path)


def _cifar_batch(n, seed, protocol=2):
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
    labels = [int(v) for v in rng.integers(0, 10, n)]
    d = {b"batch_label": b"training batch", b"labels": labels, b"data": data, b"filenames": [b"f.png"] * n}
    return pickle.dumps(d, protocol=protocol), data, labels


@pytest.mark.parametrize("protocol", [2, 4])
def test_cifar10_parsed_without_unpickling(tmp_path, monkeypatch, protocol):
    d = tmp_path / "cifar-10-batches-py"
    d.mkdir()
    want = []
    for k, f in enumerate([f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]):
        raw, data, labels = _cifar_batch(2 + k % 2, k, protocol)
        (d / f).write_bytes(raw)
        want.append((data, labels))

    def forbidden(*a, **k):
        raise AssertionError("pickle.load(s) must never be called on a user's file")

    monkeypatch.setattr(pickle, "load", forbidden)
    monkeypatch.setattr(pickle, "loads", forbidden)
    ds = load_dataset("cifar10", data_dir=tmp_path)
    assert ds.X.shape == (sum(len(l) for _, l in want), 3, 32, 32)
    assert list(ds.y) == [v for _, l in want for v in l]
    np.testing.assert_allclose(ds.X[0].reshape(-1) * 255, want[0][0][0], atol=1e-3)


class _Evil:
    def __reduce__(self):
        import os

        return (os.system, ("touch /tmp/dpaudit_pwned",))


def test_cifar10_refuses_foreign_globals(tmp_path):
    d = tmp_path / "cifar-10-batches-py"
    d.mkdir()
    (d / "data_batch_1").write_bytes(pickle.dumps({b"data": _Evil(), b"labels": [1]}, protocol=2))
    import os

    with pytest.raises(DataError, match="refusing"):
        load_dataset("cifar10", data_dir=tmp_path)
    assert not os.path.exists("/tmp/dpaudit_pwned")
    # wrong structure (labels not ints) is refused too
    raw, data, _ = _cifar_batch(2, 0)
    (d / "data_batch_1").write_bytes(pickle.dumps({b"data": data, b"labels": ["a", "b"]}, protocol=2))
    with pytest.raises(DataError, match="labels"):
        load_dataset("cifar10", data_dir=tmp_path)


def test_cifar10_python2_style_strings(tmp_path):
    # Python 2 wrote str as SHORT_BINSTRING/BINSTRING; emulate by rewriting the py3 stream's _codecs calls
    from dpaudit.training.data import _parse_restricted_pickle

    payload = bytes(range(6))
    stream = (b"\x80\x02}q\x00(U\x04dataq\x01U\x06" + payload + b"q\x02U\x06labelsq\x03]q\x04(K\x01K\x02eu.")
    obj = _parse_restricted_pickle(stream, "py2")
    assert obj == {b"data": payload, b"labels": [1, 2]}
    pickletools.dis(stream, out=open(tmp_path / "dis.txt", "w"))  # a valid pickle stream


def test_svhn_mat(tmp_path):
    from scipy.io import savemat

    rng = np.random.default_rng(0)
    for f, n in (("train_32x32.mat", 4), ("test_32x32.mat", 2)):
        X = rng.integers(0, 256, (32, 32, 3, n), dtype=np.uint8)
        y = np.array([[10], [1], [2], [3]][:n], dtype=np.uint8)
        savemat(tmp_path / f, {"X": X, "y": y})
    ds = load_dataset("svhn", data_dir=tmp_path)
    assert ds.X.shape == (6, 3, 32, 32)
    assert list(ds.y) == [0, 1, 2, 3, 0, 1]  # label 10 means digit 0


def test_adult_csv(tmp_path):
    rows = [
        "39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, White, Male, 2174, 0, 40, United-States, <=50K",
        "50, Self-emp-not-inc, 83311, Bachelors, 13, Married-civ-spouse, Exec-managerial, Husband, White, Male, 0, 0, 13, United-States, >50K",
        "38, Private, 215646, HS-grad, 9, Divorced, Handlers-cleaners, Not-in-family, White, Male, 0, 0, 40, ?, <=50K",
    ]
    (tmp_path / "adult.data").write_text("\n".join(rows) + "\n\n")
    (tmp_path / "adult.test").write_text("|1x3 Cross validator\n" + rows[1].replace(">50K", ">50K.") + "\n")
    ds = load_dataset("adult", data_dir=tmp_path)
    assert list(ds.y) == [0, 1, 0, 1] and ds.num_classes == 2
    # 6 standardised numeric columns + one-hot: workclass 3, education 2, marital 3, occupation 3,
    # relationship 2, race 1, sex 1, country 2 (the '?' is its own category)
    assert ds.X.shape == (4, 6 + 3 + 2 + 3 + 3 + 2 + 1 + 1 + 2)
    np.testing.assert_allclose(ds.X[:, :6].mean(0), 0, atol=1e-6)
    (tmp_path / "adult.test").write_text("1, 2, 3\n")
    with pytest.raises(DataError, match="15 comma-separated"):
        load_dataset("adult", data_dir=tmp_path)
    # a bare carriage return inside a field (found by the slow loader fuzz) is one clear error, not csv.Error
    (tmp_path / "adult.test").write_text("\r0\n")
    with pytest.raises(DataError, match="15 comma-separated"):
        load_dataset("adult", data_dir=tmp_path)


def test_registry_lists_everything():
    assert set(DATASETS) == {"digits", "breast_cancer", "mnist1d", "synthetic", "mnist", "fashion_mnist",
                             "cifar10", "svhn", "adult", "svhn_extra", "adult_a9a", "cifar100", "cod_rna"}


# --------------------------------------------------------------------------------------------------
# the loaders FedKT / FREDY need at paper scale (issue 16): tiny files in the real formats


def test_svhn_extra_adds_the_extra_file(tmp_path):
    from scipy.io import savemat

    rng = np.random.default_rng(0)
    d = tmp_path / "svhn"
    d.mkdir()
    for f, n in (("train_32x32.mat", 3), ("test_32x32.mat", 2), ("extra_32x32.mat", 4)):
        savemat(d / f, {"X": rng.integers(0, 256, (32, 32, 3, n), dtype=np.uint8),
                        "y": np.array([[10], [1], [2], [3]][:n], dtype=np.uint8)})
    ds = load_dataset("svhn_extra", data_dir=tmp_path)
    assert ds.X.shape == (9, 3, 32, 32) and ds.name == "svhn_extra" and list(ds.y[-4:]) == [0, 1, 2, 3]
    assert len(load_dataset("svhn", data_dir=tmp_path)) == 5  # plain svhn ignores the extra file
    (d / "extra_32x32.mat").unlink()
    with pytest.raises(DataError, match="extra_32x32.mat"):
        load_dataset("svhn_extra", data_dir=tmp_path)


def test_libsvm_a9a_and_cod_rna(tmp_path):
    (tmp_path / "a9a").write_text("-1 3:1 11:1 123:1\n+1 1:1 5:1\n")
    (tmp_path / "a9a.t").write_text("-1 2:1 # comment\n\n")
    ds = load_dataset("adult_a9a", data_dir=tmp_path)
    assert ds.X.shape == (3, 123) and list(ds.y) == [0, 1, 0] and ds.num_classes == 2
    assert ds.X[0, [2, 10, 122]].tolist() == [1, 1, 1] and ds.X[0].sum() == 3
    (tmp_path / "cod-rna").write_text("1 1:-766 2:0.5 3:0.1 4:0.2 5:0.3 6:0.4 7:0.5 8:0.6\n-1 1:-200 2:0.1 8:0.3\n")
    (tmp_path / "cod-rna.t").write_text("-1 1:-300 2:0.2 3:0.3 4:0.4 5:0.5 6:0.6 7:0.7 8:0.8\n")
    cr = load_dataset("cod_rna", data_dir=tmp_path)
    assert cr.X.shape == (3, 8) and list(cr.y) == [1, 0, 0]
    np.testing.assert_allclose(cr.X.mean(axis=0), 0, atol=1e-5)  # standardised
    (tmp_path / "cod-rna.t").write_text("-1 9:1\n")
    with pytest.raises(DataError, match="outside 1..8"):
        load_dataset("cod_rna", data_dir=tmp_path)
    (tmp_path / "cod-rna.t").write_text("x 1:1\n")
    with pytest.raises(DataError, match="LIBSVM"):
        load_dataset("cod_rna", data_dir=tmp_path)


def test_cifar100_fine_labels_without_unpickling(tmp_path, monkeypatch):
    d = tmp_path / "cifar-100-python"
    d.mkdir()
    rng = np.random.default_rng(0)
    want = []
    for f, n in (("train", 3), ("test", 2)):
        data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        fine = [int(v) for v in rng.integers(0, 100, n)]
        (d / f).write_bytes(pickle.dumps({b"filenames": [b"x"] * n, b"batch_label": b"b", b"fine_labels": fine,
                                          b"coarse_labels": [0] * n, b"data": data}, protocol=2))
        want += fine

    def forbidden(*a, **k):
        raise AssertionError("pickle.load(s) must never be called on a user's file")

    monkeypatch.setattr(pickle, "load", forbidden)
    monkeypatch.setattr(pickle, "loads", forbidden)
    ds = load_dataset("cifar100", data_dir=tmp_path)
    assert ds.X.shape == (5, 3, 32, 32) and list(ds.y) == want and ds.num_classes == 100


def test_embedded_data_sets_are_parsed_once_and_handed_out_as_copies(monkeypatch):
    import sklearn.datasets

    import dpaudit.training.data as data

    calls = []
    real = sklearn.datasets.load_digits

    def counting():
        calls.append(1)
        return real()

    monkeypatch.setattr(data, "_EMBEDDED", {})
    monkeypatch.setattr(sklearn.datasets, "load_digits", counting)
    a, b = data.load_dataset("digits"), data.load_dataset("digits")
    assert len(calls) == 1
    assert np.array_equal(a.X, b.X) and np.array_equal(a.y, b.y)
    a.X[0] += 1.0
    a.y[0] = (a.y[0] + 1) % 10
    c = data.load_dataset("digits")
    assert np.array_equal(c.X, b.X) and np.array_equal(c.y, b.y)  # a caller's edit reaches no one else

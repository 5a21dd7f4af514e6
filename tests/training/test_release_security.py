"""Release bundles a user was handed: nothing in them reads files elsewhere, allocates without bound, or unpickles.

Each planted-pickle kind and each malformed field from the fuzzing findings is refused with one DataError naming
the file (and field).
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import zipfile

import numpy as np
import pytest

from dpaudit.errors import DataError
from dpaudit.training.data import load_dataset
from dpaudit.training.ensemble import fit_classifier
from dpaudit.training.models import ModelSpec
from dpaudit.training.release import load_release, write_release


def _release(path, spec, data_dir=None):
    ds = load_dataset("digits")
    perm = np.random.default_rng(0).permutation(len(ds))
    mem, non, att = perm[:200], perm[200:400], perm[400:800]
    cfg = None
    if spec.is_torch:
        from dpaudit.training.ensemble import TrainConfig
        cfg = TrainConfig(epochs=1, batch_size=64, lr=1e-2)
    clf = fit_classifier(spec, ds.X[mem], ds.y[mem], cfg, 0)
    dspec = {"name": "digits", "seed": 0, "num_samples": None}
    if data_dir is not None:
        dspec["data_dir"] = str(data_dir)
    return write_release(path, method="baseline", dataset=dspec, params={}, seed=0, utility={"test_accuracy": 0.5},
                         classifier=clf, train_config=cfg, ledger=None, statement=None,
                         claim={"epsilon": 1.0, "delta": 1e-5, "granularity": "example", "text": "t"},
                         membership={"members": mem, "nonmembers": non, "attacker": att}, votes=np.ones((3, 10)))


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    root = tmp_path_factory.mktemp("bundles")
    forest = _release(root / "forest", ModelSpec("random_forest", (1, 8, 8), 10, {"n_estimators": 3}))
    old = os.umask(0o022)
    try:
        mlp = _release(root / "mlp", ModelSpec("mlp", (1, 8, 8), 10, {"hidden": [8]}))
    finally:
        os.umask(old)
    return forest, mlp


@pytest.fixture
def copy(bundles, tmp_path):
    made = []

    def make(which: int = 0):
        made.append(which)
        dst = tmp_path / f"b{len(made)}"
        shutil.copytree(bundles[which], dst)
        return dst
    return make


def _edit(bundle, fn):
    p = bundle / "release.json"
    meta = json.loads(p.read_text())
    fn(meta)
    p.write_text(json.dumps(meta))


def test_every_bundle_file_is_written_with_the_umask_mode(bundles):
    _, mlp = bundles
    modes = {f.name: f.stat().st_mode & 0o777 for f in mlp.iterdir()}
    assert modes["model.safetensors"] == 0o644 and set(modes.values()) == {0o644}, modes


@pytest.mark.parametrize("name", ["model.skops", "membership.npz", "release.json", "votes.npy"])
def test_a_symlinked_bundle_file_is_refused(copy, tmp_path, name):
    b = copy()
    outside = tmp_path / f"outside-{name}"
    shutil.copy(b / name, outside)
    (b / name).unlink()
    (b / name).symlink_to(outside)
    with pytest.raises(DataError, match=f"{name} is a symbolic link"):
        load_release(b)


def test_a_bundle_directory_that_is_a_symlink_is_refused(copy, tmp_path):
    link = tmp_path / "link"
    link.symlink_to(copy(), target_is_directory=True)
    with pytest.raises(DataError, match="is a symbolic link"):
        load_release(link)


def test_data_dir_outside_the_bundle_needs_the_users_confirmation(copy, tmp_path):
    b = copy()
    _edit(b, lambda m: m["dataset"].__setitem__("data_dir", "/etc"))
    with pytest.raises(DataError, match="outside the bundle.*data_dir=DIR.*trust_data_dir=True"):
        load_release(b)
    assert load_release(b, trust_data_dir=True).meta["dataset"]["data_dir"] == "/etc"
    assert load_release(b, data_dir=tmp_path).meta["dataset"]["data_dir"] == str(tmp_path)
    _edit(b, lambda m: m["dataset"].__setitem__("data_dir", "../.."))
    with pytest.raises(DataError, match="outside the bundle"):
        load_release(b)
    (b / "data").mkdir()
    _edit(b, lambda m: m["dataset"].__setitem__("data_dir", "data"))  # inside: read relative to the bundle
    assert load_release(b).meta["dataset"]["data_dir"] == str((b / "data").resolve())


def test_attack_cli_asks_before_following_a_bundles_data_dir(copy, capsys):
    from dpaudit.cli import main

    b = copy()
    _edit(b, lambda m: m["dataset"].__setitem__("data_dir", "/etc"))
    with pytest.raises(SystemExit) as exc:
        main(["attack", str(b), "--attack", "threshold", "--bootstrap", "0", "--classifier", "logreg"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--trust-data-dir" in err and err.count("\n") == 1


@pytest.mark.parametrize("field,value,match", [
    ("dataset.seed", "abc", "dataset.seed"),
    ("dataset.seed", 2**70, "dataset.seed"),
    ("dataset.num_records", 10**12, "dataset.num_records"),
    ("dataset.name", 5, "dataset.name"),
    ("dataset.data_dir", 5, "data_dir"),
    ("claim", "x", "'claim' must be an object"),
    ("claim.delta", "abc", "claim.delta"),
    ("model.train_config", "x", "train_config"),
    ("model.train_config", {"epochs": "x"}, "train_config"),
    ("model.spec", "x", "model.spec"),
    ("model.spec.num_classes", 10**12, "num_classes"),
    ("model.spec.input_shape", [10**9, 10**9], "input_shape"),
    ("model.spec.kwargs", {"hidden": [10**12]}, "kwargs.hidden"),
    ("model.file", "../x", "plain file name"),
    ("model.file", 5, "plain file name"),
    ("seed", "abc", "seed"),
    ("method", 5, "'method'"),
    ("utility", "x", "'utility'"),
    ("flags", [1], "flags"),
    ("schema", "1", "schema"),
])
def test_malformed_release_json_fields_are_named(copy, field, value, match):
    b = copy()

    def put(meta):
        *path, last = field.split(".")
        d = meta
        for k in path:
            d = d[k]
        d[last] = value

    _edit(b, put)
    with pytest.raises(DataError, match=match):
        load_release(b)


def test_a_spec_larger_than_its_weights_file_is_refused_before_building(copy):
    b = copy(1)
    _edit(b, lambda m: m["model"]["spec"]["kwargs"].__setitem__("hidden", [1_000_000]))
    with pytest.raises(DataError, match="weights but the file holds only"):
        load_release(b)


def test_truncated_and_bomb_membership_files(copy):
    b = copy()
    raw = (b / "membership.npz").read_bytes()
    (b / "membership.npz").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(DataError, match="membership file .*not a readable .npz"):
        load_release(b)
    # a real zip bomb: 64 MB of zeros packed into ~64 kB, far beyond what 1797 records' indices can take
    b = copy()
    with zipfile.ZipFile(b / "membership.npz", "w", zipfile.ZIP_DEFLATED) as zf:
        for key, n in (("members", 8 << 20), ("nonmembers", 3), ("attacker", 3)):
            buf = __import__("io").BytesIO()
            np.save(buf, np.zeros(n, dtype=np.int64))
            zf.writestr(f"{key}.npy", buf.getvalue())
    assert (b / "membership.npz").stat().st_size < 1 << 20
    with pytest.raises(DataError, match="would unpack to"):
        load_release(b)


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch /tmp/dpaudit-pwned",))


def _pickle_npy(arr_obj) -> bytes:
    import io
    buf = io.BytesIO()
    np.save(buf, np.array([arr_obj, 1], dtype=object), allow_pickle=True)
    return buf.getvalue()


# Seven kinds of planted pickle; each must be refused without running it.
PLANTS = {
    "votes.npy object array": lambda b: (b / "votes.npy").write_bytes(_pickle_npy(_Evil())),
    "membership.npz object member": lambda b: np.savez(b / "membership.npz", members=np.array([_Evil()], dtype=object),
                                                        nonmembers=np.arange(3), attacker=np.arange(3, 6)),
    "membership.npz raw pickle member": lambda b: _zip_with(b / "membership.npz", "members.npy", pickle.dumps(_Evil())),
    "membership.npz is a pickle": lambda b: (b / "membership.npz").write_bytes(pickle.dumps(_Evil())),
    "model file is a pickle": lambda b: (b / "model.skops").write_bytes(pickle.dumps(_Evil())),
    "skops with an untrusted type": lambda b: _zip_with(b / "model.skops", "schema.json", json.dumps(
        {"__class__": "RandomForestClassifier", "__module__": "posix", "__loader__": "ObjectNode"}).encode()),
    "release.json holds a pickle": lambda b: (b / "release.json").write_bytes(pickle.dumps(_Evil())),
}


def _zip_with(path, name, payload):
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(name, payload)


@pytest.mark.parametrize("kind", list(PLANTS))
def test_planted_pickles_are_refused_and_never_run(copy, kind, monkeypatch):
    def forbidden(*a, **k):
        raise AssertionError("pickle must never be loaded from a release bundle")

    b = copy()
    PLANTS[kind](b)  # planted before the guards go up (writing the pickle looks up os.system)
    monkeypatch.setattr(pickle, "load", forbidden)
    monkeypatch.setattr(pickle, "loads", forbidden)
    monkeypatch.setattr(os, "system", forbidden)
    with pytest.raises(DataError):
        load_release(b)

"""[canaries] in method configs: validation, planting in centrain's released model, the bundle's canary files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dpaudit._io import save_npz
from dpaudit.errors import DataError, ParameterError
from dpaudit.training.canaries import CanarySettings, make_canaries
from dpaudit.training.methods import load_method_config, run_method
from dpaudit.training.methods.fl_common import model_spec_from
from dpaudit.training.release import load_release

pytestmark = pytest.mark.usefixtures("one_torch_thread")

DP = {"method.noise_multiplier": 1.0}


def _params(kind="mislabeled", count=10, **extra):
    return {"method.epochs": 1, "model.hidden": [8], "canaries.kind": kind, "canaries.count": count, **extra}


def test_canary_settings_validation():
    assert CanarySettings().to_dict() == {"kind": "mislabeled", "count": 100, "seed": 0}
    with pytest.raises(ParameterError, match=r"'kind' parameter of \[canaries\].*'poison'"):
        CanarySettings(kind="poison")
    with pytest.raises(ParameterError, match=r"'count' parameter of \[canaries\].*\[2, 1000000\]. Got 1"):
        CanarySettings(count=1)
    with pytest.raises(ParameterError, match=r"'seed' parameter of \[canaries\]"):
        CanarySettings(seed=-1)


def test_config_tables_and_method_support(tmp_path):
    cfg = load_method_config("centrain", params=_params("ood", 7))
    assert cfg.canaries == CanarySettings("ood", 7, 0)
    assert cfg.fingerprint(0)["canaries"] == {"kind": "ood", "count": 7, "seed": 0}
    assert load_method_config("centrain").canaries is None and "canaries" not in load_method_config("centrain").fingerprint(0)
    f = tmp_path / "c.toml"
    f.write_text('[method]\nepochs = 1\n[canaries]\nkind = "mislabeled"\ncount = 5\nseed = 3\n')
    assert load_method_config("centrain", f).canaries == CanarySettings("mislabeled", 5, 3)
    assert load_method_config("centrain", f, sets=["canaries.count=9"]).canaries.count == 9
    with pytest.raises(ParameterError, match=r"Unknown setting\(s\) \['size'\] in \[canaries\]"):
        load_method_config("centrain", params={"canaries.size": 3})
    with pytest.raises(ParameterError, match=r"'kind' parameter of \[canaries\] of centrain may be 'dirac' only with DP-SGD"):
        load_method_config("centrain", params=_params("dirac"))
    assert load_method_config("centrain", params=_params("dirac", **DP)).canaries.kind == "dirac"
    with pytest.raises(ParameterError, match=r"\[canaries\] table is not supported by method fedavg-ldp"):
        load_method_config("fedavg-ldp", params={"canaries.kind": "ood"})


def test_count_larger_than_the_pool_writes_nothing(tmp_path):
    out = tmp_path / "rel"
    with pytest.raises(ParameterError, match=r"'count' parameter of \[canaries\] of centrain must be an int <= \d+ "
                                             r"\(the public-pool records"):
        run_method("centrain", out=out, dataset="digits", params=_params(count=100_000), progress=False)
    with pytest.raises(ParameterError, match=r"'count' parameter of \[canaries\] of centrain must be an int <= \d+ "
                                             r"\(the parameters"):
        run_method("centrain", out=out, dataset="digits", params=_params("dirac", 100_000, **DP), progress=False)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kind,extra", [("mislabeled", {}), ("ood", DP), ("dirac", DP)])
def test_bundle_round_trip(tmp_path, kind, extra):
    params = _params(kind, 12, **{"canaries.seed": 4, **extra})
    res = run_method("centrain", out=tmp_path / "rel", dataset="digits", seed=1, params=params, progress=False)
    rel = load_release(res.release)
    info = rel.canary_info
    assert info["kind"] == kind and info["count"] == 12 and info["seed"] == 4 and info["audit"] == "one-run"
    assert (tmp_path / "rel" / "canaries.npz").is_file() and (tmp_path / "rel" / "canaries_truth.npz").is_file()
    with np.load(tmp_path / "rel" / "canaries.npz") as z:   # the attacker's file holds no inclusion bits
        assert not any("includ" in k or "truth" in k for k in z.files)
    # the canaries are exactly the ones the config's seed makes
    cfg = load_method_config("centrain", params=params)
    data = cfg.prepare_data(1)
    spec = model_spec_from(cfg.model, data)
    want = make_canaries(kind, "one-run", num_canaries=12, seed=4, spec=spec, X_pool=data.X[data.public],
                         y_pool=data.y[data.public], X_train=data.X[data.members])
    assert np.array_equal(rel.canary_truth(), want.included[0])
    if kind == "dirac":
        assert np.array_equal(rel.canaries["coords"], want.coords)
        assert rel.canaries["observations"].shape == (info["steps"], 1, 12)
        assert rel.train_config.dp.sampling_rate is not None
    else:
        assert np.array_equal(rel.canaries["X"], want.X) and np.array_equal(rel.canaries["y"], want.y)
    assert any("anaries" in a for a in rel.meta["assumptions"])
    if extra:
        assert np.isfinite(rel.meta["claim"]["epsilon"])


def test_canaries_change_the_trained_model(tmp_path):
    a = run_method("centrain", out=tmp_path / "a", dataset="digits", params=_params("ood", 40, **{"method.epochs": 3}),
                   progress=False)
    b = run_method("centrain", out=tmp_path / "b", dataset="digits", params={"method.epochs": 3, "model.hidden": [8]},
                   progress=False)
    pa, pb = (load_release(r.release).model.predict_proba(np.zeros((1, 1, 8, 8), np.float32)) for r in (a, b))
    assert not np.allclose(pa, pb)
    assert load_release(b.release).canaries is None and load_release(b.release).canary_info is None


def _tamper(root, name, **arrays):
    (root / name).unlink(missing_ok=True)
    save_npz(root / name, **arrays)


def test_bad_bundles_are_refused(tmp_path):
    res = run_method("centrain", out=tmp_path / "rel", dataset="digits", params=_params(), progress=False)
    root = res.release
    good = {k: v for k, v in np.load(root / "canaries.npz").items()}
    truth = np.load(root / "canaries_truth.npz")["included"]
    _tamper(root, "canaries.npz", **good, included=truth.astype(np.int64))
    with pytest.raises(DataError, match="canaries.npz: mislabeled canaries hold exactly"):
        load_release(root)
    _tamper(root, "canaries.npz", X=good["X"][:5], y=good["y"][:5])
    with pytest.raises(DataError, match=r"canaries.npz\[X\]: must have shape \(10, 1, 8, 8\)"):
        load_release(root)
    _tamper(root, "canaries.npz", X=good["X"], y=good["y"] + 100)
    with pytest.raises(DataError, match=r"canaries.npz\[y\]: must hold class labels in \[0, 10\)"):
        load_release(root)
    _tamper(root, "canaries.npz", X=np.zeros((10_000, 1, 8, 8), np.float32), y=good["y"])
    with pytest.raises(DataError, match="would unpack to"):   # size checked before anything is read
        load_release(root)
    _tamper(root, "canaries.npz", **good)
    _tamper(root, "canaries_truth.npz", included=truth[:3])
    with pytest.raises(DataError, match="canaries_truth.npz: expected exactly one array 'included'"):
        load_release(root).canary_truth()
    (root / "canaries_truth.npz").unlink()
    with pytest.raises(DataError, match="canaries_truth.npz is missing"):
        load_release(root)
    _tamper(root, "canaries_truth.npz", included=truth)
    meta = json.loads((root / "release.json").read_text())
    for key, value, what in (("kind", "poison", "canaries.kind"), ("count", 1, "canaries.count"),
                             ("truth_file", "../x.npz", "canaries.truth_file")):
        bad = {**meta, "canaries": {**meta["canaries"], key: value}}
        (root / "release.json").write_text(json.dumps(bad))
        with pytest.raises(DataError, match=what):
            load_release(root)
    (root / "release.json").write_text(json.dumps(meta))
    assert load_release(root).canary_truth().shape == (10,)

"""Release bundles: atomic write, pickle-free load, consistency errors, recipes for shadow models."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dpaudit.errors import DataError, ParameterError
from dpaudit.training.data import load_dataset, split_dataset
from dpaudit.training.ensemble import TrainConfig, fit_classifier
from dpaudit.training.models import ModelSpec
from dpaudit.training.release import load_release, write_release

CLAIM = {"epsilon": 1.0, "delta": 1e-5, "granularity": "example", "text": "(1, 1e-5)-DP per example"}


def _ledger():  # anything with to_dict() holding a ledger; the release stores the dict (checked on write and load)
    from dpaudit.accountants.events import LaplaceNoisyMax
    from dpaudit.accountants.ledger import PrivacyLedger

    led = PrivacyLedger(delta=1e-5)
    led.record("party0", LaplaceNoisyMax(gamma=0.1))
    return led


def _statement():
    from dpaudit.accountants.statement import AccountingResult

    return AccountingResult("ledger", (_ledger().overall(),))


@pytest.fixture(scope="module")
def setting():
    ds = load_dataset("breast_cancer")
    sp = split_dataset(ds, seed=0)
    mem = {"members": sp.train[:100], "nonmembers": sp.test, "attacker": sp.attacker}
    return ds, sp, mem


def _write(path, ds, sp, mem, spec, cfg, **kw):
    train = sp.train[:100]
    clf = fit_classifier(spec, ds.X[train], ds.y[train], cfg, seed=0)
    args = dict(method="pate", dataset={"name": "breast_cancer", "seed": 0, "num_samples": None}, params={"teachers": 5},
                seed=0, utility={"test_accuracy": 0.9}, classifier=clf, train_config=cfg, ledger=_ledger(),
                statement=_statement(), claim=CLAIM, membership=mem, votes=np.ones((4, 2)),
                assumptions=["teachers see disjoint data"])
    args.update(kw)
    return write_release(path, **args), clf


def test_schema_1_bundles_still_load_and_schema_3_does_not(tmp_path, setting):
    """release.json schema 2 writes the accounting result with the one serialiser (headline an index); a schema-1
    bundle (headline the statement object itself) still loads into the same statement."""
    from dpaudit.training.release_meta import READABLE_SCHEMA_VERSIONS, SCHEMA_VERSION

    assert SCHEMA_VERSION == 2 and READABLE_SCHEMA_VERSIONS == (1, 2)
    ds, sp, mem = setting
    out, _ = _write(tmp_path / "rel", ds, sp, mem, ModelSpec("random_forest", (30,), 2, {"n_estimators": 3}), None)
    meta = json.loads((out / "release.json").read_text())
    st = meta["statement"]
    assert meta["schema"] == 2 and st["headline"] == 0 and st["statement"] == st["statements"][0]
    new = load_release(out).info.statement
    old = {k: v for k, v in st.items() if k not in ("statement", "headline_route")}
    old["headline"] = st["statements"][st["headline"]]
    (out / "release.json").write_text(json.dumps({**meta, "schema": 1, "statement": old}))
    assert load_release(out).info.statement == new
    (out / "release.json").write_text(json.dumps({**meta, "schema": 3}))
    with pytest.raises(DataError, match="schema version 3 is unknown; this dpaudit reads schemas 1, 2"):
        load_release(out)


@pytest.mark.parametrize("spec,cfg", [
    (ModelSpec("mlp", (30,), 2, {"hidden": [16]}), TrainConfig(epochs=3, batch_size=32, lr=1e-2)),
    (ModelSpec("random_forest", (30,), 2, {"n_estimators": 5}), None),
])
def test_roundtrip(tmp_path, setting, spec, cfg):
    ds, sp, mem = setting
    out, clf = _write(tmp_path / "rel", ds, sp, mem, spec, cfg)
    r = load_release(out)
    assert r.meta["schema"] == 2 and r.meta["ledger"]["parties"]["party0"][0]["event"]["gamma"] == 0.1
    assert r.meta["dataset"]["num_records"] == len(ds) and r.meta["created_by"].startswith("dpaudit ")
    np.testing.assert_allclose(r.model.predict_proba(ds.X[:20]), clf.predict_proba(ds.X[:20]))
    assert all(np.array_equal(r.membership[k], mem[k]) for k in mem)
    assert r.votes.shape == (4, 2)
    assert len(r.dataset()) == len(ds)
    assert r.train_config == cfg
    # the recipe: same seed, same data -> the same model as the released one
    again = r.train_fn()(ds.X[mem["members"]], ds.y[mem["members"]], 0)
    np.testing.assert_allclose(again.predict_proba(ds.X[:20]), clf.predict_proba(ds.X[:20]), rtol=1e-5, atol=1e-6)
    shadows = r.train_many()([(ds.X[sp.attacker[:60]], ds.y[sp.attacker[:60]]),
                              (ds.X[sp.attacker[60:]], ds.y[sp.attacker[60:]])], 7)
    assert len(shadows) == 2 and shadows[0].predict_proba(ds.X[:3]).shape == (3, 2)
    assert not (tmp_path / "rel" / "model.pkl").exists()


def test_write_is_atomic_and_refuses_overwrite(tmp_path, setting):
    ds, sp, mem = setting
    spec = ModelSpec("decision_tree", (30,), 2, {"max_depth": 2})
    _write(tmp_path / "rel", ds, sp, mem, spec, None)
    with pytest.raises(DataError, match="already exists"):
        _write(tmp_path / "rel", ds, sp, mem, spec, None)
    bad = dict(mem, members=np.array([len(ds) + 5]))
    with pytest.raises(DataError, match="out of range"):
        _write(tmp_path / "rel2", ds, sp, bad, spec, None)
    assert not (tmp_path / "rel2").exists()  # nothing half-written
    assert [p.name for p in tmp_path.iterdir()] == ["rel"]
    _write(tmp_path / "rel", ds, sp, mem, spec, None, overwrite=True, utility={"test_accuracy": 0.5})
    assert load_release(tmp_path / "rel").meta["utility"]["test_accuracy"] == 0.5
    with pytest.raises(ParameterError, match="'claim' parameter"):
        _write(tmp_path / "rel3", ds, sp, mem, spec, None, claim={"epsilon": 1.0})
    with pytest.raises(DataError, match="overlap"):
        _write(tmp_path / "rel3", ds, sp, dict(mem, nonmembers=mem["members"][:3]), spec, None)


def test_load_errors_are_clear(tmp_path, setting):
    ds, sp, mem = setting
    spec = ModelSpec("decision_tree", (30,), 2, {"max_depth": 2})
    out, _ = _write(tmp_path / "rel", ds, sp, mem, spec, None)
    meta = json.loads((out / "release.json").read_text())

    def broken(change):
        m = json.loads(json.dumps(meta))
        change(m)
        (out / "release.json").write_text(json.dumps(m))

    with pytest.raises(DataError, match="not found"):
        load_release(tmp_path / "nope")
    broken(lambda m: m.update(schema=99))
    with pytest.raises(DataError, match="schema version 99"):
        load_release(out)
    broken(lambda m: m["model"].update(file="missing.skops"))
    with pytest.raises(DataError, match="missing.skops"):
        load_release(out)
    broken(lambda m: m["dataset"].update(num_records=10))
    with pytest.raises(DataError, match="out of range"):
        load_release(out)
    broken(lambda m: m["model"].update(file="../model.skops"))
    with pytest.raises(DataError, match="plain file name"):
        load_release(out)
    broken(lambda m: None)
    load_release(out)
    np.savez(out / "membership.npz", members=np.array([1, 2]))
    with pytest.raises(DataError, match="lacks"):
        load_release(out)
    np.savez(out / "membership.npz", members=np.array([{"a": 1}], dtype=object), nonmembers=np.array([1]),
             attacker=np.array([2]))
    with pytest.raises(DataError, match="membership.npz"):
        load_release(out)  # object arrays would need pickle: refused
    (out / "release.json").unlink()
    with pytest.raises(DataError, match="release.json is missing"):
        load_release(out)


def test_release_flags_are_validated_and_round_trip(tmp_path):
    import pytest as _pytest

    from dpaudit.errors import ParameterError
    from dpaudit.training import release as R

    with _pytest.raises(ParameterError, match="flag code of write_release"):
        R._flags([("not_a_code", "x")])
    with _pytest.raises(ParameterError, match="'flags' parameter of write_release"):
        R._flags(["teachers_not_independent"])
    assert R._flags([("teachers_not_independent", "why")]) == [{"code": "teachers_not_independent", "message": "why"}]



@pytest.mark.parametrize("utility", [{}, {"accuracy": 0.5}, {"test_accuracy": 1.5}, {"test_accuracy": "high"}])
def test_release_requires_the_released_models_test_accuracy(tmp_path, setting, utility):
    ds, sp, mem = setting
    spec = ModelSpec("decision_tree", (30,), 2, {"max_depth": 2})
    with pytest.raises(ParameterError, match="'test_accuracy'"):
        _write(tmp_path / "rel", ds, sp, mem, spec, None, utility=utility)
    assert not (tmp_path / "rel").exists()

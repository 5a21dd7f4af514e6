"""Cached results are never trusted from a bundle (issue 23, item 4): `dpaudit attack` writes outside the bundle,
refuses an --out inside it, and a shadow-model checkpoint is used only when its digest covers both the bundle's
content and its own -- a forged, edited or borrowed checkpoint is recomputed, never used."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

import dpaudit.attacks.shadow as shadow
from dpaudit.executors import Executor, LocalExecutor, Unit, load_checkpoint, save_checkpoint
from dpaudit.serial import to_dict


@pytest.fixture(scope="module")
def forest(forest_release):
    return forest_release(members=150, trees=5)


@pytest.fixture
def trained(monkeypatch):
    """Counts the shadow-model groups actually trained."""
    calls = []
    real = shadow.train_shadow_models

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(shadow, "train_shadow_models", counting)
    return calls


@pytest.fixture
def recorder(monkeypatch):
    """Records the salt and the units of the checkpointed map call (what a forger could compute too)."""
    seen: dict = {}
    real_with, real_map = Executor.with_checkpoints, Executor.map

    def with_checkpoints(self, directory, *, salt=""):
        seen["salt"] = salt
        return real_with(self, directory, salt=salt)

    def map_(self, units, **kw):
        seen.setdefault("units", list(units))
        return real_map(self, units, **kw)

    monkeypatch.setattr(Executor, "with_checkpoints", with_checkpoints)
    monkeypatch.setattr(Executor, "map", map_)
    return seen


def _args(bundle, *extra):
    return ["attack", bundle, "--attack", "shadow", "--shadows", "2", "--classifier", "logreg", "--global-model",
            "--bootstrap", "0", "--quiet", *extra]


def _lib(bundle, units):
    """The shadow attack through the library, shadow models checkpointed in ``units``: its result dict."""
    from dpaudit.auditing.attack_release import attack_release

    rep = attack_release(bundle, attack="shadow", num_shadows=2, classifier="logreg", per_class=False, n_bootstrap=0,
                         blind=False, checkpoint_dir=units)
    return to_dict(rep)["attack"]


def _attack(path):
    return json.loads((path / "attack.json").read_text())["attack"]


def _forged(unit_file):
    z = dict(np.load(unit_file))
    z["proba"] = np.full_like(z["proba"], 0.1)           # shadows that leak nothing: an attack that finds nothing
    return z


def test_units_shipped_inside_a_bundle_are_never_read(forest, tmp_path, cli, trained, recorder, monkeypatch):
    b = tmp_path / "bundle"
    shutil.copytree(forest, b)
    code, _, err = cli(_args(b, "--out", tmp_path / "honest"))
    assert code == 0, err
    honest = _attack(tmp_path / "honest")
    # the forger ships checkpoints where the old default --out (BUNDLE/attack) read them: one with the old
    # fingerprint and forged content, and one sealed exactly as dpaudit seals (everything it hashes is public)
    units = b / "attack" / "units"
    units.mkdir(parents=True)
    forged = _forged(tmp_path / "honest" / "units" / "models-0-2.npz")
    np.savez(units / "models-0-2.npz", **forged)
    forged.pop("__fingerprint__")
    save_checkpoint(units, recorder["units"][0], forged, salt=recorder["salt"])
    assert load_checkpoint(units, recorder["units"][0], salt=recorder["salt"]) is not None   # a perfect forgery
    before = {p.name: p.read_bytes() for p in units.iterdir()}
    trained.clear()
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(_args(b))                       # default: runs/attack/bundle-shadow, outside the bundle
    assert code == 0, err
    assert trained == [1] and _attack(tmp_path / "runs" / "attack" / "bundle-shadow") == honest
    assert {p.name: p.read_bytes() for p in units.iterdir()} == before          # nothing written into the bundle
    code, _, err = cli(_args(b, "--out", b / "attack", "--overwrite"))
    assert code == 2 and "inside the release bundle" in err and len(err.strip().splitlines()) == 1
    code, _, err = cli(_args(b, "--out", b))
    assert code == 2 and "inside the release bundle" in err


def test_an_edited_checkpoint_in_the_users_folder_is_recomputed(forest, tmp_path, trained):
    honest = _lib(forest, tmp_path / "units")
    unit = tmp_path / "units" / "models-0-2.npz"
    np.savez(unit, **_forged(unit))                    # content changed, old digest kept
    trained.clear()
    assert _lib(forest, tmp_path / "units") == honest and trained == [1]
    trained.clear()
    assert _lib(forest, tmp_path / "units") == honest and trained == []    # its own, re-sealed checkpoint: reused


def test_a_checkpoint_of_another_bundle_is_recomputed(forest, tmp_path, trained):
    _lib(forest, tmp_path / "a")
    other = tmp_path / "other"
    shutil.copytree(forest, other)
    meta = json.loads((other / "release.json").read_text())
    meta["utility"]["test_accuracy"] = 0.25            # other content, same data, recipe and settings
    (other / "release.json").write_text(json.dumps(meta))
    shutil.copytree(tmp_path / "a", tmp_path / "b")    # a's valid checkpoint, offered for the other bundle
    trained.clear()
    _lib(other, tmp_path / "b")
    assert trained == [1]
    trained.clear()
    _lib(forest, tmp_path / "a")                       # its own bundle: reused
    assert trained == []


def _double(x):
    return {"y": 2 * np.asarray(x)}


def test_checkpoint_digest_covers_content_and_salt(tmp_path):
    u = Unit("u-1", _double, (np.arange(3),), fingerprint="f")
    ex = LocalExecutor().with_checkpoints(tmp_path, salt="bundle-a")
    assert np.array_equal(ex.map([u])[0]["y"], [0, 2, 4])
    assert load_checkpoint(tmp_path, u, salt="bundle-a") is not None
    assert load_checkpoint(tmp_path, u, salt="bundle-b") is None
    z = dict(np.load(tmp_path / "u-1.npz"))
    z["y"] = np.array([7, 7, 7])
    np.savez(tmp_path / "u-1.npz", **z)                # same digest string, other content
    assert load_checkpoint(tmp_path, u, salt="bundle-a") is None
    assert np.array_equal(ex.map([u])[0]["y"], [0, 2, 4])
    (tmp_path / "u-1.npz").unlink()
    (tmp_path / "u-1.npz").symlink_to(tmp_path / "elsewhere.npz")
    save_checkpoint(tmp_path.parent / tmp_path.name, Unit("elsewhere", _double, (1,)), {"y": np.ones(1)}, salt="bundle-a")
    assert load_checkpoint(tmp_path, u, salt="bundle-a") is None   # a link is never followed

"""One-run canary audits of the released model itself, from the canaries planted in its bundle."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from dpaudit.auditing.canary_audit import (CanaryAuditResult, audit_release_canaries, canary_audit_release,
                                        release_canary_scores)
from dpaudit.auditing.runner import release_digest
from dpaudit.errors import ParameterError
from dpaudit.training.methods import run_method
from dpaudit.training.release import Release, load_release
from dpaudit.serial import from_dict

#: DP-SGD centrain with 200 Dirac canaries on the dead first-layer coordinates of digits: trains in < 1 s.
DIRAC = {"method.epochs": 2, "method.noise_multiplier": 0.3, "model.hidden": [100], "canaries.kind": "dirac",
         "canaries.count": 200}


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("canary_bundles")
    out = {}
    out["dirac"] = run_method("centrain", out=root / "dirac", dataset="digits", seed=0, params=DIRAC, progress=False).release
    plain = {k: v for k, v in DIRAC.items() if not k.startswith("canaries")}
    out["plain"] = run_method("centrain", out=root / "plain", dataset="digits", seed=0, params=plain, progress=False).release
    out["ood"] = run_method("centrain", out=root / "ood", dataset="digits", seed=0, progress=False,
                            params={"method.epochs": 2, "model.hidden": [8], "canaries.kind": "ood",
                                    "canaries.count": 20}).release
    torch.set_num_threads(before)
    return out


def test_released_model_bound_is_certified_and_reproducible(bundles, tmp_path):
    r = canary_audit_release(bundles["dirac"], audit="one-run", seed=3, out=tmp_path)
    assert r.kind == "certified" and r.settings["target"] == "the released model" and r.bound.trials == 200
    assert r.bound.audit == "one-run" and r.bound.score == "dirac-lr"
    # a real signal: sigma = 0.3 is far from private, the ideal attack certifies more, the accounting more still
    assert 0.5 < r.bound.epsilon <= r.accounted_epsilon and r.bound.ideal_epsilon is not None
    assert any("nothing retrained" in n for n in r.notes)
    again = audit_release_canaries(bundles["dirac"], seed=3)
    assert again.bound.epsilon == r.bound.epsilon and again.bound.ideal_epsilon == r.bound.ideal_epsilon
    saved = from_dict(CanaryAuditResult, json.loads((tmp_path / "canary_audit.json").read_text()))
    assert saved.bound.epsilon == r.bound.epsilon and saved.settings["canaries"] == 200


def test_scores_read_the_attacker_view_only(bundles, monkeypatch):
    rel = load_release(bundles["dirac"])
    assert set(rel.canaries) == {"coords", "observations"}

    def forbidden(self):
        raise AssertionError("the scoring path read the inclusion bits")

    with monkeypatch.context() as mp:
        mp.setattr(Release, "canary_truth", forbidden)
        s = release_canary_scores(rel)
        with pytest.raises(AssertionError, match="inclusion bits"):   # the bound itself does need them
            audit_release_canaries(rel)
    assert s.shape == (200,)
    # scores do not change when the answer does; the bound does
    inc = rel.canary_truth()
    flipped = rel.path.parent / "flipped"
    shutil.copytree(rel.path, flipped)
    (flipped / "canaries_truth.npz").unlink()
    np.savez(flipped / "canaries_truth.npz", included=~inc)
    other = load_release(flipped)
    assert np.array_equal(release_canary_scores(other), s)
    assert audit_release_canaries(other).bound.epsilon < audit_release_canaries(rel).bound.epsilon
    # in-members score higher: the included canaries' mean score exceeds the excluded ones'
    assert s[inc].mean() > s[~inc].mean()


def test_input_canaries_without_dp(bundles):
    r = canary_audit_release(bundles["ood"], audit="one-run", seed=0)
    assert r.bound.score == "loss" and r.accounted_epsilon is None and r.mechanism == {"kind": "none"}
    assert r.bound.ideal_epsilon > 0 and any("perfect attack" in n for n in r.notes)
    with pytest.raises(ParameterError, match="'score' parameter.*'loss'.*LiRA needs reference models"):
        canary_audit_release(bundles["ood"], audit="one-run", score="lira")


def test_without_canaries_the_recipe_is_retrained_and_said(bundles):
    r = canary_audit_release(bundles["plain"], audit="one-run", canary="dirac", canaries=20, seed=0, device="cpu")
    assert r.settings["target"] == "the training recipe (retrained)"
    assert any("holds no canaries" in n and "not the released weights" in n for n in r.notes)
    assert "recipe (retrained)" in r.summary()


def test_bundle_arguments_must_agree(bundles):
    with pytest.raises(ParameterError, match="'canary' parameter .* must be the bundle's kind 'dirac'"):
        canary_audit_release(bundles["dirac"], audit="one-run", canary="mislabeled")
    with pytest.raises(ParameterError, match="'canaries' parameter .* must be the bundle's count 200"):
        canary_audit_release(bundles["dirac"], audit="one-run", canaries=50)


def test_digest_covers_the_canary_files(bundles, tmp_path):
    a = tmp_path / "a"
    shutil.copytree(bundles["dirac"], a, ignore=shutil.ignore_patterns("attack"))
    d0 = release_digest(a)
    assert d0 != release_digest(bundles["plain"])
    inc = np.load(a / "canaries_truth.npz")["included"]
    (a / "canaries_truth.npz").unlink()
    np.savez(a / "canaries_truth.npz", included=~inc)
    d1 = release_digest(a)
    assert d1 != d0
    obs = dict(np.load(a / "canaries.npz"))
    obs["observations"] = obs["observations"] + 1.0
    (a / "canaries.npz").unlink()
    np.savez(a / "canaries.npz", **obs)
    assert release_digest(a) not in (d0, d1)

"""Issue 38, the crashes, raw TypeErrors, the broken documented path and the hangs of round three: each test is
named after the item it fixes. (Escaping is in test_sec_escaping.py, the API fuzz in tests/fuzz/test_fuzz_api.py.)"""

from __future__ import annotations

import math

import numpy as np
import pytest

import dpaudit
from dpaudit.errors import ParameterError


def _one_error(cli, args, *needles):
    code, out, err = cli(args)
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("[dpaudit")]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("dpaudit: error:"), (code, out, err)
    assert "Traceback" not in err and "internal error" not in err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


CLAIM = ["--claim", "epsilon=8", "--claim", "delta=1e-5"]


# --------------------------------------------------------------------------------------------------
# internal errors (exit 70)


@pytest.mark.parametrize("kind", ["logits", "probs", "loss"])
def test_release_make_scores_with_zero_reference_models_is_a_clean_error(tmp_path, cli, kind):
    """Before: 'zero-size array to reduction operation maximum' (exit 70) for probabilities, a late write_release
    message for the others."""
    rng = np.random.default_rng(0)
    n = 12
    if kind == "loss":
        own = {"loss_train": rng.random(n), "loss_test": rng.random(n)}
        ref = np.zeros((n, 0))
    else:
        make = (lambda: rng.normal(size=(n, 3))) if kind == "logits" else (lambda: rng.dirichlet([1, 1, 1], n))
        own = {f"{kind}_train": make(), f"{kind}_test": make(), "labels_train": rng.integers(0, 3, n),
               "labels_test": rng.integers(0, 3, n)}
        ref = np.zeros((n, 0, 3))
    np.savez(tmp_path / "s.npz", **own, **{f"reference_{kind}_train": ref, f"reference_{kind}_test": ref,
                                           "reference_in_train": np.zeros((n, 0), bool),
                                           "reference_in_test": np.zeros((n, 0), bool)})
    _one_error(cli, ["release", "make", "--scores", tmp_path / "s.npz", "--out", tmp_path / "b", *CLAIM],
               "no reference model (K = 0)", f"reference_{kind}_train")
    assert not (tmp_path / "b").exists()


def test_account_gnmax_release_epsilon_with_release_sigma_ss_1e308_gives_the_correct_answer(tmp_path, cli):
    """Before: OverflowError (sigma_ss ** 2). Now: the release noise is enormous, so the released (noisy) figures
    are infinite and the headline is the data-independent guarantee, finite."""
    np.save(tmp_path / "v.npy", np.array([[10, 0, 0], [5, 5, 0], [9, 1, 0]]))
    base = ["account", "--mechanism", "gnmax", "--votes", tmp_path / "v.npy", "--sigma", "1", "--delta", "1e-5",
            "--release-epsilon", "--seed", "0", "--json"]
    code, out, err = cli(base + ["--release-sigma-ss", "1e308"])
    assert code == 0, err
    import json

    res = json.loads(out)
    assert math.isfinite(float(res["epsilon"])) and res["statements"][0]["details"]["sigma_ss"] == 1e308
    from dpaudit.accountants.smooth_sensitivity import rdp_gnss

    assert rdp_gnss(0.01, 1e308, 2.0) == pytest.approx(rdp_gnss(0.01, 1e300, 2.0))   # the vanishing cost, finite
    assert rdp_gnss(0.01, 1e-300, 2.0) == math.inf                                     # sound: never below the truth
    assert rdp_gnss(0.01, 2.0, 2.0) == pytest.approx(2.0 * math.exp(0.02) / 4.0 + (0.02 - 0.5 * math.log1p(-0.04)))


# --------------------------------------------------------------------------------------------------
# the Python API's own errors


def test_account_laplace_with_a_keyword_it_does_not_take_names_the_accepted_keywords():
    with pytest.raises(ParameterError) as exc:
        dpaudit.account("laplace", epsilon=1.0)
    msg = str(exc.value)
    assert "'epsilon'" in msg and "scale, sensitivity, count" in msg and "laplace_mechanism" not in msg
    assert "owner" not in msg          # an internal keyword is not offered
    with pytest.raises(ParameterError, match="'owner'"):
        dpaudit.account("laplace", scale=1.0, owner="x")
    with pytest.raises(ParameterError, match="needs the keyword 'scale'"):
        dpaudit.account("laplace")
    with pytest.raises(ParameterError, match="dataset_size, batch_size, noise_multiplier.*Got 'noise' instead"):
        dpaudit.account("dpsgd", noise=1.0)
    assert dpaudit.account("laplace", scale=2.0).epsilon == 0.5


def test_account_gnmax_interactive_with_release_epsilon_is_refused_like_the_cli(tmp_path, cli):
    votes = np.array([[10, 0, 0], [5, 5, 0]])
    for extra in ({"interactive": True}, {"data_independent": True}):
        with pytest.raises(ParameterError, match="'release_epsilon'.*cannot be combined with '"
                                                 + next(iter(extra)) + "'"):
            dpaudit.account("gnmax", votes=votes, sigma=1.0, delta=1e-5, release_epsilon=True, **extra)
    with pytest.raises(ParameterError, match="release_epsilon=True.*Got 'queries'"):
        dpaudit.account("gnmax", votes=votes, sigma=1.0, delta=1e-5, release_epsilon=True, queries=2)
    with pytest.raises(ParameterError, match="'release_epsilon' parameter of account applies to mechanism 'gnmax'"):
        dpaudit.account("laplace", scale=1.0, release_epsilon=True)
    np.save(tmp_path / "v.npy", votes)
    _one_error(cli, ["account", "--mechanism", "gnmax", "--votes", tmp_path / "v.npy", "--sigma", "1", "--delta",
                     "1e-5", "--release-epsilon", "--interactive"], "cannot be combined")


# --------------------------------------------------------------------------------------------------
# a documented path that always failed


def test_release_make_model_cbm_writes_a_bundle_that_loads(tmp_path, cli):
    """Before: model.file = model.skops (dpaudit's own parsed CatBoost model was not recognised as CatBoost when
    the bundle was written) and the bundle was refused."""
    catboost = pytest.importorskip("catboost")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 4))
    y = (X[:, 0] > 0).astype(int)
    catboost.CatBoostClassifier(iterations=5, verbose=False, thread_count=1, random_seed=0, allow_writing_files=False).fit(X, y) \
        .save_model(str(tmp_path / "m.cbm"))
    np.savez(tmp_path / "d.npz", X=X, y=y)
    np.save(tmp_path / "mem.npy", np.arange(30))
    np.save(tmp_path / "non.npy", np.arange(30, 60))
    code, out, err = cli(["release", "make", "--model", tmp_path / "m.cbm", "--data", tmp_path / "d.npz", "--members",
                          tmp_path / "mem.npy", "--nonmembers", tmp_path / "non.npy", "--out", tmp_path / "b", *CLAIM])
    assert code == 0, err
    rel = dpaudit.Release.load(tmp_path / "b")
    assert rel.info.model.file == "model.cbm" and rel.info.model.kind == "catboost"
    assert (tmp_path / "b" / "model.cbm").is_file() and not (tmp_path / "b" / "model.skops").exists()
    assert rel.kind == "catboost" and rel.model.predict_proba(X[:3]).shape == (3, 2)
    from dpaudit.training.model_files import CatBoostModel
    from dpaudit.training.models import classifier_suffix

    assert isinstance(rel.model.estimator, CatBoostModel) and classifier_suffix(rel.model) == ".cbm"


# --------------------------------------------------------------------------------------------------
# hangs


def _no_work(monkeypatch):
    import dpaudit.training.methods as methods

    def boom(*_, **__):
        raise AssertionError("a method ran")

    monkeypatch.setattr(methods, "run_method", boom)


def test_reproduce_seeds_1000000000_is_refused_with_its_bound_before_any_work(tmp_path, cli, monkeypatch):
    _no_work(monkeypatch)
    _one_error(cli, ["reproduce", "fredy", "--seeds", "1000000000", "--out", tmp_path / "o", "--work-dir",
                     tmp_path / "w", "--quiet"], "'seeds'", "[1, 100]", "1000000000")
    assert not (tmp_path / "o").exists() and not (tmp_path / "w").exists()
    from dpaudit.auditing.reproduce import reproduce

    with pytest.raises(ParameterError, match=r"\[1, 100\]"):
        reproduce("fredy", seeds=101, out=tmp_path / "o", work_dir=tmp_path / "w", progress=False)


@pytest.mark.parametrize("only", ["", " , ", ","])
def test_reproduce_only_empty_is_refused_not_the_whole_grid(tmp_path, cli, monkeypatch, only):
    _no_work(monkeypatch)
    _one_error(cli, ["reproduce", "fredy", "--only", only, "--out", tmp_path / "o", "--work-dir", tmp_path / "w",
                     "--quiet"], "'only'", "at least one setting", "baseline")
    assert not (tmp_path / "o").exists() and not (tmp_path / "w").exists()


# --------------------------------------------------------------------------------------------------
# item 4: every count a user passes is bounded before any work


COUNTS = [("shadows", 10**9, "[0, 10000]"), ("bootstrap", 10**9, "[0, 100000]"), ("population", 10**12, "[0, 100000000]"),
          ("models", 10**9, "[2, 100000]"), ("canaries", 10**9, "[2, 1000000]"), ("seed", 2**40, "[0, 4294967295]"),
          ("bootstrap", -1, "[0, 100000]"), ("shadows", 2.5, "[0, 10000]")]


@pytest.mark.parametrize("name, value, bound", COUNTS, ids=[f"{n}={v}" for n, v, _ in COUNTS])
def test_every_count_an_attack_takes_is_bounded_before_any_work(tmp_path, cli, name, value, bound):
    """The bundle does not even exist: the count is refused first (nothing loaded, trained or allocated)."""
    with pytest.raises(ParameterError) as exc:
        dpaudit.attack(tmp_path / "no-bundle", attack="threshold", out=tmp_path / "o", **{name: value})
    assert f"'{name}'" in str(exc.value) and bound in str(exc.value)
    assert not (tmp_path / "o").exists()
    from dpaudit.auditing.attack_release import attack_release, compare_release

    if name in ("shadows", "bootstrap", "population", "seed"):
        lib = {"shadows": "num_shadows", "bootstrap": "n_bootstrap"}.get(name, name)
        with pytest.raises(ParameterError, match=f"'{name}'"):
            attack_release(tmp_path / "no-bundle", attack="threshold", **{lib: value})
        lib = {"shadows": "num_references", "bootstrap": "n_bootstrap"}.get(name, name)
        with pytest.raises(ParameterError, match=f"'{name}'"):
            compare_release(tmp_path / "no-bundle", **{lib: value})
    if name in ("shadows", "bootstrap", "seed") and isinstance(value, int) and value > 0:
        _one_error(cli, ["attack", tmp_path / "no-bundle", "--attack", "threshold", f"--{name}", value, "--out",
                         tmp_path / "o", "--quiet"], name, bound.split(", ")[1].rstrip("]"))


def test_composition_counts_and_claim_budgets_are_bounded(tmp_path):
    with pytest.raises(ParameterError, match=r"'count'.*\[1, 1000000000000000\]"):
        dpaudit.account("laplace", scale=1.0, count=10**80)       # was an OverflowError
    with pytest.raises(ParameterError, match=r"'count'"):
        dpaudit.account("gaussian", sigma=1.0, delta=1e-5, count=10**16)
    from dpaudit.auditing.claims import parse_claims

    for key, value in (("shadows", 10**9), ("models", 10**9), ("canaries", 10**9), ("seed", 2**40)):
        attack = {"kind": "canary" if key in ("models", "canaries") else "lira", key: value}
        claim = {"name": "c", "epsilon": 1.0, "delta": 1e-5, "granularity": "example", "release": "r", "attack": attack}
        with pytest.raises(ParameterError, match=f"'{key}'"):
            parse_claims({"claim": [claim]}, base_dir=tmp_path)

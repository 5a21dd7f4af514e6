"""The one parse of release.json and the bundle arrays (dpaudit.training.release_meta): every field of a bundle an
auditor is handed is checked with the checks `release make` / `train` make when they write it (issue 23, item 5)."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from dpaudit.accountants.granularity import canonical_granularity
from dpaudit.errors import DataError, ParameterError
from dpaudit.training.release_meta import (check_bundle_scores, check_canary_view, check_records, parse_release_meta,
                                           parse_train_config)

W = "rel/release.json"
SHA = "0" * 64
SPEC = {"name": "sklearn", "input_shape": [64], "num_classes": 10, "kwargs": {}, "external": True}
RECIPE = {"model": {"name": "mlp", "input_shape": [64], "num_classes": 10, "kwargs": {}},
          "train_config": {"epochs": 2, "batch_size": 32, "optimizer": "adam", "lr": 0.001, "momentum": 0.0,
                           "weight_decay": 0.0, "dp": None}}


def bundled() -> dict:
    """release.json of an outside sklearn model on bundled data, as `release make` writes it."""
    return {"schema": 1, "method": "external",
            "dataset": {"name": "bundled", "file": "data.npz", "num_records": 100, "num_classes": 10,
                        "source": {"file": "/x/data.npz", "sha256": SHA}},
            "params": {"accounting_source": {}, "possible_attacks": ["threshold", "shadow", "lira"]}, "seed": 0,
            "utility": {"test_accuracy": 0.9, "test_split": "non-members"},
            "model": {"spec": copy.deepcopy(SPEC), "file": "model.skops", "train_config": None, "kind": "sklearn",
                      "recipe": copy.deepcopy(RECIPE)},
            "ledger": None, "statement": None,
            "claim": {"epsilon": 8.0, "delta": 1e-5, "granularity": "example", "text": "t"},
            "assumptions": ["a"], "flags": [], "created_by": "dpaudit 0.1.0"}


def scores_only() -> dict:
    m = bundled()
    m["dataset"] = {"name": "scores", "num_records": 60, "num_classes": 4}
    m["model"] = {"spec": None, "file": None, "train_config": None, "kind": "scores", "score_kind": "probabilities"}
    return m


def own() -> dict:
    m = bundled()
    m["method"] = "centrain"
    m["dataset"] = {"name": "digits", "seed": 0, "num_samples": None, "num_records": 1797}
    m["model"] = {"spec": {"name": "mlp", "input_shape": [1, 8, 8], "num_classes": 10, "kwargs": {"hidden": [8]}},
                  "file": "model.safetensors", "train_config": copy.deepcopy(RECIPE["train_config"])}
    m["params"] = {"method": {"epochs": 2}}
    return m


def _set(meta: dict, field: str, value) -> dict:
    *path, last = field.split(".")
    d = meta
    for k in path:
        d = d[k]
    if value is _DELETE:
        d.pop(last)
    else:
        d[last] = value
    return meta


_DELETE = object()


def test_valid_releases_parse_into_typed_objects():
    info = parse_release_meta(bundled(), W)
    assert info.model.kind == "sklearn" and info.model.spec.num_classes == 10 and info.dataset.num_classes == 10
    assert info.model.recipe.model.name == "mlp" and info.model.recipe.train_config.epochs == 2
    assert info.claim.granularity == "example" and info.claim.epsilon == 8.0
    s = parse_release_meta(scores_only(), W)
    assert s.model.kind == "scores" and s.model.spec is None and s.model.score_kind == "probabilities"
    o = parse_release_meta(own(), W)
    assert o.model.kind == "dpaudit" and o.model.train_config.batch_size == 32 and o.dataset.seed == 0
    # an infinite claim (no privacy) as the project writes it, and the claim's 'record' read as 'example'
    m = own()
    m["claim"] = {"epsilon": "inf", "delta": 0.0, "granularity": "none", "text": "no DP"}
    assert math.isinf(parse_release_meta(m, W).claim.epsilon)
    m["claim"] = {"epsilon": 3, "delta": 0.0, "granularity": "record (add/remove one)", "text": "old wording"}
    assert parse_release_meta(m, W).claim.granularity == "example"


# I1: the untyped outside-model fields of the issue, and their neighbours: one DataError naming the field
@pytest.mark.parametrize("make,field,value,match", [
    (bundled, "dataset.file", 5, "'dataset.file' must be a plain file name"),
    (bundled, "dataset.file", "../data.npz", "'dataset.file' must be a plain file name"),
    (bundled, "dataset.num_classes", "10", "'dataset.num_classes' must be an integer in"),
    (bundled, "dataset.num_classes", 1.5, "'dataset.num_classes'"),
    (bundled, "dataset.num_classes", 10**9, "'dataset.num_classes'"),
    (bundled, "dataset.num_records", "100", "'dataset.num_records'"),
    (bundled, "dataset.bogus", 1, "'dataset' has unknown field"),
    (bundled, "dataset.source", 3, "'dataset.source' must be an object"),
    (bundled, "model.spec.input_shape", "64", "'model.spec.input_shape' must be a list"),
    (bundled, "model.spec.input_shape", [65], "'model.recipe.model' takes inputs"),
    (bundled, "model.spec.num_classes", "10", "'model.spec.num_classes' must be an integer"),
    (bundled, "model.spec.num_classes", 3, "differs from 'dataset.num_classes'"),
    (bundled, "model.spec.name", "catboost", "'model.spec.name' must be the model kind"),
    (bundled, "model.spec.kwargs", {"factory": "os:system"}, "'model.spec.kwargs' must be empty"),
    (bundled, "model.spec.external", "no", "'model.spec.external' must be true"),
    (bundled, "model.recipe", "mlp", "'model.recipe' must be an object"),
    (bundled, "model.recipe", {"model": "x"}, "'model.recipe.model' must be an object"),
    (bundled, "model.recipe", {"train_fn": 3}, "'model.recipe' lacks the field(s) 'train_fn_sha256'"),
    (bundled, "model.recipe", {"train_fn": "m:train", "train_fn_sha256": "abc"}, "'model.recipe.train_fn_sha256'"),
    (bundled, "model.recipe.train_config", {"epocs": 3}, "unknown field(s) 'epocs'"),
    (bundled, "model.recipe.train_config.epochs", "3", "'model.recipe.train_config' is invalid"),
    (bundled, "model.kind", 3, "'model.kind' must be one of"),
    (bundled, "model.file", "model.pkl", "ending in .skops"),
    (bundled, "model.train_config", {}, "'model.train_config' must be null"),
    (bundled, "params", [], "'params' must be an object"),
    (bundled, "params.possible_attacks", 3, "'params.possible_attacks'"),
    (bundled, "utility.test_accuracy", "x", "'utility.test_accuracy' must be a number in [0, 1]"),
    (bundled, "utility.test_accuracy", float("nan"), "'utility.test_accuracy'"),
    (bundled, "claim.granularity", 3, "'claim.granularity'"),
    (bundled, "claim.epsilon", "abc", "'claim.epsilon' must be a number"),
    (bundled, "claim.epsilon", float("nan"), "'claim.epsilon'"),
    (bundled, "claim.delta", 1.0, "'claim.delta' must be a number in [0, 1)"),
    (bundled, "claim.text", 5, "'claim.text' must be a string"),
    (bundled, "claim.text", _DELETE, "'claim' lacks the field(s) 'text'"),
    (bundled, "flags", [{"code": "made_up", "message": "x"}], "'flags[0].code' must be one of"),
    (bundled, "assumptions", "a", "'assumptions' must be a list of strings"),
    (bundled, "ledger", {"schema": 1}, "'ledger' is invalid"),
    (bundled, "statement", {"epsilon": 1.0}, "'statement' is invalid"),
    (bundled, "canaries", {"kind": "dirac"}, "'canaries' must be absent for an outside model"),
    (bundled, "note", 1, "'release.json' has unknown field(s) 'note'"),
    (bundled, "seed", -1, "'seed' must be an integer"),
    (bundled, "method", "", "'method' must be a non-empty string"),
    (scores_only, "model.score_kind", "votes", "'model.score_kind' must be one of"),
    (scores_only, "model.spec", SPEC, "'model.spec' must be null for a scores-only release"),
    (scores_only, "dataset.num_classes", None, "'dataset.num_classes' must be null for losses"),
    (own, "model.spec.name", 5, "'model.spec.name' must be a string"),
    (own, "model.train_config.dp", {"noise_multiplier": 1.0}, "'model.train_config.dp' lacks the field(s) 'max_grad_norm'"),
    (own, "dataset.name", "imagenet", "'dataset.name' must be one of"),
    (own, "dataset.data_dir", 5, "'dataset.data_dir'"),
    (own, "model.kind", None, None),          # absent kind = dpaudit's own model: valid
])
def test_every_field_is_checked(make, field, value, match):
    meta = _set(make(), field, value)
    if match is None:
        parse_release_meta(meta, W)
        return
    with pytest.raises(DataError, match=match.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")) as exc:
        parse_release_meta(meta, W)
    assert str(exc.value).startswith(W) or W in str(exc.value)


def test_train_config_refuses_unknown_fields_everywhere():
    """W6: a typo in a recipe / --recipe-config is refused naming the field (TrainConfig.from_dict itself is strict,
    so the method configs' schedule tables are too)."""
    from dpaudit.training.ensemble import DPSGDConfig, TrainConfig

    with pytest.raises(ParameterError, match="'epocs'"):
        TrainConfig.from_dict({"epocs": 3})
    with pytest.raises(ParameterError, match="'sigma'"):
        DPSGDConfig.from_dict({"noise_multiplier": 1.0, "max_grad_norm": 1.0, "sigma": 2})
    with pytest.raises(DataError, match="recipe.json: 'TrainConfig' has unknown field"):
        parse_train_config({"epochs": 1, "epocs": 3}, "recipe.json", "TrainConfig")
    assert parse_train_config({"epochs": 1}, "r", "TrainConfig").epochs == 1


def test_granularity_vocabulary_is_shared():
    assert canonical_granularity("record", "g", "o") == "example"
    assert canonical_granularity(" Example ", "g", "o") == "example"
    assert canonical_granularity("none", "g", "o", allow_none=True) == "none"
    with pytest.raises(ParameterError, match="'g' parameter of o"):
        canonical_granularity("none", "g", "o")
    with pytest.raises(ParameterError, match="Got 'galaxy'"):
        canonical_granularity("galaxy", "g", "o")


# ---- arrays ---------------------------------------------------------------------------------------------------


def test_records_are_real_finite_and_consistent():
    X, y = np.ones((5, 3)), np.arange(5) % 2
    Xo, yo = check_records(X, y, "d.npz", num_classes=2, input_shape=(3,), num_records=5)
    assert Xo.dtype == np.float32 and yo.dtype == np.int64
    bad = [
        (np.ones((5, 3)) + 1j, y, {}, r"d.npz\[X\]: holds complex numbers"),                 # W5
        (np.where(np.eye(5, 3) > 0, np.nan, 1.0), y, {}, r"d.npz\[X\]: holds NaN"),          # I3
        (np.full((5, 3), np.inf), y, {}, r"d.npz\[X\]: holds NaN or infinite"),
        (np.array([["a"] * 3] * 5), y, {}, r"d.npz\[X\]: must hold"),
        (np.ones((0, 3)), np.zeros(0), {}, r"n >= 1"),                                       # I6: no records
        (np.ones(5), y, {}, r"one row per record"),
        (X, y[:4], {}, r"d.npz\[y\]: must have shape \(5,\)"),
        (X, y + 0.5, {}, r"integer class labels"),
        (X, y + 2j, {}, r"d.npz\[y\]: holds complex"),
        (X, y, {"num_classes": 1}, r"labels in \[0, 1\)"),
        (X, y, {"input_shape": (4,)}, r"the model takes \(4,\)"),
        (X, y, {"num_records": 6}, r"release.json says 6"),
    ]
    for Xb, yb, kw, match in bad:
        with pytest.raises(DataError, match=match):
            check_records(Xb, yb, "d.npz", **kw)


def _scores(n1=20, n0=30, C=4, K=3):
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(C), n1 + n0)
    return {"member_scores": p[:n1], "nonmember_scores": p[n1:], "member_labels": rng.integers(0, C, n1),
            "nonmember_labels": rng.integers(0, C, n0), "reference_scores": rng.dirichlet(np.ones(C), (n1 + n0, K)),
            "reference_in": rng.random((n1 + n0, K)) < 0.5}


def test_bundle_scores_keys_shapes_and_values():
    kw = dict(score_kind="probabilities", num_records=50, num_classes=4)
    out = check_bundle_scores(_scores(), "s.npz", **kw)
    assert out["member_scores"].dtype == np.float64 and out["reference_in"].dtype == bool
    cases = [
        (lambda z: z.pop("member_scores"), r"lacks the array\(s\) 'member_scores'"),            # I2
        (lambda z: z.pop("nonmember_labels"), r"lacks the array\(s\) 'nonmember_labels'"),
        (lambda z: z.pop("reference_in"), "need both 'reference_scores' and 'reference_in'"),
        (lambda z: z.update(extra=np.ones(2)), r"unknown array\(s\) 'extra'"),
        (lambda z: z.update(member_scores=z["member_scores"] + 0j), r"s.npz\[member_scores\]: holds complex"),
        (lambda z: z["nonmember_scores"].__setitem__((0, 0), np.nan), r"s.npz\[nonmember_scores\]: holds NaN"),
        (lambda z: z.update(member_scores=z["member_scores"][:, :3]), r"must have shape \(n, 4\)"),
        (lambda z: z.update(member_labels=z["member_labels"] + 4), r"labels in \[0, 4\)"),
        (lambda z: z.update(member_scores=z["member_scores"][:5], member_labels=z["member_labels"][:5]),
         "release.json says 50 records"),
        (lambda z: z.update(reference_in=z["reference_in"].astype(int)), r"s.npz\[reference_in\]: must hold booleans"),
        (lambda z: z.update(reference_scores=z["reference_scores"][:, :, :2]), r"s.npz\[reference_scores\]: must have shape"),
    ]
    for edit, match in cases:
        z = _scores()
        edit(z)
        with pytest.raises(DataError, match=match):
            check_bundle_scores(z, "s.npz", **kw)
    losses = {"member_scores": np.ones(20), "nonmember_scores": np.ones(30)}
    assert set(check_bundle_scores(losses, "s.npz", score_kind="losses", num_records=50, num_classes=None)) == set(losses)


def test_bundle_population_arrays_for_rmia():
    """RMIA's population records in a scores bundle: checked like the records' arrays (shapes against the same K
    reference models, finiteness, labels, booleans), and only beside the records' reference models."""
    kw = dict(score_kind="probabilities", num_records=50, num_classes=4)
    rng = np.random.default_rng(1)
    k = _scores()["reference_scores"].shape[1]

    def pop(z):
        z.update(population_scores=rng.dirichlet(np.ones(4), 7), population_labels=rng.integers(0, 4, 7),
                 population_reference_scores=rng.dirichlet(np.ones(4), (7, k)),
                 population_reference_in=np.zeros((7, k), bool))
        return z

    out = check_bundle_scores(pop(_scores()), "s.npz", **kw)
    assert out["population_reference_scores"].shape == (7, k, 4) and out["population_reference_in"].dtype == bool
    cases = [
        (lambda z: z.pop("population_reference_scores"), "population records need"),
        (lambda z: (z.pop("reference_scores"), z.pop("reference_in")), "population records need"),
        (lambda z: z.update(population_reference_scores=z["population_reference_scores"][:, :1]),
         r"s.npz\[population_reference_scores\]: must have shape"),
        (lambda z: z["population_scores"].__setitem__((0, 0), np.inf), r"s.npz\[population_scores\]: holds NaN"),
        (lambda z: z.update(population_labels=z["population_labels"] + 4), r"labels in \[0, 4\)"),
        (lambda z: z.update(population_reference_in=np.zeros((7, k + 1), bool)),
         r"s.npz\[population_reference_in\]: must have shape"),
        (lambda z: z.update(population_scores=z["population_scores"] * 1j), r"s.npz\[population_scores\]: holds complex"),
    ]
    for edit, match in cases:
        z = pop(_scores())
        edit(z)
        with pytest.raises(DataError, match=match):
            check_bundle_scores(z, "s.npz", **kw)


def test_dirac_observations_must_be_finite():
    """W4: NaN means "this model did not step" in a multi-model ensemble; a release's one model stepped every step,
    so NaN observations (which score as 0 and would certify a bound from nothing) are refused."""
    entry = {"kind": "dirac", "count": 4, "steps": 3}
    good = {"coords": np.arange(4), "observations": np.zeros((3, 1, 4))}
    assert check_canary_view(good, entry, None, "c.npz", 100)["observations"].shape == (3, 1, 4)
    for value in (np.nan, np.inf):
        obs = np.zeros((3, 1, 4))
        obs[1, 0, 2] = value
        with pytest.raises(DataError, match=r"c.npz\[observations\]: holds NaN or infinite values"):
            check_canary_view({"coords": np.arange(4), "observations": obs}, entry, None, "c.npz", 100)
    with pytest.raises(DataError, match=r"c.npz\[observations\]: holds complex"):
        check_canary_view({"coords": np.arange(4), "observations": good["observations"] + 0j}, entry, None, "c.npz", 100)


@pytest.mark.parametrize("out", [".", "..", "/", "", "a/.."])
def test_i9_a_bundle_is_never_written_over_the_current_folder(out, tmp_path, monkeypatch):
    """`write_release` (and so `release make` and `train`) refuses an output path that names no folder of its own,
    before anything else is checked or written."""
    from dpaudit.training.release import write_release

    monkeypatch.chdir(tmp_path)
    (tmp_path / "keep.txt").write_text("x")
    with pytest.raises(ParameterError, match="'out_dir' parameter of write_release must"):
        write_release(out, method="m", dataset={}, params={}, seed=0, utility={}, classifier=None, train_config=None,
                      ledger=None, statement=None, claim={}, membership={}, overwrite=True)
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_votes_are_finite_counts_with_one_column_per_class():
    from dpaudit.training.bundle_arrays import check_votes

    assert check_votes(np.ones((3, 10)), "v.npy", 10).shape == (3, 10)
    for votes, match in ((np.full((3, 10), np.nan), r"v.npy\[votes\]: holds NaN"), (-np.ones((3, 10)), "counts >= 0"),
                         (np.ones((3, 4)), r"\(queries x 10\)"), (np.ones(10), r"\(queries x 10\)"),
                         (np.ones((3, 10)) + 1j, "complex")):
        with pytest.raises(DataError, match=match):
            check_votes(votes, "v.npy", 10)

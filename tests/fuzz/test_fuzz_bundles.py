"""Property-based fuzzing of the surfaces added with outside models and certified audits (issue 23, item 6):
`release make` inputs, tampered outside-model bundles (release.json fields and npz arrays), planted-canary files,
the `--set` values of every method audit, and Opacus / dp_accounting records.

Every generated input must give exit 0 with a sane answer (a bundle `release make` wrote loads again; an attack or
audit wrote a parseable result with its figures in range) or exit 2 with exactly one `dpaudit: error:` line -- never
a traceback, an internal error, a hang or a half-written output. Budgets as in test_fuzz_inputs.py: a small
derandomised one in the default run, a larger random one under `-m slow`; the closing summary counts inputs and exit
codes.
"""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import tempfile
from pathlib import Path

import click
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzz_helpers import (_COMMON, ARRAYS, COUNTS, EXTREME_FLOATS, EXTREME_INTS, VALUES, assert_clean,
                          assert_nothing_half_written, record, run_cli, time_limit, toml_value)
from dpaudit.errors import DPAuditError




def _budget(fast: int, slow: int):
    return [pytest.param(fast, id="default"), pytest.param(slow, id="slow", marks=pytest.mark.slow)]


def _settings(budget: int):
    return settings(max_examples=budget, derandomize=budget < 100, **_COMMON)


def _npz_bytes(arrays: dict) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


# ---- array mutations shared by the targets -----------------------------------------------------------------------


def _mutate_array(a: np.ndarray, how: str, pos: float) -> np.ndarray:
    """One way an array in a bundle can be wrong (or right): NaN / inf / huge at one position, complex, another
    dtype, rows dropped or added, another shape, empty."""
    with np.errstate(all="ignore"):
        return _mutated(np.array(a), how, pos)


def _mutated(a: np.ndarray, how: str, pos: float) -> np.ndarray:
    if how in ("nan", "inf", "-inf", "huge", "negative") and a.size and a.dtype.kind in "fc":
        a = a.copy()
        a.flat[int(pos * (a.size - 1))] = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf, "huge": 1e300,
                                           "negative": -1.0}[how]
    elif how in ("nan", "inf", "-inf", "huge", "negative") and a.size:
        a = a.astype(np.float64)
        a.flat[int(pos * (a.size - 1))] = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf, "huge": 1e300,
                                           "negative": -1.0}[how]
    elif how == "complex":
        a = a + 0.5j
    elif how == "int":
        a = a.astype(np.int64) if a.dtype.kind != "c" else a.real.astype(np.int64)
    elif how == "bool":
        a = a.astype(bool) if a.dtype.kind != "c" else a.real.astype(bool)
    elif how == "float32":
        a = a.astype(np.float32) if a.dtype.kind != "c" else a.real.astype(np.float32)
    elif how == "str":
        a = a.astype(str)
    elif how == "drop-rows" and a.ndim:
        a = a[: int(pos * len(a))]
    elif how == "add-rows" and a.ndim:
        a = np.concatenate([a, a[:1]]) if len(a) else a
    elif how == "flatten":
        a = a.ravel()
    elif how == "add-axis":
        a = a[..., None]
    elif how == "empty":
        a = a[:0]
    elif how == "label-shift" and a.dtype.kind in "iu":
        a = a + int(1 + pos * 1000)
    return a


ARRAY_EDITS = st.sampled_from(["nan", "inf", "-inf", "huge", "negative", "complex", "int", "bool", "float32", "str",
                               "drop-rows", "add-rows", "flatten", "add-axis", "empty", "label-shift", "same"])


# ---- release make -----------------------------------------------------------------------------------------------

CLAIM_ITEMS = st.lists(st.one_of(
    st.builds(lambda v: f"epsilon={v}", st.one_of(st.sampled_from(["8", "inf", "nan", "-1", "0", "1e308", "abc", ""]),
                                                  st.floats(0.1, 50).map(repr))),
    st.builds(lambda v: f"delta={v}", st.sampled_from(["1e-5", "0", "1", "-0.1", "nan", "abc"])),
    st.builds(lambda v: f"granularity={v}", st.sampled_from(["record", "example", "user", "party", "none", "galaxy", "",
                                                             "record (add/remove one)"])),
    st.builds(lambda v: f"text={v}", st.text(max_size=10)),
    st.sampled_from(["bogus=1", "no-equals-sign"]),
), max_size=5).map(lambda items: ["epsilon=8", "delta=1e-5"] + items)

SG_EVENT = {"type": "PoissonSampledDpEvent", "sampling_probability": 0.01,
            "event": {"type": "GaussianDpEvent", "noise_multiplier": 1.0}}
EVENT_NUMBERS = st.one_of(st.floats(0.01, 5), EXTREME_FLOATS, EXTREME_INTS, st.sampled_from(["5", "x", None, True]))


def _event():
    leaf = st.one_of(
        st.builds(lambda s: {"type": "GaussianDpEvent", "noise_multiplier": s}, EVENT_NUMBERS),
        st.builds(lambda q, s: {"type": "PoissonSampledDpEvent", "sampling_probability": q,
                                "event": {"type": "GaussianDpEvent", "noise_multiplier": s}}, EVENT_NUMBERS, EVENT_NUMBERS),
        st.builds(lambda p, k: {"type": "RandomizedResponseDpEvent", "noise_parameter": p, "num_buckets": k},
                  EVENT_NUMBERS, EVENT_NUMBERS),
        st.sampled_from([{"type": "NoOpDpEvent"}, {"type": "LaplaceDpEvent", "noise_multiplier": 1.0},
                         {"type": "NonPrivateDpEvent"}, {"type": "Bogus"}, {"type": "GaussianDpEvent"}]),
        VALUES,
    )
    return st.recursive(leaf, lambda inner: st.one_of(
        st.builds(lambda e, c: {"type": "SelfComposedDpEvent", "event": e, "count": c}, inner,
                  st.one_of(st.integers(0, 50), EVENT_NUMBERS)),
        st.builds(lambda es: {"type": "ComposedDpEvent", "events": es}, st.one_of(st.lists(inner, max_size=3), VALUES)),
    ), max_leaves=4)


def _opacus_run():
    entry = st.one_of(st.tuples(EVENT_NUMBERS, EVENT_NUMBERS, EVENT_NUMBERS).map(list),
                      st.tuples(st.floats(0.3, 3), st.floats(0.001, 0.5), st.integers(1, 200)).map(list), VALUES)
    return st.fixed_dictionaries({"history": st.one_of(st.lists(entry, max_size=3), VALUES)}, optional={
        "poisson_sampling": st.one_of(st.booleans(), st.none(), VALUES), "notes": st.one_of(
            st.lists(st.text(min_size=1, max_size=5), max_size=2), VALUES),
        "opacus_accountant": st.one_of(st.just("rdp"), VALUES), "extra": VALUES})


TRAIN_CONFIG = st.fixed_dictionaries({}, optional={
    "epochs": st.one_of(st.integers(1, 2), EXTREME_INTS, VALUES), "batch_size": st.one_of(st.integers(1, 64), VALUES),
    "lr": st.one_of(st.floats(1e-4, 1), EXTREME_FLOATS), "optimizer": st.sampled_from(["adam", "sgd", "lbfgs"]),
    "epocs": st.integers(1, 3), "dp": st.one_of(st.none(), st.fixed_dictionaries(
        {"noise_multiplier": EVENT_NUMBERS, "max_grad_norm": EVENT_NUMBERS}, optional={"sigma": VALUES}))})

GOOD_ACCOUNTING = st.sampled_from([
    None, ("dp-events", {"type": "SelfComposedDpEvent", "event": SG_EVENT, "count": 100}),
    ("opacus", {"history": [[1.1, 0.01, 30]], "poisson_sampling": False, "notes": ["n"]}),   # ~1 s (PLD)
])
GOOD_RECIPE = st.sampled_from([None, ("mlp", None), ("mlp", {"epochs": 1, "batch_size": 32}), ("random_forest", None)])


def _make_cases():
    """A valid `release make` call with at most one of its inputs fuzzed (so that both the answers and the
    refusals are explored)."""
    fuzzed = {
        "X_edit": ARRAY_EDITS, "y_edit": ARRAY_EDITS, "members": st.one_of(st.sampled_from(["mask", "txt"]), ARRAYS),
        "claim": CLAIM_ITEMS,
        "accounting": st.one_of(st.tuples(st.just("dp-events"), _event()), st.tuples(st.just("opacus"), _opacus_run()),
                                st.tuples(st.just("ledger"), VALUES)),
        "recipe": st.tuples(st.sampled_from(["mlp", "random_forest", "nope"]), st.one_of(st.none(), TRAIN_CONFIG)),
        "scores_edit": st.tuples(st.sampled_from(["probs_train", "probs_test", "labels_train", "labels_test",
                                                  "reference_probs_train", "reference_in_test", "logits_train"]),
                                 ARRAY_EDITS, st.booleans()),
        "data": st.sampled_from(["csv", "npy"]),
    }
    valid = {"X_edit": st.just("same"), "y_edit": st.just("same"), "members": st.just("good"),
             "claim": st.just(["epsilon=8", "delta=1e-5"]), "accounting": GOOD_ACCOUNTING, "recipe": GOOD_RECIPE,
             "scores_edit": st.just(("probs_train", "same", False)), "data": st.just("npz")}

    def case(source, which):
        parts = {k: (fuzzed[k] if k == which else valid[k]) for k in valid}
        return st.fixed_dictionaries({"source": st.just(source), "pos": st.floats(0, 1), **parts})

    model_keys = ["X_edit", "y_edit", "members", "claim", "accounting", "recipe", "data"]
    return st.one_of(case("model", None), case("scores", None),
                     st.sampled_from(model_keys).flatmap(lambda k: case("model", k)),
                     st.sampled_from(["scores_edit", "claim", "accounting"]).flatmap(lambda k: case("scores", k)))


MAKE_CASES = _make_cases()


def _csv(X: np.ndarray, y: np.ndarray) -> str:
    X2 = X.reshape(len(X), -1) if X.ndim >= 1 and len(X) else np.zeros((0, 1))
    rows = [",".join([f"f{i}" for i in range(X2.shape[1] if X2.ndim == 2 else 1)] + ["label"])]
    for xr, yr in zip(X2[:300], np.ravel(y)[:300]):
        rows.append(",".join(str(v) for v in np.ravel(xr)) + f",{yr}")
    return "\n".join(rows) + "\n"


def _make_case(art: dict, case: dict, d: Path) -> list:
    argv = ["release", "make", "--out", d / "out"]
    for c in case["claim"]:
        argv += ["--claim", c]
    pos = case["pos"]
    if case["source"] == "scores":
        with np.load(art["scores"]) as z:
            s = {k: z[k] for k in z.files}
        key, how, drop = case["scores_edit"]
        if drop:
            s.pop(key, None)
        elif key in s:
            s[key] = _mutate_array(s[key], how, pos)
        else:
            s[key] = _mutate_array(s["probs_train"], how, pos)
        try:
            (d / "s.npz").write_bytes(_npz_bytes(s))
        except (ValueError, TypeError):
            (d / "s.npz").write_bytes(b"PK")
        argv += ["--scores", d / "s.npz"]
    else:
        X, y = art["X"], art["y"]
        X = _mutate_array(X, case["X_edit"], pos) if case["X_edit"] != "same" else X
        y = _mutate_array(y, case["y_edit"], pos) if case["y_edit"] != "same" else y
        if case["data"] == "npz":
            (d / "d.npz").write_bytes(_npz_bytes({"X": X, "y": y}))
            argv += ["--data", d / "d.npz"]
        elif case["data"] == "npy":
            np.save(d / "X.npy", X)
            np.save(d / "y.npy", y)
            argv += ["--data", d / "X.npy", "--labels", d / "y.npy"]
        else:
            (d / "d.csv").write_text(_csv(X, y))
            argv += ["--data", d / "d.csv"]
        members = case["members"]
        if isinstance(members, np.ndarray):
            try:
                np.save(d / "m.npy", members, allow_pickle=False)
            except ValueError:
                (d / "m.npy").write_bytes(b"\x93NUMPY")
            argv += ["--members", d / "m.npy"]
        elif members == "mask":
            mask = np.zeros(len(art["y"]), bool)
            mask[np.load(art["members"])] = True
            np.save(d / "m.npy", mask)
            argv += ["--members", d / "m.npy"]
        elif members == "txt":
            (d / "m.txt").write_text("\n".join(map(str, np.load(art["members"]))))
            argv += ["--members", d / "m.txt"]
        else:
            argv += ["--members", art["members"]]
        argv += ["--nonmembers", art["nonmembers"], "--model", art["model"]]
        if case["recipe"] is not None:
            name, cfg = case["recipe"]
            argv += ["--recipe-model", name]
            if cfg is not None:
                (d / "rc.json").write_text(json.dumps(cfg, default=str))
                argv += ["--recipe-config", d / "rc.json"]
    if case["accounting"] is not None:
        kind, doc = case["accounting"]
        try:
            text = json.dumps(doc)
        except (ValueError, TypeError):
            text = json.dumps(doc, default=str)
        (d / "acc.json").write_text(text)
        argv += [f"--{kind}", d / "acc.json"]
    return argv


@pytest.mark.parametrize("budget", _budget(16, 300))
def test_fuzz_release_make(outside_artefacts, budget):
    from dpaudit.training.release import load_release

    @_settings(budget)
    @given(MAKE_CASES)
    def run(case):
        COUNTS["release make"] += 1
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            argv = _make_case(outside_artefacts, case, d)
            with time_limit(60, argv):
                code, _, err = run_cli(argv)
            record("release make", code)
            assert_clean(code, err, argv=argv)
            assert_nothing_half_written(d / "out")
            if code == 0:
                rel = load_release(d / "out")           # what release make writes, bundle loading accepts
                assert rel.info is not None and rel.info.claim.granularity in ("example", "party", "report", "round",
                                                                                 "user", "none")
            else:
                assert not (d / "out").exists()

    run()


# ---- tampered outside-model bundles: `attack` and `check` ----------------------------------------------------------

OUTSIDE_PATHS = ["dataset", "dataset.name", "dataset.file", "dataset.num_records", "dataset.num_classes",
                 "dataset.source", "dataset.source.sha256", "model", "model.kind", "model.file", "model.spec",
                 "model.spec.name", "model.spec.input_shape", "model.spec.num_classes", "model.spec.kwargs",
                 "model.spec.external", "model.train_config", "model.recipe", "model.recipe.model",
                 "model.recipe.model.name", "model.recipe.model.input_shape", "model.recipe.train_config",
                 "model.recipe.train_config.epochs", "model.recipe.train_config.dp", "model.score_kind",
                 "params", "params.possible_attacks", "params.recipe", "utility", "utility.test_accuracy", "claim",
                 "claim.epsilon", "claim.delta", "claim.granularity", "claim.text", "seed", "method", "schema",
                 "statement", "ledger", "assumptions", "flags", "canaries", "created_by", "extra"]
BUNDLE_MUTATIONS = st.one_of(
    st.tuples(st.just("json"), st.sampled_from(OUTSIDE_PATHS), VALUES),
    st.tuples(st.just("delete-key"), st.sampled_from(OUTSIDE_PATHS), st.none()),
    st.tuples(st.just("array"), st.sampled_from(["data.npz:X", "data.npz:y", "scores.npz:member_scores",
                                                 "scores.npz:nonmember_scores", "scores.npz:member_labels",
                                                 "scores.npz:nonmember_labels", "scores.npz:reference_scores",
                                                 "scores.npz:reference_in", "membership.npz:members",
                                                 "membership.npz:attacker"]),
              st.tuples(ARRAY_EDITS, st.floats(0, 1))),
    st.tuples(st.just("drop-array"), st.sampled_from(["data.npz:X", "data.npz:y", "scores.npz:member_scores",
                                                      "scores.npz:reference_in", "membership.npz:nonmembers"]), st.none()),
    st.tuples(st.just("add-array"), st.sampled_from(["data.npz", "scores.npz"]), ARRAYS),
    st.tuples(st.just("bytes"), st.sampled_from(["release.json", "data.npz", "scores.npz", "model.skops"]),
              st.binary(max_size=200)),
    st.tuples(st.just("remove"), st.sampled_from(["data.npz", "scores.npz", "model.skops"]), st.none()),
)


#: Edits that change nothing the attack reads: its answer must be the untouched bundle's, number for number.
BENIGN = st.sampled_from([("json", "claim.text", "edited"), ("json", "created_by", "someone else"),
                          ("json", "assumptions", ["another"]), ("json", "utility.test_split", "x"),
                          ("json", "claim.granularity", "record"), ("json", "seed", 12345)])
BENIGN_KEYS = {"claim.text", "created_by", "assumptions", "utility.test_split", "claim.granularity", "seed"}


def _benign(mutations) -> bool:
    return all(m[0] == "json" and m[1] in BENIGN_KEYS and m in [
        ("json", "claim.text", "edited"), ("json", "created_by", "someone else"), ("json", "assumptions", ["another"]),
        ("json", "utility.test_split", "x"), ("json", "claim.granularity", "record"), ("json", "seed", 12345)]
        for m in mutations)


def _mutate_outside(b: Path, mutation) -> None:
    kind, where, value = mutation
    if kind in ("json", "delete-key"):
        try:
            meta = json.loads((b / "release.json").read_text())
        except (OSError, ValueError):
            return              # an earlier mutation replaced or removed release.json: nothing to edit
        if not isinstance(meta, dict):
            return
        *path, last = where.split(".")
        d = meta
        for k in path:
            if not isinstance(d, dict) or not isinstance(d.get(k), dict):
                return
            d = d[k]
        if kind == "json":
            d[last] = value
        else:
            d.pop(last, None)
        try:
            text = json.dumps(meta)
        except (ValueError, TypeError):
            text = json.dumps(meta, default=str)
        (b / "release.json").write_text(text)
        return
    if kind in ("bytes", "remove"):
        (b / where).unlink(missing_ok=True)
        if kind == "bytes":
            (b / where).write_bytes(value)
        return
    fname, _, key = where.partition(":")
    f = b / fname
    if not f.is_file():
        return
    try:
        with np.load(f, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except Exception:  # noqa: BLE001 - an earlier mutation broke the file: nothing to edit
        return
    if kind == "array" and key in arrays:
        how, pos = value
        arrays[key] = _mutate_array(arrays[key], how, pos)
    elif kind == "drop-array":
        arrays.pop(key, None)
    elif kind == "add-array":
        if value.dtype == object:
            return
        arrays["extra"] = value
    f.unlink()
    f.write_bytes(_npz_bytes(arrays))


def _check_attack_output(out: Path) -> None:
    rep = json.loads((out / "attack.json").read_text())
    text = json.dumps(rep)
    assert "NaN" not in text, "a NaN figure in attack.json"


def _attack_json(b: Path, out: Path) -> dict:
    code, _, err = run_cli(["attack", b, "--attack", "threshold", "--classifier", "logreg", "--bootstrap", "0",
                            "--out", out, "--quiet"])
    assert code == 0, err
    return json.loads((out / "attack.json").read_text())


@pytest.mark.parametrize("budget", _budget(16, 400))
def test_fuzz_tampered_outside_bundles(outside_artefacts, tmp_path, budget):
    baseline = {w: _attack_json(outside_artefacts[w], tmp_path / f"base-{w}")["attack"] for w in ("sk", "sc")}

    @_settings(budget)
    @given(st.sampled_from(["sk", "sc"]), st.lists(st.one_of(BUNDLE_MUTATIONS, BENIGN), min_size=1, max_size=2),
           st.booleans())
    def run(which, mutations, also_check):
        COUNTS["tampered outside bundles"] += 1
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            b = Path(shutil.copytree(outside_artefacts[which], d / "b"))
            for m in mutations:
                _mutate_outside(b, m)
            out = d / "out"
            argv = ["attack", b, "--attack", "threshold", "--classifier", "logreg", "--bootstrap", "0", "--out", out,
                    "--quiet"]
            with time_limit(60, mutations):
                code, _, err = run_cli(argv)
            record("tampered outside bundles", code)
            assert_clean(code, err, argv=mutations)
            assert_nothing_half_written(out)
            if code == 0:
                _check_attack_output(out)
                if _benign(mutations):      # the correct answer: the untouched bundle's
                    assert json.loads((out / "attack.json").read_text())["attack"] == baseline[which], mutations
            elif _benign(mutations):
                raise AssertionError(f"a harmless edit {mutations} was refused: {err}")
            if also_check:
                (d / "claims.toml").write_text(f'[[claim]]\nname = "c"\nrelease = "{b}"\nepsilon = 8.0\n'
                                               'delta = 1e-5\ngranularity = "example"\n')
                code, _, err = run_cli(["check", d / "claims.toml"])
                record("tampered outside bundles (check)", code)
                assert_clean(code, err, allowed=(0, 1, 2), argv=mutations)

    run()


# ---- planted canaries: `attack --audit one-run` --------------------------------------------------------------------

CANARY_PATHS = ["canaries", "canaries.kind", "canaries.count", "canaries.seed", "canaries.steps", "canaries.audit",
                "canaries.file", "canaries.truth_file", "model.train_config", "model.train_config.dp",
                "model.train_config.dp.sampling_rate", "model.train_config.dp.noise_multiplier",
                "model.train_config.epochs", "model.spec.kwargs"]
CANARY_MUTATIONS = st.one_of(
    st.tuples(st.just("json"), st.sampled_from(CANARY_PATHS), st.one_of(VALUES, EXTREME_INTS, EXTREME_FLOATS)),
    st.tuples(st.just("delete-key"), st.sampled_from(CANARY_PATHS), st.none()),
    st.tuples(st.just("array"), st.sampled_from(["canaries.npz:observations", "canaries.npz:coords", "canaries.npz:X",
                                                 "canaries.npz:y", "canaries_truth.npz:included"]),
              st.tuples(ARRAY_EDITS, st.floats(0, 1))),
    st.tuples(st.just("drop-array"), st.sampled_from(["canaries.npz:observations", "canaries.npz:X",
                                                      "canaries_truth.npz:included"]), st.none()),
    st.tuples(st.just("add-array"), st.sampled_from(["canaries.npz", "canaries_truth.npz"]), ARRAYS),
    st.tuples(st.just("bytes"), st.sampled_from(["canaries.npz", "canaries_truth.npz"]), st.binary(max_size=100)),
    st.tuples(st.just("remove"), st.sampled_from(["canaries.npz", "canaries_truth.npz"]), st.none()),
)


CANARY_BENIGN = st.sampled_from([("json", "claim.text", "edited"), ("json", "created_by", "someone else"),
                                 ("json", "assumptions", ["another"])])


def _canary_bound(b: Path, out: Path) -> dict:
    code, _, err = run_cli(["attack", b, "--audit", "one-run", "--out", out, "--quiet"])
    assert code == 0, err
    return json.loads((out / "canary_audit.json").read_text())["bound"]


@pytest.mark.parametrize("budget", _budget(12, 250))
def test_fuzz_canary_files(canary_bundles, tmp_path, budget):
    baseline = {w: _canary_bound(canary_bundles[w], tmp_path / f"base-{w}") for w in ("dirac", "ood")}

    @_settings(budget)
    @given(st.sampled_from(["dirac", "ood"]), st.lists(st.one_of(CANARY_MUTATIONS, CANARY_BENIGN), min_size=1,
                                                       max_size=2))
    def run(which, mutations):
        COUNTS["canary files"] += 1
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            b = Path(shutil.copytree(canary_bundles[which], d / "b"))
            for m in mutations:
                _mutate_outside(b, m)
            out = d / "out"
            argv = ["attack", b, "--audit", "one-run", "--out", out, "--quiet"]
            with time_limit(60, mutations):
                code, _, err = run_cli(argv)
            record("canary files", code)
            assert_clean(code, err, argv=mutations)
            assert_nothing_half_written(out)
            if code == 0:
                res = json.loads((out / "canary_audit.json").read_text())
                eps = res["bound"]["epsilon"]
                assert isinstance(eps, (int, float)) and eps >= 0 and math.isfinite(eps), res["bound"]
                if all(m[0] == "json" and m[1] in ("claim.text", "created_by", "assumptions") for m in mutations):
                    assert res["bound"] == baseline[which], mutations     # nothing the audit reads changed
            elif all(m[0] == "json" and m[1] in ("claim.text", "created_by", "assumptions") for m in mutations):
                raise AssertionError(f"a harmless edit {mutations} was refused: {err}")

    run()


# ---- method audits: every --set value up to the point where the audit would start training ----------------------

SET_VALUES = st.one_of(st.integers(1, 4), st.integers(-2, 0), EXTREME_INTS.filter(lambda v: v > 10**6 or v < 3),
                       st.floats(0.01, 2.0), EXTREME_FLOATS, st.booleans(),
                       st.sampled_from(["abc", "meta", "cuda:999", "cpu", "", "digits", "mnist", "dirac", "ood",
                                        "mislabeled", "loss"]),
                       st.lists(st.one_of(st.integers(-1, 8), st.text(max_size=2)), max_size=3))




@pytest.fixture
def stop_before_training(monkeypatch):
    """Every method audit stops where its training would start (after all of its checks): exit 0."""
    from dpaudit.training import engine, ensemble
    from dpaudit.training.methods import fredy, pate, privatekt

    def stop(*a, **k):
        raise click.exceptions.Exit(0)

    monkeypatch.setattr(ensemble, "train_ensemble", stop)
    monkeypatch.setattr(engine.RoundEngine, "run", stop)
    monkeypatch.setattr(pate, "teacher_predictions", stop)
    monkeypatch.setattr(fredy, "fedavg_teachers", stop)
    monkeypatch.setattr(privatekt, "run_privatekt", stop)


def _set_cases():
    from dpaudit.auditing.method_audit import METHOD_RUN_AUDITS, method_run_parameters

    def sets(method):
        keys = sorted(set(method_run_parameters(method)) - {"seed", "confidence"}) + ["bogus"]
        one = st.builds(lambda k, v: {k: v}, st.sampled_from(keys), SET_VALUES)     # one value fuzzed, the rest default
        many = st.dictionaries(st.sampled_from(keys), SET_VALUES, max_size=4)
        return st.tuples(st.just(method), st.one_of(one, one, many))

    return st.one_of(*[sets(m) for m in sorted(METHOD_RUN_AUDITS)])


@pytest.mark.parametrize("budget", _budget(25, 500))
@pytest.mark.usefixtures("stop_before_training")
def test_fuzz_method_audit_sets(budget):
    @_settings(budget)
    @given(_set_cases(), st.sampled_from([None, "0.5", "1.5", "nan"]))
    def run(case, confidence):
        method, params = case
        COUNTS["method-audit --set values"] += 1
        argv = ["audit-method", method, "--quiet"]
        for k, v in params.items():
            argv += ["--set", f"{k}={toml_value(v)}"]
        if confidence is not None:
            argv += ["--confidence", confidence]
        with time_limit(60, argv):
            code, _, err = run_cli(argv)
        record("method-audit --set values", code)
        assert_clean(code, err, argv=argv)

    run()


# ---- Opacus and dp_accounting records (library level, with the correct figure where one is known) ---------------


@pytest.mark.parametrize("budget", _budget(60, 1000))
def test_fuzz_opacus_and_dp_accounting_records(budget):
    from dpaudit.accountants.events import SubsampledGaussian
    from dpaudit.accountants.ledger import PrivacyLedger
    from dpaudit.integrations.dp_accounting import dp_event_from_json, ledger_from_dp_accounting
    from dpaudit.integrations.opacus import OpacusRun

    @_settings(budget)
    @given(st.one_of(st.tuples(st.just("opacus"), _opacus_run()), st.tuples(st.just("dp"), _event()),
                     st.tuples(st.just("sg-count"), st.one_of(st.integers(1, 500), EVENT_NUMBERS))))
    def run(case):
        kind, doc = case
        COUNTS["opacus / dp_accounting records"] += 1
        with time_limit(60, case):
            if kind == "opacus":
                try:
                    r = OpacusRun.from_dict(doc)
                except DPAuditError:
                    return
                assert all(isinstance(t, int) and t >= 1 for _, _, t in r.history)
                assert r.poisson_sampling in (None, True, False)
                eps = r.ledger(1e-5).overall().epsilon
                assert eps >= 0 and not math.isnan(eps)
                return
            if kind == "sg-count":
                doc = {"type": "SelfComposedDpEvent", "event": SG_EVENT, "count": doc}
            try:
                led = ledger_from_dp_accounting(dp_event_from_json(doc, where="ev"), delta=1e-5)
            except DPAuditError:
                return
            eps = led.overall().epsilon
            assert eps >= 0 and not math.isnan(eps)
            if kind == "sg-count":      # a whole count is accounted in full: the figure of that many steps
                assert float(doc["count"]).is_integer()
                ref = PrivacyLedger(delta=1e-5)
                if int(doc["count"]) > 0:
                    ref.record("all", SubsampledGaussian(0.01, 1.0, int(doc["count"])))
                assert eps == pytest.approx(ref.overall().epsilon, rel=1e-12)

    run()

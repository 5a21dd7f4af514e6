"""Issue 23, item 5 at the CLI: every field of a release bundle and every input of `dpaudit release make` is checked
with the same checks (dpaudit.training.release_meta), each failure one `dpaudit: error:` line and exit 2 -- never an
internal error, a truncated count or a silently dropped field. The library-level checks are pinned in
tests/training/test_release_meta.py and tests/integrations/test_interop_inputs.py."""

from __future__ import annotations

import json
import shutil
import time

import numpy as np
import pytest

from byom_artefacts import digits_files, scores_file

CLAIM = ["--claim", "epsilon=8", "--claim", "delta=1e-5", "--claim", "granularity=record"]


def _one_line(code: int, err: str, match: str | None = None) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("[dpaudit")]
    assert code == 2 and "Traceback" not in err and "internal error" not in err, err
    assert len(lines) == 1 and lines[0].startswith("dpaudit: error:"), err
    if match is not None:
        assert match in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """An outside sklearn release on bundled data (with a recipe) and a scores-only release, made by the CLI."""
    from dpaudit.cli import main

    root = tmp_path_factory.mktemp("bundle_validation")
    f = digits_files(root)
    f["scores"] = scores_file(root, n=30, references=True, K=2)
    out = {}
    for name, args in (("sk", ["--model", f["skops"], "--data", f["data"], "--members", f["members"],
                               "--nonmembers", f["nonmembers"], "--recipe-model", "mlp"]),
                       ("sc", ["--scores", f["scores"]])):
        with pytest.raises(SystemExit) as exc:
            main(["release", "make", "--out", str(root / name), *CLAIM, *map(str, args)])
        assert exc.value.code == 0
        out[name] = root / name
    return root, f, out


@pytest.fixture
def bundle(made, tmp_path):
    def copy(name: str):
        b = tmp_path / name
        shutil.copytree(made[2][name], b)
        return b
    return copy


def _edit_json(b, field: str, value) -> None:
    meta = json.loads((b / "release.json").read_text())
    *path, last = field.split(".")
    d = meta
    for k in path:
        d = d[k]
    d[last] = value
    (b / "release.json").write_text(json.dumps(meta))


def _attack(cli, b, attack="threshold", *extra):
    return cli(["attack", b, "--attack", attack, "--classifier", "logreg", "--bootstrap", "0", "--shadows", "2",
                "--quiet", "--out", b.parent / f"out-{b.name}", *extra])


# ---- I1: untyped release.json fields of outside-model bundles ------------------------------------------------

@pytest.mark.parametrize("field,value,match", [
    ("dataset.file", 5, "'dataset.file' must be a plain file name"),
    ("dataset.num_classes", "10", "'dataset.num_classes' must be an integer in [2, 100000]. Got '10'"),
    ("model.spec.input_shape", "64", "'model.spec.input_shape' must be a list"),
    ("model.spec.num_classes", 3, "'model.spec.num_classes' (3) differs from 'dataset.num_classes' (10)"),
    ("model.recipe", "mlp", "'model.recipe' must be an object. Got 'mlp'"),
    ("model.recipe", {"model": "x"}, "'model.recipe.model' must be an object"),
])
@pytest.mark.parametrize("attack", ["threshold", "shadow"])
def test_i1_untyped_outside_model_fields(bundle, cli, field, value, match, attack):
    b = bundle("sk")
    _edit_json(b, field, value)
    code, _, err = _attack(cli, b, attack)
    _one_line(code, err, match)


def test_i1_claims_check_reads_the_release_with_the_same_checks(bundle, cli, tmp_path):
    b = bundle("sk")
    _edit_json(b, "dataset.num_classes", "10")
    (tmp_path / "claims.toml").write_text(f'[[claim]]\nname = "c"\nrelease = "{b}"\nepsilon = 8.0\ndelta = 1e-5\n'
                                          'granularity = "example"\n')
    code, _, err = cli(["check", tmp_path / "claims.toml"])
    _one_line(code, err, "'dataset.num_classes' must be an integer")


# ---- I2 / I3 / W5: the arrays of a bundle ---------------------------------------------------------------------

def test_i2_scores_npz_without_the_expected_keys(bundle, cli):
    b = bundle("sc")
    with np.load(b / "scores.npz") as z:
        arrays = {k: z[k] for k in z.files if k != "member_scores"}
    (b / "scores.npz").unlink()
    np.savez(b / "scores.npz", **arrays)
    code, _, err = _attack(cli, b)
    _one_line(code, err, "lacks the array(s) 'member_scores'")


def test_i3_nan_features_in_data_npz(bundle, cli):
    b = bundle("sk")
    with np.load(b / "data.npz") as z:
        X, y = z["X"].copy(), z["y"]
    X[7, 3] = np.nan
    (b / "data.npz").unlink()
    np.savez(b / "data.npz", X=X, y=y)
    for attack in ("threshold", "shadow"):
        code, _, err = _attack(cli, b, attack)
        _one_line(code, err, "data.npz[X]: holds NaN or infinite values (1 of them, first at index (7, 3))")


def test_w5_complex_arrays_are_refused_naming_the_field(bundle, made, cli, tmp_path):
    b = bundle("sk")
    with np.load(b / "data.npz") as z:
        X, y = z["X"], z["y"]
    (b / "data.npz").unlink()
    np.savez(b / "data.npz", X=X + 1j, y=y)
    code, _, err = _attack(cli, b)
    assert "data.npz" in _one_line(code, err) and ("complex" in err or "must hold numbers" in err)
    # release make: the features, the indices and the scores
    root, f, _ = made
    np.savez(tmp_path / "cx.npz", X=X + 0.5j, y=y)
    code, _, err = cli(["release", "make", "--out", tmp_path / "r", *CLAIM, "--model", f["skops"], "--data",
                        tmp_path / "cx.npz", "--members", f["members"], "--nonmembers", f["nonmembers"]])
    _one_line(code, err, "cx.npz[X]: holds complex numbers")
    np.save(tmp_path / "m.npy", np.load(f["members"]) + 0j)
    code, _, err = cli(["release", "make", "--out", tmp_path / "r", *CLAIM, "--model", f["skops"], "--data", f["data"],
                        "--members", tmp_path / "m.npy", "--nonmembers", f["nonmembers"]])
    _one_line(code, err, "complex128")
    with np.load(f["scores"]) as z:
        s = {k: z[k] for k in z.files}
    s["probs_train"] = s["probs_train"] + 0j
    np.savez(tmp_path / "s.npz", **s)
    code, _, err = cli(["release", "make", "--out", tmp_path / "r", *CLAIM, "--scores", tmp_path / "s.npz"])
    _one_line(code, err, "'probs_train'")
    assert not (tmp_path / "r").exists()


# ---- release make: accounting files (I4, I5, W2, W3), data files (I6, I7), recipe config (W6), --out (I9) --------

SG = {"type": "PoissonSampledDpEvent", "sampling_probability": 0.01,
      "event": {"type": "GaussianDpEvent", "noise_multiplier": 1.0}}


def _make_model(cli, made, tmp_path, *extra):
    _, f, _ = made
    return cli(["release", "make", "--out", tmp_path / "r", *CLAIM, "--model", f["skops"], "--data", f["data"],
                "--members", f["members"], "--nonmembers", f["nonmembers"], *map(str, extra)])


@pytest.mark.parametrize("event,match", [
    ({"type": "SelfComposedDpEvent", "event": SG, "count": 1.9}, "'count' parameter of SelfComposedDpEvent must be an int in the range [0, 1000000000000000]. Got 1.9"),
    ({"type": "SelfComposedDpEvent", "event": SG, "count": "5"}, "Got '5'"),
    ({"type": "SelfComposedDpEvent", "event": SG, "count": float("nan")}, "count must be a finite number"),
    ({"type": "SelfComposedDpEvent", "event": 3, "count": 2}, ".event must be a JSON object"),
    ({"type": "ComposedDpEvent", "events": [1, 2]}, ".events must be a list of JSON objects"),
    ({"type": "ComposedDpEvent", "events": "ab"}, ".events must be a list of JSON objects"),
    ({"type": "GaussianDpEvent", "noise_multiplier": "x"}, "'noise_multiplier'"),
])
def test_i4_w3_dp_events_of_the_wrong_type(cli, made, tmp_path, event, match):
    (tmp_path / "ev.json").write_text(json.dumps(event))
    code, _, err = _make_model(cli, made, tmp_path, "--dp-events", tmp_path / "ev.json")
    _one_line(code, err, match)
    assert not (tmp_path / "r").exists()


def test_w3_whole_counts_are_accounted_in_full(cli, made, tmp_path):
    """5 compositions (or 5.0) account 5 steps, the same figure as SubsampledGaussian(0.01, 1.0, 5)."""
    from dpaudit.accountants.events import SubsampledGaussian
    from dpaudit.accountants.ledger import PrivacyLedger

    led = PrivacyLedger(delta=1e-5)
    led.record("all", SubsampledGaussian(0.01, 1.0, 5))
    for count in (5, 5.0):
        shutil.rmtree(tmp_path / "r", ignore_errors=True)
        (tmp_path / "ev.json").write_text(json.dumps({"type": "SelfComposedDpEvent", "event": SG, "count": count}))
        code, _, err = _make_model(cli, made, tmp_path, "--dp-events", tmp_path / "ev.json")
        assert code == 0, err
        st = json.loads((tmp_path / "r" / "release.json").read_text())["statement"]
        assert st["statements"][0]["epsilon"] == pytest.approx(led.overall().epsilon, rel=1e-12)


@pytest.mark.parametrize("run,match", [
    ({"history": [[1.0, 0.01, 1.5]]}, "'history[0].steps' parameter of"),          # W3: never truncated to 1
    ({"history": [[1.0, 0.01, "5"]]}, "Got '5' instead"),
    ({"history": [[1.0, 0.01, float("nan")]]}, "Got nan instead"),
    ({"history": [["a", 0.01, 100]]}, "'history[0].noise_multiplier'"),           # I5
    ({"history": [[{}, 0.01, 100]]}, "'history[0].noise_multiplier'"),
    ({"history": [[1.0, 0.01]]}, "Entry 0 of"),
    ({"history": "abc"}, "must be a list of"),
    ({"history": [[1.0, 0.01, 10]], "notes": "abc"}, "'notes' parameter of OpacusRun"),
    ({"history": [[1.0, 0.01, 10]], "notes": [1, 2]}, "'notes' parameter of OpacusRun"),
    ({"history": [[1.0, 0.01, 10]], "opacus_accountant": [1]}, "'opacus_accountant'"),
    ({"history": [[1.0, 0.01, 10]], "poisson_sampling": "no"}, "'poisson_sampling' parameter of OpacusRun must be true, false or null"),  # W2
    ({"history": [[1.0, 0.01, 10]], "poisson_sampling": 0}, "'poisson_sampling'"),
    ({"history": [[1.0, 0.01, 10]], "poisson": False}, "unknown field(s) 'poisson'"),
])
def test_i5_w2_w3_opacus_runs_of_the_wrong_type(cli, made, tmp_path, run, match):
    (tmp_path / "op.json").write_text(json.dumps(run))
    code, _, err = _make_model(cli, made, tmp_path, "--opacus", tmp_path / "op.json")
    _one_line(code, err, match)
    assert not (tmp_path / "r").exists()


def test_w2_a_boolean_poisson_flag_is_reported_as_checked(cli, made, tmp_path):
    for flag, says, red in ((True, "checked: Poisson", False), (False, "NOT Poisson", True)):
        shutil.rmtree(tmp_path / "r", ignore_errors=True)
        (tmp_path / "op.json").write_text(json.dumps({"history": [[1.0, 0.01, 10]], "poisson_sampling": flag}))
        code, out, err = _make_model(cli, made, tmp_path, "--opacus", tmp_path / "op.json")
        assert code == 0, err
        meta = json.loads((tmp_path / "r" / "release.json").read_text())
        assert any(says in a for a in meta["assumptions"])
        assert ("sampling_not_poisson" in {f["code"] for f in meta["flags"]}) == red


@pytest.mark.parametrize("content,match", [
    (b"", "is empty"),                                                  # I6
    (b"\n\n", "is empty"),
    (b"a,b,label\n", "has a header row but no records"),
    (b"a,b,label\n\xff\xfe,1,0\n", "is not UTF-8 text"),                # I7
    (b"\xff\xfe,b\n1,0\n", "is not UTF-8 text"),
    (b"a,b,label\n1,nan,0\n2,3,1\n", "holds NaN"),
])
def test_i6_i7_csv_data(cli, made, tmp_path, content, match):
    (tmp_path / "d.csv").write_bytes(content)
    _, f, _ = made
    code, _, err = cli(["release", "make", "--out", tmp_path / "r", *CLAIM, "--model", f["skops"], "--data",
                        tmp_path / "d.csv", "--members", f["members"], "--nonmembers", f["nonmembers"]])
    _one_line(code, err, match)


def test_i6_empty_npz_inputs(cli, made, tmp_path):
    _, f, _ = made
    np.savez(tmp_path / "e.npz")
    code, _, err = cli(["release", "make", "--out", tmp_path / "r", *CLAIM, "--model", f["skops"], "--data",
                        tmp_path / "e.npz", "--members", f["members"], "--nonmembers", f["nonmembers"]])
    _one_line(code, err, "must hold arrays 'X' and 'y'")
    np.savez(tmp_path / "z.npz", X=np.zeros((0, 64)), y=np.zeros(0, int))
    code, _, err = cli(["release", "make", "--out", tmp_path / "r", *CLAIM, "--model", f["skops"], "--data",
                        tmp_path / "z.npz", "--members", f["members"], "--nonmembers", f["nonmembers"]])
    _one_line(code, err, "n >= 1")
    code, _, err = cli(["release", "make", "--out", tmp_path / "r", *CLAIM, "--scores", tmp_path / "e.npz"])
    _one_line(code, err, "exactly one kind of scores")


def test_w6_unknown_recipe_config_fields(cli, made, tmp_path):
    (tmp_path / "rc.json").write_text(json.dumps({"epochs": 2, "epocs": 3}))
    code, _, err = _make_model(cli, made, tmp_path, "--recipe-model", "mlp", "--recipe-config", tmp_path / "rc.json")
    _one_line(code, err, "unknown field(s) 'epocs'")
    (tmp_path / "rc.toml").write_text("epochs = 2\n[dp]\nnoise_multiplier = 1.0\nmax_grad_norm = 1.0\nsigma = 3\n")
    code, _, err = _make_model(cli, made, tmp_path, "--recipe-model", "mlp", "--recipe-config", tmp_path / "rc.toml")
    _one_line(code, err, "'TrainConfig.dp' has unknown field(s) 'sigma'")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("out", [".", "..", "sub/..", "/"])
def test_i9_release_make_out_dot(cli, made, tmp_path, monkeypatch, out):
    """`--out . --overwrite` would replace the current folder as a whole: refused before any input is read."""
    _, f, _ = made
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / "precious.txt").write_text("keep")
    monkeypatch.chdir(work)
    code, _, err = cli(["release", "make", "--out", out, "--overwrite", *CLAIM, "--scores", f["scores"]])
    _one_line(code, err, "must name a new folder for the bundle")
    assert sorted(p.name for p in work.iterdir()) == ["precious.txt", "sub"]
    assert (work / "precious.txt").read_text() == "keep"


# ---- dpaudit's own DP-SGD release: W1 (one granularity vocabulary), W4 (NaN Dirac observations), H1 (model cap) ---

@pytest.fixture(scope="module")
def dpsgd_release(tmp_path_factory):
    """CenTrain by DP-SGD (sigma = 1, one epoch, accounted epsilon ~ 2.3) with 20 Dirac canaries planted."""
    import torch

    from dpaudit.training.methods import run_method

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        res = run_method("centrain", out=tmp_path_factory.mktemp("dpsgd") / "rel", dataset="digits", seed=0,
                         progress=False, params={"method.epochs": 1, "method.noise_multiplier": 1.0,
                                                 "model.hidden": [8], "canaries.kind": "dirac", "canaries.count": 20})
    finally:
        torch.set_num_threads(before)
    return res.release


@pytest.mark.parametrize("granularity,held", [("example", True), ("record", True), ("user", False)])
def test_w1_a_true_claim_on_a_dpsgd_release_holds(dpsgd_release, cli, tmp_path, granularity, held):
    meta = json.loads((dpsgd_release / "release.json").read_text())
    assert meta["claim"]["granularity"] == "example" and meta["claim"]["epsilon"] < 100
    (tmp_path / "claims.toml").write_text(f'[[claim]]\nname = "dpsgd"\nrelease = "{dpsgd_release}"\nepsilon = 100.0\n'
                                          f'delta = 1e-5\ngranularity = "{granularity}"\n')
    code, out, err = cli(["check", tmp_path / "claims.toml"])
    assert code == (0 if held else 3), out + err      # a granularity mismatch: UNPROVEN (exit 3)
    assert ("granularity mismatch" in out) != held


def test_w1_older_releases_with_descriptive_granularities_still_compare(dpsgd_release, cli, tmp_path):
    b = shutil.copytree(dpsgd_release, tmp_path / "old")
    _edit_json(b, "claim.granularity", "record (add/remove one)")
    (tmp_path / "claims.toml").write_text(f'[[claim]]\nname = "old"\nrelease = "{b}"\nepsilon = 100.0\ndelta = 1e-5\n'
                                          'granularity = "example"\n')
    code, out, err = cli(["check", tmp_path / "claims.toml"])
    assert code == 0, out + err


def test_w4_nan_dirac_observations_are_refused(dpsgd_release, cli, tmp_path):
    from dpaudit.errors import DataError
    from dpaudit.training.release import load_release

    b = shutil.copytree(dpsgd_release, tmp_path / "nan")
    with np.load(b / "canaries.npz") as z:
        view = {k: z[k] for k in z.files}
    assert np.isfinite(view["observations"]).all()          # the released run stepped every step
    view["observations"][:] = np.nan
    (b / "canaries.npz").unlink()
    np.savez(b / "canaries.npz", **view)
    with pytest.raises(DataError, match=r"canaries.npz\[observations\]: holds NaN"):
        load_release(b)
    code, _, err = cli(["attack", b, "--audit", "one-run", "--quiet"])
    _one_line(code, err, "canaries.npz[observations]: holds NaN or infinite values")
    assert not (b / "attack").exists()


def test_h1_multi_run_model_count_is_capped_before_work(dpsgd_release, cli, monkeypatch, tmp_path):
    """The training layer's MAX_MODELS, as the method audits: refused before the data set is read or any
    ensemble is allocated."""
    import dpaudit.training.ensemble as ensemble
    from dpaudit.training.release import Release

    def forbidden(*a, **k):
        raise AssertionError("work started before the model count was checked")

    monkeypatch.setattr(Release, "dataset", forbidden)
    monkeypatch.setattr(ensemble, "train_ensemble", forbidden)
    t0 = time.perf_counter()
    code, _, err = cli(["attack", dpsgd_release, "--audit", "multi-run", "--models", "100000000", "--quiet",
                        "--out", tmp_path / "multi"])
    line = _one_line(code, err, "'models' parameter of CanaryAudit must be an int in the range [2, 100000]")
    assert "100000000" in line and time.perf_counter() - t0 < 5
    code, _, err = cli(["attack", dpsgd_release, "--audit", "one-run", "--canaries", str(10**9), "--quiet",
                        "--out", tmp_path / "one"])
    _one_line(code, err, "'canaries' parameter of CanaryAudit")
    from dpaudit.auditing.canary_audit import canary_audit_release
    from dpaudit.errors import ParameterError

    with pytest.raises(ParameterError, match=r"'models' parameter of canary audit must be an int in the range"):
        canary_audit_release(dpsgd_release, audit="multi-run", models=10**8)

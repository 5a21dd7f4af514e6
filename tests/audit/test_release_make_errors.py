"""Bad input to `dpaudit release make` never reaches a traceback: one clear line, exit 2, nothing written."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from byom_artefacts import digits_files, scores_file, torch_files
from dpaudit.cli import main

CLAIM = ["--claim", "epsilon=8", "--claim", "delta=1e-5", "--claim", "granularity=record"]


@pytest.fixture(scope="module")
def art(tmp_path_factory):
    root = tmp_path_factory.mktemp("byom_bad")
    files = digits_files(root)
    files.update(torch_files(root))
    files["scores"] = scores_file(root, n=30, references=False)
    return root, files


def _fail(args, tmp_path, capsys, match):
    out = tmp_path / "rel"
    with pytest.raises(SystemExit) as exc:
        main(["release", "make", "--out", str(out), *CLAIM, *args])
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dpaudit: error:") and "Traceback" not in err, err
    assert match in lines[0], lines[0]
    assert not out.exists() and not list(tmp_path.glob(".rel*")), "something was written"
    return lines[0]


def _model_args(f, **over):
    d = {"--model": f["skops"], "--data": f["data"], "--members": f["members"], "--nonmembers": f["nonmembers"], **over}
    return [x for k, v in d.items() if v is not None for x in (k, str(v))]


def test_mismatched_lengths(art, tmp_path, capsys):
    root, f = art
    np.save(tmp_path / "X.npy", np.zeros((10, 64)))
    np.save(tmp_path / "y.npy", np.zeros(9, int))
    _fail(_model_args(f, **{"--data": tmp_path / "X.npy", "--labels": tmp_path / "y.npy"}), tmp_path, capsys,
          "differ in length")
    np.save(tmp_path / "mask.npy", np.ones(5, bool))
    _fail(_model_args(f, **{"--members": tmp_path / "mask.npy"}), tmp_path, capsys, "mask has 5 entries")


def test_overlapping_members_and_nonmembers(art, tmp_path, capsys):
    root, f = art
    np.save(tmp_path / "non.npy", np.r_[np.load(f["members"])[:3], np.load(f["nonmembers"])])
    _fail(_model_args(f, **{"--nonmembers": tmp_path / "non.npy"}), tmp_path, capsys, "overlap in 3 record(s)")


def test_nan_and_non_normalised_scores(art, tmp_path, capsys):
    root, f = art
    z = dict(np.load(f["scores"]))
    z["probs_test"] = z["probs_test"].copy()
    z["probs_test"][4, 1] = np.nan
    np.savez(tmp_path / "nan.npz", **z)
    _fail(["--scores", str(tmp_path / "nan.npz")], tmp_path, capsys, "'probs_test' contains NaN")
    z["probs_test"][4] = 0.5
    np.savez(tmp_path / "sum.npz", **z)
    _fail(["--scores", str(tmp_path / "sum.npz")], tmp_path, capsys, "row (4,) sums to 2")
    z2 = dict(np.load(f["scores"]))
    z2["labels_train"] = z2["labels_train"][:-1]
    np.savez(tmp_path / "len.npz", **z2)
    _fail(["--scores", str(tmp_path / "len.npz")], tmp_path, capsys, "one per record")


def test_weights_not_matching_the_factory(art, tmp_path, capsys):
    root, f = art
    import torch
    from safetensors.torch import load_file, save_file

    state = load_file(str(f["weights"]))
    state.pop("3.bias")
    state["extra.weight"] = torch.zeros(2)
    state["1.weight"] = torch.zeros(32, 64)
    save_file(state, str(tmp_path / "bad.safetensors"))
    line = _fail(_model_args(f, **{"--model": tmp_path / "bad.safetensors", "--factory": "byomnet:build"}), tmp_path,
                 capsys, "does not match the module")
    assert "missing 3.bias" in line and "unexpected extra.weight" in line and "1.weight (32, 64) vs (16, 64)" in line


def test_import_paths_that_do_not_exist(art, tmp_path, capsys):
    root, f = art
    w = {"--model": f["weights"]}
    _fail(_model_args(f, **w, **{"--factory": "no_such_mod:build"}), tmp_path, capsys, "no module named 'no_such_mod'")
    _fail(_model_args(f, **w, **{"--factory": "no_such_pkg.mod:build"}), tmp_path, capsys, "a module of a package")
    _fail(_model_args(f, **w, **{"--factory": "byomnet:nothing"}), tmp_path, capsys, "has no attribute 'nothing'")
    _fail(_model_args(f, **w, **{"--factory": "byomnet"}), tmp_path, capsys, "import path 'module:function'")
    _fail(_model_args(f, **{"--train-fn": "byomtrain:missing"}), tmp_path, capsys, "has no attribute 'missing'")
    _fail(_model_args(f, **w, **{"--factory": str(tmp_path / "gone.py") + ":build"}), tmp_path, capsys, "does not exist")
    _fail(_model_args(f, **w, **{"--factory": "os:system"}), tmp_path, capsys, "not from the standard library")


def test_changed_or_injected_code_does_not_run_at_load(art, tmp_path, capsys):
    """A release runs the code it was made with or nothing: without --factory / --trust-bundle-code its code never
    runs; an edited factory file or a release.json naming another function is refused in one line when the release
    is attacked."""
    import json
    import shutil

    root, f = art
    shutil.copy(root / "byomnet.py", tmp_path / "net2.py")
    rel = tmp_path / "made"
    with pytest.raises(SystemExit) as exc:
        main(["release", "make", "--out", str(rel), *CLAIM, *_model_args(f, **{"--model": f["weights"],
              "--factory": f"{tmp_path / 'net2.py'}:build"})])
    assert exc.value.code == 0
    capsys.readouterr()
    out = ["--out", str(tmp_path / "attack")]
    with pytest.raises(SystemExit) as exc:          # the bundle's code is not the user's: refused, says what to pass
        main(["attack", str(rel), "--attack", "threshold", *out])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--factory FILE.py:build" in err and "--trust-bundle-code" in err
    (tmp_path / "net2.py").write_text((tmp_path / "net2.py").read_text() + "\nprint('changed')\n")
    with pytest.raises(SystemExit) as exc:
        main(["attack", str(rel), "--attack", "threshold", "--trust-bundle-code", *out])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "the code changed since the release was made" in err
    with pytest.raises(SystemExit) as exc:
        main(["attack", str(rel), "--attack", "threshold", "--factory", f"{tmp_path / 'net2.py'}:build", *out])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "only from the very code it was made with" in err
    meta = json.loads((rel / "release.json").read_text())
    meta["model"]["spec"]["kwargs"]["factory"] = "subprocess:getoutput"
    (rel / "release.json").write_text(json.dumps(meta))
    with pytest.raises(SystemExit) as exc:
        main(["attack", str(rel), "--attack", "threshold", "--trust-bundle-code", *out])
    assert exc.value.code == 2 and "not from the standard library" in capsys.readouterr().err
    assert not (tmp_path / "attack").exists()


def test_pickle_based_files_are_refused(art, tmp_path, capsys):
    root, f = art
    (tmp_path / "model.pt").write_bytes(pickle.dumps({"w": [1, 2]}))
    line = _fail(_model_args(f, **{"--model": tmp_path / "model.pt"}), tmp_path, capsys, "pickle-based file (.pt)")
    assert "safetensors.torch.save_file" in line
    (tmp_path / "model.skops").write_bytes(pickle.dumps([1]))
    _fail(_model_args(f, **{"--model": tmp_path / "model.skops"}), tmp_path, capsys, "is a pickle")
    (tmp_path / "w.safetensors").write_bytes(pickle.dumps({"w": [1, 2]}))
    _fail(_model_args(f, **{"--model": tmp_path / "w.safetensors", "--factory": "byomnet:build"}), tmp_path, capsys,
          "not a readable safetensors file")
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    _fail(_model_args(f, **{"--members": tmp_path / "obj.npy"}), tmp_path, capsys, "never unpickles")


@pytest.mark.parametrize("args,match", [
    (["--claim", "granularity=galaxy"], "granularity"),
    (["--claim", "epsilon=-1"], "epsilon"),
    (["--factory-kwargs", "{oops"], "--factory-kwargs"),
])
def test_bad_options(art, tmp_path, capsys, args, match):
    root, f = art
    _fail(_model_args(f) + args, tmp_path, capsys, match)


def test_model_and_scores_together(art, tmp_path, capsys):
    root, f = art
    _fail(_model_args(f) + ["--scores", str(f["scores"])], tmp_path, capsys, "exactly one of a model")

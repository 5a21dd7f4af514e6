"""S5 (issue 23): every npz dpaudit reads goes through one capped loader, which reads the zip directory (and the
.npy headers) before unpacking anything: a 3 MB archive that unpacks to 3.4 GB is refused at once, without
allocating, wherever it is handed in. The cap is 1 GiB unless DPAUDIT_MAX_ARRAY_BYTES says otherwise."""

from __future__ import annotations

import io
import shutil
import time
import tracemalloc
import zipfile

import numpy as np
import pytest

from sec_helpers import CLAIM, digits_arrays, zip_bomb_npz
from dpaudit._io import ARRAY_BYTES_ENV, DEFAULT_MAX_ARRAY_BYTES, MAX_ZIP_MEMBERS, load_npz_file
from dpaudit.errors import DataError, ParameterError


@pytest.fixture(scope="module")
def bomb(tmp_path_factory):
    p = tmp_path_factory.mktemp("bomb") / "bomb.npz"
    total = zip_bomb_npz(p, key="X", megabytes=3300)
    assert p.stat().st_size < 4 << 20 and total > 3 * DEFAULT_MAX_ARRAY_BYTES
    return p


def _refused_small(fn, match):
    """``fn`` raises a DataError matching ``match`` while Python-visible allocations stay under 32 MB."""
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(DataError, match=match):
            fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, f"allocated {peak} bytes before refusing"
    return time.perf_counter() - t0          # reported by the closing note, never asserted


def _one_error(cli, args, *needles):
    code, _, err = cli(args)
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("[dpaudit")]  # progress lines aside
    assert code == 2 and len(lines) == 1 and lines[0].startswith("dpaudit: error:"), err
    for n in needles:
        assert n in lines[0], lines[0]


def test_a_real_zip_bomb_is_refused_before_unpacking(bomb):
    with zipfile.ZipFile(bomb) as zf:                      # a valid archive: its directory tells the truth
        assert zf.infolist()[0].file_size == 3300 << 20
    _refused_small(lambda: load_npz_file(bomb, "the data file"), "would unpack to 3460300800 bytes")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A bundle with bundled data (scikit-learn model) and a scores-only bundle, made by `release make`."""
    import skops.io as sio
    from sklearn.linear_model import LogisticRegression

    from dpaudit.attacks.scores import synthetic_scores
    from dpaudit.auditing.release_make import make_release

    root = tmp_path_factory.mktemp("made")
    X, y = digits_arrays()
    np.savez(root / "data.npz", X=X, y=y)
    np.save(root / "m.npy", np.arange(100))
    np.save(root / "n.npy", np.arange(100, 200))
    sio.dump(LogisticRegression(max_iter=50).fit(X[:100], y[:100]), root / "model.skops")
    data_bundle = make_release(root / "data_bundle", claim=CLAIM, model=root / "model.skops", data=root / "data.npz",
                               members=root / "m.npy", nonmembers=root / "n.npy")
    np.savez(root / "scores.npz", **synthetic_scores(60, num_classes=3, kind="probabilities", seed=0))
    scores_bundle = make_release(root / "scores_bundle", claim=CLAIM, scores=root / "scores.npz")
    return root, data_bundle, scores_bundle


def test_bombs_in_every_npz_input_are_refused(bomb, made, tmp_path, cli):
    root, data_bundle, scores_bundle = made
    claim = [x for c in CLAIM for x in ("--claim", c)]
    _one_error(cli, ["release", "make", "--out", tmp_path / "r1", "--model", root / "model.skops", "--data", bomb,
                     "--members", root / "m.npy", "--nonmembers", root / "n.npy", *claim], "would unpack to")
    _one_error(cli, ["release", "make", "--out", tmp_path / "r2", "--scores", bomb, *claim], "would unpack to")
    _one_error(cli, ["release", "make", "--out", tmp_path / "r3", "--model", root / "model.skops", "--data",
                     root / "data.npz", "--members", bomb, "--nonmembers", root / "n.npy", *claim], "would unpack to")
    assert not any(tmp_path.iterdir())
    b = tmp_path / "data_bundle"
    shutil.copytree(data_bundle, b)
    shutil.copy(bomb, b / "data.npz")
    _one_error(cli, ["attack", b, "--attack", "threshold", "--out", tmp_path / "o1", "--quiet"], "would unpack to")
    s = tmp_path / "scores_bundle"
    shutil.copytree(scores_bundle, s)
    shutil.copy(bomb, s / "scores.npz")
    _one_error(cli, ["attack", s, "--attack", "threshold", "--out", tmp_path / "o2", "--quiet"], "would unpack to")
    from dpaudit.training.release import load_release

    _refused_small(lambda: load_release(s), "would unpack to")
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()


def test_bombs_as_canary_files_and_unit_checkpoints(bomb, tmp_path):
    from dpaudit.executors import Unit, load_checkpoint
    from dpaudit.training.canaries import load_canaries

    _refused_small(lambda: load_canaries(bomb), "would unpack to")
    shutil.copy(bomb, tmp_path / "models-0-2.npz")
    tracemalloc.start()
    try:
        assert load_checkpoint(tmp_path, Unit("models-0-2", print), salt="x") is None   # recompute, never unpack
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20


def test_the_cap_is_configurable_and_checked(tmp_path, monkeypatch, cli):
    p = tmp_path / "small.npz"
    np.savez(p, X=np.zeros(1000))
    assert load_npz_file(p, "the data file")["X"].shape == (1000,)
    monkeypatch.setenv(ARRAY_BYTES_ENV, "4000")
    with pytest.raises(DataError, match=f"at most 4000 here \\(set {ARRAY_BYTES_ENV}"):
        load_npz_file(p, "the data file")
    monkeypatch.setenv(ARRAY_BYTES_ENV, "lots")
    with pytest.raises(ParameterError, match=ARRAY_BYTES_ENV):
        load_npz_file(p, "the data file")
    _one_error(cli, ["release", "make", "--out", tmp_path / "r", "--scores", p, "--claim", "epsilon=1",
                     "--claim", "delta=1e-5"], ARRAY_BYTES_ENV)


def test_many_members_and_lying_npy_headers(tmp_path, cli):
    many = tmp_path / "many.npz"
    with zipfile.ZipFile(many, "w") as zf:
        for i in range(MAX_ZIP_MEMBERS + 1):
            zf.writestr(f"a{i}.npy", b"")
    with pytest.raises(DataError, match=f"holds {MAX_ZIP_MEMBERS + 1} members"):
        load_npz_file(many, "the data file")
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f8", "fortran_order": False, "shape": (10**12,)})
    (tmp_path / "X.npy").write_bytes(buf.getvalue() + bytes(64))     # promises 8 TB, holds 64 bytes
    np.save(tmp_path / "y.npy", np.zeros(8, dtype=np.int64))
    np.save(tmp_path / "m.npy", np.arange(2))
    np.save(tmp_path / "n.npy", np.arange(2, 4))
    _one_error(cli, ["release", "make", "--out", tmp_path / "r", "--model", tmp_path / "x.skops", "--data",
                     tmp_path / "X.npy", "--labels", tmp_path / "y.npy", "--members", tmp_path / "m.npy",
                     "--nonmembers", tmp_path / "n.npy", "--claim", "epsilon=1", "--claim", "delta=1e-5"],
               "header promises")

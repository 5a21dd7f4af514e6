"""Files (issue 23, S3 / S4 / symlinked folders): lock files never follow a link or clobber a foreign file;
--overwrite replaces only a folder dpaudit wrote; a bundle holding a link at any depth is refused."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from sec_helpers import CLAIM, user_files
from dpaudit._io import OUTPUT_MARKER, atomic_dir, check_replaceable, exclusive_lock
from dpaudit.errors import DPAuditError, OutputError
from dpaudit.training.release import load_release


def _one_error(code, err, *needles):
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("[dpaudit")]  # progress lines aside
    assert code == 2 and len(lines) == 1 and lines[0].startswith("dpaudit: error:"), err
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.fixture
def victim(tmp_path):
    v = tmp_path / "victim.txt"
    v.write_text("precious\n")
    yield v
    assert v.read_text() == "precious\n", "a file outside the output folder changed"


# --------------------------------------------------------------------------------------------------
# S3: locks


def test_s3_a_symlinked_lock_is_refused_never_followed(tmp_path, victim):
    out = tmp_path / "out"
    out.mkdir()
    (out / ".dpaudit.lock").symlink_to(victim)
    with pytest.raises(OutputError, match="is a symbolic link"):
        with exclusive_lock(out):
            pass
    sibling = tmp_path / ".rel.lock"            # a release's lock beside it (the release is written atomically)
    sibling.symlink_to(victim)
    with pytest.raises(OutputError, match="is a symbolic link"):
        with exclusive_lock(tmp_path / "rel", lock_file=sibling):
            pass
    dangling = tmp_path / "o2"
    dangling.mkdir()
    (dangling / ".dpaudit.lock").symlink_to(tmp_path / "created-through-the-link")
    with pytest.raises(OutputError, match="is a symbolic link"):
        with exclusive_lock(dangling):
            pass
    assert not (tmp_path / "created-through-the-link").exists()


def test_s3_a_foreign_file_or_hard_link_at_the_lock_is_not_truncated(tmp_path, victim):
    out = tmp_path / "out"
    out.mkdir()
    os.link(victim, out / ".dpaudit.lock")
    with pytest.raises(OutputError, match="hard links"):
        with exclusive_lock(out):
            pass
    (out / ".dpaudit.lock").unlink()
    (out / ".dpaudit.lock").write_text("my notes, not a lock\n")
    with pytest.raises(OutputError, match="not a dpaudit lock file"):
        with exclusive_lock(out):
            pass
    assert (out / ".dpaudit.lock").read_text() == "my notes, not a lock\n"
    (out / ".dpaudit.lock").unlink()
    with exclusive_lock(out, "dpaudit test"):    # its own lock file is reused run after run
        pass
    with exclusive_lock(out, "dpaudit test"):
        assert "dpaudit test (pid" in (out / ".dpaudit.lock").read_text()


def test_s3_cli_audit_and_train_refuse_a_planted_lock_link(tmp_path, victim, cli):
    out = tmp_path / "run"
    out.mkdir()
    (out / ".dpaudit.lock").symlink_to(victim)
    code, _, err = cli(["audit", "--out", out, "--quiet"])
    _one_error(code, err, "is a symbolic link")
    (tmp_path / ".rel.lock").symlink_to(victim)
    code, _, err = cli(["train", "centrain", "--out", tmp_path / "rel", "--quiet", "--set", "method.epochs=1"])
    _one_error(code, err, "is a symbolic link")
    assert not (tmp_path / "rel").exists()


# --------------------------------------------------------------------------------------------------
# S4: --overwrite


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return user_files(tmp_path_factory.mktemp("maker"))


def _make(files, out, *extra):
    return ["release", "make", "--out", out, "--model", files["weights"], "--factory", f"{files['factory']}:build",
            "--factory-kwargs", '{"hidden": 8}', "--data", files["data"], "--members", files["members"],
            "--nonmembers", files["nonmembers"], *[x for c in CLAIM for x in ("--claim", c)], *extra]


def test_s4_overwrite_never_removes_a_folder_dpaudit_did_not_write(tmp_path, files, cli):
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "thesis.tex").write_text("years of work")
    code, _, err = cli(_make(files, precious, "--overwrite"))
    _one_error(code, err, "was not written by dpaudit", OUTPUT_MARKER)
    assert (precious / "thesis.tex").read_text() == "years of work"
    code, _, err = cli(["train", "centrain", "--out", precious, "--overwrite", "--quiet", "--set", "method.epochs=1"])
    _one_error(code, err, "was not written by dpaudit")
    assert sorted(p.name for p in precious.iterdir()) == ["thesis.tex"]
    with pytest.raises(OutputError, match="not written by dpaudit"):
        with atomic_dir(precious, overwrite=True):
            pass
    assert (precious / "thesis.tex").exists()


def test_s4_overwrite_replaces_a_bundle_dpaudit_wrote(tmp_path, files, cli):
    out = tmp_path / "rel"
    code, _, err = cli(_make(files, out))
    assert code == 0, err
    assert (out / OUTPUT_MARKER).is_file()
    code, _, err = cli(_make(files, out))
    _one_error(code, err, "already exists", "--overwrite")
    code, _, err = cli(_make(files, out, "--overwrite"))
    assert code == 0, err


@pytest.mark.parametrize("where", [".", "..", "home", "cwd-parent", "root"])
def test_s4_overwrite_refuses_dot_dotdot_home_and_root(tmp_path, files, cli, monkeypatch, where):
    work = tmp_path / "home" / "work"
    work.mkdir(parents=True)
    (work / OUTPUT_MARKER).write_text('{"schema": "dpaudit-output", "version": 1, "kind": "release"}')   # even marked
    (work / "keep.txt").write_text("keep")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(work)
    target = {".": ".", "..": "..", "home": str(tmp_path / "home"), "cwd-parent": str(tmp_path), "root": "/"}[where]
    code, _, err = cli(_make(files, target, "--overwrite"))
    _one_error(code, err)   # refused by release make's name check ('.', '..', '/') or by the --overwrite rule
    assert "--overwrite never replaces" in err or "must name a new folder" in err, err
    assert (work / "keep.txt").read_text() == "keep"
    with pytest.raises(OutputError, match="never replaces"):
        check_replaceable(target)


def test_attack_refuses_earlier_results_and_foreign_folders(forest_release, tmp_path, cli):
    rel = forest_release(members=100, trees=3)
    args = ["attack", rel, "--attack", "threshold", "--bootstrap", "0", "--classifier", "logreg", "--quiet"]
    code, _, err = cli(args + ["--out", tmp_path / "a"])
    assert code == 0, err
    code, _, err = cli(args + ["--out", tmp_path / "a"])
    _one_error(code, err, "already holds the results of an earlier attack", "--overwrite")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "attack.json").write_text("mine")
    code, _, err = cli(args + ["--out", foreign, "--overwrite"])
    _one_error(code, err, "was not written by dpaudit")
    assert (foreign / "attack.json").read_text() == "mine"
    (foreign / "attack.json").unlink()
    (foreign / "notes.txt").write_text("mine")
    code, _, err = cli(args + ["--out", foreign])
    _one_error(code, err, "was not written by dpaudit")


# --------------------------------------------------------------------------------------------------
# symbolic links at any depth of a bundle


def test_a_symlinked_sub_folder_of_a_bundle_is_refused(forest_release, tmp_path, cli):
    b = tmp_path / "bundle"
    shutil.copytree(forest_release(members=100, trees=3), b)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (b / "extra" / "deeper").mkdir(parents=True)
    (b / "extra" / "deeper" / "linked").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(DPAuditError, match="extra/deeper/linked is a symbolic link"):
        load_release(b)
    code, _, err = cli(["attack", b, "--attack", "threshold", "--out", tmp_path / "out"])
    _one_error(code, err, "is a symbolic link", "at any depth")
    (b / "extra" / "deeper" / "linked").unlink()
    (b / "extra" / "file.npz").symlink_to(tmp_path / "victim.npz")
    with pytest.raises(DPAuditError, match="is a symbolic link"):
        load_release(b)
    (b / "extra" / "file.npz").unlink()
    (b / "sub").symlink_to(elsewhere, target_is_directory=True)       # top level, a folder
    with pytest.raises(DPAuditError, match="symbolic link"):
        load_release(b)
    (b / "sub").unlink()
    assert load_release(b).meta["method"] == "baseline"


def test_check_reads_no_linked_release_json(forest_release, tmp_path, cli, victim):
    b = tmp_path / "bundle"
    shutil.copytree(forest_release(members=100, trees=3), b)
    os.replace(b / "release.json", tmp_path / "outside.json")
    (b / "release.json").symlink_to(tmp_path / "outside.json")
    (tmp_path / "claims.toml").write_text(f'[[claim]]\nname = "c"\nrelease = "{b}"\nepsilon = 1.0\ndelta = 1e-5\n'
                                          'granularity = "example"\n')
    code, _, err = cli(["check", tmp_path / "claims.toml"])
    _one_error(code, err, "symbolic link")
    assert Path(tmp_path / "outside.json").is_file()


def test_an_audit_run_directory_inside_a_release_bundle_is_refused(forest_release, tmp_path, cli):
    b = tmp_path / "bundle"
    shutil.copytree(forest_release(members=100, trees=3), b)
    (tmp_path / "audit.toml").write_text(f'[[models]]\nname = "m"\nrelease = "{b}"\n\n[[attacks]]\nkind = "threshold"\n')
    code, _, err = cli(["audit", tmp_path / "audit.toml", "--out", b / "run", "--quiet"])
    _one_error(code, err, "inside the release bundle")
    assert not (b / "run").exists()

"""The trainer audit's surfaces (``dpaudit audit-trainer``, claims with ``attack = {kind = "trainer"}``): the code
that runs is the file the user named, pinned by its sha256; standard-library and package paths are refused; an
``--out`` that is a link is refused before the run; a folder dpaudit did not write is never replaced."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLAIM = ["--claim", "epsilon=2", "--claim", "delta=1e-5", "--quiet"]


def test_out_as_a_link_is_refused_before_the_run(cli, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / "out"
    link.symlink_to(target)
    ran = tmp_path / "ran"
    src = tmp_path / "t.py"
    src.write_text(f"def train(X, y, *, seed, hook):\n    open({str(ran)!r}, 'w').close()\n")
    code, _, err = cli(["audit-trainer", f"{src}:train", *CLAIM, "--out", str(link)])
    assert code == 2 and "symbolic link" in err
    assert not ran.exists() and list(target.iterdir()) == []


def test_a_foreign_folder_is_not_replaced(cli, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "precious.txt").write_text("x")
    code, _, err = cli(["audit-trainer", f"{ROOT / 'examples/trainers/dpsgd_correct.py'}:train", *CLAIM,
                        "--out", str(out), "--overwrite"])
    assert code == 2 and (out / "precious.txt").read_text() == "x"


@pytest.mark.parametrize("path", ["os.py:getcwd", "json:loads", "dpaudit/api.py:check"])
def test_foreign_code_is_refused(cli, path):
    code, _, err = cli(["audit-trainer", path, *CLAIM])
    assert code == 2, err


def test_the_sha256_of_the_bytes_that_ran_is_recorded(cli, tmp_path):
    import hashlib
    import json

    src = ROOT / "examples" / "trainers" / "dpsgd_bug_sigma_wrong_field.py"
    code, out, _ = cli(["audit-trainer", f"{src}:train", *CLAIM, "--json"])
    assert code == 1
    assert json.loads(out)["sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()

"""S1 / S2 (issue 23): no code a bundle names runs unless the user names the same code (or opts in), and then only
the pinned bytes of one source file of their own.

Every attempt below plants a payload that would create a sentinel file; each asserts that the sentinel never
appears, through the CLI (exit 2, one ``dpaudit: error:`` line) and the library where it makes sense.
"""

from __future__ import annotations

import pickle
import py_compile
import shutil
import subprocess
import sys
import importlib.util
from pathlib import Path

import pytest

from sec_helpers import CLAIM, set_factory, set_train_fn, sha256, torch_bundle, touch_src
from dpaudit.errors import DataError, DPAuditError
from dpaudit.training.release import load_release
from dpaudit.training.usercode import BundleCode, load_callable, pin_code, run_pinned


@pytest.fixture(scope="module")
def honest(tmp_path_factory):
    root = tmp_path_factory.mktemp("maker")
    bundle, files = torch_bundle(root / "src", root / "bundle")
    return bundle, files


@pytest.fixture
def bundle(honest, tmp_path):
    b = tmp_path / "bundle"
    shutil.copytree(honest[0], b)
    return b


@pytest.fixture
def sentinel(tmp_path):
    s = tmp_path / "PWNED"
    yield s
    assert not s.exists(), "a payload ran"


class _OpenOnLoad:
    """Unpickling this creates the sentinel (it calls open(path, 'w'))."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def _refused(cli, args, *needles):
    code, out, err = cli(args)
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("[dpaudit")]  # progress lines aside
    assert code == 2, (code, out, err)
    assert len(lines) == 1 and lines[0].startswith("dpaudit: error:") and "Traceback" not in err, err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def _attack(bundle, tmp_path, *extra):
    return ["attack", bundle, "--attack", "threshold", "--bootstrap", "0", "--classifier", "logreg",
            "--out", tmp_path / "out", *extra]


def test_s1a_attribute_chain_with_unpickling_kwargs_never_runs(bundle, tmp_path, sentinel, cli):
    (bundle / "payload.pkl").write_bytes(pickle.dumps(_OpenOnLoad(sentinel)))
    (bundle / "factory.py").write_text("import torch\n\ndef build():\n    return torch.nn.Linear(64, 10)\n")
    set_factory(bundle, "factory.py:torch.load", sha256(bundle / "factory.py"),
                {"f": str(bundle / "payload.pkl"), "weights_only": False})
    for extra in ([], ["--trust-bundle-code"]):
        _refused(cli, _attack(bundle, tmp_path, *extra), "attribute chains")
    with pytest.raises(DPAuditError, match="attribute chains"):
        load_release(bundle, code=BundleCode(trust_bundle=True))
    assert not (tmp_path / "out").exists()


def test_s1b_third_party_module_with_a_forged_matching_digest_never_runs(bundle, tmp_path, sentinel, cli):
    import torch

    (bundle / "payload.pkl").write_bytes(pickle.dumps(_OpenOnLoad(sentinel)))
    set_factory(bundle, "torch:load", sha256(Path(torch.__file__)),          # the digest matches torch/__init__.py
                {"f": str(bundle / "payload.pkl"), "weights_only": False})
    _refused(cli, _attack(bundle, tmp_path), "third-party")
    _refused(cli, _attack(bundle, tmp_path, "--trust-bundle-code"), "third-party")
    with pytest.raises(DPAuditError, match="third-party"):
        load_callable("torch:load", "--factory")                              # named by the user: refused too
    # the same bundle through `dpaudit audit` and `dpaudit check`
    (tmp_path / "audit.toml").write_text(f'[[models]]\nname = "m"\nrelease = "{bundle}"\n\n[[attacks]]\nkind = "threshold"\n')
    _refused(cli, ["audit", tmp_path / "audit.toml", "--out", tmp_path / "run", "--quiet", "--trust-bundle-code"],
             "third-party")
    (tmp_path / "claims.toml").write_text(f'[[claim]]\nname = "c"\nrelease = "{bundle}"\nepsilon = 8.0\ndelta = 1e-5\n'
                                          'granularity = "example"\nattack = { kind = "threshold" }\n')
    _refused(cli, ["check", tmp_path / "claims.toml", "--trust-bundle-code"], "third-party")
    _refused(cli, ["check", tmp_path / "claims.toml"], "third-party")


def test_s1c_standard_library_by_file_path_and_by_module_never_runs(bundle, tmp_path, sentinel, cli):
    stdlib = Path(subprocess.__file__)
    kwargs = {"args": ["touch", str(sentinel)]}
    set_factory(bundle, f"{stdlib}:run", sha256(stdlib), kwargs)
    _refused(cli, _attack(bundle, tmp_path, "--trust-bundle-code"), "standard library")
    set_factory(bundle, "subprocess:run", sha256(stdlib), kwargs)
    _refused(cli, _attack(bundle, tmp_path, "--trust-bundle-code"), "standard library")
    link = tmp_path / "innocent.py"           # a link outside any bundle, to the standard library's file
    link.symlink_to(stdlib)
    with pytest.raises(DPAuditError, match="standard library"):
        load_callable(f"{link}:run", "--factory", sha256=sha256(stdlib))
    with pytest.raises(DPAuditError, match="dpaudit"):
        load_callable("dpaudit:attack", "--factory")


def test_bundle_code_never_runs_unless_named_and_then_only_the_pinned_code(bundle, honest, tmp_path, sentinel, cli):
    _, files = honest
    line = _refused(cli, _attack(bundle, tmp_path), "--factory FILE.py:build", "--trust-bundle-code")
    assert "runs no code a bundle names" in line
    # the user's own copy with other bytes (and a payload at its top): refused before any of it runs
    other = tmp_path / "net.py"
    other.write_text(touch_src(sentinel) + files["factory"].read_text())
    _refused(cli, _attack(bundle, tmp_path, "--factory", f"{other}:build"), "only from the very code it was made with")
    _refused(cli, _attack(bundle, tmp_path, "--factory", f"{files['factory']}:other"), "names the function 'other'")
    # the same code: it runs
    code, out, err = cli(_attack(bundle, tmp_path, "--factory", f"{files['factory']}:build", "--quiet"))
    assert code == 0 and err == "" and "AUC" in out, err


def test_trust_bundle_code_prints_exactly_what_runs_first(bundle, honest, tmp_path, cli):
    _, files = honest
    code, out, err = cli(_attack(bundle, tmp_path, "--trust-bundle-code"))
    assert code == 0, err
    notice = [ln for ln in err.splitlines() if "--trust-bundle-code" in ln]
    assert len(notice) == 1
    assert str(files["factory"].resolve()) in notice[0] and sha256(files["factory"]) in notice[0]
    assert "function build" in notice[0] and '{"hidden": 8}' in notice[0]


def test_kwargs_are_json_scalars_and_lists_only(bundle, honest, tmp_path, cli):
    _, files = honest
    set_factory(bundle, f"{files['factory']}:build", sha256(files["factory"]), {"hidden": {"nested": 1}})
    _refused(cli, _attack(bundle, tmp_path, "--trust-bundle-code"), "factory_kwargs", "'hidden'")


def test_a_bundles_training_function_needs_the_users_name_too(bundle, honest, tmp_path, sentinel, cli):
    _, files = honest
    evil = bundle / "recipe.py"
    evil.write_text(touch_src(sentinel) + "def train(X, y, seed):\n    raise SystemExit\n")
    set_train_fn(bundle, "recipe.py:train", sha256(evil))
    args = ["attack", bundle, "--attack", "shadow", "--shadows", "2", "--classifier", "logreg", "--bootstrap", "0",
            "--out", tmp_path / "out", "--factory", f"{files['factory']}:build", "--quiet"]
    _refused(cli, args, "training function", "--train-fn FILE.py:train")
    _refused(cli, args + ["--train-fn", f"{files['train']}:train"], "only from the very code it was made with")
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------------------------------
# S2: the pinned bytes, not a cache, not a package, not a second read


def test_s2_a_planted_unchecked_hash_pyc_never_runs(tmp_path, sentinel, monkeypatch):
    code = tmp_path / "code"
    code.mkdir()
    src = code / "netmod.py"
    src.write_text("def build():\n    return 'from the source'\n")
    evil = tmp_path / "evil_netmod.py"
    evil.write_text(touch_src(sentinel) + "def build():\n    return 'from the pyc'\n")
    pyc = Path(importlib.util.cache_from_source(str(src)))
    pyc.parent.mkdir()
    py_compile.compile(str(evil), cfile=str(pyc), dfile=str(src),
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    # control: a normal import does run the planted bytecode (so this test can fail)
    subprocess.run([sys.executable, "-c", "import netmod"], cwd=code, check=True)
    assert sentinel.exists()
    sentinel.unlink()
    monkeypatch.chdir(code)
    before = pyc.read_bytes()
    build = load_callable("netmod:build", "--factory", sha256=sha256(src))
    assert build() == "from the source" and not sentinel.exists()
    assert pyc.read_bytes() == before and sorted(p.name for p in pyc.parent.iterdir()) == [pyc.name]  # none written


def test_s2_package_init_never_runs(tmp_path, sentinel, monkeypatch):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(touch_src(sentinel))
    (pkg / "helper.py").write_text(touch_src(sentinel))
    (pkg / "mod.py").write_text("def build():\n    return 'standalone'\n")
    (pkg / "rel.py").write_text("from . import helper\n\ndef build():\n    return helper\n")
    monkeypatch.chdir(tmp_path)
    for path, match in (("pkg.mod:build", "a module of a package"), ("pkg:build", "is a package"),
                        (f"{pkg / '__init__.py'}:build", "__init__.py"), (f"{pkg / 'rel.py'}:build", "relative import")):
        with pytest.raises(DPAuditError, match=match):
            load_callable(path, "--factory")
    # the module file alone runs as one pinned file: its package's __init__ does not
    assert load_callable(f"{pkg / 'mod.py'}:build", "--factory")() == "standalone"


def test_s2_package_paths_in_a_bundle_are_refused_through_the_cli(bundle, tmp_path, sentinel, cli, monkeypatch):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(touch_src(sentinel))
    (pkg / "mod.py").write_text("def build():\n    return None\n")
    monkeypatch.chdir(tmp_path)
    set_factory(bundle, "pkg.mod:build", sha256(pkg / "mod.py"))
    _refused(cli, _attack(bundle, tmp_path, "--trust-bundle-code"), "a module of a package")
    _refused(cli, _attack(bundle, tmp_path, "--factory", "pkg.mod:build"), "a module of a package")


def test_s2_the_file_is_read_once_and_the_hashed_bytes_run(tmp_path, sentinel):
    f = tmp_path / "factory_once.py"
    f.write_text("def build():\n    return 'hashed'\n")
    pinned = pin_code(f"{f}:build", "--factory")
    f.write_text(touch_src(sentinel) + "def build():\n    return 'swapped'\n")   # swapped after hashing
    assert run_pinned(pinned, "--factory")() == "hashed"


def test_only_callables_defined_in_the_pinned_file(tmp_path, sentinel):
    f = tmp_path / "reexport.py"
    f.write_text("from subprocess import run as build\nimport os\nhelper = os.system\n")
    with pytest.raises(DPAuditError, match="not defined in"):
        load_callable(f"{f}:build", "--factory")
    with pytest.raises(DPAuditError, match="not a function defined in"):
        load_callable(f"{f}:helper", "--factory")
    with pytest.raises(DPAuditError, match="dunder"):
        load_callable(f"{f}:__builtins__", "--factory")


def test_release_make_still_runs_the_users_code(tmp_path, honest, cli):
    _, files = honest
    code, out, err = cli(["release", "make", "--out", tmp_path / "rel", "--model", files["weights"],
                          "--factory", f"{files['factory']}:build", "--factory-kwargs", '{"hidden": 8}',
                          "--data", files["data"], "--members", files["members"], "--nonmembers", files["nonmembers"],
                          "--train-fn", f"{files['train']}:train", *[x for c in CLAIM for x in ("--claim", c)]])
    assert code == 0 and "torch_factory model" in out, err
    _refused(cli, ["release", "make", "--out", tmp_path / "rel2", "--model", files["weights"], "--factory", "torch:load",
                   "--data", files["data"], "--members", files["members"], "--nonmembers", files["nonmembers"],
                   *[x for c in CLAIM for x in ("--claim", c)]], "third-party")


def test_audit_and_check_run_a_bundles_code_only_through_the_users_config(bundle, honest, tmp_path, cli):
    _, files = honest
    shutil.copy(files["factory"], tmp_path / "mynet.py")         # the auditor's copy, named relative to the config
    model = f'[[models]]\nname = "outside"\nrelease = "{bundle}"\n'
    rest = 'n_bootstrap = 0\n\n' + model + '{code}\n[[attacks]]\nkind = "threshold"\nclassifier = "logreg"\n'
    (tmp_path / "audit.toml").write_text(rest.format(code=""))
    _refused(cli, ["audit", tmp_path / "audit.toml", "--out", tmp_path / "run", "--quiet"], "--factory FILE.py:build")
    (tmp_path / "audit.toml").write_text(rest.format(code='factory = "mynet.py:build"'))
    code, out, err = cli(["audit", tmp_path / "audit.toml", "--out", tmp_path / "run", "--quiet"])
    assert code == 0 and "outside" in out, err
    claim = (f'[[claim]]\nname = "c"\nrelease = "{bundle}"\nepsilon = 8.0\ndelta = 1e-5\ngranularity = "example"\n'
             'attack = {{ kind = "threshold" }}\n{code}\n')
    (tmp_path / "claims.toml").write_text(claim.format(code=""))
    _refused(cli, ["check", tmp_path / "claims.toml"], "--factory FILE.py:build")
    (tmp_path / "claims.toml").write_text(claim.format(code='factory = "mynet.py:build"'))
    code, out, err = cli(["check", tmp_path / "claims.toml"])
    assert code in (0, 1) and "c" in out, err


def test_a_train_fn_importing_a_module_beside_it_gets_the_rule(tmp_path, monkeypatch):
    # issue 36: "No module named 'mlp'" did not say why: a pinned file runs alone, its folder is not on sys.path
    code = tmp_path / "code"
    code.mkdir()
    (code / "mlp_beside_36.py").write_text("def net():\n    return 1\n")
    (code / "train.py").write_text("import mlp_beside_36\n\ndef train(X, y, seed):\n    return mlp_beside_36.net()\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError, match="mlp_beside_36") as exc:
        load_callable(f"{code / 'train.py'}:train", "--train-fn")
    msg = str(exc.value)
    assert "beside it" in msg and "pinned as one file" in msg and "sys.path" in msg
    assert "mlp_beside_36" not in sys.modules                          # nothing beside it ran
    (code / "train2.py").write_text("import no_such_module_36\n\ndef train(X, y, seed):\n    return 0\n")
    with pytest.raises(DataError, match="never from the file's own folder"):
        load_callable(f"{code / 'train2.py'}:train", "--train-fn")

"""Property-based fuzzing of every CLI command and file loader (hypothesis).

Every generated input must give: exit code 0 or 2 (1 only where it means something: ``check`` failing a claim),
never a Python traceback, an error as exactly one line, and nothing half-written in --out. Loaders called directly
must return a valid value or raise :class:`dpaudit.errors.DPAuditError` (nothing else).

Each target runs twice: a small fixed budget in the default run (derandomised, so CI is reproducible; the whole
folder stays well under 20 s) and a larger one under ``@pytest.mark.slow``. The number of generated inputs is
printed at the end of the run (``fuzz: N generated inputs``).
"""

from __future__ import annotations

import gzip
import io
import os
import shutil
import struct
import tempfile
from pathlib import Path

import click
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzz_helpers import (_COMMON, ARRAYS, COUNTS, EXTREME_FLOATS, EXTREME_INTS, SCALARS, VALUES,  # noqa: F401
                          assert_clean, assert_nothing_half_written, fuzz, run_cli, toml_document)
from dpaudit.errors import DPAuditError

def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=True)
    return buf.getvalue()


def _lying_header(rows: int) -> bytes:
    hdr = np.lib.format.header_data_from_array_1_0(np.ones((2, 3)))
    hdr["shape"] = (rows, 3)
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, hdr)
    return buf.getvalue() + np.ones((2, 3)).tobytes()


def _npz(arrays: dict) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


FILE_BYTES = st.one_of(
    st.binary(max_size=300),
    ARRAYS.map(_npy),
    ARRAYS.map(lambda a: _npy(a)[: max(1, len(_npy(a)) // 2)]),
    st.sampled_from([10**12, 2**40, 3, 1]).map(_lying_header),
    ARRAYS.map(lambda a: _npz({"votes": a}) if a.dtype != object else _npz({"x": np.ones(2)})),
    st.text(max_size=200).map(lambda t: t.encode("utf-8", "replace")),
    st.lists(st.lists(st.one_of(st.integers(-3, 100), st.floats(), st.text(max_size=3)), min_size=1, max_size=4),
             min_size=0, max_size=4).map(lambda rows: "\n".join(",".join(map(str, r)) for r in rows).encode()),
)
SPECIAL = st.sampled_from(["file", "file", "file", "empty", "fifo", "devnull", "dir", "missing"])


def _materialise(tmp: Path, name: str, data: bytes, kind: str) -> Path:
    p = tmp / name
    if kind == "file":
        p.write_bytes(data)
    elif kind == "empty":
        p.write_bytes(b"")
    elif kind == "fifo":
        os.mkfifo(p)
    elif kind == "devnull":
        return Path("/dev/null")
    elif kind == "dir":
        p.mkdir()
    return p


# ---- votes files: load_votes and `account --votes` -----------------------------------------------------------


@fuzz("votes files", st.tuples(FILE_BYTES, st.sampled_from([".npy", ".csv", ".txt"]), SPECIAL), fast=40, slow=600)
def _votes(x):
    from dpaudit.accountants.pate import load_votes

    data, suffix, kind = x
    with tempfile.TemporaryDirectory() as d:
        p = _materialise(Path(d), "votes" + suffix, data, kind)
        try:
            v = load_votes(p)
        except DPAuditError:
            pass
        else:
            assert v.ndim == 2 and v.shape[1] >= 2 and np.all(np.isfinite(v)) and np.all(v >= 0)
        if kind != "missing":  # click checks existence itself
            code, _, err = run_cli(["account", "--mechanism", "pate", "--votes", p, "--gamma", "0.1", "--delta", "1e-5"])
            assert_clean(code, err, argv=[p])


test_fuzz_votes_files, test_fuzz_votes_files_slow = _votes


# ---- .npy / .npz readers -------------------------------------------------------------------------------------


@fuzz("npy/npz readers", st.tuples(FILE_BYTES, SPECIAL), fast=30, slow=500)
def _arrays(x):
    from dpaudit._io import load_npy_file, load_npz_file

    data, kind = x
    with tempfile.TemporaryDirectory() as d:
        p = _materialise(Path(d), "a.npy", data, kind)
        for fn in (load_npy_file, load_npz_file):
            try:
                fn(p, "the test file")
            except DPAuditError:
                pass


test_fuzz_npy_npz, test_fuzz_npy_npz_slow = _arrays


# ---- claims files: `check` -----------------------------------------------------------------------------------

CLAIM_KEYS = ["name", "epsilon", "delta", "granularity", "mechanism", "params", "release", "ledger", "party",
              "attack", "allow_data_dependent", "description", "bogus"]
GOOD_CLAIM = {"name": "a", "epsilon": 1.0, "delta": 0.0, "granularity": "example", "mechanism": "laplace",
              "params": {"scale": 1.0}}
PARAM_VALUES = st.one_of(st.integers(0, 50), st.floats(0.01, 10.0), st.sampled_from([0, -1, 1e-320, 1e308, "abc"]))


def _claim():
    mutated = st.fixed_dictionaries({}, optional={k: VALUES for k in CLAIM_KEYS})
    sensible = st.builds(lambda mech, eps, delta, gran, params: {
        "name": "c", "epsilon": eps, "delta": delta, "granularity": gran, "mechanism": mech, "params": params},
        st.sampled_from(["laplace", "gaussian", "ldp", "dpsgd", "pate", "gnmax", "other"]),
        st.one_of(st.floats(0, 100), EXTREME_FLOATS), st.one_of(st.floats(0, 1), EXTREME_FLOATS),
        st.sampled_from(["example", "party", "report", "round", "user", "x"]),
        st.dictionaries(st.sampled_from(["scale", "sigma", "queries", "gamma", "epsilon", "samples", "classes",
                                         "dataset_size", "batch_size", "noise_multiplier", "epochs", "steps"]),
                        PARAM_VALUES, max_size=4))
    return st.one_of(mutated, sensible, st.just(GOOD_CLAIM))


CLAIMS_DOCS = st.one_of(
    st.builds(lambda top, claims: toml_document(top, {"claim": claims}),
              st.dictionaries(st.sampled_from(["schema", "bogus"]), VALUES, max_size=1), st.lists(_claim(), max_size=3)),
    st.text(max_size=200),
    st.just("x = " + "[" * 5000 + "]" * 5000),
)


@fuzz("claims files", st.tuples(CLAIMS_DOCS, st.booleans()), fast=40, slow=600)
def _claims(x):
    doc, junit = x
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "claims.toml"
        p.write_text(doc)
        argv = ["check", p] + (["--junit", Path(d) / "out" / "j.xml"] if junit else [])
        code, _, err = run_cli(argv)
        assert_clean(code, err, allowed=(0, 1, 2), argv=[doc[:300]])
        assert ".tmp" not in err
        assert_nothing_half_written(Path(d) / "out")


test_fuzz_claims_files, test_fuzz_claims_files_slow = _claims


# ---- audit configs: `audit` up to the point where it would train ------------------------------------------------

MODEL_KEYS = ["name", "method", "release", "config_file", "params", "extra", "extra_names", "noise", "noise_label", "x"]
ATTACK_KEYS = ["kind", "shadows", "classifier", "threshold_kind", "y"]


def _model():
    sensible = st.builds(lambda name, method, params: {"name": name, "method": method, "params": params},
                         st.sampled_from(["a", "b", "a/b", ""]),
                         st.sampled_from(["fredy", "pate", "fedkt", "privatekt", "proxyfl", "centrain", "fedavg-ldp", "nope"]),
                         st.dictionaries(st.sampled_from(["gamma", "teachers", "rounds", "queries", "method", "data",
                                                          "model", "run", "teacher_train", "bogus"]), VALUES, max_size=3))
    return st.one_of(sensible, st.fixed_dictionaries({}, optional={k: VALUES for k in MODEL_KEYS}))


AUDIT_DOCS = st.one_of(
    st.builds(lambda top, models, attacks: toml_document(top, {"models": models, "attacks": attacks}),
              st.fixed_dictionaries({}, optional={k: VALUES for k in
                                                  ["title", "dataset", "seed", "confidence", "delta", "n_bootstrap", "data_dir", "zz"]}),
              st.lists(_model(), max_size=3),
              st.lists(st.fixed_dictionaries({"kind": st.sampled_from(["threshold", "shadow", "lira", "x"])},
                                             optional={k: VALUES for k in ATTACK_KEYS[1:]}), max_size=2)),
    st.builds(lambda top: toml_document(top, {}), st.dictionaries(st.sampled_from(["models", "attacks", "title"]), VALUES)),
    st.text(max_size=200),
)


class _Stop(Exception):
    pass


@pytest.fixture
def no_run(monkeypatch):
    """Stop `audit` where it would start training (after the whole config was checked): exit 0."""
    import dpaudit.auditing.runner as runner

    def stop(*a, **k):
        raise click.exceptions.Exit(0)

    monkeypatch.setattr(runner, "_run_audit", stop)


@fuzz("audit configs", st.tuples(AUDIT_DOCS, st.sampled_from([None, "cpu", "gpu", "cuda:7", "", "meta"])), fast=40, slow=600)
def _audit(x, no_run=None):
    doc, device = x
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "audit.toml"
        p.write_text(doc)
        out = Path(d) / "out"
        code, _, err = run_cli(["audit", p, "--out", out, "--quiet"] + (["--device", device] if device is not None else []))
        assert_clean(code, err, argv=[doc[:300], device])
        if code == 2:
            assert not out.exists(), "a rejected config must not create --out"


_audit_fast, _audit_slow = _audit


@pytest.mark.usefixtures("no_run")
def test_fuzz_audit_configs():
    _audit_fast()


@pytest.mark.slow
@pytest.mark.usefixtures("no_run")
def test_fuzz_audit_configs_slow():
    _audit_slow()


# ---- release bundles: `attack` --------------------------------------------------------------------------------

JSON_PATHS = ["schema", "method", "seed", "claim", "claim.delta", "claim.epsilon", "dataset", "dataset.name",
              "dataset.seed", "dataset.num_samples", "dataset.num_records", "dataset.data_dir", "model", "model.file",
              "model.spec", "model.spec.name", "model.spec.num_classes", "model.spec.input_shape", "model.spec.kwargs",
              "model.train_config", "utility", "flags", "statement", "ledger", "assumptions"]
FILES = ["release.json", "membership.npz", "model.skops", "votes.npy", "model.json"]
MUTATIONS = st.one_of(
    st.tuples(st.just("json"), st.sampled_from(JSON_PATHS), VALUES),
    st.tuples(st.just("delete-key"), st.sampled_from(JSON_PATHS), st.none()),
    st.tuples(st.just("bytes"), st.sampled_from(FILES), FILE_BYTES),
    st.tuples(st.just("truncate"), st.sampled_from(FILES), st.floats(0, 1)),
    st.tuples(st.just("remove"), st.sampled_from(FILES), st.none()),
    st.tuples(st.just("symlink"), st.sampled_from(FILES + ["."]), st.none()),
    st.tuples(st.just("fifo"), st.sampled_from(FILES), st.none()),
)


def _mutate(bundle: Path, mutation) -> Path:
    import json

    kind, where, value = mutation
    if kind in ("json", "delete-key"):
        if not (bundle / "release.json").is_file() or (bundle / "release.json").is_symlink():
            return bundle  # an earlier mutation made it a FIFO or a link: reading it here would block
        try:
            meta = json.loads((bundle / "release.json").read_text())
        except ValueError:
            return bundle
        *path, last = where.split(".")
        d = meta
        for k in path:
            if not isinstance(d, dict) or not isinstance(d.get(k), dict):
                return bundle
            d = d[k]
        if kind == "json":
            d[last] = value
        else:
            d.pop(last, None)
        try:
            text = json.dumps(meta)
        except (ValueError, TypeError):
            text = json.dumps(meta, default=str)
        (bundle / "release.json").write_text(text)
    elif kind == "bytes":
        (bundle / where).unlink(missing_ok=True)  # it may be a FIFO from an earlier mutation
        (bundle / where).write_bytes(value)
    elif kind == "truncate":
        f = bundle / where
        if f.is_file() and not f.is_symlink():
            raw = f.read_bytes()
            f.write_bytes(raw[: int(len(raw) * value)])
    elif kind == "remove":
        (bundle / where).unlink(missing_ok=True)
    elif kind == "fifo":
        (bundle / where).unlink(missing_ok=True)
        os.mkfifo(bundle / where)
    elif kind == "symlink":
        if where == ".":
            if bundle.is_symlink():  # already a link to the bundle: applying the mutation twice changes nothing
                return bundle
            link = bundle.parent / "link"
            link.symlink_to(bundle, target_is_directory=True)
            return link
        outside = bundle.parent / ("outside-" + where)
        if (bundle / where).is_file() and not outside.exists():
            shutil.move(bundle / where, outside)
            (bundle / where).symlink_to(outside)
    return bundle


@pytest.fixture(scope="module")
def bundle_src(tiny_bundle):
    return tiny_bundle


def _bundle_case(src: Path, mutations) -> None:
    with tempfile.TemporaryDirectory() as d:
        b = Path(d) / "b"
        shutil.copytree(src, b, symlinks=True)
        for m in mutations:
            b = _mutate(b, m)
        out = Path(d) / "out"
        argv = ["attack", b, "--attack", "threshold", "--classifier", "logreg", "--bootstrap", "0", "--out", out]
        code, _, err = run_cli(argv)
        assert_clean(code, err, argv=mutations)
        assert_nothing_half_written(out)
        if code == 2:
            assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("budget", [pytest.param(12, id="default"), pytest.param(300, id="slow", marks=pytest.mark.slow)])
def test_fuzz_release_bundles(bundle_src, budget):
    @settings(max_examples=budget, derandomize=budget < 100, **_COMMON)
    @given(st.lists(MUTATIONS, min_size=1, max_size=2))
    def run(mutations):
        COUNTS["release bundles"] += 1
        _bundle_case(bundle_src, mutations)

    run()


# ---- data-set loaders: IDX (MNIST), CSV (Adult), .mat (SVHN), CIFAR-10 batches --------------------------------


def _idx(code: int, dims: list[int], body_len: int) -> bytes:
    return bytes([0, 0, code, len(dims)]) + struct.pack(f">{len(dims)}I", *dims) + bytes(body_len)


IDX = st.one_of(
    st.builds(_idx, st.sampled_from([0x08, 0x09, 0x0D, 0x42]), st.lists(st.integers(0, 2**32 - 1), max_size=4),
              st.integers(0, 64)),
    st.builds(_idx, st.just(0x08), st.lists(st.integers(0, 4), min_size=1, max_size=3), st.integers(0, 64)),
    st.binary(max_size=64),
)
LOADER_CASES = st.one_of(
    st.tuples(st.just("mnist"), st.lists(IDX, min_size=4, max_size=4), st.booleans()),
    st.tuples(st.just("adult"), st.lists(st.text(max_size=200), min_size=2, max_size=2), st.booleans()),
    st.tuples(st.just("svhn"), st.lists(st.binary(max_size=200), min_size=2, max_size=2), st.booleans()),
    st.tuples(st.just("cifar10"), st.lists(st.binary(max_size=200), min_size=1, max_size=1), st.booleans()),
)


@fuzz("data-set loaders", LOADER_CASES, fast=25, slow=400)
def _loaders(case):
    from dpaudit.training.data import _ADULT_FILES, _CIFAR_FILES, _IDX_FILES, _SVHN_FILES, load_dataset

    name, blobs, gz = case
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        files = {"mnist": list(_IDX_FILES.values()), "adult": list(_ADULT_FILES), "svhn": list(_SVHN_FILES),
                 "cifar10": list(_CIFAR_FILES)}[name]
        for i, f in enumerate(files):
            blob = blobs[min(i, len(blobs) - 1)]
            data = blob.encode("utf-8", "replace") if isinstance(blob, str) else blob
            if name == "mnist" and gz:
                (root / (f + ".gz")).write_bytes(gzip.compress(data))
            else:
                (root / f).write_bytes(data)
        try:
            load_dataset(name, data_dir=root)
        except DPAuditError:
            pass


test_fuzz_dataset_loaders, test_fuzz_dataset_loaders_slow = _loaders


# ---- train: the validation path of every option (tiny settings when valid) ---------------------------------------

# Sizes are either tiny (the run finishes in a moment) or far beyond the supported ranges (refused when the config is
# built: exit 2, one line); a size inside the range but huge would train for a very long time, which a fuzzer cannot
# tell from a hang, so none is generated.
HUGE_INTS = st.sampled_from([2**31, 2**32, 2**63, 10**12, 10**300])
HUGE_SETS = st.builds(lambda key, v: f"{key}={v}",
                      st.sampled_from(["method.teacher_train.epochs", "method.student_train.epochs",
                                       "method.student_train.batch_size", "method.num_samples", "run.num_threads",
                                       "run.checkpoint_every", "method.model_kwargs.hidden"]),
                      HUGE_INTS)
TRAIN_OPTIONS = st.fixed_dictionaries({}, optional={
    "--teachers": st.one_of(st.integers(-2, 3), HUGE_INTS),
    "--rounds": st.one_of(st.integers(-1, 2), HUGE_INTS),
    "--queries": st.one_of(st.integers(-1, 30), HUGE_INTS),
    "--gamma": st.one_of(st.floats(), EXTREME_FLOATS),
    "--seed": st.one_of(st.integers(-1, 5), EXTREME_INTS),
    "--dataset": st.sampled_from(["digits", "mnist", "imagenet", ""]),
    "--config": st.sampled_from(["bad", "binary", "fifo", "missing"]),
    "--set": HUGE_SETS,
})


@fuzz("train options", TRAIN_OPTIONS, fast=8, slow=150)
def _train(opts):
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        tiny = root / "tiny.toml"
        tiny.write_text("[data]\nnum_samples = 300\n[method]\nteachers = 2\nrounds = 1\nqueries = 20\n"
                        "[method.model_kwargs]\nhidden = [4]\n[method.teacher_train]\nepochs = 1\n"
                        "[method.student_train]\nepochs = 1\n")
        argv = ["train", "fredy", "--out", root / "rel", "--quiet"]
        cfg = opts.pop("--config", None)
        if cfg == "bad":
            (root / "c.toml").write_text("teachers = [[[\n")
        elif cfg == "binary":
            (root / "c.toml").write_bytes(bytes(range(256)))
        elif cfg == "fifo":
            os.mkfifo(root / "c.toml")
        argv += ["--config", root / "c.toml" if cfg else tiny]
        for k, v in opts.items():
            argv += [k, v]
        code, _, err = run_cli(argv)
        assert_clean(code, err, argv=argv)
        assert_nothing_half_written(root / "rel")
        if code == 2:
            assert not (root / "rel").exists()


test_fuzz_train_options, test_fuzz_train_options_slow = _train


# Issue 12's finding: huge sizes were accepted by `train` and then ran for ever. Each is refused at once: exit 2,
# one line naming the setting as written, its supported range and the value.
KNOWN_TRAIN_CASES = [
    ("fredy", "--rounds 2147483648", "'rounds'", "[1, 1000000]"),
    ("fredy", "--teachers 2147483648", "'teachers'", "[1, 100000]"),
    ("fredy", "--queries 2147483648", "'queries'", "[1, 100000000]"),
    ("fredy", "--set method.teacher_train.epochs=2147483648", "'epochs'", "[1, 100000]"),
    ("pate", "--teachers 2147483648", "'teachers'", "[1, 100000]"),
    ("fedkt", "--set method.parties=2147483648", "'parties'", "[1, 100000]"),
    ("privatekt", "--rounds 2147483648", "'rounds'", "[1, 1000000]"),
    ("privatekt", "--set data.num_clients=2147483648", "'num_clients'", "[1, 100000]"),
    ("proxyfl", "--rounds 2147483648", "'rounds'", "[1, 1000000]"),
    ("proxyfl", "--set data.samples_per_client=2147483648", "'samples_per_client'", "[1, 100000000]"),
    ("centrain", "--set method.epochs=2147483648", "'epochs'", "[1, 100000]"),
    ("fedavg-ldp", "--set run.stop_after=2147483648", "'stop_after'", "[0, 1000000]"),
]


@pytest.mark.parametrize("method,args,name,allowed", KNOWN_TRAIN_CASES)
def test_known_train_size_findings(tmp_path, method, args, name, allowed):
    COUNTS["train size findings"] += 1
    argv = ["train", method, "--out", tmp_path / "rel", "--quiet", *args.split()]
    code, _, err = run_cli(argv)
    assert_clean(code, err, argv=argv)
    assert code == 2 and name in err and allowed in err and "2147483648" in err, err
    assert not (tmp_path / "rel").exists() and not (tmp_path / ".rel.checkpoints").exists()


# ---- account -------------------------------------------------------------------------------------------------

@settings(max_examples=30, derandomize=True, **_COMMON)
@given(st.sampled_from(["ldp", "dpsgd", "laplace", "gaussian", "laplace-mechanism", "gaussian-mechanism"]),
       st.fixed_dictionaries({}, optional={
           "--epsilon": st.one_of(st.floats(0.01, 60), EXTREME_FLOATS), "--samples": st.integers(-1, 8),
           "--classes": st.integers(-1, 12), "--rounds": st.integers(0, 300), "--users": st.integers(0, 5000),
           "--delta": st.one_of(st.floats(0, 1), EXTREME_FLOATS), "--dataset-size": st.integers(0, 10**4),
           "--batch-size": st.integers(0, 200), "--noise-multiplier": st.one_of(st.floats(0.1, 5), EXTREME_FLOATS),
           "--steps": st.integers(0, 2000), "--gamma": st.one_of(st.floats(0.01, 5), EXTREME_FLOATS),
           "--queries": st.integers(0, 2000), "--sigma": st.one_of(st.floats(0.1, 100), EXTREME_FLOATS),
           "--scale": st.one_of(st.floats(0.01, 100), EXTREME_FLOATS)}))
def test_fuzz_account_options(mechanism, opts):
    COUNTS["account options"] += 1
    argv = ["account", "--mechanism", mechanism]
    for k, v in opts.items():
        argv += [k, v]
    code, _, err = run_cli(argv)
    assert_clean(code, err, argv=argv)
    assert "Warning" not in err, f"numpy warning leaked for {argv}: {err}"


# The reproducible account findings: each gives a finite answer or a one-line range error.
KNOWN_ACCOUNT_CASES = [
    "--mechanism ldp --users 1 --rounds 100 --classes 3 --delta 0.01 --samples 2 --epsilon 50",
    "--mechanism ldp --samples 4 --classes 3 --epsilon 1e15",
    "--mechanism gaussian --queries 1000 --delta 1e-6 --sigma 1e308",
    "--mechanism ldp --epsilon 1e-320 --classes 3 --samples 4",
    "--mechanism ldp --samples 4 --classes 3 --epsilon 1 --delta 5e-324 --users 1000",
    "--mechanism gaussian --queries 1 --sigma 1e-300 --delta 1e-5",
]


@pytest.mark.parametrize("args", KNOWN_ACCOUNT_CASES)
def test_known_account_findings(args):
    COUNTS["account findings"] += 1
    code, _, err = run_cli(["account", *args.split()])
    assert_clean(code, err, argv=args)
    assert "Warning" not in err and "inf" not in err

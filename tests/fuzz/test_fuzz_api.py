"""Issue 38, item 3: the Python API under hostile keyword arguments. Every surface is called with a cheap valid set of
keyword arguments in which one to three keywords (or one the function does not take) are replaced by hostile values:
NaN, inf, huge and negative numbers, wrong types, strings with control characters, empty and nested junk, paths to
hostile files (empty, NUL bytes, a FIFO, a directory, /dev/zero). The one rule: the call returns, or raises one of
dpaudit's own errors (:class:`dpaudit.errors.DPAuditError`: ParameterError, DataError, OutputError), within a time
limit. A result is written with the one serialiser and must be JSON.

**Adding a surface** is one more entry in ``SURFACES`` (after the fixtures it needs, if any, in ``ctx``)::

    SURFACES["flower run dirs"] = Surface(
        call=lambda **kw: dpaudit.something(**kw),       # the function under test
        bases=(lambda c: {"run_dir": c["flower_run"]},),  # cheap valid keyword sets (c: the module's context)
        hints={"run_dir": ["@fifo", "@dir", "@empty"]},   # values worth trying for a keyword ("@name": c[name])
        fast=60, slow=1500)

The keywords fuzzed are the function's own (``inspect.signature``), so a surface follows its signature as it
changes (``keywords=`` restricts or names them when the function takes ``**kwargs``).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzz_helpers import _COMMON, COUNTS, OUTCOMES, time_limit
from dpaudit.errors import DPAuditError

# --------------------------------------------------------------------------------------------------
# values


class _Odd:
    """An object of no known type (with a misleading __len__ and __float__)."""

    def __len__(self):
        return 10**12

    def __float__(self):
        return math.nan

    def __index__(self):
        return 10**18


def _deep(n: int) -> list:
    out: list = []
    for _ in range(n):
        out = [out]
    return out


#: Hostile values tried for any keyword ("@name": the module context's file of that name).
GENERIC: list[Any] = [
    None, True, False, 0, -1, 1, 3, 2**31, 2**63, 10**12, 10**4000, -(10**30),
    0.0, -0.0, 5e-324, 1e-300, 0.5, 1.0, 1e15, 1e308, math.inf, -math.inf, math.nan,
    np.int64(-5), np.float32("nan"), np.bool_(True), np.uint64(2**63),
    "", " ", "\x1b[2K\x1b[1A\r", "\u202eevil", "nan", "inf", "-1", "1e308", "../../../etc/passwd", "a" * 5000,
    "\x00", "lira", "threshold", "one-run", "local",
    [], [[]], [1, "a", None], (1, 2), {}, {"a": {"b": [math.nan]}}, {"": None}, {1: 2}, {"epsilon": "x"},
    b"bytes", bytearray(b"\x00"), {1, 2}, _deep(40), _Odd(), object(), print, type,
    np.array([]), np.zeros((2, 0)), np.array([[math.nan, 1.0]]), np.array(["x", "y"]), np.array([1 + 2j]),
    np.array([{"a": 1}], dtype=object), np.ones((3, 3), dtype=bool), np.full(4, 10**9),
    "@empty", "@nul", "@fifo", "@dir", "@missing", "@zero", "@garbage_npy", "@hostile_toml", "@symlink_loop",
]

UNKNOWN_KEYWORD = "no_such_keyword"


# --------------------------------------------------------------------------------------------------
# the surfaces


@dataclass(frozen=True)
class Surface:
    """A function of the Python API under fuzz: ``call(**kwargs)``; ``bases``: cheap valid keyword sets (functions of
    the context); ``hints``: values worth trying per keyword beside :data:`GENERIC`; ``keywords``: the keywords
    fuzzed (default: the signature's); ``fast`` / ``slow``: cases in the default and the slow run."""

    call: Callable[..., Any]
    bases: tuple[Callable[[dict], dict], ...]
    hints: dict[str, list] = field(default_factory=dict)
    keywords: Callable[[dict], tuple[str, ...]] | None = None
    fast: int = 50
    slow: int = 1000
    limit_s: int = 30
    #: the function has a fixed signature: Python's own "f() got an unexpected keyword argument" is its answer to a
    #: keyword it does not take (a function that forwards **kwargs must answer with a ParameterError instead)
    fixed_signature: bool = True

    def fuzzed(self, base: dict) -> tuple[str, ...]:
        """The keywords fuzzed for the valid keyword set ``base``: ``keywords(base)``, or the signature's."""
        if self.keywords is not None:
            return tuple(self.keywords(base)) + (UNKNOWN_KEYWORD,)
        sig = inspect.signature(self.call)
        names = tuple(p.name for p in sig.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))
        return names + (UNKNOWN_KEYWORD,)


def _account(**kw):
    import dpaudit

    return dpaudit.account(**kw)


def _votes():
    return np.array([[8, 1, 1], [4, 4, 2], [10, 0, 0]])


ACCOUNT_BASES: tuple[Callable[[dict], dict], ...] = (
    lambda c: {"mechanism": "laplace", "scale": 1.0},
    lambda c: {"mechanism": "gaussian", "sigma": 2.0, "delta": 1e-5},
    lambda c: {"mechanism": "dpsgd", "dataset_size": 1000, "batch_size": 10, "noise_multiplier": 1.0, "steps": 20,
               "delta": 1e-5},
    lambda c: {"mechanism": "ldp", "epsilon": 1.0, "samples": 10, "classes": 3},
    lambda c: {"mechanism": "pate", "votes": _votes(), "gamma": 0.1, "delta": 1e-5},
    lambda c: {"mechanism": "gnmax", "votes": _votes(), "sigma": 2.0, "delta": 1e-5},
    lambda c: {"mechanism": "gnmax", "votes": _votes(), "sigma": 2.0, "delta": 1e-5, "release_epsilon": True, "seed": 0},
    lambda c: {"mechanism": "tuning", "runs_distribution": "poisson", "mean_runs": 2.0, "dataset_size": 1000,
               "batch_size": 10, "noise_multiplier": 1.0, "steps": 20, "delta": 1e-5},
)

def _account_keywords(base: dict) -> tuple[str, ...]:
    """The keywords of the base's mechanism (its accounting function's, or the private release's)."""
    from dpaudit.accountants.mechanisms import ACCOUNTING_FUNCTIONS
    from dpaudit.accountants.smooth_sensitivity import release_gnmax_epsilon

    fn = release_gnmax_epsilon if base.get("release_epsilon") else ACCOUNTING_FUNCTIONS[base["mechanism"]]
    return ("mechanism", "release_epsilon") + tuple(inspect.signature(fn).parameters)


def _attack(**kw):
    import dpaudit

    return dpaudit.attack(**kw)


def _check(**kw):
    import dpaudit

    return dpaudit.check(**kw)


def _make_release(**kw):
    import dpaudit

    return dpaudit.release.make(**kw)


def _release_load(**kw):
    import dpaudit

    return dpaudit.Release.load(**kw)


def _flower_account(path: Any, delta: Any = 1e-5, neighbouring: Any = "replace-one"):
    from dpaudit.integrations.flower.accounting import account_run
    from dpaudit.integrations.flower.record import read_flower_run

    return account_run(read_flower_run(path), delta=delta, neighbouring=neighbouring)


def _lm_check(path: Any, max_weight_bytes: Any = 2**20):
    from dpaudit.training.lm.files import check_lm_dir

    return check_lm_dir(path, max_weight_bytes=max_weight_bytes)


def _flower_record(n: int = 8, m: int = 3, rounds: int = 4, **change: Any) -> dict:
    """A recorded Flower run (server-side fixed clipping), as dpaudit's recorder writes it."""
    rng = np.random.default_rng(0)
    pop = list(range(1000, 1000 + n))
    recs = []
    for t in range(1, rounds + 1):
        chosen = [int(i) for i in rng.choice(pop, m, replace=False)]
        recs.append({"round": t, "population": pop, "sampled": chosen, "replied": chosen, "clipping_norm": 1.0,
                     "noise_multiplier": 1.0, "released": True, "weights": [1.0] * m})
    run = {"format": "dpaudit-flower-run", "schema": 1, "flwr_version": "1.42.0", "seed": 0,
           "strategy": {"kind": "server-fixed", "classes": ["flwr.serverapp.strategy.fedavg.FedAvg"],
                        "num_sampled_clients": m, "noise_multiplier": 1.0, "clipping_norm": 1.0},
           "sampler": "uniform-without-replacement", "rounds": recs, "local_dp": None,
           "partitions": {str(1000 + i): i for i in range(n)}, "flower_accountant": None, "data": None,
           "model_keys": []}
    run.update(change)
    return run


def _to_dict(**kw):
    from dpaudit._io import dumps_json
    from dpaudit.serial import to_dict

    out = to_dict(**kw)
    dumps_json(out)                 # what to_dict returns, the writer writes
    return out


def _make_release_keywords() -> tuple[str, ...]:
    from dpaudit.auditing.release_make import make_release

    return tuple(inspect.signature(make_release).parameters)


SURFACES: dict[str, Surface] = {
    "account": Surface(_account, ACCOUNT_BASES, keywords=_account_keywords, fixed_signature=False, fast=200, slow=3000,
                       hints={
        "mechanism": ["laplace", "gaussian", "dpsgd", "ldp", "pate", "gnmax", "tuning", "LAPLACE", "rdp"],
        "votes": ["@garbage_npy", "@votes_npy", np.full((2, 3), -1), np.full((2, 3), 10**18), np.zeros((0, 3))],
        "answered": ["@votes_npy", np.ones(3, bool), np.ones(2, bool), [True, False]],
        "steps": [10**9, 10**15, 2**63], "epochs": [1e9, 1e300], "count": [10**9, 10**18],
        "rounds": [10**9], "users": [10**12], "samples": [10**12], "classes": [10**9], "queries": [10**12],
        "teachers": [10**9], "partitions": [10**9], "orders": [[1.5, 1e308], [], [math.nan]],
        "sigma_ss": [1e308, 1e-308], "beta": [1e-308, 0.49], "order": [1.0000001, 1e308],
        "workers": [10**6, 0, -1], "mean_runs": [1e12], "eta": [1e300, -0.5],
    }),
    "attack": Surface(_attack, (
        lambda c: {"release": c["scores_bundle"], "attack": "threshold", "out": c["tmp"] / "o", "bootstrap": 10},
        lambda c: {"release": c["scores_bundle"], "attack": "lira", "out": c["tmp"] / "o", "bootstrap": 10},
        lambda c: {"release": c["forest"], "attack": "threshold", "out": c["tmp"] / "o", "bootstrap": 10},
    ), fast=40, slow=800, limit_s=60, hints={
        "release": ["@scores_bundle", "@forest", "@dir", "@missing", "@empty", "@fifo"],
        "attack": ["threshold", "lira", "rmia", "shadow", "blind", "SHADOW"],
        "audit": ["one-run", "multi-run", "two-run"], "canary": ["dirac", "input", "gradient", "none"],
        "out": ["@scores_bundle", "@forest", "@empty", "@dir", "/", "@tmp"],
        "shadows": [10**9, 0, -1, 1], "models": [10**9, 1], "canaries": [10**9, 1], "bootstrap": [10**9, -5, 1],
        "population": [10**12, 0], "gamma": [0.0, -1.0, 1e308], "rmia_a": [-1.0, 2.0, math.nan],
        "confidence": [1.0, 0.0, 1.5], "delta": [1.0, -1e-5], "executor": ["local", "threads", ""],
        "ray_address": ["127.0.0.1:1", ""], "classifier": ["catboost", "logreg", "knn", ""],
        "threshold_kind": ["loss", "confidence", "entropy", "margin", ""], "score": ["loss", "logit", ""],
        "analysis": ["auto", "eps", "fdp", "gdp", "bayes", ""], "seed": [-1, 2**64, 1.5],
        "factory": ["@empty:build", "os:system", "x.py:build"], "train_fn": ["@empty:train", "subprocess:run"],
        "data_dir": ["@dir", "/", "@missing"],
    }),
    "check": Surface(_check, (lambda c: {"claims": c["claims"]},), fast=80, slow=1200, hints={
        "claims": ["@claims", "@hostile_toml", "@empty", "@dir", "@fifo", "@zero", "@nul", "@missing"],
        "junit": ["@dir", "@tmp_file", "/", "@scores_bundle", "@claims"],
    }),
    "release.make": Surface(_make_release, (
        lambda c: {"out": c["tmp"] / "made", "claim": ["epsilon=8", "delta=1e-5"], "scores": c["scores_npz"]},
    ), keywords=lambda base: ("out", "claim", "overwrite") + _make_release_keywords(), fixed_signature=False,
        fast=80, slow=1200, hints={
        "out": ["@scores_bundle", "@forest", "@empty", "@dir", "/", "@tmp"],
        "claim": [["epsilon=8"], ["epsilon=nan", "delta=1e-5"], {"epsilon": 8, "delta": 1e-5}, ["x"], {"epsilon": -1},
                  ["epsilon=8", "delta=1e-5", "granularity=\x1b[2K"], ["epsilon=8", "delta=1e-5", "text=<script>"]],
        "scores": ["@scores_npz", "@garbage_npy", "@empty", "@fifo", "@zero", "@dir"],
        "model": ["@empty", "@garbage_npy", "@scores_npz"], "data": ["@garbage_npy", "@scores_npz"],
        "members": ["@garbage_npy", np.arange(5), np.array([-1, 10**12])], "runs_tried": [0, 10**12, -1],
        "seed": [-1, 2**64], "num_samples": [10**12, 0], "dataset": ["digits", "mnist", "../x"],
        "ledger": ["@empty", "@hostile_toml"], "dp_events": ["@empty", "@nul"], "opacus": ["@empty"],
    }),
    "Release.load": Surface(_release_load, (lambda c: {"path": c["forest"]}, lambda c: {"path": c["scores_bundle"]}),
                            fast=80, slow=1200, hints={
        "path": ["@forest", "@scores_bundle", "@dir", "@empty", "@fifo", "@missing", "/", "@symlink_loop"],
        "data_dir": ["@dir", "/", "@missing", "@empty"], "code": [None, "code", object()],
    }),
    "flower run dirs": Surface(_flower_account, (lambda c: {"path": c["flower_run"]},), fast=30, slow=1000, hints={
        "path": ["@flower_run", "@flower_pickle", "@flower_huge", "@flower_nan", "@dir", "@empty", "@fifo", "@missing",
                 "@symlink_loop", "@scores_bundle"],
        "delta": [0.0, 1.0, 1e-300, math.nan, "1e-5"], "neighbouring": ["add-remove", "replace-one", "zero-out", ""],
    }),
    "LM bundle dirs": Surface(_lm_check, (lambda c: {"path": c["lm_config_only"]},), fast=60, slow=1000, hints={
        "path": ["@lm_config_only", "@lm_pickle", "@lm_auto_map", "@lm_remote", "@lm_big_tokenizer", "@dir", "@empty",
                 "@fifo", "@missing", "@symlink_loop", "@scores_bundle"],
        "max_weight_bytes": [0, -1, 2**70, 1.5],
    }),
    "to_dict": Surface(_to_dict, (lambda c: {"obj": c["result"]},), fast=200, slow=3000, hints={
        # nesting past the recursion limit only here: Python's own repr() of it fails, so no error message can quote it
        "obj": ["@result", _deep(3000), np.array([math.inf]), {"k": [math.nan, {1, "a"}]}, Path("/x"), frozenset({1, 2})],
    }),
}


# --------------------------------------------------------------------------------------------------
# the context: tiny inputs made once per module


@pytest.fixture(scope="module")
def ctx(tmp_path_factory, forest_release) -> dict:
    import dpaudit
    from dpaudit.attacks.scores import synthetic_scores

    root = tmp_path_factory.mktemp("api_fuzz")
    c: dict[str, Any] = {"root": root}
    (root / "empty").write_bytes(b"")
    (root / "nul").write_bytes(b"\x00" * 64 + b"[[claim]]\x00")
    (root / "dir").mkdir()
    os.mkfifo(root / "fifo")
    (root / "garbage.npy").write_bytes(b"\x93NUMPY\x01\x00\xff\xff{'descr': '<f8', 'shape': (99999999999,)}")
    np.save(root / "votes.npy", _votes())
    (root / "hostile.toml").write_text('[[claim]]\nname = "\\u001b[2K<script>"\nepsilon = nan\ndelta = 1e-5\n'
                                       'granularity = "example"\nmechanism = "laplace"\nparams = {scale = 1e-320}\n')
    (root / "claims.toml").write_text('[[claim]]\nname = "c"\nepsilon = 2.0\ndelta = 0.0\ngranularity = "example"\n'
                                      'mechanism = "laplace"\nparams = {scale = 1.0}\n')
    os.symlink(root / "loop", root / "loop")
    arrays = synthetic_scores(30, num_classes=3, num_references=2, kind="probabilities", leak=2.0, seed=0)
    np.savez(root / "scores.npz", **{k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in arrays.items()})
    c.update(empty=root / "empty", nul=root / "nul", dir=root / "dir", fifo=root / "fifo", missing=root / "missing",
             zero=Path("/dev/zero"), garbage_npy=root / "garbage.npy", votes_npy=root / "votes.npy",
             hostile_toml=root / "hostile.toml", claims=root / "claims.toml", symlink_loop=root / "loop",
             scores_npz=root / "scores.npz")
    c["scores_bundle"] = dpaudit.release.make(root / "sc", claim=["epsilon=8", "delta=1e-5"], scores=root / "scores.npz").path
    c["forest"] = forest_release(members=60, trees=2)
    c["result"] = dpaudit.account("laplace", scale=1.0)
    from dpaudit.integrations.flower.record import RUN_FILE

    for name, run in (("flower_run", _flower_record()), ("flower_pickle", _flower_record(format="pickle")),
                      ("flower_huge", _flower_record(partitions={str(10**30): 0})),
                      ("flower_nan", _flower_record(strategy={"kind": "server-fixed", "noise_multiplier": math.nan}))):
        (root / name).mkdir()
        (root / name / RUN_FILE).write_text(json.dumps(run))
        c[name] = root / name
    gpt2 = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 1, "n_embd": 8, "n_head": 2,
            "vocab_size": 16, "n_positions": 16}
    for name, extra, files in (("lm_config_only", {}, {}), ("lm_pickle", {}, {"pytorch_model.bin": b"\x80\x04K\x01."}),
                               ("lm_auto_map", {"auto_map": {"AutoModelForCausalLM": "evil.Model"}}, {}),
                               ("lm_remote", {"trust_remote_code": True}, {"evil.py": b"import os"}),
                               ("lm_big_tokenizer", {}, {"tokenizer.json": b" " * (65 * 2**20)})):
        (root / name).mkdir()
        (root / name / "config.json").write_text(json.dumps({**gpt2, **extra}))
        for fname, data in files.items():
            (root / name / fname).write_bytes(data)
        c[name] = root / name
    for b in (c["scores_bundle"], c["forest"]):
        os.chmod(b, 0o555)              # nothing may write into a bundle
    yield c
    for b in (c["scores_bundle"], c["forest"]):
        os.chmod(b, 0o755)


def _resolve(value: Any, c: dict) -> Any:
    if isinstance(value, str) and value.startswith("@"):
        key, _, tail = value[1:].partition(":")
        if key in c:
            return f"{c[key]}:{tail}" if tail else c[key]
    return value




def _cases(s: Surface):
    """(base index, [(keyword index, generic value index, hint index, use a hint)]): keywords are picked at run time
    from the base's keywords (and one hinted keyword in two when the surface has hints)."""
    change = st.tuples(st.integers(0, 10**6), st.integers(0, len(GENERIC) - 1), st.integers(0, 31), st.booleans(),
                       st.booleans())
    return st.tuples(st.integers(0, len(s.bases) - 1), st.lists(change, min_size=1, max_size=3))


def _params():
    out = []
    for name, s in SURFACES.items():
        out.append(pytest.param(name, s.fast, id=f"{name}-default"))
        out.append(pytest.param(name, s.slow, id=f"{name}-slow", marks=pytest.mark.slow))
    return out


@pytest.mark.parametrize("name, budget", _params())
def test_fuzz_python_api(ctx, name, budget):
    s = SURFACES[name]

    @settings(max_examples=budget, derandomize=budget < 500, **_COMMON)
    @given(_cases(s))
    def run(case):
        COUNTS[f"api {name}"] += 1
        base, changes = case
        # in a fresh working directory: a relative path among the values ("lira", " ", "inf") lands there
        with tempfile.TemporaryDirectory() as d, contextlib.chdir(d):
            c = {**ctx, "tmp": Path(d), "tmp_file": Path(d) / "f.xml"}
            kwargs = s.bases[base](c)
            keys, hinted = s.fuzzed(kwargs), sorted(s.hints)
            for k, g, h, use_hint, hinted_key in changes:
                key = hinted[k % len(hinted)] if hinted_key and hinted else keys[k % len(keys)]
                pool = s.hints.get(key) if use_hint else None
                kwargs[key] = _resolve(pool[h % len(pool)] if pool else GENERIC[g], c)
            try:
                with time_limit(s.limit_s, (name, kwargs)):
                    s.call(**kwargs)
                OUTCOMES[f"api {name}"][0] += 1
            except DPAuditError:
                OUTCOMES[f"api {name}"][2] += 1
            except TypeError as exc:
                if not (s.fixed_signature and UNKNOWN_KEYWORD in kwargs
                        and str(exc).endswith(f"() got an unexpected keyword argument '{UNKNOWN_KEYWORD}'")):
                    raise
                OUTCOMES[f"api {name}"][2] += 1

    run()

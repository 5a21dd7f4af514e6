"""PATE (Papernot et al. 2017) and the shared PATE-family helpers in dpaudit.training.methods.common."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpaudit.errors import DataError, ParameterError
from dpaudit.training.methods import common
from dpaudit.training.methods.common import (
    balanced_membership,
    consistent_vote_counts,
    disjoint_splits,
    noisy_argmax,
    select_queries,
    top_two_gap,
    vote_counts,
)

# --------------------------------------------------------------------------------------------------
# vote aggregation
# --------------------------------------------------------------------------------------------------

def _run_pate(method_config, *, dataset, out, seed, progress=False):
    """Run the method config through the scaffold (what ``dpaudit train pate`` does)."""
    from dpaudit.training.methods import pate as module

    return module.run(module.Config(name="pate", method=method_config, dataset=dataset), out, seed=seed, progress=progress)



def test_vote_counts_small_example() -> None:
    preds = np.array([[0, 1, 2], [0, 2, 2], [1, 2, 2]])  # 3 models x 3 queries
    v = vote_counts(preds, 3)
    np.testing.assert_array_equal(v, [[2, 1, 0], [0, 1, 2], [0, 0, 3]])


@settings(max_examples=40, deadline=None)
@given(m=st.integers(1, 7), q=st.integers(1, 9), c=st.integers(2, 5), seed=st.integers(0, 10_000))
def test_vote_counts_matches_loop(m: int, q: int, c: int, seed: int) -> None:
    preds = np.random.default_rng(seed).integers(0, c, size=(m, q))
    v = vote_counts(preds, c)
    ref = np.zeros((q, c), dtype=np.int64)
    for i in range(m):
        for j in range(q):
            ref[j, preds[i, j]] += 1
    np.testing.assert_array_equal(v, ref)
    assert (v.sum(axis=1) == m).all()


def test_vote_counts_rejects_bad_classes() -> None:
    with pytest.raises(ParameterError, match="predictions"):
        vote_counts(np.array([[0, 3]]), 3)


def test_noisy_argmax_without_noise_is_argmax_and_draws_nothing() -> None:
    v = np.array([[1, 5, 2], [7, 0, 0]])

    class NoDraw:
        def laplace(self, *a, **k):  # noqa: D401
            raise AssertionError("noise drawn although gamma is None")

    np.testing.assert_array_equal(noisy_argmax(v, None, NoDraw()), [1, 0])


def test_noisy_argmax_noise_scale() -> None:
    # Lap(1/gamma) noise on two tied counts: each class wins half the time; with a gap g, the
    # runner-up wins with probability P(L2 - L1 > g) = (1/2 + g*gamma/4) * exp(-g*gamma)  (difference of
    # two Laplace(b) variables, b = 1/gamma, closed form).
    rng = np.random.default_rng(0)
    n = 200_000
    gap, gamma = 2.0, 0.5
    v = np.tile([gap, 0.0], (n, 1))
    lose = np.mean(noisy_argmax(v, gamma, rng) == 1)
    expected = (0.5 + gap * gamma / 4) * math.exp(-gap * gamma)
    assert abs(lose - expected) < 0.005


def test_top_two_gap() -> None:
    np.testing.assert_array_equal(top_two_gap(np.array([[3, 1, 1], [2, 2, 0], [0, 0, 5]])), [2, 0, 5])


# --------------------------------------------------------------------------------------------------
# consistent voting (FedKT Algorithm 1 lines 15-21)
# --------------------------------------------------------------------------------------------------


def _consistent_reference(preds: np.ndarray, c: int) -> np.ndarray:
    n, s, q = preds.shape
    out = np.zeros((q, c), dtype=np.int64)
    for x in range(q):
        for i in range(n):
            vi = np.bincount(preds[i, :, x], minlength=c)
            for m in range(c):
                if vi[m] == s:
                    out[x, m] += s
    return out


def test_consistent_voting_small_example() -> None:
    # 3 parties, s=2 students, 2 queries, 3 classes
    preds = np.array([
        [[0, 1], [0, 2]],   # party 0: agrees on query 0 (class 0), disagrees on query 1
        [[1, 2], [1, 2]],   # party 1: agrees on both (1, then 2)
        [[0, 2], [2, 2]],   # party 2: disagrees on query 0, agrees on query 1 (2)
    ])
    v = consistent_vote_counts(preds, 3)
    np.testing.assert_array_equal(v, [[2, 2, 0], [0, 0, 4]])


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 5), s=st.integers(1, 4), q=st.integers(1, 6), c=st.integers(2, 4), seed=st.integers(0, 10_000))
def test_consistent_voting_matches_per_party_rule(n: int, s: int, q: int, c: int, seed: int) -> None:
    preds = np.random.default_rng(seed).integers(0, c, size=(n, s, q))
    v = consistent_vote_counts(preds, c)
    np.testing.assert_array_equal(v, _consistent_reference(preds, c))
    assert (v % s == 0).all() and (v.sum(axis=1) <= n * s).all()


# --------------------------------------------------------------------------------------------------
# queries, splits, membership
# --------------------------------------------------------------------------------------------------


def test_select_queries_count_fraction_and_validation() -> None:
    rng = np.random.default_rng(0)
    q = select_queries(100, queries=10, fraction=0.5, rng=rng)
    assert len(q) == 10 and len(np.unique(q)) == 10 and (np.diff(q) > 0).all()
    assert len(select_queries(100, queries=None, fraction=0.25, rng=rng)) == 25
    np.testing.assert_array_equal(select_queries(7, queries=None, fraction=1.0, rng=rng), np.arange(7))
    with pytest.raises(ParameterError, match="'queries'"):
        select_queries(10, queries=11, fraction=None, rng=rng)
    with pytest.raises(ParameterError, match="'query_fraction'"):
        select_queries(10, queries=None, fraction=0.0, rng=rng)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 200), k=st.integers(1, 12), seed=st.integers(0, 1000))
def test_disjoint_splits_partition_the_indices(n: int, k: int, seed: int) -> None:
    idx = np.random.default_rng(seed).choice(10_000, size=n, replace=False)
    if n < k:
        with pytest.raises(DataError):
            disjoint_splits(idx, k, np.random.default_rng(seed))
        return
    parts = disjoint_splits(idx, k, np.random.default_rng(seed))
    allidx = np.concatenate(parts)
    assert len(allidx) == n and set(allidx.tolist()) == set(idx.tolist())
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1


def test_balanced_membership() -> None:
    m = balanced_membership(np.arange(100), np.arange(100, 130), np.arange(200, 210), np.random.default_rng(0))
    assert len(m["members"]) == len(m["nonmembers"]) == 30
    assert set(m["members"]) <= set(range(100))
    with pytest.raises(DataError, match="overlap"):
        balanced_membership(np.arange(10), np.arange(5, 20), np.arange(3), np.random.default_rng(0))


def test_derive_seed_is_stable_and_tag_dependent() -> None:
    assert common.derive_seed(3, "teachers") == common.derive_seed(3, "teachers")
    assert common.derive_seed(3, "teachers") != common.derive_seed(3, "students")
    assert common.derive_seed(3, "teachers") != common.derive_seed(4, "teachers")


def test_stage_cache_skips_finished_stage(tmp_path: Path) -> None:
    calls = []

    def fn():
        calls.append(1)
        return {"a": np.arange(3)}

    c1 = common.StageCache(tmp_path)
    np.testing.assert_array_equal(c1.get_or_run("s", fn)["a"], np.arange(3))
    c2 = common.StageCache(tmp_path)
    np.testing.assert_array_equal(c2.get_or_run("s", fn)["a"], np.arange(3))
    assert len(calls) == 1 and c2.resumed == ["s"]


# --------------------------------------------------------------------------------------------------
# configs and CLI
# --------------------------------------------------------------------------------------------------

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


# Every shipped PATE-family config is loaded in tests/test_configs.py.


def test_load_config_overrides_and_errors(tmp_path: Path) -> None:
    from dpaudit.training.methods import load_method_config
    from dpaudit.training.methods.pate import PATEConfig

    p = tmp_path / "c.toml"
    p.write_text('[method]\nteachers = 7\n[method.teacher_train]\nepochs = 3\n')
    cfg = load_method_config("pate", p, params={"gamma": 0.25}).method
    assert cfg.teachers == 7 and cfg.gamma == 0.25 and cfg.teacher_train.epochs == 3
    assert cfg.teacher_train.lr == PATEConfig().teacher_train.lr  # sub-table merged over the default
    assert load_method_config("pate", p, sets=["method.teacher_train.lr=0.5"]).method.teacher_train.epochs == 3
    p.write_text('[method]\nteachers = 7\nbogus = 1\n')
    with pytest.raises(ParameterError, match="bogus"):
        load_method_config("pate", p)
    with pytest.raises(ParameterError, match="'teachers'"):
        load_method_config("pate", None, params={"teachers": 0})
    with pytest.raises(DataError, match="does not exist"):
        load_method_config("pate", tmp_path / "missing.toml")


def test_old_flat_config_loads_with_a_deprecation_message(tmp_path: Path) -> None:
    from dpaudit.training.methods import load_method_config

    p = tmp_path / "old.toml"
    p.write_text('method = "pate"\nteachers = 7\n[teacher_train]\nepochs = 3\n')
    with pytest.warns(FutureWarning, match=r"old flat layout.*\[method\]"):
        cfg = load_method_config("pate", p).method
    assert cfg.teachers == 7 and cfg.teacher_train.epochs == 3
    p.write_text('method = "fedkt"\nparties = 3\n')
    with pytest.raises(DataError, match="fedkt config, not a pate config"):
        load_method_config("pate", p)
    p.write_text('rounds = 3\n')  # federated methods never had a flat layout
    with pytest.raises(DataError, match=r"outside the tables \[data\], \[model\], \[method\], \[run\]"):
        load_method_config("privatekt", p)


@pytest.mark.parametrize("method", ["pate", "fedkt", "fredy"])
def test_cli_bad_input_is_one_line_exit_2(method: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from dpaudit.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["train", method, "--dataset", "digits", "--out", str(tmp_path / "o"), "--gamma", "-1"])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert err.count("\n") == 1 and "'gamma'" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


# --------------------------------------------------------------------------------------------------
# end to end on digits
# --------------------------------------------------------------------------------------------------


def _tiny_pate(**kw):
    from dpaudit.training.ensemble import TrainConfig
    from dpaudit.training.methods.pate import PATEConfig

    base = dict(teachers=5, teacher_model_kwargs={"hidden": [32]}, num_samples=500,
                teacher_train=TrainConfig(epochs=6, batch_size=64, lr=1e-2),
                student_train=TrainConfig(epochs=4, batch_size=128, lr=1e-2))
    base.update(kw)
    return PATEConfig(**base)


def test_pate_release_round_trip_and_ledger(tmp_path: Path) -> None:
    from dpaudit.training.release import load_release

    cfg = _tiny_pate(gamma=0.5, queries=40)
    res = _run_pate(cfg, dataset="digits", out=tmp_path / "p", seed=2, progress=False)
    rel = load_release(res.release)
    assert rel.meta["method"] == "pate"
    assert rel.votes.shape == (40, 10) and (rel.votes.sum(axis=1) == cfg.teachers).all()
    (party, records), = rel.meta["ledger"]["parties"].items()
    assert party == "central" and len(records) == 1
    ev = records[0]["event"]
    assert ev["gamma"] == 0.5 and ev["sensitivity"] == 2.0 and ev["num_queries"] == 40
    # the smaller of the data-dependent and data-independent figures is the headline; 40 answers at 2*gamma = 1
    # each bound them from above
    dd, di = res.accounting.statements
    assert not di.data_dependent
    # basic composition of 40 pure 1-DP answers gives 40 at delta = 0 and caps both figures; the first is
    # data-dependent exactly when the vote-based RDP analysis (not the cap) produced it
    assert dd.data_dependent == (not dd.method.startswith("basic composition"))
    assert 0 < dd.epsilon <= di.epsilon and di.epsilon <= 40 * 2 * 0.5 * (1 + 1e-12)
    assert res.accounting.epsilon == min(dd.epsilon, di.epsilon)
    assert set(rel.membership) >= {"members", "nonmembers", "attacker"}
    assert res.utility["num_queries"] == 40


def test_pate_same_seed_same_numbers(tmp_path: Path) -> None:

    cfg = _tiny_pate(gamma=1.0)
    a = _run_pate(cfg, dataset="digits", out=tmp_path / "a", seed=5, progress=False)
    b = _run_pate(cfg, dataset="digits", out=tmp_path / "b", seed=5, progress=False)
    c = _run_pate(cfg, dataset="digits", out=tmp_path / "c", seed=6, progress=False)
    assert a.utility == b.utility and a.accounting.epsilon == b.accounting.epsilon
    assert a.utility != c.utility
    np.testing.assert_array_equal(np.load(a.release / "votes.npy"), np.load(b.release / "votes.npy"))


def test_pate_noiseless_claims_nothing(tmp_path: Path) -> None:

    from dpaudit.training.ensemble import TrainConfig

    cfg = _tiny_pate(gamma=None, teacher_train=TrainConfig(epochs=30, batch_size=32, lr=1e-2))
    res = _run_pate(cfg, dataset="digits", out=tmp_path / "n", seed=0, progress=False)
    assert res.accounting.epsilon == float("inf")
    assert res.utility["label_accuracy"] > 0.5

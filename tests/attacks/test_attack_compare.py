"""The comparison of the reference-model attacks on the same references: which attacks run with how many
references, LiRA with one or two references (Carlini et al.'s fixed variance), the model path with a forest
recipe (records, round trip, seeds), and the paired layout."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import log_ndtr
from sklearn.datasets import load_digits

from dpaudit.attacks.compare import COMPARED_ATTACKS, AttackComparison, compare_attacks, compare_signals
from dpaudit.attacks.lira import lira_scores
from dpaudit.attacks.references import paired_inclusion, signals_from_scores, train_reference_signals
from dpaudit.attacks.rmia import rmia_attack
from dpaudit.errors import DataError
from dpaudit.serial import from_dict, to_dict
from attack_models import Forest


def test_paired_inclusion_is_complementary_and_nested():
    inc = paired_inclusion(500, 8, seed=0)
    assert np.array_equal(inc[:, 0::2], ~inc[:, 1::2])
    for k in (2, 4, 6, 8):
        assert (inc[:, :k].sum(axis=1) == k // 2).all()
    assert 0.4 < inc[:, 0].mean() < 0.6
    assert inc[:, :3].shape == (500, 3) and paired_inclusion(10, 3, seed=1).shape == (10, 3)


def test_lira_with_one_reference_uses_the_variance_over_every_value():
    rng = np.random.default_rng(0)
    phi = rng.normal(0, 1, (50, 1))
    t = rng.normal(0, 1, 50)
    got = lira_scores(t, phi, np.zeros((50, 1), bool), online=False)
    # Carlini et al.'s fixed variance: np.std over every OUT value (here with ddof=1), per-record means
    want = log_ndtr((t - phi[:, 0]) / np.std(phi, ddof=1))
    assert np.allclose(got, want, atol=1e-12)
    # two references, one IN and one OUT per record (online): both variances over every value
    phi2 = rng.normal(0, 1, (50, 2))
    inc = paired_inclusion(50, 2, seed=3)
    s = lira_scores(t, phi2, inc, online=True)
    assert np.all(np.isfinite(s))


def _synthetic(K, n=300, m=200, seed=0, offline=False):
    rng = np.random.default_rng(seed)
    d = rng.normal(0, 1, n + m)
    member = np.r_[np.ones(n // 2, bool), np.zeros(n - n // 2, bool)]
    inc = np.zeros((n, K), bool) if offline else paired_inclusion(n, K, seed=seed + 1)

    def stats(mask, dd):
        margin = 1.0 + dd + 1.5 * mask + rng.normal(0, 0.5, np.shape(mask))
        return -np.logaddexp(0, -margin), margin

    tl, tp = stats(member, d[:n])
    rl, rp = stats(inc, d[:n, None])
    zl, _ = stats(np.zeros(m, bool), d[n:])
    zr, _ = stats(np.zeros((m, K), bool), d[n:, None])
    return signals_from_scores(tl, tp, rl, rp, inc, population_logp=zl, population_reference_logp=zr), member


@pytest.mark.parametrize("K,offline", [(1, True), (1, False), (2, False), (8, False), (4, True)])
def test_compare_signals_runs_what_the_references_allow(K, offline):
    sig, member = _synthetic(K, offline=offline)
    comp = compare_signals(sig, member, n_bootstrap=20)
    ran = set(comp.results)
    assert ran | set(comp.skipped) == set(COMPARED_ATTACKS) and not ran & set(comp.skipped)
    online = {k for k in COMPARED_ATTACKS if "online" in k}
    if K == 1 or offline:
        assert online <= set(comp.skipped)            # online attacks need IN and OUT references
    if K == 1 and offline:
        # one reference, OUT for every record: LiRA offline (variance over every value) runs; offline RMIA cannot
        # fit its a on one model (no other model to be the pseudo-target's reference)
        assert {"threshold", "lira-offline", "lira-offline-fixed"} <= ran and "Give 'a'" in comp.skipped["rmia-offline"]
    if K == 1 and not offline:
        assert ran == {"threshold"}                   # half the records are IN the one model: nothing else applies
    if K >= 2 and not offline:
        assert ran == set(COMPARED_ATTACKS)
    if offline and K == 4:
        assert "rmia-offline" not in ran or comp.offline_a is not None
    for name, r in comp.results.items():
        assert 0.5 < r.metrics.auc <= 1.0, name
        assert r.bound.kind == "estimate" and "tpr@0.001" in r.metrics.intervals
    assert comp.settings["num_references"] == K and comp.records is not None
    # the threshold attack is the target's log p_y, with no reference model
    assert np.array_equal(comp.records.scores["threshold"], sig.target_logp)
    back = from_dict(AttackComparison, to_dict(comp))
    assert back.results == comp.results and back.skipped == comp.skipped and back.offline_a == comp.offline_a


def test_compare_signals_with_one_reference_and_a_given():
    sig, member = _synthetic(1, offline=True)
    comp = compare_signals(sig, member, a=0.4, n_bootstrap=0)
    assert "rmia-offline" in comp.results and "a = 0.4 (given)" in comp.results["rmia-offline"].description
    assert comp.offline_a is None and comp.results["rmia-offline"].metrics.auc > 0.6


def _digits(seed=0):
    X, y = load_digits(return_X_y=True)
    perm = np.random.default_rng(seed).permutation(len(X))
    return X, y, perm[:200], perm[200:400], perm[400:1000]


def test_compare_attacks_on_a_forest_same_references_and_seeded():
    X, y, mem, non, pool = _digits()
    target = Forest(X[mem], y[mem], 0)
    fn = lambda A, b, seed: Forest(A, b, seed)  # noqa: E731
    kw = dict(num_references=4, population=150, train_fn=fn, n_bootstrap=20, seed=1)
    comp = compare_attacks(target, X[mem], y[mem], X[non], y[non], X[pool], y[pool], **kw)
    assert set(comp.results) == set(COMPARED_ATTACKS)
    assert comp.settings["population"] == 150 and comp.settings["layout"] == "online"
    assert comp.settings["reference_train_size"] == pytest.approx(200, abs=20)
    assert comp.results["rmia-online"].metrics.auc > 0.75 and comp.results["lira-online-fixed"].metrics.auc > 0.75
    rs = comp.records
    assert len(rs) == 400 and set(rs.record[rs.member]) == set(range(200))
    again = compare_attacks(target, X[mem], y[mem], X[non], y[non], X[pool], y[pool], **kw)
    assert to_dict(again) == to_dict(comp)


def test_train_reference_signals_layouts_and_rmia_attack():
    X, y, mem, non, pool = _digits(1)
    target = Forest(X[mem], y[mem], 0)
    fn = lambda A, b, seed: Forest(A, b, seed)  # noqa: E731
    ev = np.r_[mem[:100], non[:100]]
    sig, st = train_reference_signals(target, X[ev], y[ev], X[pool], y[pool], num_references=3, online=False,
                                      population=100, train_size=150, train_fn=fn, seed=0)
    assert not sig.inclusion.any() and not sig.population_inclusion.any() and st["layout"] == "offline"
    assert sig.calibration_logp.shape == (300, 3) and st["reference_train_size"] == pytest.approx(150, abs=15)
    r = rmia_attack(target, X[ev], y[ev], X[pool], y[pool], num_references=3, online=False, population=100,
                    train_size=150, train_fn=fn, seed=0)
    assert r.a_fit is not None and r.num_population == 100
    s = r.score
    assert s[:100].mean() > s[100:].mean()
    with pytest.raises(DataError, match="pool"):
        train_reference_signals(target, X[ev], y[ev], X[pool[:2]], y[pool[:2]], num_references=2, online=False,
                                population=1, train_fn=fn)


def test_reference_units_are_checkpointed_and_a_rerun_trains_nothing(tmp_path):
    from dpaudit.executors import LocalExecutor

    X, y, mem, non, pool = _digits(2)
    target = Forest(X[mem], y[mem], 0)
    calls: list[int] = []

    def fn(A, b, seed):
        calls.append(seed)
        return Forest(A, b, seed, n_estimators=5)

    ev = np.r_[mem[:80], non[:80]]
    args = (target, X[ev], y[ev], X[pool], y[pool])
    kw = dict(num_references=10, online=True, population=100, train_fn=fn, seed=3)
    plain = rmia_attack(*args, **kw)
    ex = LocalExecutor().with_checkpoints(tmp_path / "units", salt="forest")
    first = rmia_attack(*args, executor=ex, **kw)
    calls.clear()
    again = rmia_attack(*args, executor=ex, **kw)
    assert calls == [] and np.array_equal(again.score, first.score) and np.array_equal(first.score, plain.score)
    assert sorted(p.name for p in (tmp_path / "units").glob("*.npz")) == ["models-0-8.npz", "models-8-10.npz"]


@pytest.mark.slow
def test_rmia_reference_models_on_ray_equal_local(tmp_path):
    pytest.importorskip("ray")
    from dpaudit.executors.ray_executor import RayExecutor

    X, y, mem, non, pool = _digits(3)
    target = Forest(X[mem], y[mem], 0)
    ev = np.r_[mem[:80], non[:80]]
    args = (target, X[ev], y[ev], X[pool], y[pool])
    kw = dict(num_references=10, online=False, population=100, train_fn=Forest, seed=5)
    local = rmia_attack(*args, **kw)
    import os
    from pathlib import Path

    old = os.environ.get("PYTHONPATH")
    here = str(Path(__file__).resolve().parent)                  # workers import attack_models (the Forest recipe)
    os.environ["PYTHONPATH"] = os.pathsep.join([here] + ([old] if old else []))
    try:
        ex = RayExecutor(num_cpus=2)
        ex.start()
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = old
    try:
        remote = rmia_attack(*args, executor=ex, **kw)
    finally:
        ex.shutdown()
    assert np.array_equal(local.score, remote.score) and local.a == remote.a

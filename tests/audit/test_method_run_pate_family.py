"""Certified audits of the PATE family's real training runs (PATE, FedKT-L1, FREDY): one-query noisy max after the
methods' own teacher training, with a canary record."""

from __future__ import annotations

import numpy as np
import pytest

from dpaudit.auditing.method_audit import METHOD_RUN_AUDITS, audit_method_run
from dpaudit.auditing.method_runs.pate_family import canary_input, noisy_max_ideal_epsilon
from dpaudit.errors import DataError, ParameterError
from dpaudit.serial import to_dict

TINY = dict(num_samples=600, hidden=32, epochs=10, pilot=2, replicates=3)


def test_registered() -> None:
    assert {"pate", "fedkt", "fredy"} <= set(METHOD_RUN_AUDITS)


def test_fredy_claim_refuted_by_its_real_training() -> None:
    # FedAvg lets the canary move all T votes: the per-query claim gamma falls, dpaudit's 2 T gamma stands
    r = audit_method_run("fredy", trials=60, teachers=4, rounds=2, gamma=1.0, seed=0, **TINY)
    assert r.kind == "certified" and r.trials == 60
    assert r.claimed_epsilon == 1.0 and r.accounted_epsilon == 8.0
    assert r.refutes_claim and not r.refutes_accounting
    assert r.settings["mean_label_votes_with"] > r.settings["mean_label_votes_without"] + 2
    assert r.bound.ideal_epsilon is not None and r.bound.ideal_epsilon > 1.0
    d = to_dict(r)
    assert d["refutes_claim"] is True and d["bound"]["kind"] == "certified"


def test_fredy_without_fedavg_is_accounted_at_pate_sensitivity() -> None:
    # one round: no averaging, each teacher sees its own data; accounting 2 gamma and the bound stays below it
    r = audit_method_run("fredy", trials=40, teachers=4, rounds=1, gamma=1.0, seed=1, **TINY)
    assert r.accounted_epsilon == 2.0 and r.settings["sensitivity"] == 2.0
    assert not r.refutes_accounting


def test_pate_not_refuted_and_reproducible() -> None:
    a = audit_method_run("pate", trials=40, teachers=3, gamma=1.0, seed=2, **TINY)
    assert a.claimed_epsilon == a.accounted_epsilon == 2.0
    assert not a.refutes_claim and not a.refutes_accounting and a.bound.epsilon <= 2.0
    b = audit_method_run("pate", trials=40, teachers=3, gamma=1.0, seed=2, **TINY)
    assert a.bound.epsilon == b.bound.epsilon and a.settings == b.settings


def test_fedkt_l1_not_refuted() -> None:
    r = audit_method_run("fedkt", trials=40, parties=2, partitions=2, teachers=1, gamma=1.0, party_queries=20,
                         seed=0, **TINY)
    assert r.claimed_epsilon == r.accounted_epsilon == 4.0  # 2 s gamma
    assert not r.refutes_claim and not r.refutes_accounting
    assert r.settings["level"] == "L1"


@pytest.mark.parametrize("method,params,name", [
    ("fredy", {"trials": 3}, "trials"),
    ("fredy", {"gamma": 0.0}, "gamma"),
    ("fredy", {"teachers": 0}, "teachers"),
    ("fredy", {"rounds": 0}, "rounds"),
    ("pate", {"canary_scale": -1.0}, "canary_scale"),
    ("pate", {"confidence": 1.0}, "confidence"),
    ("pate", {"seed": -1}, "seed"),
    ("fedkt", {"party_queries": 100_000}, "party_queries"),
    ("fedkt", {"partitions": 0}, "partitions"),
])
def test_bad_input_names_the_parameter(method, params, name) -> None:
    with pytest.raises(ParameterError, match=f"'{name}'"):
        audit_method_run(method, **params)


def test_unknown_method() -> None:
    with pytest.raises(ParameterError, match="'method'"):
        audit_method_run("pates")


def test_canary_input_uses_the_features_the_data_never_sets() -> None:
    X = np.random.default_rng(0).random((50, 1, 2, 3)).astype(np.float32)
    X[:, 0, 1, 2] = 0.0
    x = canary_input(X, features=1, scale=4.0)
    assert x.shape == (1, 2, 3) and x[0, 1, 2] == 4.0 and x.sum() == 4.0
    with pytest.raises(ParameterError, match="'canary_features'"):
        canary_input(X, features=7, scale=1.0)


def test_ideal_reference_is_below_the_exact_epsilon_and_grows_with_the_shift() -> None:
    kw = dict(voters=10, classes=10, gamma=1.0, num_in=500, num_out=500, replicates=3, seed=0)
    small = noisy_max_ideal_epsilon(shift=1, **kw)
    large = noisy_max_ideal_epsilon(shift=5, **kw)
    assert 0.0 <= small <= 2.0 and 0.0 < large <= 10.0 and large > small
    with pytest.raises(ParameterError, match="'voters'"):
        noisy_max_ideal_epsilon(shift=5, voters=2, classes=10, gamma=1.0, num_in=10, num_out=10)


def test_fedavg_teachers_groups_are_independent_federations() -> None:
    """Federation 0 of a grouped call equals a call with federation 0 alone (model i's randomness depends on
    (seed, i) only), and averaging stays within a federation."""
    from dpaudit.training.ensemble import TrainConfig
    from dpaudit.training.methods.common import StageCache
    from dpaudit.training.methods.fredy import fedavg_teachers, initial_state
    from dpaudit.training.models import ModelSpec

    spec = ModelSpec("mlp", (6,), 3, {"hidden": [8]})
    rng = np.random.default_rng(0)
    data = [(rng.random((20, 6)).astype(np.float32), rng.integers(0, 3, 20)) for _ in range(4)]
    train = TrainConfig(epochs=2, batch_size=8, lr=1e-2)
    w0 = initial_state(spec, 0)
    kw = dict(rounds=2, w0=w0, seed=3, device="cpu", cache=StageCache(None), progress=False)
    X = rng.random((5, 6)).astype(np.float32)
    both = fedavg_teachers(spec, data, train, group_size=2, **kw).predict_proba(X)
    first = fedavg_teachers(spec, data[:2], train, **kw).predict_proba(X)
    np.testing.assert_allclose(both[:2], first, atol=1e-5)
    assert not np.allclose(both[2:], both[:2], atol=1e-3)  # federation 1 trained on other data, averaged apart
    with pytest.raises(ParameterError, match="'group_size'"):
        fedavg_teachers(spec, data, train, group_size=3, **kw)


@pytest.mark.slow
@pytest.mark.parametrize("method,params", [
    ("fredy", {"trials": 200}),
    ("fredy", {"trials": 400, "gamma": 0.5}),
    ("pate", {"trials": 400, "teachers": 3, "pilot": 8}),
    ("fedkt", {"trials": 400, "pilot": 8}),
])
def test_full_digits_figures(method, params) -> None:
    r = audit_method_run(method, seed=0, **params)
    assert not r.refutes_accounting
    assert r.refutes_claim == (method == "fredy")

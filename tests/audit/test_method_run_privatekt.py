"""One-run certified audit of PrivateKT's whole training run (real round loop, real local training, real RR)."""

from __future__ import annotations

import numpy as np
import pytest

from dpaudit.auditing.method_audit import METHOD_RUN_AUDITS, audit_method_run
from dpaudit.auditing.method_runs.privatekt import audit_run, rr_ideal_one_run_epsilon
from dpaudit.errors import ParameterError
from dpaudit.serial import to_dict

# tiny: 100 canary clients among 104, K = 1 label per report at eps = 1, 30 rounds (about 15 reports per client);
# a small MLP and a fast local recipe so that the canaries' local models predict their class everywhere
TINY = dict(canary_clients=100, epsilon=1.0, samples_per_round=1, rounds=30, num_clients=4, hidden=16,
            canary_records=32, local_epochs=2, local_lr=0.05, server_steps=1, replicates=3)


@pytest.fixture(scope="module")
def tiny():
    return audit_method_run("privatekt", seed=0, **TINY)


def test_registered():
    assert METHOD_RUN_AUDITS["privatekt"] is audit_run


def test_tiny_run_is_certified_sound_and_refutes_the_per_process_claim(tiny):
    b = tiny.bound
    assert tiny.kind == "certified" and b.audit == "one-run" and tiny.trials == 100 and b.score == "count"
    # a Theorem 3 bound never exceeds the truth (beyond 5%); the truth is at most the accounting
    assert 0.0 < b.epsilon <= tiny.accounted_epsilon and not tiny.refutes_accounting
    # accounted: basic composition of the worst canary's reports (eps = 1 per report)
    assert tiny.accounted_epsilon == float(tiny.settings["reports_per_canary_max"]) * 1.0
    # the claim "eps = 1 for the whole process" is below what one run of 100 canaries certifies
    assert tiny.claimed_epsilon == 1.0 and b.epsilon > 1.0 and tiny.refutes_claim
    # the ideal reference (exact LR test, deterministic predictions, same participation): same rule, same m
    assert b.ideal_epsilon is not None and 1.0 < b.ideal_epsilon <= tiny.accounted_epsilon
    assert "REFUTED" in tiny.summary()
    assert to_dict(tiny)["refutes_claim"] is True


def test_reproducible_by_seed():
    # the same code path as TINY (round loop, local training, RR, bound) at a tenth of its size: reproducibility
    # does not depend on the size, and a second TINY run cost as much as the rest of this file
    small = dict(TINY, canary_clients=12, rounds=6, replicates=1)
    first, again = audit_run(seed=0, **small), audit_run(seed=0, **small)
    assert again.bound == first.bound and again.accounted_epsilon == first.accounted_epsilon
    assert again.settings["reports_per_canary_mean"] == first.settings["reports_per_canary_mean"]
    other = audit_run(seed=1, **small)
    assert (other.bound, other.settings["reports_per_canary_mean"]) != (first.bound, first.settings["reports_per_canary_mean"])


def test_ideal_reference_is_reproducible_and_grows_with_canaries():
    reports = np.full(400, 10)
    a = rr_ideal_one_run_epsilon(reports[:100], samples=2, classes=10, epsilon=5.0, seed=1)
    assert a == rr_ideal_one_run_epsilon(reports[:100], samples=2, classes=10, epsilon=5.0, seed=1)
    assert rr_ideal_one_run_epsilon(reports, samples=2, classes=10, epsilon=5.0, seed=1) > a
    # no reports, no information: nothing certified
    assert rr_ideal_one_run_epsilon(np.zeros(100, dtype=int), samples=2, classes=10, epsilon=5.0) == 0.0


@pytest.mark.parametrize("params, name", [
    (dict(canary_clients=1), "canary_clients"),
    (dict(canary_clients=10, confidence=1.5), "confidence"),
    (dict(canary_clients=10, canary_records=0), "canary_records"),
    (dict(canary_clients=10, no_such_setting=3), "no_such_setting"),
    (dict(canary_clients=10, epsilon=-1.0), "epsilon"),
    (dict(canary_clients=10, canary_classes=(2, 2)), "canary_classes"),
])
def test_bad_input_names_the_parameter(params, name):
    with pytest.raises(ParameterError, match=name):
        audit_method_run("privatekt", **{"num_clients": 2, "rounds": 1, "hidden": 4, "canary_records": 2, **params})


def test_direct_call_takes_other_config_fields_and_names_unknown_ones():
    with pytest.raises(ParameterError, match="not_a_field"):
        audit_run(canary_clients=4, rounds=1, num_clients=2, hidden=4, canary_records=2, not_a_field=1)
    r = audit_run(canary_clients=4, rounds=2, num_clients=2, hidden=4, canary_records=2, local_epochs=1,
                  importance_sampling=False, replicates=1)
    assert r.settings["method_config"]["importance_sampling"] is False and r.trials == 4


@pytest.mark.slow
def test_one_run_refutes_eps_5_for_the_whole_process():
    """PrivateKT's paper settings (eps = 5 per report over K = 2 samples, C = 10, client fraction 0.5): 2000 canary
    clients in one 20-round run (about 10 reports each) certify eps > 5 (measured: 5.339 = the ideal reference,
    accounted 85, about 30 s on 2 CPU cores)."""
    r = audit_method_run("privatekt", canary_clients=2000, rounds=20, seed=0)
    assert r.kind == "certified" and r.claimed_epsilon == 5.0
    assert r.refutes_claim and not r.refutes_accounting
    assert r.bound.ideal_epsilon > 5.0

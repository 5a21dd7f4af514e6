"""Issue 23 (I8, U1): a method audit's `device` is parsed and checked like `train --device`, before any work, at every
entry (the CLI's --set, [[method_audits]], claims files, the library); a ProxyFL audit at noise_multiplier=1e-300 gives
a correct answer (a certain attack), not an internal argument check of one_run_certified."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpaudit.attacks.canary import dirac_scores, ideal_one_run_epsilon, one_run_certified
from dpaudit.auditing import method_audit
from dpaudit.errors import DataError, ParameterError


@pytest.fixture
def no_work(monkeypatch):
    """Every method audit replaced by one that fails if it runs (same signature, so the parameter checks see the
    real parameters)."""
    import functools

    def forbid(fn):
        @functools.wraps(fn)
        def forbidden(**kw):
            raise AssertionError("the audit started before its device was checked")
        return forbidden

    for name, fn in list(method_audit.METHOD_RUN_AUDITS.items()):
        monkeypatch.setitem(method_audit.METHOD_RUN_AUDITS, name, forbid(fn))


@pytest.mark.parametrize("method", ["proxyfl", "pate", "fedkt", "fredy"])
@pytest.mark.parametrize("device,match", [("cuda:999", "'cuda:999' is not available"), ("meta", "Got 'meta'"),
                                          ("xyz", "Got 'xyz'"), ("cpu:0:1", "Got 'cpu:0:1'")])
@pytest.mark.usefixtures("no_work")
def test_i8_cli_device_is_checked_before_work(cli, method, device, match):
    code, _, err = cli(["audit-method", method, "--set", f"device={device}", "--quiet"])
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("dpaudit: error: The 'device' parameter of"), err
    assert match in lines[0] and "internal error" not in err


@pytest.mark.usefixtures("no_work")
def test_i8_library_and_configs_check_the_device(tmp_path):
    from dpaudit.auditing.claims import parse_claims
    from dpaudit.auditing.method_audit import MethodAuditSpec, audit_method_run

    with pytest.raises(ParameterError, match="'device' parameter of the audit of 'proxyfl'.*Got 'meta'"):
        audit_method_run("proxyfl", device="meta")
    with pytest.raises(ParameterError, match="'device' parameter of method_audits entry 'pate'.*Got 'meta'"):
        MethodAuditSpec("pate", {"device": "meta"})
    claim = {"claim": [{"name": "c", "epsilon": 1.0, "delta": 1e-5, "granularity": "example", "mechanism": "laplace",
                        "params": {"scale": 1.0},
                        "attack": {"kind": "method-run", "method": "proxyfl", "params": {"device": "cuda:999"}}}]}
    with pytest.raises(ParameterError, match="'device' parameter of the attack of claim 'c'"):
        parse_claims(claim, base_dir=tmp_path)
    assert MethodAuditSpec("pate", {"device": "cpu"}).params["device"] == "cpu"


@pytest.mark.parametrize("sigma", [1e-300, 5e-324, 1e-160])
def test_u1_dirac_scores_at_a_vanishing_noise_are_certain_not_nan(sigma):
    """At sigma -> 0 the likelihood ratio separates perfectly: included-and-sampled canaries score +inf, the others
    a finite value; NaN (from inf - inf) would have no order."""
    rng = np.random.default_rng(0)
    T, m, q = 5, 40, 0.3
    inc = rng.random(m) < 0.5
    with np.errstate(over="ignore"):
        x = rng.standard_normal((T, 1, m)) + (inc & (rng.random((T, m)) < q))[:, None, :] / sigma
    s = dirac_scores(x, sampling_rate=q, noise_multiplier=sigma)[0]
    assert not np.isnan(s).any()
    sampled = (x[:, 0, :] > 1e100).any(axis=0)
    assert np.all(np.isposinf(s[sampled])) and np.all(np.isfinite(s[~sampled]))
    bound = one_run_certified(s, inc, delta=1e-5)
    assert math.isfinite(bound.epsilon) and bound.epsilon > 0
    ideal = ideal_one_run_epsilon({"kind": "subsampled_gaussian", "sampling_rate": q, "noise_multiplier": sigma,
                                   "steps": T}, m, delta=1e-5, replicates=3)
    assert math.isfinite(ideal) and ideal > 0


def test_u1_one_run_bounds_take_infinite_scores_and_refuse_nan():
    inc = np.arange(40) % 2 == 0
    perfect = one_run_certified(np.where(inc, np.inf, -np.inf), inc)
    assert perfect.epsilon == one_run_certified(inc.astype(float), inc).epsilon > 0
    with pytest.raises(DataError, match="without NaN"):
        one_run_certified(np.where(inc, np.nan, 0.0), inc)


@pytest.mark.slow
def test_u1_proxyfl_audit_at_noise_1e_300_answers(cli):
    code, out, err = cli(["audit-method", "proxyfl", "--set", "noise_multiplier=1e-300", "--set", "rounds=1",
                          "--set", "canaries=20", "--set", "num_clients=2", "--set", "samples_per_client=30",
                          "--set", "hidden=[8]", "--set", "ideal_replicates=1", "--quiet"])
    assert code == 0 and "certified epsilon >=" in out and "internal" not in err and "one_run_certified" not in err, err


def test_proxyfl_canary_count_is_capped_before_work(monkeypatch):
    """Found by the fuzz suite: --set canaries=2147483648 allocated for minutes before the Dirac-coordinate check."""
    from dpaudit.auditing.method_runs import proxyfl
    from dpaudit.training.methods.fl_common import DataSettings

    def forbidden(*a, **k):
        raise AssertionError("work started before the canary count was checked")

    monkeypatch.setattr(DataSettings, "prepare", forbidden)
    with pytest.raises(ParameterError, match=r"'canaries' parameter of the ProxyFL run audit must be an int in the range \[2, 1000000\]"):
        proxyfl.audit_run(canaries=2**31)
    with pytest.raises(ParameterError, match=r"'num_clients' parameter of the ProxyFL run audit"):
        proxyfl.audit_run(num_clients=2**31)

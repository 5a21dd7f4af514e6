"""Certified one-run audit of ProxyFL's real training run (white-box Dirac canaries in the proxy's DP-SGD step;
black-box input canaries scored on the proxy a client sends)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dpaudit.auditing.method_audit import METHOD_RUN_AUDITS, MethodRunAudit, audit_method_run
from dpaudit.auditing.method_runs.proxyfl import ClientDiracHook, audit_run
from dpaudit.errors import ParameterError
from dpaudit.training.methods.fl_common import DataSettings
from dpaudit.training.methods.proxyfl import ProxyFLConfig, ProxyFLMethod, run_proxyfl
from dpaudit.training.engine import RoundEngine
from dpaudit.training.models import ModelSpec
from dpaudit.serial import to_dict



pytestmark = pytest.mark.usefixtures("one_torch_thread")


SMALL = dict(num_clients=4, samples_per_client=40, rounds=3, batch_size=10, hidden=[16], ideal_replicates=3)


@pytest.fixture(scope="module")
def small():
    data = DataSettings(num_clients=3, partition="major_class", p_major=0.8, samples_per_client=40,
                        public_fraction=0.0).prepare("digits", seed=1)
    spec = ModelSpec("mlp", data.input_shape, data.num_classes, {"hidden": [16]})
    return data, spec


def _flat(states):
    return torch.cat([torch.cat([v.reshape(-1) for v in s.values()]) for s in states])


def _run(data, spec, hook, seed=2, sigma=1.0):
    cfg = ProxyFLConfig(rounds=2, batch_size=10, lr=5e-3, noise_multiplier=sigma)
    method = ProxyFLMethod(cfg, data, spec, spec, device="cpu", canary_hook=hook)
    out = RoundEngine(method, data.client_tuples(), rounds=2, seed=seed).run().result
    return method, _flat([c["proxy"] for c in out["clients"]] + [c["private"] for c in out["clients"]])


def _hook(spec, data, coins, sigma=1.0, seed=0):
    coords = [np.arange(5) * 64 + k for k in range(data.num_clients)]  # first-layer weights of pixel k
    return ClientDiracHook(spec, coords, [np.full(5, coins)] * data.num_clients, max_grad_norm=1.0,
                           noise_multiplier=sigma, seed=seed)


def test_hook_off_or_empty_leaves_the_run_unchanged(small):
    data, spec = small
    _, plain = _run(data, spec, None)
    ref = run_proxyfl(data, spec, spec, ProxyFLConfig(rounds=2, batch_size=10, lr=5e-3), seed=2, device="cpu")
    assert torch.equal(plain, _flat(list(ref.proxy_states) + list(ref.private_states)))
    hook = _hook(spec, data, False)  # every canary excluded: the hook only observes
    _, observed = _run(data, spec, hook)
    assert torch.equal(plain, observed)
    obs = hook.observations(0)
    assert obs.shape == (2 * 4, 5) and np.isfinite(obs).all()  # 2 rounds x round(40 / 10) steps


def test_included_dirac_canaries_shift_the_observations_by_one_over_sigma(small):
    data, spec = small
    # pixel 0 is zero in every digits image: its first-layer weights get no real gradient, only noise + canary
    assert (data.X.reshape(len(data.X), -1)[:, 0] == 0).all()
    coords = [np.arange(16) * 64 for _ in range(data.num_clients)]
    sigma = 0.5
    runs = {}
    for coin in (False, True):
        hook = ClientDiracHook(spec, coords, [np.full(16, coin)] * data.num_clients, max_grad_norm=1.0,
                               noise_multiplier=sigma, seed=0)
        method, flat = _run(data, spec, hook, sigma=sigma)
        runs[coin] = (np.stack([hook.observations(k) for k in range(data.num_clients)]), flat)
    out, inn = runs[False][0], runs[True][0]
    assert abs(out.mean()) < 0.1 and 0.9 < out.std() < 1.1  # N(0, 1) in units of sigma C
    q = float(method.q[0])
    assert abs((inn - out).mean() - q / sigma) < 0.1  # each sampled canary adds C = 1/sigma units
    d = inn - out
    assert np.all(np.minimum(abs(d), abs(d - 1 / sigma)) < 1e-4)  # the real gradient there is exactly 0
    assert not torch.equal(runs[False][1], runs[True][1])  # included canaries do move the proxies


def test_hook_needs_dp_and_checks_its_inputs(small):
    data, spec = small
    with pytest.raises(ParameterError, match="canary_hook"):
        ProxyFLMethod(ProxyFLConfig(dp=False), data, spec, spec, canary_hook=_hook(spec, data, True))
    with pytest.raises(ParameterError, match="'coords' and 'included'"):
        ClientDiracHook(spec, [np.arange(3)], [np.ones(2, bool)], max_grad_norm=1.0, noise_multiplier=1.0, seed=0)
    with pytest.raises(ParameterError, match="'coords'"):
        ClientDiracHook(spec, [np.array([10 ** 7])], [np.ones(1, bool)], max_grad_norm=1.0, noise_multiplier=1.0,
                        seed=0)


def test_white_box_audit_is_registered_certified_and_below_the_claim():
    assert "proxyfl" in METHOD_RUN_AUDITS
    r = audit_method_run("proxyfl", canary="dirac", canaries=120, noise_multiplier=0.8, seed=0, **SMALL)
    assert isinstance(r, MethodRunAudit) and r.kind == "certified" and r.method == "proxyfl"
    assert r.bound.score == "dirac-lr" and r.trials == 120 and r.accounted_epsilon is None
    assert 0.0 < r.bound.epsilon <= r.claimed_epsilon and not r.refutes_claim
    assert r.bound.ideal_epsilon is not None and r.bound.ideal_epsilon > 0
    assert r.settings["dp_steps"] == 3 * 4 and math.isclose(r.settings["sampling_rate"], 10 / 40)
    again = audit_run(canary="dirac", canaries=120, noise_multiplier=0.8, seed=0, **SMALL)
    assert again.bound == r.bound and again.claimed_epsilon == r.claimed_epsilon  # same seed, same numbers
    assert to_dict(r)["audit"] == "one-run/dirac" and "not established" in r.notes[0]


def test_white_box_audit_certifies_little_under_heavy_noise():
    r = audit_run(canary="dirac", canaries=120, noise_multiplier=20.0, seed=1, **SMALL)
    assert r.bound.epsilon < 0.5 and r.claimed_epsilon < 0.5


def test_black_box_audit_scores_the_sent_proxy_and_calibrates_epsilon():
    r = audit_run(canary="ood", canaries=40, epsilon=4.0, seed=0, **SMALL)
    assert r.bound.score == "loss" and r.trials == 40 and r.settings["included"] == int(r.settings["included"])
    # the claim is taken at the clients' actual q_k = b / n_k (n_k grows by the included canaries): near the target
    assert 3.0 < r.claimed_epsilon <= 4.0 + 1e-6
    assert r.bound.epsilon <= r.claimed_epsilon


@pytest.mark.parametrize("kw, name", [
    ({"canary": "gradient"}, "canary"), ({"canaries": 1}, "canaries"), ({"num_clients": 0}, "num_clients"),
    ({"batch_size": 100}, "batch_size"), ({"delta": 0.0}, "delta"), ({"confidence": 1.5}, "confidence"),
    ({"epsilon": 2.0, "noise_multiplier": 1.0}, "noise_multiplier"), ({"epsilon": -1.0}, "epsilon"),
    ({"hidden": []}, "hidden"), ({"seed": -1}, "seed"), ({"canary": "mislabeled", "canaries": 10 ** 5}, "canaries"),
])
def test_bad_inputs_name_the_parameter(kw, name):
    with pytest.raises(ParameterError, match=f"'{name}'"):
        audit_run(**{**SMALL, **kw})


def test_unknown_method_is_refused():
    with pytest.raises(ParameterError, match="'method'"):
        audit_method_run("no-such-method")


@pytest.mark.slow
def test_white_box_audit_at_the_papers_noise_with_many_canaries_is_sound_and_informative():
    # the default ProxyFL digits setting (8 clients x 90, 30 rounds, b = 16) at the paper's sigma = 1
    r = audit_run(canary="dirac", canaries=1000, seed=0)
    assert r.bound.epsilon <= r.claimed_epsilon
    assert r.bound.epsilon > 0.5 * r.bound.ideal_epsilon


def test_parameters_are_listed_and_unknown_ones_refused():
    from dpaudit.auditing.method_audit import method_run_parameters

    params = method_run_parameters("proxyfl")
    assert params["canary"] == "dirac" and params["canaries"] == 1000 and "progress" not in params
    with pytest.raises(ParameterError, match="canary_clients"):
        audit_method_run("proxyfl", canary_clients=3)


def test_cli_runs_the_audit(tmp_path):
    from click.testing import CliRunner

    from dpaudit.cli.audit_method import command

    sets = [a for k, v in {**SMALL, "canaries": 40}.items() if k != "hidden" for a in ("--set", f"{k}={v}")]
    res = CliRunner().invoke(command, ["proxyfl", *sets, "--set", "hidden=[8]", "--quiet", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "proxyfl (one-run/dirac, full run): certified epsilon >=" in res.output
    assert (tmp_path / "method_audit.json").is_file()

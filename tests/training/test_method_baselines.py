"""The LDP baselines of PrivateKT (FedAvg/FedSGD with Laplace on L1-clipped updates, FedMD with RR) and
the ProxyFL baselines."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpaudit.errors import ParameterError
from dpaudit.training.methods.fl_common import clip_l1, laplace_ldp, laplace_scale_for_ldp


def test_clip_l1_bounds_the_norm_and_keeps_small_vectors():
    v = np.array([[3.0, -4.0], [0.1, 0.1]])
    c = clip_l1(v, 1.0)
    assert np.allclose(np.abs(c).sum(1), [1.0, 0.2])
    assert np.allclose(c[0] / np.abs(c[0]).sum(), v[0] / 7.0)


def test_laplace_scale_is_two_c_over_eps():
    # L1 sensitivity of an update clipped to ||u||_1 <= C is 2C (Dwork & Roth 2014, Thm 3.6 -> b = 2C/eps)
    assert laplace_scale_for_ldp(0.5, 5.0) == pytest.approx(0.2)
    with pytest.raises(ParameterError, match="'epsilon'"):
        laplace_scale_for_ldp(1.0, 0.0)


def test_laplace_ldp_likelihood_ratio_is_bounded_by_eps():
    # two extreme clipped inputs u = C e_1 and u' = -C e_1: the log density ratio of any output is <= eps
    C, eps = 1.0, 2.0
    b = laplace_scale_for_ldp(C, eps)
    out = laplace_ldp(np.array([[C, 0.0]]).repeat(20000, 0), C, eps, np.random.default_rng(0))
    llr = (np.abs(out - np.array([-C, 0.0])).sum(1) - np.abs(out - np.array([C, 0.0])).sum(1)) / b
    assert llr.max() <= eps + 1e-9 and llr.max() > 0.99 * eps
    # and the noise has the right spread: Var Laplace(b) = 2 b^2
    assert math.isclose(out[:, 1].var(), 2 * b * b, rel_tol=0.05)


# --------------------------------------------------------------------------------------------------
# the baselines as methods
# --------------------------------------------------------------------------------------------------

import json

import torch

from dpaudit.accountants.events import flatten
from dpaudit.accountants.pure import PureDp
from dpaudit.training.methods.baselines import (
    LdpUpdateConfig,
    LdpUpdateMethod,
    fedmd_config,
    run_ldp_updates,
)
from dpaudit.training.methods import run_method
from dpaudit.training.methods.fl_common import DataSettings, flatten_state
from dpaudit.training.methods.privatekt import PrivateKTConfig, PrivateKTMethod
from dpaudit.training.models import ModelSpec


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def small():
    data = DataSettings(num_clients=4, partition="dirichlet", alpha=0.5).prepare("digits", seed=0)
    spec = ModelSpec("mlp", data.input_shape, data.num_classes, {"hidden": [16]})
    return data, spec


@pytest.mark.parametrize("mode,sign", [("fedavg", 1.0), ("fedsgd", -1.0)])
def test_server_applies_the_mean_noisy_update_and_records_pure_events(small, mode, sign):
    data, spec = small
    m = LdpUpdateMethod(LdpUpdateConfig(mode=mode, server_lr=0.5, epsilon=2.0, clip=0.3), data, spec)
    st, msg = m.init_server(0)
    p0 = flatten_state(st["params"])
    u = np.random.default_rng(0).normal(size=(2, p0.size))
    st2, _ = m.server_step(st, {1: {"update": u[0], "event": m.event}, 3: {"update": u[1], "event": m.event}})
    assert np.allclose(flatten_state(st2["params"]), p0 + sign * 0.5 * u.mean(0), atol=1e-6)
    ev = flatten(st2["ledger"].events("client1"))[0][0]
    assert isinstance(ev, PureDp) and ev.epsilon == 2.0 and "2C/eps" in ev.mechanism
    assert st2["ledger"].parties == ("client1", "client3")


def test_client_release_is_clipped_and_noised(small):
    data, spec = small
    m = LdpUpdateMethod(LdpUpdateConfig(mode="fedsgd", epsilon=1e9, clip=0.25), data, spec)  # ~no noise
    st, msg = m.init_server(0)
    _, replies = m.client_steps([{}], [data.client_tuples()[0]], [msg])
    assert np.abs(replies[0]["update"]).sum() == pytest.approx(0.25, rel=1e-4)
    m2 = LdpUpdateMethod(LdpUpdateConfig(mode="fedsgd", epsilon=1.0, clip=0.25), data, spec)
    _, r2 = m2.client_steps([{}], [data.client_tuples()[0]], [msg])
    resid = r2[0]["update"] - replies[0]["update"]
    assert math.isclose(resid.var(), 2 * 0.5**2, rel_tol=0.1)  # Laplace(2C/eps = 0.5): variance 2 b^2


def test_fedmd_is_privatekt_over_the_whole_public_pool(small):
    data, spec = small
    cfg = fedmd_config(PrivateKTConfig(), len(data.public))
    assert cfg.samples_per_round == len(data.public) and not cfg.use_buffer and not cfg.importance_sampling
    assert not cfg.self_training
    m = PrivateKTMethod(cfg, data, spec)
    # eps split over every shared label: per-label epsilon eps / |public|
    assert m.event.sample_epsilon == pytest.approx(5.0 / len(data.public))
    assert m.beta == pytest.approx(rr_keep(5.0 / len(data.public)))


def rr_keep(label_eps, C=10):
    return math.expm1(label_eps) / (math.expm1(label_eps) + C)


def test_ldp_release_and_centrain_release(tmp_path):
    from dpaudit.training.release import load_release

    s = run_method("fedavg-ldp", dataset="digits", out=tmp_path / "f", seed=0, progress=False,
                          params={"data": {"num_clients": 4}, "model": {"hidden": [16]}, "method": {"rounds": 3}})
    meta = load_release(tmp_path / "f").meta
    assert meta["method"] == "fedavg_ldp" and meta["claim"]["epsilon"] == 5.0
    assert meta["statement"]["statement"]["label"].startswith("client, releases actually made")
    assert meta["statement"]["epsilon"] >= 5.0 and s.epsilon == pytest.approx(meta["statement"]["epsilon"])
    c = run_method("centrain", dataset="digits", out=tmp_path / "c", seed=0, progress=False,
                       params={"data": {"num_clients": 4}, "model": {"hidden": [16]}, "method": {"epochs": 2}})
    cm = load_release(tmp_path / "c").meta
    assert cm["statement"]["epsilon"] == "inf" and math.isinf(c.epsilon)
    json.dumps(cm)


def test_runs_are_seeded(small):
    data, spec = small
    cfg = LdpUpdateConfig(rounds=2, local_epochs=1)
    a, b = run_ldp_updates(data, spec, cfg, seed=1), run_ldp_updates(data, spec, cfg, seed=1)
    assert all(torch.equal(a.params[k], b.params[k]) for k in a.params)


# --------------------------------------------------------------------------------------------------
# configs and the command line
# --------------------------------------------------------------------------------------------------

from pathlib import Path

from dpaudit.training.methods.proxyfl import ProxyFLConfig

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_cli_trains_writes_and_refuses_bad_input(tmp_path, capsys):
    from dpaudit.cli import main

    cfg = tmp_path / "tiny.toml"
    cfg.write_text('[data]\nnum_clients = 4\n[model]\nname = "mlp"\nhidden = [8]\n[method]\nlocal_epochs = 1\n')
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exc:
        main(["train", "fedavg-ldp", "--dataset", "digits", "--out", str(out), "--config", str(cfg), "--rounds", "2"])
    assert exc.value.code == 0
    assert "fedavg-ldp: release written" in capsys.readouterr().out and (out / "release.json").is_file()
    with pytest.raises(SystemExit) as exc:
        main(["train", "fedavg-ldp", "--dataset", "digits", "--out", str(out), "--config", str(cfg)])
    assert exc.value.code == 2 and "already exists" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["train", "privatekt", "--dataset", "digits", "--out", str(tmp_path / "x"), "--epsilon", "-1"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "The 'epsilon' parameter of PrivateKTConfig" in err and "Traceback" not in err
    bad = tmp_path / "bad.toml"
    bad.write_text("[nonsense]\na = 1\n")
    with pytest.raises(SystemExit) as exc:
        main(["train", "centrain", "--dataset", "digits", "--out", str(tmp_path / "y"), "--config", str(bad)])
    assert exc.value.code == 2 and "outside the tables" in capsys.readouterr().err


def test_interrupted_run_resumes_from_its_checkpoint(tmp_path):
    # stop after 2 of 4 rounds (checkpoint every round), then run the same command: it resumes and equals a fresh run
    tables = {"data": {"num_clients": 4}, "model": {"hidden": [8]}, "method": {"rounds": 4, "local_epochs": 1},
              "run": {"checkpoint_every": 1}}
    kw = dict(seed=0, progress=False, params=tables)
    stop = {**tables, "run": {"checkpoint_every": 1, "stop_after": 2}}
    assert run_method("fedavg-ldp", dataset="digits", out=tmp_path / "a", seed=0, progress=False, params=stop) is None
    assert (tmp_path / ".a.checkpoints" / "engine_checkpoint" / "state.json").is_file()
    run_method("fedavg-ldp", dataset="digits", out=tmp_path / "a", **kw)
    run_method("fedavg-ldp", dataset="digits", out=tmp_path / "b", **kw)
    assert not (tmp_path / ".a.checkpoints").exists()
    from safetensors.numpy import load_file

    wa, wb = load_file(str(tmp_path / "a" / "model.safetensors")), load_file(str(tmp_path / "b" / "model.safetensors"))
    assert all(np.allclose(wa[k], wb[k], atol=1e-6) for k in wa)

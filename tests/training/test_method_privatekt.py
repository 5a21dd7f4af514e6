"""PrivateKT (Qi et al., Nature Communications 2023): invariants of its building blocks, then the method."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from dpaudit.accountants.events import rr_keep_probability
from dpaudit.errors import ParameterError
from dpaudit.training.methods.fl_common import (
    buffer_fetch,
    buffer_push,
    entropy_weights,
    predictive_entropy,
    rr_debias,
    rr_perturb,
    weighted_sample,
)
from dpaudit.serial import to_dict


def test_randomized_response_frequencies_match_beta():
    # Lemma 1 / Eq. 2: P(report = true) = beta + (1-beta)/C, P(report = j != true) = (1-beta)/C
    C, K, eps = 10, 2, 5.0
    beta = rr_keep_probability(eps, K, C)
    n = 200_000
    y = np.full(n, 3)
    r = rr_perturb(y, beta, C, np.random.default_rng(0))
    freq = np.bincount(r, minlength=C) / n
    want = np.full(C, (1 - beta) / C)
    want[3] += beta
    sd = np.sqrt(want * (1 - want) / n)
    assert np.all(np.abs(freq - want) < 5 * sd)
    # the likelihood ratio of one label is exp(eps/K) (Lemma 1)
    assert math.isclose(want[3] / want[0], math.exp(eps / K), rel_tol=1e-12)


def test_randomized_response_extremes_and_validation():
    rng = np.random.default_rng(1)
    y = np.arange(10) % 4
    assert np.array_equal(rr_perturb(y, 1.0, 4, rng), y)
    with pytest.raises(ParameterError, match="'labels'"):
        rr_perturb(np.array([4]), 0.5, 4, rng)
    with pytest.raises(ParameterError, match="'keep_probability'"):
        rr_perturb(y, 1.5, 4, rng)


@settings(max_examples=15, deadline=None)
@given(beta=st.floats(0.05, 0.95), seed=st.integers(0, 1000))
def test_debiased_estimate_is_unbiased(beta, seed):
    # Eq. 3: E[debiased] = mean one-hot of the true labels; check with many repetitions (CLT bound)
    C, G, K = 5, 7, 3
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, C, size=(G, K))
    truth = np.eye(C)[labels].mean(0)
    reps = 3000
    reports = rr_perturb(np.broadcast_to(labels, (reps, G, K)), beta, C, rng)
    est = np.stack([rr_debias(r, beta, C) for r in reports])
    mean, sd = est.mean(0), est.std(0) / math.sqrt(reps)
    assert np.all(np.abs(mean - truth) < 5 * sd + 1e-9)


def test_debias_exact_on_expected_reports():
    # feeding the expected report distribution must return the truth exactly (linear algebra of Eq. 3)
    C, beta = 4, 0.3
    truth = np.eye(C)[[2]]
    expected = beta * truth + (1 - beta) / C
    # (expected - (1-beta)/C)/beta == truth
    assert np.allclose((expected - (1 - beta) / C) / beta, truth)
    assert np.allclose(rr_debias(np.array([[2]]), 1.0, C), truth)


def test_buffer_is_fifo_of_size_b():
    buf = []
    for t in range(7):
        buf = buffer_push(buf, np.array([10 * t, 10 * t + 1]), np.full((2, 3), t), capacity=3)
        assert len(buf) == min(t + 1, 3)
    idx, tgt = buffer_fetch(buf)
    assert idx.tolist() == [40, 41, 50, 51, 60, 61]  # the three newest rounds, oldest first
    assert tgt[:, 0].tolist() == [4, 4, 5, 5, 6, 6]
    assert len(buffer_push(buf, np.array([1]), np.zeros((1, 3)), capacity=1)) == 1
    with pytest.raises(ParameterError):
        buffer_fetch([])


def test_importance_weights_follow_eq4_and_eq5():
    probs = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [1 / 3, 1 / 3, 1 / 3]])
    u = predictive_entropy(probs)
    assert np.allclose(u, [0.0, math.log(2), math.log(3)])
    w4 = entropy_weights(probs, +1)
    assert np.allclose(w4, np.exp(u) / np.exp(u).sum())  # Eq. 4
    w5 = entropy_weights(probs, -1)
    assert np.allclose(w5, np.exp(-u) / np.exp(-u).sum())  # Eq. 5
    assert w4[2] > w4[1] > w4[0] and w5[0] > w5[1] > w5[2]
    # first draws of the weighted sampler follow the weights
    rng = np.random.default_rng(0)
    first = np.array([weighted_sample(w4, 1, rng)[0] for _ in range(20000)])
    freq = np.bincount(first, minlength=3) / 20000
    assert np.allclose(freq, w4, atol=0.015)
    assert len(set(weighted_sample(w4, 3, rng).tolist())) == 3


# --------------------------------------------------------------------------------------------------
# the method
# --------------------------------------------------------------------------------------------------

import json

import torch

from dpaudit.accountants.events import RandomizedResponse, flatten
from dpaudit.training.methods.fl_common import DataSettings
from dpaudit.training.methods import run_method
from dpaudit.training.methods.privatekt import PrivateKTConfig, PrivateKTMethod, run_privatekt
from dpaudit.training.models import ModelSpec


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def small():
    data = DataSettings(num_clients=6, partition="dirichlet", alpha=0.5).prepare("digits", seed=0)
    spec = ModelSpec("mlp", data.input_shape, data.num_classes, {"hidden": [32]})
    return data, spec


def _fake_replies(method, clients, labels):
    return {c: {"labels": np.asarray(labels[i]), "event": method.event} for i, c in enumerate(clients)}


def test_server_records_one_rr_event_per_report_and_keeps_a_fifo_buffer(small):
    data, spec = small
    cfg = PrivateKTConfig(samples_per_round=3, buffer_rounds=2, server_steps=1, self_training=False)
    m = PrivateKTMethod(cfg, data, spec)
    assert m.beta == pytest.approx(rr_keep_probability(5.0, 3, 10))
    st, msg = m.init_server(0)
    assert msg["kt_x"].shape == (3,) + data.input_shape
    kts = []
    for t, group in enumerate([[0, 1], [1, 2], [0, 3]]):
        kts.append(st["kt"].copy())
        st, msg = m.server_step(st, _fake_replies(m, group, [[1, 2, 3]] * len(group)))
        assert len(st["kt"]) == 3 and len(set(st["kt"].tolist())) == 3
    assert len(st["buffer"]) == 2  # B = 2 rounds
    assert np.array_equal(st["buffer"][0][0], kts[1]) and np.array_equal(st["buffer"][1][0], kts[2])
    ledger = st["ledger"]
    counts = {p: sum(c for _, c in flatten(ledger.events(p))) for p in ledger.parties}
    assert counts == {"client0": 2, "client1": 2, "client2": 1, "client3": 1}
    ev = flatten(ledger.events("client0"))[0][0]
    assert isinstance(ev, RandomizedResponse) and ev.num_samples == 3 and ev.epsilon == 5.0 and ev.num_classes == 10
    assert st["reports"].tolist() == [2, 2, 1, 1, 0, 0]
    # the debiased hard label of unanimous reports is the reported label
    assert np.array_equal(st["buffer"][1][1].argmax(1), [1, 2, 3])


def test_ablation_switches(small):
    data, spec = small
    m = PrivateKTMethod(PrivateKTConfig(use_buffer=False, importance_sampling=False, self_training=False,
                                        server_steps=0), data, spec)
    st, _ = m.init_server(0)
    p0 = {k: v.clone() for k, v in st["params"].items()}
    for _ in range(3):
        st, _ = m.server_step(st, _fake_replies(m, [0], [[0, 1]]))
    assert len(st["buffer"]) == 1
    assert all(torch.equal(p0[k], st["params"][k]) for k in p0)  # no server steps, no self-training: unchanged


def test_clients_perturb_with_their_own_generators(small):
    data, spec = small
    m = PrivateKTMethod(PrivateKTConfig(local_epochs=1, epsilon=1e-3), data, spec)  # beta ~ 0: labels ~ uniform
    st, msg = m.init_server(0)
    tuples = data.client_tuples()
    _, r1 = m.client_steps([{}, {}], [tuples[0], tuples[1]], [msg, msg])
    _, r2 = m.client_steps([{}], [tuples[1]], [msg])
    assert np.array_equal(r1[1]["labels"], r2[0]["labels"])  # independent of who else is in the batch
    assert r1[0]["event"] == m.event


def test_same_seed_same_model_and_resume_is_exact(small, tmp_path):
    data, spec = small
    cfg = PrivateKTConfig(rounds=3, local_epochs=1)
    a = run_privatekt(data, spec, cfg, seed=3)
    b = run_privatekt(data, spec, cfg, seed=3)
    assert all(torch.equal(a.params[k], b.params[k]) for k in a.params)
    part = run_privatekt(data, spec, cfg, seed=3, checkpoint_dir=tmp_path, checkpoint_every=1, stop_after=2)
    assert part.rounds_run == 2
    c = run_privatekt(data, spec, cfg, seed=3, checkpoint_dir=tmp_path, checkpoint_every=1)
    assert all(torch.equal(a.params[k], c.params[k]) for k in a.params)  # bit-identical after a resume
    assert np.array_equal(a.reports_per_client, c.reports_per_client)
    d = run_privatekt(data, spec, cfg, seed=4)
    assert not all(torch.equal(a.params[k], d.params[k]) for k in a.params)


def test_observer_sees_every_upload_and_changes_nothing(small):
    data, spec = small
    cfg = PrivateKTConfig(rounds=4, local_epochs=1, samples_per_round=3)
    seen = []
    plain = run_privatekt(data, spec, cfg, seed=5)
    watched = run_privatekt(data, spec, cfg, seed=5, observer=lambda t, uploads: seen.append((t, uploads)))
    assert all(torch.equal(plain.params[k], watched.params[k]) for k in plain.params)  # bit-identical run
    assert plain.test_accuracy == watched.test_accuracy
    assert np.array_equal(plain.reports_per_client, watched.reports_per_client)
    assert [t for t, _ in seen] == [0, 1, 2, 3]
    counts = np.zeros(data.num_clients, dtype=int)
    for _, uploads in seen:
        for cid, labels in uploads.items():
            assert labels.shape == (3,) and labels.dtype == np.int64
            counts[cid] += 1
    assert np.array_equal(counts, watched.reports_per_client)  # one upload per ledger report


def test_release_audits_the_no_accumulation_claim(tmp_path):
    from dpaudit.training.release import load_release

    s = run_method("privatekt", dataset="digits", out=tmp_path / "r", seed=0, progress=False,
                        params={"data": {"num_clients": 4}, "model": {"hidden": [16]},
                                   "method": {"rounds": 4, "local_epochs": 1}})
    meta = load_release(tmp_path / "r").meta
    st = meta["statement"]
    labels = [x["label"] for x in st["statements"]]
    assert "per report (one round)" in labels
    assert any(lab.startswith("shuffled") for lab in labels)
    assert st["statement"]["label"].startswith("client, rounds actually taken part in")
    # 4 clients, 2 per round, 4 rounds: some client reported at least twice, so the composed epsilon exceeds the claim
    assert st["epsilon"] > meta["claim"]["epsilon"] == 5.0
    assert any("RED FLAG" in a for a in meta["assumptions"]) and any("RED FLAG" in w for w in st["warnings"])
    assert s.epsilon == pytest.approx(st["epsilon"])
    json.dumps(meta)


def test_privatekt_far_above_fedavg_ldp_at_eps5_fast():
    # Qi et al. 2023, Fig. 2: under the same eps = 5 per round, FedAvg + LDP degrades to chance while PrivateKT
    # learns. Small: digits, 10 clients, 40 rounds.
    from dpaudit.training.methods.baselines import LdpUpdateConfig, run_ldp_updates

    data = DataSettings(num_clients=10, partition="dirichlet", alpha=0.5).prepare("digits", seed=0)
    spec = ModelSpec("mlp", data.input_shape, data.num_classes, {"hidden": [100]})
    pkt = run_privatekt(data, spec, PrivateKTConfig(rounds=40, local_epochs=5, local_lr=1e-2, server_lr=1e-2), seed=0)
    fedavg = run_ldp_updates(data, spec, LdpUpdateConfig(rounds=40), seed=0)
    assert pkt.test_accuracy > fedavg.test_accuracy + 0.1


@pytest.mark.slow
def test_privatekt_default_scale_and_buffer_ablation():
    # measured (digits, 10 clients, 100 rounds, seed 0): PrivateKT 0.39, FedAvg+LDP 0.09, PrivateKT without the
    # buffer 0.09 (the paper's Fig. 3: the buffer contributes most)
    from dpaudit.training.methods.baselines import LdpUpdateConfig, run_ldp_updates

    data = DataSettings(num_clients=10, partition="dirichlet", alpha=0.5).prepare("digits", seed=0)
    spec = ModelSpec("mlp", data.input_shape, data.num_classes, {"hidden": [100]})
    cfg = PrivateKTConfig(rounds=100, local_epochs=5, local_lr=1e-2, server_lr=1e-2)
    pkt = run_privatekt(data, spec, cfg, seed=0)
    fedavg = run_ldp_updates(data, spec, LdpUpdateConfig(rounds=100), seed=0)
    no_buffer = run_privatekt(data, spec, PrivateKTConfig(**{**to_dict(cfg), "use_buffer": False}), seed=0)
    assert pkt.test_accuracy > fedavg.test_accuracy + 0.2
    assert pkt.test_accuracy > no_buffer.test_accuracy + 0.1


def test_reference_optimizers_are_available_and_change_the_server_update(small):
    # issue 16 item 4: the reference code's plain SGD (lr 0.05) for clients and server, beside dpaudit's Adam
    with pytest.raises(ParameterError, match="'server_optimizer'"):
        PrivateKTConfig(server_optimizer="rmsprop")
    data, spec = small
    states = {}
    for opt in ("adam", "sgd"):
        m = PrivateKTMethod(PrivateKTConfig(samples_per_round=3, server_steps=2, self_training=False,
                                            server_optimizer=opt, server_lr=0.05), data, spec)
        st, _ = m.init_server(0)
        st, _ = m.server_step(st, _fake_replies(m, [0, 1], [[1, 2, 3]] * 2))
        states[opt] = st
    a, s = states["adam"]["params"], states["sgd"]["params"]
    assert any(not torch.allclose(a[k], s[k]) for k in a)
    res = run_privatekt(data, spec, PrivateKTConfig(rounds=1, local_epochs=1, local_optimizer="sgd", local_lr=0.05,
                                                    server_optimizer="sgd", server_lr=0.05), seed=0)
    assert res.rounds_run == 1 and 0.0 <= res.test_accuracy <= 1.0


def test_fixed_size_dirichlet_partition_gives_every_client_the_same_count():
    data = DataSettings(num_clients=6, partition="dirichlet_fixed", alpha=0.5, samples_per_client=100).prepare(
        "digits", seed=1)
    assert [len(c) for c in data.clients] == [100] * 6
    assert data.partition["scheme"] == "dirichlet_fixed"
    with pytest.raises(ParameterError, match="'samples_per_client'"):
        DataSettings(num_clients=6, partition="dirichlet_fixed").prepare("digits", seed=1)
    skewed = DataSettings(num_clients=6, partition="size_skew", size_beta=0.5).prepare("digits", seed=1)
    assert len({len(c) for c in skewed.clients}) > 1 and skewed.partition["size_beta"] == 0.5

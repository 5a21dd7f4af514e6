"""Ensemble trainer: same models as training each separately, DP-SGD mechanics, checkpoint/resume."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dpaudit.errors import DataError, ParameterError
from dpaudit.training.ensemble import (
    DPSGDConfig, TrainConfig, _dp_grads, batch_schedule, dp_sampling_rate, dp_steps_per_epoch, init_model,
    poisson_schedule, train_ensemble,
)
from dpaudit.training.models import ModelSpec, build_model

SIZES = (37, 80, 15, 64)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    out = []
    for n in SIZES:
        y = rng.integers(0, 4, n)
        X = (rng.normal(size=(n, 1, 6)) + y[:, None, None]).astype(np.float32)
        out.append((X, y))
    return out


def _reference(spec, datasets, cfg, seed):
    """A plain per-model torch loop with the same init, seed and batch order."""
    out = []
    for i, (X, y) in enumerate(datasets):
        m = init_model(spec, seed, i)
        m.train()
        if cfg.optimizer == "adam":
            opt = torch.optim.Adam(m.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        else:
            opt = torch.optim.SGD(m.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
        for b in batch_schedule(len(y), cfg.batch_size, cfg.epochs, seed, i):
            opt.zero_grad()
            F.cross_entropy(m(torch.from_numpy(X[b])), torch.from_numpy(y[b])).backward()
            opt.step()
        out.append(m.state_dict())
    return out


CASES = [
    (TrainConfig(epochs=2, batch_size=16, optimizer="adam", lr=1e-2, weight_decay=1e-3), None),
    (TrainConfig(epochs=2, batch_size=16, optimizer="adam", lr=1e-2), "batch"),
    (TrainConfig(epochs=2, batch_size=16, optimizer="sgd", lr=0.05, momentum=0.9, weight_decay=1e-3), "batch"),
    (TrainConfig(epochs=2, batch_size=100, optimizer="sgd", lr=0.1), None),  # every data set smaller than a batch
]


@pytest.mark.parametrize("cfg,norm", CASES, ids=["adam", "adam-bn", "sgd-momentum-bn", "full-batch"])
def test_same_models_as_separate_training(data, cfg, norm):
    spec = ModelSpec("mlp", (1, 6), 4, {"hidden": [16, 8], "norm": norm})
    ens = train_ensemble(spec, data, cfg, seed=3, progress=False, device="cpu")
    ref = _reference(spec, data, cfg, 3)
    for i in range(len(data)):
        got = ens.state_dict(i)
        assert got.keys() == ref[i].keys()
        for k in ref[i]:
            torch.testing.assert_close(got[k], ref[i][k], rtol=1e-5, atol=1e-6, msg=f"model {i} {k}")


def test_model_depends_only_on_its_data_seed_and_index(data):
    spec = ModelSpec("mlp", (1, 6), 4, {"hidden": [8]})
    cfg = TrainConfig(epochs=2, batch_size=8, lr=1e-2)
    a = train_ensemble(spec, data, cfg, seed=5, progress=False)
    other = [data[0], data[1], (data[3][0][:5], data[3][1][:5]), data[2]]
    b = train_ensemble(spec, other, cfg, seed=5, progress=False)
    for k, v in a.state_dict(1).items():
        torch.testing.assert_close(b.state_dict(1)[k], v, rtol=1e-5, atol=1e-6)
    c = train_ensemble(spec, data, cfg, seed=6, progress=False)
    assert not torch.allclose(c.state_dict(1)["layers.1.weight"], a.state_dict(1)["layers.1.weight"])


def test_predict_all_models_at_once(data):
    spec = ModelSpec("mlp", (1, 6), 4, {"hidden": [8], "norm": "batch"})
    ens = train_ensemble(spec, data, TrainConfig(epochs=1, batch_size=8), seed=0, progress=False,
                         eval_data=data[0], eval_every=1)
    X = data[1][0]
    P = ens.predict_proba(X)
    assert P.shape == (len(SIZES), len(X), 4) and np.allclose(P.sum(-1), 1)
    for i in range(len(SIZES)):
        np.testing.assert_allclose(ens.member(i).predict_proba(X), P[i], rtol=1e-5, atol=1e-7)
    assert len(ens.history) == 1 and len(ens.history[0]["accuracy"]) == len(SIZES)


def test_init_state_broadcast(data):
    spec = ModelSpec("mlp", (1, 6), 4, {"hidden": [8]})
    start = build_model(spec).state_dict()
    ens = train_ensemble(spec, data, TrainConfig(epochs=1, optimizer="sgd", lr=1e-30), seed=0, progress=False,
                         init_state=start)
    for i in range(len(SIZES)):
        for k, v in start.items():
            torch.testing.assert_close(ens.state_dict(i)[k], v)
    with pytest.raises(DataError, match="init_state"):
        train_ensemble(spec, data, TrainConfig(epochs=1), seed=0, progress=False, init_state={"x": torch.zeros(1)})


def test_input_validation(data):
    spec = ModelSpec("mlp", (1, 6), 4, {"hidden": [8], "norm": "batch"})
    with pytest.raises(ParameterError, match="norm='group'"):
        train_ensemble(spec, data, TrainConfig(dp=DPSGDConfig(1.0, 1.0)), seed=0, progress=False)
    with pytest.raises(DataError, match="labels"):
        train_ensemble(spec, [(data[0][0], data[0][1] + 10)], TrainConfig(), seed=0, progress=False)
    with pytest.raises(ParameterError, match="'lr' parameter of TrainConfig"):
        TrainConfig(lr=-1.0)
    with pytest.raises(ParameterError, match="'max_grad_norm' parameter of DPSGDConfig"):
        DPSGDConfig(1.0, 0.0)
    cfg = TrainConfig(epochs=2, dp=DPSGDConfig(1.1, 0.5, 0.01))
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg


# ---- DP-SGD --------------------------------------------------------------------------------------


def test_poisson_batch_sizes_have_binomial_mean_and_variance():
    n, q = 400, 0.05
    cfg = TrainConfig(epochs=40, dp=DPSGDConfig(1.0, 1.0, q))
    sizes = np.array([len(b) for b in poisson_schedule(n, cfg, seed=0)])
    assert len(sizes) == 40 * dp_steps_per_epoch(n, cfg) == 40 * 20
    # Binomial(n, q): mean 20, variance n q (1 - q) = 19; 800 draws -> se(mean) ~ 0.15, se(var) ~ 1
    assert abs(sizes.mean() - n * q) < 0.8
    assert abs(sizes.var() - n * q * (1 - q)) < 5
    assert sizes.min() < sizes.max()  # not a fixed batch size
    assert dp_sampling_rate(1000, TrainConfig(batch_size=50, dp=DPSGDConfig(1.0, 1.0))) == 0.05


def _ref_dp(spec, X, y, cfg, seed, i):
    """Per-example loop: clip each gradient to C, sum, divide by q n (sigma = 0)."""
    m = init_model(spec, seed, i)
    opt = torch.optim.SGD(m.parameters(), lr=cfg.lr)
    q = dp_sampling_rate(len(y), cfg)
    C = cfg.dp.max_grad_norm
    for b in poisson_schedule(len(y), cfg, seed, i):
        total = [torch.zeros_like(p) for p in m.parameters()]
        for j in b:
            m.zero_grad()
            F.cross_entropy(m(torch.from_numpy(X[j : j + 1])), torch.from_numpy(y[j : j + 1])).backward()
            g = [p.grad.clone() for p in m.parameters()]
            norm = torch.sqrt(sum((t**2).sum() for t in g))
            f = min(1.0, C / (float(norm) + 1e-6))
            total = [a + f * t for a, t in zip(total, g)]
        for p, t in zip(m.parameters(), total):
            p.grad = t / (q * len(y))
        opt.step()
    return m.state_dict()


def test_dp_sgd_without_noise_matches_per_example_loop(data):
    spec = ModelSpec("mlp", (1, 6), 4, {"hidden": [8], "norm": "group"})
    cfg = TrainConfig(epochs=2, batch_size=10, optimizer="sgd", lr=0.5, dp=DPSGDConfig(0.0, 0.1))
    small = [data[2], data[0]]  # 15 and 37 records: ragged, few steps
    ens = train_ensemble(spec, small, cfg, seed=2, progress=False)
    for i, (X, y) in enumerate(small):
        ref = _ref_dp(spec, X, y, cfg, 2, i)
        for k, v in ref.items():
            torch.testing.assert_close(ens.state_dict(i)[k], v, rtol=1e-4, atol=1e-6, msg=f"model {i} {k}")


def test_clipping_bounds_each_contribution_and_noise_scale():
    spec = ModelSpec("mlp", (1, 6), 4, {"hidden": [8]})
    base = build_model(spec)
    M, W = 3, 5
    params = {k: v.detach().unsqueeze(0).repeat(M, *([1] * v.dim())) for k, v in base.named_parameters()}
    gen = torch.Generator().manual_seed(0)
    xb = torch.randn(M, W, 1, 6, generator=gen) * 1000  # huge inputs: unclipped gradients would be huge
    with torch.no_grad():  # label = the least likely class, so the saturated softmax still has a large gradient
        yb = base(xb.reshape(M * W, 1, 6)).argmin(1).reshape(M, W)
    mb = torch.tensor([[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [0, 0, 0, 0, 0]], dtype=torch.float32)
    q, sizes = np.array([0.5, 0.5, 0.5]), np.array([10, 10, 10])
    C = 0.3
    g = _dp_grads(base, params, {}, xb, yb, mb, DPSGDConfig(0.0, C), q, sizes, 0, 0, 1 << 30)
    norms = torch.sqrt(sum(v.reshape(M, -1).pow(2).sum(1) for v in g.values()))
    bound = C * mb.sum(1) / (0.5 * 10)  # triangle inequality over the sampled examples
    assert torch.all(norms <= bound + 1e-6)
    assert norms[1] == pytest.approx(C / 5, rel=1e-4)  # one example, gradient norm >> C: exactly C / (q n)
    assert norms[2] == 0
    # noise: an empty batch gets N(0, (sigma C)^2) / (q n) per coordinate
    sigma = 2.0
    xb0 = torch.zeros(M, W, 1, 6)
    g = _dp_grads(base, params, {}, xb0, yb, torch.zeros(M, W), DPSGDConfig(sigma, C), q, sizes, 0, 7, 1 << 30)
    flat = torch.cat([v.reshape(-1) for v in g.values()])
    assert float(flat.std()) == pytest.approx(sigma * C / 5, rel=0.05)
    g2 = _dp_grads(base, params, {}, xb0, yb, torch.zeros(M, W), DPSGDConfig(sigma, C), q, sizes, 0, 7, 1 << 30)
    assert all(torch.equal(g[k], g2[k]) for k in g)  # noise is a function of (seed, step)


def test_dp_training_runs_and_learns(data):
    spec = ModelSpec("mlp", (1, 6), 4, {"hidden": [16], "norm": "group"})
    cfg = TrainConfig(epochs=5, batch_size=16, lr=2e-2, dp=DPSGDConfig(0.5, 1.0))
    ens = train_ensemble(spec, data, cfg, seed=0, progress=False)
    X = np.concatenate([d[0] for d in data])
    y = np.concatenate([d[1] for d in data])
    acc = (ens.predict_proba(X).argmax(-1) == y).mean(1)
    assert acc.max() > 0.5  # chance is 0.25


# ---- checkpoints -----------------------------------------------------------------------------


@pytest.mark.parametrize("dp", [None, DPSGDConfig(1.0, 1.0)])
def test_interrupt_and_resume_equals_uninterrupted(tmp_path, data, dp):
    spec = ModelSpec("mlp", (1, 6), 4, {"hidden": [8], "norm": None if dp else "batch"})
    cfg = TrainConfig(epochs=4, batch_size=16, lr=1e-2, dp=dp)
    full = train_ensemble(spec, data, cfg, seed=1, progress=False)
    part = train_ensemble(spec, data, cfg, seed=1, progress=False, checkpoint_dir=tmp_path, stop_after_epochs=2)
    assert (tmp_path / "latest" / "state.safetensors").is_file()
    assert not all(torch.equal(part.params[k], full.params[k]) for k in full.params)
    resumed = train_ensemble(spec, data, cfg, seed=1, progress=False, checkpoint_dir=tmp_path)
    for k in full.params:
        assert torch.equal(resumed.params[k], full.params[k]), k
    for k in full.buffers:
        assert torch.equal(resumed.buffers[k], full.buffers[k]), k
    with pytest.raises(DataError, match="different run"):
        train_ensemble(spec, data, cfg, seed=2, progress=False, checkpoint_dir=tmp_path)

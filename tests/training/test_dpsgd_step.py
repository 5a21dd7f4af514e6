"""The DP-SGD step: ghost norms + book-keeping equal the per-example reference (float64), canaries, fallback."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.func import stack_module_state

from dpaudit.errors import ParameterError
from dpaudit.training.dpsgd import DPSGDStep, clip_and_noise
from dpaudit.training.ensemble import init_model
from dpaudit.training.models import ModelSpec, build_model
from dpaudit.training.optim import StackedOptimizer

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SPECS = {
    "mlp": ModelSpec("mlp", (1, 6, 6), 4, {"hidden": [12, 8]}),
    "mlp-groupnorm": ModelSpec("mlp", (1, 6, 6), 4, {"hidden": [16], "norm": "group"}),
    "cnn2d-groupnorm": ModelSpec("cnn_fedkt", (1, 8, 8), 4, {"norm": "group"}),
    "cnn2d-padded": ModelSpec("lenet5", (1, 8, 8), 3),
    "cnn1d-groupnorm": ModelSpec("cnn_fedkt", (2, 12), 3, {"norm": "group"}),
    "cnn-3x3": ModelSpec("cnn_privatekt", (1, 8, 8), 3),
}
M, W = 3, 7


def _stacked(spec, dtype=torch.float64):
    params, _ = stack_module_state([init_model(spec, 0, i) for i in range(M)])
    return {k: v.detach().to(dtype) for k, v in params.items()}


def _batch(spec, seed=0, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((M, W) + spec.input_shape, generator=g, dtype=torch.float64) * scale
    y = torch.randint(0, spec.num_classes, (M, W), generator=g)
    # ragged: model 0 samples 5 rows, model 1 one row, model 2 none
    mask = torch.zeros(M, W, dtype=torch.float64)
    mask[0, :5] = 1
    mask[1, 3] = 1
    return x, y, mask


def _steps(spec):
    base = build_model(spec).double().train()
    return DPSGDStep(base, method="ghost"), DPSGDStep(base, method="per_example")


@pytest.mark.parametrize("name", list(SPECS))
@pytest.mark.parametrize("C", [0.05, 100.0], ids=["clipped", "unclipped"])
def test_ghost_clipped_sums_and_norms_equal_per_example(name, C):
    spec = SPECS[name]
    ghost, ref = _steps(spec)
    assert ghost.method == "ghost" and ref.method == "per_example"
    params = _stacked(spec)
    x, y, mask = _batch(spec)
    s_g, sq_g = ghost.clipped_sum(params, {}, x, y, mask, C)
    s_r, sq_r = ref.clipped_sum(params, {}, x, y, mask, C)
    torch.testing.assert_close(sq_g * mask, sq_r * mask, rtol=1e-10, atol=1e-12)  # norms of the sampled rows
    assert s_g.keys() == s_r.keys() == params.keys()
    for k in s_r:
        torch.testing.assert_close(s_g[k], s_r[k], rtol=1e-10, atol=1e-12, msg=k)
    assert all(float(v[2].abs().max()) == 0 for v in s_g.values())  # model 2 sampled nothing
    s_c, _ = ghost.clipped_sum(params, {}, x, y, mask, C, chunk_bytes=1)  # memory budget: one model per chunk
    for k in s_g:
        torch.testing.assert_close(s_c[k], s_g[k], rtol=1e-12, atol=1e-14, msg=k)


def test_private_grads_with_same_noise_and_resulting_weights_equal():
    """A few DP-Adam steps in float64 on ragged batches: same noise, same private gradients, same weights."""
    spec = SPECS["cnn2d-groupnorm"]
    ghost, ref = _steps(spec)
    out = []
    for step in (ghost, ref):
        params = _stacked(spec)
        opt = StackedOptimizer(params, kind="adam", lr=1e-2, weight_decay=1e-3)
        gen = torch.Generator().manual_seed(5)
        for t in range(3):
            x, y, mask = _batch(spec, seed=t)
            g = step.private_grads(params, {}, x, y, mask, max_grad_norm=0.5, noise_multiplier=1.3,
                                   expected_batch=torch.tensor([2.5, 1.0, 4.0], dtype=torch.float64), noise=gen)
            opt.update(params, g, None)
        out.append(params)
    for k in out[1]:
        torch.testing.assert_close(out[0][k], out[1][k], rtol=1e-10, atol=1e-12, msg=k)


def test_private_grads_follow_the_formula():
    spec = SPECS["mlp"]
    ghost, _ = _steps(spec)
    params = _stacked(spec)
    x, y, mask = _batch(spec)
    summed, _ = ghost.clipped_sum(params, {}, x, y, mask, 0.5)
    xi = {k: torch.randn(v.shape, dtype=v.dtype, generator=torch.Generator().manual_seed(1)) for k, v in params.items()}
    qn = torch.tensor([2.0, 4.0, 8.0], dtype=torch.float64)
    g = ghost.private_grads(params, {}, x, y, mask, max_grad_norm=0.5, noise_multiplier=2.0, expected_batch=qn, noise=xi)
    for k, v in g.items():
        torch.testing.assert_close(v, (summed[k] + 2.0 * 0.5 * xi[k]) / qn.reshape((-1,) + (1,) * (v.dim() - 1)))


def test_canary_gradients_are_added_before_noise_without_clipping():
    spec = SPECS["mlp-groupnorm"]
    ghost, _ = _steps(spec)
    params = _stacked(spec)
    x, y, mask = _batch(spec)
    C = 0.7
    raw = {k: torch.randn(v.shape, dtype=v.dtype, generator=torch.Generator().manual_seed(3)) for k, v in params.items()}
    norm = torch.sqrt(sum(v.reshape(M, -1).pow(2).sum(1) for v in raw.values()))
    canary = {k: v * (C / norm).reshape((-1,) + (1,) * (v.dim() - 1)) for k, v in raw.items()}  # norm exactly C
    include = torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64)
    qn = torch.tensor([3.0, 3.0, 3.0], dtype=torch.float64)
    kw = dict(max_grad_norm=C, noise_multiplier=1.0, expected_batch=qn)
    with_c = ghost.private_grads(params, {}, x, y, mask, noise=torch.Generator().manual_seed(9), canary_grads=canary,
                                 canary_mask=include, **kw)
    without = ghost.private_grads(params, {}, x, y, mask, noise=torch.Generator().manual_seed(9), **kw)
    for k in params:
        torch.testing.assert_close(with_c[k] - without[k], canary[k] * include.reshape((-1,) + (1,) * (canary[k].dim() - 1)) / 3.0)
    too_big = {k: 2 * v for k, v in canary.items()}
    with pytest.raises(ParameterError, match="canary_grads.*norm"):
        ghost.private_grads(params, {}, x, y, mask, noise=torch.Generator(), canary_grads=too_big, **kw)


def test_unsupported_modules_fall_back_to_per_example_gradients():
    bn = build_model(ModelSpec("mlp", (4,), 3, {"hidden": [8], "norm": "batch"}))
    assert DPSGDStep(bn).method == "per_example"
    with pytest.raises(ParameterError, match="'method' parameter of DPSGDStep"):
        DPSGDStep(bn, method="ghost")
    drop = build_model(ModelSpec("mlp", (4,), 3, {"hidden": [8], "dropout": 0.5})).train()
    assert DPSGDStep(drop).method == "per_example"
    assert DPSGDStep(drop.eval()).method == "ghost"  # inactive dropout is the identity
    odd = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.LayerNorm(5), torch.nn.Linear(5, 3))
    assert DPSGDStep(odd).method == "per_example"
    assert DPSGDStep(torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))).method == "ghost"


def test_sequential_ghost_equals_reference_and_flat_clip_and_noise():
    net = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3)).double()
    params, _ = stack_module_state([net, torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(),
                                                             torch.nn.Linear(5, 3)).double()])
    params = {k: v.detach() for k, v in params.items()}
    x = torch.randn(2, 6, 4, dtype=torch.float64) * 4
    y = torch.randint(0, 3, (2, 6))
    mask = torch.ones(2, 6, dtype=torch.float64)
    s_g, _ = DPSGDStep(net, method="ghost").clipped_sum(params, {}, x, y, mask, 0.1)
    s_r, _ = DPSGDStep(net, method="per_example").clipped_sum(params, {}, x, y, mask, 0.1)
    for k in s_r:
        torch.testing.assert_close(s_g[k], s_r[k], rtol=1e-10, atol=1e-12)
    # the flat helper (materialised gradients) gives the same numbers
    pe = torch.tensor(np.random.default_rng(0).normal(size=(1, 4, 3)))
    m = torch.tensor([[1.0, 1.0, 0.0, 1.0]], dtype=torch.float64)
    f = torch.clamp(0.5 / (pe.norm(dim=-1) + 1e-6), max=1.0) * m
    torch.testing.assert_close(clip_and_noise(pe, m, 0.5, 0.0, torch.tensor([2.0], dtype=torch.float64), torch.zeros(1, 3)),
                               (pe * f.unsqueeze(-1)).sum(1) / 2)


def test_train_ensemble_adds_canaries_in_the_steps_their_mask_selects():
    """One full-batch step (q = 1), SGD, no noise: the canary moves model i by -lr * c_i * include_i / n_i."""
    from dpaudit.training.ensemble import DPSGDConfig, TrainConfig, train_ensemble

    spec = ModelSpec("mlp", (4,), 3, {"hidden": [5]})
    rng = np.random.default_rng(0)
    data = [(rng.normal(size=(n, 4)).astype(np.float32), rng.integers(0, 3, n)) for n in (6, 9, 4)]
    cfg = TrainConfig(epochs=1, optimizer="sgd", lr=0.5, dp=DPSGDConfig(0.0, 1.0, 1.0))
    shapes = {k: v.shape for k, v in build_model(spec).named_parameters()}
    raw = {k: torch.randn((3,) + tuple(sh), generator=torch.Generator().manual_seed(2)) for k, sh in shapes.items()}
    norm = torch.sqrt(sum(v.reshape(3, -1).pow(2).sum(1) for v in raw.values()))
    canary = {k: v * (0.9 / norm).reshape((-1,) + (1,) * (v.dim() - 1)) for k, v in raw.items()}
    include = np.array([[True, False, True]])  # (steps, M): one global step
    plain = train_ensemble(spec, data, cfg, seed=1, progress=False)
    marked = train_ensemble(spec, data, cfg, seed=1, progress=False, canary_grads=canary, canary_mask=include)
    for i, (_, y) in enumerate(data):
        for k in shapes:
            expect = -0.5 * canary[k][i] * float(include[0, i]) / len(y)
            torch.testing.assert_close(marked.params[k][i] - plain.params[k][i], expect, rtol=1e-4, atol=1e-6)
    with pytest.raises(ParameterError, match="canary_grads"):
        train_ensemble(spec, data, TrainConfig(epochs=1), seed=1, progress=False, canary_grads=canary)


def test_many_models_in_width_groups_equal_per_example():
    """Enough models that the ghost path groups them by batch width (and gathers/scatters): same sums."""
    spec = ModelSpec("mlp", (5,), 3, {"hidden": [6]})
    ghost, ref = _steps(spec)
    n_models, width = 100, 9
    params, _ = stack_module_state([init_model(spec, 1, i) for i in range(n_models)])
    params = {k: v.detach().double() for k, v in params.items()}
    g = torch.Generator().manual_seed(4)
    x = torch.randn(n_models, width, 5, generator=g, dtype=torch.float64) * 3
    y = torch.randint(0, 3, (n_models, width), generator=g)
    mask = (torch.rand(n_models, width, generator=g) < torch.rand(n_models, 1, generator=g)).double()
    s_g, sq_g = ghost.clipped_sum(params, {}, x, y, mask, 0.3)
    s_r, sq_r = ref.clipped_sum(params, {}, x, y, mask, 0.3)
    torch.testing.assert_close(sq_g * mask, sq_r * mask, rtol=1e-10, atol=1e-12)
    for k in s_r:
        torch.testing.assert_close(s_g[k], s_r[k], rtol=1e-10, atol=1e-12, msg=k)



def test_block_noise_is_standard_normal_and_independent_of_the_thread_count():
    """BlockNoise: N(0, 1) numbers (moments and a KS test), shaped like the parameters, the same numbers with one
    thread or several (fixed blocks, each with its own generator), other numbers for another seed, and no block
    repeating another."""
    from scipy import stats

    from dpaudit.training.dpsgd import BlockNoise

    like = {"a": torch.zeros(3, 50, 40), "b": torch.zeros(3, 7), "c": torch.zeros(3, 2, 2, 5)}
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = BlockNoise(123, block=1000).draw(like)
        torch.set_num_threads(2)
        two = BlockNoise(123, block=1000).draw(like)
    finally:
        torch.set_num_threads(before)
    assert {k: v.shape for k, v in one.items()} == {k: v.shape for k, v in like.items()}
    assert all(torch.equal(one[k], two[k]) for k in like)
    flat = torch.cat([v.reshape(-1) for v in one.values()]).double()
    assert abs(float(flat.mean())) < 4 / flat.numel() ** 0.5 and abs(float(flat.var()) - 1) < 0.05
    assert stats.kstest(flat.numpy(), "norm").pvalue > 1e-3
    blocks = flat[: (flat.numel() // 1000) * 1000].reshape(-1, 1000)
    assert torch.corrcoef(blocks).fill_diagonal_(0).abs().max() < 0.2  # no block repeats another
    other = BlockNoise(124, block=1000).draw(like)
    assert not torch.equal(one["a"], other["a"])


def test_private_grads_with_block_noise_follow_the_formula():
    from dpaudit.training.dpsgd import BlockNoise

    spec = SPECS["cnn2d-groupnorm"]
    ghost, _ = _steps(spec)
    params = _stacked(spec)
    x, y, mask = _batch(spec)
    summed, _ = ghost.clipped_sum(params, {}, x, y, mask, 0.5)
    xi = BlockNoise(7, block=500).draw(params)
    qn = torch.tensor([2.0, 4.0, 8.0], dtype=torch.float64)
    g = ghost.private_grads(params, {}, x, y, mask, max_grad_norm=0.5, noise_multiplier=2.0, expected_batch=qn,
                            noise=BlockNoise(7, block=500))
    for k, v in g.items():
        torch.testing.assert_close(v, (summed[k] + 2.0 * 0.5 * xi[k]) / qn.reshape((-1,) + (1,) * (v.dim() - 1)))

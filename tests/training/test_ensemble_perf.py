"""The ensemble trainer's fast paths equal the plain ones they replace."""

import pytest
import torch
from torch.func import stack_module_state

import dpaudit.training.ensemble as ens
from dpaudit.training.models import ModelSpec, build_model


def _stacked_plain(spec, M, seed):
    return stack_module_state([ens.init_model(spec, seed, i) for i in range(M)])


@pytest.mark.parametrize("name,shape,kwargs", [
    ("mlp", (1, 8, 8), {}),
    ("mlp", (1, 8, 8), {"norm": "batch"}),
    ("mlp", (1, 8, 8), {"norm": "group", "hidden": [16, 8]}),
    ("cnn_fedkt", (1, 28, 28), {}),
    ("cnn_fredy", (3, 32, 32), {}),
    ("cnn_privatekt", (1, 28, 28), {}),
    ("cnn_fedkt", (1, 40), {}),
])
def test_fresh_state_equals_stacked_init_models(name, shape, kwargs):
    spec = ModelSpec(name, shape, 10, kwargs)
    rng = torch.get_rng_state()
    params, buffers = ens._fresh_state(spec, 4, 11)
    assert torch.equal(rng, torch.get_rng_state())  # global RNG untouched
    P, B = _stacked_plain(spec, 4, 11)
    assert params.keys() == P.keys() and buffers.keys() == B.keys()
    for k in P:
        assert torch.equal(params[k], P[k]), k
    for k in B:
        assert torch.equal(buffers[k], B[k]), k


def test_fresh_state_falls_back_when_an_architecture_draws_outside_reset_parameters(monkeypatch):
    def odd_build(spec):
        m = build_model(spec)
        m.extra = torch.nn.Parameter(torch.randn(3))  # drawn after the layers, not by reset_parameters
        return m

    monkeypatch.setattr(ens, "build_model", odd_build)
    spec = ModelSpec("mlp", (1, 8, 8), 10, {"hidden": [8]})
    params, _ = ens._fresh_state(spec, 3, 5)
    P, _ = _stacked_plain(spec, 3, 5)
    for k in P:
        assert torch.equal(params[k], P[k]), k


def test_schedules_use_default_rng_streams():
    # batch order and Poisson masks are documented as draws of default_rng(SeedSequence([seed, i, epoch, tag]))
    import numpy as np

    for seed, i, e, n in [(0, 0, 0, 1), (3, 7, 2, 13), (11, 99, 19, 300)]:
        ref = np.random.default_rng(np.random.SeedSequence([seed, i, e, 0xBA7C])).permutation(n)
        assert np.array_equal(ens._perm(n, seed, i, e), ref)
        ref_m = np.random.default_rng(np.random.SeedSequence([seed, i, e, 0x9015])).random((3, n)) < 0.3
        assert np.array_equal(ens._poisson_masks(n, 0.3, 3, seed, i, e), ref_m)


@pytest.mark.parametrize("name,shape,kwargs", [
    ("mlp", (1, 6, 6), {"hidden": [12, 8]}),
    ("mlp", (1, 6, 6), {"norm": "group", "hidden": [16]}),
    ("cnn_fedkt", (1, 8, 8), {"norm": "group"}),
    ("lenet5", (1, 8, 8), {}),
    ("cnn_privatekt", (1, 8, 8), {}),
    ("cnn_fedkt", (2, 12), {"norm": "group"}),
])
def test_stacked_program_plain_grads_equal_vmap(name, shape, kwargs):
    """Plain training's gradients through the stacked program (bmm per layer, grouped transposed convolutions)
    equal the vmap-over-functional_call ones they replace (float64, ragged masks, an empty model)."""
    from dpaudit.training.dpsgd import DPSGDStep

    spec = ModelSpec(name, shape, 4, kwargs)
    M, W = 3, 6
    base = build_model(spec).double().train()
    params, _ = stack_module_state([ens.init_model(spec, 0, i).double() for i in range(M)])
    params = {k: v.detach() for k, v in params.items()}
    g = torch.Generator().manual_seed(0)
    x = torch.randn((M, W) + shape, generator=g, dtype=torch.float64) * 2
    y = torch.randint(0, 4, (M, W), generator=g)
    mask = torch.zeros(M, W, dtype=torch.float64)
    mask[0, :4] = 1
    mask[1, 2] = 1
    step = DPSGDStep(base)
    assert step.method == "ghost"
    fast = step.mean_loss_grads(params, x, y, mask)
    ref = ens._plain_grads(base, params, {}, x, y, mask)
    assert fast.keys() == ref.keys()
    for k in ref:
        torch.testing.assert_close(fast[k], ref[k], rtol=1e-10, atol=1e-12, msg=k)
    assert all(float(v[2].abs().max()) == 0 for v in fast.values())  # no real row: no gradient
    bn = ModelSpec("mlp", (1, 6, 6), 4, {"norm": "batch"})
    assert DPSGDStep(build_model(bn)).mean_loss_grads(params, x, y, mask) is None  # buffers: vmap's job

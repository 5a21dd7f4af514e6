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

"""The stacked optimizer equals torch.optim on every model, including models that skip steps."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dpaudit.errors import ParameterError
from dpaudit.training.optim import StackedOptimizer

pytestmark = pytest.mark.usefixtures("one_torch_thread")

M = 3
SHAPES = {"w": (4, 5), "b": (5,)}


def _grads(steps, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [{k: torch.randn((M,) + sh, generator=g) for k, sh in SHAPES.items()} for _ in range(steps)]


def _start():
    g = torch.Generator().manual_seed(99)
    return {k: torch.randn((M,) + sh, generator=g) for k, sh in SHAPES.items()}


def _torch_reference(kind, start, grads, active, **kw):
    """Each model alone with torch.optim; model i steps at step s iff active[s][i]."""
    out = []
    for i in range(M):
        ps = [torch.nn.Parameter(start[k][i].clone()) for k in SHAPES]
        opt = torch.optim.Adam(ps, **kw) if kind == "adam" else torch.optim.SGD(ps, **kw)
        for s, g in enumerate(grads):
            if active[s][i]:
                for p, k in zip(ps, SHAPES):
                    p.grad = g[k][i].clone()
                opt.step()
        out.append({k: p.detach() for k, p in zip(SHAPES, ps)})
    return out


@pytest.mark.parametrize("kind,kw,fused,exact", [
    ("adam", {"lr": 1e-2, "weight_decay": 1e-2}, False, True),
    ("adam", {"lr": 1e-2}, True, False),
    ("sgd", {"lr": 0.1, "momentum": 0.9, "weight_decay": 1e-3}, True, True),
    ("sgd", {"lr": 0.1}, True, True),
], ids=["adam-unfused", "adam-fused", "sgd-momentum", "sgd"])
def test_every_model_steps_like_torch_optim(kind, kw, fused, exact):
    grads = _grads(4)
    active = [[True] * M] * 4
    params = _start()
    opt = StackedOptimizer(params, kind=kind, fused=fused, **kw)
    for g in grads:
        opt.update(params, g, None)
    ref = _torch_reference(kind, _start(), grads, active, **kw)
    for i in range(M):
        for k in SHAPES:
            if exact:
                assert torch.equal(params[k][i], ref[i][k]), (i, k)
            else:
                torch.testing.assert_close(params[k][i], ref[i][k], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kind,kw", [("adam", {"lr": 1e-2, "weight_decay": 1e-2}), ("sgd", {"lr": 0.1, "momentum": 0.5})])
def test_models_that_skip_steps_keep_their_own_counts(kind, kw):
    grads = _grads(5, seed=1)
    active = [[True, True, True], [True, False, True], [False, False, True], [True, True, False], [True, True, True]]
    params = _start()
    opt = StackedOptimizer(params, kind=kind, **kw)
    for g, a in zip(grads, active):
        before = {k: v.clone() for k, v in params.items()}
        opt.update_where(params, g, np.array(a))
        for i in np.flatnonzero(~np.array(a)):
            assert all(torch.equal(params[k][i], before[k][i]) for k in SHAPES)
    assert opt.step.tolist() == [4, 3, 4]
    ref = _torch_reference(kind, _start(), grads, active, **kw)
    for i in range(M):
        for k in SHAPES:
            torch.testing.assert_close(params[k][i], ref[i][k], rtol=1e-6, atol=1e-7)


def test_state_round_trip_and_validation():
    params = _start()
    opt = StackedOptimizer(params, kind="adam", lr=1e-2)
    for g in _grads(2):
        opt.update(params, g, None)
    other = StackedOptimizer(params, kind="adam", lr=1e-2)
    other.load({k: v.clone() for k, v in opt.state().items()})
    assert other.step.tolist() == opt.step.tolist()
    for k, v in opt.state().items():
        assert torch.equal(other.state()[k], v)
    with pytest.raises(ParameterError, match="'kind' parameter of StackedOptimizer"):
        StackedOptimizer(params, kind="rmsprop", lr=1.0)
    with pytest.raises(ParameterError, match="'lr' parameter of StackedOptimizer"):
        StackedOptimizer(params, lr=0.0)

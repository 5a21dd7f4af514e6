"""The white-box audit hook (dpaudit.training.audit_hook): canary rows replaced before the user's clipping,
batches and privatised gradients recorded, NO_HOOK a no-op, misuse named; Opacus's DPOptimizer and DPDataLoader."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from dpaudit.errors import DataError, ParameterError
from dpaudit.training.audit_hook import NO_HOOK, AuditHook

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


def _per_example(model, X, y):
    from torch.func import functional_call, grad, vmap

    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss(p, xb, yb):
        return torch.nn.functional.cross_entropy(functional_call(model, p, (xb[None],)), yb[None])

    return vmap(grad(loss), in_dims=(None, 0, 0))(params, X, y)


def test_no_hook_returns_its_arguments():
    g = {"w": torch.zeros(2, 3)}
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(3))], lr=0.1)
    assert NO_HOOK.per_example(g, [0, 1]) is g and NO_HOOK.optimizer(opt) is opt and NO_HOOK.data_loader(5) == 5
    assert not NO_HOOK.active


def test_canary_rows_are_replaced_and_the_update_recorded():
    model = _model()
    n, X, y = 20, torch.randn(24, 6), torch.randint(0, 3, (24,))
    canary_index = np.array([20, -1, 21, 22, 23, -1])              # 4 of 6 canaries in the data (rows 20..23)
    hook = AuditHook(num_real=n, canary_index=canary_index, probes=4, seed=1)
    opt = hook.optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    idx = torch.tensor([0, 3, 20, 22, 7])
    g = _per_example(model, X[idx], y[idx])
    g2 = hook.per_example(g, idx)
    assert g2 is g
    flat = torch.cat([v.reshape(5, -1) for v in g.values()], dim=1)
    coords = hook.record.__self__._coords
    for row, canary in ((2, 0), (3, 3)):        # dataset rows 20, 22 are canaries 0 and 3
        p, f = coords[canary]
        offset = sum(int(np.prod(v.shape[1:])) for v in list(g.values())[:p])
        nz = torch.nonzero(flat[row]).flatten().tolist()
        assert nz == [offset + f] and flat[row, offset + f].item() == pytest.approx(hook.canary_scale, rel=1e-6)
    assert torch.count_nonzero(flat[0]) > 0                        # real rows untouched
    assert hook.canary_scale >= 1000.0
    for p, v in zip(model.parameters(), g.values()):
        p.grad = v.sum(0)
    opt.step()
    rec = hook.record()
    assert rec.steps == 1 and rec.membership[0].tolist() == [0, 3, 20, 22, 7]
    assert rec.canary_obs.shape == (1, 6) and rec.probe_obs.shape == (1, 4)
    p, f = coords[0]
    assert rec.canary_obs[0, 0] == pytest.approx(hook.canary_scale + float(list(g.values())[p].sum(0).reshape(-1)[f] - hook.canary_scale), abs=1e-3)
    assert rec.num_records == 24 and rec.included.tolist() == [True, False, True, True, True, False]
    # chosen coordinates: distinct, canaries and probes apart
    assert len(set(rec.coordinates)) == 10


def test_coordinates_avoid_large_real_gradients():
    n = 40
    hook = AuditHook(num_real=n, canary_index=np.array([40, 41]), probes=2, seed=0)
    g = [torch.ones(8, 10)]
    g[0][:, 3] = 0.0
    g[0][:, 7] = 1e-3
    g[0][:, 1] = 1e-4
    g[0][:, 5] = 1e-5
    hook.per_example(g, np.arange(8))
    assert sorted(f for _, f in hook._coords) == [1, 3, 5, 7]


def test_misuse_is_named():
    hook = AuditHook(num_real=10, canary_index=np.array([10, -1]), probes=2)
    with pytest.raises(ParameterError, match="one index per gradient row"):
        hook.per_example([torch.zeros(3, 5)], [0, 1])
    with pytest.raises(ParameterError, match=r"dataset indices in \[0, 11\)"):
        hook.per_example([torch.zeros(2, 5)], [0, 11])
    with pytest.raises(ParameterError, match="dict of per-example"):
        hook.per_example(torch.zeros(2, 5), [0, 1])
    with pytest.raises(DataError, match="fewer than the 2 canaries plus 2 probes"):
        hook.per_example([torch.zeros(2, 3)], [0, 1])
    with pytest.raises(ParameterError, match="canary_index"):
        AuditHook(num_real=10, canary_index=np.array([3]))
    hook = AuditHook(num_real=10, canary_index=np.array([10, -1]), probes=2)
    w = torch.nn.Parameter(torch.zeros(4))
    opt = hook.optimizer(torch.optim.SGD([w], lr=0.1))
    w.grad = torch.zeros(4)
    with pytest.raises(DataError, match="before hook.per_example"):
        opt.step()
    hook.per_example([torch.zeros(2, 5)], [0, 1])
    with pytest.raises(DataError, match="do not match the optimizer's parameters"):
        opt.step()
    with pytest.raises(DataError, match="no optimizer step"):
        AuditHook(num_real=10, canary_index=np.array([10]), probes=2).record()


def test_watch_sums_the_first_layer_update_per_input_feature():
    """watch_width = d: the first parameter with a dimension d (Linear(6, 8).weight, (8, 6), axis 1) is summed over
    the steps, one row per input feature; no gradient canary is needed; without such a parameter watch is None."""
    model = _model()
    X, y = torch.randn(10, 6), torch.randint(0, 3, (10,))
    hook = AuditHook(num_real=10, canary_index=np.zeros(0, dtype=np.int64), probes=2, seed=3, watch_width=6)
    opt = hook.optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    total = torch.zeros(8, 6, dtype=torch.float64)
    for idx in (torch.tensor([0, 1, 2]), torch.tensor([3, 4]), torch.tensor([5, 9])):
        g = hook.per_example(_per_example(model, X[idx], y[idx]), idx)
        for p, v in zip(model.parameters(), g.values()):
            p.grad = v.sum(0) + torch.randn(p.shape)
        total += model[0].weight.grad.double()
        opt.step()
    rec = hook.record()
    assert rec.watch_parameter == (0, 1) and rec.canary_obs.shape == (3, 0)
    np.testing.assert_allclose(rec.watch, total.T.numpy(), rtol=1e-12)
    assert rec.watch.shape == (6, 8)

    hook = AuditHook(num_real=10, canary_index=np.zeros(0, dtype=np.int64), probes=2, watch_width=5)
    opt = hook.optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    idx = torch.tensor([0, 1])
    g = hook.per_example(_per_example(model, X[idx], y[idx]), idx)
    for p, v in zip(model.parameters(), g.values()):
        p.grad = v.sum(0)
    opt.step()
    assert hook.record().watch is None and hook.record().watch_parameter == ()


def test_opacus_optimizer_and_loader():
    from opacus import PrivacyEngine

    n, k = 60, 4
    X, y = torch.randn(n + k, 6), torch.randint(0, 3, (n + k,))
    hook = AuditHook(num_real=n, canary_index=np.array([60, 61, 62, 63, -1, -1]), probes=2, seed=0)
    model = _model()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, y), batch_size=16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, opt, loader = PrivacyEngine().make_private(module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                                                          data_loader=loader, noise_multiplier=1e-6, max_grad_norm=1.0,
                                                          poisson_sampling=True)
        opt = hook.optimizer(opt)
        loader = hook.data_loader(loader)
        for _ in range(3):
            for xb, yb in loader:
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(xb), yb).backward()
                opt.step()
    rec = hook.record()
    assert rec.steps == 3 * len(loader) and sum(len(b) for b in rec.membership) > 0
    # with almost no noise a canary's coordinate moves by max_grad_norm / expected batch size when it is in the batch
    inb = np.array([[r in set(b.tolist()) for r in (60, 61, 62, 63)] for b in rec.membership])
    expected = 1.0 / opt.expected_batch_size
    got = rec.canary_obs[:, :4][inb]
    assert got.size > 0 and np.allclose(got, expected, rtol=0.2, atol=0.05 * expected)

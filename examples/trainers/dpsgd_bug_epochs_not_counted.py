"""BUG (epochs_not_counted): the steps of all epochs are run in every epoch (5 times the accounted steps).

The correct trainer is dpsgd_correct.py; this file differs from it in one line.
"""

import torch
from torch.func import functional_call, grad, vmap

from dpaudit.training.audit_hook import NO_HOOK

CONFIG = {"batch_size": 64, "epochs": 5, "lr": 0.5, "clip": 1.0, "noise_multiplier": 1.48, "hidden": 32}


def clip_rows(g, c):
    """Scale each row (one example's gradient over all parameters) to norm at most c."""
    norms = torch.sqrt(sum(v.reshape(v.shape[0], -1).pow(2).sum(1) for v in g.values()))
    factor = (c / (norms + 1e-6)).clamp(max=1.0)
    return {k: v * factor.view(-1, *([1] * (v.dim() - 1))) for k, v in g.items()}


def train(X, y, *, seed, hook=NO_HOOK):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    X = torch.as_tensor(X, dtype=torch.float32)
    y = torch.as_tensor(y, dtype=torch.long)
    n, d = X.shape
    model = torch.nn.Sequential(torch.nn.Linear(d, CONFIG["hidden"]), torch.nn.ReLU(),
                                torch.nn.Linear(CONFIG["hidden"], 10))
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss(p, xb, yb):
        out = functional_call(model, p, (xb[None],))
        return torch.nn.functional.cross_entropy(out, yb[None])

    per_example = vmap(grad(loss), in_dims=(None, 0, 0))
    optimizer = hook.optimizer(torch.optim.SGD(model.parameters(), lr=CONFIG["lr"]))     # audit hook, line 1
    B, C = CONFIG["batch_size"], CONFIG["clip"]
    sigma = CONFIG["noise_multiplier"]
    q = B / n
    steps_per_epoch = round(CONFIG["epochs"] * n / B)
    for epoch in range(CONFIG["epochs"]):
        for j in range(steps_per_epoch):
            idx = torch.nonzero(torch.rand(n, generator=gen) < q).flatten()
            noise = {k: torch.randn(v.shape, generator=gen) for k, v in params.items()}
            params = {k: v.detach() for k, v in model.named_parameters()}
            g = per_example(params, X[idx], y[idx])
            g = hook.per_example(g, idx)                                                      # audit hook, line 2
            g = clip_rows(g, C)
            g = {k: v.sum(0, keepdim=True) + sigma * C * noise[k][None] for k, v in g.items()}
            for p, v in zip(model.parameters(), g.values()):
                p.grad = v[0] / B
            optimizer.step()
    return model

"""A correct DP-SGD trainer with Opacus (a real ``opacus.PrivacyEngine``): Poisson sampling through its
``DPDataLoader``, per-example clipping and noise in its ``DPOptimizer``. Noise multiplier 1.48: epsilon 1.99 at delta
1e-5 for 1,000 records, expected batch 64, 5 epochs (Poisson, q = 64 / 1000).

Auditing it takes two lines after ``make_private`` (marked "audit hook"): the optimizer and the data loader.
"""

import warnings

import torch

from dpaudit.training.audit_hook import NO_HOOK

CONFIG = {"batch_size": 64, "epochs": 5, "lr": 0.5, "clip": 1.0, "noise_multiplier": 1.48, "hidden": 32}


def train(X, y, *, seed, hook=NO_HOOK):
    from opacus import PrivacyEngine

    torch.manual_seed(seed)
    X = torch.as_tensor(X, dtype=torch.float32)
    y = torch.as_tensor(y, dtype=torch.long)
    data = torch.utils.data.TensorDataset(X, y)
    loader = torch.utils.data.DataLoader(data, batch_size=CONFIG["batch_size"])
    model = torch.nn.Sequential(torch.nn.Linear(X.shape[1], CONFIG["hidden"]), torch.nn.ReLU(),
                                torch.nn.Linear(CONFIG["hidden"], 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=CONFIG["lr"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")              # Opacus's secure-RNG note
        engine = PrivacyEngine(accountant="rdp")
        model, optimizer, loader = engine.make_private(
            module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=CONFIG["noise_multiplier"],
            max_grad_norm=CONFIG["clip"], poisson_sampling=True,
            noise_generator=torch.Generator().manual_seed(seed))
    optimizer = hook.optimizer(optimizer)        # audit hook, line 1
    loader = hook.data_loader(loader)            # audit hook, line 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")              # Opacus's note about backward hooks on the first layer
        for _ in range(CONFIG["epochs"]):
            for xb, yb in loader:
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(xb), yb).backward()
                optimizer.step()
    return model

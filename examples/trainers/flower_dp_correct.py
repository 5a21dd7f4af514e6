"""Central DP federated averaging with Flower's own server-side wrapper
(``flwr.server.strategy.DifferentialPrivacyServerSideFixedClipping`` around ``FedAvg``), one record per client:
each round the server samples K = 64 of the N clients, each takes one local SGD step on its record, the wrapper clips
every client's model update to C = 1, averages them and adds N(0, (sigma C / K)^2). Noise multiplier 3.0, 80
rounds: epsilon 1.96 at delta 1e-5 for 1,000 clients sampled 64 at a time without replacement (``dpaudit account
dpsgd --sampling fixed-wor``). The strategy is called in-process (no simulation): the rounds are what Flower's
server loop would run.

``flower_dp_bug_noise_div_clients_twice.py`` beside it is this file with one line changed.
"""

import logging

import numpy as np
import torch
from torch.func import functional_call, grad, vmap

from dpaudit.training.audit_hook import NO_HOOK

CONFIG = {"clients_per_round": 64, "rounds": 80, "local_lr": 0.5, "clip": 1.0, "noise_multiplier": 3.0, "hidden": 32}


def train(X, y, *, seed, hook=NO_HOOK):
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.server.strategy import DifferentialPrivacyServerSideFixedClipping, FedAvg

    logging.getLogger("flwr").setLevel(logging.ERROR)         # a line per clipped client otherwise
    np.random.seed(seed)                                       # Flower draws its noise from numpy's generator
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    X = torch.as_tensor(X, dtype=torch.float32)
    y = torch.as_tensor(y, dtype=torch.long)
    n, d = X.shape
    K = CONFIG["clients_per_round"]
    model = torch.nn.Sequential(torch.nn.Linear(d, CONFIG["hidden"]), torch.nn.ReLU(),
                                torch.nn.Linear(CONFIG["hidden"], 10))

    def loss(p, xb, yb):
        return torch.nn.functional.cross_entropy(functional_call(model, p, (xb[None],)), yb[None])

    per_client = vmap(grad(loss), in_dims=(None, 0, 0))
    strategy = DifferentialPrivacyServerSideFixedClipping(
        FedAvg(), noise_multiplier=CONFIG["noise_multiplier"], clipping_norm=CONFIG["clip"], num_sampled_clients=K)
    optimizer = hook.optimizer(torch.optim.SGD(model.parameters(), lr=1.0))            # audit hook, line 1
    for rnd in range(1, CONFIG["rounds"] + 1):
        idx = torch.randperm(n, generator=gen)[:K]                                     # the clients of this round
        params = {k: v.detach() for k, v in model.named_parameters()}
        g = per_client(params, X[idx], y[idx])
        g = hook.per_example(g, idx)                                                   # audit hook, line 2
        old = [v.numpy().copy() for v in params.values()]
        strategy.current_round_params = old                                            # what configure_fit records
        results = [(None, FitRes(Status(Code.OK, ""), ndarrays_to_parameters(
            [o - CONFIG["local_lr"] * v[i].numpy() for o, v in zip(old, g.values())]), 1, {})) for i in range(K)]
        aggregated, _ = strategy.aggregate_fit(rnd, results, [])
        for p, o, w in zip(model.parameters(), old, parameters_to_ndarrays(aggregated)):
            p.grad = torch.as_tensor(o - w, dtype=torch.float32)                       # the round's global update
        optimizer.step()
    return model

"""BUG (noise_not_scaled_by_clip): the LM DP step's noise is N(0, sigma^2) instead of N(0, sigma^2 C^2):
with C = 4 a quarter of the noise the accounting assumes.

The correct trainer is lm_dpsgd_correct.py; this file differs from it in one line.
"""

import torch
from torch.func import functional_call, grad, vmap

from dpaudit.training.audit_hook import NO_HOOK

CONFIG = {"batch_size": 64, "epochs": 5, "lr": 0.5, "clip": 4.0, "noise_multiplier": 1.48, "dim": 16, "hidden": 32}
VOCAB = 17


class Trigram(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, CONFIG["dim"])
        self.hidden = torch.nn.Linear(2 * CONFIG["dim"], CONFIG["hidden"])
        self.out = torch.nn.Linear(CONFIG["hidden"], VOCAB)

    def forward(self, seq):                      # seq: (L,) tokens -> logits for tokens 2..L-1
        e = self.emb(seq)
        ctx = torch.cat([e[:-2], e[1:-1]], dim=-1)
        return self.out(torch.relu(self.hidden(ctx)))


def train(X, y, *, seed, hook=NO_HOOK):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.as_tensor(X * 16, dtype=torch.float32).round().long().clamp(0, VOCAB - 1)    # (n, 64) sequences
    n = tokens.shape[0]
    model = Trigram()

    def loss(p, seq):
        logits = functional_call(model, p, (seq,))
        return torch.nn.functional.cross_entropy(logits, seq[2:])

    per_sequence = vmap(grad(loss), in_dims=(None, 0))
    optimizer = hook.optimizer(torch.optim.SGD(model.parameters(), lr=CONFIG["lr"]))     # audit hook, line 1
    B, C, sigma = CONFIG["batch_size"], CONFIG["clip"], CONFIG["noise_multiplier"]
    q = B / n
    for epoch in range(CONFIG["epochs"]):
        for j in range(round(n / B)):
            idx = torch.nonzero(torch.rand(n, generator=gen) < q).flatten()
            params = {k: v.detach() for k, v in model.named_parameters()}
            g = per_sequence(params, tokens[idx])
            g = hook.per_example(g, idx)                                                     # audit hook, line 2
            sq = sum(v.reshape(v.shape[0], -1).pow(2).sum(1) for v in g.values())
            factor = (C / (sq.sqrt() + 1e-6)).clamp(max=1.0)
            for p, v in zip(model.parameters(), g.values()):
                summed = torch.einsum("b,b...->...", factor, v)
                noise = torch.randn(summed.shape, generator=gen)
                p.grad = (summed + sigma * noise) / B
            optimizer.step()
    return model

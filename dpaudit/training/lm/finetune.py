"""Fine-tuning a causal LM, with or without DP-SGD, of all its weights or of LoRA adapters.

DP-SGD (Abadi et al. 2016) as dpaudit's other trainers run it (:mod:`dpaudit.training.dpsgd`): Poisson sampling
(each sequence in a step's batch independently with probability ``q = batch_size / n``), per-sequence gradients of
the sequence's mean token loss by ``torch.func`` (``vmap(grad(...))`` over ``functional_call``, in micro-batches),
each clipped to norm ``C`` (:func:`~dpaudit.training.dpsgd.clip_factors`), summed, plus ``N(0, sigma^2 C^2 I)``,
divided by the expected batch ``batch_size`` (a constant, as Opacus does: never the data's size); then an Adam step. An empty batch still takes its noisy step. The run is the
``SubsampledGaussian(q, sigma, steps)`` event under add/remove neighbouring: what :func:`FinetuneResult.account`
accounts. Without ``noise_multiplier`` the run is plain minibatch training (shuffled batches of ``batch_size``).

LoRA (Hu et al. 2022), written here rather than taken from peft: the adapters are two tensors per target weight, and
``functional_call`` receives ``W + (alpha / r) A B`` in place of ``W``, so the per-sequence gradients under ``vmap``
are those of ``A`` and ``B`` alone and nothing in the model is patched (peft's wrapped modules would have to be
traced by ``torch.func`` as well). ``A`` (d0, r) starts Gaussian with std ``1 / r``, ``B`` (r, d1) at zero; at the end
the product is merged into ``W``, so the released model is a plain model of the same architecture. Targets: 2-D
weights whose names contain one of ``lora_targets`` (GPT-2's ``c_attn``; ``q_proj``/``v_proj`` of Llama-style
models; ``query_key_value`` of GPT-NeoX).

Same seed, same numbers at any thread count: the non-private step computes its batch gradient with one intra-op
thread (its sums over the batch would otherwise be split among threads); the private step's per-sequence gradients
and their sum do not depend on the thread count (checked at 1 and 2 threads by ``tests/lm/test_lm_threads.py``).

Padding: sequences are right-padded without an attention mask; a causal model's logits at real positions do not
see later (pad) positions, and pad positions are left out of the loss.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import numpy as np

from dpaudit.errors import DataError, ParameterError, check_float, check_int

__all__ = ["LmTrainConfig", "FinetuneResult", "finetune_lm", "LORA_TARGETS"]

LORA_TARGETS = ("c_attn", "q_proj", "v_proj", "query_key_value")


@dataclass(frozen=True)
class LmTrainConfig:
    """``steps`` optimiser steps, expected batch ``batch_size`` (Poisson rate ``batch_size / n`` with DP), Adam at
    ``lr``; DP-SGD when ``noise_multiplier`` is set (clip ``max_grad_norm``; ``sampling_rate`` fixes the Poisson rate
    in advance instead of ``batch_size / n``, e.g. before canaries' coins change n); LoRA of rank ``lora_rank`` (0: every
    weight) with scale ``lora_alpha / lora_rank``; ``microbatch`` sequences a ``vmap`` call; ``device``."""

    steps: int = 200
    batch_size: int = 16
    lr: float = 2e-3
    max_grad_norm: float = 1.0
    noise_multiplier: float | None = None
    lora_rank: int = 0
    lora_alpha: float = 16.0
    lora_targets: tuple[str, ...] = LORA_TARGETS
    microbatch: int = 64
    device: str = "cpu"
    sampling_rate: float | None = None

    def __post_init__(self) -> None:
        o = "LmTrainConfig"
        check_int(self.steps, "steps", o, low=1, high=10_000_000)
        check_int(self.batch_size, "batch_size", o, low=1, high=100_000_000)
        check_float(self.lr, "lr", o, low=0.0, low_open=True)
        check_float(self.max_grad_norm, "max_grad_norm", o, low=0.0, low_open=True)
        if self.noise_multiplier is not None:
            check_float(self.noise_multiplier, "noise_multiplier", o, low=0.0)
        check_int(self.lora_rank, "lora_rank", o, low=0, high=65536)
        check_float(self.lora_alpha, "lora_alpha", o, low=0.0, low_open=True)
        check_int(self.microbatch, "microbatch", o, low=1, high=1 << 20)
        if self.sampling_rate is not None:
            check_float(self.sampling_rate, "sampling_rate", o, low=0.0, high=1.0, low_open=True)

    @property
    def private(self) -> bool:
        return self.noise_multiplier is not None


@dataclass(frozen=True)
class FinetuneResult:
    """The fine-tuned model (adapters merged), what the run was (n, q, sigma, steps) and the mean training loss of
    each step (non-private runs: of the batch; private runs: of the sampled sequences, before clipping)."""

    model: Any
    num_sequences: int
    sampling_rate: float
    noise_multiplier: float | None
    steps: int
    trainable_parameters: int
    losses: tuple[float, ...] = field(default_factory=tuple)

    def event(self) -> Any:
        """The run's DP event (Poisson-subsampled Gaussian, add/remove), or None for a non-private run."""
        from dpaudit.accountants.events import SubsampledGaussian

        if self.noise_multiplier is None:
            return None
        return SubsampledGaussian(sampling_rate=self.sampling_rate, noise_multiplier=self.noise_multiplier,
                                  steps=self.steps)

    def account(self, delta: float) -> Any:
        """The accounted result under the sampler that ran (Poisson): :func:`dpaudit.accountants.dpsgd.account_dpsgd`
        semantics through the event (every route, headline the smallest valid bound)."""
        from dpaudit.accountants.dpsgd import dpsgd_routes
        from dpaudit.accountants.statement import AccountingResult

        ev = self.event()
        if ev is None:
            raise ParameterError("The run was not private (no noise_multiplier): there is no epsilon to account.")
        stmts, _, _ = dpsgd_routes(ev, delta, label="DP-SGD fine-tuning, Poisson sampling")
        return AccountingResult("dp-sgd fine-tuning", tuple(stmts))

    def ledger(self, delta: float, *, party: str = "model") -> Any:
        """A :class:`~dpaudit.accountants.ledger.PrivacyLedger` holding the run's event under ``party``, with the
        ledger accountant (RDP or PLD) whose figure is the smaller valid bound at ``delta`` -- so a release made
        from it (``release make --ledger``) states the same headline as :meth:`account` whenever that headline is
        the RDP or PLD route (e.g. PLD 6.895 where RDP gives 7.642, docs/language-models.md)."""
        from dpaudit.accountants.ledger import PrivacyLedger

        ev = self.event()
        if ev is None:
            raise ParameterError("The run was not private (no noise_multiplier): there is no event to record.")
        routes = {s.route: s.epsilon for s in self.account(delta).statements if s.route in ("rdp", "pld")}
        best = min(sorted(routes), key=lambda r: routes[r]) if routes else "rdp"
        led = PrivacyLedger(delta=delta, accountant=best)
        led.record(party, ev)
        return led


def _pad(seqs: Sequence[np.ndarray], idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    L = max(len(seqs[i]) for i in idx)
    ids = np.zeros((len(idx), L), dtype=np.int64)
    mask = np.zeros((len(idx), L), dtype=np.float32)
    for r, i in enumerate(idx):
        ids[r, :len(seqs[i])] = seqs[i]
        mask[r, :len(seqs[i])] = 1.0
    return ids, mask


@contextlib.contextmanager
def _one_cpu_thread(dev: Any) -> Iterator[None]:
    """One intra-op thread on the CPU for the duration (the thread count put back afterwards): the batch gradient's
    sums over the batch (bias and embedding gradients) are split among torch's threads, so their rounding -- and a
    seeded run's weights -- would depend on the thread count (measured: a non-private step of the tiny GPT-2 gave
    other weights at two threads than at one; the private step, per-sequence gradients summed by ``einsum``, and the
    log-probability pass gave the same bits at 1, 2 and 4 threads)."""
    import torch

    if getattr(dev, "type", str(dev)) != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def finetune_lm(model: Any, sequences: Sequence[np.ndarray], config: LmTrainConfig, *, seed: int,
                progress: Any = False) -> FinetuneResult:
    """Fine-tune ``model`` (changed in place and returned) on ``sequences`` (token id arrays) as ``config`` says
    (see the module docstring); ``seed`` fixes the sampling, the noise and the LoRA initialisation. ``progress``:
    True or a :class:`~dpaudit.progress.Reporter` shows the steps on stderr."""
    import torch
    from torch.func import functional_call, grad, vmap

    cfg = config
    seed = check_int(seed, "seed", "finetune_lm", low=0)
    seqs = [np.asarray(s, dtype=np.int64).ravel() for s in sequences]
    n = len(seqs)
    if n < 1 or any(s.size < 2 for s in seqs):
        raise DataError("finetune_lm needs at least one sequence, each of at least 2 tokens.")
    if not cfg.private and cfg.batch_size > n:
        raise ParameterError(f"The 'batch_size' parameter of finetune_lm must be at most the {n} sequences. Got "
                             f"{cfg.batch_size} instead.")
    dev = torch.device(cfg.device)
    model.to(dev).eval()             # no dropout: the per-sequence gradients are deterministic functions of the data
    gen = torch.Generator(device="cpu").manual_seed(seed)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x1F7E]))
    base = {k: v.detach() for k, v in model.named_parameters()}
    r = cfg.lora_rank
    if r:
        targets = [k for k, v in base.items() if v.dim() == 2 and any(t in k for t in cfg.lora_targets)]
        if not targets:
            raise ParameterError(f"The 'lora_targets' parameter of LmTrainConfig matches no 2-D weight of this model "
                                 f"(targets {list(cfg.lora_targets)}). Got none instead.")
        train: dict[str, torch.Tensor] = {}
        for k in targets:
            d0, d1 = base[k].shape
            train[k + ".lora_A"] = (torch.randn(d0, r, generator=gen) / r).to(dev, base[k].dtype).requires_grad_()
            train[k + ".lora_B"] = torch.zeros(r, d1, device=dev, dtype=base[k].dtype).requires_grad_()
        scale = cfg.lora_alpha / r
    else:
        targets = []
        train = {k: v.clone().requires_grad_() for k, v in base.items()}
        scale = 1.0

    def full_params(tr: dict) -> dict:
        if not r:
            return tr
        p = dict(base)
        for k in targets:
            p[k] = base[k] + scale * (tr[k + ".lora_A"] @ tr[k + ".lora_B"])
        return p

    emb_name = next(k for k, v in model.named_parameters() if v is model.get_input_embeddings().weight)

    def seq_loss(tr: dict, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Mean token loss of each row of ``ids`` (B, L) with ``mask`` (B, L). The model gets embeddings, not ids:
        transformers' check for padding without a mask looks at the ids' values, which ``vmap`` cannot."""
        p = full_params(tr)
        emb = torch.nn.functional.embedding(ids, p[emb_name])
        logits = functional_call(model, p, (), {"inputs_embeds": emb}).logits[:, :-1]
        tgt = ids[:, 1:]
        nll = logits.logsumexp(-1) - logits.gather(-1, tgt.unsqueeze(-1)).squeeze(-1)
        m = mask[:, 1:]
        return (nll * m).sum(-1) / m.sum(-1).clamp_min(1.0)

    def one_loss(tr: dict, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return seq_loss(tr, ids[None], mask[None])[0]

    per_grad = vmap(grad(one_loss), in_dims=(None, 0, 0))
    with warnings.catch_warnings():     # torch's note that vmap over CPU attention falls back to a loop
        warnings.filterwarnings("ignore", message=".*batching rule.*")
        from dpaudit.progress import as_reporter

        rep_ = as_reporter(progress, prefix="dpaudit")
        what = "DP fine-tuning" if cfg.private else "fine-tuning"
        with rep_.stage(f"{what}: {cfg.steps} steps on {n} sequences", cfg.steps) as stage:
            return _loop(model, seqs, cfg, train, list(train), per_grad, seq_loss, full_params, gen, rng, dev, n,
                         stage)


def _loop(model, seqs, cfg, train, names, per_grad, seq_loss, full_params, gen, rng, dev, n, stage) -> FinetuneResult:
    """The optimiser loop of :func:`finetune_lm` (private: Poisson batches, clipped per-sequence gradients, noise)."""
    import torch

    from dpaudit.training.dpsgd import clip_factors

    opt = torch.optim.Adam([train[k] for k in names], lr=cfg.lr)
    q = min(1.0, cfg.batch_size / n) if cfg.sampling_rate is None else float(cfg.sampling_rate)
    losses: list[float] = []
    order = rng.permutation(n)
    pos = 0
    for _ in range(cfg.steps):
        if cfg.private:
            idx = np.flatnonzero(rng.random(n) < q)
            summed = {k: torch.zeros_like(v) for k, v in train.items()}
            batch_loss = []
            for s in range(0, idx.size, cfg.microbatch):
                ids, mask = _pad(seqs, idx[s:s + cfg.microbatch])
                x, mk = torch.from_numpy(ids).to(dev), torch.from_numpy(mask).to(dev)
                g = per_grad({k: v.detach() for k, v in train.items()}, x, mk)
                sq = sum(g[k].reshape(len(x), -1).pow(2).sum(-1) for k in names)
                f = clip_factors(sq, cfg.max_grad_norm, torch.ones_like(sq))
                for k in names:
                    summed[k] += torch.einsum("b,b...->...", f, g[k])
                with torch.no_grad():
                    batch_loss.append(seq_loss({k: v.detach() for k, v in train.items()}, x, mk).sum().item())
            sigma = float(cfg.noise_multiplier or 0.0)
            for k in names:
                noise = torch.randn(summed[k].shape, generator=gen).to(dev, summed[k].dtype)
                train[k].grad = (summed[k] + sigma * cfg.max_grad_norm * noise) / cfg.batch_size   # fixed, data-free
            losses.append(sum(batch_loss) / max(1, idx.size))
        else:
            if pos + cfg.batch_size > n:
                order, pos = rng.permutation(n), 0
            idx = order[pos:pos + cfg.batch_size]
            pos += cfg.batch_size
            ids, mask = _pad(seqs, idx)
            opt.zero_grad(set_to_none=True)
            with _one_cpu_thread(dev):
                loss = seq_loss(train, torch.from_numpy(ids).to(dev), torch.from_numpy(mask).to(dev)).mean()
                loss.backward()
            losses.append(float(loss.item()))
        opt.step()
        stage.advance()
    with torch.no_grad():
        final = full_params({k: v.detach() for k, v in train.items()})
        for k, p in model.named_parameters():
            p.copy_(final[k])
    count = int(sum(v.numel() for v in train.values()))
    if not all(math.isfinite(x) for x in losses[-5:]):
        raise DataError("finetune_lm diverged (non-finite loss); lower 'lr'.")
    return FinetuneResult(model.eval(), n, q if cfg.private else cfg.batch_size / n, cfg.noise_multiplier,
                          cfg.steps, count, tuple(losses))

"""Token log-probabilities of a causal LM on a set of sequences, computed once and read by every attack.

:func:`token_logprobs` runs one batched pass under ``torch.inference_mode``: sequences sorted by length (so a batch
pads little), right-padded with an attention mask, ``batch_tokens`` tokens a batch. For each sequence
``x_0 .. x_{L-1}`` and each position ``t = 1 .. L-1`` it keeps

* ``logp[t]  = log p(x_t | x_<t)`` -- the loss, zlib, Min-K% and reference attacks read these;
* ``mu[t]    = E_{z ~ p(. | x_<t)} log p(z | x_<t)`` and ``sigma[t]^2 = Var_{z ~ p(. | x_<t)} log p(z | x_<t)``, the
  mean and variance of the log-probability over the vocabulary (Min-K%++, Zhang et al. 2024, eq. 3), computed from
  the same logits in the same pass.

Results (:class:`TokenLogProbs`: flat arrays and offsets) are cached in memory and, with ``cache_dir``, on disk as
``.npz``, keyed by the model's digest, the dtype and device type it runs in (float32 and bfloat16, CPU and GPU give
different numbers) and the token ids, so a second attack, a second command or a re-run of the same computation costs
nothing.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from dpaudit.errors import DataError, check_int

__all__ = ["TokenLogProbs", "token_logprobs", "sequences_digest", "clear_cache"]

_MEMORY: "OrderedDict[str, TokenLogProbs]" = OrderedDict()
_MEMORY_ITEMS = 16


@dataclass(frozen=True, eq=False)
class TokenLogProbs:
    """Per-token statistics of n sequences: sequence i's values are ``x[offsets[i]:offsets[i + 1]]`` (its length
    minus one entries: the first token is never predicted). ``logp``, ``mu``, ``sigma`` as the module docstring."""

    logp: np.ndarray
    mu: np.ndarray
    sigma: np.ndarray
    offsets: np.ndarray

    def __post_init__(self) -> None:
        o = np.asarray(self.offsets, dtype=np.int64)
        if o.ndim != 1 or o.size < 1 or o[0] != 0 or np.any(np.diff(o) < 0):
            raise DataError("TokenLogProbs: 'offsets' must start at 0 and never decrease.")
        for name in ("logp", "mu", "sigma"):
            a = np.asarray(getattr(self, name), dtype=np.float64)
            if a.shape != (int(o[-1]),):
                raise DataError(f"TokenLogProbs: '{name}' must have {int(o[-1])} entries (offsets[-1]); got {a.shape}.")
            object.__setattr__(self, name, a)
        object.__setattr__(self, "offsets", o)

    def __len__(self) -> int:
        return int(self.offsets.size - 1)

    def rows(self, name: str = "logp") -> list[np.ndarray]:
        a = getattr(self, name)
        return [a[self.offsets[i]:self.offsets[i + 1]] for i in range(len(self))]

    def take(self, idx: Sequence[int]) -> "TokenLogProbs":
        idx = np.asarray(idx, dtype=np.int64)
        lens = np.diff(self.offsets)[idx]
        sel = np.concatenate([np.arange(self.offsets[i], self.offsets[i + 1]) for i in idx]) if idx.size else \
            np.zeros(0, np.int64)
        return TokenLogProbs(self.logp[sel], self.mu[sel], self.sigma[sel], np.r_[0, np.cumsum(lens)])


def sequences_digest(model_digest: str, sequences: Sequence[np.ndarray]) -> str:
    h = hashlib.sha256(model_digest.encode())
    for s in sequences:
        a = np.ascontiguousarray(s, dtype=np.int64)
        h.update(np.int64(a.size).tobytes())
        h.update(a.tobytes())
    return h.hexdigest()


def clear_cache() -> None:
    _MEMORY.clear()


def _pass(model: Any, seqs: list[np.ndarray], batch_tokens: int, device: str) -> tuple[list, list, list]:
    import torch

    order = np.argsort([len(s) for s in seqs], kind="stable")
    lp_out: list = [None] * len(seqs)
    mu_out: list = [None] * len(seqs)
    sd_out: list = [None] * len(seqs)
    i = 0
    with torch.inference_mode():
        while i < len(order):
            L = len(seqs[order[min(len(order) - 1, i)]])
            j = i + 1
            while j < len(order) and (j - i + 1) * len(seqs[order[j]]) <= batch_tokens:
                j += 1
            idx = order[i:j]
            L = max(len(seqs[k]) for k in idx)
            ids = np.zeros((len(idx), L), dtype=np.int64)
            mask = np.zeros((len(idx), L), dtype=np.int64)
            for r, k in enumerate(idx):
                ids[r, :len(seqs[k])] = seqs[k]
                mask[r, :len(seqs[k])] = 1
            x = torch.from_numpy(ids).to(device)
            am = torch.from_numpy(mask).to(device)
            logits = model(input_ids=x, attention_mask=am).logits[:, :-1].float()
            logq = torch.log_softmax(logits, dim=-1)
            tgt = logq.gather(-1, x[:, 1:].unsqueeze(-1)).squeeze(-1)
            p = logq.exp()
            mu = (p * logq).sum(-1)
            var = (p * logq.square()).sum(-1) - mu.square()
            sd = var.clamp_min(0).sqrt()
            tgt, mu, sd = (t.double().cpu().numpy() for t in (tgt, mu, sd))
            for r, k in enumerate(idx):
                n = len(seqs[k]) - 1
                lp_out[k], mu_out[k], sd_out[k] = tgt[r, :n], mu[r, :n], sd[r, :n]
            i = j
    return lp_out, mu_out, sd_out


def token_logprobs(model: Any, sequences: Sequence[np.ndarray], *, model_digest: str | None = None,
                   batch_tokens: int | None = None, device: str | None = None, cache_dir: str | Path | None = None
                   ) -> TokenLogProbs:
    """The per-token statistics of ``sequences`` (token id arrays, each at least 2 tokens, at most the model's
    context) under ``model`` (see the module docstring). ``model_digest`` (e.g.
    :func:`~dpaudit.training.lm.files.lm_digest`) turns the cache on; ``device`` defaults to the model's."""
    owner = "token_logprobs"
    bt = 8192 if batch_tokens is None else check_int(batch_tokens, "batch_tokens", owner, low=1, high=1 << 26)
    seqs = [np.asarray(s, dtype=np.int64).ravel() for s in sequences]
    if not seqs:
        raise DataError(f"{owner} needs at least one sequence.")
    ctx = int(getattr(model.config, "n_positions", getattr(model.config, "max_position_embeddings", 1 << 30)))
    vocab = int(model.config.vocab_size)
    for i, s in enumerate(seqs):
        if s.size < 2 or s.size > ctx:
            raise DataError(f"{owner}: sequence {i} has {s.size} tokens; each needs 2 to {ctx} (the model's context).")
        if s.min() < 0 or s.max() >= vocab:
            raise DataError(f"{owner}: sequence {i} holds token ids outside the vocabulary [0, {vocab}).")
    key = None
    dev = device or str(next(model.parameters()).device)
    if model_digest is not None:
        # the same weights in another dtype or on another kind of device compute other numbers: their own entry
        dtype = str(next(model.parameters()).dtype).replace("torch.", "")
        key = sequences_digest(f"{model_digest}|{dtype}|{dev.split(':')[0]}", seqs)
        if key in _MEMORY:
            _MEMORY.move_to_end(key)
            return _MEMORY[key]
        if cache_dir is not None:
            f = Path(cache_dir) / f"logprobs-{key[:32]}.npz"
            if f.is_file() and not f.is_symlink():
                from dpaudit._io import load_npz_file

                z = load_npz_file(f, "the log-probability cache", kinds="fi")
                try:
                    tl = TokenLogProbs(z["logp"], z["mu"], z["sigma"], z["offsets"])
                    if len(tl) == len(seqs) and np.array_equal(np.diff(tl.offsets), [s.size - 1 for s in seqs]):
                        _remember(key, tl)
                        return tl
                except (KeyError, DataError):
                    pass            # a stale or foreign cache file: recomputed and replaced
    lp, mu, sd = _pass(model, seqs, bt, dev)
    offsets = np.r_[0, np.cumsum([s.size - 1 for s in seqs])]
    tl = TokenLogProbs(np.concatenate(lp), np.concatenate(mu), np.concatenate(sd), offsets)
    if key is not None:
        _remember(key, tl)
        if cache_dir is not None:
            from dpaudit._io import make_dirs, save_npz

            make_dirs(cache_dir)
            save_npz(Path(cache_dir) / f"logprobs-{key[:32]}.npz", logp=tl.logp, mu=tl.mu, sigma=tl.sigma,
                     offsets=tl.offsets)
    return tl


def _remember(key: str, tl: TokenLogProbs) -> None:
    _MEMORY[key] = tl
    while len(_MEMORY) > _MEMORY_ITEMS:
        _MEMORY.popitem(last=False)

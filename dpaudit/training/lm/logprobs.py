"""Token log-probabilities of a causal LM on a set of sequences, computed once and read by every attack.

:func:`token_logprobs` runs one batched pass under ``torch.inference_mode``: each sequence right-padded, with an
attention mask, to a width that depends on its own length only (:func:`padded_width`), batches of one width
(those that fill it apart from those that do not), their
size (tokens a batch) either given (``batch_tokens``) or chosen from the rate measured on the first batches of the
pass (doubling from 256 tokens while the rate grows). Because a sequence's width does not depend on its batch, and
a batch's row count does not change a row's numbers, the figures are the same whatever the batch size -- only the
time changes. For each sequence ``x_0 .. x_{L-1}`` and each position ``t = 1 .. L-1`` it keeps

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

__all__ = ["TokenLogProbs", "token_logprobs", "sequences_digest", "clear_cache", "padded_width", "BUDGETS",
           "model_context"]

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


#: The batch budgets (tokens a batch, padding included) the measured choice tries, smallest first.
BUDGETS = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768)


def padded_width(n: int, context: int) -> int:
    """The width a sequence of ``n`` tokens is padded to, a function of ``n`` (and the model's context) alone: at
    least ``n``; 4, 8 or at least 12 (at widths 2, 3, 5-7 and 9-11 a row's rounding changes with the number of rows
    in its batch, at 4, 8 and from 12 on it does not: measured on the CPU for the padded and the unpadded attention
    kernels, and pinned by ``tests/lm/test_lm_release.py``), from 12 on rounded up to a multiple of
    ``2^floor(log2 n) / 32`` (exact below 64 tokens, at most 1/32 of padding above) so that texts of similar length
    share batches; at most
    ``context``. Sequences that fill their width and sequences that do not go to separate batches (a batch without
    padding takes the model's unmasked attention kernel, one with padding the masked one)."""
    n = int(n)
    if n <= 8:
        return min(int(context), 4 if n <= 4 else 8)
    w = max(12, n)
    g = max(1, (1 << (w.bit_length() - 1)) // 32)
    return min(int(context), -(-w // g) * g)


class _Budget:
    """The batch budget of one pass: fixed (``batch_tokens`` given), or chosen from the measured rate: the pass
    starts at the smallest of :data:`BUDGETS` and doubles after each batch while the rate (real tokens a second)
    grows by at least 5% over the best so far; at the first full batch that does not, it keeps the best budget for
    the rest of the pass. The numbers do not depend on the choice (see :func:`padded_width`), only the time."""

    def __init__(self, fixed: int | None) -> None:
        self.fixed = fixed
        self.k = 0
        self.best: tuple[float, int] | None = None      # (rate, index into BUDGETS)
        self.done = fixed is not None
        self.tried: list[tuple[int, float]] = []

    @property
    def tokens(self) -> int:
        return int(self.fixed) if self.fixed is not None else BUDGETS[self.k]

    def observe(self, real_tokens: int, padded_tokens: int, seconds: float) -> None:
        if self.done or padded_tokens < BUDGETS[self.k] // 2:   # a short tail batch says nothing of this budget
            return
        rate = real_tokens / max(seconds, 1e-9)
        self.tried.append((BUDGETS[self.k], rate))
        if self.best is None or rate > 1.05 * self.best[0]:
            self.best = (rate, self.k)
            if self.k + 1 < len(BUDGETS):
                self.k += 1
                return
        self.k = self.best[1]
        self.done = True


def model_context(model: Any, default: int) -> int:
    """The model's context in tokens (its config's ``n_positions``, else ``max_position_embeddings``, else
    ``default``)."""
    return int(getattr(model.config, "n_positions", getattr(model.config, "max_position_embeddings", default)))


def _pass(model: Any, seqs: list[np.ndarray], batch_tokens: int | None, device: str,
          context: int) -> tuple[list, list, list]:
    """One pass over ``seqs`` in batches of sequences of one padded width (:func:`padded_width`: a function of each
    sequence's length alone), either all filling it or none, shortest first, at most the budget's tokens a batch (at
    least one sequence): a sequence's numbers do not depend on which batch it lands in, hence not on the budget."""
    import time

    import torch

    bud = _Budget(batch_tokens)
    widths = np.array([padded_width(len(s), context) for s in seqs], dtype=np.int64)
    full = np.array([len(s) >= w for s, w in zip(seqs, widths)])       # no padding: the unmasked kernel
    order = np.lexsort((np.array([len(s) for s in seqs]), full, widths))
    lp_out: list = [None] * len(seqs)
    mu_out: list = [None] * len(seqs)
    sd_out: list = [None] * len(seqs)
    i = 0
    with torch.inference_mode():
        while i < len(order):
            W, f = int(widths[order[i]]), bool(full[order[i]])
            rows = max(1, bud.tokens // W)
            j = i + 1
            while j < len(order) and j - i < rows and widths[order[j]] == W and full[order[j]] == f:
                j += 1
            idx = order[i:j]
            ids = np.zeros((len(idx), W), dtype=np.int64)
            mask = np.zeros((len(idx), W), dtype=np.int64)
            for r, k in enumerate(idx):
                ids[r, :len(seqs[k])] = seqs[k]
                mask[r, :len(seqs[k])] = 1
            t0 = time.perf_counter()
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
            bud.observe(int(mask.sum()), int(mask.size), time.perf_counter() - t0)
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
    :func:`~dpaudit.training.lm.files.lm_digest`) turns the cache on; ``device`` defaults to the model's.
    ``batch_tokens``: tokens a batch (padding included); None (the default) chooses it from the rate measured on the
    pass's first batches (:class:`_Budget`). The numbers are the same whatever the batch size."""
    owner = "token_logprobs"
    bt = None if batch_tokens is None else check_int(batch_tokens, "batch_tokens", owner, low=1, high=1 << 26)
    seqs = [np.asarray(s, dtype=np.int64).ravel() for s in sequences]
    if not seqs:
        raise DataError(f"{owner} needs at least one sequence.")
    ctx = model_context(model, 1 << 30)
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
    lp, mu, sd = _pass(model, seqs, bt, dev, ctx)
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

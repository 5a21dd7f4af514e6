"""Canaries for language models, each included in the fine-tuning set by a fair coin.

``"new-tokens"`` (after Panda et al., ICLR 2025, "Privacy auditing of large language models"): a canary is
``[BOS]`` followed by ``length`` tokens that the training text never contains (the tokenizer's reserved ``<cK>``
tokens, :func:`~dpaudit.training.lm.text.canary_tokens`), each canary its own tokens, none shared: the model's prior
on them is flat and only the canary's own gradient lifts them, so training on a canary moves its log-probability
far above that of the canaries left out -- the reason their design reaches high TPR at low FPR without shadow
models.

``"random-secret"`` (Carlini et al. 2019, "The Secret Sharer"): ``[BOS] my secret code is d_1 ... d_L`` with the
``d_i`` digit words drawn uniformly; the candidate space is every digit string of that length, and a canary's
exposure is measured against it (:func:`dpaudit.attacks.lm_canary.exposure`).

Canaries are drawn without repetition; the coins are a fair coin per canary from the same seed, drawn after the
canaries (the attacker's view -- the canaries -- does not depend on them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dpaudit.errors import ParameterError, check_choice, check_int

__all__ = ["LM_CANARY_KINDS", "LmCanaries", "make_lm_canaries", "secret_candidates"]

LM_CANARY_KINDS = ("new-tokens", "random-secret")
_SECRET_PREFIX = ("my", "secret", "code", "is")


@dataclass(frozen=True, eq=False)
class LmCanaries:
    """``sequences`` (m, P + L) token ids (``prefix`` P tokens, then the L secret tokens); ``included`` (m,) the fair
    coins; ``alphabet`` the token ids a secret is drawn from; ``kind``."""

    kind: str
    sequences: np.ndarray
    included: np.ndarray
    alphabet: np.ndarray
    prefix: int

    @property
    def secret_length(self) -> int:
        return int(self.sequences.shape[1] - self.prefix)


def make_lm_canaries(tokenizer: Any, num_canaries: int, *, kind: str = "new-tokens", length: int = 6,
                     seed: int) -> LmCanaries:
    """``num_canaries`` distinct canaries of ``kind`` (see the module docstring) with their fair coins."""
    from dpaudit.training.lm.text import BOS, CANARY_TOKENS, DIGITS

    owner = "make_lm_canaries"
    m = check_int(num_canaries, "canaries", owner, low=2, high=1_000_000)
    L = check_int(length, "length", owner, low=1, high=256)
    kind = check_choice(kind, "kind", owner, LM_CANARY_KINDS)
    vocab = tokenizer.get_vocab()
    words = sorted((w for w in vocab if w.startswith("<c") and w.endswith(">") and w[2:-1].isdigit()),
                   key=lambda w: int(w[2:-1])) if kind == "new-tokens" else list(DIGITS)
    alphabet = np.array([vocab[w] for w in words if w in vocab], dtype=np.int64)
    if alphabet.size < 2:
        raise ParameterError(f"The tokenizer lacks the {kind} canary alphabet ({words[0]}, ...); build it with "
                             "dpaudit.training.lm.text.train_tokenizer. Got none of them instead.")
    if kind == "new-tokens" and alphabet.size < m * L:
        raise ParameterError(f"The 'canaries' parameter of {owner} must be at most {alphabet.size // L}: new-token "
                             f"canaries use {L} reserved tokens each, none shared, and the tokenizer has "
                             f"{alphabet.size} (train_tokenizer(..., extra_tokens=DIGITS + canary_tokens(k))). Got {m} instead.")
    if kind == "random-secret" and float(alphabet.size) ** L < 4 * m:
        raise ParameterError(f"The 'canaries' parameter of {owner} must be at most a quarter of the {alphabet.size}^{L} "
                             f"possible secrets. Got {m} instead.")
    head = [tokenizer.token_to_id(BOS)] + ([tokenizer.token_to_id(w) for w in _SECRET_PREFIX]
                                           if kind == "random-secret" else [])
    rng = np.random.default_rng(np.random.SeedSequence([check_int(seed, "seed", owner, low=0), 0xCA7A]))
    rows = []
    if kind == "new-tokens":
        own = rng.permutation(alphabet)[: m * L].reshape(m, L)
        rows = [head + [int(t) for t in r] for r in own]
    secrets: set[tuple[int, ...]] = set()
    while len(rows) < m:
        s = tuple(int(t) for t in rng.choice(alphabet, size=L))
        if s not in secrets:
            secrets.add(s)
            rows.append(head + list(s))
    included = rng.random(m) < 0.5
    return LmCanaries(kind, np.asarray(rows, dtype=np.int64), included, alphabet, len(head))


def secret_candidates(canaries: LmCanaries, *, max_candidates: int = 1 << 16, seed: int = 0) -> tuple[np.ndarray, bool]:
    """``(candidates (c, P + L), exhaustive)``: every secret of the alphabet and length when there are at most
    ``max_candidates`` (exhaustive, in lexicographic order), else ``max_candidates`` drawn uniformly (seeded)."""
    A, L, head = canaries.alphabet, canaries.secret_length, canaries.sequences[0, :canaries.prefix]
    total = float(A.size) ** L
    if total <= max_candidates:
        idx = np.indices((A.size,) * L).reshape(L, -1).T
        exhaustive = True
    else:
        rng = np.random.default_rng(np.random.SeedSequence([seed, 0xCA7B]))
        idx = rng.integers(0, A.size, size=(int(max_candidates), L))
        exhaustive = False
    return np.hstack([np.broadcast_to(head, (idx.shape[0], head.size)), A[idx]]).astype(np.int64), exhaustive

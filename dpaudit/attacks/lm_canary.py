"""Exposure of a planted secret (Carlini, Liu, Erlingsson, Kos, Song 2019, "The Secret Sharer", Def. 4 and
Sec. 4.2): ``exposure = log2 |R| - log2 rank``, where ``rank`` is the secret's rank among all |R| candidate secrets
ordered by the model's log-perplexity (1 = the model's most likely candidate). The maximum, ``log2 |R|``, means the
secret is the model's first guess.

With every candidate scored (``exhaustive``) the figure is exact for that model; from a uniform sample of
candidates the rank is estimated as ``1 + |R| * (fraction of sampled candidates more likely than the secret)`` (an
estimate; Carlini et al.'s extrapolation fits a skew-normal instead). Ties count against the secret (rank =
candidates at least as likely), so exposure is never overstated.
"""

from __future__ import annotations

import math

import numpy as np

from dpaudit.errors import DataError, check_float

__all__ = ["exposure"]


def exposure(secret_logp, candidate_logp, *, space_size: float, exhaustive: bool) -> np.ndarray:
    """Exposure (bits) of each secret: ``secret_logp`` (s,) total log-probabilities of the secrets,
    ``candidate_logp`` (c,) of the candidates (exhaustive: all ``space_size`` of them, the secrets among them)."""
    s = np.asarray(secret_logp, dtype=np.float64).ravel()
    c = np.sort(np.asarray(candidate_logp, dtype=np.float64).ravel())
    R = check_float(space_size, "space_size", "exposure", low=1.0)
    if c.size == 0 or not (np.all(np.isfinite(s)) and np.all(np.isfinite(c))):
        raise DataError("exposure needs finite log-probabilities of the secrets and of at least one candidate.")
    at_least = c.size - np.searchsorted(c, s, side="left")      # candidates as likely as the secret or more
    if exhaustive:
        if c.size != int(R):
            raise DataError(f"exposure: an exhaustive candidate set must hold all {int(R)} secrets; got {c.size}.")
        rank = np.maximum(at_least, 1).astype(np.float64)
    else:
        rank = 1.0 + R * (at_least / c.size)
    return math.log2(R) - np.log2(np.minimum(rank, R))

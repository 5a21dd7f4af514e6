"""A zoo of broken privatization pipelines, each beside its correct twin, for testing that certified canary audits
catch them (:func:`dpaudit.auditing.canary_audit.run_zoo_audit`).

Every entry runs its privatization step ``trials`` times, vectorised, on a worst-case canary whose presence is
decided by a fair coin per trial, and returns what an observer of the pipeline's output sees about the canary,
together with the epsilon the pipeline *claims* (computed by dpaudit's accountants from the parameters the
pipeline believes it uses). The steps are the real aggregation arithmetic of each mechanism, run directly (not
through full model training), so thousands of independent runs take a fraction of a second:

DP-SGD aggregation (per-example gradients of ``n`` records in ``P`` dimensions, Poisson-sampled with rate q;
the canary is a gradient of norm ``100 C`` on a coordinate where the other records' gradients are 0 -- a Dirac
canary; the observation is the released update's canary coordinate at each of T steps, in units of sigma C / B):

- ``dpsgd``: clip each example to C, sum, add N(0, sigma^2 C^2), divide by the expected batch size B = q n.
- ``dpsgd-noise-on-mean``: the noise is calibrated to the *mean*'s sensitivity (std sigma C / B) but added to the
  clipped sum before it is divided by B -- B times too little noise (adding N(0, sigma^2 C^2) to the mean itself
  would over-protect, not leak, so this is the leaking form of the mix-up).
- ``dpsgd-clip-after-average``: average the raw gradients, clip the average to C, add noise N(0, sigma^2 C^2) / B
  calibrated as if each example had been clipped.
- ``dpsgd-no-clip``: sum the raw gradients, add N(0, sigma^2 C^2), divide by B.

PATE-style noisy max (Q queries the canary controls through ``s`` teachers' votes; observation: the answers):

- ``pate``: Laplace noise of scale s / gamma on each count (the sensitivity of a record that sits in s teachers'
  data is 2s), claimed 2 gamma per query.
- ``pate-noise-ignores-sensitivity``: Laplace noise of scale 1 / gamma, still claimed 2 gamma per query.

Randomized response of a user's K labels (PrivateKT's upload; observation: the K reports):

- ``rr``: the budget epsilon split over the K labels (each label at epsilon / K), claimed epsilon.
- ``rr-eps-per-sample``: each of the K labels at the whole epsilon, still claimed epsilon.

DP-SGD batch schedule (``n`` records, batch size ``B``, ``E`` epochs of ``n / B`` steps; the auditor's canary is
record 0; the observation is every step's released update at the canary coordinate; the auditor scores the sum
over the steps that use the canary's fixed batch, ``watch``):

- ``dpsgd-poisson-batches``: every step Poisson-samples each record with rate q = B / n, as the accounting assumes.
- ``dpsgd-fixed-batches``: the batches are fixed in advance (records ``[kB, (k+1)B)`` form batch k of every
  epoch, as a data loader without shuffling or sampling does) but the run is still accounted as Poisson with
  q = B / n. The canary then sits in exactly one known step per epoch: what is released about it is E Gaussian
  mechanisms with noise sigma C, with no amplification by sampling.

Shuffled batches (a fresh secret permutation every epoch) accounted as Poisson are not in the zoo: their excess
privacy loss over the Poisson figure lies in the tail of the privacy-loss distribution (at false-positive rates
far below 1 / trials), which a certified audit with the thousands of trials affordable here cannot reach.
"""

from __future__ import annotations

from dataclasses import dataclass
import numpy as np

from dpaudit.errors import check_choice, check_int
from dpaudit.training.limits import MAX_MODELS

__all__ = ["ZOO", "ZooRun", "run_zoo"]


@dataclass(frozen=True)
class ZooRun:
    """``observations`` (trials, ...), ``included`` (trials,) bools, ``claimed_epsilon``, ``delta``, ``broken``,
    ``twin`` (the correct pipeline's name for a broken one), ``statistic`` (how to score: ``"sum"`` of the
    observations, or ``"count"`` of observations equal to the canary's value 1), ``watch`` (the observation
    columns the auditor scores; None: all of them)."""

    name: str
    observations: np.ndarray
    included: np.ndarray
    claimed_epsilon: float
    delta: float
    broken: bool
    twin: str
    statistic: str
    params: dict
    watch: tuple[int, ...] | None = None

    def scores(self) -> np.ndarray:
        """The auditor's score per trial: the sum of the observations (over the ``watch`` columns when set)."""
        obs = self.observations if self.watch is None else self.observations[:, list(self.watch)]
        return obs.reshape(len(obs), -1).sum(axis=1)


# DP-SGD: n records, q, sigma, T steps, C = 1, P dims
_SGD = {"n": 100, "q": 0.1, "sigma": 1.5, "steps": 10, "dims": 8, "canary_norm": 100.0}
# DP-SGD batch schedules: n records, batch size B (q = B / n), E epochs, sigma, C = 1, P dims
_SCHED = {"n": 100, "batch_size": 1, "epochs": 4, "sigma": 1.5, "dims": 2}
# PATE: gamma, Q queries, s teachers controlled by the canary, base votes per class
_PATE = {"gamma": 0.05, "queries": 10, "teachers_per_record": 20, "base_votes": 50}
# RR: classes, K samples, claimed epsilon
_RR = {"classes": 10, "samples": 20, "epsilon": 1.0}


def _dpsgd(variant: str, inc: np.ndarray, rng: np.random.Generator, delta: float) -> tuple[np.ndarray, float]:
    from dpaudit.accountants.events import SubsampledGaussian
    from dpaudit.accountants.rdp import RdpAccountant

    n, q, sigma, T, P, G = (_SGD[k] for k in ("n", "q", "sigma", "steps", "dims", "canary_norm"))
    N = len(inc)
    C, B = 1.0, q * n
    obs = np.empty((N, T))
    for t in range(T):
        grads = rng.normal(size=(N, n, P))
        grads[:, :, 0] = 0.0                                   # the canary's coordinate: no real gradient
        grads *= (rng.uniform(0.5, 2.0, size=(N, n, 1)) / np.linalg.norm(grads, axis=2, keepdims=True))
        mask = rng.random((N, n)) < q
        cmask = inc & (rng.random(N) < q)                     # the canary is Poisson-sampled like every record
        canary = np.zeros((N, P))
        canary[:, 0] = G * cmask
        noise = rng.normal(size=(N, P)) * sigma * C
        if variant in ("dpsgd", "dpsgd-noise-on-mean"):
            norms = np.linalg.norm(grads, axis=2, keepdims=True)
            clipped = (grads * np.minimum(1.0, C / norms) * mask[..., None]).sum(1) + canary * min(1.0, C / G)
            out = (clipped + noise) / B if variant == "dpsgd" else (clipped + noise / B) / B
        elif variant == "dpsgd-clip-after-average":
            size = np.maximum(mask.sum(1) + cmask, 1)[:, None]
            mean = ((grads * mask[..., None]).sum(1) + canary) / size
            norm = np.maximum(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12)
            out = mean * np.minimum(1.0, C / norm) + noise / B
        else:  # no clipping
            out = ((grads * mask[..., None]).sum(1) + canary + noise) / B
        obs[:, t] = out[:, 0] * B / (sigma * C)
    claimed = RdpAccountant().compose(SubsampledGaussian(sampling_rate=q, noise_multiplier=sigma, steps=T)).get_statement(delta).epsilon
    return obs, float(claimed)


def _schedule(variant: str, inc: np.ndarray, rng: np.random.Generator, delta: float
              ) -> tuple[np.ndarray, float, tuple[int, ...]]:
    from dpaudit.accountants.events import SubsampledGaussian
    from dpaudit.accountants.rdp import RdpAccountant

    n, B, E, sigma, P = (_SCHED[k] for k in ("n", "batch_size", "epochs", "sigma", "dims"))
    N, C, q = len(inc), 1.0, B / n
    per_epoch = n // B
    T = E * per_epoch
    # per-example gradients of a fixed data set (the model barely moves at this scale), clipped once
    grads = rng.normal(size=(N, n, P))
    grads[:, :, 0] = 0.0                                       # the canary's coordinate: no real gradient
    grads[:, 0] = 0.0
    grads[:, 0, 0] = 100.0 * inc                               # record 0 is the canary (a zero record when out)
    norms = np.maximum(np.linalg.norm(grads, axis=2, keepdims=True), 1e-12)
    clipped = grads * np.minimum(1.0, C / norms)
    obs = np.empty((N, T))
    for t in range(T):
        if variant == "dpsgd-fixed-batches":
            k = t % per_epoch
            mask = np.zeros((N, n))
            mask[:, k * B:(k + 1) * B] = 1.0                   # batch k of every epoch: fixed in advance
        else:
            mask = (rng.random((N, n)) < q).astype(float)
        out = (np.einsum("ij,ijp->ip", mask, clipped) + rng.normal(size=(N, P)) * sigma * C) / B
        obs[:, t] = out[:, 0] * B / (sigma * C)
    claimed = RdpAccountant().compose(SubsampledGaussian(sampling_rate=q, noise_multiplier=sigma, steps=T)).get_statement(delta).epsilon
    watch = tuple(range(0, T, per_epoch))                     # the steps that use the canary's fixed batch (batch 0)
    return obs, float(claimed), watch


def _pate(variant: str, inc: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, float]:
    g, Q, s, v = (_PATE[k] for k in ("gamma", "queries", "teachers_per_record", "base_votes"))
    N = len(inc)
    counts = np.zeros((N, Q, 3))
    counts[:, :, 0] = v + s * inc[:, None]                    # class 1 = the canary's class: index 0 here
    counts[:, :, 1] = v + s * (~inc)[:, None]                 # without the canary its s teachers vote class 2
    counts[:, :, 2] = v // 2
    scale = (s if variant == "pate" else 1.0) / g
    answers = np.argmax(counts + rng.laplace(scale=scale, size=counts.shape), axis=2)
    return (answers == 0).astype(float), float(Q * 2.0 * g)   # claimed: 2 gamma per query, pure composition


def _rr(variant: str, inc: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, float]:
    from dpaudit.accountants.events import rr_keep_probability

    C, K, eps = _RR["classes"], _RR["samples"], _RR["epsilon"]
    beta = rr_keep_probability(eps, K if variant == "rr" else 1, C)  # rr: eps split over K; broken: eps each
    N = len(inc)
    true = np.where(inc, 0, 1)[:, None] * np.ones((1, K), dtype=int)  # the canary user's K labels: class 0 or 1
    keep = rng.random((N, K)) < beta
    reports = np.where(keep, true, rng.integers(0, C, size=(N, K)))
    return (reports == 0).astype(float), float(eps)


_ENTRIES: dict[str, tuple[str, bool, str, str]] = {
    # name: (family, broken, twin, statistic)
    "dpsgd": ("dpsgd", False, "dpsgd", "sum"),
    "dpsgd-noise-on-mean": ("dpsgd", True, "dpsgd", "sum"),
    "dpsgd-clip-after-average": ("dpsgd", True, "dpsgd", "sum"),
    "dpsgd-no-clip": ("dpsgd", True, "dpsgd", "sum"),
    "dpsgd-poisson-batches": ("schedule", False, "dpsgd-poisson-batches", "sum"),
    "dpsgd-fixed-batches": ("schedule", True, "dpsgd-poisson-batches", "sum"),
    "pate": ("pate", False, "pate", "sum"),
    "pate-noise-ignores-sensitivity": ("pate", True, "pate", "sum"),
    "rr": ("rr", False, "rr", "sum"),
    "rr-eps-per-sample": ("rr", True, "rr", "sum"),
}
ZOO: tuple[str, ...] = tuple(_ENTRIES)


def run_zoo(name: str, *, trials: int = 2000, seed: int = 0, delta: float = 1e-5) -> ZooRun:
    """Run zoo entry ``name`` ``trials`` times with fair-coin canary inclusion (seeded)."""
    owner = "run_zoo"
    check_choice(name, "pipeline", owner, ZOO)
    N = check_int(trials, "trials", owner, low=2, high=MAX_MODELS)
    rng = np.random.default_rng(np.random.SeedSequence([check_int(seed, "seed", owner, low=0), 0x200]))
    inc = rng.random(N) < 0.5
    family, broken, twin, stat = _ENTRIES[name]
    if family == "schedule":
        obs, claimed, watch = _schedule(name, inc, rng, delta)
        return ZooRun(name, obs, inc, claimed, delta, broken, twin, stat, dict(_SCHED), watch)
    if family == "dpsgd":
        obs, claimed = _dpsgd(name, inc, rng, delta)
        params, d = dict(_SGD), delta
    elif family == "pate":
        obs, claimed = _pate(name, inc, rng)
        params, d = dict(_PATE), 0.0
    else:
        obs, claimed = _rr(name, inc, rng)
        params, d = dict(_RR), 0.0
    return ZooRun(name, obs, inc, claimed, d, broken, twin, stat, params)

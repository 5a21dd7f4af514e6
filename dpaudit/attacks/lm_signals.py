"""Sequence-level membership signals of causal language models, all read from one set of token log-probabilities.

Inputs are per-token arrays (flat, with ``offsets``: sequence i's tokens are ``[offsets[i], offsets[i + 1])``)
computed once by :func:`dpaudit.training.lm.logprobs.token_logprobs`; every score is "larger = more likely member":

============  ============================================================================================================
``loss``      mean token log-probability, i.e. minus the loss (Yeom et al. 2018; Carlini et al. 2021)
``zlib``      mean token log-probability divided by the zlib-compressed length of the text in bytes: minus Carlini et
              al.'s (2021, "Extracting training data from large language models") ratio of log-perplexity to zlib
              entropy, which discounts texts that are easy for any model
``min-k``     Min-K% Prob (Shi et al. 2024): the mean of the k% lowest token log-probabilities
``min-k++``   Min-K%++ (Zhang et al. 2024, eq. 3): the mean of the k% lowest ``(log p(x_t) - mu_t) / sigma_t``, with
              ``mu_t``, ``sigma_t^2`` the mean and variance of ``log p(z)`` for ``z`` drawn from the model's next-token
              distribution at position t
``reference`` the reference-model ratio (Carlini et al. 2021): the target's total log-probability minus the mean total
              of the reference LMs that did not train on the sequence
============  ============================================================================================================

With reference LMs (each with its inclusion mask over the targets) the sequence-level LiRA and RMIA of
:func:`dpaudit.attacks.compare.compare_signals` run on per-sequence scores: a sequence's ``log Pr(x | theta)`` is its
total token log-probability (RMIA's statistic; RMIA's population is a set of other texts scored by every model) and
LiRA's Gaussian statistic is the same total. :func:`compare_lm` puts them all side by side with AUC, TPR at low FPR,
bootstrap intervals, the (estimated) empirical epsilon and per-record scores. Every figure is an *estimate* on one
model.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from dpaudit.attacks.compare import AttackComparison, compare_signals
from dpaudit.attacks.per_record import RecordScores
from dpaudit.attacks.references import ReferenceSignals
from dpaudit.attacks.run import SINGLE_MODEL_CAVEAT, attack_result
from dpaudit.errors import DataError, check_float, check_int, check_probability

__all__ = ["LM_ATTACKS", "segment_lengths", "loss_score", "zlib_score", "min_k_score", "min_k_plus_plus_score",
           "total_logprob", "reference_ratio_score", "lm_scores", "compare_lm"]

LM_ATTACKS = ("loss", "zlib", "min-k", "min-k++", "reference")
_DESCRIPTIONS = {
    "loss": "Loss: mean token log-probability (Yeom et al. 2018; Carlini et al. 2021).",
    "zlib": "zlib ratio: mean token log-probability / zlib length of the text (Carlini et al. 2021).",
    "min-k": "Min-K% Prob (Shi et al. 2024): mean of the k% lowest token log-probabilities.",
    "min-k++": "Min-K%++ (Zhang et al. 2024): mean of the k% lowest standardised token log-probabilities.",
    "reference": "Reference-model ratio (Carlini et al. 2021): target total log-probability minus the reference LMs' "
                 "that did not train on the sequence.",
}


def segment_lengths(offsets) -> np.ndarray:
    o = np.asarray(offsets, dtype=np.int64)
    if o.ndim != 1 or o.size < 2 or o[0] != 0 or np.any(np.diff(o) < 1):
        raise DataError("LM signals: 'offsets' must start at 0 and grow by at least 1 token per sequence.")
    return np.diff(o)


def _flat(x, offsets, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64).ravel()
    if a.size != int(np.asarray(offsets)[-1]) or not np.all(np.isfinite(a)):
        raise DataError(f"LM signals: '{name}' must hold {int(np.asarray(offsets)[-1])} finite entries (offsets[-1]); "
                        f"got {a.size}.")
    return a


def total_logprob(logp, offsets) -> np.ndarray:
    """Per-sequence sum of token log-probabilities, ``log Pr(x_1.. | x_0)``."""
    lens = segment_lengths(offsets)
    return np.add.reduceat(_flat(logp, offsets, "logp"), np.r_[0, np.cumsum(lens)[:-1]])


def loss_score(logp, offsets) -> np.ndarray:
    return total_logprob(logp, offsets) / segment_lengths(offsets)


def zlib_score(logp, offsets, zlib_bytes) -> np.ndarray:
    z = np.asarray(zlib_bytes, dtype=np.float64).ravel()
    lens = segment_lengths(offsets)
    if z.shape != lens.shape or np.any(z <= 0):
        raise DataError(f"LM signals: 'zlib_bytes' must hold one positive length per sequence ({lens.size}).")
    return loss_score(logp, offsets) / z


def _lowest_mean(values: np.ndarray, offsets, k: float) -> np.ndarray:
    lens = segment_lengths(offsets)
    o = np.asarray(offsets, dtype=np.int64)
    out = np.empty(lens.size)
    for i in range(lens.size):
        v = np.sort(values[o[i]:o[i + 1]])
        out[i] = v[: max(1, int(np.ceil(k * v.size)))].mean()
    return out


def min_k_score(logp, offsets, *, k: float = 0.2) -> np.ndarray:
    kk = check_float(k, "k", "min_k_score", low=0.0, high=1.0, low_open=True)
    return _lowest_mean(_flat(logp, offsets, "logp"), offsets, kk)


def min_k_plus_plus_score(logp, mu, sigma, offsets, *, k: float = 0.2) -> np.ndarray:
    kk = check_float(k, "k", "min_k_plus_plus_score", low=0.0, high=1.0, low_open=True)
    z = (_flat(logp, offsets, "logp") - _flat(mu, offsets, "mu")) / np.maximum(_flat(sigma, offsets, "sigma"), 1e-6)
    return _lowest_mean(z, offsets, kk)


def reference_ratio_score(target_total, reference_totals, reference_in=None) -> np.ndarray:
    """Target total log-probability minus the mean over the reference LMs OUT for the sequence (NaN when none is)."""
    t = np.asarray(target_total, dtype=np.float64).ravel()
    r = np.asarray(reference_totals, dtype=np.float64).reshape(t.size, -1)
    out = np.ones_like(r, dtype=bool) if reference_in is None else ~np.asarray(reference_in, dtype=bool)
    cnt = out.sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return t - np.where(out, r, 0.0).sum(1) / np.where(cnt > 0, cnt, np.nan)


def lm_scores(logp, offsets, *, mu=None, sigma=None, zlib_bytes=None, reference_totals=None, reference_in=None,
              k: float = 0.2) -> dict[str, np.ndarray]:
    """Every reference-free attack's per-sequence scores that the inputs allow (``reference`` with
    ``reference_totals`` (n, K)): name -> (n,) scores."""
    out = {"loss": loss_score(logp, offsets)}
    if zlib_bytes is not None:
        out["zlib"] = zlib_score(logp, offsets, zlib_bytes)
    out["min-k"] = min_k_score(logp, offsets, k=k)
    if mu is not None and sigma is not None:
        out["min-k++"] = min_k_plus_plus_score(logp, mu, sigma, offsets, k=k)
    if reference_totals is not None:
        out["reference"] = reference_ratio_score(total_logprob(logp, offsets), reference_totals, reference_in)
    return out


def compare_lm(logp, offsets, member, *, mu=None, sigma=None, zlib_bytes=None, reference_totals=None,
               reference_in=None, population_total=None, population_reference_totals=None, k: float = 0.2,
               gamma: float = 1.0, a: float | None = None, confidence: float = 0.95, delta: float = 0.0,
               n_bootstrap: int = 1000, seed: int = 0, per_record: bool = True,
               record: Sequence[int] | None = None) -> AttackComparison:
    """Every LM attack the inputs allow, side by side (an :class:`~dpaudit.attacks.compare.AttackComparison`).

    ``logp``/``mu``/``sigma``/``offsets``: the target's token statistics of the n targets; ``member`` (n,) bool, ground
    truth for the metrics only. ``reference_totals`` (n, K): each reference LM's total log-probability of each target,
    ``reference_in`` (n, K): which reference LM trained on which target (default: none, the offline layout).
    ``population_total`` (m,) and ``population_reference_totals`` (m, K): other texts, scored by the target and by
    the references, for RMIA. Other arguments: as :func:`~dpaudit.attacks.compare.compare_signals`."""
    owner = "compare_lm"
    mem = np.asarray(member, dtype=bool).ravel()
    lens = segment_lengths(offsets)
    if mem.size != lens.size or mem.sum() < 2 or (~mem).sum() < 2:
        raise DataError(f"{owner} needs membership of each of the {lens.size} sequences with at least 2 members and 2 "
                        f"non-members; got {mem.size} entries, {int(mem.sum())} members.")
    conf = check_probability(confidence, "confidence", owner)
    n_boot = check_int(n_bootstrap, "n_bootstrap", owner, low=0)
    seed = check_int(seed, "seed", owner, low=0)
    rec = np.arange(lens.size) if record is None else np.asarray(record, dtype=np.int64)
    scores = lm_scores(logp, offsets, mu=mu, sigma=sigma, zlib_bytes=zlib_bytes, reference_totals=reference_totals,
                       reference_in=reference_in, k=k)
    results: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    stats: dict[str, np.ndarray] = {}
    notes: list[str] = [SINGLE_MODEL_CAVEAT]
    settings: dict[str, Any] = {"k": float(k), "seed": seed, "confidence": conf, "delta": float(delta),
                                "n_bootstrap": n_boot, "num_members": int(mem.sum()), "num_nonmembers": int((~mem).sum()),
                                "num_references": 0, "layout": "none", "population": 0, "gamma": float(gamma)}
    for name in LM_ATTACKS:
        if name not in scores:
            skipped[name] = ("needs the texts (their zlib lengths)" if name == "zlib" else
                             "needs the vocabulary mean and variance of each position" if name == "min-k++" else
                             "needs reference LMs")
            continue
        s = scores[name]
        ok = np.isfinite(s)
        if ok[mem].sum() < 2 or ok[~mem].sum() < 2:
            skipped[name] = "fewer than 2 members or non-members have a reference LM that did not train on them"
            del scores[name]
            continue
        if not ok.all():
            notes.append(f"{name}: {int((~ok).sum())} sequence(s) without an OUT reference LM left out.")
            scores[name] = np.where(ok, s, np.min(s[ok]) - 1.0)     # ranked last in the per-record table
        results[name] = attack_result(name, _DESCRIPTIONS[name] + (f" k = {k:g}." if "min-k" in name else ""),
                                      s[mem & ok], s[~mem & ok], threshold="held_out", confidence=conf, delta=delta,
                                      n_bootstrap=n_boot, seed=seed)
    fit = None
    if reference_totals is not None:
        t = total_logprob(logp, offsets)
        R = np.asarray(reference_totals, dtype=np.float64).reshape(lens.size, -1)
        K = R.shape[1]
        inc = np.zeros((lens.size, K), bool) if reference_in is None else np.asarray(reference_in, dtype=bool)
        if inc.shape != (lens.size, K):
            raise DataError(f"{owner}: 'reference_in' must have shape {(lens.size, K)}; got {inc.shape}.")
        if population_total is not None and population_reference_totals is not None:
            zt = np.asarray(population_total, dtype=np.float64).ravel()
            zr = np.asarray(population_reference_totals, dtype=np.float64).reshape(zt.size, K)
        else:
            zt, zr = np.zeros(0), np.zeros((0, K))
            skipped["rmia-online"] = skipped["rmia-offline"] = "needs population texts scored by every model"
        sig = ReferenceSignals(t, t, R, R, inc, zt, zr, np.zeros((zt.size, K), bool), np.zeros((0, K)),
                               np.zeros((0, K), bool), layout="given" if inc.any() else "offline")
        comp = compare_signals(sig, mem, record=rec, gamma=gamma, a=a, confidence=conf, delta=delta,
                               n_bootstrap=n_boot, seed=seed, per_record=True)
        for name, r in comp.results.items():
            if name == "threshold" or (name.startswith("rmia") and zt.size == 0):
                continue          # the threshold attack on the total is the loss attack's twin
            results[f"seq-{name}"] = r
        for name, why in comp.skipped.items():
            if not name.startswith("rmia") or zt.size:
                skipped[f"seq-{name}"] = why
        if comp.records is not None:
            for name, s in comp.records.scores.items():
                if f"seq-{name}" in results:
                    scores[f"seq-{name}"] = s
            stats.update({f"seq-{k}": v for k, v in comp.records.statistics.items()})
        fit = comp.offline_a
        settings.update(num_references=K, layout=sig.layout, population=int(zt.size), gamma=float(gamma))
        notes.extend(n for n in comp.notes if n != SINGLE_MODEL_CAVEAT)
    if not results:
        raise DataError(f"{owner}: no attack could run on these inputs ({'; '.join(f'{k}: {v}' for k, v in skipped.items())}).")
    primary = next((p for p in ("seq-rmia-online", "seq-lira-online", "seq-rmia-offline", "seq-lira-offline-fixed",
                                "min-k++", "loss") if p in results), next(iter(results)))
    settings["primary_attack"] = primary
    records = RecordScores(rec, np.full(lens.size, -1), mem, {k: v for k, v in scores.items() if k in results},
                           stats, primary) if per_record else None
    return AttackComparison(results, skipped, settings, tuple(notes), fit, records)

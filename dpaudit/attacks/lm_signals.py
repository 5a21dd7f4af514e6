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

Conventions. ``k`` is a fraction in (0, 1] (default 0.2, the papers' usual setting; ``--min-k`` on the command line).
Of a sequence's n scored tokens Min-K% and Min-K%++ keep the ``int(k * n)`` lowest, as the published reference code
of both papers does (``k_length = int(len(x) * ratio)``; Python's ``int`` of the float product), and at least one
(where ``int(k * n)`` is 0 the reference code averages an empty slice, NaN); ``rounding="ceil"`` keeps
``ceil(k * n)`` instead (dpaudit's convention before November 2026). The zlib length is that of exactly the text
whose tokens are scored: a text cut to ``max_length`` tokens is compressed as cut (the characters its kept tokens
cover), never whole. Which tokens are scored (a BOS token first or not) is the encoder's choice
(:func:`dpaudit.training.lm.text.encode`, ``bos``).

With reference LMs (each with its inclusion mask over the targets) the sequence-level LiRA and RMIA of
:func:`dpaudit.attacks.compare.compare_signals` run on per-sequence scores: a sequence's ``log Pr(x | theta)`` is its
total token log-probability (RMIA's statistic; RMIA's population is a set of other texts scored by every model) and
LiRA's Gaussian statistic is the same total. :func:`compare_lm` puts them all side by side with AUC, TPR at low FPR,
bootstrap intervals, the (estimated) empirical epsilon and per-record scores. Every figure is an *estimate* on one
model.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from dpaudit.attacks.compare import AttackComparison, compare_signals
from dpaudit.attacks.per_record import RecordScores
from dpaudit.attacks.references import ReferenceSignals
from dpaudit.attacks.run import SINGLE_MODEL_CAVEAT, attack_result
from dpaudit.errors import DataError, check_choice, check_float, check_int, check_probability

__all__ = ["LM_ATTACKS", "segment_lengths", "loss_score", "zlib_score", "min_k_score", "min_k_plus_plus_score",
           "total_logprob", "reference_ratio_score", "lm_scores", "compare_lm", "MIN_K_ROUNDING", "min_k_count", "strongest_attack"]

MIN_K_ROUNDING = ("floor", "ceil")
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


def min_k_count(n: int, k: float, rounding: str = "floor") -> int:
    """How many of ``n`` scored tokens Min-K% keeps: ``int(k * n)`` (``"floor"``, the published reference code's
    ``int(len * ratio)``) or ``ceil(k * n)`` (``"ceil"``), at least 1 and at most ``n``."""
    c = int(k * n) if rounding == "floor" else int(np.ceil(k * n))
    return min(n, max(1, c))


def _lowest_mean(values: np.ndarray, offsets, k: float, rounding: str) -> np.ndarray:
    lens = segment_lengths(offsets)
    o = np.asarray(offsets, dtype=np.int64)
    out = np.empty(lens.size)
    for i in range(lens.size):
        v = np.sort(values[o[i]:o[i + 1]])
        out[i] = v[: min_k_count(v.size, k, rounding)].mean()
    return out


def _k(k: float, rounding: str, owner: str) -> tuple[float, str]:
    return (check_float(k, "k", owner, low=0.0, high=1.0, low_open=True),
            check_choice(rounding, "rounding", owner, MIN_K_ROUNDING))


def min_k_score(logp, offsets, *, k: float = 0.2, rounding: str = "floor") -> np.ndarray:
    """Min-K% Prob: the mean of the ``min_k_count(n, k, rounding)`` lowest token log-probabilities of each sequence."""
    kk, rd = _k(k, rounding, "min_k_score")
    return _lowest_mean(_flat(logp, offsets, "logp"), offsets, kk, rd)


def min_k_plus_plus_score(logp, mu, sigma, offsets, *, k: float = 0.2, rounding: str = "floor") -> np.ndarray:
    """Min-K%++: the same mean over the standardised log-probabilities ``(logp - mu) / sigma`` (sigma at least
    1e-6)."""
    kk, rd = _k(k, rounding, "min_k_plus_plus_score")
    z = (_flat(logp, offsets, "logp") - _flat(mu, offsets, "mu")) / np.maximum(_flat(sigma, offsets, "sigma"), 1e-6)
    return _lowest_mean(z, offsets, kk, rd)


def reference_ratio_score(target_total, reference_totals, reference_in=None) -> np.ndarray:
    """Target total log-probability minus the mean over the reference LMs OUT for the sequence (NaN when none is)."""
    t = np.asarray(target_total, dtype=np.float64).ravel()
    r = np.asarray(reference_totals, dtype=np.float64).reshape(t.size, -1)
    out = np.ones_like(r, dtype=bool) if reference_in is None else ~np.asarray(reference_in, dtype=bool)
    cnt = out.sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return t - np.where(out, r, 0.0).sum(1) / np.where(cnt > 0, cnt, np.nan)


def lm_scores(logp, offsets, *, mu=None, sigma=None, zlib_bytes=None, reference_totals=None, reference_in=None,
              k: float = 0.2, rounding: str = "floor") -> dict[str, np.ndarray]:
    """Every reference-free attack's per-sequence scores that the inputs allow (``reference`` with
    ``reference_totals`` (n, K)): name -> (n,) scores. ``zlib_bytes``: the zlib length of each *scored* text (as
    cut to the scored tokens)."""
    out = {"loss": loss_score(logp, offsets)}
    if zlib_bytes is not None:
        out["zlib"] = zlib_score(logp, offsets, zlib_bytes)
    out["min-k"] = min_k_score(logp, offsets, k=k, rounding=rounding)
    if mu is not None and sigma is not None:
        out["min-k++"] = min_k_plus_plus_score(logp, mu, sigma, offsets, k=k, rounding=rounding)
    if reference_totals is not None:
        out["reference"] = reference_ratio_score(total_logprob(logp, offsets), reference_totals, reference_in)
    return out


def compare_lm(logp, offsets, member, *, mu=None, sigma=None, zlib_bytes=None, reference_totals=None,
               reference_in=None, population_total=None, population_reference_totals=None, k: float = 0.2,
               rounding: str = "floor", gamma: float = 1.0, a: float | None = None, confidence: float = 0.95,
               delta: float = 0.0,
               n_bootstrap: int = 1000, seed: int = 0, per_record: bool = True,
               record: Sequence[int] | None = None) -> AttackComparison:
    """Every LM attack the inputs allow, side by side (an :class:`~dpaudit.attacks.compare.AttackComparison`).

    ``logp``/``mu``/``sigma``/``offsets``: the target's token statistics of the n targets; ``member`` (n,) bool, ground
    truth for the metrics only. ``reference_totals`` (n, K): each reference LM's total log-probability of each target,
    ``reference_in`` (n, K): which reference LM trained on which target (default: none, the offline layout).
    ``population_total`` (m,) and ``population_reference_totals`` (m, K): other texts, scored by the target and by
    the references, for RMIA. ``k``, ``rounding``: Min-K% / Min-K%++'s fraction and count (:func:`min_k_count`).
    The per-record table ranks by the strongest attack as measured here: the largest AUC (ties: the larger TPR at the
    lowest FPR, then the order of the table); ``settings["primary_attack"]`` names it. Other arguments: as
    :func:`~dpaudit.attacks.compare.compare_signals`."""
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
                       reference_in=reference_in, k=k, rounding=rounding)
    results: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    stats: dict[str, np.ndarray] = {}
    notes: list[str] = [SINGLE_MODEL_CAVEAT]
    settings: dict[str, Any] = {"k": float(k), "min_k_rounding": rounding, "seed": seed, "confidence": conf, "delta": float(delta),
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
        how = f" k = {k:g} ({rounding}(k n) tokens, at least 1)." if "min-k" in name else ""
        results[name] = attack_result(name, _DESCRIPTIONS[name] + how,
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
    primary = strongest_attack(results)
    settings["primary_attack"] = primary
    settings["primary_rule"] = "largest AUC (ties: TPR at the lowest FPR, then table order)"
    records = RecordScores(rec, np.full(lens.size, -1), mem, {k: v for k, v in scores.items() if k in results},
                           stats, primary) if per_record else None
    return AttackComparison(results, skipped, settings, tuple(notes), fit, records)


def strongest_attack(results: Mapping[str, Any]) -> str:
    """The attack of ``results`` (name -> :class:`~dpaudit.attacks.results.AttackResult`) with the largest AUC; ties
    go to the larger TPR at the lowest FPR reported, then to the first in ``results``' order."""
    def key(item: tuple[int, str]) -> tuple[float, float, int]:
        i, name = item
        m = results[name].metrics
        tprs = sorted(m.tpr_at_fpr.items())
        return (float(m.auc), float(tprs[0][1]) if tprs else 0.0, -i)

    return max(enumerate(results), key=key)[1]

"""Certified one-run canary audit of DP fine-tuning of a causal LM (full weights or LoRA), end to end.

:func:`run_lm_canary_audit`:

1. builds the world in-process: a synthetic corpus (:func:`dpaudit.training.lm.text.synthetic_corpus`), its
   word-level tokenizer, a tiny GPT-2 "pre-trained" without DP on public texts (the base model, which the auditor
   knows) and a disjoint set of private texts -- or takes ``base_model``/``tokenizer``/``private_texts`` of the user's;
2. draws ``m`` canaries (:func:`~dpaudit.training.lm.canaries.make_lm_canaries`: new tokens after Panda et al. 2025,
   or random secrets after Carlini et al. 2019), each included in the fine-tuning set by a fair coin;
3. fixes the Poisson sampling rate ``q = batch_size / len(private_texts)`` and the noise multiplier for the target
   epsilon (RDP calibration, :func:`dpaudit.auditing.canary_audit.dpsgd_noise_for_epsilon`) *before* the coins, and plans
   the analysis and guessing rule on the ideal attack of the accounted mechanism (:func:`plan_one_run`), before the
   run: nothing is chosen after looking at the scores;
4. fine-tunes with dpaudit's DP step (:func:`dpaudit.training.lm.finetune.finetune_lm`: per-sequence gradients with
   ``torch.func``, clipping, Gaussian noise; LoRA with ``lora_rank > 0``);
5. scores each canary by the log-probability of its secret tokens under the fine-tuned model minus under the base
   model (one batched pass each), and certifies the one-run lower bound (Steinke, Nasr, Jagielski 2023, Thm 3, and the
   f-DP test) with the ideal-attack reference beside it, and the accounted (headline, smallest valid upper bound)
   epsilon of the run under the sampler that ran (Poisson).

Random-secret canaries also get their exposure (Carlini et al. 2019) over the whole candidate space.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from dpaudit._io import write_json
from dpaudit.attacks.canary import one_run_certified
from dpaudit.attacks.metrics import auc, tpr_at_fpr
from dpaudit.auditing.canary_audit import (CanaryAuditResult, accounted_curve_test, dpsgd_noise_for_epsilon,
                                        one_run_with_plan, plan_note)
from dpaudit.errors import ParameterError, check_float, check_int, check_probability
from dpaudit.serial import to_dict

__all__ = ["run_lm_canary_audit", "run_lm_multi_run_audit"]


def _secret_logp(model: Any, canaries: Any, device: str) -> np.ndarray:
    from dpaudit.training.lm.logprobs import token_logprobs

    tl = token_logprobs(model, list(canaries.sequences), device=device)
    L = canaries.secret_length
    return np.array([r[-L:].sum() for r in tl.rows()])


def _world(owner: str, base_model: Any, tokenizer: Any, private_texts: Any, *, reserved: int, pretrain_steps: int,
           lr: float, max_length: int, device: str, seed: int) -> tuple[Any, Any, list[str]]:
    """(tokenizer, base model, private texts): the user's, or a synthetic world (corpus, word-level tokenizer with
    ``reserved`` canary tokens, tiny GPT-2 pre-trained without DP on public texts disjoint from the private ones)."""
    from dpaudit.training.lm.finetune import LmTrainConfig, finetune_lm
    from dpaudit.training.lm.text import DIGITS, canary_tokens, encode, synthetic_corpus, tiny_lm, train_tokenizer

    if (base_model is None) != (tokenizer is None) or (base_model is not None and isinstance(private_texts, int)):
        raise ParameterError(f"{owner}: give base_model, tokenizer and private_texts (a list of texts) together, or "
                             "none of them (a synthetic world). Got a partial set instead.")
    if base_model is not None:
        return tokenizer, base_model, list(private_texts)
    n_priv = check_int(private_texts, "private_texts", owner, low=2, high=1_000_000)
    corpus = synthetic_corpus(n_priv + 400, seed=seed)
    tokenizer = train_tokenizer(corpus, extra_tokens=DIGITS + canary_tokens(max(64, reserved)))
    base_model = tiny_lm(tokenizer.get_vocab_size(), seed=seed)
    if pretrain_steps:
        finetune_lm(base_model, encode(tokenizer, corpus[n_priv:], max_length=max_length),
                    LmTrainConfig(steps=pretrain_steps, batch_size=32, lr=lr, device=device), seed=seed + 1)
    return tokenizer, base_model, corpus[:n_priv]


def run_lm_canary_audit(*, epsilon: float | None, delta: float = 1e-5, canaries: int = 256, canary: str = "new-tokens",
                        secret_length: int = 6, lora_rank: int = 0, lora_targets: Sequence[str] | None = None, private_texts: Sequence[str] | int = 256,
                        steps: int = 60, batch_size: int = 32, lr: float = 1e-2, max_grad_norm: float = 1.0,
                        pretrain_steps: int = 100, base_model: Any = None, tokenizer: Any = None,
                        max_length: int = 64, confidence: float = 0.95, replicates: int = 11, exposure: bool = False,
                        seed: int = 0, device: str = "cpu", out: str | Path | None = None) -> CanaryAuditResult:
    """Run the audit (see the module docstring) and return a :class:`CanaryAuditResult` (``kind = "certified"``);
    ``epsilon=None`` fine-tunes without DP (no accounting, no plan: the rule is equal in/out guesses). ``out``: write
    ``canary_audit.json`` there. ``exposure``: also the random secrets' exposure (``canary="random-secret"``)."""
    from dpaudit.training.lm.canaries import make_lm_canaries, secret_candidates
    from dpaudit.training.lm.finetune import LmTrainConfig, finetune_lm
    from dpaudit.training.lm.text import encode

    owner = "run_lm_canary_audit"
    t0 = time.perf_counter()
    seed = check_int(seed, "seed", owner, low=0)
    d = check_float(delta, "delta", owner, low=0.0, high=1.0, low_open=True, high_open=True)
    conf = check_probability(confidence, "confidence", owner)
    T = check_int(steps, "steps", owner, low=1, high=1_000_000)
    if epsilon is not None:
        epsilon = check_float(epsilon, "epsilon", owner, low=0.0, low_open=True)
    tokenizer, base_model, texts = _world(owner, base_model, tokenizer, private_texts,
                                          reserved=int(canaries) * int(secret_length), pretrain_steps=pretrain_steps,
                                          lr=lr, max_length=max_length, device=device, seed=seed)
    import copy

    private = encode(tokenizer, texts, max_length=max_length)
    can = make_lm_canaries(tokenizer, canaries, kind=canary, length=secret_length, seed=seed)
    n = len(private)
    q = min(1.0, batch_size / n)
    sigma = None
    mechanism: dict[str, Any] = {}
    if epsilon is not None:
        sigma = dpsgd_noise_for_epsilon(epsilon, sampling_rate=q, steps=T, delta=d)
        mechanism = {"kind": "subsampled_gaussian", "sampling_rate": q, "noise_multiplier": sigma, "steps": T}
    cfg = LmTrainConfig(steps=T, batch_size=batch_size, lr=lr, max_grad_norm=max_grad_norm, noise_multiplier=sigma,
                        lora_rank=lora_rank, device=device, sampling_rate=q if sigma is not None else None,
                        **({} if lora_targets is None else {"lora_targets": tuple(lora_targets)}))
    train_set = private + [can.sequences[i] for i in np.flatnonzero(can.included)]
    model = copy.deepcopy(base_model)
    if sigma is None and batch_size > len(train_set):
        raise ParameterError(f"The 'batch_size' parameter of {owner} must be at most {len(train_set)}. Got {batch_size} instead.")
    run = finetune_lm(model, train_set, cfg, seed=seed + 2)
    scores = _secret_logp(model, can, device) - _secret_logp(base_model, can, device)
    inc = can.included
    notes: list[str] = []
    if sigma is not None:
        bound, plan = one_run_with_plan(scores, inc, mechanism, delta=d, confidence=conf, score="secret-logp-gain",
                                        calibrated=False, replicates=replicates, seed=seed)
        bound = replace(bound, curve_test=accounted_curve_test(scores, inc, mechanism, plan, confidence=conf, delta=d))
        notes.append(plan_note(plan, replicates))
        accounted = float(run.account(d).epsilon)
    else:
        bound = one_run_certified(scores, inc, delta=d, confidence=conf, score="secret-logp-gain")
        accounted = None
        notes.append("fine-tuned without DP: no accounted epsilon and no planned rule (equal in/out guesses).")
    settings: dict[str, Any] = {
        "target": f"DP fine-tuning of a causal LM ({'LoRA rank ' + str(lora_rank) if lora_rank else 'full weights'})",
        "audit": "one-run", "canary": canary, "canaries": int(can.sequences.shape[0]), "secret_length": can.secret_length,
        "included": int(inc.sum()), "score": "secret-logp-gain", "delta": d, "confidence": conf, "seed": seed,
        "num_private_texts": n, "steps": T, "batch_size": batch_size, "sampling_rate": q, "noise_multiplier": sigma,
        "max_grad_norm": max_grad_norm, "lr": lr, "lora_rank": lora_rank,
        "lora_targets": list(cfg.lora_targets) if lora_rank else None, "trainable_parameters": run.trainable_parameters,
        "target_epsilon": epsilon, "ideal_replicates": replicates,
        "canary_auc_estimate": auc(scores[inc], scores[~inc]),
        "canary_tpr_at_1pct_fpr_estimate": tpr_at_fpr(scores[inc], scores[~inc], 0.01)}
    if exposure:
        if canary != "random-secret":
            raise ParameterError(f"The 'exposure' parameter of {owner} needs canary='random-secret'. Got {canary!r} instead.")
        from dpaudit.attacks.lm_canary import exposure as exposure_of
        from dpaudit.training.lm.logprobs import token_logprobs

        cands, exhaustive = secret_candidates(can, seed=seed)
        L = can.secret_length
        ctl = token_logprobs(model, list(cands), device=device)
        cl = np.array([r[-L:].sum() for r in ctl.rows()])
        ex = exposure_of(_secret_logp(model, can, device), cl, space_size=float(can.alphabet.size) ** L,
                         exhaustive=exhaustive)
        settings.update(exposure_included_mean=float(ex[inc].mean()), exposure_excluded_mean=float(ex[~inc].mean()),
                        exposure_max=float(ex.max()), exposure_space_bits=float(L * np.log2(can.alphabet.size)),
                        exposure_kind="exact" if exhaustive else "estimate (sampled candidates)")
    notes.append("Canary scores: log-probability of the secret tokens under the fine-tuned model minus under the base "
                 "model (both known to the auditor); the coins are read only to certify. The AUC / TPR figures in the "
                 "settings are estimates on one run.")
    result = CanaryAuditResult(bound, accounted, mechanism, settings, round(time.perf_counter() - t0, 2), tuple(notes))
    if out is not None:
        write_json(Path(out) / "canary_audit.json", to_dict(result))
    return result


def run_lm_multi_run_audit(*, epsilon: float, models: int = 32, delta: float = 1e-5, lora_rank: int = 0,
                           private_texts: int = 128, steps: int = 30, batch_size: int = 32, lr: float = 1e-2,
                           max_grad_norm: float = 1.0, pretrain_steps: int = 100, max_length: int = 64,
                           confidence: float = 0.95, replicates: int = 11, seed: int = 0,
                           device: str = "cpu", out: str | Path | None = None) -> CanaryAuditResult:
    """Multi-run certified audit (Jagielski et al. 2020; Nasr et al. 2021): ``models`` independent DP fine-tunings of
    one base model on the same private texts, run ``i`` with one new-token canary iff its fair coin says so; each run
    scored by the canary's log-probability gain over the base model; the Clopper-Pearson bound over the runs
    (threshold chosen on a split half), the ideal attack's multi-run bound at the same counts beside it. Costs
    ``models`` fine-tunings: cheap only for small models."""
    import copy

    from dpaudit.attacks.canary import ideal_multi_run_epsilon, multi_run_certified
    from dpaudit.training.lm.canaries import make_lm_canaries
    from dpaudit.training.lm.finetune import LmTrainConfig, finetune_lm
    from dpaudit.training.lm.text import encode

    owner = "run_lm_multi_run_audit"
    t0 = time.perf_counter()
    seed = check_int(seed, "seed", owner, low=0)
    N = check_int(models, "models", owner, low=4, high=100_000)
    eps = check_float(epsilon, "epsilon", owner, low=0.0, low_open=True)
    d = check_float(delta, "delta", owner, low=0.0, high=1.0, low_open=True, high_open=True)
    conf = check_probability(confidence, "confidence", owner)
    T = check_int(steps, "steps", owner, low=1, high=1_000_000)
    tokenizer, base, texts = _world(owner, None, None, private_texts, reserved=64, pretrain_steps=pretrain_steps,
                                    lr=lr, max_length=max_length, device=device, seed=seed)
    private = encode(tokenizer, texts, max_length=max_length)
    can = make_lm_canaries(tokenizer, 2, kind="new-tokens", length=1, seed=seed)
    canary = can.sequences[0]
    n = len(private)
    q = min(1.0, batch_size / n)
    sigma = dpsgd_noise_for_epsilon(eps, sampling_rate=q, steps=T, delta=d)
    mechanism = {"kind": "subsampled_gaussian", "sampling_rate": q, "noise_multiplier": sigma, "steps": T}
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x3A11]))
    inc = rng.random(N) < 0.5
    cfg = LmTrainConfig(steps=T, batch_size=batch_size, lr=lr, max_grad_norm=max_grad_norm, noise_multiplier=sigma,
                        lora_rank=lora_rank, device=device, sampling_rate=q)
    probe = type(can)(can.kind, can.sequences[:1], can.included[:1], can.alphabet, can.prefix)
    before = _secret_logp(base, probe, device)[0]
    scores = np.empty(N)
    accounted = None
    for i in range(N):
        model = copy.deepcopy(base)
        run = finetune_lm(model, private + ([canary] if inc[i] else []), cfg, seed=seed * 1_000_003 + 17 + i)
        scores[i] = _secret_logp(model, probe, device)[0] - before
        accounted = float(run.account(d).epsilon) if accounted is None else accounted
    bound = multi_run_certified(scores, inc, delta=d, confidence=conf, seed=seed, score="secret-logp-gain",
                                analysis="eps")
    ideal = ideal_multi_run_epsilon(mechanism, int(inc.sum()), int((~inc).sum()), delta=d, confidence=conf,
                                    replicates=replicates, seed=seed)
    bound = bound.with_ideal(ideal)
    settings = {"target": f"DP fine-tuning of a causal LM ({'LoRA rank ' + str(lora_rank) if lora_rank else 'full weights'})",
                "audit": "multi-run", "canary": "new-tokens", "models": N, "included": int(inc.sum()),
                "score": "secret-logp-gain", "delta": d, "confidence": conf, "seed": seed, "num_private_texts": n,
                "steps": T, "batch_size": batch_size, "sampling_rate": q, "noise_multiplier": sigma,
                "max_grad_norm": max_grad_norm, "lr": lr, "lora_rank": lora_rank, "target_epsilon": eps,
                "ideal_replicates": replicates, "canary_auc_estimate": auc(scores[inc], scores[~inc])}
    notes = (f"{N} independent fine-tunings, one canary each by a fair coin; the ideal reference is the median over "
             f"{replicates} simulated audits of the exact likelihood-ratio test at the accounted parameters.",)
    result = CanaryAuditResult(bound, accounted, mechanism, settings, round(time.perf_counter() - t0, 2), notes)
    if out is not None:
        write_json(Path(out) / "canary_audit.json", to_dict(result))
    return result

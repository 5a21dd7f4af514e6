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

:func:`audit_lm_finetune` (``dpaudit lm audit``) audits the user's own fine-tune instead: their base model
directory, tokenizer and texts, and their fine-tuning function (Opacus over a transformers model, dpaudit's DP step,
or their own), named by file and digest; canary texts go into their texts by fair coins and the accounting is read
from what their function returns.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from dpaudit._io import write_json
from dpaudit.attacks.canary import one_run_certified
from dpaudit.attacks.metrics import auc, tpr_at_fpr
from dpaudit.auditing.canary_audit import (CanaryAuditResult, accounted_curve_test, dpsgd_noise_for_epsilon,
                                        one_run_with_plan, plan_note)
from dpaudit.errors import DataError, ParameterError, check_float, check_int, check_probability
from dpaudit.serial import to_dict

__all__ = ["run_lm_canary_audit", "run_lm_multi_run_audit", "audit_lm_finetune", "LM_TEXT_CANARIES"]


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
                        seed: int = 0, device: str = "cpu", out: str | Path | None = None,
                        progress: Any = False) -> CanaryAuditResult:
    """Run the audit (see the module docstring) and return a :class:`CanaryAuditResult` (``kind = "certified"``);
    ``progress``: True or a :class:`~dpaudit.progress.Reporter` shows the fine-tuning steps on stderr;
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
    run = finetune_lm(model, train_set, cfg, seed=seed + 2, progress=progress)
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


# ------------------------------------------------------------------------------------------------------------------
# The user's own fine-tune: their base model directory, tokenizer, texts and fine-tuning function
# ------------------------------------------------------------------------------------------------------------------

#: Canaries of :func:`audit_lm_finetune`: the tokenizer's reserved ``<cK>`` tokens (``new-tokens``, when it has
#: enough of them) or ordinary vocabulary tokens drawn uniformly (``random-tokens``, any tokenizer); ``auto`` takes
#: the first that the tokenizer allows.
LM_TEXT_CANARIES = ("auto", "new-tokens", "random-tokens")
#: The most canaries and the longest secret :func:`audit_lm_finetune` plants.
MAX_LM_CANARIES = 100_000
MAX_SECRET_TOKENS = 256


def _text_canaries(tokenizer: Any, m: int, length: int, kind: str, seed: int) -> tuple[list[str], str]:
    """``m`` distinct canary texts of ``length`` tokens each (see :data:`LM_TEXT_CANARIES`) and the kind used. The
    texts are what the user's pipeline receives; they are drawn from the seed alone, before any coin."""
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    try:
        special = {str(t.content) for t in tokenizer.get_added_tokens_decoder().values() if t.special}
    except AttributeError:      # older tokenizers: every added token counts as special
        special = set(vocab) - set(tokenizer.get_vocab(with_added_tokens=False))
    reserved = sorted((w for w in vocab if w.startswith("<c") and w.endswith(">") and w[2:-1].isdigit()),
                      key=lambda w: int(w[2:-1]))
    if kind == "auto":
        kind = "new-tokens" if len(reserved) >= m * length else "random-tokens"
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xCA7C]))
    if kind == "new-tokens":
        if len(reserved) < m * length:
            raise ParameterError(f"The 'canaries' parameter of audit_lm_finetune must be at most "
                                 f"{len(reserved) // length} for new-token canaries of {length} tokens: the tokenizer "
                                 f"has {len(reserved)} reserved <cK> tokens. Got {m} instead.")
        own = rng.permutation(len(reserved))[: m * length].reshape(m, length)
        return [" ".join(reserved[i] for i in row) for row in own], kind
    pool = np.array(sorted(vocab[w] for w in vocab if w not in special and w not in reserved), dtype=np.int64)
    if pool.size < 16:
        raise ParameterError(f"The tokenizer has {pool.size} ordinary tokens; random-token canaries need at least 16.")
    seen: set[str] = set()
    out: list[str] = []
    tries = 0
    while len(out) < m:
        tries += 1
        if tries > 20 * m + 100:
            raise ParameterError(f"Could not draw {m} distinct random-token canaries of {length} tokens from this "
                                 "tokenizer (its decoded texts repeat); use a longer --secret-length.")
        text = tokenizer.decode([int(t) for t in rng.choice(pool, size=length)], skip_special_tokens=True).strip()
        if text and text not in seen:
            seen.add(text)
            out.append(text)
    return out, kind


def _run_record(record: Any, delta: float) -> tuple[dict[str, Any], float | None, str, tuple[str, ...]]:
    """What the user's fine-tuning function returned, read: ``(mechanism, accounted epsilon, source, notes)``.
    ``mechanism``: the single-phase Poisson-subsampled Gaussian the plan needs (empty when none applies)."""
    from dpaudit.training.lm.finetune import FinetuneResult

    if record is None:
        return {}, None, "none (the function returned None: a non-private run)", ()
    if isinstance(record, FinetuneResult):
        if record.noise_multiplier is None:
            return {}, None, "dpaudit finetune_lm (non-private)", ()
        mech = {"kind": "subsampled_gaussian", "sampling_rate": float(record.sampling_rate),
                "noise_multiplier": float(record.noise_multiplier), "steps": int(record.steps)}
        return mech, float(record.account(delta).epsilon), "dpaudit finetune_lm (FinetuneResult)", ()
    from dpaudit.integrations.opacus import OpacusRun, read_opacus

    if isinstance(record, OpacusRun):
        run = record
    elif isinstance(record, tuple) and len(record) == 2 and hasattr(record[0], "accountant"):
        run = read_opacus(record[0], data_loader=record[1])          # (PrivacyEngine, the loader it iterated)
    elif hasattr(record, "accountant") or hasattr(record, "history"):
        run = read_opacus(record)
    else:
        raise ParameterError("The fine-tuning function must return what ran: dpaudit's FinetuneResult, an Opacus "
                             "PrivacyEngine (or (engine, data_loader), or read_opacus(...)'s OpacusRun), or None for a "
                             f"non-private run. Got {type(record).__name__} instead.")
    notes = tuple(m for _, m in run.release_flags(delta))
    phases = [(s, q, t) for s, q, t in run.history if t > 0]
    mech: dict[str, Any] = {}
    if len(phases) == 1 and run.poisson_sampling is not False and run.sampling in (None, "poisson"):
        s, q, t = phases[0]
        mech = {"kind": "subsampled_gaussian", "sampling_rate": float(q), "noise_multiplier": float(s), "steps": int(t)}
    return mech, float(run.account(delta).epsilon), f"Opacus ({run.opacus_accountant} accountant history)", notes


def audit_lm_finetune(base_model: str | Path, texts: Any, train_fn: Any, *, train_fn_sha256: str | None = None,
                      canaries: int = 256, canary: str = "auto", secret_length: int = 6, delta: float = 1e-5,
                      confidence: float = 0.95, replicates: int = 11, max_length: int = 64, bos: bool = True,
                      seed: int = 0, device: str = "cpu", out: str | Path | None = None,
                      progress: Any = False) -> CanaryAuditResult:
    """Certified one-run canary audit of the user's own fine-tuning of their own causal LM.

    ``base_model``: the user's LM directory (checked and loaded as ``--lm`` is: :mod:`dpaudit.training.lm.files`);
    its tokenizer is the one the texts and canaries are tokenized with. ``texts``: the private texts (a ``.jsonl`` /
    text file, or a list of strings). ``train_fn``: the user's fine-tuning function, ``"FILE.py:NAME"`` (pinned:
    its sha256 is recorded, and checked against ``train_fn_sha256`` when given; see
    :mod:`dpaudit.training.usercode`) or, from Python, a callable::

        def finetune(model, tokenizer, texts, *, seed):   # trains `model` in place on `texts` (a list of str)
            ...
            return what_ran       # FinetuneResult | PrivacyEngine | (PrivacyEngine, data_loader) | OpacusRun | None

    It receives a copy of the base model, the ``tokenizers.Tokenizer``, and the private texts with the canaries
    whose fair coins came up heads inserted at seeded random places (its own pipeline tokenizes, batches, samples,
    clips and adds noise). ``canaries`` texts of ``secret_length`` tokens (:data:`LM_TEXT_CANARIES`) are drawn from
    the seed before the coins. After the run each canary is scored by its log-probability gain (fine-tuned minus
    base model, the ``bos`` convention of :func:`~dpaudit.training.lm.text.encode`, ``max_length`` tokens), and the
    one-run bound of Steinke, Nasr and Jagielski (2023) is certified. The accounting is read from what the function
    returned (the run's own record: dpaudit's step or Opacus's accountant history), and when that is one
    Poisson-subsampled Gaussian phase the analysis and guessing rule are planned on its ideal attack (a function of
    the run's record, fixed before any score is read), with the ideal-attack reference beside the bound.
    Returns a :class:`CanaryAuditResult`; ``out``: also ``canary_audit.json`` there (a claims file cites it with
    ``canary_audit = "..."``)."""
    import copy

    from dpaudit.attacks.canary import one_run_certified
    from dpaudit.progress import as_reporter
    from dpaudit.training.lm.files import check_lm_dir, load_lm
    from dpaudit.training.lm.logprobs import token_logprobs
    from dpaudit.training.lm.text import encode, read_texts
    from dpaudit.training.usercode import pin_code, run_pinned

    owner = "audit_lm_finetune"
    t0 = time.perf_counter()
    rep = as_reporter(progress, prefix="dpaudit lm audit")
    seed = check_int(seed, "seed", owner, low=0, high=2**32 - 1)
    m = check_int(canaries, "canaries", owner, low=2, high=MAX_LM_CANARIES)
    L = check_int(secret_length, "secret_length", owner, low=1, high=MAX_SECRET_TOKENS)
    d = check_float(delta, "delta", owner, low=0.0, high=1.0, low_open=True, high_open=True)
    conf = check_probability(confidence, "confidence", owner)
    reps = check_int(replicates, "replicates", owner, low=1, high=1001)
    max_len = check_int(max_length, "max_length", owner, low=2, high=1 << 20)
    from dpaudit.errors import check_bool, check_choice

    kind = check_choice(canary, "canary", owner, LM_TEXT_CANARIES)
    bos = check_bool(bos, "bos", owner)
    code_info: dict[str, Any]
    if isinstance(train_fn, (str, Path)):
        pinned = pin_code(str(train_fn), "--train-fn")
        if train_fn_sha256 is not None and pinned.sha256 != str(train_fn_sha256).lower():
            raise DataError(f"--train-fn {str(train_fn)!r}: its sha256 {pinned.sha256[:12]}... is not the expected "
                            f"{str(train_fn_sha256)[:12]}...; dpaudit runs only the code named with its digest.")
        code_info = {"train_fn": pinned.path.text, "file": str(pinned.file), "sha256": pinned.sha256}
        fn = None
    elif callable(train_fn):
        code_info = {"train_fn": getattr(train_fn, "__qualname__", type(train_fn).__name__), "sha256": None}
        fn = train_fn
    else:
        raise ParameterError(f"The 'train_fn' parameter of {owner} must be FILE.py:NAME or a function. Got "
                             f"{type(train_fn).__name__} instead.")
    private = read_texts(texts, "The private texts file") if isinstance(texts, (str, Path)) else list(texts)
    if len(private) < 2 or not all(isinstance(t, str) for t in private):
        raise DataError(f"{owner} needs at least 2 private texts (strings).")
    files = check_lm_dir(base_model, what="--base-model")        # every file checked before anything loads
    with rep.stage(f"loading {files.path}"):
        base, tok, _ = load_lm(files, device=device)
    can_texts, kind = _text_canaries(tok, m, L, kind, seed)
    clash = set(can_texts) & set(private)
    if clash:
        raise DataError(f"A canary text equals a private text ({next(iter(clash))[:40]!r}); use another --seed.")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xC011]))
    inc = rng.random(m) < 0.5                               # the fair coins, drawn after the canaries
    slots = rng.integers(0, len(private) + 1, size=m)       # where each included canary goes
    train_texts = list(private)
    for i in sorted(np.flatnonzero(inc), key=lambda i: (-int(slots[i]), -int(i))):
        train_texts.insert(int(slots[i]), can_texts[i])
    if fn is None:
        fn = run_pinned(pinned, "--train-fn")
    model = copy.deepcopy(base)
    with rep.stage(f"fine-tuning with {code_info['train_fn']} on {len(private)} texts + {int(inc.sum())} canaries"):
        with warnings.catch_warnings():
            # Opacus's and torch's notices about a loop that is fine for an audit (its secure-RNG reminder; the
            # full backward hook on an input without gradient) stay off the user's terminal; the user's own remain
            warnings.filterwarnings("ignore", message="Secure RNG turned off")
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            warnings.filterwarnings("ignore", message="Optimal order is the (largest|smallest) alpha")
            record = fn(model, tok, train_texts, seed=seed)
    model.eval()
    mechanism, accounted, source, run_notes = _run_record(record, d)
    seqs = encode(tok, can_texts, max_length=max_len, bos=bos)
    if any(s.size < 2 for s in seqs):
        raise DataError("A canary encodes to fewer than 2 tokens; use a longer --secret-length.")
    with rep.stage("scoring the canaries"):
        after = token_logprobs(model, seqs, device=device)
        before = token_logprobs(base, seqs, device=device)
    from dpaudit.attacks.lm_signals import total_logprob

    scores = total_logprob(after.logp, after.offsets) - total_logprob(before.logp, before.offsets)
    notes: list[str] = []
    if mechanism:
        bound, plan = one_run_with_plan(scores, inc, mechanism, delta=d, confidence=conf, score="canary-logp-gain",
                                        calibrated=False, replicates=reps, seed=seed)
        bound = replace(bound, curve_test=accounted_curve_test(scores, inc, mechanism, plan, confidence=conf, delta=d))
        notes.append(plan_note(plan, reps) + " The accounted parameters are those the run recorded.")
    else:
        bound = one_run_certified(scores, inc, delta=d, confidence=conf, score="canary-logp-gain")
        notes.append("no single Poisson-subsampled Gaussian phase was recorded: no planned rule and no ideal reference "
                     "(equal in/out guesses).")
    settings: dict[str, Any] = {
        "target": "the user's own fine-tuning of their causal LM", "audit": "one-run", "canary": kind,
        "canaries": m, "secret_length": L, "included": int(inc.sum()), "score": "canary-logp-gain", "delta": d,
        "confidence": conf, "seed": seed, "num_private_texts": len(private), "max_length": max_len, "bos": bos,
        "base_model": {"path": str(files.path), "model_type": files.model_type, "sha256": dict(files.sha256)},
        "train_fn": code_info, "accounting_source": source, "ideal_replicates": reps,
        "canary_auc_estimate": auc(scores[inc], scores[~inc]),
        "canary_tpr_at_1pct_fpr_estimate": tpr_at_fpr(scores[inc], scores[~inc], 0.01)}
    notes.extend(run_notes)
    notes.append("Canaries: texts drawn from the seed before the coins, each inserted into the fine-tuning texts by a "
                 "fair coin; scores: log-probability of each canary under the fine-tuned model minus under the base "
                 "model; the coins are read only to certify. The AUC / TPR figures in the settings are estimates.")
    result = CanaryAuditResult(bound, accounted, mechanism, settings, round(time.perf_counter() - t0, 2), tuple(notes))
    if out is not None:
        from dpaudit._io import make_output_dir

        write_json(make_output_dir(out, "lm canary audit") / "canary_audit.json", to_dict(result))
    return result

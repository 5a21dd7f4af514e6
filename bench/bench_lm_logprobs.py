"""Benchmark of the LM log-probability pass (issue 35's target: >= 5x on CPU over a plain per-sequence transformers
loop, through batching and caching).

Arms, in one process on the same model and texts (a tiny GPT-2 built from a config, word-level tokenizer, synthetic
sentences; nothing downloaded):

* ``loop``: the plain way -- for each text, ``model(ids[None])`` under ``torch.no_grad``, ``log_softmax``, gather the
  token log-probabilities; one such loop per attack that needs them (loss, zlib, Min-K%, Min-K%++, and the
  reference ratio's target side: 5 attacks; Min-K%++ also needs the vocabulary moments, computed in its loop);
* ``sorted``: the good plain way -- texts sorted by length, padded batches of a fixed number of sequences with an
  attention mask, under ``torch.no_grad``; every batch size of ``--sorted-batches`` is run and the fastest is the
  baseline (the best sorted padded-batch loop a user could have tuned);
* ``pass``: :func:`dpaudit.training.lm.logprobs.token_logprobs` once (padded batches of one width each, the batch
  size chosen from the measured rate, ``inference_mode``, Min-K%++ moments in the same pass); the 5 attacks then
  read the cache. ``pass_8192``: the same pass at the old fixed 8,192-token batches.

Reported: the single-pass ratios (per-sequence loop once vs pass once; best sorted loop vs pass once) and the
end-to-end ratio (5 loops vs one pass + 4 cache hits), with the 1-minute load average. Also the estimated cost of the same pass on a 1B-parameter model (see
``estimate_1b``). Usage: python bench/bench_lm_logprobs.py [--texts 2000] [--repeats 3] [--threads 1] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dpaudit._io import write_json  # noqa: E402

ATTACKS = 5


def loop_logprobs(model, seqs, moments: bool = False, device: str = "cpu"):
    import torch

    out = []
    with torch.no_grad():
        for s in seqs:
            x = torch.from_numpy(s)[None].to(device)
            lq = torch.log_softmax(model(input_ids=x).logits[0, :-1].float(), -1)
            lp = lq.gather(-1, x[0, 1:, None]).squeeze(-1)
            if moments:
                p = lq.exp()
                mu = (p * lq).sum(-1)
                _ = ((p * lq.square()).sum(-1) - mu.square()).clamp_min(0).sqrt()
            out.append(lp.cpu().numpy())
    return out


def sorted_loop(model, seqs, batch: int, device: str = "cpu"):
    """Sorted by length, ``batch`` sequences a padded batch (to the batch's longest), with an attention mask."""
    import torch

    order = np.argsort([len(s) for s in seqs], kind="stable")
    with torch.no_grad():
        for i in range(0, len(order), batch):
            idx = order[i:i + batch]
            L = max(len(seqs[k]) for k in idx)
            ids = torch.zeros(len(idx), L, dtype=torch.long)
            mask = torch.zeros(len(idx), L, dtype=torch.long)
            for r, k in enumerate(idx):
                ids[r, :len(seqs[k])] = torch.from_numpy(seqs[k])
                mask[r, :len(seqs[k])] = 1
            ids, mask = ids.to(device), mask.to(device)
            lq = torch.log_softmax(model(input_ids=ids, attention_mask=mask).logits[:, :-1].float(), -1)
            p = lq.exp()
            mu = (p * lq).sum(-1)
            _ = (lq.gather(-1, ids[:, 1:, None]).squeeze(-1).cpu(),
                 ((p * lq.square()).sum(-1) - mu.square()).clamp_min(0).cpu())


def estimate_1b(tokens: int, flops_per_s: float) -> dict:
    """Forward cost ~ 2 FLOPs per parameter per token (Kaplan et al. 2020, C_forward ~ 2N), plus the vocabulary
    softmax and Min-K%++ moments (~ 5 V FLOPs per token, V = 128k: < 0.1% of 2N at N = 1e9)."""
    N, V = 1e9, 128_000
    flops = tokens * (2 * N + 5 * V)
    return {"params": N, "tokens": tokens, "flops": flops, "cpu_seconds_at_measured_rate": flops / flops_per_s,
            "h200_seconds_at_30pct_of_989_tflops_bf16": flops / (0.3 * 989e12),
            "how": "FLOPs = tokens x (2 x params + 5 x vocab); CPU rate: the FLOP/s the batched pass reached on the "
                   "bench model (2 x params x tokens / seconds; pessimistic for 1B: the small model is overhead-bound, "
                   "a 1B model's matmuls run nearer the CPU's peak); GPU: 30% of the H200's dense bf16 peak (989 TFLOP/s)."}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--texts", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--loop-texts", type=int, default=None,
                    help="time the per-sequence loop on this many texts and scale (a slow arm on a large corpus)")
    ap.add_argument("--sorted-batches", type=int, nargs="+", default=[8, 16, 32, 64, 128])
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    import torch

    torch.set_num_threads(a.threads)
    from dpaudit.training.lm.logprobs import clear_cache, token_logprobs
    from dpaudit.training.lm.text import encode, synthetic_corpus, tiny_lm, train_tokenizer

    texts = synthetic_corpus(a.texts, seed=0)
    tok = train_tokenizer(texts)
    model = tiny_lm(tok.get_vocab_size(), seed=0, n_layer=a.n_layer, n_embd=a.n_embd, n_head=a.n_head).to(a.device)
    dev = a.device
    sync = (lambda: torch.cuda.synchronize()) if dev.startswith("cuda") else (lambda: None)
    seqs = encode(tok, texts)
    tokens = int(sum(s.size for s in seqs))
    params = sum(p.numel() for p in model.parameters())
    loop_once, loops_all, pass_once, pass_all, pass_8192 = [], [], [], [], []
    sorted_s: dict[int, list[float]] = {b: [] for b in a.sorted_batches}
    lseqs = seqs if a.loop_texts is None else seqs[: a.loop_texts]
    scale = len(seqs) / len(lseqs)                     # the per-sequence loop's time is linear in the texts

    def timed(fn) -> float:
        sync()
        t = time.perf_counter()
        fn()
        sync()
        return time.perf_counter() - t

    for r in range(a.repeats):
        for b in a.sorted_batches:
            sorted_s[b].append(timed(lambda: sorted_loop(model, seqs, b, dev)))
        clear_cache()
        pass_8192.append(timed(lambda: token_logprobs(model, seqs, batch_tokens=8192, device=dev)))
        loop_once.append(scale * timed(lambda: loop_logprobs(model, lseqs, device=dev)))
        loops_all.append(scale * timed(lambda: [loop_logprobs(model, lseqs, moments=(k == 3), device=dev)
                                                for k in range(ATTACKS)]))
        clear_cache()
        pass_once.append(timed(lambda: token_logprobs(model, seqs, device=dev)))
        clear_cache()
        pass_all.append(timed(lambda: [token_logprobs(model, seqs, model_digest=f"bench-{r}", device=dev)
                                       for _ in range(ATTACKS)]))
    med = lambda v: float(np.median(v))  # noqa: E731
    rate = 2 * params * tokens / med(pass_once)
    sorted_med = {b: med(v) for b, v in sorted_s.items()}
    best_b = min(sorted_med, key=sorted_med.get)
    res = {"device": torch.cuda.get_device_name(0) if dev.startswith("cuda") else "cpu", "machine": platform.machine(), "threads": a.threads, "load_avg_1min": os.getloadavg()[0],
           "texts": a.texts, "tokens": tokens, "model_params": params,
           "loop_once_s": med(loop_once), "pass_once_s": med(pass_once), "ratio_single_pass": med(loop_once) / med(pass_once),
           "sorted_loop_s": sorted_med, "best_sorted_batch": best_b, "best_sorted_loop_s": sorted_med[best_b],
           "ratio_vs_best_sorted_loop": sorted_med[best_b] / med(pass_once), "pass_8192_tokens_s": med(pass_8192),
           "ratio_vs_pass_8192": med(pass_8192) / med(pass_once),
           "loop_5_attacks_s": med(loops_all), "pass_plus_cache_5_attacks_s": med(pass_all),
           "ratio_5_attacks": med(loops_all) / med(pass_all), "measured_flops_per_s": rate,
           "estimate_1b_for_these_tokens": estimate_1b(tokens, rate * 1.0)}
    for k, v in res.items():
        print(f"{k}: {v}")
    if a.out:
        write_json(a.out, res)


if __name__ == "__main__":
    main()

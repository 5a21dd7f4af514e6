"""A tiny causal LM world for the LM tests, built once per session in-process (nothing downloaded): a synthetic
corpus, a word-level tokenizer trained on it, a 2-layer GPT-2 fine-tuned WITHOUT DP on the members, two reference
LMs in the paired layout (each trained on one half of the targets), saved as local LM directories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest


@pytest.fixture(scope="session")
def lm_world(tmp_path_factory) -> dict[str, Any]:
    from dpaudit.attacks.references import paired_inclusion
    from dpaudit.training.lm.finetune import LmTrainConfig, finetune_lm
    from dpaudit.training.lm.text import encode, save_lm, synthetic_corpus, tiny_lm, train_tokenizer

    root = tmp_path_factory.mktemp("lm_world")
    corpus = synthetic_corpus(360, seed=0)
    members, nonmembers, population = corpus[:120], corpus[120:240], corpus[240:]
    tok = train_tokenizer(corpus)
    V = tok.get_vocab_size()
    seqs = encode(tok, corpus)
    cfg = LmTrainConfig(steps=150, batch_size=16, lr=3e-3)
    target = tiny_lm(V, seed=0)
    finetune_lm(target, seqs[:120], cfg, seed=0)
    save_lm(target, tok, root / "target")
    inc = paired_inclusion(240, 2, seed=1)
    refs = []
    for j in range(2):
        m = tiny_lm(V, seed=0)
        finetune_lm(m, [seqs[i] for i in np.flatnonzero(inc[:, j])], cfg, seed=10 + j)
        refs.append(save_lm(m, tok, root / f"ref{j}"))
    for name, texts in (("members", members), ("nonmembers", nonmembers)):
        (root / f"{name}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    (root / "population.txt").write_text("\n".join(population) + "\n")
    np.save(root / "reference_in.npy", inc)
    return {"root": root, "target": root / "target", "refs": refs, "tokenizer": tok, "corpus": corpus,
            "inclusion": inc}

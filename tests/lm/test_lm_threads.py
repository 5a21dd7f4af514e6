"""Same seed, same figures: LM fine-tuning (private and not) and the LM canary audit give identical numbers at one
and two intra-op threads (issue 46: the audit's bound moved with the thread count because the non-private
pre-training's batch gradient summed differently)."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def threads():
    import torch

    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


def _audit():
    from dpaudit.auditing.lm_audit import run_lm_canary_audit
    from dpaudit.serial import to_dict

    r = run_lm_canary_audit(epsilon=8.0, canaries=32, private_texts=48, steps=6, batch_size=16, pretrain_steps=12,
                            replicates=1, seed=1)
    d = to_dict(r)
    d.pop("elapsed_seconds", None)
    return d


def test_lm_audit_and_finetune_identical_at_one_and_two_threads(threads):
    import torch

    from dpaudit.training.lm.finetune import LmTrainConfig, finetune_lm
    from dpaudit.training.lm.text import encode, synthetic_corpus, tiny_lm, train_tokenizer

    texts = synthetic_corpus(64, seed=2)
    tok = train_tokenizer(texts)
    seqs = encode(tok, texts)
    got = {}
    for n in (1, 2):
        threads(n)
        assert torch.get_num_threads() == n
        weights = []
        for sigma in (None, 1.0):             # plain minibatch steps and DP steps
            m = tiny_lm(tok.get_vocab_size(), seed=0)
            finetune_lm(m, seqs, LmTrainConfig(steps=4, batch_size=32, noise_multiplier=sigma), seed=3)
            weights.append(np.concatenate([v.numpy().ravel() for v in m.state_dict().values()]))
        got[n] = (weights, _audit())
        assert torch.get_num_threads() == n    # the one-thread step put the count back
    for a, b in zip(got[1][0], got[2][0]):
        assert np.array_equal(a, b)
    assert got[1][1] == got[2][1]

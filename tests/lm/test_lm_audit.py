"""Certified one-run canary audits of DP fine-tuning of a tiny causal LM, exposure of random secrets, and the DP
fine-tuning step itself."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from dpaudit.attacks.lm_canary import exposure

_SMALL = dict(canaries=64, private_texts=64, steps=12, batch_size=16, pretrain_steps=20, replicates=3)


def test_exposure_matches_ranks_by_hand():
    cands = np.array([-1.0, -2.0, -3.0, -4.0])
    # secret -1 is the model's first guess: rank 1, exposure log2(4) = 2; -4 is last: rank 4, exposure 0
    np.testing.assert_allclose(exposure([-1.0, -3.0, -4.0], cands, space_size=4, exhaustive=True), [2.0, 0.415037, 0.0],
                               atol=1e-6)
    # sampled candidates: rank estimated as 1 + |R| * (fraction at least as likely)
    est = exposure([-2.5], cands, space_size=1000, exhaustive=False)
    assert est[0] == pytest.approx(math.log2(1000) - math.log2(1 + 1000 * 0.5))


@pytest.mark.parametrize("lora", [4, pytest.param(0, marks=pytest.mark.slow)])
def test_dp_lm_audit_is_certified_and_below_the_accounting(tmp_path, lora):
    from dpaudit.auditing.lm_audit import run_lm_canary_audit

    r = run_lm_canary_audit(epsilon=8.0, lora_rank=lora, seed=0, out=tmp_path, **_SMALL)
    assert r.bound.kind == "certified"
    assert r.accounted_epsilon is not None and r.accounted_epsilon <= 8.0 + 1e-6
    assert 0.0 <= r.bound.epsilon <= r.accounted_epsilon
    assert r.bound.ideal_epsilon is not None and r.bound.ideal_epsilon >= 0.0
    assert r.mechanism["kind"] == "subsampled_gaussian" and r.mechanism["steps"] == 12
    assert r.settings["trainable_parameters"] < (10_000 if lora else 1e9)
    saved = json.loads((tmp_path / "canary_audit.json").read_text())
    assert saved["kind"] == "certified" and saved["settings"]["lora_rank"] == lora


def test_finetune_is_seeded_and_private_run_is_accounted():
    from dpaudit.training.lm.finetune import LmTrainConfig, finetune_lm
    from dpaudit.training.lm.text import encode, synthetic_corpus, tiny_lm, train_tokenizer

    texts = synthetic_corpus(40, seed=3)
    tok = train_tokenizer(texts)
    seqs = encode(tok, texts)
    cfg = LmTrainConfig(steps=4, batch_size=8, noise_multiplier=1.0, lora_rank=2)
    a = finetune_lm(tiny_lm(tok.get_vocab_size(), seed=0), seqs, cfg, seed=5)
    b = finetune_lm(tiny_lm(tok.get_vocab_size(), seed=0), seqs, cfg, seed=5)
    for (k, x), (_, y) in zip(a.model.state_dict().items(), b.model.state_dict().items()):
        assert np.array_equal(x.numpy(), y.numpy()), k
    acc = a.account(1e-5)
    assert acc.epsilon > 0 and a.event().sampling_rate == pytest.approx(8 / 40)


def test_finetune_ledger_headline_is_the_smallest_valid_route():
    from dpaudit.accountants.ledger import PrivacyLedger
    from dpaudit.training.lm.finetune import FinetuneResult

    # the docs' run: 120 texts, expected batch 16, 100 steps, sigma 1.2: RDP 7.642, PLD 6.895 (issue 46)
    run = FinetuneResult(None, 120, 16 / 120, 1.2, 100, 0)
    routes = {s.route: s.epsilon for s in run.account(1e-5).statements}
    assert routes["rdp"] == pytest.approx(7.642, abs=1e-3) and routes["pld"] == pytest.approx(6.895, abs=1e-3)
    led = PrivacyLedger.from_dict(run.ledger(1e-5).to_dict())
    assert led.accountant == "pld" and led.overall().epsilon == pytest.approx(routes["pld"], rel=1e-9)
    assert led.overall().epsilon == pytest.approx(run.account(1e-5).epsilon, rel=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("epsilon", [4.0, 8.0])
@pytest.mark.parametrize("lora", [0, 4])
def test_dp_lm_audit_sound_over_seeds(epsilon, lora):
    """The certified bound never exceeds the accounted epsilon over seeds (full fine-tuning and LoRA)."""
    from dpaudit.auditing.lm_audit import run_lm_canary_audit

    for seed in range(3):
        r = run_lm_canary_audit(epsilon=epsilon, lora_rank=lora, seed=seed, canaries=128, private_texts=128,
                                steps=40, batch_size=32, pretrain_steps=60, replicates=5)
        assert r.bound.epsilon <= r.accounted_epsilon <= epsilon + 1e-6, (seed, r.summary())


@pytest.mark.slow
def test_lm_audit_without_dp_and_exposure():
    from dpaudit.auditing.lm_audit import run_lm_canary_audit

    r = run_lm_canary_audit(epsilon=None, canary="random-secret", secret_length=3, canaries=128, private_texts=128,
                            steps=150, batch_size=32, pretrain_steps=60, exposure=True, seed=0)
    assert r.accounted_epsilon is None
    assert r.settings["exposure_kind"] == "exact"
    assert r.settings["exposure_included_mean"] > r.settings["exposure_excluded_mean"]
    assert r.settings["canary_auc_estimate"] > 0.6


@pytest.mark.slow
def test_lm_multi_run_audit_is_sound():
    from dpaudit.auditing.lm_audit import run_lm_multi_run_audit

    r = run_lm_multi_run_audit(epsilon=8.0, models=16, private_texts=64, steps=10, batch_size=16, pretrain_steps=20,
                               replicates=3, seed=0)
    assert r.bound.audit == "multi-run" and r.bound.kind == "certified"
    assert 0.0 <= r.bound.epsilon <= r.accounted_epsilon <= 8.0 + 1e-6
    assert r.bound.ideal_epsilon is not None

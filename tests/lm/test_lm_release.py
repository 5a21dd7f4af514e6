"""LM release bundles end to end: `dpaudit release make --lm` on a tiny GPT-2 fine-tuned without DP, `dpaudit attack
--compare` with every sequence-level attack, the scores-only form, and the one log-probability pass."""

from __future__ import annotations

import json

import numpy as np
import pytest


def test_release_make_and_compare_separates_members(lm_world, cli, tmp_path):
    w = lm_world["root"]
    rel = tmp_path / "rel"
    code, out, err = cli(["release", "make", "--out", rel, "--lm", lm_world["target"], "--members", w / "members.jsonl",
                          "--nonmembers", w / "nonmembers.jsonl", "--population-texts", w / "population.txt",
                          "--reference-lm", lm_world["refs"][0], "--reference-lm", lm_world["refs"][1],
                          "--reference-in", w / "reference_in.npy", "--claim", "epsilon=8", "--claim", "delta=1e-5",
                          "--max-length", "64"])
    assert code == 0, err
    assert "120 members, 120 non-members" in out
    code, out, err = cli(["attack", rel, "--compare", "--per-record", "--bootstrap", "50", "--out", tmp_path / "att",
                          "--quiet"])
    assert code == 0, err
    comp = json.loads((tmp_path / "att" / "comparison.json").read_text())
    res = comp["results"]
    for name in ("loss", "zlib", "min-k", "min-k++", "reference", "seq-lira-online", "seq-rmia-online",
                 "seq-lira-offline-fixed"):
        assert name in res, (name, comp.get("skipped"))
    auc = {k: v["metrics"]["auc"] for k, v in res.items()}
    # trained without DP for 150 steps on 120 sentences: the loss attack separates members
    assert auc["loss"] > 0.8, auc
    assert auc["reference"] > 0.7, auc
    assert (tmp_path / "att" / "per_record.csv").is_file()
    assert "min-k++" in out and "loss" in out
    # the log-probabilities were computed once per model and text set and cached on disk
    assert len(list((tmp_path / "att" / "cache").glob("logprobs-*.npz"))) == 6


def test_scores_only_lm_release(lm_world, cli, tmp_path):
    from dpaudit.training.lm.files import load_lm, lm_digest
    from dpaudit.training.lm.logprobs import token_logprobs
    from dpaudit.training.lm.text import encode

    model, tok, files = load_lm(lm_world["target"])
    texts = lm_world["corpus"][:240]
    tl = token_logprobs(model, encode(tok, texts), model_digest=lm_digest(files))
    member = np.r_[np.ones(120, bool), np.zeros(120, bool)]
    np.savez(tmp_path / "s.npz", offsets=tl.offsets, logp=tl.logp, mu=tl.mu, sigma=tl.sigma, member=member)
    code, out, err = cli(["release", "make", "--out", tmp_path / "rel", "--lm-scores", tmp_path / "s.npz",
                          "--claim", "epsilon=inf", "--claim", "delta=1e-5"])
    assert code == 0, err
    code, out, err = cli(["attack", tmp_path / "rel", "--compare", "--bootstrap", "0", "--out", tmp_path / "a", "--quiet",
                          "--min-k", "0.5", "--min-k-rounding", "ceil"])
    assert code == 0, err
    comp = json.loads((tmp_path / "a" / "comparison.json").read_text())
    res = comp["results"]
    assert set(res) == {"loss", "min-k", "min-k++"}
    assert res["loss"]["metrics"]["auc"] > 0.8
    # k and its rounding reach the signal (CLI and Python agree)
    from dpaudit.attacks.lm_signals import min_k_score
    from dpaudit.attacks.metrics import auc

    s = min_k_score(tl.logp, tl.offsets, k=0.5, rounding="ceil")
    assert comp["settings"]["k"] == 0.5 and comp["settings"]["min_k_rounding"] == "ceil"
    assert res["min-k"]["metrics"]["auc"] == pytest.approx(auc(s[member], s[~member]))
    code, out, err = cli(["attack", tmp_path / "rel", "--compare", "--out", tmp_path / "a2", "--min-k", "0"])
    assert code == 2 and "--min-k" in err
    # a scores file with a wrong shape is refused cleanly
    np.savez(tmp_path / "bad.npz", offsets=tl.offsets, logp=tl.logp[:-1], member=member)
    code, out, err = cli(["release", "make", "--out", tmp_path / "rel2", "--lm-scores", tmp_path / "bad.npz",
                          "--claim", "epsilon=1", "--claim", "delta=1e-5"])
    assert code == 2 and "dpaudit: error:" in err and "'logp'" in err


def test_batched_pass_matches_a_per_sequence_loop_and_caches(lm_world, tmp_path):
    import torch

    from dpaudit.training.lm.files import load_lm, lm_digest
    from dpaudit.training.lm.logprobs import clear_cache, token_logprobs
    from dpaudit.training.lm.text import encode

    model, tok, files = load_lm(lm_world["target"])
    seqs = encode(tok, lm_world["corpus"][:40])
    tl = token_logprobs(model, seqs, batch_tokens=300)
    with torch.no_grad():
        for i in (0, 7, 39):
            lq = model(torch.tensor(seqs[i][None])).logits[0, :-1].double().log_softmax(-1)
            ref = lq.gather(-1, torch.tensor(seqs[i][1:, None])).squeeze(-1).numpy()
            mu = (lq.exp() * lq).sum(-1).numpy()
            sd = ((lq.exp() * lq.square()).sum(-1).numpy() - mu ** 2) ** 0.5
            np.testing.assert_allclose(tl.rows()[i], ref, atol=1e-4)
            np.testing.assert_allclose(tl.rows("mu")[i], mu, atol=1e-4)
            np.testing.assert_allclose(tl.rows("sigma")[i], sd, atol=1e-3)
    clear_cache()
    a = token_logprobs(model, seqs, model_digest=lm_digest(files), cache_dir=tmp_path)
    clear_cache()
    again = token_logprobs(model, seqs, model_digest=lm_digest(files), cache_dir=tmp_path)
    assert np.array_equal(a.logp, again.logp) and len(list(tmp_path.glob("logprobs-*.npz"))) == 1  # from the disk
    clear_cache()
    b = token_logprobs(model.to(torch.float64), seqs, model_digest=lm_digest(files), cache_dir=tmp_path)
    # the same files in float64 compute other numbers: their own cache entry, not the float32 one
    assert len(list(tmp_path.glob("logprobs-*.npz"))) == 2 and not np.array_equal(a.logp, b.logp)
    np.testing.assert_allclose(b.logp, a.logp, atol=1e-4)
    model.to(torch.float32)
    with pytest.raises(Exception, match="token ids outside the vocabulary"):
        token_logprobs(model, [np.array([2, 10 ** 6])])


def test_pass_gives_the_same_bits_at_every_batch_size(lm_world):
    """The batch size (given, or chosen from the measured rate) changes the time, never the numbers: each sequence
    is padded to a width of its own length, batches with and without padding apart (issue 46: a batch without
    padding, or a narrow one, rounded otherwise)."""
    from dpaudit.training.lm.files import load_lm
    from dpaudit.training.lm.logprobs import _Budget, clear_cache, padded_width, token_logprobs
    from dpaudit.training.lm.text import encode

    model, tok, _ = load_lm(lm_world["target"])
    seqs = encode(tok, lm_world["corpus"][:120], max_length=64)
    seqs += [seqs[0][:2], np.concatenate(seqs[1:12])[:64]]     # a 2-token sequence and one at the context
    clear_cache()
    ref = token_logprobs(model, seqs, batch_tokens=1 << 20)
    for bt in (16, 100, 700, None):
        got = token_logprobs(model, seqs, batch_tokens=bt)
        for name in ("logp", "mu", "sigma"):
            assert np.array_equal(getattr(got, name), getattr(ref, name)), (bt, name)
    assert [padded_width(n, 512) for n in (2, 4, 5, 8, 9, 11, 12, 21, 63, 65, 300)] == [4, 4, 8, 8, 12, 12, 12, 21,
                                                                                         63, 66, 304]
    assert padded_width(63, 64) == 63 and padded_width(64, 64) == 64 and padded_width(70, 64) == 64
    b = _Budget(None)                          # doubles while the rate grows, then keeps the best
    for tokens, seconds in ((256, 1.0), (512, 1.0), (1024, 3.0)):
        b.observe(tokens, tokens, seconds)
    assert b.done and b.tokens == 512 and [t for t, _ in b.tried] == [256, 512, 1024]

"""The sequence-level signals against the papers' formulas written out here, on random token statistics."""

from __future__ import annotations

import numpy as np
import pytest

from dpaudit.attacks.lm_signals import compare_lm, lm_scores, reference_ratio_score
from dpaudit.attacks.metrics import auc
from dpaudit.errors import DataError


def _rows(rng, n):
    lens = rng.integers(3, 12, size=n)
    offsets = np.r_[0, np.cumsum(lens)]
    T = offsets[-1]
    return offsets, -rng.gamma(2.0, 1.0, size=T), -rng.gamma(2.0, 1.0, size=T) - 1, rng.uniform(0.5, 2.0, size=T)


def test_scores_match_the_formulas():
    rng = np.random.default_rng(0)
    offsets, logp, mu, sigma = _rows(rng, 30)
    zl = rng.integers(20, 60, size=30)
    R = rng.normal(-30, 5, size=(30, 3))
    inc = rng.random((30, 3)) < 0.5
    got = lm_scores(logp, offsets, mu=mu, sigma=sigma, zlib_bytes=zl, reference_totals=R, reference_in=inc, k=0.3)
    for i in range(30):
        x = logp[offsets[i]:offsets[i + 1]]
        z = (x - mu[offsets[i]:offsets[i + 1]]) / sigma[offsets[i]:offsets[i + 1]]
        k = max(1, int(0.3 * x.size))                                      # int(k n), as published
        assert got["loss"][i] == pytest.approx(x.mean())                        # minus the mean token loss
        assert got["zlib"][i] == pytest.approx(x.mean() / zl[i])                # Carlini et al. 2021
        assert got["min-k"][i] == pytest.approx(np.sort(x)[:k].mean())          # Shi et al. 2024
        assert got["min-k++"][i] == pytest.approx(np.sort(z)[:k].mean())        # Zhang et al. 2024, eq. 3
        out = ~inc[i]
        want = x.sum() - R[i, out].mean() if out.any() else np.nan
        np.testing.assert_allclose(got["reference"][i], want)
    assert np.isnan(reference_ratio_score([1.0], [[2.0]], [[True]]))[0]


def test_compare_lm_metrics_and_refusals():
    rng = np.random.default_rng(1)
    offsets, logp, mu, sigma = _rows(rng, 80)
    member = np.r_[np.ones(40, bool), np.zeros(40, bool)]
    logp = logp.copy()
    for i in range(40):                                  # members more likely
        logp[offsets[i]:offsets[i + 1]] += 0.5
    R = rng.normal(-30, 5, size=(80, 4))
    comp = compare_lm(logp, offsets, member, mu=mu, sigma=sigma, reference_totals=R,
                      reference_in=rng.random((80, 4)) < 0.5, population_total=rng.normal(-30, 5, 50),
                      population_reference_totals=rng.normal(-30, 5, (50, 4)), n_bootstrap=0)
    s = lm_scores(logp, offsets)["loss"]
    assert comp.results["loss"].metrics.auc == pytest.approx(auc(s[member], s[~member]))
    assert {"seq-lira-online", "seq-rmia-online", "min-k++"} <= set(comp.results)
    assert "zlib" in comp.skipped and comp.records is not None and len(comp.records) == 80
    with pytest.raises(DataError, match="at least 2 members"):
        compare_lm(logp, offsets, np.r_[True, np.zeros(79, bool)])
    with pytest.raises(DataError, match="'logp' must hold"):
        compare_lm(logp[:-1], offsets, member)


# --- the signals as defined, on texts cut to max_length, against an independent implementation ------------------

def _independent(model_dir, texts, *, max_length, bos, k):
    """Loss, zlib, Min-K% and Min-K%++ written from the papers and their reference code, with transformers and
    tokenizers only: the text's tokens (BOS first or not) cut to max_length; the zlib length of the words kept
    (word-level tokenizer: one token a word); Min-K% over int(k * n) tokens, as the published code does."""
    import zlib

    import torch
    from tokenizers import Tokenizer
    from transformers import GPT2LMHeadModel

    model = GPT2LMHeadModel.from_pretrained(str(model_dir)).eval()
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    out = {"loss": [], "zlib": [], "min-k": [], "min-k++": []}
    for t in texts:
        words = tok.encode(t, add_special_tokens=False).ids
        ids = ([tok.token_to_id("[BOS]")] if bos else []) + words
        ids = ids[:max_length]
        kept_words = len(ids) - (1 if bos else 0)
        kept_text = " ".join(t.split()[:kept_words])
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, :-1].double()
        lq = torch.log_softmax(logits, -1)
        x = lq[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].numpy()
        p = lq.exp()
        mu = (p * lq).sum(-1)
        sd = ((p * lq ** 2).sum(-1) - mu ** 2).sqrt()
        z = (x - mu.numpy()) / sd.numpy()
        n_k = int(len(x) * k)                       # k_length = int(len(token_probs) * ratio)
        out["loss"].append(x.mean())
        out["zlib"].append(x.mean() / len(zlib.compress(kept_text.encode())))
        out["min-k"].append(np.sort(x)[:n_k].mean())
        out["min-k++"].append(np.sort(z)[:n_k].mean())
    return {k_: np.array(v) for k_, v in out.items()}


@pytest.mark.parametrize("bos", [True, False])
def test_signals_on_truncated_texts_match_an_independent_implementation(lm_world, tmp_path, bos):
    from dpaudit.auditing.lm_release import compare_lm_release, make_lm_release

    corpus = lm_world["corpus"]
    members, nonmembers = corpus[:20], corpus[120:140]
    rel = make_lm_release(tmp_path / "rel", claim=["epsilon=8", "delta=1e-5"], lm=lm_world["target"],
                          members=members, nonmembers=nonmembers, max_length=8, bos=bos)
    comp = compare_lm_release(rel, k=0.5, n_bootstrap=0)
    want = _independent(lm_world["target"], members + nonmembers, max_length=8, bos=bos, k=0.5)
    cut = sum(len(t.split()) + bos > 8 for t in members + nonmembers)
    assert cut >= 25                                  # most texts are cut: the zlib length must be the cut text's
    for name, w in want.items():
        np.testing.assert_allclose(comp.records.scores[name], w, rtol=2e-5, atol=1e-6, err_msg=name)
    import zlib
    whole = want["loss"] / [len(zlib.compress(t.encode())) for t in members + nonmembers]
    assert np.abs(whole - comp.records.scores["zlib"]).max() > 1e-3        # the whole text's length would differ
    assert comp.settings["min_k_rounding"] == "floor" and comp.settings["k"] == 0.5


def test_min_k_rounding_conventions():
    from dpaudit.attacks.lm_signals import min_k_count, min_k_score

    # the published code's int(k * n), at least one token; ceil on request
    assert [min_k_count(n, 0.2) for n in (1, 4, 5, 7, 10, 11)] == [1, 1, 1, 1, 2, 2]
    assert [min_k_count(n, 0.2, "ceil") for n in (1, 4, 5, 7, 10, 11)] == [1, 1, 1, 2, 2, 3]
    assert min_k_count(10, 0.7) == int(0.7 * 10) == 7 and min_k_count(3, 1.0) == 3
    x = np.array([-5.0, -1.0, -3.0, -2.0, -4.0, -0.5, -0.1])
    assert min_k_score(x, [0, 7], k=0.3)[0] == pytest.approx((-5 - 4) / 2)       # int(2.1) = 2 tokens
    assert min_k_score(x, [0, 7], k=0.3, rounding="ceil")[0] == pytest.approx((-5 - 4 - 3) / 3)
    with pytest.raises(Exception, match="rounding"):
        min_k_score(x, [0, 7], rounding="round")


def test_per_record_ranking_uses_the_strongest_attack_as_measured():
    rng = np.random.default_rng(4)
    offsets, logp, mu, sigma = _rows(rng, 80)
    member = np.r_[np.ones(40, bool), np.zeros(40, bool)]
    mu = mu.copy()
    for i in range(40):                       # only the standardised signal (Min-K%++) separates the members
        mu[offsets[i]:offsets[i + 1]] -= 1.5
    comp = compare_lm(logp, offsets, member, mu=mu, sigma=sigma, n_bootstrap=0)
    aucs = {n: r.metrics.auc for n, r in comp.results.items()}
    assert comp.settings["primary_attack"] == max(aucs, key=aucs.get) == "min-k++"
    assert comp.records.primary == "min-k++"
    comp2 = compare_lm(logp + np.where(np.repeat(member, np.diff(offsets)), 3.0, 0.0), offsets, member, mu=mu,
                       sigma=sigma, n_bootstrap=0)
    aucs2 = {n: r.metrics.auc for n, r in comp2.results.items()}
    assert comp2.settings["primary_attack"] == max(aucs2, key=aucs2.get)

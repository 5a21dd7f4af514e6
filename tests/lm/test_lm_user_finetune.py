"""The user's own fine-tune audited end to end: their base model directory, tokenizer, texts and fine-tuning
function (pinned by file and digest), canaries by fair coins, `dpaudit lm audit`, and the audit and an LM release
cited by a claims file in `dpaudit check` (with JUnit)."""

from __future__ import annotations

import json
import textwrap
import xml.etree.ElementTree as ET

import numpy as np
import pytest

TRAIN = textwrap.dedent('''
    import dataclasses
    from dpaudit.training.lm.finetune import LmTrainConfig, finetune_lm
    from dpaudit.training.lm.text import encode

    SIGMA = 1.0

    def finetune(model, tokenizer, texts, *, seed):
        cfg = LmTrainConfig(steps=3, batch_size=16, lr=1e-2, noise_multiplier=SIGMA, sampling_rate=16 / 48)
        return finetune_lm(model, encode(tokenizer, texts), cfg, seed=seed)

    def finetune_buggy(model, tokenizer, texts, *, seed):
        cfg = LmTrainConfig(steps=3, batch_size=16, lr=1e-2, noise_multiplier=SIGMA / 10, sampling_rate=16 / 48)
        run = finetune_lm(model, encode(tokenizer, texts), cfg, seed=seed)
        return dataclasses.replace(run, noise_multiplier=SIGMA)     # records the calibrated sigma

    def not_a_record(model, tokenizer, texts, *, seed):
        return 42
''')


@pytest.fixture(scope="module")
def user_world(tmp_path_factory):
    from dpaudit.training.lm.text import DIGITS, canary_tokens, save_lm, synthetic_corpus, tiny_lm, train_tokenizer

    root = tmp_path_factory.mktemp("user_lm")
    corpus = synthetic_corpus(96, seed=5)
    tok = train_tokenizer(corpus, extra_tokens=DIGITS + canary_tokens(256))
    save_lm(tiny_lm(tok.get_vocab_size(), seed=0), tok, root / "base")
    (root / "private.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in corpus[:48]))
    (root / "train.py").write_text(TRAIN)
    return root


def test_cli_choices_match_the_library():
    from dpaudit.auditing.lm_audit import LM_TEXT_CANARIES
    from dpaudit.cli.lm import CANARY_KINDS

    assert CANARY_KINDS == LM_TEXT_CANARIES


def test_lm_audit_of_the_users_finetune_and_its_claims(user_world, cli, tmp_path):
    from dpaudit.training.usercode import code_digest

    w = user_world
    out = tmp_path / "audit"
    code, stdout, err = cli(["lm", "audit", "--base-model", w / "base", "--texts", w / "private.jsonl",
                             "--train-fn", f"{w / 'train.py'}:finetune", "--canaries", "32", "--replicates", "1",
                             "--out", out, "--quiet"])
    assert code == 0, err
    saved = json.loads((out / "canary_audit.json").read_text())
    s = saved["settings"]
    assert s["train_fn"]["sha256"] == code_digest(f"{w / 'train.py'}:finetune", "--train-fn")
    assert s["canary"] == "new-tokens" and s["canaries"] == 32 and s["num_private_texts"] == 48
    assert s["accounting_source"].startswith("dpaudit finetune_lm")
    # the accounting is the run's own: the sampler and noise it recorded
    assert saved["mechanism"] == {"kind": "subsampled_gaussian", "sampling_rate": pytest.approx(1 / 3),
                                  "noise_multiplier": 1.0, "steps": 3}
    from dpaudit.training.lm.finetune import FinetuneResult

    acc = FinetuneResult(None, 48, 1 / 3, 1.0, 3, 0).account(1e-5).epsilon
    assert saved["accounted_epsilon"] == pytest.approx(acc)
    assert saved["kind"] == "certified" and 0.0 <= saved["bound"]["epsilon"] <= acc
    assert "certified" in stdout and "accounted epsilon" in stdout
    # the same code pinned by digest: a wrong digest is refused before anything runs
    code, _, err = cli(["lm", "audit", "--base-model", w / "base", "--texts", w / "private.jsonl", "--train-fn",
                        f"{w / 'train.py'}:finetune", "--train-fn-sha256", "0" * 64, "--quiet"])
    assert code == 2 and "sha256" in err
    code, _, err = cli(["lm", "audit", "--base-model", w / "base", "--texts", w / "private.jsonl", "--train-fn",
                        f"{w / 'train.py'}:not_a_record", "--canaries", "8", "--quiet"])
    assert code == 2 and "must return what ran" in err

    # claims: the audit and an LM release of the same run, checked with JUnit
    from dpaudit.auditing.lm_release import make_lm_release
    from dpaudit.training.lm.finetune import FinetuneResult

    ledger = FinetuneResult(None, 48, 1 / 3, 1.0, 3, 0).ledger(1e-5)
    (tmp_path / "ledger.json").write_text(json.dumps(ledger.to_dict()))
    texts = [json.loads(x)["text"] for x in (w / "private.jsonl").read_text().splitlines()]
    make_lm_release(tmp_path / "rel", claim=["epsilon=8", "delta=1e-5"], lm=w / "base", members=texts[:24],
                    nonmembers=texts[24:], ledger=tmp_path / "ledger.json", max_length=32)
    big, small = acc + 1.0, acc / 2
    (tmp_path / "claims.toml").write_text(textwrap.dedent(f'''
        [[claim]]
        name = "audit-holds"
        epsilon = {big}
        delta = 1e-5
        granularity = "example"
        canary_audit = "audit/canary_audit.json"

        [[claim]]
        name = "audit-unproven"
        epsilon = {small}
        delta = 1e-5
        granularity = "example"
        canary_audit = "audit/canary_audit.json"

        [[claim]]
        name = "lm-release"
        epsilon = {big}
        delta = 1e-5
        granularity = "example"
        release = "rel"
    '''))
    code, stdout, err = cli(["check", tmp_path / "claims.toml", "--junit", tmp_path / "junit.xml"])
    assert code == 3, (stdout, err)                    # one claim unproven, none refuted
    cases = {c.get("name"): c for c in ET.parse(tmp_path / "junit.xml").getroot().iter("testcase")}
    assert set(cases) == {"audit-holds", "audit-unproven", "lm-release"}
    assert cases["audit-holds"].find("failure") is None and cases["lm-release"].find("failure") is None
    assert cases["audit-unproven"].find("failure") is not None or cases["audit-unproven"].find("skipped") is not None


def test_claims_refuse_a_canary_audit_at_another_granularity(tmp_path):
    from dpaudit.auditing.claims import parse_claims
    from dpaudit.errors import ParameterError

    doc = {"claim": [{"name": "c", "epsilon": 1.0, "delta": 1e-5, "granularity": "party",
                      "canary_audit": "a/canary_audit.json"}]}
    with pytest.raises(ParameterError, match="'example' for a canary_audit subject"):
        parse_claims(doc, base_dir=tmp_path)


def test_random_token_canaries_for_any_tokenizer(user_world):
    from dpaudit.auditing.lm_audit import _text_canaries
    from dpaudit.training.lm.files import load_lm

    _, tok, _ = load_lm(user_world / "base")
    texts, kind = _text_canaries(tok, 20, 5, "random-tokens", 3)
    assert kind == "random-tokens" and len(set(texts)) == 20
    assert all("<c" not in t and "[" not in t for t in texts)        # no reserved or special token
    assert _text_canaries(tok, 20, 5, "random-tokens", 3)[0] == texts  # seeded
    assert _text_canaries(tok, 4, 6, "auto", 0)[1] == "new-tokens"


@pytest.mark.parametrize("content", ["{not json", json.dumps({"bound": {"epsilon": "x"}}), json.dumps([1, 2])])
def test_a_malformed_canary_audit_file_is_one_error_and_a_junit_error(cli, tmp_path, content):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "canary_audit.json").write_text(content)
    (tmp_path / "claims.toml").write_text('[[claim]]\nname = "c"\nepsilon = 1.0\ndelta = 1e-5\n'
                                          'granularity = "example"\ncanary_audit = "a/canary_audit.json"\n')
    code, out, err = cli(["check", tmp_path / "claims.toml", "--junit", tmp_path / "j.xml", "--quiet"])
    assert code == 2 and "dpaudit: error:" in err and "Traceback" not in err
    assert any(True for _ in ET.parse(tmp_path / "j.xml").getroot().iter("error"))

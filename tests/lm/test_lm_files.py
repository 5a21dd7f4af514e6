"""Hostile LM directories are refused before any weight is read, with one `dpaudit: error:` line and exit 2:
pickled weights, code files, remote code / auto_map in the config, a model_type off the allow-list, an oversized
tokenizer, weights whose shapes do not match the config, symbolic links, truncated safetensors."""

from __future__ import annotations

import json
import shutil

import pytest

from dpaudit.errors import DataError
from dpaudit.training.lm.files import check_lm_dir, load_lm


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def _make(cli, tmp_path, lm_dir, lm_world):
    w = lm_world["root"]
    return cli(["release", "make", "--out", tmp_path / "rel", "--lm", lm_dir, "--members", w / "members.jsonl",
                "--nonmembers", w / "nonmembers.jsonl", "--claim", "epsilon=8", "--claim", "delta=1e-5"])


def _config(d, **changes):
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(changes)
    (d / "config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize("case, message", [
    ("pickle", "pickle-based weights and code files"),
    ("code", "pickle-based weights and code files"),
    ("auto_map", "names custom code ('auto_map')"),
    ("remote_code", "names custom code ('trust_remote_code')"),
    ("model_type", "allowed: gpt2"),
    ("architectures", "a gpt2 causal LM is GPT2LMHeadModel"),
    ("tokenizer_size", "dpaudit reads at most"),
    ("shapes", "does not match the architecture"),
    ("truncated", "truncated"),
    ("symlink", "symbolic link"),
    ("missing", "has no tokenizer.json"),
])
def test_hostile_lm_directories_are_refused(lm_world, cli, tmp_path, case, message):
    d = _copy(lm_world["target"], tmp_path / "lm")
    if case == "pickle":
        (d / "pytorch_model.bin").write_bytes(b"\x80\x04K\x01.")
    elif case == "code":
        (d / "modeling_evil.py").write_text("import os\nos.system('echo pwned')\n")
    elif case == "auto_map":
        _config(d, auto_map={"AutoModelForCausalLM": "modeling_evil.Evil"})
    elif case == "remote_code":
        _config(d, trust_remote_code=True)
    elif case == "model_type":
        _config(d, model_type="evil_remote")
    elif case == "architectures":
        _config(d, architectures=["EvilForCausalLM"])
    elif case == "tokenizer_size":
        with open(d / "tokenizer.json", "ab") as fh:
            fh.truncate((64 << 20) + 1)      # sparse: no disk used
    elif case == "shapes":
        _config(d, n_embd=32)                 # weights are 64 wide
    elif case == "truncated":
        blob = (d / "model.safetensors").read_bytes()
        (d / "model.safetensors").write_bytes(blob[: len(blob) // 2])
    elif case == "symlink":
        (d / "model.safetensors").unlink()
        (d / "model.safetensors").symlink_to(lm_world["target"] / "model.safetensors")
    elif case == "missing":
        (d / "tokenizer.json").unlink()
    code, out, err = _make(cli, tmp_path, d, lm_world)
    assert code == 2, (out, err)
    assert err.startswith("dpaudit: error:") and message in err, err
    assert "Traceback" not in err
    assert not (tmp_path / "rel").exists()


def test_weight_cap_and_good_directory(lm_world, tmp_path):
    files = check_lm_dir(lm_world["target"])
    assert files.model_type == "gpt2" and files.num_parameters > 10_000
    with pytest.raises(DataError, match="reads at most 1000 bytes"):
        check_lm_dir(lm_world["target"], max_weight_bytes=1000)
    model, tok, _ = load_lm(files)
    assert not model.training and tok.get_vocab_size() <= model.config.vocab_size


def test_bundle_tampered_after_make_is_refused(lm_world, cli, tmp_path):
    code, out, err = _make(cli, tmp_path, lm_world["target"], lm_world)
    assert code == 0, err
    w = tmp_path / "rel" / "model" / "model.safetensors"
    blob = bytearray(w.read_bytes())
    blob[-1] ^= 1
    w.write_bytes(bytes(blob))
    code, out, err = cli(["attack", tmp_path / "rel", "--compare", "--out", tmp_path / "a", "--quiet"])
    assert code == 2 and "differs from what lm_release.json recorded" in err
    code, out, err = cli(["attack", tmp_path / "rel", "--out", tmp_path / "b", "--quiet"])
    assert code == 2 and "--compare" in err


def test_malformed_lm_release_json_is_refused(lm_world, cli, tmp_path):
    code, out, err = _make(cli, tmp_path, lm_world["target"], lm_world)
    assert code == 0, err
    meta_path = tmp_path / "rel" / "lm_release.json"
    meta = json.loads(meta_path.read_text())
    for bad in ({**meta, "kind": "pickle"}, {**meta, "max_length": 0}, {**meta, "counts": {"members": 1}},
                {**meta, "extra": 1}):
        meta_path.write_text(json.dumps(bad))
        code, out, err = cli(["attack", tmp_path / "rel", "--compare", "--out", tmp_path / "a", "--quiet"])
        assert code == 2 and err.startswith("dpaudit: error:") and "Traceback" not in err, (bad, err)

"""Issue 44, hostile input round four (LM bundles and tokenizers, extreme numbers, output folders): each test is
named after the failure it fixes. The Flower items are in tests/integrations; the property tests of the LM bundle
directories and tokenizer files in tests/fuzz/test_fuzz_lm.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import dpaudit
from dpaudit.errors import DataError, ParameterError

CLAIM = ["--claim", "epsilon=8", "--claim", "delta=1e-5"]


def _one_error(cli, args, *needles):
    code, out, err = cli(args)
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("[dpaudit")]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("dpaudit: error:"), (code, out, err)
    assert "Traceback" not in err and "internal error" not in err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def tiny_lm_dir(tmp_path_factory) -> dict[str, Path]:
    """An untrained 1-layer GPT-2 with dpaudit's word-level tokenizer, and member / non-member text files."""
    from dpaudit.training.lm.text import save_lm, synthetic_corpus, tiny_lm, train_tokenizer

    root = tmp_path_factory.mktemp("round4_lm")
    corpus = synthetic_corpus(24, seed=0)
    tok = train_tokenizer(corpus)
    save_lm(tiny_lm(tok.get_vocab_size(), seed=0, n_layer=1, n_embd=16, n_head=2, n_positions=32), tok, root / "lm")
    (root / "lm" / "generation_config.json").unlink(missing_ok=True)
    for name, texts in (("members", corpus[:12]), ("nonmembers", corpus[12:])):
        (root / f"{name}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return {"lm": root / "lm", "members": root / "members.jsonl", "nonmembers": root / "nonmembers.jsonl"}


def _lm_copy(tiny_lm_dir, tmp_path: Path) -> Path:
    return Path(shutil.copytree(tiny_lm_dir["lm"], tmp_path / "lm"))


def _make_lm(cli, tiny_lm_dir, tmp_path, lm=None, **files):
    f = {**tiny_lm_dir, **files}
    return ["release", "make", "--out", tmp_path / "rel", "--lm", lm or f["lm"], "--members", f["members"],
            "--nonmembers", f["nonmembers"], *CLAIM]


# --------------------------------------------------------------------------------------------------
# extreme numbers and raw TypeErrors of the Python API


@pytest.mark.parametrize("key", ["epsilon", "delta"])
def test_claim_epsilon_10_pow_400_is_a_range_error_not_an_overflow(tmp_path, key):
    """Before: OverflowError 'int too large to convert to float' from dpaudit.release.make(claim={...})."""
    claim = {"epsilon": 8, "delta": 1e-5, key: 10**400}
    with pytest.raises(ParameterError, match=rf"'{key}' parameter of --claim must be a float in the range .* "
                                             r"Got an integer of about 401 digits"):
        dpaudit.release.make(tmp_path / "r", claim=claim, scores=tmp_path / "absent.npz")
    assert not (tmp_path / "r").exists()


def test_release_make_with_lm_and_data_is_a_parameter_error_not_a_typeerror(tmp_path, tiny_lm_dir):
    """Before: TypeError "make_lm_release() got an unexpected keyword argument 'data'"."""
    with pytest.raises(ParameterError, match=r"release.make with lm= or lm_scores= .* takes the keywords .*members.*"
                                             r"Got 'data' instead"):
        dpaudit.release.make(tmp_path / "r", claim={"epsilon": 8, "delta": 1e-5}, lm=tiny_lm_dir["lm"],
                             data=tmp_path / "d.npz")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("delta", ["abc", [1e-5], None, 10**400, 2.0])
def test_lm_bundle_whose_claim_delta_is_not_a_number_is_a_data_error(tmp_path, tiny_lm_dir, cli, delta):
    """Before: ValueError from float() in compare_lm_release (exit 70). Now lm_release.json's claim is checked as
    release.json's is, when the bundle is read."""
    code, out, err = cli(_make_lm(cli, tiny_lm_dir, tmp_path))
    assert code == 0, err
    meta_path = tmp_path / "rel" / "lm_release.json"
    meta = json.loads(meta_path.read_text())
    meta["claim"]["delta"] = delta
    meta_path.write_text(json.dumps(meta))
    _one_error(cli, ["attack", tmp_path / "rel", "--compare", "--out", tmp_path / "a"], "claim.delta",
               "a number in [0, 1)")
    from dpaudit.auditing.lm_release import load_lm_release

    with pytest.raises(DataError, match="claim.delta"):
        load_lm_release(tmp_path / "rel")


# --------------------------------------------------------------------------------------------------
# safetensors header entries of the wrong type


def _rewrite_header(path: Path, change) -> None:
    blob = path.read_bytes()
    n = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + n])
    change(header)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + blob[8 + n:])


def _first_tensor(header: dict) -> dict:
    return header[next(k for k in header if k != "__metadata__")]


WRONG_TYPES = [
    ("dtype", ["F32"], "'dtype' must be one of"), ("dtype", {"F32": 1}, "'dtype' must be one of"),
    ("dtype", None, "'dtype' must be one of"), ("shape", "16", "'shape' must be a list"),
    ("shape", [True, 16], "'shape' must be a list"), ("shape", [16.0], "'shape' must be a list"),
    ("data_offsets", ["0", "64"], "'data_offsets' must be two ints"),
    ("data_offsets", [0.0, 64.0], "'data_offsets' must be two ints"),
    ("data_offsets", [64, 0], "'data_offsets' must be two ints"), ("data_offsets", [-64, 0], "'data_offsets' must"),
    ("data_offsets", None, "'data_offsets' must be two ints"), ("entry", "F32", "an object with dtype"),
]


@pytest.mark.parametrize("field, value, message", WRONG_TYPES)
def test_safetensors_header_entries_of_the_wrong_type_are_a_data_error(tiny_lm_dir, tmp_path, cli, field, value,
                                                                       message):
    """Before: TypeError ("unhashable type: 'list'", "unsupported operand type(s) for -: 'str' and 'str'") from the
    LM directory check and from training/model_files.py's safetensors reader (exit 70)."""
    d = _lm_copy(tiny_lm_dir, tmp_path)

    def change(h):
        name = next(k for k in h if k != "__metadata__")
        if field == "entry":
            h[name] = value
        else:
            h[name][field] = value

    _rewrite_header(d / "model.safetensors", change)
    _one_error(cli, _make_lm(cli, tiny_lm_dir, tmp_path, lm=d), message, "The weights file")
    assert not (tmp_path / "rel").exists()
    from dpaudit.training.model_files import load_safetensors_file

    with pytest.raises(DataError, match=message):
        load_safetensors_file(d / "model.safetensors")


# --------------------------------------------------------------------------------------------------
# lone surrogates


@pytest.mark.parametrize("where", ["members", "nonmembers"])
def test_lone_surrogates_in_members_jsonl_are_refused_at_release_make(tiny_lm_dir, tmp_path, cli, where):
    """Before: `release make` accepted '\\ud800' (a JSON escape of a lone surrogate) and `attack` then failed with a
    TypeError inside the tokenizer (exit 70)."""
    bad = tmp_path / f"{where}.jsonl"
    lines = tiny_lm_dir[where].read_text().splitlines()
    lines[3] = '{"text": "the dog \\ud800 visited a market ."}'
    bad.write_text("\n".join(lines) + "\n")
    _one_error(cli, _make_lm(cli, tiny_lm_dir, tmp_path, **{where: bad}), "line 4", "lone surrogate '\\ud800'",
               "valid Unicode")
    assert not (tmp_path / "rel").exists()
    with pytest.raises(DataError, match="text 1: holds a lone surrogate"):
        dpaudit.release.make(tmp_path / "r", claim={"epsilon": 8, "delta": 1e-5}, lm=tiny_lm_dir["lm"],
                             members=["a b c", "x\udfff y"], nonmembers=["d e f", "g h i"])


def test_lone_surrogates_in_a_bundles_texts_json_are_a_data_error(tiny_lm_dir, tmp_path, cli):
    """The same check when a bundle is read (it may come from the party audited)."""
    assert cli(_make_lm(cli, tiny_lm_dir, tmp_path))[0] == 0
    p = tmp_path / "rel" / "texts.json"
    texts = json.loads(p.read_text())
    texts["members"][0] = "\udc80" + texts["members"][0]
    p.write_text(json.dumps(texts))         # ensure_ascii: written as the escape \udc80
    _one_error(cli, ["attack", tmp_path / "rel", "--compare", "--out", tmp_path / "a"], "members[0]",
               "lone surrogate")


# --------------------------------------------------------------------------------------------------
# LM configs: counts by arithmetic before any module is built


def _set_config(d: Path, **changes) -> None:
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(changes)
    (d / "config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize("changes, message", [
    ({"n_layer": 100000}, "'n_layer' must be an int in the range [1, 256]. Got 100000"),
    ({"n_layer": 10**12}, "'n_layer' must be an int in the range [1, 256]"),
    ({"n_layer": "1"}, "'n_layer' must be an int"), ({"n_layer": 1.0}, "'n_layer' must be an int"),
    ({"n_layer": 2}, "the config has 2 layers, the file 1"),
    ({"n_embd": 10**7}, "'n_embd' must be an int in the range [1, 131072]"),
    ({"vocab_size": 10**9}, "'vocab_size' must be an int in the range [1, 16777216]"),
    ({"vocab_size": 10**6}, "the config describes at least 16000032 parameters, the file holds"),
    ({"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "num_hidden_layers": 10**9},
     "'num_hidden_layers' must be an int in the range [1, 256]"),
    ({"model_type": "gpt_neo", "architectures": ["GPTNeoForCausalLM"], "num_layers": 1,
      "attention_types": [[["global"], 10**9]]}, "'attention_types' must be [[kinds, repeats], ...] expanding to at most"),
])
def test_lm_config_n_layer_100000_is_refused_by_arithmetic_before_any_module_is_built(tiny_lm_dir, tmp_path, cli,
                                                                                     monkeypatch, changes, message):
    """Before: the architecture check built all 100,000 layers on the meta device before comparing shapes (over 60 s
    of CPU; a qwen2 config of 10**9 layers would expand a per-layer list first). Now the counts are arithmetic on
    the config, capped and compared with the weights file's header, and nothing is built."""
    from dpaudit.training.lm import files

    def built(*_a, **_k):
        raise AssertionError("a module was built")

    monkeypatch.setattr(files, "_expected_shapes", built)
    d = _lm_copy(tiny_lm_dir, tmp_path)
    _set_config(d, **changes)
    import resource

    t0 = resource.getrusage(resource.RUSAGE_SELF).ru_utime
    _one_error(cli, _make_lm(cli, tiny_lm_dir, tmp_path, lm=d), message)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_utime - t0 < 10
    assert not (tmp_path / "rel").exists()


def test_lm_config_counts_hold_for_every_allowed_architecture():
    """The parameter lower bound is below the real count of each allowed architecture (built small on meta)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from dpaudit.training.lm.files import LM_MODEL_TYPES, config_counts

    small = {"vocab_size": 101, "max_position_embeddings": 32, "intermediate_size": 24, "num_attention_heads": 2,
             "num_key_value_heads": 1, "head_dim": 4}
    for mtype in LM_MODEL_TYPES:
        width, layers = {"gpt2": ("n_embd", "n_layer"), "gpt_neo": ("hidden_size", "num_layers")}.get(
            mtype, ("hidden_size", "num_hidden_layers"))
        cfg = {"model_type": mtype, width: 8, layers: 2, **small}
        if mtype == "gpt_neo":
            cfg["attention_types"] = [[["global", "local"], 1]]
        n_layers, lower = config_counts(cfg, Path("config.json"))
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**cfg))
        real = sum(p.numel() for p in model.parameters())
        assert n_layers == 2 and lower <= real, (mtype, lower, real)


# --------------------------------------------------------------------------------------------------
# tokenizer files: regexes, padding and settings that hang, panic or allocate without bound


def _set_tokenizer(d: Path, change) -> None:
    tok = json.loads((d / "tokenizer.json").read_text())
    change(tok)
    (d / "tokenizer.json").write_text(json.dumps(tok))


def _split(pattern):
    return lambda t: t.update(pre_tokenizer={"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated",
                                             "invert": False})


def _pad(**pad):
    full = {"strategy": "BatchLongest", "direction": "Right", "pad_to_multiple_of": None, "pad_id": 0,
            "pad_type_id": 0, "pad_token": "[PAD]", **pad}
    return lambda t: t.update(padding=full)


HOSTILE_TOKENIZERS = {
    "catastrophic_regex_a_plus_plus": (_split("(a+)+$"), "'pre_tokenizer.pattern'"),
    "regex_w_plus_d_quadratic": (_split(r"\w+\d"), "backtracking engine"),
    "normalizer_regex": (lambda t: t.update(normalizer={"type": "Replace", "pattern": {"Regex": "(a|aa)+$"},
                                                        "content": "b"}), "'normalizer.pattern'"),
    "nested_sequence_regex": (lambda t: t.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "WhitespaceSplit"}, {"type": "Split", "pattern": {"Regex": "(x+x+)+y"}, "behavior": "Removed",
                                      "invert": False}]}), "'pre_tokenizer.pretokenizers[1].pattern'"),
    "padding_fixed_2_pow_40": (_pad(strategy={"Fixed": 2**40}), "'padding.strategy.Fixed' must be an int in the range"),
    "padding_multiple_2_pow_40": (_pad(pad_to_multiple_of=2**40), "'padding.pad_to_multiple_of'"),
    "truncation_stride": (lambda t: t.update(truncation={"direction": "Right", "max_length": 4, "strategy":
                                                         "LongestFirst", "stride": 4}), "'truncation.stride'"),
    "fixed_length_zero": (lambda t: t.update(pre_tokenizer={"type": "FixedLength", "length": 0}),
                          "'pre_tokenizer.length'"),
    "long_replacement": (lambda t: t.update(normalizer={"type": "Replace", "pattern": {"String": "a"},
                                                        "content": "x" * 10**6}), "'normalizer.content'"),
    "wordpiece_long_words": (lambda t: t["model"].update(type="WordPiece", continuing_subword_prefix="##",
                                                         max_input_chars_per_word=10**9),
                             "'model.max_input_chars_per_word'"),
    "bpe_dropout": (lambda t: t["model"].update(type="BPE", dropout=0.5, merges=[]), "'model.dropout'"),
    "unknown_type": (lambda t: t.update(decoder={"type": "Python"}), "'decoder.type'"),
    "precompiled_4gb_trie": (lambda t: t.update(normalizer={"type": "Precompiled", "precompiled_charsmap": "AAAA////"}),
                             "'normalizer.type' is 'Precompiled'"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_TOKENIZERS))
def test_tokenizer_files_whose_regex_or_padding_can_blow_up_are_refused(tiny_lm_dir, tmp_path, cli, case):
    """Before: '(a+)+$' made the tokenizers library panic (pyo3 PanicException, a BaseException: a traceback);
    '\\w+\\d' on a 99,999-letter text took minutes (quadratic backtracking); padding Fixed 2**40 aborted the process
    (SIGABRT, a 4 TiB allocation). Now each is refused by release make (and by attack, when a bundle is read)."""
    change, message = HOSTILE_TOKENIZERS[case]
    d = _lm_copy(tiny_lm_dir, tmp_path)
    _set_tokenizer(d, change)
    _one_error(cli, _make_lm(cli, tiny_lm_dir, tmp_path, lm=d), "The tokenizer file", message)
    assert not (tmp_path / "rel").exists()


def test_tokenizer_file_of_an_allowed_architecture_passes(tiny_lm_dir, tmp_path):
    """The allow-list holds real patterns: Llama 3's Split pre-tokenizer, a Replace normalizer with a literal, padding
    and truncation within the caps."""
    from dpaudit.training.lm.files import check_lm_dir, load_lm

    llama3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
    d = _lm_copy(tiny_lm_dir, tmp_path)

    def change(t):
        _split(llama3)(t)
        _pad(strategy={"Fixed": 512})(t)
        t.update(normalizer={"type": "Replace", "pattern": {"String": " "}, "content": " "},
                 truncation={"direction": "Right", "max_length": 512, "strategy": "LongestFirst", "stride": 0})

    _set_tokenizer(d, change)
    _, tok, _ = load_lm(check_lm_dir(d))
    e = tok.encode_batch(["the dog visited", "a cat"])
    assert len(e[0].ids) == 3 and len(e[1].ids) == 2         # the file's padding is off: dpaudit pads itself


def test_tokenizer_panic_is_a_clean_data_error_not_a_base_exception():
    """A panic of the tokenizers library (pyo3_runtime.PanicException derives from BaseException, so `except
    Exception` missed it) through any call of a loaded tokenizer is one DataError."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    from dpaudit.training.lm.files import CheckedTokenizer

    raw = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Split(Regex("(a+)+$"), "isolated")      # built in memory: no file check
    tok = CheckedTokenizer(raw, max_chars=1000, where="'test'")
    with pytest.raises(DataError, match="The tokenizer of 'test' failed: PanicException"):
        tok.encode_batch(["a" * 40 + "!"])
    with pytest.raises(DataError, match="PanicException"):
        tok.encode("a" * 40 + "!")


def test_texts_of_99999_letters_are_cut_before_tokenizing(tiny_lm_dir, tmp_path, cli):
    """Before: whole texts were tokenized and then cut to max_length tokens (with '\\w+\\d' a 99,999-letter text took
    minutes). Now each text is cut to 64 characters per token of the model's context first: the same tokens."""
    from dpaudit.training.lm.files import load_lm

    _, tok, _ = load_lm(tiny_lm_dir["lm"])
    assert tok.max_chars == 64 * 32                           # n_positions 32
    long = "the dog " * 12_500                                # 100,000 characters
    assert tok.encode(long).ids[:32] == tok._tok.encode(long).ids[:32]
    assert len(tok.encode(long).ids) == 64 * 32 // 4
    m = tmp_path / "m.txt"
    m.write_text("\n".join(["x" * 99_999, "y" * 99_999, "the dog ."]) + "\n")
    import resource

    t0 = resource.getrusage(resource.RUSAGE_SELF).ru_utime
    assert cli(_make_lm(cli, tiny_lm_dir, tmp_path, members=m))[0] == 0
    code, out, err = cli(["attack", tmp_path / "rel", "--compare", "--out", tmp_path / "a", "--bootstrap", "50"])
    assert code == 0, err
    assert resource.getrusage(resource.RUSAGE_SELF).ru_utime - t0 < 60


# --------------------------------------------------------------------------------------------------
# the same output-folder rule for every command: a symbolic link as --out is refused before any work


def _out_commands(tiny_lm_dir, root: Path) -> dict[str, list]:
    import numpy as np

    rng = np.random.default_rng(0)
    np.savez(root / "s.npz", loss_train=rng.random(40), loss_test=rng.random(40))
    W = tiny_lm_dir
    lm_inputs = ["--lm", W["lm"], "--members", W["members"], "--nonmembers", W["nonmembers"], *CLAIM]
    return {
        "release make --scores": ["release", "make", "--scores", root / "s.npz", *CLAIM, "--out"],
        "release make --lm": ["release", "make", *lm_inputs, "--out"],
        "attack": ["attack", root / "lmrel", "--compare", "--out"],
        "audit": ["audit", "--quiet", "--out"],
        "audit-method": ["audit-method", "pate", "--quiet", "--out"],
        "train": ["train", "pate", "--quiet", "--out"],
        "reproduce": ["reproduce", "privatekt", "--seeds", "1", "--out"],
    }


@pytest.mark.parametrize("command", ["release make --scores", "release make --lm", "attack", "audit", "audit-method",
                                     "train", "reproduce"])
@pytest.mark.parametrize("target", ["existing", "dangling"])
def test_symlinked_out_is_refused_by_every_command(tiny_lm_dir, tmp_path, cli, command, target):
    """Before: 'audit-method --out LINK' and 'reproduce --out LINK' wrote into the folder the link points to (after
    the whole run); release make and train refused it only as 'already exists'. Now every command that writes a
    folder refuses a symbolic link as --out, by name, before any work. (flower's commands: tests/integrations.)"""
    if command == "attack":
        assert cli(["release", "make", "--out", tmp_path / "lmrel", "--lm", tiny_lm_dir["lm"], "--members",
                    tiny_lm_dir["members"], "--nonmembers", tiny_lm_dir["nonmembers"], *CLAIM])[0] == 0
    argv = _out_commands(tiny_lm_dir, tmp_path)[command]
    dest = tmp_path / "elsewhere"
    if target == "existing":
        dest.mkdir()
    link = tmp_path / "LINK"
    link.symlink_to(dest)
    _one_error(cli, [*argv, link], str(link), "symbolic link")
    assert not dest.exists() or not any(dest.iterdir())
    assert link.is_symlink()


@pytest.mark.parametrize("where", ["vocab", "post_processor"])
def test_token_ids_past_the_models_vocabulary_are_a_data_error(tiny_lm_dir, tmp_path, cli, where):
    """Found by the LM bundle property test: a tokenizer whose ids are not contiguous ({"the": 100000}) or whose
    post-processor adds an id no vocabulary lists passed the token-count check, and the model's embedding then
    failed with 'IndexError: index out of range in self' (exit 70). Now: one DataError naming the id and the range."""
    d = _lm_copy(tiny_lm_dir, tmp_path)

    def change(t):
        if where == "vocab":
            t["model"]["vocab"]["the"] = 100_000
        else:
            from tokenizers import processors

            post = processors.TemplateProcessing(single="[X] $A", pair="[X] $A $B", special_tokens=[("[X]", 10**6)])
            t["post_processor"] = json.loads(post.__getstate__())

    _set_tokenizer(d, change)
    if where == "vocab":      # known from the vocabulary: refused when the LM is loaded
        from dpaudit.training.lm.files import load_lm

        with pytest.raises(DataError, match="ids up to 100000 but the model's vocabulary is"):
            load_lm(d)
    assert cli(_make_lm(cli, tiny_lm_dir, tmp_path, lm=d))[0] == 0
    _one_error(cli, ["attack", tmp_path / "rel", "--compare", "--out", tmp_path / "a"], "the model's vocabulary is")


@pytest.mark.parametrize("value", [["gpt2"], {"gpt2": 1}, None, 3])
def test_lm_config_model_type_of_the_wrong_type_is_a_data_error(tiny_lm_dir, tmp_path, cli, value):
    """Found by the LM bundle property test: "model_type": [] raised 'TypeError: unhashable type: list' (exit 70)."""
    d = _lm_copy(tiny_lm_dir, tmp_path)
    _set_config(d, model_type=value)
    _one_error(cli, _make_lm(cli, tiny_lm_dir, tmp_path, lm=d), "has model_type", "allowed: gpt2")


def test_tokenizer_that_panics_when_loaded_gives_one_error_line_and_no_rust_backtrace(tiny_lm_dir, capfd):
    """Found by the tokenizer property test: a Precompiled normalizer made the library panic (a garbage charsmap) or,
    with 6 GiB of address space, abort the process (the six bytes 'AAAA////' declare a 4 GB trie, reserved before it
    is read). Such a file is now refused before the library sees it; and a panic while a file is parsed is one
    DataError with Rust's panic message and backtrace (written straight to file descriptor 2) kept off the
    terminal."""
    from tokenizers import Tokenizer

    from dpaudit.training.lm.files import _guarded, _without_stderr

    tok = json.loads((tiny_lm_dir["lm"] / "tokenizer.json").read_text())
    tok["normalizer"] = {"type": "Precompiled", "precompiled_charsmap": "CAAAAA=="}   # a trie of 8 bytes, no data
    capfd.readouterr()
    with pytest.raises(DataError, match="The tokenizer of 'x' failed: PanicException"):
        _guarded(lambda: _without_stderr(lambda: Tokenizer.from_str(json.dumps(tok))), "'x'")
    err = capfd.readouterr().err
    assert "panicked" not in err and "backtrace" not in err, err

"""The LM property tests' body, run in a child process that tests/fuzz/test_fuzz_lm.py starts with CPU-time and
address-space limits (``RLIMIT_CPU``, ``RLIMIT_AS``): a tokenizer that aborts the process (a Rust allocation
failure is a SIGABRT, not an exception), loops or allocates without bound fails the test, never the test run.

    python lm_fuzz_child.py SURFACE[,SURFACE] EXAMPLES[,EXAMPLES] {fast|slow} WORKDIR

SURFACE: ``tokenizer`` (hostile tokenizer.json files: a checked LM directory is loaded and texts encoded) or
``bundle`` (hostile LM release bundles: lm_release.json, texts.json and the model files, re-sealed or not, then
``dpaudit attack BUNDLE --compare``). The one rule: each input is answered or refused with one of dpaudit's own
errors (exit 0 or 2, one ``dpaudit: error:`` line, no traceback), within ``PER_CASE_S`` seconds. The last line of
stdout is a JSON summary: the outcomes (exit codes) of the inputs run, per surface.
"""

from __future__ import annotations

import collections
import copy
import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fuzz_helpers import EXTREME_INTS, VALUES, assert_clean, run_cli, time_limit  # noqa: E402

PER_CASE_S = 60
OUTCOMES: collections.Counter = collections.Counter()

# --------------------------------------------------------------------------------------------------
# tokenizer components, good and hostile

ALLOWED = [
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
]
HOSTILE_REGEX = ["(a+)+$", r"\w+\d", "(x|x)*y", "(a|aa)+$", "((a*)*)*b", "(?=a)*", "[", "(?<=a+)b", "\\", ""]
REGEX = st.one_of(st.sampled_from(ALLOWED + HOSTILE_REGEX), st.text(alphabet="ab()+*?|$^\\wd.[]{}1,", max_size=14))
PATTERN = st.one_of(st.builds(lambda r: {"Regex": r}, REGEX),
                    st.builds(lambda s: {"String": s}, st.one_of(st.text(max_size=8), st.just("a" * 10_000))),
                    VALUES)
CONTENT = st.one_of(st.text(max_size=4), st.sampled_from(["x" * 65, "x" * 10**6, "\u2581"]), VALUES)
LENGTHS = st.one_of(st.integers(-2, 70), EXTREME_INTS, VALUES)
PRE = st.one_of(
    st.builds(lambda p, b: {"type": "Split", "pattern": p, "behavior": b, "invert": False}, PATTERN,
              st.sampled_from(["Isolated", "Removed", "MergedWithPrevious", "Contiguous", "bogus"])),
    st.builds(lambda n: {"type": "FixedLength", "length": n}, LENGTHS),
    st.sampled_from([{"type": "Whitespace"}, {"type": "WhitespaceSplit"}, {"type": "Digits", "individual_digits": True},
                     {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
                     {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
                     {"type": "Punctuation", "behavior": "Isolated"}, {"type": "UnicodeScripts"},
                     {"type": "Python"}, {"type": None}]),
)
PRE_SEQ = st.one_of(PRE, st.builds(lambda xs: {"type": "Sequence", "pretokenizers": xs}, st.lists(PRE, max_size=3)))
NORM = st.one_of(
    st.builds(lambda p, c: {"type": "Replace", "pattern": p, "content": c}, PATTERN, CONTENT),
    st.builds(lambda c: {"type": "Prepend", "prepend": c}, CONTENT),
    st.sampled_from([{"type": "NFKC"}, {"type": "Lowercase"}, {"type": "Strip", "strip_left": True, "strip_right": True},
                     {"type": "Precompiled", "precompiled_charsmap": "AAAA////"}, {"type": "Sequence", "normalizers": []},
                     {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                      "strip_accents": None, "lowercase": True}]),
)
PADDING = st.one_of(
    st.none(),
    st.builds(lambda s, m: {"strategy": s, "direction": "Right", "pad_to_multiple_of": m, "pad_id": 0,
                            "pad_type_id": 0, "pad_token": "[PAD]"},
              st.one_of(st.just("BatchLongest"), st.builds(lambda n: {"Fixed": n}, LENGTHS), VALUES),
              st.one_of(st.none(), LENGTHS)),
    VALUES)
TRUNCATION = st.one_of(
    st.none(),
    st.builds(lambda m, s: {"direction": "Right", "max_length": m, "strategy": "LongestFirst", "stride": s},
              LENGTHS, LENGTHS),
    VALUES)
MODEL_TWEAK = st.one_of(
    st.builds(lambda n: {"type": "WordPiece", "continuing_subword_prefix": "##", "max_input_chars_per_word": n},
              LENGTHS),
    st.builds(lambda d: {"type": "BPE", "dropout": d, "merges": []}, st.one_of(st.none(), st.floats(0, 1), VALUES)),
    st.builds(lambda k, v: {k: v}, st.sampled_from(["unk_token", "type", "vocab"]), VALUES),
    st.just({"vocab": {"[UNK]": 10**12, "a": -1}}),
)
POST = st.one_of(
    st.none(), VALUES,
    st.builds(lambda n, i: {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "[BOS]", "type_id": 0}}] * n
                            + [{"Sequence": {"id": "A", "type_id": 0}}], "pair": None,
                            "special_tokens": {"[BOS]": {"id": "[BOS]", "ids": i, "tokens": ["[BOS]"]}}},
              st.integers(0, 100), st.one_of(st.just([2]), st.lists(st.integers(-5, 10**6), max_size=3), VALUES)),
)
FIELD = st.sampled_from(["pre_tokenizer", "normalizer", "padding", "truncation", "model", "post_processor",
                         "decoder", "added_tokens", "version", "junk"])
TEXTS = st.lists(st.one_of(st.text(max_size=20), st.sampled_from(
    ["a" * 99_999, " " * 99_999, "ab1 " * 25_000, "\r\n" * 50_000, "(" * 99_999, "the dog " * 12_500,
     "a" * 40 + "!", "\u2581" * 1000])), min_size=1, max_size=4)


def mutate_tokenizer(tok: dict, draw) -> dict:
    t = copy.deepcopy(tok)
    for field in draw(st.lists(FIELD, min_size=1, max_size=3)):
        if field == "pre_tokenizer":
            t["pre_tokenizer"] = draw(PRE_SEQ)
        elif field == "normalizer":
            t["normalizer"] = draw(NORM)
        elif field == "padding":
            t["padding"] = draw(PADDING)
        elif field == "truncation":
            t["truncation"] = draw(TRUNCATION)
        elif field == "model":
            t["model"] = {**(t["model"] if isinstance(t.get("model"), dict) else {}), **draw(MODEL_TWEAK)}
        elif field == "post_processor":
            t["post_processor"] = draw(POST)
        elif field == "decoder":
            t["decoder"] = draw(st.one_of(VALUES, st.builds(lambda p: {"type": "Replace", "pattern": p, "content": ""},
                                                            PATTERN)))
        elif field == "added_tokens":
            t["added_tokens"] = draw(st.one_of(VALUES, st.just([{"id": 10**12, "content": "x" * 10**5, "single_word": False,
                                                                  "lstrip": False, "rstrip": False, "normalized": True,
                                                                  "special": False}])))
        else:
            t[draw(st.sampled_from(["version", "junk", "model"]))] = draw(VALUES)
    return t


# --------------------------------------------------------------------------------------------------
# the world: one tiny LM directory and one LM release, made once per child


def make_world(root: Path) -> dict:
    from dpaudit.auditing.lm_release import make_lm_release
    from dpaudit.training.lm.text import save_lm, synthetic_corpus, tiny_lm, train_tokenizer

    corpus = synthetic_corpus(16, seed=0)
    tok = train_tokenizer(corpus)
    lm = save_lm(tiny_lm(tok.get_vocab_size(), seed=0, n_layer=1, n_embd=8, n_head=2, n_positions=16), tok, root / "lm")
    (lm / "generation_config.json").unlink(missing_ok=True)
    rel = make_lm_release(root / "rel", claim={"epsilon": 8, "delta": 1e-5}, lm=lm, members=corpus[:8],
                          nonmembers=corpus[8:], max_length=16)
    return {"lm": lm, "rel": rel, "tokenizer": json.loads((lm / "tokenizer.json").read_text())}


def tokenizer_case(world: dict, data) -> None:
    from dpaudit.errors import DPAuditError
    from dpaudit.training.lm.files import check_lm_dir, load_lm
    from dpaudit.training.lm.text import encode

    tok = mutate_tokenizer(world["tokenizer"], data.draw)
    texts = data.draw(TEXTS)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(shutil.copytree(world["lm"], Path(tmp) / "lm"))
        (d / "tokenizer.json").write_text(json.dumps(tok))
        with time_limit(PER_CASE_S, tok):
            try:
                _, t, _ = load_lm(check_lm_dir(d))
                t.encode_batch(texts)
                encode(t, texts, max_length=16)
                OUTCOMES[0] += 1
            except DPAuditError as exc:
                assert "\n" not in str(exc), str(exc)
                OUTCOMES[2] += 1


def _seal(bundle: Path) -> None:
    """Record the (mutated) model files' sha256 in lm_release.json, as a hostile maker would."""
    meta_p = bundle / "lm_release.json"
    files = [bundle / "model" / f for f in ("config.json", "model.safetensors", "tokenizer.json")]
    if not all(f.is_file() and not f.is_symlink() for f in files):     # never read a FIFO or through a link here
        return
    try:
        meta = json.loads(meta_p.read_text())
        meta["model"]["sha256"] = {f: hashlib.sha256((bundle / "model" / f).read_bytes()).hexdigest()
                                   for f in ("config.json", "model.safetensors", "tokenizer.json")}
        meta_p.write_text(json.dumps(meta))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass


META_PATHS = st.sampled_from([("claim", "epsilon"), ("claim", "delta"), ("claim", "granularity"), ("claim", "text"),
                              ("counts", "members"), ("counts", "nonmembers"), ("max_length",), ("bos",), ("kind",),
                              ("schema",), ("seed",), ("model", "sha256"), ("references",), ("reference_in",),
                              ("claim",), ("counts",), ("unknown",), ("model",)])
CONFIG_KEYS = st.sampled_from(["n_layer", "n_embd", "n_head", "vocab_size", "n_positions", "n_inner", "model_type",
                               "architectures", "auto_map", "tie_word_embeddings", "layer_norm_epsilon"])
HEADER_FIELDS = st.sampled_from(["dtype", "shape", "data_offsets", "entry", "length"])


def _set(obj, path, value):
    for k in path[:-1]:
        if not isinstance(obj, dict):
            return
        obj = obj.setdefault(k, {})
    if isinstance(obj, dict):
        obj[path[-1]] = value


def mutate_bundle(b: Path, draw) -> None:
    kinds = draw(st.lists(st.sampled_from(["meta", "texts", "config", "header", "tokenizer", "file"]), min_size=1,
                          max_size=3))
    for what in sorted(kinds, key=lambda k: k == "file"):       # a file replaced by a link or a FIFO: last
        try:
            _mutate_one(b, what, draw)
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, StopIteration, OSError):
            pass    # an earlier mutation left the file unreadable to this one: it stays as it is
    if draw(st.booleans()):
        _seal(b)


def _mutate_one(b: Path, what: str, draw) -> None:
    if what == "meta":
        meta = json.loads((b / "lm_release.json").read_text())
        _set(meta, draw(META_PATHS), draw(st.one_of(VALUES, EXTREME_INTS)))
        (b / "lm_release.json").write_text(json.dumps(meta))
    elif what == "texts":
        texts = json.loads((b / "texts.json").read_text())
        key = draw(st.sampled_from(["members", "nonmembers", "population"]))
        texts[key] = draw(st.one_of(VALUES, st.lists(st.one_of(TEXTS.map(lambda x: x[0]), VALUES,
                                                                st.just("\udc80x")), min_size=0, max_size=4)))
        (b / "texts.json").write_text(json.dumps(texts))
    elif what == "config":
        cfg = json.loads((b / "model" / "config.json").read_text())
        cfg[draw(CONFIG_KEYS)] = draw(st.one_of(VALUES, EXTREME_INTS, st.integers(-2, 300)))
        (b / "model" / "config.json").write_text(json.dumps(cfg))
    elif what == "header":
        p = b / "model" / "model.safetensors"
        blob = p.read_bytes()
        n = int.from_bytes(blob[:8], "little")
        header = json.loads(blob[8:8 + n])
        name = draw(st.sampled_from(sorted(k for k in header if k != "__metadata__")))
        field = draw(HEADER_FIELDS)
        if field == "length":
            p.write_bytes(draw(st.sampled_from([0, 1, 2**63, n + 1, n - 1])).to_bytes(8, "little") + blob[8:])
            return
        if field == "entry":
            header[name] = draw(VALUES)
        else:
            header[name][field] = draw(st.one_of(VALUES, EXTREME_INTS))
        raw = json.dumps(header).encode()
        p.write_bytes(len(raw).to_bytes(8, "little") + raw + blob[8 + n:])
    elif what == "tokenizer":
        tok = json.loads((b / "model" / "tokenizer.json").read_text())
        (b / "model" / "tokenizer.json").write_text(json.dumps(mutate_tokenizer(tok, draw)))
    else:
        kind = draw(st.sampled_from(["pickle", "symlink", "fifo", "truncate", "remove"]))
        f = b / "model" / draw(st.sampled_from(["config.json", "model.safetensors", "tokenizer.json"]))
        if f.is_symlink() or not f.is_file():      # already replaced (never open a FIFO here: it would block)
            return
        if kind == "pickle":
            (b / "model" / "pytorch_model.bin").write_bytes(b"\x80\x04K\x01.")
        elif kind == "symlink":
            f.unlink()
            f.symlink_to("/etc/hostname")
        elif kind == "fifo":
            f.unlink()
            os.mkfifo(f)
        elif kind == "truncate":
            f.write_bytes(f.read_bytes()[: draw(st.integers(0, 64))])
        else:
            f.unlink()


def bundle_case(world: dict, data) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        b = Path(shutil.copytree(world["rel"], Path(tmp) / "rel"))
        argv = ["attack", b, "--compare", "--out", Path(tmp) / "out", "--bootstrap", "20"]
        with time_limit(PER_CASE_S, "an LM bundle mutation and its attack"):
            mutate_bundle(b, data.draw)
            code, _, err = run_cli(argv)
        assert_clean(code, err, argv=argv)
        OUTCOMES[code] += 1


def main() -> None:
    """SURFACE may be several, comma-separated, with as many EXAMPLES (one start for the default run's few)."""
    surfaces, examples = sys.argv[1].split(","), [int(n) for n in sys.argv[2].split(",")]
    mode, workdir = sys.argv[3], Path(sys.argv[4])
    os.environ.setdefault("DPAUDIT_THREADS", "1")
    world = make_world(workdir)
    out = {}
    for surface, n in zip(surfaces, examples):
        body = {"tokenizer": tokenizer_case, "bundle": bundle_case}[surface]
        OUTCOMES.clear()

        @settings(max_examples=n, derandomize=mode == "fast", deadline=None, database=None, print_blob=True,
                  suppress_health_check=list(HealthCheck))
        @given(st.data())
        def run(data):
            body(world, data)

        run()
        out[surface] = {str(k): v for k, v in sorted(OUTCOMES.items())}
    print(json.dumps(out))


if __name__ == "__main__":
    main()

"""Causal language models from a local Hugging Face-style directory, checked before anything is loaded.

An LM directory holds ``config.json``, ``model.safetensors`` and ``tokenizer.json`` (the ``tokenizers`` library's
one-file format). :func:`check_lm_dir` treats it as hostile input (it may come from the party being audited):

* the directory and every file in it are plain files, no symbolic links;
* no pickle-based or code file anywhere in it (``*.bin``, ``*.pt``, ``*.pth``, ``*.ckpt``, ``*.pkl``, ``*.pickle``,
  ``*.joblib``, ``*.py``, ``*.pyc``, ``*.so``): transformers would not need them with safetensors, and a refusal is
  clearer than a file silently ignored; sharded weights (``model-0000x-of-...``) are not supported;
* ``config.json`` (at most :data:`MAX_CONFIG_BYTES`) is a JSON object whose ``model_type`` is on
  :data:`LM_MODEL_TYPES` (built-in transformers architectures only), whose ``architectures`` are that type's causal-LM
  class, and which names no custom code anywhere (``auto_map``, ``trust_remote_code``, ``custom_pipelines``);
* ``tokenizer.json`` is at most :data:`MAX_TOKENIZER_BYTES`, ``model.safetensors`` at most ``max_weight_bytes``
  (default :data:`MAX_WEIGHT_BYTES`);
* the config's layer count, width and vocabulary are capped (:data:`MAX_LM_LAYERS`, ...) and its parameter count
  bounded by arithmetic on the config alone (:func:`config_counts`), then compared with the safetensors header's
  (read alone, at most 100 MB: every entry's types checked) tensor sizes and layer indices -- before transformers
  builds anything (``n_layer: 100000`` is refused in milliseconds);
* the header names exactly the tensors, shapes and float dtypes that the config's architecture has -- the model is
  built on torch's ``meta`` device to know them -- before any weight is read (tied output embeddings may be absent).

:func:`load_lm` then loads it with transformers from these local files only (``local_files_only=True``,
``trust_remote_code=False``, ``use_safetensors=True``, ``HF_HUB_OFFLINE``), and the tokenizer with
``tokenizers.Tokenizer.from_file`` (no tokenizer class is looked up or imported).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from dpaudit._io import file_sha256, load_json_file, read_input_text
from dpaudit.errors import DataError, ParameterError, check_int, check_path, format_value

__all__ = ["LM_MODEL_TYPES", "LM_FILES", "MAX_CONFIG_BYTES", "MAX_TOKENIZER_BYTES", "MAX_WEIGHT_BYTES",
           "MAX_LM_LAYERS", "MAX_LM_WIDTH", "MAX_LM_VOCAB", "MAX_LM_PARAMETERS", "config_counts",
           "ALLOWED_TOKENIZER_REGEXES", "TOKENIZER_TYPES", "MAX_TOKENIZER_LENGTH", "MAX_WORDPIECE_CHARS",
           "MAX_TOKENIZER_CONTENT", "MAX_TOKENIZE_CHARS", "CHARS_PER_TOKEN", "check_tokenizer_json",
           "CheckedTokenizer", "read_tokenizer",
           "FORBIDDEN_SUFFIXES", "LmFiles", "check_lm_dir", "load_lm", "lm_digest", "quiet_transformers"]

#: The model types whose causal-LM class is built into transformers (never code from the directory), with that class.
LM_MODEL_TYPES: Mapping[str, str] = {
    "gpt2": "GPT2LMHeadModel", "gpt_neox": "GPTNeoXForCausalLM", "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM", "gemma": "GemmaForCausalLM",
    "gemma2": "Gemma2ForCausalLM", "phi": "PhiForCausalLM", "opt": "OPTForCausalLM", "gpt_neo": "GPTNeoForCausalLM",
}
#: The three files an LM directory needs.
LM_FILES = ("config.json", "model.safetensors", "tokenizer.json")
MAX_CONFIG_BYTES = 1 << 20
"""config.json: 1 MiB (a real one is a few kB)."""
MAX_TOKENIZER_BYTES = 64 << 20
"""tokenizer.json: 64 MiB (Llama 3's, 128k tokens, is about 9 MB)."""
MAX_WEIGHT_BYTES = 64 << 30
"""model.safetensors: 64 GiB by default (a 16B model in 32-bit floats); ``max_weight_bytes`` lowers it."""
MAX_HEADER_BYTES = 100 << 20
FORBIDDEN_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle", ".joblib", ".py", ".pyc", ".so", ".dylib",
                      ".dll", ".h5", ".msgpack")
_CODE_KEYS = ("auto_map", "trust_remote_code", "custom_pipelines")
_FLOAT_DTYPES = {"F32": 4, "F16": 2, "BF16": 2}


def quiet_transformers() -> None:
    """No network, no progress bars, no warnings from transformers on stdout/stderr."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


@dataclass(frozen=True)
class LmFiles:
    """A checked LM directory: its path, the parsed config, the tensors' shapes and the files' sha256."""

    path: Path
    config: Mapping[str, Any]
    shapes: Mapping[str, tuple[int, ...]]
    sha256: Mapping[str, str]

    @property
    def model_type(self) -> str:
        return str(self.config["model_type"])

    @property
    def num_parameters(self) -> int:
        return int(sum(math.prod(s) for s in self.shapes.values()))



def _find_code_keys(obj: Any, where: str = "") -> str | None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k in _CODE_KEYS:
                return f"{where}{k}"
            hit = _find_code_keys(v, f"{where}{k}.")
            if hit:
                return hit
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            hit = _find_code_keys(v, f"{where}{i}.")
            if hit:
                return hit
    return None


def _stat_file(p: Path, what: str, cap: int) -> int:
    try:
        st = os.stat(p, follow_symlinks=False)
    except FileNotFoundError:
        raise DataError(f"The LM directory {str(p.parent)!r} has no {p.name} (it needs {', '.join(LM_FILES)}).") from None
    if stat.S_ISLNK(st.st_mode):
        raise DataError(f"{what} {str(p)!r} is a symbolic link; dpaudit does not follow links in an LM directory.")
    if not stat.S_ISREG(st.st_mode):
        raise DataError(f"{what} {str(p)!r} is not a regular file.")
    if st.st_size == 0:
        raise DataError(f"{what} {str(p)!r} is empty.")
    if st.st_size > cap:
        raise DataError(f"{what} {str(p)!r} is {st.st_size} bytes; dpaudit reads at most {cap} bytes here.")
    return int(st.st_size)


def _read_header(p: Path, size: int) -> dict[str, tuple[str, tuple[int, ...]]]:
    with open(p, "rb") as fh:
        raw = fh.read(8)
        n = int.from_bytes(raw, "little") if len(raw) == 8 else -1
        if not 2 <= n <= min(MAX_HEADER_BYTES, size - 8):
            raise DataError(f"The weights file {str(p)!r} is not a readable safetensors file (header of {n} bytes in a "
                            f"file of {size}).")
        try:
            header = json.loads(fh.read(n).decode("utf-8"))
        except (ValueError, RecursionError) as exc:
            raise DataError(f"The weights file {str(p)!r} is not a readable safetensors file (header: "
                            f"{str(exc)[:100]}).") from None
    if not isinstance(header, dict):
        raise DataError(f"The weights file {str(p)!r} is not a readable safetensors file (header is not an object).")
    from dpaudit.training.model_files import safetensors_entry

    out: dict[str, tuple[str, tuple[int, ...]]] = {}
    data = size - 8 - n
    for name, e in header.items():
        if name == "__metadata__":
            continue
        offs = e.get("data_offsets") if isinstance(e, dict) else None
        if (isinstance(offs, list) and len(offs) == 2 and all(isinstance(o, int) and not isinstance(o, bool) for o in offs)
                and 0 <= offs[0] <= offs[1] and offs[1] > data):
            raise DataError(f"The weights file {str(p)!r} is truncated: its header needs {8 + n + offs[1]} bytes, it has "
                            f"{size}.")
        # every field's type and range (LM weights are F32, F16 or BF16): one DataError naming the tensor and field
        dtype, shape, _ = safetensors_entry(name, e, _FLOAT_DTYPES, f"The weights file {str(p)!r}", data)
        out[str(name)] = (dtype, shape)
    return out


#: The most layers an LM config may have (Llama 3.1 405B has 126); checked on the config before any module is built.
MAX_LM_LAYERS = 256
#: The widest hidden / embedding size and the largest vocabulary an LM config may name.
MAX_LM_WIDTH = 1 << 17
MAX_LM_VOCAB = 1 << 24
#: The most parameters an LM may have: what the largest weights file holds in 16-bit floats.
MAX_LM_PARAMETERS = MAX_WEIGHT_BYTES // 2
_LAYER_KEY = {"gpt2": "n_layer", "gpt_neo": "num_layers"}          # every other type: num_hidden_layers
_WIDTH_KEY = {"gpt2": "n_embd"}                                      # every other type: hidden_size
_LAYER_INDEX = re.compile(r"(?:^|\.)(?:h|layers)\.(\d{1,6})\.")


def _config_int(config: Mapping[str, Any], key: str, default: int, high: int, cpath: Path) -> int:
    v = config.get(key, default)
    if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= high:
        raise DataError(f"The LM config {str(cpath)!r}: '{key}' must be an int in the range [1, {high}]. Got "
                        f"{format_value(v)} instead.")
    return v


def config_counts(config: Mapping[str, Any], cpath: Path) -> tuple[int, int]:
    """``(layers, parameters at least)`` of an LM config, by arithmetic on the config alone -- before transformers
    builds its config object (which expands per-layer lists) or any module: the layer count (capped at
    :data:`MAX_LM_LAYERS`), the width and vocabulary (capped at :data:`MAX_LM_WIDTH`, :data:`MAX_LM_VOCAB`), and a
    lower bound on the parameters that every allowed architecture has: the token embedding (vocabulary x embedding
    width) and two width-sized normalisation vectors per layer (capped at :data:`MAX_LM_PARAMETERS`). A missing key
    takes the architecture's default."""
    from transformers import AutoConfig

    mtype = str(config["model_type"])
    quiet_transformers()
    defaults = AutoConfig.for_model(mtype)            # the type's defaults: no per-layer list of the file's
    lkey, wkey = _LAYER_KEY.get(mtype, "num_hidden_layers"), _WIDTH_KEY.get(mtype, "hidden_size")
    layers = _config_int(config, lkey, int(defaults.num_hidden_layers), MAX_LM_LAYERS, cpath)
    width = _config_int(config, wkey, int(defaults.hidden_size), MAX_LM_WIDTH, cpath)
    vocab = _config_int(config, "vocab_size", int(defaults.vocab_size), MAX_LM_VOCAB, cpath)
    embed = width
    if mtype == "opt" and config.get("word_embed_proj_dim") is not None:
        embed = _config_int(config, "word_embed_proj_dim", width, MAX_LM_WIDTH, cpath)
    if mtype == "gpt_neo" and "attention_types" in config:      # [[kinds, repeats], ...]: expanded per layer
        at = config["attention_types"]
        ok = isinstance(at, list) and all(isinstance(e, list) and len(e) == 2 and isinstance(e[0], list)
                                          and isinstance(e[1], int) and not isinstance(e[1], bool) and e[1] >= 0
                                          for e in at)
        if not ok or sum(len(e[0]) * e[1] for e in at) > MAX_LM_LAYERS:
            raise DataError(f"The LM config {str(cpath)!r}: 'attention_types' must be [[kinds, repeats], ...] "
                            f"expanding to at most {MAX_LM_LAYERS} layers. Got {format_value(at)} instead.")
    params = vocab * embed + 2 * layers * width
    if params > MAX_LM_PARAMETERS:
        raise DataError(f"The LM config {str(cpath)!r} describes at least {params} parameters; dpaudit reads at most "
                        f"{MAX_LM_PARAMETERS}.")
    return layers, params


def _check_counts(config: Mapping[str, Any], cpath: Path, wpath: Path,
                  header: Mapping[str, tuple[str, tuple[int, ...]]]) -> None:
    """The config's layer and parameter counts against the weights file's header, before any module is built."""
    layers, params = config_counts(config, cpath)
    have = sum(math.prod(s) for _, s in header.values())
    if params > have:
        raise DataError(f"The weights file {str(wpath)!r} does not match {str(cpath)!r}: the config describes at least "
                        f"{params} parameters, the file holds {have}.")
    found = {int(m.group(1)) for name in header for m in [_LAYER_INDEX.search(name)] if m}
    if found and len(found) != layers:
        raise DataError(f"The weights file {str(wpath)!r} does not match {str(cpath)!r}: the config has {layers} "
                        f"layers, the file {len(found)}.")


def _expected_shapes(config: Mapping[str, Any]) -> tuple[dict[str, tuple[int, ...]], set[str]]:
    """(parameter name -> shape of the config's architecture, names that may be absent because they are tied)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    quiet_transformers()
    cfg = AutoConfig.for_model(**dict(config))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg, trust_remote_code=False)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    tied: set[str] = set()
    if getattr(cfg, "tie_word_embeddings", False):
        out = model.get_output_embeddings()
        if out is not None:
            tied = {k for k, v in model.state_dict().items() if v is out.weight}
            tied |= {k for k in shapes if k.endswith("lm_head.weight")}
    return shapes, tied


def check_lm_dir(path: str | Path, *, max_weight_bytes: int = MAX_WEIGHT_BYTES, what: str = "--lm") -> LmFiles:
    """Check an LM directory (see the module docstring) and return what was read; raises :class:`DataError`
    naming the file and the reason for anything refused, before any weight is read."""
    cap = check_int(max_weight_bytes, "max_weight_bytes", "check_lm_dir", low=1)
    root = check_path(path, "path", "check_lm_dir")     # a str or PathLike, no NUL, a name the system can hold
    try:
        st = os.stat(root, follow_symlinks=False)
    except FileNotFoundError:
        raise DataError(f"The LM directory {str(root)!r} ({what}) does not exist.") from None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise DataError(f"The LM directory {str(root)!r} ({what}) must be a directory (not a link or a file).")
    for entry in sorted(root.iterdir()):
        low = entry.name.lower()
        if entry.is_symlink():
            raise DataError(f"The LM directory {str(root)!r} holds a symbolic link {entry.name!r}; refusing it.")
        if low.endswith(FORBIDDEN_SUFFIXES):
            raise DataError(f"The LM directory {str(root)!r} holds {entry.name!r}: pickle-based weights and code files "
                            f"({', '.join(FORBIDDEN_SUFFIXES)}) are refused; dpaudit loads model.safetensors only and "
                            "never runs code from a model directory.")
        if low.startswith("model-") and low.endswith(".safetensors") or low == "model.safetensors.index.json":
            raise DataError(f"The LM directory {str(root)!r} holds sharded weights ({entry.name!r}); merge them into one "
                            "model.safetensors (sharded checkpoints are not supported).")
    cpath, wpath, tpath = (root / f for f in LM_FILES)
    _stat_file(cpath, "The LM config", MAX_CONFIG_BYTES)
    _stat_file(tpath, "The tokenizer file", MAX_TOKENIZER_BYTES)
    wsize = _stat_file(wpath, "The LM weights file", cap)
    config = load_json_file(cpath, "the LM config", max_bytes=MAX_CONFIG_BYTES, follow_symlinks=False)
    if not isinstance(config, dict):
        raise DataError(f"The LM config {str(cpath)!r} must be a JSON object.")
    code = _find_code_keys(config)
    if code:
        raise DataError(f"The LM config {str(cpath)!r} names custom code ({code!r}); dpaudit never runs code from a model "
                        "directory (trust_remote_code is always False). Use a built-in architecture.")
    mtype = config.get("model_type")
    if not isinstance(mtype, str) or mtype not in LM_MODEL_TYPES:     # a list or an object: one line, not a TypeError
        raise DataError(f"The LM config {str(cpath)!r} has model_type {str(mtype)[:80]!r}; allowed: "
                        f"{', '.join(LM_MODEL_TYPES)}.")
    archs = config.get("architectures")
    if archs is not None and (not isinstance(archs, list) or any(a != LM_MODEL_TYPES[mtype] for a in archs)):
        raise DataError(f"The LM config {str(cpath)!r} names architectures {str(archs)[:120]}; a {mtype} causal LM is "
                        f"{LM_MODEL_TYPES[mtype]}.")
    tokenizer_text = read_tokenizer(tpath)          # read once: checked here, hashed below from these bytes
    header = _read_header(wpath, wsize)
    _check_counts(config, cpath, wpath, header)     # arithmetic on the config: layers and parameters, capped
    try:
        want, tied = _expected_shapes(config)
    except DataError:
        raise
    except Exception as exc:  # noqa: BLE001 - a config transformers cannot build: one line
        raise DataError(f"The LM config {str(cpath)!r} does not describe a buildable {mtype} model: "
                        f"{type(exc).__name__}: {str(exc)[:200]}") from None
    got = {k: s for k, (_, s) in header.items()}
    missing = sorted(set(want) - set(got) - tied)
    unexpected = sorted(set(got) - set(want))
    shaped = sorted(f"{k} {got[k]} vs {want[k]}" for k in set(got) & set(want) if got[k] != want[k])
    if missing or unexpected or shaped:
        parts = [p for p in (f"missing {', '.join(missing)[:300]}" if missing else "",
                             f"unexpected {', '.join(unexpected)[:300]}" if unexpected else "",
                             f"mis-shaped (file vs config) {'; '.join(shaped)[:300]}" if shaped else "") if p]
        raise DataError(f"The weights file {str(wpath)!r} does not match the architecture of {str(cpath)!r}: "
                        + "; ".join(parts) + ".")
    # the tokenizer's digest from the bytes read_tokenizer checked (valid UTF-8, so these are the file's bytes)
    digests = {f: hashlib.sha256(tokenizer_text.encode("utf-8")).hexdigest() if f == "tokenizer.json"
               else file_sha256(root / f) for f in LM_FILES}
    return LmFiles(root, config, got, digests)


# --------------------------------------------------------------------------------------------------
# tokenizer.json: what the tokenizers library would run, checked before it runs

#: The only regular expressions a tokenizer file may hold (Split pre-tokenizers, Replace normalizers / decoders):
#: the tokenizers library runs them with a backtracking engine (Oniguruma), where a pattern such as ``(a+)+$``
#: panics (retry limit) and ``\w+\d`` takes quadratic time on a long word. These are the patterns of the allowed
#: architectures' tokenizers (GPT-2's, Llama 3's, Qwen2's), measured linear on 65,536-character runs of letters,
#: digits, spaces, newlines and punctuation; ByteLevel and Whitespace pre-tokenizers use built-in ones.
ALLOWED_TOKENIZER_REGEXES = frozenset({
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
})
#: The component types of a tokenizer file (the tokenizers library's own; none names code). Not ``Precompiled``
#: (SentencePiece's normalization map, used by none of the allowed architectures' tokenizers): its parser reserves
#: the trie size the blob declares, so the six bytes ``AAAA////`` made it allocate 4 GB (an abort where memory is
#: limited), and it follows the trie's offsets unchecked (panics).
TOKENIZER_TYPES = frozenset({
    "BertNormalizer", "Strip", "StripAccents", "NFC", "NFD", "NFKC", "NFKD", "Sequence", "Lowercase", "Nmt",
    "Replace", "Prepend", "ByteLevel", "BertPreTokenizer", "CharDelimiterSplit", "Metaspace",
    "Whitespace", "Split", "Punctuation", "WhitespaceSplit", "Digits", "UnicodeScripts", "FixedLength", "BPE",
    "WordPiece", "WordLevel", "Unigram", "RobertaProcessing", "BertProcessing", "TemplateProcessing", "BPEDecoder",
    "CTC", "Fuse", "ByteFallback"})
#: Padding / truncation lengths and FixedLength chunks a tokenizer file may name (dpaudit pads and cuts itself;
#: ``Fixed: 2**40`` made the library allocate 4 TiB and abort the process).
MAX_TOKENIZER_LENGTH = 1 << 20
#: WordPiece's longest word (its greedy longest match is quadratic in the word's length; the default is 100).
MAX_WORDPIECE_CHARS = 1000
#: Replacement / prepended strings of normalizers and decoders (a long one multiplies every character of a text).
MAX_TOKENIZER_CONTENT = 64
#: Characters of a text given to the tokenizer: 64 per token of the model's context, at most this many.
MAX_TOKENIZE_CHARS = 100_000
CHARS_PER_TOKEN = 64


def _tok_int(v: Any, field: str, low: int, high: int, where: str) -> None:
    if not isinstance(v, int) or isinstance(v, bool) or not low <= v <= high:
        raise DataError(f"The tokenizer file {where}: '{field}' must be an int in the range [{low}, {high}]. Got "
                        f"{format_value(v)} instead.")


def check_tokenizer_json(tok: Any, where: str) -> None:
    """Refuse a parsed ``tokenizer.json`` whose regular expressions, padding, truncation or component settings can
    hang the tokenizers library, make it panic or allocate without bound (see :data:`ALLOWED_TOKENIZER_REGEXES` and
    the caps above); every component type must be the library's own (:data:`TOKENIZER_TYPES`)."""
    if not isinstance(tok, dict) or not isinstance(tok.get("model"), dict):
        raise DataError(f"The tokenizer file {where} must be a JSON object with a 'model' (the tokenizers library's "
                        "one-file format).")
    pad = tok.get("padding")
    if pad is not None:
        strat = pad.get("strategy") if isinstance(pad, dict) else None
        if isinstance(strat, dict) and set(strat) == {"Fixed"}:
            _tok_int(strat["Fixed"], "padding.strategy.Fixed", 1, MAX_TOKENIZER_LENGTH, where)
        elif strat != "BatchLongest":
            raise DataError(f"The tokenizer file {where}: 'padding.strategy' must be \"BatchLongest\" or {{\"Fixed\": "
                            f"N}}. Got {format_value(strat)} instead.")
        if pad.get("pad_to_multiple_of") is not None:
            _tok_int(pad["pad_to_multiple_of"], "padding.pad_to_multiple_of", 1, MAX_TOKENIZER_LENGTH, where)
    trunc = tok.get("truncation")
    if trunc is not None:
        if not isinstance(trunc, dict):
            raise DataError(f"The tokenizer file {where}: 'truncation' must be null or an object. Got "
                            f"{format_value(trunc)} instead.")
        _tok_int(trunc.get("max_length"), "truncation.max_length", 1, MAX_TOKENIZER_LENGTH, where)
        _tok_int(trunc.get("stride", 0), "truncation.stride", 0, trunc["max_length"] - 1, where)
    stack: list[tuple[str, Any]] = [(k, tok[k]) for k in ("normalizer", "pre_tokenizer", "post_processor", "decoder")]
    stack.append(("model", {k: v for k, v in tok["model"].items() if k not in ("vocab", "merges")}))
    while stack:
        path, node = stack.pop()
        if isinstance(node, list):
            stack.extend((f"{path}[{i}]", v) for i, v in enumerate(node))
            continue
        if not isinstance(node, dict):
            continue
        kind = node.get("type")
        if isinstance(kind, str):
            if kind not in TOKENIZER_TYPES:
                raise DataError(f"The tokenizer file {where}: '{path}.type' is {format_value(kind)}, not a component "
                                "of the tokenizers library.")
            pattern = node.get("pattern")
            if pattern is not None:
                ok = isinstance(pattern, dict) and len(pattern) == 1 and (
                    isinstance(pattern.get("String"), str) and len(pattern["String"]) <= MAX_TOKENIZER_CONTENT
                    or pattern.get("Regex") in ALLOWED_TOKENIZER_REGEXES)
                if not ok:
                    raise DataError(f"The tokenizer file {where}: '{path}.pattern' {format_value(pattern)} is refused: "
                                    "a regular expression must be one of the allowed architectures' pre-tokenizer "
                                    "patterns (GPT-2, Llama 3, Qwen2: dpaudit.training.lm.files.ALLOWED_TOKENIZER_"
                                    "REGEXES), since the tokenizers library's backtracking engine can hang or panic "
                                    "on others; a literal String pattern is at most "
                                    f"{MAX_TOKENIZER_CONTENT} characters.")
            for key in ("content", "prepend", "replacement"):
                if key in node and not (isinstance(node[key], str) and len(node[key]) <= MAX_TOKENIZER_CONTENT):
                    raise DataError(f"The tokenizer file {where}: '{path}.{key}' must be a string of at most "
                                    f"{MAX_TOKENIZER_CONTENT} characters. Got {format_value(node[key])} instead.")
            if kind == "FixedLength":
                _tok_int(node.get("length"), f"{path}.length", 1, MAX_TOKENIZER_LENGTH, where)
            if "max_input_chars_per_word" in node:
                _tok_int(node["max_input_chars_per_word"], f"{path}.max_input_chars_per_word", 1, MAX_WORDPIECE_CHARS,
                         where)
            if node.get("dropout") not in (None, 0, 0.0):
                raise DataError(f"The tokenizer file {where}: '{path}.dropout' must be null (a random tokenization "
                                f"would make runs irreproducible). Got {format_value(node['dropout'])} instead.")
            for key in ("single", "pair"):
                if isinstance(node.get(key), list) and len(node[key]) > 64:
                    raise DataError(f"The tokenizer file {where}: '{path}.{key}' has {len(node[key])} pieces; at most "
                                    "64.")
        stack.extend((f"{path}.{k}", v) for k, v in node.items() if k not in ("vocab", "merges"))


def read_tokenizer(path: Path) -> str:
    """The text of a ``tokenizer.json`` (read once, no link followed, at most :data:`MAX_TOKENIZER_BYTES`), checked
    by :func:`check_tokenizer_json`: what the tokenizers library is then given is exactly what was checked."""
    text = read_input_text(path, "the tokenizer file", max_bytes=MAX_TOKENIZER_BYTES, follow_symlinks=False)
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError, OverflowError) as exc:
        raise DataError(f"The tokenizer file {str(path)!r} is not JSON: {str(exc)[:100]}") from None
    check_tokenizer_json(parsed, repr(str(path)))
    return text


def _without_stderr(call: Any) -> Any:
    """``call()`` with file descriptor 2 sent to a scratch file: a Rust panic prints its message and backtrace there
    before it becomes an exception, and the one error line is dpaudit's."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):       # no descriptor 2 to borrow (a daemon): call as it is
        return call()
    try:
        with tempfile.TemporaryFile() as scratch:
            os.dup2(scratch.fileno(), 2)
            try:
                return call()
            finally:
                os.dup2(saved, 2)
    finally:
        os.close(saved)


def _guarded(call: Any, where: str) -> Any:
    """Run one call into the tokenizers library; its panics (``pyo3_runtime.PanicException``, a BaseException) and
    errors become one :class:`DataError`."""
    try:
        return call()
    except (KeyboardInterrupt, SystemExit, GeneratorExit, MemoryError):
        raise
    except BaseException as exc:  # noqa: BLE001 - a Rust panic in a third-party library: one clean line
        raise DataError(f"The tokenizer of {where} failed: {type(exc).__name__}: {str(exc)[:200]}") from None


class CheckedTokenizer:
    """A ``tokenizers.Tokenizer`` from a checked LM directory: every call runs through :func:`_guarded`, and
    ``encode`` / ``encode_batch`` cut each text to ``max_chars`` characters *before* tokenizing (dpaudit keeps at
    most the model's context in tokens, and a token covers far fewer than :data:`CHARS_PER_TOKEN` characters in the
    allowed tokenizers), so the work per text is bounded whatever its length. Padding and truncation of the file are
    off: dpaudit cuts and pads itself."""

    def __init__(self, tokenizer: Any, *, max_chars: int, where: str, vocab_size: int | None = None) -> None:
        self._tok, self.max_chars, self._where, self.vocab_size = tokenizer, int(max_chars), where, vocab_size

    def _cut(self, text: Any) -> Any:
        return text[: self.max_chars] if isinstance(text, str) else text

    def _ids_checked(self, encodings: list) -> list:
        """Every id within the model's vocabulary (a post-processor may add ids that no vocabulary lists)."""
        if self.vocab_size is not None:
            for e in encodings:
                if e.ids and not 0 <= min(e.ids) <= max(e.ids) < self.vocab_size:
                    raise DataError(f"The tokenizer of {self._where} gave token id {max(e.ids)} but the model's "
                                    f"vocabulary is {self.vocab_size} (ids 0 .. {self.vocab_size - 1}).")
        return encodings

    def encode(self, text: Any, *args: Any, **kw: Any) -> Any:
        return self._ids_checked([_guarded(lambda: self._tok.encode(self._cut(text), *args, **kw), self._where)])[0]

    def encode_batch(self, texts: Any, *args: Any, **kw: Any) -> Any:
        cut = [self._cut(t) for t in texts]
        return self._ids_checked(_guarded(lambda: self._tok.encode_batch(cut, *args, **kw), self._where))

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._tok, name)
        if not callable(attr):
            return attr
        return lambda *a, **k: _guarded(lambda: attr(*a, **k), self._where)


def lm_digest(files: LmFiles) -> str:
    """One digest of the model (config and weights): the key of the log-probability cache."""
    return hashlib.sha256((files.sha256["config.json"] + files.sha256["model.safetensors"]).encode()).hexdigest()


def load_lm(path: str | Path | LmFiles, *, device: str = "cpu", dtype: str | None = None,
            max_weight_bytes: int = MAX_WEIGHT_BYTES) -> tuple[Any, Any, LmFiles]:
    """``(model, tokenizer, files)``: the checked directory loaded with transformers from local files only (the
    model in eval mode on ``device``; ``dtype`` ``"float32"``/``"float16"``/``"bfloat16"`` or the file's) and its
    ``tokenizers.Tokenizer``."""
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    files = path if isinstance(path, LmFiles) else check_lm_dir(path, max_weight_bytes=max_weight_bytes)
    if dtype not in (None, "float32", "float16", "bfloat16"):
        raise ParameterError(f"The 'dtype' parameter of load_lm must be one of float32, float16, bfloat16. Got {dtype!r} instead.")
    quiet_transformers()
    kw: dict[str, Any] = {"dtype": getattr(torch, dtype)} if dtype else {}
    try:
        model = AutoModelForCausalLM.from_pretrained(str(files.path), local_files_only=True, trust_remote_code=False,
                                                     use_safetensors=True, **kw)
    except Exception as exc:  # noqa: BLE001 - a broken file transformers / tokenizers refuse: one line
        raise DataError(f"The LM directory {str(files.path)!r} could not be loaded: {type(exc).__name__}: "
                        f"{str(exc)[:200]}") from None
    where = repr(str(files.path))
    text = read_tokenizer(files.path / "tokenizer.json")
    if hashlib.sha256(text.encode("utf-8")).hexdigest() != files.sha256["tokenizer.json"]:
        raise DataError(f"The tokenizer file of {where} changed after it was checked; refusing it.")
    raw = _guarded(lambda: _without_stderr(lambda: Tokenizer.from_str(text)), where)   # a panic: one error line
    _guarded(raw.no_padding, where)
    _guarded(raw.no_truncation, where)
    ctx = getattr(model.config, "n_positions", None) or getattr(model.config, "max_position_embeddings", None)
    ctx = ctx if isinstance(ctx, int) and not isinstance(ctx, bool) and ctx > 0 else MAX_TOKENIZE_CHARS
    tok = CheckedTokenizer(raw, max_chars=min(MAX_TOKENIZE_CHARS, CHARS_PER_TOKEN * ctx), where=where,
                           vocab_size=int(model.config.vocab_size))
    vocab = tok.get_vocab_size(with_added_tokens=True)
    ids = tok.get_vocab(with_added_tokens=True).values()
    top = max(ids, default=-1)
    if vocab > int(model.config.vocab_size) or top >= int(model.config.vocab_size) or min(ids, default=0) < 0:
        # a token id past the embedding (ids need not be contiguous: {"the": 100000}) would fail inside torch
        raise DataError(f"The tokenizer of {str(files.path)!r} has {vocab} tokens with ids up to {top} but the "
                        f"model's vocabulary is {model.config.vocab_size} (ids 0 .. {int(model.config.vocab_size) - 1}).")
    return model.to(device).eval(), tok, files

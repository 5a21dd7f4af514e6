"""Text for language-model audits made in-process: a synthetic corpus, a word-level tokenizer trained on it, a tiny
GPT-2-style model built from a config (nothing is downloaded), encoding with a fixed length cap, and reading a
user's text files (one text a line, or JSON Lines with a ``"text"`` field).

The corpus is a small template grammar over a few hundred words, seeded: sentences such as ``"the quiet doctor
visited a green market near the river ."`` -- varied enough that a model cannot predict a held-out sentence exactly,
regular enough that a tiny model learns it in a few hundred steps. :data:`CANARY_TOKENS` (``<c0>`` ... ``<c63>``)
and the digit words are in the tokenizer's vocabulary but never in the corpus: the "new tokens" of Panda et al.'s
canaries and the alphabet of Carlini et al.'s random secrets.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from dpaudit._io import read_input_text
from dpaudit.errors import DataError, check_int

__all__ = ["PAD", "UNK", "BOS", "EOS", "SPECIAL_TOKENS", "DIGITS", "CANARY_TOKENS", "synthetic_corpus",
           "train_tokenizer", "canary_tokens", "tiny_lm", "save_lm", "encode", "bos_token_id", "BOS_NAMES",
           "read_texts", "check_text", "MAX_TEXTS", "MAX_TEXT_CHARS"]

PAD, UNK, BOS, EOS = "[PAD]", "[UNK]", "[BOS]", "[EOS]"
SPECIAL_TOKENS = (PAD, UNK, BOS, EOS)
DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
CANARY_TOKENS = tuple(f"<c{i}>" for i in range(64))
MAX_TEXTS = 1_000_000
MAX_TEXT_CHARS = 100_000

_DET = ("the", "a", "every", "some", "this", "that", "one", "no")
_ADJ = ("quiet", "green", "old", "young", "bright", "dark", "small", "large", "happy", "tired", "brave", "calm",
        "cold", "warm", "kind", "clever", "lazy", "proud", "gentle", "busy")
_NOUN = ("doctor", "teacher", "farmer", "child", "dog", "cat", "bird", "river", "market", "garden", "city", "house",
         "school", "tree", "road", "friend", "artist", "baker", "sailor", "student", "window", "letter", "horse",
         "forest", "village", "bridge", "lamp", "boat", "song", "story")
_VERB = ("visited", "painted", "watched", "found", "followed", "helped", "carried", "built", "opened", "crossed",
         "loved", "cleaned", "described", "remembered", "chased", "heard")
_PREP = ("near", "behind", "under", "beside", "across", "inside", "beyond", "around")
_ADV = ("slowly", "quickly", "today", "again", "yesterday", "often", "never", "quietly")
_WORDS = _DET + _ADJ + _NOUN + _VERB + _PREP + _ADV + (".", ",", "and", "my", "secret", "code", "is", "number",
                                                       "account", "the")


def synthetic_corpus(num_texts: int, *, seed: int) -> list[str]:
    """``num_texts`` distinct seeded sentences of the template grammar (see the module docstring)."""
    n = check_int(num_texts, "num_texts", "synthetic_corpus", low=1, high=MAX_TEXTS)
    rng = np.random.default_rng(np.random.SeedSequence([check_int(seed, "seed", "synthetic_corpus", low=0), 0x7E47]))
    seen: set[str] = set()
    out: list[str] = []

    def np_(adj: bool) -> list[str]:
        w = [str(rng.choice(_DET))]
        if adj:
            w.append(str(rng.choice(_ADJ)))
        return w + [str(rng.choice(_NOUN))]

    while len(out) < n:
        words = np_(rng.random() < 0.7) + [str(rng.choice(_VERB))] + np_(rng.random() < 0.5)
        if rng.random() < 0.6:
            words += [str(rng.choice(_PREP))] + np_(rng.random() < 0.5)
        if rng.random() < 0.4:
            words += [str(rng.choice(_ADV))]
        if rng.random() < 0.3:
            words += ["and"] + np_(False) + [str(rng.choice(_VERB))] + np_(rng.random() < 0.5)
        s = " ".join(words + ["."])
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


def canary_tokens(count: int) -> tuple[str, ...]:
    """``<c0>`` ... ``<c{count-1}>``: reserved tokens that no corpus text contains."""
    return tuple(f"<c{i}>" for i in range(check_int(count, "count", "canary_tokens", low=0, high=1_000_000)))


def train_tokenizer(texts: Sequence[str], *, extra_tokens: Sequence[str] = DIGITS + CANARY_TOKENS) -> Any:
    """A word-level ``tokenizers.Tokenizer`` (whitespace split) with the special tokens first (``[PAD]`` = 0,
    ``[UNK]`` = 1, ``[BOS]`` = 2, ``[EOS]`` = 3), the words of ``texts`` and ``extra_tokens`` (default: the digit words
    and 64 reserved canary tokens; pass ``DIGITS + canary_tokens(k)`` for more)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordLevel(unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.WordLevelTrainer(special_tokens=list(SPECIAL_TOKENS), min_frequency=1)
    tok.train_from_iterator(list(texts) + [" ".join(extra_tokens), " ".join(_WORDS)], trainer=trainer)
    return tok


def tiny_lm(vocab_size: int, *, seed: int, n_layer: int = 2, n_embd: int = 64, n_head: int = 2,
            n_positions: int = 64) -> Any:
    """A GPT-2-style causal LM built from a config (random weights, no dropout, nothing downloaded)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from dpaudit.training.lm.files import quiet_transformers

    quiet_transformers()
    cfg = GPT2Config(vocab_size=int(vocab_size), n_layer=n_layer, n_embd=n_embd, n_head=n_head,
                     n_positions=n_positions, bos_token_id=2, eos_token_id=3, pad_token_id=0, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(int(seed))
    return GPT2LMHeadModel(cfg).eval()


def save_lm(model: Any, tokenizer: Any, directory: str | Path) -> Path:
    """Write ``config.json``, ``model.safetensors`` and ``tokenizer.json`` into ``directory`` (created)."""
    from dpaudit.training.lm.files import quiet_transformers

    quiet_transformers()
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(d), safe_serialization=True)
    tokenizer.save(str(d / "tokenizer.json"))
    return d


#: Names of a beginning-of-sequence token, looked up in this order by :func:`bos_token_id`.
BOS_NAMES = (BOS, "<s>", "<bos>", "<|begin_of_text|>", "<|endoftext|>")


def bos_token_id(tokenizer: Any) -> int | None:
    """The id of the tokenizer's beginning-of-sequence token: the first of :data:`BOS_NAMES` in its vocabulary
    (dpaudit's ``[BOS]``; Llama / Mistral's ``<s>``; Gemma's ``<bos>``; Llama 3's ``<|begin_of_text|>``; GPT-2's
    ``<|endoftext|>``, which GPT-2 was trained with between documents), or None."""
    for name in BOS_NAMES:
        i = tokenizer.token_to_id(name)
        if i is not None:
            return int(i)
    return None


def encode(tokenizer: Any, texts: Sequence[str], *, max_length: int = 64, bos: bool = True,
           with_text: bool = False) -> Any:
    """Token ids of each text cut to ``max_length`` tokens (int64 arrays).

    The BOS convention (``bos``): the first token of a sequence is never scored (nothing predicts it), so with
    ``bos=True`` (the default) the tokenizer's BOS token (:func:`bos_token_id`) comes first -- added unless the
    tokenizer's own encoding already starts with it -- and every token of the text is scored; with ``bos=False`` the
    text's own tokens only (no special tokens at all), and its first token is not scored. A tokenizer without a BOS
    token encodes as with ``bos=False``. The two conventions give different figures (a causal LM's loss on the
    first token is large), so releases record which one ran.

    ``with_text``: return ``(ids, kept)`` where ``kept[i]`` is the part of ``texts[i]`` that its kept tokens cover
    (the text up to the end of its last kept token; the whole text when nothing is cut), e.g. for the zlib signal,
    which must compress exactly the scored text."""
    L = check_int(max_length, "max_length", "encode", low=2, high=1 << 20)
    texts = list(texts)
    bid = bos_token_id(tokenizer) if bos else None
    encs = tokenizer.encode_batch(texts, add_special_tokens=bool(bos))
    ids_out: list[np.ndarray] = []
    kept: list[str] = []
    for text, e in zip(texts, encs):
        ids = list(e.ids)
        head = [bid] if bid is not None and (not ids or ids[0] != bid) else []
        full = head + ids
        ids_out.append(np.asarray(full[:L], dtype=np.int64))
        if with_text:
            n_kept = max(0, min(len(ids), L - len(head)))
            if n_kept >= len(ids):
                kept.append(text)
            else:
                ends = [end for (_, end), special in zip(e.offsets[:n_kept], e.special_tokens_mask[:n_kept])
                        if not special]
                kept.append(text[:max(ends, default=0)])
    return (ids_out, kept) if with_text else ids_out


def check_text(text: str, where: str) -> str:
    """``text`` if it is valid Unicode, i.e. encodable as UTF-8; a lone surrogate (``"\\ud800"``, which JSON's
    ``\\uXXXX`` escapes can spell) is one :class:`DataError` naming where it is: tokenizers and zlib take UTF-8 and
    would fail on it later, deep inside an attack."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise DataError(f"{where}: holds a lone surrogate {text[exc.start]!r} at character {exc.start}; texts must be "
                        "valid Unicode (UTF-8 encodable).") from None
    return text


def read_texts(path: str | Path, what: str) -> list[str]:
    """A user's texts: a ``.jsonl`` file (one JSON object a line with a string ``"text"``, or a JSON string) or a
    plain text file (one text a line; blank lines skipped). At most :data:`MAX_TEXTS` texts of
    :data:`MAX_TEXT_CHARS` characters."""
    p = Path(path)
    raw = read_input_text(p, what)
    out: list[str] = []
    for i, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        if p.suffix == ".jsonl":
            try:
                v = json.loads(line)
            except (ValueError, RecursionError) as exc:
                raise DataError(f"{what} {str(p)!r} line {i}: not JSON ({str(exc)[:80]}).") from None
            v = v.get("text") if isinstance(v, dict) else v
            if not isinstance(v, str):
                raise DataError(f"{what} {str(p)!r} line {i}: needs a string or an object with a string 'text'.")
            line = v
        if len(line) > MAX_TEXT_CHARS:
            raise DataError(f"{what} {str(p)!r} line {i}: {len(line)} characters; at most {MAX_TEXT_CHARS} per text.")
        out.append(check_text(line, f"{what} {str(p)!r} line {i}"))
        if len(out) > MAX_TEXTS:
            raise DataError(f"{what} {str(p)!r} holds more than {MAX_TEXTS} texts.")
    if len(out) < 2:
        raise DataError(f"{what} {str(p)!r} holds {len(out)} text(s); at least 2 are needed.")
    return out

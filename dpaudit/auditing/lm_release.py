"""Language-model release bundles: made from a user's own causal LM and texts (or only its token log-probabilities),
attacked with every sequence-level membership signal at once.

An LM bundle is a folder with ``lm_release.json`` (what :func:`make_lm_release` checked and recorded: the claim, the
accounting, the files' sha256, the counts) and either

* ``model/`` (the checked LM directory, see :mod:`dpaudit.training.lm.files`), ``texts.json`` (members, non-members,
  optional population texts) and optionally ``references/0 .. K-1`` (reference LM directories) with their inclusion
  masks over the targets in ``lm_release.json``; or
* ``lm_scores.npz`` (scores only, see :data:`LM_SCORES_FORMAT`).

:func:`compare_lm_release` loads it (every file checked again: a bundle may come from the party audited), computes the
token log-probabilities of every text under every model once (cached by model and text digest under
``cache_dir``) and runs :func:`dpaudit.attacks.lm_signals.compare_lm`.
"""

from __future__ import annotations

import shutil
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from dpaudit._io import atomic_dir, check_replaceable, load_json_file, load_npy_file, load_npz_file, write_json
from dpaudit.attacks.compare import AttackComparison
from dpaudit.errors import DataError, ParameterError, check_bool, check_choice, check_int
from dpaudit.serial import from_dict, to_dict

__all__ = ["LM_RELEASE_FILE", "LM_SCORES_FORMAT", "LmReleaseMeta", "LmRelease", "is_lm_release", "make_lm_release",
           "load_lm_release", "compare_lm_release", "lm_text_scores", "scored_zlib_bytes"]

LM_RELEASE_FILE = "lm_release.json"
LM_SCORES_FORMAT = """\
lm_scores.npz (allow_pickle=False): per-token statistics of the target LM on n sequences, flat with offsets:
  offsets (n+1,) int, 0 first, increasing; logp (T,) float: log p(x_t | x_<t) for t >= 1 of each sequence
  member (n,) bool
  optional: mu, sigma (T,) float (vocabulary mean / std of log p at each position: Min-K%++)
            zlib_bytes (n,) (zlib-compressed length of each text as scored, i.e. cut where its last scored token
                       ends: the zlib attack)
            reference_totals (n, K) float (reference LMs' total log-probability of each sequence), reference_in (n, K) bool
            population_total (m,), population_reference_totals (m, K) (other texts: RMIA)
"""
_SCORE_ARRAYS = ("offsets", "logp", "member", "mu", "sigma", "zlib_bytes", "reference_totals", "reference_in",
                 "population_total", "population_reference_totals")


@dataclass(frozen=True)
class LmReleaseMeta:
    """What ``lm_release.json`` holds (parsed and checked at the edge; JSON Schema ``dpaudit/schemas/lm_release.json``):
    ``kind`` ``"lm"`` (an LM directory and texts) or ``"lm-scores"``; the ``claim``; the accounting (``statement``,
    ``ledger``, ``accounting_source``) when one was given; ``counts`` of member / non-member (and population) texts;
    for ``"lm"``: the ``model``'s type, parameter count and files' sha256, the ``references``' likewise,
    ``reference_in`` (targets x references), the tokens kept per text, ``max_length``, and the BOS convention the
    texts are scored with, ``bos`` (:func:`dpaudit.training.lm.text.encode`; files without it: True)."""

    kind: str
    claim: Mapping[str, Any]
    counts: Mapping[str, int]
    seed: int = 0
    statement: Mapping[str, Any] | None = None
    ledger: Mapping[str, Any] | None = None
    accounting_source: Mapping[str, Any] = field(default_factory=dict)
    flags: tuple[Mapping[str, str], ...] = ()
    assumptions: tuple[str, ...] = ()
    model: Mapping[str, Any] | None = None
    references: tuple[Mapping[str, Any], ...] = ()
    reference_in: tuple[tuple[bool, ...], ...] | None = None
    max_length: int | None = None
    bos: bool = True
    created_by: str = "dpaudit lm release"
    schema: int = 1

    def __post_init__(self) -> None:
        o = "lm_release.json"
        check_choice(self.kind, "kind", o, ("lm", "lm-scores"))
        if self.schema != 1:
            raise DataError(f"{o}: schema {self.schema!r} is not one dpaudit reads (1).")
        from dpaudit.training.release_meta import parse_claim_entry

        # the claim as a release.json's: numbers in range (a delta "abc" or 10**400 is one DataError, never float()'s)
        parse_claim_entry(dict(self.claim) if isinstance(self.claim, Mapping) else self.claim, o)
        for k in ("members", "nonmembers"):
            check_int(self.counts.get(k), f"counts.{k}", o, low=2)
        if self.kind == "lm":
            if self.model is None or not isinstance(self.model.get("sha256"), Mapping):
                raise DataError(f"{o}: an 'lm' release records its model's files and sha256 ('model.sha256').")
            check_int(self.max_length, "max_length", o, low=2, high=1 << 20)
            n, K = self.counts["members"] + self.counts["nonmembers"], len(self.references)
            if self.reference_in is not None and (len(self.reference_in) != n or any(len(r) != K for r in self.reference_in)):
                raise DataError(f"{o}: 'reference_in' must be {n} rows of {K} booleans (targets x references).")


def is_lm_release(path: str | Path) -> bool:
    p = Path(path) / LM_RELEASE_FILE
    return p.is_file() and not p.is_symlink()


@dataclass(frozen=True)
class LmRelease:
    """A loaded LM bundle: ``meta`` (lm_release.json, checked), and either the texts or the scores."""

    path: Path
    meta: Mapping[str, Any]
    texts: Mapping[str, tuple[str, ...]] | None = None
    scores: Mapping[str, np.ndarray] | None = None

    @property
    def kind(self) -> str:
        return str(self.meta["kind"])

    @property
    def membership(self) -> dict[str, np.ndarray]:
        if self.texts is not None:
            n1, n0 = len(self.texts["members"]), len(self.texts["nonmembers"])
            return {"members": np.arange(n1), "nonmembers": np.arange(n1, n1 + n0)}
        m = np.asarray(self.scores["member"], dtype=bool)        # type: ignore[index]
        return {"members": np.flatnonzero(m), "nonmembers": np.flatnonzero(~m)}


def _texts(spec: Any, what: str) -> list[str]:
    from dpaudit.training.lm.text import read_texts

    if isinstance(spec, (str, Path)):
        return read_texts(spec, what)
    out = list(spec)
    if len(out) < 2 or not all(isinstance(t, str) for t in out):
        raise DataError(f"{what} must be at least 2 strings.")
    from dpaudit.training.lm.text import check_text

    return [check_text(t, f"{what}, text {i}") for i, t in enumerate(out)]


def _copy_lm(src: Path, dst: Path) -> None:
    from dpaudit.training.lm.files import LM_FILES

    dst.mkdir(parents=True)
    for f in LM_FILES:
        shutil.copyfile(src / f, dst / f, follow_symlinks=False)


def _check_scores(z: Mapping[str, np.ndarray], where: str) -> dict[str, np.ndarray]:
    from dpaudit.attacks.lm_signals import segment_lengths

    unknown = sorted(set(z) - set(_SCORE_ARRAYS))
    if unknown:
        raise DataError(f"{where} has unexpected arrays {unknown}. Expected:\n{LM_SCORES_FORMAT}")
    for k in ("offsets", "logp", "member"):
        if k not in z:
            raise DataError(f"{where} lacks '{k}'. Expected:\n{LM_SCORES_FORMAT}")
    lens = segment_lengths(z["offsets"])
    n, T = lens.size, int(np.asarray(z["offsets"])[-1])
    out: dict[str, np.ndarray] = {"offsets": np.asarray(z["offsets"], dtype=np.int64)}
    shapes = {"logp": (T,), "mu": (T,), "sigma": (T,), "member": (n,), "zlib_bytes": (n,)}
    for k, shape in shapes.items():
        if k in z:
            a = np.asarray(z[k])
            if a.shape != shape or (k != "member" and not np.all(np.isfinite(a.astype(np.float64)))):
                raise DataError(f"{where}: '{k}' must have shape {shape} (finite); got {a.shape}.")
            out[k] = a.astype(bool) if k == "member" else a.astype(np.float64)
    if np.asarray(z["member"]).dtype != bool:
        raise DataError(f"{where}: 'member' must be a boolean array.")
    if ("mu" in z) != ("sigma" in z):
        raise DataError(f"{where}: 'mu' and 'sigma' come together (Min-K%++).")
    if "reference_totals" in z:
        r = np.asarray(z["reference_totals"], dtype=np.float64)
        if r.ndim != 2 or r.shape[0] != n or not np.all(np.isfinite(r)):
            raise DataError(f"{where}: 'reference_totals' must be finite (n, K) = ({n}, K); got {r.shape}.")
        out["reference_totals"] = r
        inc = np.asarray(z.get("reference_in", np.zeros(r.shape, bool)))
        if inc.dtype != bool or inc.shape != r.shape:
            raise DataError(f"{where}: 'reference_in' must be boolean of shape {r.shape}; got {inc.dtype} {inc.shape}.")
        out["reference_in"] = inc
        if ("population_total" in z) != ("population_reference_totals" in z):
            raise DataError(f"{where}: population texts need both 'population_total' and 'population_reference_totals'.")
        if "population_total" in z:
            pt = np.asarray(z["population_total"], dtype=np.float64).ravel()
            pr = np.asarray(z["population_reference_totals"], dtype=np.float64)
            if pr.shape != (pt.size, r.shape[1]) or not (np.all(np.isfinite(pt)) and np.all(np.isfinite(pr))):
                raise DataError(f"{where}: 'population_reference_totals' must be finite ({pt.size}, {r.shape[1]}); "
                                f"got {pr.shape}.")
            out["population_total"], out["population_reference_totals"] = pt, pr
    elif any(k in z for k in ("reference_in", "population_total", "population_reference_totals")):
        raise DataError(f"{where}: reference masks and population scores need 'reference_totals'.")
    m = out["member"]
    if m.sum() < 2 or (~m).sum() < 2:
        raise DataError(f"{where}: at least 2 members and 2 non-members are needed; got {int(m.sum())} and {int((~m).sum())}.")
    return out


def make_lm_release(out: str | Path, *, claim: Sequence[str] | Mapping[str, Any], lm: Any = None,
                    members: Any = None, nonmembers: Any = None, population: Any = None,
                    reference_lms: Sequence[Any] = (), reference_in: Any = None, lm_scores: Any = None,
                    ledger: Any = None, dp_events: Any = None, opacus: Any = None, seed: int = 0,
                    max_length: int = 512, max_weight_bytes: int | None = None, overwrite: bool = False,
                    bos: bool = True) -> Path:
    """Check every input, then write an LM bundle ``out`` atomically (see the module docstring).

    ``lm``: the LM directory; ``members`` / ``nonmembers`` / ``population``: text files (``.jsonl`` or one text a line)
    or lists of strings; ``reference_lms``: LM directories of the same tokenizer; ``reference_in``: ``.npy`` or array
    (n_targets, K) bool (default: no reference LM trained on a target). Or ``lm_scores``: an ``.npz`` of
    :data:`LM_SCORES_FORMAT`. ``claim``, ``ledger``/``dp_events``/``opacus``: as
    :func:`dpaudit.auditing.release_make.make_release`. ``max_length``: tokens kept per text; ``bos``: score the texts
    with the tokenizer's BOS token first (True) or their own tokens only (False), see
    :func:`dpaudit.training.lm.text.encode`."""
    from dpaudit.auditing.release_make import accounting_inputs, existing_input, parse_claim
    from dpaudit.training.lm.files import MAX_WEIGHT_BYTES, check_lm_dir
    from dpaudit.training.release import check_release_target

    check_release_target(out, "--out", "release make")
    seed = check_int(seed, "seed", "make_lm_release", low=0)
    L = check_int(max_length, "max_length", "make_lm_release", low=2, high=1 << 20)
    cap = MAX_WEIGHT_BYTES if max_weight_bytes is None else check_int(max_weight_bytes, "max_weight_bytes",
                                                                       "make_lm_release", low=1)
    if Path(out).exists() or Path(out).is_symlink():
        if not overwrite:
            raise DataError(f"{out} already exists; pass overwrite=True (--overwrite) to replace it.")
        check_replaceable(out)
    if (lm is None) == (lm_scores is None):
        raise ParameterError(f"Give exactly one of an LM directory (--lm) or its scores (--lm-scores). Got lm={lm!r}, "
                             f"lm_scores={lm_scores!r} instead.")
    claim_d = parse_claim(claim)
    ledger_d, statement, acc_assumptions, flags, source = accounting_inputs(ledger, dp_events, opacus, claim_d)
    meta: dict[str, Any] = {"claim": claim_d, "statement": statement,
                            "ledger": ledger_d, "accounting_source": source, "seed": seed,
                            "flags": [{"code": c, "message": m} for c, m in flags],
                            "assumptions": ["The LM was trained outside dpaudit; membership is as declared by whoever "
                                            "made this release, and dpaudit cannot verify it."] + list(acc_assumptions)}
    if lm_scores is not None:
        if any(v is not None for v in (members, nonmembers, population, reference_in)) or reference_lms:
            raise ParameterError("A scores-only LM release takes no texts or reference LMs (lm_scores.npz holds them).")
        p = existing_input(lm_scores, "The LM scores file")
        arrays = _check_scores(load_npz_file(p, "the LM scores file", kinds="biuf"), f"The LM scores file {str(p)!r}")
        meta.update(kind="lm-scores", counts={"members": int(arrays["member"].sum()),
                                              "nonmembers": int((~arrays["member"]).sum())})
        from dpaudit._io import save_npz

        with atomic_dir(out, overwrite, kind="lm release") as tmp:
            save_npz(tmp / "lm_scores.npz", **arrays)
            write_json(tmp / LM_RELEASE_FILE, to_dict(from_dict(LmReleaseMeta, meta, what=LM_RELEASE_FILE)))
        return Path(out)
    if members is None or nonmembers is None:
        raise ParameterError("An LM release needs --members and --nonmembers text files. Got "
                             f"members={members!r}, nonmembers={nonmembers!r} instead.")
    files = check_lm_dir(lm, max_weight_bytes=cap)
    refs = [check_lm_dir(r, max_weight_bytes=cap, what="--reference-lm") for r in reference_lms]
    for r in refs:
        if r.sha256["tokenizer.json"] != files.sha256["tokenizer.json"]:
            raise DataError(f"The reference LM {str(r.path)!r} has another tokenizer than the target LM; sequence "
                            "scores must compare the same tokens.")
    texts = {"members": _texts(members, "The members file"), "nonmembers": _texts(nonmembers, "The non-members file")}
    if population is not None:
        texts["population"] = _texts(population, "The population file")
    n = len(texts["members"]) + len(texts["nonmembers"])
    inc = None
    if reference_in is not None:
        if not refs:
            raise ParameterError("The 'reference_in' parameter needs reference LMs (--reference-lm).")
        inc = np.asarray(load_npy_file(existing_input(reference_in, "The reference inclusion file"),
                                       "the reference inclusion file", kinds="b")
                         if isinstance(reference_in, (str, Path)) else reference_in)
        if inc.dtype != bool or inc.shape != (n, len(refs)):
            raise DataError(f"The reference inclusion mask must be boolean of shape ({n}, {len(refs)}) (targets: members "
                            f"then non-members; one column per --reference-lm); got {inc.dtype} {inc.shape}.")
    meta.update(kind="lm", model={"model_type": files.model_type, "parameters": files.num_parameters,
                                  "sha256": dict(files.sha256)},
                references=[{"model_type": r.model_type, "sha256": dict(r.sha256)} for r in refs],
                reference_in=None if inc is None else inc.tolist(), max_length=L,
                bos=check_bool(bos, "bos", "make_lm_release"),
                counts={k: len(v) for k, v in texts.items()})
    with atomic_dir(out, overwrite, kind="lm release") as tmp:
        _copy_lm(files.path, tmp / "model")
        for i, r in enumerate(refs):
            _copy_lm(r.path, tmp / "references" / str(i))
        write_json(tmp / "texts.json", texts)
        write_json(tmp / LM_RELEASE_FILE, to_dict(from_dict(LmReleaseMeta, meta, what=LM_RELEASE_FILE)))
    return Path(out)


def load_lm_release(path: str | Path) -> LmRelease:
    """Read and check an LM bundle (its LM directories are checked when :func:`compare_lm_release` loads them)."""
    root = Path(path)
    if root.is_symlink() or not root.is_dir():
        raise DataError(f"The LM release {str(root)!r} must be a folder (not a link).")
    raw_meta = load_json_file(root / LM_RELEASE_FILE, "the LM release file", follow_symlinks=False)
    import dataclasses

    known = {f.name for f in dataclasses.fields(LmReleaseMeta)}
    if isinstance(raw_meta, dict) and set(raw_meta) - known:
        raise DataError(f"{str(root / LM_RELEASE_FILE)!r} has unknown fields {sorted(set(raw_meta) - known)[:5]}.")
    meta = to_dict(from_dict(LmReleaseMeta, raw_meta, what=str(root / LM_RELEASE_FILE)))
    if meta["kind"] == "lm-scores":
        z = load_npz_file(root / "lm_scores.npz", "the LM scores file", kinds="biuf", follow_symlinks=False)
        return LmRelease(root, meta, scores=_check_scores(z, f"{str(root / 'lm_scores.npz')!r}"))
    raw = load_json_file(root / "texts.json", "the texts file", follow_symlinks=False)
    if not isinstance(raw, dict) or not {"members", "nonmembers"} <= set(raw) or not set(raw) <= {"members", "nonmembers", "population"}:
        raise DataError(f"{str(root / 'texts.json')!r} must be an object with 'members', 'nonmembers' (and optionally "
                        "'population') lists of strings.")
    texts = {}
    for k, v in raw.items():
        if not isinstance(v, list) or len(v) < 2 or not all(isinstance(t, str) for t in v):
            raise DataError(f"{str(root / 'texts.json')!r}: '{k}' must be a list of at least 2 strings.")
        from dpaudit.training.lm.text import check_text

        texts[k] = tuple(check_text(t, f"{str(root / 'texts.json')!r}: {k}[{i}]") for i, t in enumerate(v))
    if len(texts["members"]) != meta["counts"]["members"] or len(texts["nonmembers"]) != meta["counts"]["nonmembers"]:
        raise DataError(f"{str(root / 'texts.json')!r} holds other counts of texts than {LM_RELEASE_FILE} records.")
    return LmRelease(root, meta, texts=texts)


def lm_text_scores(model: Any, tokenizer: Any, texts: Sequence[str], *, model_digest: str, max_length: int,
                   cache_dir: str | Path | None = None, batch_tokens: int | None = None, device: str | None = None,
                   bos: bool = True) -> Any:
    """:func:`~dpaudit.training.lm.logprobs.token_logprobs` of ``texts`` (encoded by
    :func:`~dpaudit.training.lm.text.encode` with the ``bos`` convention, cut to ``max_length`` tokens and to the
    model's context)."""
    from dpaudit.training.lm.logprobs import model_context, token_logprobs
    from dpaudit.training.lm.text import encode

    seqs = encode(tokenizer, texts, max_length=min(max_length, model_context(model, max_length)), bos=bos)
    short = [i for i, s in enumerate(seqs) if s.size < 2]
    if short:
        raise DataError(f"Text {short[0]} ({texts[short[0]][:40]!r}) has fewer than 2 tokens; nothing to score.")
    return token_logprobs(model, seqs, model_digest=model_digest, cache_dir=cache_dir, batch_tokens=batch_tokens,
                          device=device)


def scored_zlib_bytes(model: Any, tokenizer: Any, texts: Sequence[str], *, max_length: int,
                      bos: bool = True) -> np.ndarray:
    """The zlib-compressed length (bytes, UTF-8) of exactly the part of each text whose tokens
    :func:`lm_text_scores` scores: the text cut where its last kept token ends (the zlib signal's denominator)."""
    from dpaudit.training.lm.logprobs import model_context
    from dpaudit.training.lm.text import encode

    _, kept = encode(tokenizer, texts, max_length=min(max_length, model_context(model, max_length)), bos=bos,
                     with_text=True)
    return np.array([max(1, len(zlib.compress(t.encode("utf-8")))) for t in kept], dtype=np.float64)


def compare_lm_release(release: LmRelease | str | Path, *, k: float = 0.2, rounding: str = "floor",
                       gamma: float = 1.0, rmia_a: float | None = None, confidence: float = 0.95,
                       delta: float | None = None, n_bootstrap: int = 1000, seed: int = 0, per_record: bool = True,
                       device: str = "cpu", cache_dir: str | Path | None = None,
                       batch_tokens: int | None = None) -> AttackComparison:
    """Every sequence-level attack on an LM bundle, side by side (:func:`dpaudit.attacks.lm_signals.compare_lm`):
    the token log-probabilities of every text under the target and each reference LM are computed once (cached
    under ``cache_dir``), with the BOS convention the release recorded (``bos``, default True) and its
    ``max_length``; the zlib signal compresses exactly the scored part of each text. ``k``, ``rounding``: Min-K%'s
    fraction and count (:func:`~dpaudit.attacks.lm_signals.min_k_count`). ``delta`` defaults to the claimed delta;
    ``batch_tokens``: tokens per batch of the log-probability pass (default: chosen from the measured rate)."""
    from dpaudit.attacks.lm_signals import compare_lm, total_logprob
    from dpaudit.training.lm.files import check_lm_dir, lm_digest, load_lm

    rel = release if isinstance(release, LmRelease) else load_lm_release(release)
    if delta is None:
        delta = float(rel.meta["claim"].get("delta") or 0.0)
    kw = dict(k=k, rounding=rounding, gamma=gamma, a=rmia_a, confidence=confidence, delta=delta, n_bootstrap=n_bootstrap, seed=seed,
              per_record=per_record)
    if rel.scores is not None:
        s = rel.scores
        return compare_lm(s["logp"], s["offsets"], s["member"], mu=s.get("mu"), sigma=s.get("sigma"),
                          zlib_bytes=s.get("zlib_bytes"), reference_totals=s.get("reference_totals"),
                          reference_in=s.get("reference_in"), population_total=s.get("population_total"),
                          population_reference_totals=s.get("population_reference_totals"), **kw)
    texts = rel.texts or {}
    targets = list(texts["members"]) + list(texts["nonmembers"])
    member = np.r_[np.ones(len(texts["members"]), bool), np.zeros(len(texts["nonmembers"]), bool)]
    pop = list(texts.get("population", ()))
    L = int(rel.meta["max_length"])
    bos = bool(rel.meta.get("bos", True))
    zl = None

    def scored(lm_dir: Path, want_sha: Mapping[str, str]) -> tuple[Any, Any]:
        nonlocal zl
        files = check_lm_dir(lm_dir)
        if dict(files.sha256) != dict(want_sha):
            raise DataError(f"The LM {str(lm_dir)!r} differs from what {LM_RELEASE_FILE} recorded (sha256).")
        model, tok, _ = load_lm(files, device=device)
        d = lm_digest(files)
        t = lm_text_scores(model, tok, targets, model_digest=d, max_length=L, cache_dir=cache_dir,
                           batch_tokens=batch_tokens, bos=bos)
        p = lm_text_scores(model, tok, pop, model_digest=d, max_length=L, cache_dir=cache_dir,
                           batch_tokens=batch_tokens, bos=bos) if pop else None
        if zl is None:
            zl = scored_zlib_bytes(model, tok, targets, max_length=L, bos=bos)
        return t, p

    tgt, tpop = scored(rel.path / "model", rel.meta["model"]["sha256"])
    ref_tot, pop_ref = [], []
    for i, r in enumerate(rel.meta.get("references") or []):
        t, p = scored(rel.path / "references" / str(i), r["sha256"])
        if not np.array_equal(t.offsets, tgt.offsets):
            raise DataError(f"Reference LM {i} tokenises the texts differently from the target.")
        ref_tot.append(total_logprob(t.logp, t.offsets))
        if p is not None:
            pop_ref.append(total_logprob(p.logp, p.offsets))
    R = np.stack(ref_tot, 1) if ref_tot else None
    inc = None if rel.meta.get("reference_in") is None else np.asarray(rel.meta["reference_in"], dtype=bool)
    return compare_lm(tgt.logp, tgt.offsets, member, mu=tgt.mu, sigma=tgt.sigma, zlib_bytes=zl, reference_totals=R,
                      reference_in=inc,
                      population_total=None if tpop is None or R is None else total_logprob(tpop.logp, tpop.offsets),
                      population_reference_totals=np.stack(pop_ref, 1) if pop_ref else None, **kw)


"""Per-record membership risk: which records an attack exposes, not only how well it does on average.

Aggregate AUC and epsilon hide that a few records carry most of the leakage (Carlini, Jagielski, Zhang, Papernot,
Terzis, Tramer 2022, "The privacy onion effect"). :class:`RecordScores` keeps every evaluated record's score under
each attack run (with the attack's per-record p-value or likelihood ratio where it has one); :func:`exposure_ranks`
orders the records by the primary attack's score (rank 1 = most exposed; ties share a rank, so ranks do not depend
on the order the records are given in); :func:`summarise_records` gives the top records and how much of the true
positives at a low false-positive rate the top 1% of records carries.

What a per-record figure is: the score of one record under one target model -- an estimate of that record's
exposure, not a certified per-record guarantee (one model, one draw of the training randomness). A member with a
small p-value is a record the attack would flag at that false-positive rate; a non-member near the top is a
record the model treats like a member without having trained on it (a false positive, often a near-duplicate of
a member).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from dpaudit.errors import DataError, ParameterError, check_int, check_probability
from dpaudit.serial import BoolArray, FloatArray, IntArray

__all__ = ["RecordScores", "TopRecord", "TprShare", "PerRecordSummary", "exposure_ranks", "tpr_share",
           "summarise_records", "per_record_columns"]


def _arr(x: Any, dtype: Any, name: str, n: int | None) -> np.ndarray:
    a = np.asarray(x, dtype=dtype)
    if a.ndim != 1 or (n is not None and a.size != n):
        raise DataError(f"RecordScores: '{name}' must be a 1-D array of {n if n is not None else 'n'} entries; "
                        f"got shape {a.shape}.")
    return a


@dataclass(frozen=True, eq=False)
class RecordScores:
    """Every evaluated record under every attack run on it.

    ``record``: the record's index (into the release's data set, or into the scores file's members then
    non-members); ``label`` (-1 where unknown); ``member``: ground truth. ``scores``: attack name -> (n,) scores
    (larger = more likely member); ``statistics``: column name (``"<attack>_p_value"``, ``"<attack>_log_lr"``, ...)
    -> (n,) per-record p-values / likelihood ratios; ``primary``: the attack whose score ranks the records.
    """

    record: IntArray
    label: IntArray
    member: BoolArray
    scores: Mapping[str, FloatArray]
    statistics: Mapping[str, FloatArray] = field(default_factory=dict)
    primary: str = ""

    def __post_init__(self) -> None:
        rec = _arr(self.record, np.int64, "record", None)
        n = rec.size
        object.__setattr__(self, "record", rec)
        object.__setattr__(self, "label", _arr(self.label, np.int64, "label", n))
        object.__setattr__(self, "member", _arr(self.member, bool, "member", n))
        if not self.scores:
            raise DataError("RecordScores needs at least one attack's scores.")
        object.__setattr__(self, "scores", {k: _arr(v, np.float64, k, n) for k, v in self.scores.items()})
        object.__setattr__(self, "statistics", {k: _arr(v, np.float64, k, n) for k, v in self.statistics.items()})
        primary = self.primary or next(iter(self.scores))
        if primary not in self.scores:
            raise ParameterError(f"The 'primary' parameter of RecordScores must be one of {', '.join(self.scores)}. "
                                 f"Got {primary!r} instead.")
        object.__setattr__(self, "primary", primary)

    def __len__(self) -> int:
        return int(self.record.size)

    def ranks(self, attack: str | None = None) -> np.ndarray:
        """Exposure rank of every record under ``attack`` (default: the primary one); see :func:`exposure_ranks`."""
        return exposure_ranks(self.scores[attack or self.primary])


def exposure_ranks(scores) -> np.ndarray:
    """Competition ranks of ``scores`` in decreasing order: rank ``1 + #{j : s_j > s_i}`` (1 = most exposed; equal
    scores share the smaller rank), so a record's rank depends on the scores only, never on the records' order."""
    s = np.asarray(scores, dtype=np.float64).ravel()
    srt = np.sort(s)
    return (s.size - np.searchsorted(srt, s, side="right") + 1).astype(np.int64)


@dataclass(frozen=True, slots=True)
class TopRecord:
    """One of the most exposed records: its exposure ``rank``, index, label, membership and primary score, and its
    per-record statistic (``statistic_name`` = ``statistic``; NaN when the attack has none)."""

    rank: int
    record: int
    label: int
    member: bool
    score: float
    statistic_name: str
    statistic: float


@dataclass(frozen=True, slots=True)
class TprShare:
    """At false-positive rate ``fpr`` (the conservative threshold of :mod:`dpaudit.attacks.metrics`), the attack
    flags ``true_positives`` members (TPR ``tpr``); ``top_true_positives`` of them are among the ``num_top`` most
    exposed records (the top ``top_fraction`` of all evaluated records), i.e. TPR ``tpr_top`` and a ``share`` of
    the true positives (NaN without true positives)."""

    fpr: float
    tpr: float
    true_positives: int
    top_fraction: float
    num_top: int
    top_true_positives: int
    tpr_top: float
    share: float


def tpr_share(scores, member, fpr: float, *, top_fraction: float = 0.01) -> TprShare:
    """How much of the TPR at ``fpr`` the ``top_fraction`` most exposed records carry (see :class:`TprShare`).

    The threshold is the conservative one of :func:`dpaudit.attacks.metrics.tpr_at_fpr`: with ``k = floor(fpr n_0)``
    the rule "member iff score > the (k+1)-th largest non-member score"."""
    owner = "tpr_share"
    s = np.asarray(scores, dtype=np.float64).ravel()
    mem = np.asarray(member, dtype=bool).ravel()
    if s.size != mem.size or not mem.any() or mem.all():
        raise DataError(f"{owner} needs scores and membership of equal length with members and non-members; got "
                        f"{s.size} scores, {int(mem.sum())} members of {mem.size}.")
    alpha = check_probability(fpr, "fpr", owner, allow_zero=True, allow_one=True)
    frac = check_probability(top_fraction, "top_fraction", owner, allow_one=True)
    neg = np.sort(s[~mem])[::-1]
    k = int(math.floor(alpha * neg.size + 1e-9))
    cut = -np.inf if k >= neg.size else neg[k]
    tp = mem & (s > cut)
    num_top = max(1, int(math.ceil(frac * s.size)))
    top = exposure_ranks(s) <= num_top
    n1, ntp, ntop = int(mem.sum()), int(tp.sum()), int((tp & top).sum())
    return TprShare(alpha, ntp / n1, ntp, frac, int(top.sum()), ntop, ntop / n1, ntop / ntp if ntp else math.nan)


@dataclass(frozen=True, slots=True)
class PerRecordSummary:
    """The report's per-record section: the ``top`` most exposed records under the ``primary`` attack and, at each
    low FPR, the share of the true positives carried by the top records (``shares``)."""

    primary: str
    num_records: int
    num_members: int
    top: tuple[TopRecord, ...]
    shares: tuple[TprShare, ...]


def _statistic_column(rs: RecordScores) -> str:
    for suffix in ("_p_value", "_log_lr"):
        if rs.primary + suffix in rs.statistics:
            return rs.primary + suffix
    return ""


def summarise_records(rs: RecordScores, *, top: int = 20, fprs: Sequence[float] = (0.001, 0.01),
                      top_fraction: float = 0.01) -> PerRecordSummary:
    """Top ``top`` records by exposure rank (ties: smaller record index first) and :func:`tpr_share` at each FPR."""
    k = check_int(top, "top", "summarise_records", low=1)
    s = rs.scores[rs.primary]
    ranks = rs.ranks()
    order = np.lexsort((rs.record, ranks))[:k]
    col = _statistic_column(rs)
    stat = rs.statistics.get(col)
    rows = tuple(TopRecord(int(ranks[i]), int(rs.record[i]), int(rs.label[i]), bool(rs.member[i]), float(s[i]), col,
                           float(stat[i]) if stat is not None else math.nan) for i in order)
    shares = tuple(tpr_share(s, rs.member, f, top_fraction=top_fraction) for f in fprs) \
        if rs.member.any() and not rs.member.all() else ()
    return PerRecordSummary(rs.primary, len(rs), int(rs.member.sum()), rows, shares)


def per_record_columns(rs: RecordScores) -> tuple[list[str], list[np.ndarray]]:
    """The columns of ``per_record.csv``: record, label, member, rank (primary attack), then per attack its score
    and rank, then the per-record statistics. Rows are sorted by rank (then record index)."""
    names = ["record", "label", "member", "rank"]
    cols: list[np.ndarray] = [rs.record, rs.label, rs.member.astype(np.int64), rs.ranks()]
    for a, s in rs.scores.items():
        names += [f"{a}_score", f"{a}_rank"]
        cols += [s, exposure_ranks(s)]
    for k, v in rs.statistics.items():
        names.append(k)
        cols.append(v)
    order = np.lexsort((rs.record, cols[3]))
    return names, [c[order] for c in cols]

"""Split a data set among parties (clients): IID, label skew, major-class skew, size skew, mixed.

Every function takes the label vector ``y`` (ints in ``[0, C)``), the number of parties and a seed, and
returns a list of sorted int64 index arrays, one per party, pairwise disjoint. Except for
:func:`major_class` with an explicit per-party size, every record is assigned to exactly one party.
All randomness comes from ``numpy.random.default_rng(SeedSequence([seed, tag]))``: same inputs, same
partition.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from dpaudit.errors import DataError, ParameterError, check_choice, check_float, check_int

__all__ = ["SCHEMES", "iid", "dirichlet", "dirichlet_fixed_size", "major_class", "size_skew", "mixed", "partition",
           "label_counts"]

SCHEMES = ("iid", "dirichlet", "dirichlet_fixed_size", "major_class", "size_skew", "mixed")


def _labels(y, owner: str) -> np.ndarray:
    y = np.asarray(y)
    if y.ndim != 1 or y.size == 0 or not np.issubdtype(y.dtype, np.integer) or y.min() < 0:
        raise DataError(f"{owner}: y must be a non-empty 1-D array of non-negative int labels.")
    return y.astype(np.int64)


def _skew_args(y, num_parties, beta, min_size, owner: str) -> tuple[np.ndarray, int, float, int]:
    """Validated ``(y, num_parties, beta, min_size)`` of a skewed partition; ``min_size`` records for each of
    ``num_parties`` must fit in ``len(y)``."""
    y = _labels(y, owner)
    n_par = check_int(num_parties, "num_parties", owner, low=1, high=len(y))
    beta = check_float(beta, "beta", owner, low=0.0, low_open=True)
    min_size = check_int(min_size, "min_size", owner, low=0)
    if min_size * n_par > len(y):
        raise ParameterError(f"The 'min_size' parameter of {owner} must be at most len(y) / num_parties = "
                             f"{len(y) // n_par}. Got {min_size} instead.")
    return y, n_par, beta, min_size


def _rng(seed: int, tag: int, owner: str) -> np.random.Generator:
    seed = check_int(seed, "seed", owner, low=0)
    return np.random.default_rng(np.random.SeedSequence([seed, tag]))


def _finish(parts: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]


def label_counts(y, parts: Sequence[np.ndarray], num_classes: int | None = None) -> np.ndarray:
    """Matrix (parties x classes) of how many records of each class each party holds."""
    y = np.asarray(y, dtype=np.int64)
    C = int(num_classes if num_classes is not None else y.max() + 1)
    return np.stack([np.bincount(y[p], minlength=C) for p in parts]) if parts else np.zeros((0, C), dtype=np.int64)


def iid(y, num_parties: int, *, seed: int) -> list[np.ndarray]:
    """A seeded permutation cut into ``num_parties`` near-equal parts (sizes differ by at most 1)."""
    owner = "partition.iid"
    y = _labels(y, owner)
    k = check_int(num_parties, "num_parties", owner, low=1, high=len(y))
    perm = _rng(seed, 0x11D, owner).permutation(len(y))
    return _finish(np.array_split(perm, k))


def _split_by_proportions(idx: np.ndarray, props: np.ndarray) -> list[np.ndarray]:
    cuts = (np.cumsum(props)[:-1] * len(idx)).astype(np.int64)
    return np.split(idx, cuts)


def dirichlet(y, num_parties: int, beta: float, *, seed: int, min_size: int = 10, max_tries: int = 1000,
              balance: bool = True) -> list[np.ndarray]:
    """Label skew by a Dirichlet distribution (FedKT, Li et al. 2021, Sec. 5; PrivateKT uses beta = 0.5).

    For each class k, draw ``p_k ~ Dir_n(beta)`` and give party j a ``p_{k,j}`` share of class k's records.
    Smaller ``beta`` -> more skew; ``beta -> inf`` -> IID. With ``balance`` (as in FedKT's public code) a
    party already holding ``>= N / n`` records gets no share of later classes, which keeps sizes from
    exploding. Draws repeat until every party has ``>= min_size`` records (at most ``max_tries`` times).
    """
    owner = "partition.dirichlet"
    y, n_par, beta, min_size = _skew_args(y, num_parties, beta, min_size, owner)
    max_tries = check_int(max_tries, "max_tries", owner, low=1)
    rng = _rng(seed, 0xD1F, owner)
    N = len(y)
    classes = np.unique(y)
    for _ in range(max_tries):
        parts: list[list[np.ndarray]] = [[] for _ in range(n_par)]
        sizes = np.zeros(n_par, dtype=np.int64)
        for k in classes:
            idx = rng.permutation(np.flatnonzero(y == k))
            p = rng.dirichlet(np.full(n_par, beta))
            if balance:
                p = p * (sizes < N / n_par)
                p = p / p.sum() if p.sum() > 0 else np.full(n_par, 1.0 / n_par)
            for j, chunk in enumerate(_split_by_proportions(idx, p)):
                parts[j].append(chunk)
                sizes[j] += len(chunk)
        if sizes.min() >= min_size:
            return _finish([np.concatenate(p) for p in parts])
    raise DataError(f"{owner}: no draw in {max_tries} gave every party >= {min_size} records (beta={beta}); "
                    "lower min_size or raise beta.")


def major_class(y, num_parties: int, p_major: float, *, seed: int, samples_per_party: int | None = None,
                major_classes: Sequence[int] | None = None) -> list[np.ndarray]:
    """ProxyFL's skew (Kalra et al. 2023, Sec. "Experiments"): a ``p_major`` share of each party's records
    comes from its major class (party j's is ``j mod C`` unless ``major_classes`` says otherwise), the rest
    uniformly at random from the records of the other classes.

    ``samples_per_party`` defaults to ``len(y) // num_parties``; records nobody draws stay unassigned
    (ProxyFL's code gives 8 clients 1000 MNIST records each). Parties are disjoint.
    """
    owner = "partition.major_class"
    y = _labels(y, owner)
    n_par = check_int(num_parties, "num_parties", owner, low=1, high=len(y))
    p_major = check_float(p_major, "p_major", owner, low=0.0, high=1.0)
    m = len(y) // n_par if samples_per_party is None else check_int(samples_per_party, "samples_per_party", owner, low=1)
    if m * n_par > len(y):
        raise ParameterError(f"The 'samples_per_party' parameter of {owner} must be at most len(y) / num_parties = {len(y) // n_par}. Got {m} instead.")
    classes = np.unique(y)
    if major_classes is None:
        majors = [int(classes[j % len(classes)]) for j in range(n_par)]
    else:
        majors = [int(c) for c in major_classes]
        if len(majors) != n_par or any(c not in set(classes.tolist()) for c in majors):
            raise ParameterError(f"The 'major_classes' parameter of {owner} must list one present class per party. Got {major_classes!r} instead.")
    rng = _rng(seed, 0x3A7, owner)
    free = np.ones(len(y), dtype=bool)
    parts = []
    n_major = int(round(p_major * m))
    for j in range(n_par):
        pool = np.flatnonzero(free & (y == majors[j]))
        if len(pool) < n_major:
            raise DataError(f"{owner}: party {j} needs {n_major} records of class {majors[j]}, only {len(pool)} left; "
                            "lower samples_per_party or p_major.")
        a = rng.choice(pool, size=n_major, replace=False)
        free[a] = False
        rest = np.flatnonzero(free & (y != majors[j]))
        if len(rest) < m - n_major:
            raise DataError(f"{owner}: party {j} needs {m - n_major} records of other classes, only {len(rest)} left.")
        b = rng.choice(rest, size=m - n_major, replace=False)
        free[b] = False
        parts.append(np.concatenate([a, b]))
    return _finish(parts)


def dirichlet_fixed_size(y, num_parties: int, beta: float, *, seed: int, samples_per_party: int) -> list[np.ndarray]:
    """Label skew with equal party sizes (PrivateKT's public reference code): party j draws class proportions
    ``p_j ~ Dir(beta)`` over the classes and receives exactly ``samples_per_party`` records, ``Multinomial(n, p_j)``
    of each class, drawn without replacement from what earlier parties left. When a class runs out, the missing
    records come from the classes still available, in proportion to ``p_j`` (uniformly if those are all 0)."""
    owner = "partition.dirichlet_fixed_size"
    y = _labels(y, owner)
    n_par = check_int(num_parties, "num_parties", owner, low=1, high=len(y))
    n = check_int(samples_per_party, "samples_per_party", owner, low=1, high=len(y) // n_par)
    concentration = np.full(len(np.unique(y)), check_float(beta, "beta", owner, low=0.0, low_open=True))
    rng = _rng(seed, 0xF1ED, owner)
    classes = np.unique(y)
    pools = [list(rng.permutation(np.flatnonzero(y == k))) for k in classes]
    parts = []
    for _ in range(n_par):
        p = rng.dirichlet(concentration)
        want = rng.multinomial(n, p)
        left = np.array([len(q) for q in pools])
        take = np.minimum(want, left)
        while take.sum() < n:  # top up from the classes that still have records
            room = left - take
            w = np.where(room > 0, p, 0.0)
            w = w / w.sum() if w.sum() > 0 else (room > 0) / (room > 0).sum()
            extra = np.minimum(rng.multinomial(n - take.sum(), w), room)
            take = take + extra
        chunk = []
        for c, t in enumerate(take):
            chunk += pools[c][:t]
            pools[c] = pools[c][t:]
        parts.append(np.array(chunk, dtype=np.int64))
    return _finish(parts)


def _sizes(N: int, n_par: int, beta: float, min_size: int, rng: np.random.Generator) -> np.ndarray:
    """Party sizes summing to N, proportional to Dir(beta), each >= min_size."""
    spare = N - min_size * n_par
    p = rng.dirichlet(np.full(n_par, beta))
    extra = np.floor(p * spare).astype(np.int64)
    extra[np.argsort(-(p * spare - extra))[: spare - extra.sum()]] += 1  # largest remainders
    return extra + min_size


def size_skew(y, num_parties: int, beta: float, *, seed: int, min_size: int = 10) -> list[np.ndarray]:
    """Quantity skew with IID content: party sizes ~ ``N * Dir(beta)`` (at least ``min_size`` each)."""
    owner = "partition.size_skew"
    y, n_par, beta, min_size = _skew_args(y, num_parties, beta, min_size, owner)
    rng = _rng(seed, 0x512E, owner)
    sizes = _sizes(len(y), n_par, beta, min_size, rng)
    perm = rng.permutation(len(y))
    return _finish(np.split(perm, np.cumsum(sizes)[:-1]))


def mixed(y, num_parties: int, beta: float, size_beta: float, *, seed: int, min_size: int = 10,
          max_tries: int = 1000) -> list[np.ndarray]:
    """Label skew and size skew together: party j has a size weight ``w_j ~ Dir(size_beta)`` and, for
    each class k, gets a share ``proportional to p_{k,j} w_j`` of class k, ``p_k ~ Dir(beta)``."""
    owner = "partition.mixed"
    y, n_par, beta, min_size = _skew_args(y, num_parties, beta, min_size, owner)
    size_beta = check_float(size_beta, "size_beta", owner, low=0.0, low_open=True)
    rng = _rng(seed, 0x313D, owner)
    classes = np.unique(y)
    for _ in range(check_int(max_tries, "max_tries", owner, low=1)):
        w = rng.dirichlet(np.full(n_par, size_beta))
        parts: list[list[np.ndarray]] = [[] for _ in range(n_par)]
        for k in classes:
            idx = rng.permutation(np.flatnonzero(y == k))
            p = rng.dirichlet(np.full(n_par, beta)) * w
            p = p / p.sum()
            for j, chunk in enumerate(_split_by_proportions(idx, p)):
                parts[j].append(chunk)
        out = [np.concatenate(p) for p in parts]
        if min(len(p) for p in out) >= min_size:
            return _finish(out)
    raise DataError(f"{owner}: no draw in {max_tries} gave every party >= {min_size} records; lower min_size or raise the betas.")


def partition(y, scheme: str, num_parties: int, *, seed: int, **kwargs) -> list[np.ndarray]:
    """Dispatch by name (for configs): ``scheme`` in :data:`SCHEMES`; kwargs go to that function."""
    check_choice(scheme, "scheme", "partition", SCHEMES)
    fn = {"iid": iid, "dirichlet": dirichlet, "dirichlet_fixed_size": dirichlet_fixed_size, "major_class": major_class, "size_skew": size_skew, "mixed": mixed}[scheme]
    try:
        return fn(y, num_parties, seed=seed, **kwargs)
    except TypeError as exc:
        raise ParameterError(f"partition({scheme!r}): {exc}.") from None

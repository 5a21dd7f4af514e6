"""Partitions: every record assigned once, sizes, skew moves with beta / p_major, seeded."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from dpaudit.errors import DataError, ParameterError
from dpaudit.training.partition import (
    dirichlet, iid, label_counts, major_class, mixed, partition, size_skew,
)


def _labels(n, C, seed=0):
    return np.random.default_rng(seed).integers(0, C, size=n)


def _assert_exact_cover(parts, n):
    allidx = np.concatenate(parts)
    assert len(allidx) == n
    assert np.array_equal(np.sort(allidx), np.arange(n))


@settings(max_examples=25, deadline=None)
@given(n=st.integers(50, 400), k=st.integers(1, 10), C=st.integers(2, 10), seed=st.integers(0, 1000),
       beta=st.floats(0.1, 100.0))
def test_every_record_assigned_exactly_once(n, k, C, seed, beta):
    y = _labels(n, C, seed)
    _assert_exact_cover(iid(y, k, seed=seed), n)
    # min_size 0: a minimum size can be unreachable at small beta (a clear DataError, tested below); the cover
    # property does not depend on it
    _assert_exact_cover(dirichlet(y, k, beta, seed=seed, min_size=0), n)
    _assert_exact_cover(size_skew(y, k, beta, seed=seed, min_size=2), n)
    _assert_exact_cover(mixed(y, k, beta, beta, seed=seed, min_size=0), n)


def test_unreachable_min_size_is_a_clear_error():
    # 50 records of 2 classes over 10 parties at beta 0.1: Dir(0.1) puts nearly all of a class on one or two
    # parties, so no draw gives all ten a record (found by hypothesis)
    y = _labels(50, 2)
    with pytest.raises(DataError, match=r"no draw in 1000 gave every party >= 1 records"):
        dirichlet(y, 10, 0.1, seed=0, min_size=1)


def test_iid_sizes_differ_by_at_most_one():
    sizes = [len(p) for p in iid(np.zeros(103, dtype=int), 10, seed=0)]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 103


def test_deterministic_from_seed():
    y = _labels(500, 10)
    for fn in (lambda s: dirichlet(y, 5, 0.5, seed=s), lambda s: major_class(y, 5, 0.8, seed=s, samples_per_party=30)):
        a, b, c = fn(1), fn(1), fn(2)
        assert all(np.array_equal(u, v) for u, v in zip(a, b))
        assert not all(np.array_equal(u, v) for u, v in zip(a, c))


def _mean_max_share(y, parts):
    cnt = label_counts(y, parts, 10).astype(float)
    return float(np.mean(cnt.max(1) / cnt.sum(1)))


def test_dirichlet_skew_moves_with_beta():
    y = _labels(5000, 10)
    shares = [_mean_max_share(y, dirichlet(y, 10, b, seed=3, min_size=5)) for b in (0.1, 1.0, 100.0)]
    assert shares[0] > shares[1] > shares[2]
    assert shares[2] < 0.2  # near IID: ~0.1 of a party's data is its largest class
    assert shares[0] > 0.5


def test_dirichlet_min_size_respected_and_impossible_raises():
    y = _labels(300, 10)
    parts = dirichlet(y, 10, 0.3, seed=0, min_size=15)
    assert min(len(p) for p in parts) >= 15
    with pytest.raises(DataError, match="min_size"):
        dirichlet(y, 10, 0.01, seed=0, min_size=29, max_tries=3)
    with pytest.raises(ParameterError, match="'beta' parameter"):
        dirichlet(y, 10, -1.0, seed=0)


@pytest.mark.parametrize("p", [0.2, 0.5, 0.8, 1.0])
def test_major_class_share_is_p_major(p):
    y = _labels(6000, 10)
    parts = major_class(y, 8, p, seed=0, samples_per_party=200)
    cnt = label_counts(y, parts, 10)
    for j, row in enumerate(cnt):
        assert row.sum() == 200
        assert row[j % 10] == round(p * 200)  # the rest is drawn from the other classes only
    allidx = np.concatenate(parts)
    assert len(np.unique(allidx)) == len(allidx)  # disjoint


def test_major_class_not_enough_records():
    y = np.repeat(np.arange(10), 10)
    with pytest.raises(DataError, match="needs"):
        major_class(y, 2, 0.9, seed=0, samples_per_party=50)


def test_size_skew_sizes_vary_with_beta():
    y = _labels(5000, 10)
    spread = [np.std([len(p) for p in size_skew(y, 10, b, seed=1)]) for b in (0.2, 100.0)]
    assert spread[0] > 3 * spread[1]


def test_dispatch_by_name():
    y = _labels(200, 5)
    assert len(partition(y, "iid", 4, seed=0)) == 4
    with pytest.raises(ParameterError, match="'scheme' parameter"):
        partition(y, "nope", 4, seed=0)


def test_dirichlet_fixed_size_is_disjoint_equal_sized_and_skewed():
    from dpaudit.training.partition import dirichlet_fixed_size

    y = np.repeat(np.arange(10), 100)
    parts = dirichlet_fixed_size(y, 10, 0.1, seed=0, samples_per_party=100)  # the whole pool: top-ups needed
    allidx = np.concatenate(parts)
    assert [len(p) for p in parts] == [100] * 10 and len(np.unique(allidx)) == 1000
    counts = label_counts(y, parts, 10)
    assert counts.max(axis=1).mean() > 40  # beta = 0.1: each party is dominated by a few classes
    assert all(np.array_equal(a, b) for a, b in zip(parts, dirichlet_fixed_size(y, 10, 0.1, seed=0, samples_per_party=100)))
    with pytest.raises(ParameterError, match="'samples_per_party'"):
        dirichlet_fixed_size(y, 10, 0.1, seed=0, samples_per_party=101)

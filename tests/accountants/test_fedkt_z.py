"""FedKT Theorem 8's z follows the aggregation's tie-breaking (issue 16 item 1): brute force over small vote tables."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dpaudit.accountants import fedkt_z, one_switch_flips


def _flips_by_definition(hist: np.ndarray) -> bool:
    """Does some single teacher's changed vote (class a -> class b, a teacher voting a exists) change np.argmax?"""
    w = int(np.argmax(hist))
    for a, b in itertools.permutations(range(hist.size), 2):
        if hist[a] >= 1:
            h = hist.copy()
            h[a] -= 1
            h[b] += 1
            if int(np.argmax(h)) != w:
                return True
    return False


def _histograms(classes: int, teachers: int):
    for combo in itertools.combinations_with_replacement(range(classes), teachers):
        yield np.bincount(np.array(combo, dtype=int), minlength=classes).astype(float)


@pytest.mark.parametrize("classes,teachers", [(2, 1), (2, 4), (3, 3), (3, 5), (4, 6), (5, 4)])
def test_one_switch_flips_matches_the_definition_exhaustively(classes, teachers):
    hists = np.array(list(_histograms(classes, teachers)))
    ours = one_switch_flips(hists)
    truth = np.array([_flips_by_definition(h) for h in hists])
    np.testing.assert_array_equal(ours, truth)


def test_issue_example_gap_two_flips_through_the_tie():
    # issue 16: votes [1, 3, 1] (gap 2) become [2, 2, 1] when one teacher switches; the tie goes to class 0
    assert one_switch_flips([[1.0, 3.0, 1.0]])[0]
    assert not one_switch_flips([[3.0, 1.0, 1.0]])[0]  # the runner-up (class 1) loses ties to class 0
    assert fedkt_z([[np.array([[1.0, 3.0, 1.0]])]]) == 1


def test_fedkt_z_against_the_definition_on_random_tables():
    rng = np.random.default_rng(0)
    for _ in range(30):
        parties = []
        for _ in range(rng.integers(1, 4)):
            parts = []
            for _ in range(rng.integers(1, 4)):
                t, c, q = int(rng.integers(1, 7)), int(rng.integers(2, 5)), int(rng.integers(1, 4))
                votes = np.array([np.bincount(rng.integers(0, c, t), minlength=c) for _ in range(q)], float)
                parts.append(votes)
            parties.append(parts)
        want = max(sum(any(_flips_by_definition(row) for row in part) for part in party) for party in parties)
        assert fedkt_z(parties) == want

"""ProxyFL (Kalra et al., Nature Communications 2023): exponential graph, PushSum, DP-SGD sampling, the method."""

from __future__ import annotations

import numpy as np
import pytest

from dpaudit.training.methods.fl_common import exponential_graph, exponential_peer, pushsum_mix


def test_exponential_peers_cycle_through_powers_of_two():
    # 8 clients: peers 1, 2, 4 steps away, then again (floor(log2(7)) + 1 = 3 hops)
    assert [exponential_peer(0, t, 8) for t in range(6)] == [1, 2, 4, 1, 2, 4]
    assert exponential_peer(7, 0, 8) == 0
    # each round is a permutation: every client receives exactly one proxy
    for t in range(3):
        peers = [exponential_peer(k, t, 8) for k in range(8)]
        assert sorted(peers) == list(range(8))


def test_graph_is_column_stochastic_also_with_dropouts():
    for t in range(4):
        P = exponential_graph(t, 8)
        assert np.allclose(P.sum(0), 1.0) and np.allclose(P.sum(1), 1.0)  # doubly stochastic when all are active
    active = np.array([True, False, True, True, True, True, True, True])
    P = exponential_graph(0, 8, active)
    assert np.allclose(P.sum(0), 1.0)
    assert P[1, 0] == 0 and P[0, 0] == 1.0 and P[1, 1] == 1.0


def test_pushsum_preserves_the_weighted_sum_and_converges_to_the_average():
    rng = np.random.default_rng(0)
    theta = rng.normal(size=(8, 5))
    w = np.ones(8)
    avg = theta.mean(0)
    active = np.ones(8, dtype=bool)
    active[3] = False  # a non-regular graph: the de-biasing weights matter
    mass = (w[:, None] * theta).sum(0)
    for t in range(60):
        theta, w, z = pushsum_mix(theta, w, exponential_graph(t, 8, active))
        assert np.allclose(z.sum(0), mass) and np.isclose(w.sum(), 8.0)
    # the active clients converge to the de-biased average of the active ones' initial values
    init = rng.__class__(np.random.PCG64(0)).normal(size=(8, 5))
    want = init[active].mean(0)
    assert np.allclose(theta[active], want, atol=1e-6)
    assert np.allclose(theta[3], init[3])
    del avg


def test_pushsum_rejects_non_stochastic_matrices():
    with pytest.raises(Exception, match="column-stochastic"):
        pushsum_mix(np.zeros((2, 1)), np.ones(2), np.eye(2) * 0.5)

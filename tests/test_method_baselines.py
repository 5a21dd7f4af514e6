"""The LDP baselines of PrivateKT (FedAvg/FedSGD with Laplace on L1-clipped updates, FedMD with RR) and
the ProxyFL baselines."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpaudit.errors import ParameterError
from dpaudit.training.methods.fl_common import clip_l1, laplace_ldp, laplace_scale_for_ldp


def test_clip_l1_bounds_the_norm_and_keeps_small_vectors():
    v = np.array([[3.0, -4.0], [0.1, 0.1]])
    c = clip_l1(v, 1.0)
    assert np.allclose(np.abs(c).sum(1), [1.0, 0.2])
    assert np.allclose(c[0] / np.abs(c[0]).sum(), v[0] / 7.0)


def test_laplace_scale_is_two_c_over_eps():
    # L1 sensitivity of an update clipped to ||u||_1 <= C is 2C (Dwork & Roth 2014, Thm 3.6 -> b = 2C/eps)
    assert laplace_scale_for_ldp(0.5, 5.0) == pytest.approx(0.2)
    with pytest.raises(ParameterError, match="'epsilon'"):
        laplace_scale_for_ldp(1.0, 0.0)


def test_laplace_ldp_likelihood_ratio_is_bounded_by_eps():
    # two extreme clipped inputs u = C e_1 and u' = -C e_1: the log density ratio of any output is <= eps
    C, eps = 1.0, 2.0
    b = laplace_scale_for_ldp(C, eps)
    out = laplace_ldp(np.array([[C, 0.0]]).repeat(20000, 0), C, eps, np.random.default_rng(0))
    llr = (np.abs(out - np.array([-C, 0.0])).sum(1) - np.abs(out - np.array([C, 0.0])).sum(1)) / b
    assert llr.max() <= eps + 1e-9 and llr.max() > 0.99 * eps
    # and the noise has the right spread: Var Laplace(b) = 2 b^2
    assert math.isclose(out[:, 1].var(), 2 * b * b, rel_tol=0.05)

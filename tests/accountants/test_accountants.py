import math
import warnings

import numpy as np
import pytest
from dp_accounting import dp_event as de
from dp_accounting import pld as dpa_pld
from dp_accounting.rdp import rdp_privacy_accountant as dpa_rdp

from conformance import AccountantConformance
from dpaudit.accountants.base import UnsupportedEventError
from dpaudit.accountants.events import (GaussianNoisyMax, LaplaceNoisyMax, RandomizedResponse, Repeated, Shuffled,
                                        SubsampledGaussian)
from dpaudit.accountants.pld import PldAccountant
from dpaudit.accountants.rdp import DEFAULT_ORDERS, EXTENSION_HIGHEST_ORDER, EdgeOrderWarning, RdpAccountant, rdp_to_epsilon
from dpaudit.errors import ParameterError


# ------------------------------------------------------------------------------------------------ conformance

class TestRdpConformanceDpsgd(AccountantConformance):
    def make_accountant(self):
        return RdpAccountant()

    def make_event(self, noise, steps):
        return SubsampledGaussian(sampling_rate=0.01, noise_multiplier=noise, steps=steps)


@pytest.mark.filterwarnings("ignore::dpaudit.accountants.rdp.EdgeOrderWarning")  # RR's RDP keeps falling up to order 1024
class TestRdpConformanceRR(AccountantConformance):
    noise_levels = (0.5, 1.0, 3.0)  # noise = 1/epsilon

    def make_accountant(self):
        return RdpAccountant()

    def make_event(self, noise, steps):
        return Repeated(RandomizedResponse(num_classes=10, num_samples=2, epsilon=1.0 / noise), steps)


class TestPldConformanceDpsgd(AccountantConformance):
    rel_tol = 2e-3  # discretisation: sequential convolutions vs one self-composition

    def make_accountant(self):
        return PldAccountant(value_discretization_interval=1e-3)

    def make_event(self, noise, steps):
        return SubsampledGaussian(sampling_rate=0.01, noise_multiplier=noise, steps=steps)


class TestPldConformanceRR(AccountantConformance):
    rel_tol = 2e-3
    noise_levels = (0.5, 1.0, 3.0)

    def make_accountant(self):
        return PldAccountant()

    def make_event(self, noise, steps):
        return Repeated(RandomizedResponse(num_classes=10, num_samples=2, epsilon=1.0 / noise), steps)


# ------------------------------------------------------------------------------------------------ RDP accountant

@pytest.mark.parametrize("q,sigma,steps,delta", [(0.01, 1.1, 1000, 1e-5), (0.0025, 1.3, 6000, 1e-5), (1.0, 5.0, 10, 1e-6)])
def test_rdp_accountant_matches_dp_accounting_dpsgd(q, sigma, steps, delta):
    # integer orders: dp_accounting's sum is exact, so both agree; on the full grid dpaudit's exact fractional orders
    # can only be tighter than dp_accounting's (which sums absolute values of the series terms there)
    integer = [float(a) for a in DEFAULT_ORDERS if a == int(a)]
    ours = RdpAccountant(integer).compose(SubsampledGaussian(q, sigma, steps)).get_epsilon(delta)
    ref = dpa_rdp.RdpAccountant(integer)
    ref.compose(de.SelfComposedDpEvent(de.PoissonSampledDpEvent(q, de.GaussianDpEvent(sigma)), steps))
    assert ours == pytest.approx(ref.get_epsilon(delta), rel=1e-9)
    full = RdpAccountant().compose(SubsampledGaussian(q, sigma, steps)).get_epsilon(delta)
    ref_full = dpa_rdp.RdpAccountant(list(DEFAULT_ORDERS))
    ref_full.compose(de.SelfComposedDpEvent(de.PoissonSampledDpEvent(q, de.GaussianDpEvent(sigma)), steps))
    assert full <= ref_full.get_epsilon(delta) * (1 + 1e-9)


def test_rdp_accountant_mixed_events_sum_rdp_and_union_assumptions():
    sg = SubsampledGaussian(0.01, 1.0, 100)
    rr = RandomizedResponse(num_classes=4, num_samples=1, epsilon=0.5)
    acc = RdpAccountant().compose(sg).compose(rr, 3)
    a1 = RdpAccountant().compose(sg)
    a2 = RdpAccountant().compose(rr, 3)
    np.testing.assert_allclose(acc.rdp, a1.rdp + a2.rdp)
    st = acc.get_statement(1e-5)
    assert st.method == "rdp" and st.order in DEFAULT_ORDERS
    text = " ".join(st.assumptions)
    assert "adding or removing one example" in text and "local DP" in text
    assert not st.data_dependent


def test_rdp_accountant_rejects_unsupported_without_state_change():
    acc = RdpAccountant().compose(SubsampledGaussian(0.01, 1.0, 10))
    before = acc.rdp.copy()
    shuffled = Shuffled(RandomizedResponse(num_classes=3, epsilon=1.0), 100)
    with pytest.raises(UnsupportedEventError, match="Shuffled"):
        acc.compose(shuffled)
    np.testing.assert_array_equal(acc.rdp, before)
    assert not acc.supports(shuffled)


def test_rdp_accountant_searches_past_its_grid_edge():
    """A best order at the grid's edge is searched past (any order gives a valid epsilon): the figure matches a
    fine closed-form search, is never above the grid's own, and no warning is left."""
    delta = 1e-5
    acc = RdpAccountant(orders=[2.0, 3.0]).compose(SubsampledGaussian(1.0, 50.0, 1))   # full batch: Gaussian
    on_grid = rdp_to_epsilon([2.0, 3.0], acc.rdp, delta, warn=False)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error", EdgeOrderWarning)
        st = acc.get_statement(delta)
    # independent reference: the Gaussian's RDP alpha / (2 sigma^2) (Mironov 2017, Prop. 7) on a fine order grid
    fine = np.geomspace(1.0001, 1e6, 200_001)
    ref = rdp_to_epsilon(fine, fine / (2 * 50.0 ** 2), delta, warn=False)[0]
    assert st.epsilon <= on_grid
    assert ref - 1e-12 <= st.epsilon <= ref * 1.01
    assert st.order > 3.0 and not acc.warnings and "extended" in st.details.get("grid_extended", "")


def test_rdp_accountant_warns_when_the_search_limit_is_reached():
    # sigma 1e5, delta 1e-10: the best order is about sqrt(2 sigma^2 log(1/delta)) = 6.8e5, above the search's
    # limit (EXTENSION_HIGHEST_ORDER); the figure there is still valid and below the grid's
    acc = RdpAccountant().compose(SubsampledGaussian(1.0, 1e5, 1))
    with pytest.warns(EdgeOrderWarning, match="edge"):
        st = acc.get_statement(1e-10)
    assert acc.warnings and st.order == EXTENSION_HIGHEST_ORDER
    assert 0 < st.epsilon < rdp_to_epsilon(DEFAULT_ORDERS, acc.rdp, 1e-10, warn=False)[0]


def test_rdp_accountant_bad_orders():
    with pytest.raises(ParameterError, match="'orders'"):
        RdpAccountant(orders=[0.5, 2.0])


# ------------------------------------------------------------------------------------------------ PLD accountant

@pytest.mark.parametrize("q,sigma,steps", [(0.01, 1.1, 1000), (0.0025, 1.3, 600)])
def test_pld_accountant_matches_dp_accounting(q, sigma, steps):
    ours = PldAccountant().compose(SubsampledGaussian(q, sigma, steps)).get_epsilon(1e-5)
    ref = dpa_pld.PLDAccountant()
    ref.compose(de.PoissonSampledDpEvent(q, de.GaussianDpEvent(sigma)), steps)
    assert ours == pytest.approx(ref.get_epsilon(1e-5), rel=1e-6)
    rdp = RdpAccountant().compose(SubsampledGaussian(q, sigma, steps)).get_epsilon(1e-5)
    assert ours <= rdp * 1.001  # PLD is tighter than RDP


def test_pld_rr_matches_dp_accounting_rr():
    # dp_accounting's RandomizedResponseDpEvent has noise_parameter p = 1 - beta (it outputs the true bucket w.p. 1-p+p/k)
    rr = RandomizedResponse(num_classes=10, num_samples=1, epsilon=2.0)
    ours = PldAccountant().compose(rr, 5).get_epsilon(1e-6)
    ref = dpa_pld.PLDAccountant(neighboring_relation=dpa_pld.pld_privacy_accountant.NeighborRel.REPLACE_ONE)
    # NB dp_accounting 0.6's PLDAccountant ignores `count` for RandomizedResponseDpEvent (it composes the PLD once),
    # so the reference composes five times one by one.
    for _ in range(5):
        ref.compose(de.RandomizedResponseDpEvent(1 - rr.beta, 10))
    assert ours == pytest.approx(ref.get_epsilon(1e-6), rel=1e-6)
    assert ours <= 5 * 2.0 + 1e-9


def test_pld_pure_laplace_noisy_max_at_most_basic_composition():
    ev = LaplaceNoisyMax(gamma=0.05, num_queries=20)  # 0.1-DP per query
    eps = PldAccountant().compose(ev).get_epsilon(1e-5)
    assert 0 < eps < 20 * 0.1
    # with delta small the PLD approaches pure composition, never above it (+ discretisation); below dp_accounting's
    # tail truncation (1e-15) the pessimistic PLD reports inf, which is allowed (an overestimate)
    assert PldAccountant().compose(ev).get_epsilon(1e-12) <= 2.0 + 1e-3


def test_pld_gnmax_data_independent_matches_gaussian():
    ev = GaussianNoisyMax(sigma=40.0, num_queries=100)
    ours = PldAccountant().compose(ev).get_epsilon(1e-5)
    ref = dpa_pld.PLDAccountant()
    ref.compose(de.GaussianDpEvent(40.0 / math.sqrt(2)), 100)  # sensitivity sqrt(2) == std / sqrt(2)
    assert ours == pytest.approx(ref.get_epsilon(1e-5), rel=1e-3)


def test_pld_rejects_data_dependent_events():
    acc = PldAccountant()
    with pytest.raises(UnsupportedEventError, match="data-dependent"):
        acc.compose(LaplaceNoisyMax(gamma=0.1, votes=[[5, 1, 0]]))
    assert acc.get_epsilon(1e-5) == 0.0


def test_pld_shuffled_event_below_local_epsilon():
    ev = Shuffled(RandomizedResponse(num_classes=2, epsilon=1.0), 2000)
    eps = PldAccountant().compose(ev).get_epsilon(1e-6)
    assert 0 < eps < 1.0


def test_data_dependent_laplace_never_exceeds_basic_composition():
    # votes where the data-dependent bound does not apply (q above its threshold): the RDP route alone lands a
    # little above the pure-DP sum; basic composition (sum of sensitivity*gamma, delta 0) still holds and caps it
    import numpy as np

    from dpaudit.accountants.events import LaplaceNoisyMax
    from dpaudit.accountants.rdp import RdpAccountant

    votes = np.tile([5.0, 5.0, 0.0], (20, 1))  # ties: q is large
    ev = LaplaceNoisyMax(gamma=1.0, sensitivity=2.0, votes=votes)
    st = RdpAccountant().compose(ev).get_statement(1e-5)
    assert st.epsilon <= 40.0 + 1e-12


def test_basic_composition_figure_is_not_data_dependent():
    # when the pure-DP sum wins, the figure does not depend on the votes: not flagged as data-dependent
    import numpy as np

    from dpaudit.accountants.events import LaplaceNoisyMax
    from dpaudit.accountants.rdp import RdpAccountant

    tied = LaplaceNoisyMax(gamma=1.0, sensitivity=2.0, votes=np.tile([5.0, 5.0, 0.0], (20, 1)))
    st = RdpAccountant().compose(tied).get_statement(1e-5)
    assert st.method.startswith("basic composition") and not st.data_dependent
    assert not any("DATA-DEPENDENT" in a for a in st.assumptions)
    clear = LaplaceNoisyMax(gamma=0.05, votes=np.tile([250.0, 0.0, 0.0], (100, 1)))  # data-dependent bound wins
    st2 = RdpAccountant().compose(clear).get_statement(1e-5)
    assert st2.method == "rdp" and st2.data_dependent
    assert any("DATA-DEPENDENT" in a for a in st2.assumptions)


def test_the_one_step_gaussian_pld_is_memoised_and_never_changed():
    """PldAccountant builds the one-step PLD of a (subsampled) Gaussian once per process (dpaudit.accountants.pld.
    gaussian_pld): a second accounting of the same mechanism reuses it, gives the same epsilon bit for bit as a
    fresh build, and composing it leaves the shared object as it was."""
    from dpaudit.accountants.pld import gaussian_pld

    ev = SubsampledGaussian(sampling_rate=0.013, noise_multiplier=0.97, steps=300)
    first = PldAccountant(value_discretization_interval=1e-3).compose(ev).get_epsilon(1e-5)
    hits = gaussian_pld.cache_info().hits
    shared = gaussian_pld(0.97, sampling_prob=0.013, value_discretization_interval=1e-3)
    before = shared.get_delta_for_epsilon(1.0)
    assert PldAccountant(value_discretization_interval=1e-3).compose(ev).get_epsilon(1e-5) == first
    assert gaussian_pld.cache_info().hits > hits
    shared.self_compose(50).compose(shared)
    assert shared.get_delta_for_epsilon(1.0) == before
    gaussian_pld.cache_clear()
    assert PldAccountant(value_discretization_interval=1e-3).compose(ev).get_epsilon(1e-5) == first  # built afresh: equal

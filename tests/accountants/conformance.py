"""An abstract conformance suite every dpaudit accountant passes (the dp_accounting pattern).

Subclass :class:`AccountantConformance` in a ``Test*`` class and provide

- ``make_accountant(self)``: a fresh accountant (an :class:`~dpaudit.accountants.base.Accountant`);
- ``make_event(self, noise, steps)``: an event the accountant supports, where larger ``noise`` means more
  privacy (smaller epsilon) and ``steps`` the number of repetitions built into the event (an int >= 1);
- optionally ``noise_levels`` (increasing), ``step_counts`` (increasing), ``delta``, ``rel_tol``.

Nothing here knows a particular mechanism, so e.g. a PATE moments accountant subclasses it with its own
events.
"""

from __future__ import annotations

import math

import pytest

from dpaudit.accountants.events import Composed, Repeated
from dpaudit.errors import ParameterError


class AccountantConformance:
    delta: float = 1e-5
    noise_levels: tuple[float, ...] = (0.8, 1.0, 2.0)
    step_counts: tuple[int, ...] = (1, 4, 16)
    repeat_counts: tuple[int, ...] = (2, 5)
    rel_tol: float = 1e-6

    def make_accountant(self):  # pragma: no cover - abstract
        raise NotImplementedError

    def make_event(self, noise: float, steps: int):  # pragma: no cover - abstract
        raise NotImplementedError

    # ------------------------------------------------------------------------------------------ helpers

    def eps(self, *events_counts) -> float:
        acc = self.make_accountant()
        for ev, c in events_counts:
            acc.compose(ev, c)
        return acc.get_epsilon(self.delta)

    def assert_close(self, a: float, b: float) -> None:
        assert a == pytest.approx(b, rel=self.rel_tol, abs=1e-9)

    # ------------------------------------------------------------------------------------------ the suite

    def test_no_events_gives_zero(self):
        acc = self.make_accountant()
        assert acc.get_epsilon(self.delta) == 0.0
        assert self.make_accountant().compose(Composed(())).get_epsilon(self.delta) == 0.0
        ev = self.make_event(self.noise_levels[0], 1)
        assert self.make_accountant().compose(ev, 0).get_epsilon(self.delta) == 0.0

    def test_positive_for_one_event(self):
        ev = self.make_event(self.noise_levels[0], 1)
        e = self.eps((ev, 1))
        assert e > 0 and math.isfinite(e)

    @pytest.mark.parametrize("n", [2, 5])
    def test_composing_n_times_equals_repeated(self, n):
        ev = self.make_event(self.noise_levels[1], 1)
        acc = self.make_accountant()
        for _ in range(n):
            acc.compose(ev)
        one_by_one = acc.get_epsilon(self.delta)
        self.assert_close(one_by_one, self.eps((Repeated(ev, n), 1)))
        self.assert_close(one_by_one, self.eps((ev, n)))
        self.assert_close(one_by_one, self.eps((Composed((ev,) * n), 1)))

    def test_monotone_in_noise(self):
        steps = self.step_counts[1]
        eps = [self.eps((self.make_event(s, steps), 1)) for s in self.noise_levels]
        assert all(a > b for a, b in zip(eps, eps[1:])), eps

    def test_monotone_in_steps(self):
        noise = self.noise_levels[1]
        eps = [self.eps((self.make_event(noise, t), 1)) for t in self.step_counts]
        assert all(a < b for a, b in zip(eps, eps[1:])), eps

    def test_invalid_compose_leaves_state_untouched(self):
        ev = self.make_event(self.noise_levels[1], 1)
        acc = self.make_accountant().compose(ev)
        before = acc.get_epsilon(self.delta)
        with pytest.raises(ParameterError):
            acc.compose(ev, -1)
        with pytest.raises(ParameterError):
            acc.compose("not an event")
        assert acc.get_epsilon(self.delta) == before

    def test_statement_carries_assumptions(self):
        ev = self.make_event(self.noise_levels[1], 1)
        st = self.make_accountant().compose(ev).get_statement(self.delta)
        assert st.delta == self.delta
        assert st.method
        assert st.assumptions and all(isinstance(a, str) and a for a in st.assumptions)

    def test_bad_delta_rejected(self):
        acc = self.make_accountant().compose(self.make_event(self.noise_levels[1], 1))
        for bad in (-0.1, 1.5, float("nan")):
            with pytest.raises(ParameterError, match="'delta'"):
                acc.get_epsilon(bad)

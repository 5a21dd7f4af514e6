"""The strong final-model audit (dpaudit.auditing.final_model_audit): worst-case initial parameters, a crafted canary
and many models trained at once; certified multi-run bounds at a threshold fixed before the runs. The default run
checks a small audit (its settings, the score's scale without the canary, reproducibility, input errors); the slow
run reaches >= 0.75 of the accounted epsilon at epsilon 10 with 1,000 models (issue 42, item 4)."""

from __future__ import annotations

import numpy as np
import pytest

from dpaudit.accountants.closed_form import gaussian_mechanism_epsilon
from dpaudit.auditing.final_model_audit import final_model_audit, gaussian_mu_for_epsilon
from dpaudit.errors import ParameterError

SMALL = dict(num_records=200, models=40, steps=2, init_epochs=2, ideal_replicates=2)


def test_mu_for_epsilon_inverts_the_exact_gaussian_curve():
    for eps, delta in [(10.0, 1e-5), (1.0, 1e-5), (4.0, 1e-3)]:
        mu = gaussian_mu_for_epsilon(eps, delta)
        assert gaussian_mechanism_epsilon(mu, delta) <= eps
        assert gaussian_mechanism_epsilon(mu * (1 + 1e-9), delta) == pytest.approx(eps, rel=1e-6)
    assert gaussian_mu_for_epsilon(10.0, 1e-5) == pytest.approx(2.0004, abs=1e-3)


def test_a_small_audit_is_certified_reproducible_and_below_the_accounting():
    a = final_model_audit(epsilon=4.0, seed=3, **SMALL)
    b = final_model_audit(epsilon=4.0, seed=3, **SMALL)
    assert a.bound.kind == "certified" and a.bound.analysis == "gdp" and a.bound.epsilon == b.bound.epsilon
    assert a.accounted_epsilon == pytest.approx(4.0, rel=0.02)           # q = 1: PLD of the exact Gaussian
    assert 0.0 <= a.bound.epsilon <= a.accounted_epsilon and a.ideal_epsilon is not None
    assert {e.analysis for e in a.bound.analyses} == {"eps", "gdp", "bayes"}
    s = a.settings
    assert s["models"] == 40 and s["models_in"] + s["models_out"] == 40 and s["dead_pixels"]
    assert s["noise_multiplier"] == pytest.approx(np.sqrt(2) / a.mu)
    assert any("worst-case initial parameters" in n for n in a.notes) and "certified" in a.summary()


@pytest.mark.slow
def test_subsampled_dp_sgd_is_audited_with_the_assumption_free_headline():
    a = final_model_audit(epsilon=4.0, sampling_rate=0.5, seed=1, **SMALL)      # ~7 CPU s: calibrating sigma
    assert a.mu is None and a.ideal_epsilon is None and a.bound.analysis == "eps" and a.bound.kind == "certified"
    assert a.settings["sampling_rate"] == 0.5 and a.accounted_epsilon <= 4.0 + 1e-9
    assert 0.0 <= a.bound.epsilon <= a.accounted_epsilon


def test_subsampled_steps_must_fill_whole_epochs():
    with pytest.raises(ParameterError, match="'steps'"):
        final_model_audit(sampling_rate=0.5, steps=3, **{k: v for k, v in SMALL.items() if k != "steps"})


def test_bad_settings_name_the_parameter():
    with pytest.raises(ParameterError, match="'models'"):
        final_model_audit(models=2)
    with pytest.raises(ParameterError, match="'epsilon'"):
        final_model_audit(epsilon=0.0)
    with pytest.raises(ParameterError, match="'num_records'"):
        final_model_audit(num_records=5000)


@pytest.mark.slow
def test_the_issues_target_at_epsilon_10_with_1000_models():
    r = final_model_audit(epsilon=10.0, models=1000, seed=0)
    assert r.accounted_epsilon == pytest.approx(10.0, rel=0.01)
    assert r.bound.epsilon >= 0.75 * r.accounted_epsilon, r.summary()
    assert r.bound.epsilon <= r.accounted_epsilon                    # a correct recipe is not refuted
    out, inn = r.scores[~r.included], r.scores[r.included]
    # the score's scale was computed from the recipe before the run: N(0, 1) without the canary, N(mu, 1) with it
    assert abs(out.mean()) < 0.15 and 0.9 < out.std() < 1.1
    assert abs(inn.mean() - r.mu) < 0.2 and 0.9 < inn.std() < 1.1


@pytest.mark.slow
def test_a_correct_recipe_is_not_refuted_over_30_seeds():
    """Soundness of the whole pipeline (score, planned threshold, GDP analysis) on a recipe that is what it says:
    the certified bound exceeds the exact epsilon at most at the stated failure rate (5%)."""
    over = [final_model_audit(epsilon=8.0, num_records=300, models=300, steps=2, init_epochs=5, ideal_replicates=3,
                              seed=s).bound.epsilon > 8.0 for s in range(30)]
    assert sum(over) <= 3, sum(over)

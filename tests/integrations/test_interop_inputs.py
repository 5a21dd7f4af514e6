"""Issue 23 (I4, I5, W2, W3): Opacus runs and dp_accounting events of the wrong type are refused with one named error,
never truncated (a fractional count would under-account) or read as "checked"."""

from __future__ import annotations

import math

import dp_accounting
import pytest

from dpaudit.accountants.events import Composed, Repeated, SubsampledGaussian
from dpaudit.errors import DataError, DPAuditError, ParameterError
from dpaudit.integrations.dp_accounting import dp_event_from_json, from_dp_accounting, ledger_from_dp_accounting
from dpaudit.integrations.opacus import OpacusRecorder, OpacusRun, read_opacus

SG = dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.0))
SG_JSON = {"type": "PoissonSampledDpEvent", "sampling_probability": 0.01,
           "event": {"type": "GaussianDpEvent", "noise_multiplier": 1.0}}


# ---- dp_accounting ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("count", [1.9, 1.5, "5", float("nan"), float("inf"), -1, True, None])
def test_w3_self_composed_count_must_be_a_whole_number(count):
    with pytest.raises(ParameterError, match="'count' parameter of SelfComposedDpEvent"):
        from_dp_accounting(dp_accounting.SelfComposedDpEvent(SG, count))


def test_w3_whole_counts_keep_every_composition():
    assert from_dp_accounting(dp_accounting.SelfComposedDpEvent(SG, 5)) == SubsampledGaussian(0.01, 1.0, 5)
    assert from_dp_accounting(dp_accounting.SelfComposedDpEvent(SG, 5.0)) == SubsampledGaussian(0.01, 1.0, 5)
    nested = dp_accounting.SelfComposedDpEvent(dp_accounting.SelfComposedDpEvent(SG, 3), 2)
    assert from_dp_accounting(nested) == Repeated(SubsampledGaussian(0.01, 1.0, 3), 2)
    # the ledger's figure for 1.9 was the 1-step figure before: now nothing is accounted at all
    with pytest.raises(ParameterError):
        ledger_from_dp_accounting(dp_accounting.SelfComposedDpEvent(SG, 1.9), delta=1e-5)


@pytest.mark.parametrize("data,match", [
    ({"type": "SelfComposedDpEvent", "event": SG_JSON, "count": "5"}, "Got '5'"),
    ({"type": "SelfComposedDpEvent", "event": SG_JSON, "count": float("nan")}, "ev.count must be a finite number"),
    ({"type": "SelfComposedDpEvent", "event": 3, "count": 2}, "ev.event must be a JSON object"),
    ({"type": "SelfComposedDpEvent", "event": [SG_JSON], "count": 2}, "ev.event must be a JSON object"),
    ({"type": "ComposedDpEvent", "events": [1, 2]}, "ev.events must be a list of JSON objects"),
    ({"type": "ComposedDpEvent", "events": "ab"}, "ev.events must be a list of JSON objects"),
    ({"type": "ComposedDpEvent", "events": {"type": "NoOpDpEvent"}}, "ev.events must be a list"),
    ({"type": "GaussianDpEvent", "noise_multiplier": [1.0]}, "ev.noise_multiplier must be a finite number"),
    ({"type": "GaussianDpEvent", "noise_multiplier": "x"}, "'noise_multiplier' parameter of SubsampledGaussian"),
    ({"type": "PoissonSampledDpEvent", "sampling_probability": {"a": 1}, "event": SG_JSON["event"]},
     "ev.sampling_probability must be a finite number"),
])
def test_i4_events_of_the_wrong_type(data, match):
    with pytest.raises(ParameterError, match=match.replace("(", r"\(").replace("'", "'")):
        ledger_from_dp_accounting(dp_event_from_json(data, where="ev"), delta=1e-5)


def test_i4_a_valid_composition_from_json():
    ev = dp_event_from_json({"type": "ComposedDpEvent", "events": [
        {"type": "SelfComposedDpEvent", "event": SG_JSON, "count": 4}, {"type": "NoOpDpEvent"}]}, where="ev")
    assert from_dp_accounting(ev) == Composed((SubsampledGaussian(0.01, 1.0, 4), Composed(())))


# ---- Opacus ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("history,match", [
    ([(1.0, 0.01, 1.5)], r"'history\[0\].steps' parameter of the Opacus (history|run record) must be an int in the range \[1, 1000000000000000\]. Got 1.5"),
    ([(1.0, 0.01, 1.9)], r"Got 1.9"),
    ([(1.0, 0.01, "5")], r"Got '5'"),
    ([(1.0, 0.01, math.nan)], r"'history\[0\].steps'"),
    ([(1.0, 0.01, 0)], r"'history\[0\].steps'"),
    ([("a", 0.01, 10)], r"'history\[0\].noise_multiplier'"),
    ([({}, 0.01, 10)], r"'history\[0\].noise_multiplier'"),
    ([(1.0, math.nan, 10)], r"'history\[0\].sample_rate'"),
    ([(1.0, 0.01, 10), (1.0, 0.01, 2.5)], r"'history\[1\].steps'"),
])
def test_i5_w3_history_entries(history, match):
    with pytest.raises(ParameterError, match=match):
        read_opacus(history)
    with pytest.raises(DPAuditError, match=match):
        OpacusRun.from_dict({"history": [list(h) for h in history]})


@pytest.mark.parametrize("value", ["no", "yes", 0, 1, "false", [True], {}])
def test_w2_poisson_sampling_must_be_a_json_boolean(value):
    with pytest.raises(ParameterError, match="'poisson_sampling' parameter of OpacusRun must be true, false or null"):
        OpacusRun(((1.0, 0.01, 10),), poisson_sampling=value)
    with pytest.raises(DataError, match="run.json: The 'poisson_sampling'"):
        OpacusRun.from_dict({"history": [[1.0, 0.01, 10]], "poisson_sampling": value}, where="run.json")


def test_w2_checked_flags():
    yes, no, unknown = (OpacusRun(((1.0, 0.01, 10),), poisson_sampling=v) for v in (True, False, None))
    assert any("checked: Poisson" in a for a in yes.assumptions()) and not yes.red_flags()
    assert any("NOT Poisson" in a for a in no.assumptions()) and no.red_flags()
    assert not any("checked" in a for a in unknown.assumptions()) and not unknown.red_flags()


@pytest.mark.parametrize("d,match", [
    ({"history": [[1.0, 0.01, 10]], "notes": "abc"}, "'notes' parameter of OpacusRun"),
    ({"history": [[1.0, 0.01, 10]], "notes": [1, 2]}, "'notes' parameter of OpacusRun"),
    ({"history": [[1.0, 0.01, 10]], "notes": [""]}, "'notes' parameter of OpacusRun"),
    ({"history": [[1.0, 0.01, 10]], "opacus_accountant": [1]}, "'opacus_accountant' parameter of OpacusRun"),
    ({"history": [[1.0, 0.01, 10]], "sampling": True}, r"'sampling' parameter of OpacusRun must be one of"),
    ({"history": [[1.0, 0.01, 10]], "samplng": "shuffle"}, r"unknown field\(s\) 'samplng'"),
    ({"history": "abc"}, "must be a list of"),
    ([[1.0, 0.01, 10]], "must be a JSON object with 'history'"),
])
def test_i5_run_records_of_the_wrong_type(d, match):
    with pytest.raises(DataError, match=match):
        OpacusRun.from_dict(d)


def test_round_trip_of_a_valid_run():
    run = OpacusRun(((1.1, 0.02, 30), (0.9, 0.02, 5)), "rdp", False, ("two phases",))
    assert OpacusRun.from_dict(run.to_dict()) == run
    assert run.steps == 35


class _Optimizer:
    """The two attributes OpacusRecorder.attach needs of an Opacus DPOptimizer."""

    noise_multiplier = 1.0
    step_hook = None

    def attach_step_hook(self, fn):
        self.step_hook = fn


def test_i5_recorder_with_an_empty_data_loader():
    with pytest.raises(ParameterError, match="must hold at least one batch"):
        OpacusRecorder.attach(_Optimizer(), data_loader=[])
    with pytest.raises(ParameterError, match="must have a length"):
        OpacusRecorder.attach(_Optimizer(), data_loader=iter([1, 2]))
    rec = OpacusRecorder.attach(_Optimizer(), data_loader=[1, 2, 3, 4])
    assert rec.sample_rate == 0.25


# ---- found by the fuzz suite (tests/fuzz/test_fuzz_bundles.py) --------------------------------------------------

def test_huge_composition_counts_are_a_range_error_not_an_overflow():
    with pytest.raises(ParameterError, match=r"'count' parameter of SelfComposedDpEvent must be an int in the range"):
        ledger_from_dp_accounting(dp_accounting.SelfComposedDpEvent(SG, 10**4000), delta=1e-5)
    nested = SG
    for _ in range(3):                     # 10**18 applications in all, each count within range
        nested = dp_accounting.SelfComposedDpEvent(nested, 10**6)
    with pytest.raises(ParameterError, match="compose 1000000000000000000 mechanism applications"):
        ledger_from_dp_accounting(nested, delta=1e-5)
    with pytest.raises(ParameterError, match=r"'history\[0\].steps'"):
        read_opacus([(1.0, 0.01, 10**16)])
    big = ledger_from_dp_accounting(dp_accounting.SelfComposedDpEvent(SG, 10**15), delta=1e-5).overall().epsilon
    assert big > 1e3 and not math.isnan(big)


def test_a_textual_randomized_response_parameter_is_refused():
    with pytest.raises(ParameterError, match="'noise_parameter' of RandomizedResponseDpEvent"):
        from_dp_accounting(dp_accounting.RandomizedResponseDpEvent(noise_parameter="5", num_buckets=2))

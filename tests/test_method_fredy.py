"""FREDY (Future Internet 2023, Algorithm 1): FedAvg, honest sensitivity, end to end with two releases."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dpaudit.errors import ParameterError
from dpaudit.training.methods.fredy import FEDAVG_ASSUMPTION, FREDYConfig, fedavg, fredy_sensitivity


def test_fedavg_is_the_unweighted_mean() -> None:
    g = torch.Generator().manual_seed(0)
    states = [{"w": torch.randn(3, 2, generator=g), "b": torch.randn(2, generator=g), "n": torch.tensor(i + 1)} for i in range(4)]
    avg = fedavg(states)
    torch.testing.assert_close(avg["w"], sum(s["w"] for s in states) / 4)
    torch.testing.assert_close(avg["b"], sum(s["b"] for s in states) / 4)
    assert avg["n"].dtype == states[0]["n"].dtype and int(avg["n"]) == 2  # mean 2.5 rounds to even (2)
    with pytest.raises(ParameterError):
        fedavg([])


def test_sensitivity_is_2T_after_fedavg_and_2_without_it() -> None:
    assert fredy_sensitivity(25, 10) == 50.0
    assert fredy_sensitivity(25, 1) == 2.0  # one round: no averaging, each teacher sees only its own data
    assert fredy_sensitivity(25, 10, "pate") == 2.0
    with pytest.raises(ParameterError, match="'mode'"):
        fredy_sensitivity(5, 2, "best_case")


def test_assumption_says_so_plainly() -> None:
    assert "one record affects one teacher" in FEDAVG_ASSUMPTION and "does not hold" in FEDAVG_ASSUMPTION


def test_config_validation() -> None:
    with pytest.raises(ParameterError, match="'rounds'"):
        FREDYConfig(rounds=0)
    with pytest.raises(ParameterError, match="'gamma'"):
        FREDYConfig(gamma=-1.0)
    with pytest.raises(ParameterError, match="'sensitivity'"):
        FREDYConfig(sensitivity="none")

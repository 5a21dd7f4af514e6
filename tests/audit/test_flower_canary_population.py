"""``dpaudit flower audit``'s population: every ``--canaries`` / ``--clients`` in range runs (each SuperNode gets
fewer digits when the population is large), and one past what the simulation takes is one error naming both
options, before anything starts. Before this, ``--canaries 128`` (its documented maximum) always failed inside the
simulation with an error about 'records_per_client', a parameter the user never typed."""

from __future__ import annotations

import pytest

pytest.importorskip("flwr")

from dpaudit.auditing import flower_canary, flower_run  # noqa: E402
from dpaudit.errors import ParameterError  # noqa: E402


class _Stop(Exception):
    pass


def _capture(monkeypatch) -> dict:
    seen: dict = {}

    def fake(out, **kwargs):
        seen.update(kwargs)
        raise _Stop

    monkeypatch.setattr(flower_run, "run_digits_simulation", fake)
    return seen


@pytest.mark.parametrize("canaries,clients,want", [(32, 8, 20), (64, 4, 20), (75, 4, 20), (128, 4, 12),
                                                   (128, 72, 7)])
def test_each_supernode_gets_as_many_digits_as_the_population_leaves(tmp_path, monkeypatch, canaries, clients, want):
    seen = _capture(monkeypatch)
    with pytest.raises(_Stop):
        flower_canary.audit_flower_simulation(tmp_path / "a", canaries=canaries, clients=clients, sampled=2)
    n = canaries + clients
    assert seen["clients"] == n and seen["records_per_client"] == want
    # what run_digits_simulation itself requires: the non-members kept apart from every partition
    assert n * want <= 1797 - flower_run.SIM_NON_MEMBERS


def test_a_population_past_the_simulation_is_one_error_naming_both_options(tmp_path, monkeypatch, cli):
    seen = _capture(monkeypatch)
    with pytest.raises(ParameterError, match=r"'canaries' \+ 'clients' .* at most 200 .* Got 128 \+ 100 = 228"):
        flower_canary.audit_flower_simulation(tmp_path / "a", canaries=128, clients=100)
    assert seen == {} and not (tmp_path / "a").exists()
    code, out, err = cli(["flower", "audit", "--out", tmp_path / "b", "--canaries", "128", "--clients", "100"])
    assert code == 2 and "--canaries" in err and "--clients" in err and "Traceback" not in err, err
    assert not (tmp_path / "b").exists()

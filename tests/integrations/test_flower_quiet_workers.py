"""The ClientApps' log lines of dpaudit's Flower simulations (``flower simulate``, ``flower audit``) follow the rule
for Flower's log: off the terminal under the CLI unless ``--verbose``. Ray forwards its workers' output to the
driver unless told not to (``log_to_driver``), so without this a plain ``dpaudit flower audit`` ended with lines such
as ``(ClientAppActor pid=...) WARNING : Manually terminating ClientAppActor`` on the user's terminal."""

from __future__ import annotations

import pytest

pytest.importorskip("flwr")

import flwr.simulation  # noqa: E402

from dpaudit.auditing.flower_run import run_digits_simulation  # noqa: E402
from dpaudit.cli import _warnings  # noqa: E402
from dpaudit.errors import DataError  # noqa: E402


def _backend(tmp_path, monkeypatch) -> dict:
    seen: dict = {}

    def fake(**kwargs):              # records what the simulation would start with, runs nothing
        seen.update(kwargs["backend_config"])

    monkeypatch.setattr(flwr.simulation, "run_simulation", fake)
    with pytest.raises(DataError, match="without writing its run record"):
        run_digits_simulation(tmp_path / "run", clients=4, sampled=2, rounds=1)
    return seen


@pytest.fixture
def restore_quiet():
    was_quiet = _warnings._installed is not None
    yield
    _warnings.quiet_third_party(not was_quiet)


def test_worker_logs_follow_the_verbose_rule(tmp_path, monkeypatch, restore_quiet):
    _warnings.quiet_third_party(False)           # the CLI without --verbose
    assert _backend(tmp_path, monkeypatch)["init_args"]["log_to_driver"] is False
    _warnings.quiet_third_party(True)            # --verbose (and the Python API, where no filter is installed)
    assert _backend(tmp_path, monkeypatch)["init_args"]["log_to_driver"] is True

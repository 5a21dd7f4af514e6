"""FREDY (Future Internet 2023, Algorithm 1): FedAvg, honest sensitivity, end to end with two releases."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dpaudit.errors import ParameterError
from dpaudit.training.methods.fredy import FEDAVG_ASSUMPTION, FREDYConfig, fedavg, fredy_sensitivity

def _run_fredy(method_config, *, dataset, out, seed, progress=False):
    """Run the method config through the scaffold (what ``dpaudit train fredy`` does)."""
    from dpaudit.training.methods import fredy as module

    return module.run(module.Config(name="fredy", method=method_config, dataset=dataset), out, seed=seed, progress=progress)



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


def test_fredy_end_to_end_two_releases(tmp_path) -> None:
    from dpaudit.training.ensemble import TrainConfig
    from dpaudit.training.release import load_release

    cfg = FREDYConfig(teachers=3, rounds=2, gamma=0.5, queries=60, model_kwargs={"hidden": [32]}, num_samples=500,
                      teacher_train=TrainConfig(epochs=3, batch_size=64, lr=1e-2),
                      student_train=TrainConfig(epochs=6, batch_size=32, lr=1e-2),
                      baseline_train=TrainConfig(epochs=6, batch_size=64, lr=1e-2))
    res = _run_fredy(cfg, dataset="digits", out=tmp_path / "f", seed=0, progress=False)
    rel = load_release(res.release)
    base = load_release(res.extra_releases["nonprivate"])
    assert res.extra_releases["nonprivate"] == tmp_path / "f" / "nonprivate"
    assert base.meta["statement"]["epsilon"] == "inf" and base.votes is None
    # the ledger records all answered queries, at the honest sensitivity 2T, with the votes
    (party, records), = rel.meta["ledger"]["parties"].items()
    ev = records[0]["event"]
    assert ev["num_queries"] == 60 and ev["sensitivity"] == 2.0 * 3 and ev["gamma"] == 0.5
    assert any(FEDAVG_ASSUMPTION == a for a in rel.meta["assumptions"])
    assert FEDAVG_ASSUMPTION in res.accounting.statement.assumptions
    # the machine-readable flag a report turns into a red flag (rounds >= 2); the baseline has none
    assert rel.meta["flags"] == [{"code": "teachers_not_independent", "message": FEDAVG_ASSUMPTION}]
    assert base.meta["flags"] == []
    honest, honest_di, paper = res.accounting.statements
    assert paper.epsilon < honest.epsilon <= honest_di.epsilon * 1.001
    assert res.accounting.epsilon == min(honest.epsilon, honest_di.epsilon) > paper.epsilon
    assert rel.meta["claim"]["epsilon"] == pytest.approx(paper.epsilon)
    assert np.array_equal(rel.membership["members"], base.membership["members"])
    assert res.utility["nonprivate_accuracy"] > 0.5 and 0 <= res.utility["test_accuracy"] <= 1


def test_fredy_resumes_after_fedavg_rounds(tmp_path, monkeypatch) -> None:
    import dpaudit.training.methods.fredy as fredy_mod
    from dpaudit.training.ensemble import TrainConfig

    cfg = FREDYConfig(teachers=2, rounds=3, gamma=1.0, queries=30, model_kwargs={"hidden": [16]}, num_samples=400,
                      nonprivate_baseline=False,
                      teacher_train=TrainConfig(epochs=2, batch_size=64, lr=1e-2),
                      student_train=TrainConfig(epochs=3, batch_size=32, lr=1e-2))
    full = _run_fredy(cfg, dataset="digits", out=tmp_path / "a", seed=1, progress=False)
    real = fredy_mod.train_group
    calls = {"n": 0}

    def stop_in_round_3(spec, datasets, config, **kw):
        calls["n"] += 1
        if calls["n"] == 3:  # rounds 1, 2 done; the local last round is interrupted
            raise KeyboardInterrupt
        return real(spec, datasets, config, **kw)

    monkeypatch.setattr(fredy_mod, "train_group", stop_in_round_3)
    with pytest.raises(KeyboardInterrupt):
        _run_fredy(cfg, dataset="digits", out=tmp_path / "b", seed=1, progress=False)
    calls["n"] = 10
    monkeypatch.setattr(fredy_mod, "train_group", lambda *a, **k: (calls.__setitem__("n", calls["n"] + 1), real(*a, **k))[1])
    resumed = _run_fredy(cfg, dataset="digits", out=tmp_path / "b", seed=1, progress=False)
    assert calls["n"] == 12  # last round + student only
    assert resumed.utility == full.utility


def _small_fredy(**kw):
    from dpaudit.training.ensemble import TrainConfig

    return FREDYConfig(**{"teachers": 3, "rounds": 2, "gamma": 0.5, "queries": 40, "model_kwargs": {"hidden": [16]},
                          "num_samples": 400, "nonprivate_baseline": False,
                          "teacher_train": TrainConfig(epochs=2, batch_size=64, lr=1e-2),
                          "student_train": TrainConfig(epochs=3, batch_size=32, lr=1e-2), **kw})


def test_teachers_are_shared_across_a_gamma_sweep_and_equal_fresh_ones(tmp_path, monkeypatch) -> None:
    # issue 16 item 6: the teachers do not depend on gamma; inside shared_stages a second setting that differs
    # only in gamma reuses them, and its numbers equal a run that trains everything from scratch
    import dpaudit.training.methods.fredy as fredy_mod
    from dpaudit.training.methods.common import shared_stages

    real, calls = fredy_mod.train_group, []

    def counting(spec, datasets, config, **kw):
        calls.append(len(datasets))
        return real(spec, datasets, config, **kw)

    monkeypatch.setattr(fredy_mod, "train_group", counting)
    with shared_stages(tmp_path / "shared"):
        _run_fredy(_small_fredy(gamma=0.5), dataset="digits", out=tmp_path / "a", seed=3)
        assert calls == [3, 3, 1]  # FedAvg round, local last round, student
        calls.clear()
        shared = _run_fredy(_small_fredy(gamma=2.0), dataset="digits", out=tmp_path / "b", seed=3)
        assert calls == [1]  # only the student: the teachers came from the shared stage
        calls.clear()
        _run_fredy(_small_fredy(gamma=2.0, rounds=3), dataset="digits", out=tmp_path / "c", seed=3)
        assert calls == [3, 3, 3, 1]  # other teacher settings: not reused
    calls.clear()
    fresh = _run_fredy(_small_fredy(gamma=2.0), dataset="digits", out=tmp_path / "d", seed=3)
    assert calls == [3, 3, 1]
    assert shared.utility == fresh.utility and shared.accounting.epsilon == fresh.accounting.epsilon


def test_baseline_can_train_on_the_student_records_as_the_paper(tmp_path) -> None:
    from dpaudit.training.ensemble import TrainConfig
    from dpaudit.training.release import load_release

    with pytest.raises(ParameterError, match="'baseline_data'"):
        FREDYConfig(baseline_data="public")
    cfg = _small_fredy(nonprivate_baseline=True, baseline_data="student",
                       baseline_train=TrainConfig(epochs=3, batch_size=32, lr=1e-2))
    res = _run_fredy(cfg, dataset="digits", out=tmp_path / "f", seed=0)
    main, base = load_release(res.release), load_release(res.extra_releases["nonprivate"])
    # the paper's baseline: trained on the 40 answered public records, so those are its members
    assert len(base.membership["members"]) == 40
    assert not np.intersect1d(base.membership["members"], main.membership["members"]).size
    assert "student's training records" in base.meta["assumptions"][0]

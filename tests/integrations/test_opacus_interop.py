"""Opacus interop with a real PrivacyEngine: history -> events, recorder, epsilon equal to Opacus's RDP."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

from dpaudit.accountants.events import Composed, SubsampledGaussian
from dpaudit.accountants.ledger import PrivacyLedger
from dpaudit.errors import DataError, ParameterError
from dpaudit.integrations.opacus import OpacusRecorder, OpacusRun, read_opacus, write_opacus_ledger

opacus = pytest.importorskip("opacus")


def _train(poisson: bool, steps_epochs: int = 2, seed: int = 0):
    from opacus import PrivacyEngine

    torch.manual_seed(seed)
    X = torch.randn(64, 5)
    y = (X[:, 0] > 0).long()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, y), batch_size=16, shuffle=True)
    model = torch.nn.Linear(5, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    engine = PrivacyEngine(accountant="rdp")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, opt, loader = engine.make_private(module=model, optimizer=opt, data_loader=loader, noise_multiplier=1.3,
                                                 max_grad_norm=1.0, poisson_sampling=poisson)
    rec = OpacusRecorder.attach(opt, data_loader=loader)
    for epoch in range(steps_epochs):
        if epoch == 1:
            opt.noise_multiplier = 0.9        # a second phase
        for xb, yb in loader:
            if len(xb) == 0:
                continue
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
    return engine, rec, loader


def test_epsilon_equals_opacus_rdp_and_pld_beside_it() -> None:
    engine, rec, loader = _train(poisson=True)
    run = read_opacus(engine, data_loader=loader)
    assert len(run.history) == 2 and run.poisson_sampling is True and not run.red_flags()
    assert run.history == tuple(tuple(h) for h in engine.accountant.history)
    res = run.account(1e-5)
    theirs = engine.accountant.get_epsilon(delta=1e-5)
    assert res.epsilon == pytest.approx(theirs, rel=1e-6)
    assert res.facts["opacus_rdp_epsilon"] == pytest.approx(theirs, rel=1e-12)
    labels = [s.label for s in res.statements]
    assert any("pld" in lab for lab in labels) and any("dpaudit rdp" in lab for lab in labels)
    pld = next(s for s in res.statements if "pld" in s.label)
    assert 0 < pld.epsilon <= res.epsilon
    text = " ".join(res.statement.assumptions)
    assert "Poisson" in text and "Record-level" in text
    # the recorder saw the same phases through the optimizer hook, without the engine
    assert read_opacus(rec).history == run.history


def test_fixed_batches_accounted_as_poisson_are_a_red_flag() -> None:
    engine, _, loader = _train(poisson=False, steps_epochs=1)
    run = read_opacus(engine, data_loader=loader)
    assert run.poisson_sampling is False
    assert run.red_flags() and "Poisson" in run.red_flags()[0]
    assert run.red_flags()[0] in run.account(1e-5).warnings


def test_ledger_json_round_trip(tmp_path) -> None:
    run = OpacusRun(((1.1, 0.01, 300), (0.9, 0.02, 50)))
    path = write_opacus_ledger(run, tmp_path / "ledger.json", delta=1e-5)
    led = PrivacyLedger.from_dict(json.loads(path.read_text()))
    assert led.events("all") == Composed((SubsampledGaussian(0.01, 1.1, 300), SubsampledGaussian(0.02, 0.9, 50)))
    # the ledger (dp_accounting's RDP on Opacus's orders) is conservative against Opacus's own series
    assert led.epsilon("all") == pytest.approx(run.opacus_epsilon(1e-5), rel=1e-4)
    assert led.epsilon("all") >= run.opacus_epsilon(1e-5) * (1 - 1e-9)
    assert OpacusRun.from_dict(run.to_dict()) == run


@pytest.mark.parametrize("history,err", [
    ([(1.0, 0.01)], DataError),
    ([(0.0, 0.01, 10)], ParameterError),
    ([(1.0, 1.5, 10)], ParameterError),
    ("nope", DataError),
])
def test_bad_histories_are_refused(history, err) -> None:
    with pytest.raises(err):
        read_opacus(history) if not isinstance(history, str) else OpacusRun.from_dict({"history": history})


def test_recorder_needs_a_dp_optimizer() -> None:
    with pytest.raises(ParameterError, match="DPOptimizer"):
        OpacusRecorder.attach(torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1), sample_rate=0.1)
    assert np.isfinite(OpacusRun(()).account(1e-5).epsilon)


def test_orders_are_opacus_defaults() -> None:
    from opacus.accountants import RDPAccountant

    from dpaudit.integrations.opacus import OPACUS_ORDERS

    assert list(OPACUS_ORDERS) == [float(a) for a in RDPAccountant.DEFAULT_ALPHAS]

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
from dpaudit.serial import to_dict

opacus = pytest.importorskip("opacus")


def _train(poisson: bool, steps_epochs: int = 2, seed: int = 0, loader_kwargs=None, accountant: str = "rdp"):
    from opacus import PrivacyEngine

    torch.manual_seed(seed)
    X = torch.randn(64, 5)
    y = (X[:, 0] > 0).long()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, y), batch_size=16,
                                         **(loader_kwargs or {"shuffle": True}))
    model = torch.nn.Linear(5, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    engine = PrivacyEngine(accountant=accountant) if accountant else PrivacyEngine()
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


def test_opacus_figure_beside_the_routes_and_the_smallest_route_is_the_headline() -> None:
    engine, rec, loader = _train(poisson=True)
    run = read_opacus(engine, data_loader=loader)
    assert len(run.history) == 2 and run.poisson_sampling is True and run.sampling == "poisson" and not run.red_flags()
    assert run.history == tuple(tuple(h) for h in engine.accountant.history)
    res = run.account(1e-5)
    theirs = engine.accountant.get_epsilon(delta=1e-5)
    # Opacus's own figure is shown (equal to PrivacyEngine.get_epsilon), but it is not a route dpaudit certifies
    opacus_fig = res.statements[0]
    assert opacus_fig.epsilon == pytest.approx(theirs, rel=1e-6) and opacus_fig.route == ""
    assert res.facts["opacus_rdp_epsilon"] == pytest.approx(theirs, rel=1e-12)
    routes = {s.route: s for s in res.statements if s.route}
    assert set(routes) == {"rdp", "pld", "prv"}
    # issue 27: one headline everywhere: the smallest valid route, named by route
    assert res.epsilon == min(s.epsilon for s in routes.values()) and res.headline_route == "pld"
    assert to_dict(res)["headline_route"] == res.facts["headline_route"] == "pld"
    assert routes["rdp"].epsilon >= theirs * (1 - 1e-9)     # dpaudit's exact fractional orders: never below Opacus's
    assert res.epsilon < theirs
    text = " ".join(res.statement.assumptions)
    assert "Poisson" in text and "Record-level" in text
    # the recorder saw the same phases through the optimizer hook, without the engine
    assert read_opacus(rec).history == run.history


@pytest.mark.parametrize("accountant", [None, "prv", "gdp", "rdp"])
def test_opacus_own_figure_is_the_accountant_the_engine_used(accountant) -> None:
    # issue 36: a default PrivacyEngine() uses PRV; "Opacus's own figure" is what engine.get_epsilon printed
    engine, rec, loader = _train(poisson=True, accountant=accountant, steps_epochs=1 if accountant == "gdp" else 2)
    run = read_opacus(engine, data_loader=loader)
    kind = accountant or "prv"
    assert run.opacus_kind == kind
    res = run.account(1e-5)
    theirs = engine.get_epsilon(delta=1e-5)
    assert res.statements[0].epsilon == pytest.approx(theirs, rel=1e-6) and res.statements[0].route == ""
    assert res.statements[0].label.startswith("Opacus's own figure")
    assert res.facts["opacus_epsilon"] == res.statements[0].epsilon and res.facts["opacus_epsilon_accountant"] == kind
    # the RDP figure stays beside it, whichever accountant ran
    assert res.facts["opacus_rdp_epsilon"] == pytest.approx(run.opacus_rdp_epsilon(1e-5), rel=1e-12)
    assert run.opacus_epsilon(1e-5) == pytest.approx(theirs, rel=1e-6)
    # the record keeps the accountant's name, so a release made from it shows the same figure
    assert OpacusRun.from_dict(json.loads(json.dumps(run.to_dict()))).opacus_kind == kind
    assert read_opacus(rec).opacus_kind == "rdp"            # a recorder does not know the engine's accountant


def test_shuffled_batches_are_accounted_as_shuffled_not_poisson() -> None:
    from dpaudit.accountants.closed_form import gaussian_mechanism_epsilon

    engine, _, loader = _train(poisson=False, steps_epochs=1)
    run = read_opacus(engine, data_loader=loader)
    assert run.poisson_sampling is False and run.sampling == "shuffle"
    assert (run.dataset_size, run.batch_size, run.drop_last) == (64, 16, False)
    assert not run.red_flags()                                # accounted honestly: no red flag
    res = run.account(1e-5)
    assert "shuffled fixed-size batches" in res.mechanism
    # one epoch, sigma 1.3: every record in one batch, a Gaussian mechanism of sensitivity 1 (zero-out) -- exact
    assert res.epsilon == pytest.approx(gaussian_mechanism_epsilon(1 / 1.3, 1e-5), rel=1e-9)
    assert res.headline_route == "pld" and "NOT a guarantee" in res.statements[0].label
    assert res.facts["opacus_rdp_epsilon"] < res.facts["lower_bound_epsilon"] <= res.epsilon
    assert "route prv not used" in res.facts
    assert any("not a guarantee" in w for w in res.warnings)
    codes = [c for c, _ in run.release_flags(1e-5)]
    assert codes == ["opacus_epsilon_assumes_poisson"]
    assert OpacusRun.from_dict(json.loads(json.dumps(run.to_dict()))) == run


def test_sequential_batches_and_unknown_samplers() -> None:
    engine, _, loader = _train(poisson=False, steps_epochs=1, loader_kwargs={"shuffle": False})
    run = read_opacus(engine, data_loader=loader)
    assert run.sampling == "sequential" and not run.red_flags()
    assert "deterministic" in run.account(1e-5).mechanism
    sampler = torch.utils.data.RandomSampler(range(64), replacement=True)
    engine, _, loader = _train(poisson=False, steps_epochs=1, loader_kwargs={"sampler": sampler})
    run = read_opacus(engine, data_loader=loader)
    assert run.sampling == "unknown" and run.red_flags() and "Poisson" in run.red_flags()[0]
    assert run.red_flags()[0] in run.account(1e-5).warnings
    assert [c for c, _ in run.release_flags(1e-5)] == ["sampling_not_poisson"]
    # a record from before the sampler was recorded (poisson_sampling false only) stays a red flag
    old = OpacusRun.from_dict({"history": [[1.0, 0.25, 4]], "poisson_sampling": False})
    assert old.sampling == "unknown" and old.red_flags()


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


@pytest.mark.parametrize("field,value", [("lr", 0.0), ("epochs", 0), ("batch_size", -1), ("max_grad_norm", 0.0),
                                         ("optimizer", "rmsprop"), ("momentum", 1.0), ("poisson_sampling", "yes")])
def test_opacus_recipe_is_validated_at_construction(field, value) -> None:
    from dpaudit.integrations.opacus import OpacusRecipe

    kw = dict(noise_multiplier=1.0, max_grad_norm=1.0, epochs=1, batch_size=8, lr=0.1)
    with pytest.raises(ParameterError, match=f"'{field}' parameter of OpacusRecipe"):
        OpacusRecipe(**{**kw, field: value})
    with pytest.raises(DataError, match="unknown field"):
        OpacusRecipe.from_dict({**kw, "lrr": 0.1})


def test_opacus_recipe_gives_a_ready_train_function() -> None:
    # issue 36: no hand-written train(X, y, seed): the recipe's train function runs PrivacyEngine.make_private
    from dpaudit.integrations.opacus import OpacusRecipe

    rng = np.random.default_rng(0)
    X = rng.normal(size=(96, 5)).astype(np.float32)
    y = (X[:, 0] > 0).astype(np.int64)
    state = torch.random.get_rng_state()
    train = OpacusRecipe(noise_multiplier=0.5, max_grad_norm=1.0, epochs=3, batch_size=16, lr=0.5).train_fn(
        torch.nn.Linear, in_features=5, out_features=2)
    m = train(X, y, 0)
    assert torch.equal(state, torch.random.get_rng_state())        # the caller's RNG is untouched
    p = m.predict_proba(X)
    assert p.shape == (96, 2) and np.allclose(p.sum(1), 1) and (p.argmax(1) == y).mean() > 0.7
    assert np.array_equal(p, train(X, y, 0).predict_proba(X))

"""`dpaudit release make`: outside models, data, recipes and accounting become standard release bundles that
`dpaudit attack` / `audit` / `check` read unchanged."""

from __future__ import annotations

import json

import numpy as np
import pytest

import dpaudit

from byom_artefacts import digits_files, scores_file, torch_files
from dpaudit.auditing.attack_release import attack_release
from dpaudit.auditing.release_make import make_release, parse_claim
from dpaudit.errors import DataError, ParameterError
from dpaudit.training.release import load_release
from dpaudit.training.usercode import BundleCode
from dpaudit.serial import to_dict

CLAIM = ["epsilon=8", "delta=1e-5", "granularity=record"]


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    return digits_files(tmp_path_factory.mktemp("digits"))


def test_parse_claim() -> None:
    assert parse_claim(CLAIM) == {"epsilon": 8.0, "delta": 1e-5, "granularity": "example",
                                  "text": "(8, 1e-5)-DP at example level"}
    assert parse_claim({"epsilon": "inf", "delta": 0, "granularity": "user"})["granularity"] == "user"


def test_sklearn_release_attacks_unchanged(digits, tmp_path) -> None:
    out = make_release(tmp_path / "rel", claim=CLAIM, model=digits["skops"], data=digits["data"],
                       members=digits["members"], nonmembers=digits["nonmembers"])
    rel = load_release(out)
    assert rel.kind == "sklearn" and rel.meta["params"]["possible_attacks"] == ["threshold"]
    assert len(rel.membership["attacker"]) == 1797 - 300                     # default pool: everyone else
    assert 0.8 < rel.meta["utility"]["test_accuracy"] <= 1.0
    ds = rel.dataset()
    assert ds.X.shape == (1797, 64)
    rep = attack_release(rel, attack="threshold", n_bootstrap=0, blind=False)
    assert rep.attack.metrics.auc > 0.5
    with pytest.raises(DataError, match="needs a training recipe"):
        attack_release(rel, attack="lira")


def test_torch_factory_release_with_recipe_and_masks(digits, tmp_path) -> None:
    t = torch_files(tmp_path)
    n = 1797
    mem_mask = np.zeros(n, bool)
    mem_mask[np.load(digits["members"])] = True
    np.save(tmp_path / "mask.npy", mem_mask)
    out = make_release(tmp_path / "rel", claim=CLAIM, model=t["weights"], factory=f"{t['factory_module']}:build",
                       factory_kwargs={"hidden": 16}, data=digits["data"], members=tmp_path / "mask.npy",
                       nonmembers=digits["nonmembers"], train_fn="byomtrain:train")
    with pytest.raises(DataError, match="dpaudit runs no code a bundle names"):
        load_release(out)                  # the bundle's factory runs only when the user names the same code
    rel = load_release(out, code=BundleCode(factory=f"{t['factory_module']}:build", train_fn="byomtrain:train"))
    assert rel.kind == "torch_factory" and rel.spec.is_torch
    assert rel.spec.kwargs["factory"] == f"{t['factory_module'].resolve()}:build"     # file form, stored absolute
    assert np.array_equal(rel.membership["members"], np.flatnonzero(mem_mask))
    import byomnet
    import torch
    from safetensors.torch import load_file

    net = byomnet.build(16)
    net.load_state_dict(load_file(str(t["weights"])))
    X = rel.dataset().X[:5]
    expect = torch.softmax(net(torch.from_numpy(X)), dim=1).detach().numpy()
    np.testing.assert_allclose(rel.model.predict_proba(X), expect, atol=1e-6)
    assert "runs it" in " ".join(rel.meta["assumptions"])
    rep = attack_release(rel, attack="lira", num_shadows=4, n_bootstrap=0, blind=False)   # user train_fn shadows
    assert rep.settings["num_shadows"] == 4


def test_recipe_model_csv_and_npy_labels(tmp_path) -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 3))
    y = (X[:, 0] > 0).astype(int)
    header = "a,b,label,c"
    table = np.c_[X[:, :2], y, X[:, 2]]
    np.savetxt(tmp_path / "d.csv", table, delimiter=",", header=header, comments="")
    np.savetxt(tmp_path / "m.txt", np.arange(20), fmt="%d")
    np.savetxt(tmp_path / "n.txt", np.arange(20, 40), fmt="%d")
    from sklearn.tree import DecisionTreeClassifier
    import skops.io as sio

    sio.dump(DecisionTreeClassifier(random_state=0).fit(np.c_[X[:20, :2], X[:20, 2]], y[:20]), tmp_path / "t.skops")
    (tmp_path / "cfg.json").write_text(json.dumps({"epochs": 2}))
    out = make_release(tmp_path / "rel", claim=CLAIM, model=tmp_path / "t.skops", data=tmp_path / "d.csv",
                       label_column="label", members=tmp_path / "m.txt", nonmembers=tmp_path / "n.txt",
                       recipe_model="random_forest", recipe_kwargs={"n_estimators": 5})
    rel = load_release(out)
    assert rel.dataset().X.shape == (80, 3)
    assert rel.meta["model"]["recipe"]["model"]["name"] == "random_forest"
    shadow = rel.train_fn()(rel.dataset().X[:30], rel.dataset().y[:30], 0)
    assert shadow.predict_proba(rel.dataset().X[:3]).shape == (3, 2)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    out2 = make_release(tmp_path / "rel2", claim=CLAIM, model=tmp_path / "t.skops", data=tmp_path / "X.npy",
                        labels=tmp_path / "y.npy", members=tmp_path / "m.txt", nonmembers=tmp_path / "n.txt",
                        recipe_model="mlp", recipe_config=tmp_path / "cfg.json")
    assert load_release(out2).meta["model"]["recipe"]["train_config"]["epochs"] == 2


def test_scores_only_release(tmp_path) -> None:
    import dp_accounting

    from dpaudit.integrations.dp_accounting import dp_event_to_json

    ev = dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.0)), 1000)
    (tmp_path / "events.json").write_text(json.dumps(dp_event_to_json(ev)))
    out = make_release(tmp_path / "rel", claim=CLAIM, scores=scores_file(tmp_path), dp_events=tmp_path / "events.json")
    rel = load_release(out)
    assert rel.kind == "scores" and rel.model is None
    assert rel.meta["params"]["possible_attacks"] == ["threshold", "lira"]
    assert rel.meta["statement"]["epsilon"] > 0
    thr = attack_release(rel, attack="threshold", n_bootstrap=0)
    lira = attack_release(rel, attack="lira", n_bootstrap=0)
    assert lira.settings["online"] is True and lira.attack.metrics.auc > 0.55 and thr.attack.metrics.auc > 0.55
    assert lira.blind is None and lira.settings["bound"] == "estimate"
    with pytest.raises(DataError, match="holds only scores. Possible here: threshold, lira"):
        attack_release(rel, attack="shadow")
    with pytest.raises(DataError, match="no record features"):
        rel.dataset()


def test_opacus_run_accounting_and_flags(digits, tmp_path) -> None:
    from dpaudit.integrations.opacus import OpacusRun

    run = OpacusRun(((1.1, 0.05, 20),), poisson_sampling=False)
    (tmp_path / "opacus.json").write_text(json.dumps(to_dict(run)))
    out = make_release(tmp_path / "rel", claim=["epsilon=8", "delta=1e-5", "granularity=user"],
                       model=digits["skops"], data=digits["data"], members=digits["members"],
                       nonmembers=digits["nonmembers"], opacus=tmp_path / "opacus.json")
    meta = load_release(out).meta
    # a sampler dpaudit could not recognise: accounted as Opacus did, with the red flag; the headline is the smallest
    # valid route (issue 27), named in release.json
    routes = {s["route"]: s["epsilon"] for s in meta["statement"]["statements"] if s["route"]}
    assert meta["statement"]["epsilon"] == min(routes.values()) <= run.opacus_epsilon(1e-5)
    assert meta["statement"]["headline_route"] == meta["statement"]["statement"]["route"] in routes
    assert {f["code"] for f in meta["flags"]} == {"sampling_not_poisson", "granularity_not_covered"}
    assert meta["ledger"]["parties"]["all"]


def test_opacus_shuffled_batches_release_and_best_of_k(digits, tmp_path) -> None:
    from dpaudit.accountants.closed_form import gaussian_mechanism_epsilon
    from dpaudit.integrations.opacus import OpacusRun

    # DataLoader(shuffle=True): 100 records, batches of 20 (5 per epoch), 10 epochs at sigma 4
    run = OpacusRun(((4.0, 0.2, 50),), sampling="shuffle", dataset_size=100, batch_size=20)
    (tmp_path / "opacus.json").write_text(json.dumps(run.to_dict()))
    common = dict(model=digits["skops"], data=digits["data"], members=digits["members"], nonmembers=digits["nonmembers"],
                  opacus=tmp_path / "opacus.json")
    out = make_release(tmp_path / "rel", claim=["epsilon=20", "delta=1e-5"], **common)
    meta = load_release(out).meta
    st = meta["statement"]
    exact = gaussian_mechanism_epsilon(10 ** 0.5 / 4.0, 1e-5)      # 10 participations, sensitivity 1 (zero-out)
    assert st["epsilon"] == pytest.approx(exact, rel=1e-9) and st["headline_route"] == "pld"
    assert "shuffled fixed-size batches" in st["mechanism"]
    assert meta["params"]["accounting_source"]["sampling"] == "shuffled fixed-size batches"
    assert 0 < st["facts"]["lower_bound_epsilon"] <= st["epsilon"] and st["facts"]["opacus_rdp_epsilon"] < st["epsilon"]
    assert [f["code"] for f in meta["flags"]] == ["opacus_epsilon_assumes_poisson"]
    assert meta["params"]["runs_tried"] == 1
    # the same model as the best of 4 runs: 4 runs composed, and a claim covering one run is a red flag
    out4 = make_release(tmp_path / "rel4", claim=["epsilon=3", "delta=1e-5"], runs_tried=4, **common)
    meta4 = load_release(out4).meta
    assert meta4["statement"]["epsilon"] == pytest.approx(gaussian_mechanism_epsilon(40 ** 0.5 / 4.0, 1e-5), rel=1e-9)
    assert "tuning_not_accounted" in [f["code"] for f in meta4["flags"]]
    assert meta4["params"]["runs_tried"] == 4
    ok = make_release(tmp_path / "rel4ok", claim=["epsilon=20", "delta=1e-5"], runs_tried=4, **common)
    assert "tuning_not_accounted" not in [f["code"] for f in load_release(ok).meta["flags"]]
    with pytest.raises(ParameterError, match="'runs_tried'"):
        make_release(tmp_path / "bad", claim=["epsilon=3", "delta=1e-5"], runs_tried=0, **common)


def test_ledger_accounting_and_check(digits, tmp_path) -> None:
    from dpaudit.auditing import check_claims
    from dpaudit.integrations.opacus import OpacusRun, write_opacus_ledger

    write_opacus_ledger(OpacusRun(((1.1, 0.05, 20),)), tmp_path / "ledger.json", delta=1e-5)
    out = make_release(tmp_path / "rel", claim=CLAIM, model=digits["skops"], data=digits["data"],
                       members=digits["members"], nonmembers=digits["nonmembers"], ledger=tmp_path / "ledger.json")
    st = load_release(out).meta["statement"]
    eps = st["epsilon"]
    assert 0 < eps < 8
    # issue 27: the one route computed (the ledger's accountant) is named as the headline's
    ledger_accountant = json.loads((tmp_path / "ledger.json").read_text())["accountant"]
    assert st["headline_route"] == st["statement"]["route"] == ledger_accountant
    (tmp_path / "claims.toml").write_text('[[claim]]\nname = "lr"\nrelease = "rel"\nepsilon = 8.0\ndelta = 1e-5\n'
                                          'granularity = "example"\n')
    report = check_claims(tmp_path / "claims.toml")
    assert report.passed and report.results[0].accounted.epsilon == pytest.approx(eps)


def test_python_api_errors_are_worded_in_python(digits, tmp_path) -> None:
    # issue 36: Release.load on a bundle naming a factory said "Pass --factory FILE.py:build" (a CLI flag); from
    # Python it names the keyword (the CLI still names its flags: test_release_make_errors, tests/security)
    t = torch_files(tmp_path)
    out = make_release(tmp_path / "rel", claim=CLAIM, model=t["weights"], factory=f"{t['factory_module']}:build",
                       factory_kwargs={"hidden": 16}, data=digits["data"], members=digits["members"],
                       nonmembers=digits["nonmembers"])
    with pytest.raises(DataError, match="dpaudit runs no code a bundle names") as exc:
        dpaudit.Release.load(out)
    msg = str(exc.value)
    assert "code=BundleCode(factory='FILE.py:build')" in msg and "code=BundleCode(trust_bundle=True)" in msg
    assert "--factory" not in msg and "--trust-bundle-code" not in msg
    sk = make_release(tmp_path / "sk", claim=CLAIM, model=digits["skops"], data=digits["data"],
                      members=digits["members"], nonmembers=digits["nonmembers"])
    with pytest.raises(ParameterError, match=r"^BundleCode\(train_fn=\.\.\.\) applies to"):
        load_release(sk, code=BundleCode(train_fn="byomtrain:train"))
    with pytest.raises(ParameterError, match=r"needs factory='FILE.py:build'"):
        make_release(tmp_path / "x", claim=CLAIM, model=t["weights"], data=digits["data"], members=digits["members"],
                     nonmembers=digits["nonmembers"])
    with pytest.raises(DataError, match="train_fn= or recipe_model="):
        attack_release(load_release(sk), attack="lira")


def test_opacus_recipe_trains_shadow_models_without_a_train_wrapper(digits, tmp_path) -> None:
    # issue 36: an Opacus user had to write train(X, y, seed) before any attack beyond threshold; an OpacusRecipe
    # (PrivacyEngine settings) on the release's own pinned factory now trains the shadow / reference models
    from dpaudit.integrations.opacus import OpacusModel, OpacusRecipe

    t = torch_files(tmp_path)
    factory = f"{t['factory_module']}:build"
    recipe = OpacusRecipe(noise_multiplier=0.8, max_grad_norm=1.0, epochs=2, batch_size=64, lr=0.5, momentum=0.5)
    out = make_release(tmp_path / "rel", claim=CLAIM, model=t["weights"], factory=factory,
                       factory_kwargs={"hidden": 16}, data=digits["data"], members=digits["members"],
                       nonmembers=digits["nonmembers"], opacus_recipe=recipe)
    meta = json.loads((out / "release.json").read_text())
    assert meta["model"]["recipe"] == {"opacus": recipe.to_dict()}
    assert set(meta["params"]["possible_attacks"]) == {"threshold", "shadow", "lira", "rmia"}
    rel = load_release(out, code=BundleCode(factory=factory))      # the factory's permission covers the recipe
    X, y = rel.dataset().X[:300], rel.dataset().y[:300]
    train = rel.train_fn()
    a, b = train(X, y, 3), train(X, y, 3)
    pa = a.predict_proba(X)
    assert pa.shape == (300, 10) and np.allclose(pa, b.predict_proba(X))     # same seed, same model
    assert not np.allclose(pa, train(X, y, 4).predict_proba(X))
    rep = attack_release(rel, attack="lira", num_shadows=4, n_bootstrap=0, blind=False)
    assert rep.attack.name.startswith("lira") and 0.0 <= rep.attack.metrics.auc <= 1.0
    # without the user's permission for the factory, the recipe does not run it either
    with pytest.raises(DataError, match="runs no code a bundle names"):
        load_release(out)
    # the recipe needs a factory, and is one recipe among train_fn / recipe_model
    with pytest.raises(ParameterError, match="needs factory="):
        make_release(tmp_path / "x", claim=CLAIM, model=digits["skops"], data=digits["data"],
                     members=digits["members"], nonmembers=digits["nonmembers"], opacus_recipe=recipe)
    with pytest.raises(ParameterError, match="one training recipe"):
        make_release(tmp_path / "y", claim=CLAIM, model=t["weights"], factory=factory, data=digits["data"],
                     members=digits["members"], nonmembers=digits["nonmembers"], opacus_recipe=recipe.to_dict(),
                     recipe_model="mlp")
    assert isinstance(OpacusRecipe(**recipe.to_dict()).train_fn(lambda: torch_module())(X, y, 0), OpacusModel)


def torch_module():
    import torch

    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))


def test_release_make_cli_takes_an_opacus_recipe(digits, tmp_path, cli) -> None:
    t = torch_files(tmp_path)
    recipe = {"noise_multiplier": 1.0, "max_grad_norm": 1.0, "epochs": 1, "batch_size": 64, "lr": 0.1}
    args = ["release", "make", "--out", tmp_path / "rel", "--model", t["weights"], "--factory",
            f"{t['factory_module']}:build", "--factory-kwargs", '{"hidden": 16}', "--data", digits["data"],
            "--members", digits["members"], "--nonmembers", digits["nonmembers"], "--claim", "epsilon=8",
            "--claim", "delta=1e-5"]
    code, out, err = cli([*args, "--opacus-recipe", json.dumps({**recipe, "lrr": 1})])
    assert code == 2 and "--opacus-recipe" in err and "'lrr'" in err and "Traceback" not in err
    code, out, err = cli([*args, "--opacus-recipe", json.dumps(recipe)])
    assert code == 0, err
    meta = json.loads((tmp_path / "rel" / "release.json").read_text())
    assert meta["model"]["recipe"]["opacus"]["noise_multiplier"] == 1.0 and "lira" in meta["params"]["possible_attacks"]

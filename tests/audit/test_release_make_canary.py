"""Bundles from `release make` under canary audits (issue 42): a `--recipe-model --recipe-config` recipe with dp is
retrained with canaries (its train_config, not the outside model's null one), a real Opacus recipe and a user's
training function take black-box (input) canaries through their own code, and what cannot take canaries (Dirac
canaries without DP-SGD iterates, no recipe, a recipe without dp) is an error naming the route that works
(`dpaudit audit-trainer`)."""

from __future__ import annotations

import json

import pytest

from byom_artefacts import digits_files, torch_files
from dpaudit.auditing.canary_audit import canary_audit_release
from dpaudit.auditing.release_make import make_release
from dpaudit.errors import ParameterError
from dpaudit.training.release import load_release
from dpaudit.training.usercode import BundleCode

CLAIM = ["epsilon=8", "delta=1e-5", "granularity=record"]
DP_RECIPE = {"epochs": 1, "batch_size": 32, "lr": 0.5, "dp": {"noise_multiplier": 1.0, "max_grad_norm": 1.0}}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("byom")
    return {**digits_files(root), **torch_files(root), "root": root}


def _recipe_bundle(files, out, config):
    import dp_accounting

    from dpaudit.integrations.dp_accounting import dp_event_to_json

    (out.parent / f"{out.name}.json").write_text(json.dumps(config))
    # the run's accounting: 5 Poisson-sampled steps at q = 32/150, sigma 1 (what the recipe runs on 150 members)
    ev = dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(32 / 150, dp_accounting.GaussianDpEvent(1.0)), 5)
    (out.parent / f"{out.name}_events.json").write_text(json.dumps(dp_event_to_json(ev)))
    return make_release(out, claim=CLAIM, model=files["weights"], factory=f"{files['factory_module']}:build",
                        factory_kwargs={"hidden": 16}, data=files["data"], members=files["members"],
                        nonmembers=files["nonmembers"], recipe_model="mlp", recipe_config=out.parent / f"{out.name}.json",
                        dp_events=out.parent / f"{out.name}_events.json")


def test_a_recipe_config_with_dp_is_audited_with_its_train_config(files, tmp_path, cli):
    out = _recipe_bundle(files, tmp_path / "rel", DP_RECIPE)
    code = BundleCode(factory=f"{files['factory_module']}:build")
    res = canary_audit_release(load_release(out, code=code), audit="one-run", canaries=40, delta=1e-5,
                               ideal_replicates=3)
    assert res.kind == "certified" and res.settings["train_config"]["dp"]["noise_multiplier"] == 1.0
    assert res.accounted_epsilon is not None and 0.0 <= res.bound.epsilon <= res.accounted_epsilon
    assert any("model.recipe" in n for n in res.notes)
    rc, stdout, err = cli(["attack", out, "--audit", "one-run", "--canaries", "40", "--factory",
                           f"{files['factory_module']}:build", "--out", tmp_path / "att", "--quiet"])
    assert rc == 0, err
    assert json.loads((tmp_path / "att" / "canary_audit.json").read_text())["bound"]["kind"] == "certified"
    # the same through a claims file (the route `dpaudit check` takes)
    (tmp_path / "claims.toml").write_text(
        f'[[claim]]\nname = "r"\nrelease = "rel"\nfactory = "{files["factory_module"]}:build"\nepsilon = 1000.0\n'
        'delta = 1e-5\ngranularity = "example"\nattack = { kind = "canary", audit = "one-run", canaries = 40 }\n')
    rc, stdout, err = cli(["check", tmp_path / "claims.toml", "--json", "--quiet"])
    assert rc == 0, stdout + err
    assert json.loads(stdout)["results"][0]["empirical"]["kind"] == "certified"


def test_a_recipe_without_dp_and_no_recipe_name_the_trainer_audit(files, tmp_path, cli):
    out = _recipe_bundle(files, tmp_path / "nodp", {"epochs": 1, "batch_size": 32})
    code = BundleCode(factory=f"{files['factory_module']}:build")
    with pytest.raises(ParameterError, match=r"sets no dp.*dpaudit audit-trainer"):
        canary_audit_release(load_release(out, code=code), audit="one-run", canaries=40)
    bare = make_release(tmp_path / "bare", claim=CLAIM, model=files["skops"], data=files["data"],
                        members=files["members"], nonmembers=files["nonmembers"])
    rc, stdout, err = cli(["attack", bare, "--audit", "multi-run", "--models", "4", "--canary", "mislabeled",
                           "--out", tmp_path / "a", "--quiet"])
    assert rc == 2 and "records none" in err and "dpaudit audit-trainer" in err and "Traceback" not in err


def test_a_real_opacus_recipe_takes_input_canaries_through_opacus(files, tmp_path, cli):
    pytest.importorskip("opacus")
    from dpaudit.integrations.opacus import OpacusRecipe

    factory = f"{files['factory_module']}:build"
    recipe = OpacusRecipe(noise_multiplier=1.0, max_grad_norm=1.0, epochs=1, batch_size=32, lr=0.5)
    out = make_release(tmp_path / "op", claim=CLAIM, model=files["weights"], factory=factory,
                       factory_kwargs={"hidden": 16}, data=files["data"], members=files["members"],
                       nonmembers=files["nonmembers"], opacus_recipe=recipe)
    rel = load_release(out, code=BundleCode(factory=factory))
    res = canary_audit_release(rel, audit="multi-run", canary="mislabeled", models=8, ideal_replicates=3)
    assert res.kind == "certified" and res.settings["recipe"] == "opacus" and res.settings["models"] == 8
    assert res.mechanism["kind"] == "subsampled_gaussian" and res.mechanism["steps"] == 5     # ceil(150 / 32)
    assert res.bound.epsilon >= 0.0
    one = canary_audit_release(rel, audit="one-run", canary="mislabeled", canaries=20, ideal_replicates=3)
    assert one.kind == "certified" and one.bound.trials <= 20
    # Dirac canaries need iterates an Opacus recipe does not expose: the error says what works
    rc, stdout, err = cli(["attack", out, "--audit", "one-run", "--factory", factory, "--out", tmp_path / "a", "--quiet"])
    assert rc == 2 and "dpaudit audit-trainer" in err and "Opacus recipe" in err


def test_a_users_training_function_takes_input_canaries(files, tmp_path, cli):
    out = make_release(tmp_path / "tf", claim=CLAIM, model=files["skops"], data=files["data"],
                       members=files["members"], nonmembers=files["nonmembers"],
                       train_fn=f"{files['root'] / 'byomtrain.py'}:train")
    rc, stdout, err = cli(["attack", out, "--audit", "multi-run", "--models", "10", "--canary", "mislabeled",
                           "--train-fn", f"{files['root'] / 'byomtrain.py'}:train", "--out", tmp_path / "a", "--quiet"])
    assert rc == 0, err
    res = json.loads((tmp_path / "a" / "canary_audit.json").read_text())
    assert res["bound"]["kind"] == "certified" and res["settings"]["recipe"] == "train_fn"
    assert res["settings"]["models"] == 10 and 0 < res["bound"]["trials"] <= 10     # (a split rule tests on a part)
    assert res["accounted_epsilon"] is None          # the bundle states no accounting; the bound stands alone


def test_the_bundles_training_function_runs_only_when_the_user_names_it(files, tmp_path, cli):
    out = make_release(tmp_path / "tf", claim=CLAIM, model=files["skops"], data=files["data"],
                       members=files["members"], nonmembers=files["nonmembers"],
                       train_fn=f"{files['root'] / 'byomtrain.py'}:train")
    rc, stdout, err = cli(["attack", out, "--audit", "multi-run", "--models", "10", "--canary", "mislabeled",
                           "--out", tmp_path / "a", "--quiet"])
    assert rc == 2 and "runs no code a bundle names" in err and not (tmp_path / "a").exists()

"""The seed methods as Flower apps (``dpaudit train METHOD --engine flower``): the same release as the in-process
runner.

One Flower simulation (Ray starts once, 3 virtual SuperNodes = 3 parties) runs PrivateKT, FedKT-L2, FREDY and
ProxyFL one after another; each release is compared with the in-process run of the same configuration and seed:
identical ledger and accounted epsilon, identical membership/votes, and identical weights where the computation
is the same one (PrivateKT, FedKT, FREDY: the released model is trained by the curator from what the parties
sent, and the parties' models feed it only through argmax votes/labels). ProxyFL's released model is a client's
proxy, trained at the client: vmap over the round's clients (in process) and over one client (Flower) sum in a
different order, so its weights agree to float32 rounding, not bit for bit.

The Flower run is a background job (tests/background.py): a child process started with the test run, whose Ray
start-up and Flower's message polling overlap other tests; it writes each run's accounted epsilon beside the
releases.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import background

TINY = {
    "privatekt": {"data": {"num_clients": 3}, "model": {"hidden": [8]},
                  "method": {"rounds": 3, "local_epochs": 1, "client_fraction": 0.67}},
    "fedkt": {"method": {"level": "L2", "parties": 3, "partitions": 2, "teachers": 2, "partition": "iid", "baselines": [],
                         "teacher_model_kwargs": {"hidden": [8]}, "teacher_train": {"epochs": 2},
                         "student_train": {"epochs": 2}, "final_train": {"epochs": 2}}},
    "fredy": {"method": {"teachers": 3, "rounds": 2, "model_kwargs": {"hidden": [8]}, "teacher_train": {"epochs": 1},
                         "student_train": {"epochs": 2}, "nonprivate_baseline": False}},
    "proxyfl": {"data": {"num_clients": 3, "samples_per_client": 30}, "model": {"hidden": [8]},
                "method": {"rounds": 2, "batch_size": 10}},
}
EXACT = {"privatekt": True, "fedkt": True, "fredy": True, "proxyfl": False}

# the Flower side: every method in one Flower simulation (one Ray worker imports torch), each run's epsilon written
# to epsilons.json
_FLOWER_RUNS = """
import json, sys
from pathlib import Path
from dpaudit.training.flower import FlowerJob, run_methods
out, tiny = Path(sys.argv[1]), json.loads(sys.argv[2])
res = run_methods([FlowerJob(n, out / f"{n}_fl", 3, params=p, dataset="digits", progress=False)
                   for n, p in tiny.items()], timeout=300, num_cpus=1)
(out / "epsilons.json").write_text(json.dumps({n: r.epsilon for n, r in zip(tiny, res)}))
"""
BACKGROUND = (background.Job("flower-engine-methods", "runs",
                             lambda out: [sys.executable, "-c", _FLOWER_RUNS, str(out), json.dumps(TINY)],
                             timeout=420, env=background.ray_env()),
              ) if importlib.util.find_spec("flwr") is not None else ()


def _weights(path: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(path / "model.safetensors"))


def _meta(path: Path) -> dict:
    return json.loads((path / "release.json").read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    pytest.importorskip("flwr.simulation")
    from dpaudit.training.methods import run_method

    root = tmp_path_factory.mktemp("flower")
    inproc = {n: run_method(n, dataset="digits", out=root / f"{n}_in", seed=3, progress=False, params=p).epsilon
              for n, p in TINY.items()}
    fl = background.result(BACKGROUND[0], tmp_path_factory)
    flower = json.loads((fl / "epsilons.json").read_text())
    return root, fl, inproc, flower


@pytest.mark.parametrize("name", sorted(TINY))
def test_flower_run_releases_what_the_inprocess_run_releases(runs, name):
    root, fl, inproc, flower = runs
    a, b = root / f"{name}_in", fl / f"{name}_fl"
    # accounting: the same ledger, statements and headline epsilon (not approximately: the same events)
    assert flower[name] == inproc[name]
    ma, mb = _meta(a), _meta(b)
    assert mb["ledger"] == ma["ledger"] and mb["statement"] == ma["statement"] and mb["claim"] == ma["claim"]
    assert set(ma) == set(mb)
    for key in ("method", "dataset", "params", "model"):
        assert mb.get(key) == ma.get(key), key
    for f in ("membership.npz", "votes.npy"):
        if (a / f).exists():
            assert (b / f).read_bytes() == (a / f).read_bytes(), f
    wa, wb = _weights(a), _weights(b)
    assert set(wa) == set(wb)
    if EXACT[name]:
        assert all(np.array_equal(wa[k], wb[k]) for k in wa)
        assert mb["utility"] == ma["utility"]
    else:  # ProxyFL: the same draws, summed in another order (vmap over 3 clients vs 1)
        for k in wa:
            np.testing.assert_allclose(wb[k], wa[k], rtol=0, atol=1e-5)


def test_a_party_trains_its_own_models_of_a_group_with_the_groups_seeds():
    from dpaudit.training.ensemble import TrainConfig, train_ensemble
    from dpaudit.training.models import ModelSpec

    rng = np.random.default_rng(0)
    data = [(rng.normal(size=(n, 6)).astype(np.float32), rng.integers(0, 3, n)) for n in (20, 35, 12)]
    spec = ModelSpec("mlp", (6,), 3, {"hidden": [5]})
    cfg = TrainConfig(epochs=2, batch_size=8, lr=1e-2)
    from dpaudit.training import ensemble

    group = train_ensemble(spec, data, cfg, seed=4)
    for i in range(3):
        alone = train_ensemble(spec, [data[i]], cfg, seed=4, model_offset=i)
        init, _ = ensemble._fresh_state(spec, 1, 4, i)
        for k, v in ensemble.init_model(spec, 4, i).state_dict().items():
            assert torch.equal(init[k][0], v)  # model i's initialisation, exactly
        for k, v in group.state_dict(i).items():
            torch.testing.assert_close(alone.state_dict(0)[k], v, rtol=0, atol=1e-6)  # the same batches
    other = train_ensemble(spec, [data[1]], cfg, seed=4, model_offset=0)  # another place, other batches
    assert any(not torch.allclose(other.state_dict(0)[k], group.state_dict(1)[k]) for k in other.state_dict(0))


def test_model_offset_is_refused_with_dpsgd():
    from dpaudit.errors import ParameterError
    from dpaudit.training.ensemble import DPSGDConfig, TrainConfig, train_ensemble
    from dpaudit.training.models import ModelSpec

    spec = ModelSpec("mlp", (4,), 2, {"hidden": [3]})
    cfg = TrainConfig(epochs=1, batch_size=4, dp=DPSGDConfig(noise_multiplier=1.0, max_grad_norm=1.0))
    X, y = np.zeros((8, 4), np.float32), np.array([0, 1] * 4)
    with pytest.raises(ParameterError, match="model_offset"):
        train_ensemble(spec, [(X, y)], cfg, seed=0, model_offset=1)


def test_messages_carry_arrays_events_and_states_without_pickle():
    pytest.importorskip("flwr.app")
    from dpaudit.accountants.events import RandomizedResponse
    from dpaudit.training.flower.codec import from_records, to_records

    obj = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "labels": np.array([3, 1, 2]),
           "mask": np.array([True, False]), "event": RandomizedResponse(num_classes=10, num_samples=2, epsilon=5.0),
           "eps": float("inf"), "group": [0, 2], "nested": ({"k": 1},)}
    back = from_records(to_records(obj))
    assert torch.equal(back["w"], obj["w"]) and back["w"].dtype == torch.float32
    assert np.array_equal(back["labels"], obj["labels"]) and back["labels"].dtype == np.int64
    assert back["mask"].dtype == np.bool_ and back["event"] == obj["event"]
    assert back["eps"] == float("inf") and back["group"] == [0, 2] and back["nested"] == ({"k": 1},)


def test_a_message_naming_a_class_outside_dpaudit_is_refused():
    pytest.importorskip("flwr.app")
    from flwr.app import ConfigRecord, RecordDict

    from dpaudit.errors import DataError
    from dpaudit.training.flower.codec import from_records

    rd = RecordDict()
    rd["dpaudit.tree"] = ConfigRecord({"json": json.dumps({"__object__": "os:system", "data": "echo hi"})})
    with pytest.raises(DataError, match="Refusing"):
        from_records(rd)


def test_only_the_federated_seed_methods_run_on_flower(tmp_path):
    from dpaudit.errors import ParameterError
    from dpaudit.training.flower import flower_methods, run_method

    assert {"privatekt", "fedkt", "fredy", "proxyfl"} <= set(flower_methods())
    with pytest.raises(ParameterError, match="'engine' parameter of dpaudit train must be 'inprocess' for pate"):
        run_method("pate", out=tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_bad_flower_runs_are_refused_before_the_simulation_starts(tmp_path):
    from dpaudit.errors import DataError, ParameterError
    from dpaudit.training.flower import FlowerJob, run_method, run_methods

    (tmp_path / "done").mkdir()
    with pytest.raises(DataError, match="already exists"):
        run_method("fredy", out=tmp_path / "done", params=TINY["fredy"])
    # on a machine without CUDA the config refuses the device; with CUDA the Flower engine does (parties run on CPU)
    with pytest.raises(ParameterError, match="device"):
        run_method("fredy", out=tmp_path / "r", device="cuda", params=TINY["fredy"])
    with pytest.raises(ParameterError, match="different release directories"):
        run_methods([FlowerJob("fredy", tmp_path / "r", params=TINY["fredy"]),
                     FlowerJob("fedkt", tmp_path / "r", params=TINY["fedkt"])])
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
@pytest.mark.parametrize("flower_engine", ["flower", "flower-deployment"])
def test_cli_engine_flower_writes_the_inprocess_release(tmp_path, flower_engine):
    """``--engine flower`` (simulation) and ``--engine flower-deployment`` (flower-superlink and 3 flower-supernode
    processes on 127.0.0.1, stopped at the end) write FedKT-L1's in-process release."""
    pytest.importorskip("flwr.simulation")
    import os
    import subprocess
    import sys

    args = ["train", "fedkt", "--dataset", "digits", "--seed", "1", "--quiet", "--level", "L1", "--parties", "3",
            "--partitions", "1", "--teachers", "2", "--set", "method.baselines=[]",
            "--set", "method.teacher_model_kwargs={hidden=[8]}", "--set", "method.teacher_train={epochs=1}",
            "--set", "method.student_train={epochs=1}", "--set", "method.final_train={epochs=1}"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    for engine in ("inprocess", flower_engine):
        r = subprocess.run([sys.executable, "-m", "dpaudit", *args, "--engine", engine, "--out", str(tmp_path / engine)],
                           capture_output=True, text=True, env=env, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        assert "release written to" in r.stdout
    a, b = _meta(tmp_path / "inprocess"), _meta(tmp_path / flower_engine)
    assert b["statement"] == a["statement"] and b["ledger"] == a["ledger"]
    wa, wb = _weights(tmp_path / "inprocess"), _weights(tmp_path / flower_engine)
    assert all(np.array_equal(wa[k], wb[k]) for k in wa)


@pytest.mark.slow
def test_variants_run_on_flower_with_equal_accounting(tmp_path):
    """FedMD + LDP (PrivateKT's module), FML and CWT (ProxyFL's: server averaging, cyclic transfer) on Flower."""
    pytest.importorskip("flwr.simulation")
    from dpaudit.training.flower import FlowerJob, run_methods
    from dpaudit.training.methods import run_method

    p = {"fedmd-ldp": {"data": {"num_clients": 3}, "model": {"hidden": [8]}, "method": {"rounds": 2, "local_epochs": 1}},
         "fml": TINY["proxyfl"], "cwt": TINY["proxyfl"]}
    ref = {n: run_method(n, dataset="digits", out=tmp_path / f"{n}_in", seed=0, progress=False, params=q) for n, q in p.items()}
    got = run_methods([FlowerJob(n, tmp_path / f"{n}_fl", 0, params=q, dataset="digits", progress=False)
                       for n, q in p.items()], timeout=300)
    for n, r in zip(p, got):
        assert r.epsilon == ref[n].epsilon
        assert _meta(tmp_path / f"{n}_fl")["ledger"] == _meta(tmp_path / f"{n}_in")["ledger"]
        wa, wb = _weights(tmp_path / f"{n}_in"), _weights(tmp_path / f"{n}_fl")
        for k in wa:
            np.testing.assert_allclose(wb[k], wa[k], rtol=0, atol=1e-5)


class _Loopback:
    """A party executor in this process (no Flower): each party task through the method's PARTY_TASKS, payloads and
    replies encoded and decoded as in a message, each party's state kept apart."""

    engine = "loopback"

    def __init__(self, module, config, seed):
        self.module, self.setup, self.states = module, module.party_setup(config, seed), {}

    def call(self, task, payloads):
        from dpaudit.training.engine import decode_state, encode_state

        out = {}
        for party, payload in payloads.items():
            reply, self.states[party] = self.module.PARTY_TASKS[task](
                self.setup, party, decode_state(*encode_state(payload)), self.states.get(party))
            out[party] = decode_state(*encode_state(reply))
        return out


@pytest.mark.parametrize("name", ["privatekt", "proxyfl", "fedkt", "fredy"])
def test_the_party_split_gives_the_inprocess_release(tmp_path, name):
    """The methods' party tasks (what the ClientApps run), driven in process: the same ledger and weights."""
    from dpaudit.training.methods import load_method_config, method_module
    from dpaudit.training.parties import using_executor

    module = method_module(name)
    config = load_method_config(name, params=TINY[name], dataset="digits")
    ref = module.run(config, tmp_path / "in", seed=2, progress=False)
    with using_executor(_Loopback(module, config, 2)):
        got = module.run(config, tmp_path / "split", seed=2, progress=False)
    assert got.epsilon == ref.epsilon
    assert _meta(tmp_path / "split")["ledger"] == _meta(tmp_path / "in")["ledger"]
    wa, wb = _weights(tmp_path / "in"), _weights(tmp_path / "split")
    for k in wa:
        if EXACT[name]:
            assert np.array_equal(wa[k], wb[k])
        else:
            np.testing.assert_allclose(wb[k], wa[k], rtol=0, atol=1e-5)

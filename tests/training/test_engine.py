"""The round engine: seeded sampling, message delivery, drop-out, checkpoint/resume, safe state files."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from dpaudit.errors import DataError, ParameterError
from dpaudit.training.engine import (
    PerClient,
    RoundEngine,
    load_state,
    party_rng,
    sample_clients,
    save_state,
)


class NoisyMean:
    """Toy method: each client adds its value plus party-seeded noise to the broadcast; the server
    averages the replies. Clients keep a counter and drop out after ``max_turns`` turns."""

    def __init__(self, max_turns: int = 10**9) -> None:
        self.max_turns = max_turns
        self.batched_calls = 0

    def init_server(self, seed):
        return {"seed": seed, "round": 0, "value": torch.zeros(3)}, {"round": 0, "seed": seed, "value": torch.zeros(3)}

    def init_client(self, client_id, data, seed):
        return {"turns": 0, "history": np.zeros(0)}

    def client_step(self, state, data, message):
        cid, x = data
        noise = party_rng(message["seed"], message["round"], cid).normal(size=3)
        reply = message["value"] + float(x) + torch.as_tensor(noise, dtype=torch.float32)
        return {"turns": state["turns"] + 1, "history": np.append(state["history"], message["round"])}, reply

    def client_active(self, state):
        return state["turns"] < self.max_turns

    def server_step(self, state, replies):
        value = torch.stack([replies[c] for c in sorted(replies)]).mean(0)
        t = state["round"] + 1
        return {**state, "round": t, "value": value}, {"round": t, "seed": state["seed"], "value": value}


class BatchedNoisyMean(NoisyMean):
    def client_steps(self, states, datas, messages):
        self.batched_calls += 1
        out = [self.client_step(s, d, m) for s, d, m in zip(states, datas, messages)]
        return [o[0] for o in out], [o[1] for o in out]


DATA = [(i, float(i)) for i in range(6)]


def _run(method, tmp_path=None, **kw):
    kw.setdefault("rounds", 8)
    kw.setdefault("seed", 3)
    kw.setdefault("clients_per_round", 3)
    return RoundEngine(method, DATA, checkpoint_dir=tmp_path, **kw).run()


def test_sampling_is_seeded_uniform_and_without_replacement():
    a = sample_clients(7, 4, range(10), 5)
    assert np.array_equal(a, sample_clients(7, 4, range(10), 5))
    assert len(set(a.tolist())) == 5 and np.all(np.diff(a) > 0)
    assert not np.array_equal(a, sample_clients(7, 5, range(10), 5)) or not np.array_equal(a, sample_clients(8, 4, range(10), 5))
    counts = np.zeros(10)
    for t in range(2000):
        counts[sample_clients(0, t, range(10), 3)] += 1
    # each client is picked with probability 3/10; 2000 rounds -> 600 +- ~20 (binomial sd 20.5)
    assert np.all(np.abs(counts - 600) < 5 * 20.5)
    assert np.array_equal(sample_clients(0, 0, [4, 1, 2], None), [1, 2, 4])


def test_same_seed_same_result_and_other_seed_differs():
    r1, r2 = _run(NoisyMean()), _run(NoisyMean())
    assert torch.equal(r1.server_state["value"], r2.server_state["value"])
    assert r1.participants == r2.participants and len(r1.participants) == 8
    r3 = _run(NoisyMean(), seed=4)
    assert not torch.equal(r1.server_state["value"], r3.server_state["value"])


def test_batched_hook_gives_the_same_result_as_per_client_steps():
    m = BatchedNoisyMean()
    rb, rs = _run(m), _run(NoisyMean())
    assert m.batched_calls == 8
    assert torch.equal(rb.server_state["value"], rs.server_state["value"])


def test_messages_per_client_mapping_are_delivered():
    class Route(NoisyMean):
        def server_step(self, state, replies):
            t = state["round"] + 1
            msgs = PerClient({c: {"round": t, "seed": state["seed"], "value": torch.full((3,), float(c))} for c in range(6)})
            return {**state, "round": t}, msgs

        def client_step(self, state, data, message):
            cid, _ = data
            if message["round"] > 0:
                assert torch.equal(message["value"], torch.full((3,), float(cid)))
            return state, message["value"]

    _run(Route())


def test_clients_drop_out_when_inactive():
    res = _run(NoisyMean(max_turns=2), clients_per_round=None, rounds=5)
    # 6 clients, all take part in rounds 0 and 1, then all are inactive: the run stops after 2 rounds
    assert len(res.participants) == 2
    assert all(s["turns"] == 2 for s in res.client_states)


def test_resume_from_checkpoint_equals_uninterrupted_run(tmp_path):
    full = _run(NoisyMean())
    part = _run(NoisyMean(), tmp_path, checkpoint_every=2, stop_after=5)
    assert part.rounds_run == 5
    ck = load_state(tmp_path / "engine_checkpoint")
    assert ck["next_round"] == 4  # last multiple of checkpoint_every
    resumed = _run(NoisyMean(), tmp_path, checkpoint_every=2)
    assert resumed.resumed_from == 4 and resumed.rounds_run == 4
    assert torch.equal(full.server_state["value"], resumed.server_state["value"])
    assert full.participants == resumed.participants
    for a, b in zip(full.client_states, resumed.client_states):
        assert np.array_equal(a["history"], b["history"])


def test_checkpoint_from_other_settings_is_refused(tmp_path):
    _run(NoisyMean(), tmp_path, checkpoint_every=2, stop_after=2)
    with pytest.raises(DataError, match="seed"):
        _run(NoisyMean(), tmp_path, seed=99)


def test_state_round_trip_without_pickle(tmp_path):
    from dpaudit.accountants.events import RandomizedResponse

    state = {
        "t": torch.arange(6, dtype=torch.float64).reshape(2, 3),
        "a": np.array([1, 2, 3], dtype=np.int64),
        "tuple": (1, 2.5, "x", None, float("inf")),
        "nested": [{"k": True}],
        "msgs": PerClient({1: torch.ones(2)}),
        3: "int key",
        "event": RandomizedResponse(num_classes=10, num_samples=2, epsilon=5.0),
    }
    save_state(tmp_path / "s", state)
    back = load_state(tmp_path / "s")
    assert torch.equal(back["t"], state["t"]) and back["t"].dtype == torch.float64
    assert np.array_equal(back["a"], state["a"]) and back["a"].dtype == np.int64
    assert back["tuple"] == state["tuple"] and back[3] == "int key" and back["nested"] == [{"k": True}]
    assert back["event"] == state["event"]
    assert isinstance(back["msgs"], PerClient) and torch.equal(back["msgs"][1], torch.ones(2))
    meta = json.loads((tmp_path / "s" / "state.json").read_text())
    assert meta["format"] == 1


def test_state_refuses_unknown_objects_and_foreign_classes(tmp_path):
    class Foreign:
        pass

    with pytest.raises(ParameterError, match="Engine state"):
        save_state(tmp_path / "s", {"x": Foreign()})
    (tmp_path / "evil").mkdir()
    (tmp_path / "evil" / "state.json").write_text(json.dumps(
        {"format": 1, "state": {"__object__": "os:system", "data": "echo hi"}}))
    with pytest.raises(DataError, match="Refusing"):
        load_state(tmp_path / "evil")


def test_engine_validates_parameters():
    with pytest.raises(ParameterError, match="'rounds'"):
        RoundEngine(NoisyMean(), DATA, rounds=0, seed=0)
    with pytest.raises(ParameterError, match="'clients_per_round'"):
        RoundEngine(NoisyMean(), DATA, rounds=1, seed=0, clients_per_round=7)
    with pytest.raises(ParameterError, match="'method'"):
        RoundEngine(object(), DATA, rounds=1, seed=0)

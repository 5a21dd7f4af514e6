"""The round engine: federated methods written as plain step functions, run in process.

A method is two pure-ish step functions plus initialisers (see :class:`FederatedMethod`)::

    client_step(state, data, message) -> (state, reply)
    server_step(state, replies)       -> (state, messages)

``replies`` maps client id -> reply for the clients that took part in the round; ``messages`` is either
a :class:`PerClient` mapping client id -> message (one message per client, e.g. PushSum routing) or any
other object, which is broadcast to every client (e.g. a global model). The engine owns only what a deployment's
orchestrator owns: which clients take part in a round (seeded, from :func:`round_rng`), delivery of
messages and replies, checkpoints and progress. Methods own their state and their randomness, which
they derive from ``(seed, round, party)`` with :func:`party_rng` / :func:`party_seed`, so a result does
not depend on the order in which clients run, on batching, or on a resume in the middle of a run.

With ``parties`` (a :class:`~dpaudit.training.parties.PartyExecutor`, e.g. the Flower engine of
:mod:`dpaudit.training.flower`) the clients' steps run where the parties are: the engine samples the round's
clients as always and sends each its message with the round's group (task ``"round"``, whose party side is
:func:`party_round_step`: the client's state lives with the client, initialised on its first step); the server's
step runs here; at the end a method whose ``finalize`` reads the clients' states gets them back (task ``"state"``,
:func:`party_final_state`). The optional batched hook ``client_steps`` (many clients at once through the ensemble
trainer) is an in-process speed-up; a method whose batched step seeds a client by its place in the group
provides ``client_step_in_group(state, data, message, group)``, which draws what the batched step draws for that
client (equal up to floating-point summation order).

Checkpoints (every ``checkpoint_every`` rounds) hold the round index, the server state, every client
state and the pending messages; they are written as one directory (``state.json`` + ``arrays.safetensors``)
replaced atomically, and restored without unpickling: arrays go through safetensors, objects through
their ``to_dict``/``from_dict`` (only classes defined in ``dpaudit`` are rebuilt).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np
import torch

from dpaudit._format import fmt_number
from dpaudit._io import atomic_dir, load_json_file, write_json
from dpaudit.errors import DataError, ParameterError, check_bool, check_int
from dpaudit.progress import QUIET, Reporter, as_reporter, format_eta

__all__ = [
    "FederatedMethod",
    "PerClient",
    "RoundEngine",
    "EngineResult",
    "round_rng",
    "party_rng",
    "party_seed",
    "sample_clients",
    "save_state",
    "load_state",
    "encode_state",
    "decode_state",
    "party_round_step",
    "party_final_state",
]

_CHECKPOINT_NAME = "engine_checkpoint"
_STATE_FORMAT = 1


class PerClient(dict):
    """Messages addressed one per client: ``PerClient({client_id: message})``. A client missing from it
    gets ``None``. Any message object that is not a ``PerClient`` is broadcast to every client."""


@runtime_checkable
class FederatedMethod(Protocol):
    """What the engine needs from a method (see the module docstring).

    Optional hooks, looked up with ``getattr``:

    - ``client_steps(states, datas, messages) -> (states, replies)``: the same as mapping
      ``client_step`` over the lists, computed at once (e.g. with the ensemble trainer).
    - ``client_active(state) -> bool``: False once a client has dropped out (e.g. its privacy budget is
      spent); inactive clients are never sampled again.
    - ``finalize(server_state, client_states, messages) -> Any``: deliver the messages of the last round
      and build the method's result (default: ``(server_state, client_states)``).
    """

    def init_server(self, seed: int) -> tuple[Any, Any]: ...

    def init_client(self, client_id: int, data: Any, seed: int) -> Any: ...

    def client_step(self, state: Any, data: Any, message: Any) -> tuple[Any, Any]: ...

    def server_step(self, state: Any, replies: Mapping[int, Any]) -> tuple[Any, Any]: ...


# --------------------------------------------------------------------------------------------------
# Seeded randomness
# --------------------------------------------------------------------------------------------------

_SAMPLING_STREAM = 0x5A3F1E
_PARTY_STREAM = 0x7C1A


def round_rng(seed: int, round_index: int) -> np.random.Generator:
    """The engine's generator for sampling the clients of round ``round_index`` (0-based)."""
    return np.random.default_rng([_SAMPLING_STREAM, int(seed), int(round_index)])


def party_rng(seed: int, round_index: int, party: int, stream: int = 0) -> np.random.Generator:
    """A generator private to one party (client id >= 0, server = -1) in one round.

    Derived from ``(seed, round, party, stream)`` only, so it is the same whatever order the parties run
    in and whether or not the run was resumed.
    """
    return np.random.default_rng([_PARTY_STREAM, int(seed), int(round_index), int(party) + 1, int(stream)])


def party_seed(seed: int, round_index: int, party: int, stream: int = 0) -> int:
    """A 63-bit integer seed (for torch generators) from the same derivation as :func:`party_rng`."""
    return int(party_rng(seed, round_index, party, stream).integers(0, 2**63 - 1))


def sample_clients(seed: int, round_index: int, active: Sequence[int], clients_per_round: int | None) -> np.ndarray:
    """Uniformly sample ``clients_per_round`` distinct clients of ``active`` (all of them when None),
    returned sorted. Deterministic in ``(seed, round_index, active)``."""
    active_arr = np.asarray(sorted(int(c) for c in active), dtype=np.int64)
    if clients_per_round is None or clients_per_round >= active_arr.size:
        return active_arr
    k = check_int(clients_per_round, "clients_per_round", "sample_clients", low=1)
    pick = round_rng(seed, round_index).choice(active_arr.size, size=k, replace=False)
    return np.sort(active_arr[pick])


# --------------------------------------------------------------------------------------------------
# State serialisation without pickle
# --------------------------------------------------------------------------------------------------


def _encode_state(obj: Any, arrays: dict[str, torch.Tensor]) -> Any:
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        v = float(obj)
        return v if np.isfinite(v) else {"__float__": repr(v)}
    if isinstance(obj, torch.Tensor):
        key = f"a{len(arrays)}"
        arrays[key] = obj.detach().to("cpu").contiguous().clone()
        return {"__tensor__": key}
    if isinstance(obj, np.ndarray):
        if obj.dtype == object:
            raise ParameterError("Engine state may not hold object arrays (they would need pickling).")
        key = f"a{len(arrays)}"
        arrays[key] = torch.from_numpy(np.ascontiguousarray(obj).copy())
        return {"__ndarray__": key}
    if isinstance(obj, tuple):
        return {"__tuple__": [_encode_state(v, arrays) for v in obj]}
    if isinstance(obj, list):
        return [_encode_state(v, arrays) for v in obj]
    if isinstance(obj, PerClient):
        return {"__perclient__": [[int(k), _encode_state(v, arrays)] for k, v in obj.items()]}
    if isinstance(obj, Mapping):
        items = [[_encode_state(k, arrays), _encode_state(v, arrays)] for k, v in obj.items()]
        return {"__mapping__": items}
    from dpaudit.accountants.events import DpEvent

    if isinstance(obj, DpEvent):
        return {"__event__": obj.to_dict()}
    to_dict = getattr(obj, "to_dict", None)
    cls = type(obj)
    if callable(to_dict) and hasattr(cls, "from_dict") and cls.__module__.startswith("dpaudit."):
        return {"__object__": f"{cls.__module__}:{cls.__qualname__}", "data": _encode_state(to_dict(), arrays)}
    raise ParameterError(
        f"Engine state must be built of None/bool/int/float/str, lists, tuples, mappings, numpy arrays, torch "
        f"tensors and dpaudit objects with to_dict/from_dict. Got a {cls.__module__}.{cls.__qualname__} instead."
    )


def _decode_state(obj: Any, arrays: Mapping[str, torch.Tensor]) -> Any:
    if isinstance(obj, list):
        return [_decode_state(v, arrays) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if "__tensor__" in obj:
        return arrays[obj["__tensor__"]].clone()
    if "__ndarray__" in obj:
        return arrays[obj["__ndarray__"]].numpy().copy()
    if "__float__" in obj:
        return float(obj["__float__"])
    if "__tuple__" in obj:
        return tuple(_decode_state(v, arrays) for v in obj["__tuple__"])
    if "__perclient__" in obj:
        return PerClient({int(k): _decode_state(v, arrays) for k, v in obj["__perclient__"]})
    if "__mapping__" in obj:
        return {_decode_state(k, arrays): _decode_state(v, arrays) for k, v in obj["__mapping__"]}
    if "__event__" in obj:
        from dpaudit.accountants.events import event_from_dict

        return event_from_dict(obj["__event__"])
    if "__object__" in obj:
        return _rebuild_object(obj["__object__"]).from_dict(_decode_state(obj["data"], arrays))
    raise DataError(f"Unknown entry in an engine checkpoint: keys {sorted(obj)[:4]}.")


def _rebuild_object(ref: Any) -> Any:
    """The dpaudit class ``"dpaudit.module:Class"`` names (as :func:`_encode_state` writes it): a class defined in
    that dpaudit module (already imported: a checkpoint never makes dpaudit import a module) with ``from_dict``.
    Nothing else a checkpoint may name is looked up (no attribute chains, no dunder names, no functions or modules
    reached through a dpaudit module's globals)."""
    import sys

    module, _, qualname = ref.partition(":") if isinstance(ref, str) else ("", "", "")
    parts = qualname.split(".")
    mod = sys.modules.get(module)
    if (not module.startswith("dpaudit.") or mod is None or not parts
            or not all(p.isidentifier() and not p.startswith("_") for p in parts)):
        raise DataError(f"Refusing to rebuild {str(ref)[:120]!r} from a checkpoint (only dpaudit classes, as "
                        "'dpaudit.module:Class').")
    cls: Any = mod
    for part in parts:
        cls = vars(cls).get(part) if isinstance(vars(cls), Mapping) else None
        if cls is None:
            break
    if not (isinstance(cls, type) and cls.__module__ == module and callable(getattr(cls, "from_dict", None))):
        raise DataError(f"Refusing to rebuild {str(ref)[:120]!r} from a checkpoint: not a dpaudit class with from_dict.")
    return cls


def encode_state(obj: Any) -> tuple[Any, dict[str, torch.Tensor]]:
    """``obj`` (what a checkpoint may hold, see :func:`save_state`) as a JSON tree and its arrays by key: how
    engine messages travel (a checkpoint's files, or a Flower message's ConfigRecord and ArrayRecord)."""
    arrays: dict[str, torch.Tensor] = {}
    return _encode_state(obj, arrays), arrays


def decode_state(tree: Any, arrays: Mapping[str, torch.Tensor]) -> Any:
    """The object :func:`encode_state` encoded (no unpickling; only dpaudit classes already imported are rebuilt)."""
    return _decode_state(tree, arrays)


def save_state(directory: str | Path, state: Any) -> Path:
    """Write ``state`` (see :func:`_encode_state` for what it may hold) as ``directory`` atomically."""
    from safetensors.torch import save_file

    arrays: dict[str, torch.Tensor] = {}
    tree = _encode_state(state, arrays)
    with atomic_dir(directory, overwrite=True) as tmp:
        save_file(arrays, str(tmp / "arrays.safetensors")) if arrays else None
        write_json(tmp / "state.json", {"format": _STATE_FORMAT, "state": tree})
    return Path(directory)


def load_state(directory: str | Path) -> Any:
    """Read a state written by :func:`save_state` (no unpickling)."""
    from safetensors.torch import load_file

    directory = Path(directory)
    meta_path = directory / "state.json"
    if not meta_path.is_file():
        raise DataError(f"No engine checkpoint at {directory} (missing state.json).")
    meta = load_json_file(meta_path, "the engine checkpoint", follow_symlinks=False)
    if not isinstance(meta, dict) or meta.get("format") != _STATE_FORMAT:
        raise DataError(f"Engine checkpoint {directory} has format {meta.get('format') if isinstance(meta, dict) else None!r}; expected {_STATE_FORMAT}.")
    arr_path = directory / "arrays.safetensors"
    arrays = load_file(str(arr_path)) if arr_path.is_file() else {}
    return _decode_state(meta["state"], arrays)


# --------------------------------------------------------------------------------------------------
# The engine
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EngineResult:
    """What :meth:`RoundEngine.run` returns.

    ``result`` is the method's ``finalize`` output; ``participants[t]`` the sorted client ids of round t;
    ``rounds_run`` the rounds computed in this call (fewer than ``rounds`` after a resume);
    ``resumed_from`` the round a checkpoint was loaded at (None for a fresh run).
    """

    result: Any
    server_state: Any
    client_states: tuple[Any, ...]
    participants: tuple[tuple[int, ...], ...]
    rounds_run: int
    resumed_from: int | None
    seconds: float


class RoundEngine:
    """Run ``rounds`` rounds of a :class:`FederatedMethod` over ``client_data`` in this process.

    Parameters
    ----------
    method:
        The method's step functions.
    client_data:
        One entry per client (client id = position), passed unchanged to the method's steps.
    rounds:
        Number of rounds T >= 1.
    seed:
        Seed of the client sampling and of every party's randomness.
    clients_per_round:
        Clients sampled uniformly without replacement per round from the active ones (None = all).
    checkpoint_dir:
        Directory for ``engine_checkpoint/`` (None = no checkpoints). With ``resume=True`` a checkpoint
        found there is loaded and the run continues from it.
    checkpoint_every:
        Write a checkpoint after every this many rounds (0 = only at the end when ``checkpoint_dir`` is given).
    progress:
        Callable ``progress(round_index, rounds, info_dict)`` called after each round, or True / a
        :class:`~dpaudit.progress.Reporter` for a stage on stderr with a line every ~10% of the run, or False.
    stop_after:
        Stop after this many rounds of *this call* (for tests of resume and for time-boxed runs).
    """

    def __init__(
        self,
        method: FederatedMethod,
        client_data: Sequence[Any],
        *,
        rounds: int,
        seed: int,
        clients_per_round: int | None = None,
        checkpoint_dir: str | Path | None = None,
        checkpoint_every: int = 0,
        resume: bool = True,
        progress: bool | Reporter | Callable[[int, int, dict], None] = False,
        stop_after: int | None = None,
        parties: Any = None,
    ) -> None:
        owner = "RoundEngine"
        if not isinstance(method, FederatedMethod):
            raise ParameterError(f"The 'method' parameter of {owner} must implement FederatedMethod. Got {type(method).__name__} instead.")
        if len(client_data) < 1:
            raise ParameterError(f"The 'client_data' parameter of {owner} must hold at least 1 client. Got 0 instead.")
        self.method = method
        self.client_data = list(client_data)
        self.rounds = check_int(rounds, "rounds", owner, low=1)
        self.seed = check_int(seed, "seed", owner)
        n = len(self.client_data)
        self.clients_per_round = None if clients_per_round is None else check_int(clients_per_round, "clients_per_round", owner, low=1, high=n)
        self.checkpoint_dir = None if checkpoint_dir is None else Path(checkpoint_dir)
        self.checkpoint_every = check_int(checkpoint_every, "checkpoint_every", owner, low=0)
        self.resume = check_bool(resume, "resume", owner)
        self.stop_after = None if stop_after is None else check_int(stop_after, "stop_after", owner, low=0)
        self._reporter: Reporter = QUIET
        self._progress: Callable[[int, int, dict], None] | None = None
        if callable(progress):
            self._progress = progress
        else:
            self._reporter = as_reporter(progress if isinstance(progress, Reporter) else check_bool(progress, "progress", owner))
            if self._reporter.enabled:
                self._progress = self._report_progress
        self._t0 = 0.0
        self._first_round = 0
        # a party executor (dpaudit.training.parties): the clients' steps run where the parties are (Flower
        # ClientApps), their states stay there; the engine keeps the server's side and who is still active
        self.parties = parties
        if parties is not None and self.checkpoint_dir is not None:
            raise ParameterError(f"The 'checkpoint_dir' parameter of {owner} must be None when the clients run elsewhere "
                                 "(their states live with them). Got a directory instead.")

    # -- checkpoints ---------------------------------------------------------------------------
    @property
    def checkpoint_path(self) -> Path | None:
        return None if self.checkpoint_dir is None else self.checkpoint_dir / _CHECKPOINT_NAME

    def _save(self, next_round: int, server_state: Any, client_states: list, messages: Any, participants: list) -> None:
        if self.checkpoint_path is None:
            return
        save_state(self.checkpoint_path, {
            "next_round": next_round, "rounds": self.rounds, "seed": self.seed,
            "num_clients": len(self.client_data), "clients_per_round": self.clients_per_round,
            "server_state": server_state, "client_states": list(client_states), "messages": messages,
            "participants": [list(p) for p in participants],
        })

    def _load(self) -> dict | None:
        path = self.checkpoint_path
        if path is None or not self.resume or not (path / "state.json").is_file():
            return None
        ck = load_state(path)
        expect = {"seed": self.seed, "num_clients": len(self.client_data), "clients_per_round": self.clients_per_round}
        for key, value in expect.items():
            if ck.get(key) != value:
                raise DataError(
                    f"The checkpoint at {path} was written with {key}={ck.get(key)!r}, but this run has {key}={value!r}; "
                    "use another checkpoint directory or the same settings."
                )
        return ck

    # -- progress ----------------------------------------------------------------------------------
    def _report_progress(self, t: int, rounds: int, info: dict) -> None:
        """A line on stderr every ~10% of the rounds (when no bar is drawn)."""
        every = max(1, rounds // 10)
        if not self._reporter.interactive and ((t + 1) % every == 0 or t + 1 == rounds):
            extra = " ".join(f"{k}={fmt_number(v)}" for k, v in info.items())
            elapsed = time.perf_counter() - self._t0
            done = t + 1 - self._first_round
            eta = f", eta {format_eta(elapsed / done * (rounds - t - 1))}" if 0 < done and t + 1 < rounds else ""
            self._reporter.log(f"round {t + 1}/{rounds} ({format_eta(elapsed)}{eta}) {extra}".rstrip())

    # -- run, in stages: start (fresh or resumed), one round at a time, finish ------------------------
    def run(self) -> EngineResult:
        """Run (or resume) the rounds and return the method's result."""
        self._t0 = time.perf_counter()
        st = self._start()
        run_here = 0
        todo = self.rounds - st.start
        self._first_round = st.start
        # the engine prints its own plain lines (every ~10% of the rounds, with the method's metrics)
        with self._reporter.stage(f"{todo} rounds", total=todo, plain_progress=False) as stage:
            for t in range(st.start, self.rounds):
                if self.stop_after is not None and run_here >= self.stop_after:
                    break
                if not self._round(t, st):
                    break
                run_here += 1
                stage.advance()
                if self._progress is not None:
                    info_fn = getattr(self.method, "progress_info", None)
                    self._progress(t, self.rounds, info_fn(st.server_state) if info_fn else {})
                if self.checkpoint_every and (t + 1) % self.checkpoint_every == 0:
                    self._save(t + 1, st.server_state, st.client_states, st.messages, st.participants)
        return self._finish(st, run_here)

    def _start(self) -> "_Run":
        """The state to start from: the method's initial states, or those of a checkpoint."""
        ck = self._load()
        if ck is None:
            server_state, messages = self.method.init_server(self.seed)
            if self.parties is not None:  # each party initialises its own state on its first step
                return _Run(server_state, messages, [True] * len(self.client_data), [], 0, None)
            clients = [self.method.init_client(i, d, self.seed) for i, d in enumerate(self.client_data)]
            return _Run(server_state, messages, clients, [], 0, None)
        start = int(ck["next_round"])
        return _Run(ck["server_state"], ck["messages"], list(ck["client_states"]),
                    [tuple(p) for p in ck["participants"]], start, start)

    def _round(self, t: int, st: "_Run") -> bool:
        """Round ``t``: sample active clients, run their steps (batched when the method can), then the server's.
        False when no client is active any more."""
        method = self.method
        active_fn = getattr(method, "client_active", None)
        if self.parties is not None:  # client_states holds whether each party is still active
            active = [i for i, a in enumerate(st.client_states) if a]
        else:
            active = [i for i, s in enumerate(st.client_states) if active_fn is None or active_fn(s)]
        if not active:
            return False
        group = sample_clients(self.seed, t, active, self.clients_per_round)
        msgs = [st.messages.get(int(c)) if isinstance(st.messages, PerClient) else st.messages for c in group]
        if self.parties is not None:
            members = [int(c) for c in group]
            out = self.parties.call("round", {c: {"seed": self.seed, "group": members, "message": m}
                                              for c, m in zip(members, msgs)})
            for c in members:
                st.client_states[c] = bool(out[c]["active"])
            st.server_state, st.messages = method.server_step(st.server_state, {c: out[c]["reply"] for c in members})
            st.participants.append(tuple(members))
            return True
        states = [st.client_states[c] for c in group]
        datas = [self.client_data[c] for c in group]
        batched = getattr(method, "client_steps", None)
        if batched is not None:
            new_states, replies_list = batched(states, datas, msgs)
        else:
            out = [method.client_step(s, d, m) for s, d, m in zip(states, datas, msgs)]
            new_states, replies_list = [o[0] for o in out], [o[1] for o in out]
        for c, s in zip(group, new_states):
            st.client_states[c] = s
        replies = {int(c): r for c, r in zip(group, replies_list)}
        st.server_state, st.messages = method.server_step(st.server_state, replies)
        st.participants.append(tuple(int(c) for c in group))
        return True

    def _finish(self, st: "_Run", run_here: int) -> EngineResult:
        """Checkpoint at the end (when not checkpointing periodically) and let the method finalize."""
        if self.checkpoint_path is not None and not self.checkpoint_every:
            self._save(len(st.participants), st.server_state, st.client_states, st.messages, st.participants)
        finalize = getattr(self.method, "finalize", None)
        if self.parties is not None:  # the parties' own states, for a finalize that reads them
            needs = getattr(self.method, "finalize_reads_clients", True)
            st.client_states = [None] * len(self.client_data)
            if needs:
                got = self.parties.call("state", {c: {"seed": self.seed} for c in range(len(self.client_data))})
                st.client_states = [got[c] for c in range(len(self.client_data))]
        result = (finalize(st.server_state, st.client_states, st.messages) if finalize
                  else (st.server_state, st.client_states))
        return EngineResult(
            result=result, server_state=st.server_state, client_states=tuple(st.client_states),
            participants=tuple(st.participants), rounds_run=run_here, resumed_from=st.resumed_from,
            seconds=time.perf_counter() - self._t0,
        )


@dataclass
class _Run:
    """The engine's state between rounds."""

    server_state: Any
    messages: Any
    client_states: list
    participants: list
    start: int
    resumed_from: int | None


def party_round_step(method: Any, data: Any, party: int, payload: Mapping[str, Any], state: Any) -> tuple[dict, Any]:
    """One party's side of a round when the clients run elsewhere (:class:`RoundEngine` with ``parties``):
    its state (initialised on its first step), its step on the round's message, and whether it stays active.

    ``payload``: ``{"seed", "group", "message"}``; ``group`` lists the round's sampled clients, for a method whose
    batched in-process step seeds each client by its place in the group (hook ``client_step_in_group(state, data,
    message, group)``; without it, ``client_step``). Returns ``({"reply", "active"}, new state)``."""
    if state is None:
        state = method.init_client(int(party), data, int(payload["seed"]))
    hook = getattr(method, "client_step_in_group", None)
    if hook is not None:
        state, reply = hook(state, data, payload["message"], [int(c) for c in payload["group"]])
    else:
        state, reply = method.client_step(state, data, payload["message"])
    active_fn = getattr(method, "client_active", None)
    return {"reply": reply, "active": bool(active_fn(state)) if active_fn is not None else True}, state


def party_final_state(method: Any, data: Any, party: int, payload: Mapping[str, Any], state: Any) -> tuple[Any, Any]:
    """A party's state at the end of a run (initialised if it never took part), for the method's ``finalize``."""
    if state is None:
        state = method.init_client(int(party), data, int(payload["seed"]))
    return state, state


def replace_state(state: Any, **changes: Any) -> Any:
    """``dataclasses.replace`` for dataclass states, ``{**state, **changes}`` for dict states."""
    if dataclasses.is_dataclass(state):
        return dataclasses.replace(state, **changes)
    return {**state, **changes}

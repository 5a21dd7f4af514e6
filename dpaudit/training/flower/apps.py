"""The Flower apps that run a dpaudit method: one ClientApp for every party, one ServerApp for the curator.

The curator's side of a method (aggregation, voting and noise, the ledger, the release) runs in the ServerApp,
which calls the method's own ``run`` with a :class:`GridExecutor` in force
(:func:`dpaudit.training.parties.using_executor`): each time the method hands its parties a task, the executor
sends one Flower ``Message`` per party (a ``query``: the task's header as a ``ConfigRecord``, its payload as a
``ConfigRecord`` tree and an ``ArrayRecord``, see :mod:`.codec`) and waits for the replies.

A ClientApp is one party. Its partition id (``partition-id`` in its node config) is its party number; from the
run's configuration and seed in the header it rebuilds the method's data split deterministically (as a party holds
its own data; it reads only its share) and runs the named task of the method's ``PARTY_TASKS``. The party's state
between tasks stays in its ``Context.state`` (never sent unless a task returns it).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Callable, Mapping

from dpaudit.training.flower.codec import HEADER, from_records, has_records, header_record, read_header, to_records

__all__ = ["client_app", "handle_party_message", "GridExecutor", "discover", "make_server_app"]

_STATE = "dpaudit.party_state"
_SETUPS: dict[str, Any] = {}  # this process's rebuilt party setup, by (method, tables, seed): data it derives
_SETUP_LOCK = threading.Lock()


def _setup(header: Mapping[str, Any]) -> tuple[Any, Any]:
    """The method module and the party's setup for the run the header names (rebuilt once per process)."""
    from dpaudit.errors import DataError
    from dpaudit.training.methods import METHODS, method_module

    name = str(header.get("method"))
    if name not in METHODS:
        raise DataError(f"Unknown method {name[:60]!r} in a party task.")
    module = method_module(name)
    if not hasattr(module, "PARTY_TASKS"):
        raise DataError(f"Method {name} has no party tasks.")
    key = json.dumps([name, header["tables"], int(header["seed"])], sort_keys=True)
    with _SETUP_LOCK:
        if key not in _SETUPS:
            config = module.Config.from_tables(name, header["tables"])
            _SETUPS.clear()  # one run at a time per process
            _SETUPS[key] = module.party_setup(config, int(header["seed"]))
        return module, _SETUPS[key]


def handle_party_message(msg: Any, context: Any) -> Any:
    """A party's answer to one task message (what the ClientApp does)."""
    from flwr.app import Message, RecordDict

    from dpaudit.errors import DataError

    header = read_header(msg.content)
    party = int(context.node_config["partition-id"])
    if header.get("task") == "hello":  # the server learns which node is which party
        out = RecordDict()
        out[HEADER] = header_record({"partition_id": party,
                                     "num_partitions": int(context.node_config.get("num-partitions", -1))})
        return Message(out, reply_to=msg)
    module, setup = _setup(header)
    task = str(header.get("task"))
    if task not in module.PARTY_TASKS:
        raise DataError(f"Method {header['method']} has no party task {task[:60]!r}.")
    kept = from_records(context.state, "a party's state", prefix=_STATE) if has_records(context.state, _STATE) else None
    state = kept["state"] if isinstance(kept, dict) and kept.get("run") == header["run"] else None  # else another run's
    reply, state = module.PARTY_TASKS[task](setup, party, from_records(msg.content, "a party task"), state)
    to_records({"run": header["run"], "state": state}, context.state, prefix=_STATE)
    return Message(to_records(reply), reply_to=msg)


def _make_client_app() -> Any:
    from flwr.clientapp import ClientApp

    app = ClientApp()

    @app.query()
    def query(msg: Any, context: Any) -> Any:
        return handle_party_message(msg, context)

    return app


def _send(grid: Any, contents: Mapping[int, Any], timeout: float | None) -> dict[int, Any]:
    """Send ``contents[node]`` (a RecordDict) to each node as a query; node -> reply content (errors raised)."""
    from flwr.app import Message, MessageType

    from dpaudit.errors import DataError

    out = [Message(content, dst_node_id=int(node), message_type=MessageType.QUERY) for node, content in contents.items()]
    got: dict[int, Any] = {}
    for r in grid.send_and_receive(out, timeout=timeout):
        if r.has_error():
            raise DataError(f"A Flower party failed: {str(r.error.reason)[-3000:]}")
        got[int(r.metadata.src_node_id)] = r.content
    missing = sorted(set(contents) - set(got))
    if missing:
        raise DataError(f"No reply from Flower node(s) {missing[:8]} within {timeout} s.")
    return got


def discover(grid: Any, count: int, timeout: float | None = None) -> dict[int, int]:
    """partition id -> node id of the ``count`` nodes of the grid (waits for SuperNodes still connecting)."""
    from flwr.app import RecordDict

    from dpaudit.errors import DataError

    deadline = time.monotonic() + (timeout or 120.0)
    nodes = list(grid.get_node_ids())
    while len(nodes) < count and time.monotonic() < deadline:
        time.sleep(0.5)
        nodes = list(grid.get_node_ids())
    if len(nodes) < count:
        raise DataError(f"The run needs {count} Flower nodes (one per party); {len(nodes)} are connected.")
    contents = {}
    for node in nodes:
        rd = RecordDict()
        rd[HEADER] = header_record({"task": "hello"})
        contents[int(node)] = rd
    parts: dict[int, int] = {}
    for node, content in _send(grid, contents, timeout).items():
        p = int(read_header(content)["partition_id"])
        if p in parts:
            raise DataError(f"Flower nodes {parts[p]} and {node} both have partition-id {p}.")
        parts[p] = node
    return parts


class GridExecutor:
    """A :class:`~dpaudit.training.parties.PartyExecutor` over a Flower ``Grid``: party ``p`` is the node whose
    ``partition-id`` is ``p``; one message per party and task."""

    def __init__(self, grid: Any, nodes: Mapping[int, int], *, method: str, tables: Mapping[str, Any], seed: int,
                 parties: int, run: str, engine: str = "flower", timeout: float | None = None) -> None:
        from dpaudit.errors import DataError

        missing = [p for p in range(int(parties)) if p not in nodes]
        if missing:
            raise DataError(f"No Flower node has partition-id {missing[0]} (the run has {parties} parties).")
        self.grid = grid
        self.nodes = {p: nodes[p] for p in range(int(parties))}
        self.engine = engine
        self.header = {"method": method, "tables": tables, "seed": int(seed), "run": run}
        self.timeout = timeout
        self.messages = 0

    def call(self, task: str, payloads: Mapping[int, Any]) -> dict[int, Any]:
        contents = {}
        for party, payload in payloads.items():
            rd = to_records(payload)
            rd[HEADER] = header_record({**self.header, "task": task})
            contents[self.nodes[int(party)]] = rd
        self.messages += len(contents)
        got = _send(self.grid, contents, self.timeout)
        by_node = {node: party for party, node in self.nodes.items()}
        return {by_node[node]: from_records(content, f"party {by_node[node]}'s reply to {task!r}")
                for node, content in got.items()}


def make_server_app(body: Callable[[Any], Any], box: dict, *, nodes: int, timeout: float | None = None,
                    engine: str = "flower") -> Any:
    """A ServerApp whose main finds its ``nodes`` parties, then runs ``body(executor_for)``: ``executor_for(**run)``
    is a context manager putting a :class:`GridExecutor` for one run in force. ``box`` receives ``result`` (or
    ``error``: the exception, re-raised by the caller)."""
    import contextlib

    from flwr.serverapp import ServerApp

    from dpaudit.training.parties import using_executor

    app = ServerApp()

    @app.main()
    def main(grid: Any, context: Any) -> None:
        try:
            found = discover(grid, nodes, timeout)

            @contextlib.contextmanager
            def executor_for(**run: Any) -> Any:
                ex = GridExecutor(grid, found, engine=engine, timeout=timeout, **run)
                with using_executor(ex):
                    yield ex
                box["messages"] = box.get("messages", 0) + ex.messages

            box["result"] = body(executor_for)
        except BaseException as e:  # handed to the caller's thread, which re-raises it
            box["error"] = e

    return app


client_app = _make_client_app()

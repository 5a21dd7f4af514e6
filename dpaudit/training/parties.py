"""Where a method's party-side work runs: in this process (the default), or with the parties themselves.

A federated method splits into what its parties (clients) compute on their own records and what its curator
(server) computes from their replies. In process, one function does both. When a :class:`PartyExecutor` is in
force (:func:`using_executor`; the Flower engine, :mod:`dpaudit.training.flower`, sets one for the run it drives),
the method's body sends each party's share of the work to the executor as a named *party task* with a payload, and
gets the parties' replies back; only the curator's side runs in the calling process.

A method module that supports this exports

- ``party_setup(config, seed) -> Any``: what a party rebuilds from the run's configuration and seed before its
  first task (its data split, models, the method object); deterministic, so every party and the curator agree;
- ``PARTY_TASKS``: task name -> ``fn(setup, party, payload, state) -> (reply, state)``; ``state`` is the
  party's own state between tasks (None at first), kept by the party, never sent to the curator unless a task
  returns it.

Payloads and replies are what :func:`dpaudit.training.engine.encode_state` can encode (no pickling).
This module imports nothing of the methods or of Flower, so both may import it.
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from typing import Any, Iterator, Mapping, Protocol, runtime_checkable

__all__ = ["PartyExecutor", "current_executor", "using_executor"]


@runtime_checkable
class PartyExecutor(Protocol):
    """Runs party tasks where the parties are. ``engine`` names it (recorded in the release)."""

    engine: str

    def call(self, task: str, payloads: Mapping[int, Any]) -> dict[int, Any]:
        """Run ``task`` at each party ``p`` of ``payloads`` with ``payloads[p]``; returns party -> reply."""
        ...


_CURRENT: ContextVar[PartyExecutor | None] = ContextVar("dpaudit_party_executor", default=None)


def current_executor() -> PartyExecutor | None:
    """The executor in force in this thread's context, or None (everything runs in process)."""
    return _CURRENT.get()


@contextlib.contextmanager
def using_executor(executor: PartyExecutor) -> Iterator[PartyExecutor]:
    """Run the parties' tasks of the methods called inside through ``executor``."""
    token = _CURRENT.set(executor)
    try:
        yield executor
    finally:
        _CURRENT.reset(token)

"""Flower (``flwr >= 1.42``): record a real Flower run, account it per client under the sampler that ran.

* :mod:`~dpaudit.integrations.flower.record` -- the run record (``flower_run.json``) and its hostile-input reader
  :func:`~dpaudit.integrations.flower.record.read_flower_run` (no Flower needed);
* :mod:`~dpaudit.integrations.flower.accounting` -- :func:`~dpaudit.integrations.flower.accounting.account_run`:
  client-level figures (sampled, per participation, local DP), a certified lower bound and Flower's own figures beside
  them (no Flower needed; Flower's accountant is used when installed);
* :mod:`~dpaudit.integrations.flower.recorder` -- :class:`~dpaudit.integrations.flower.recorder.RecordingStrategy`,
  the strategy wrapper a ``ServerApp`` runs (imports ``flwr``: install ``dpaudit[flower]``).

Submodules are imported explicitly (the recorder pulls in Flower).
"""

__all__ = ["record", "accounting", "recorder"]

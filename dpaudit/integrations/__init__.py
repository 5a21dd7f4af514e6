"""Interop with the tools people train and account with elsewhere.

* :mod:`dpaudit.integrations.dp_accounting` -- dpaudit events <-> dp_accounting ``DpEvent``s
  (``to_dp_accounting`` / ``from_dp_accounting``);
* :mod:`dpaudit.integrations.flower` -- a Flower run recorded (``RecordingStrategy``), read as untrusted input and accounted
  per client under the sampler that ran (``account_run``);
* :mod:`dpaudit.integrations.opacus` -- an Opacus ``PrivacyEngine``'s accountant history as dpaudit events, a
  ledger and a statement equal to Opacus's own RDP epsilon (``read_opacus``, ``OpacusRecorder``).

This package imports the accountants, opacus, dp_accounting and flwr only (never training, attacks, report, audit or
cli). Submodules are imported explicitly (``opacus`` pulls in torch).
"""

__all__ = ["dp_accounting", "flower", "opacus"]

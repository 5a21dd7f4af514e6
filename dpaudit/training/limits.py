"""The supported ranges of the training layer's sizes: generous, but finite.

A size far beyond these (``--rounds 2147483648``) was accepted and then trained for ever or failed deep inside
an allocation; the method configs now refuse it when they are built, naming the setting, its range and the
value. The bounds are orders of magnitude above the papers' settings (10-100 rounds, 5-250 teachers, 20-30
epochs, a few thousand queries) and above what a run of this toolkit can finish in a day on one machine.
"""

from __future__ import annotations

__all__ = ["MAX_ROUNDS", "MAX_MODELS", "MAX_EPOCHS", "MAX_RECORDS", "MAX_STEPS", "MAX_THREADS", "MAX_WIDTH",
           "MAX_ENSEMBLE_BYTES", "MAX_CANARIES"]

MAX_ROUNDS = 1_000_000
"""Federated / FedAvg rounds, and the round counts of ``[run]`` (``checkpoint_every``, ``stop_after``, ``eval_every``)."""

MAX_MODELS = 100_000
"""Teachers, parties, partitions, clients: anything that is one model each."""

MAX_EPOCHS = 100_000
"""Epochs of one training schedule (teachers, students, local epochs)."""

MAX_RECORDS = 100_000_000
"""Counts of records: queries, samples, batch sizes (a data set is at most this large, see ``load_dataset``)."""

MAX_CANARIES = 1_000_000
"""Canaries of one audit or one ``[canaries]`` table (beyond this a bundle's canary files would be unbounded)."""

MAX_STEPS = 1_000_000
"""Optimiser steps of a fixed count (PrivateKT's ``server_steps``) and buffer lengths in rounds."""

MAX_THREADS = 4096
"""torch intra-op threads."""

MAX_WIDTH = 1_000_000
"""Width of one layer of a model (``hidden = [...]``, channels)."""

MAX_ENSEMBLE_BYTES = 64 * 2**30
"""Training state of one ensemble (weights, gradients and two optimiser slots of every model), checked before it is
allocated: 64 GiB."""

"""Module-level unit functions for the executor tests (a Ray worker or a subprocess must import them)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np


def draw(seed: int, n: int = 4) -> dict:
    """A result that depends on the unit's seed only."""
    return {"x": np.random.default_rng(seed).random(n)}


def logged_draw(seed: int, log: str, key: str, sleep: float = 0.0) -> dict:
    """``draw``, appending ``key`` to the file ``log`` (to count how often a unit ran) and sleeping first."""
    time.sleep(sleep)
    with open(log, "a", encoding="utf-8") as fh:
        fh.write(key + "\n")
    return draw(seed)


def die_once(seed: int, marker: str) -> dict:
    """The first attempt writes its pid to ``marker`` and waits to be killed; later attempts return ``draw``."""
    m = Path(marker)
    if not m.exists():
        m.write_text(str(os.getpid()))
        time.sleep(120)
    return draw(seed)


def fail(message: str) -> dict:
    raise RuntimeError(message)


def ran_in() -> dict:
    return {"pid": np.array(os.getpid())}

"""A Ray instance that dpaudit starts on this machine listens on the loopback interface only.

``ray.init(_node_ip_address="127.0.0.1")`` is not enough with Ray 2.x: Ray turns a loopback node address into the
machine's routable one (``ray._private.services.resolve_ip_for_localhost``), and its GCS, raylet, worker and
runtime-environment servers then accept connections from the network. Ray keeps every server on loopback only where
it does not support clusters (macOS, Windows), and its switch for that, the environment variable
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, does the same on Linux: the node address becomes 127.0.0.1 and every
server binds to it (checked in ``tests/executors/test_ray_loopback.py``).

:func:`loopback_only` sets that switch while dpaudit starts an instance itself (the local :class:`RayExecutor`,
Flower's simulation engine) and puts it back afterwards; joining a cluster the user names (``--ray-address``) is
left alone. Ray reads the variable when it is imported, so the switch is set in the environment (which the Ray
processes started inside inherit) and, when Ray was imported earlier in the process, in Ray's constants module.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import Iterator

__all__ = ["LOOPBACK_ENV", "loopback_only"]

LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@contextmanager
def loopback_only() -> Iterator[None]:
    """Inside: a Ray instance this process starts (and the processes it starts) listens on 127.0.0.1 only."""
    before = os.environ.get(LOOPBACK_ENV)
    os.environ[LOOPBACK_ENV] = "0"
    consts = sys.modules.get("ray._private.ray_constants")
    was = getattr(consts, "ENABLE_RAY_CLUSTER", None) if consts is not None else None
    if was:
        consts.ENABLE_RAY_CLUSTER = False  # type: ignore[union-attr]
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(LOOPBACK_ENV, None)
        else:
            os.environ[LOOPBACK_ENV] = before
        consts = sys.modules.get("ray._private.ray_constants")   # imported inside, or earlier
        if consts is not None:
            # what Ray computes from the environment as it was (its env_bool: "true" or "1"; default: not on macOS
            # or Windows), or the value it had
            default = not (sys.platform == "darwin" or sys.platform == "win32")
            computed = default if before is None else before.lower() in ("true", "1")
            consts.ENABLE_RAY_CLUSTER = was if was is not None else computed

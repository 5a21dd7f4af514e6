"""A Ray instance dpaudit starts (the local RayExecutor, Flower's simulation engine) listens on 127.0.0.1 only
(dpaudit/_ray_local.py): Ray 2.x turns ``_node_ip_address="127.0.0.1"`` into the machine's routable address, and
its servers then accept connections from the network."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

import background  # noqa: E402
from dpaudit._ray_local import LOOPBACK_ENV, loopback_only  # noqa: E402



def _descendants(root: int) -> set[int]:
    parent: dict[int, int] = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                parent[int(p.name)] = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    out, todo = set(), [root]
    while todo:
        cur = todo.pop()
        for pid, pp in parent.items():
            if pp == cur and pid not in out:
                out.add(pid)
                todo.append(pid)
    return out


def _listening(pids: set[int]) -> list[tuple[str, int, str]]:
    """(address, port, process name) of every TCP socket in LISTEN state owned by ``pids``."""
    inodes: dict[str, str] = {}
    for pid in pids:
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes[target[8:-1]] = name
        except OSError:
            continue
    out = []
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[3] != "0A" or f[9] not in inodes:      # 0A: LISTEN
                continue
            hexaddr, port = f[1].split(":")
            raw = bytes.fromhex(hexaddr)
            words = [raw[i:i + 4][::-1] for i in range(0, len(raw), 4)]     # each 32-bit word little-endian
            b = b"".join(words)
            if width == 8:
                addr = ".".join(str(x) for x in b)
            elif b[:12] == b"\0" * 10 + b"\xff\xff":
                addr = ".".join(str(x) for x in b[12:])            # an IPv4-mapped IPv6 address
            else:
                addr = ":".join(b[i:i + 2].hex() for i in range(0, 16, 2))
            out.append((addr, int(port, 16), inodes[f[9]]))
    return out


# the real check: a child process starts a local RayExecutor, runs one unit on a worker, and writes every TCP
# listener of its process tree; a background job (tests/background.py), so that Ray's start-up overlaps other tests
_PROBE = """
import json, os, sys
from pathlib import Path
sys.path[:0] = [sys.argv[2], str(Path(sys.argv[2]).parent)]   # this folder, and tests/ (background.py)
from test_ray_loopback import _descendants, _listening
from dpaudit._ray_local import LOOPBACK_ENV
from dpaudit.executors import Unit
from dpaudit.executors.ray_executor import RayExecutor

before = os.environ.get(LOOPBACK_ENV)
ex = RayExecutor(num_cpus=1)
try:
    ex.start()
    answer = ex.map([Unit("one", abs, (-3,))])
    found = _listening(_descendants(os.getpid()) | {os.getpid()})
finally:
    ex.shutdown()
Path(sys.argv[1], "listeners.json").write_text(json.dumps(
    {"answer": answer, "found": found, "switch_put_back": os.environ.get(LOOPBACK_ENV) == before}))
"""
BACKGROUND = (background.Job("ray-loopback", "ray_listeners",
                             lambda out: [sys.executable, "-c", _PROBE, str(out), str(Path(__file__).parent)],
                             timeout=300, env=background.ray_env()),)


@pytest.fixture(scope="module")
def ray_listeners(tmp_path_factory) -> dict:
    return json.loads((background.result(BACKGROUND[0], tmp_path_factory) / "listeners.json").read_text())


@pytest.mark.skipif(not Path("/proc/net/tcp").is_file(), reason="needs Linux's /proc")
def test_a_local_ray_executor_listens_on_loopback_only(ray_listeners):
    assert ray_listeners["answer"] == [3]                           # a worker has started and answered
    found = ray_listeners["found"]
    assert len(found) >= 3, found                                  # GCS, raylet, worker, runtime-env agent...
    assert all(a == "127.0.0.1" for a, _, _ in found), found
    assert ray_listeners["switch_put_back"]                        # the switch is put back


def test_the_switch_makes_ray_keep_the_loopback_address_and_is_put_back():
    from ray._private import ray_constants, services

    default = ray_constants.ENABLE_RAY_CLUSTER
    with loopback_only():
        assert os.environ[LOOPBACK_ENV] == "0" and ray_constants.ENABLE_RAY_CLUSTER is False
        assert services.resolve_ip_for_localhost("127.0.0.1") == "127.0.0.1"
    assert ray_constants.ENABLE_RAY_CLUSTER == default

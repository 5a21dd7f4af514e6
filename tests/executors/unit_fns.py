"""Module-level unit functions for the executor tests (a Ray worker or a subprocess must import them), and
the kill-the-driver scenario both the local and the Ray tests run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
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


ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

_DRIVER = """
import os, sys
sys.path[:0] = [{root!r}, {here!r}]
os.environ["PYTHONPATH"] = os.pathsep.join([{root!r}, {here!r}])  # Ray workers import unit_fns too
import unit_fns
from dpaudit.executors import Unit, derive_seed, make_executor
units = [Unit(f"u{{k}}", unit_fns.logged_draw, (derive_seed(7, f"u{{k}}"),),
              {{"log": {log!r}, "key": f"u{{k}}", "sleep": {sleep}}}) for k in range(6)]
with make_executor({name!r}, **{opts}) as ex:
    ex.with_checkpoints({ck!r}).map(units)
"""


def run_and_kill_driver(tmp_path: Path, name: str = "local", opts: str = "{}", sleep: float = 0.3,
                        timeout: float = 60.0) -> tuple[list[str], list[str]]:
    """Start a driver over 6 units, SIGKILL it once two units are checkpointed, re-run it; return the units
    run before the kill and the units run by the re-run."""
    log, ck = tmp_path / "ran.log", tmp_path / "ck"
    script = tmp_path / "driver.py"
    script.write_text(_DRIVER.format(root=str(ROOT), here=str(HERE), log=str(log), sleep=sleep, name=name,
                                     opts=opts, ck=str(ck)))
    proc = subprocess.Popen([sys.executable, str(script)], stderr=subprocess.DEVNULL, start_new_session=True)
    t0 = time.monotonic()
    while len(list(ck.glob("u*.npz"))) < 2:
        if time.monotonic() - t0 > timeout or proc.poll() is not None:
            proc.kill()
            raise AssertionError("the driver did not checkpoint two units in time")
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    try:  # what the dead driver left behind (Ray's agents) goes too; the driver had its own process group
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    done_before = sorted(p.stem for p in ck.glob("u*.npz"))
    ran_before = log.read_text().split()
    assert len(done_before) < 6 and set(done_before) <= set(ran_before)
    n_before = len(ran_before)
    subprocess.run([sys.executable, str(script)], check=True, stderr=subprocess.DEVNULL, timeout=timeout)
    rerun = log.read_text().split()[n_before:]
    return done_before, rerun


def die(_: int = 0) -> dict:
    """Kill the process running this unit (a worker that dies every time)."""
    os.kill(os.getpid(), signal.SIGKILL)
    return {}


def die_once_now(seed: int, marker: str) -> dict:
    """The first attempt writes its pid to ``marker`` and kills its own process; later attempts return ``draw``."""
    m = Path(marker)
    if not m.exists():
        m.write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    return draw(seed)


def thread_count() -> dict:
    """The intra-op threads of the process running the unit (torch's count and OMP_NUM_THREADS)."""
    import torch

    return {"torch": np.array(torch.get_num_threads()), "omp": np.array(os.environ.get("OMP_NUM_THREADS", ""))}

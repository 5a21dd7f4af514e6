"""Issue 44, item 4: property tests of the LM surfaces -- hostile tokenizer files and hostile LM release bundles --
each run in a child process under CPU-time and address-space limits (``lm_fuzz_child.py``): an input that aborts
the process (a Rust allocation failure is a SIGABRT), loops or allocates without bound fails this test instead of
killing the test run. Each input must be answered or refused with one dpaudit error line, within a time limit per
input. Few derandomised inputs in the default run, a thousand or more under ``-m slow``."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fuzz_helpers import COUNTS, OUTCOMES

CHILD = Path(__file__).resolve().parent / "lm_fuzz_child.py"
#: The child's address space (torch, transformers and a tiny model need about 1.2 GB of it; a tokenizer asking
#: for 4 TiB gets an allocation failure) and CPU seconds per input (plus the start).
ADDRESS_SPACE = 6 << 30
CPU_PER_INPUT = 20
START_CPU = 120


def run_child(surfaces: dict[str, int], mode: str, tmp_path: Path) -> dict:
    """Run the child on ``{surface: examples}``; record its inputs and outcomes in the fuzz summary."""
    cpu = START_CPU + CPU_PER_INPUT * sum(surfaces.values())

    def limits():
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))

    env = {**os.environ, "DPAUDIT_THREADS": "1", "RAYON_NUM_THREADS": "1", "RUST_BACKTRACE": "0",
           "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    argv = [sys.executable, str(CHILD), ",".join(surfaces), ",".join(map(str, surfaces.values())), mode, str(tmp_path)]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, preexec_fn=limits, timeout=4 * cpu)
    died = f" (killed by {signal.Signals(-proc.returncode).name})" if proc.returncode < 0 else ""
    assert proc.returncode == 0, (f"the LM property test failed{died}: exit {proc.returncode}\n"
                                  f"{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}")
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    for surface, outcomes in summary.items():
        name = "LM bundle dirs" if surface == "bundle" else "LM tokenizer files"
        COUNTS[name] += sum(outcomes.values())
        for code, n in outcomes.items():
            OUTCOMES[name][int(code)] += n
        # hypothesis may discard a draw; most inputs run to the end
        assert sum(outcomes.values()) >= surfaces[surface] // 2, summary
    return summary


def test_lm_surfaces_hold_under_hostile_inputs(tmp_path):
    """Both surfaces in one child (one start of torch and transformers): 10 tokenizer files, 6 LM bundles."""
    run_child({"tokenizer": 10, "bundle": 6}, "fast", tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("surface, examples", [("tokenizer", 2000), ("bundle", 1000)])
def test_lm_surfaces_hold_under_hostile_inputs_many(surface, examples, tmp_path):
    run_child({surface: examples}, "slow", tmp_path)

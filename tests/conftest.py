"""Fixtures shared across the test folders: a small release bundle of dpaudit's own kind, the CLI run in
this process, and the check that every report.json / attack.json / canary_audit.json / release.json a test makes
dpaudit write matches its published JSON Schema (dpaudit/schemas/)."""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

import getpass
import tempfile

import numpy as np
import pytest
from hypothesis import settings
from hypothesis.configuration import set_hypothesis_home_dir

# Hypothesis's own files (its cache of the constants in the source) go to the temporary folder, not a .hypothesis
# folder in the checkout (the tests write nothing there)
set_hypothesis_home_dir(str(Path(tempfile.gettempdir()) / f"dpaudit-hypothesis-{getpass.getuser()}"))

# Property tests: the default run is derandomised (each test's examples follow from its own source), so CI's
# verdict depends on the code alone; DPAUDIT_RANDOM_TESTS=1 draws fresh examples each run to hunt for new cases
# (that is how the slow fuzz runs found their bugs). A failing example is printed with its reproduction blob.
# The derandomised profile keeps no example database (it would be a .hypothesis folder in the checkout, shared by the
# parallel workers; a failing example is printed with its blob instead).
settings.register_profile("dpaudit", derandomize=True, print_blob=True, database=None)
settings.register_profile("dpaudit-random", derandomize=False, print_blob=True)
settings.load_profile("dpaudit-random" if os.environ.get("DPAUDIT_RANDOM_TESTS") else "dpaudit")

# One intra-op thread for the whole run (dpaudit.threads), in this process and the processes it starts (the CLI
# applies DPAUDIT_THREADS): the tests' models are tiny, so more threads buy nothing, and on a machine shared with
# other jobs (CI runners, several people on one box) threads that wait for a core at every parallel region made
# the suite several times slower. It is dpaudit's default too; setting it here keeps the suite at one thread even
# if the default changes. DPAUDIT_THREADS=auto (cores / workers) or a number in the environment overrides it.
os.environ.setdefault("DPAUDIT_THREADS", "1")
# The CLI's tables take their width from COLUMNS (dpaudit._format.make_console). pytest-xdist's workers get COLUMNS=80
# and LINES=24, and a developer's shell may export its own: the tests see no width unless they set one themselves
# (monkeypatch.setenv("COLUMNS", ...)), so that a run in parallel prints what a run in one process prints.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)
from dpaudit.threads import apply_threads  # noqa: E402

apply_threads()


@pytest.fixture(scope="session", autouse=True)
def _background_jobs(request, tmp_path_factory):
    """Start the collected modules' background jobs (tests/background.py: their ``BACKGROUND`` tuples) that a collected
    test needs when the run starts, in xdist worker gw0 or the only process, and wait for them before this process
    exits."""
    import background

    if os.environ.get("PYTEST_XDIST_WORKER", "gw0") == "gw0":
        seen: set[str] = set()
        for item in request.session.items:
            for job in getattr(getattr(item, "module", None), "BACKGROUND", ()):
                if job.name not in seen and job.fixture in getattr(item, "fixturenames", ()):
                    seen.add(job.name)
                    background.start(job, tmp_path_factory)
    yield
    session = request.session
    background.join_started(kill=bool(session.shouldfail or session.shouldstop))


@pytest.fixture(scope="session")
def forest_release(tmp_path_factory) -> Callable[..., Path]:
    """``forest_release(members=300, trees=20, claim=None, votes=None) -> Path``: a release bundle of a random
    forest on digits, trained on ``members`` records; as many non-members and twice as many attacker records,
    drawn by one seeded permutation."""

    def make(members: int = 300, trees: int = 20, claim: dict[str, Any] | None = None,
             votes: np.ndarray | None = None) -> Path:
        from dpaudit.training.data import load_dataset
        from dpaudit.training.ensemble import fit_classifier
        from dpaudit.training.models import ModelSpec
        from dpaudit.training.release import write_release

        ds = load_dataset("digits", seed=0)
        perm = np.random.default_rng(0).permutation(len(ds))
        mem, non, att = perm[:members], perm[members:2 * members], perm[2 * members:4 * members]
        spec = ModelSpec("random_forest", ds.input_shape, ds.num_classes, {"n_estimators": trees})
        clf = fit_classifier(spec, ds.X[mem], ds.y[mem], None, 0)
        out = tmp_path_factory.mktemp("rel") / "forest"
        return write_release(out, method="baseline", dataset={"name": "digits", "seed": 0, "num_samples": None},
                             params={}, seed=0, utility={"test_accuracy": 0.5}, classifier=clf, train_config=None,
                             ledger=None, statement=None,
                             claim=claim or {"epsilon": 1.0, "delta": 1e-5, "granularity": "example", "text": "t"},
                             membership={"members": mem, "nonmembers": non, "attacker": att}, votes=votes)

    return make


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models: intra-op threads only add contention on 2 cores. One thread for a test module
    (``pytestmark = pytest.mark.usefixtures("one_torch_thread")``), the count restored after it."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def cli(capsys, monkeypatch) -> Callable[[list], tuple[int, str, str]]:
    """``cli(argv) -> (exit code, stdout, stderr)`` of ``dpaudit ARGV`` run in this process, at 250 columns (a
    pipe gets 100, which wraps table cells; the widths are pinned in tests/cli/test_cli_console.py, the content
    here)."""
    from dpaudit.cli import main

    monkeypatch.setenv("COLUMNS", "250")

    def run(argv: list) -> tuple[int, str, str]:
        with pytest.raises(SystemExit) as exc:
            main([str(a) for a in argv])
        cap = capsys.readouterr()
        return exc.value.code, cap.out, cap.err

    return run


#: The files with a published JSON Schema (dpaudit/schemas/); every one dpaudit writes during a test is validated.
SCHEMA_CHECKED = ("report.json", "attack.json", "canary_audit.json", "release.json", "comparison.json",
                  "per_record.json", "method_audit.json", "lm_release.json", "trainer_audit.json")


_PKG = Path(__file__).resolve().parents[1] / "dpaudit"
#: Modules that import ``write_text`` by name and write schema-checked files.
_WRITERS = ("dpaudit.report.render", "dpaudit.report.attack_outputs", "dpaudit.auditing.evaluate")


def _written_by_dpaudit() -> bool:
    """Whether the write in progress comes from dpaudit's code (not from a test planting a file with write_json)."""
    frame = sys._getframe(2)
    while frame is not None and Path(frame.f_code.co_filename).name == "_io.py":
        frame = frame.f_back
    return frame is not None and Path(frame.f_code.co_filename).resolve().is_relative_to(_PKG)


@pytest.fixture(autouse=True)
def _written_files_match_their_schemas(request, monkeypatch):
    """Record the text of every schema-checked file dpaudit's own code writes in this test (all JSON goes through
    ``dpaudit._io.write_text``; files a test plants with ``write_json`` are not dpaudit's) and validate it against the
    published schema when the test ends. A test that makes dpaudit write a malformed one on purpose is marked
    ``schema_unchecked``."""
    if request.node.get_closest_marker("schema_unchecked"):
        yield
        return
    import dpaudit._io as io

    for name in _WRITERS:      # loaded before patching, so that no module keeps a patched write_text of a past test
        importlib.import_module(name)
    written: list[tuple[str, str]] = []
    real = io.write_text

    def recording(target, text):
        if Path(target).name in SCHEMA_CHECKED and _written_by_dpaudit():
            written.append((str(target), text))
        return real(target, text)

    # every module that bound write_text by name (from dpaudit._io import write_text) writes through the recorder too
    for mod in [m for n, m in list(sys.modules.items()) if n == "dpaudit" or n.startswith("dpaudit.")]:
        if getattr(mod, "write_text", None) is real:
            monkeypatch.setattr(mod, "write_text", recording)
    yield
    if written:
        from dpaudit.auditing.json_schemas import validate_file_data

        for target, text in written:
            data = json.loads(text)
            if isinstance(data, dict) and "$schema" in data:   # a JSON Schema document itself
                continue
            validate_file_data(Path(target).name, data)

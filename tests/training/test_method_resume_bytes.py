"""A run interrupted after any checkpoint write and then resumed writes the same release, byte for byte, as an
uninterrupted run (issue 12, item 8).

No real SIGKILL: every checkpoint writer of the training layer (the ensemble trainer's epochs, the stage cache's
``.npz`` files, the round engine's states) is wrapped to raise after its k-th write; what the kill would lose is
exactly what is not written yet. The same command is then run again and every file of the release directory is
compared with the uninterrupted run's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import dpaudit.training.engine as engine
import dpaudit.training.ensemble as ensemble
import dpaudit.training.methods.common as common
from dpaudit.training.methods import run_method

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SMALL = {"epochs": 2, "batch_size": 64, "lr": 1e-2}
PATE_FAMILY = {"num_samples": 300, "teacher_model_kwargs": {"hidden": [8]}}
FEDERATED = {"data": {"num_clients": 3, "samples_per_client": 30}, "model": {"hidden": [8]},
             "run": {"checkpoint_every": 1}}
METHODS = {
    "fredy": {"method": {"teachers": 2, "rounds": 2, "queries": 30, "num_samples": 300, "model_kwargs": {"hidden": [8]},
                         "teacher_train": SMALL, "student_train": SMALL, "baseline_train": SMALL}},
    "pate": {"method": {**PATE_FAMILY, "teachers": 3, "queries": 30, "teacher_train": SMALL, "student_train": SMALL}},
    "fedkt": {"method": {**PATE_FAMILY, "parties": 2, "partitions": 2, "teachers": 2, "partition": "iid",
                         "teacher_train": SMALL, "student_train": SMALL, "final_train": SMALL, "baselines": ["solo"]}},
    "privatekt": {**FEDERATED, "method": {"rounds": 3, "local_epochs": 1}},
    "proxyfl": {**FEDERATED, "method": {"rounds": 3, "batch_size": 10}},
}


class Killed(BaseException):
    """What the injected interruption raises (a BaseException, like the KeyboardInterrupt of a real stop)."""


class Writes:
    """Wraps the training layer's checkpoint writers; raises :class:`Killed` after the ``kill_at``-th write."""

    TARGETS = ((ensemble, "_save_checkpoint"), (common, "save_npz"), (engine, "save_state"))

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        self.kill_at: int | None = None
        for module, name in self.TARGETS:
            monkeypatch.setattr(module, name, self._wrap(getattr(module, name)))

    def _wrap(self, real):
        def write(*args, **kwargs):
            out = real(*args, **kwargs)
            self.count += 1
            if self.count == self.kill_at:
                raise Killed
            return out

        return write


def _run(method: str, out: Path):
    return run_method(method, dataset="digits", out=out, seed=2, progress=False, params=METHODS[method])


def _release_bytes(out: Path) -> dict[str, bytes]:
    files = {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    assert "model.safetensors" in files or any(k.endswith(".skops") for k in files)
    return files


def _kill_and_resume(method: str, tmp_path: Path, writes: Writes, points) -> None:
    writes.count, writes.kill_at = 0, None
    _run(method, tmp_path / "ref" / "r")
    total = writes.count
    assert total >= 2, f"{method} wrote {total} checkpoint(s): too few kill points to test"
    reference = _release_bytes(tmp_path / "ref" / "r")
    for k in points(total):
        out = tmp_path / f"k{k}" / "r"
        writes.count, writes.kill_at = 0, k
        with pytest.raises(Killed):
            _run(method, out)
        assert not out.exists() and (out.parent / ".r.checkpoints").is_dir()
        writes.kill_at = None
        _run(method, out)
        assert _release_bytes(out) == reference, f"{method}: resumed after checkpoint write {k}/{total} differs"
        assert not (out.parent / ".r.checkpoints").exists()


@pytest.mark.parametrize("method", sorted(METHODS))
def test_resumed_release_is_byte_identical_fast(method, tmp_path, monkeypatch):
    # the first write, one in the middle and the last before the release
    _kill_and_resume(method, tmp_path, Writes(monkeypatch), lambda n: sorted({1, (n + 1) // 2, n}))


@pytest.mark.slow
@pytest.mark.parametrize("method", sorted(METHODS))
def test_resumed_release_is_byte_identical_at_every_kill_point(method, tmp_path, monkeypatch):
    _kill_and_resume(method, tmp_path, Writes(monkeypatch), lambda n: range(1, n + 1))

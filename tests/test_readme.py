"""README.md runs verbatim.

The convention (stated in the README): every ```` ```bash ```` block (and ```` ```python ```` block) is run exactly
as written, in the order of the
README, by ``bash -e`` in one fresh copy of the repository (its git-tracked and not-ignored files), with a ``.venv``
that wraps the Python running the tests (so ``bash run.sh ...`` and ``source .venv/bin/activate`` work without an
install). ```` ```text ```` blocks are syntax summaries and ```` ```console ```` blocks transcripts: never run. The
blocks are found when the test runs, so a block added to the README is run without touching this file; a fast test
checks that every fence names one of these languages (a bare fence would silently escape the check).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RUN = ("bash", "python")                       # executed (python blocks with the environment's python)
NOT_RUN = ("text", "console", "toml", "json")  # syntax summaries, transcripts, file contents
FENCE = re.compile(r"^```([\w-]*)[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
BLOCK_TIMEOUT = 3600


@dataclass(frozen=True)
class Block:
    index: int
    lang: str
    line: int
    code: str
    section: str

    @property
    def id(self) -> str:
        return f"block{self.index}-line{self.line}-{re.sub(r'[^a-z0-9]+', '-', self.section.lower()).strip('-')[:30]}"


def readme_blocks(text: str) -> list[Block]:
    """Every fenced block of ``text`` with its language, first line number and the heading it sits under."""
    out = []
    for i, m in enumerate(FENCE.finditer(text)):
        line = text.count("\n", 0, m.start()) + 1
        prose = FENCE.sub("", text[: m.start()])          # headings outside code blocks only
        heads = re.findall(r"^#+ (.+)$", prose, re.M)
        out.append(Block(i, m.group(1), line, m.group(2), heads[-1] if heads else "top"))
    return out


BLOCKS = readme_blocks(README.read_text(encoding="utf-8"))
BASH = [b for b in BLOCKS if b.lang in RUN]


def test_every_fence_names_its_kind():
    """A bare ``` fence would neither run nor say why; shell commands go in bash (run) or console/text (not)."""
    bad = [f"line {b.line}: ```{b.lang}" for b in BLOCKS if b.lang not in (*RUN, *NOT_RUN)]
    assert bad == [], f"README fences must be one of {', '.join((*RUN, *NOT_RUN))}"
    assert len(BASH) >= 5, "the README's runnable blocks were not found"


def test_block_finder_reads_the_fences():
    text = "# A\n\n```bash\necho 1\n```\n\n## B\n\n```text\nx|y\n```\n"
    blocks = readme_blocks(text)
    assert [(b.lang, b.line, b.code, b.section) for b in blocks] == [("bash", 3, "echo 1\n", "A"), ("text", 9, "x|y\n", "B")]


def _tracked_files(root: Path) -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                         capture_output=True, check=True).stdout
    return [f for f in out.decode().split("\0") if f and (root / f).is_file()]


def _write_exe(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def fresh_copy(dst: Path) -> Path:
    """A copy of the repository as a fresh clone has it, plus a ``.venv`` wrapping this Python (already
    "installed": run.sh's stamp is newer than pyproject.toml, so run.sh installs nothing)."""
    for rel in _tracked_files(ROOT):
        target = dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target)
    bin_dir = dst / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    py = f'#!/bin/sh\nPYTHONPATH="{dst}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" "$@"\n'
    _write_exe(bin_dir / "python", py)
    _write_exe(bin_dir / "python3", py)
    _write_exe(bin_dir / "dpaudit", f'#!/bin/sh\nexec "{bin_dir / "python"}" -m dpaudit "$@"\n')
    (bin_dir / "activate").write_text(f'export VIRTUAL_ENV="{dst / ".venv"}"\nexport PATH="{bin_dir}:$PATH"\n')
    (dst / ".venv" / ".dpaudit-installed").touch()
    return dst


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    return fresh_copy(tmp_path_factory.mktemp("readme") / "dpaudit")


@pytest.mark.slow
@pytest.mark.parametrize("block", BASH, ids=[b.id for b in BASH])
def test_readme_block_runs_verbatim(repo: Path, block: Block):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "COLUMNS")}
    env.update(PATH=f"{repo / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}", HOME=str(repo.parent), CI="true")
    cmd = (["bash", "-c", "set -eo pipefail\n" + block.code] if block.lang == "bash"
           else [str(repo / ".venv" / "bin" / "python"), "-c", block.code])
    proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True,
                          timeout=BLOCK_TIMEOUT, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, (f"README.md line {block.line} ({block.section}) failed with exit code "
                                  f"{proc.returncode}:\n{block.code}\n--- stdout (end) ---\n{proc.stdout[-3000:]}\n"
                                  f"--- stderr (end) ---\n{proc.stderr[-3000:]}")

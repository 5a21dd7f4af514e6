"""README.md runs verbatim, and stays a door to the docs.

The convention (stated in the README): every ```` ```bash ```` block (and ```` ```python ```` block) is run exactly
as written, in the order of the README, by ``bash -e`` in one fresh copy of the repository (its git-tracked and
not-ignored files), with a ``.venv`` that wraps the Python running the tests (so ``bash run.sh ...`` and
``source .venv/bin/activate`` work without an install). ```` ```text ```` blocks are syntax summaries and
```` ```console ```` blocks transcripts: never run. The blocks are found when the test runs, so a block added to the
README is run without touching this file; a fast test checks that every fence names one of these languages (a bare
fence would silently escape the check). The docs pages (docs/) follow the same convention: tests/test_docs.py.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from docblocks import ROOT, Block, bad_fences, block_env, fresh_copy, markdown_blocks, NOT_RUN, RUN

README = ROOT / "README.md"
BLOCK_TIMEOUT = 3600
MAX_LINES = 250                                  # the README is a door: what dpaudit is, how to start, where to go

BLOCKS = markdown_blocks(README.read_text(encoding="utf-8"))
BASH = [b for b in BLOCKS if b.lang in RUN]


def test_every_fence_names_its_kind():
    """A bare ``` fence would neither run nor say why; shell commands go in bash (run) or console/text (not)."""
    assert bad_fences(BLOCKS) == [], f"README fences must be one of {', '.join((*RUN, *NOT_RUN))}"
    assert len(BASH) >= 3, "the README's runnable blocks were not found"


def test_block_finder_reads_the_fences():
    text = "# A\n\n```bash\necho 1\n```\n\n## B\n\n```text\nx|y\n```\n"
    blocks = markdown_blocks(text)
    assert [(b.lang, b.line, b.code, b.section) for b in blocks] == [("bash", 3, "echo 1\n", "A"), ("text", 9, "x|y\n", "B")]
    assert bad_fences(markdown_blocks("```\nls\n```\n")) == ["line 1: ```"]


def test_readme_is_short_and_links_existing_docs():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_LINES, "move detail to a page under docs/ and link it"
    links = re.findall(r"\]\((docs/[^)#]+)", text)
    assert links, "the README links no docs page"
    missing = [p for p in links if not (ROOT / p).is_file()]
    assert missing == [], missing


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    return fresh_copy(tmp_path_factory.mktemp("readme") / "dpaudit")


@pytest.mark.slow
@pytest.mark.parametrize("block", BASH, ids=[b.id for b in BASH])
def test_readme_block_runs_verbatim(repo: Path, block: Block):
    cmd = (["bash", "-c", "set -eo pipefail\n" + block.code] if block.lang == "bash"
           else [str(repo / ".venv" / "bin" / "python"), "-c", block.code])
    proc = subprocess.run(cmd, cwd=repo, env=block_env(repo), capture_output=True, text=True,
                          timeout=BLOCK_TIMEOUT, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, (f"README.md line {block.line} ({block.section}) failed with exit code "
                                  f"{proc.returncode}:\n{block.code}\n--- stdout (end) ---\n{proc.stdout[-3000:]}\n"
                                  f"--- stderr (end) ---\n{proc.stderr[-3000:]}")

"""The documentation site (mkdocs.yml, docs/): it builds with warnings as errors (a broken link or API reference
fails), and its pages run as written.

Every ```` ```bash ```` and ```` ```python ```` block of a page runs in the order of the page, in one fresh copy of
the repository (tests/docblocks.py: the README's convention), python blocks in one shared namespace, as a reader
following a tutorial would. Three tutorials and the cheap reference pages run in the default suite (tiny
settings); the others (``FAST`` says which and why) under ``-m slow``.
Pages are found when the test runs: a new page is run without touching this file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from docblocks import NOT_RUN, ROOT, RUN, bad_fences, fresh_copy, markdown_blocks, run_page

DOCS = ROOT / "docs"
PAGES = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
#: Pages executed in the default run (seconds of CPU each). Every other page with runnable blocks runs under
#: ``-m slow``: the getting-started page (the README's three paths again, several CLI start-ups), the Opacus
#: tutorial (trains with Opacus, like examples/python/audit_opacus_run.py) and the moved README sections (they train
#: models and run audits).
FAST = {"tutorials/scores-only.md", "tutorials/pate-gnmax.md", "tutorials/ci-claims.md", "guide/accounting.md",
        "reference/release-bundle.md", "reference/json-schemas.md"}
PAGE_TIMEOUT = 3600


def _blocks(page: str):
    return markdown_blocks((DOCS / page).read_text(encoding="utf-8"))


RUNNABLE = [p for p in PAGES if any(b.lang in RUN for b in _blocks(p))]


def test_docs_build_strict(tmp_path):
    """``mkdocs build --strict``: every page in the nav, every link and anchor resolved, every ``::: dpaudit.x``
    reference found and rendered without a warning."""
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(ROOT / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-6000:]
    for page in ("index.html", "getting-started/index.html", "api/dpaudit/index.html",
                 "reference/claims-file/index.html"):
        assert (tmp_path / "site" / page).is_file(), page
    api = (tmp_path / "site" / "api" / "dpaudit" / "index.html").read_text(encoding="utf-8")
    assert "dpaudit.api.account" in api and "headline" in api      # rendered from the docstrings


def test_every_fence_names_its_kind():
    bad = {p: bad_fences(_blocks(p)) for p in PAGES}
    assert {p: b for p, b in bad.items() if b} == {}, f"docs fences must be one of {', '.join((*RUN, *NOT_RUN))}"
    assert set(FAST) <= set(RUNNABLE), "a fast page is missing or lost its runnable blocks"


def _page_params():
    return [pytest.param(p, id=p, marks=() if p in FAST else (pytest.mark.slow,)) for p in RUNNABLE]


@pytest.mark.parametrize("page", _page_params())
def test_docs_page_runs(tmp_path, page):
    repo = fresh_copy(tmp_path / "dpaudit")
    proc = run_page(repo, f"docs/{page}", _blocks(page), timeout=PAGE_TIMEOUT)
    assert proc.returncode == 0, (f"docs/{page} failed (exit {proc.returncode}):\n--- stdout (end) ---\n"
                                  f"{proc.stdout[-4000:]}\n--- stderr (end) ---\n{proc.stderr[-4000:]}")

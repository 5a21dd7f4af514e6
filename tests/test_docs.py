"""The documentation site (mkdocs.yml, docs/): it builds with warnings as errors (a broken link or API reference
fails), and its pages run as written.

Every ```` ```bash ```` and ```` ```python ```` block of a page runs in the order of the page, in one fresh copy of
the repository (tests/docblocks.py: the README's convention), python blocks in one shared namespace, as a reader
following a tutorial would. Three tutorials and the cheap reference pages run in the default suite (tiny
settings); the others (``FAST`` says which and why) under ``-m slow``.
Pages are found when the test runs: a new page is run without touching this file.

A figure the prose quotes from a command the page shows carries a marker, ``3.7203<!-- printed -->`` or
``3.7203<!-- printed: PRV -->`` (tests/docblocks.py: ``quoted_figures``): after the page has run, every marked figure
must be among the numbers its blocks printed (on a line containing the label, when given, at the quoted
precision), so a figure that changes fails here instead of leaving the page wrong; and each figure, changed in its
last digit, must be reported missing, so that no marker checks nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from docblocks import (NOT_RUN, ROOT, RUN, Figure, bad_fences, changed_figure, fresh_copy, markdown_blocks,
                       quoted_figures, run_page, unprinted_figures)

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
    text = (DOCS / page).read_text(encoding="utf-8")
    missing = unprinted_figures(text, proc.stdout)
    assert not missing, (f"docs/{page} quotes figures its commands did not print: {missing}\n--- stdout (end) ---\n"
                         f"{proc.stdout[-6000:]}")
    for fig in quoted_figures(text):  # a changed figure is caught: the marker checks something
        lines = text.splitlines()
        wrong = "\n".join(ln.replace(f"{fig.text}<!--", f"{changed_figure(fig)}<!--", 1) if i == fig.line - 1 else ln
                          for i, ln in enumerate(lines))
        assert unprinted_figures(wrong, proc.stdout), (f"docs/{page} line {fig.line}: {changed_figure(fig)} instead "
                                                       f"of {fig.text} would pass too: add a label to the marker")


def test_quoted_figures_are_on_pages_that_run():
    """A marker on a page without runnable blocks would never be compared with anything."""
    marked = {p for p in PAGES if quoted_figures((DOCS / p).read_text(encoding="utf-8"))}
    assert marked <= set(RUNNABLE), marked - set(RUNNABLE)
    assert marked, "no page marks its figures"


def test_a_changed_figure_fails_the_comparison():
    """The comparison itself, on a page and an output made here: the right figures pass, wrong ones are reported."""
    page = ("# P\n\nIt gives PRV **3.7203**<!-- printed: prv --> and RDP 4.237<!-- printed: rdp -->, in 65<!-- printed --> "
            "steps.\n\n```python\nprint('x = 9.99<!-- printed -->')\n```\n")
    out = "Opacus: epsilon = 3.7203 (prv accountant)\n  Poisson sampling (rdp): 4.2370\n65 steps; 1,437 records\n"
    assert [f.text for f in quoted_figures(page)] == ["3.7203", "4.237", "65"]  # not the one in the code block
    assert quoted_figures(page)[0] == Figure(3, "3.7203", "prv")
    assert unprinted_figures(page, out) == []
    assert unprinted_figures(page.replace("3.7203", "6.1035"), out) == ["line 3: 6.1035 ('prv')"]
    assert unprinted_figures(page.replace("4.237", "6.843"), out) == ["line 3: 6.843 ('rdp')"]
    assert unprinted_figures(page.replace("4.237<", "3.720<"), out) == ["line 3: 3.720 ('rdp')"]  # the label's line
    assert unprinted_figures(page, out.replace("4.2370", "4.24")) == ["line 3: 4.237 ('rdp')"]  # no added digits
    assert unprinted_figures(page.replace("4.237<", "4.24<"), out) == []  # a quote may round what was printed
    assert unprinted_figures("n = 1,437<!-- printed -->", out) == []
    assert changed_figure(Figure(1, "3.7203", None)) == "3.7204" and changed_figure(Figure(1, "19", None)) == "10"

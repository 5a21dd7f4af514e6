"""Shared by tests/test_readme.py and tests/test_docs.py: find the fenced code blocks of a Markdown page, make a fresh
copy of the repository to run them in, and run a page's blocks in order.

The convention of README.md and docs/: ```` ```bash ```` and ```` ```python ```` blocks run exactly as written;
```` ```text ```` blocks are syntax summaries, ```` ```console ```` blocks transcripts, ```` ```toml ````,
```` ```json ```` and ```` ```yaml ```` blocks file contents: never run. A fence without one of these languages is an
error (it would silently escape the check)."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = ("bash", "python")                               # executed (python blocks with the environment's python)
NOT_RUN = ("text", "console", "toml", "json", "yaml")  # syntax summaries, transcripts, file contents
FENCE = re.compile(r"^```([\w-]*)[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)


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


def markdown_blocks(text: str) -> list[Block]:
    """Every fenced block of ``text`` with its language, first line number and the heading it sits under."""
    out = []
    for i, m in enumerate(FENCE.finditer(text)):
        line = text.count("\n", 0, m.start()) + 1
        prose = FENCE.sub("", text[: m.start()])          # headings outside code blocks only
        heads = re.findall(r"^#+ (.+)$", prose, re.M)
        out.append(Block(i, m.group(1), line, m.group(2), heads[-1] if heads else "top"))
    return out


def bad_fences(blocks: list[Block]) -> list[str]:
    return [f"line {b.line}: ```{b.lang}" for b in blocks if b.lang not in (*RUN, *NOT_RUN)]


def tracked_files(root: Path) -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                         capture_output=True, check=True).stdout
    return [f for f in out.decode().split("\0") if f and (root / f).is_file()]


def _write_exe(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def fresh_copy(dst: Path) -> Path:
    """A copy of the repository as a fresh clone has it, plus a ``.venv`` wrapping this Python (already
    "installed": run.sh's stamp is newer than pyproject.toml, so run.sh installs nothing)."""
    for rel in tracked_files(ROOT):
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


def block_env(repo: Path) -> dict[str, str]:
    """The environment a reader has after ``source .venv/bin/activate`` in the copy: ``dpaudit`` and ``python`` on
    the PATH, nothing of the test run's own PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "COLUMNS")}
    env.update(PATH=f"{repo / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}", HOME=str(repo.parent), CI="true")
    return env


# Runs a page's blocks in order in one process: bash blocks with ``bash -c`` (set -eo pipefail), python blocks in one
# shared namespace, as a reader pasting a tutorial into one Python session would.
_DRIVER = r'''
import json, subprocess, sys
page, blocks = json.load(open(sys.argv[1], encoding="utf-8"))
ns = {"__name__": "__main__"}
for b in blocks:
    print(f"--- {page} line {b['line']} ({b['lang']})", flush=True)
    if b["lang"] == "bash":
        rc = subprocess.run(["bash", "-c", "set -eo pipefail\n" + b["code"]], stdin=subprocess.DEVNULL).returncode
        if rc:
            print(f"{page} line {b['line']}: the bash block failed with exit code {rc}", flush=True)
            sys.exit(1)
    else:
        exec(compile(b["code"], f"{page} line {b['line']}", "exec"), ns)
'''


def run_page(repo: Path, page: str, blocks: list[Block], timeout: float) -> subprocess.CompletedProcess:
    """Run the runnable ``blocks`` of ``page`` in order in the copy ``repo``; returns the finished process."""
    spec = repo.parent / f"blocks-{re.sub(r'[^A-Za-z0-9]+', '-', page)}.json"
    spec.write_text(json.dumps([page, [{"lang": b.lang, "line": b.line, "code": b.code}
                                       for b in blocks if b.lang in RUN]]), encoding="utf-8")
    return subprocess.run([str(repo / ".venv" / "bin" / "python"), "-c", _DRIVER, str(spec)], cwd=repo,
                          env=block_env(repo), capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


# ---- quoted figures: a figure in a page's prose followed by ``<!-- printed -->`` (or ``<!-- printed: LABEL -->``)
# must be one that the page's own blocks printed (on a line containing LABEL, when given), so a figure that changes
# fails the docs tests instead of leaving the page wrong. The comment is invisible in the rendered page.
PRINTED = re.compile(r"(?P<fig>[-+]?\d[\d,]*(?:\.\d+)?)(?:\*\*|\*|`)?[ \t]*<!--[ \t]*printed(?:[ \t]*:[ \t]*"
                     r"(?P<label>.*?))?[ \t]*-->")
NUMBER = re.compile(r"(?<![\w.])[-+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w])")


@dataclass(frozen=True)
class Figure:
    line: int
    text: str
    label: str | None

    @property
    def decimals(self) -> int:
        return len(self.text.split(".")[1]) if "." in self.text else 0


def quoted_figures(text: str) -> list[Figure]:
    """Every ``FIGURE<!-- printed[: LABEL] -->`` of a page's prose (markers inside fenced blocks are code, not
    prose, and are skipped)."""
    fenced = [(m.start(), m.end()) for m in FENCE.finditer(text)]
    out = []
    for m in PRINTED.finditer(text):
        if any(a <= m.start() < b for a, b in fenced):
            continue
        label = m.group("label")
        out.append(Figure(text.count("\n", 0, m.start()) + 1, m.group("fig"), label.strip() if label else None))
    return out


def _same(printed: str, fig: Figure) -> bool:
    """``printed`` (a number in the output) is the quoted figure at the figure's precision: rounded to its
    decimals, and given with at least as many (a quote may round a printed figure, never add digits to it)."""
    p = printed.replace(",", "")
    p_dec = len(p.split(".")[1].split("e")[0].split("E")[0]) if "." in p else 0
    if "e" in p.lower():
        p_dec = 99  # scientific notation: compare the value
    try:
        value, quoted = float(p), float(fig.text.replace(",", ""))
    except ValueError:
        return False
    return p_dec >= fig.decimals and f"{value:.{fig.decimals}f}" == f"{quoted:.{fig.decimals}f}"


def unprinted_figures(page_text: str, output: str) -> list[str]:
    """The quoted figures of ``page_text`` that ``output`` (what the page's blocks printed) does not contain, as
    ``line N: FIGURE [(LABEL)]`` messages; empty when every quoted figure was printed."""
    lines = output.splitlines()
    missing = []
    for fig in quoted_figures(page_text):
        where = [ln for ln in lines if fig.label is None or fig.label in ln]
        if not any(_same(m.group(), fig) for ln in where for m in NUMBER.finditer(ln)):
            missing.append(f"line {fig.line}: {fig.text}" + (f" ({fig.label!r})" if fig.label else ""))
    return missing


def changed_figure(fig: Figure) -> str:
    """The figure with its last digit changed (a figure that moved), for the tests that show a change is caught."""
    digits = [i for i, c in enumerate(fig.text) if c.isdigit()]
    i = digits[-1]
    return fig.text[:i] + str((int(fig.text[i]) + 1) % 10) + fig.text[i + 1:]

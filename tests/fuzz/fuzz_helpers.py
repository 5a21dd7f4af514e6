"""Helpers of the fuzz suite: running the CLI in-process, the assertions every run must satisfy, TOML writing,
and the count of generated inputs."""

from __future__ import annotations

import collections
import contextlib
import io
import json
from pathlib import Path

#: Generated inputs per fuzz target, over the whole pytest session (printed by conftest at the end).
COUNTS: collections.Counter = collections.Counter()


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """``dpaudit ARGV`` in this process: (exit code, stdout, stderr)."""
    from dpaudit.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main([str(a) for a in argv])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return code, out.getvalue(), err.getvalue()


def assert_clean(code: int, err: str, allowed=(0, 2), argv=None) -> None:
    """Exit code allowed, never a traceback, and an error is exactly one line naming dpaudit."""
    assert code in allowed, f"exit {code} for {argv}: {err[-2000:]}"
    assert "Traceback" not in err, f"traceback for {argv}: {err[-2000:]}"
    if code == 2:
        lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("[dpaudit")]
        assert len(lines) == 1 and lines[0].startswith("dpaudit: error:"), f"{argv}: {err[-2000:]}"


def assert_nothing_half_written(out: Path) -> None:
    """No temporary file is left in --out, and every JSON file in it parses."""
    if not out.exists():
        return
    for p in out.rglob("*"):
        assert not p.name.endswith(".tmp"), f"left a temporary file {p}"
        if p.suffix == ".json" and p.is_file():
            json.loads(p.read_text())


def toml_value(v) -> str:
    """A Python value as a TOML inline value (enough for the fuzzers: tables, arrays, scalars)."""
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{json.dumps(str(k))} = {toml_value(x)}" for k, x in v.items()) + " }"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, float):
        return "nan" if v != v else ("inf" if v == float("inf") else ("-inf" if v == float("-inf") else repr(v)))
    if isinstance(v, int):
        return str(v) if v.bit_length() < 13000 else "1" + "0" * 3990
    return json.dumps(str(v))


def toml_document(top: dict, tables: dict[str, list[dict]]) -> str:
    lines = [f"{json.dumps(str(k))} = {toml_value(v)}" for k, v in top.items()]
    for name, entries in tables.items():
        for e in entries:
            lines.append(f"[[{name}]]")
            lines += [f"{json.dumps(str(k))} = {toml_value(v)}" for k, v in e.items()]
    return "\n".join(lines) + "\n"

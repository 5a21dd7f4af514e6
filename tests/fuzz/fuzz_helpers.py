"""Helpers of the fuzz suite: running the CLI in-process, the assertions every run must satisfy, TOML writing,
and the count of generated inputs."""

from __future__ import annotations

import collections
import contextlib
import io
import json
import signal
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

#: Generated inputs per fuzz target, over the whole pytest session (printed by conftest at the end).
COUNTS: collections.Counter = collections.Counter()
#: Exit codes per fuzz target of the CLI runs (``record``): how many inputs were answered (0), failed a claim (1)
#: or refused in one line (2).
OUTCOMES: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)


def record(name: str, code: int) -> None:
    """Count the exit code of one fuzzed CLI run of target ``name`` (shown in the closing summary)."""
    OUTCOMES[name][code] += 1


# ---- budgets (shared by every fuzz module) -------------------------------------------------------------------------------------------------

_COMMON = dict(deadline=None, database=None, suppress_health_check=list(HealthCheck), print_blob=True)


def fuzz(name: str, strategy, *, fast: int, slow: int):
    """Turn ``body(example)`` into a default-run test (``fast`` examples, derandomised) and a slow one."""

    def wrap(body):
        def run(x):
            COUNTS[name] += 1
            body(x)

        fast_test = settings(max_examples=fast, derandomize=True, **_COMMON)(given(strategy)(run))
        slow_test = pytest.mark.slow(settings(max_examples=slow, **_COMMON)(given(strategy)(run)))
        return fast_test, slow_test

    return wrap


# ---- value strategies ----------------------------------------------------------------------------------------

EXTREME_INTS = st.sampled_from([0, -1, 1, 2, 2**31, 2**32, 2**63, 2**70, 10**12, 10**300, 10**4000])
EXTREME_FLOATS = st.sampled_from([0.0, -0.0, 1e-320, 5e-324, 1e-300, 1e15, 1e308, float("inf"), float("-inf"),
                                  float("nan"), 0.5, 1.0, 1.5])
SCALARS = st.one_of(st.integers(-1000, 1000), EXTREME_INTS, st.floats(), EXTREME_FLOATS, st.booleans(),
                    st.text(max_size=8))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                      max_leaves=6)


ARRAYS = st.one_of(
    st.builds(lambda r, c, v: np.full((r, c), v), st.integers(0, 4), st.integers(0, 4),
              st.one_of(st.integers(-5, 10**6), st.floats())),
    st.builds(lambda s: np.array(s), st.lists(st.text(max_size=3), min_size=1, max_size=4)),
    st.just(np.array([[1 + 2j, 3j]])),
    st.just(np.array(["2020-01-01", "2021-06-01"], dtype="datetime64[D]").reshape(1, 2)),
    st.just(np.array([[{"a": 1}, None]], dtype=object)),
    st.just(np.zeros((2, 2, 2))),
    st.just(np.ones(5, dtype=bool)),
)




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


@contextlib.contextmanager
def time_limit(seconds: int, what):
    """Fail (instead of hanging the suite) when one input takes longer than ``seconds``."""
    def alarm(*_):
        raise AssertionError(f"no answer within {seconds} s for {what!r:.400}")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)

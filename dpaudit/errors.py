"""Errors and input validation shared by every layer.

Every check raises :class:`ParameterError` with one message template, so that a user sees which
parameter was wrong, what range it must lie in, and what was given::

    The 'gamma' parameter of LaplaceNoisyMax must be a float > 0. Got -0.1 instead.

The CLI turns any :class:`DPAuditError` into that one line on stderr and exit code 2.
Checks never use ``assert`` (stripped under ``python -O``).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import numbers
import re
from typing import Any, Iterable

import numpy as np

__all__ = [
    "DPAuditError",
    "format_value",
    "check_path",
    "check_optional_str",
    "ParameterError",
    "DataError",
    "OutputError",
    "check_float",
    "check_int",
    "check_probability",
    "check_choice",
    "check_bool",
    "NAME_PATTERN",
    "check_name",
    "worded",
    "cli_wording",
]


class DPAuditError(Exception):
    """Base class of every error dpaudit raises on purpose (bad input, missing files, broken bundles)."""


class ParameterError(DPAuditError, ValueError):
    """A parameter is outside its allowed range, of the wrong type, or not finite."""


class DataError(DPAuditError, ValueError):
    """A file or array given by the user is missing, malformed or inconsistent."""


class OutputError(DPAuditError, OSError):
    """An output could not be written (read-only file system, a file where a directory should be, no
    permission, disk full); the message names the target, never a temporary file."""


def format_value(value: Any) -> str:
    """The value as the user would write it, cut to 80 characters (an error line stays one readable line)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    try:
        text = repr(value) if isinstance(value, (float, str)) else str(value)
    except Exception:  # noqa: BLE001 - a value whose str() fails still gets a one-line message
        text = f"a {type(value).__name__}"
    return text if len(text) <= 80 else text[:77] + "..."


def _range_text(kind: str, low, high, low_open: bool, high_open: bool) -> str:
    art = "an" if kind[0] in "aeiou" else "a"
    if low is None and high is None:
        return f"a finite {kind}"
    if low is not None and high is not None:
        lb = "(" if low_open else "["
        rb = ")" if high_open else "]"
        return f"{art} {kind} in the range {lb}{format_value(low)}, {format_value(high)}{rb}"
    if low is not None:
        return f"{art} {kind} {'>' if low_open else '>='} {format_value(low)}"
    return f"{art} {kind} {'<' if high_open else '<='} {format_value(high)}"


def check_float(
    value: Any,
    name: str,
    owner: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    allow_inf: bool = False,
) -> float:
    """Return ``value`` as a float, or raise :class:`ParameterError` naming ``name`` of ``owner``.

    ``low``/``high`` bound the value (inclusive unless ``low_open``/``high_open``). NaN is always
    rejected; infinities only pass with ``allow_inf``.
    """
    expected = _range_text("float", low, high, low_open, high_open)
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, np.floating, np.integer)):
        raise ParameterError(f"The '{name}' parameter of {owner} must be {expected}. Got {format_value(value)} instead.")
    try:
        v = float(value)
    except OverflowError:  # an int beyond the float range (e.g. a 400-digit literal)
        v = math.inf if value > 0 else -math.inf
        if not allow_inf:
            raise ParameterError(f"The '{name}' parameter of {owner} must be {expected}. Got {format_value(value)} instead.") from None
    bad = math.isnan(v) or (math.isinf(v) and not allow_inf)
    if not bad and low is not None:
        bad = v <= low if low_open else v < low
    if not bad and high is not None:
        bad = v >= high if high_open else v > high
    if bad:
        raise ParameterError(f"The '{name}' parameter of {owner} must be {expected}. Got {format_value(v)} instead.")
    return v


def check_int(
    value: Any,
    name: str,
    owner: str,
    *,
    low: int | None = None,
    high: int | None = None,
) -> int:
    """Return ``value`` as an int (floats with an integral value are accepted), or raise."""
    expected = _range_text("int", low, high, False, False)
    ok = isinstance(value, (numbers.Integral, np.integer)) and not isinstance(value, bool)
    if not ok and isinstance(value, (float, np.floating)) and math.isfinite(value) and float(value).is_integer():
        ok = True
    if not ok:
        raise ParameterError(f"The '{name}' parameter of {owner} must be {expected}. Got {format_value(value)} instead.")
    v = int(value)
    if (low is not None and v < low) or (high is not None and v > high):
        raise ParameterError(f"The '{name}' parameter of {owner} must be {expected}. Got {format_value(v)} instead.")
    return v


def check_probability(value: Any, name: str, owner: str, *, allow_zero: bool = False, allow_one: bool = False) -> float:
    """A float in (0, 1), with the ends admitted on request."""
    return check_float(value, name, owner, low=0.0, high=1.0, low_open=not allow_zero, high_open=not allow_one)


def check_choice(value: Any, name: str, owner: str, choices: Iterable[str]) -> str:
    choices = tuple(choices)
    # a str (or None where None is one of the choices); anything else is refused before "in" (an array's would raise)
    if not (isinstance(value, str) or (value is None and None in choices)) or value not in choices:
        listed = ", ".join(repr(c) for c in choices)
        raise ParameterError(f"The '{name}' parameter of {owner} must be one of {listed}. Got {format_value(value)} instead.")
    return value


def check_bool(value: Any, name: str, owner: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ParameterError(f"The '{name}' parameter of {owner} must be a bool. Got {format_value(value)} instead.")
    return bool(value)


#: Names from configs that become folder or file names (models, canary audits, method audits): a letter or digit,
#: then up to 63 letters, digits, ``_``, ``.`` or ``-`` -- so ``..``, ``/``, NUL and control characters never reach
#: a path.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def check_name(value: Any, name: str, owner: str) -> str:
    """``value`` if it is a string matching :data:`NAME_PATTERN` (a safe folder name), else a :class:`ParameterError`."""
    if not isinstance(value, str) or not NAME_PATTERN.fullmatch(value):
        raise ParameterError(f"The '{name}' parameter of {owner} must be a name of 1-64 letters, digits, '_', '.' or '-' "
                             f"starting with a letter or digit (it names a folder). Got {format_value(value)} instead.")
    return value


def check_path(value: Any, name: str, owner: str) -> Path:
    """``value`` (a ``str`` or an ``os.PathLike`` naming a path) as a :class:`~pathlib.Path`, else a
    :class:`ParameterError` (an empty string, a NUL byte, bytes or any other type: before anything is opened)."""
    import os
    from pathlib import Path

    text = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if not isinstance(text, str) or not text or "\x00" in text or not _path_fits(text):
        raise ParameterError(f"The '{name}' parameter of {owner} must be a path (a non-empty str or os.PathLike "
                             f"without NUL, names of at most 255 bytes, 4095 in all). Got {format_value(value)} instead.")
    return Path(text)


def _path_fits(text: str) -> bool:
    """Whether the operating system can name ``text`` at all (NAME_MAX 255 bytes a component, PATH_MAX 4096)."""
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeError:
        return False
    return len(raw) < 4096 and all(len(part) <= 255 for part in raw.split(b"/"))


def check_optional_str(value: Any, name: str, owner: str) -> str | None:
    """``value`` if it is None or a str without NUL, else a :class:`ParameterError`."""
    if value is not None and (not isinstance(value, str) or "\x00" in value):
        raise ParameterError(f"The '{name}' parameter of {owner} must be a string (or None). Got "
                             f"{format_value(value)} instead.")
    return value


#: True while the command line runs (set by the ``dpaudit`` group): messages then name flags, not keywords.
_CLI_WORDING: contextvars.ContextVar[bool] = contextvars.ContextVar("dpaudit_cli_wording", default=False)


def worded(cli: str, python: str) -> str:
    """How to fix something, as the caller spells it: ``cli`` (a flag, ``"--factory FILE.py:build"``) under the
    command line, ``python`` (a keyword, ``"code=BundleCode(factory='FILE.py:build')"``) from the Python API."""
    return cli if _CLI_WORDING.get() else python


@contextlib.contextmanager
def cli_wording():
    """Within this block, :func:`worded` messages name the command line's flags (the ``dpaudit`` command's group
    enters it for the command it runs)."""
    token = _CLI_WORDING.set(True)
    try:
        yield
    finally:
        _CLI_WORDING.reset(token)

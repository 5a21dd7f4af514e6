"""Atomic output: a file is either absent or complete, never half-written.

Every writer goes to a temporary file in the target's directory, flushes and fsyncs it, then
``os.replace``-s it onto the target (atomic on POSIX within one file system).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

__all__ = ["json_number", "parse_json_number", "atomic_path", "write_bytes", "write_text", "write_json", "read_json", "save_npz", "save_npy", "atomic_dir"]


def json_number(x: Any) -> Any:
    """A number as strict JSON can hold it: ``inf``/``-inf``/``nan`` become the strings "inf"/"-inf"/"nan",
    numpy scalars become Python numbers, anything else is returned unchanged (``None`` included)."""
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, (float, np.floating)):
        x = float(x)
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
    return x


def parse_json_number(x: Any) -> Any:
    """Inverse of :func:`json_number`: the strings "inf"/"-inf"/"nan" become floats; anything else unchanged."""
    if isinstance(x, str) and x in ("inf", "-inf", "nan"):
        return float(x)
    return x


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside ``target``; on success it replaces ``target``, on error it is removed.

    ``suffix`` lets writers that insist on an extension (``np.savez`` adds ``.npz``) get the name they want.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix + ".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    os.chmod(tmp_path, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the mode open() would
    try:
        yield tmp_path
        with open(tmp_path, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp_path, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        raise


def write_bytes(target: str | os.PathLike, data: bytes) -> Path:
    with atomic_path(target) as tmp:
        tmp.write_bytes(data)
    return Path(target)


def write_text(target: str | os.PathLike, text: str) -> Path:
    return write_bytes(target, text.encode("utf-8"))


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    to_dict = getattr(obj, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serialisable")


def dumps_json(obj: Any) -> str:
    """JSON text with numpy scalars/arrays and ``to_dict()`` objects converted; inf/nan kept as JSON extensions."""
    return json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n"


def write_json(target: str | os.PathLike, obj: Any) -> Path:
    return write_text(target, dumps_json(obj))


def read_json(path: str | os.PathLike) -> Any:
    with open(path, "r", encoding="utf-8") as fh:
        return json.load(fh)


def save_npz(target: str | os.PathLike, **arrays: np.ndarray) -> Path:
    """``np.savez_compressed`` written atomically. Load with ``np.load(path, allow_pickle=False)``."""
    with atomic_path(target, suffix=".npz") as tmp, open(tmp, "wb") as fh:  # a file object: numpy adds no suffix
        np.savez_compressed(fh, **arrays)
    return Path(target)


def save_npy(target: str | os.PathLike, array: np.ndarray) -> Path:
    with atomic_path(target, suffix=".npy") as tmp, open(tmp, "wb") as fh:  # a file object: numpy adds no suffix
        np.save(fh, np.asarray(array), allow_pickle=False)
    return Path(target)


@contextlib.contextmanager
def atomic_dir(target: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Build a directory under a temporary name and rename it onto ``target`` only when complete.

    If ``target`` exists and ``overwrite`` is true, it is replaced (the old one is removed only after the
    new one is complete); otherwise :class:`FileExistsError` is raised before anything is written.
    """
    target = Path(target)
    if target.exists() and not overwrite:
        raise FileExistsError(f"{target} already exists")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700
    try:
        yield tmp
        if target.exists():
            old = target.with_name(f".{target.name}.old")
            if old.exists():
                shutil.rmtree(old)
            os.replace(target, old)
            os.replace(tmp, target)
            shutil.rmtree(old)
        else:
            os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def call_atomic(target: str | os.PathLike, writer: Callable[[Path], None], suffix: str = "") -> Path:
    """Run ``writer(tmp_path)`` and move the result onto ``target`` atomically."""
    with atomic_path(target, suffix=suffix) as tmp:
        writer(tmp)
    return Path(target)


def read_toml(path: str | os.PathLike, what: str = "config file") -> dict:
    """Parse the TOML file ``path`` (``tomllib``; ``tomli`` on Python 3.10). A missing file or invalid TOML is a
    :class:`~dpaudit.errors.DataError` naming the file (``what`` says what kind of file it is)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    from dpaudit.errors import DataError

    p = Path(path)
    if not p.is_file():
        raise DataError(f"The {what} {p} does not exist or is not a regular file.")
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"The {what} {p} is not valid TOML: {exc}") from None

"""Atomic output: a file is either absent or complete, never half-written.

Every writer goes to a temporary file in the target's directory, flushes and fsyncs it, then
``os.replace``-s it onto the target (atomic on POSIX within one file system).
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import shutil
import stat
import sys
import tempfile
import zipfile
import zlib
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from dpaudit.errors import DataError, OutputError
from dpaudit.serial import json_number, parse_json_number, to_dict as _to_dict

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["json_number", "parse_json_number", "atomic_path", "write_bytes", "write_text", "write_json", "read_json",
           "save_npz", "save_npy", "atomic_dir", "check_input_file", "read_input_bytes", "read_input_text",
           "load_toml_file", "read_toml", "parse_toml_value", "load_json_file", "load_npy_file", "load_npz_file", "exclusive_lock", "MAX_INPUT_BYTES"]

#: The largest input file dpaudit reads whole (TOML/JSON/CSV/votes/membership): 1 GiB. Larger inputs are refused
#: with a :class:`DataError` before anything is allocated.
MAX_INPUT_BYTES = 1 << 30


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
    mode = 0o666 & ~_umask()
    try:
        make_dirs(target.parent)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix + ".tmp", dir=target.parent)
    except OSError as exc:
        raise _output_error(target, exc) from None
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        os.chmod(tmp_path, mode)  # mkstemp makes 0600; give the file the mode open() would
        yield tmp_path
        os.chmod(tmp_path, mode)  # again: some writers (safetensors) replace the file and leave 0600
        with open(tmp_path, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp_path, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp_path.unlink()
        if isinstance(exc, OSError) and not isinstance(exc, OutputError):
            raise _output_error(target, exc) from None  # never name the temporary file
        raise


def _output_error(target: Path, exc: OSError) -> OutputError:
    why = exc.strerror or str(exc) or type(exc).__name__
    if isinstance(exc, (NotADirectoryError, FileExistsError)) or exc.errno in (errno.ENOTDIR, errno.EEXIST):
        why = f"{why} (a path component is an existing file, not a directory)"
    return OutputError(f"Cannot write {target}: {why}.")


def make_dirs(path: str | os.PathLike) -> Path:
    """``mkdir -p`` whose failures (a file in the way, read-only file system, no permission) are one
    :class:`OutputError` naming the directory."""
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        why = exc.strerror or str(exc)
        if isinstance(exc, (NotADirectoryError, FileExistsError)):
            why = f"{why} (a path component is an existing file, not a directory)"
        raise OutputError(f"Cannot create the directory {p}: {why}.") from None
    return p


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
    return _to_dict(obj)  # result objects: the one serialiser (dpaudit.serial)


def dumps_json(obj: Any) -> str:
    """JSON text with numpy scalars/arrays and result objects (:func:`dpaudit.serial.to_dict`) converted; inf/nan in
    plain dicts kept as JSON extensions (result objects write them as strings)."""
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
    make_dirs(target.parent)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    except OSError as exc:
        raise _output_error(target, exc) from None
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
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError) and not isinstance(exc, (DataError, OutputError)):
            raise _output_error(target, exc) from None
        raise


def call_atomic(target: str | os.PathLike, writer: Callable[[Path], None], suffix: str = "") -> Path:
    """Run ``writer(tmp_path)`` and move the result onto ``target`` atomically."""
    with atomic_path(target, suffix=suffix) as tmp:
        writer(tmp)
    return Path(target)


# --------------------------------------------------------------------------------------------------
# Reading user files: stat before open, bounded sizes, one DataError naming the file
# --------------------------------------------------------------------------------------------------


def check_input_file(path: str | os.PathLike, what: str, *, allow_empty: bool = False,
                     max_bytes: int | None = MAX_INPUT_BYTES) -> Path:
    """Check ``path`` with ``stat`` (never ``open``: a FIFO would block) and return it.

    ``what`` names the file for the user ("the votes file"). Raises :class:`DataError` if it is missing, not a
    regular file (a directory, FIFO, socket or device such as ``/dev/null``), empty (unless ``allow_empty``),
    larger than ``max_bytes``, or unreadable.
    """
    p = Path(path)
    try:
        st = p.stat()
    except (FileNotFoundError, NotADirectoryError):
        raise DataError(f"{_cap(what)} {p} does not exist.") from None
    except OSError as exc:
        raise DataError(f"{_cap(what)} {p} cannot be read: {exc.strerror or exc}.") from None
    if stat.S_ISDIR(st.st_mode):
        raise DataError(f"{_cap(what)} {p} is a directory, not a file.")
    if not stat.S_ISREG(st.st_mode):
        raise DataError(f"{_cap(what)} {p} is not a regular file (a FIFO, socket or device); refusing to read it.")
    if st.st_size == 0 and not allow_empty:
        raise DataError(f"{_cap(what)} {p} is empty.")
    if max_bytes is not None and st.st_size > max_bytes:
        raise DataError(f"{_cap(what)} {p} is {st.st_size} bytes; dpaudit reads at most {max_bytes} bytes here.")
    return p


def _cap(what: str) -> str:
    return what[:1].upper() + what[1:]


def read_input_bytes(path: str | os.PathLike, what: str, *, max_bytes: int | None = MAX_INPUT_BYTES) -> bytes:
    """The bytes of a user's file after :func:`check_input_file`; read errors become :class:`DataError`."""
    p = check_input_file(path, what, max_bytes=max_bytes)
    try:
        return p.read_bytes()
    except OSError as exc:
        raise DataError(f"{_cap(what)} {p} cannot be read: {exc.strerror or exc}.") from None


def read_input_text(path: str | os.PathLike, what: str, *, max_bytes: int | None = MAX_INPUT_BYTES) -> str:
    """A user's UTF-8 text file; a binary file gives a :class:`DataError` naming it."""
    raw = read_input_bytes(path, what, max_bytes=max_bytes)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{_cap(what)} {path} is not UTF-8 text (a binary file?): {exc.reason} at byte {exc.start}.") from None
    if "\x00" in text:
        raise DataError(f"{_cap(what)} {path} is not text (it holds NUL bytes; a binary file?).")
    return text


def _parse_error(what: str, path: Any, kind: str, exc: BaseException) -> DataError:
    if isinstance(exc, RecursionError):
        return DataError(f"{_cap(what)} {path} is nested too deeply to be a valid {kind} input.")
    msg = str(exc).replace("\n", " ")
    if isinstance(exc, ValueError) and "digits" in msg and "int" in msg:  # CPython's int max_str_digits limit
        return DataError(f"{_cap(what)} {path} holds an integer with too many digits ({msg[:120]}).")
    return DataError(f"{_cap(what)} {path} is not valid {kind}: {msg[:300]}")


def load_toml_file(path: str | os.PathLike, what: str) -> dict[str, Any]:
    """Parse a user's TOML file; any malformed, binary, too-deep or too-large input is one :class:`DataError`."""
    text = read_input_text(path, what, max_bytes=64 << 20)
    try:
        return tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError, ValueError, OverflowError) as exc:
        raise _parse_error(what, path, "TOML", exc) from None


def load_json_file(path: str | os.PathLike, what: str) -> Any:
    """Parse a user's JSON file (strict about nesting depth and integer size, like :func:`load_toml_file`)."""
    text = read_input_text(path, what, max_bytes=256 << 20)
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError, ValueError, OverflowError) as exc:
        raise _parse_error(what, path, "JSON", exc) from None


_NPY_MAGIC = b"\x93NUMPY"


def _npy_header(fh: Any, what: str, where: str) -> tuple[tuple[int, ...], np.dtype, int]:
    """Read an .npy header from ``fh``: ``(shape, dtype, data bytes)``; refuses object dtypes before any pickle."""
    try:
        version = np.lib.format.read_magic(fh)
        if version == (1, 0):
            shape, _fortran, dtype = np.lib.format.read_array_header_1_0(fh)
        elif version in ((2, 0), (3, 0)):
            shape, _fortran, dtype = np.lib.format.read_array_header_2_0(fh)
        else:
            raise ValueError(f"unsupported .npy version {version}")
    except (ValueError, OSError, EOFError, SyntaxError, TypeError, RecursionError, MemoryError) as exc:
        raise DataError(f"{_cap(what)} {where} is not a readable .npy array ({str(exc)[:200]}).") from None
    if dtype.hasobject:
        raise DataError(f"{_cap(what)} {where} is not a plain numeric array: it holds Python objects (dtype {dtype}); "
                        "loading them would need pickle, which dpaudit never uses on user files.")
    count = math.prod(int(s) for s in shape)
    return tuple(int(s) for s in shape), dtype, count * dtype.itemsize


def _check_kind(dtype: np.dtype, kinds: str | None, what: str, where: str) -> None:
    if kinds is not None and dtype.kind not in kinds:
        raise DataError(f"{_cap(what)} {where} must hold numbers. Got dtype {dtype} instead.")


def load_npy_file(path: str | os.PathLike, what: str, *, kinds: str | None = "biuf",
                  max_bytes: int = MAX_INPUT_BYTES) -> np.ndarray:
    """Load a plain ``.npy`` array without pickle, checking its header against the file size before allocating.

    ``kinds`` restricts the dtype kinds (numpy's ``dtype.kind``; default: bool, ints, floats). An ``.npz``
    archive under a ``.npy`` name, a truncated file or a header promising more data than the file has are
    refused with a :class:`DataError` naming the file.
    """
    p = check_input_file(path, what, max_bytes=max_bytes)
    size = p.stat().st_size
    try:
        with open(p, "rb") as fh:
            head = fh.read(6)
            if head[:2] == b"PK":
                raise DataError(f"{_cap(what)} {p} is a zip (.npz) archive, not a .npy array.")
            if head != _NPY_MAGIC:
                raise DataError(f"{_cap(what)} {p} is not a .npy file (bad magic number).")
            fh.seek(0)
            shape, dtype, nbytes = _npy_header(fh, what, str(p))
            _check_kind(dtype, kinds, what, str(p))
            if nbytes != size - fh.tell():
                raise DataError(f"{_cap(what)} {p}: its header promises shape {shape} ({nbytes} bytes of data), "
                                f"the file holds {size - fh.tell()}; truncated or corrupt.")
            fh.seek(0)
            return np.load(fh, allow_pickle=False)
    except DataError:
        raise
    except (ValueError, OSError, EOFError) as exc:
        raise DataError(f"{_cap(what)} {p} is not a readable .npy array ({str(exc)[:200]}).") from None


def load_npz_file(path: str | os.PathLike, what: str, *, kinds: str | None = "biuf",
                  max_bytes: int = MAX_INPUT_BYTES) -> dict[str, np.ndarray]:
    """Load every array of an ``.npz`` archive without pickle.

    Before reading any data the zip directory is checked: every member must be an ``.npy`` whose header's size
    matches the member's recorded size, and the members together must unpack to at most ``max_bytes`` (a zip
    bomb is refused, not unpacked).
    """
    p = check_input_file(path, what, max_bytes=max_bytes)
    try:
        with zipfile.ZipFile(p) as zf:
            infos = zf.infolist()
            total = sum(i.file_size for i in infos)
            if total > max_bytes:
                raise DataError(f"{_cap(what)} {p} would unpack to {total} bytes; dpaudit reads at most {max_bytes} here.")
            for info in infos:
                if not info.filename.endswith(".npy") or info.is_dir():
                    raise DataError(f"{_cap(what)} {p} holds {info.filename!r}, which is not an .npy array.")
                with zf.open(info) as fh:
                    where = f"{p}[{info.filename[:-4]}]"
                    _shape, dtype, nbytes = _npy_header(fh, what, where)
                    _check_kind(dtype, kinds, what, where)
                    if nbytes != info.file_size - fh.tell():
                        raise DataError(f"{_cap(what)} {where}: its header promises {nbytes} bytes of data, "
                                        f"the archive holds {info.file_size - fh.tell()}; corrupt.")
            out: dict[str, np.ndarray] = {}
            with np.load(p, allow_pickle=False) as z:
                for k in z.files:
                    out[k] = z[k]
            return out
    except DataError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, ValueError, OSError, EOFError, KeyError,
            NotImplementedError, RuntimeError) as exc:
        raise DataError(f"{_cap(what)} {p} is not a readable .npz archive (truncated or corrupt? {str(exc)[:200]}).") from None


# --------------------------------------------------------------------------------------------------
# One writer per output directory
# --------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def exclusive_lock(directory: str | os.PathLike, what: str = "dpaudit", *,
                   lock_file: str | os.PathLike | None = None) -> Iterator[Path]:
    """Hold an exclusive ``fcntl.flock`` on ``directory/.dpaudit.lock`` while the body runs.

    A second process asking for the same directory gets a :class:`DataError` at once (it does not wait) naming
    the process that holds it. The lock dies with its process (SIGKILL included), so a stale lock file never
    blocks the next run. ``lock_file``: lock this file instead (its folder is created, ``directory`` is not),
    for a directory that must not exist before the run ends (a release is written atomically as a whole).
    """
    import fcntl

    d = Path(directory)
    if lock_file is None:
        lock = make_dirs(directory) / ".dpaudit.lock"
    else:
        lock = Path(lock_file)
        make_dirs(lock.parent)
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666 & ~_umask())
    except OSError as exc:
        raise _output_error(lock, exc) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "another process"
            except OSError:
                holder = "another process"
            raise DataError(f"{d} is in use by {holder}; wait for it to finish or choose another --out.") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{what} (pid {os.getpid()})\n".encode(), 0)
        yield lock
    finally:
        os.close(fd)  # releases the lock


def parse_toml_value(text: str) -> Any:
    """A TOML value written on a command line (``0.1``, ``true``, ``[1, 2]``, ``"x"``); a bare word is a string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except (tomllib.TOMLDecodeError, RecursionError, ValueError, OverflowError):
        return text


def read_toml(path: str | os.PathLike, what: str = "config file") -> dict:
    """Parse the TOML file ``path``: :func:`load_toml_file` with ``what`` the kind of file ("config file")."""
    return load_toml_file(path, f"the {what}")

"""Atomic output: a file is either absent or complete, never half-written.

Every writer goes to a temporary file in the target's directory, flushes and fsyncs it, then
``os.replace``-s it onto the target (atomic on POSIX within one file system).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import re
import shutil
import stat
import sys
import tempfile
import zipfile
import zlib
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from dpaudit.errors import DataError, OutputError, ParameterError
from dpaudit.serial import json_number, parse_json_number, to_dict as _to_dict

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["file_sha256", "json_number", "parse_json_number", "atomic_path", "write_bytes", "write_text", "write_json", "read_json",
           "save_npz", "save_npy", "atomic_dir", "check_input_file", "read_input_bytes", "read_input_text",
           "load_toml_file", "read_toml", "parse_toml_value", "load_json_file", "load_npy_file", "load_npz_file", "exclusive_lock", "MAX_INPUT_BYTES",
           "MAX_JSON_BYTES", "open_input", "read_zip_archive", "read_npy_header",
           "ARRAY_BYTES_ENV", "DEFAULT_MAX_ARRAY_BYTES", "MAX_ZIP_MEMBERS", "max_array_bytes", "check_zip_archive",
           "OUTPUT_MARKER", "write_output_marker", "is_dpaudit_output", "check_replaceable", "make_output_dir",
           "check_output_folder"]

#: The largest input file dpaudit reads whole (TOML/JSON/CSV/votes/membership): 1 GiB. Larger inputs are refused
#: with a :class:`DataError` before anything is allocated.
MAX_INPUT_BYTES = 1 << 30

#: The largest JSON file dpaudit parses: 64 MiB (parsing holds up to about 25 bytes of Python objects per byte of
#: JSON, so this bounds the memory a hostile file can take to about 1.6 GiB). A release's ``release.json`` is capped
#: lower (:data:`dpaudit.training.release.MAX_RELEASE_JSON_BYTES`).
MAX_JSON_BYTES = 64 << 20

#: The environment variable that sets the largest number of bytes the arrays of one ``.npz`` / ``.npy`` input may
#: unpack to (every npz dpaudit reads: bundle arrays, ``release make`` inputs, canary files, cached unit checkpoints).
ARRAY_BYTES_ENV = "DPAUDIT_MAX_ARRAY_BYTES"
#: Its default: 1 GiB.
DEFAULT_MAX_ARRAY_BYTES = 1 << 30
#: The most members an ``.npz`` archive may hold (its directory is read before anything else).
MAX_ZIP_MEMBERS = 4096



def file_sha256(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file's bytes, read in 1 MiB blocks (the one file digest of release make and LM bundles)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


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
def atomic_dir(target: str | os.PathLike, overwrite: bool = False, *, kind: str = "output") -> Iterator[Path]:
    """Build a directory under a temporary name and rename it onto ``target`` only when complete.

    If ``target`` exists and ``overwrite`` is true, it is replaced (the old one is removed only after the new one
    is complete) -- but only when it is a folder dpaudit wrote (:func:`check_replaceable`; checked before anything
    is written); otherwise :class:`FileExistsError` is raised before anything is written. The new folder gets
    dpaudit's marker (:data:`OUTPUT_MARKER`, of ``kind``).
    """
    target = Path(target)
    if target.exists() or target.is_symlink():
        if not overwrite:
            raise FileExistsError(f"{target} already exists")
        check_replaceable(target)
        old = target.with_name(f".{target.name}.old")
        if old.exists() and not old.is_symlink() and not is_dpaudit_output(old):
            raise OutputError(f"Cannot replace {target}: {old} is in the way and was not written by dpaudit (it holds "
                              f"no {OUTPUT_MARKER}); move it away first.")
    make_dirs(target.parent)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    except OSError as exc:
        raise _output_error(target, exc) from None
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700
    try:
        yield tmp
        write_output_marker(tmp, kind)
        if target.exists() or target.is_symlink():
            check_replaceable(target)   # again: it may have changed while the new one was built
            old = target.with_name(f".{target.name}.old")
            if old.is_symlink():
                old.unlink()            # the link itself, never what it points to
            elif old.exists():          # left by a replace that crashed: removed only when it is dpaudit's
                if not is_dpaudit_output(old):
                    raise OutputError(f"Cannot replace {target}: {old} is in the way and was not written by dpaudit "
                                      f"(it holds no {OUTPUT_MARKER}); move it away first.")
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
                     max_bytes: int | None = MAX_INPUT_BYTES, follow_symlinks: bool = True) -> Path:
    """Check ``path`` with ``stat`` (never ``open``: a FIFO would block) and return it.

    ``what`` names the file for the user ("the votes file"). Raises :class:`DataError` if it is missing, not a
    regular file (a directory, FIFO, socket or device such as ``/dev/null``), empty (unless ``allow_empty``),
    larger than ``max_bytes``, or unreadable; with ``follow_symlinks=False`` also if it is a symbolic link (the
    files of a release bundle).
    """
    p = Path(path)
    _stat_input(p, what, allow_empty=allow_empty, max_bytes=max_bytes, follow_symlinks=follow_symlinks)
    return p


def _stat_input(p: Path, what: str, *, allow_empty: bool, max_bytes: int | None,
                follow_symlinks: bool) -> os.stat_result:
    try:
        st = os.stat(p, follow_symlinks=follow_symlinks)
    except (FileNotFoundError, NotADirectoryError):
        raise DataError(f"{_cap(what)} {p} does not exist.") from None
    except (OSError, ValueError) as exc:
        raise DataError(f"{_cap(what)} {p} cannot be read: {getattr(exc, 'strerror', None) or exc}.") from None
    if stat.S_ISLNK(st.st_mode):
        raise DataError(f"{_cap(what)} {p} is a symbolic link; dpaudit does not follow links here.")
    if stat.S_ISDIR(st.st_mode):
        raise DataError(f"{_cap(what)} {p} is a directory, not a file.")
    if not stat.S_ISREG(st.st_mode):
        raise DataError(f"{_cap(what)} {p} is not a regular file (a FIFO, socket or device); refusing to read it.")
    if st.st_size == 0 and not allow_empty:
        raise DataError(f"{_cap(what)} {p} is empty.")
    if max_bytes is not None and st.st_size > max_bytes:
        raise DataError(f"{_cap(what)} {p} is {st.st_size} bytes; dpaudit reads at most {max_bytes} bytes here.")
    return st


@contextlib.contextmanager
def open_input(path: str | os.PathLike, what: str, *, allow_empty: bool = False,
               max_bytes: int | None = MAX_INPUT_BYTES, follow_symlinks: bool = True) -> Iterator[Any]:
    """A user's file opened once for reading, after the checks of :func:`check_input_file`: everything read from
    the yielded binary file object comes from the very file that was checked (a file swapped in between the check
    and the read -- a zip bomb for a checked archive, a link for a checked file -- is refused, never read).

    The file is ``stat``-ed first (never opened unless it is a regular file: opening a FIFO or a device can block or
    act), then opened without blocking (and without following a final symbolic link when ``follow_symlinks`` is
    false), and the open file must be the one that was checked (same device and inode, still a regular file)."""
    p = Path(path)
    st0 = _stat_input(p, what, allow_empty=allow_empty, max_bytes=max_bytes, follow_symlinks=follow_symlinks)
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(p, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise DataError(f"{_cap(what)} {p} is a symbolic link; dpaudit does not follow links here.") from None
        raise DataError(f"{_cap(what)} {p} cannot be read: {exc.strerror or exc}.") from None
    fh = None
    try:
        st = os.fstat(fd)
        # the same file: device and inode (and its change time: a new file may get a freed inode's number)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino, st.st_ctime_ns) != (st0.st_dev, st0.st_ino,
                                                                                     st0.st_ctime_ns):
            raise DataError(f"{_cap(what)} {p} changed while dpaudit opened it (another file took its place); "
                            "refusing to read it.")
        if max_bytes is not None and st.st_size > max_bytes:
            raise DataError(f"{_cap(what)} {p} is {st.st_size} bytes; dpaudit reads at most {max_bytes} bytes here.")
        fh = os.fdopen(fd, "rb")
        yield fh
    finally:
        if fh is not None:
            fh.close()
        else:
            os.close(fd)


def _read_all(fh: Any, p: Path, what: str, max_bytes: int | None) -> bytes:
    """The whole content of ``fh``, never more than ``max_bytes`` (a file that grew after its check is refused)."""
    chunks, total = [], 0
    try:
        while True:     # in pieces: one read(max_bytes) would reserve max_bytes before reading anything
            chunk = fh.read(1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if max_bytes is not None and total > max_bytes:
                raise DataError(f"{_cap(what)} {p} is larger than {max_bytes} bytes; dpaudit reads at most that here.")
    except OSError as exc:
        raise DataError(f"{_cap(what)} {p} cannot be read: {exc.strerror or exc}.") from None
    return b"".join(chunks)


def _cap(what: str) -> str:
    return what[:1].upper() + what[1:]


def read_input_bytes(path: str | os.PathLike, what: str, *, max_bytes: int | None = MAX_INPUT_BYTES,
                     follow_symlinks: bool = True, allow_empty: bool = False) -> bytes:
    """The bytes of a user's file, read once through :func:`open_input` (checked first, never more than
    ``max_bytes``); read errors become :class:`DataError`."""
    with open_input(path, what, max_bytes=max_bytes, follow_symlinks=follow_symlinks, allow_empty=allow_empty) as fh:
        return _read_all(fh, Path(path), what, max_bytes)


def read_input_text(path: str | os.PathLike, what: str, *, max_bytes: int | None = MAX_INPUT_BYTES,
                    follow_symlinks: bool = True) -> str:
    """A user's UTF-8 text file; a binary file gives a :class:`DataError` naming it."""
    raw = read_input_bytes(path, what, max_bytes=max_bytes, follow_symlinks=follow_symlinks)
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


def load_json_file(path: str | os.PathLike, what: str, *, max_bytes: int = MAX_JSON_BYTES,
                   follow_symlinks: bool = True) -> Any:
    """Parse a user's JSON file (strict about nesting depth and integer size, like :func:`load_toml_file`), of at
    most ``max_bytes`` (default :data:`MAX_JSON_BYTES`: parsing holds about 25 bytes of Python objects per byte
    of JSON, so the file cap bounds the memory)."""
    text = read_input_text(path, what, max_bytes=max_bytes, follow_symlinks=follow_symlinks)
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError, ValueError, OverflowError) as exc:
        raise _parse_error(what, path, "JSON", exc) from None


_NPY_MAGIC = b"\x93NUMPY"


def max_array_bytes() -> int:
    """The cap on what one array input may unpack to: ``$DPAUDIT_MAX_ARRAY_BYTES`` (a positive integer number of
    bytes) or :data:`DEFAULT_MAX_ARRAY_BYTES` (1 GiB)."""
    raw = os.environ.get(ARRAY_BYTES_ENV)
    if raw is None or not raw.strip():
        return DEFAULT_MAX_ARRAY_BYTES
    try:
        value = int(raw.strip())
    except ValueError:
        value = 0
    if value < 1:
        raise ParameterError(f"The environment variable {ARRAY_BYTES_ENV} must be a positive integer number of bytes "
                             f"(default {DEFAULT_MAX_ARRAY_BYTES}). Got {raw[:40]!r} instead.")
    return value


def _array_cap(max_bytes: int | None) -> int:
    cap = max_array_bytes()
    return cap if max_bytes is None else min(int(max_bytes), cap)


def _array_limit(what: str, p: Path, cap: int) -> None:
    raise DataError(f"{_cap(what)} {p} is larger than {cap} bytes; dpaudit reads at most {cap} here (set "
                    f"{ARRAY_BYTES_ENV} to raise the limit).")


@contextlib.contextmanager
def _open_array_file(path: str | os.PathLike, what: str, cap: int, follow_symlinks: bool) -> Iterator[Any]:
    p = Path(path)
    st = _stat_input(p, what, allow_empty=False, max_bytes=None, follow_symlinks=follow_symlinks)
    if st.st_size > cap:
        _array_limit(what, p, cap)
    with open_input(p, what, max_bytes=cap, follow_symlinks=follow_symlinks) as fh:
        yield fh


def _zip_members(zf: zipfile.ZipFile, p: Path, what: str, cap: int) -> list[zipfile.ZipInfo]:
    infos = zf.infolist()
    if len(infos) > MAX_ZIP_MEMBERS:
        raise DataError(f"{_cap(what)} {p} holds {len(infos)} members; dpaudit reads at most {MAX_ZIP_MEMBERS}.")
    total = sum(i.file_size for i in infos)
    if total > cap:
        raise DataError(f"{_cap(what)} {p} would unpack to {total} bytes; dpaudit reads at most {cap} here "
                        f"(set {ARRAY_BYTES_ENV} to raise the limit).")
    return infos


_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, ValueError, OSError, EOFError, KeyError,
               NotImplementedError, RuntimeError)


def check_zip_archive(path: str | os.PathLike, what: str, *, max_bytes: int | None = None,
                      kind: str = "zip archive", follow_symlinks: bool = True) -> list[zipfile.ZipInfo]:
    """Read only the zip directory of ``path`` and refuse it before anything is unpacked when it holds more than
    :data:`MAX_ZIP_MEMBERS` members or its members would unpack to more than ``max_bytes`` (default and upper
    bound: :func:`max_array_bytes`). Returns the members. (Reading a member never yields more than the size its
    directory entry states, so these sizes bound every later allocation.) A reader that goes on to unpack the
    archive should use :func:`read_zip_archive`, which checks and reads one open file."""
    cap = _array_cap(max_bytes)
    p = Path(path)
    with _open_array_file(p, what, cap, follow_symlinks) as fh:
        try:
            with zipfile.ZipFile(fh) as zf:
                return _zip_members(zf, p, what, cap)
        except DataError:
            raise
        except _ZIP_ERRORS as exc:
            raise DataError(f"{_cap(what)} {p} is not a readable {kind} (truncated or corrupt? {str(exc)[:200]}).") from None


def read_zip_archive(path: str | os.PathLike, what: str, *, max_bytes: int | None = None, kind: str = "zip archive",
                     follow_symlinks: bool = True) -> bytes:
    """The bytes of a zip archive (``.skops``), read once, whose directory passed :func:`check_zip_archive`'s
    checks: at most ``max_bytes`` on disk and unpacked (default and upper bound: :func:`max_array_bytes`)."""
    import io

    cap = _array_cap(max_bytes)
    p = Path(path)
    with _open_array_file(p, what, cap, follow_symlinks) as fh:
        data = _read_all(fh, p, what, cap)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            _zip_members(zf, p, what, cap)
    except DataError:
        raise
    except _ZIP_ERRORS as exc:
        raise DataError(f"{_cap(what)} {p} is not a readable {kind} (truncated or corrupt? {str(exc)[:200]}).") from None
    return data


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
        raise DataError(f"{_cap(what)} {where} is not a plain numeric array: it holds Python objects (dtype {dtype}), "
                        "which only pickle can load, and dpaudit never unpickles user files.")
    count = math.prod(int(s) for s in shape)
    return tuple(int(s) for s in shape), dtype, count * dtype.itemsize


def read_npy_header(fh: Any, what: str, where: str) -> tuple[tuple[int, ...], np.dtype, int]:
    """``(shape, dtype, data bytes)`` of the ``.npy`` header at the position of ``fh`` (a :class:`DataError` naming
    ``where`` when unreadable or of an object dtype, which only pickle can load)."""
    return _npy_header(fh, what, where)


def _check_kind(dtype: np.dtype, kinds: str | None, what: str, where: str) -> None:
    if kinds is not None and dtype.kind not in kinds:
        raise DataError(f"{_cap(what)} {where} must hold numbers. Got dtype {dtype} instead.")


def load_npy_file(path: str | os.PathLike, what: str, *, kinds: str | None = "biuf",
                  max_bytes: int | None = None, follow_symlinks: bool = True) -> np.ndarray:
    """Load a plain ``.npy`` array without pickle, checking its header against the file size before allocating.

    ``kinds`` restricts the dtype kinds (numpy's ``dtype.kind``; default: bool, ints, floats). An ``.npz``
    archive under a ``.npy`` name, a truncated file or a header promising more data than the file has are
    refused with a :class:`DataError` naming the file. ``max_bytes``: the largest file read (default and upper
    bound: :func:`max_array_bytes`). The file is opened once (:func:`open_input`): the header checked is the one
    of the data read. ``follow_symlinks=False``: a symbolic link is refused (a release bundle's files).
    """
    p = Path(path)
    try:
        with _open_array_file(p, what, _array_cap(max_bytes), follow_symlinks) as fh:
            size = os.fstat(fh.fileno()).st_size
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
                  max_bytes: int | None = None, follow_symlinks: bool = True) -> dict[str, np.ndarray]:
    """Load every array of an ``.npz`` archive without pickle: the one loader of every npz dpaudit reads.

    Before reading any data the zip directory is checked (as :func:`check_zip_archive` does): the members together
    must unpack to at most ``max_bytes`` (default and upper bound: :func:`max_array_bytes`, 1 GiB unless
    ``$DPAUDIT_MAX_ARRAY_BYTES`` says otherwise), so a zip bomb is refused, not unpacked; then every member must be
    an ``.npy`` whose header's size matches the member's recorded size and whose dtype is of ``kinds`` (numpy's
    ``dtype.kind`` letters; None: any but objects). The file is opened once (:func:`open_input`), so the archive
    unpacked is the one whose directory was checked. ``follow_symlinks=False``: a symbolic link is refused.
    """
    cap = _array_cap(max_bytes)
    p = Path(path)
    try:
        with _open_array_file(p, what, cap, follow_symlinks) as fh:
            with zipfile.ZipFile(fh) as zf:
                infos = _zip_members(zf, p, what, cap)
                for info in infos:
                    if not info.filename.endswith(".npy") or info.is_dir():
                        raise DataError(f"{_cap(what)} {p} holds {info.filename!r}, which is not an .npy array.")
                    with zf.open(info) as mh:
                        where = f"{p}[{info.filename[:-4]}]"
                        _shape, dtype, nbytes = _npy_header(mh, what, where)
                        _check_kind(dtype, kinds, what, where)
                        if nbytes != info.file_size - mh.tell():
                            raise DataError(f"{_cap(what)} {where}: its header promises {nbytes} bytes of data, "
                                            f"the archive holds {info.file_size - mh.tell()}; corrupt.")
            fh.seek(0)
            out: dict[str, np.ndarray] = {}
            with np.load(fh, allow_pickle=False) as z:
                for k in z.files:
                    out[k] = z[k]
            return out
    except DataError:
        raise
    except _ZIP_ERRORS as exc:
        raise DataError(f"{_cap(what)} {p} is not a readable .npz archive (truncated or corrupt? {str(exc)[:200]}).") from None


# --------------------------------------------------------------------------------------------------
# One writer per output directory
# --------------------------------------------------------------------------------------------------


_LOCK_NAME = ".dpaudit.lock"
_LOCK_TEXT = re.compile(rb"[ -~]{1,160} \(pid [0-9]{1,10}\)\n?")


def _lock_refused(lock: Path, why: str) -> OutputError:
    return OutputError(f"The lock file {lock} {why}; dpaudit never follows, truncates or writes into a file it did "
                       "not make. Remove it, or choose another --out.")


@contextlib.contextmanager
def exclusive_lock(directory: str | os.PathLike, what: str = "dpaudit", *,
                   lock_file: str | os.PathLike | None = None) -> Iterator[Path]:
    """Hold an exclusive ``fcntl.flock`` on ``directory/.dpaudit.lock`` while the body runs.

    A second process asking for the same directory gets a :class:`DataError` at once (it does not wait) naming
    the process that holds it. The lock dies with its process (SIGKILL included), so a stale lock file never
    blocks the next run. ``lock_file``: lock this file instead (its folder is created, ``directory`` is not),
    for a directory that must not exist before the run ends (a release is written atomically as a whole).

    The lock file is opened with ``O_NOFOLLOW`` and without ``O_TRUNC``: a symbolic link planted in its place is
    refused (never followed), and so is anything that is not a regular file of one link holding nothing or a
    lock line of dpaudit's -- a foreign file is never truncated or written.
    """
    import fcntl

    d = Path(directory)
    if lock_file is None:
        lock = make_dirs(directory) / _LOCK_NAME
    else:
        lock = Path(lock_file)
        make_dirs(lock.parent)
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(lock, flags, 0o666 & ~_umask())
    except OSError as exc:
        if exc.errno == errno.ELOOP or lock.is_symlink():
            raise _lock_refused(lock, "is a symbolic link") from None
        raise _output_error(lock, exc) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _lock_refused(lock, "is not a regular file")
        if st.st_nlink != 1:
            raise _lock_refused(lock, f"has {st.st_nlink} hard links (another name points at the same file)")
        if st.st_size:
            head = os.pread(fd, 200, 0)
            if st.st_size > 200 or not _LOCK_TEXT.fullmatch(head):
                raise _lock_refused(lock, "exists and is not a dpaudit lock file")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "another process"
            except OSError:
                holder = "another process"
            raise DataError(f"{d} is in use by {holder}; wait for it to finish or choose another --out.") from None
        os.ftruncate(fd, 0)   # ours: empty, or a dpaudit lock line (checked above)
        text = " ".join(f"{what}".split())[:120].encode("ascii", "replace")
        os.pwrite(fd, text + f" (pid {os.getpid()})\n".encode(), 0)
        yield lock
    finally:
        os.close(fd)  # releases the lock


# --------------------------------------------------------------------------------------------------
# Output folders: dpaudit's marker, and what --overwrite may replace
# --------------------------------------------------------------------------------------------------

#: The marker file dpaudit writes into every output folder it creates (release bundles, attack, audit and
#: checkpoint folders): ``{"schema": "dpaudit-output", "version": 1, "kind": ...}``. ``--overwrite`` replaces
#: only a folder that holds it.
OUTPUT_MARKER = ".dpaudit-output.json"
_MARKER_SCHEMA = "dpaudit-output"


def write_output_marker(directory: str | os.PathLike, kind: str) -> Path:
    """Write dpaudit's marker into ``directory`` (deterministic content: no time, no host)."""
    return write_json(Path(directory) / OUTPUT_MARKER, {"schema": _MARKER_SCHEMA, "version": 1, "kind": str(kind)})


def _small_json(path: Path) -> Any:
    try:
        if path.is_symlink() or not path.is_file():
            return None
        return json.loads(read_input_bytes(path, "the marker", max_bytes=64 << 20, follow_symlinks=False).decode("utf-8"))
    except (OSError, ValueError, RecursionError, DataError):
        return None


def is_dpaudit_output(directory: str | os.PathLike) -> bool:
    """Whether ``directory`` is a folder dpaudit wrote: it holds dpaudit's marker (:data:`OUTPUT_MARKER`), or --
    for bundles written before the marker existed -- a ``release.json`` whose ``created_by`` names dpaudit."""
    d = Path(directory)
    if d.is_symlink() or not d.is_dir():
        return False
    marker = _small_json(d / OUTPUT_MARKER)
    if isinstance(marker, dict) and marker.get("schema") == _MARKER_SCHEMA:
        return True
    meta = _small_json(d / "release.json")
    return isinstance(meta, dict) and str(meta.get("created_by", "")).startswith("dpaudit ")


def _protected(p: Path) -> str | None:
    """Why ``p`` may never be replaced (None: it may, as far as its place goes)."""
    if p.name in (".", "..") or str(p) in (".", "..", ""):
        return f"{str(p)!r}"
    real = p.resolve()
    if real == Path(real.anchor):
        return "the root folder"
    try:
        home = Path.home().resolve()
    except (RuntimeError, KeyError, OSError):
        home = None
    if home is not None and real == home:
        return "your home folder"
    cwd = Path.cwd().resolve()
    if real == cwd:
        return "the current folder"
    if real in cwd.parents:
        return "a folder above the current one"
    return None


def check_replaceable(target: str | os.PathLike, what: str = "--out") -> None:
    """Refuse (one :class:`OutputError`) to replace ``target`` unless it is a folder dpaudit wrote
    (:func:`is_dpaudit_output`) and not ``.``, ``..``, ``/``, the home folder, the current folder or a folder
    above it, and not a symbolic link."""
    p = Path(target)
    why = _protected(p)
    if why is not None:
        raise OutputError(f"{what} {p} is {why}; --overwrite never replaces '.', '..', '/', your home folder, the "
                          "current folder or a folder above it. Choose a new folder.")
    if p.is_symlink():
        raise OutputError(f"{what} {p} is a symbolic link; --overwrite replaces only a folder dpaudit wrote, never "
                          "a link. Remove the link or choose another folder.")
    if not p.is_dir():
        raise OutputError(f"{what} {p} is a file, not a folder dpaudit wrote; --overwrite will not replace it.")
    if not is_dpaudit_output(p):
        raise OutputError(f"{what} {p} was not written by dpaudit (it holds no {OUTPUT_MARKER}); --overwrite replaces "
                          "only dpaudit's own output folders. Remove it yourself or choose another folder.")


def check_output_folder(directory: str | os.PathLike, what: str = "--out") -> Path:
    """The output folder ``directory``, refused (one :class:`OutputError`, before any work) when it is a symbolic
    link -- dpaudit writes into a folder itself, never into the folder a link points to -- or a file; every command
    that writes a folder applies this rule (``make_output_dir``, ``atomic_dir`` and ``check_replaceable`` do)."""
    p = Path(directory)
    if p.is_symlink():
        raise OutputError(f"{what} {p} is a symbolic link; dpaudit writes only into a folder itself, never through a "
                          "link. Remove the link or choose another folder.")
    if p.exists() and not p.is_dir():
        raise OutputError(f"Cannot write {p} ({what}): it is a file, not a folder.")
    return p


def make_output_dir(directory: str | os.PathLike, kind: str) -> Path:
    """Create the output folder ``directory`` (``mkdir -p``) and mark it as dpaudit's when it is new or empty
    (an existing folder with other content is never marked, so ``--overwrite`` can never later remove it)."""
    p = Path(directory)
    if p.is_symlink():
        raise OutputError(f"The output folder {p} is a symbolic link; dpaudit writes only into a folder itself.")
    if p.exists() and not p.is_dir():
        raise OutputError(f"Cannot write {p}: it is a file, not a folder.")
    make_dirs(p)
    try:
        with os.scandir(p) as it:
            names = {e.name for _, e in zip(range(8), it)}
    except OSError as exc:
        raise _output_error(p, exc) from None
    if not (names - {_LOCK_NAME, OUTPUT_MARKER}) and not is_dpaudit_output(p):
        write_output_marker(p, kind)
    return p


def parse_toml_value(text: str) -> Any:
    """A TOML value written on a command line (``0.1``, ``true``, ``[1, 2]``, ``"x"``); a bare word is a string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except (tomllib.TOMLDecodeError, RecursionError, ValueError, OverflowError):
        return text


def read_toml(path: str | os.PathLike, what: str = "config file") -> dict:
    """Parse the TOML file ``path``: :func:`load_toml_file` with ``what`` the kind of file ("config file")."""
    return load_toml_file(path, f"the {what}")

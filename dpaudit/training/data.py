"""Offline data sets and the standard train / public / test / attacker split.

Nothing here downloads. Two kinds of source:

* data sets that ship inside installed packages -- scikit-learn's ``load_digits`` (8x8 images, 10
  classes, the default image task) and ``load_breast_cancer`` (30 tabular features, binary); the
  ``mnist1d`` package's *procedural generator* (``mnist1d.data.make_dataset``; its download path is never
  called); and seeded synthetic tabular data (``make_classification``) standing in for Adult / cod-rna;
* loaders for real files a user already has under ``data_dir``: MNIST / Fashion-MNIST IDX files (gzip or
  not), CIFAR-10 "python version" batches, SVHN ``.mat`` files and the UCI Adult CSV files.

CIFAR-10's python batches are pickles. dpaudit never unpickles a user's file, because unpickling runs
arbitrary code. :func:`_read_cifar_batch` instead *parses* the pickle opcode stream with
:mod:`pickletools` (which only decodes opcodes, it never executes them) and interprets a small, closed
subset of opcodes into plain Python values: dicts, lists, tuples, strings, bytes, ints. The only globals
it accepts are the handful numpy uses to describe an array (``_reconstruct``, ``ndarray``, ``dtype``) and
``_codecs.encode`` (how Python 3 writes ``bytes`` at protocol 2); none of them is ever *called* -- a
``REDUCE`` just records "global applied to args", and the final structure must match the official
layout exactly (``{b'data': uint8 array (n, 3072), b'labels': [int] * n, ...}``) or the file is refused
with a :class:`DataError`.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import pickletools
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from dpaudit._io import check_input_file, read_input_bytes
from dpaudit.errors import DataError, ParameterError, check_choice, check_float, check_int

__all__ = ["Dataset", "Splits", "DATASETS", "load_dataset", "split_dataset"]

DATASETS: tuple[str, ...] = (
    "digits",
    "breast_cancer",
    "mnist1d",
    "synthetic",
    "mnist",
    "fashion_mnist",
    "cifar10",
    "svhn",
    "adult",
    "svhn_extra",
    "adult_a9a",
    "cifar100",
    "cod_rna",
)


@dataclass(frozen=True, eq=False)
class Dataset:
    """A labelled data set held in memory.

    Attributes
    ----------
    name : str
        Registry name (one of :data:`DATASETS`, or a derived name for subsets).
    X : ndarray of float32, shape (n, *input_shape)
        Features; images are channels-first, e.g. ``(n, 1, 8, 8)``; 1-D signals ``(n, 1, L)``; tabular ``(n, d)``.
    y : ndarray of int64, shape (n,)
        Labels in ``[0, num_classes)``.
    num_classes : int
    input_shape : tuple of int
    """

    name: str
    X: np.ndarray
    y: np.ndarray
    num_classes: int
    input_shape: tuple[int, ...]

    def __post_init__(self) -> None:
        X = np.ascontiguousarray(self.X, dtype=np.float32)
        y = np.ascontiguousarray(self.y, dtype=np.int64)
        if X.ndim < 2 or X.shape[0] != y.shape[0] or y.ndim != 1:
            raise DataError(f"Dataset {self.name!r}: X has shape {X.shape} but y has shape {y.shape}.")
        if tuple(X.shape[1:]) != tuple(self.input_shape):
            raise DataError(f"Dataset {self.name!r}: X rows have shape {X.shape[1:]}, expected {self.input_shape}.")
        if y.size and (y.min() < 0 or y.max() >= self.num_classes):
            raise DataError(f"Dataset {self.name!r}: labels must lie in [0, {self.num_classes}).")
        object.__setattr__(self, "X", X)
        object.__setattr__(self, "y", y)
        object.__setattr__(self, "input_shape", tuple(int(s) for s in self.input_shape))

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def subset(self, idx) -> "Dataset":
        """The records at integer indices ``idx`` (order kept)."""
        idx = np.asarray(idx, dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= len(self)):
            raise DataError(f"Dataset {self.name!r}: subset indices must lie in [0, {len(self)}).")
        return Dataset(self.name, self.X[idx], self.y[idx], self.num_classes, self.input_shape)


@dataclass(frozen=True, eq=False)
class Splits:
    """Disjoint index arrays into one :class:`Dataset`, drawn from a seed.

    ``train`` is the private training data (the member pool); ``public`` the unlabelled query pool for
    knowledge transfer; ``test`` the evaluation set; ``attacker`` the attacker's own data from the same
    distribution (for shadow models), disjoint from ``train``.
    """

    train: np.ndarray
    public: np.ndarray
    test: np.ndarray
    attacker: np.ndarray

    def to_dict(self) -> dict:
        return {k: getattr(self, k).tolist() for k in ("train", "public", "test", "attacker")}

    @classmethod
    def from_dict(cls, d: dict) -> "Splits":
        return cls(**{k: np.asarray(d[k], dtype=np.int64) for k in ("train", "public", "test", "attacker")})


# --------------------------------------------------------------------------------------------------
# registry


def load_dataset(name: str, *, data_dir=None, seed: int = 0, num_samples: int | None = None) -> Dataset:
    """Load data set ``name`` without any network access.

    Parameters
    ----------
    name : str
        One of :data:`DATASETS`.
    data_dir : path, optional
        Directory holding the files of the real data sets (``mnist``, ``fashion_mnist``, ``cifar10``,
        ``svhn``, ``adult``); the files may also sit in a sub-directory named after the data set.
    seed : int
        Seed of the generators (``mnist1d``, ``synthetic``) and of the subsample drawn when
        ``num_samples`` is smaller than the data set.
    num_samples : int, optional
        For generated data sets, how many records to generate (defaults: mnist1d 5000, synthetic 5000);
        for the others, a seeded random subset of this size (``None`` keeps everything).
    """
    check_choice(name, "name", "load_dataset", DATASETS)
    seed = check_int(seed, "seed", "load_dataset", low=0, high=2**63 - 1)
    if num_samples is not None:
        num_samples = check_int(num_samples, "num_samples", "load_dataset", low=1, high=100_000_000)
    if name == "mnist1d":
        ds = _load_mnist1d(seed, num_samples or 5000)
    elif name == "synthetic":
        ds = _load_synthetic(seed, num_samples or 5000)
    else:
        if name == "digits":
            ds = _load_digits()
        elif name == "breast_cancer":
            ds = _load_breast_cancer()
        else:
            if data_dir is None:
                raise DataError(
                    f"Data set {name!r} is read from files on disk; pass data_dir (--data-dir) pointing to the "
                    f"directory that holds {_expected_files(name)}."
                )
            ds = _FILE_LOADERS[name](Path(data_dir))
        if num_samples is not None and num_samples < len(ds):
            rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5AB5]))
            ds = ds.subset(np.sort(rng.choice(len(ds), size=num_samples, replace=False)))
    return ds


def split_dataset(
    ds: Dataset,
    *,
    seed: int,
    public_fraction: float = 0.2,
    test_fraction: float = 0.2,
    attacker_fraction: float = 0.2,
) -> Splits:
    """Split ``ds`` into disjoint train / public / test / attacker index arrays.

    A seeded permutation of ``range(len(ds))`` is cut into consecutive blocks of sizes
    ``floor(f * n)`` for public, test and attacker; the rest is ``train``. Each array is sorted.
    """
    owner = "split_dataset"
    seed = check_int(seed, "seed", owner, low=0)
    fr = [
        check_float(public_fraction, "public_fraction", owner, low=0.0, high=1.0, high_open=True),
        check_float(test_fraction, "test_fraction", owner, low=0.0, high=1.0, high_open=True),
        check_float(attacker_fraction, "attacker_fraction", owner, low=0.0, high=1.0, high_open=True),
    ]
    if sum(fr) >= 1.0:
        raise ParameterError(
            f"The fractions of split_dataset must sum to less than 1 (the rest is train data). Got {sum(fr)!r} instead."
        )
    n = len(ds)
    perm = np.random.default_rng(np.random.SeedSequence([seed, 0x5917])).permutation(n)
    sizes = [int(np.floor(f * n)) for f in fr]
    cuts = np.cumsum([0] + sizes)
    public, test, attacker = (np.sort(perm[cuts[k] : cuts[k + 1]]) for k in range(3))
    train = np.sort(perm[cuts[3] :])
    if train.size == 0:
        raise DataError(f"split_dataset left no training records out of {n}.")
    return Splits(train=train.astype(np.int64), public=public.astype(np.int64), test=test.astype(np.int64),
                  attacker=attacker.astype(np.int64))


# --------------------------------------------------------------------------------------------------
# embedded / generated data sets


_EMBEDDED: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # scikit-learn's parsed files, once per process


def _embedded(name: str, load) -> tuple[np.ndarray, np.ndarray]:
    """``(data, target)`` of a scikit-learn bundled data set, parsed once per process (an audit loads digits in
    every stage: releases, attacks, canary and method audits); callers get copies."""
    if name not in _EMBEDDED:
        d = load()
        _EMBEDDED[name] = (np.array(d.data), np.array(d.target))
    data, target = _EMBEDDED[name]
    return data.copy(), target.copy()


def _load_digits() -> Dataset:
    from sklearn.datasets import load_digits

    data, target = _embedded("digits", load_digits)
    X = (data.astype(np.float32) / 16.0).reshape(-1, 1, 8, 8)  # pixel values are integers 0..16
    return Dataset("digits", X, target.astype(np.int64), 10, (1, 8, 8))


def _standardise(X: np.ndarray) -> np.ndarray:
    mu = X.mean(axis=0)
    sd = X.std(axis=0)
    sd[sd == 0] = 1.0
    return ((X - mu) / sd).astype(np.float32)


def _load_breast_cancer() -> Dataset:
    from sklearn.datasets import load_breast_cancer

    data, target = _embedded("breast_cancer", load_breast_cancer)
    X = _standardise(data.astype(np.float64))
    return Dataset("breast_cancer", X, target.astype(np.int64), 2, (X.shape[1],))


def _load_mnist1d(seed: int, num_samples: int) -> Dataset:
    # make_dataset seeds numpy's *global* RNG (mnist1d.utils.set_seed); keep the caller's state intact.
    import random

    from mnist1d.data import get_dataset_args, make_dataset

    if num_samples < 10:
        raise ParameterError(f"The 'num_samples' parameter of load_dataset('mnist1d') must be an int >= 10. Got {num_samples} instead.")
    args = get_dataset_args(as_dict=False)
    args.num_samples = int(num_samples)
    args.seed = int(seed)
    args.train_split = 1.0  # we split ourselves (split_dataset)
    np_state, py_state = np.random.get_state(), random.getstate()
    try:
        out = make_dataset(args)
    finally:
        np.random.set_state(np_state)
        random.setstate(py_state)
    X = np.asarray(out["x"], dtype=np.float32)
    y = np.asarray(out["y"], dtype=np.int64)
    L = X.shape[1]
    return Dataset("mnist1d", X.reshape(-1, 1, L), y, 10, (1, L))


def _load_synthetic(seed: int, num_samples: int) -> Dataset:
    from sklearn.datasets import make_classification

    X, y = make_classification(
        n_samples=num_samples, n_features=20, n_informative=10, n_redundant=4, n_classes=2,
        flip_y=0.02, class_sep=1.0, random_state=seed,
    )
    return Dataset("synthetic", _standardise(X), y.astype(np.int64), 2, (20,))


# --------------------------------------------------------------------------------------------------
# real files


_IDX_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
_CIFAR_FILES = [f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"]
_SVHN_FILES = ["train_32x32.mat", "test_32x32.mat"]
_ADULT_FILES = ["adult.data", "adult.test"]
_SVHN_EXTRA_FILES = _SVHN_FILES + ["extra_32x32.mat"]
_A9A_FILES = ["a9a", "a9a.t"]            # LIBSVM binary data sets page: Adult preprocessed to 123 binary features
_CIFAR100_FILES = ["train", "test"]      # cifar-100-python
_CODRNA_FILES = ["cod-rna", "cod-rna.t"]  # LIBSVM binary data sets page: 8 features
_SUBDIRS = {
    "mnist": ["mnist", "MNIST", "MNIST/raw"],
    "fashion_mnist": ["fashion_mnist", "fashion-mnist", "FashionMNIST", "FashionMNIST/raw"],
    "cifar10": ["cifar-10-batches-py", "cifar10"],
    "svhn": ["svhn", "SVHN"],
    "adult": ["adult"],
    "svhn_extra": ["svhn", "SVHN"],
    "adult_a9a": ["a9a", "adult"],
    "cifar100": ["cifar-100-python", "cifar100"],
    "cod_rna": ["cod-rna", "cod_rna"],
}


def _expected_files(name: str) -> str:
    files = {
        "mnist": list(_IDX_FILES.values()),
        "fashion_mnist": list(_IDX_FILES.values()),
        "cifar10": _CIFAR_FILES,
        "svhn": _SVHN_FILES,
        "adult": _ADULT_FILES,
        "svhn_extra": _SVHN_EXTRA_FILES,
        "adult_a9a": _A9A_FILES,
        "cifar100": _CIFAR100_FILES,
        "cod_rna": _CODRNA_FILES,
    }[name]
    return ", ".join(files)


def _find(data_dir: Path, name: str, filename: str, *, gz: bool = False, required: bool = True) -> Path | None:
    dirs = [data_dir] + [data_dir / s for s in _SUBDIRS[name]]
    names = [filename] + ([filename + ".gz"] if gz else [])
    for d in dirs:
        for f in names:
            if (d / f).is_file():
                return d / f
    if required:
        where = " or ".join(str(d) for d in dirs[:2])
        raise DataError(
            f"Data set {name!r}: expected file {filename}{' (or .gz)' if gz else ''} in {where}; not found. "
            f"The {name} loader needs: {_expected_files(name)}."
        )
    return None


#: The largest decompressed data file the loaders accept (a gzip bomb is refused, not unpacked).
MAX_DATA_FILE_BYTES = 4 << 30


def _decoded_cap(path: Path, what: str, count: int, itemsize: int = 4) -> None:
    """Refuse a data file whose records would take more than :func:`dpaudit._io.max_array_bytes` as the arrays
    dpaudit builds from them (``count`` values of ``itemsize`` bytes): checked from its header or line count,
    before the data is unpacked or parsed."""
    from dpaudit._io import ARRAY_BYTES_ENV, max_array_bytes

    cap = max_array_bytes()
    if count * itemsize > cap:
        raise DataError(f"{path}: its {what} would take {count * itemsize} bytes in memory; dpaudit reads at most {cap} "
                        f"here (set {ARRAY_BYTES_ENV} to raise the limit).")


def _read_maybe_gz(path: Path, header: Any = None) -> bytes:
    """The (gunzipped) bytes of a data file. ``header(first_bytes) -> None`` checks the start of the unpacked data
    before the rest is unpacked (a gzip bomb is refused from the sizes its header promises)."""
    raw = read_input_bytes(path, "the data file", max_bytes=MAX_DATA_FILE_BYTES)
    if raw[:2] == b"\x1f\x8b":
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as gz:
                head = gz.read(64)
                if header is not None:
                    header(head)
                out = head + gz.read(MAX_DATA_FILE_BYTES + 1 - len(head))
        except (OSError, EOFError, zlib.error) as exc:
            raise DataError(f"{path}: corrupt gzip data ({exc}).") from None
        if len(out) > MAX_DATA_FILE_BYTES:
            raise DataError(f"{path}: unpacks to more than {MAX_DATA_FILE_BYTES} bytes; refusing it.")
        return out
    if header is not None:
        header(raw[:64])
    return raw


def _idx_header(raw: bytes, path: Path, expect_ndim: int) -> tuple[np.dtype, tuple[int, ...]]:
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise DataError(f"{path}: not an IDX file (bad magic number).")
    code, ndim = raw[2], raw[3]
    dtypes = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
    if code not in dtypes or ndim != expect_ndim:
        raise DataError(f"{path}: IDX type 0x{code:02x} with {ndim} dimensions; expected {expect_ndim} dimensions.")
    if len(raw) < 4 + 4 * ndim:
        raise DataError(f"{path}: IDX header is truncated.")
    dims = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    # the records become float32 (images) / int64 (labels): at most the array cap, checked before unpacking
    _decoded_cap(path, "records", math.prod(dims), 8)
    return np.dtype(dtypes[code]), dims


def _read_idx(path: Path, expect_ndim: int) -> np.ndarray:
    """Parse an IDX file (LeCun's MNIST format): magic 0x0000 | dtype code | ndim, big-endian dims, data."""
    raw = _read_maybe_gz(path, header=lambda head: _idx_header(head, path, expect_ndim))
    dt, dims = _idx_header(raw, path, expect_ndim)
    body = raw[4 + 4 * len(dims) :]
    need = math.prod(dims) * dt.itemsize  # Python ints: no overflow for a header that lies
    if len(body) != need:
        raise DataError(f"{path}: IDX header promises {need} bytes of data, file has {len(body)}.")
    return np.frombuffer(body, dtype=dt).reshape(dims)


def _load_idx_pair(data_dir: Path, name: str) -> Dataset:
    Xs, ys = [], []
    for part in ("train", "test"):
        img = _read_idx(_find(data_dir, name, _IDX_FILES[f"{part}_images"], gz=True), 3)
        lab = _read_idx(_find(data_dir, name, _IDX_FILES[f"{part}_labels"], gz=True), 1)
        if img.shape[0] != lab.shape[0]:
            raise DataError(f"Data set {name!r}: {part} images ({img.shape[0]}) and labels ({lab.shape[0]}) differ in count.")
        Xs.append(img)
        ys.append(lab)
    X = np.concatenate(Xs).astype(np.float32) / 255.0
    y = np.concatenate(ys).astype(np.int64)
    h, w = X.shape[1:]
    if y.min() < 0 or y.max() > 9:
        raise DataError(f"Data set {name!r}: labels outside 0..9.")
    return Dataset(name, X.reshape(-1, 1, h, w), y, 10, (1, h, w))


def _load_mnist(data_dir: Path) -> Dataset:
    return _load_idx_pair(data_dir, "mnist")


def _load_fashion(data_dir: Path) -> Dataset:
    return _load_idx_pair(data_dir, "fashion_mnist")


# ---- CIFAR-10: a restricted pickle *parser* (never pickle.load) ----------------------------------


@dataclass(frozen=True)
class _Global:
    module: str
    name: str


@dataclass
class _Reduce:
    func: Any
    args: Any
    state: Any = None


_ALLOWED_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
}

_MARK = object()


def _parse_restricted_pickle(raw: bytes, where: str) -> Any:
    """Interpret a pickle opcode stream into plain values without executing anything.

    Supports protocol 0-4 opcodes for dicts, lists, tuples, str/bytes, ints, floats, bools, None, the memo,
    and GLOBAL/STACK_GLOBAL + REDUCE/NEWOBJ + BUILD restricted to :data:`_ALLOWED_GLOBALS` (recorded as
    :class:`_Reduce` nodes, never called). Anything else raises :class:`DataError`.
    """
    stack: list[Any] = []
    memo: dict[int, Any] = {}

    def pop_mark() -> list:
        for k in range(len(stack) - 1, -1, -1):
            if stack[k] is _MARK:
                items = stack[k + 1 :]
                del stack[k:]
                return items
        raise DataError(f"{where}: malformed pickle (no MARK).")

    try:
        ops = pickletools.genops(raw)
        for op, arg, _pos in ops:
            n = op.name
            if n in ("PROTO", "FRAME"):
                continue
            elif n == "STOP":
                if len(stack) != 1:
                    raise DataError(f"{where}: malformed pickle (stack of {len(stack)} at STOP).")
                return stack[0]
            elif n == "MARK":
                stack.append(_MARK)
            elif n in ("EMPTY_DICT",):
                stack.append({})
            elif n == "DICT":
                items = pop_mark()
                stack.append(dict(zip(items[::2], items[1::2])))
            elif n in ("EMPTY_LIST",):
                stack.append([])
            elif n == "LIST":
                stack.append(pop_mark())
            elif n == "EMPTY_TUPLE":
                stack.append(())
            elif n == "TUPLE":
                stack.append(tuple(pop_mark()))
            elif n in ("TUPLE1", "TUPLE2", "TUPLE3"):
                k = int(n[-1])
                items = stack[-k:]
                del stack[-k:]
                stack.append(tuple(items))
            elif n in ("SETITEM", "SETITEMS"):
                items = stack[-2:] if n == "SETITEM" else pop_mark()
                if n == "SETITEM":
                    del stack[-2:]
                d = stack[-1]
                if not isinstance(d, dict):
                    raise DataError(f"{where}: malformed pickle (SETITEM on a non-dict).")
                for k in range(0, len(items), 2):
                    key = items[k]
                    if not isinstance(key, (str, bytes, int)):
                        raise DataError(f"{where}: unexpected dict key type {type(key).__name__}.")
                    d[key] = items[k + 1]
            elif n in ("APPEND", "APPENDS"):
                items = [stack.pop()] if n == "APPEND" else pop_mark()
                lst = stack[-1]
                if not isinstance(lst, list):
                    raise DataError(f"{where}: malformed pickle (APPEND on a non-list).")
                lst.extend(items)
            elif n in ("BININT", "BININT1", "BININT2", "LONG1", "LONG4", "INT", "LONG"):
                stack.append(int(arg) if not isinstance(arg, bool) else arg)
            elif n in ("BINFLOAT", "FLOAT"):
                stack.append(float(arg))
            elif n in ("NEWTRUE", "NEWFALSE"):
                stack.append(n == "NEWTRUE")
            elif n == "NONE":
                stack.append(None)
            elif n in ("SHORT_BINSTRING", "BINSTRING", "STRING"):
                # Python 2 ``str``: raw bytes (pickletools hands them back decoded as latin-1).
                stack.append(arg.encode("latin-1") if isinstance(arg, str) else bytes(arg))
            elif n in ("SHORT_BINBYTES", "BINBYTES", "BINBYTES8"):
                stack.append(bytes(arg))
            elif n in ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE"):
                stack.append(str(arg))
            elif n in ("BINPUT", "LONG_BINPUT", "PUT"):
                memo[int(arg)] = stack[-1]
            elif n == "MEMOIZE":
                memo[len(memo)] = stack[-1]
            elif n in ("BINGET", "LONG_BINGET", "GET"):
                if int(arg) not in memo:
                    raise DataError(f"{where}: malformed pickle (memo key {arg} unknown).")
                stack.append(memo[int(arg)])
            elif n in ("GLOBAL", "STACK_GLOBAL"):
                if n == "GLOBAL":
                    module, _, name = str(arg).partition(" ")
                else:
                    name = stack.pop()
                    module = stack.pop()
                if (module, name) not in _ALLOWED_GLOBALS:
                    raise DataError(
                        f"{where}: the pickle refers to {module}.{name}, which is not part of the CIFAR-10 batch "
                        "format; refusing to read it (dpaudit never unpickles arbitrary objects)."
                    )
                stack.append(_Global(module, name))
            elif n in ("REDUCE", "NEWOBJ"):
                args = stack.pop()
                func = stack.pop()
                if not isinstance(func, _Global) or not isinstance(args, tuple):
                    raise DataError(f"{where}: malformed pickle (REDUCE of a non-global).")
                if (func.module, func.name) == ("_codecs", "encode"):
                    # Python 3 writes bytes at protocol 2 as _codecs.encode(text, 'latin1'); decode it here.
                    if len(args) != 2 or not isinstance(args[0], str) or args[1] not in ("latin1", "latin-1"):
                        raise DataError(f"{where}: unexpected _codecs.encode arguments.")
                    stack.append(args[0].encode("latin-1"))
                else:
                    stack.append(_Reduce(func, args))
            elif n == "BUILD":
                state = stack.pop()
                obj = stack[-1]
                if not isinstance(obj, _Reduce) or obj.state is not None:
                    raise DataError(f"{where}: malformed pickle (BUILD on a non-object).")
                obj.state = state
            else:
                raise DataError(f"{where}: pickle opcode {n} is not part of the CIFAR-10 batch format; refusing it.")
    except DataError:
        raise
    except (ValueError, IndexError, EOFError, struct.error) as exc:
        raise DataError(f"{where}: not a readable pickle stream ({exc}).") from None
    raise DataError(f"{where}: pickle stream ended without STOP.")


def _ndarray_from_reduce(node: Any, where: str) -> np.ndarray:
    """Rebuild a uint8 C-ordered ndarray from numpy's pickled form, checking every field."""
    bad = DataError(f"{where}: 'data' is not a uint8 numpy array in the expected pickled form.")
    if not isinstance(node, _Reduce) or node.func.name != "_reconstruct" or node.state is None:
        raise bad
    st = node.state
    if not (isinstance(st, tuple) and len(st) == 5):
        raise bad
    _version, shape, dtype_node, fortran, payload = st
    if not (isinstance(shape, tuple) and all(isinstance(s, int) for s in shape)):
        raise bad
    if not (isinstance(dtype_node, _Reduce) and dtype_node.func.name == "dtype" and dtype_node.args
            and dtype_node.args[0] in ("u1", b"u1")):
        raise bad
    if fortran is not False and fortran != 0:
        raise bad
    if isinstance(payload, str):
        payload = payload.encode("latin-1")
    if not isinstance(payload, bytes) or len(payload) != int(np.prod(shape)):
        raise bad
    return np.frombuffer(payload, dtype=np.uint8).reshape(shape)


def _read_cifar_batch(path: Path, label_key: str = "labels", num_classes: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """One CIFAR-10 python batch -> (uint8 array (n, 3, 32, 32), int64 labels (n,)), parsed without unpickling.
    CIFAR-100's files: ``label_key="fine_labels"``, ``num_classes=100``."""
    where = str(path)
    obj = _parse_restricted_pickle(read_input_bytes(path, "the CIFAR-10 batch file"), where)
    if not isinstance(obj, dict):
        raise DataError(f"{where}: expected a dict at the top of the batch.")
    d = {(k.decode("latin-1") if isinstance(k, bytes) else k): v for k, v in obj.items()}
    if "data" not in d or label_key not in d:
        raise DataError(f"{where}: the batch dict lacks 'data' or '{label_key}' (keys: {sorted(map(str, d))}).")
    data = _ndarray_from_reduce(d["data"], where)
    labels = d[label_key]
    if not isinstance(labels, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in labels):
        raise DataError(f"{where}: '{label_key}' must be a list of ints.")
    if data.ndim != 2 or data.shape[1] != 3072 or data.shape[0] != len(labels):
        raise DataError(f"{where}: 'data' has shape {data.shape}; expected ({len(labels)}, 3072).")
    y = np.asarray(labels, dtype=np.int64)
    if y.size and (y.min() < 0 or y.max() > num_classes - 1):
        raise DataError(f"{where}: labels outside 0..{num_classes - 1}.")
    return data.reshape(-1, 3, 32, 32), y


def _load_cifar10(data_dir: Path) -> Dataset:
    Xs, ys = [], []
    for f in _CIFAR_FILES:
        X, y = _read_cifar_batch(_find(data_dir, "cifar10", f))
        Xs.append(X)
        ys.append(y)
    X = np.concatenate(Xs).astype(np.float32) / 255.0
    return Dataset("cifar10", X, np.concatenate(ys), 10, (3, 32, 32))


def _load_cifar100(data_dir: Path) -> Dataset:
    """CIFAR-100 (python version: ``train``, ``test``), the 100 fine labels; parsed without unpickling."""
    parts = [_read_cifar_batch(_find(data_dir, "cifar100", f), "fine_labels", 100) for f in _CIFAR100_FILES]
    X = np.concatenate([p[0] for p in parts]).astype(np.float32) / 255.0
    return Dataset("cifar100", X, np.concatenate([p[1] for p in parts]), 100, (3, 32, 32))


def _read_libsvm(path: Path, num_features: int) -> tuple[np.ndarray, np.ndarray]:
    """A LIBSVM/SVMlight text file (``label idx:value ...``, 1-based indices) -> dense float32 X, raw labels.

    Every line may become a dense row of ``num_features`` floats (a two-byte line ``0`` is a row of 123 floats for
    a9a), so the dense size is checked against :func:`dpaudit._io.max_array_bytes` from the line count before any
    row is made, and the rows are written into one array allocated once."""
    raw = read_input_bytes(path, "the LIBSVM data file", max_bytes=MAX_DATA_FILE_BYTES)
    lines = raw.count(b"\n") + raw.count(b"\r") + 1      # universal newlines below: at most this many lines
    _decoded_cap(path, f"{lines} lines as dense rows of {num_features} features", lines * num_features, 4)
    X = np.zeros((lines, num_features), dtype=np.float32)
    labels = np.empty(lines, dtype=np.float64)
    n = 0
    for i, line in enumerate(io.StringIO(raw.decode("utf-8", errors="replace"), newline=None), 1):
        parts = line.split("#", 1)[0].split()
        if not parts:
            continue
        try:
            label = float(parts[0])
            pairs = [(int(k), float(v)) for k, v in (item.split(":", 1) for item in parts[1:])]
        except ValueError:
            raise DataError(f"{path}, line {i}: not in LIBSVM format ('label index:value ...').") from None
        for j, v in pairs:
            if not 1 <= j <= num_features:
                raise DataError(f"{path}, line {i}: feature index {j} outside 1..{num_features}.")
            X[n, j - 1] = v
        labels[n] = label
        n += 1
    if not n:
        raise DataError(f"{path}: no records.")
    return X[:n], labels[:n]


def _binary_libsvm(data_dir: Path, name: str, files: Sequence[str], num_features: int, standardise: bool) -> Dataset:
    parts = [_read_libsvm(_find(data_dir, name, f), num_features) for f in files]
    X = np.concatenate([p[0] for p in parts])
    raw = np.concatenate([p[1] for p in parts])
    bad = sorted(set(raw.tolist()) - {-1.0, 1.0, 0.0})
    if bad:
        raise DataError(f"Data set {name!r}: labels must be -1/+1 (or 0/1). Got {bad[:3]}.")
    X = _standardise(X).astype(np.float32) if standardise else X
    return Dataset(name, X, (raw > 0).astype(np.int64), 2, (num_features,))


def _load_adult_a9a(data_dir: Path) -> Dataset:
    """Adult as LIBSVM's a9a / a9a.t: 123 binary features (FedKT's Adult), labels -1/+1 -> 0/1."""
    return _binary_libsvm(data_dir, "adult_a9a", _A9A_FILES, 123, standardise=False)


def _load_cod_rna(data_dir: Path) -> Dataset:
    """cod-rna from LIBSVM (cod-rna, cod-rna.t): 8 numeric features (standardised), labels -1/+1 -> 0/1."""
    return _binary_libsvm(data_dir, "cod_rna", _CODRNA_FILES, 8, standardise=True)


def _load_svhn_extra(data_dir: Path) -> Dataset:
    """SVHN with the 531k 'extra' images (train_32x32.mat, test_32x32.mat, extra_32x32.mat)."""
    return _load_svhn(data_dir, files=_SVHN_EXTRA_FILES, name="svhn_extra")


def _load_svhn(data_dir: Path, files: Sequence[str] = tuple(_SVHN_FILES), name: str = "svhn") -> Dataset:
    from scipy.io import loadmat

    Xs, ys = [], []
    for f in files:
        path = check_input_file(_find(data_dir, name, f), "the SVHN data file", max_bytes=MAX_DATA_FILE_BYTES)
        try:
            m = loadmat(path)  # MATLAB v5 container: numeric arrays only, nothing is executed
        except Exception as exc:  # noqa: BLE001 - scipy raises several types for malformed files
            raise DataError(f"{path}: not a readable MATLAB v5 file ({exc}).") from None
        if "X" not in m or "y" not in m:
            raise DataError(f"{path}: expected variables 'X' (32x32x3xN) and 'y' (Nx1).")
        X, y = np.asarray(m["X"]), np.asarray(m["y"]).reshape(-1).astype(np.int64)
        if X.ndim != 4 or X.shape[:3] != (32, 32, 3) or X.shape[3] != y.shape[0]:
            raise DataError(f"{path}: 'X' has shape {X.shape}; expected (32, 32, 3, {y.shape[0]}).")
        y[y == 10] = 0  # SVHN labels digit 0 as 10
        if y.size and (y.min() < 0 or y.max() > 9):
            raise DataError(f"{path}: labels outside 1..10.")
        Xs.append(np.transpose(X, (3, 2, 0, 1)))
        ys.append(y)
    X = np.concatenate(Xs).astype(np.float32) / 255.0
    return Dataset(name, X, np.concatenate(ys), 10, (3, 32, 32))


_ADULT_NUMERIC = (0, 2, 4, 10, 11, 12)  # age, fnlwgt, education-num, capital-gain, capital-loss, hours-per-week
_ADULT_CATEGORICAL = (1, 3, 5, 6, 7, 8, 9, 13)


def _load_adult(data_dir: Path) -> Dataset:
    rows: list[list[str]] = []
    for f in _ADULT_FILES:
        path = _find(data_dir, "adult", f)
        text = read_input_bytes(path, "the Adult data file").decode("utf-8", errors="replace")
        try:
            records = list(csv.reader(io.StringIO(text, newline="")))  # newline="": bare \r inside a field is data
        except csv.Error as exc:
            raise DataError(f"{path}: not a valid Adult CSV file ({exc}).") from None
        for rec in records:
            rec = [c.strip() for c in rec]
            if len(rec) == 1 and rec[0].startswith("|") or not any(rec):
                continue  # adult.test starts with "|1x3 Cross validator"; blank lines
            if len(rec) != 15:
                raise DataError(f"{path}: expected 15 comma-separated fields per record, got {len(rec)}: {rec[:3]}...")
            rows.append(rec)
    if not rows:
        raise DataError(f"Data set 'adult': no records in {data_dir}.")
    labels = [r[14].rstrip(".") for r in rows]
    bad = sorted({v for v in labels if v not in ("<=50K", ">50K")})
    if bad:
        raise DataError(f"Data set 'adult': unknown income labels {bad[:3]}.")
    y = np.asarray([v == ">50K" for v in labels], dtype=np.int64)
    try:
        num = np.asarray([[float(r[k]) for k in _ADULT_NUMERIC] for r in rows], dtype=np.float64)
    except ValueError as exc:
        raise DataError(f"Data set 'adult': non-numeric value in a numeric column ({exc}).") from None
    cols = [_standardise(num)]
    for k in _ADULT_CATEGORICAL:
        values = [r[k] for r in rows]
        cats = sorted(set(values))  # '?' (missing) is kept as its own category
        lookup = {c: j for j, c in enumerate(cats)}
        onehot = np.zeros((len(rows), len(cats)), dtype=np.float32)
        onehot[np.arange(len(rows)), [lookup[v] for v in values]] = 1.0
        cols.append(onehot)
    X = np.concatenate(cols, axis=1).astype(np.float32)
    return Dataset("adult", X, y, 2, (X.shape[1],))


_FILE_LOADERS = {
    "mnist": _load_mnist,
    "fashion_mnist": _load_fashion,
    "cifar10": _load_cifar10,
    "svhn": _load_svhn,
    "adult": _load_adult,
    "svhn_extra": _load_svhn_extra,
    "adult_a9a": _load_adult_a9a,
    "cifar100": _load_cifar100,
    "cod_rna": _load_cod_rna,
}

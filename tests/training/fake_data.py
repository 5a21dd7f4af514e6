"""Test helpers: fake copies of the real data sets, in their real file formats and at their real sizes.

The records are not images or census rows worth learning from: what is real is the number of records, the
class counts (taken from the real files) and the format the loaders read. That is all a split and a partition
look at, so a config that cannot be cut from the real data set fails on these too. Features are kept as
small as the format allows (MNIST images of 1 x 1 pixel: the IDX header carries the shape), so writing and
loading 70,000 records takes a fraction of a second.
"""

from __future__ import annotations

import gzip
import pickle
import struct
from pathlib import Path

import numpy as np

__all__ = ["MNIST_TRAIN_COUNTS", "MNIST_TEST_COUNTS", "write_mnist", "write_adult", "write_cifar10"]

#: records per digit in MNIST's training (60,000) and test (10,000) files
MNIST_TRAIN_COUNTS = (5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949)
MNIST_TEST_COUNTS = (980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009)
#: Adult: adult.data 32,561 records (7,841 with income > 50K), adult.test 16,281 (3,846 > 50K)
ADULT_SIZES = ((32561, 7841), (16281, 3846))


def _idx(arr: np.ndarray) -> bytes:
    return bytes([0, 0, 0x08, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.astype(np.uint8).tobytes()


def _labels(counts, rng: np.random.Generator) -> np.ndarray:
    return rng.permutation(np.repeat(np.arange(len(counts)), counts)).astype(np.uint8)


def write_mnist(directory: Path, *, seed: int = 0) -> Path:
    """MNIST's four IDX files (train gzip-compressed, as downloaded) with the real class counts."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    for part, counts in (("train", MNIST_TRAIN_COUNTS), ("t10k", MNIST_TEST_COUNTS)):
        y = _labels(counts, rng)
        images = rng.integers(0, 256, (len(y), 1, 1), dtype=np.uint8)
        (directory / f"{part}-images-idx3-ubyte.gz").write_bytes(gzip.compress(_idx(images), compresslevel=1))
        (directory / f"{part}-labels-idx1-ubyte.gz").write_bytes(gzip.compress(_idx(y), compresslevel=1))
    return directory


def write_adult(directory: Path, *, seed: int = 0) -> Path:
    """``adult.data`` and ``adult.test`` (UCI CSV layout, 15 fields, test labels with a trailing dot)."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    work = ("Private", "State-gov", "Self-emp-not-inc", "?")
    for name, (n, rich) in zip(("adult.data", "adult.test"), ADULT_SIZES):
        y = rng.permutation(np.r_[np.zeros(n - rich, int), np.ones(rich, int)])
        dot = "." if name == "adult.test" else ""
        rows = [f"{20 + i % 50}, {work[i % 4]}, {100000 + i}, Bachelors, 13, Never-married, Sales, Husband, White, "
                f"{'Male' if i % 2 else 'Female'}, 0, 0, 40, United-States, {'>50K' if v else '<=50K'}{dot}"
                for i, v in enumerate(y)]
        head = "|1x3 Cross validator\n" if dot else ""
        (directory / name).write_text(head + "\n".join(rows) + "\n")
    return directory


def write_cifar10(directory: Path, *, seed: int = 0) -> Path:
    """The six CIFAR-10 python batches (5 x 10,000 training, 10,000 test; 1,000 or 6,000 per class) under
    ``cifar-10-batches-py``. CIFAR's format fixes 3,072 bytes a record, so this writes about 180 MB."""
    rng = np.random.default_rng(seed)
    d = directory / "cifar-10-batches-py"
    d.mkdir(parents=True, exist_ok=True)
    for name in [f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"]:
        labels = [int(v) for v in _labels((1000,) * 10, rng)]
        data = np.zeros((10000, 3072), dtype=np.uint8)
        batch = {b"batch_label": name.encode(), b"labels": labels, b"data": data, b"filenames": [b"x.png"] * 10000}
        (d / name).write_bytes(pickle.dumps(batch, protocol=2))
    return directory

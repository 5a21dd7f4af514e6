"""Hostile bundles and payloads for the security tests, all built inside the test's own tmp folder.

A payload proves it ran by creating a sentinel file; every test asserts that the sentinel never appears.
"""

from __future__ import annotations

import hashlib
import io
import json
import struct
import zlib
from pathlib import Path

import numpy as np

CLAIM = ["epsilon=8", "delta=1e-5", "granularity=record"]

FACTORY_SRC = '''
import torch

def build(hidden=8):
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, 10))
'''

TRAIN_SRC = '''
from sklearn.linear_model import LogisticRegression

def train(X, y, seed):
    return LogisticRegression(max_iter=50, random_state=seed).fit(X.reshape(len(X), -1), y)
'''


def touch_src(sentinel: Path) -> str:
    """Python source whose top-level code creates ``sentinel``."""
    return f"open({str(sentinel)!r}, 'w').write('pwned')\n"


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def digits_arrays(n: int = 400) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return (X[:n] / 16.0).astype(np.float32), y[:n].astype(np.int64)


def user_files(root: Path) -> dict[str, Path]:
    """The release maker's own files: factory + weights, training function, data, member / non-member indices."""
    import torch
    from safetensors.torch import save_file

    root.mkdir(parents=True, exist_ok=True)
    (root / "net.py").write_text(FACTORY_SRC)
    (root / "trainfn.py").write_text(TRAIN_SRC)
    ns: dict = {}
    exec(compile(FACTORY_SRC, "net.py", "exec"), ns)   # noqa: S102 - the test's own factory
    torch.manual_seed(0)
    net = ns["build"](8)
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(root / "weights.safetensors"))
    X, y = digits_arrays()
    np.savez(root / "data.npz", X=X, y=y)
    np.save(root / "members.npy", np.arange(0, 100))
    np.save(root / "nonmembers.npy", np.arange(100, 200))
    from dpaudit.integrations.opacus import OpacusRun

    (root / "opacus.json").write_text(json.dumps(OpacusRun(((1.1, 0.05, 20),)).to_dict()))
    return {"opacus": root / "opacus.json", "factory": root / "net.py", "train": root / "trainfn.py", "weights": root / "weights.safetensors",
            "data": root / "data.npz", "members": root / "members.npy", "nonmembers": root / "nonmembers.npy"}


def torch_bundle(root: Path, out: Path) -> tuple[Path, dict[str, Path]]:
    """A torch-factory bundle with a training function recipe, made the honest way (``release make``)."""
    from dpaudit.auditing.release_make import make_release

    f = user_files(root)
    make_release(out, claim=CLAIM, model=f["weights"], factory=f"{f['factory']}:build", factory_kwargs={"hidden": 8},
                 data=f["data"], members=f["members"], nonmembers=f["nonmembers"], train_fn=f"{f['train']}:train",
                 opacus=f["opacus"])
    return out, f


def edit_meta(bundle: Path, fn) -> None:
    p = bundle / "release.json"
    meta = json.loads(p.read_text())
    fn(meta)
    p.write_text(json.dumps(meta))


def set_factory(bundle: Path, path: str, sha: str, kwargs: dict | None = None) -> None:
    def put(meta):
        kw = meta["model"]["spec"]["kwargs"]
        kw["factory"], kw["factory_sha256"] = path, sha
        if kwargs is not None:
            kw["factory_kwargs"] = kwargs
    edit_meta(bundle, put)


def set_train_fn(bundle: Path, path: str, sha: str) -> None:
    def put(meta):
        meta["model"]["recipe"] = {"train_fn": path, "train_fn_sha256": sha}
    edit_meta(bundle, put)


# --------------------------------------------------------------------------------------------------
# a real zip bomb: a few MB of deflate that unpack to gigabytes, built without ever holding them


def _gf2_times(mat: list[int], vec: int) -> int:
    s, i = 0, 0
    while vec:
        if vec & 1:
            s ^= mat[i]
        vec >>= 1
        i += 1
    return s


def _gf2_square(mat: list[int]) -> list[int]:
    return [_gf2_times(mat, mat[n]) for n in range(32)]


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """CRC-32 of A || B from CRC(A), CRC(B) and len(B) (zlib's crc32_combine, GF(2) matrix powers)."""
    if len2 <= 0:
        return crc1
    odd = [0xEDB88320] + [1 << n for n in range(31)]
    even = _gf2_square(odd)
    odd = _gf2_square(even)
    while True:
        even = _gf2_square(odd)
        if len2 & 1:
            crc1 = _gf2_times(even, crc1)
        len2 >>= 1
        if not len2:
            break
        odd = _gf2_square(even)
        if len2 & 1:
            crc1 = _gf2_times(odd, crc1)
        len2 >>= 1
        if not len2:
            break
    return crc1 ^ crc2


def _zeros_crc(n_chunks: int, chunk: int) -> int:
    """CRC-32 of n_chunks * chunk zero bytes, by doubling (never computed over the bytes themselves)."""
    one, total, size = zlib.crc32(bytes(chunk)), 0, 0
    block, bsize = one, chunk
    k = n_chunks
    while k:
        if k & 1:
            total = crc32_combine(total, block, bsize) if size else block
            size += bsize
        block = crc32_combine(block, block, bsize)
        bsize *= 2
        k >>= 1
    return total


def zip_bomb_npz(path: Path, *, key: str = "X", megabytes: int = 3300) -> int:
    """Write an npz whose one member ``key.npy`` is a float64 array of ``megabytes`` MiB of zeros (a real, valid
    archive: correct sizes and CRC in its directory), about 1/1000 of that on disk. Returns the unpacked size."""
    chunk = 1 << 20
    total = megabytes * chunk
    hbuf = io.BytesIO()
    np.lib.format.write_array_header_1_0(hbuf, {"descr": "<f8", "fortran_order": False, "shape": (0,)})
    hlen = len(hbuf.getvalue())
    hbuf = io.BytesIO()
    np.lib.format.write_array_header_1_0(hbuf, {"descr": "<f8", "fortran_order": False,
                                                "shape": ((total - hlen) // 8,)})
    header = hbuf.getvalue()
    assert len(header) == hlen and (total - hlen) % 8 == 0
    first_plain = header + bytes(chunk - hlen)
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = c.compress(first_plain) + c.flush(zlib.Z_FULL_FLUSH)
    rest = c.compress(bytes(chunk)) + c.flush(zlib.Z_FULL_FLUSH)       # identical for every later chunk
    tail = c.flush()
    data_len = len(first) + len(rest) * (megabytes - 1) + len(tail)
    crc = crc32_combine(zlib.crc32(first_plain), _zeros_crc(megabytes - 1, chunk), total - chunk)
    name = f"{key}.npy".encode()
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0x21, crc, data_len, total, len(name), 0) + name
    central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0x21, crc, data_len, total, len(name),
                          0, 0, 0, 0, 0, 0) + name
    with open(path, "wb") as fh:
        fh.write(local)
        fh.write(first)
        for _ in range(megabytes - 1):
            fh.write(rest)
        fh.write(tail)
        cd_at = fh.tell()
        fh.write(central)
        fh.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central), cd_at, 0))
    return total

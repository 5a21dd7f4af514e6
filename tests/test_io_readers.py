"""Reading user files (dpaudit._io): stat before open, sizes checked before allocating, one DataError naming the
file; writing: OutputError naming the target (never a temporary file); the output-directory lock."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from dpaudit._io import (check_input_file, exclusive_lock, load_json_file, load_npy_file, load_npz_file,
                         load_toml_file, read_input_text, save_npz, write_json, write_text)
from dpaudit.errors import DataError, OutputError


def _npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=True)
    return buf.getvalue()


def test_fifo_devices_directories_and_empty_files_are_refused_without_opening(tmp_path):
    fifo = tmp_path / "votes.npy"
    os.mkfifo(fifo)  # opening it would block forever: stat must refuse it first
    with pytest.raises(DataError, match="not a regular file"):
        load_npy_file(fifo, "the votes file")
    with pytest.raises(DataError, match="not a regular file"):
        check_input_file("/dev/null", "the claims file")
    with pytest.raises(DataError, match="is a directory"):
        load_toml_file(tmp_path, "the audit config file")
    (tmp_path / "e.toml").write_bytes(b"")
    with pytest.raises(DataError, match="The audit config file .* is empty"):
        load_toml_file(tmp_path / "e.toml", "the audit config file")
    with pytest.raises(DataError, match="does not exist"):
        check_input_file(tmp_path / "nope", "the votes file")


def test_npy_header_is_checked_against_the_file_before_allocating(tmp_path):
    good = tmp_path / "g.npy"
    np.save(good, np.ones((3, 2)))
    assert load_npy_file(good, "the votes file").shape == (3, 2)
    raw = good.read_bytes()
    # a header claiming 10**12 rows over the same 48 bytes of data: refused before numpy allocates 16 TB
    header = _npy_bytes(np.ones((3, 2)))
    hdr_len = header.index(b"\n") + 1
    big = np.lib.format.header_data_from_array_1_0(np.ones((3, 2)))
    big["shape"] = (10**12, 2)
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, big)
    (tmp_path / "huge.npy").write_bytes(buf.getvalue() + header[hdr_len:])
    with pytest.raises(DataError, match="header promises shape \\(1000000000000, 2\\)"):
        load_npy_file(tmp_path / "huge.npy", "the votes file")
    (tmp_path / "trunc.npy").write_bytes(raw[:-5])
    with pytest.raises(DataError, match="truncated"):
        load_npy_file(tmp_path / "trunc.npy", "the votes file")
    np.savez(tmp_path / "z.npz", a=np.ones(2))
    (tmp_path / "z.npy").write_bytes((tmp_path / "z.npz").read_bytes())
    with pytest.raises(DataError, match="zip \\(.npz\\) archive"):
        load_npy_file(tmp_path / "z.npy", "the votes file")
    (tmp_path / "t.npy").write_text("hello")
    with pytest.raises(DataError, match="not a .npy file"):
        load_npy_file(tmp_path / "t.npy", "the votes file")


@pytest.mark.parametrize("arr", [np.array([["a", "b"], ["c", "d"]]), np.array([[1 + 2j, 3j]]),
                                 np.array(["2020-01-01", "2021-01-01"], dtype="datetime64[D]").reshape(1, 2),
                                 np.array([[{"a": 1}, None]], dtype=object)],
                         ids=["str", "complex", "datetime", "object"])
def test_non_numeric_arrays_are_refused(tmp_path, arr):
    p = tmp_path / "v.npy"
    p.write_bytes(_npy_bytes(arr))
    with pytest.raises(DataError, match="The votes file .*(must hold numbers|Python objects)"):
        load_npy_file(p, "the votes file")


def test_npz_zip_bomb_and_truncation_are_refused_before_unpacking(tmp_path):
    p = tmp_path / "m.npz"
    save_npz(p, members=np.arange(10))
    assert load_npz_file(p, "the membership file")["members"].tolist() == list(range(10))
    # 64 MB of zeros compress to ~64 kB; the zip directory says how large they unpack before anything is read
    bomb = tmp_path / "bomb.npz"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("members.npy", _npy_bytes(np.zeros(8 << 20, dtype=np.int64)))
    assert bomb.stat().st_size < 1 << 20
    with pytest.raises(DataError, match="would unpack to"):
        load_npz_file(bomb, "the membership file", max_bytes=1 << 20)
    # an archive whose directory claims 2 x 4 GB (sizes patched in the central directory) is refused unread
    save_npz(tmp_path / "two.npz", members=np.arange(3), nonmembers=np.arange(3))
    raw = bytearray((tmp_path / "two.npz").read_bytes())
    at = 0
    while (at := raw.find(b"PK\x01\x02", at)) >= 0:
        raw[at + 24:at + 28] = (0xFFFFFFF0).to_bytes(4, "little")
        at += 4
    (tmp_path / "two.npz").write_bytes(bytes(raw))
    with pytest.raises(DataError, match="would unpack to 85899345"):
        load_npz_file(tmp_path / "two.npz", "the membership file")
    (tmp_path / "t.npz").write_bytes(p.read_bytes()[:40])
    with pytest.raises(DataError, match="not a readable .npz archive"):
        load_npz_file(tmp_path / "t.npz", "the membership file")


def test_text_parsers_refuse_binary_deep_nesting_and_huge_integers(tmp_path):
    b = tmp_path / "b.toml"
    b.write_bytes(bytes(range(256)))
    with pytest.raises(DataError, match="not UTF-8 text"):
        load_toml_file(b, "the audit config file")
    deep = tmp_path / "deep.toml"
    deep.write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(DataError, match="nested too deeply|not valid TOML"):
        load_toml_file(deep, "the claims file")
    dj = tmp_path / "deep.json"
    dj.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(DataError, match="nested too deeply"):
        load_json_file(dj, "the release file")
    big = tmp_path / "big.toml"
    big.write_text("seed = " + "9" * 5000 + "\n")
    with pytest.raises(DataError, match="too many digits|not valid TOML"):
        load_toml_file(big, "the audit config file")
    nul = tmp_path / "nul.toml"
    nul.write_bytes(b"a = 1\x00\n")
    with pytest.raises(DataError, match="NUL"):
        read_input_text(nul, "the claims file")


def test_write_errors_name_the_target_never_the_temporary_file(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match=r"Cannot (write|create the directory) .*file.* not a directory") as exc:
        write_json(tmp_path / "file" / "out" / "r.json", {"a": 1})
    assert ".tmp" not in str(exc.value)
    with pytest.raises(OutputError) as exc:
        write_text("/proc/dpaudit-test/x.txt", "x")
    assert ".tmp" not in str(exc.value) and "/proc/dpaudit-test" in str(exc.value)


def test_written_files_get_the_umask_mode_even_when_the_writer_replaces_them(tmp_path):
    from dpaudit._io import atomic_path

    old = os.umask(0o022)
    try:
        with atomic_path(tmp_path / "m.bin") as tmp:
            tmp.unlink()
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT, 0o600)  # what safetensors does
            os.close(fd)
    finally:
        os.umask(old)
    assert (tmp_path / "m.bin").stat().st_mode & 0o777 == 0o644


def test_exclusive_lock_names_the_holder_and_dies_with_it(tmp_path):
    code = ("import sys, time; from dpaudit._io import exclusive_lock\n"
            "with exclusive_lock(sys.argv[1], 'dpaudit audit'):\n    print('locked', flush=True); time.sleep(30)\n")
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, env=env, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        with pytest.raises(DataError, match=f"in use by dpaudit audit \\(pid {proc.pid}\\)"):
            with exclusive_lock(tmp_path):
                pass
    finally:
        proc.kill()
        proc.wait()
    with exclusive_lock(tmp_path):  # SIGKILL released it
        pass

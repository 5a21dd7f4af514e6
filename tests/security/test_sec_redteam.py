"""Red-team review of issue 23, files and caps: what a bundle (or a file handed in) can do besides its model file.

Each hostile input is built here. The holes found (each fixed at its loader): a file swapped between the check of
its zip directory and its unpacking (a checked archive, then a zip bomb), a link or FIFO swapped in after the
bundle's check, a sparse file of terabytes in a bundle (hashed for the cache digest, read without end), a
release.json or JSON input whose parse takes 25 times its size, a LIBSVM file whose two-byte lines become rows of
123 floats (300 times), an MNIST gzip whose header promises gigabytes, engine checkpoints naming any attribute
chain of a dpaudit module, ``--overwrite`` removing a foreign ``.NAME.old`` folder, and terminal control sequences
in a bundle's strings reaching the console. Inputs that were already refused are kept as tried-and-safe cases.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import signal
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from sec_helpers import zip_bomb_npz
from dpaudit import _io
from dpaudit._io import OUTPUT_MARKER, atomic_dir, load_json_file, load_npz_file, read_input_bytes
from dpaudit.errors import DataError, OutputError


def _lines(err):
    return [ln for ln in err.strip().splitlines() if not ln.startswith("[dpaudit")]


def _one_error(cli, args, *needles):
    code, _, err = cli(args)
    lines = _lines(err)
    assert code == 2 and len(lines) == 1 and lines[0].startswith("dpaudit: error:"), err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def alarm():
    """Fail (instead of hanging the run) when the body blocks for more than 60 s."""
    def boom(*_):
        raise AssertionError("blocked: a FIFO or an endless read")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.fixture
def forest(forest_release, tmp_path):
    b = tmp_path / "bundle"
    shutil.copytree(forest_release(members=100, trees=3), b)
    return b


def _attack(b, tmp_path, *extra):
    return ["attack", b, "--attack", "threshold", "--bootstrap", "0", "--quiet", "--out", tmp_path / "o", *extra]


def _edit(bundle: Path, fn) -> Path:
    meta = json.loads((bundle / "release.json").read_text())
    fn(meta)
    (bundle / "release.json").write_text(json.dumps(meta))
    return bundle


# --------------------------------------------------------------------------------------------------
# check, then read: one open file


def test_an_archive_swapped_after_its_directory_was_checked_is_never_unpacked(tmp_path, monkeypatch):
    """Before: load_npz_file checked the zip directory through one open, then unpacked through a new one: a
    benign archive swapped for a bomb in between was unpacked (3.3 GB from 3 MB). Now one open file serves both."""
    p = tmp_path / "data.npz"
    np.savez(p, X=np.arange(10.0))
    bomb = tmp_path / "bomb.npz"
    zip_bomb_npz(bomb, key="X", megabytes=1200)
    real, swapped = _io._npy_header, []

    def header_then_swap(*a, **k):
        out = real(*a, **k)
        if not swapped:
            swapped.append(os.replace(bomb, p))          # the directory is checked: now the path is a bomb
        return out

    monkeypatch.setattr(_io, "_npy_header", header_then_swap)
    tracemalloc.start()
    try:
        got = load_npz_file(p, "the data file")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert swapped and np.array_equal(got["X"], np.arange(10.0))       # what was checked is what was read
    assert peak < 64 << 20, peak


@pytest.mark.parametrize("follow", [False, True])
def test_a_file_swapped_after_its_stat_is_refused(tmp_path, monkeypatch, follow):
    """A bundle file (follow=False) swapped for a link to the auditor's file, or any input swapped for another
    file, between the stat and the open: refused, the other file never read."""
    victim = tmp_path / "victim.json"
    victim.write_text('{"secret": 1}')
    p = tmp_path / "release.json"
    p.write_text('{"ok": 1}')
    real, done = _io._stat_input, []

    def stat_then_swap(path, *a, **k):
        st = real(path, *a, **k)
        if not done:
            done.append(1)
            if follow:                             # another regular file under the checked name
                shutil.copy(victim, tmp_path / "other.json")
                os.replace(tmp_path / "other.json", path)
            else:
                os.remove(path)
                os.symlink(victim, path)
        return st

    monkeypatch.setattr(_io, "_stat_input", stat_then_swap)
    with pytest.raises(DataError, match="symbolic link|changed while dpaudit opened it"):
        load_json_file(p, "the release file", follow_symlinks=follow)


def test_fifos_anywhere_in_a_bundle_never_block(forest, tmp_path, cli, alarm):
    for name in ("membership.npz", "model.skops", "release.json"):
        b = tmp_path / f"b-{name}"
        shutil.copytree(forest, b)
        (b / name).unlink()
        os.mkfifo(b / name)
        _one_error(cli, _attack(b, tmp_path), "not a regular file")
    b = tmp_path / "b-votes"
    shutil.copytree(forest, b)
    os.mkfifo(b / "votes.npy")
    _one_error(cli, _attack(b, tmp_path), "not a regular file")
    from dpaudit.training.release import bundle_digest

    b = tmp_path / "b-extra"                           # an unread FIFO beside the files: not hashed, not opened
    shutil.copytree(forest, b)
    os.mkfifo(b / "notes")
    assert len(bundle_digest(b)) == 64


# --------------------------------------------------------------------------------------------------
# sizes a file claims


def test_a_sparse_file_of_terabytes_in_a_bundle_is_refused_before_anything_reads_it(forest, tmp_path, cli, alarm):
    """Before: `dpaudit attack` hashed every top-level file for its cache digest: a 200 GB hole (8 kB on disk)
    kept it reading past any timeout. Now the sizes the files claim are capped (16 GiB) before anything is read."""
    with open(forest / "notes.bin", "wb") as fh:
        fh.truncate(200 << 30)
    _one_error(cli, _attack(forest, tmp_path), "holds more than 17179869184 bytes of files (notes.bin among them)")
    (forest / "notes.bin").unlink()
    (forest / "data" / "deep").mkdir(parents=True)
    with open(forest / "data" / "deep" / "x", "wb") as fh:
        fh.truncate(20 << 30)
    _one_error(cli, _attack(forest, tmp_path), "holds more than 17179869184 bytes", "data/deep/x")
    assert not (tmp_path / "o").exists()


def test_release_json_and_json_inputs_are_capped_below_what_their_parse_would_take(forest, tmp_path, cli):
    """JSON parsing holds about 25 bytes of Python objects per byte ('[],' is a 56-byte list): a 256 MiB
    release.json (the old cap) took about 6.5 GB. release.json is now capped at 16 MiB, other JSON at 64 MiB."""
    from dpaudit.training.release import MAX_RELEASE_JSON_BYTES

    text = (forest / "release.json").read_text()
    pad = "[]," * ((MAX_RELEASE_JSON_BYTES // 3) + 10)
    (forest / "release.json").write_text(text[:-1] + ', "pad": [' + pad + "[]]}")
    _one_error(cli, _attack(forest, tmp_path), "release.json is ", f"at most {MAX_RELEASE_JSON_BYTES} bytes")
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.write(b"[0]")
        fh.truncate((64 << 20) + 1)
    with pytest.raises(DataError, match=f"at most {64 << 20} bytes"):
        load_json_file(big, "the ledger file")


def test_libsvm_lines_are_counted_before_they_become_dense_rows(tmp_path):
    """Before: every line of an a9a file became its own row of 123 float32s (a two-byte line '0' took ~600 bytes
    of memory): a 5 MB file took 1.5 GB. Now the line count is checked against the array cap first."""
    from dpaudit.training.data import load_dataset

    d = tmp_path / "a9a"
    d.mkdir()
    (d / "a9a").write_bytes(b"0\n" * 2_500_000)            # 5 MB; 2.5M rows x 123 floats = 1.23 GB
    (d / "a9a.t").write_bytes(b"1 3:1\n")
    tracemalloc.start()
    try:
        with pytest.raises(DataError, match="would take 1230000492 bytes in memory; dpaudit reads at most"):
            load_dataset("adult_a9a", data_dir=d)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, peak
    (d / "a9a").write_bytes(b"-1 1:1 5:0.5\n+1 2:1\r\n")     # honest files still parse (CRLF included)
    ds = load_dataset("adult_a9a", data_dir=d)
    assert len(ds) == 3 and ds.X[0, 4] == 0.5


def test_an_mnist_gzip_is_refused_from_the_sizes_its_header_promises(tmp_path):
    """Before: the loader unpacked up to 4 GiB (a 4 MB gzip of zeros) and then made float32 images of it (16 GiB).
    Now the IDX header's dimensions are checked against the array cap after unpacking its first 64 bytes."""
    import struct

    from dpaudit.training.data import load_dataset

    d = tmp_path / "mnist"
    d.mkdir()
    header = struct.pack(">BBBB", 0, 0, 0x08, 3) + struct.pack(">3I", 2_000_000, 28, 28)
    with gzip.open(d / "train-images-idx3-ubyte.gz", "wb") as fh:
        fh.write(header + bytes(1 << 20))                # only the header matters: the rest is never unpacked
    tracemalloc.start()
    try:
        with pytest.raises(DataError, match="records would take 12544000000 bytes in memory"):
            load_dataset("mnist", data_dir=d)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, peak


# --------------------------------------------------------------------------------------------------
# what a checkpoint may name, what --overwrite may remove


@pytest.mark.parametrize("ref", ["dpaudit._io:os.system", "dpaudit._io:shutil.rmtree", "os:system",
                                 "dpaudit.training.engine:PerClient.__init__", "dpaudit.__main__:main",
                                 "dpaudit.training.release:np", "dpaudit.training.release:load_release", 5])
def test_an_engine_checkpoint_names_only_dpaudit_classes(tmp_path, ref):
    """Before: an `__object__` reference walked any attribute chain from any dpaudit module (importing it first)
    and called `.from_dict` on what it found: 'dpaudit._io:os.system' was an internal error (exit 70), and any
    object of a dpaudit module's globals with a from_dict attribute could be called."""
    from dpaudit.training.engine import load_state

    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "state.json").write_text(json.dumps({"format": 1, "state": {"__object__": ref, "data": {}}}))
    with pytest.raises(DataError, match="Refusing to rebuild"):
        load_state(tmp_path / "s")


def test_overwrite_never_removes_a_foreign_dot_old_folder(tmp_path):
    target = tmp_path / "out"
    with atomic_dir(target):
        pass
    keep = tmp_path / ".out.old"                     # someone's folder, in the place a crashed replace leaves
    keep.mkdir()
    (keep / "precious.txt").write_text("x")
    with pytest.raises(OutputError, match="is in the way and was not written by dpaudit"):
        with atomic_dir(target, overwrite=True):
            pass
    assert (keep / "precious.txt").read_text() == "x" and (target / OUTPUT_MARKER).is_file()
    shutil.rmtree(keep)
    keep.mkdir()
    (keep / OUTPUT_MARKER).write_text(json.dumps({"schema": "dpaudit-output", "version": 1, "kind": "x"}))
    with atomic_dir(target, overwrite=True):         # dpaudit's own leftover: removed
        pass
    assert not keep.exists()


# --------------------------------------------------------------------------------------------------
# a bundle's strings on the auditor's terminal

ESC = "\x1b[2J\x1b[1A\x1b]0;pwned\x07\r\u202e"


def test_control_sequences_in_a_bundle_are_shown_never_obeyed(forest, tmp_path, cli):
    """Before: a bundle's strings reached the console raw: ESC sequences in a data directory, a method name or a
    flag message could clear the screen, move the cursor over a verdict already printed, or set the title."""
    _edit(forest, lambda m: m["dataset"].__setitem__("data_dir", f"../{ESC}"))
    line = _one_error(cli, _attack(forest, tmp_path), "\\x1b[2J", "\\u202e")
    assert "\x1b" not in line and "\r" not in line and "\u202e" not in line
    from dpaudit._format import printable, table_text

    assert "\x1b" not in table_text(["model", "method"], [["m", f"fredy{ESC}"]], title=f"t{ESC}")
    assert printable("naïve 你好\tok\n") == "naïve 你好\tok\n"


def test_control_sequences_in_an_audited_bundle_stay_off_the_console(forest_release, tmp_path, cli):
    b = tmp_path / "b"
    shutil.copytree(forest_release(members=100, trees=3), b)
    _edit(b, lambda m: (m.__setitem__("method", f"baseline{ESC}"),
                        m.__setitem__("flags", [{"code": "teachers_not_independent", "message": f"x{ESC}"}])))
    # (a flag code is one of FLAG_CODES, checked on load: control sequences there are refused in one escaped line)
    cfg = tmp_path / "a.toml"
    cfg.write_text(f'title = "t"\ndataset = "digits"\n[[models]]\nname = "r"\nrelease = "{b}"\n'
                   '[[attacks]]\nkind = "threshold"\n')
    code, out, err = cli(["audit", cfg, "--out", tmp_path / "run", "--quiet"])
    assert code in (0, 1, 3), err
    assert "\x1b" not in out and "\x1b" not in err and "\u202e" not in out + err
    assert "baseline\\x1b[2J" in out


def test_control_sequences_in_a_refused_field_stay_off_the_console(forest_release, tmp_path, cli):
    # an unknown flag code is refused (exit 2); the refusal quotes the value with its control characters shown
    b = tmp_path / "b"
    shutil.copytree(forest_release(members=100, trees=3), b)
    _edit(b, lambda m: m.__setitem__("flags", [{"code": f"teachers_not_independent{ESC}", "message": "x"}]))
    code, out, err = cli(["attack", b, "--attack", "threshold", "--out", tmp_path / "o", "--quiet"])
    assert code == 2 and "flags[0].code" in err
    assert "\x1b" not in out + err and "\u202e" not in out + err and "\\x1b" in err


# --------------------------------------------------------------------------------------------------
# tried, already refused: pinned so they stay refused

TRAVERSAL = [("model.file", "../x.skops"), ("model.file", ".."), ("model.file", "/tmp/x.skops"),
             ("model.file", "model.skops\x00.txt"), ("model.file", "\uff4dodel.skops"), ("model.file", ""),
             ("model.file", "sub/model.skops"), ("model.file", 5),
             ("dataset.data_dir", ".."), ("dataset.data_dir", "/etc"), ("dataset.data_dir", "sub/../.."),
             ("dataset.seed", 10**4000), ("dataset.num_records", 10**30), ("schema", 3)]


@pytest.mark.parametrize("field, value", TRAVERSAL, ids=[f"{f}={str(v)[:12]!r}" for f, v in TRAVERSAL])
def test_traversal_names_and_huge_numbers_in_release_json_are_one_line(forest, tmp_path, cli, field, value):
    outside = tmp_path / "x.skops"
    shutil.copy(forest / "model.skops", outside)      # a valid model beside the bundle: never loaded from there
    key, sub = field.split(".") if "." in field else (field, None)
    (forest / "sub").mkdir()
    shutil.copy(forest / "model.skops", forest / "sub" / "model.skops")
    if isinstance(value, str) and value.startswith("/tmp/"):
        value = str(outside)
    text = json.dumps(json.loads((forest / "release.json").read_text()))
    meta = json.loads(text)
    if sub is None:
        meta[key] = value
    else:
        meta[key][sub] = value
    (forest / "release.json").write_text(json.dumps(meta))
    _one_error(cli, _attack(forest, tmp_path))
    assert not (tmp_path / "o").exists()


def test_a_hard_link_and_out_folders_inside_or_linked(forest, tmp_path, cli):
    victim = tmp_path / "victim.npz"
    np.savez(victim, secret=np.arange(3))
    (forest / "membership.npz").unlink()
    os.link(victim, forest / "membership.npz")        # a hard link is the bundle's own file: read as such, refused
    _one_error(cli, _attack(forest, tmp_path), "membership")
    assert np.array_equal(np.load(victim)["secret"], np.arange(3))
    for out in (forest / "sub", forest / ".." / forest.name / "x"):
        _one_error(cli, ["attack", forest, "--attack", "threshold", "--out", out], "inside the release bundle")
    link = tmp_path / "linked-out"
    link.symlink_to(tmp_path, target_is_directory=True)
    _one_error(cli, ["attack", forest, "--attack", "threshold", "--out", link], "symbolic link")


@pytest.mark.parametrize("value", ["-1", "0", "1e9", "0x10", "9" * 5000, "1 GiB"])
def test_the_array_cap_variable_takes_positive_integers_only(tmp_path, monkeypatch, value):
    from dpaudit.errors import ParameterError

    np.savez(tmp_path / "a.npz", X=np.zeros(3))
    monkeypatch.setenv(_io.ARRAY_BYTES_ENV, value)
    with pytest.raises(ParameterError, match=_io.ARRAY_BYTES_ENV):
        load_npz_file(tmp_path / "a.npz", "the data file")


def test_a_file_growing_past_its_cap_while_read_is_cut_off(tmp_path, monkeypatch):
    p = tmp_path / "f.txt"
    p.write_bytes(b"x" * 100)
    real_open = _io.open_input

    import contextlib

    @contextlib.contextmanager
    def grow(*a, **k):
        with real_open(*a, **k) as fh:
            with open(p, "ab") as w:                     # grows after the check: never read past the cap
                w.write(b"y" * 5000)
            yield fh

    monkeypatch.setattr(_io, "open_input", grow)
    with pytest.raises(DataError, match="larger than 1000 bytes"):
        read_input_bytes(p, "the file", max_bytes=1000)

"""The run scaffold and the method registry: one config dialect, one command, one way to prepare outputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpaudit.errors import DataError, ParameterError
from dpaudit.training.methods import METHODS, load_method_config, method_module, run_method
from dpaudit.training.methods.scaffold import (check_device, merge_tables, parse_sets, prepare_out,
                                               tables_from_params)


def test_prepare_out_refuses_existing_release_and_foreign_checkpoints(tmp_path: Path) -> None:
    out = tmp_path / "run"
    ck = prepare_out(out, False, {"a": 1})
    assert ck.exists() and not out.exists() and ck.name == ".run.checkpoints"
    (ck / "stage.npz").write_bytes(b"x")
    assert prepare_out(out, False, {"a": 1}) == ck and (ck / "stage.npz").exists()  # same run: resume
    with pytest.raises(DataError, match="other settings; discard them with --overwrite"):
        prepare_out(out, False, {"a": 2})
    prepare_out(out, True, {"a": 2})
    assert not (ck / "stage.npz").exists()
    out.mkdir()
    with pytest.raises(DataError, match="already exists; replace it with --overwrite") as exc:
        prepare_out(out, False, {"a": 2})
    assert "overwrite=True" not in str(exc.value)


def test_sets_and_params_become_tables() -> None:
    assert parse_sets(["method.gamma=0.1", "data.name=mnist", "teachers=3", "method.teacher_train.epochs=2",
                       "model.hidden=[8, 8]", "method.level=L1", 'run.device="cpu"']) == {
        "method": {"gamma": 0.1, "teachers": 3, "teacher_train": {"epochs": 2}, "level": "L1"},
        "data": {"name": "mnist"}, "model": {"hidden": [8, 8]}, "run": {"device": "cpu"}}
    with pytest.raises(ParameterError, match="table.key=value"):
        parse_sets(["gamma"])
    assert tables_from_params({"gamma": 0.1, "method": {"rounds": 2}, "run.stop_after": 1}) == {
        "method": {"gamma": 0.1, "rounds": 2}, "run": {"stop_after": 1}}
    merged = merge_tables({"method": {"t": {"a": 1, "b": 2}}}, {"method": {"t": {"b": 3}}})
    assert merged == {"method": {"t": {"a": 1, "b": 3}}}
    with pytest.raises(ParameterError, match=r"Unknown settings table \[bogus\]"):
        merge_tables({"bogus": {}})


def test_every_method_has_a_config_and_run() -> None:
    for name in METHODS:
        mod = method_module(name)
        cfg = load_method_config(name)
        assert isinstance(cfg, mod.Config) and cfg.name == name and callable(mod.run)
        assert set(cfg.fingerprint(0)) >= {"method", "dataset", "params", "seed"}
    with pytest.raises(ParameterError, match="Unknown method 'nope'"):
        method_module("nope")


def test_unknown_keys_name_their_table() -> None:
    with pytest.raises(ParameterError, match=r"\[method\] of privatekt"):
        load_method_config("privatekt", params={"method": {"bogus": 1}})
    with pytest.raises(ParameterError, match=r"\[data\] of pate"):
        load_method_config("pate", params={"data": {"num_clients": 3}})
    with pytest.raises(ParameterError, match=r"\[run\] of fedkt"):
        load_method_config("fedkt", sets=["run.bogus=1"])


def test_devices_are_checked_before_any_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    assert check_device(None) is None and check_device("cpu") == "cpu"
    with pytest.raises(ParameterError, match="must be cpu, cuda, cuda:N or mps. Got 'gpu'"):
        check_device("gpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ParameterError, match="no CUDA device"):
        load_method_config("pate", device="cuda")
    with pytest.raises(ParameterError, match="no CUDA device"):
        run_method("fedkt", out=tmp_path / "o", device="cuda:0")
    assert list(tmp_path.iterdir()) == []  # nothing prepared, nothing trained


@pytest.mark.parametrize("device", ["cuda", "gpu", "tpu:0"])
def test_cli_rejects_unusable_devices_in_one_line(device: str, tmp_path: Path, capsys, monkeypatch) -> None:
    import torch

    from dpaudit.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as exc:
        main(["train", "proxyfl", "--out", str(tmp_path / "o"), "--device", device])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and "device" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_every_train_command_has_the_same_common_flags() -> None:
    from dpaudit.cli.train import command

    common = {"--config", "--set", "--seed", "--out", "--quiet", "--device", "--data-dir", "--dataset", "--overwrite",
              "--engine", "--threads", "--verbose"}
    assert set(command.commands) == set(METHODS)
    for name, cmd in command.commands.items():
        flags = {o for p in cmd.params for o in p.opts}
        assert common <= flags, name
        assert {sh.flag for sh in METHODS[name].shorthands} == flags - common, name


def test_cli_is_run_method(tmp_path: Path, monkeypatch, capsys) -> None:
    """The command passes its flags to run_method (one path): shorthands become [method] settings."""
    import dpaudit.training.methods as methods
    from dpaudit.cli import main

    seen = {}

    def fake(name, **kw):
        seen.update(kw, name=name)
        return None

    monkeypatch.setattr(methods, "run_method", fake)
    with pytest.raises(SystemExit) as exc:
        main(["train", "privatekt", "--rounds", "3", "--no-buffer", "--set", "data.num_clients=4", "--seed", "2",
              "--dataset", "digits", "--quiet"])
    assert exc.value.code == 0
    assert seen["name"] == "privatekt" and seen["seed"] == 2 and seen["progress"] is False
    assert seen["params"] == {"method.rounds": 3, "method.use_buffer": False}
    assert seen["sets"] == ("data.num_clients=4",) and seen["out"] == Path("runs/privatekt")
    assert "stopped early" in capsys.readouterr().out


def test_cli_progress_on_stderr_only_and_quiet(tmp_path: Path, capsys) -> None:
    from dpaudit.cli import main

    args = ["train", "fedavg-ldp", "--rounds", "2", "--set", "data.num_clients=4", "--set", "model.hidden=[8]",
            "--set", "method.local_epochs=1"]
    with pytest.raises(SystemExit):
        main(args + ["--out", str(tmp_path / "a")])
    cap = capsys.readouterr()
    assert "round 2/2" in cap.err and "release written" in cap.err
    assert "[" not in cap.out.splitlines()[0] and "LdpUpdateMethod" not in cap.out + cap.err
    with pytest.raises(SystemExit):
        main(args + ["--out", str(tmp_path / "b"), "--quiet"])
    cap = capsys.readouterr()
    assert cap.err == "" and "fedavg-ldp: release written" in cap.out


def test_cli_old_flat_config_warns_in_one_line_first(tmp_path: Path, capsys, monkeypatch) -> None:
    import dpaudit.training.methods as methods
    from dpaudit.cli import main

    monkeypatch.setattr(methods, "method_module", lambda name: type("M", (), {
        "Config": __import__("dpaudit.training.methods.pate", fromlist=["Config"]).Config,
        "run": staticmethod(lambda *a, **k: None)}))
    old = tmp_path / "old.toml"
    old.write_text('method = "pate"\nteachers = 3\n')
    with pytest.raises(SystemExit) as exc:
        main(["train", "pate", "--config", str(old), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert exc.value.code == 0
    assert err.startswith("dpaudit: warning: The config file") and "[method]" in err and err.count("\n") == 1
    with pytest.raises(SystemExit) as exc:
        main(["train", "pate", "--config", "/dev/null", "--out", str(tmp_path / "o")])
    assert exc.value.code == 2 and "is not a regular file" in capsys.readouterr().err


TINY_FREDY = ["--teachers", "2", "--rounds", "2", "--queries", "30", "--set", "method.num_samples=300",
              "--set", "method.nonprivate_baseline=false", "--set", "method.model_kwargs={hidden=[8]}",
              "--set", "method.teacher_train.epochs=1", "--set", "method.student_train.epochs=1"]


def test_a_second_train_into_the_same_out_stops_naming_the_first(tmp_path: Path, monkeypatch, capsys) -> None:
    """`dpaudit train` holds the release's lock from before its output preparation to the end: a second train
    into the same --out stops at once (one line, exit 2) naming the first, and touches nothing of it; the lock
    dies with its holder, so the next run after a kill proceeds."""
    import os
    import signal
    import time

    import dpaudit.training.methods.fredy as fredy
    from dpaudit.cli import main

    out = tmp_path / "r"
    argv = ["train", "fredy", "--dataset", "digits", "--seed", "1", "--quiet", "--out", str(out), *TINY_FREDY]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the first train: signals once it is training, then holds on
        try:
            def stalled(*args, **kwargs):
                os.write(w, b"x")
                time.sleep(60)

            monkeypatch.setattr(fredy, "train_group", stalled)
            main(argv)
        finally:
            os._exit(0)
    try:
        os.read(r, 1)
        ck = tmp_path / ".r.checkpoints"
        before = sorted(p.name for p in ck.iterdir())
        with pytest.raises(SystemExit) as exc:
            main(argv)
        err = capsys.readouterr().err
        assert exc.value.code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
        assert f"{out} is in use by dpaudit train fredy (pid {pid})" in err
        assert sorted(p.name for p in ck.iterdir()) == before and not out.exists()
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    with pytest.raises(SystemExit) as exc:  # the killed holder's lock is gone: this run resumes and finishes
        main(argv)
    assert exc.value.code in (0, None) and (out / "model.safetensors").is_file()

"""dpaudit.progress: bars with an ETA on a terminal (nested stages stacked), plain lines with an ETA elsewhere,
nothing when quiet; everything on the reporter's stream (stderr), never stdout."""

from __future__ import annotations

import io

import pytest

import dpaudit.progress as progress
from dpaudit.progress import QUIET, Reporter, as_reporter, format_eta


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_format_eta():
    assert [format_eta(s) for s in (0, 4.6, 59.4, 60, 185, 3600, 3725)] == \
        ["0s", "5s", "59s", "1m00s", "3m05s", "1h00m", "1h02m"]


def test_plain_lines_start_progress_with_eta_and_end(monkeypatch, capsys):
    monkeypatch.setattr(progress, "PLAIN_MIN_SECONDS", 0.0)
    stream = io.StringIO()
    rep = Reporter(True, stream=stream, prefix="t")
    with rep.stage("work", total=20) as st:
        for _ in range(20):
            st.advance()
    lines = stream.getvalue().splitlines()
    assert lines[0] == "[t] work ..." and lines[-1].startswith("[t] work: done in ")
    middle = lines[1:-1]
    # at most one line per tenth of the way, each with its count and ETA; none at 20/20 (the end line says it)
    assert 1 <= len(middle) <= 9 and all("/20" in m and "eta " in m for m in middle)
    assert capsys.readouterr().out == ""  # never stdout


def test_plain_progress_lines_are_rate_limited_and_can_be_left_to_the_caller(monkeypatch):
    stream = io.StringIO()
    rep = Reporter(True, stream=stream)
    with rep.stage("fast", total=100) as st:  # finishes in far less than PLAIN_MIN_SECONDS: start and end only
        for _ in range(100):
            st.advance()
    assert len(stream.getvalue().splitlines()) == 2
    monkeypatch.setattr(progress, "PLAIN_MIN_SECONDS", 0.0)
    stream.truncate(0), stream.seek(0)
    with rep.stage("own lines", total=10, plain_progress=False) as st:
        for _ in range(10):
            st.advance()
    assert len(stream.getvalue().splitlines()) == 2


def test_quiet_prints_nothing(capsys):
    for rep in (QUIET, as_reporter(False), Reporter(False, stream=Tty())):
        rep.log("x")
        with rep.stage("s", total=3) as st:
            st.advance(3)
    assert capsys.readouterr() == ("", "")
    assert as_reporter(QUIET) is QUIET and as_reporter(True).enabled


def test_terminal_bars_nest_with_an_eta_and_leave_no_display(monkeypatch):
    tty = Tty()
    rep = Reporter(True, stream=tty, prefix="t")
    assert rep.interactive
    with rep.stage("outer", total=2) as outer:
        live = progress._LIVE[id(tty)]
        with rep.stage("inner", total=5) as inner:
            assert progress._LIVE[id(tty)] is live and len(live.progress.tasks) == 2  # one display, two bars
            inner.advance(5)
            rep.log("a message above the bars")
        assert len(live.progress.tasks) == 1
        outer.advance(2)
    assert id(tty) not in progress._LIVE  # the display stopped with the last stage
    text = tty.getvalue()
    assert "a message above the bars" in text and "[t] inner: done in " in text and "[t] outer: done in " in text


def test_a_failing_stage_stops_its_bar(monkeypatch):
    tty = Tty()
    rep = Reporter(True, stream=tty)
    with pytest.raises(RuntimeError):
        with rep.stage("boom", total=3):
            raise RuntimeError("x")
    assert id(tty) not in progress._LIVE and "boom: done" not in tty.getvalue()


def test_train_ensemble_reports_its_epochs_as_a_stage():
    import numpy as np

    from dpaudit.training.ensemble import TrainConfig, train_ensemble
    from dpaudit.training.models import ModelSpec

    spec = ModelSpec(name="mlp", input_shape=(4,), num_classes=2, kwargs={"hidden": [4]})
    X = np.random.default_rng(0).normal(size=(20, 4)).astype(np.float32)
    y = (X[:, 0] > 0).astype(np.int64)
    stream = io.StringIO()
    train_ensemble(spec, [(X, y)] * 2, TrainConfig(epochs=3, batch_size=8), seed=0,
                   progress=Reporter(True, stream=stream, prefix="t"))
    lines = stream.getvalue().splitlines()
    assert lines[0] == "[t] training 2 x mlp, 3 epoch(s) ..." and lines[-1].startswith("[t] training 2 x mlp")


def test_stdout_written_during_a_bar_stays_on_stdout(capsys):
    tty = Tty()
    with Reporter(True, stream=tty).stage("bar", total=2) as st:
        print("a result")
        st.advance(2)
    assert capsys.readouterr().out == "a result\n" and "a result" not in tty.getvalue()

"""dpaudit reproduce: grids, verdicts, tables (a tiny grid; the real grids are run by the command)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from dpaudit.auditing.reproduce import (PAPERS, Grid, PaperClaim, RowResult, Setting, check_data_files, check_replace,
                                     grid_settings, paper_grid, reproduce, table_paths)
from dpaudit.errors import DataError, OutputError, ParameterError


@pytest.mark.parametrize("paper", PAPERS)
@pytest.mark.parametrize("scale", ["cpu", "paper"])
def test_every_grid_is_consistent_and_cites_its_source(paper, scale):
    g = paper_grid(paper, scale)
    keys = [s.key for s in g.settings]
    assert len(set(keys)) == len(keys) and g.claims
    for c in g.claims:
        assert set(c.rows) <= set(keys) and c.source and c.kind in ("greater", "not_worse", "accounting", "absolute", "attack_chance")
    for s in g.settings:  # a paper number always says where it comes from
        assert s.paper is None or s.source
    if scale == "paper" and paper != "proxyfl":  # ProxyFL's Fig. 3 values are plotted only: relations, no numbers
        assert any(s.paper is not None for s in g.settings)


def _row(key, values, acc=1.0, claimed=1.0):
    return RowResult(Setting(key, key, "pate"), tuple(values), acc, claimed)


def test_verdicts_follow_the_claim_kind_and_the_scale():
    from dpaudit.auditing.reproduce import _verdict

    rows = {"a": _row("a", [0.8, 0.9]), "b": _row("b", [0.5, 0.6]), "c": _row("c", [0.5], acc=math.inf, claimed=2.0)}
    assert _verdict(PaperClaim("x", "a beats b", "Fig. 1", "greater", ("a", "b")), rows, "cpu").verdict == "reproduced"
    assert _verdict(PaperClaim("x", "b beats a", "Fig. 1", "greater", ("b", "a")), rows, "cpu").verdict == \
        "not reproduced at this scale"
    # an accounting identity does not depend on the scale: infinite accounted vs a finite claim fails outright
    assert _verdict(PaperClaim("x", "dp", "Thm", "accounting", ("c",)), rows, "cpu").verdict == "not reproduced"
    assert _verdict(PaperClaim("x", "dp", "Thm", "accounting", ("a",)), rows, "cpu").verdict == "reproduced"
    assert _verdict(PaperClaim("x", "90%", "Table 1", "absolute", ("a",), 0.02), rows, "cpu").verdict == \
        "cannot be checked here"


def _tiny_grid() -> Grid:
    tiny = {"method": {"teachers": 2, "rounds": 1, "queries": 30, "num_samples": 300, "nonprivate_baseline": False,
                       "model_kwargs": {"hidden": [8]}, "teacher_train": {"epochs": 1},
                       "student_train": {"epochs": 1}}}
    g1 = {"method": {**tiny["method"], "gamma": 1.0}}
    g2 = {"method": {**tiny["method"], "gamma": 0.1}}
    return Grid("fredy", "tiny", "cite", "cpu", ("digits",),
                (Setting("g1", "gamma 1", "fredy", g1, paper=0.9, source="Fig. X"), Setting("g01", "gamma 0.1", "fredy", g2)),
                (PaperClaim("noise", "noise costs accuracy", "Fig. 7", "not_worse", ("g1", "g01"), 1.0),
                 PaperClaim("dp", "guarantee", "Sec. 3", "accounting", ("g1",))))


def test_tiny_grid_writes_markdown_and_json(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the defaults are relative: tables in runs/reproduce/PAPER, never reports/
    t = reproduce("fredy", grid=_tiny_grid(), seeds=2, work_dir=tmp_path / "w", attacks=False, progress=False)
    out = tmp_path / "runs" / "reproduce" / "fredy"
    assert table_paths("fredy") == (Path("runs/reproduce/fredy/fredy.md"), Path("runs/reproduce/fredy/fredy.json"))
    assert not (tmp_path / "reports").exists()
    d = json.loads((out / "fredy.json").read_text())
    assert [r["key"] for r in d["rows"]] == ["g1", "g01"] and len(d["rows"][0]["values"]) == 2
    assert d["claims"][0]["verdict"] == "reproduced" and d["seeds"] == [0, 1]
    # rounds = 1: one record moves one teacher, the claimed (sensitivity 2) and accounted figures agree
    assert d["claims"][1]["verdict"] == "reproduced"
    md = (out / "fredy.md").read_text()
    assert "| gamma 1 | 0.900 (Fig. X) |" in md and "**reproduced**" in md
    assert "Made by `dpaudit reproduce fredy --scale cpu --seeds 2`." in md  # the default root goes unsaid
    assert t.rows[0].std >= 0 and (tmp_path / "w" / "shared_stages").is_dir()
    # the teachers do not depend on gamma: the second setting reused them
    assert len(list((tmp_path / "w" / "shared_stages").glob("teachers-*.npz"))) == 2  # one per seed
    # a quicker run does not replace the 2-seed table unless forced
    with pytest.raises(OutputError, match="2 seeds, this run 1.*--force"):
        reproduce("fredy", grid=_tiny_grid(), seeds=1, work_dir=tmp_path / "w", attacks=False, progress=False)
    assert json.loads((out / "fredy.json").read_text())["seeds"] == [0, 1]
    reproduce("fredy", grid=_tiny_grid(), seeds=1, work_dir=tmp_path / "w", attacks=False, progress=False, force=True)
    assert json.loads((out / "fredy.json").read_text())["seeds"] == [0]


def _committed(root: Path, seeds=5, keys=("g1", "g01"), scale="cpu") -> Path:
    path = root / "fredy" / "fredy.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"paper": "fredy", "scale": scale, "seeds": list(range(seeds)),
                                "rows": [{"key": k} for k in keys], "claims": []}))
    return path


@pytest.mark.parametrize("committed,run_seeds,match", [
    ({}, 1, "5 seeds, this run 1"),
    ({"keys": ("g1", "g01", "g05")}, 5, "settings g05 that this run"),
    ({"scale": "paper"}, 5, "scale paper, this run cpu"),
])
def test_a_poorer_run_never_replaces_a_table_unless_forced(tmp_path, committed, run_seeds, match):
    path = _committed(tmp_path / "reports" / "reproduce", **committed)
    before = path.read_text()
    with pytest.raises(OutputError, match=match):
        reproduce("fredy", grid=_tiny_grid(), seeds=run_seeds, out=tmp_path / "reports" / "reproduce",
                  work_dir=tmp_path / "w", attacks=False, progress=False)
    assert path.read_text() == before and not (tmp_path / "w").exists()  # refused before anything ran
    check_replace(_tiny_grid(), 1, tmp_path / "none.json")  # nothing there: nothing to refuse
    check_replace(_tiny_grid(), 6, _committed(tmp_path / "more"))  # more seeds, same settings and scale: fine


def test_cli_refuses_a_poorer_table_in_one_line_and_defaults_to_runs(tmp_path, capsys, monkeypatch):
    from dpaudit.cli import main
    import dpaudit.auditing.reproduce as reproduce_module   # the command imports reproduce from it when it runs

    committed = tmp_path / "reports" / "reproduce"
    path = _committed(committed, keys=("baseline", "g1", "g05", "g02", "g01", "g02_q500", "g02_t15"))
    with pytest.raises(SystemExit) as exc:
        main(["reproduce", "fredy", "--out", str(committed), "--seeds", "1", "--quiet"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and "--force" in err and str(path) in err
    calls = []
    monkeypatch.setattr(reproduce_module, "reproduce", lambda *a, **k: calls.append(k) or (_ for _ in ()).throw(SystemExit(0)))
    with pytest.raises(SystemExit):
        main(["reproduce", "fredy", "--seeds", "1"])
    assert calls[0]["out"] == Path("runs/reproduce") and calls[0]["force"] is False
    with pytest.raises(SystemExit):
        main(["reproduce", "fredy", "--out", str(committed), "--force"])
    assert calls[1]["out"] == committed and calls[1]["force"] is True


def test_paper_scale_names_the_missing_files(tmp_path):
    g = paper_grid("fredy", "paper")
    with pytest.raises(ParameterError, match="data_dir"):
        check_data_files(g, None)
    with pytest.raises(DataError, match="train-images-idx3-ubyte"):
        check_data_files(g, tmp_path)
    with pytest.raises(ParameterError, match="Unknown settings"):
        grid_settings(g, ["nope"])


def test_cli_reports_missing_files_in_one_line(tmp_path, capsys):
    from dpaudit.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["reproduce", "proxyfl", "--scale", "paper", "--data-dir", str(tmp_path), "--quiet"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "train-images-idx3-ubyte" in err


def test_made_by_line_names_the_root_of_the_committed_tables():
    from dpaudit.auditing.reproduce import ReproductionTable

    t = ReproductionTable(_tiny_grid(), (0, 1), (), (), 3.0, "reports/reproduce")
    assert "Made by `dpaudit reproduce fredy --scale cpu --seeds 2 --out reports/reproduce`." in t.to_markdown()

"""dpaudit reproduce: grids, verdicts, tables (a tiny grid; the real grids are run by the command)."""

from __future__ import annotations

import json
import math

import pytest

from dpaudit.audit.reproduce import (PAPERS, Grid, PaperClaim, RowResult, Setting, check_data_files, grid_settings,
                                     paper_grid, reproduce)
from dpaudit.errors import DataError, ParameterError


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
    from dpaudit.audit.reproduce import _verdict

    rows = {"a": _row("a", [0.8, 0.9]), "b": _row("b", [0.5, 0.6]), "c": _row("c", [0.5], acc=math.inf, claimed=2.0)}
    assert _verdict(PaperClaim("x", "a beats b", "Fig. 1", "greater", ("a", "b")), rows, "cpu").verdict == "reproduced"
    assert _verdict(PaperClaim("x", "b beats a", "Fig. 1", "greater", ("b", "a")), rows, "cpu").verdict == \
        "not reproduced at this scale"
    # an accounting identity does not depend on the scale: infinite accounted vs a finite claim fails outright
    assert _verdict(PaperClaim("x", "dp", "Thm", "accounting", ("c",)), rows, "cpu").verdict == "not reproduced"
    assert _verdict(PaperClaim("x", "dp", "Thm", "accounting", ("a",)), rows, "cpu").verdict == "reproduced"
    assert _verdict(PaperClaim("x", "90%", "Table 1", "absolute", ("a",), 0.02), rows, "cpu").verdict == \
        "cannot be checked here"


def test_tiny_grid_writes_markdown_and_json(tmp_path):
    tiny = {"method": {"teachers": 2, "rounds": 1, "queries": 30, "num_samples": 300, "nonprivate_baseline": False,
                       "model_kwargs": {"hidden": [8]}, "teacher_train": {"epochs": 1},
                       "student_train": {"epochs": 1}}}
    g1 = {"method": {**tiny["method"], "gamma": 1.0}}
    g2 = {"method": {**tiny["method"], "gamma": 0.1}}
    grid = Grid("fredy", "tiny", "cite", "cpu", ("digits",),
                (Setting("g1", "gamma 1", "fredy", g1, paper=0.9, source="Fig. X"), Setting("g01", "gamma 0.1", "fredy", g2)),
                (PaperClaim("noise", "noise costs accuracy", "Fig. 7", "not_worse", ("g1", "g01"), 1.0),
                 PaperClaim("dp", "guarantee", "Sec. 3", "accounting", ("g1",))))
    t = reproduce("fredy", grid=grid, seeds=2, out=tmp_path / "t", work_dir=tmp_path / "w", attacks=False, progress=False)
    d = json.loads((tmp_path / "t" / "fredy.json").read_text())
    assert [r["key"] for r in d["rows"]] == ["g1", "g01"] and len(d["rows"][0]["values"]) == 2
    assert d["claims"][0]["verdict"] == "reproduced" and d["seeds"] == [0, 1]
    # rounds = 1: one record moves one teacher, the claimed (sensitivity 2) and accounted figures agree
    assert d["claims"][1]["verdict"] == "reproduced"
    md = (tmp_path / "t" / "fredy.md").read_text()
    assert "| gamma 1 | 0.900 (Fig. X) |" in md and "**reproduced**" in md
    assert t.rows[0].std >= 0 and (tmp_path / "w" / "shared_stages").is_dir()
    # the teachers do not depend on gamma: the second setting reused them
    assert len(list((tmp_path / "w" / "shared_stages").glob("teachers-*.npz"))) == 2  # one per seed


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

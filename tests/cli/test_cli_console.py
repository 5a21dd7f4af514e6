"""The console: one table style for every table the CLI prints, nothing cut at any width (COLUMNS=60, a
20-column terminal, a pipe), numbers for people (0, 1e-5, never 0e+00), results alone on stdout."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dpaudit._format import fmt_number, make_console, table_text, table_width
from dpaudit.cli import main
from dpaudit.serial import from_dict

ROOT = Path(__file__).resolve().parents[2]
LDP = ["account", "--mechanism", "ldp", "--epsilon", "5", "--samples", "2", "--classes", "10", "--rounds", "500",
       "--participation", "0.5", "--users", "80", "--delta", "1e-5"]


def run(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return info.value.code, out, err


def tokens(text: str) -> set[str]:
    return {t.rstrip(":") for t in text.split()}  # "column: value" blocks end the column name with a colon


# ---------------------------------------------------------------- numbers


@pytest.mark.parametrize("x,text", [
    (0, "0"), (0.0, "0"), (-0.0, "0"), (1e-5, "1e-5"), (1.5e-7, "1.5e-7"), (1e-300, "1e-300"), (0.001, "0.001"),
    (5e-4, "5e-4"), (0.64011, "0.6401"), (3.624, "3.624"), (2.0, "2"), (105.3, "105.3"), (1348.7, "1349"),
    (8982.4, "8982"), (1e6, "1e6"), (1.2345e7, "1.234e7"), (1e300, "1e300"), (float("inf"), "∞"),
    (float("-inf"), "-∞"), (float("nan"), "nan"), (7, "7"), (None, "–"), ("text", "text"), (-2.5, "-2.5"),
])
def test_fmt_number(x, text):
    assert fmt_number(x) == text


def test_fmt_number_digits_and_numpy():
    np = pytest.importorskip("numpy")
    assert fmt_number(np.float32(0.25)) == "0.25" and fmt_number(np.int64(3)) == "3"
    assert fmt_number(0.87412, 3) == "0.874" and fmt_number(4489.6, 3) == "4490" and fmt_number(99.96, 3) == "100"
    for x in (1e-5, 0.0, 1e-12, 123456.0, 9.99e5):
        assert "e+" not in fmt_number(x) and "e-0" not in fmt_number(x)


# ---------------------------------------------------------------- tables


HEAD = ["attack", "AUC [CI]", "empirical ε (kind)"]
ROWS = [["threshold-loss", "0.512 [0.50, 0.53]", "≈ 1.05 [0.88, 1.56] (estimate)"], ["lira", 0.6, None]]


@pytest.mark.parametrize("width", [None, 120, 60, 44, 36, 30, 12])
def test_tables_never_cut_a_word_at_any_width(width):
    text = table_text(HEAD, ROWS, title="t", right=[1], width=width)
    assert "…" not in text
    want = tokens(" ".join(HEAD + [str(c) for r in ROWS for c in r if isinstance(c, str)])) | {"0.6", "–"}
    assert want <= tokens(text)  # every word whole, none broken across lines
    if width is not None and width >= 36:
        assert max(len(line) for line in text.splitlines()) <= width  # a table, at the width
        assert any(set(line) == {"─"} for line in text.splitlines())  # the header rule of a table
    if width is not None and width < 36:  # narrower than the longest words: one block per row
        assert "attack: threshold-loss" in text and "  AUC [CI]: 0.512 [0.50, 0.53]" in text


def test_a_pipe_gets_one_line_per_row():
    text = table_text(HEAD, ROWS)
    assert any(re.search(r"threshold-loss +0.512 \[0.50, 0.53\] +≈ 1.05 \[0.88, 1.56\] \(estimate\)$", line)
               for line in text.splitlines())
    assert all(line == line.rstrip() for line in text.splitlines())  # no padding spaces at line ends


def test_tables_fit_100_columns_when_piped(capsys, monkeypatch):
    # issue 36: the facts table was about 250 characters wide when piped; a pipe now gets 100 columns
    monkeypatch.delenv("COLUMNS", raising=False)
    wide = [["lower_bound_construction", "target +1, others -1, neighbour 0 (Chua et al. 2024), remove direction " * 3]]
    text = table_text(["fact", "value"], wide, width=table_width(make_console()))
    assert max(len(line) for line in text.splitlines()) <= 100 and "direction" in text
    code, out, _ = run(["account", "--mechanism", "dpsgd", "--dataset-size", "1000", "--batch-size", "100",
                        "--noise-multiplier", "1.3", "--epochs", "2", "--delta", "1e-5", "--sampling", "shuffle"], capsys)
    assert code == 0
    tables = out.split("\nassumptions\n")[0].splitlines()      # every table comes before the numbered assumptions
    assert "facts" in tables and max(len(line) for line in tables) <= 100
    assert "lower_bound_construction" in out and "Chua et al. 2024" in out


# ---------------------------------------------------------------- commands


@pytest.mark.parametrize("columns", [None, "60", "20"])
def test_account_table_is_whole_at_any_width(columns, capsys, monkeypatch):
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    code, out, err = run(LDP, capsys)
    assert code == 0 and "…" not in out
    d = json.loads(run(LDP + ["--json"], capsys)[1])
    for st in d["statements"]:  # every figure, method and number of the JSON is in the table, whole
        eps = float(st["epsilon"]) if isinstance(st["epsilon"], str) else st["epsilon"]
        assert tokens(st["method"]) <= tokens(out) and fmt_number(eps) in tokens(out), st
    assert "1e-5" in tokens(out) and "e-05" not in out and "e+0" not in out
    # warnings are not results: stderr only
    assert "warning" not in out and "dpaudit: warning: " in err and "does not hold" in err


def test_account_json_is_pure_json_even_with_warnings(capsys):
    code, out, err = run(LDP + ["--json"], capsys)
    assert code == 0 and json.loads(out)["warnings"] and err == ""


@pytest.mark.parametrize("columns", [None, "60", "20"])
def test_check_table_is_whole_at_any_width(columns, capsys, monkeypatch):
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    code, out, _ = run(["check", ROOT / "examples" / "claims" / "fails.toml"], capsys)
    assert code == 1 and "…" not in out
    for word in ("privatekt-whole-run", "dpsgd-digits-100-epochs", "laplace-count", "UNPROVEN", "REFUTED", "HOLDS",
                 "795", "12.82", "1e-5"):
        assert word in tokens(out), word
    if columns is None:  # a pipe: each claim on one line
        assert any("privatekt-whole-run" in line and "REFUTED" in line for line in out.splitlines())
    if columns == "20":
        assert "claim: privatekt-whole-run" in out


def test_audit_console_tables_are_whole_at_60_columns(capsys, monkeypatch, tmp_path):
    """`dpaudit audit` prints the committed default report's tables (run_audit replaced by reading it)."""
    import dpaudit.auditing.runner as runner
    from dpaudit.report.schema import AuditReport

    report = from_dict(AuditReport, json.loads((ROOT / "reports" / "default" / "report.json").read_text()))
    monkeypatch.setattr(runner, "run_audit", lambda *a, **k: report)
    monkeypatch.setenv("COLUMNS", "60")
    code, out, _ = run(["audit", "--out", tmp_path, "--quiet"], capsys)
    assert code == 0 and "…" not in out
    for m in report.models:
        assert m.name in tokens(out) and m.method in tokens(out), m.name
    tables = out.split("Theoretical ε is what")[0]  # (the verdict and flag texts below are stored in the report)
    assert "δ = 1e-5" in tables and "1e-05" not in tables and "e+0" not in tables and "1347" in tables
    assert out.splitlines()[-1].endswith("figures)")  # a sentence is never folded by the console (soft wrap)

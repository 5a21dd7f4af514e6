"""Issue 38, item 1: a bundle's strings are escaped for where they are written, by the one helper per output kind
of :mod:`dpaudit._escape` (console, Markdown, HTML, CSV, XML). The Markdown is checked by rendering it with a
CommonMark parser (markdown-it-py, which rich already needs): a hostile string must come out as text, never as a
tag, a link, an image, emphasis, a heading, a list or a table cell of its own."""

from __future__ import annotations

import csv
import html
import io
import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpaudit._escape import (Md, console_text, csv_cell, csv_row, html_text, md, md_bullet, md_code, md_document,
                             md_table, md_text, xml_text)

markdown_it = pytest.importorskip("markdown_it")
MD = markdown_it.MarkdownIt("commonmark").enable("table").enable("strikethrough")

#: Every trick at once: HTML, emphasis, a link, an image, code, a table cell, a heading and a list on their own
#: lines, terminal sequences that erase the line above and return to its start, a bidi override, an entity.
HOSTILE = ("<script>alert(1)</script> **bold** _em_ [link](javascript:alert(1)) ![img](http://evil/x.png) `code` "
           "| cell\n# heading\n- item\n1. first\x1b[2K\x1b[1A\r\u202e &amp; <img src=x onerror=alert(1)> ~~s~~")

_FOLD = re.compile("[\r\n\t\v\f\x1c-\x1e\x85\u2028\u2029]+")

PIECES = st.sampled_from(list("<>&*_`[]()!#|~\\-+=.1 \n\r\t\x1b\u202e\x00\ud800abc:/\"'") +
                         ["javascript:", "http://x", "&amp;", "<script>", "1. ", "- ", "# ", "    ", "```", "---"])
TEXTS = st.one_of(st.lists(PIECES, max_size=24).map("".join), st.text(max_size=40))


def _rendered_bullet(s) -> str:
    out = MD.render(md_bullet(s))
    assert out.startswith("<ul>\n<li>") and out.endswith("</li>\n</ul>\n"), (s, out)
    return out[len("<ul>\n<li>"):-len("</li>\n</ul>\n")]


@settings(max_examples=400, deadline=None, database=None)
@given(TEXTS)
def test_md_text_renders_as_exactly_the_text_and_nothing_else(s):
    inner = _rendered_bullet(s)
    assert "<" not in inner, (s, inner)             # no tag of any kind: no HTML, link, image, emphasis, code
    want = console_text(_FOLD.sub(" ", s)).strip(" ")
    assert html.unescape(inner).strip(" ") == want, (s, md_bullet(s), inner)


@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(TEXTS, min_size=2, max_size=4))
def test_a_line_of_pieces_renders_as_the_pieces_joined_with_their_spaces(pieces):
    """``md(a, ": ", b)`` is one line whose text is the pieces side by side: spaces between pieces stay (the bold
    name and its verdict were run together before), spaces at the ends of the line go."""
    inner = _rendered_bullet(md(*pieces))
    assert "<" not in inner, (pieces, inner)
    want = console_text("".join(_FOLD.sub(" ", p) for p in pieces)).strip(" ")   # each piece's breaks folded
    assert html.unescape(inner).strip(" ") == want, (pieces, md(*pieces), inner)


def test_report_verdict_lines_keep_the_space_after_the_name():
    from dpaudit._escape import md_bold

    line = md_bullet(md_bold("fredy-gamma2"), ": ", "no leakage demonstrated (AUC 0.516)")
    assert MD.render(line) == "<ul>\n<li><strong>fredy-gamma2</strong>: no leakage demonstrated (AUC 0.516)</li>\n</ul>\n"


@settings(max_examples=200, deadline=None, database=None)
@given(TEXTS, TEXTS)
def test_md_table_cells_stay_in_their_cell(a, b):
    out = MD.render(md_table(["h1", "h2"], [[a, b]]))
    cells = re.findall(r"<td>(.*?)</td>", out, re.S)
    assert len(cells) == 2 and all("<" not in c for c in cells), (a, b, out)


@settings(max_examples=200, deadline=None, database=None)
@given(TEXTS)
def test_md_code_is_a_code_span_or_plain_text(s):
    inner = _rendered_bullet(md(md_code(s)))
    if inner.startswith("<code>"):
        assert inner.endswith("</code>") and "<" not in inner[6:-7]
    else:
        assert "<" not in inner


def test_md_document_escapes_what_a_writer_forgot_to_build_with_md():
    doc = md_document([Md("# title"), "# not a heading <b>", md_bullet("ok")])
    assert doc.splitlines() == ["# title", "\\# not a heading &lt;b&gt;", "- ok"]
    assert "<h1>not" not in MD.render(doc)


def test_console_text_shows_every_control_and_reordering_character():
    s = console_text("a\x1b[2K\x1b[1A\rb\x08\x07\x9b\u202e\u2066\u061c\ud800\ufffe\tc\nd")
    assert s == "a\\x1b[2K\\x1b[1A\\x0db\\x08\\x07\\x9b\\u202e\\u2066\\u061c\\ud800\\ufffe\tc\nd"
    from dpaudit._format import printable

    assert printable is console_text           # one console escaping, under its old name too


def test_html_csv_and_xml_helpers():
    assert html_text('<a href="x">\'&\x1b') == "&lt;a href=&quot;x&quot;&gt;&#x27;&amp;\\x1b"
    for bad in ("=1+1", "+1", "-1", "@SUM(A1)", "\tx", "\rx", "=HYPERLINK(\"http://evil\")"):
        assert csv_cell(bad).startswith("'"), bad
    assert csv_cell("lira") == "lira" and csv_row([-1, 0.5, "-x", True]) == ["-1", "0.5", "'-x", "True"]
    buf = io.StringIO()
    csv.writer(buf).writerow(csv_row(["=cmd|' /C calc'!A0", "a\nb"]))
    assert next(csv.reader(io.StringIO(buf.getvalue())))[0] == "'=cmd|' /C calc'!A0"
    root = ET.Element("x", {"v": xml_text("a\x1b\x00\ud800")})
    root.text = xml_text("<b>\x1b[2K")
    ET.fromstring(ET.tostring(root, encoding="unicode"))        # well-formed XML 1.0


# --------------------------------------------------------------------------------------------------
# the writers


def _hostile_report():
    from dpaudit.report.schema import AuditReport, Flag, ModelAudit

    m = ModelAudit(name="m", method=HOSTILE, release=HOSTILE, utility={"test_accuracy": 0.5}, theoretical=None,
                   attacks=(), assumptions=(HOSTILE,))
    return AuditReport(title=HOSTILE, seed=0, dataset={"name": HOSTILE}, models=(m,),
                       flags=(Flag("warning", "teachers_not_independent", "m", HOSTILE),))


def _assert_markdown_inert(doc: str) -> None:
    assert "\x1b" not in doc and "\r" not in doc and "\u202e" not in doc
    rendered = MD.render(doc)
    for tag in ("<script", "<a ", "src=\"http://evil", "<img src=\"x", "<strong>bold", "<em>em", "<code>code", "<h1>heading", "<li>item",
                "<ol", "<del>"):
        assert tag not in rendered, tag
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in rendered     # shown as text
    assert "\\x1b[2K\\x1b[1A" in rendered                # CR folded into a space, ESC shown


def test_report_md_and_html_escape_a_bundles_method_assumptions_and_flag_text():
    from dpaudit.report.render import to_html, to_markdown

    rep = _hostile_report()
    _assert_markdown_inert(to_markdown(rep))
    page = to_html(rep)
    assert "<script" not in page and "onerror=alert" not in page.replace("onerror=alert(1)&gt;", "")
    assert "\x1b" not in page and "<img src=x" not in page


@pytest.mark.parametrize("schema", [2, 1])
def test_report_md_of_an_audited_hostile_bundle_directly_and_as_schema_1(forest_release, tmp_path, cli, schema):
    """Before: report.md copied a bundle's method, assumptions and flag text raw (report.html escaped them)."""
    b = tmp_path / "b"
    shutil.copytree(forest_release(members=100, trees=3), b)
    meta = json.loads((b / "release.json").read_text())
    meta.update(schema=schema, method=HOSTILE, assumptions=[HOSTILE],
                flags=[{"code": "teachers_not_independent", "message": HOSTILE}])
    (b / "release.json").write_text(json.dumps(meta))
    cfg = tmp_path / "a.toml"
    cfg.write_text(f'title = "t"\ndataset = "digits"\n[[models]]\nname = "r"\nrelease = "{b}"\n'
                   '[[attacks]]\nkind = "threshold"\n')
    code, out, err = cli(["audit", cfg, "--out", tmp_path / "run", "--quiet"])
    assert code in (0, 1, 3), err
    assert "\x1b" not in out + err and "\r" not in out + err and "\u202e" not in out + err
    doc = (tmp_path / "run" / "report.md").read_text()
    _assert_markdown_inert(doc)
    assert "&lt;script&gt;" in (tmp_path / "run" / "report.html").read_text()
    assert "<script" not in (tmp_path / "run" / "report.html").read_text()


def test_per_record_and_comparison_markdown_and_csv_escape_names():
    import numpy as np

    from dpaudit.attacks.per_record import RecordScores, summarise_records
    from dpaudit.report.attack_outputs import _csv_text, per_record_markdown

    rng = np.random.default_rng(0)
    name = "=HYPERLINK(\"http://evil\")<b>x</b>\x1b[2K"
    rs = RecordScores(record=np.arange(20), label=rng.integers(0, 3, 20), member=np.arange(20) < 10,
                      scores={name: rng.random(20)}, primary=name)
    doc = per_record_markdown(summarise_records(rs, top=5))
    assert "<b>" not in MD.render(doc) and "\x1b" not in doc
    header = next(csv.reader(io.StringIO(_csv_text(rs))))
    assert all(not c.startswith(("=", "+", "-", "@")) and "\x1b" not in c for c in header), header


# --------------------------------------------------------------------------------------------------
# the console: the --trust-bundle-code notice, check, JUnit


def test_trust_bundle_code_notice_shows_a_hostile_factory_file_name(tmp_path, capsys):
    """Before: a file name holding ESC[2K ESC[1A CR erased the very line that says which code is about to run."""
    import hashlib

    from dpaudit.training import usercode
    from dpaudit.training.usercode import BundleCode

    evil = "net\x1b[2K\x1b[1A\r\u202e.py"
    (tmp_path / evil).write_text("def build():\n    return 41 + 1\n")
    sha = hashlib.sha256((tmp_path / evil).read_bytes()).hexdigest()
    usercode._ANNOUNCED.clear()
    fn, _ = BundleCode(trust_bundle=True).callable_for("factory", f"{evil}:build", sha, bundle=tmp_path, kwargs={})
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\r" not in err and "\u202e" not in err
    assert "net\\x1b[2K\\x1b[1A\\x0d\\u202e.py" in err and err.count("\n") == 1 and err.endswith("\n")
    assert fn() == 42


def test_check_console_and_junit_escape_a_claims_files_strings(tmp_path):
    import dpaudit

    claims = tmp_path / "c.toml"
    claims.write_text('[[claim]]\nname = "c\\u001b[2K\\u001b[1A\\r<b>x</b>"\nepsilon = 2.0\ndelta = 0.0\n'
                      'granularity = "example"\nmechanism = "laplace"\nparams = {scale = 1.0}\n')
    report = dpaudit.check(claims)
    text = report.table()
    assert "\x1b" not in text and "\r" not in text and "c\\x1b[2K" in text
    xml = report.junit_xml()
    root = ET.fromstring(xml.split("\n", 1)[1])                 # well-formed XML 1.0
    assert "\x1b" not in xml and root.find(".//testcase").get("name") == "c\\x1b[2K\\x1b[1A\\x0d<b>x</b>"


def test_the_escaping_lives_in_one_module():
    """An extra to the structure (the Markdown writers can only join Md fragments): no other module of dpaudit
    escapes HTML or XML itself or defines its own Markdown table, and every Markdown writer returns md_document."""
    import dpaudit

    root = Path(dpaudit.__file__).parent
    for path in root.rglob("*.py"):
        if path.name == "_escape.py":
            continue
        text = path.read_text(encoding="utf-8")
        assert "html.escape(" not in text and "def _md_table" not in text and "saxutils" not in text, path
    for mod in ("report/render.py", "report/attack_outputs.py"):
        text = (root / mod).read_text(encoding="utf-8")
        for fn in re.findall(r"\ndef (\w*markdown\w*)\(", text):
            body = text.split(f"\ndef {fn}(", 1)[1].split("\ndef ", 1)[0]
            assert "return md_document(" in body, (mod, fn)

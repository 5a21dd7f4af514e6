"""Escaping at the writer: one function per kind of output, used by every writer of that kind.

A release bundle may come from the party being audited, so every string it carries (a method name, assumptions,
flag messages, file names), and every string of a config or claims file, is hostile where dpaudit writes it. Each
kind of output has one escaping function here, and no other:

=========== ============================ =================================================================================
output      function                     what it guarantees
=========== ============================ =================================================================================
console     :func:`console_text`         control characters (ESC, CR, backspace, bell, C1), bidirectional overrides and
                                         lone surrogates shown as visible ``\\x1b`` / ``\\u202e`` escapes: nothing
                                         moves the cursor, erases a line, sets the title or reorders the text
Markdown    :class:`Md` and ``md_*``     a string is literal text (HTML-escaped, Markdown punctuation backslashed, one
                                         line) or a code span; a Markdown document is assembled only from :class:`Md`
                                         fragments, and :func:`md_document` escapes any plain ``str`` it is given
HTML        :func:`html_text`            ``& < > " '`` as entities (text and attribute values), control characters as
                                         in :func:`console_text`
CSV         :func:`csv_cell`             no formula: a cell starting with ``= + - @``, tab or CR gets a leading ``'``
                                         (numbers are written as numbers), control characters as in the console
XML (JUnit) :func:`xml_text`             only characters XML 1.0 allows (ElementTree escapes the markup itself)
JSON        (by construction)            :func:`dpaudit._io.dumps_json` writes strings as JSON strings
=========== ============================ =================================================================================

Layer-free (like :mod:`dpaudit._format`): the report, the attack outputs, the claims' JUnit and the CLI import it.
"""

from __future__ import annotations

import html as _html
import re
import urllib.parse
from typing import Any, Iterable, Sequence

__all__ = ["console_text", "Md", "md_text", "md_code", "md", "md_bold", "md_italic", "md_heading", "md_bullet",
           "md_table", "md_image", "md_document", "html_text", "csv_cell", "csv_row", "xml_text"]

# --------------------------------------------------------------------------------------------------
# console
# --------------------------------------------------------------------------------------------------

# Characters that are not text for a terminal: C0 controls but tab and newline (ESC starts the sequences that move
# the cursor, erase lines and set the window title), DEL, C1 controls, the Unicode marks that reorder what follows
# them on screen (bidirectional marks, embeddings, overrides and isolates), lone surrogates (no encoding can write
# them) and the two non-characters U+FFFE / U+FFFF (not XML).
_NOT_TEXT = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
                       "\ud800-\udfff\ufffe\uffff]")


def _visible(m: re.Match) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def console_text(text: Any) -> str:
    """``text`` as a terminal shows it literally: every control character (ESC, carriage return, backspace, bell,
    C1), every bidirectional override and every lone surrogate shown as a visible ``\\xNN`` / ``\\uNNNN`` escape
    (tab and newline stay). Every string a release bundle, a config or an input file carries is printed through
    this, so a hostile one cannot move the cursor, erase or overwrite a line already printed, or set the title."""
    return _NOT_TEXT.sub(_visible, str(text))


# --------------------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------------------


class Md(str):
    """A fragment of Markdown that is safe to write: made only by the ``md_*`` functions of this module, which
    escape every plain string they are given. A writer assembles a document from these alone
    (:func:`md_document`), so a string that skipped escaping is escaped there, never written raw."""

    __slots__ = ()


# backslash first (so the escapes added below stay escapes); then the punctuation that starts code, emphasis,
# links / images, tables and strikethrough
_MD_PUNCT = re.compile(r"([\\`*\[|~])")
# "_" opens emphasis only at a word boundary (CommonMark: intraword underscores are literal)
_MD_UNDERSCORE = re.compile(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")
# what makes a block when a line starts with it: heading, list item, setext underline, ordered list, indented code
_MD_LEADING = re.compile(r"^(\s*)([#+=-]|\d{1,9}[.)])(?=[#+=-]*(?:\s|$))")


def _escape_leading(m: re.Match) -> str:
    mark = m.group(2)
    return m.group(1) + (mark[:-1] + "\\" + mark[-1] if mark[0].isdigit() else "\\" + mark)


_LINE_BREAKS = re.compile("[\r\n\t\v\f\x1c-\x1e\x85\u2028\u2029]+")


def md_text(value: Any) -> Md:
    """``value`` as literal Markdown text on one line: HTML-escaped (``& < >``: no raw HTML, autolink or block
    quote), Markdown punctuation backslashed (no code, emphasis, link, image, table cell or strikethrough), a
    leading ``#``, ``-``, ``+``, ``=`` or ``1.`` escaped (no heading or list), line breaks folded into spaces (and
    spaces at either end dropped: no indented code, no hard break), and
    control characters shown as in :func:`console_text`. Renders as the original text."""
    if isinstance(value, Md):
        return value
    return Md(_md_piece(value).strip(" "))      # leading spaces would make code, trailing ones a line break


def _md_piece(value: Any) -> Md:
    """One piece of a line as literal Markdown, its spaces kept (:func:`md` and :func:`md_text` drop them at the
    ends of the line)."""
    if isinstance(value, Md):
        return value
    s = _LINE_BREAKS.sub(" ", str(value))
    s = _MD_PUNCT.sub(r"\\\1", s)
    s = _MD_UNDERSCORE.sub(r"\\_", s)
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = _MD_LEADING.sub(_escape_leading, s)
    return Md(console_text(s))


_CODE_SAFE = re.compile(r"[^`|\s\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]+"
                        r"(?: [^`|\s\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]+)*")


def md_code(value: Any) -> Md:
    """``value`` as a code span (literal: no Markdown or HTML inside one) when it has no backtick, no ``|``, no
    line break and no control character; otherwise as :func:`md_text` (literal too, just not monospaced)."""
    s = str(value)
    if _CODE_SAFE.fullmatch(s):
        return Md(f"`{s}`")
    return md_text(s)


def md(*pieces: Any) -> Md:
    """The pieces side by side: :class:`Md` pieces as they are, anything else through :func:`md_text` (spaces
    dropped at the ends of the whole, kept between pieces)."""
    # each piece escapes its own leading marks (so whatever piece ends up first cannot start a heading or list);
    # the spaces go at the ends of the joined line only (an empty first piece must not leave the next one's
    # spaces at the start, where they would make indented code)
    return Md("".join(_md_piece(p) for p in pieces).strip(" "))


def md_bold(*pieces: Any) -> Md:
    return Md(f"**{md(*pieces)}**")


def md_italic(*pieces: Any) -> Md:
    return Md(f"*{md(*pieces)}*")


def md_heading(level: int, *pieces: Any) -> Md:
    return Md("#" * max(1, min(int(level), 6)) + " " + md(*pieces))


def md_bullet(*pieces: Any) -> Md:
    return Md("- " + md(*pieces))


def md_table(head: Sequence[Any], rows: Iterable[Sequence[Any]]) -> Md:
    """A GitHub-flavoured table; every cell through :func:`md` (so ``|`` never ends a cell early)."""
    lines = ["| " + " | ".join(md(c) for c in head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(md(c) for c in r) + " |" for r in rows]
    return Md("\n".join(lines))


def md_image(alt: Any, src: str) -> Md:
    """An image: ``alt`` as literal text, ``src`` percent-encoded (a relative file name, never a script URL)."""
    return Md(f"![{md(alt)}]({urllib.parse.quote(str(src), safe='/._-')})")


def md_document(lines: Iterable[Any]) -> str:
    """The document of ``lines`` (blocks or lines, joined by newlines, one trailing newline): :class:`Md` lines as
    they are, any other value escaped by :func:`md_text`, so a writer that forgot an ``md_*`` call shows the
    Markdown it meant as text instead of letting a bundle's string through raw."""
    return "\n".join(md_text(x) for x in lines).rstrip() + "\n"


# --------------------------------------------------------------------------------------------------
# HTML, CSV, XML
# --------------------------------------------------------------------------------------------------


def html_text(value: Any) -> str:
    """``value`` as HTML text or a quoted attribute value: ``& < > " '`` as entities, control characters as in
    :func:`console_text`."""
    return _html.escape(console_text(value), quote=True)


_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> str:
    """A string for a CSV cell that no spreadsheet runs as a formula: a leading ``= + - @``, tab or carriage return
    gets a ``'`` in front (OWASP's CSV-injection rule); control characters as in :func:`console_text`. Quoting is
    the csv module's."""
    s = str(value)
    if s.startswith(_FORMULA):
        s = "'" + s
    return console_text(s)


def csv_row(values: Iterable[Any]) -> list[str]:
    """One CSV row: floats as ``repr`` (exact), ints as digits, bools as ``True`` / ``False``, anything else through
    :func:`csv_cell`. (A negative number is a number; a string that looks like one still gets its ``'``.)"""
    out = []
    for v in values:
        if isinstance(v, bool):
            out.append(str(v))
        elif isinstance(v, int):
            out.append(str(v))
        elif isinstance(v, float):
            out.append(repr(v))
        else:
            out.append(csv_cell(v))
    return out


def xml_text(value: Any) -> str:
    """``value`` with every character XML 1.0 forbids (C0 controls but tab, newline and CR; lone surrogates;
    U+FFFE/U+FFFF) and every other control or bidirectional character shown as in :func:`console_text`. For text
    and attribute values handed to :mod:`xml.etree.ElementTree`, which escapes ``& < > "`` itself."""
    return console_text(value)

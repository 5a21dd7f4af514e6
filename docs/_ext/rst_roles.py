"""A griffe extension for the API pages: dpaudit's docstrings cite other objects with Sphinx roles
(``:func:`~dpaudit.x.f```, ``:class:`Name```); mkdocstrings renders docstrings as Markdown, where a role would show
as raw text. This rewrites each role to inline code of the name it cites (the last component when the target starts
with ``~``, as Sphinx shows it), and ``Name::`` (a reST literal-block marker) to ``Name:``."""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:func|meth|class|mod|data|attr|obj|exc|const):`(~?)([^`]+)`")
_LITERAL = re.compile(r"(\S)::[ \t]*$", re.M)


def rewrite(text: str) -> str:
    """``:func:`~a.b.c``` -> ```c```, ``:class:`a.B``` -> ```a.B```, ``Example::`` -> ``Example:``."""
    text = _ROLE.sub(lambda m: "`" + (m.group(2).rsplit(".", 1)[-1] if m.group(1) else m.group(2)) + "`", text)
    return _LITERAL.sub(r"\1:", text)


class RstRoles(griffe.Extension):
    def on_instance(self, *, node: Any, obj: griffe.Object, agent: Any, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = rewrite(obj.docstring.value)

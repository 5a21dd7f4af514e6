"""Release bundles from Python: ``dpaudit.release.make(out, ...)`` is ``dpaudit release make`` (a bundle from a
model trained elsewhere, or only its scores), ``dpaudit.release.load(path)`` (= ``dpaudit.Release.load(path)``)
reads one, checking every file and never unpickling anything.

>>> import dpaudit
>>> dpaudit.release.make                                   # doctest: +ELLIPSIS
<function make_release at ...>
"""

from __future__ import annotations

from typing import Any

from dpaudit.api import load_release as load, make_release as make

__all__ = ["make", "load", "Release"]


def __getattr__(name: str) -> Any:
    if name == "Release":   # the training layer (torch) only when asked for
        from dpaudit.training.release import Release

        return Release
    raise AttributeError(f"module 'dpaudit.release' has no attribute {name!r}")

"""Third-party warnings and log lines off the user's terminal (the CLI's ``--verbose`` shows them).

Flower, Ray, Opacus, transformers and torch print deprecation notices, secure-RNG notices and INFO logs that say
nothing about the user's privacy question and bury dpaudit's own warnings. Without ``--verbose``:

* a Python warning reaches the terminal only when the code that issued it (the frame that called
  ``warnings.warn``) is dpaudit's own, or its category is one of dpaudit's (``EdgeOrderWarning``, ...); warnings that
  dpaudit records itself (``warnings.catch_warnings(record=True)``, then printed as ``dpaudit: warning: ...``) are
  not affected;
* the loggers of those libraries print errors only (a filter on each logger, so that a library that sets its own
  logger's level when it is imported later, as Flower does, stays quiet too).
"""

from __future__ import annotations

import logging
import sys
import warnings
from typing import Any

__all__ = ["THIRD_PARTY_LOGGERS", "quiet_third_party"]

#: Loggers set to ERROR without --verbose.
THIRD_PARTY_LOGGERS = ("flwr", "ray", "opacus", "transformers", "datasets", "torch", "urllib3", "filelock",
                       "huggingface_hub", "catboost")

_installed: Any = None


def _errors_only(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.ERROR


def _issued_by_dpaudit(category: type) -> bool:
    if getattr(category, "__module__", "").split(".")[0] == "dpaudit":
        return True
    frame = sys._getframe(2)          # above showwarning and our wrapper: warnings' own frames, then the caller
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] == "warnings":
        frame = frame.f_back
    return frame is not None and frame.f_globals.get("__name__", "").split(".")[0] == "dpaudit"


def quiet_third_party(verbose: bool) -> None:
    """Install (or, with ``verbose``, remove) the filter described in the module docstring; idempotent."""
    global _installed
    if verbose:
        if _installed is not None and warnings.showwarning is _installed[1]:
            warnings.showwarning = _installed[0]
        _installed = None
        for name in THIRD_PARTY_LOGGERS:
            logging.getLogger(name).removeFilter(_errors_only)
        return
    if _installed is not None and warnings.showwarning is _installed[1]:
        return
    original = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if _issued_by_dpaudit(category):
            original(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    _installed = (original, show)
    for name in THIRD_PARTY_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level < logging.ERROR:
            logger.setLevel(logging.ERROR)
        if _errors_only not in logger.filters:
            logger.addFilter(_errors_only)

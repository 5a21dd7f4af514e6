"""dpaudit: what privacy does a released model really have?

Two answers side by side: the *theoretical* epsilon from the accountants (:mod:`dpaudit.accountants`)
and an *empirical* lower bound from attacks (:mod:`dpaudit.attacks`).
"""

from dpaudit.errors import DPAuditError, ParameterError

__version__ = "0.1.0"

__all__ = ["DPAuditError", "ParameterError", "__version__"]

"""Accounting: the theoretical epsilon of DP events.

Pure math on :mod:`~dpaudit.accountants.events`; imports numpy, scipy and dp_accounting only
(never torch or scikit-learn, never another dpaudit layer).
"""

from dpaudit.accountants.events import *  # noqa: F401,F403
from dpaudit.accountants.statement import AccountingResult, PrivacyStatement  # noqa: F401
from dpaudit.accountants.base import Accountant, register_rdp  # noqa: F401
from dpaudit.accountants.rdp import *  # noqa: F401,F403
from dpaudit.accountants.pld import *  # noqa: F401,F403
from dpaudit.accountants.ldp import *  # noqa: F401,F403
from dpaudit.accountants.dpsgd import *  # noqa: F401,F403
from dpaudit.accountants.pate import *  # noqa: F401,F403
from dpaudit.accountants.gnmax import *  # noqa: F401,F403
from dpaudit.accountants.ledger import *  # noqa: F401,F403

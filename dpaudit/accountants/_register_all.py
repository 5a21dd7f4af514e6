"""Import every module that registers an RDP function (see :func:`dpaudit.accountants.base.register_rdp`)."""

from dpaudit.accountants import ldp, dpsgd, pate, gnmax, pure  # noqa: F401
